"""The one episode builder: RLDS ``steps`` rows and ``episodes`` rows from per-step columns.

Every way rlarrow gets episodes ends here: a recorder's commit (:class:`rlarrow.core.episodes.Sink`),
a block of D4RL or robomimic transitions (:mod:`rlarrow.io.hdf5`), one Minari episode
(:mod:`rlarrow.io.minari`) and a replay memory unrolled (:mod:`rlarrow.io.memory.unroll`).
What they share is written once:

* :func:`step_flags`: the ``step``, ``is_first``, ``is_last`` and ``is_terminal`` columns of
  consecutive episodes (and each row's episode), from each episode's rows and how it ends;
* :class:`Transitions`: ``k`` transitions with episode ends among them laid out in RLDS
  alignment, one more step after each end (the final observation, with null action, reward
  and discount: the last-step rule, :func:`rlarrow.core.alignment.last_null`);
* :func:`returns`: each episode's return, the sum of its rewards in float64;
* :func:`outcome`: an ``episodes`` row's ``terminated``, ``truncated`` and ``partial_end``
  from whether the episode ended and whether it terminated.

Example:
    >>> import numpy as np
    >>> t = Transitions(4, ends=[1])            # 4 transitions, an episode ends after the 2nd
    >>> t.total, t.is_final.tolist()            # 5 rows: a final step after the end
    (5, [False, False, True, False, False])
    >>> flags = t.flags(first_step=0, terminal=[True])
    >>> flags["step"].tolist(), flags["is_terminal"].tolist()
    ([0, 1, 2, 0, 1], [False, False, True, False, False])
    >>> t.spread(np.array([10, 11, 12, 13]), finals=[99]).tolist()
    [10, 11, 99, 12, 13]
    >>> returns(np.array([1.0, 2.0, 3.0, 4.0]), t.starts[:1]).tolist()
    [10.0]
    >>> outcome(ended=np.array([True, False]), terminated=np.array([True, False]))["partial_end"].tolist()
    [False, True]

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.alignment import last_null

__all__: list[str] = []


def step_flags(lengths: Any, *, first_step: Any = 0, is_last: Any = True,
               is_terminal: Any = False) -> dict[str, np.ndarray]:
    """The per-row columns of consecutive episodes' rows: ``episode``, ``step`` and the RLDS flags.

    Args:
        lengths: each episode's rows here, in order (an episode may have none: nothing of it).
        first_step: each episode's first row's step (or one for all): more than 0 for an
            episode whose earlier rows came before (an earlier commit or block).
        is_last: per episode (or one for all), whether its last row here is its last step.
        is_terminal: per episode (or one for all), whether that last step is terminal
            (only where ``is_last``).

    Returns:
        ``episode`` (each row's episode: its position in ``lengths``), ``step``, and the
        ``is_first`` (step 0), ``is_last`` and ``is_terminal`` columns, one value per row.

    Example:
        >>> f = step_flags([3, 2], first_step=[5, 0], is_last=[True, False])
        >>> f["step"].tolist(), f["is_first"].tolist(), f["is_last"].tolist()
        ([5, 6, 7, 0, 1], [False, False, False, True, False], [False, False, True, False, False])
    """
    lengths = np.asarray(lengths, np.int64)
    firsts = np.cumsum(lengths) - lengths  # each episode's first row
    total = int(firsts[-1] + lengths[-1]) if len(lengths) else 0
    episode = np.repeat(np.arange(len(lengths)), lengths)
    step = np.arange(total, dtype=np.int64) + np.repeat(np.asarray(first_step, np.int64) - firsts, lengths)
    lasts = firsts + lengths - 1
    last = np.zeros(total, bool)
    terminal = np.zeros(total, bool)
    if lengths.all():  # (a recorder's commit: no episode without rows, nothing to leave out)
        last[lasts] = is_last
        terminal[lasts] = is_terminal
    else:
        some = lengths > 0
        last[lasts[some]] = np.broadcast_to(np.asarray(is_last, bool), lengths.shape)[some]
        terminal[lasts[some]] = np.broadcast_to(np.asarray(is_terminal, bool), lengths.shape)[some]
    return {"episode": episode, "step": step, "is_first": step == 0, "is_last": last, "is_terminal": terminal}


class Transitions:
    """``k`` transitions, and the episode ends among them, laid out as RLDS steps.

    A transition is a step's observation with the action taken at it and the reward that
    followed. ``ends`` are the transitions after which an episode ends: each adds one step
    after it (row :attr:`fin`) holding the episode's final observation, with no action,
    reward or discount. Transitions after the last end belong to an episode still open
    (it goes on in the next block, or the data stops in it).

    Attributes:
        src: each transition's row.
        fin: each end's final step's row.
        total: rows (``k`` plus one per end).
        is_final: true on the final steps' rows.
        starts: each episode's first transition (``len(ends) + 1`` of them, the open one last).
        lengths: each episode's rows (its transitions, and its final step if it ended).
    """

    __slots__ = ("fin", "is_final", "k", "lengths", "src", "starts", "total")

    def __init__(self, k: int, ends: Any) -> None:
        ends = np.asarray(ends, np.int64)
        self.k = k
        before = np.searchsorted(ends, np.arange(k), side="left")  # ends strictly before each row
        self.src = np.arange(k) + before
        self.fin = ends + np.arange(len(ends)) + 1
        self.total = k + len(ends)
        self.is_final = np.zeros(self.total, bool)
        self.is_final[self.fin] = True
        self.starts = np.concatenate([[0], ends + 1]).astype(np.int64)
        self.lengths = np.diff(np.append(self.starts, k)) + np.append(np.ones(len(ends), np.int64), 0)

    def flags(self, *, first_step: int = 0, terminal: Any = (), is_last: Any = True) -> dict[str, np.ndarray]:
        """:func:`step_flags` of the rows: ``first_step`` of the first episode, ``terminal`` per end.

        ``is_last``: per end (or one for all), whether its final step is the episode's last
        (a snapshot's cut marks it so too); the open episode has no last step here.
        """
        ended = len(self.fin)
        first = np.zeros(ended + 1, np.int64)
        first[0] = first_step
        last = np.append(np.broadcast_to(np.asarray(is_last, bool), (ended,)), False)
        return step_flags(self.lengths, first_step=first, is_last=last,
                          is_terminal=np.append(np.asarray(terminal, bool).reshape(ended), False))

    def spread(self, values: np.ndarray, finals: Sequence[Any] | np.ndarray | None = None) -> np.ndarray:
        """``values`` (one per transition) at their rows, ``finals`` (one per end; None: zeros) after."""
        out = np.zeros((self.total, *values.shape[1:]), values.dtype)
        out[self.src] = values
        if isinstance(finals, np.ndarray):
            out[self.fin] = finals
        elif finals is not None:
            for j, f in zip(self.fin.tolist(), finals, strict=True):
                if f is not None:
                    out[j] = f
        return out

    def last_null(self, column: pa.Array) -> pa.Array:
        """``column`` (one value per row) with the final steps' values null: the RLDS last-step rule."""
        return last_null(column, self.is_final) if len(self.fin) else column


def returns(rewards: np.ndarray, starts: Any) -> np.ndarray:
    """Each episode's return: the float64 sum of its rewards (``rewards[starts[i]:starts[i + 1]]``).

    One sum for every builder, the same whatever the blocks the rewards came in (an episode
    over several blocks is summed whole). No rewards: 0.

    Example:
        >>> returns(np.array([1, 2, 3], np.float32), [0, 2]).tolist()
        [3.0, 3.0]
    """
    values = np.asarray(rewards).astype(np.float64, copy=False)
    if not len(values):
        return np.zeros(len(starts), np.float64)
    return np.add.reduceat(values, np.asarray(starts, np.int64))


def outcome(*, ended: Any, terminated: Any, truncated: Any = None) -> dict[str, Any]:
    """An ``episodes`` row's ``terminated``, ``truncated`` and ``partial_end`` (scalars or arrays).

    An episode that ended (by its environment) terminated or was truncated; one that did
    not is ``partial_end`` (the data stops in it). ``truncated``: where a format keeps its
    own flag (Minari's, which may be set with termination); else ``ended and not terminated``.

    Example:
        >>> outcome(ended=True, terminated=False)
        {'terminated': False, 'truncated': True, 'partial_end': False}
    """
    ended_, terminated_ = np.asarray(ended, bool), np.asarray(terminated, bool)
    truncated_ = ended_ & ~terminated_ if truncated is None else np.asarray(truncated, bool)
    if ended_.ndim == 0:
        return {"terminated": bool(terminated_), "truncated": bool(truncated_), "partial_end": not ended_}
    return {"terminated": terminated_, "truncated": truncated_, "partial_end": ~ended_}
