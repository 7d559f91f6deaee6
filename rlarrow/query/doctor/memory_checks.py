"""The data doctor's checks of what imports leave: replay memories, their exports, sources.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

``memory`` (snapshot rows that disagree with their buffer state), ``export_cuts`` and
``reset_rows`` (episodes unrolled from memory exports cut at an export's edge or starting
with an autoreset row), ``time_limit`` (episodes joined across the env's time limit),
``empty_imports`` (sources that gave no rows) and ``interleaved`` (a one-env memory whose
rows are several envs). :data:`MEMORY_CHECKS` declares them (:mod:`rlarrow.query.doctor`
tells what each finds).

Example:
    >>> [c.name for c in MEMORY_CHECKS][-1]
    'interleaved'
"""

from __future__ import annotations

import numpy as np

from rlarrow.query.doctor.context import Check, Context

__all__: list[str] = []

def _memory(ctx: Context) -> None:
    # filled as the pointers say: every row once full, else the rows before the write pointer,
    # and at the pointer the envs below env_pointer (written by a partial add_samples)
    expected = """case when is_full then true when memory_index < write_pointer then true
                       when memory_index > write_pointer then false
                       else env_index < coalesce(env_pointer, 0) end"""
    ctx.emit_sql(f"""
        with m as (
            select run_id, snapshot_id, count(*) as n_rows,
                   min(memory_size) as size_lo, max(memory_size) as size_hi,
                   min(num_envs) as envs_lo, max(num_envs) as envs_hi,
                   count(distinct struct_pack(f := is_full, w := write_pointer, e := env_pointer)) as states,
                   any_value(is_full) as is_full, any_value(write_pointer) as wp,
                   any_value(env_pointer) as ep,
                   count_if(memory_index < 0 or memory_index >= memory_size) as bad_index,
                   min(memory_index) filter (where memory_index < 0 or memory_index >= memory_size)
                       as bad_index_at,
                   count_if(env_index < 0 or env_index >= num_envs) as bad_env,
                   min(env_index) filter (where env_index < 0 or env_index >= num_envs) as bad_env_at,
                   count_if(filled is not null and is_full is not null and write_pointer is not null
                            and filled <> ({expected})) as bad_fill,
                   min(struct_pack(m := memory_index, e := env_index, f := filled)) filter (
                       where filled is not null and is_full is not null and write_pointer is not null
                       and filled <> ({expected})) as bad_fill_at
            from memory group by run_id, snapshot_id)
        select 'error' as severity, 'memory' as tbl, run_id, null::bigint as episode_id, null::bigint as step,
               'snapshot ' || snapshot_id || ': ' || message as message
        from (
            select run_id, snapshot_id,
                   'memory_size differs between its rows (' || size_lo || ' to ' || size_hi || ')' as message
            from m where size_lo <> size_hi
            union all
            select run_id, snapshot_id,
                   'num_envs differs between its rows (' || envs_lo || ' to ' || envs_hi || ')'
            from m where envs_lo <> envs_hi
            union all
            select run_id, snapshot_id, 'is_full, write_pointer or env_pointer differs between its rows ('
                   || states || ' states)' from m where states > 1
            union all
            select run_id, snapshot_id,
                   bad_index || ' row(s) have a memory_index outside 0..memory_size - 1 = ' || (size_hi - 1)
                    || ' (first: ' || bad_index_at || ')' from m where bad_index > 0
            union all
            select run_id, snapshot_id, bad_env || ' row(s) have an env_index outside 0..num_envs - 1 = '
                   || (envs_hi - 1) || ' (first: ' || bad_env_at || ')' from m where bad_env > 0
            union all
            select run_id, snapshot_id, 'write_pointer ' || wp || ' is outside the buffer (memory_size '
                   || size_hi || ')' from m where states = 1 and (wp < 0 or wp >= size_hi)
            union all
            select run_id, snapshot_id,
                   'env_pointer ' || ep || ' is outside the buffer (num_envs ' || envs_hi || ')'
            from m where states = 1 and (ep < 0 or ep >= envs_hi)
            union all
            select run_id, snapshot_id, 'is_full is ' || is_full || ' and write_pointer is ' || wp
                   || ', but filled is ' || bad_fill_at.f || ' at memory_index ' || bad_fill_at.m
                   || ', env_index ' || bad_fill_at.e || ' (' || bad_fill
                   || ' row(s) whose filled flag the pointers contradict)'
            from m where states = 1 and bad_fill > 0 and wp >= 0 and wp < size_hi)""")


_SKRL_MEMORY_ID = r"'^\d{2}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}-\d{6}_memory_(0x[0-9a-fA-F]+)$'"


