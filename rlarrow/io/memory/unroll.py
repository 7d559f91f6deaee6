"""Replay-memory snapshots unrolled into ``episodes`` and ``steps`` rows.

A replay memory holds transitions ``(states, actions, rewards, next_states, terminated,
truncated)`` per env in a circular buffer. :func:`memory_to_episodes` puts each env's
transitions in time order (oldest first, using the write pointer when the snapshot has
it), splits them where an episode terminated or was truncated, and lays each episode
out in RLDS alignment: ``k`` transitions give ``k + 1`` steps, the last holding the
final observation and no action.

Tensor names: skrl 2 names its tensors ``observations``, ``next_observations``,
``actions``, ``rewards``, ``terminated``, ``truncated``; skrl 1 used ``states`` and
``next_states``. Both are found without help (``observations`` first: a skrl 2 memory's
``states`` is the privileged state space); ``next_states`` is looked up as
``next_<name of states>``. ``names={role: name}`` maps anything else (roles:
:data:`ROLES`; ``observations``/``next_observations`` are accepted for ``states``/``next_states``).
skrl's PPO stores no ``next_observations`` and skrl's DQN no ``truncated``: see below for
what the unrolling can know then.

Autoreset. What a vector env does after an episode ends decides what the memory holds
(``autoreset=``, :data:`AUTORESET_MODES`):

* ``"next-step"`` (gymnasium 1.x's default, ``AutoresetMode.NEXT_STEP``): the step after an
  end resets that sub-env, ignores the action and returns the reset observation, reward 0,
  not terminated nor truncated. skrl stores it as a transition (its state is the episode's
  final observation, its next state the reset observation). These *autoreset transitions*
  are dropped: they are no step of any episode, and the next episode starts at the reset
  observation. The final observation is ``next_states`` of the last transition, or, without
  ``next_states``, the state of the dropped autoreset transition.
* ``"same-step"`` (``AutoresetMode.SAME_STEP``): the ending step returns the reset
  observation and puts the true final one in ``info["final_obs"]``, which skrl does not
  store: its ``next_states`` of an ending transition is the next episode's reset observation.
  Nothing is dropped, and the final observation of an episode that ended is unknown: null.
* ``"none"`` (``AutoresetMode.DISABLED``, single envs, memories that store the true final
  observation): nothing is dropped; the final observation is ``next_states`` of the last
  transition.

``"auto"`` (the default) reads the mode from the transitions that follow an episode end in
the snapshot (:func:`detect_autoreset`), for all envs together:

1. if one of them is not a possible autoreset transition (its reward is not 0, it ends an
   episode, or, with ``next_states``, its state is not ``next_states`` of the end), the mode
   is not next-step (exact: every NEXT_STEP autoreset transition passes);
   then, with ``next_states``, a state equal to ``next_states`` of the end (continuity) means
   same-step, a different one none (exact, skrl stores the same tensor twice); without
   ``next_states`` the two give the same rows and same-step is used;
2. if all of them are possible autoreset transitions, the mode is next-step, read from the
   data when no other transition of the snapshot has reward 0 (its first excepted: what
   precedes it is unknown); when some do, zeros after
   the ends do not tell next-step from an env whose first reward is 0: next-step is assumed;
3. if no end is followed by a transition in the snapshot, the mode cannot be read:
   next-step (gymnasium 1.x's default) is assumed.

Assumptions are warned as :class:`AutoresetAssumptionWarning` (an
:class:`~rlarrow.AssumptionWarning`; :func:`rlarrow.io.memory.importer.import_memory` says it once per
conversion). Each episode's ``metadata`` records ``autoreset`` (the mode used),
``autoreset_from`` (``"given"``, ``"data"`` or ``"assumed"``) and ``final_observation``
(where the last step's observation came from: ``"next_states"``, ``"autoreset transition"``,
or ``"unknown"`` when it is null).

What the buffer cannot tell is said in the ``episodes`` rows: the first episode of an
env is ``partial_start`` unless the buffer never wrapped (its start may have been
overwritten; with next-step, a snapshot that begins right after an end begins with an
autoreset transition nothing shows, kept in that partial episode), and an episode still
running when the snapshot was taken is ``partial_end``. Neither is ever ``truncated``.

Series. skrl exports its memory each time it fills, named ``<time>_memory_<id>`` (see
:data:`SKRL_EXPORT_NAME`): :func:`memory_series` groups one memory's exports, in time order,
and :func:`unroll_series` unrolls them as one time series, so that an episode crossing an
export is one episode; an export missing in between is found where ``next_states`` is stored
(a :class:`GapWarning`), and the series is cut there (``partial_end``/``partial_start``).

Time limits. A memory without ``truncated`` (skrl's DQN) shows no truncation: a time-limited
episode runs on into the next one, which a :class:`NoTruncationWarning` says;
``max_episode_steps=N`` cuts such episodes after N transitions, as gymnasium's ``TimeLimit``
does.

Example:
    >>> import numpy as np
    >>> from rlarrow.io.memory.snapshot import MemorySnapshot
    >>> done = np.zeros((7, 1, 1), bool); done[2] = True     # one env, episode ends at t=2
    >>> rewards = np.ones((7, 1, 1), np.float32); rewards[3] = 0.0  # t=3 is the autoreset step
    >>> states = np.array([0, 1, 2, 3, 10, 11, 12], np.float32).reshape(7, 1, 1)
    >>> snap = MemorySnapshot({
    ...     "observations": states, "actions": np.zeros((7, 1, 1), np.int64), "rewards": rewards,
    ...     "terminated": done, "truncated": np.zeros((7, 1, 1), bool)},
    ...     is_full=False, write_pointer=7, env_pointer=0)
    >>> episodes, steps = memory_to_episodes(snap, run_id="r")
    >>> episodes.select(["num_steps", "return", "terminated", "partial_start", "partial_end"]).to_pylist()
    [{'num_steps': 4, 'return': 3.0, 'terminated': True, 'partial_start': False, 'partial_end': False}, \
{'num_steps': 4, 'return': 3.0, 'terminated': False, 'partial_start': False, 'partial_end': True}]
    >>> steps.column("observation").to_pylist()
    [[0.0], [1.0], [2.0], [3.0], [10.0], [11.0], [12.0], None]
    >>> import json; json.loads(episodes.column("metadata")[0].as_py())["autoreset"]
    'next-step'
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.episode_builder import Transitions, outcome, returns
from rlarrow.core.errors import ArgumentError, AssumptionWarning, InvalidInputError
from rlarrow.core.tensors import to_arrow, with_null_rows
from rlarrow.io.memory.autoreset import (
    AUTORESET_MODES as AUTORESET_MODES,
)
from rlarrow.io.memory.autoreset import (
    DEFAULT_AUTORESET as DEFAULT_AUTORESET,
)
from rlarrow.io.memory.autoreset import (
    AutoresetAssumptionWarning,
    decide_autoreset,
    detect_in_rows,
)
from rlarrow.io.memory.autoreset import (
    AutoresetDetection as AutoresetDetection,
)
from rlarrow.io.memory.autoreset import (
    detect_autoreset as detect_autoreset,
)
from rlarrow.io.memory.continuity import gae_links
from rlarrow.io.memory.rows import (
    DEFAULT_NAMES as DEFAULT_NAMES,
)
from rlarrow.io.memory.rows import (
    ROLE_ALIASES as ROLE_ALIASES,
)
from rlarrow.io.memory.rows import (
    ROLES as ROLES,
)
from rlarrow.io.memory.rows import (
    EnvRows,
    env_rows,
    same_rows,
)
from rlarrow.io.memory.rows import (
    resolve_names as resolve_names,
)
from rlarrow.io.memory.rows import (
    time_order as time_order,
)
from rlarrow.io.memory.snapshot import MemorySnapshot

if TYPE_CHECKING:
    from rlarrow.core.store import Store, StoreLike

__all__ = [
    "AutoresetAssumptionWarning", "GapWarning", "NoTruncationWarning", "memory_to_episodes",
    "unroll_snapshots", "unroll_store",
]

#: How skrl (and :class:`rlarrow.record.replay.Memory`) names an export: the time it was
#: written, then the memory's ``id()``: ``25-01-31_14-03-59-123456_memory_0x7f3a2c1b9d50``.
SKRL_EXPORT_NAME = re.compile(
    r"^(?P<time>\d{2}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}-\d{6})_memory_(?P<memory>0x[0-9a-fA-F]+)$")


def memory_series(snapshots: Sequence[MemorySnapshot]) -> list[list[int]]:
    """Group snapshots into series: the consecutive exports of one memory, oldest first.

    skrl exports a memory each time it fills, under the name :data:`SKRL_EXPORT_NAME` (time
    written, ``id()`` of the memory): exports named with one memory id, with the same tensors,
    sizes and envs, are one series, sorted by name (time). Any other snapshot is a series of
    its own, and so is every export of a memory id whose names repeat (one export imported
    twice, or pt and npz copies of one memory: nothing is joined to a copy of itself).

    Returns:
        Lists of positions in ``snapshots``; each list in time order, the lists in the order
        of their first snapshot.

    Example:
        >>> import numpy as np
        >>> z = {"observations": np.zeros((4, 1, 1), np.float32)}
        >>> names = ["24-05-01_10-00-02-000000_memory_0xab", "other",
        ...          "24-05-01_10-00-01-000000_memory_0xab"]
        >>> memory_series([MemorySnapshot(dict(z), name=n) for n in names])
        [[2, 0], [1]]
    """
    shapes = [(s.memory_size, s.num_envs, tuple((n, v.dtype.str, v.shape[2:]) for n, v in s.tensors.items()))
              for s in snapshots]
    return _series([s.name for s in snapshots], shapes)


def _series(names: Sequence[str | None], shapes: Sequence[Any]) -> list[list[int]]:
    """:func:`memory_series` of snapshots known by their names and shapes (anything comparable)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    out: list[list[int]] = []
    for i, (name, shape) in enumerate(zip(names, shapes, strict=True)):
        found = SKRL_EXPORT_NAME.match(name or "")
        if not found:
            out.append([i])
            continue
        groups.setdefault((found["memory"], shape), []).append(i)
    for members in groups.values():
        if len({names[i] for i in members}) < len(members):
            out += [[i] for i in members]
        else:
            out.append(sorted(members, key=lambda i: str(names[i])))
    return sorted(out, key=min)


