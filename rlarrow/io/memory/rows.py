"""A replay memory's transitions by role, one env at a time, in time order.

The building blocks of the unrolling (:mod:`rlarrow.io.memory.unroll`): which tensor plays
which role (:func:`resolve_names`), each env's rows oldest first (:func:`time_order`), and one
env's transitions gathered across consecutive snapshots (:class:`EnvRows`, :func:`env_rows`).

Example:
    >>> import numpy as np
    >>> from rlarrow.io.memory.snapshot import MemorySnapshot
    >>> z = np.zeros((3, 2, 1), np.float32)
    >>> snap = MemorySnapshot({"states": z, "actions": z, "rewards": z, "terminated": z.astype(bool)})
    >>> rows = env_rows([snap], [time_order(snap)[0]], resolve_names(snap), 1)
    >>> len(rows), rows.done().tolist()
    (3, [False, False, False])

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlarrow.core.errors import InvalidInputError
from rlarrow.io.memory.snapshot import MemorySnapshot

__all__: list[str] = []

#: The tensors an unrolling uses, by role; map your names with ``names={role: name}``.
ROLES = ("states", "actions", "rewards", "next_states", "terminated", "truncated")

#: Tensor names tried for each role, first found wins: skrl 2's, then skrl 1's.
#: ``next_states`` is ``next_<the states tensor's name>``.
DEFAULT_NAMES: dict[str, tuple[str, ...]] = {
    "states": ("observations", "states"), "actions": ("actions",), "rewards": ("rewards",),
    "terminated": ("terminated",), "truncated": ("truncated",)}

#: Role aliases accepted in ``names`` (skrl 2's words for the roles).
ROLE_ALIASES = {"observations": "states", "next_observations": "next_states"}

_REQUIRED = ("states", "actions", "rewards", "terminated")


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
                                    "(map names with names={role: name})")
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
                                f"it has {sorted(t)} (map names with names={{role: name}})")
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


def same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise exact equality of two ``(n, ...)`` arrays, NaN equal to NaN.

    Example:
        >>> same_rows(np.array([[1.0, np.nan], [1.0, 2.0]]), np.array([[1.0, np.nan], [1.0, 3.0]])).tolist()
        [True, False]
    """
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    eq = a == b
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return np.asarray(eq.all(axis=1))


@dataclass
class EnvRows:
    """One env's transitions in time order, across the snapshots of a segment (see :func:`env_rows`).

    ``snap`` is each row's snapshot (its position in the segment), ``index`` its memory index.
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray | None
    next_states: np.ndarray | None
    snap: np.ndarray
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    def done(self) -> np.ndarray:
        """Where an episode ended (terminated or truncated), per transition."""
        done = self.terminated.astype(bool)
        return done | self.truncated.astype(bool) if self.truncated is not None else done


def env_rows(snaps: Sequence[MemorySnapshot], orders: Sequence[list[np.ndarray]],
              roles: Mapping[str, str | None], env: int) -> EnvRows:
    """Env ``env``'s rows of ``snaps`` (each in its ``orders``), concatenated in time order."""

    def cat(role: str, flag: bool = False) -> np.ndarray | None:
        name = roles[role]
        if name is None:
            return None
        parts = []
        for snap, order in zip(snaps, orders, strict=True):
            t = snap.tensors[name]
            parts.append(t.reshape(snap.memory_size, snap.num_envs, -1)[order[env], env, 0] if flag
                         else t[order[env], env])
        return np.concatenate(parts)

    states, actions, rewards, terminated = cat("states"), cat("actions"), cat("rewards", True), \
        cat("terminated", True)
    assert states is not None and actions is not None and rewards is not None and terminated is not None
    return EnvRows(states, actions, rewards, terminated, cat("truncated", True), cat("next_states"),
                    np.concatenate([np.full(len(o[env]), k) for k, o in enumerate(orders)]).astype(np.int64),
                    np.concatenate([o[env] for o in orders]).astype(np.int64))
