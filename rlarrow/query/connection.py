"""SQL over a store with DuckDB, lazy frames with Polars, and episodes as arrays.

:func:`connect` opens a DuckDB connection with one view per table over the store's
committed Parquet files (``runs``, ``episodes``, ``steps``, ``scalars``, ``memory``), the
derived view ``transitions``, and macros for common RL measures:

==========================================  ====================================================
``transitions``                             one row per step that has a next step in its
                                            episode: ``observation, action, reward, discount,
                                            next_observation, done`` (the next step is
                                            terminal), ``truncated`` (last but not terminal)
``episode_returns(gamma)``                  per episode: ``steps`` (actions), ``return``,
                                            ``discounted_return``, ``terminated``
``discounted_return(rewards, gamma)``       a list of rewards (in step order) discounted
``success_rate(flag)``                      aggregate: the fraction of true values
``smoothed(n)``                             ``scalars`` with ``moving_average``: the mean of
                                            the last ``n`` points of each run and tag
``ema(weight)``                             ``scalars`` with ``ema``: TensorBoard's debiased
                                            exponential smoothing (weight 0.6 ... 0.999)
``steps_to_threshold(tag, threshold)``      per run: the first step at which ``tag`` reached
                                            ``threshold`` (null if never): ``value >= threshold``;
                                            with ``direction := 'below'``, ``value <= threshold``
                                            (a loss)
``steps_decoded``, ``memory_decoded``,      the views with binary-layout tensors (BLOBs in
``transitions_decoded``                     ``steps``...) decoded to arrays of their dtype and
                                            shape; ``tensor_<dtype>_<d0>x<d1>(blob)`` (e.g.
                                            ``tensor_uint8_84x84``) decodes one value
==========================================  ====================================================

The views read the files directly, so DuckDB pushes filters and column selections down to
Parquet: a query on one run reads only the row groups whose statistics can hold it.
:func:`export` streams a query's result into a Parquet, csv or JSON-lines file batch by batch
(``rlarrow sql --format csv|json|parquet`` does the same), so results of any size fit in memory.
Metadata columns are JSON: ``metadata->>'key'`` reaches any key.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
    >>> with rlarrow.Store.create(path) as st:
    ...     _ = st.append("scalars", {"run_id": "a", "scope": "train", "tag": "return",
    ...                               "step": np.arange(5), "value": [0.0, 1, 2, 3, 4]})
    >>> sql(path, "select * from steps_to_threshold('return', 2.5)").to_pylist()
    [{'run_id': 'a', 'step': 3}]
    >>> con = connect(path)
    >>> con.sql("select step, moving_average from smoothed(2) order by step").fetchall()[:3]
    [(0, 0.0), (1, 0.5), (2, 1.5)]
"""

from __future__ import annotations

import os
import re
import warnings
import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core import transitions as _transitions
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorruptFileError,
    InvalidInputError,
    RLArrowWarning,
    StoreError,
)
from rlarrow.core.store import damaged_file
from rlarrow.core.store.checked import READ_ERRORS

if TYPE_CHECKING:
    from rlarrow.core.store import Store, StoreLike

__all__ = ["connect", "export", "export_relation", "iter_episodes", "layout_notes", "scan", "sql"]



def _store(store: StoreLike, version: int | None = None) -> Store:
    from rlarrow.core.store import as_store

    return as_store(store, readonly=True, version=version)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _file_list(files: Sequence[Path]) -> str:
    return "[" + ", ".join(_quote(os.fspath(f)) for f in files) + "]"


_MACROS = [
    """create or replace macro discounted_return(rewards, gamma) as
       list_sum(list_transform(rewards, lambda x, i: coalesce(x, 0) * pow(gamma, i - 1)))""",
    "create or replace macro success_rate(flag) as avg(case when flag then 1.0 else 0.0 end)",
    """create or replace macro smoothed(n) as table
       select *, avg(value) over (partition by run_id, tag order by step, wall_time
                                  rows between n - 1 preceding and current row) as moving_average
       from scalars""",
    # one aggregate over the tag's rows, as written by hand (a join with the runs that
    # logged the tag cost more)
    """create or replace macro steps_to_threshold(tag_name, threshold, direction := 'above') as table
       select run_id, min(step) filter (where case direction when 'above' then value >= threshold
           when 'below' then value <= threshold else error('steps_to_threshold: direction must be '
           || '''above'' (value >= threshold) or ''below'' (value <= threshold), not ' || direction) end)
           as step
       from scalars where tag = tag_name
       group by run_id order by run_id""",
]


