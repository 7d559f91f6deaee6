"""KLL quantile sketches of a tensor column's elements, and their bytes checked before use.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

One Apache DataSketches ``kll_doubles_sketch`` per element (``datasketches`` is the
optional ``stats`` extra: :func:`datasketches` names it when it is missing). This module
feeds them (:func:`feed_sketches`), merges them (:func:`merged_sketches`,
:func:`load_sketches`), and parses their serialised form itself
(:func:`kll_blob_problem`, :func:`retained`) before DataSketches sees stored bytes.

Example:
    >>> import numpy as np
    >>> sketches = [datasketches("an example").kll_doubles_sketch(200)]
    >>> feed_sketches(sketches, np.array([[3.0], [np.nan], [1.0]]))
    >>> sketches[0].n, kll_blob_problem(bytes(sketches[0].serialize()))
    (2, None)
    >>> kll_blob_problem(bytes([5, 1, 15]))
    '3 bytes, shorter than the 8-byte KLL preamble'
    >>> values, weights = retained(sketches[0])
    >>> sorted(values.tolist()), weights.tolist()
    ([1.0, 3.0], [1.0, 1.0])
"""

from __future__ import annotations

import copy
import functools
import os
import struct
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from rlarrow.core.deps import require
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError

__all__: list[str] = []

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_Sketch = Any  # a datasketches.kll_doubles_sketch


def datasketches(feature: str) -> ModuleType:
    """The ``datasketches`` module, or an error naming the ``stats`` extra."""
    return require("datasketches", feature=feature)  # (rlarrow.core.deps names the extra)


