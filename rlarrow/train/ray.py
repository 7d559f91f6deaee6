"""Ray Data over a store: the same files, on a cluster, with nothing converted.

- :func:`read`: a table as a ``ray.data.Dataset`` of Arrow rows, exactly as stored (the
  store's schema, tensor types and table metadata), over the committed files only.
- :func:`read_samples`: training samples with :class:`rlarrow.train.torch.StreamingDataset`'s
  semantics (rows, windows of ``sequence_length`` steps that never cross an episode and
  follow it across row groups and commits, or ``"transitions"``), as NumPy columns ready
  for ``iter_torch_batches`` and ``streaming_split``.
- :func:`write`: a dataset's rows into a store's table, written by the cluster's tasks in
  parallel and committed at once (all or nothing).
- :func:`import_memory`: legacy memory exports (pt, npz, csv) converted in parallel, one
  task per file, into one commit.

A store on object storage is read through pyarrow filesystems: pass a URI
(``s3://bucket/runs.rlarrow``) or a :class:`rlarrow.core.remote.RemoteStore`. Writing needs a
directory every worker sees (a local disk for one machine, a shared POSIX mount for
several); push the result to a bucket with :func:`rlarrow.core.remote.push`.

Example:
    >>> import ray, rlarrow.train.ray  # doctest: +SKIP
    >>> ds = rlarrow.train.ray.read_samples("runs.rlarrow", "transitions")  # doctest: +SKIP
    >>> left, right = ds.streaming_split(2, equal=False)  # doctest: +SKIP
    >>> for batch in left.iter_torch_batches(batch_size=256):  # doctest: +SKIP
    ...     batch["observation"], batch["next_observation"], batch["done"]
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.deps import require
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    NotFoundError,
    SchemaMismatchError,
    StoreError,
)
from rlarrow.core.store import (
    CommitInfo,
    StagedFile,
    Staging,
    Store,
    StoreLike,
    StoreReader,
    as_store,
    layout_number,
)
from rlarrow.train.samples import SampleSource, delta_steps_of, filter_mask
from rlarrow.train.sampling import Sampler, SequentialSampler, ShuffleSampler

require("ray", feature="rlarrow.train.ray")  # names the extra when Ray is missing
import ray  # noqa: E402
import ray.data  # noqa: E402

if TYPE_CHECKING:
    from rlarrow.core.remote import RemoteStore

__all__ = ["import_memory", "read", "read_samples", "write"]


def _open(store: StoreLike | RemoteStore, version: int | None = None) -> StoreReader:
    """A Store, a RemoteStore, a local path or a URI, as a store to read (a local one: a Store)."""
    from rlarrow.core.remote import open_reader

    return open_reader(store, version=version)


def read(store: StoreLike | RemoteStore, table: str, *, columns: Sequence[str] | None = None,
         filter: Any = None, layout: int | None = None,  # noqa: A002
         version: int | None = None, **read_parquet_args: Any) -> ray.data.Dataset:
    """A table of ``store`` as a ``ray.data.Dataset``, over its committed files.

    Rows come as stored: the store's Arrow schema (tensor columns in their layout, struct
    columns as structs) with the table's metadata, so :func:`write` takes them back
    unchanged. Files written after this call are not part of the dataset.

    Args:
        store: a :class:`~rlarrow.Store`, its path, a URI (``s3://...``, ``file://...``) or
            a :class:`~rlarrow.core.remote.RemoteStore`.
        table: ``runs``, ``episodes``, ``steps``, ``scalars`` or ``memory``.
        columns: the columns to read (default: all).
        filter: a ``pyarrow.compute.Expression`` or a SQL predicate string over the flat
            columns (DuckDB), applied in the read tasks.
        layout: one layout of the table (:meth:`rlarrow.Store.layouts`); None: all of them,
            as :meth:`rlarrow.Store.read` combines them (columns matched by name, a column
            whose type differs between layouts left out, with a warning).
        version: the store as it was at that version (:attr:`rlarrow.Store.version`).
        read_parquet_args: passed to ``ray.data.read_parquet`` (``concurrency``,
            ``override_num_blocks``, ``ray_remote_args``, ...).

    Example:
        >>> import pyarrow.compute as pc, rlarrow.train.ray  # doctest: +SKIP
        >>> ds = rlarrow.train.ray.read("runs.rlarrow", "steps", filter="reward > 0")  # doctest: +SKIP
        >>> ds.groupby("episode_id").count().take(3)  # doctest: +SKIP
    """
    st = _open(store, version)
    fs = st.filesystem
    listed: Sequence[str | os.PathLike[str]]
    if isinstance(st, Store):  # its layouts: the ones asked for
        # a local store's files are pinned for the process's life (a lazy dataset, and those
        # derived from it, outlive any object that could hold a lease); absolute: the read
        # tasks' working directory is not ours
        listed = st.process_lease().pin_view(st, [table])[table]
        names = st.layout_dirs(table, layout)  # (the view pin_view took)
        st.check_columns(table, columns, layout=layout)
        listed = [f for f in listed if Path(f).parent.name in names]
        # Ray's read tasks would fail on damage with an error of their own, far from here:
        # they read only files found whole (pages against their CRC-32s), once per process
        st.verify(table, listed)
        schema = st.schema(table, layout=layout) or _schema.table(table).arrow_schema()
    else:  # a RemoteStore: one layout at a time where it has several (their files differ)
        numbers = [layout_number(d) for d in st.layout_dirs(table)]
        if layout is None and len(numbers) > 1:
            raise StoreError(f"{st.path}: {table!r} has layouts {numbers} here, whose files differ: "
                             "read one with layout=N")
        listed = st.files(table, layout=layout)
        schema = st.schema(table, layout=layout) or _schema.table(table).arrow_schema()
    files = [os.fspath(f) if fs is not None else os.path.abspath(f) for f in listed]
    schema = schema.with_metadata(_schema.table(table).file_metadata())
    if columns is not None:
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise NotFoundError(f"{st.path}: table {table!r} has no column(s) {missing}; "
                                f"it has {schema.names}")
    if not files:
        ds: ray.data.Dataset = ray.data.from_arrow(schema.empty_table())
    else:
        ds = ray.data.read_parquet(files, filesystem=fs, schema=schema,
                                   partitioning=None, file_extensions=None, **read_parquet_args)
    if filter is not None:
        ds = ds.map_batches(_Finish(filter), batch_format="pyarrow", zero_copy_batch=True)
    if columns is not None:
        ds = ds.select_columns(list(columns))  # pushed down into the read when there is no filter
        schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
    # the store's exact schema on every block: Ray keeps the table metadata on the dataset's
    # schema only, and its projection forgets which columns are non-null
    ds = ds.map_batches(_Finish(None, schema), batch_format="pyarrow", zero_copy_batch=True)
    return ds


class _Finish:
    """A batch's rows that ``filter`` keeps, or the batch in ``schema`` (picklable, for Ray)."""

    def __init__(self, filter: Any, schema: pa.Schema | None = None) -> None:  # noqa: A002
        self.filter, self.schema = filter, schema

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.filter is not None and batch.num_rows:
            batch = batch.filter(pa.array(filter_mask(batch, self.filter)))
        if self.schema is not None:
            batch = batch.cast(self.schema)
        return batch


def read_samples(store: StoreLike | RemoteStore, table: str = "steps", *,
                 columns: Sequence[str] | None = None,
                 filter: Any = None, sequence_length: int = 1, shuffle: bool = False,  # noqa: A002
                 seed: int = 0, units_per_task: int = 1, layout: int | None = None,
                 version: int | None = None, delta_steps: Mapping[str, Sequence[int]] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 fps: float | None = None, sampler: Sampler | None = None) -> ray.data.Dataset:
    """Training samples as :class:`rlarrow.train.torch.StreamingDataset` makes them, as a Ray dataset.

    Each row group of the table is one unit of work; a task turns it into NumPy columns:
    one row per sample, tensors with their shapes (``(L, ...)`` per window), struct fields
    flattened to ``observation.position``. Windows never cross an episode boundary and
    follow an episode into the next row group or a later commit; ``table="transitions"``
    gives ``observation, action, reward, discount, next_observation, done, truncated``.
    Every sample appears exactly once, so ``streaming_split(n)`` hands each of ``n``
    trainers a disjoint share.

    Args:
        store: a :class:`~rlarrow.Store`, its path, a URI or a
            :class:`~rlarrow.core.remote.RemoteStore`.
        table: ``"steps"``, ``"memory"`` or ``"transitions"``.
        columns: columns to read (default: every non-key, non-text column).
        filter: a ``pyarrow.compute.Expression`` or a SQL predicate over the flat columns
            (a window is kept when its first row is).
        sequence_length: windows of this many consecutive steps of one episode.
        shuffle: visit the row groups in a seeded random order, the order a
            :class:`~rlarrow.train.sampling.ShuffleSampler` of the same seed gives
            :class:`~rlarrow.train.torch.StreamingDataset` (mix rows further with
            ``iter_torch_batches(local_shuffle_buffer_size=...)`` or ``random_shuffle()``).
        seed: the row-group order's seed.
        units_per_task: row groups read per task.
        layout: one layout of the table (:meth:`rlarrow.Store.layouts`); None: all of them,
            with the columns every layout has with the same type.
        version: the store as it was at that version (:attr:`rlarrow.Store.version`).
        delta_steps: every step a sample, with these rows of its episode around it per
            column (``{"action": range(16)}``), clamped to the episode and masked
            (``action_is_pad``) as LeRobot pads: see :class:`rlarrow.train.torch.StreamingDataset`.
        delta_timestamps: the same in seconds (LeRobot's form), with ``fps``.
        fps: steps per second, for ``delta_timestamps``.
        sampler: the row-group order as a sampler strategy (:mod:`rlarrow.train.sampling`:
            its :meth:`~rlarrow.train.sampling.Sampler.unit_order` this epoch, every row group
            read here: ``streaming_split`` deals them), instead of ``shuffle`` and ``seed``.

    Raises:
        ArgumentError: ``sampler`` given with ``shuffle`` or ``seed``.
        ArgumentTypeError: ``sampler`` that is not a :class:`~rlarrow.train.sampling.Sampler`.

    Example:
        >>> import rlarrow.train.ray  # doctest: +SKIP
        >>> ds = rlarrow.train.ray.read_samples("runs.rlarrow", "steps", sequence_length=8)  # doctest: +SKIP
        >>> next(ds.iter_torch_batches(batch_size=32))["observation"].shape  # doctest: +SKIP
        torch.Size([32, 8, 4])
    """
    if delta_timestamps is not None:
        if delta_steps is not None:
            raise ArgumentError("give delta_steps (in steps) or delta_timestamps (in seconds, with fps), "
                                "not both")
        delta_steps = delta_steps_of(delta_timestamps, fps if fps is not None else 0.0)
    source = SampleSource.from_store(_open(store, version), table, columns=columns, filter=filter,
                                     sequence_length=sequence_length, layout=layout, delta_steps=delta_steps)
    if sampler is None:
        sampler = ShuffleSampler(seed=seed) if shuffle else SequentialSampler(seed=seed)
    elif not isinstance(sampler, Sampler):
        raise ArgumentTypeError(f"sampler: give a rlarrow.train.sampling.Sampler (SequentialSampler, "
                                f"ShuffleSampler), not a {type(sampler).__name__}")
    elif shuffle or seed != 0:
        raise ArgumentError("give the order as sampler=ShuffleSampler(seed=...) or as shuffle and seed, "
                            "not both")
    order = sampler.unit_order(len(source.units))
    if not len(order):
        return ray.data.from_items([])
    units = ray.data.from_items([{"unit": int(i)} for i in order],
                                override_num_blocks=max(1, -(-len(order) // units_per_task)))
    return units.map_batches(_ReadUnits(source), batch_size=units_per_task, batch_format="numpy")


_BLOCK_BYTES = 64 << 20  # the samples a task yields at once, at most about


class _ReadUnits:
    """Row groups (by index) to samples, in a Ray task."""

    def __init__(self, source: SampleSource) -> None:
        self.source = source

    def __call__(self, batch: Mapping[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        files: dict[str, Any] = {}
        try:
            for i in batch["unit"].tolist():
                got = self.source.read_windows(self.source.units[int(i)], files)
                if got is None:
                    continue
                # gathered a block at a time: windows of a whole row group would take
                # L times its rows' memory
                step = max(1, _BLOCK_BYTES // got.window_bytes())
                for lo in range(0, len(got), step):
                    yield got.gather(np.arange(lo, min(len(got), lo + step)))
        finally:
            for f in files.values():
                f.close()


def write(dataset: ray.data.Dataset, store: StoreLike, table: str, *,
          layout: str | None = None) -> CommitInfo | None:
    """Append a dataset's rows to ``store``'s ``table``: written in parallel, committed at once.

    Each block is checked against the table's schema and written as one Parquet file by the
    task that holds it; when every task has finished, all the files are committed in one
    journaled step. A failure anywhere commits nothing, and the files already written are
    removed (or swept by the store's next recovery if this process dies).

    The store must be a directory that every worker can reach (a local disk on one
    machine; a shared mount on a cluster). For object storage, write locally and
    :func:`rlarrow.core.remote.push`.

    Args:
        dataset: rows of ``table`` (as :func:`read` gives them, or columns
            :func:`rlarrow.core.schema.build` accepts).
        store: a :class:`~rlarrow.Store` or its path (created when missing).
        table: the table to append to.
        layout: for a table without data yet, how numeric tensors are stored:
            ``"binary"``, ``"list"`` or ``"auto"`` (see :mod:`rlarrow.core.tensors`); None keeps
            the data's types.

    Returns:
        What was committed, or None when the dataset has no rows.

    Raises:
        SchemaMismatchError: rows that do not fit the table, or blocks whose types
            disagree (declare the types first with :meth:`Store.declare`).
    """
    st = as_store(store, create=True)
    _schema.table(table)
    staging = st.stage(table, tag="ray")  # the driver's files: kept while it lives, until it commits
    writer = _WriteBlocks(staging, st.schema(table, layout=1), layout)
    try:
        parts = dataset.map_batches(writer, batch_format="pyarrow", batch_size=None,
                                    zero_copy_batch=True).take_all()
        if not parts:
            return None
        schemas = [pa.ipc.read_schema(pa.py_buffer(p["schema"])) for p in parts]
        odd = [i for i, s in enumerate(schemas) if not s.equals(schemas[0])]
        if odd:
            raise SchemaMismatchError(table, [
                f"the dataset's blocks disagree on the table's types ({len(odd)} of {len(parts)} "
                "blocks differ from the first); fix them first with Store.declare(table, types) "
                "or pass layout="], expected=schemas[0], got=schemas[odd[0]])
        # to the layout of the blocks' types (a new one when the table has none: Store.layouts)
        return st.commit_staged([StagedFile(table=table, path=p["tmp"], name=p["final"], rows=int(p["rows"]),
                                            schema=schema, runs=tuple(str(r) for r in p["runs"]))
                                 for p, schema in zip(parts, schemas, strict=True)])
    finally:
        staging.discard()  # a failed job's files, or all on success: none
        if st is not store:
            st.close()


class _WriteBlocks:
    """A block of rows to a finished, staged Parquet file of the store, in a Ray task."""

    def __init__(self, staging: Staging, established: pa.Schema | None, layout: str | None) -> None:
        self.staging, self.table = staging, staging.table
        self.established, self.layout = established, layout

    def __call__(self, batch: pa.Table) -> Iterator[dict[str, Any]]:
        from rlarrow.core.store import validate_rows
        from rlarrow.io.memory.importer import layout_types

        if batch.num_rows == 0:
            return
        established = self.established
        if established is None and self.layout is not None:
            types = layout_types(self.table, batch.schema, self.layout)
            established = _schema.table(self.table).arrow_schema(types).remove_metadata()
        try:
            data = validate_rows(self.table, batch, established)
        except SchemaMismatchError:
            if established is None or self.established is None:
                raise
            data = validate_rows(self.table, batch, None)  # other tensors: another layout of the table
        staged = self.staging.write(data)
        yield {"tmp": [staged.path], "final": [staged.name], "rows": [staged.rows],
               "runs": [list(staged.runs)], "schema": [staged.schema.serialize().to_pybytes()]}


def import_memory(inputs: Sequence[str | os.PathLike[str]], store: StoreLike, *,
                  run_id: str | None = None, name: str | None = None, num_envs: int | None = None,
                  memory_size: int | None = None, dtype: str = "float32",
                  layout: str = "binary") -> CommitInfo | None:
    """Import memory exports into ``store``'s ``memory`` table in parallel: one Ray task per file.

    The same rows as :func:`rlarrow.io.memory.importer.import_memory` (one snapshot per file, numbered
    in the files' order, under one run), committed together: a file that fails to read
    commits nothing of any file. Arguments as there.

    Returns:
        What was committed (None: no rows).
    """
    from rlarrow.io.memory.importer import expand_inputs

    if not inputs:
        raise ArgumentError("no inputs: give memory export files, folders or glob patterns")
    files = expand_inputs(inputs)
    st = as_store(store, create=True)
    run_id = st.add_run(source="memory-export", run_id=run_id, name=name, num_envs=num_envs,
                        source_path=os.path.commonpath([os.path.abspath(f) for f in files]))
    items = [{"path": os.path.abspath(f), "snapshot_id": i} for i, f in enumerate(files)]
    tasks = ray.data.from_items(items, override_num_blocks=len(items))
    rows = tasks.map_batches(_ReadExport(run_id, num_envs, memory_size, dtype), batch_size=1,
                             batch_format="pyarrow", zero_copy_batch=True)
    try:
        return write(rows, st, "memory", layout=None if layout == "list" else layout)
    finally:
        if st is not store:
            st.close()


def _convert_memory(*args: Any, **kwargs: Any) -> CommitInfo | None:
    """Deprecated: the old name of :func:`import_memory` (files into a store are an ``import_*``)."""
    warnings.warn("rlarrow.train.ray.convert_memory is deprecated: call import_memory, its new name (the "
                  "old name will be removed in rlarrow 1.0)", DeprecationWarning, stacklevel=2)
    return import_memory(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """The deprecated name ``convert_memory`` (PEP 562): importable, outside ``__all__``."""
    if name == "convert_memory":
        return _convert_memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _ReadExport:
    """One memory export file to ``memory`` rows, in a Ray task."""

    def __init__(self, run_id: str, num_envs: int | None, memory_size: int | None, dtype: str) -> None:
        self.run_id, self.num_envs, self.memory_size, self.dtype = run_id, num_envs, memory_size, dtype

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        from rlarrow.io.memory.importer import detect_format, iter_memory_tables

        for row in batch.to_pylist():
            path = Path(row["path"])
            yield from iter_memory_tables(path, detect_format(path), self.run_id, int(row["snapshot_id"]),
                                          self.num_envs, self.memory_size, self.dtype)
