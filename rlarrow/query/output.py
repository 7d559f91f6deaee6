"""Streamed SQL exports: Arrow record batches to Parquet, csv or JSON lines, batch by batch.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Nothing here holds more than one batch: DuckDB hands over record batches (``to_arrow_reader``),
Parquet gets them as row groups of about ``ROW_GROUP_BYTES``, csv and JSON lines get them as text
built with Arrow compute kernels (no per-value Python, except for rare types and escapes).

Text conventions, the same in csv cells and JSON values:

* tensors and lists are nested lists ``[[1.0, 2.0], [3.0, 4.0]]``, structs (dict observations)
  objects ``{"position": [0.5, 1.5], "grid": [[0, 1]]}``;
* binary-layout tensors (DuckDB sees their bytes as a BLOB) are decoded to their dtype and shape
  when the column is known to hold one (see :func:`tensor_hints`); other blobs are hex text;
* floats are the shortest text that reads back as the same value (``0.1``, ``1.0``,
  ``3.4028235e+38`` for a float32, ``1e-7``); NaN and infinities are ``NaN``, ``Infinity``,
  ``-Infinity`` in csv (bare, as Python's ``float()`` and ``json.loads`` read them) and the
  strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` in JSON lines (strict JSON has no such
  numbers; rlarrow's typed JSON metadata spells them the same way);
* csv: a header of quoted names, strings and nested values quoted (``"`` doubled), numbers
  and booleans (``true``/``false``) bare, null an empty cell, ``\\n`` line ends;
* JSON lines: one object per row, keys in column order, null as ``null``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError
from rlarrow.core.tensors import TensorType, to_arrow, to_numpy

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

FORMATS = ("parquet", "csv", "json")
#: Parquet row groups are cut at about this many bytes of Arrow data (or 2**20 rows).
ROW_GROUP_BYTES = 64 << 20
ROW_GROUP_ROWS = 1 << 20
#: Values (tensor elements and scalars) rendered to text at a time, and bytes of Arrow data
#: (strings, blobs): bound the size of the text made at once.
TEXT_VALUES = 1 << 21
TEXT_BYTES = 16 << 20
#: Bytes of Arrow data per batch asked of DuckDB.
BATCH_BYTES = 32 << 20

__all__: list[str] = []

_HEX = np.array([f"{i:02x}".encode() for i in range(256)], dtype="S2").view(np.uint8).reshape(256, 2)


# ------------------------------------------------------------------------- tensor columns

def _has_binary_tensor(type_: pa.DataType) -> bool:
    if isinstance(type_, TensorType):
        return True
    if pa.types.is_struct(type_):
        return any(_has_binary_tensor(f.type) for f in type_)
    return False


def tensor_hints(store: StoreReader) -> dict[str, list[pa.DataType]]:
    """Column name -> the store's binary-layout tensor types of that name (with structs holding one).

    DuckDB reads a binary-layout tensor's storage, a BLOB, and the result no longer says
    which dtype and shape the bytes are. A result column under a tensor's stored name
    (``observation``, ``action``, the memory table's tensor names; ``next_observation`` of
    the ``transitions`` view) is decoded with the stored type whose byte width matches
    every value, so ``select observation from steps`` gives the tensors.
    """
    hints: dict[str, list[pa.DataType]] = {}
    for table in ("steps", "memory"):
        schema = store.schema(table)
        if schema is None:
            continue
        declared = {c.name for c in _schema.table(table).columns if not c.is_tensor}
        for field in schema:
            if field.name in declared or not _has_binary_tensor(field.type):
                continue
            names = [field.name, "next_observation"] if (table, field.name) == ("steps", "observation") \
                else [field.name]
            for name in names:
                if field.type not in hints.setdefault(name, []):
                    hints[name].append(field.type)
    return hints


def resolve_tensor_types(store: StoreReader, given: Mapping[str, Any] | None) -> dict[str, list[pa.DataType]]:
    """:func:`tensor_hints`, with the caller's ``{column: type or "table.column"}`` first."""
    hints = tensor_hints(store)
    for name, spec in (given or {}).items():
        if isinstance(spec, pa.DataType):
            hints[name] = [spec]
            continue
        table, dot, column = str(spec).partition(".")
        schema = store.schema(table) if dot and table in _schema.TABLE_NAMES else None
        if schema is None or column not in schema.names:
            known = [f"{t}.{f.name}" for t in ("steps", "memory")
                     for f in (store.schema(t) or []) if _has_binary_tensor(f.type)]
            choices = ", ".join(known) or "the store has no binary-layout tensors"
            raise ArgumentError(f"tensor_types[{name!r}] = {spec!r}: not a tensor column of the store; give "
                                f"'table.column' ({choices}) or a pyarrow type such as "
                                "rlarrow.core.tensors.tensor_type('uint8', (84, 84), layout='binary')")
        hints[name] = [schema.field(column).type]
    return hints