def _episode_returns_macro(layouts: Sequence[int] = ()) -> str:
    """``episode_returns(gamma)`` over ``steps``, or over the steps layouts ``layouts``.

    One aggregate pass, as a hand-written query would be: ``step`` counts from 0 in each
    episode (docs/format.md), so gamma^step is each reward's discount. (The list form,
    discounted_return(list(reward order by step), gamma), took 6x the time: 0.89 s against
    0.14 s for the plain sum over 10M steps.) Where the combined ``steps`` leaves ``action``
    out (its type differs between layouts), each layout says which of its rows acted.
    """
    source, acted = "steps", "count(action)"
    if layouts:
        source = "(" + " union all ".join(
            f"select run_id, episode_id, step, reward, is_terminal, action is not null or null as _acted "
            f"from steps_{n}" for n in layouts) + ")"
        acted = "count(_acted)"
    return f"""create or replace macro episode_returns(gamma) as table
       select run_id, episode_id, {acted} as steps, sum(reward) as "return",
              sum(coalesce(reward, 0) * pow(gamma, step)) as discounted_return,
              bool_or(is_terminal) as terminated
       from {source} group by run_id, episode_id"""


def _ema_macro() -> str:
    """TensorBoard's debiased EMA, s_t = (1 - w) N_t / (1 - w^(t+1)), N_t = sum_{k<=t} w^(t-k) x_k.

    In blocks of B points, B = 600 / -ln(w) (w^-B = e^600, far from overflow): within a
    block, N_t = w^j * (running sum of w^-j' x), j the point's place in its block; the blocks
    before add w^(j+1) times the previous block's N at its end, which is that block's own
    sum plus w^B times the one before it, and so on: w^B = e^-600 leaves those out (below
    1e-260 of the values). So every point takes its whole history in O(n log n), where a
    window of the last points' values per point took O(n * window) (window = 27,600 points
    for w = 0.999).
    """
    return """create or replace macro ema(weight) as table
       with numbered as (
           select *, row_number() over (partition by run_id, tag order by step, wall_time) - 1 as _i,
                  case when weight <= 0 or weight >= 1 then 1
                       else greatest(1, floor(600 / -ln(weight)))::bigint end as _b
           from scalars),
       blocked as (select *, _i // _b as _blk, _i % _b as _j from numbered),
       parts as (
           select *, pow(weight, _j) * sum(value * pow(weight, -_j)) over (
                         partition by run_id, tag, _blk order by _j rows unbounded preceding) as _part
           from blocked),
       ends as (select run_id, tag, _blk, sum(value * pow(weight, _b - 1 - _j)) as _end
                from blocked group by run_id, tag, _blk)
       select p.* exclude (_i, _b, _blk, _j, _part),
              (p._part + coalesce(pow(weight, p._j + 1) * e._end, 0)) * (1 - weight)
                / (1 - pow(weight, p._i + 1)) as ema
       from parts p left join ends e on e.run_id = p.run_id and e.tag = p.tag and e._blk = p._blk - 1"""


def _video_frames(con: Any, files: list[Any]) -> list[Any]:
    """Register ``video_frame(run_id, episode_id, env_index, step, column)`` over the pinned ``videos``.

    It gives a step's frame of a video-layout camera as a BLOB of uint8 ``(H, W, C)`` bytes
    (null where the step has none), decoded on demand (:mod:`rlarrow.core.video`); the
    tensor types of the frames are returned, for their ``tensor_uint8_HxWxC`` decoders.
    """
    from rlarrow.core.tensors import TensorType
    from rlarrow.core.video import VideoFrames, read_videos_file

    shapes: set[tuple[int, int, int]] = set()
    for path in files:  # (their frame shapes only: the index is read at the first call; pages checked)
        for r in read_videos_file(path, ["height", "width", "channels"]).to_pylist():
            shapes.add((r["height"], r["width"], r["channels"]))
    held: list[VideoFrames] = []

    def video_frame(runs: Any, episodes: Any, envs: Any, steps: Any, columns: Any) -> pa.Array:
        if not held:
            held.append(VideoFrames(files))
        frames = held[0]
        cols = [c.to_pylist() if isinstance(c, (pa.Array, pa.ChunkedArray)) else list(c)
                for c in (runs, episodes, envs, steps, columns)]
        out: list[bytes | None] = [None] * len(cols[0])
        groups: dict[tuple[Any, Any, Any, Any], list[int]] = {}
        for i, (r, e, v, _, c) in enumerate(zip(*cols, strict=True)):
            if None not in (r, e, v, cols[3][i], c):
                groups.setdefault((r, e, v, c), []).append(i)
        known = {c for run in frames.runs() for c in frames.columns(run)}
        unknown = sorted({c for _, _, _, c in groups} - known)
        if unknown:
            raise StoreError(f"video_frame: {unknown} is no video-layout field of the store (its fields: "
                             f"{sorted(known) or 'none'}; `select distinct \"column\" from videos`)")
        for (r, e, v, c), rows in groups.items():
            if c not in frames.columns(r):
                continue
            images, has = frames.frames(r, e, v, c, [cols[3][i] for i in rows])
            for j, i in enumerate(rows):
                if has[j]:
                    out[i] = images[j].tobytes()
        return pa.array(out, pa.binary())

    # (registered on every store: one without videos gives null, not an unknown function)
    con.create_function("video_frame", video_frame, ["VARCHAR", "BIGINT", "INTEGER", "BIGINT", "VARCHAR"],
                        "BLOB", type="arrow", null_handling="special")
    return [TensorType("uint8", shape) for shape in sorted(shapes)]