def _new_rows(prev: MemorySnapshot, snap: MemorySnapshot, orders: list[np.ndarray]) -> list[np.ndarray]:
    """``snap``'s rows written since ``prev``, an export made when the memory wrapped.

    An export at the wrap has write pointer 0 and is full; a later snapshot of the memory whose
    pointers are known holds, after its write pointer, rows ``prev`` holds too: only the rows
    before it are new. Without known pointers every row is taken.
    """
    if (prev.is_full is not True or prev.write_pointer != 0 or snap.write_pointer in (None, 0)
            or snap.is_full is not True):
        return orders  # (an export at the wrap, pointer 0, holds a whole new fill)
    wp, ep = int(snap.write_pointer), int(snap.env_pointer or 0)
    return [np.arange(min(wp + 1 if e < ep else wp, snap.memory_size)) for e in range(snap.num_envs)]


def _gap(prev: list[EnvRows], nxt: list[EnvRows], next_step: bool) -> str | None:
    """Why exports ``prev`` and ``nxt`` (each env's rows) are not consecutive, or None.

    With ``next_states``, an env whose last transition of ``prev`` did not end an episode goes on
    in ``nxt`` from that transition's next state (with next-step autoreset, ``next_step``, one
    that ended too: the autoreset row's state is the final observation). With next-step
    autoreset, an env whose last transition ended an episode begins ``nxt`` with the autoreset
    row (reward 0, not done), ``next_states`` or not. Anything else means rows are missing in
    between (an export lost). Otherwise nothing shows: None.
    """
    for env, (a, b) in enumerate(zip(prev, nxt, strict=True)):
        if not len(a) or not len(b):
            continue
        ended = bool(a.done()[-1])
        if next_step and ended and not (b.rewards[0] == 0 and not b.done()[0]):
            return (f"env {env}: its episode ended with the export, but the next export does not begin with "
                    "next-step's autoreset row (reward 0, not done): rows are missing between them (an "
                    "export lost?)")
        if a.next_states is None or (ended and not next_step):
            continue
        if not same_rows(b.states[:1], a.next_states[-1:])[0]:
            return (f"env {env}: the next state of its last transition is not the first state of the next "
                    "export (rows are missing between them: an export lost?)")
    return None


