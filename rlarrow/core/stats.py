"""Mergeable per-element normalisation statistics of tensor columns.

A :class:`ColumnStats` summarises one numeric column whose rows are tensors of one shape
(observations, actions, rewards; a scalar column has shape ``()``), element by element
(the tensor flattened in C order; ``shape`` restores it):

* ``count``: the rows seen; ``nan_count``: per element, the NaN values, which are left out
  of everything else (so each element has ``count - nan_count`` values);
* ``mean`` and ``m2`` (the sum of squared deviations from the mean) in float64, added and
  merged with Welford's and Chan et al.'s formulas, which keep their precision where a
  sum and a sum of squares would not (values of 1e6 + noise, long runs);
* ``min`` and ``max``;
* one KLL quantile sketch per element (Apache DataSketches' ``kll_doubles_sketch``, ``k``
  = 200 by default: about 1.3 % normalised rank error, a few KiB per element).

Every part merges exactly (the sketches within their rank error), so the statistics of
any selection of episodes, runs or datasets are a merge of the stored per-episode rows
(:func:`combine_rows`), never a second pass over the data, and never an average of
per-episode quantiles: the quantile of a union is not the average of the quantiles
(LeRobot issue 4156, where ``q01``/``q99`` of merged datasets came out wrong).

Weighted mixtures (sample dataset A with probability 0.7, B with 0.3) are
``ColumnStats.combine([a, b], weights=[0.7, 0.3])``; see :meth:`ColumnStats.combine` for
how their quantiles are found without a weighted sketch merge, which KLL does not have.

Storage: :meth:`ColumnStats.to_arrow_row` gives plain Arrow values (lists of float64 and
int64, and one binary KLL sketch per element, DataSketches' own serialisation, readable
by its Java and C++ libraries); :data:`STATS_SCHEMA` is the table of such rows with a
``column`` name, :func:`stats_table` builds one. Nothing is pickled.

Normalisation: :func:`rlarrow.train.normalize.normalizer` turns statistics into the function a
training loop applies to a batch (``mean_std``, ``min_max`` or ``quantile``, as LeRobot and
openpi do); ``rlarrow.core.stats.normalizer`` still works and warns.

``datasketches`` is an optional dependency (the ``stats`` extra); moments, min and max
work without it, quantiles need it.

Example:
    >>> import numpy as np
    >>> from rlarrow.core.stats import ColumnStats
    >>> episode_1 = ColumnStats.from_array(np.array([[0.0, 10.0], [2.0, 30.0]]))
    >>> episode_2 = ColumnStats.from_array(np.array([[4.0, 20.0]]))
    >>> both = ColumnStats.combine([episode_1, episode_2])
    >>> both.count, both.mean.tolist(), both.max.tolist(), both.quantile(0.5).tolist()
    (3, [2.0, 20.0], [4.0, 30.0], [2.0, 20.0])
    >>> sorted(both.to_dict())
    ['count', 'max', 'mean', 'min', 'q01', 'q10', 'q50', 'q90', 'q99', 'std']
"""

from __future__ import annotations

import copy
import functools
import importlib
import math
import os
import struct
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core.deps import require
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorruptFileError,
    UsageError,
)

__all__ = [
    "DEFAULT_K",
    "DEFAULT_QUANTILES",
    "STATS_SCHEMA",
    "ColumnStats",
    "ImageStats",
    "adopt_sketches",
    "combine_rows",
    "image_channel_stats",
    "lerobot_entry",
    "lerobot_frames",
    "stats_table",
]

#: the KLL sketch's size parameter: 200 gives about 1.3 % normalised rank error (99 % confidence)
DEFAULT_K = 200

#: the quantiles :meth:`ColumnStats.to_dict` writes, as LeRobot's ``stats.json`` has them
DEFAULT_QUANTILES: tuple[float, ...] = (0.01, 0.10, 0.50, 0.90, 0.99)