def _tensor_decoders(con: Any, st: Any, more: Sequence[Any] = (),
                     chosen: Mapping[str, int] | None = None) -> None:
    """Register SQL decoders for ``st``'s binary-layout tensors, and the ``*_decoded`` views.

    DuckDB reads a binary-layout tensor (``rlarrow.tensor``) as a BLOB of its bytes. For each
    such tensor type of the store this registers a scalar function
    ``tensor_<dtype>[_<d0>x<d1>...]`` (``tensor_uint8_84x84(observation)``, ``tensor_int64(x)``
    for shape ``()``) that turns the bytes into a DuckDB ARRAY of that dtype and shape (the
    value itself for shape ``()``; LIST for an axis longer than DuckDB's largest ARRAY),
    decoded by NumPy, exactly (int64 and NaN as stored); a blob of another byte width is an
    error. The views ``steps_decoded``, ``memory_decoded`` and ``transitions_decoded`` are
    ``steps``, ``memory`` and ``transitions`` with every binary-layout tensor (also inside
    dict observations) decoded; only the columns a query selects are decoded. A table of
    several layouts also has each layout's (``steps_2_decoded``, ``transitions_2_decoded``);
    ``chosen``: the layout a table's plain view reads (:func:`connect`'s ``layout``).
    """
    from rlarrow.core.tensors import TensorType

    chosen = chosen or {}

    # DuckDB's name of each dtype a binary-layout tensor can hold (float16 widens to FLOAT, exactly)
    duckdb_types = {"b1": "BOOLEAN", "i1": "TINYINT", "i2": "SMALLINT", "i4": "INTEGER", "i8": "BIGINT",
                    "u1": "UTINYINT", "u2": "USMALLINT", "u4": "UINTEGER", "u8": "UBIGINT", "f2": "FLOAT",
                    "f4": "FLOAT", "f8": "DOUBLE"}
    max_array = 100_000  # DuckDB's largest ARRAY; a longer (or empty) axis decodes to a LIST
    registered: set[str] = set()

    def function(type_: TensorType) -> str:
        dtype = type_.numpy_dtype
        name = f"tensor_{dtype.name}" + ("_" + "x".join(map(str, type_.shape)) if type_.shape else "")
        if name in registered:
            return name
        shape, width = type_.shape, type_.storage_type.byte_width
        count = int(np.prod(shape, dtype=np.int64))
        sql_type = duckdb_types[dtype.kind + str(dtype.itemsize)] + "".join(
            f"[{d}]" if 0 < d <= max_array else "[]" for d in reversed(shape))

        def decode(blobs: Any) -> pa.Array:
            arr = blobs.combine_chunks() if isinstance(blobs, pa.ChunkedArray) else blobs
            rows = len(arr)
            if pa.types.is_fixed_size_binary(arr.type):
                starts = np.arange(rows + 1, dtype=np.int64) * arr.type.byte_width + arr.offset * width
            else:
                big = pa.types.is_large_binary(arr.type)
                starts = np.frombuffer(arr.buffers()[1], np.int64 if big else np.int32, count=rows + 1,
                                       offset=arr.offset * (8 if big else 4)).astype(np.int64)
            lengths = np.diff(starts)
            if rows and (lengths.min() != width or lengths.max() != width):
                bad = int(lengths[np.flatnonzero(lengths != width)[0]])
                raise StoreError(f"{name}: a value of {bad} bytes is not a {dtype.name} {shape} tensor "
                                 f"({width} bytes); decode each binary tensor with the function of its own "
                                 "type (`rlarrow info STORE` lists them), or use the *_decoded views")
            data = arr.buffers()[2 if not pa.types.is_fixed_size_binary(arr.type) else 1]
            flat = (np.frombuffer(data, dtype, count=rows * count, offset=int(starts[0])) if rows * count
                    else np.empty(0, dtype))
            out: pa.Array = pa.array(flat.astype(np.float32) if dtype.kind == "f" and dtype.itemsize == 2
                                     else flat)
            for axis in reversed(range(len(shape))):
                d = shape[axis]
                if 0 < d <= max_array:
                    out = pa.FixedSizeListArray.from_arrays(out, d)
                else:
                    lists = rows * int(np.prod(shape[:axis], dtype=np.int64))
                    out = pa.ListArray.from_arrays(pa.array(np.arange(lists + 1, dtype=np.int64) * d,
                                                            pa.int32()), out)
            return out

        con.create_function(name, decode, ["BLOB"], sql_type, type="arrow")
        registered.add(name)
        return name

    def ident(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def expression(ref: str, type_: pa.DataType) -> str | None:
        if isinstance(type_, TensorType):
            return f"{function(type_)}({ref})"
        if pa.types.is_struct(type_):
            parts = [(f, expression(f"struct_extract({ref}, {_quote(f.name)})", f.type)) for f in type_]
            if all(e is None for _, e in parts):
                return None
            fields = ", ".join(f"{ident(f.name)} := {e or f'struct_extract({ref}, {_quote(f.name)})'}"
                               for f, e in parts)
            return f"case when {ref} is null then null else struct_pack({fields}) end"
        return None

    for type_ in more:  # (the frames of video_frame)
        function(type_)

    def decoded(schema: pa.Schema | None) -> dict[str, str]:
        exprs = {f.name: expression(ident(f.name), f.type) for f in (schema or [])}
        return {name: e for name, e in exprs.items() if e is not None}

    def of_transitions(step_columns: dict[str, str], view: str) -> dict[str, str]:
        names = set(con.sql(f"select * from {view} limit 0").columns)
        return {name: step_columns[source].replace(ident(source), ident(name))
                for name, source in ((c.name, c.value) for c in _transitions.COLUMNS if c.value is not None)
                if source in step_columns and name in names}

    columns: dict[str, dict[str, str]] = {}
    for table in ("steps", "memory"):
        columns[table] = decoded(st.schema(table, layout=chosen.get(table)))
        dirs = st.layout_dirs(table)
        if len(dirs) > 1:  # each layout's own, exact: steps_2_decoded, ...
            for n in (int(d.partition(".")[2] or 1) for d in dirs):
                columns[f"{table}_{n}"] = decoded(st.schema(table, layout=n))
                if table == "steps":
                    columns[f"transitions_{n}"] = of_transitions(columns[f"steps_{n}"], f"transitions_{n}")
    columns["transitions"] = of_transitions(columns["steps"], "transitions")
    statements = []
    for view, exprs in columns.items():
        replace = ", ".join(f"{e} as {ident(name)}" for name, e in exprs.items())
        statements.append(f"create or replace view {view}_decoded as select *"
                          + (f" replace ({replace})" if replace else "") + f" from {view}")
    con.execute("; ".join(statements))  # one call: each statement alone costs about a millisecond


def connect(store: StoreLike, *, ema_window: int | None = None, database: str = ":memory:",
            version: int | None = None, layout: int | Mapping[str, int] | None = None,
            warn: bool = True) -> Any:
    r"""A DuckDB connection with a view per table of ``store``, ``transitions`` and the macros.

    The views see the files committed when it was called (call again to see later
    commits), and stay readable while the connection lives, whatever writers and
    compactions do meanwhile (the views read hard links to them: a
    :class:`~rlarrow.core.store.ReaderLease`, released with the connection).
    ``ema_window`` is ignored (deprecated): ``ema`` now weighs each point's whole history.
    ``version``: the store as it was at that version (:attr:`rlarrow.Store.version`).

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
    return _connect(store, ema_window=ema_window, database=database, version=version, layout=layout,
                    warn=warn, verify=_schema.TABLE_NAMES)


def _connect(store: StoreLike, *, ema_window: int | None, database: str, version: int | None,
             layout: int | Mapping[str, int] | None, warn: bool, verify: Collection[str]) -> Any:
    """:func:`connect`, with the files of the tables in ``verify`` checked whole first."""
    import duckdb

    st = _store(store, version)
    chosen = _chosen_layouts(st, layout)
    lease = st.lease()
    con = duckdb.connect(database)
    weakref.finalize(con, lease.release)
    pinned = lease.pin_view(st, _schema.TABLE_NAMES)
    try:  # DuckDB checks no page CRC: it reads only files found whole (Store.verify)
        for table in verify:
            st.verify(table, pinned[table])
    except CorruptFileError:
        con.close()
        raise
    combined: dict[str, _Combined] = {}
    for table in _schema.TABLE_NAMES:
        layouts = st.layout_dirs(table)  # (the view pin_view took)
        if len(layouts) <= 1:
            _create_view(con, st, table, table, pinned[table], st.schema(table))
            continue
        # a table with several layouts (runs with other tensors): a view per layout, TABLE_N,
        # and TABLE over one of them (layout=) or all of them, widened or without the columns
        # whose types differ
        for name in layouts:
            n = int(name.partition(".")[2] or 1)
            files = [f for f in pinned[table] if Path(f).parent.name == name]
            _create_view(con, st, table, f"{table}_{n}", files, st.schema(table, layout=n))
        numbers = [int(name.partition(".")[2] or 1) for name in layouts]
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
    for macro in _MACROS:
        con.execute(macro)
    steps = combined.get("steps")
    con.execute(_episode_returns_macro(steps.numbers if steps is not None and "action" in steps.left_out
                                       else ()))
    if ema_window is not None:
        warnings.warn("connect(ema_window=) is ignored: the ema macro now weighs every point's whole "
                      "history, at any weight; leave it out", DeprecationWarning, stacklevel=2)
    con.execute(_ema_macro())
    _tensor_decoders(con, st, _video_frames(con, pinned.get("videos", [])), chosen)
    if warn:
        for note in layout_notes(st, combined):
            warnings.warn(note, RLArrowWarning, stacklevel=2)
    return con


def _chosen_layouts(st: Any, layout: int | Mapping[str, int] | None) -> dict[str, int]:
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


def _combine(st: Any, table: str, numbers: list[int]) -> _Combined:
    """Which of ``table``'s columns whose types differ between layouts widen exactly, and to what."""
    left_out = st.left_out_columns(table)
    widened: dict[str, pa.DataType] = {}
    for column in list(left_out):
        types = [s.field(column).type for s in (st.schema(table, layout=n) for n in numbers)
                 if s is not None and column in s.names]
        common = _widest(types)
        if common is not None and _duckdb_type(common) is not None:
            widened[column] = common
            del left_out[column]
    return _Combined(table, widened, left_out, numbers)


def _widest(types: Sequence[pa.DataType]) -> pa.DataType | None:
    """The type every value of ``types`` converts to exactly (None: there is none, or not in SQL).

    Integers widen to the widest integer (an unsigned one into a signed one of twice its width),
    floats to the widest float, fixed-size lists of one size element by element. Nothing else:
    never a float into an integer, nor an integer into a float, nor a binary-layout tensor
    (SQL reads its bytes) or a dict observation.

    Example:
        >>> _widest([pa.int32(), pa.int64()]), _widest([pa.uint8(), pa.int8()])
        (DataType(int64), DataType(int16))
        >>> _widest([pa.int64(), pa.float64()]) is None
        True
    """
    if any(isinstance(t, pa.ExtensionType) for t in types):
        return None
    if all(pa.types.is_fixed_size_list(t) for t in types):
        if len({t.list_size for t in types}) != 1:
            return None
        inner = _widest([t.value_type for t in types])
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
            items.append(_ident(name) if common is None else
                         f"cast({_ident(name)} as {_duckdb_type(common)}) as {_ident(name)}")
        parts.append(f"select {', '.join(items)} from {source}")
    con.execute(f"create or replace view {view} as " + " union all by name ".join(parts))


def layout_notes(store: StoreLike, combined: Mapping[str, _Combined] | None = None) -> list[str]:
    """What the combined SQL views of ``store`` widen or leave out, and where to read it exactly.

    One line per table whose layouts' column types differ (empty for a store whose runs'
    tensors agree): the columns widened, those left out (with each layout's type), and the
    per-layout views and the ``layout`` choice that read them exactly. :func:`connect` warns
    with these; ``rlarrow sql`` prints them as notes.

    Example:
        >>> layout_notes("runs.rlarrow")  # doctest: +SKIP
        ['runs.rlarrow: steps holds runs whose columns differ in type: ... left out action (...) ...']
    """
    return list(_layout_notes(store, combined).values())


def _layout_notes(store: StoreLike, combined: Mapping[str, _Combined] | None = None) -> dict[str, str]:
    """The notes of :func:`layout_notes`, by table."""
    from rlarrow.core.type_names import describe_type

    st = _store(store)
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


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _create_view(con: Any, st: Any, table: str, view: str, files: Sequence[Path],
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
                        f"from read_parquet({_file_list(files)})")
            return
        except duckdb.Error as exc:
            err = _damaged(st, exc)
            try:
                if err is exc:
                    raise
                st.verify(table, files)  # names the damaged file
                _locate(st, files, exc)  # or one pyarrow reads but DuckDB cannot
                raise err from exc
            except CorruptFileError as found:
                failure = str(found)
            except BaseException:
                con.close()
                raise
    empty = schema or _schema.table(table).arrow_schema()
    con.register(f"_rlarrow_empty_{view}", _plain(empty).empty_table())
    source = f"_rlarrow_empty_{view}"
    if failure is not None:  # damage: a query of this table fails naming it; the others work
        source += f" where (select error({_quote(failure)})) is null"
    con.execute(f"create or replace view {view} as select *{_null_tensors(table, set(empty.names))} "
                f"from {source}")


def _locate(st: Any, files: Sequence[str | os.PathLike[str]], exc: Exception) -> None:
    """Raise a CorruptFileError naming the first of ``files`` that DuckDB cannot read alone.

    For DuckDB failing on the store's files without naming one: each is read whole on
    its own connection (only after a failure, so its cost does not matter).
    """
    import duckdb

    for f in files:
        if not os.path.isfile(f):
            continue
        with duckdb.connect() as alone:
            try:
                alone.sql(f"select * from read_parquet({_quote(os.fspath(f))})").to_arrow_table()
            except duckdb.Error as found:
                raise damaged_file(f, found) from exc


def _null_tensors(table: str, names: set[str]) -> str:
    """Steps before their first commit have no tensor columns: null ones keep the SQL valid."""
    return "".join(f", null::blob as {c}" for c in ("observation", "action")
                   if table == "steps" and c not in names)


def _damaged(st: Any, exc: Exception) -> Exception:
    """A StoreError for DuckDB failing to read the store's files; other errors as they are."""
    import duckdb

    # invalid input names the file when a file is at fault; error('...') in a query names none
    reading = type(exc) is duckdb.Error or isinstance(exc, duckdb.IOException) or (
        isinstance(exc, duckdb.InvalidInputException)
        and (".parquet" in str(exc) or os.fspath(st.path) in str(exc)))
    if not reading:  # the query's own errors (syntax, names, types, error()) stay DuckDB's
        return exc
    named = _named_files(exc)
    root = os.path.realpath(st.path)
    for path in named:  # a file of the store (or a reader's pinned link to one, inside it too)
        if os.path.realpath(path).startswith(root + os.sep) and os.path.isfile(path):
            return damaged_file(path, exc)
    if named:  # the query's own file (a COPY ... TO, a read_parquet of another file): not the store's
        return InvalidInputError(named[0], f"DuckDB failed on this file, which is not one of the store "
                                 f"{st.path}'s ({exc}); check the file, its path and the space left there")
    return StoreError(f"{st.path}: DuckDB could not read the store's files ({exc}); `rlarrow info` "
                      "and Store.read name a damaged file")


def _named_files(exc: Exception) -> list[str]:
    """The files a DuckDB error names: its ``*.parquet`` words, and an I/O error's paths.

    Example:
        >>> _named_files(OSError('IO Error: Could not write file "out/x.csv": No space left on device'))
        ['out/x.csv']
    """
    import duckdb

    text = str(exc)
    words = [w.rstrip(":,;.") for w in re.split(r"[\s'\"\\]+", text)]
    found = [w for w in words if w.endswith(".parquet")]
    if isinstance(exc, (duckdb.IOException, OSError)):  # (these name the file whatever its suffix)
        found += [w for w in words if "/" in w or os.sep in w]
        found += [w for w in re.findall(r"[\"']([^\"'\\\n]+)[\"']", text) if os.path.lexists(w)]
    return list(dict.fromkeys(found))


def _plain(schema: pa.Schema) -> pa.Schema:
    """The schema with extension types replaced by their storage (what DuckDB reads from files)."""
    fields = []
    for f in schema:
        t = f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type
        if pa.types.is_struct(t):
            t = pa.struct(list(_plain(pa.schema(list(t)))))
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


#: The views and macros that read a table under another name.
_READS = {"transitions": ("steps",), "episode_returns": ("steps",), "smoothed": ("scalars",),
          "steps_to_threshold": ("scalars",), "ema": ("scalars",), "video_frame": ("videos",)}


def _tables_read(query: str) -> list[str]:
    """The tables ``query`` may read: each table, view or macro named in it (a word of its text).

    An over-estimate (a name in a string or a comment counts too), never an under-estimate
    of what the views read: :func:`sql` checks these tables' files whole before DuckDB reads
    them (a ``read_parquet`` of the user's own reads no store file through the views).
    """
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    names: set[str] = set()
    for word in words:
        base = re.sub(r"(_\d+)?(_decoded)?$", "", word)
        names.update(_READS.get(base, (base,)))
    return [t for t in _schema.TABLE_NAMES if t in names]


def sql(store: StoreLike, query: str, *, params: Sequence[Any] | None = None, output: str = "arrow",
        version: int | None = None) -> Any:
    """Run ``query`` over ``store`` (see :func:`connect`) and return its result.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        query: DuckDB SQL over the store's views and macros.
        params: values for ``?`` / ``$1`` placeholders in ``query``.
        output: ``"arrow"`` (a ``pyarrow.Table``, the default), ``"polars"`` (a Polars
            DataFrame) or ``"pandas"`` (a pandas DataFrame; pandas must be installed). The
            conversions keep dtypes, nulls and NaN; tensor columns arrive as lists (of
            lists) in every form. For DuckDB's lazy relation, with ``.pl()``/``.df()``,
            query :func:`connect`'s connection instead.
        version: read the store as it was at this version (:attr:`rlarrow.Store.version`;
            ``rlarrow history STORE`` lists them); None: as it is now.

    Example:
        >>> sql("runs.rlarrow", "select * from episode_returns(0.99) limit 5")  # doctest: +SKIP
        >>> sql("runs.rlarrow", "select * from episodes", output="polars")  # doctest: +SKIP
    """
    if output not in ("arrow", "polars", "pandas"):
        raise ArgumentError(f"output={output!r}: use 'arrow', 'polars' or 'pandas'")
    _arguments.text(query, "query", what="a SQL query (a string)")
    if params is not None and (isinstance(params, (str, bytes))
                               or not isinstance(params, (Sequence, Mapping))):
        raise ArgumentTypeError(f"params: give a list of values for the query's ? placeholders (or a mapping "
                                f"for $name ones), not {type(params).__name__} {params!r:.60}")
    import duckdb

    con = _connect(store, ema_window=None, database=":memory:", version=version, layout=None, warn=False,
                   verify=_tables_read(query))
    # the notes of the combined views this query reads (a query of scalars needs none)
    for name, note in _layout_notes(_store(store, version)).items():
        views = ("steps", "transitions", "episode_returns") if name == "steps" else (name,)
        if any(re.search(rf"\b{view}(_decoded)?\b", query, re.IGNORECASE) for view in views):
            warnings.warn(note, RLArrowWarning, stacklevel=2)
    try:
        rel = con.sql(query, params=params) if params else con.sql(query)
        table: pa.Table = pa.table({}) if rel is None else rel.to_arrow_table()
    except duckdb.Error as exc:
        st = _store(store, version)
        err = _damaged(st, exc)
        if err is exc:
            raise
        if not isinstance(err, InvalidInputError):  # name the file DuckDB did not
            _locate(st, [f for t in _tables_read(query) for f in st.files(t)], exc)
        raise err from exc
    finally:
        con.close()
    if output == "polars":
        import polars as pl

        return pl.from_arrow(table)
    if output == "pandas":
        return table.to_pandas()
    return table


_SUFFIX_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json",
                   ".jsonl": "json", ".ndjson": "json"}