def _time_limit_cuts(done: np.ndarray, limit: int, skip_reset: bool, start_known: bool) -> np.ndarray:
    """Where gymnasium's ``TimeLimit(max_episode_steps=limit)`` truncated episodes the data does not end.

    ``done``: one env's known ends (terminated or truncated); ``skip_reset``: next-step autoreset
    (the transition after an end is the reset, no step of an episode); ``start_known``: the
    first transition starts an episode (else the first episode's start is unknown and nothing is
    cut before its end). Episodes counted from their start are cut after ``limit`` transitions.
    """
    n = len(done)
    cut = np.zeros(n, bool)
    ends = np.flatnonzero(done)
    if start_known:
        start = 0
    elif len(ends):
        start = int(ends[0]) + 1
        if skip_reset and start < n and not done[start]:
            start += 1
    else:
        return cut
    while start < n:
        j = int(np.searchsorted(ends, start))
        last = int(ends[j]) if j < len(ends) else None
        length = (last - start + 1) if last is not None else n - start
        if length > limit or (last is None and length == limit):
            cut[start + limit - 1] = True
            start += limit
        elif last is None:
            break
        else:
            start = last + 1
        if skip_reset and start < n and not done[start]:
            start += 1
    return cut


def _split_at_gaps(snaps: Sequence[MemorySnapshot], roles: Mapping[str, str | None], autoreset: str
                   ) -> tuple[list[list[int]], list[list[np.ndarray]], list[str]]:
    """A series' segments (positions, split where an export is missing), each snapshot's orders, gaps.

    Next-step autoreset (given, or read exactly from the ends inside the exports, so that a gap
    cannot hide it) lets :func:`_gap` check the exports that begin after an episode's end too.
    """
    orders: list[list[np.ndarray]] = []
    for k, snap in enumerate(snaps):
        order, known = time_order(snap)
        if not known:
            warnings.warn(f"{snap.name or snap.path}: the export does not record the write pointer; "
                          "taking storage order as time order (export as parquet to keep it)",
                          AssumptionWarning, stacklevel=4)
        orders.append(_new_rows(snaps[k - 1], snap, order) if k else order)
    segments: list[list[int]] = [[0]]
    gaps: list[str] = []
    if len(snaps) == 1:
        return segments, orders, gaps
    rows = [[env_rows([snap], [order], roles, e) for e in range(snap.num_envs)]
            for snap, order in zip(snaps, orders, strict=True)]
    if autoreset == "auto":
        inside = detect_in_rows([r for per_env in rows for r in per_env])
        next_step = inside.mode == "next-step" and inside.exact
    else:
        next_step = autoreset == "next-step"
    links = gae_links(snaps) if roles.get("next_states") is None else None
    if links is None and roles.get("next_states") is None:
        warnings.warn(f"{snaps[0].name or snaps[0].path}: a missing export between the {len(snaps)} exports "
                      "of this memory cannot be seen (it stores no next_states, and no returns and "
                      "advantages that chain its exports): episodes are joined across them as if none were "
                      "missing",
                      AssumptionWarning, stacklevel=4)
    for k in range(1, len(snaps)):
        why = _gap(rows[k - 1], rows[k], next_step)
        if why is None and links is not None and links[k - 1] is False:
            why = ("its returns and advantages (computed by PPO from the rollout before it) do not match "
                   "the values of the export before it: rows are missing between them (an export lost?)")
        if why is None:
            segments[-1].append(k)
        else:
            gaps.append(f"{snaps[k - 1].name} -> {snaps[k].name}: {why}")
            segments.append([k])
    return segments, orders, gaps


