"""A store's tables as Polars lazy frames, and its episodes as arrays.

:func:`scan` gives a Polars ``LazyFrame`` over a table's committed files (filters and
projections push down; the files stay readable while it lives); :func:`iter_episodes`
yields each episode a SQL filter selects as a dict of NumPy arrays (or torch tensors),
in step order.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
    >>> _ = st.append("scalars", {"run_id": "a", "scope": "train", "tag": "loss", "step": [0, 1],
    ...                           "value": [1.0, 0.5]})
    >>> scan(st, "scalars").select("value").collect()["value"].to_list()
    [1.0, 0.5]
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import RLArrowWarning
from rlarrow.core.store import Store, StoreReader, as_store, damaged_file
from rlarrow.core.store.checked import READ_ERRORS
from rlarrow.query.sql_text import quote
from rlarrow.query.views import connect_checked, plain_schema

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["iter_episodes", "scan"]


def scan(store: StoreLike, table: str, *, layout: int | None = None, version: int | None = None) -> Any:
    """A Polars LazyFrame over ``table``'s committed files (filters and projections push down).

    The frame reads the files committed when it was made, and keeps reading them whatever
    compacts the store meanwhile: they are pinned for the life of the process
    (:meth:`~rlarrow.Store.process_lease`; call ``scan`` again to see later commits).
    ``layout``: one layout of the table (:meth:`~rlarrow.Store.layouts`); None: all of
    them, as :meth:`~rlarrow.Store.read` combines them (columns matched by name, a column
    whose type differs between layouts left out, with a warning). ``version``: the store
    as it was at that version (:attr:`rlarrow.Store.version`).

    Example:
        >>> import polars as pl
        >>> scan("runs.rlarrow", "scalars").filter(pl.col("tag") == "train/loss").collect()  # doctest: +SKIP
        >>> scan("runs.rlarrow", "memory", layout=2).collect()  # doctest: +SKIP
    """
    import polars as pl

    from rlarrow.core.remote import open_reader

    reader = open_reader(store, version=version)
    if not isinstance(reader, Store):
        return _scan_remote(reader, table, layout)
    st = reader
    # a LazyFrame cannot own a lease (frames derived from it outlive it): the process's lease
    pinned = st.process_lease().pin_view(st, [table])[table]
    names = st.layout_dirs(table, layout)  # (the view pin_view took)
    st.check_columns(table, layout=layout)
    # Polars checks no page CRC: the frame reads only files found whole (Store.verify)
    st.verify(table, [f for f in pinned if Path(f).parent.name in names])
    schema = st.schema(table, layout=layout)
    frames = []
    for name in names:
        files = [os.fspath(f) for f in pinned if Path(f).parent.name == name]
        if not files:
            continue
        for f in files:  # a file pyarrow reads may still be one Polars cannot
            _polars_reads(f)
        frame = pl.scan_parquet(files)
        if len(names) > 1:  # the columns this layout shares with the others
            own = st.schema(table, layout=int(name.partition(".")[2] or 1))
            own_names = own.names if own is not None else []
            frame = frame.select([c for c in (schema.names if schema is not None else []) if c in own_names])
        frames.append(frame)
    if not frames:
        empty = schema or _schema.table(table).arrow_schema()
        return pl.DataFrame(plain_schema(empty).empty_table()).lazy()
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")


def _scan_remote(st: StoreReader, table: str, layout: int | None) -> Any:
    """:func:`scan` of a store on object storage: each layout's files as a pyarrow dataset Polars scans.

    pyarrow reads them (the columns and row groups the frame needs), checking every page's
    CRC as it reads, so a damaged page fails the ``collect()`` rather than changing values.
    The frame has the columns and types a local store's has (layouts combined by name, a
    column whose types differ left out, with the same warning as ``Store.read``).
    """
    import polars as pl
    import pyarrow.dataset as ds

    from rlarrow.core.store import layout_number, union_layouts
    from rlarrow.core.store.layouts import left_out_note

    names = st.layout_dirs(table, layout)
    schema, left_out = union_layouts([(n, st.schema(table, layout=layout_number(n))) for n in names])
    if left_out:
        warnings.warn(left_out_note(st.path, table, left_out), RLArrowWarning, stacklevel=3)
    from rlarrow.core.store.checked import checked_format

    checked = checked_format()  # (every page checked against its CRC-32 as it is read)
    frames = []
    for name in names:
        own = st.schema(table, layout=layout_number(name))
        files = [os.fspath(f) for f in st.files(table, layout=layout_number(name))]
        if not files or own is None:
            continue
        data = ds.dataset(files, schema=own, format=checked, filesystem=st.filesystem)
        frame = pl.scan_pyarrow_dataset(data)
        if len(names) > 1:  # the columns this layout shares with the others
            frame = frame.select([c for c in (schema.names if schema is not None else []) if c in own.names])
        frames.append(frame)
    if not frames:
        empty = schema or _schema.table(table).arrow_schema()
        return pl.DataFrame(plain_schema(empty).empty_table()).lazy()
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal")


def _polars_reads(path: str) -> None:
    """Raise a CorruptFileError naming ``path`` if Polars cannot read it (once per unchanged file).

    pyarrow (:meth:`~rlarrow.Store.verify`) checked its pages against their CRC-32s; what
    the CRCs do not cover (page headers, the footer) may still be damage that pyarrow
    tolerates and Polars does not, which would otherwise fail a ``collect()`` far from here
    with a Polars error (or a ``PanicException``). Recorded as
    :func:`~rlarrow.core.store.checked.checked_once` records the page checks.
    """
    import polars as pl

    from rlarrow.core.store.checked import POLARS, READ_ERRORS, checked_once

    def run() -> None:
        import pyarrow.parquet as pq

        try:
            # a row group at a time (a file may be 1 GiB of tensors: never all of it in memory)
            sizes = [pq.ParquetFile(path).metadata.row_group(i).num_rows
                     for i in range(pq.ParquetFile(path).metadata.num_row_groups)]
            offset = 0
            for rows in sizes or [0]:
                pl.scan_parquet(path).slice(offset, rows).collect()
                offset += rows
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
            raise damaged_file(path, exc) from exc
        except READ_ERRORS as exc:
            raise damaged_file(path, exc) from exc

    checked_once(path, POLARS, run)


def iter_episodes(
    store: StoreLike,
    where: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    run_id: str | None = None,
    as_torch: bool = False,
    batch_episodes: int = 256,
) -> Iterator[dict[str, Any]]:
    r"""Each episode of ``store`` as a dict of arrays (NumPy, or torch tensors), in step order.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        where: a SQL predicate on the ``episodes`` table choosing episodes, e.g.
            ``"\\"return\\" > 0.5 and not truncated"`` or ``"metadata->>'seed' = '3'"``; every
            episode of ``steps`` when None.
        columns: the ``steps`` columns to read (default: observation, action, reward,
            discount, is_first, is_last, is_terminal); unselected columns are never read.
        run_id: only this run.
        as_torch: torch tensors instead of NumPy arrays (needs the ``torch`` extra).
        batch_episodes: episodes read per Parquet scan.

    Each dict also has ``run_id`` and ``episode_id``. Tensor columns come back with their
    dtype and shape, dict observations as dicts; nullable columns (the last step's action
    and reward) as float arrays with NaN, or object arrays where no NaN fits.

    Example:
        >>> for ep in iter_episodes("runs.rlarrow", "\\"return\\" > 0", columns=["reward"]):  # doctest: +SKIP
        ...     print(ep["episode_id"], ep["reward"].sum())
    """
    import pyarrow.compute as pc

    from rlarrow.core.tensors import to_numpy

    _arguments.integer(batch_episodes, "batch_episodes", minimum=1)
    if run_id is not None:
        _arguments.text(run_id, "run_id", what="a run id")
    st = as_store(store, readonly=True)
    cols = _arguments.names(columns, "columns", what="column name") or [
        "observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal"]
    keys_source = "episodes" if where is not None else "steps"
    query = f"select distinct run_id, episode_id from {keys_source}"
    conds = [f"({where})"] if where is not None else []
    if run_id is not None:
        conds.append(f"run_id = {quote(run_id)}")
    if conds:
        query += " where " + " and ".join(conds)
    query += " order by run_id, episode_id"
    # steps are read below by filters that trust the footers' statistics: checked whole first
    con = connect_checked(st, ema_window=None, database=":memory:", version=None, layout=None, warn=False,
                          verify=dict.fromkeys((keys_source, "steps")))
    try:
        keys = con.sql(query).fetchall()
    finally:
        con.close()
    if as_torch:
        from rlarrow.core.deps import require

        torch = require("torch", feature="iter_episodes(as_torch=True)")
    datasets: dict[int | None, Any] = {}  # a run's rows are in one layout: read it there
    for start in range(0, len(keys), batch_episodes):
        chunk = keys[start:start + batch_episodes]
        by_run: dict[str, list[int]] = {}
        for rid, eid in chunk:
            by_run.setdefault(rid, []).append(eid)
        for rid, eids in by_run.items():
            where_run = st.layout_of("steps", rid) if len(st.layout_dirs("steps")) > 1 else None
            dataset = datasets.get(where_run)
            if dataset is None:
                dataset = datasets[where_run] = st.dataset("steps", layout=where_run)
            flt = (pc.field("run_id") == rid) & pc.field("episode_id").isin(eids)
            try:
                table = dataset.to_table(columns=["episode_id", "step", *cols], filter=flt)
            except READ_ERRORS as exc:  # a page failed its CRC-32: name the file
                raise st.damage("steps", exc, layout=where_run) from exc
            table = table.sort_by([("episode_id", "ascending"), ("step", "ascending")])
            ids = table.column("episode_id").to_numpy()
            cuts = np.flatnonzero(np.diff(ids)) + 1
            bounds = np.concatenate([[0], cuts, [len(ids)]])
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                part = table.slice(a, b - a)
                out: dict[str, Any] = {"run_id": rid, "episode_id": int(ids[a])}
                for name in ["step", *cols]:
                    value = _column_numpy(part.column(name), to_numpy)
                    out[name] = _to_torch(value, torch) if as_torch else value
                yield out


def _column_numpy(col: pa.ChunkedArray, to_numpy: Any) -> Any:
    try:
        return to_numpy(col)
    except ValueError:  # nulls where NaN does not fit (the last step's integer action)
        return np.array(col.to_pylist(), dtype=object)


def _to_torch(value: Any, torch: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_torch(v, torch) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype != object:
        if not value.flags.writeable or not value.flags.c_contiguous:
            value = np.array(value)  # Arrow's buffers are read-only; torch wants its own
        return torch.from_numpy(value)
    return value
