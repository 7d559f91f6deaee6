"""The data doctor's checks of the flat columns, in DuckDB SQL: flags, keys, references, lengths.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

``alignment`` (RLDS flags per episode), ``duplicates`` (a key twice), ``references`` (steps and
episodes rows that miss each other or disagree, run ids without a ``runs`` row), ``gaps``
(missing step numbers), ``monotonic`` (steps out of order, scalars whose time goes back),
``short_episodes`` and ``null_observations``. Each is a query whose rows are findings
(aggregates, joins and windows that stream and spill, never a Python loop over rows);
:data:`EPISODE_CHECKS` declares them (:mod:`rlarrow.query.doctor` tells what each finds).

Example:
    >>> [c.name for c in EPISODE_CHECKS][:3]
    ['alignment', 'duplicates', 'references']
"""

from __future__ import annotations

import os

from rlarrow.query.doctor.context import Check, Context, quote

__all__: list[str] = []

def _alignment(ctx: Context) -> None:
    stats, eps = ctx.episode_stats(), ctx.episode_rows()
    ctx.emit_sql(f"""
        select 'error' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.step,
               'is_first set after the first step (the episode starts at step ' || e.first_step || ')'
                   as message
        from steps s join {stats} e using (run_id, episode_id) where s.is_first and s.step > e.first_step
        union all
        select 'error', 'steps', run_id, episode_id, first_step, 'the first step lacks is_first'
        from {stats} where not first_flag
        union all
        select 'error', 'steps', s.run_id, s.episode_id, s.step,
               'is_last set before the last step (the episode goes on to step ' || e.last_step || ')'
        from steps s join {stats} e using (run_id, episode_id) where s.is_last and s.step < e.last_step
        union all
        select 'error', 'steps', e.run_id, e.episode_id, e.last_step,
               'the last step lacks is_last, but the episodes row says the episode ended '
               || '(partial_end is false)'
        from {stats} e join {eps} r using (run_id, episode_id) where not e.last_flag and not r.partial_end
        union all
        select 'error', 'steps', run_id, episode_id, step, 'is_terminal set on a step without is_last'
        from steps where is_terminal and not is_last
        union all
        select 'error', 'episodes', e.run_id, e.episode_id, e.last_step,
               case when r.terminated
                    then 'the episodes row says terminated, but the last step is not is_terminal'
                    else 'the last step is is_terminal, but the episodes row says not terminated' end
        from {stats} e join {eps} r using (run_id, episode_id)
        where e.last_flag and r.terminated <> e.last_terminal""")


def _duplicates(ctx: Context) -> None:
    parts = []
    if ctx.rows("steps"):
        stats = ctx.episode_stats()
        parts.append(f"""
            select 'error' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.step,
                   count(*) || ' rows for this (run_id, episode_id, step)' as message
            from steps s semi join (select run_id, episode_id from {stats} where n_rows > n_steps) d
                using (run_id, episode_id)
            group by s.run_id, s.episode_id, s.step having count(*) > 1""")
    if ctx.rows("episodes"):
        parts.append(f"""
            select 'error', 'episodes', run_id, episode_id, null,
                   copies || ' rows in episodes for this episode'
            from {ctx.episode_rows()} where copies > 1""")
    if ctx.rows("runs"):
        parts.append("""
            select 'error', 'runs', run_id, null, null, count(*) || ' rows in runs for this run_id'
            from runs group by run_id having count(*) > 1""")
    if ctx.rows("memory"):
        parts.append("""
            select 'error', 'memory', run_id, null, null,
                   'snapshot ' || snapshot_id || ': ' || count(*)
                   || ' (memory_index, env_index) pairs have more than one row (first: memory_index '
                   || min(k).m || ', env_index ' || min(k).e || ')'
            from (select run_id, snapshot_id, struct_pack(m := memory_index, e := env_index) as k
                  from memory group by run_id, snapshot_id, memory_index, env_index having count(*) > 1)
            group by run_id, snapshot_id""")
    if ctx.rows("scalars"):
        parts.append("""
            select 'warning', 'scalars', run_id, null, min(step),
                   'tag ''' || tag || ''': ' || count(*) || ' (step, wall_time) pairs logged more than once'
            from (select run_id, tag, step from scalars
                  group by run_id, tag, step, wall_time having count(*) > 1)
            group by run_id, tag""")
    ctx.emit_sql(" union all ".join(parts))


def _references(ctx: Context) -> None:
    stats, eps = ctx.episode_stats(), ctx.episode_rows()
    ctx.emit_sql(f"""
        select 'warning' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.first_step as step,
               'no row in episodes for this episode (' || s.n_rows || ' steps)' as message
        from {stats} s anti join {eps} r using (run_id, episode_id)
        union all
        select 'warning', 'episodes', r.run_id, r.episode_id, null,
               'no steps for this episode (its row says num_steps ' || r.num_hi || ')'
        from {eps} r anti join {stats} s using (run_id, episode_id)
        union all
        select 'error', 'episodes', r.run_id, r.episode_id, null,
               'num_steps is ' || r.num_lo || ' but steps has ' || s.n_rows || ' rows for this episode'
        from {eps} r join {stats} s using (run_id, episode_id)
        where r.num_lo <> s.n_rows or r.num_hi <> s.n_rows
        union all
        select 'error', 'steps', s.run_id, s.episode_id, s.first_step,
               case when s.env_lo <> s.env_hi then 'the steps of this episode have env_index '
                        || s.env_lo || ' to ' || s.env_hi
                    else 'env_index is ' || s.env_lo || ' in steps but ' || r.env_lo || ' in episodes' end
        from {stats} s join {eps} r using (run_id, episode_id)
        where s.env_lo <> s.env_hi or r.env_lo <> s.env_lo or r.env_hi <> s.env_lo""")
    parts = [f"""select 'warning' as severity, {quote(t)} as tbl, run_id, null::bigint as episode_id,
                        null::bigint as step, 'run_id has rows in {t} but no row in runs' as message
                 from (select distinct run_id from {t}) anti join runs using (run_id)"""
             for t in ("episodes", "steps", "memory", "scalars", "sources") if ctx.rows(t)]
    if parts:
        ctx.emit_sql(" union all ".join(parts))