class GapWarning(AssumptionWarning):
    """Exports of one memory that should be consecutive are not: the episodes around the gap are partial."""


class NoTruncationWarning(AssumptionWarning):
    """A memory without a ``truncated`` tensor: time-limited episodes may run into the next ones."""


def unroll_series(
    snapshots: Sequence[MemorySnapshot],
    *,
    run_id: str,
    names: Mapping[str, str] | None = None,
    first_episode_id: int = 0,
    snapshot_ids: Sequence[int | None] | None = None,
    autoreset: str = "auto",
    max_episode_steps: int | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Unroll the consecutive exports of one memory (oldest first) as one time series.

    An episode that crosses an export is one episode; with next-step autoreset, the reset
    transition at the start of an export is dropped like any other. Where an export is missing
    (see :func:`memory_series` for which snapshots make a series; the gap shows where
    ``next_states`` is stored), the series is cut there: the episode before the gap ends
    ``partial_end``, the one after starts ``partial_start`` (and a :class:`GapWarning` says so).
    Nothing is ever labelled ``truncated`` for being cut by an export's edge.

    Args:
        snapshots: one memory's exports in time order (one snapshot: :func:`memory_to_episodes`).
        run_id: the run the rows belong to.
        names: role -> tensor name (see :func:`memory_to_episodes`).
        first_episode_id: the first episode number (episodes are numbered env by env).
        autoreset: the vector env's autoreset mode (see :func:`memory_to_episodes`).
        snapshot_ids: each snapshot's id, recorded in its episodes' metadata.
        max_episode_steps: the env's time limit: an episode that runs longer without ending is
            truncated after this many transitions, as gymnasium's ``TimeLimit`` does (for
            memories without a ``truncated`` tensor, such as skrl's DQN's). Without it such a
            memory gets a :class:`NoTruncationWarning`.

    Returns:
        ``(episodes, steps)``, ready for ``store.append``.
    """
    if not snapshots:
        raise ArgumentError("unroll_series: no snapshots given")
    if max_episode_steps is not None and int(max_episode_steps) < 1:
        raise ArgumentError(f"max_episode_steps={max_episode_steps}: give the env's time limit, 1 or more "
                            "steps")
    ids = list(snapshot_ids) if snapshot_ids is not None else [None] * len(snapshots)
    first = snapshots[0]
    roles = resolve_names(first, names)
    for snap in snapshots[1:]:
        if resolve_names(snap, names) != roles or (snap.memory_size, snap.num_envs) != (
                first.memory_size, first.num_envs):
            raise InvalidInputError(snap.path or snap.name, "not an export of the memory before it "
                                    f"({first.name}): its tensors or sizes differ; unroll it on its own")
    segments, orders, gaps = _split_at_gaps(snapshots, roles, autoreset)
    where = first.name or first.path
    for gap in gaps:
        warnings.warn(f"{where}: exports of one memory are not consecutive ({gap}); the episodes around the "
                      "gap are partial", GapWarning, stacklevel=2)
    ep_parts: list[dict[str, Any]] = []
    step_parts: list[dict[str, Any]] = []
    episode_id = first_episode_id
    joined = longest = 0
    for seg_no, seg in enumerate(segments):
        snaps = [snapshots[k] for k in seg]
        envs = [env_rows(snaps, [orders[k] for k in seg], roles, e) for e in range(first.num_envs)]
        wrapped = snaps[0].is_full is not False  # the first episodes may have lost their start
        gap_before, gap_after = seg_no > 0, seg_no < len(segments) - 1

        def cuts_for(mode: str, envs: list[EnvRows] = envs,
                     wrapped: bool = wrapped) -> list[np.ndarray] | None:
            if max_episode_steps is None:
                return None
            return [_time_limit_cuts(r.done(), int(max_episode_steps), mode == "next-step", not wrapped)
                    for r in envs]

        def detect(envs: list[EnvRows] = envs, cuts_for: Callable[[str], list[np.ndarray] | None] = cuts_for
                   ) -> AutoresetDetection:
            det = detect_in_rows(envs)
            if max_episode_steps is None:
                return det
            return detect_in_rows(envs, cuts_for(det.mode or DEFAULT_AUTORESET))  # hidden ends counted too

        mode, mode_from = decide_autoreset(where, autoreset, detect)
        cuts = cuts_for(mode)
        for env, rows in enumerate(envs):
            if not len(rows):
                continue
            ep, st = _unroll_env(rows, env, mode, wrapped, None if cuts is None else cuts[env], episode_id)
            meta: dict[str, Any] = {"source": "memory", "autoreset": mode, "autoreset_from": mode_from}
            if max_episode_steps is not None:
                meta["max_episode_steps"] = int(max_episode_steps)
            for m, ps, pe in zip(ep["metadata"], ep["partial_start"], ep["partial_end"], strict=True):
                k0, k1 = seg[m.pop("_snap_first")], seg[m.pop("_snap_last")]
                m.update(meta, snapshot=snapshots[k0].name, snapshot_id=ids[k0],
                         snapshot_last=snapshots[k1].name, snapshot_id_last=ids[k1])
                if ps:
                    m["partial_start_at"] = "gap" if gap_before else "buffer start"
                if pe:
                    m["partial_end_at"] = "gap" if gap_after else "last export"
            episode_id += len(ep["episode_id"])
            ep_parts.append(ep)
            step_parts.append(st)
            if roles["truncated"] is None and max_episode_steps is None:
                whole = ~(np.asarray(ep["partial_start"]) | np.asarray(ep["partial_end"]))
                joined += int(whole.sum())
                longest = max([longest, *(np.asarray(ep["num_steps"])[whole] - 1).tolist()])
    if joined:
        warnings.warn(f"{where}: the memory has no truncated tensor (skrl's DQN stores none), so an episode "
                      f"its env cut at a time limit runs on into the next one: any of the {joined} complete "
                      f"episode(s) may be several joined (the longest has {longest} transitions); pass the "
                      "env's time limit as max_episode_steps=N "
                      "to cut them as gymnasium's TimeLimit does", NoTruncationWarning, stacklevel=2)
    ep_rows = {k: [v for p in ep_parts for v in p[k]] for k in _EPISODE_COLUMNS}
    episodes = _schema.build("episodes", {"run_id": run_id, **ep_rows}, num_rows=len(ep_rows["episode_id"]))
    steps = (pa.concat_tables([_schema.build("steps", {"run_id": run_id, **p}, num_rows=len(p["step"]))
                               for p in step_parts])
             if step_parts else _schema.table("steps").arrow_schema().empty_table())
    return episodes, steps


_EPISODE_COLUMNS = ("episode_id", "env_index", "num_steps", "return", "terminated", "truncated",
                    "partial_start", "partial_end", "metadata")


def _unroll_env(rows: EnvRows, env: int, mode: str, wrapped: bool, cut: np.ndarray | None,
                episode_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One env's rows as ``episodes`` columns and ``steps`` columns (RLDS alignment)."""
    done_known = rows.done()
    done_all = done_known | cut if cut is not None else done_known
    keep = np.ones(len(rows), bool)
    if mode == "next-step":  # the transition after an end is the autoreset step (unless it ends too)
        keep[1:] = ~(done_all[:-1] & ~done_all[1:])
    order = np.flatnonzero(keep)  # kept transitions' positions in the env's rows
    term = rows.terminated[order].astype(bool)
    trunc = (rows.truncated[order].astype(bool) if rows.truncated is not None else np.zeros(len(order), bool))
    if cut is not None:
        trunc |= cut[order]
    done = term | trunc
    ends = np.flatnonzero(done)
    if not len(ends) or ends[-1] != len(order) - 1:
        ends = np.append(ends, len(order) - 1)
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - starts + 1
    n_eps = len(ends)
    states = rows.states
    # the final observation of each episode, and where it came from
    final_obs = np.zeros((n_eps, *states.shape[1:]), states.dtype)
    final_known = np.zeros(n_eps, bool)
    if rows.next_states is not None:
        final_obs[:] = rows.next_states[order[ends]]
        final_known[:] = True
    final_from = np.where(final_known, "next_states", "unknown").astype(object)
    ended = done[ends]
    if mode == "same-step":  # next_states of an end is the next episode's reset observation
        final_known &= ~ended
        final_from[ended] = "unknown"
    elif mode == "next-step" and rows.next_states is None:
        after = order[ends] + 1  # the autoreset transition, when the rows hold it
        from_reset = ended & (after < len(rows))
        from_reset[from_reset] = ~keep[after[from_reset]]
        final_obs[from_reset] = states[after[from_reset]]
        final_known |= from_reset
        final_from[from_reset] = "autoreset transition"
    # the one episode builder lays the transitions out: a final-observation step after each end
    last_term = term[ends]
    layout = Transitions(len(order), ends)
    flags = layout.flags(terminal=last_term, is_last=True)  # (a cut episode's final step is last too)
    obs_null = np.zeros(layout.total, bool)
    obs_null[layout.fin] = ~final_known
    observation = to_arrow(layout.spread(states[order], final_obs))
    ep_ids = np.arange(episode_id, episode_id + n_eps)
    steps = {
        "episode_id": ep_ids[flags["episode"]],
        "step": flags["step"], "env_index": env,
        "observation": with_null_rows(observation, obs_null) if obs_null.any() else observation,
        "action": layout.last_null(to_arrow(layout.spread(rows.actions[order]))),
        "reward": layout.last_null(pa.array(layout.spread(rows.rewards[order].astype(np.float64)))),
        "discount": layout.last_null(pa.array(layout.spread(np.where(term, 0.0, 1.0)))),
        "is_first": flags["is_first"], "is_last": flags["is_last"], "is_terminal": flags["is_terminal"],
    }
    ending = outcome(ended=ended, terminated=last_term)  # truncated: real ones only, never an export's edge
    first_rows, last_rows = order[starts], order[ends]
    episodes = {
        "episode_id": ep_ids.tolist(), "env_index": [env] * n_eps, "num_steps": (lengths + 1).tolist(),
        "return": returns(rows.rewards[order], starts).tolist(), "terminated": ending["terminated"].tolist(),
        "truncated": ending["truncated"].tolist(),
        "partial_start": [wrapped and i == 0 for i in range(n_eps)],
        "partial_end": ending["partial_end"].tolist(),
        "metadata": [
            {"_snap_first": int(rows.snap[a]), "_snap_last": int(rows.snap[b]),
             "memory_index_first": int(rows.index[a]), "memory_index_last": int(rows.index[b]),
             "final_observation": str(f)}
            for a, b, f in zip(first_rows, last_rows, final_from, strict=True)],
    }
    return episodes, steps


