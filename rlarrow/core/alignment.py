"""Step alignments: dm_env order and Minari's layout to and from RLDS, losslessly.

rlarrow stores steps in RLDS alignment: row *t* holds observation *t*, the action taken
at it, and the reward and discount that followed; an episode of N actions has N + 1 rows,
the last with null action, reward and discount (see ``docs/format.md``).

* **dm_env order** (envlogger): timestep *t* holds the reward and discount that *led to*
  observation *t*, with the action that produced it; the FIRST timestep has none.
* **Minari**: N + 1 observations and N actions, rewards, terminations and truncations
  (on disk the last row pads them with 0/False).

These functions shift one episode's per-step columns; observations and per-step
metadata do not move. Values are passed through untouched (no dtype changes), so
converting and converting back gives the same values.

Example:
    >>> from rlarrow.core import alignment
    >>> rlds = alignment.dm_env_to_rlds(step_type=[0, 1, 2], action=[None, 1, 0],
    ...                                 reward=[None, 0.0, 1.0], discount=[None, 1.0, 0.0])
    >>> rlds["action"], rlds["reward"], rlds["is_terminal"]
    ([1, 0, None], [0.0, 1.0, None], [False, False, True])
    >>> alignment.rlds_to_dm_env(**{k: rlds[k] for k in alignment.RLDS_COLUMNS})["action"]
    [None, 1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlarrow.core.errors import ArgumentError

__all__ = ["dm_env_to_rlds", "last_null", "minari_to_rlds", "rlds_to_dm_env", "rlds_to_minari"]

#: dm_env.StepType values (dm_env is not needed to use this module).
FIRST, MID, LAST = 0, 1, 2

#: The step columns an alignment conversion produces or consumes.
RLDS_COLUMNS = ("action", "reward", "discount", "is_first", "is_last", "is_terminal")


def _is_zero(x: Any) -> bool:
    try:
        return bool(x == 0)
    except (TypeError, ValueError):  # array discounts: terminal when all are zero
        import numpy as np

        return bool(np.all(np.asarray(x) == 0))


def dm_env_to_rlds(
    *,
    step_type: Sequence[Any],
    action: Sequence[Any],
    reward: Sequence[Any],
    discount: Sequence[Any],
) -> dict[str, Any]:
    """Convert one episode from dm_env order (envlogger's) to RLDS alignment.

    Args:
        step_type: per timestep, ``FIRST``/``MID``/``LAST`` (or ``dm_env.StepType``).
        action: per timestep, the action that led to it (None for the FIRST one).
        reward: per timestep, the reward that came with it (None for the FIRST one).
        discount: per timestep, the discount that came with it (None for the FIRST one).

    Returns:
        The RLDS columns (:data:`RLDS_COLUMNS`), one row per timestep, plus
        ``first_reward`` and ``first_discount``: what the FIRST timestep carried, None
        under the dm_env contract (an importer keeps anything else in the episode's
        metadata so nothing is lost).

    A recording that stopped mid-episode (no LAST timestep) gives ``is_last`` false
    everywhere and a last row with null action: the action taken there was never recorded.

    Raises:
        ValueError: the columns differ in length, or the episode does not start with a
            FIRST timestep (the action that led into it could not be kept).
    """
    n = len(step_type)
    if not (len(action) == len(reward) == len(discount) == n):
        raise ArgumentError(f"columns differ in length: step_type {n}, action {len(action)}, "
                            f"reward {len(reward)}, discount {len(discount)}")
    if n == 0:
        return {**{c: [] for c in RLDS_COLUMNS}, "first_reward": None, "first_discount": None}
    types = [int(t) for t in step_type]
    if types[0] != FIRST:
        raise ArgumentError("a dm_env episode must start with a FIRST timestep; got step type "
                            f"{types[0]} (the action and reward that led into it would be lost)")
    if action[0] is not None:
        raise ArgumentError("the FIRST timestep of a dm_env episode has an action; dm_env order "
                            "has none there (is this already RLDS-aligned?)")
    if any(t == FIRST for t in types[1:]):
        raise ArgumentError("a FIRST timestep in the middle: split the stream into episodes first")
    ended = types[-1] == LAST
    return {
        "action": [*action[1:], None],
        "reward": [*reward[1:], None],
        "discount": [*discount[1:], None],
        "is_first": [True] + [False] * (n - 1),
        "is_last": [False] * (n - 1) + [ended],
        "is_terminal": [False] * (n - 1) + [ended and _is_zero(discount[-1])],
        "first_reward": reward[0],
        "first_discount": discount[0],
    }


def rlds_to_dm_env(
    *,
    action: Sequence[Any],
    reward: Sequence[Any],
    discount: Sequence[Any],
    is_first: Sequence[bool],
    is_last: Sequence[bool],
    is_terminal: Sequence[bool] | None = None,
    first_reward: Any = None,
    first_discount: Any = None,
) -> dict[str, list[Any]]:
    """Convert one episode from RLDS alignment back to dm_env order.

    The inverse of :func:`dm_env_to_rlds`: returns ``step_type``, ``action``, ``reward``
    and ``discount`` per timestep. ``is_terminal`` is accepted for symmetry; dm_env
    carries it in the LAST timestep's discount.

    Raises:
        ValueError: the columns differ in length or the episode does not start at its
            first step.
    """
    del is_terminal
    n = len(action)
    if not (len(reward) == len(discount) == len(is_first) == len(is_last) == n):
        raise ArgumentError("columns differ in length")
    if n == 0:
        return {"step_type": [], "action": [], "reward": [], "discount": []}
    if not is_first[0]:
        raise ArgumentError("the episode does not start at its first step (partial_start); "
                            "dm_env order cannot express that")
    step_type = [FIRST] + [MID] * (n - 1)
    if is_last[-1]:
        if n == 1:
            raise ArgumentError("a one-step episode cannot be both FIRST and LAST in dm_env order")
        step_type[-1] = LAST
    return {
        "step_type": step_type,
        "action": [None, *action[:-1]],
        "reward": [first_reward, *reward[:-1]],
        "discount": [first_discount, *discount[:-1]],
    }


def minari_to_rlds(
    *,
    action: Sequence[Any],
    reward: Sequence[Any],
    termination: Sequence[bool],
    truncation: Sequence[bool],
    num_observations: int | None = None,
) -> dict[str, list[Any]]:
    """Convert one Minari episode (N actions, N + 1 observations) to RLDS alignment.

    Pass the N real actions, rewards, terminations and truncations (drop the padding row
    Minari writes on disk). The result has N + 1 rows: row *t* takes action and reward
    *t*; row N holds the final observation with null action and reward (not Minari's
    0/False padding). Minari stores no discount, so ``discount`` is null.

    Raises:
        ValueError: the columns differ in length, ``num_observations`` is not N + 1, or the
            episode terminates or truncates before its last step.
    """
    n = len(action)
    if not (len(reward) == len(termination) == len(truncation) == n):
        raise ArgumentError(f"columns differ in length: action {n}, reward {len(reward)}, "
                            f"termination {len(termination)}, truncation {len(truncation)}")
    if num_observations is not None and num_observations != n + 1:
        raise ArgumentError(f"a Minari episode of {n} actions has {n + 1} observations; "
                            f"got {num_observations}")
    early = [t for t in range(n - 1) if termination[t] or truncation[t]]
    if early:
        raise ArgumentError(f"termination/truncation before the last step (at {early[:5]}): split "
                            "the episode there first")
    ended = bool(n) and bool(termination[-1] or truncation[-1])
    return {
        "action": [*action, None],
        "reward": [*reward, None],
        "discount": [None] * (n + 1),
        "is_first": [True] + [False] * n,
        "is_last": [False] * n + [ended],
        "is_terminal": [False] * n + [bool(n) and bool(termination[-1])],
    }


def rlds_to_minari(
    *,
    action: Sequence[Any],
    reward: Sequence[Any],
    is_last: Sequence[bool],
    is_terminal: Sequence[bool],
) -> dict[str, list[Any]]:
    """The inverse of :func:`minari_to_rlds`: N actions, rewards, terminations, truncations."""
    n = len(action) - 1
    if n < 0:
        raise ArgumentError("an RLDS episode has at least one step (the first observation)")
    terminated = bool(is_terminal[-1])
    truncated = bool(is_last[-1]) and not terminated
    return {
        "action": list(action[:n]),
        "reward": list(reward[:n]),
        "termination": [False] * (n - 1) + [terminated] if n else [],
        "truncation": [False] * (n - 1) + [truncated] if n else [],
    }


def last_null(col: Any, n: Any) -> Any:
    """The RLDS last-step rule on an Arrow column: its first ``n`` values, then a null.

    An episode of ``n`` actions has ``n + 1`` rows; the last holds the final observation,
    with no action, reward or discount. ``col`` (an Arrow array or chunked array of at
    least ``n`` values, of any type rlarrow stores: tensors keep their type) gives the
    first ``n``; what it holds past them (a format's padding) is dropped. This is the one
    place the rule is written: every reader of a format that pads or omits the last step
    applies it here.

    ``n`` may instead be a boolean mask, one value per row of ``col``: the rows of several
    episodes, null where the mask says a row is an episode's last step (what
    :class:`rlarrow.core.episode_builder.Transitions` gives for a block of transitions).

    Example:
        >>> import pyarrow as pa
        >>> last_null(pa.array([1.0, 2.0, 0.0]), 2).to_pylist()
        [1.0, 2.0, None]
        >>> last_null(pa.array([1, 2, 0, 3]), [False, False, True, False]).to_pylist()
        [1, 2, None, 3]
    """
    import numpy as np
    import pyarrow as pa

    from rlarrow.core.tensors import with_null_rows

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not isinstance(n, (int, np.integer)):
        mask = np.asarray(n, bool)
        if len(mask) != len(arr):
            raise ArgumentError(f"last_null: a mask of {len(mask)} rows for a column of {len(arr)}")
        return with_null_rows(arr, mask)
    if not len(arr):  # (an episode of no action: its one row has none)
        return pa.nulls(n + 1, arr.type)
    if isinstance(arr.type, pa.ExtensionType) or pa.types.is_fixed_size_list(arr.type):
        last = np.zeros(n + 1, bool)
        last[n] = True
        if len(arr) < n + 1:  # (nothing past the n values: a row to null out)
            arr = pa.concat_arrays([arr, arr.slice(0, 1)])
        return with_null_rows(arr.slice(0, n + 1), last)
    return pa.concat_arrays([arr.slice(0, n), pa.nulls(1, arr.type)])