def _gaps(ctx: Context) -> None:
    stats = ctx.episode_stats()
    ctx.emit_sql(f"""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, least(first_step, 0) as step,
               case when first_step > 0 then
                   (case when first_step = 1 then 'step 0 is'
                         else 'steps 0 to ' || (first_step - 1) || ' are' end)
                   || ' missing: the episode starts at step ' || first_step
                    else 'step numbers start at ' || first_step || ', below 0' end as message
        from {stats} where first_step <> 0
        union all
        select 'error', 'steps', run_id, episode_id, prev + 1,
               case when step - prev = 2 then 'step ' || (prev + 1) || ' is missing'
                    else 'steps ' || (prev + 1) || ' to ' || (step - 1) || ' are missing' end
               || ' (the episode goes on at step ' || step || ')'
        from (select run_id, episode_id, step,
                     lag(step) over (partition by run_id, episode_id order by step) as prev
              from (select distinct s.run_id, s.episode_id, s.step from steps s
                    semi join (select run_id, episode_id from {stats}
                               where n_steps <> last_step - first_step + 1) g using (run_id, episode_id)))
        where step - prev > 1""")


def _monotonic(ctx: Context) -> None:
    parts = []
    if ctx.rows("steps"):
        for _, layout in ctx.layouts("steps"):
            files = ctx.files("steps", layout)
            if not files:
                continue
            listed = "[" + ", ".join(quote(os.fspath(f)) for f in files) + "]"
            # a row's place: its file in commit order, then its row in the file
            parts.append(f"""
                select 'warning' as severity, 'steps' as tbl, run_id, episode_id, arg_min(step, pos) as step,
                       count(*) || ' step(s) stored out of order: step ' || arg_min(step, pos)
                       || ' comes after step ' || arg_min(prev, pos) || ' in the files' as message
                from (select run_id, episode_id, step, pos,
                             lag(step) over (partition by run_id, episode_id order by pos) as prev
                      from (select run_id, episode_id, step,
                                   list_position({listed}, filename)::bigint * 4294967296
                                       + file_row_number as pos
                            from read_parquet({listed}, filename = true, file_row_number = true)))
                where step < prev group by run_id, episode_id""")
    if ctx.rows("scalars"):
        parts.append("""
            select 'warning', 'scalars', run_id, null, arg_min(step, k),
                   'tag ''' || tag || ''': wall_time goes backwards ' || count(*) || ' time(s) as the step '
                   || 'grows (first at step ' || arg_min(step, k)
                   || '): steps logged again, by a resumed run?'
            from (select run_id, tag, step, wall_time, struct_pack(s := step, w := wall_time) as k,
                         lag(wall_time) over (partition by run_id, tag order by step, wall_time) as prev
                  from scalars where wall_time is not null)
            where wall_time < prev group by run_id, tag""")
    if parts:
        ctx.emit_sql(" union all ".join(parts))


def _short_episodes(ctx: Context) -> None:
    stats = ctx.episode_stats()
    ctx.emit_sql(f"""
        select 'warning' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.first_step as step,
               'the episode has ' || s.n_steps || ' step(s), fewer than min_length=' || {int(ctx.min_length)}
               || (case when s.n_steps = 1 then ' (no action: it makes no transition)' else '' end)
               || (case when r.partial_end then '; partial_end: the recording stopped in it' else '' end)
               as message
        from {stats} s left join {ctx.episode_rows()} r using (run_id, episode_id)
        where s.n_steps < {int(ctx.min_length)}""")


def _null_observations(ctx: Context) -> None:
    # a transition's next observation is the next step's: null inside an episode breaks it
    ctx.emit_sql(" union all ".join(f"""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, min(step) as step,
               'the observation is null on ' || count(*) || ' step(s) that are not the last (first: step '
               || min(step) || '): the transitions into them have no next observation; the source lost '
               || 'them (delete the episode, or import it again from a source that has them)' as message
        from {view} where observation is null and not is_last
        group by run_id, episode_id""" for view, _ in ctx.layouts("steps")))


#: The checks of this module, in the order :data:`~rlarrow.query.doctor.CHECKS` lists them.
EPISODE_CHECKS: tuple[Check, ...] = (
    Check("alignment", _alignment, ("steps",), "RLDS is_first / is_last / is_terminal flags per episode"),
    Check("duplicates", _duplicates, ("steps", "episodes", "runs", "memory", "scalars"),
          "two rows for one key in steps, episodes, runs, memory (scalars: a warning)"),
    Check("references", _references, ("steps", "episodes", "memory", "scalars", "sources"),
          "steps and episodes rows that miss each other or disagree, run ids with no runs row"),
    Check("gaps", _gaps, ("steps",), "step numbers missing within an episode"),
    Check("monotonic", _monotonic, ("steps", "scalars"),
          "steps stored out of step order; scalar wall times going backwards as the step grows"),
    Check("short_episodes", _short_episodes, ("steps",), "episodes of fewer than min_length steps"),
    Check("null_observations", _null_observations, ("steps",),
          "null observations on steps that are not an episode's last"),
)