def _fits(arr: pa.Array, type_: pa.DataType) -> bool:
    """Whether a DuckDB value array can hold values of the stored tensor type ``type_``."""
    if isinstance(type_, TensorType):
        if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
                or pa.types.is_fixed_size_binary(arr.type)):
            return False
        lengths = pc.binary_length(arr)
        lo, hi = pc.min_max(lengths).values()
        width = type_.storage_type.byte_width
        return lo.as_py() is None or (lo.as_py() == width and hi.as_py() == width)
    if pa.types.is_struct(type_):
        return pa.types.is_struct(arr.type) and {f.name for f in arr.type} == {f.name for f in type_}
    return False


def _pick(arr: pa.Array, candidates: list[pa.DataType] | None) -> pa.DataType | None:
    """The one candidate type whose layout ``arr`` matches; None when none or several do."""
    if not candidates:
        return None
    fitting = [t for t in candidates if _fits(arr, t)]
    return fitting[0] if len(fitting) == 1 else None


def _decoded(arr: pa.Array, type_: TensorType) -> pa.Array:
    """A binary-layout tensor array as nested fixed-size lists of its dtype (null rows kept)."""
    fixed = arr if pa.types.is_fixed_size_binary(arr.type) else pc.cast(arr, type_.storage_type)
    dense = to_numpy(pa.ExtensionArray.from_storage(type_, fixed), fill_value=0)
    out = to_arrow(dense)
    if arr.null_count:
        out = _with_nulls(out, arr.is_valid())
    return out


def _with_nulls(arr: pa.Array, valid: pa.Array) -> pa.Array:
    mask = pc.invert(valid)
    if pa.types.is_fixed_size_list(arr.type):
        return pa.FixedSizeListArray.from_arrays(arr.values, type=arr.type, mask=mask)
    return pc.if_else(valid, arr, pa.nulls(len(arr), arr.type))


def with_tensors(batch: pa.RecordBatch, hints: Mapping[str, list[pa.DataType]]) -> list[pa.Array]:
    """The batch's columns, binary-layout tensors (by :func:`tensor_hints`) decoded."""
    return [_apply(col, _pick(col, hints.get(name))) for name, col in zip(batch.schema.names, batch.columns,
                                                                          strict=True)]


def _apply(arr: pa.Array, hint: pa.DataType | None) -> pa.Array:
    if isinstance(arr.type, TensorType):
        return _decoded(arr.storage, arr.type)
    if hint is None:
        return arr
    if isinstance(hint, TensorType):
        return _decoded(arr, hint)
    # a struct (dict observation): decode the fields that hold binary tensors
    children = []
    for field in arr.type:
        child = arr.field(field.name)
        sub = hint.field(field.name).type
        if _has_binary_tensor(sub):
            child = _apply(child, sub if _fits(child, sub) else None)
        children.append(child)
    return pa.StructArray.from_arrays(children, names=[f.name for f in arr.type],
                                      mask=pc.invert(arr.is_valid()) if arr.null_count else None)


# ------------------------------------------------------------------------- values as text

