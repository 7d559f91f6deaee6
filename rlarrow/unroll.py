"""Replay-memory snapshots unrolled into ``episodes`` and ``steps`` rows.

A replay memory holds transitions ``(states, actions, rewards, next_states, terminated,
truncated)`` per env in a circular buffer. :func:`memory_to_episodes` puts each env's
transitions in time order (oldest first, using the write pointer when the snapshot has
it), splits them where an episode terminated or was truncated, and lays each episode
out in RLDS alignment: ``k`` transitions give ``k + 1`` steps, the last holding the
final observation (``next_states`` of the last transition) and no action.

What the buffer cannot tell is said in the ``episodes`` rows: the first episode of an
env is ``partial_start`` unless the buffer never wrapped (its start may have been
overwritten), and an episode still running when the snapshot was taken is
``partial_end``.

Example:
    >>> import numpy as np
    >>> from rlarrow.io.memory import MemorySnapshot
    >>> done = np.zeros((6, 1, 1), bool); done[2] = True     # one env, episode ends at t=2
    >>> snap = MemorySnapshot({
    ...     "states": np.arange(6, dtype=np.float32).reshape(6, 1, 1),
    ...     "next_states": np.arange(1, 7, dtype=np.float32).reshape(6, 1, 1),
    ...     "actions": np.zeros((6, 1, 1), np.int64), "rewards": np.ones((6, 1, 1), np.float32),
    ...     "terminated": done, "truncated": np.zeros((6, 1, 1), bool)},
    ...     is_full=False, write_pointer=5, env_pointer=0)
    >>> episodes, steps = memory_to_episodes(snap, run_id="r")
    >>> episodes.select(["num_steps", "return", "terminated", "partial_start", "partial_end"]).to_pylist()
    [{'num_steps': 4, 'return': 3.0, 'terminated': True, 'partial_start': False, 'partial_end': False}, \
{'num_steps': 3, 'return': 2.0, 'terminated': False, 'partial_start': False, 'partial_end': True}]
    >>> steps.column("observation").to_pylist()[:4]
    [[0.0], [1.0], [2.0], [3.0]]
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow import schema as _schema
from rlarrow.errors import AssumptionWarning, InvalidInputError
from rlarrow.io.memory import MemorySnapshot
from rlarrow.tensors import to_arrow, with_null_rows

__all__ = ["ROLES", "memory_to_episodes", "time_order", "unroll_store"]

#: The tensors an unrolling uses, by role; map your names with ``names={role: name}``.
ROLES = ("states", "actions", "rewards", "next_states", "terminated", "truncated")


def time_order(snapshot: MemorySnapshot) -> tuple[list[np.ndarray], bool]:
    """Each env's memory indices, oldest first, and whether that order is known.

    With the buffer state (a parquet export, :class:`rlarrow.memory.Memory`), a wrapped
    buffer starts at the write pointer. Without it (legacy pt/npz/csv exports), storage
    order is taken as time order and trailing rows that were never written (all-NaN
    floats) are dropped.
    """
    ms, ne = snapshot.memory_size, snapshot.num_envs
    if snapshot.is_full is None or snapshot.write_pointer is None:
        floats = [v.reshape(ms, ne, -1) for v in snapshot.tensors.values() if v.dtype.kind == "f"]
        orders = []
        for e in range(ne):
            written = np.ones(ms, bool)
            if floats:
                written = ~np.all(np.concatenate([np.isnan(f[:, e]) for f in floats], axis=1), axis=1)
            last = int(np.flatnonzero(written)[-1]) + 1 if written.any() else 0
            orders.append(np.arange(last))
        return orders, False
    wp, ep = int(snapshot.write_pointer), int(snapshot.env_pointer or 0)
    orders = []
    for e in range(ne):
        head = wp + 1 if e < ep else wp  # envs before the env pointer already wrote row wp
        if snapshot.is_full:
            orders.append(np.concatenate([np.arange(head, ms), np.arange(0, head)]) % ms)
        else:
            orders.append(np.arange(min(head, ms)))
    return orders, True


def memory_to_episodes(
    snapshot: MemorySnapshot,
    *,
    run_id: str,
    names: Mapping[str, str] | None = None,
    first_episode_id: int = 0,
    snapshot_id: int | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Unroll a memory snapshot into ``episodes`` and ``steps`` tables.

    Args:
        snapshot: the memory (``MemorySnapshot``; see :mod:`rlarrow.convert` to read one).
        run_id: the run the rows belong to.
        names: role -> tensor name, for memories that name them otherwise (roles:
            :data:`ROLES`). ``next_states`` and ``truncated`` may be absent: the final
            observation is then null, and only ``terminated`` ends episodes.
        first_episode_id: the first episode number (episodes are numbered env by env).
        snapshot_id: recorded in each episode's metadata with its memory rows.

    Returns:
        ``(episodes, steps)``, ready for ``store.append``.

    Raises:
        InvalidInputError: a required tensor (states, actions, rewards, terminated) is missing.
    """
    roles = {r: r for r in ROLES} | dict(names or {})
    t = snapshot.tensors
    missing = [f"{r} ({roles[r]!r})" for r in ("states", "actions", "rewards", "terminated")
               if roles[r] not in t]
    if missing:
        raise InvalidInputError(snapshot.path, f"cannot unroll: no tensor for {', '.join(missing)}; "
                                f"it has {sorted(t)} (map names with names={{role: name}})")
    orders, known = time_order(snapshot)
    if not known:
        warnings.warn(f"{snapshot.name or snapshot.path}: the export does not record the write pointer; "
                      "taking storage order as time order (export as parquet to keep it)",
                      AssumptionWarning, stacklevel=2)
    wrapped = snapshot.is_full is not False  # the first episodes may have lost their start
    states, actions = t[roles["states"]], t[roles["actions"]]
    next_states = t.get(roles["next_states"])
    rewards = t[roles["rewards"]].reshape(snapshot.memory_size, snapshot.num_envs, -1)[..., 0]
    terminated = t[roles["terminated"]].reshape(snapshot.memory_size, snapshot.num_envs, -1)[..., 0]
    truncated_t = t.get(roles["truncated"])
    truncated = (truncated_t.reshape(snapshot.memory_size, snapshot.num_envs, -1)[..., 0]
                 if truncated_t is not None else np.zeros_like(terminated, bool))

    ep_rows: dict[str, list[Any]] = {k: [] for k in ("episode_id", "env_index", "num_steps", "return",
                                                     "terminated", "truncated", "partial_start",
                                                     "partial_end", "metadata")}
    step_parts: list[dict[str, Any]] = []
    episode_id = first_episode_id
    for env, order in enumerate(orders):
        if len(order) == 0:
            continue
        term, trunc = terminated[order, env].astype(bool), truncated[order, env].astype(bool)
        done = term | trunc
        ends = np.flatnonzero(done)
        if not len(ends) or ends[-1] != len(order) - 1:
            ends = np.append(ends, len(order) - 1)
        starts = np.concatenate([[0], ends[:-1] + 1])
        lengths = ends - starts + 1
        n_eps = len(ends)
        ep_ids = np.arange(episode_id, episode_id + n_eps)
        episode_id += n_eps
        # transition i goes to step row i + (episodes ended before i); each episode's
        # final-observation row follows its last transition
        ep_of = np.repeat(np.arange(n_eps), lengths)
        trans_rows = np.arange(len(order)) + ep_of
        final_rows = ends + np.arange(n_eps) + 1
        n_steps = len(order) + n_eps
        is_final = np.zeros(n_steps, bool)
        is_final[final_rows] = True
        step_in_ep = np.empty(n_steps, np.int64)
        step_in_ep[trans_rows] = np.arange(len(order)) - starts[ep_of]
        step_in_ep[final_rows] = lengths
        obs = np.empty((n_steps, *states.shape[2:]), states.dtype)
        obs[trans_rows] = states[order, env]
        obs_null = np.zeros(n_steps, bool)
        if next_states is not None:
            obs[final_rows] = next_states[order[ends], env]
        else:
            obs[final_rows] = 0
            obs_null[final_rows] = True
        act = np.zeros((n_steps, *actions.shape[2:]), actions.dtype)
        act[trans_rows] = actions[order, env]
        rew = np.zeros(n_steps, np.float64)
        rew[trans_rows] = rewards[order, env]
        disc = np.ones(n_steps, np.float64)
        disc[trans_rows] = np.where(term, 0.0, 1.0)
        last_term = term[ends]
        step_parts.append({
            "episode_id": ep_ids[np.repeat(np.arange(n_eps), lengths + 1)],
            "step": step_in_ep, "env_index": env,
            "observation": with_null_rows(to_arrow(obs), obs_null) if obs_null.any() else to_arrow(obs),
            "action": with_null_rows(to_arrow(act), is_final),
            "reward": pa.array(rew, mask=is_final), "discount": pa.array(disc, mask=is_final),
            "is_first": step_in_ep == 0, "is_last": is_final,
            "is_terminal": is_final & np.repeat(last_term, lengths + 1),
        })
        returns = np.add.reduceat(rewards[order, env].astype(np.float64), starts)
        partial_end = ~done[ends]
        ep_rows["episode_id"].extend(ep_ids.tolist())
        ep_rows["env_index"].extend([env] * n_eps)
        ep_rows["num_steps"].extend((lengths + 1).tolist())
        ep_rows["return"].extend(returns.tolist())
        ep_rows["terminated"].extend(last_term.tolist())
        ep_rows["truncated"].extend((trunc[ends] & ~last_term).tolist())
        ep_rows["partial_start"].extend([wrapped and i == 0 for i in range(n_eps)])
        ep_rows["partial_end"].extend(partial_end.tolist())
        ep_rows["metadata"].extend(
            {"source": "memory", "snapshot": snapshot.name, "snapshot_id": snapshot_id,
             "memory_index_first": int(order[s]), "memory_index_last": int(order[e])}
            for s, e in zip(starts, ends, strict=True))
    episodes = _schema.build("episodes", {"run_id": run_id, **ep_rows}, num_rows=len(ep_rows["episode_id"]))
    steps = (pa.concat_tables([_schema.build("steps", {"run_id": run_id, **p}, num_rows=len(p["step"]))
                               for p in step_parts])
             if step_parts else _schema.table("steps").arrow_schema().empty_table())
    return episodes, steps