def export(
    store: StoreLike,
    query: str,
    path: str | os.PathLike[str] | IO[bytes],
    *,
    format: str | None = None,  # noqa: A002
    params: Sequence[Any] | None = None,
    tensor_types: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> int:
    r"""Write the result of ``query`` over ``store`` to a Parquet, csv or JSON-lines file, streamed.

    The result is never held whole: DuckDB hands over record batches, written one by one
    (Parquet row groups of about 64 MiB), so any result fits in the memory of a few batches.
    A file path is written atomically (a failed export leaves nothing at ``path``).

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        query: DuckDB SQL over the views and macros of :func:`connect`.
        path: the file to write, or a binary stream (``sys.stdout.buffer``).
        format: ``"parquet"``, ``"csv"`` or ``"json"`` (one object per line); default: from
            ``path``'s suffix (``.parquet``, ``.csv``, ``.json``, ``.jsonl``, ``.ndjson``).
        params: values for ``?`` / ``$1`` placeholders in ``query``.
        tensor_types: result columns holding binary-layout tensors under another name than
            the stored one, as ``{"obs": "steps.observation"}`` or ``{"obs": tensor_type}``.
        overwrite: replace an existing file.

    Parquet holds exactly :func:`sql`'s Arrow result (tensors as DuckDB returns them: lists,
    and binary-layout tensors as their bytes). csv and JSON lines hold text: tensors and lists
    as nested lists ``[[1.0, 2.0], [3.0, 4.0]]``, dict observations as JSON objects,
    binary-layout tensors decoded to their dtype and shape (recognised by the column's name:
    ``observation``, ``action``, ``next_observation``, the memory tensors' names, or the names
    in ``tensor_types``, whose byte width must match; other blobs are hex text, as are blobs of
    a name that two stored tensors of the same width share: name the one meant in
    ``tensor_types``). Floats are the shortest text that reads back
    as the same value (``0.1``, ``1.0``, a float32 as ``0.1`` too). NaN and infinities are
    ``NaN``, ``Infinity`` and ``-Infinity``: bare in csv (Python's ``float`` and ``json.loads``
    read them), as strings ``"NaN"`` ... in JSON lines, which must stay strict JSON. csv nulls
    are empty cells, JSON nulls ``null``.

    Returns:
        The number of rows written.

    Raises:
        ValueError: an unknown format, a statement that returns no rows, or a bad
            ``tensor_types`` entry.
        FileExistsError: ``path`` exists and not ``overwrite``.
        StoreError: DuckDB could not read the store's files.

    Example:
        >>> import numpy as np, rlarrow, tempfile, pathlib
        >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
        >>> with rlarrow.Store.create(path) as st:
        ...     _ = st.append("steps", {"run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...         "observation": np.array([[0.5, 1], [2, 3], [4, 5]], np.float32),
        ...         "action": [1, 0, None], "reward": [1.0, float("nan"), None],
        ...         "discount": [1.0, 0.0, None], "is_first": [True, False, False],
        ...         "is_last": [False, False, True], "is_terminal": [False, False, True]})
        >>> out = tempfile.mkdtemp() + "/t.jsonl"
        >>> export(path, "select step, observation, next_observation, reward from transitions "
        ...              "order by step", out)
        2
        >>> print(pathlib.Path(out).read_text(), end="")
        {"step": 0, "observation": [0.5, 1.0], "next_observation": [2.0, 3.0], "reward": 1.0}
        {"step": 1, "observation": [2.0, 3.0], "next_observation": [4.0, 5.0], "reward": "NaN"}
    """
    from rlarrow.query import output as _export

    fmt = format
    if fmt is None:
        suffix = Path(os.fspath(path)).suffix.lower() if isinstance(path, (str, os.PathLike)) else ""
        fmt = _SUFFIX_FORMATS.get(suffix)
        if fmt is None:
            raise ArgumentError(f"cannot tell the format of {path!r}: pass format='parquet', 'csv' or 'json'")
    if fmt not in _export.FORMATS:
        raise ArgumentError(f"format={fmt!r}: use 'parquet', 'csv' or 'json'")
    st = _store(store)
    hints = _export.resolve_tensor_types(st, tensor_types)
    con = connect(st)
    try:
        rel = _relation(st, con, query, params)
        if rel is None:
            raise ArgumentError(f"{query!r} is a statement that returns no rows; export a query (select ...)")
        return export_relation(st, rel, path, fmt, hints=hints, overwrite=overwrite)
    finally:
        con.close()


def _relation(st: Any, con: Any, query: str, params: Sequence[Any] | None) -> Any:
    import duckdb

    try:
        return con.sql(query, params=params) if params else con.sql(query)
    except duckdb.Error as exc:
        err = _damaged(st, exc)
        if err is exc:
            raise
        raise err from exc


def export_relation(st: Any, rel: Any, path: str | os.PathLike[str] | IO[bytes], fmt: str, *,
                    hints: Mapping[str, list[pa.DataType]] | None = None, overwrite: bool = False) -> int:
    """Stream a DuckDB relation over ``st``'s views into ``path`` (see :func:`export`)."""
    import duckdb

    from rlarrow.io.memory.snapshot import atomic_output
    from rlarrow.query import output as _export

    hints = _export.tensor_hints(st) if hints is None else hints
    try:
        reader = rel.to_arrow_reader(_export.batch_rows(st))
        if not isinstance(path, (str, os.PathLike)):
            return _export.write_stream(reader, path, fmt, hints)
        if os.path.exists(path) and not os.path.isfile(path):  # a pipe or a device: written as it is
            with open(path, "wb") as fh:
                return _export.write_stream(reader, fh, fmt, hints)
        with atomic_output(path, overwrite=overwrite) as tmp:
            return _export.write_stream(reader, tmp, fmt, hints)
    except duckdb.Error as exc:
        err = _damaged(st, exc)
        if err is exc:
            raise
        raise err from exc


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

    st = _store(store, version)
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
        return pl.DataFrame(_plain(empty).empty_table()).lazy()
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
    st = _store(store)
    cols = _arguments.names(columns, "columns", what="column name") or [
        "observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal"]
    keys_source = "episodes" if where is not None else "steps"
    query = f"select distinct run_id, episode_id from {keys_source}"
    conds = [f"({where})"] if where is not None else []
    if run_id is not None:
        conds.append(f"run_id = {_quote(run_id)}")
    if conds:
        query += " where " + " and ".join(conds)
    query += " order by run_id, episode_id"
    # steps are read below by filters that trust the footers' statistics: checked whole first
    con = _connect(st, ema_window=None, database=":memory:", version=None, layout=None, warn=False,
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