def _plain_type(arr: pa.Array) -> pa.Array:
    """Views and dictionaries as the plain arrays the text kernels take."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _plain_type(arr.dictionary_decode())
    if pa.types.is_string_view(t):
        return pc.cast(arr, pa.large_string())
    if pa.types.is_binary_view(t):
        return pc.cast(arr, pa.large_binary())
    if pa.types.is_list_view(t):
        return pc.cast(arr, pa.list_(t.value_field))
    if pa.types.is_large_list_view(t):
        return pc.cast(arr, pa.large_list(t.value_field))
    if isinstance(t, pa.ExtensionType) and not isinstance(t, TensorType):
        return _plain_type(arr.storage)
    return arr


def _join(*parts: Any) -> pa.Array:
    """Concatenate string arrays and scalars element-wise (no separator)."""
    return pc.binary_join_element_wise(*parts, "")


def float_text(arr: pa.Array, *, quoted_specials: bool) -> pa.Array:
    """Floats as the shortest text reading back as the same value: ``1.0``, ``0.1``, ``1e-7``."""
    if pa.types.is_float16(arr.type):  # compute kernels want float32; every float16 fits
        arr = pc.cast(arr, pa.float32())
    text = pc.cast(arr, pa.string())
    integral = pc.and_(pc.is_finite(arr), pc.equal(pc.trunc(arr), arr))
    if pc.any(integral).as_py():  # "1" -> "1.0", "-0" -> "-0.0"; "1e+16" stays
        fix = pc.and_(integral, pc.invert(pc.match_substring(text, "e")))
        text = pc.if_else(fix, _join(text, ".0"), text)
    if not pc.all(pc.is_finite(arr)).as_py():
        q = '"' if quoted_specials else ""
        text = pc.if_else(pc.is_nan(arr), f"{q}NaN{q}", text)
        inf = pc.is_inf(arr)
        text = pc.if_else(pc.and_(inf, pc.greater(arr, 0)), f"{q}Infinity{q}", text)
        text = pc.if_else(pc.and_(inf, pc.less(arr, 0)), f"{q}-Infinity{q}", text)
    return text


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a (large) string or binary array, as int64 (the array's slice only)."""
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    raw = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)
    return raw[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _hex(arr: pa.Array) -> pa.Array:
    """Binary values as lower-case hex text (nulls as empty text)."""
    if len(arr) == 0:
        return pa.array([], pa.string())
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        offsets = np.arange(len(arr) + 1, dtype=np.int64) * width
        data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width] \
            if len(arr) else np.empty(0, np.uint8)
    else:
        offsets = _offsets(arr)
        buf = arr.buffers()[2]
        data = np.frombuffer(buf, np.uint8)[offsets[0]:offsets[-1]] if buf is not None and len(arr) \
            else np.empty(0, np.uint8)
        offsets = offsets - offsets[0]
    text = _HEX[data].tobytes()
    doubled = offsets * 2
    if doubled[-1] < 2**31:
        return pa.StringArray.from_buffers(len(arr), pa.py_buffer(doubled.astype(np.int32)),
                                           pa.py_buffer(text))
    return pa.LargeStringArray.from_buffers(len(arr), pa.py_buffer(doubled), pa.py_buffer(text))


def _json_string(arr: pa.Array) -> pa.Array:
    """Strings as JSON string literals (UTF-8 kept, ``"``, ``\\`` and control characters escaped)."""
    text = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    control = pc.match_substring_regex(arr, "[\\x00-\\x1f]")
    if pc.any(control).as_py():  # rare (newlines, tabs): Python escapes those rows
        rows = pc.filter(arr, control).to_pylist()
        fixed = pa.array([json.dumps(s, ensure_ascii=False)[1:-1] for s in rows], arr.type)
        text = pc.replace_with_mask(text, control, fixed)
    return _join('"', text, '"')


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list-like array's offsets (from 0) and the slice of its child values they cover."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        child = arr.values.slice(arr.offset * size, len(arr) * size)
        offsets = pa.array(np.arange(len(arr) + 1, dtype=np.int64) * size)
        return offsets, child
    offsets_np = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    child = arr.values.slice(int(offsets_np[0]), int(offsets_np[-1] - offsets_np[0]))
    return pa.array(offsets_np - offsets_np[0]), child