#: one row per (column, and whatever the caller adds: episode, run) of serialised statistics
STATS_SCHEMA = pa.schema([
    pa.field("column", pa.string(), nullable=False),
    pa.field("shape", pa.list_(pa.int64()), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
    pa.field("nan_count", pa.list_(pa.int64()), nullable=False),
    pa.field("mean", pa.list_(pa.float64()), nullable=False),
    pa.field("m2", pa.list_(pa.float64()), nullable=False),
    pa.field("min", pa.list_(pa.float64()), nullable=False),
    pa.field("max", pa.list_(pa.float64()), nullable=False),
    # null: statistics kept without sketches (sketches=False)
    pa.field("sketches", pa.list_(pa.binary()), nullable=True),
])

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_Sketch = Any  # a datasketches.kll_doubles_sketch


def _datasketches(feature: str) -> ModuleType:
    """The ``datasketches`` module, or an error naming the ``stats`` extra."""
    return require("datasketches", feature=feature)  # (rlarrow.core.deps names the extra)


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ArgumentTypeError(f"k must be an int, not {type(k).__name__}")
    if not 8 <= int(k) <= 65535:
        raise ArgumentError(f"k must be between 8 and 65535 (KLL's limits), not {k}")
    return int(k)


def _check_ranks(q: float | Sequence[float]) -> tuple[_F64, bool]:
    scalar = np.ndim(q) == 0
    ranks = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if ranks.ndim != 1 or not np.all((ranks >= 0.0) & (ranks <= 1.0)):
        raise ArgumentError(f"quantiles are ranks between 0 and 1, not {q!r}")
    return ranks, scalar


def _as_float_rows(values: object, shape: tuple[int, ...] | None) -> _F64:
    """``values`` as float64 ``(rows, elements)``, checked against ``shape`` when known."""
    array = np.asarray(values)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ArgumentTypeError(f"statistics need a bool, int or float array, not dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise ArgumentTypeError("statistics of complex values are not defined; pass .real and .imag apart")
    if array.ndim == 0:
        raise ArgumentError("values need a leading rows axis: (rows, *shape), e.g. (n,) for a scalar column")
    if shape is not None and array.shape[1:] != shape:
        raise ArgumentError(f"values of shape {array.shape[1:]} per row do not fit statistics of shape "
                            f"{shape}")
    rows = array.shape[0]
    return array.astype(np.float64, copy=False).reshape(rows, math.prod(array.shape[1:]))


def _feed_sketches(sketches: Sequence[_Sketch], values: npt.NDArray[Any]) -> None:
    """Update sketch ``j`` with column ``j`` of ``values`` (rows, elements), NaN left out.

    Each column is sorted first (in the values' own dtype: float32 sorts in about half the
    time of float64, and converting afterwards keeps the order). A KLL update sorts its
    level-0 buffer at every compaction; given sorted input that costs almost nothing. 22
    elements of 10,000 float32 values into fresh sketches: 8.5 ms unsorted, 5.3 ms sorted.
    KLL's rank-error bound holds for input in any order, sorted included.
    """
    if not len(sketches) or values.shape[0] == 0:
        return
    columns = np.array(values.T, order="C")  # (a copy: sorted in place below)
    columns.sort(axis=1)
    nan = (np.isnan(columns).sum(axis=1) if columns.dtype.kind == "f"
           else np.zeros(len(columns), np.int64))  # (NaN sorts last)
    rows = columns.shape[1]
    for j, sketch in enumerate(sketches):
        n = rows - int(nan[j])
        if n:
            sketch.update(columns[j, :n].astype(np.float64, copy=False))


def _merge_moments(n: _I64, mean: _F64, m2: _F64) -> tuple[_I64, _F64, _F64]:
    """Merge stacked ``(parts, elements)`` counts, means and M2 in closed form (Chan et al.).

    ``mean = Σ nᵢ·meanᵢ / N`` and ``M2 = Σ (M2ᵢ + nᵢ·(meanᵢ - mean)²)``; the mean gets one
    correction pass (the weighted mean of the residuals), which keeps it exact to rounding
    when all the parts sit at a large offset.
    """
    total = n.sum(axis=0)
    weights = n.astype(np.float64)
    safe = np.where(total > 0, total, 1).astype(np.float64)
    with _quiet():
        merged = (weights * mean).sum(axis=0) / safe
        merged = merged + (weights * (mean - merged)).sum(axis=0) / safe
        m2_total = (m2 + weights * (mean - merged) ** 2).sum(axis=0)
    empty = total == 0
    merged[empty] = 0.0
    m2_total[empty] = 0.0
    return total, merged, m2_total


def _batch_moments(x: _F64, valid: npt.NDArray[np.bool_] | None) -> tuple[_I64, _F64, _F64, _F64, _F64]:
    """Count, mean, M2, min and max of each column of ``x``, the NaNs (``~valid``) left out.

    Two passes (the mean, then the deviations from it), with one correction of the mean
    by its residuals, so that values far from 0 keep their precision.
    """
    rows = x.shape[0]
    if valid is None:
        n = np.full(x.shape[1], rows, dtype=np.int64)
        with _quiet():
            mean = x.mean(axis=0)
            mean = mean + (x - mean).mean(axis=0)
            m2 = ((x - mean) ** 2).sum(axis=0)
        return n, mean, m2, x.min(axis=0), x.max(axis=0)
    n = valid.sum(axis=0).astype(np.int64)
    safe = np.where(n > 0, n, 1).astype(np.float64)
    with _quiet():
        mean = np.where(valid, x, 0.0).sum(axis=0) / safe
        mean = mean + np.where(valid, x - mean, 0.0).sum(axis=0) / safe
        m2 = (np.where(valid, x - mean, 0.0) ** 2).sum(axis=0)
    lo = np.min(np.where(valid, x, np.inf), axis=0)
    hi = np.max(np.where(valid, x, -np.inf), axis=0)
    mean[n == 0] = 0.0
    return n, mean, m2, lo, hi


def _quiet() -> np.errstate:
    """Infinite values make inf - inf and overflows: NaN or inf results, not warnings."""
    return np.errstate(invalid="ignore", over="ignore")


# --- KLL blobs: checked before DataSketches sees them --------------------------------------
#
# kll_doubles_sketch.deserialize reads past a truncated levels array (a 20-byte blob, the
# preamble alone, crashes the interpreter in datasketches 5.2), so a blob is parsed here
# first: its size must be exactly what its header implies, and its levels' weights must
# add up to its n. Layout (little-endian): preamble ints (u8), serial version (u8), family
# (u8, 15 = KLL), flags (u8), k (u16), m (u8), unused (u8); an empty sketch ends there (8
# bytes), a single item follows as one float64 (16 bytes); otherwise n (u64), min k (u16),
# number of levels L (u8), unused (u8), L level offsets (u32), min and max (f64), and the
# retained items (f64), as many as the total capacity of L levels less the first offset.

_KLL_FAMILY = 15
_KLL_EMPTY, _KLL_SINGLE = 1, 4


@functools.cache
def _kll_capacity(k: int, levels: int) -> int:
    """The items ``levels`` levels of a KLL sketch of ``k`` hold (DataSketches' kll_helper)."""
    def aux(k: int, depth: int) -> int:
        return int((((k << 1) << depth) // 3**depth + 1) >> 1)

    def level(depth: int) -> int:
        return max(8, aux(k, depth) if depth <= 30 else aux(aux(k, depth // 2), depth - depth // 2))
    return sum(level(depth) for depth in range(levels))


def _kll_blob_problem(blob: bytes) -> str | None:
    """What is wrong with a serialised ``kll_doubles_sketch``, or None when it is sound."""
    size = len(blob)
    if size < 8:
        return f"{size} bytes, shorter than the 8-byte KLL preamble"
    preamble, version, family, flags, k, m = struct.unpack_from("<BBBBHB", blob, 0)
    if family != _KLL_FAMILY:
        return f"family {family} is not KLL ({_KLL_FAMILY})"
    if not 8 <= k or m != 8:
        return f"k={k}, m={m} are not a kll_doubles_sketch's"
    if flags & _KLL_EMPTY:
        return None if (preamble, size) == (2, 8) else f"an empty sketch of {size} bytes (8 expected)"
    if flags & _KLL_SINGLE:
        return None if (preamble, version, size) == (2, 2, 16) else \
            f"a one-value sketch of {size} bytes (16 expected)"
    if (preamble, version) != (5, 1) or size < 20:
        return f"preamble {preamble}, serial version {version}, {size} bytes: not a full KLL sketch"
    n, min_k, levels = struct.unpack_from("<QHB", blob, 8)
    if not 1 <= levels <= 61 or min_k > k or min_k < 8:
        return f"{levels} levels, min k {min_k}: not a KLL sketch's"
    if size < 20 + 4 * levels:
        return f"{size} bytes, too short for the {levels} level offsets its header announces"
    capacity = _kll_capacity(k, levels)
    bounds = [*struct.unpack_from(f"<{levels}I", blob, 20), capacity]
    if any(bounds[h] > bounds[h + 1] for h in range(levels)):
        return f"its level offsets {bounds[:-1]} are not ascending within the capacity {capacity}"
    expected = 20 + 4 * levels + 16 + 8 * (capacity - bounds[0])
    if expected != size:
        return f"{size} bytes where its {levels} levels need {expected} (truncated or padded)"
    weight = sum((bounds[h + 1] - bounds[h]) << h for h in range(levels))
    if weight != n:
        return f"its levels hold a weight of {weight} but its header says n={n}"
    return None


def _retained(sketch: _Sketch) -> tuple[_F64, _F64]:
    """The values a sketch retains and the weight of each (its level's power of two).

    Read from the serialised sketch: iterating over a kll_doubles_sketch gives every value
    a weight of 1 while its lowest levels are empty (datasketches 5.2, after a merge), so
    its weights cannot be trusted.
    """
    blob = bytes(sketch.serialize())
    flags = blob[3]
    if flags & _KLL_EMPTY:
        return np.empty(0), np.empty(0)
    if flags & _KLL_SINGLE:
        return np.frombuffer(blob, "<f8", 1, 8).astype(np.float64), np.ones(1)
    k, levels = struct.unpack_from("<H", blob, 4)[0], blob[18]
    bounds = np.array([*struct.unpack_from(f"<{levels}I", blob, 20), _kll_capacity(k, levels)])
    values = np.frombuffer(blob, "<f8", offset=20 + 4 * levels + 16).astype(np.float64)
    weights = np.repeat(2.0 ** np.arange(levels), np.diff(bounds))
    return values, weights


def _read_sketch(deserialize: Callable[[bytes], _Sketch], blob: object, expected_n: int) -> _Sketch | str:
    """One sketch blob deserialised and checked before and after, or what is wrong with it."""
    if not isinstance(blob, bytes):
        return f"the KLL sketch is missing ({type(blob).__name__})"
    problem = _kll_blob_problem(blob)
    if problem is None:
        try:
            sketch = deserialize(blob)
        except (IndexError, ValueError, RuntimeError) as exc:
            problem = str(exc)
    if problem is not None:
        return f"the KLL sketch ({len(blob)} bytes) is damaged: {problem}"
    if sketch.n != expected_n:
        return f"the KLL sketch holds {sketch.n} values but the statistics count {expected_n}"
    return sketch


def _merged_sketches(lists: Sequence[list[_Sketch] | None], *, into_first: bool) -> list[_Sketch] | None:
    """Each element's sketches merged; None (no quantiles) when a part was kept without sketches.

    ``into_first``: merge into the first list's sketches, in place; otherwise the parts are
    left as they are (the first non-empty part is copied).
    """
    if any(sketches is None for sketches in lists):
        return None
    out: list[_Sketch] = (lists[0] or []) if into_first else []
    for sketches in lists[1:] if into_first else lists:
        if not sketches:
            continue
        if not out:
            out = [copy.copy(s) for s in sketches]
        else:
            for mine, theirs in zip(out, sketches, strict=True):
                mine.merge(theirs)
    return out


class ColumnStats:
    """Mergeable statistics of one tensor column, element by element.

    Build them with :meth:`from_array` (or an empty ``ColumnStats(shape)`` and
    :meth:`update`; ``sketches=False`` for moments, min and max only), merge with
    :meth:`merge` or :meth:`combine`, read them with :attr:`mean`, :attr:`std`,
    :attr:`min`, :attr:`max`, :meth:`quantile` (each shaped like one row), store them
    with :meth:`to_arrow_row` and :meth:`from_arrow_row`.

    Values are taken as float64: bool and int columns are converted (an int beyond 2**53
    loses its low bits). NaNs are counted per element (:attr:`nan_count`) and left out of
    the moments, min, max and sketch; infinities are values like any other (a mean or
    variance of inf or nan results).

    Example:
        >>> import numpy as np
        >>> stats = ColumnStats((2,))
        >>> stats.update(np.array([[1.0, np.nan], [3.0, 5.0]]))
        >>> stats.update(np.array([[5, 7]]))
        >>> stats.count, stats.nan_count.tolist(), stats.mean.tolist(), stats.std.tolist()
        (3, [0, 1], [3.0, 6.0], [1.632993161855452, 1.0])
    """

    def __init__(self, shape: Sequence[int] = (), *, k: int = DEFAULT_K, sketches: bool = True) -> None:
        self._shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self._shape):
            raise ArgumentError(f"a tensor shape has no negative dimensions: {tuple(shape)}")
        self._k = _check_k(k)
        size = math.prod(self._shape)
        self._count = 0
        self._nan: _I64 = np.zeros(size, dtype=np.int64)
        self._mean: _F64 = np.zeros(size)
        self._m2: _F64 = np.zeros(size)
        self._min: _F64 = np.full(size, np.inf)
        self._max: _F64 = np.full(size, -np.inf)
        # None: no sketches (kept without them); a list: one per element, made on first use
        self._sketches: list[_Sketch] | None = [] if sketches else None
        # weighted mixtures only: per element, sorted values and their cumulative weights
        self._mixture: list[tuple[_F64, _F64]] | None = None
        self._mixture_error = 0.0
        self._weighted = False  # a weighted mixture (with or without quantiles)

    # --- building ----------------------------------------------------------------------

    @classmethod
    def from_array(cls, values: npt.ArrayLike, *, k: int = DEFAULT_K, sketches: bool = True) -> ColumnStats:
        """Statistics of a batch of rows, ``values`` shaped ``(rows, *shape)``.

        ``sketches=False`` keeps moments, min and max only (no quantiles; no need for
        ``datasketches``): for wide tensors such as images, where a sketch per element
        (a few KiB each) costs more than it tells.

        Example:
            >>> import numpy as np
            >>> stats = ColumnStats.from_array(np.arange(12, dtype=np.float32).reshape(2, 3, 2))
            >>> stats.shape, stats.count, stats.min.tolist()
            ((3, 2), 2, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
        """
        array = np.asarray(values)
        stats = cls(array.shape[1:] if array.ndim else (), k=k, sketches=sketches)
        stats.update(array)
        return stats

    def update(self, values: npt.ArrayLike) -> None:
        """Add a batch of rows, ``values`` shaped ``(rows, *shape)``, in place.

        The moments are the batch's (two passes over it, vectorised), merged in with
        Chan et al.'s formula; each element's sketch takes the batch's column in one call.

        Example:
            >>> import numpy as np
            >>> stats = ColumnStats()
            >>> stats.update(np.array([1.0, 2.0]))
            >>> stats.update(np.array([True, False]))
            >>> stats.count, float(stats.mean), float(stats.max)
            (4, 1.0, 2.0)
        """
        self._check_mergeable("update")
        x = _as_float_rows(values, self._shape)
        if x.shape[0] == 0:
            return
        nan = np.isnan(x)
        valid = ~nan if nan.any() else None
        n, mean, m2, lo, hi = _batch_moments(x, valid)
        nan_count = x.shape[0] - n
        if self._sketches is not None:
            ds = _datasketches("quantile sketches (rlarrow.core.stats)")
            if not self._sketches:
                self._sketches = [ds.kll_doubles_sketch(self._k) for _ in range(x.shape[1])]
            _feed_sketches(self._sketches, x)
        self._add(x.shape[0], nan_count, n, mean, m2, lo, hi)

    def _add(self, count: int, nan: _I64, n: _I64, mean: _F64, m2: _F64, lo: _F64, hi: _F64) -> None:
        """Merge moments of another part into these (Chan et al.'s pairwise formula)."""
        n_self = self.valid_count.reshape(-1)
        total = n_self + n
        safe = np.where(total > 0, total, 1).astype(np.float64)
        with _quiet():
            delta = mean - self._mean
            self._mean = self._mean + delta * (n / safe)
            self._m2 = self._m2 + m2 + delta**2 * (n_self.astype(np.float64) * n / safe)
        self._mean[total == 0] = 0.0
        self._count += int(count)
        self._nan = self._nan + nan
        self._min = np.minimum(self._min, lo)
        self._max = np.maximum(self._max, hi)

    def merge(self, other: ColumnStats) -> None:
        """Merge ``other`` into these statistics, in place (``other`` is left as it was).

        Moments, min and max merge exactly; the sketches merge within their rank error.
        Statistics kept without sketches make the merge one without sketches.

        Example:
            >>> import numpy as np
            >>> a = ColumnStats.from_array(np.array([1.0, 2.0, 3.0]))
            >>> a.merge(ColumnStats.from_array(np.array([10.0])))
            >>> a.count, float(a.mean), float(a.quantile(0.5))
            (4, 4.0, 2.0)
        """
        self._check_mergeable("merge")
        other._check_mergeable("merge")
        if other._shape != self._shape:
            raise ArgumentError(f"cannot merge statistics of shape {other._shape} into ones of shape "
                                f"{self._shape}")
        self._sketches = _merged_sketches([self._sketches, other._sketches], into_first=True)
        self._add(other._count, other._nan, other.valid_count.reshape(-1), other._mean, other._m2,
                  other._min, other._max)

    @classmethod
    def combine(cls, parts: Iterable[ColumnStats], weights: Sequence[float] | None = None) -> ColumnStats:
        """Statistics of several parts together: their union, or a weighted mixture of them.

        Without ``weights``: the statistics of all the parts' rows together, as if computed
        in one pass (moments merged in closed form over the stacked parts, min and max the
        union, the sketches merged).

        With ``weights`` (one per part, >= 0, normalised to sum to 1): the statistics of the
        *mixture* that draws a row from part i with probability ``wᵢ``, as a training loop
        sampling dataset A with 0.7 and B with 0.3 sees it. Its mean is ``Σ wᵢ·meanᵢ``, its
        variance ``Σ wᵢ·(varᵢ + (meanᵢ - mean)²)``, its min and max the union of the parts
        with a positive weight, and its distribution function ``F(x) = Σ wᵢ·Fᵢ(x)``.
        KLL has no weighted merge, and averaging the parts' quantiles is wrong (a quantile
        of a mixture is not the mixture of quantiles), so the quantiles are read off
        ``F`` itself: every value each part's sketch retains carries its weight in that
        sketch (a power of two) divided by the part's count and times ``wᵢ``; sorted and
        summed, those give ``F`` to within ``Σ wᵢ·εᵢ`` (εᵢ the parts' rank errors), and
        :meth:`quantile` returns the smallest retained value ``x`` with ``F(x) >= q``, the
        same rule KLL applies. Each element's distribution ignores its NaNs; an element
        that one part has no values of is the mixture of the other parts.

        Weights proportional to the parts' counts give the plain union (moments to
        rounding, quantiles within the rank error). A mixture is for reading and
        normalising: it does not merge further and is not stored (its count is the
        parts' total, for information).

        Example:
            >>> import numpy as np
            >>> a = ColumnStats.from_array(np.zeros(900))
            >>> b = ColumnStats.from_array(np.full(100, 10.0))
            >>> float(ColumnStats.combine([a, b]).mean), float(ColumnStats.combine([a, b]).quantile(0.95))
            (1.0, 10.0)
            >>> mix = ColumnStats.combine([a, b], weights=[0.5, 0.5])
            >>> float(mix.mean), float(mix.std), float(mix.quantile(0.4)), float(mix.quantile(0.6))
            (5.0, 5.0, 0.0, 10.0)
        """
        items = list(parts)
        if not items:
            raise ArgumentError("combine needs at least one ColumnStats")
        for item in items:
            if not isinstance(item, ColumnStats):
                raise ArgumentTypeError(f"combine takes ColumnStats, not {type(item).__name__}")
            item._check_mergeable("combine")
            if item._shape != items[0]._shape:
                raise ArgumentError(f"cannot combine statistics of shapes {items[0]._shape} and "
                                    f"{item._shape}")
        if weights is not None:
            return cls._mixture_of(items, weights)
        out = cls(items[0]._shape, k=items[0]._k)
        counts = np.array([p._count for p in items], dtype=np.int64)
        nan = np.stack([p._nan for p in items])
        _, out._mean, out._m2 = _merge_moments(counts[:, None] - nan, np.stack([p._mean for p in items]),
                                               np.stack([p._m2 for p in items]))
        out._count = int(counts.sum())
        out._nan = nan.sum(axis=0)
        out._min = np.stack([p._min for p in items]).min(axis=0)
        out._max = np.stack([p._max for p in items]).max(axis=0)
        out._sketches = _merged_sketches([p._sketches for p in items], into_first=False)
        return out

    @classmethod
    def _mixture_of(cls, items: list[ColumnStats], weights: Sequence[float]) -> ColumnStats:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(items),):
            raise ArgumentError(f"{len(items)} parts need {len(items)} weights, not {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ArgumentError(f"weights must be finite, >= 0 and not all 0: {list(weights)}")
        keep = [i for i in range(len(items)) if w[i] > 0]
        parts, w = [items[i] for i in keep], w[keep] / w[keep].sum()
        n = np.stack([p.valid_count.reshape(-1) for p in parts])                 # (parts, elements)
        present = n > 0
        pw = np.where(present, w[:, None], 0.0)
        pw_total = pw.sum(axis=0)
        pw = pw / np.where(pw_total > 0, pw_total, 1.0)
        means = np.stack([p._mean for p in parts])
        variances = np.stack([p._m2 for p in parts]) / np.where(present, n, 1)
        with _quiet():
            mean = (pw * means).sum(axis=0)
            var = (pw * (variances + (means - mean) ** 2)).sum(axis=0)
        out = cls(parts[0]._shape, k=min(p._k for p in parts))
        out._count = sum(p._count for p in parts)
        out._nan = np.sum([p._nan for p in parts], axis=0, dtype=np.int64)
        total = n.sum(axis=0)
        out._mean = np.where(total > 0, mean, 0.0)
        out._m2 = np.where(total > 0, var * total, 0.0)
        out._min = np.min([p._min for p in parts], axis=0)
        out._max = np.max([p._max for p in parts], axis=0)
        out._sketches = None
        out._weighted = True
        if any(p._sketches is None for p in parts):
            return out  # a part kept without sketches: moments, min and max only
        mixture: list[tuple[_F64, _F64]] = []
        for j in range(n.shape[1]):
            values, masses = [], []
            for i, part in enumerate(parts):
                if not present[i, j]:
                    continue
                kept, weight = _retained((part._sketches or [])[j])
                values.append(kept)
                masses.append(weight * (pw[i, j] / n[i, j]))
            if not values:
                mixture.append((np.empty(0), np.empty(0)))
                continue
            v, m = np.concatenate(values), np.concatenate(masses)
            order = np.argsort(v, kind="stable")
            cdf = np.cumsum(m[order])
            mixture.append((v[order], cdf / cdf[-1]))
        out._mixture = mixture
        out._mixture_error = float(sum(wi * p.normalized_rank_error()
                                       for wi, p in zip(w, parts, strict=True)))
        return out

    def __getstate__(self) -> dict[str, Any]:
        """For pickling (DataLoader workers): each sketch as DataSketches' own bytes."""
        state = dict(self.__dict__)
        if self._sketches is not None:
            state["_sketches"] = [bytes(s.serialize()) for s in self._sketches]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blobs = state.get("_sketches")
        if blobs:
            ds = _datasketches("quantile sketches (rlarrow.core.stats)")
            state["_sketches"] = [ds.kll_doubles_sketch.deserialize(b) for b in blobs]
        self.__dict__.update(state)

    def copy(self) -> ColumnStats:
        """An independent copy (sketches included)."""
        out = copy.copy(self)
        for name in ("_nan", "_mean", "_m2", "_min", "_max"):
            setattr(out, name, getattr(self, name).copy())
        if self._sketches:
            out._sketches = [copy.copy(s) for s in self._sketches]
        return out

    def _check_mergeable(self, what: str) -> None:
        if self._weighted:
            raise UsageError(f"cannot {what} a weighted mixture: it is for reading and normalising; "
                             "combine the parts again with their weights instead")

    # --- reading -----------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one row's tensor (``()`` for a scalar column)."""
        return self._shape

    @property
    def k(self) -> int:
        """The KLL sketches' size parameter."""
        return self._k

    @property
    def count(self) -> int:
        """The rows these statistics have seen."""
        return self._count

    @property
    def nan_count(self) -> _I64:
        """Per element, the NaN values left out of the rest, shaped like a row."""
        return self._nan.reshape(self._shape)

    @property
    def valid_count(self) -> _I64:
        """Per element, the values (NaNs excluded) the moments and sketches hold."""
        return (self._count - self._nan).reshape(self._shape)

    def _shaped(self, flat: _F64) -> _F64:
        out = np.where(self.valid_count.reshape(-1) > 0, flat, np.nan)
        return out.reshape(self._shape)

    @property
    def mean(self) -> _F64:
        """Per element, the mean (NaN where an element has no values)."""
        return self._shaped(self._mean)

    @property
    def m2(self) -> _F64:
        """Per element, the sum of squared deviations from the mean (``var * valid_count``)."""
        return self._shaped(self._m2)

    @property
    def var(self) -> _F64:
        """Per element, the population variance (ddof=0)."""
        n = self.valid_count.reshape(-1)
        return self._shaped(self._m2 / np.where(n > 0, n, 1))

    @property
    def std(self) -> _F64:
        """Per element, the population standard deviation (ddof=0, as LeRobot and ``np.std``)."""
        return np.sqrt(self.var)

    @property
    def min(self) -> _F64:
        """Per element, the smallest value."""
        return self._shaped(self._min)

    @property
    def max(self) -> _F64:
        """Per element, the largest value."""
        return self._shaped(self._max)

    @property
    def has_quantiles(self) -> bool:
        """Whether :meth:`quantile` can answer (sketches kept, or a weighted mixture)."""
        return self._mixture is not None or self._sketches is not None

    @property
    def is_mixture(self) -> bool:
        """Whether these are a weighted mixture's (``combine(..., weights=...)``)."""
        return self._weighted

    def quantile(self, q: float | Sequence[float]) -> _F64:
        """Per element, the value at rank ``q`` (0 is the min, 1 the max).

        The smallest value ``x`` whose (approximate) share of values ``<= x`` is at least
        ``q`` (numpy's ``method="inverted_cdf"``), within the rank error of
        :meth:`normalized_rank_error`: exact while a sketch holds fewer than ``k`` values.
        A scalar ``q`` gives an array shaped like a row; a sequence adds a leading axis.

        Example:
            >>> import numpy as np
            >>> stats = ColumnStats.from_array(np.arange(1.0, 101.0))
            >>> stats.quantile([0.0, 0.25, 0.5, 0.99, 1.0]).tolist()
            [1.0, 25.0, 50.0, 99.0, 100.0]
        """
        ranks, scalar = _check_ranks(q)
        flat = np.full((ranks.size, self._nan.size), np.nan)
        n = self.valid_count.reshape(-1)
        if self._mixture is not None:
            for j, (values, cdf) in enumerate(self._mixture):
                if values.size:
                    idx = np.searchsorted(cdf, ranks * (1.0 - 1e-12), side="left")
                    flat[:, j] = values[np.minimum(idx, values.size - 1)]
        elif self._sketches is None:
            raise UsageError("these statistics were kept without sketches (sketches=False here; "
                             "quantiles=False in rlarrow.query.dataset_stats.stats; store.step_stats = "
                             "'moments' when the steps were written): they have no quantiles; compute or "
                             "combine them with sketches (the defaults)")
        else:
            listed = ranks.tolist()
            for j, sketch in enumerate(self._sketches):
                if n[j] > 0:
                    flat[:, j] = sketch.get_quantiles(listed, inclusive=True)
        # rank 0 and 1 are the exact min and max (KLL answers its smallest and largest retained value)
        at = ranks[:, None]
        flat = np.where(at <= 0.0, self._min, np.where(at >= 1.0, self._max, flat))
        flat[:, n == 0] = np.nan
        shaped = flat.reshape((ranks.size, *self._shape))
        return shaped[0] if scalar else shaped

    def normalized_rank_error(self) -> float:
        """The sketches' normalised rank error: a returned quantile's true rank is ``q ± error``.

        DataSketches' single-sided bound at 99 % confidence for the sketches' ``k``
        (``get_normalized_rank_error(False)``): about 0.0133 for k=200. It is a bound for
        any data; while a sketch holds fewer than ``k`` values it is exact. For a weighted
        mixture, the weighted sum of its parts' errors.

        Example:
            >>> import numpy as np
            >>> round(ColumnStats.from_array(np.zeros(3)).normalized_rank_error(), 4)
            0.0133
        """
        if self._mixture is not None:
            return self._mixture_error
        if self._sketches is None:
            raise UsageError("these statistics were kept without sketches: they have no rank error")
        if not self._sketches:
            ds = _datasketches("quantile sketches (rlarrow.core.stats)")
            return float(ds.kll_doubles_sketch.get_normalized_rank_error(self._k, False))
        return max(float(s.normalized_rank_error(False)) for s in self._sketches)

    def to_dict(self, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, list[Any]]:
        """One feature's entry of LeRobot's ``meta/stats.json``, as nested lists.

        Keys ``mean``, ``std``, ``min``, ``max`` (shaped like a row, a scalar column as
        ``[x]`` as LeRobot writes it), ``count`` (``[rows]``) and one ``qNN`` per quantile
        (``q01``, ``q10``, ``q50``, ``q90``, ``q99`` by default; left out when there are no
        sketches). An element without values reads NaN.

        Example:
            >>> import numpy as np
            >>> ColumnStats.from_array(np.array([1.0, 3.0])).to_dict(quantiles=[0.5])
            {'mean': [2.0], 'std': [1.0], 'min': [1.0], 'max': [3.0], 'count': [2], 'q50': [1.0]}
        """
        shape = self._shape or (1,)
        out: dict[str, list[Any]] = {
            "mean": self.mean.reshape(shape).tolist(),
            "std": self.std.reshape(shape).tolist(),
            "min": self.min.reshape(shape).tolist(),
            "max": self.max.reshape(shape).tolist(),
            "count": [self._count],
        }
        keys = [f"q{round(q * 100):02d}" for q in quantiles]
        if len(set(keys)) != len(keys):
            raise ArgumentError(f"quantiles {list(quantiles)} share the keys {keys} (whole percents only)")
        if self.has_quantiles and keys:
            values = self.quantile(list(quantiles))
            for key, value in zip(keys, values, strict=True):
                out[key] = value.reshape(shape).tolist()
        return out

    # --- storage -----------------------------------------------------------------------

    def to_arrow_row(self) -> dict[str, Any]:
        """These statistics as plain Arrow values: one row of :data:`STATS_SCHEMA` less ``column``.

        Lists of float64 (``mean``, ``m2``, ``min``, ``max``; NaN for an element without
        values), lists of int64 (``shape``, ``nan_count``), ``k`` and ``count``, and
        ``sketches``, one DataSketches-serialised KLL sketch per element (None when kept
        without sketches).

        Example:
            >>> import numpy as np
            >>> row = ColumnStats.from_array(np.array([[1.0, 2.0]])).to_arrow_row()
            >>> row["shape"], row["count"], row["mean"], len(row["sketches"])
            ([2], 1, [1.0, 2.0], 2)
            >>> ColumnStats.from_arrow_row(row).mean.tolist()
            [1.0, 2.0]
        """
        self._check_mergeable("store")
        row: dict[str, Any] = _stats_batch([("", self)]).to_pylist()[0]
        del row["column"]
        return row

    @classmethod
    def from_arrow_row(cls, row: Mapping[str, Any], *,
                       path: str | os.PathLike[str] | None = None) -> ColumnStats:
        """Statistics back from a row :meth:`to_arrow_row` gave (or a table's ``to_pylist()`` row).

        The row is checked as :func:`combine_rows` checks a table's; a damaged one raises
        :class:`~rlarrow.core.errors.CorruptFileError` naming ``path`` (the file it came
        from, when given), the column (``row["column"]``, when there) and what is wrong.
        """
        name = row.get("column")
        name = "(unnamed)" if name is None else str(name)
        try:
            table = pa.Table.from_pylist([{**row, "column": name}], schema=STATS_SCHEMA)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise CorruptFileError(path, f"statistics of column {name!r}: not a statistics row ({exc}); "
                                         "recompute the statistics from the data") from exc
        return combine_rows(table, path=path)[name]

    def __repr__(self) -> str:
        kind = "mixture, " if self._weighted else ""
        return f"ColumnStats({kind}shape={self._shape}, count={self._count}, k={self._k})"


def _build(shape: tuple[int, ...], k: int, count: int, nan: _I64, mean: _F64, m2: _F64, lo: _F64,
           hi: _F64) -> ColumnStats:
    """Statistics from checked flat parts (an element without values: any mean, m2, min, max)."""
    stats = ColumnStats(shape, k=k)
    empty = nan == count
    stats._count = count
    stats._nan = nan.astype(np.int64)
    stats._mean = np.where(empty, 0.0, mean)
    stats._m2 = np.where(empty, 0.0, m2)
    stats._min = np.where(empty, np.inf, lo)
    stats._max = np.where(empty, -np.inf, hi)
    return stats


def _load_sketches(blobs: list[object], n: _I64, k: int, where: str,
                   path: str | os.PathLike[str] | None) -> list[_Sketch]:
    """Merge ``(rows, elements)`` sketch blobs (flattened row by row) into one sketch per element.

    ``n`` holds each blob's expected count; blobs of elements without values are skipped.
    Blobs that deserialise are merged as they come, so that only the merged sketches and
    the one being read are held at a time.
    """
    rows, size = n.shape
    ds = _datasketches("quantile sketches (rlarrow.core.stats)")
    deserialize = ds.kll_doubles_sketch.deserialize
    merged: list[_Sketch] = [None] * size
    for i, expected in enumerate(n.reshape(-1).tolist()):
        if not expected:
            continue
        sketch = _read_sketch(deserialize, blobs[i], expected)
        r, j = divmod(i, size)
        if isinstance(sketch, str):
            row = f", row {r}" if rows > 1 else ""
            raise CorruptFileError(path, f"{where}, element {j}{row}: {sketch}; "
                                         "recompute the statistics from the data")
        if merged[j] is None:
            merged[j] = sketch
        else:
            merged[j].merge(sketch)
    return [ds.kll_doubles_sketch(k) if m is None else m for m in merged]


def adopt_sketches(stats: ColumnStats, source: ColumnStats, where: str,
                   path: str | os.PathLike[str] | None = None) -> None:
    """Give ``stats`` (moments merged from one set of rows) the sketches of ``source``.

    The moments and the sketches of a selection can come from different stored rows
    (per-episode moments, per-block sketches); each element's sketch must then hold
    exactly as many values as the moments count, or one of the two missed or repeated
    some rows: that is refused (``CorruptFileError`` naming ``where`` and ``path``).
    """
    if source._sketches is None:
        stats._sketches = None
        return
    if source.shape != stats.shape:
        raise CorruptFileError(path, f"{where}: sketches of shape {source.shape} for statistics of shape "
                                     f"{stats.shape}; recompute the statistics from the data")
    n = stats.valid_count.reshape(-1)
    have = np.array([s.n for s in source._sketches] if source._sketches else np.zeros(n.size), dtype=np.int64)
    if have.shape != n.shape or np.any(have != n):
        bad = int(np.flatnonzero(have != n)[0]) if have.shape == n.shape else 0
        raise CorruptFileError(path, f"{where}: element {bad}'s sketches hold {int(have[bad])} values but "
                                     f"its moments count {int(n[bad])}; recompute the statistics from the "
                                     "data")
    stats._sketches = [copy.copy(s) for s in source._sketches] if source._sketches else []
    stats._k = min(stats._k, source._k)


def stats_table(stats: Mapping[str, ColumnStats] | Iterable[tuple[str, ColumnStats]]) -> pa.Table:
    """A table of :data:`STATS_SCHEMA` rows: one per (column name, statistics) given.

    Several statistics of one column (one per episode, say) make several rows; add the
    columns that tell them apart (``episode_id``, ``run_id``) with ``append_column``.

    Example:
        >>> import numpy as np
        >>> table = stats_table([("reward", ColumnStats.from_array(np.array([1.0, 2.0]))),
        ...                      ("reward", ColumnStats.from_array(np.array([3.0])))])
        >>> table.num_rows, table.column("count").to_pylist()
        (2, [2, 1])
    """
    pairs = list(stats.items() if isinstance(stats, Mapping) else stats)
    for name, column_stats in pairs:
        if not isinstance(column_stats, ColumnStats):
            raise ArgumentTypeError(f"stats_table takes ColumnStats, not {type(column_stats).__name__} "
                                    f"(column {name!r})")
        column_stats._check_mergeable("store")
    batches, start, size = [], 0, 0
    for end, (_, column_stats) in enumerate(pairs, 1):
        size += 32 * column_stats.k * column_stats._nan.size  # a KLL sketch: under 4k values
        if size > _BATCH_BYTES or end == len(pairs):
            batches.append(_stats_batch(pairs[start:end]))
            start, size = end, 0
    return pa.Table.from_batches(batches, schema=STATS_SCHEMA)


#: a stats_table's record batches stay well below Arrow's 2 GiB for one binary array
_BATCH_BYTES = 1 << 28


def _stats_batch(pairs: Sequence[tuple[str, ColumnStats]]) -> pa.RecordBatch:
    """One record batch of :data:`STATS_SCHEMA` rows, built column by column."""
    parts = [column_stats for _, column_stats in pairs]
    sizes = np.array([p._nan.size for p in parts], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]), pa.int32())

    counts = np.array([p._count for p in parts], dtype=np.int64)
    nan = np.concatenate([p._nan for p in parts]) if parts else np.empty(0, np.int64)
    empty = np.repeat(counts, sizes) == nan  # elements without values read NaN

    def lists(name: str, kind: pa.DataType, blank: bool = False) -> pa.Array:
        flat = np.concatenate([getattr(p, name) for p in parts]) if parts else np.empty(0)
        if blank:
            flat = np.where(empty, np.nan, flat)
        return pa.ListArray.from_arrays(offsets, pa.array(flat, kind))

    blobs: list[bytes] = []
    missing = []
    for part in parts:
        kept = part._sketches
        missing.append(kept is None)
        if kept is not None and not kept and part._nan.size:  # no rows yet: empty sketches
            ds = _datasketches("quantile sketches (rlarrow.core.stats)")
            kept = [ds.kll_doubles_sketch(part._k) for _ in range(part._nan.size)]
        blobs += [bytes(s.serialize()) for s in kept or []]
    blob_offsets = np.concatenate([[0], np.cumsum(np.where(missing, 0, sizes))])
    sketches = pa.ListArray.from_arrays(pa.array(blob_offsets, pa.int32()), pa.array(blobs, pa.binary()),
                                        mask=pa.array(missing, pa.bool_()))
    shapes = pa.array([list(p.shape) for p in parts], pa.list_(pa.int64()))
    return pa.RecordBatch.from_arrays([
        pa.array([name for name, _ in pairs], pa.string()),
        shapes,
        pa.array([p.k for p in parts], pa.int64()),
        pa.array(counts, pa.int64()),
        lists("_nan", pa.int64()),
        lists("_mean", pa.float64(), blank=True),
        lists("_m2", pa.float64()),
        lists("_min", pa.float64(), blank=True),
        lists("_max", pa.float64(), blank=True),
        sketches,
    ], schema=STATS_SCHEMA)


def _fixed_lists(array: pa.ChunkedArray, width: int, what: str, where: str,
                 path: str | os.PathLike[str] | None) -> npt.NDArray[Any]:
    """A list column whose rows all hold ``width`` values, as ``(rows, width)`` NumPy."""
    if array.null_count:
        raise CorruptFileError(path, f"{where}: {array.null_count} row(s) have no {what}; "
                                     "recompute the statistics from the data")
    lengths = np.asarray(pc.list_value_length(array))
    if lengths.size and np.any(lengths != width):
        bad = int(np.flatnonzero(lengths != width)[0])
        raise CorruptFileError(path, f"{where}: row {bad} has {lengths[bad]} {what} values, not {width}; "
                                     "recompute the statistics from the data")
    values = pc.list_flatten(array)
    if values.null_count:
        raise CorruptFileError(path, f"{where}: {what} holds nulls; recompute the statistics from the data")
    return np.asarray(values.to_numpy()).reshape(len(array), width)


def combine_rows(table: pa.Table | pa.RecordBatch, *, columns: Iterable[str] | None = None,
                 sketches: bool = True,
                 path: str | os.PathLike[str] | None = None) -> dict[str, ColumnStats]:
    """Merge a table of stored statistics (:data:`STATS_SCHEMA` rows) into one per column.

    The rows given are the selection: filter the table first (by episode, run, anything)
    and pass what is left. Other columns of the table are ignored. The moments, counts, min
    and max of each column merge in one vectorised pass over the stacked rows (10,000
    rows of a 32-element column: about 10 ms). The sketches are checked, read and merged
    one by one, about 10 µs each (10,000 episodes x 32 elements: 3 to 4 s): pass
    ``sketches=False`` for moments only (``quantile`` then refuses), or keep pre-merged
    per-run statistics and combine those (100 runs x 32 elements: about 35 ms).
    ``columns`` limits the work to those names; a name without rows is left out.

    Every row is checked: list lengths against the shape, counts, and each sketch, whose
    bytes are parsed before DataSketches reads them (datasketches 5.2 crashes the process
    on some truncated blobs) and whose count must be the row's. A damaged row raises
    :class:`~rlarrow.core.errors.CorruptFileError` naming ``path`` (the file the table
    came from, when given), the column, the row and element, and what is wrong.

    Example:
        >>> import numpy as np
        >>> table = stats_table([("reward", ColumnStats.from_array(np.array([1.0, 2.0]))),
        ...                      ("reward", ColumnStats.from_array(np.array([6.0]))),
        ...                      ("action", ColumnStats.from_array(np.zeros((4, 2))))])
        >>> merged = combine_rows(table)
        >>> sorted(merged), merged["reward"].count, float(merged["reward"].mean)
        (['action', 'reward'], 3, 3.0)
        >>> float(combine_rows(table, columns=["reward"], sketches=False)["reward"].max)
        6.0
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise ArgumentTypeError("combine_rows takes a pyarrow Table or RecordBatch, not "
                                f"{type(table).__name__}")
    needed = [f.name for f in STATS_SCHEMA if f.name != "sketches" or sketches]
    missing = [name for name in needed if name not in table.column_names]
    if missing:
        raise ArgumentError(f"a statistics table needs the columns {missing} "
                            "(rlarrow.core.stats.STATS_SCHEMA)")
    data = {name: table.column(name) for name in needed}
    names = np.asarray(data["column"].to_numpy(), dtype=object)
    wanted = sorted(set(names.tolist()) if columns is None else set(columns))
    out: dict[str, ColumnStats] = {}
    for name in wanted:
        where = f"statistics of column {name!r}"
        idx = np.flatnonzero(names == name)
        if len(idx) == 0:
            continue
        if idx[-1] - idx[0] + 1 == len(idx):  # one run of rows (always so for one column): no copy
            rows = {key: value.slice(int(idx[0]), len(idx)) for key, value in data.items()}
        else:
            rows = {key: value.take(pa.array(idx)) for key, value in data.items()}
        shapes = rows["shape"]
        first = shapes[0].as_py() if len(shapes) else []
        shape_array = _fixed_lists(shapes, len(first), "shape", where, path)
        if np.any(shape_array != np.asarray(first, dtype=np.int64)):
            bad = int(np.flatnonzero(np.any(shape_array != np.asarray(first), axis=1))[0])
            raise CorruptFileError(path, f"{where}: row {bad} has shape {shape_array[bad].tolist()}, "
                                         f"row 0 has {first}; rows of one column share a shape")
        shape = tuple(int(d) for d in first)
        fix = "; recompute the statistics from the data"
        if any(d < 0 for d in shape):
            raise CorruptFileError(path, f"{where}: shape {shape} has a negative dimension{fix}")
        size = math.prod(shape)
        for key in ("count", "k"):
            if rows[key].null_count:
                raise CorruptFileError(path, f"{where}: {rows[key].null_count} row(s) have no {key}{fix}")
        counts = np.asarray(rows["count"].to_numpy(), dtype=np.int64)
        ks = np.asarray(rows["k"].to_numpy(), dtype=np.int64)
        nan, mean, m2, lo, hi = (_fixed_lists(rows[key], size, key, where, path)
                                 for key in ("nan_count", "mean", "m2", "min", "max"))
        nan = nan.astype(np.int64)
        problems = [what for what, bad in (
            ("a negative count", np.any(counts < 0)),
            ("a NaN count outside 0..count", np.any(nan < 0) or np.any(nan > counts[:, None])),
            ("a k outside KLL's 8..65535", np.any((ks < 8) | (ks > 65535)))) if bad]
        if problems:
            raise CorruptFileError(path, f"{where}: rows with " + ", ".join(problems) + fix)
        n = counts[:, None] - nan
        empty = n == 0
        _, merged_mean, merged_m2 = _merge_moments(n, np.where(empty, 0.0, mean), np.where(empty, 0.0, m2))
        stats = _build(shape, int(ks.min()), int(counts.sum()), nan.sum(axis=0), merged_mean, merged_m2,
                       np.min(np.where(empty, np.inf, lo), axis=0, initial=np.inf),
                       np.max(np.where(empty, -np.inf, hi), axis=0, initial=-np.inf))
        if not sketches:
            stats._sketches = None
        elif rows["sketches"].null_count:
            stats._sketches = None  # a row kept without sketches: no quantiles for the merge
        else:
            lengths = np.asarray(pc.list_value_length(rows["sketches"]))
            if np.any(lengths != size):
                bad = int(np.flatnonzero(lengths != size)[0])
                raise CorruptFileError(path, f"{where}: row {bad} has {lengths[bad]} sketches for {size} "
                                             f"element(s){fix}")
            blobs = pc.list_flatten(rows["sketches"]).to_pylist()
            stats._sketches = _load_sketches(blobs, n, stats._k, where, path)
        out[name] = stats
    return out


# --- LeRobot's stats.json ------------------------------------------------------------------


def lerobot_frames(n: int) -> npt.NDArray[np.int64]:
    """The frames of an ``n``-frame episode LeRobot's image statistics look at.

    Every frame up to 100; beyond, ``max(100, min(int(n ** 0.75), 10000))`` frames evenly
    spread (lerobot 0.4's ``sample_indices``).

    Example:
        >>> lerobot_frames(5).tolist(), len(lerobot_frames(1000))
        ([0, 1, 2, 3, 4], 177)
    """
    count = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, count)).astype(np.int64)


class ImageStats:
    """Per-channel statistics, in [0, 1], of camera frames, as LeRobot's ``stats.json`` has them.

    ``moments``: a ``(C,)`` :class:`ColumnStats` without sketches (mean, std, min, max of
    the pixel values / 255); ``histogram``: ``(C, 256)`` counts of each uint8 value, from
    which the quantiles are exact (``inverted_cdf``, the definition :meth:`ColumnStats.quantile`
    uses) and the same whatever order episodes merge in; ``frames``: the frames seen
    (LeRobot's ``count``). Build with :func:`image_channel_stats`, merge with :meth:`combine`.

    Example:
        >>> import numpy as np
        >>> frames = np.zeros((2, 4, 4, 3), np.uint8); frames[1] = 255
        >>> both = ImageStats.combine([image_channel_stats(frames[:1]), image_channel_stats(frames[1:])])
        >>> both.frames, both.quantile([0.5, 0.51])[:, 0].tolist(), both.moments.mean.tolist()
        (2, [0.0, 1.0], [0.5, 0.5, 0.5])
    """

    def __init__(self, moments: ColumnStats, histogram: npt.NDArray[np.float64], frames: int) -> None:
        self.moments, self.histogram, self.frames = moments, histogram, frames

    @classmethod
    def combine(cls, parts: Sequence[ImageStats], weights: Sequence[float] | None = None) -> ImageStats:
        """Merge several episodes' or runs' (with ``weights``: mix them, as :meth:`ColumnStats.combine`)."""
        if not parts:
            raise ArgumentError("nothing to combine: give at least one ImageStats")
        moments = ColumnStats.combine([p.moments for p in parts], weights=weights)
        if weights is None:
            histogram = np.sum([p.histogram for p in parts], axis=0)
        else:
            if len(weights) != len(parts):
                raise ArgumentError(f"{len(weights)} weights for {len(parts)} parts")
            shares = [p.histogram / np.maximum(p.histogram.sum(axis=1, keepdims=True), 1) for p in parts]
            histogram = np.sum([w * h for w, h in zip(weights, shares, strict=True)], axis=0)
        return cls(moments, histogram, sum(p.frames for p in parts))

    def quantile(self, q: Sequence[float]) -> _F64:
        """``(len(q), C)``: per channel, the smallest value whose share of values at or below it is >= q."""
        ranks, _ = _check_ranks(q)
        cdf = np.cumsum(self.histogram, axis=1)
        total = cdf[:, -1:]
        out = np.full((ranks.size, self.histogram.shape[0]), np.nan)
        for c in range(self.histogram.shape[0]):
            if total[c, 0] > 0:
                idx = np.searchsorted(cdf[c] / total[c, 0], np.maximum(ranks, 1e-300) * (1.0 - 1e-12))
                out[:, c] = np.minimum(idx, 255) / 255.0
        return out

    def lerobot_entry(self, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, npt.NDArray[Any]]:
        """LeRobot's keys, each ``(C, 1, 1)`` (``count``: ``[frames]``); see :func:`lerobot_entry`."""
        out = lerobot_entry(self.moments, count=self.frames, image=True, quantiles=())
        keys = [f"q{round(q * 100):02d}" for q in quantiles]
        if keys:
            for key, value in zip(keys, self.quantile(list(quantiles)), strict=True):
                out[key] = value.reshape(-1, 1, 1)
        return out


def image_channel_stats(frames: npt.ArrayLike) -> ImageStats:
    """Per-channel statistics, in [0, 1], of one episode's camera frames, as LeRobot takes them.

    ``frames`` are ``(n, H, W, C)`` uint8. The frames :func:`lerobot_frames` picks, each
    downsampled as LeRobot does (every ``f``-th pixel where the larger side is 300 or more),
    are divided by 255 and pooled per channel (:class:`ImageStats`), merged over episodes
    with :meth:`ImageStats.combine`.

    Example:
        >>> import numpy as np
        >>> frames = np.zeros((4, 2, 2, 3), np.uint8); frames[..., 0] = 255
        >>> stats = image_channel_stats(frames)
        >>> stats.moments.mean.tolist(), stats.frames
        ([1.0, 0.0, 0.0], 4)
    """
    array = np.asarray(frames)
    if array.ndim != 4 or array.dtype != np.uint8:
        raise ArgumentError(f"camera frames are (n, H, W, C) uint8; got {array.dtype} {array.shape}")
    picked = array[lerobot_frames(len(array))]
    height, width = picked.shape[1:3]
    if max(height, width) >= 300:
        step = int(width / 150) if width > height else int(height / 150)
        picked = picked[:, ::step, ::step]
    pixels = picked.reshape(-1, picked.shape[-1])
    histogram = np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(pixels.shape[1])])
    moments = ColumnStats.from_array(pixels.astype(np.float64) / 255.0, sketches=False)
    return ImageStats(moments, histogram.astype(np.float64), len(picked))


def lerobot_entry(stats: ColumnStats, *, count: int | None = None, image: bool = False,
                  integer: bool = False,
                  quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, npt.NDArray[Any]]:
    """One feature's statistics in LeRobot's ``stats.json`` keys and shapes, as arrays.

    ``min``, ``max``, ``mean``, ``std``, ``count`` and ``q01``...``q99`` (where there are
    sketches), each shaped like a value (``(1,)`` for a scalar), an image's per channel
    ``(C, 1, 1)`` (``image``: ``stats`` per channel, ``count`` the frames; :class:`ImageStats`
    gives its quantiles exactly). ``integer``: min and max as int64 (LeRobot's own, for an
    integer feature). The quantiles are those of every value merged (:meth:`ColumnStats.quantile`), never an
    average of episodes' quantiles: what ``rlarrow stats`` and ``export_lerobot`` both write.

    Example:
        >>> import numpy as np
        >>> entry = lerobot_entry(ColumnStats.from_array(np.array([1.0, 2.0, 3.0])), quantiles=[0.5])
        >>> {k: v.tolist() for k, v in entry.items()}
        {'min': [1.0], 'max': [3.0], 'mean': [2.0], 'std': [0.816496580927726], 'count': [3], 'q50': [2.0]}
    """
    shape: tuple[int, ...] = (stats.shape[0], 1, 1) if image else (stats.shape or (1,))
    out: dict[str, npt.NDArray[Any]] = {
        "min": stats.min.reshape(shape),
        "max": stats.max.reshape(shape),
        "mean": stats.mean.reshape(shape),
        "std": stats.std.reshape(shape),
        "count": np.array([stats.count if count is None else count], np.int64),
    }
    if integer:
        out["min"], out["max"] = out["min"].astype(np.int64), out["max"].astype(np.int64)
    keys = [f"q{round(q * 100):02d}" for q in quantiles]
    if stats.has_quantiles and keys:
        for key, value in zip(keys, stats.quantile(list(quantiles)), strict=True):
            out[key] = value.reshape(shape)
    return out


#: names that moved out of core (to the layer that uses them): still found here, with a warning
_MOVED_NAMES = {"normalizer": "rlarrow.train.normalize", "NormalizationMode": "rlarrow.train.normalize"}


def __getattr__(name: str) -> Any:
    new = _MOVED_NAMES.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"rlarrow.core.stats.{name} has moved to {new}.{name}; import it from there "
                  "(the old path will be removed in rlarrow 1.0)", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(new), name)