def _export_cuts(ctx: Context) -> None:
    if not ctx.rows("memory"):
        return
    ctx.emit_sql(f"""
        with snaps as (
            select distinct run_id, snapshot_name as name,
                   regexp_extract(snapshot_name, {_SKRL_MEMORY_ID}, 1) as memory
            from memory where regexp_matches(snapshot_name, {_SKRL_MEMORY_ID})),
        e as (
            select run_id, episode_id, partial_start, partial_end,
                   metadata->>'$.snapshot' as first_name,
                   coalesce(metadata->>'$.snapshot_last', metadata->>'$.snapshot') as last_name,
                   metadata->>'$.partial_start_at' as start_at, metadata->>'$.partial_end_at' as end_at
            from episodes
            where (partial_start or partial_end) and metadata->>'$.source' = 'memory'),
        cut as (
            select e.run_id, e.episode_id, e.end_at as cut_at, e.last_name as here,
                   (select min(s.name) from snaps s where s.run_id = e.run_id
                        and s.memory = regexp_extract(e.last_name, {_SKRL_MEMORY_ID}, 1)
                        and s.name > e.last_name) as other, 'end' as side
            from e where e.partial_end
            union all
            select e.run_id, e.episode_id, e.start_at, e.first_name,
                   (select max(s.name) from snaps s where s.run_id = e.run_id
                        and s.memory = regexp_extract(e.first_name, {_SKRL_MEMORY_ID}, 1)
                        and s.name < e.first_name), 'start'
            from e where e.partial_start)
        select 'warning' as severity, 'episodes' as tbl, run_id, episode_id, null::bigint as step,
               case when cut_at = 'gap'
                    then 'partial_' || side || ' at a gap: an export of this memory is missing between '
                         || (case when side = 'end' then here || ' and ' || other
                                  else other || ' and ' || here end)
                         || ' (the episode goes on in the lost rows); convert the missing export with the '
                         || 'others to join it'
                    else 'partial_' || side || ' at the ' || side || ' of export ' || here || ', but export '
                         || other || ' of the same memory '
                         || (case when side = 'end' then 'follows' else 'precedes' end)
                         || ': the episode goes on there, unrolled apart; delete the run''s episodes and '
                         || 'convert the exports together (rlarrow convert ... --episodes) to join them' end
                   as message
        from cut where other is not null""")


def _reset_rows(ctx: Context) -> None:
    # with next-step autoreset the step after an end returns the reset observation with reward 0;
    # kept as a step (an export unrolled alone), it starts the next episode at the final
    # observation of the one before, instead of at the reset observation
    ctx.emit_sql(" union all ".join(f"""(
        with e as (
            select run_id, episode_id, env_index, metadata->>'$.autoreset' as mode,
                   lag(episode_id) over w as prev_id, lag(partial_end) over w as prev_partial_end
            from episodes where metadata->>'$.source' = 'memory'
            window w as (partition by run_id, env_index order by episode_id))
        select 'warning' as severity, 'steps' as tbl, e.run_id, e.episode_id, 0 as step,
               'the first step is the autoreset row of episode ' || e.prev_id
               || ' (reward 0, its observation that episode''s final one): next-step autoreset rows are '
               || 'no step of any episode; delete the run''s episodes and convert its exports again '
               || '(rlarrow convert ... --episodes drops them)'
               as message
        from e join {view} f on f.run_id = e.run_id and f.episode_id = e.episode_id and f.step = 0
               join {view} l on l.run_id = e.run_id and l.episode_id = e.prev_id and l.is_last
        where e.mode = 'next-step' and not e.prev_partial_end and f.reward = 0
          and l.observation is not null and f.observation = l.observation)"""
                                    for view, _ in ctx.layouts("steps")))


def _time_limit(ctx: Context) -> None:
    given = "null" if ctx.max_episode_steps is None else str(int(ctx.max_episode_steps))
    ctx.emit_sql(f"""
        select 'warning' as severity, 'episodes' as tbl, run_id, episode_id, null::bigint as step,
               'the episode has ' || (num_steps - 1) || ' transitions, more than max_episode_steps=' || lim
               || ': episodes joined across the time limit (a memory without truncated, such as '
               || 'skrl''s DQN''s)'
               || (case when partial_start then '; it is the first, partial episode, whose start (and so its '
                        || 'time-limit cuts) the data does not show'
                        else '; convert the memory again with --max-episode-steps ' || lim
                             || ' to cut them' end)
               as message
        from (select *, coalesce({given}, try_cast(metadata->>'$.max_episode_steps' as bigint)) as lim
              from episodes)
        where lim is not null and num_steps - 1 > lim""")