def value_text(arr: pa.Array, *, quoted_specials: bool) -> pa.Array:
    """Each value of ``arr`` as JSON text (``null`` for nulls): numbers, strings, lists, objects.

    Binary-layout tensors must be decoded first (:func:`with_tensors`); other binary values
    become hex strings.
    """
    arr = _plain_type(arr)
    t = arr.type
    if pa.types.is_null(t):
        return pa.array(["null"] * len(arr), pa.string())
    if isinstance(t, TensorType):
        text = value_text(_decoded(arr.storage, t), quoted_specials=quoted_specials)
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
        text = pc.cast(arr, pa.string())
    elif pa.types.is_floating(t):
        text = float_text(arr, quoted_specials=quoted_specials)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = _json_string(arr)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        text = _join('"', _hex(arr), '"')
    elif pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets, child = _list_parts(arr)
        items = value_text(child, quoted_specials=quoted_specials)
        if len(items) >= 2**31 - 1 or pa.types.is_large_string(items.type):
            lists = pa.LargeListArray.from_arrays(offsets, pc.cast(items, pa.large_string()))
        else:
            lists = pa.ListArray.from_arrays(pc.cast(offsets, pa.int32()), pc.cast(items, pa.string()))
        text = _join("[", pc.binary_join(lists, ", "), "]")
    elif pa.types.is_struct(t) and t.num_fields:
        parts: list[Any] = []
        for i, field in enumerate(t):
            parts += ["{" if i == 0 else ", ", json.dumps(field.name, ensure_ascii=False) + ": ",
                      value_text(arr.field(i), quoted_specials=quoted_specials)]
        text = _join(*parts, "}")
    elif pa.types.is_temporal(t):
        try:
            text = _join('"', pc.cast(arr, pa.string()), '"')
        except pa.ArrowNotImplementedError:
            text = _python_text(arr, quoted_specials)
    else:  # maps, unions, intervals, empty structs: rare enough for Python
        text = _python_text(arr, quoted_specials)
    if arr.null_count:
        text = pc.if_else(arr.is_valid(), text, "null")
    return text


def _python_text(arr: pa.Array, quoted_specials: bool) -> pa.Array:
    return pa.array([_py_json(v, quoted_specials) for v in arr.to_pylist()], pa.string())


