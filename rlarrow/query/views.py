"""A DuckDB connection's views over a store: one per table and layout, combined, and ``transitions``.

:func:`connect` (also :func:`rlarrow.query.connection.connect`) pins the committed files
with a reader lease, makes a view per table (``TABLE_N`` per layout of a table whose runs
hold different tensors, and ``TABLE`` combining them by column name: :func:`widest` says
which types widen exactly, :func:`layout_notes` what is left out), the ``transitions``
view (:mod:`rlarrow.core.transitions`) and then the SQL functions
(:mod:`rlarrow.query.sql_functions`). :func:`connect_checked` first checks the files of
the tables a query reads whole (DuckDB checks no page CRC).

Example:
    >>> import pyarrow as pa
    >>> widest([pa.int32(), pa.int64()]), widest([pa.float32(), pa.int64()])
    (DataType(int64), None)
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core import transitions as _transitions
from rlarrow.core.errors import (
    ArgumentError,
    CorruptFileError,
    RLArrowWarning,
    StoreError,
)
from rlarrow.core.remote import open_reader
from rlarrow.core.store import Store, StoreReader, layout_number, union_layouts
from rlarrow.query.duckdb_errors import damaged, locate
from rlarrow.query.sql_functions import add_functions
from rlarrow.query.sql_text import file_list, ident, quote

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["connect"]


def connect(store: StoreLike | StoreReader, *, ema_window: int | None = None, database: str = ":memory:",
            version: int | None = None, layout: int | Mapping[str, int] | None = None,
            warn: bool = True) -> Any:
    r"""A DuckDB connection with a view per table of ``store``, ``transitions`` and the macros.

    The views see the files committed when it was called (call again to see later
    commits), and stay readable while the connection lives, whatever writers and
    compactions do meanwhile (the views read hard links to them: a
    :class:`~rlarrow.core.store.ReaderLease`, released with the connection).
    ``ema_window`` is ignored (deprecated): ``ema`` now weighs each point's whole history.
    ``version``: the store as it was at that version (:attr:`rlarrow.Store.version`).

    ``store`` may also be a store pushed to object storage: its URI (``s3://bucket/runs.rlarrow``,
    configured by the standard AWS variables) or a :class:`~rlarrow.core.remote.RemoteStore`.
    Its views are the same, read through pyarrow (page CRCs checked as they are read), at the
    version pushed.

    A table whose runs hold different tensors has several layouts
    (:meth:`~rlarrow.Store.layouts`): each layout N has its exact view ``TABLE_N``
    (``steps_2``, ``transitions_2``, ``steps_2_decoded``...), and ``TABLE`` combines them by
    column name. A column whose type differs between layouts is widened where every value
    fits exactly (integers to the widest integer, int32 and int64 to int64, unsigned into a
    wider signed; floats to the widest float; tensors of one shape element by element) and
    left out of the combined views otherwise (never a float into an integer, never an
    integer into a float: a discrete and a continuous action stay apart); a warning
    (``warn=True``) names those columns and where to read them. ``layout`` picks one
    layout instead: ``2`` (the steps layout 2: ``steps``, ``transitions`` and the macros
    see it alone) or ``{"steps": 2, "memory": 1}``.

    Example:
        >>> con = connect("runs.rlarrow")  # doctest: +SKIP
        >>> con.sql('select run_id, avg("return") from episodes group by all').pl()  # doctest: +SKIP
        >>> connect("runs.rlarrow", layout=2).sql("select distinct run_id from steps")  # doctest: +SKIP
    """
    return connect_checked(store, ema_window=ema_window, database=database, version=version, layout=layout,
                    warn=warn, verify=_schema.TABLE_NAMES)


def connect_checked(store: StoreLike | StoreReader, *, ema_window: int | None, database: str,
                    version: int | None, layout: int | Mapping[str, int] | None, warn: bool,
                    verify: Collection[str]) -> Any:
    """:func:`connect`, with the files of the tables in ``verify`` checked whole first.

    A store on object storage (a URI, or a :class:`~rlarrow.core.remote.RemoteStore`) gets
    the same views over its files, read through pyarrow, which checks each page's CRC as
    it reads (``verify`` is for DuckDB's own reader, which checks none).
    """
    import duckdb

    st = open_reader(store, version=version)
    chosen = _chosen_layouts(st, layout)
    con = duckdb.connect(database)
    if isinstance(st, Store):
        lease = st.lease()
        weakref.finalize(con, lease.release)
        pinned = lease.pin_view(st, _schema.TABLE_NAMES)
        try:  # DuckDB checks no page CRC: it reads only files found whole (Store.verify)
            for table in verify:
                st.verify(table, pinned[table])
        except CorruptFileError:
            con.close()
            raise
    else:  # (the bucket's files are never changed, and removed only by a vacuum days later)
        pinned = {table: [] for table in _schema.TABLE_NAMES}

    def view(table: str, name: str, n: int | None, directory: str) -> None:
        if not isinstance(st, Store):
            _create_remote_view(con, st, table, name, n)
            return
        files = pinned[table] if n is None else [f for f in pinned[table] if Path(f).parent.name == directory]
        _create_view(con, st, table, name, files, st.schema(table, layout=n))

    combined: dict[str, _Combined] = {}
    for table in _schema.TABLE_NAMES:
        layouts = st.layout_dirs(table)  # (the view pin_view took)
        if len(layouts) <= 1:
            view(table, table, None, table)
            continue
        # a table with several layouts (runs with other tensors): a view per layout, TABLE_N,
        # and TABLE over one of them (layout=) or all of them, widened or without the columns
        # whose types differ
        numbers = [int(name.partition(".")[2] or 1) for name in layouts]
        for n, directory in zip(numbers, layouts, strict=True):
            view(table, f"{table}_{n}", n, directory)
        if table in chosen:
            con.execute(f"create or replace view {table} as select * from {table}_{chosen[table]}")
            continue
        combined[table] = _combine(st, table, numbers)
        _union_view(con, table, [f"{table}_{n}" for n in numbers], combined[table])
    try:
        steps_layouts = st.layout_dirs("steps")
        if len(steps_layouts) <= 1 or "steps" in chosen:
            con.execute(_transitions.sql_view())  # the one definition (NumPy samples derive from it too)
        if len(steps_layouts) > 1:  # transitions of each layout, and over all of them
            numbers = [int(name.partition(".")[2] or 1) for name in steps_layouts]
            for n in numbers:
                con.execute(_transitions.sql_view(f"transitions_{n}", f"steps_{n}"))
        if "steps" in combined:
            _union_view(con, "transitions", [f"transitions_{n}" for n in numbers],
                        combined["steps"].of_transitions())
    except duckdb.Error as exc:  # no user query yet: the files do not have the table's columns
        con.close()
        raise StoreError(f"{st.path}: the steps files do not have the table's columns ({exc}); "
                         f"`rlarrow repair {st.path}` names a damaged file") from exc
    steps = combined.get("steps")
    add_functions(con, st, pinned.get("videos", []), chosen,
                  steps.numbers if steps is not None and "action" in steps.left_out else ())
    if ema_window is not None:
        warnings.warn("connect(ema_window=) is ignored: the ema macro now weighs every point's whole "
                      "history, at any weight; leave it out", DeprecationWarning, stacklevel=2)
    if warn:
        for note in layout_notes(st, combined):
            warnings.warn(note, RLArrowWarning, stacklevel=2)
    return con


def _create_remote_view(con: Any, st: StoreReader, table: str, view: str, layout: int | None) -> None:
    """The view ``view`` of a store on object storage: its files read through pyarrow.

    DuckDB scans the pyarrow dataset (only the columns and row groups a query needs, its
    filters pushed down); pyarrow checks every page's CRC as it reads, so a damaged page is
    an error, never a changed value. Tensor columns read as their storage (a binary-layout
    tensor is a BLOB, as DuckDB reads it from a local file).
    """
    import pyarrow.dataset as ds

    schema = st.schema(table, layout=layout)
    files = list(st.files(table, layout=layout))
    source = f"_rlarrow_source_{view}"
    if files and schema is not None:
        from rlarrow.core.store.checked import checked_format

        checked = checked_format()  # (every page checked against its CRC-32 as it is read)
        con.register(source, ds.dataset([os.fspath(f) for f in files], schema=_as_parquet_reads(schema),
                                        format=checked, filesystem=st.filesystem))
    else:
        con.register(source, plain_schema(schema or _schema.table(table).arrow_schema()).empty_table())
    names = set((schema or _schema.table(table).arrow_schema()).names)
    con.execute(f"create or replace view {view} as select *{_null_tensors(table, names)} from {source}")


def _chosen_layouts(st: StoreReader, layout: int | Mapping[str, int] | None) -> dict[str, int]:
    """``connect``'s ``layout``: the layout read by each table's plain view, checked."""
    from rlarrow.core.store.layouts import has_layouts

    if layout is None:
        return {}
    chosen = {"steps": layout} if isinstance(layout, int) and not isinstance(layout, bool) else layout
    if not isinstance(chosen, Mapping):
        raise ArgumentError(f"layout={layout!r}: give a steps layout's number (2) or a mapping of tables "
                            "to layout numbers ({'steps': 2, 'memory': 1}); Store.layouts(table) lists them")
    out: dict[str, int] = {}
    for table, n in chosen.items():
        if table not in _schema.TABLE_NAMES or not has_layouts(table):
            raise ArgumentError(f"layout={{{table!r}: {n!r}}}: only tables with tensor columns have layouts "
                                "(steps, memory)")
        st.layout_dirs(table, n)  # (a StoreError naming the layouts there are)
        out[table] = n
    return out


class _Combined:
    """How a table's layouts combine in its SQL view: the columns widened, and those left out."""

    def __init__(self, table: str, widened: dict[str, pa.DataType], left_out: dict[str, list[str]],
                 numbers: list[int]) -> None:
        self.table, self.widened, self.left_out, self.numbers = table, widened, left_out, numbers

    def of_transitions(self) -> _Combined:
        """The same for ``transitions``, whose columns are made of ``steps``'s."""
        def mapped(columns: Mapping[str, Any]) -> dict[str, Any]:
            return {c.name: columns[c.value] for c in _transitions.COLUMNS
                    if c.value is not None and c.value in columns}

        return _Combined("transitions", mapped(self.widened), mapped(self.left_out), self.numbers)


def _combine(st: StoreReader, table: str, numbers: list[int]) -> _Combined:
    """Which of ``table``'s columns whose types differ between layouts widen exactly, and to what."""
    dirs = st.layout_dirs(table)
    left_out = union_layouts([(d, st.schema(table, layout=layout_number(d))) for d in dirs])[1]
    widened: dict[str, pa.DataType] = {}
    for column in list(left_out):
        types = [s.field(column).type for s in (st.schema(table, layout=n) for n in numbers)
                 if s is not None and column in s.names]
        common = widest(types)
        if common is not None and _duckdb_type(common) is not None:
            widened[column] = common
            del left_out[column]
    return _Combined(table, widened, left_out, numbers)


def widest(types: Sequence[pa.DataType]) -> pa.DataType | None:
    """The type every value of ``types`` converts to exactly (None: there is none, or not in SQL).

    Integers widen to the widest integer (an unsigned one into a signed one of twice its width),
    floats to the widest float, fixed-size lists of one size element by element. Nothing else:
    never a float into an integer, nor an integer into a float, nor a binary-layout tensor
    (SQL reads its bytes) or a dict observation.

    Example:
        >>> widest([pa.int32(), pa.int64()]), widest([pa.uint8(), pa.int8()])
        (DataType(int64), DataType(int16))
        >>> widest([pa.int64(), pa.float64()]) is None
        True
    """
    if any(isinstance(t, pa.ExtensionType) for t in types):
        return None
    if all(pa.types.is_fixed_size_list(t) for t in types):
        if len({t.list_size for t in types}) != 1:
            return None
        inner = widest([t.value_type for t in types])
        return None if inner is None else pa.list_(inner, types[0].list_size)
    if all(pa.types.is_integer(t) for t in types):
        signed = [t.bit_width for t in types if pa.types.is_signed_integer(t)]
        unsigned = [t.bit_width for t in types if pa.types.is_unsigned_integer(t)]
        if not signed:
            return {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}[max(unsigned)]
        bits = max(signed + [2 * b for b in unsigned])
        return {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}.get(bits)
    if all(pa.types.is_floating(t) for t in types):
        return {16: pa.float16(), 32: pa.float32(), 64: pa.float64()}[max(t.bit_width for t in types)]
    return None


_DUCKDB_TYPES = {"int8": "TINYINT", "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT",
                 "uint8": "UTINYINT", "uint16": "USMALLINT", "uint32": "UINTEGER", "uint64": "UBIGINT",
                 "halffloat": "FLOAT", "float": "FLOAT", "double": "DOUBLE"}


def _duckdb_type(type_: pa.DataType) -> str | None:
    """DuckDB's name of a widened type: ``BIGINT``, ``DOUBLE[][]`` (a (3, 4) tensor).

    A list-layout tensor is a list in DuckDB (as it reads Parquet's lists), so it stays one.
    """
    if pa.types.is_fixed_size_list(type_):
        inner = _duckdb_type(type_.value_type)
        return None if inner is None else f"{inner}[]"
    return _DUCKDB_TYPES.get(str(type_))


def _union_view(con: Any, view: str, sources: Sequence[str], combined: _Combined) -> None:
    """``view``: the union by name of ``sources``, widened and without the left-out columns."""
    parts = []
    for source in sources:
        items = []
        for name in con.sql(f"select * from {source} limit 0").columns:
            if name in combined.left_out:
                continue
            common = combined.widened.get(name)
            items.append(ident(name) if common is None else
                         f"cast({ident(name)} as {_duckdb_type(common)}) as {ident(name)}")
        parts.append(f"select {', '.join(items)} from {source}")
    con.execute(f"create or replace view {view} as " + " union all by name ".join(parts))


def layout_notes(store: StoreLike | StoreReader,
                 combined: Mapping[str, _Combined] | None = None) -> list[str]:
    """What the combined SQL views of ``store`` widen or leave out, and where to read it exactly.

    One line per table whose layouts' column types differ (empty for a store whose runs'
    tensors agree): the columns widened, those left out (with each layout's type), and the
    per-layout views and the ``layout`` choice that read them exactly. :func:`connect` warns
    with these; ``rlarrow sql`` prints them as notes.

    Example:
        >>> layout_notes("runs.rlarrow")  # doctest: +SKIP
        ['runs.rlarrow: steps holds runs whose columns differ in type: ... left out action (...) ...']
    """
    return list(layout_notes_by_table(store, combined).values())


def layout_notes_by_table(store: StoreLike | StoreReader, combined: Mapping[str, _Combined] | None = None,
                          ) -> dict[str, str]:
    """The notes of :func:`layout_notes`, by table."""
    from rlarrow.core.type_names import describe_type

    st = open_reader(store)
    if combined is None:
        combined = {}
        for table in _schema.TABLE_NAMES:
            dirs = st.layout_dirs(table)
            if len(dirs) > 1:
                combined[table] = _combine(st, table, [int(d.partition(".")[2] or 1) for d in dirs])
    notes = {}
    for table, c in combined.items():
        if not c.widened and not c.left_out:
            continue
        said = []
        if c.widened:
            said.append("widen " + ", ".join(f"{name} to {describe_type(t)}"
                                             for name, t in c.widened.items()))
        if c.left_out:
            said.append("leave out " + ", ".join(f"{name} ({'; '.join(lines)})" for name, lines in
                                                  c.left_out.items()))
        views = f"`{table}`" + (", `transitions` and `episode_returns`" if table == "steps" else "")
        exact = ", ".join(f"`{table}_{n}`" for n in c.numbers) + (
            "; `transitions_1`, ..." if table == "steps" else "")
        notes[table] = (f"{st.path}: the runs of {table} differ in column types, so the combined views "
                        f"{views} {' and '.join(said)}. Read them exactly in one layout's views ({exact}), "
                        f"or pick one layout: `--layout {table}={c.numbers[-1]}` on the command line, "
                        f"connect(store, layout={{{table!r}: {c.numbers[-1]}}}) in Python")
    return notes


def _create_view(con: Any, st: Store, table: str, view: str, files: Sequence[Path],
                 schema: pa.Schema | None) -> None:
    """The view ``view`` over ``files`` (of ``table``, in ``schema``; none: an empty view).

    A missing or damaged file (one DuckDB cannot plan a read of) makes a view whose every
    query fails naming the file; the other tables' views work.
    """
    import duckdb

    missing = [f for f in files if not os.path.lexists(f)]
    failure = None
    if missing:
        failure = (f"{missing[0]}: a listed file of table {table!r} is missing; `rlarrow info "
                   f"{st.path}` names every damaged file, `rlarrow repair` drops them")
    elif files:
        names = set(schema.names) if schema is not None else set()
        try:
            con.execute(f"create or replace view {view} as select *{_null_tensors(table, names)} "
                        f"from read_parquet({file_list(files)})")
            return
        except duckdb.Error as exc:
            err = damaged(st, exc)
            try:
                if err is exc:
                    raise
                st.verify(table, files)  # names the damaged file
                locate(st, files, exc)  # or one pyarrow reads but DuckDB cannot
                raise err from exc
            except CorruptFileError as found:
                failure = str(found)
            except BaseException:
                con.close()
                raise
    empty = schema or _schema.table(table).arrow_schema()
    con.register(f"_rlarrow_empty_{view}", plain_schema(empty).empty_table())
    source = f"_rlarrow_empty_{view}"
    if failure is not None:  # damage: a query of this table fails naming it; the others work
        source += f" where (select error({quote(failure)})) is null"
    con.execute(f"create or replace view {view} as select *{_null_tensors(table, set(empty.names))} "
                f"from {source}")


def _as_parquet_reads(schema: pa.Schema) -> pa.Schema:
    """The types DuckDB's Parquet reader gives a local store's columns: so a bucket's views are the same.

    A binary-layout tensor is its bytes (:func:`plain_schema`); a list-layout tensor (a
    fixed-size list, at any depth) a variable-size list, as Parquet stores it.
    """
    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_fixed_size_list(t) or pa.types.is_list(t):
            return pa.list_(pa.field(t.value_field.name, plain(t.value_type), t.value_field.nullable))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in t])
        return t

    return pa.schema([pa.field(f.name, plain(f.type), f.nullable) for f in plain_schema(schema)])


def _null_tensors(table: str, names: set[str]) -> str:
    """Steps before their first commit have no tensor columns: null ones keep the SQL valid."""
    return "".join(f", null::blob as {c}" for c in ("observation", "action")
                   if table == "steps" and c not in names)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with extension types replaced by their storage (what DuckDB reads from files)."""
    fields = []
    for f in schema:
        t = f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type
        if pa.types.is_struct(t):
            t = pa.struct(list(plain_schema(pa.schema(list(t)))))
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)
