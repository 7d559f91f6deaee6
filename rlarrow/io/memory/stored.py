"""A store's memory snapshots read back, one at a time: :func:`snapshots`.

Both the exporter (:func:`rlarrow.io.memory.importer.export_memory`) and the unrolling
(:func:`rlarrow.io.memory.unroll.unroll_store`) read a store's ``memory`` table through
here, so neither imports the other.

Example:
    >>> import numpy as np, tempfile
    >>> from rlarrow.io.memory.importer import import_memory
    >>> from rlarrow.io.memory.npz import write_npz
    >>> tmp = tempfile.mkdtemp()
    >>> _ = write_npz({"states": np.zeros((8, 2, 3), np.float32)}, f"{tmp}/m.npz")
    >>> _ = import_memory([f"{tmp}/m.npz"], f"{tmp}/store", progress=False)
    >>> [(s.name, s.memory_size, s.num_envs) for s in snapshots(f"{tmp}/store")]
    [('m', 8, 2)]
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.store import Store, StoreLike, as_store
from rlarrow.io.memory.snapshot import MemorySnapshot

__all__ = ["snapshots"]


def snapshots(
    store: StoreLike,
    *,
    run_id: str | None = None,
    snapshot_id: int | None = None,
    with_keys: bool = False,
) -> Iterator[Any]:
    """The store's memory snapshots, one at a time.

    Each snapshot's ``name`` is the name it was imported under (the export's file stem).
    With ``with_keys``, yields ``(snapshot, (run_id, snapshot_id))``.
    """
    st = as_store(store, readonly=True)
    # Runs whose tensors differ are in different layouts of the table: each is read on its own,
    # with its own schema (a run's snapshots are all in one layout).
    if run_id is not None:
        found = st.layout_of("memory", run_id)
        numbers = [] if found is None else [found]
    else:
        numbers = [info.layout for info in st.layouts("memory")]
    for layout in numbers:
        yield from _layout_snapshots(st, layout, run_id, snapshot_id, with_keys)


def _layout_snapshots(st: Store, layout: int, run_id: str | None, snapshot_id: int | None,
                      with_keys: bool) -> Iterator[Any]:
    import pyarrow.compute as pc

    # Most files hold one snapshot (one commit): their statistics say which, and they are
    # read whole; files that mix snapshots are read with a filter.
    groups: dict[tuple[str, int], list[Path]] = {}
    mixed: list[Path] = []
    for path in st.files("memory", layout=layout):
        key = _file_key(path)
        if key is None:
            mixed.append(path)
        elif (run_id is None or key[0] == run_id) and (snapshot_id is None or key[1] == snapshot_id):
            groups.setdefault(key, []).append(path)
    if mixed:
        flt = None
        if run_id is not None:
            flt = pc.field("run_id") == run_id
        if snapshot_id is not None:
            one = pc.field("snapshot_id") == snapshot_id
            flt = one if flt is None else flt & one
        keys = st.dataset("memory", layout=layout, files=mixed).to_table(columns=["run_id", "snapshot_id"],
                                                                          filter=flt)
        distinct = keys.group_by(["run_id", "snapshot_id"], use_threads=False).aggregate([])
        for rid, sid in zip(distinct["run_id"].to_pylist(), distinct["snapshot_id"].to_pylist(), strict=True):
            groups.setdefault((rid, sid), [])
    declared = set(_schema.table("memory").column_names)
    schema = st.schema("memory", layout=layout)
    columns = ["memory_index", "env_index"] + [f.name for f in schema or [] if f.name not in declared]
    for (rid, sid), files in groups.items():
        key_filter = (pc.field("run_id") == rid) & (pc.field("snapshot_id") == sid)
        constants = _constants(files[0]) if files and not mixed else None
        pieces: Iterator[pa.Table] = _row_groups(files, columns if constants is not None else None)
        if mixed:
            pieces = itertools.chain(pieces, [st.dataset("memory", layout=layout, files=mixed)
                                              .to_table(filter=key_filter)])
        snap = MemorySnapshot.from_table(pieces, path=os.fspath(st.path), constants=constants)
        yield (snap, (rid, sid)) if with_keys else snap


_CONSTANTS = ("snapshot_name", "memory_size", "num_envs", "is_full", "write_pointer", "env_pointer")


def _constants(path: Path) -> dict[str, Any] | None:
    """A snapshot's per-snapshot columns, from a file's statistics (None if they do not say)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    if meta.num_row_groups == 0:
        return None
    rg = meta.row_group(0)
    out: dict[str, Any] = {}
    for i in range(rg.num_columns):
        col = rg.column(i)
        if col.path_in_schema not in _CONSTANTS:
            continue
        stats = col.statistics
        if stats is None or not stats.has_null_count:
            return None
        if stats.null_count == col.num_values:
            out[col.path_in_schema] = None
        elif stats.null_count == 0 and stats.has_min_max and stats.min == stats.max:
            out[col.path_in_schema] = stats.min
        else:
            return None
    return out if len(out) == len(_CONSTANTS) else None


def _row_groups(files: Sequence[Path], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """Every row group of ``files``, in order, decoded in parallel ahead of the consumer.

    At most one row group per core plus one is decoded and not yet taken (bounded memory),
    and the decoding goes on while the consumer works on the row group it was given.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    import pyarrow.parquet as pq

    tasks = iter([(f, i) for f in files for i in range(pq.ParquetFile(f).metadata.num_row_groups)])
    workers = max(1, os.cpu_count() or 1)

    def read(task: tuple[Path, int]) -> pa.Table:
        # mapped: pages are decoded straight from the page cache (store files never change)
        with pq.ParquetFile(task[0], memory_map=True) as pf:
            return pf.read_row_group(task[1], columns=columns, use_threads=False)

    with ThreadPoolExecutor(workers) as pool:
        ahead: deque[Future[pa.Table]] = deque(
            pool.submit(read, t) for t in itertools.islice(tasks, workers + 1))
        while ahead:
            table = ahead.popleft().result()
            task = next(tasks, None)
            if task is not None:
                ahead.append(pool.submit(read, task))
            yield table
            del table  # not kept alive while the next one is awaited


def _file_key(path: Path) -> tuple[str, int] | None:
    """The (run_id, snapshot_id) every row of a memory file has, from its statistics; None if mixed."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    try:
        cols = [names.index("run_id"), names.index("snapshot_id")]
    except ValueError:
        return None
    key: tuple[str, int] | None = None
    for rg in range(meta.num_row_groups):
        values = []
        for c in cols:
            stats = meta.row_group(rg).column(c).statistics
            if stats is None or not stats.has_min_max or stats.min != stats.max:
                return None
            values.append(stats.min)
        k = (str(values[0]), int(values[1]))
        if key is not None and k != key:
            return None
        key = k
    return key
