"""Mergeable per-element statistics of one tensor column: :class:`ColumnStats`.

A column's moments (:mod:`.moments`) and KLL sketches (:mod:`.sketches`) together, built,
merged and read as one object, and stored as rows of the ``stats`` table's Arrow form
(:mod:`.arrow_form`): :func:`stats_table` writes them, :func:`combine_rows` merges stored
rows back. ``rlarrow.core.stats`` (the package) says what the statistics are.

Example:
    >>> import numpy as np
    >>> a = ColumnStats.from_array(np.array([1.0, 2.0]))
    >>> b = combine_rows(stats_table([("x", a), ("x", ColumnStats.from_array(np.array([6.0])))]))["x"]
    >>> b.count, float(b.mean), float(b.max)
    (3, 3.0, 6.0)
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError, UsageError
from rlarrow.core.stats.arrow_form import (
    BATCH_BYTES,
    STATS_SCHEMA,
    StatsRow,
    check_rows,
    column_rows,
    stats_batch,
)
from rlarrow.core.stats.moments import Moments, add, as_float_rows, batch_moments, merge, quiet
from rlarrow.core.stats.sketches import (
    check_k,
    datasketches,
    feed_sketches,
    load_sketches,
    merged_sketches,
    retained,
)

__all__ = ["ColumnStats", "combine_rows", "stats_table"]

#: the KLL sketch's size parameter: 200 gives about 1.3 % normalised rank error (99 % confidence)
DEFAULT_K = 200

#: the quantiles :meth:`ColumnStats.to_dict` writes, as LeRobot's ``stats.json`` has them
DEFAULT_QUANTILES: tuple[float, ...] = (0.01, 0.10, 0.50, 0.90, 0.99)

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_Sketch = Any  # a datasketches.kll_doubles_sketch


def check_ranks(q: float | Sequence[float]) -> tuple[_F64, bool]:
    """``q`` as float64 ranks in [0, 1], and whether it was one number."""
    scalar = np.ndim(q) == 0
    ranks = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if ranks.ndim != 1 or not np.all((ranks >= 0.0) & (ranks <= 1.0)):
        raise ArgumentError(f"quantiles are ranks between 0 and 1, not {q!r}")
    return ranks, scalar


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
        self._k = check_k(k)
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
        x = as_float_rows(values, self._shape)
        if x.shape[0] == 0:
            return
        nan = np.isnan(x)
        valid = ~nan if nan.any() else None
        n, mean, m2, lo, hi = batch_moments(x, valid)
        nan_count = x.shape[0] - n
        if self._sketches is not None:
            ds = datasketches("quantile sketches (rlarrow.core.stats)")
            if not self._sketches:
                self._sketches = [ds.kll_doubles_sketch(self._k) for _ in range(x.shape[1])]
            feed_sketches(self._sketches, x)
        self._add(Moments(x.shape[0], nan_count, mean, m2, lo, hi))

    def _moments(self) -> Moments:
        return Moments(self._count, self._nan, self._mean, self._m2, self._min, self._max)

    def _add(self, part: Moments) -> None:
        """Add a batch's moments to these running ones (:func:`.moments.add`)."""
        self._set_moments(add(self._moments(), part))

    def _set_moments(self, merged: Moments) -> None:
        self._count, self._nan, self._mean, self._m2, self._min, self._max = merged
        self._count = int(self._count)

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
        self._sketches = merged_sketches([self._sketches, other._sketches], into_first=True)
        self._set_moments(_merged([self, other]))

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
        out._set_moments(_merged(items))
        out._sketches = merged_sketches([p._sketches for p in items], into_first=False)
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
        with quiet():
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
                kept, weight = retained((part._sketches or [])[j])
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
            ds = datasketches("quantile sketches (rlarrow.core.stats)")
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
        ranks, scalar = check_ranks(q)
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
            ds = datasketches("quantile sketches (rlarrow.core.stats)")
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
        row: dict[str, Any] = stats_batch([("", self._stored_row())]).to_pylist()[0]
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

    def _stored_row(self) -> StatsRow:
        """These statistics as one stored row's flat parts (no rows yet: empty sketches)."""
        kept = self._sketches
        if kept is not None and not kept and self._nan.size:
            ds = datasketches("quantile sketches (rlarrow.core.stats)")
            kept = [ds.kll_doubles_sketch(self._k) for _ in range(self._nan.size)]
        blobs = None if kept is None else [bytes(s.serialize()) for s in kept]
        return StatsRow(self._shape, self._k, self._count, self._nan, self._mean, self._m2, self._min,
                        self._max, blobs)

    def __repr__(self) -> str:
        kind = "mixture, " if self._weighted else ""
        return f"ColumnStats({kind}shape={self._shape}, count={self._count}, k={self._k})"


def _merged(parts: Sequence[ColumnStats]) -> Moments:
    """Parts' moments stacked and merged with the one merge (:func:`.moments.merge`)."""
    return merge(np.array([p._count for p in parts], dtype=np.int64), np.stack([p._nan for p in parts]),
                 np.stack([p._mean for p in parts]), np.stack([p._m2 for p in parts]),
                 np.stack([p._min for p in parts]), np.stack([p._max for p in parts]))


def _build(shape: tuple[int, ...], k: int, merged: Moments) -> ColumnStats:
    """Statistics from checked, merged flat moments (an element without values: any mean, m2, min, max)."""
    stats = ColumnStats(shape, k=k)
    count, nan = merged.rows, merged.nan
    empty = nan == count
    stats._count = count
    stats._nan = nan.astype(np.int64)
    stats._mean = np.where(empty, 0.0, merged.mean)
    stats._m2 = np.where(empty, 0.0, merged.m2)
    stats._min = np.where(empty, np.inf, merged.min)
    stats._max = np.where(empty, -np.inf, merged.max)
    return stats


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
        if size > BATCH_BYTES or end == len(pairs):
            batches.append(stats_batch([(name, s._stored_row()) for name, s in pairs[start:end]]))
            start, size = end, 0
    return pa.Table.from_batches(batches, schema=STATS_SCHEMA)


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
    out: dict[str, ColumnStats] = {}
    for name, rows in column_rows(table, columns, sketches=sketches):
        where = f"statistics of column {name!r}"
        stored = check_rows(rows, where, path, sketches=sketches)
        stats = _build(stored.shape, int(stored.ks.min()),
                       merge(stored.counts, stored.nan, stored.mean, stored.m2, stored.min, stored.max))
        if stored.sketches is None:
            stats._sketches = None  # not asked for, or a row kept without sketches: no quantiles
        else:
            n = stored.counts[:, None] - stored.nan
            stats._sketches = load_sketches(stored.sketches, n, stats._k, where, path)
        out[name] = stats
    return out
