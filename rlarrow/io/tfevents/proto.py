"""The protobuf wire format of the messages in event files: ``Event``, ``Summary``, ``TensorProto``.

rlarrow reads and writes these messages itself (no protobuf, no TensorFlow), and only the
fields it needs. The field numbers used here, from TensorFlow's ``event.proto``,
``summary.proto`` and ``tensor.proto``::

    Event          1 wall_time (double)  2 step (int64)  3 file_version (string)  5 summary
                   4 graph_def, 6 log_message, 7 session_log, 8 run_metadata, 9 meta_graph (counted, skipped)
    Summary        1 value (repeated Summary.Value)
    Summary.Value  1 tag  2 simple_value (float)  8 tensor (TensorProto)  9 metadata
                   3/5 histogram, 4 image, 6 audio (counted, skipped)
    SummaryMetadata  1 plugin_data: PluginData {1 plugin_name, 2 content (bytes)}
    TensorProto    1 dtype  2 tensor_shape {2 dim {1 size}}  4 tensor_content (raw little-endian)
                   5 float_val 6 double_val 7 int_val 10 int64_val 11 bool_val 13 half_val
                   16 uint32_val 17 uint64_val (one typed field per dtype: see ``_DTYPES``)

It owns:

- **Decoding one record** (the generic path): :func:`parse_event` turns an ``Event``
  payload into ``scalars`` rows, in every scalar encoding, and counts what it skips. Most
  records take a vectorised path instead (:mod:`.decode`); this one takes the rest.
- **Encoding**: :func:`value_message` and :func:`event_bytes` build the payloads
  :class:`~rlarrow.io.tfevents.EventFileWriter` writes, including rlarrow's exact value
  beside a ``simple_value`` (plugin :data:`EXACT_PLUGIN`, see the package docstring).

Record framing (lengths, checksums) is :mod:`rlarrow.io.codecs.tfrecord`'s business, not this module's.

Example:
    >>> from collections import Counter
    >>> payload = event_bytes(1.5, 7, value_message(b"train/loss", 0.25, None, None, None, None))
    >>> rows: list[tuple[object, ...]] = []
    >>> parse_event(payload, rows, 0, Counter(), [])
    >>> rows
    [(0, 0, 'train/loss', 7, 0.25, None, 1.5, 'simple_value', 'float32', None)]
    >>> rows.clear()
    >>> parse_event(event_bytes(1.5, 8, value_message(b"x", 0.1, None, "double_val", "float64", None)),
    ...             rows, 0, Counter(), [])
    >>> rows[0][2:]  # float32 does not hold 0.1: the exact float64 travels beside the simple_value
    ('x', 8, 0.1, None, 1.5, 'double_val', 'float64', None)

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__: list[str] = []

#: plugin name of the exact value rlarrow writes next to a ``simple_value`` (see the package docstring)
EXACT_PLUGIN = "rlarrow_exact"
#: the encodings a plain float32 ``simple_value`` stands for (no exact value needed)
PLAIN_ENCODINGS = (None, "simple_value", "logger")


# --------------------------------------------------------------------------- decoding


class Malformed(Exception):
    """A payload that is not a valid message (the reader reports it as a corrupt record)."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise Malformed("varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise Malformed("varint longer than 10 bytes")


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Wire-format fields of a message: (number, wire type, value or (start, end))."""
    while pos < end:
        key, pos = _varint(data, pos)
        num, wt = key >> 3, key & 7
        value: Any
        if wt == 0:
            value, pos = _varint(data, pos)
        elif wt == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(data, pos)
            value, pos = (pos, pos + n), pos + n
        elif wt == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise Malformed(f"field {num} has unsupported wire type {wt}")
        if pos > end:
            raise Malformed(f"field {num} runs past the end of its message")
        yield num, wt, value


# DataType code -> (dtype name, numpy dtype of tensor_content, field of typed values, encoding)
_DTYPES: dict[int, tuple[str, str, int, str]] = {
    1: ("float32", "<f4", 5, "float_val"),
    2: ("float64", "<f8", 6, "double_val"),
    3: ("int32", "<i4", 7, "int_val"),
    4: ("uint8", "<u1", 7, "int_val"),
    5: ("int16", "<i2", 7, "int_val"),
    6: ("int8", "<i1", 7, "int_val"),
    9: ("int64", "<i8", 10, "int64_val"),
    10: ("bool", "<u1", 11, "bool_val"),
    14: ("bfloat16", "<u2", 13, "bfloat16_val"),
    17: ("uint16", "<u2", 7, "int_val"),
    19: ("float16", "<f2", 13, "half_val"),
    22: ("uint32", "<u4", 16, "uint32_val"),
    23: ("uint64", "<u8", 17, "uint64_val"),
}
_DTYPE_CODES = {name: code for code, (name, *_rest) in _DTYPES.items()}
_SCALAR_PLUGINS = (None, "", "scalars")
_EVENT_KINDS = {4: "graph", 6: "log_message", 7: "session_log", 8: "run_metadata", 9: "meta_graph"}
_VALUE_KINDS = {3: "histogram", 4: "image", 5: "histogram", 6: "audio"}


def _bf16(bits: int) -> float:
    return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])


def _typed_values(data: bytes, wt: int, value: Any, code: int) -> list[Any]:
    """Values of one typed repeated field (packed or not) of a TensorProto."""
    _name, _np, num, _enc = _DTYPES[code]
    if num in (5, 6):  # float_val (fixed32), double_val (fixed64)
        fmt = "<f4" if num == 5 else "<f8"
        raw = data[value[0]:value[1]] if wt == 2 else value
        return list(np.frombuffer(raw, dtype=fmt).tolist())
    if wt == 2:
        out, pos = [], value[0]
        while pos < value[1]:
            v, pos = _varint(data, pos)
            out.append(v)
        return out
    return [value]


def _tensor_scalar(data: bytes, start: int, end: int) -> tuple[str, Any, str] | str:
    """(dtype name, value, encoding) of a one-element numeric TensorProto, else a skip kind."""
    code = 0
    dims: list[int] = []
    content: bytes | None = None
    typed: dict[int, list[tuple[int, Any]]] = {}
    for num, wt, value in _fields(data, start, end):
        if num == 1 and wt == 0:
            code = value
        elif num == 2 and wt == 2:
            for dnum, dwt, dval in _fields(data, *value):
                if dnum == 2 and dwt == 2:
                    size = 1
                    for snum, swt, sval in _fields(data, *dval):
                        if snum == 1 and swt == 0:
                            size = sval - (1 << 64) if sval >= 1 << 63 else sval
                    dims.append(size)
        elif num == 4 and wt == 2:
            content = data[value[0]:value[1]]
        else:
            typed.setdefault(num, []).append((wt, value))
    if code not in _DTYPES:
        return "text" if code == 7 else "tensor"
    if math.prod(dims) != 1:
        return "tensor"
    name, np_dtype, num, encoding = _DTYPES[code]
    raw: Any
    if content is not None:
        arr = np.frombuffer(content, dtype=np_dtype)
        if len(arr) != 1:
            raise Malformed(f"tensor_content holds {len(content)} bytes for one {name}")
        raw = arr[0].item()
        encoding = "tensor_content"
    else:
        values: list[Any] = []
        for wt, value in typed.get(num, []):
            values += _typed_values(data, wt, value, code)
        if len(values) > 1:
            raise Malformed(f"{len(values)} values in a one-element {name} tensor")
        raw = values[0] if values else 0
    if name == "float16":
        if content is None:
            raw = float(np.array([raw & 0xFFFF], np.uint16).view(np.float16)[0])
        return name, float(raw), encoding
    if name == "bfloat16":
        return name, _bf16(raw & 0xFFFF), encoding
    if name.startswith(("int", "uint")) or name == "bool":
        v = int(raw)
        if code in (3, 5, 6, 9) and v >= 1 << 63:  # signed varints are 64-bit two's complement
            v -= 1 << 64
        return name, v, encoding
    return name, float(raw), encoding


def _exact_row(data: bytes, start: int, end: int) -> tuple[float, int | None, str | None, str, str | None]:
    """``(value, value_int, encoding, dtype, plugin)`` of the exact value rlarrow wrote beside a simple_value.

    ``start:end`` is the :data:`EXACT_PLUGIN` metadata content (see :func:`_exact_content`).
    """
    tensor: tuple[int, int] | None = None
    encoding: str | None = None
    has_encoding = False
    plugin: str | None = None
    for num, wt, value in _fields(data, start, end):
        if num == 1 and wt == 2:
            tensor = value
        elif num == 2 and wt == 2:
            encoding = data[value[0]:value[1]].decode("utf-8") or None
            has_encoding = True
        elif num == 3 and wt == 2:
            plugin = data[value[0]:value[1]].decode("utf-8") or None
    if tensor is None:
        raise Malformed(f"{EXACT_PLUGIN} metadata without its tensor")
    got = _tensor_scalar(data, *tensor)
    if isinstance(got, str):
        raise Malformed(f"{EXACT_PLUGIN} metadata holds a {got}, not a one-element number")
    dtype, v, own = got
    if not has_encoding:
        encoding = own
    if isinstance(v, int):
        return float(v), v if -(1 << 63) <= v < (1 << 63) else None, encoding, dtype, plugin
    return v, None, encoding, dtype, plugin


def parse_event(data: bytes, rows: list[tuple[Any, ...]], index: int, skipped: Counter[str],
                file_versions: list[str]) -> None:
    """Append the scalars of one ``Event`` payload to ``rows``; count what is skipped by kind.

    Each row is ``(index, n, tag, step, value, value_int, wall_time, encoding, dtype,
    plugin)``: ``index`` as given (the record's place in its chunk), ``n`` the value's place
    in the event's summary. A ``file_version`` record's version goes to ``file_versions``.

    Raises:
        Malformed: ``data`` is not a valid message (also ``UnicodeDecodeError`` and
            ``struct.error`` from a tag or field that is cut short).
    """
    wall_time, step, summary = _event_fields(data, skipped, file_versions)
    if summary is None:
        return
    sub = 0
    for num, wt, value in _fields(data, *summary):
        if num != 1 or wt != 2:
            continue
        got = _summary_value(data, value, skipped)
        if got is not None:
            tag, v, value_int, encoding, dtype, plugin = got
            rows.append((index, sub, tag, step, v, value_int, wall_time, encoding, dtype, plugin))
            sub += 1


def _event_fields(data: bytes, skipped: Counter[str], file_versions: list[str],
                  ) -> tuple[float, int, tuple[int, int] | None]:
    """``(wall_time, step, summary span)`` of an ``Event``; its other kinds counted, its version kept."""
    wall_time = 0.0
    step = 0
    summary: tuple[int, int] | None = None
    for num, wt, value in _fields(data, 0, len(data)):
        if num == 1 and wt == 1:
            wall_time = struct.unpack("<d", value)[0]
        elif num == 2 and wt == 0:
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif num == 3 and wt == 2:
            file_versions.append(data[value[0]:value[1]].decode("utf-8", "replace"))
        elif num == 5 and wt == 2:
            summary = value
        elif num in _EVENT_KINDS:
            skipped[_EVENT_KINDS[num]] += 1
    return wall_time, step, summary


#: a ``Summary.Value``'s scalar: ``(tag, value, value_int, encoding, dtype, plugin)``
_Row = tuple[str, float, int | None, str | None, str, str | None]


def _summary_value(data: bytes, span: tuple[int, int], skipped: Counter[str]) -> _Row | None:
    """The scalar of one ``Summary.Value``, or None (its kind counted in ``skipped``)."""
    tag = ""
    plugin: str | None = None
    simple: float | None = None
    tensor: tuple[int, int] | None = None
    content: tuple[int, int] | None = None
    kind: str | None = None
    for num, wt, value in _fields(data, *span):
        if num == 1 and wt == 2:
            tag = data[value[0]:value[1]].decode("utf-8")
        elif num == 2 and wt == 5:
            simple = struct.unpack("<f", value)[0]
        elif num == 8 and wt == 2:
            tensor = value
        elif num == 9 and wt == 2:
            plugin, content = _plugin_data(data, value, plugin, content)
        elif num in _VALUE_KINDS:
            kind = _VALUE_KINDS[num]
    if simple is not None and plugin == EXACT_PLUGIN and content is not None:
        return (tag, *_exact_row(data, *content))
    if simple is not None:
        return tag, simple, None, "simple_value", "float32", plugin
    if tensor is None:
        skipped[kind or "empty value"] += 1
        return None
    return _tensor_row(data, tag, tensor, plugin, skipped)


def _plugin_data(data: bytes, span: tuple[int, int], plugin: str | None, content: tuple[int, int] | None,
                 ) -> tuple[str | None, tuple[int, int] | None]:
    """``(plugin name, content span)`` of a ``SummaryMetadata``, each kept as given when absent."""
    for num, wt, value in _fields(data, *span):
        if num != 1 or wt != 2:
            continue
        for pnum, pwt, pval in _fields(data, *value):
            if pnum == 1 and pwt == 2:
                plugin = data[pval[0]:pval[1]].decode("utf-8")
            elif pnum == 2 and pwt == 2:
                content = pval
    return plugin, content


def _tensor_row(data: bytes, tag: str, tensor: tuple[int, int], plugin: str | None,
                skipped: Counter[str]) -> _Row | None:
    """The scalar a ``Summary.Value``'s tensor holds, or None (a plugin's or a non-scalar tensor: counted)."""
    if plugin not in _SCALAR_PLUGINS:
        skipped[plugin or "tensor"] += 1
        return None
    got = _tensor_scalar(data, *tensor)
    if isinstance(got, str):
        skipped[got] += 1
        return None
    dtype, v, encoding = got
    if isinstance(v, int):
        return tag, float(v), v if -(1 << 63) <= v < (1 << 63) else None, encoding, dtype, plugin
    return tag, v, None, encoding, dtype, plugin


# --------------------------------------------------------------------------- encoding


def _varint_bytes(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def len_field(key: int, payload: bytes) -> bytes:
    """A length-delimited field: its key byte (field number << 3 | 2), the length, the payload."""
    return bytes((key,)) + _varint_bytes(len(payload)) + payload


_SCALARS_METADATA = len_field(0x4A, len_field(0x0A, len_field(0x0A, b"scalars")))
_F32 = struct.Struct("<f")
#: the serialised start of the exact value's ``PluginData``: its plugin_name field
EXACT_NAME_FIELD = len_field(0x0A, EXACT_PLUGIN.encode())
#: the serialised encoding field (2) of an exact value written by rlarrow's logger
LOGGER_ENCODING_FIELD = len_field(0x12, b"logger")


def _plugin_metadata(plugin: str | None) -> bytes:
    if not plugin:
        return b""
    if plugin == "scalars":
        return _SCALARS_METADATA
    return len_field(0x4A, len_field(0x0A, len_field(0x0A, plugin.encode())))


def f32_bytes(value: float) -> bytes:
    """``value`` as a little-endian float32, rounded as NumPy rounds (beyond float32's range: ±inf)."""
    try:
        return _F32.pack(value)
    except OverflowError:
        return _F32.pack(math.copysign(math.inf, value))


def _is_float32(value: float) -> bool:
    """Whether float32 holds ``value`` exactly (NaN counts as held)."""
    try:
        return bool(_F32.unpack(_F32.pack(value))[0] == value or value != value)
    except OverflowError:
        return False


def _tensor_value(value: float, value_int: int | None, encoding: str, dtype: str) -> bytes:
    """A one-element TensorProto (serialised) holding the value as ``encoding`` and ``dtype`` say."""
    code = _DTYPE_CODES[dtype]
    _name, np_dtype, num, _enc = _DTYPES[code]
    iv = value_int if value_int is not None else (int(value) if math.isfinite(value) else 0)
    if dtype == "bfloat16":
        bits = int(np.array([value], np.float32).view(np.uint32)[0]) >> 16
        raw_le = bits.to_bytes(2, "little")
        typed = _varint_bytes(bits)
    elif dtype == "float16":
        bits = int(np.array([value], np.float16).view(np.uint16)[0])
        raw_le = bits.to_bytes(2, "little")
        typed = _varint_bytes(bits)
    elif dtype in ("float32", "float64"):
        raw_le = np.array([value], np_dtype).tobytes()
        typed = raw_le
    else:
        raw_le = np.array([iv], np_dtype).tobytes()
        typed = _varint_bytes(iv)
    out = bytes((0x08,)) + _varint_bytes(code)
    if encoding == "tensor_content":
        return out + len_field(0x22, raw_le)
    # uint32_val / uint64_val are fields 16 / 17: their key takes two bytes
    return out + _varint_bytes((num << 3) | 2) + _varint_bytes(len(typed)) + typed


def _exact_content(value: float, value_int: int | None, encoding: str | None, dtype: str | None,
                   plugin: str | None) -> bytes:
    """The ``rlarrow_exact`` plugin content of a row: its exact value, encoding, dtype and plugin.

    A small protobuf message: field 1, a one-element ``TensorProto`` holding the value in its
    dtype (in ``tensor_content`` when that was its encoding, else the dtype's typed field);
    field 2, the row's ``encoding`` when it is not the tensor's own (``""`` for none); field
    3, the row's ``plugin``, when it has one.
    """
    if dtype not in _DTYPE_CODES:
        dtype = "int64" if value_int is not None else "float64"
    np_dtype = np.dtype(_DTYPES[_DTYPE_CODES[dtype]][1])
    if np_dtype.kind in "iu":  # an integer the dtype cannot hold (uint64 beyond int64, NaN) stays a float64
        iv = value_int if value_int is not None else (int(value) if math.isfinite(value) else None)
        if iv is None or not int(np.iinfo(np_dtype).min) <= iv <= int(np.iinfo(np_dtype).max):
            dtype, value_int = "float64", None
    tensor = _tensor_value(value, value_int, encoding or "", dtype)
    own = "tensor_content" if encoding == "tensor_content" else _DTYPES[_DTYPE_CODES[dtype]][3]
    out = len_field(0x0A, tensor)
    if encoding != own:
        out += len_field(0x12, (encoding or "").encode())
    if plugin:
        out += len_field(0x1A, plugin.encode())
    return out


def value_message(tag: bytes, value: float, value_int: int | None, encoding: str | None, dtype: str | None,
                   plugin: str | None) -> bytes:
    """The serialised Summary.Value for one row: ``simple_value``, plus the exact value when needed.

    Every reader of TensorBoard files reads ``simple_value`` (float32). A row that float32
    does not hold exactly (a float64 or integer value, another dtype, a tensor encoding)
    also gets its exact value as :data:`EXACT_PLUGIN` metadata, which rlarrow's reader
    prefers and every other reader ignores.
    """
    head = len_field(0x0A, tag) + b"\x15" + f32_bytes(value)
    if encoding in PLAIN_ENCODINGS and value_int is None and (
            dtype == "float32" or (dtype is None and _is_float32(value))):
        return head + _plugin_metadata(plugin)
    content = _exact_content(value, value_int, encoding, dtype, plugin)
    return head + len_field(0x4A, len_field(0x0A, EXACT_NAME_FIELD + len_field(0x12, content)))


def event_bytes(wall_time: float, step: int, value_msg: bytes | None = None,
                 file_version: str | None = None) -> bytes:
    """A serialised ``Event``: wall time, step, and a file version or one summary value.

    ``value_msg`` is a serialised ``Summary.Value`` (:func:`value_message`).
    """
    out = b""
    if wall_time != 0.0 or math.copysign(1.0, wall_time) < 0:
        out += b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint_bytes(step)
    if file_version is not None:
        out += len_field(0x1A, file_version.encode())
    if value_msg is not None:
        out += len_field(0x2A, len_field(0x0A, value_msg))
    return out