def unroll_store(
    store: Any,
    *,
    run_id: str | None = None,
    snapshot_id: int | None = None,
    names: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """Unroll the store's memory snapshots into its ``episodes`` and ``steps`` tables.

    Each snapshot's episodes go under its run; episode ids continue after the run's
    highest. Steps are committed before their episodes rows.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        run_id: only this run's snapshots (default: all runs).
        snapshot_id: only this snapshot (default: all).
        names: role -> tensor name (see :func:`memory_to_episodes`).

    Returns:
        ``(episodes, steps)`` rows written.
    """
    import pyarrow.compute as pc

    from rlarrow.convert import snapshots
    from rlarrow.store import Store

    st = store if isinstance(store, Store) else Store.open(store)
    written = [0, 0]
    next_ids: dict[str, int] = {}
    for snap, (rid, sid) in snapshots(st, run_id=run_id, snapshot_id=snapshot_id, with_keys=True):
        if rid not in next_ids:
            ids = st.read("episodes", columns=["episode_id"], filter=pc.field("run_id") == rid)
            next_ids[rid] = (pc.max(ids.column(0)).as_py() + 1) if ids.num_rows else 0
        episodes, steps = memory_to_episodes(snap, run_id=rid, names=names,
                                             first_episode_id=next_ids[rid], snapshot_id=sid)
        st.append("steps", steps)
        st.append("episodes", episodes)
        next_ids[rid] += episodes.num_rows
        written[0] += episodes.num_rows
        written[1] += steps.num_rows
    return written[0], written[1]
