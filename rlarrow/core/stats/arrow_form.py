"""Column statistics as Arrow: the ``stats`` table's encoding, written and read back checked.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

:data:`STATS_SCHEMA` is one row per (column, and whatever the caller adds: episode, run) of
serialised statistics: plain lists of float64 and int64 and one binary KLL sketch per
element (DataSketches' own serialisation, readable by its Java and C++ libraries). Nothing
is pickled. This module knows the rows, not :class:`~rlarrow.core.stats.ColumnStats`:
:func:`stats_batch` encodes flat :class:`StatsRow` parts, :func:`column_rows` and
:func:`check_rows` find and check one column's stored rows, which
:func:`~rlarrow.core.stats.combine_rows` then merges.

Example:
    >>> import numpy as np
    >>> row = StatsRow(shape=(2,), k=200, rows=3, nan=np.array([0, 1]), mean=np.array([1.0, 2.0]),
    ...                m2=np.array([2.0, 0.0]), min=np.array([0.0, 2.0]), max=np.array([2.0, 2.0]),
    ...                sketches=None)
    >>> batch = stats_batch([("action", row)])
    >>> batch.schema == STATS_SCHEMA, batch.column("mean").to_pylist()
    (True, [[1.0, 2.0]])
    >>> [(name, check_rows(rows, "here", None, sketches=False).counts.tolist())
    ...  for name, rows in column_rows(batch, None, sketches=False)]
    [('action', [3])]
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError

__all__: list[str] = []

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

#: a stats table's record batches stay well below Arrow's 2 GiB for one binary array
BATCH_BYTES = 1 << 28

_FIX = "; recompute the statistics from the data"


class StatsRow(NamedTuple):
    """One column's statistics, flat per element, as one stored row holds them.

    ``sketches``: one serialised KLL sketch per element, or None (kept without sketches).
    """

    shape: tuple[int, ...]
    k: int
    rows: int
    nan: npt.NDArray[np.int64]
    mean: npt.NDArray[np.float64]
    m2: npt.NDArray[np.float64]
    min: npt.NDArray[np.float64]
    max: npt.NDArray[np.float64]
    sketches: list[bytes] | None


class StoredRows(NamedTuple):
    """One column's stored rows, checked, stacked ``(rows, elements)``.

    ``sketches`` is the rows' blobs flattened row by row, or None (not asked for, or a row
    kept without sketches: no quantiles for a merge of them).
    """

    shape: tuple[int, ...]
    ks: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    nan: npt.NDArray[np.int64]
    mean: npt.NDArray[np.float64]
    m2: npt.NDArray[np.float64]
    min: npt.NDArray[np.float64]
    max: npt.NDArray[np.float64]
    sketches: list[object] | None


def stats_batch(pairs: Sequence[tuple[str, StatsRow]]) -> pa.RecordBatch:
    """One record batch of :data:`STATS_SCHEMA` rows, built column by column."""
    parts = [row for _, row in pairs]
    sizes = np.array([p.nan.size for p in parts], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]), pa.int32())

    counts = np.array([p.rows for p in parts], dtype=np.int64)
    nan = np.concatenate([p.nan for p in parts]) if parts else np.empty(0, np.int64)
    empty = np.repeat(counts, sizes) == nan  # elements without values read NaN

    def lists(name: str, kind: pa.DataType, blank: bool = False) -> pa.Array:
        flat = np.concatenate([getattr(p, name) for p in parts]) if parts else np.empty(0)
        if blank:
            flat = np.where(empty, np.nan, flat)
        return pa.ListArray.from_arrays(offsets, pa.array(flat, kind))

    missing = [p.sketches is None for p in parts]
    blobs = [blob for p in parts for blob in p.sketches or []]
    blob_offsets = np.concatenate([[0], np.cumsum(np.where(missing, 0, sizes))])
    sketches = pa.ListArray.from_arrays(pa.array(blob_offsets, pa.int32()), pa.array(blobs, pa.binary()),
                                        mask=pa.array(missing, pa.bool_()))
    shapes = pa.array([list(p.shape) for p in parts], pa.list_(pa.int64()))
    return pa.RecordBatch.from_arrays([
        pa.array([name for name, _ in pairs], pa.string()),
        shapes,
        pa.array([p.k for p in parts], pa.int64()),
        pa.array(counts, pa.int64()),
        lists("nan", pa.int64()),
        lists("mean", pa.float64(), blank=True),
        lists("m2", pa.float64()),
        lists("min", pa.float64(), blank=True),
        lists("max", pa.float64(), blank=True),
        sketches,
    ], schema=STATS_SCHEMA)


def fixed_lists(array: pa.ChunkedArray, width: int, what: str, where: str,
                path: str | os.PathLike[str] | None) -> npt.NDArray[Any]:
    """A list column whose rows all hold ``width`` values, as ``(rows, width)`` NumPy."""
    if array.null_count:
        raise CorruptFileError(path, f"{where}: {array.null_count} row(s) have no {what}{_FIX}")
    lengths = np.asarray(pc.list_value_length(array))
    if lengths.size and np.any(lengths != width):
        bad = int(np.flatnonzero(lengths != width)[0])
        raise CorruptFileError(path, f"{where}: row {bad} has {lengths[bad]} {what} values, "
                                     f"not {width}{_FIX}")
    values = pc.list_flatten(array)
    if values.null_count:
        raise CorruptFileError(path, f"{where}: {what} holds nulls{_FIX}")
    return np.asarray(values.to_numpy()).reshape(len(array), width)


def column_rows(table: pa.Table | pa.RecordBatch, columns: Iterable[str] | None, *,
                sketches: bool) -> Iterator[tuple[str, dict[str, pa.ChunkedArray]]]:
    """Each column name's rows of a statistics table (``columns``: these names only), sorted by name.

    Only the :data:`STATS_SCHEMA` fields are kept (``sketches`` only when asked for); a
    name without rows is left out.
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
    for name in sorted(set(names.tolist()) if columns is None else set(columns)):
        idx = np.flatnonzero(names == name)
        if len(idx) == 0:
            continue
        if idx[-1] - idx[0] + 1 == len(idx):  # one run of rows (always so for one column): no copy
            yield name, {key: value.slice(int(idx[0]), len(idx)) for key, value in data.items()}
        else:
            yield name, {key: value.take(pa.array(idx)) for key, value in data.items()}


