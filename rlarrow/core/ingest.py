"""One ingest: an episode source written into a store, all of it or nothing.

Every episode importer (``import_minari``, ``import_rlds``, ``import_lerobot``,
``import_hdf5``, ``import_envlogger``) is ``ingest(store, read_<format>(...))``: this is the
one place that opens the transaction, declares the ``steps`` tensor types, adds the run,
writes the steps a chunk at a time, writes the ``episodes`` rows (and any other table the
source has rows of, ``videos``) and reports. One import is one commit: a failure anywhere
(a damaged episode found last, a full disk, an interrupt) leaves nothing of it in the
store, and writes go to files as they come, so a large import stays in bounded memory.

Example:
    >>> import os, tempfile, numpy as np, rlarrow
    >>> from rlarrow.core import schema
    >>> from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo
    >>> def chunks(run_id):
    ...     steps = schema.build("steps", {
    ...         "run_id": run_id, "episode_id": 0, "step": np.arange(2), "env_index": 0,
    ...         "observation": np.zeros((2, 3), np.float32), "reward": [1.0, None],
    ...         "is_first": [True, False], "is_last": [False, True], "is_terminal": [False, True]})
    ...     rows = EpisodeRows()
    ...     rows.add(0, num_steps=1, total=1.0, terminated=True, truncated=False, partial_end=False,
    ...              metadata=None)
    ...     yield EpisodeChunk(steps, rows.table(run_id))
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> report = ingest(store, EpisodeSource(RunInfo(source="toy"), {}, chunks, run_id="r1"))
    >>> str(report)
    'imported run r1: 1 episodes, 2 steps (RLDS rows)'
    >>> store.row_count("steps"), store.row_count("episodes")
    (2, 1)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.progress import bar
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.store import Store, StoreLike, opened

__all__ = ["IngestReport", "ingest"]


@dataclass
class IngestReport:
    """What one import wrote: the report every importer returns.

    Attributes:
        run_id: the run the data went into.
        format: the format read (the run's ``source``).
        episodes: ``episodes`` rows written.
        steps: ``steps`` rows written.
        rows: rows of other tables written, by table (``{"videos": 3}``).
        seconds: how long the import took.
        skipped_episodes: episodes left out as damaged (only where the caller asked to
            skip damage; otherwise damage is an error).
        skipped_steps: steps the input holds that were not imported.
        skipped: one line per thing left out, saying what and why.
        damaged_files: the files found damaged, in the order found.
        notes: what the reader assumed, one line each.
    """

    run_id: str
    format: str = ""
    episodes: int = 0
    steps: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    skipped_episodes: int = 0
    skipped_steps: int = 0
    skipped: list[str] = field(default_factory=list)
    damaged_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = f"imported run {self.run_id}: {self.episodes} episodes, {self.steps} steps (RLDS rows)"
        if self.skipped:
            files = (f", in {len(self.damaged_files)} damaged file(s) ({', '.join(self.damaged_files)})"
                     if self.damaged_files else "")
            text += (f"; skipped as damaged: {self.skipped_episodes} episodes, {self.skipped_steps} "
                     f"steps{files}" + "".join(f"\n  skipped {line}" for line in self.skipped))
        return text


def run_rows(table: pa.Table, run_id: str) -> pa.Table:
    """``table`` with every row's ``run_id`` set to ``run_id`` (a no-op when it is already)."""
    i = table.schema.get_field_index("run_id")
    if i < 0 or table.num_rows == 0:
        return table
    col = table.column(i)
    if col.null_count == 0 and col.chunk(0)[0].as_py() == run_id and _one_value(col):
        return table
    return table.set_column(i, table.schema.field(i), pa.array([run_id] * table.num_rows, col.type))


def _one_value(col: pa.ChunkedArray) -> bool:
    import pyarrow.compute as pc

    return bool(pc.count_distinct(col).as_py() == 1)


def ingest(store: StoreLike, source: EpisodeSource, *, run_id: str | None = None, name: str | None = None,
           existing_run: bool = False, progress: bool | None = None) -> IngestReport:
    """Write ``source`` into ``store`` as one run, in one commit (see the module docs).

    Args:
        store: a :class:`~rlarrow.Store` or a path (created when missing).
        source: what a format's ``read_<format>`` returned.
        run_id: the run to write (None: the source's own id).
        name: the run's name (None: the source's).
        existing_run: ``run_id`` names a run made already (an experiment's): add to it,
            make no ``runs`` row.
        progress: a progress bar (None: when stderr is a terminal).

    Raises:
        StoreError: ``run_id`` exists already (and ``existing_run`` is false).
        RLArrowError: what the source raises as it is read; nothing of the import is kept.
    """
    started = time.monotonic()
    if run_id is not None and run_id != source.run_id:
        source = source.with_run_id(run_id)
    with ExitStack() as stack:
        st: Store = stack.enter_context(opened(store, create=True))
        stack.enter_context(st.transaction())  # all of the source or nothing of it
        types = declare_steps(st, source.types) if source.types else None
        report = IngestReport(run_id=source.run_id, format=source.run.source, notes=source.notes)
        if not existing_run:
            info = source.run
            st.add_run(source=info.source, run_id=source.run_id, name=name or info.name,
                       source_path=info.source_path, source_version=info.source_version,
                       alignment=info.alignment, num_envs=info.num_envs, metadata=info.metadata,
                       env_specs=info.env_specs)
        writers: dict[str, Any] = {}

        def write(table: str, rows: pa.Table) -> None:
            if table not in writers:
                writers[table] = stack.enter_context(st.writer(table))
            writers[table].write(rows)

        pbar = stack.enter_context(bar(source.episodes_hint, f"import {source.run.source}", source.unit,
                                       progress))
        for chunk in source:
            if types is None:  # the first chunk's tensor types, declared before a row is written
                types = declare_steps(st, _tensor_types(chunk.steps))
            steps = _conformed(run_rows(chunk.steps, source.run_id), types, st)
            if steps.num_rows:
                write("steps", steps)
                report.steps += steps.num_rows
            done = 0
            if chunk.episodes is not None and chunk.episodes.num_rows:
                write("episodes", run_rows(chunk.episodes, source.run_id))
                report.episodes += chunk.episodes.num_rows
                done = chunk.episodes.num_rows
            for table, rows in chunk.tables.items():
                if rows.num_rows:
                    write(table, run_rows(rows, source.run_id))
                    report.rows[table] = report.rows.get(table, 0) + rows.num_rows
            pbar.update(done if chunk.count is None else chunk.count)
    report.seconds = time.monotonic() - started
    return report


def _tensor_types(steps: pa.Table) -> dict[str, pa.DataType]:
    spec = _schema.table("steps")
    return {c.name: steps.schema.field(c.name).type for c in spec.columns
            if c.is_tensor and c.name in steps.column_names
            and steps.column(c.name).null_count < steps.num_rows}


def _conformed(steps: pa.Table, types: Mapping[str, pa.DataType], st: Store) -> pa.Table:
    """``steps`` with each declared tensor column in the store's field order, checked against its layout."""
    changed = False
    columns: dict[str, Any] = {}
    for name in steps.column_names:
        col = steps.column(name)
        type_ = types.get(name)
        if type_ is not None and col.type != type_:
            columns[name] = _retyped(in_order(col.combine_chunks(), type_), type_)
            changed = True
        else:
            columns[name] = col
    if not changed:
        return steps
    return _schema.build("steps", columns, num_rows=steps.num_rows, established=st.schema("steps"))


def _retyped(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """``arr`` in the store's tensor type ``type_``, where it holds the same values another way.

    A recording's extension tensors, a reader's nested lists, struct fields in another
    order: the values are the same, and the store's layout keeps them. Null rows are kept.
    """
    if arr.type == type_:
        return arr
    import numpy as np

    from rlarrow.core.step_columns import ordered
    from rlarrow.core.tensors import to_arrow, to_numpy, with_null_rows

    try:
        out = to_arrow(ordered(to_numpy(arr, fill_value=0), type_), type_)
    except (pa.ArrowException, ValueError, TypeError):
        return arr  # another set of tensors: the store writes it to a layout of its own
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    return with_null_rows(out, np.asarray(nulls)) if arr.null_count else out


def in_order(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """A struct column with its fields in ``type_``'s order (when only the order differs).

    Example:
        >>> a = pa.array([{"b": 1, "a": 2}])
        >>> in_order(a, pa.struct([("a", pa.int64()), ("b", pa.int64())])).type
        StructType(struct<a: int64, b: int64>)
    """
    from rlarrow.core.step_columns import same_fields

    if arr.type == type_ or not pa.types.is_struct(type_) or not same_fields(arr.type, type_):
        return arr
    names = [type_.field(i).name for i in range(type_.num_fields)]
    children = [in_order(arr.field(k), type_.field(k).type) for k in names]
    return pa.StructArray.from_arrays(children, names=names, mask=arr.is_null() if arr.null_count else None)