def _py_json(value: Any, quoted_specials: bool) -> str:
    """One Python value (from ``to_pylist``) as JSON text, with the conventions above."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        q = '"' if quoted_specials else ""
        return q + ("NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity") + q
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return '"' + bytes(value).hex() + '"'
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # intervals (months, days, nanoseconds)
        value = value._asdict()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_py_json(v, quoted_specials)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_json(v, quoted_specials) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _csv_quote(text: pa.Array) -> pa.Array:
    if pc.any(pc.match_substring(text, '"')).as_py():
        text = pc.replace_substring(text, '"', '""')
    return _join('"', text, '"')


def csv_cells(arr: pa.Array) -> pa.Array:
    """A column as csv cells: numbers and booleans bare, text and nested values quoted, null empty."""
    arr = _plain_type(arr)
    t = arr.type
    if pa.types.is_null(t):
        return pa.array([""] * len(arr), pa.string())
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
        text = pc.cast(arr, pa.string())
    elif pa.types.is_floating(t):
        text = float_text(arr, quoted_specials=False)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = _csv_quote(arr)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        text = _join('"', _hex(arr), '"')
    elif pa.types.is_temporal(t) and not pa.types.is_interval(t):
        try:
            text = pc.cast(arr, pa.string())
        except pa.ArrowNotImplementedError:
            text = _csv_quote(_python_text(arr, False))
    else:
        text = _csv_quote(value_text(arr, quoted_specials=False))
    if arr.null_count:
        text = pc.if_else(arr.is_valid(), text, "")
    return text


def _values_per_row(columns: list[pa.Array]) -> int:
    """About how many values (tensor elements included) a row of these columns holds."""
    rows = len(columns[0]) if columns else 0

    def count(arr: pa.Array) -> int:
        t = arr.type
        if isinstance(t, pa.ExtensionType):
            return count(arr.storage)
        if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            return count(_list_parts(arr)[1])
        if pa.types.is_struct(t):
            return sum(count(arr.field(i)) for i in range(t.num_fields))
        return len(arr)

    return max(1, -(-sum(count(c) for c in columns) // max(rows, 1)))


def text_slices(batch: pa.RecordBatch, hints: Mapping[str, list[pa.DataType]]) -> Iterator[list[pa.Array]]:
    """The batch's columns (tensors decoded) in slices of about :data:`TEXT_VALUES` values."""
    if batch.num_rows == 0:
        return
    row_bytes = max(1, batch.nbytes // batch.num_rows)
    sample = with_tensors(batch.slice(0, 64), hints)
    step = max(1, min(TEXT_VALUES // _values_per_row(sample),
                      TEXT_BYTES // row_bytes))
    for start in range(0, batch.num_rows, step):
        yield with_tensors(batch.slice(start, step), hints)


def _lines_bytes(lines: pa.Array) -> memoryview | bytes:
    """The concatenated text of a string array without nulls, without a copy."""
    if len(lines) == 0:
        return b""
    offsets = _offsets(lines)
    return memoryview(lines.buffers()[2])[int(offsets[0]):int(offsets[-1])]


def csv_header(names: list[str]) -> bytes:
    """The csv header line: every name quoted."""
    return (",".join('"' + n.replace('"', '""') + '"' for n in names) + "\n").encode()


def csv_chunk(columns: list[pa.Array]) -> memoryview | bytes:
    """The csv lines of one batch's columns, as one buffer."""
    if not columns:
        return b""
    cells = [csv_cells(col) for col in columns]
    cells[-1] = _join(cells[-1], "\n")  # a separator alone is faster than separators as arguments
    return _lines_bytes(pc.binary_join_element_wise(*cells, ","))


def json_chunk(names: list[str], columns: list[pa.Array]) -> memoryview | bytes:
    """JSON lines of one batch's columns, as one buffer."""
    if not columns:
        return b""
    parts: list[Any] = []
    for i, (name, col) in enumerate(zip(names, columns, strict=True)):
        parts += [("{" if i == 0 else ", ") + json.dumps(name, ensure_ascii=False) + ": ",
                  value_text(col, quoted_specials=True)]
    return _lines_bytes(_join(*parts, "}\n"))


# ------------------------------------------------------------------------- writing

class _Counting:
    """A write-only binary stream that knows its position (Parquet asks; pipes cannot say)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.pos = 0
        self.closed = False

    def write(self, data: Any) -> int:
        n = len(memoryview(data).cast("B"))
        self.raw.write(data)
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:  # the caller owns the stream
        self.closed = True
        self.raw.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False


def write_stream(reader: pa.RecordBatchReader, sink: str | os.PathLike[str] | IO[bytes], fmt: str,
                 hints: Mapping[str, list[pa.DataType]]) -> int:
    """Write every batch of ``reader`` to ``sink`` (a path or a binary stream); return the rows."""
    if fmt not in FORMATS:
        raise ArgumentError(f"format={fmt!r}: use one of {', '.join(FORMATS)}")
    rows = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        where: Any = sink if isinstance(sink, (str, os.PathLike)) \
            else pa.PythonFile(_Counting(sink), mode="w")
        writer = pq.ParquetWriter(where, reader.schema, compression="zstd")
        try:
            pending: list[pa.RecordBatch] = []
            size = count = 0
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                pending.append(batch)
                size += batch.nbytes
                count += batch.num_rows
                if size >= ROW_GROUP_BYTES or count >= ROW_GROUP_ROWS:
                    writer.write_table(pa.Table.from_batches(pending, reader.schema), row_group_size=count)
                    rows += count
                    pending, size, count = [], 0, 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, reader.schema), row_group_size=count)
                rows += count
        finally:
            writer.close()
        return rows
    names = list(reader.schema.names)
    with contextlib.ExitStack() as stack:
        fh = stack.enter_context(open(sink, "wb")) if isinstance(sink, (str, os.PathLike)) else sink
        if fmt == "csv":
            fh.write(csv_header(names))
        for batch in reader:
            for columns in text_slices(batch, hints):
                fh.write(csv_chunk(columns) if fmt == "csv" else json_chunk(names, columns))
                rows += len(columns[0]) if columns else 0
        fh.flush()
    return rows


def batch_rows(store: StoreReader) -> int:
    """Rows per DuckDB record batch: about :data:`BATCH_BYTES` of the store's widest rows, twice over."""
    widest = 64
    for table in _schema.TABLE_NAMES:
        schema = store.schema(table)
        if schema is not None:
            widest = max(widest, sum(_type_bytes(f.type) for f in schema))
    rows = BATCH_BYTES // (2 * widest)
    return int(min(1 << 17, max(2048, rows // 2048 * 2048)))


def _type_bytes(t: pa.DataType) -> int:
    if isinstance(t, pa.ExtensionType):
        return _type_bytes(t.storage_type)
    if pa.types.is_fixed_size_binary(t):
        return int(t.byte_width)
    if pa.types.is_fixed_size_list(t):
        return int(t.list_size) * _type_bytes(t.value_type)
    if pa.types.is_struct(t):
        return sum(_type_bytes(f.type) for f in t)
    try:
        return max(1, int(t.bit_width) // 8)
    except ValueError:  # strings, binaries, lists: a guess
        return 32