def check_k(k: int) -> int:
    """``k`` checked against KLL's limits (8 to 65535)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ArgumentTypeError(f"k must be an int, not {type(k).__name__}")
    if not 8 <= int(k) <= 65535:
        raise ArgumentError(f"k must be between 8 and 65535 (KLL's limits), not {k}")
    return int(k)


def feed_sketches(sketches: Sequence[_Sketch], values: npt.NDArray[Any]) -> None:
    """Update sketch ``j`` with column ``j`` of ``values`` (rows, elements), NaN left out.

    Each column is sorted (in the values' own dtype: float32 sorts in about half the time
    of float64, and converting afterwards keeps the order), summarised as a KLL sketch by
    :func:`sorted_sketch_blobs` and merged into the sketch. DataSketches' own ``update``
    of the same values holds the interpreter's lock throughout (12 ms for 50 elements of
    10,000 rows): a recorder's writer thread then stalls the environment loop. The sort
    and the summary are NumPy work; what is left under the lock is a deserialise and a
    merge per element, about a tenth of that.
    """
    if not len(sketches) or values.shape[0] == 0:
        return
    columns = np.array(values.T, order="C")  # (a copy: sorted in place below)
    columns.sort(axis=1)
    nan = (np.isnan(columns).sum(axis=1) if columns.dtype.kind == "f"
           else np.zeros(len(columns), np.int64))  # (NaN sorts last)
    rows = columns.shape[1]
    deserialize = type(sketches[0]).deserialize
    k = sketches[0].k
    for n in np.unique(rows - nan).tolist():
        if not n:
            continue
        which = np.flatnonzero(rows - nan == n)
        for j, blob in zip(which.tolist(), sorted_sketch_blobs(columns[which, :n], k), strict=True):
            sketches[j].merge(deserialize(blob))


def _summary_levels(n: int, k: int) -> list[int]:
    """How many items each level of a KLL sketch summarising ``n`` values keeps (level 0 first).

    The fewest levels whose capacities (:func:`kll_capacity`'s, level ``h`` weighing
    ``2**h``) can hold ``n``; filled from the top down, the top level as full as ``n``
    allows, each level below taking what the levels above left (at most its capacity).
    """
    levels = 1
    while True:
        caps = [kll_level_capacity(k, levels, h) for h in range(levels)]
        if sum(c << h for h, c in enumerate(caps)) >= n:
            break
        levels += 1
    counts = [0] * levels
    left = n
    for h in range(levels - 1, -1, -1):
        counts[h] = min(caps[h], left >> h)
        left -= counts[h] << h
    return counts


def sorted_sketch_blobs(columns: npt.NDArray[Any], k: int) -> list[bytes]:
    """KLL sketches (DataSketches' serialised form) of each row of ``columns``, sorted, no NaN.

    A KLL sketch keeps items in levels, an item of level ``h`` standing for ``2**h`` values.
    For values already sorted, each level's items are taken straight from consecutive
    blocks of the sorted row, one item per block at an offset drawn from a generator
    seeded by the row length (so a commit's statistics do not change from one run to the
    next): the sketch DataSketches builds by compacting the same values, laid out at once.
    The rank of any value is then off by less than one top-level block, ``2**(levels - 1)``
    values, which is under ``2/k`` of ``n`` (1% for ``k=200``, where KLL's own bound is
    1.3%); the sketches merge with any other as DataSketches' do. Every blob passes
    :func:`kll_blob_problem` (tested).
    """
    n = columns.shape[1]
    rows = columns.shape[0]
    if n == 1:  # DataSketches' one-item form
        head = struct.pack("<BBBBHBB", 2, 2, _KLL_FAMILY, _KLL_SINGLE | _KLL_SORTED, k, 8, 0)
        return [head + struct.pack("<d", float(v)) for v in columns[:, 0]]
    counts = _summary_levels(n, k)
    levels = len(counts)
    rng = np.random.default_rng(n)
    picks, start = [], 0
    for h in range(levels):  # level 0's values first, each level in its part of the sorted row
        block = 1 << h
        picks.append(start + np.arange(counts[h]) * block + rng.integers(0, block, counts[h]))
        start += counts[h] << h
    items = columns[:, np.concatenate(picks)].astype("<f8")
    capacity = kll_capacity(k, levels)
    offsets = np.cumsum([capacity - items.shape[1], *counts[:-1]]).tolist()
    head = struct.pack("<BBBBHBBQHBB", 5, 1, _KLL_FAMILY, _KLL_SORTED, k, 8, 0, n, k, levels, 0)
    head += struct.pack(f"<{levels}I", *offsets)
    ends = np.stack([columns[:, 0], columns[:, n - 1]], axis=1).astype("<f8")
    body = np.concatenate([ends, items], axis=1)
    return [head + body[r].tobytes() for r in range(rows)]


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
_KLL_EMPTY, _KLL_SORTED, _KLL_SINGLE = 1, 2, 4


def _capacity_at_depth(k: int, depth: int) -> int:
    def aux(k: int, depth: int) -> int:
        return int((((k << 1) << depth) // 3**depth + 1) >> 1)

    return max(8, aux(k, depth) if depth <= 30 else aux(aux(k, depth // 2), depth - depth // 2))


def kll_level_capacity(k: int, levels: int, height: int) -> int:
    """The items level ``height`` (0: the lowest) of a ``levels``-level KLL sketch holds."""
    return _capacity_at_depth(k, levels - height - 1)


@functools.cache
def kll_capacity(k: int, levels: int) -> int:
    """The items ``levels`` levels of a KLL sketch of ``k`` hold (DataSketches' kll_helper)."""
    return sum(_capacity_at_depth(k, depth) for depth in range(levels))


def kll_blob_problem(blob: bytes) -> str | None:
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
    capacity = kll_capacity(k, levels)
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


def retained(sketch: _Sketch) -> tuple[_F64, _F64]:
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
    bounds = np.array([*struct.unpack_from(f"<{levels}I", blob, 20), kll_capacity(k, levels)])
    values = np.frombuffer(blob, "<f8", offset=20 + 4 * levels + 16).astype(np.float64)
    weights = np.repeat(2.0 ** np.arange(levels), np.diff(bounds))
    return values, weights


def read_sketch(deserialize: Callable[[bytes], _Sketch], blob: object, expected_n: int) -> _Sketch | str:
    """One sketch blob deserialised and checked before and after, or what is wrong with it."""
    if not isinstance(blob, bytes):
        return f"the KLL sketch is missing ({type(blob).__name__})"
    problem = kll_blob_problem(blob)
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


def merged_sketches(lists: Sequence[list[_Sketch] | None], *, into_first: bool) -> list[_Sketch] | None:
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


def load_sketches(blobs: list[object], n: _I64, k: int, where: str,
                   path: str | os.PathLike[str] | None) -> list[_Sketch]:
    """Merge ``(rows, elements)`` sketch blobs (flattened row by row) into one sketch per element.

    ``n`` holds each blob's expected count; blobs of elements without values are skipped.
    Blobs that deserialise are merged as they come, so that only the merged sketches and
    the one being read are held at a time.
    """
    rows, size = n.shape
    ds = datasketches("quantile sketches (rlarrow.core.stats)")
    deserialize = ds.kll_doubles_sketch.deserialize
    merged: list[_Sketch] = [None] * size
    for i, expected in enumerate(n.reshape(-1).tolist()):
        if not expected:
            continue
        sketch = read_sketch(deserialize, blobs[i], expected)
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
