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
   data when no other transition of the snapshot has reward 0; when some do, zeros after
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
running when the snapshot was taken is ``partial_end``. A memory without ``truncated``
(skrl's DQN) shows no truncation: a time-limited episode runs on into the next one.

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

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import AssumptionWarning, InvalidInputError
from rlarrow.core.tensors import to_arrow, with_null_rows
from rlarrow.io.memory.snapshot import MemorySnapshot

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["AUTORESET_MODES", "DEFAULT_AUTORESET", "DEFAULT_NAMES", "ROLES", "ROLE_ALIASES",
           "AutoresetAssumptionWarning", "AutoresetDetection", "detect_autoreset", "memory_to_episodes",
           "resolve_names", "time_order", "unroll_store"]

#: The tensors an unrolling uses, by role; map your names with ``names={role: name}``.
ROLES = ("states", "actions", "rewards", "next_states", "terminated", "truncated")

#: Tensor names tried for each role, first found wins: skrl 2's, then skrl 1's.
#: ``next_states`` is ``next_<the states tensor's name>``.
DEFAULT_NAMES: dict[str, tuple[str, ...]] = {
    "states": ("observations", "states"), "actions": ("actions",), "rewards": ("rewards",),
    "terminated": ("terminated",), "truncated": ("truncated",)}

#: Role aliases accepted in ``names`` (skrl 2's words for the roles).
ROLE_ALIASES = {"observations": "states", "next_observations": "next_states"}

#: ``autoreset=`` values: ``"auto"`` reads the mode from the data (see the module docs).
AUTORESET_MODES = ("auto", "next-step", "same-step", "none")

#: The mode assumed where the data does not show it: gymnasium 1.x's default.
DEFAULT_AUTORESET = "next-step"

_REQUIRED = ("states", "actions", "rewards", "terminated")


class AutoresetAssumptionWarning(AssumptionWarning):
    """The autoreset mode of a memory could not be read from its data and was assumed."""


@dataclass(frozen=True)
class AutoresetDetection:
    """What a snapshot's data says about its vector env's autoreset mode.

    Attributes:
        mode: ``"next-step"``, ``"same-step"`` or ``"none"``; None when the data cannot tell.
        exact: the data proves ``mode`` (False: the most likely mode, or None).
        reason: why, in words.
        ends: episode ends followed by a transition in the snapshot (the evidence).
        matters: the modes would unroll the snapshot differently (False: no episode ends in
            it, or only at its last transitions with no ``next_states`` to read).
    """

    mode: str | None
    exact: bool
    reason: str
    ends: int
    matters: bool = True


def resolve_names(snapshot: MemorySnapshot, names: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Role -> tensor name for ``snapshot`` (None where the memory has no such tensor).

    ``names`` wins; otherwise skrl 2's names, then skrl 1's (see :data:`DEFAULT_NAMES`).

    Raises:
        InvalidInputError: ``names`` has a key that is not a role, or names a tensor the
            snapshot lacks, or a required tensor (states, actions, rewards, terminated)
            cannot be found.

    Example:
        >>> import numpy as np
        >>> from rlarrow.io.memory.snapshot import MemorySnapshot
        >>> z = np.zeros((2, 1, 1), np.float32)
        >>> snap = MemorySnapshot({"observations": z, "next_observations": z, "actions": z,
        ...                        "rewards": z, "terminated": z.astype(bool)})
        >>> resolve_names(snap)["next_states"], resolve_names(snap)["truncated"]
        ('next_observations', None)
    """
    t = snapshot.tensors
    where = snapshot.name or snapshot.path
    given: dict[str, str] = {}
    for key, name in (names or {}).items():
        role = ROLE_ALIASES.get(key, key)
        if role not in ROLES:
            raise InvalidInputError(where, f"names: {key!r} is not a role; the roles are {', '.join(ROLES)} "
                                    "(on the command line: --names states=NAME,actions=NAME,...)")
        if name not in t:
            raise InvalidInputError(where, f"names: {role}={name!r}, but the memory has no tensor {name!r}; "
                                    f"it has {sorted(t)}")
        given[role] = name
    out: dict[str, str | None] = {}
    for role in ROLES:
        if role in given:
            out[role] = given[role]
        elif role == "next_states":
            candidate = f"next_{out['states']}" if out.get("states") else None
            out[role] = candidate if candidate in t else None
        else:
            out[role] = next((n for n in DEFAULT_NAMES[role] if n in t), None)
    missing = [f"{r} (tried {', '.join(repr(n) for n in DEFAULT_NAMES[r])})" for r in _REQUIRED
               if out[r] is None]
    if missing:
        raise InvalidInputError(snapshot.path, f"cannot unroll: no tensor for {'; '.join(missing)}; "
                                f"it has {sorted(t)} (map names with names={{role: name}}, on the command "
                                "line --names states=NAME,...)")
    return out


def time_order(snapshot: MemorySnapshot) -> tuple[list[np.ndarray], bool]:
    """Each env's memory indices, oldest first, and whether that order is known.

    With the buffer state (a parquet export, :class:`rlarrow.record.replay.Memory`), a wrapped
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


def _flag(snapshot: MemorySnapshot, name: str | None) -> np.ndarray | None:
    """A per-transition scalar tensor as ``(memory_size, num_envs)``."""
    if name is None:
        return None
    return snapshot.tensors[name].reshape(snapshot.memory_size, snapshot.num_envs, -1)[..., 0]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise exact equality of two ``(n, ...)`` arrays, NaN equal to NaN."""
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    eq = a == b
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return np.asarray(eq.all(axis=1))


def detect_autoreset(snapshot: MemorySnapshot, *, names: Mapping[str, str] | None = None,
                     orders: list[np.ndarray] | None = None) -> AutoresetDetection:
    """Read a snapshot's autoreset mode from the transitions that follow episode ends.

    The rule is the module's (see :mod:`rlarrow.io.memory.unroll`): a transition after an end that is
    not a possible NEXT_STEP autoreset transition rules next-step out, and then continuity
    of ``next_states`` tells same-step from none; ends all followed by possible autoreset
    transitions mean next-step (exact only when no other transition has reward 0).

    Args:
        snapshot: the memory.
        names: role -> tensor name (see :func:`resolve_names`).
        orders: each env's indices in time order (default: :func:`time_order`).

    Returns:
        An :class:`AutoresetDetection`; its ``mode`` is None when no end is followed by a
        transition.
    """
    roles = resolve_names(snapshot, names)
    if orders is None:
        orders = time_order(snapshot)[0]
    states = snapshot.tensors[str(roles["states"])]
    next_states = snapshot.tensors[roles["next_states"]] if roles["next_states"] else None
    rewards, terminated = _flag(snapshot, roles["rewards"]), _flag(snapshot, roles["terminated"])
    truncated = _flag(snapshot, roles["truncated"])
    assert rewards is not None and terminated is not None
    n_ends = n_reset = n_continuous = n_zero_elsewhere = n_last = 0
    for env, order in enumerate(orders):
        done = terminated[order, env].astype(bool)
        if truncated is not None:
            done |= truncated[order, env].astype(bool)
        ends = np.flatnonzero(done[:-1])
        n_last += int(done[-1]) if len(done) else 0
        after = ends + 1
        rew = rewards[order, env]
        other = np.ones(len(order), bool)
        other[after] = False
        n_zero_elsewhere += int(np.count_nonzero(rew[other] == 0))
        if not len(ends):
            continue
        possible = (rew[after] == 0) & ~done[after]
        if next_states is not None:
            continuous = _same(states[order[after], env], next_states[order[ends], env])
            possible &= continuous
            n_continuous += int(continuous.sum())
        n_ends += len(ends)
        n_reset += int(possible.sum())
    if n_ends == 0:
        matters = bool(n_last) and next_states is not None
        return AutoresetDetection(None, False, "no episode end is followed by a transition in the snapshot",
                                  0, matters)
    if n_reset == n_ends:
        if n_zero_elsewhere:
            return AutoresetDetection(
                "next-step", False, f"all {n_ends} episode end(s) are followed by a reward-0 transition, but "
                f"{n_zero_elsewhere} other transition(s) have reward 0 too", n_ends)
        return AutoresetDetection("next-step", True, f"all {n_ends} episode end(s) are followed by an "
                                  "autoreset transition (reward 0, not done, and none elsewhere)", n_ends)
    not_next = f"{n_ends - n_reset} of {n_ends} episode end(s) are followed by a real step"
    if next_states is None:
        return AutoresetDetection("same-step", True, not_next + " (without next_states, same-step and none "
                                  "give the same rows)", n_ends)
    if n_continuous == n_ends:
        return AutoresetDetection("same-step", True, not_next + ", and next_states of each end is the state "
                                  "after it (the reset observation)", n_ends)
    if n_continuous == 0:
        return AutoresetDetection("none", True, not_next + ", and next_states of each end differs from the "
                                  "state after it (the true final observation)", n_ends)
    mode = "same-step" if 2 * n_continuous > n_ends else "none"
    return AutoresetDetection(mode, False, not_next + f"; next_states of {n_continuous} of {n_ends} end(s) "
                              "is the state after it: mixed", n_ends)


def _decide(snapshot: MemorySnapshot, autoreset: str, names: Mapping[str, str] | None,
            orders: list[np.ndarray]) -> tuple[str, str]:
    """The mode to unroll with and where it came from (``given``, ``data``, ``assumed``)."""
    if autoreset not in AUTORESET_MODES:
        raise InvalidInputError(snapshot.path, f"autoreset={autoreset!r}: choose one of "
                                f"{', '.join(AUTORESET_MODES)} (on the command line --autoreset)")
    if autoreset != "auto":
        return autoreset, "given"
    det = detect_autoreset(snapshot, names=names, orders=orders)
    if det.exact and det.mode is not None:
        return det.mode, "data"
    mode = det.mode or DEFAULT_AUTORESET
    if not det.matters:
        return mode, "assumed"
    warnings.warn(f"{snapshot.name or snapshot.path}: the autoreset mode does not show in the data "
                  f"({det.reason}); assumed {mode} (pass autoreset=, on the command line --autoreset "
                  f"{{next-step,same-step,none}}, to say it)", AutoresetAssumptionWarning, stacklevel=3)
    return mode, "assumed"


def memory_to_episodes(
    snapshot: MemorySnapshot,
    *,
    run_id: str,
    names: Mapping[str, str] | None = None,
    first_episode_id: int = 0,
    snapshot_id: int | None = None,
    autoreset: str = "auto",
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

    Returns:
        ``(episodes, steps)``, ready for ``store.append``.

    Raises:
        InvalidInputError: a required tensor (states, actions, rewards, terminated) is
            missing, ``names`` is wrong, or ``autoreset`` is not a mode.
    """
    roles = resolve_names(snapshot, names)
    t = snapshot.tensors
    orders, known = time_order(snapshot)
    if not known:
        warnings.warn(f"{snapshot.name or snapshot.path}: the export does not record the write pointer; "
                      "taking storage order as time order (export as parquet to keep it)",
                      AssumptionWarning, stacklevel=2)
    mode, mode_from = _decide(snapshot, autoreset, names, orders)
    wrapped = snapshot.is_full is not False  # the first episodes may have lost their start
    states, actions = t[str(roles["states"])], t[str(roles["actions"])]
    next_states = t[roles["next_states"]] if roles["next_states"] else None
    rewards, terminated = _flag(snapshot, roles["rewards"]), _flag(snapshot, roles["terminated"])
    assert rewards is not None and terminated is not None
    truncated_f = _flag(snapshot, roles["truncated"])
    truncated = truncated_f if truncated_f is not None else np.zeros_like(terminated, bool)

    ep_rows: dict[str, list[Any]] = {k: [] for k in ("episode_id", "env_index", "num_steps", "return",
                                                     "terminated", "truncated", "partial_start",
                                                     "partial_end", "metadata")}
    step_parts: list[dict[str, Any]] = []
    episode_id = first_episode_id
    for env, full_order in enumerate(orders):
        if len(full_order) == 0:
            continue
        done_all = terminated[full_order, env].astype(bool) | truncated[full_order, env].astype(bool)
        keep = np.ones(len(full_order), bool)
        if mode == "next-step":  # the transition after an end is the autoreset step (unless it ends too)
            keep[1:] = ~(done_all[:-1] & ~done_all[1:])
        pos = np.flatnonzero(keep)  # kept transitions' positions in full_order
        order = full_order[pos]
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
        # the final observation of each episode, and where it came from
        final_obs = np.zeros((n_eps, *states.shape[2:]), states.dtype)
        final_known = np.zeros(n_eps, bool)
        if next_states is not None:
            final_obs[:] = next_states[order[ends], env]
            final_known[:] = True
        final_from = np.where(final_known, "next_states", "unknown").astype(object)
        ended = done[ends]
        if mode == "same-step":  # next_states of an end is the next episode's reset observation
            final_known &= ~ended
            final_from[ended] = "unknown"
        elif mode == "next-step" and next_states is None:
            after = pos[ends] + 1  # the autoreset transition, when the snapshot holds it
            from_reset = ended & (after < len(full_order))
            from_reset[from_reset] = ~keep[after[from_reset]]
            final_obs[from_reset] = states[full_order[after[from_reset]], env]
            final_known |= from_reset
            final_from[from_reset] = "autoreset transition"
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
        obs[final_rows] = final_obs
        obs_null = np.zeros(n_steps, bool)
        obs_null[final_rows] = ~final_known
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
        ep_rows["episode_id"].extend(ep_ids.tolist())
        ep_rows["env_index"].extend([env] * n_eps)
        ep_rows["num_steps"].extend((lengths + 1).tolist())
        ep_rows["return"].extend(returns.tolist())
        ep_rows["terminated"].extend(last_term.tolist())
        ep_rows["truncated"].extend((trunc[ends] & ~last_term).tolist())
        ep_rows["partial_start"].extend([wrapped and i == 0 for i in range(n_eps)])
        ep_rows["partial_end"].extend((~ended).tolist())
        ep_rows["metadata"].extend(
            {"source": "memory", "snapshot": snapshot.name, "snapshot_id": snapshot_id,
             "memory_index_first": int(order[s]), "memory_index_last": int(order[e]),
             "autoreset": mode, "autoreset_from": mode_from, "final_observation": str(f)}
            for s, e, f in zip(starts, ends, final_from, strict=True))
    episodes = _schema.build("episodes", {"run_id": run_id, **ep_rows}, num_rows=len(ep_rows["episode_id"]))
    steps = (pa.concat_tables([_schema.build("steps", {"run_id": run_id, **p}, num_rows=len(p["step"]))
                               for p in step_parts])
             if step_parts else _schema.table("steps").arrow_schema().empty_table())
    return episodes, steps


def unroll_store(
    store: StoreLike,
    *,
    run_id: str | None = None,
    snapshot_id: int | None = None,
    names: Mapping[str, str] | None = None,
    autoreset: str = "auto",
) -> tuple[int, int]:
    """Unroll the store's memory snapshots into its ``episodes`` and ``steps`` tables.

    Each snapshot's episodes go under its run; episode ids continue after the run's
    highest. Steps are committed before their episodes rows.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        run_id: only this run's snapshots (default: all runs).
        snapshot_id: only this snapshot (default: all).
        names: role -> tensor name (see :func:`memory_to_episodes`).
        autoreset: the vector env's autoreset mode, or ``"auto"`` (see :func:`memory_to_episodes`).

    Returns:
        ``(episodes, steps)`` rows written.
    """
    import pyarrow.compute as pc

    from rlarrow.core.store import as_store
    from rlarrow.io.memory.stored import snapshots

    st = as_store(store)
    written = [0, 0]
    next_ids: dict[str, int] = {}
    for snap, (rid, sid) in snapshots(st, run_id=run_id, snapshot_id=snapshot_id, with_keys=True):
        if rid not in next_ids:
            ids = st.read("episodes", columns=["episode_id"], filter=pc.field("run_id") == rid)
            next_ids[rid] = (pc.max(ids.column(0)).as_py() + 1) if ids.num_rows else 0
        episodes, steps = memory_to_episodes(snap, run_id=rid, names=names,
                                             first_episode_id=next_ids[rid], snapshot_id=sid,
                                             autoreset=autoreset)
        st.append("steps", steps)
        st.append("episodes", episodes)
        next_ids[rid] += episodes.num_rows
        written[0] += episodes.num_rows
        written[1] += steps.num_rows
    return written[0], written[1]
