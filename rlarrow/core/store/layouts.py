"""Layouts: a table's concrete schemas, each in its own directory, as pure functions.

A table with tensor columns holds one layout per set of tensor types its runs hold:
``TABLE/`` is layout 1, ``TABLE.2/``, ``TABLE.3/``... the others, and a run's rows of a
table are all in one layout. This module owns the naming (:func:`table_of`,
:func:`layout_number`, :func:`layout_directory`), how layouts read together combine
(:func:`union_layouts`), :class:`LayoutInfo`, and the checks rows pass before they are
written (:func:`validate_rows`, :func:`data_run_ids`). Which layout rows go to is the
store's choice (:mod:`rlarrow.core.store.tables`).

Example:
    >>> table_of("steps.2"), layout_number("steps.2"), layout_directory("steps", 1)
    ('steps', 2, 'steps')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlarrow.core import schema as _schema

__all__ = ["LayoutInfo"]


def table_of(name: str) -> str:
    """The table a layout directory belongs to: ``steps.2`` -> ``steps`` (``steps`` -> ``steps``)."""
    given: object = name  # (any object reaches here from a caller's mistake)
    if not isinstance(given, str):
        _schema.table(given)  # type: ignore[arg-type]  # an ArgumentTypeError naming the argument
    return name.partition(".")[0]


def layout_number(name: str) -> int:
    """The layout a table directory holds: ``steps`` -> 1, ``steps.2`` -> 2."""
    return int(name.partition(".")[2] or 1)


def layout_directory(table: str, layout: int) -> str:
    """The directory of layout ``layout`` of ``table``: ``steps`` (1), ``steps.2``, ..."""
    return table if layout == 1 else f"{table}.{layout}"


def single_layout(name: str) -> int | None:
    """The ``layout=`` that selects exactly the layout directory ``name`` (given as the table)."""
    return 1 if name == table_of(name) else None


def union_layouts(schemas: Sequence[tuple[str, pa.Schema | None]]) -> tuple[pa.Schema | None,
                                                                          dict[str, list[str]]]:
    """The schema of layouts read together, and the columns left out (with each layout's type).

    ``schemas``: (layout directory, its schema or None) in layout order. Union by name, in
    order of first appearance: a column some layouts lack is nullable (their rows read
    null); a column whose type differs between layouts is left out.
    """
    known = [(n, s) for n, s in schemas if s is not None]
    if not known:
        return None, {}
    if len(known) == 1:
        return known[0][1], {}
    fields: dict[str, pa.Field] = {}
    types: dict[str, list[str]] = {}
    clash: set[str] = set()
    for n, s in known:
        for f in s:
            types.setdefault(f.name, []).append(
                f"layout {layout_number(n)} ({n}/) has {_schema.describe_type(f.type)}")
            if f.name not in fields:
                fields[f.name] = f
            elif fields[f.name].type != f.type:
                clash.add(f.name)
    out = []
    for name, f in fields.items():
        if name in clash:
            continue
        if any(name not in s.names for _, s in known):
            f = f.with_nullable(True)
        out.append(f)
    return pa.schema(out), {name: types[name] for name in fields if name in clash}


def has_layouts(table: str) -> bool:
    """Whether ``table`` has tensor columns, whose types may differ from run to run (layouts)."""
    spec = _schema.table(table_of(table))
    return spec.tensor_columns_allowed or any(c.is_tensor for c in spec.columns)


def file_run_ids(path: str | os.PathLike[str], filesystem: Any = None) -> frozenset[str]:
    """The run ids in one data file (row groups of one run: from their statistics alone).

    ``filesystem``: where ``path`` is (a pyarrow filesystem: a bucket); None: the local disk.
    """
    pf = pq.ParquetFile(os.fspath(path), filesystem=filesystem)
    md = pf.metadata
    leaf = next((i for i in range(md.num_columns) if md.schema.column(i).path == "run_id"), None)
    if leaf is None:
        return frozenset()
    ids: set[str] = set()
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(leaf).statistics
        if stats is not None and stats.has_min_max and stats.min == stats.max and stats.null_count == 0:
            ids.add(stats.min if isinstance(stats.min, str) else bytes(stats.min).decode())
        else:
            column = pf.read_row_group(g, columns=["run_id"]).column(0)
            ids.update(v for v in pc.unique(column).to_pylist() if v is not None)
    return frozenset(ids)


@dataclass(frozen=True)
class LayoutInfo:
    """One layout of a table: a concrete schema, in its own directory.

    Attributes:
        table: the table (``steps``).
        layout: its number: 1 is the directory ``TABLE/``, N > 1 is ``TABLE.N/``.
        directory: the directory, relative to the store (``steps.2``).
        schema: its concrete Arrow schema (None: the table holds nothing yet).
        rows: committed rows.
        files: committed files.
        run_ids: the runs with rows in it (a run's rows of a table are in one layout).
    """

    table: str
    layout: int
    directory: str
    schema: pa.Schema | None
    rows: int
    files: int
    run_ids: list[str]


def validate_rows(table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any],
                  established: pa.Schema | None) -> pa.Table:
    """``data`` checked against ``table``'s schema (and the store's concrete one), in its exact form.

    Args:
        table: the table the rows are for.
        data: an Arrow table or batch, or columns as :func:`rlarrow.core.schema.build` takes them.
        established: the concrete schema of the layout they go to (None: the data's own
            tensor types).

    Raises:
        SchemaMismatchError: every problem with the data, at once.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if established is not None and isinstance(data, pa.Table) and data.schema.equals(established):
        _schema.quick_check(table, data)  # already in the exact form: values only
        return data
    if isinstance(data, Mapping):
        return _schema.build(table, data, established=established)
    return _schema.conform(table, data, established)


def data_run_ids(data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> set[str]:
    """The run ids in rows about to be written (as :func:`rlarrow.core.schema.build` takes them, or Arrow)."""
    if isinstance(data, Mapping):
        value = data.get("run_id")
        if value is None:
            return set()
        if isinstance(value, str):
            return {value}
        if not isinstance(value, (pa.Array, pa.ChunkedArray)):
            try:
                value = pa.array(value)
            except (pa.ArrowException, TypeError, ValueError):
                return set()
    elif "run_id" in data.schema.names:
        value = data.column("run_id")
    else:
        return set()
    try:
        return {str(v) for v in pc.unique(value).to_pylist() if v is not None}
    except pa.ArrowException:
        return set()


def left_out_note(path: object, table: str, clash: dict[str, list[str]]) -> str:
    """The warning of a read of ``table``'s layouts together: the columns left out, and how to have them."""
    return (f"{path}: reading the layouts of {table!r} together leaves out the column(s) whose types "
            "differ: " + "; ".join(f"{c} ({', '.join(t)})" for c, t in clash.items())
            + " (read one layout with layout=N to have them)")


def layout_infos(reader: Any, table: str) -> list[LayoutInfo]:
    """:meth:`rlarrow.Store.layouts` of any store a reader reads (a ``RemoteStore`` too).

    ``reader`` is a :class:`~rlarrow.core.store.StoreReader`; each layout's runs are read
    from its files' footers (the run id statistics of their row groups) on its filesystem.
    """
    out = []
    for name in reader.layout_dirs(table):
        n = layout_number(name)
        files = list(reader.files(table, layout=n))
        runs: set[str] = set()
        for path in files:
            runs |= file_run_ids(path, reader.filesystem)
        out.append(LayoutInfo(table=table, layout=n, directory=name, schema=reader.schema(table, layout=n),
                              rows=reader.row_count(table, layout=n), files=len(files), run_ids=sorted(runs)))
    return out
