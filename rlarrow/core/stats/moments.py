"""Moments of a tensor column, element by element: counts, NaNs, mean, M2, min and max.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The exact, mergeable part of :class:`~rlarrow.core.stats.ColumnStats` (the sketches are
:mod:`rlarrow.core.stats.sketches`). Everything here works on flat per-element arrays: a
column's tensor flattened in C order, parts stacked ``(parts, elements)``.

:func:`merge` is the one merge of a column's moments: :meth:`ColumnStats.merge
<rlarrow.core.stats.ColumnStats.merge>`, :meth:`ColumnStats.combine
<rlarrow.core.stats.ColumnStats.combine>` and :func:`~rlarrow.core.stats.combine_rows`
(stored rows, so the store's ``stats`` table too) all go through it. :func:`add` is the
streaming step of :meth:`ColumnStats.update <rlarrow.core.stats.ColumnStats.update>` (one
batch into running moments, Chan et al.'s pairwise formula): the same result as
:func:`merge` of the two, to rounding, at half its cost for one batch of a few rows.

Example:
    >>> import numpy as np
    >>> x = np.array([[1.0, 2.0], [3.0, np.nan]])
    >>> n, mean, m2, lo, hi = batch_moments(x, ~np.isnan(x))
    >>> n.tolist(), mean.tolist(), m2.tolist(), lo.tolist(), hi.tolist()
    ([2, 1], [2.0, 2.0], [2.0, 0.0], [1.0, 2.0], [3.0, 2.0])
    >>> one = merge(np.array([2, 1]), np.array([[0, 1], [0, 0]]), np.array([[2.0, 2.0], [5.0, 4.0]]),
    ...             np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 2.0], [5.0, 4.0]]),
    ...             np.array([[3.0, 2.0], [5.0, 4.0]]))
    >>> one.rows, one.nan.tolist(), one.mean.tolist(), one.m2.tolist(), one.min.tolist()
    (3, [0, 1], [3.0, 3.0], [8.0, 2.0], [1.0, 2.0])
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rlarrow.core.errors import ArgumentError, ArgumentTypeError

__all__: list[str] = []

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]


class Moments(NamedTuple):
    """One column's moments, flat per element: what :func:`merge` gives.

    ``rows`` is the rows seen, ``nan`` each element's NaNs (left out of the rest); an
    element without values has mean and M2 0, min +inf and max -inf.
    """

    rows: int
    nan: _I64
    mean: _F64
    m2: _F64
    min: _F64
    max: _F64


def as_float_rows(values: object, shape: tuple[int, ...] | None) -> _F64:
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


def merge_moments(n: _I64, mean: _F64, m2: _F64) -> tuple[_I64, _F64, _F64]:
    """Merge stacked ``(parts, elements)`` counts, means and M2 in closed form (Chan et al.).

    ``mean = Σ nᵢ·meanᵢ / N`` and ``M2 = Σ (M2ᵢ + nᵢ·(meanᵢ - mean)²)``; the mean gets one
    correction pass (the weighted mean of the residuals), which keeps it exact to rounding
    when all the parts sit at a large offset.
    """
    total = n.sum(axis=0)
    weights = n.astype(np.float64)
    safe = np.where(total > 0, total, 1).astype(np.float64)
    with quiet():
        merged = (weights * mean).sum(axis=0) / safe
        merged = merged + (weights * (mean - merged)).sum(axis=0) / safe
        m2_total = (m2 + weights * (mean - merged) ** 2).sum(axis=0)
    empty = total == 0
    merged[empty] = 0.0
    m2_total[empty] = 0.0
    return total, merged, m2_total


def batch_moments(x: _F64, valid: npt.NDArray[np.bool_] | None) -> tuple[_I64, _F64, _F64, _F64, _F64]:
    """Count, mean, M2, min and max of each column of ``x``, the NaNs (``~valid``) left out.

    Two passes (the mean, then the deviations from it), with one correction of the mean
    by its residuals, so that values far from 0 keep their precision.
    """
    rows = x.shape[0]
    if valid is None:
        n = np.full(x.shape[1], rows, dtype=np.int64)
        with quiet():
            mean = x.mean(axis=0)
            mean = mean + (x - mean).mean(axis=0)
            m2 = ((x - mean) ** 2).sum(axis=0)
        return n, mean, m2, x.min(axis=0), x.max(axis=0)
    n = valid.sum(axis=0).astype(np.int64)
    safe = np.where(n > 0, n, 1).astype(np.float64)
    with quiet():
        mean = np.where(valid, x, 0.0).sum(axis=0) / safe
        mean = mean + np.where(valid, x - mean, 0.0).sum(axis=0) / safe
        m2 = (np.where(valid, x - mean, 0.0) ** 2).sum(axis=0)
    lo = np.min(np.where(valid, x, np.inf), axis=0)
    hi = np.max(np.where(valid, x, -np.inf), axis=0)
    mean[n == 0] = 0.0
    return n, mean, m2, lo, hi


def quiet() -> np.errstate:
    """Infinite values make inf - inf and overflows: NaN or inf results, not warnings."""
    return np.errstate(invalid="ignore", over="ignore")


def merge(count: _I64, nan: _I64, mean: _F64, m2: _F64, lo: _F64, hi: _F64) -> Moments:
    """The moments of several parts of one column together: THE merge of a column's moments.

    Each argument is stacked ``(parts, elements)`` (``count``: ``(parts,)`` rows). An
    element a part has no values of (its count less its NaNs is 0) takes no part in that
    element's mean, M2, min or max, whatever those hold (a stored row has NaN there).
    Counts and NaNs add up; means and M2 merge in closed form (:func:`merge_moments`); min
    and max are the parts' extremes.
    """
    counts = np.asarray(count, dtype=np.int64)
    nan = np.asarray(nan, dtype=np.int64)
    n = counts[:, None] - nan
    empty = n == 0
    if empty.any():  # (what such an element holds is no value: left out)
        mean, m2 = np.where(empty, 0.0, mean), np.where(empty, 0.0, m2)
        lo, hi = np.where(empty, np.inf, lo), np.where(empty, -np.inf, hi)
    _, merged_mean, merged_m2 = merge_moments(n, mean, m2)
    return Moments(int(counts.sum()), nan.sum(axis=0, dtype=np.int64), merged_mean, merged_m2,
                   np.min(lo, axis=0, initial=np.inf), np.max(hi, axis=0, initial=-np.inf))


def add(running: Moments, part: Moments) -> Moments:
    """``running`` moments with one more ``part`` added (Chan et al.'s pairwise formula).

    What :meth:`ColumnStats.update <rlarrow.core.stats.ColumnStats.update>` does per batch:
    :func:`merge` of the two gives the same to rounding, with more array operations.

    Example:
        >>> one = lambda *values: np.array([values], dtype=float).reshape(-1)
        >>> first = Moments(2, np.array([0]), one(2.0), one(2.0), one(1.0), one(3.0))
        >>> both = add(first, Moments(1, np.array([0]), one(5.0), one(0.0), one(5.0), one(5.0)))
        >>> both.rows, both.mean.tolist(), both.m2.tolist(), both.max.tolist()
        (3, [3.0], [8.0], [5.0])
    """
    n_self = running.rows - running.nan
    n = part.rows - part.nan
    total = n_self + n
    safe = np.where(total > 0, total, 1).astype(np.float64)
    with quiet():
        delta = part.mean - running.mean
        mean = running.mean + delta * (n / safe)
        m2 = running.m2 + part.m2 + delta**2 * (n_self.astype(np.float64) * n / safe)
    mean[total == 0] = 0.0
    return Moments(running.rows + int(part.rows), running.nan + part.nan, mean, m2,
                   np.minimum(running.min, part.min), np.maximum(running.max, part.max))