def _shape(rows: dict[str, pa.ChunkedArray], where: str,
           path: str | os.PathLike[str] | None) -> tuple[int, ...]:
    """The one shape all of a column's rows give."""
    shapes = rows["shape"]
    first = shapes[0].as_py() if len(shapes) else []
    shape_array = fixed_lists(shapes, len(first), "shape", where, path)
    if np.any(shape_array != np.asarray(first, dtype=np.int64)):
        bad = int(np.flatnonzero(np.any(shape_array != np.asarray(first), axis=1))[0])
        raise CorruptFileError(path, f"{where}: row {bad} has shape {shape_array[bad].tolist()}, "
                                     f"row 0 has {first}; rows of one column share a shape")
    shape = tuple(int(d) for d in first)
    if any(d < 0 for d in shape):
        raise CorruptFileError(path, f"{where}: shape {shape} has a negative dimension{_FIX}")
    return shape


def _sketch_blobs(rows: dict[str, pa.ChunkedArray], size: int, where: str,
                  path: str | os.PathLike[str] | None) -> list[object] | None:
    """The rows' sketch blobs, flattened row by row; None when a row was kept without sketches."""
    if rows["sketches"].null_count:
        return None
    lengths = np.asarray(pc.list_value_length(rows["sketches"]))
    if np.any(lengths != size):
        bad = int(np.flatnonzero(lengths != size)[0])
        raise CorruptFileError(path, f"{where}: row {bad} has {lengths[bad]} sketches for {size} "
                                     f"element(s){_FIX}")
    blobs: list[object] = pc.list_flatten(rows["sketches"]).to_pylist()
    return blobs


def check_rows(rows: dict[str, pa.ChunkedArray], where: str, path: str | os.PathLike[str] | None, *,
               sketches: bool) -> StoredRows:
    """One column's rows (from :func:`column_rows`) checked field by field, stacked.

    List lengths against the shape, counts, NaN counts and ``k``; a damaged row raises
    :class:`~rlarrow.core.errors.CorruptFileError` naming ``path``, ``where`` and the row.
    The sketches' bytes are checked where they are read
    (:func:`rlarrow.core.stats.sketches.load_sketches`).
    """
    shape = _shape(rows, where, path)
    size = math.prod(shape)
    for key in ("count", "k"):
        if rows[key].null_count:
            raise CorruptFileError(path, f"{where}: {rows[key].null_count} row(s) have no {key}{_FIX}")
    counts = np.asarray(rows["count"].to_numpy(), dtype=np.int64)
    ks = np.asarray(rows["k"].to_numpy(), dtype=np.int64)
    nan, mean, m2, lo, hi = (fixed_lists(rows[key], size, key, where, path)
                             for key in ("nan_count", "mean", "m2", "min", "max"))
    nan = nan.astype(np.int64)
    problems = [what for what, bad in (
        ("a negative count", np.any(counts < 0)),
        ("a NaN count outside 0..count", np.any(nan < 0) or np.any(nan > counts[:, None])),
        ("a k outside KLL's 8..65535", np.any((ks < 8) | (ks > 65535)))) if bad]
    if problems:
        raise CorruptFileError(path, f"{where}: rows with " + ", ".join(problems) + _FIX)
    blobs = _sketch_blobs(rows, size, where, path) if sketches else None
    return StoredRows(shape, ks, counts, nan, mean, m2, lo, hi, blobs)