def memory_to_episodes(
    snapshot: MemorySnapshot,
    *,
    run_id: str,
    names: Mapping[str, str] | None = None,
    first_episode_id: int = 0,
    snapshot_id: int | None = None,
    autoreset: str = "auto",
    max_episode_steps: int | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Unroll a memory snapshot into ``episodes`` and ``steps`` tables.

    Args:
        snapshot: the memory (``MemorySnapshot``; see :mod:`rlarrow.io.memory.importer` to read one).
        run_id: the run the rows belong to.
        names: role -> tensor name, for memories that name them otherwise (roles:
            :data:`ROLES`; skrl 2 and skrl 1 names are found without it, see
            :func:`resolve_names`). ``next_states`` and ``truncated`` may be absent: only
            ``terminated`` then ends episodes, and the final observation is null where
            nothing else gives it (see the module docs).
        first_episode_id: the first episode number (episodes are numbered env by env).
        snapshot_id: recorded in each episode's metadata with its memory rows.
        autoreset: the vector env's autoreset mode, one of :data:`AUTORESET_MODES`
            (``"auto"``: read from the data, see :func:`detect_autoreset`; where it does not
            show, next-step is assumed and an :class:`AutoresetAssumptionWarning` says so).
        max_episode_steps: the env's time limit, to cut episodes a memory without
            ``truncated`` runs together (see :func:`unroll_series`).

    Returns:
        ``(episodes, steps)``, ready for ``store.append``.

    Raises:
        InvalidInputError: a required tensor (states, actions, rewards, terminated) is
            missing, ``names`` is wrong, or ``autoreset`` is not a mode.
    """
    return unroll_series([snapshot], run_id=run_id, names=names, first_episode_id=first_episode_id,
                         snapshot_ids=[snapshot_id], autoreset=autoreset, max_episode_steps=max_episode_steps)


def unroll_store(
    store: StoreLike,
    *,
    run_id: str | None = None,
    snapshot_id: int | None = None,
    snapshot_ids: Sequence[int] | None = None,
    names: Mapping[str, str] | None = None,
    autoreset: str = "auto",
    max_episode_steps: int | None = None,
    formats: Mapping[int, str] | None = None,
) -> tuple[int, int]:
    """Unroll the store's memory snapshots into its ``episodes`` and ``steps`` tables.

    A run's snapshots are grouped into series (one memory's consecutive exports, see
    :func:`memory_series`) and each series is unrolled as one time series
    (:func:`unroll_series`): an episode that crosses an export is one episode. Episode ids
    continue after the run's highest. Steps are committed before their episodes rows.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        run_id: only this run's snapshots (default: all runs).
        snapshot_id: only this snapshot (default: all).
        snapshot_ids: only these snapshots (of ``run_id``; default: all).
        names: role -> tensor name (see :func:`memory_to_episodes`).
        autoreset: the vector env's autoreset mode, or ``"auto"`` (see :func:`memory_to_episodes`).
        max_episode_steps: the env's time limit (see :func:`unroll_series`).
        formats: each snapshot id's export format, where known: exports of one memory in
            different formats (a memory saved as pt and as npz at each fill) are copies, not
            one series.

    Returns:
        ``(episodes, steps)`` rows written.
    """
    import pyarrow.compute as pc

    from rlarrow.core.store import as_store
    from rlarrow.io.memory.stored import snapshots

    st = as_store(store)
    wanted = None if snapshot_ids is None else set(snapshot_ids)
    # the snapshots' names and sizes first (a few columns), then one series at a time in memory
    where = None
    for column, value in (("run_id", run_id), ("snapshot_id", snapshot_id)):
        if value is not None:
            where = pc.field(column) == value if where is None else where & (pc.field(column) == value)
    keys = st.read("memory", columns=["run_id", "snapshot_id", "snapshot_name", "memory_size", "num_envs"],
                   filter=where)
    keys = keys.group_by(["run_id", "snapshot_id"], use_threads=False).aggregate(
        [("snapshot_name", "min"), ("memory_size", "max"), ("num_envs", "max")])
    by_run: dict[str, list[tuple[int, str | None, tuple[int, int, str | None]]]] = {}
    for row in sorted(keys.to_pylist(), key=lambda r: (r["run_id"], r["snapshot_id"])):
        if wanted is None or row["snapshot_id"] in wanted:
            fmt = (formats or {}).get(row["snapshot_id"])
            by_run.setdefault(row["run_id"], []).append(
                (row["snapshot_id"], row["snapshot_name_min"],
                 (row["memory_size_max"], row["num_envs_max"], fmt)))
    written = [0, 0]
    for rid, known in by_run.items():
        next_id = _next_episode_id(st, rid)
        for series in _series([k[1] for k in known], [k[2] for k in known]):
            sids = [known[i][0] for i in series]
            loaded = [snap for sid in sids for snap in snapshots(st, run_id=rid, snapshot_id=sid)]
            counts = _unroll_into(st, rid, loaded, sids, next_id, names=names, autoreset=autoreset,
                                  max_episode_steps=max_episode_steps)
            next_id += counts[0]
            written = [written[0] + counts[0], written[1] + counts[1]]
    return written[0], written[1]


def unroll_snapshots(
    store: StoreLike,
    snapshots: Sequence[MemorySnapshot],
    *,
    run_id: str,
    snapshot_ids: Sequence[int],
    formats: Sequence[str | None] | None = None,
    names: Mapping[str, str] | None = None,
    autoreset: str = "auto",
    max_episode_steps: int | None = None,
) -> tuple[int, int]:
    """:func:`unroll_store` of snapshots at hand: what an import has just read and written.

    ``snapshots`` are run ``run_id``'s snapshots ``snapshot_ids`` as read from their files
    (the store's ``memory`` rows of them hold the same values): they are grouped into series
    and unrolled exactly as :func:`unroll_store` would unroll them from the store, without
    reading the store's copy back. Episode ids continue after the run's highest.

    Args:
        store: the store the ``episodes`` and ``steps`` rows go to.
        snapshots: the snapshots, in snapshot id order.
        run_id: their run.
        snapshot_ids: each snapshot's id.
        formats: each snapshot's export format (see :func:`unroll_store`).
        names: role -> tensor name (see :func:`memory_to_episodes`).
        autoreset: the vector env's autoreset mode, or ``"auto"`` (see :func:`memory_to_episodes`).
        max_episode_steps: the env's time limit (see :func:`unroll_series`).

    Returns:
        ``(episodes, steps)`` rows written.

    Example:
        >>> import numpy as np, tempfile, rlarrow
        >>> done = np.zeros((6, 1, 1), bool); done[2] = True
        >>> snap = MemorySnapshot({"states": np.arange(6, dtype=np.float32).reshape(6, 1, 1),
        ...                        "actions": np.zeros((6, 1, 1), np.float32),
        ...                        "rewards": np.ones((6, 1, 1), np.float32), "terminated": done,
        ...                        "truncated": np.zeros((6, 1, 1), bool)},
        ...                       name="m", is_full=False, write_pointer=6, env_pointer=0)
        >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
        >>> unroll_snapshots(st, [snap], run_id="r", snapshot_ids=[0], autoreset="none")
        (2, 8)
    """
    from rlarrow.core.store import as_store

    if len(snapshot_ids) != len(snapshots) or (formats is not None and len(formats) != len(snapshots)):
        raise ArgumentError("unroll_snapshots: give one snapshot id (and format) per snapshot")
    st = as_store(store)
    shapes = [(s.memory_size, s.num_envs, None if formats is None else formats[i])
              for i, s in enumerate(snapshots)]
    written = [0, 0]
    next_id = _next_episode_id(st, run_id)
    for series in _series([s.name or None for s in snapshots], shapes):
        counts = _unroll_into(st, run_id, [snapshots[i] for i in series], [snapshot_ids[i] for i in series],
                              next_id, names=names, autoreset=autoreset, max_episode_steps=max_episode_steps)
        next_id += counts[0]
        written = [written[0] + counts[0], written[1] + counts[1]]
    return written[0], written[1]


def _next_episode_id(st: Store, run_id: str) -> int:
    """The episode id after the run's highest in the store (0 for a run without episodes)."""
    import pyarrow.compute as pc

    ids = st.read("episodes", columns=["episode_id"], filter=pc.field("run_id") == run_id)
    return (pc.max(ids.column(0)).as_py() + 1) if ids.num_rows else 0


def _unroll_into(st: Store, run_id: str, series: Sequence[MemorySnapshot], snapshot_ids: Sequence[int],
                 first_episode_id: int, *, names: Mapping[str, str] | None, autoreset: str,
                 max_episode_steps: int | None) -> tuple[int, int]:
    """One series unrolled into ``st``'s tables, from ``first_episode_id``: the rows written."""
    episodes, steps = unroll_series(series, run_id=run_id, names=names, first_episode_id=first_episode_id,
                                    snapshot_ids=snapshot_ids, autoreset=autoreset,
                                    max_episode_steps=max_episode_steps)
    st.append("steps", steps)
    st.append("episodes", episodes)
    return episodes.num_rows, steps.num_rows
