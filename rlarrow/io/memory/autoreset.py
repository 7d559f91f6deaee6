"""The autoreset mode of a vector env, read from a replay memory's transitions.

What a vector env does after an episode ends (gymnasium's next-step, same-step, or no
autoreset) decides which transitions of a memory belong to episodes; the rule that reads
it from the data, and what is assumed where the data does not show it, is described in
:mod:`rlarrow.io.memory.unroll`, which uses :func:`decide_autoreset` for every series.

Example:
    >>> import numpy as np
    >>> from rlarrow.io.memory.snapshot import MemorySnapshot
    >>> done = np.zeros((5, 1, 1), bool); done[1] = True
    >>> rewards = np.ones((5, 1, 1), np.float32); rewards[2] = 0.0  # the step after the end: a reset
    >>> snap = MemorySnapshot({"states": np.zeros((5, 1, 1), np.float32), "actions": rewards,
    ...                        "rewards": rewards, "terminated": done})
    >>> detect_autoreset(snap).mode
    'next-step'
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlarrow.core.errors import AssumptionWarning, InvalidInputError
from rlarrow.io.memory.rows import EnvRows, env_rows, resolve_names, same_rows, time_order
from rlarrow.io.memory.snapshot import MemorySnapshot

__all__ = ["AutoresetAssumptionWarning"]

#: ``autoreset=`` values: ``"auto"`` reads the mode from the data (see the module docs).
AUTORESET_MODES = ("auto", "next-step", "same-step", "none")

#: The mode assumed where the data does not show it: gymnasium 1.x's default.
DEFAULT_AUTORESET = "next-step"

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


def detect_in_rows(envs: Sequence[EnvRows], cuts: Sequence[np.ndarray] | None = None) -> AutoresetDetection:
    """The autoreset rule (see :mod:`rlarrow.io.memory.unroll`) over each env's rows (``cuts``: more ends)."""
    n_ends = n_reset = n_continuous = n_zero_elsewhere = n_last = 0
    has_next = False
    for i, rows in enumerate(envs):
        if not len(rows):
            continue
        done = rows.done()
        if cuts is not None:
            done = done | cuts[i]
        ends = np.flatnonzero(done[:-1])
        n_last += int(done[-1])
        after = ends + 1
        other = np.ones(len(rows), bool)
        other[after] = False
        other[0] = False  # what came before the first row is unknown: it may follow an end too
        n_zero_elsewhere += int(np.count_nonzero(rows.rewards[other] == 0))
        has_next = rows.next_states is not None
        if not len(ends):
            continue
        possible = (rows.rewards[after] == 0) & ~done[after]
        if rows.next_states is not None:
            continuous = same_rows(rows.states[after], rows.next_states[ends])
            possible &= continuous
            n_continuous += int(continuous.sum())
        n_ends += len(ends)
        n_reset += int(possible.sum())
    if n_ends == 0:
        return AutoresetDetection(None, False, "no episode end is followed by a transition in the snapshot",
                                  0, bool(n_last) and has_next)
    if n_reset == n_ends:
        if n_zero_elsewhere:
            return AutoresetDetection(
                "next-step", False, f"all {n_ends} episode end(s) are followed by a reward-0 transition, but "
                f"{n_zero_elsewhere} other transition(s) have reward 0 too", n_ends)
        return AutoresetDetection("next-step", True, f"all {n_ends} episode end(s) are followed by an "
                                  "autoreset transition (reward 0, not done, and none elsewhere)", n_ends)
    not_next = f"{n_ends - n_reset} of {n_ends} episode end(s) are followed by a real step"
    if not has_next:
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
    return detect_in_rows([env_rows([snapshot], [orders], roles, e) for e in range(snapshot.num_envs)])


def decide_autoreset(where: str | None, autoreset: str,
                     detect: Callable[[], AutoresetDetection]) -> tuple[str, str]:
    """The mode to unroll with and where it came from (``given``, ``data``, ``assumed``).

    ``detect`` reads the data (:func:`detect_in_rows`), called only for ``autoreset="auto"``;
    an assumption that matters is warned as :class:`AutoresetAssumptionWarning`.
    """
    if autoreset not in AUTORESET_MODES:
        raise InvalidInputError(where, f"autoreset={autoreset!r}: choose one of "
                                f"{', '.join(AUTORESET_MODES)}")
    if autoreset != "auto":
        return autoreset, "given"
    det = detect()
    if det.exact and det.mode is not None:
        return det.mode, "data"
    mode = det.mode or DEFAULT_AUTORESET
    if not det.matters:
        return mode, "assumed"
    warnings.warn(f"{where}: the autoreset mode does not show in the data "
                  f"({det.reason}); assumed {mode} (pass autoreset='next-step', 'same-step' "
                  f"or 'none' to say it)", AutoresetAssumptionWarning, stacklevel=4)
    return mode, "assumed"
