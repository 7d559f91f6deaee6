"""The buffer of samples a stream batches from: rows laid out so that each window is consecutive.

:class:`Windows` holds what :meth:`rlarrow.train.samples.SampleSource.read_windows` read of
row groups (flat NumPy columns) and where each sample starts; a batch is one gather
(:meth:`Windows.gather`), of rows, windows of ``L`` steps, ``delta_steps`` frames with their
pad masks, or transitions. A sampler (:mod:`rlarrow.train.sampling`) concatenates reads into
one buffer and picks the samples of each batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlarrow.core import padding as _padding
from rlarrow.core import transitions as _transitions

__all__ = ["Windows"]


def _under(key: str, name: str) -> bool:
    """Whether flat column ``key`` is ``name`` or one of its dict leaves."""
    return key == name or key.startswith(name + ".")


class Windows:
    """Samples of a read, kept as rows: window *i* is rows ``starts[i] .. starts[i] + L - 1``.

    ``base`` holds flat NumPy columns whose rows are laid out so that every window is L
    consecutive rows (an episode's continuation placed right after it), so a window costs
    one start index however long it is, and a batch is one gather. ``gather`` makes the
    samples: ``(n, L, ...)`` windows (L > 1), rows (L == 1), or transitions (windows of two
    steps, ``observation`` / ``next_observation``...).

    Example:
        >>> import numpy as np
        >>> w = Windows({"x": np.arange(6)}, np.array([0, 3]), 3)
        >>> w.gather()["x"].tolist()
        [[0, 1, 2], [3, 4, 5]]
        >>> w.gather(np.array([1]))["x"].tolist()
        [[3, 4, 5]]
    """

    __slots__ = ("_window_bytes", "base", "bounds", "deltas", "flags", "length", "origins", "rows", "starts",
                 "totals", "transitions", "videos")

    def __init__(self, base: dict[str, np.ndarray], starts: np.ndarray, length: int,
                 transitions: bool = False, flags: dict[str, np.ndarray] | None = None, *,
                 deltas: dict[str, np.ndarray] | None = None,
                 bounds: tuple[np.ndarray, ...] | None = None,
                 videos: dict[str, tuple[Any, tuple[int, ...]]] | None = None) -> None:
        #: video-layout fields: their ``base`` column holds frame references (``VideoRefs``),
        #: decoded into uint8 frames of the shape given when gathered
        self.videos = videos or {}
        self.starts = starts
        self.length = length
        self.transitions = transitions
        #: ``delta_steps``: offsets per column, and each sample's episode rows in ``base``
        #: (first, last: the offsets are clamped to them, and padded outside) and its
        #: episode's first and last frame (:func:`rlarrow.core.padding.query`)
        self.deltas = deltas
        self.bounds = bounds
        #: rows in ``base``
        self.rows = len(next(iter(base.values()))) if base else int(starts.max(initial=-1)) + length
        #: transitions: their flags (``done``, ``truncated``), one per window, made once here
        #: from the next rows (the columns they come from leave ``base``)
        self.flags = flags if flags is not None else {}
        if transitions and flags is None:
            self.flags = _transitions.flags({k: np.take(v, starts + 1, axis=0) for k, v in base.items()
                                             if k in _transitions.FLAG_ONLY})
            base = {k: v for k, v in base.items() if k not in _transitions.FLAG_ONLY}
        self.base = base
        self._window_bytes: int | None = None
        #: each sample's origin, ``unit << 32 | ordinal`` (its row group's index in the source
        #: and its place among that row group's samples), and each row group's sample count:
        #: what an epoch's ledger records (:class:`rlarrow.train.sampling.Ledger`); set by a sampler
        self.origins: np.ndarray | None = None
        self.totals: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.starts)

    def window_bytes(self) -> int:
        """Bytes one sample takes once gathered (an upper bound; worked out once)."""
        if self._window_bytes is None:
            row = {k: v[:1].nbytes + (math.prod(self.videos[k][1]) if k in self.videos else 0)
                   for k, v in self.base.items()}
            if self.deltas is not None:
                self._window_bytes = sum(
                    n * max((len(d) for name, d in self.deltas.items() if _under(k, name)), default=1)
                    for k, n in row.items()) + sum(len(d) for d in self.deltas.values()) + 16
            else:
                self._window_bytes = sum(row.values()) * max(self.length, 2) + 16
        return self._window_bytes

    def _delta(self, key: str) -> str | None:
        """The ``deltas`` entry a flat column falls under (itself, or a dict it is a leaf of)."""
        assert self.deltas is not None
        return next((name for name in self.deltas if _under(key, name)), None)

    def gather(self, which: np.ndarray | None = None, out: Any = None) -> dict[str, np.ndarray]:
        """The samples of windows ``which`` (indices into :attr:`starts`; None: all), as fresh arrays.

        ``out(shape, dtype)``, when given, returns the array each gathered column is
        written into (a worker's shared-memory block).
        """
        got = self._gather(which, out)
        if self.videos:  # frame references to frames, for this batch only
            for key in list(got):
                source = key if key in self.videos else next(
                    (k for k in self.videos if key in _transitions.next_names(k)), None)
                if source is not None:
                    refs, shape = self.videos[source]
                    got[key] = refs.decode(got[key], shape, out)
        return got

    def _gather(self, which: np.ndarray | None, out: Any) -> dict[str, np.ndarray]:
        s = self.starts if which is None else self.starts[which]
        L = self.length

        def take(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
            # (the method: np.take's dispatch wrapper cost 1.5 us a column, 10 us a batch)
            if out is None:
                return v.take(idx, axis=0)
            # (mode="clip": the indices are in range; with the default mode NumPy gathers into
            # a temporary and copies it, fresh memory at every call)
            return v.take(idx, axis=0, out=out(idx.shape + v.shape[1:], v.dtype), mode="clip")

        if self.deltas is not None:  # each column at its offsets, LeRobot's clamp, and pad masks
            assert self.bounds is not None
            lo, hi, first, last = (b[:, None] if which is None else b[which][:, None] for b in self.bounds)
            clamped: dict[str, np.ndarray] = {}
            got: dict[str, np.ndarray] = {}
            for name, d in self.deltas.items():
                mask = _padding.mask_name(name)
                null = self.base.get(mask)
                if null is None:  # (a column without nulls)
                    null = np.zeros(self.rows, bool)
                clamped[name], got[mask] = _padding.query(s[:, None] + d, lo, hi, first, last, null)
            for k, v in self.base.items():
                if k in got:
                    continue
                under = self._delta(k)
                got[k] = take(v, s) if under is None or _padding.is_mask(k) else take(v, clamped[under])
            return got
        if self.transitions:  # the step's columns at s, the next row's at s + 1, as from_steps orders them
            got = {}
            after = s + 1
            for k, v in self.base.items():
                if _transitions.from_step_row(k):
                    got[k] = take(v, s)
                for name in _transitions.next_names(k):
                    got[name] = take(v, after)
            for k, v in self.flags.items():
                got[k] = take(v, which) if which is not None else v.copy()
            return got
        if L == 1:
            return {k: take(v, s) for k, v in self.base.items()}
        idx = s[:, None] + np.arange(L)
        return {k: take(v, idx) for k, v in self.base.items()}

    def compact(self, which: np.ndarray) -> Windows:
        """Only windows ``which``, with only their rows kept (and their origins)."""
        made = self._compact(which)
        made.origins = None if self.origins is None else self.origins[which]
        made.totals = self.totals
        return made

    def _compact(self, which: np.ndarray) -> Windows:
        if self.deltas is not None:  # each sample's rows from its lowest offset (or itself) to its highest
            assert self.bounds is not None
            offsets = np.concatenate([*self.deltas.values(), [0]])  # (LeRobot's clamp reads its frames)
            low, span = int(offsets.min()), int(offsets.max() - offsets.min()) + 1
            s = self.starts[which]
            lo, hi = self.bounds[0][which], self.bounds[1][which]
            idx = np.clip(s[:, None] + np.arange(low, low + span), lo[:, None], hi[:, None]).reshape(-1)
            at = np.arange(len(which), dtype=np.int64) * span
            bounds = tuple(at + np.clip(b[which] - s - low, 0, span - 1) for b in self.bounds)
            return Windows({k: np.take(v, idx, axis=0) for k, v in self.base.items()}, at - low, 1,
                           deltas=self.deltas, bounds=bounds, videos=self.videos)
        L = self.length
        idx = (self.starts[which][:, None] + np.arange(L)).reshape(-1)
        return Windows({k: np.take(v, idx, axis=0) for k, v in self.base.items()},
                       np.arange(len(which), dtype=np.int64) * L, L, self.transitions,
                       {k: v[which] for k, v in self.flags.items()} if self.transitions else None,
                       videos=self.videos)

    @classmethod
    def concat(cls, parts: Sequence[Windows], scratch: dict[str, np.ndarray] | None = None) -> Windows:
        """Several reads as one (their rows one after the other).

        ``scratch`` keeps the memory the rows are copied into between calls (a buffer
        refilled each time: fresh memory costs page faults, about as much as the copy).
        Windows made this way share it: gather from them before the next call.
        """
        if len(parts) == 1:
            return parts[0]
        offsets = np.cumsum([0] + [p.rows for p in parts[:-1]])
        total = int(offsets[-1]) + parts[-1].rows
        base = {}
        for k, first in parts[0].base.items():
            arrays = [p.base[k] for p in parts]
            held = scratch.get(k) if scratch is not None else None
            if held is None or held.shape[1:] != first.shape[1:] or held.dtype != first.dtype \
                    or len(held) < total:
                held = np.empty((total + total // 4, *first.shape[1:]), dtype=first.dtype)
                if scratch is not None:
                    scratch[k] = held
            base[k] = np.concatenate(arrays, out=held[:total]) if first.dtype != object \
                else np.concatenate(arrays)
        starts = np.concatenate([p.starts + o for p, o in zip(parts, offsets, strict=True)])
        flags = {k: np.concatenate([p.flags[k] for p in parts]) for k in parts[0].flags}
        bounds = None
        if parts[0].bounds is not None:
            bounds = tuple(np.concatenate([p.bounds[i] + o for p, o in zip(parts, offsets, strict=True)])  # type: ignore[index]
                           for i in range(len(parts[0].bounds)))
        made = cls(base, starts, parts[0].length, parts[0].transitions,
                   flags if parts[0].transitions else None, deltas=parts[0].deltas, bounds=bounds,
                   videos={k: v for p in parts for k, v in p.videos.items()})
        if all(p.origins is not None for p in parts):
            made.origins = np.concatenate([p.origins for p in parts if p.origins is not None])
            made.totals = {k: v for p in parts for k, v in p.totals.items()}
        return made
