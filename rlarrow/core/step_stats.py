"""Normalisation statistics of the ``steps`` table, kept in the ``stats`` table as it is written.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Every commit of ``steps`` rows (a recorder's flush, an import, :meth:`Store.append
<rlarrow.core.store.commits.CommittingStore.append>`) also commits, in the same manifest
write, the statistics of those rows (:class:`StepStatsBuilder`):

* per **segment** (one episode's rows in the commit) and column: count, NaN count, mean
  and M2 (Welford), min and max per element, as :class:`~rlarrow.core.stats.ColumnStats`
  stores them; an episode recorded over several commits has a segment in each;
* per **block** (one run's rows in the commit) and column: the same, plus one KLL
  quantile sketch per element. Sketches are kept per block, not per episode: a sketch of
  a 1,000-step episode takes about 2.6 KB per element, two thirds of the float32 data it
  describes, where a block of 10,000 steps takes 4.4 KB per element (a tenth).

The columns are ``observation``, ``action``, ``reward``, ``discount`` and each leaf of a
dict observation or action (``observation.state``), whenever they are bool, int or float
with at most :data:`MOMENTS_MAX_ELEMENTS` elements per value (images are left out: a
per-pixel mean of every episode costs more than it tells); sketches for those of at most
:data:`SKETCH_MAX_ELEMENTS`. Null values (a recorder's action at an episode's end) are
not counted.

:func:`rlarrow.core.stored_stats.combine_stored` merges the rows of any selection of runs and episodes: the
moments from the segments (milliseconds), the quantiles from the blocks whose every
segment is selected; a block only partly selected (an episode-level split) has its
selected episodes' values read again for the quantiles only. Steps written without
statistics (a store of format 1.1, files staged by Ray tasks) are found by counting rows
per run and read once from the data, so the answer is never missing rows.

:mod:`rlarrow.core.stored_stats` merges what is stored for any selection.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import schema as _schema
from rlarrow.core import stats as _stats
from rlarrow.core.errors import ArgumentError, ArgumentTypeError
from rlarrow.core.tensors import TensorType, tensor_dtype, tensor_shape, to_numpy

# (a Store is passed in, never imported: the store imports this module to build the rows)
_Store = Any

__all__: list[str] = []

#: the steps columns statistics are kept for (with their dict leaves)
STAT_COLUMNS = ("observation", "action", "reward", "discount")

#: columns with more elements per value get no stored statistics (images)
MOMENTS_MAX_ELEMENTS = 4096

#: columns with at most this many elements per value get KLL sketches (quantiles)
SKETCH_MAX_ELEMENTS = 256

#: what a commit of steps keeps: moments and sketches, moments only, or nothing
StatsMode = Literal["sketches", "moments", "off"]

_MODES = ("sketches", "moments", "off")

#: rows :meth:`StepStatsBuilder.add` takes at a time (bounds its temporaries)
_ADD_ROWS = 65_536
_F64 = npt.NDArray[np.float64]
_Leaf = tuple[str, tuple[int, ...], tuple[int, ...]]  # name, field path, shape


def check_mode(mode: object) -> StatsMode:
    """``mode`` checked against :data:`StatsMode`."""
    if mode not in _MODES:
        raise ArgumentError(f"step statistics mode {mode!r} is not one of {list(_MODES)}")
    return mode  # type: ignore[return-value]


def _numeric(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype))


def stat_leaves(schema: pa.Schema) -> list[_Leaf]:
    """The columns of a steps schema statistics are kept for: ``(name, field path, shape)``.

    Example:
        >>> import pyarrow as pa
        >>> stat_leaves(pa.schema([("reward", pa.float64()), ("step", pa.int64()),
        ...     ("observation", pa.struct([("state", pa.list_(pa.float32(), 3)),
        ...                                ("name", pa.string())]))]))
        [('observation.state', (0,), (3,)), ('reward', (), ())]
    """
    out: list[_Leaf] = []

    def visit(name: str, path: tuple[int, ...], type_: pa.DataType) -> None:
        tensor_types = (TensorType, pa.FixedShapeTensorType)
        if isinstance(type_, pa.ExtensionType) and not isinstance(type_, tensor_types):
            type_ = type_.storage_type
        if pa.types.is_struct(type_):
            for i, field in enumerate(type_):
                visit(f"{name}.{field.name}", (*path, i), field.type)
            return
        try:
            shape, dtype = tensor_shape(type_), tensor_dtype(type_)
        except (ArgumentTypeError, ArgumentError, AttributeError):
            return
        if _numeric(dtype) and math.prod(shape) <= MOMENTS_MAX_ELEMENTS:
            out.append((name, path, shape))

    for column in STAT_COLUMNS:
        if column in schema.names:
            visit(column, (), schema.field(column).type)
    return sorted(out)


#: temporaries of at most this many float64 values are kept for the thread's next builder
_KEPT_VALUES = 1 << 22  # 32 MiB each: a 10,000-step commit of 400-element observations
_per_thread = threading.local()


def _thread_buffers() -> dict[str, _F64]:
    """The calling thread's temporaries (:func:`_scratch`), shared by its builders one after another.

    A recorder or writer makes one :class:`StepStatsBuilder` per commit; keeping its
    temporaries for the next one spares each commit their page faults (the statistics of a
    10,000-step Catch commit, moments only: 2.9 -> 2.0 us a step on the shared 2-core VM).
    :meth:`StepStatsBuilder.add` takes them when it starts and uses them only until it
    returns, and a thread runs one ``add`` at a time.
    """
    buffers: dict[str, _F64] | None = getattr(_per_thread, "buffers", None)
    if buffers is None:
        buffers = _per_thread.buffers = {}
    return buffers


def _scratch(buffers: dict[str, _F64] | None, key: str, rows: int, width: int) -> _F64 | None:
    """A reused float64 ``(rows, width)`` buffer (None: allocate).

    Fresh multi-megabyte arrays cost more in page faults than the arithmetic on them (a
    temporary of one commit's observations: 10 ns per value on the 2-core VM, against 1 ns
    when the buffer is reused), so the builders keep their temporaries: up to
    :data:`_KEPT_VALUES` values each (larger ones are allocated for each batch).
    """
    if buffers is None:
        return None
    size = rows * width
    flat = buffers.get(key)
    if flat is None or flat.size < size:
        flat = np.empty(max(size, 1 << 16))
        if size <= _KEPT_VALUES:
            buffers[key] = flat
        else:
            buffers.pop(key, None)  # (too large to keep for the thread's next builder)
    return flat[:size].reshape(rows, width)


def leaf_values(table: pa.Table, leaf: _Leaf, buffers: dict[str, _F64] | None = None
                 ) -> tuple[_F64, npt.NDArray[np.bool_], npt.NDArray[Any]]:
    """A leaf's values as float64 ``(rows, elements)``, which rows hold one, and the stored values.

    The stored values are the same rows in their own dtype, 0 where null.
    """
    name, path, shape = leaf
    column: Any = table.column(name.split(".", 1)[0])
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    valid = np.ones(len(column), bool)
    for i in path:
        if isinstance(column.type, pa.ExtensionType):
            column = column.storage
        if column.null_count:
            valid &= np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
        column = column.field(i)
    if column.null_count:
        valid &= np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
    values = np.asarray(to_numpy(column, fill_value=0)).reshape(len(valid), math.prod(shape))
    out = _scratch(buffers, "x", *values.shape) if values.dtype != np.float64 else None
    with np.errstate(invalid="ignore", over="ignore"):  # (any bytes are some float)
        if out is None:
            return values.astype(np.float64, copy=False), valid, values
        np.copyto(out, values, casting="unsafe")
        return out, valid, values


def _segment_moments(x: _F64, valid_rows: npt.NDArray[np.bool_], starts: npt.NDArray[np.intp],
                     buffers: dict[str, _F64] | None = None) -> tuple[npt.NDArray[Any], ...]:
    """Per segment (rows ``starts[i]`` to the next start): count, NaN count, mean, M2, min, max.

    Vectorised over segments and elements (``np.add.reduceat``); two passes, the mean then
    M2 (the squared deviations from it, as :class:`ColumnStats` does). Null rows
    are dropped first, so that the common case (no NaN) runs without masks.
    """
    rows = x.shape[0]
    count = np.add.reduceat(valid_rows.astype(np.int64), starts)
    if not valid_rows.all():
        x = x[valid_rows]
        present = count > 0
        starts = (np.cumsum(count) - count)[present].astype(np.intp)
        if x.shape[0] == 0:
            empty = np.full((len(count), x.shape[1]), np.nan)
            return count, np.zeros(empty.shape, np.int64), empty, np.zeros(empty.shape), empty, empty.copy()
        parts = _segment_moments(x, np.ones(x.shape[0], bool), starts, buffers)
        if present.all():
            return parts
        out = [count]
        for part, fill in zip(parts[1:], (0, np.nan, 0.0, np.nan, np.nan), strict=True):
            full = np.full((len(count), x.shape[1]), fill, dtype=part.dtype)
            full[present] = part
            out.append(full)
        return tuple(out)
    lengths = np.diff(np.append(starts, rows))
    nan = np.isnan(x)
    if not nan.any():
        n = lengths.astype(np.float64)
        segment = np.repeat(np.arange(len(starts)), lengths)
        # Element by element (a transposed copy): ufunc.reduceat holds the interpreter's lock,
        # and along contiguous rows it takes a third of the time it takes down the columns
        # (np.minimum.reduceat of a 10,000 x 50 commit: 2.0 ms against 5.6), which a
        # recorder's environment loop waits for. The copy itself runs without the lock.
        xt = _scratch(buffers, "xt", x.shape[1], rows)
        if xt is None:
            xt = np.empty((x.shape[1], rows))
        np.copyto(xt, x.T)
        dev = _scratch(buffers, "dev", x.shape[1], rows)
        with np.errstate(invalid="ignore", over="ignore"):
            # (a float64 sum of one commit's rows loses nothing a correction pass would restore)
            mean = np.add.reduceat(xt, starts, axis=1) / n
            dev = np.take(mean, segment, axis=1, out=dev)  # (np.repeat by row is 10x slower)
            np.subtract(xt, dev, out=dev)
            np.multiply(dev, dev, out=dev)
            m2 = np.add.reduceat(dev, starts, axis=1)
        lo = np.minimum.reduceat(xt, starts, axis=1)
        hi = np.maximum.reduceat(xt, starts, axis=1)
        return count, np.zeros(mean.T.shape, np.int64), mean.T, m2.T, lo.T, hi.T
    valid = ~nan
    n_valid = np.add.reduceat(valid, starts, axis=0).astype(np.int64)
    safe = np.maximum(n_valid, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.add.reduceat(np.where(valid, x, 0.0), starts, axis=0) / safe
        residual = np.where(valid, x - np.repeat(mean, lengths, axis=0), 0.0)
        mean += np.add.reduceat(residual, starts, axis=0) / safe
        dev = np.where(valid, x - np.repeat(mean, lengths, axis=0), 0.0)
        m2 = np.add.reduceat(dev * dev, starts, axis=0)
    lo = np.minimum.reduceat(np.where(valid, x, np.inf), starts, axis=0)
    hi = np.maximum.reduceat(np.where(valid, x, -np.inf), starts, axis=0)
    empty = n_valid == 0
    mean[empty], lo[empty], hi[empty] = np.nan, np.nan, np.nan
    return count, count[:, None] - n_valid, mean, m2, lo, hi


class StepStatsBuilder:
    """The ``stats`` rows of steps rows as they are written: :meth:`add` each batch, then :meth:`finish`.

    Args:
        schema: the steps layout's schema (its :func:`stat_leaves` are kept).
        layout: the layout directory, ``"steps"`` or ``"steps.N"``.
        mode: ``"sketches"`` (moments and per-block sketches), ``"moments"``, or ``"off"``.
        k: the sketches' size parameter.

    Example:
        >>> from rlarrow.core import schema
        >>> rows = schema.build("steps", {"run_id": "r", "episode_id": [0, 0, 1],
        ...     "step": [0, 1, 0], "env_index": 0, "reward": [1.0, 2.0, 4.0],
        ...     "is_first": [True, False, True], "is_last": False, "is_terminal": False})
        >>> builder = StepStatsBuilder(rows.schema, "steps")
        >>> builder.add(rows)
        >>> table = builder.finish("block-1")
        >>> sorted(set(table.column("column").to_pylist()))  # (discount: all null, count 0)
        ['discount', 'reward']
        >>> reward = table.filter(pc.field("column") == "reward")
        >>> reward.column("episode_id").to_pylist(), reward.column("count").to_pylist()
        ([0, 1, None], [2, 1, 3])
    """

    def __init__(self, schema: pa.Schema, layout: str, *, mode: StatsMode = "sketches",
                 k: int = _stats.DEFAULT_K) -> None:
        self.layout = layout
        self.mode = check_mode(mode)
        self.leaves = stat_leaves(schema) if self.mode != "off" else []
        self.k = k
        # per batch: the segments' runs and episodes, rows, and per leaf the moment arrays
        self._parts: list[tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int64],
                                dict[str, tuple[Any, ...]]]] = []
        self._sketches: dict[tuple[str, str], list[Any]] = {}  # (run, leaf) -> a sketch per element

    def add(self, table: pa.Table) -> None:
        """Add a batch of steps rows (any order; rows of one episode need not be together).

        Taken :data:`_ADD_ROWS` rows at a time, so that the float64 temporaries stay
        bounded whatever the table's size (a large parallel append's); an episode cut
        between two pieces is merged back into one segment by :meth:`finish`.
        """
        if not self.leaves or table.num_rows == 0:
            return
        if table.num_rows > _ADD_ROWS:
            for start in range(0, table.num_rows, _ADD_ROWS):
                self.add(table.slice(start, _ADD_ROWS))
            return
        runs = pc.dictionary_encode(table.column("run_id")).combine_chunks()
        run_names = runs.dictionary.to_pylist()
        run_index = np.asarray(runs.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        episode = np.asarray(table.column("episode_id").to_numpy(), dtype=np.int64)
        order = np.lexsort((episode, run_index))
        if not np.all(order[1:] > order[:-1]):  # (already grouped: no copy)
            table = table.take(pa.array(order))
            run_index, episode = run_index[order], episode[order]
        change = np.flatnonzero((np.diff(run_index) != 0) | (np.diff(episode) != 0)) + 1
        starts = np.concatenate([[0], change]).astype(np.intp)
        seg_runs = [run_names[i] for i in run_index[starts]]
        rows = np.diff(np.append(starts, table.num_rows)).astype(np.int64)
        moments: dict[str, tuple[Any, ...]] = {}
        run_bounds = np.flatnonzero(np.diff(run_index) != 0) + 1
        run_starts = np.concatenate([[0], run_bounds, [table.num_rows]])
        buffers = _thread_buffers()  # temporaries reused from batch to batch (_scratch)
        for leaf in self.leaves:
            x, valid, raw = leaf_values(table, leaf, buffers)
            moments[leaf[0]] = _segment_moments(x, valid, starts, buffers)
            if self.mode == "sketches" and x.shape[1] <= SKETCH_MAX_ELEMENTS:
                names = [run_names[run_index[s]] for s in run_starts[:-1]]
                self._sketch(leaf[0], raw, valid, run_starts, names)
        self._parts.append((seg_runs, episode[starts], rows, moments))

    def _sketch(self, name: str, x: npt.NDArray[Any], valid: npt.NDArray[np.bool_],
                bounds: npt.NDArray[np.int64], runs: list[str]) -> None:
        ds = _stats._datasketches("quantile statistics of steps (set store.step_stats = 'moments' "
                                  "to keep moments only)")
        for run, lo, hi in zip(runs, bounds[:-1], bounds[1:], strict=True):
            sketches = self._sketches.get((run, name))
            if sketches is None:
                sketches = [ds.kll_doubles_sketch(self.k) for _ in range(x.shape[1])]
                self._sketches[(run, name)] = sketches
            rows = x[lo:hi]
            kept = valid[lo:hi]
            _stats._feed_sketches(sketches, rows if kept.all() else rows[kept])

    def reset(self) -> None:
        """Forget what was added (the rows were not committed)."""
        self._parts, self._sketches = [], {}

    def finish(self, block: str) -> pa.Table | None:
        """The ``stats`` rows of everything added (None: nothing), and start again."""
        parts, sketches = self._parts, self._sketches
        self._parts, self._sketches = [], {}
        if not parts:
            return None
        seg_runs = [r for p in parts for r in p[0]]
        episodes = np.concatenate([p[1] for p in parts])
        rows = np.concatenate([p[2] for p in parts])
        merged = {name: tuple(np.concatenate([p[3][name][i] for p in parts]) for i in range(6))
                  for name, _, _ in self.leaves}
        seg_runs, episodes, rows, merged = _one_row_per_episode(seg_runs, episodes, rows, merged)
        run_of = np.array(seg_runs, dtype=object)
        runs = sorted(set(seg_runs))
        columns: dict[str, list[Any]] = {name: [] for name in _schema.table("stats").column_names}
        # the per-element columns as (rows, elements) blocks, one list column each at the end
        # (a Python list per row was a tenth of a recorder's commit)
        blocks: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in _PER_ELEMENT}
        for name, _, shape in self.leaves:
            count, nan, mean, m2, lo, hi = merged[name]
            size = math.prod(shape)
            segments = len(seg_runs)
            # segment rows
            block_rows: list[tuple[Any, ...]] = []
            for run in runs:
                idx = np.flatnonzero(run_of == run)
                n = count[idx][:, None] - nan[idx]
                empty = n == 0
                _, b_mean, b_m2 = _stats._merge_moments(n, np.where(empty, 0.0, mean[idx]),
                                                        np.where(empty, 0.0, m2[idx]))
                b_n = n.sum(axis=0)
                b_lo = np.min(np.where(empty, np.inf, lo[idx]), axis=0)
                b_hi = np.max(np.where(empty, -np.inf, hi[idx]), axis=0)
                none = b_n == 0
                b_mean[none], b_lo[none], b_hi[none] = np.nan, np.nan, np.nan
                kept = sketches.get((run, name))
                if kept is None and self.mode == "sketches" and size <= SKETCH_MAX_ELEMENTS:
                    ds = _stats._datasketches("quantile statistics of steps")
                    kept = [ds.kll_doubles_sketch(self.k) for _ in range(size)]  # only null values
                blobs = None if kept is None else [bytes(s.serialize()) for s in kept]
                block_rows.append((run, int(rows[idx].sum()), len(idx), int(count[idx].sum()),
                                   nan[idx].sum(axis=0), b_mean, b_m2, b_lo, b_hi, blobs))
            columns["run_id"] += seg_runs + [r[0] for r in block_rows]
            columns["episode_id"] += episodes.tolist() + [None] * len(block_rows)
            columns["rows"] += rows.tolist() + [r[1] for r in block_rows]
            columns["segments"] += [None] * segments + [r[2] for r in block_rows]
            columns["count"] += count.tolist() + [r[3] for r in block_rows]
            columns["column"] += [name] * (segments + len(block_rows))
            columns["shape"].append(np.tile(np.asarray(shape, np.int64), (segments + len(block_rows), 1)))
            for key, seg, i in (("nan_count", nan, 4), ("mean", mean, 5), ("m2", m2, 6), ("min", lo, 7),
                                ("max", hi, 8)):
                blocks[key] += [seg.reshape(segments, size),
                                np.reshape([r[i] for r in block_rows], (len(block_rows), size))]
            columns["sketches"] += [None] * segments + [r[9] for r in block_rows]
        total = len(columns["run_id"])
        columns["layout"] = [self.layout] * total
        columns["block"] = [block] * total
        columns["k"] = [self.k] * total
        schema = _schema.table("stats").arrow_schema()
        arrays = []
        for field in schema:
            if field.name in blocks or field.name == "shape":
                arrays.append(_fixed_lists(blocks.get(field.name) or columns[field.name], field.type))
            else:
                arrays.append(pa.array(columns[field.name], field.type))
        return pa.Table.from_arrays(arrays, schema=schema)


def _one_row_per_episode(runs: list[str], episodes: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                         moments: dict[str, tuple[Any, ...]]) -> tuple[list[str], Any, Any, dict[str, Any]]:
    """Segments of one episode from several batches of one commit, merged into one each.

    (A writer adds each batch it spills; an episode split over two batches of one file
    would otherwise have two rows with one key.)
    """
    keys = list(zip(runs, episodes.tolist(), strict=True))
    ids: dict[tuple[str, int], int] = {}
    group = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    if len(ids) == len(keys):
        return runs, episodes, rows, moments
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.flatnonzero(np.concatenate([[True], np.diff(g) != 0]))
    unique = list(ids)
    out: dict[str, Any] = {}
    for name, (count, nan, mean, m2, lo, hi) in moments.items():
        count, nan, mean, m2, lo, hi = (a[order] for a in (count, nan, mean, m2, lo, hi))
        n = count[:, None] - nan
        has = n > 0
        total = np.add.reduceat(n, starts, axis=0)
        safe = np.maximum(total, 1)
        with np.errstate(invalid="ignore", over="ignore"):
            grand = np.add.reduceat(np.where(has, mean * n, 0.0), starts, axis=0) / safe
            lengths = np.diff(np.append(starts, len(g)))
            spread = n * (mean - np.repeat(grand, lengths, axis=0)) ** 2
            m2_total = np.add.reduceat(np.where(has, m2 + spread, 0.0), starts, axis=0)
        grand[total == 0] = np.nan
        out[name] = (np.add.reduceat(count, starts), np.add.reduceat(nan, starts, axis=0), grand, m2_total,
                     np.fmin.reduceat(lo, starts, axis=0), np.fmax.reduceat(hi, starts, axis=0))
    return ([unique[i][0] for i in g[starts]], np.array([unique[i][1] for i in g[starts]], dtype=np.int64),
            np.add.reduceat(rows[order], starts), out)


_PER_ELEMENT = ("nan_count", "mean", "m2", "min", "max")


def _fixed_lists(blocks: list[npt.NDArray[Any]], type_: pa.ListType) -> pa.Array:
    """Blocks of ``(rows, elements)`` values as one list column (a row of each block a list)."""
    lengths = np.concatenate([np.full(len(b), b.shape[1], np.int64) for b in blocks])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.concatenate([b.reshape(-1) for b in blocks]).astype(type_.value_type.to_pandas_dtype())
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, type_.value_type))
    return lists.cast(type_)