def _empty_imports(ctx: Context) -> None:
    if not ctx.rows("sources"):
        return
    def none_in(table: str, extra: str = "") -> str:
        if not ctx.rows(table):
            return "true"
        return f"not exists (select 1 from {table} t where t.run_id = s.run_id{extra})"

    memory = none_in("memory", " and t.snapshot_id = s.snapshot_id")
    ctx.emit_sql(f"""
        select 'warning' as severity, 'sources' as tbl, run_id, null::bigint as episode_id,
               null::bigint as step, message
        from (select s.run_id, s.path,
                     case when s.format = 'tfevents' and {none_in("scalars")} then
                              'event file ' || s.path || ' was imported as 0 scalars: the run has none (an '
                              || 'event file of histograms, images or text only, or an empty log?); '
                              || 'check the file, and delete the run if it holds nothing'
                          when s.snapshot_id is not null and {memory} then
                              'memory export ' || s.path || ' was imported as 0 rows (snapshot '
                              || s.snapshot_id || ' has no rows in memory); check the file and convert '
                              || 'it again'
                          when s.format <> 'tfevents' and s.snapshot_id is null and {none_in("steps")}
                               and {none_in("scalars")} and {none_in("memory")} then
                              s.format || ' source ' || s.path || ' was imported as 0 rows: its run has no '
                              || 'steps, scalars or memory rows; check the source, and delete the run if it '
                              || 'holds nothing'
                     end as message
              from sources s)
        where message is not null""")


_INTERLEAVE_LAGS = 16


def _interleaved(ctx: Context) -> None:
    from rlarrow.io.memory.stored import snapshots

    one_env = ctx.con.sql("select run_id, snapshot_id from memory group by run_id, snapshot_id "
                          f"having max(num_envs) = 1 and count(*) >= {4 * _INTERLEAVE_LAGS}").fetchall()
    for run_id, snapshot_id in one_env:
        for snap in snapshots(ctx.st, run_id=run_id, snapshot_id=snapshot_id):
            found = _interleaving(snap.tensors)
            if found is not None:
                lag, why = found
                ctx.emit("error", "memory", run_id, None, None,
                         f"snapshot {snapshot_id} ({snap.name}): read as one env, its rows look like {lag} "
                         f"envs interleaved ({why}); a csv export converted without its num_envs? convert "
                         f"it again with --num-envs {lag}, its episodes are garbage")


def _interleaving(tensors: dict[str, np.ndarray]) -> tuple[int, str] | None:
    """The number of envs a one-env memory's rows interleave, and the evidence; None if they do not.

    With next states: row t's next state is row t + k's state for most rows at one lag k > 1 and
    for few at lag 1. Without: states k rows apart are far closer (median distance under a
    quarter) than neighbours, which envs whose state moves a little each step show and
    independent or unrelated rows never do.
    """
    name = next((n for n in ("observations", "states") if n in tensors), None)
    if name is None:
        return None
    states = tensors[name].reshape(len(tensors[name]), -1).astype(np.float64)
    keep = ~np.isnan(states).all(axis=1)
    states = states[: int(np.flatnonzero(keep)[-1]) + 1] if keep.any() else states[:0]
    n = len(states)
    if n < 4 * _INTERLEAVE_LAGS:
        return None
    nxt = tensors.get(f"next_{name}")
    lags = range(1, _INTERLEAVE_LAGS + 1)
    if nxt is not None:
        nxt = nxt.reshape(len(nxt), -1)[:n].astype(np.float64)
        share = [float(np.mean(np.all(nxt[:n - k] == states[k:], axis=1))) for k in lags]
        best = int(np.argmax(share[1:])) + 2
        if share[0] < 0.5 and share[best - 1] >= 0.9:
            return best, (f"the next state of a row is the state {best} rows on in {share[best - 1]:.0%} "
                          f"of rows, the state of the next row in {share[0]:.0%}")
        return None
    dist = [float(np.median(np.linalg.norm(states[k:] - states[:n - k], axis=1))) for k in lags]
    best = int(np.argmin(dist[1:])) + 2
    if dist[0] > 0 and dist[best - 1] < 0.25 * dist[0]:
        return best, (f"rows {best} apart differ by {dist[best - 1]:.3g} (median), neighbouring rows by "
                      f"{dist[0]:.3g}")
    return None


#: The checks of this module, in the order :data:`~rlarrow.query.doctor.CHECKS` lists them.
MEMORY_CHECKS: tuple[Check, ...] = (
    Check("memory", _memory, ("memory",),
          "replay-memory rows that disagree with their snapshot's buffer state"),
    Check("export_cuts", _export_cuts, ("episodes",),
          "episodes of a memory cut at an export's edge that the next export continues"),
    Check("reset_rows", _reset_rows, ("episodes", "steps"),
          "a vector env's autoreset row counted as an episode's first step"),
    Check("time_limit", _time_limit, ("episodes",),
          "episodes longer than the env's time limit: episodes joined across it"),
    Check("empty_imports", _empty_imports, ("runs", "sources"), "imported sources that gave no rows"),
    Check("interleaved", _interleaved, ("memory",),
          "one-env memory snapshots whose rows are several envs interleaved (num_envs not given)"),
)
