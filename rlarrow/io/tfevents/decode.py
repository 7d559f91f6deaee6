"""Records to rows: a chunk of checked event records becomes one ``scalars`` record batch.

:func:`decode_chunk` decodes the records :func:`~rlarrow.io.codecs.tfrecord.read_records`
found. Nearly every record in the files the usual tools write has one shape, ``[wall_time]
[step] summary{one value{tag, simple_value}}`` (and rlarrow's own files add an exact float64
or int64 beside the ``simple_value``); those are decoded all at once with NumPy, a field at
a time across every record of the chunk (:func:`_fast_simple_values`). Every other record
goes through the generic decoder, :func:`~rlarrow.io.tfevents.proto.parse_event`, one at a
time, and the two kinds of rows are merged back in file order.

It also owns :func:`scope_of`, which gives each row its ``scope`` from its tag.

Example:
    >>> import io
    >>> from collections import Counter
    >>> from rlarrow.core import schema
    >>> from rlarrow.io.codecs import tfrecord as framing
    >>> from rlarrow.io.tfevents import proto
    >>> values = [proto.value_message(b"train/loss", s / 2, None, None, None, None) for s in range(3)]
    >>> payloads = [proto.event_bytes(1.0, s, v) for s, v in enumerate(values)]
    >>> file = io.BytesIO(framing.frame_records(payloads))
    >>> (chunk,) = framing.read_records(file, Path("mem"), log=framing.ReadCounts())
    >>> scalars = schema.table("scalars").arrow_schema()
    >>> batch = decode_chunk(chunk, run_id="r", path=Path("mem"), schema=scalars, on_corrupt="raise",
    ...                      skipped=Counter(), corrupt=[], file_versions=[])
    >>> batch.to_pydict()["value"], batch.to_pydict()["scope"]
    ([0.0, 0.5, 1.0], ['train', 'train', 'train'])
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core.errors import CorruptFileError
from rlarrow.io.codecs.crc32c import unaligned
from rlarrow.io.codecs.tfrecord import HEADER_BYTES, Chunk
from rlarrow.io.tfevents.proto import EXACT_NAME_FIELD, LOGGER_ENCODING_FIELD, Malformed, parse_event

__all__ = ["scope_of"]

#: tag prefix -> scope; anything else keeps its first path component as a free-text scope
SCOPES = {"train": "train", "training": "train", "test": "test", "update": "update", "info": "info"}


def scope_of(tag: str) -> str:
    """The ``scope`` of a tag: train/test/update/info by prefix, else its first path part.

    >>> scope_of("training/returns_stat/mean"), scope_of("update/loss"), scope_of("charts/x"), scope_of("x")
    ('train', 'update', 'charts', '')
    """
    head, sep, _ = tag.partition("/")
    if not sep:
        return ""
    return SCOPES.get(head.lower(), head)


def decode_chunk(chunk: Chunk, *, run_id: str, path: Path, schema: pa.Schema, on_corrupt: str,
                 skipped: Counter[str], corrupt: list[tuple[str, int]], file_versions: list[str],
                 ) -> pa.RecordBatch:
    """The scalars of a chunk's records as one batch of ``schema`` (the ``scalars`` table's).

    Args:
        chunk: the bytes and the offsets and lengths of their records.
        run_id: the ``run_id`` of every row.
        path: the file, for errors and ``corrupt``.
        schema: the ``scalars`` table's Arrow schema.
        on_corrupt: ``"raise"`` raises :class:`~rlarrow.core.errors.CorruptFileError` for a
            record that is not a valid ``Event``; ``"skip"`` notes it in ``corrupt``.
        skipped: counts what is not a scalar (histograms, images, graphs...) by kind.
        corrupt: gets ``(file, offset)`` of each record skipped as not a valid ``Event``.
        file_versions: gets the version of each ``file_version`` record.
    """
    buf, data, offs, lens = chunk
    # rlarrow's exact values are looked for only in a chunk that holds their plugin's name
    # somewhere: one search of the bytes, where scanning the records after their
    # simple_value took a dozen NumPy passes over them (files with other metadata: tensorboardX's)
    fast = _fast_simple_values(buf, offs + HEADER_BYTES, lens, exact=EXACT_NAME_FIELD in data)
    ok = fast["ok"]
    idx = np.flatnonzero(ok)
    try:
        tags, scopes = _tags_and_scopes(buf, fast["tag_start"][idx], fast["tag_len"][idx])
    except Malformed:  # a tag that is not UTF-8: the generic path finds the record and reports it
        ok = np.zeros_like(ok)
        idx = idx[:0]
        tags = scopes = pa.array([], pa.string())
    rows: list[tuple[Any, ...]] = []
    slow = np.flatnonzero(~ok)
    for i in slow.tolist():
        start = int(offs[i]) + HEADER_BYTES
        try:
            parse_event(data[start:start + int(lens[i])], rows, i, skipped, file_versions)
        except (Malformed, UnicodeDecodeError, struct.error) as exc:
            if on_corrupt == "raise":
                raise CorruptFileError(path, f"event record is not a valid Event message ({exc})",
                                       offset=int(offs[i])) from None
            corrupt.append((os.fspath(path), int(offs[i])))
    n = len(idx)
    cols: dict[str, Any] = {
        "tag": tags,
        "step": pa.array(fast["step"][idx]),
        "value": pa.array(fast["value"][idx]),
        "value_int": pa.nulls(n, pa.int64()),
        "wall_time": pa.array(fast["wall_time"][idx]),
        "encoding": _const("simple_value", n),
        "dtype": _const("float32", n),
        "plugin": pa.nulls(n, pa.string()),
    }
    kind = fast["kind"][idx]
    if kind.any():  # rlarrow's exact float64 / int64 values beside the simple_value
        is_int = (kind == _FAST_INT64) | (kind == _FAST_LOGGER_INT64) | (kind == _FAST_BARE_INT64)
        cols["value_int"] = pa.array(fast["value_int"][idx], mask=~is_int)
        codes = pa.array(kind.astype(np.int32))
        cols["encoding"] = pa.DictionaryArray.from_arrays(codes, _FAST_ENCODINGS).cast(pa.string())
        cols["dtype"] = pa.DictionaryArray.from_arrays(codes, _FAST_DTYPES).cast(pa.string())
    if rows:  # merge the generic path's rows in: by record, then by place in the record
        order_fast = idx.astype(np.int64) * 1024
        slow_cols = list(zip(*rows, strict=True))
        order_slow = np.array(slow_cols[0], np.int64) * 1024 + np.array(slow_cols[1], np.int64)
        extra = {
            "tag": pa.array(slow_cols[2], pa.string()),
            "step": pa.array(slow_cols[3], pa.int64()),
            "value": pa.array(slow_cols[4], pa.float64()),
            "value_int": pa.array(slow_cols[5], pa.int64()),
            "wall_time": pa.array(slow_cols[6], pa.float64()),
            "encoding": pa.array(slow_cols[7], pa.string()),
            "dtype": pa.array(slow_cols[8], pa.string()),
            "plugin": pa.array(slow_cols[9], pa.string()),
        }
        order = np.argsort(np.concatenate([order_fast, order_slow]), kind="stable")
        take = pa.array(order)
        cols = {k: pa.concat_arrays([cols[k], extra[k]]).take(take) for k in cols}
        scopes = _scopes(cols["tag"])
    n = len(cols["tag"])
    cols["scope"] = scopes
    cols["run_id"] = _const(run_id, n)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


# --------------------------------------------------------------------------- Arrow columns


def _const(text: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(text, pa.string()), n)  # (a third of a dictionary array's cast)


def _scopes(tags: pa.Array) -> pa.Array:
    if not len(tags):
        return pa.array([], pa.string())
    enc = pc.dictionary_encode(tags)
    scopes = pa.array([scope_of(t) for t in enc.dictionary.to_pylist()], pa.string())
    return pa.DictionaryArray.from_arrays(enc.indices, scopes).cast(pa.string())


_KEY_WORDS = 8  # tags up to 64 bytes are deduplicated by their bytes; longer ones taken one by one


def _tags_and_scopes(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """The tag and scope columns of the fast-path rows.

    A tag's bytes (zero-padded to whole words) and its length form an exact key; hashing
    the keys finds the few distinct tags, which are decoded once each.
    """
    n = len(starts)
    if not n or int(lengths.max()) > 8 * _KEY_WORDS:
        tags = _strings(buf, starts, lengths)
        return tags, _scopes(tags)
    words = -(-int(lengths.max()) // 8) or 1
    u64 = unaligned(buf, "<u8")
    key = np.empty((n, words + 1), dtype=np.uint64)
    key[:, 0] = lengths
    last = len(u64) - 1
    for j in range(words):
        rem = lengths - 8 * j
        w = u64[np.minimum(starts + 8 * j, last)]
        partial = (np.uint64(1) << (8 * np.clip(rem, 0, 7)).astype(np.uint64)) - np.uint64(1)
        keep = np.where(rem >= 8, np.uint64(0xFFFFFFFFFFFFFFFF), partial)
        key[:, j + 1] = w & keep
    width = 8 * (words + 1)
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(key)])
    enc = pc.dictionary_encode(keys)
    texts: list[str] = []
    for k in enc.dictionary.to_pylist():
        size = int.from_bytes(k[:8], "little")
        try:
            texts.append(k[8:8 + size].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise Malformed(f"a tag is not valid UTF-8 ({exc})") from None
    tags = pa.DictionaryArray.from_arrays(enc.indices, pa.array(texts, pa.string())).cast(pa.string())
    scopes = pa.DictionaryArray.from_arrays(enc.indices, pa.array([scope_of(t) for t in texts], pa.string()))
    return tags, scopes.cast(pa.string())


def _strings(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A UTF-8-checked string array of ``buf[starts[i]:starts[i]+lengths[i]]``."""
    lengths = lengths.astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    index = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    chars = buf[index]
    arr = pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), pa.py_buffer(chars))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise Malformed(f"a tag is not valid UTF-8 ({exc})") from None
    return arr


# --------------------------------------------------------------------------- the vectorised path


def _varints(buf: np.ndarray, pos: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode one varint at each ``pos`` where ``live``: (values, positions after, malformed)."""
    last = len(buf) - 1
    value = np.zeros(len(pos), dtype=np.uint64)
    going = live.copy()
    pos = pos.copy()
    for i in range(10):
        if not going.any():
            break
        byte = buf[np.minimum(pos, last)].astype(np.uint64)
        value |= np.where(going, (byte & np.uint64(0x7F)) << np.uint64(7 * i), np.uint64(0))
        pos += going
        going &= byte >= 0x80
    return value, pos, going


def _fast_simple_values(buf: np.ndarray, start: np.ndarray, length: np.ndarray, *, exact: bool = True,
                        ) -> dict[str, np.ndarray]:
    """Vectorised decoding of the common event: [wall_time] [step] summary{one value{tag, simple_value}}.

    ``ok`` marks the records that have exactly that shape (or rlarrow's exact value after
    the simple_value, looked for only with ``exact``); the others go the generic way.
    """
    k = len(start)
    last = len(buf) - 1
    end = start + length
    f64 = unaligned(buf, "<f8")
    f32 = unaligned(buf, "<f4")

    def at(p: np.ndarray) -> np.ndarray:
        got: np.ndarray = buf[np.clip(p, 0, last)]
        return got

    p = start.copy()
    has_wt = (at(p) == 0x09) & (p + 9 <= end)
    wall = np.where(has_wt, f64[np.clip(p + 1, 0, max(len(f64) - 1, 0))], 0.0) if len(f64) else np.zeros(k)
    p += 9 * has_wt
    has_step = (at(p) == 0x10) & (p < end)
    stepv, after, bad = _varints(buf, p + 1, has_step)
    p = np.where(has_step, after, p)
    ok = ~bad & (at(p) == 0x2A) & (p < end)
    n1, p, bad = _varints(buf, p + 1, ok)
    ok &= ~bad & (p + n1.astype(np.int64) == end)
    ok &= at(p) == 0x0A
    n2, p, bad = _varints(buf, p + 1, ok)
    ok &= ~bad & (p + n2.astype(np.int64) == end)
    ok &= at(p) == 0x0A
    tl, p, bad = _varints(buf, p + 1, ok)
    tag_len = tl.astype(np.int64)
    ok &= ~bad & (tag_len >= 0) & (p + tag_len + 5 <= end)
    tag_start = p
    p = p + np.where(ok, tag_len, 0)
    ok &= at(p) == 0x15
    value = (f32[np.clip(p + 1, 0, max(len(f32) - 1, 0))] if len(f32) else np.zeros(k, np.float32)
             ).astype(np.float64)
    plain = ok & (p + 5 == end)
    kind = np.zeros(k, dtype=np.int8)
    value_int = np.zeros(k, dtype=np.int64)
    # only these can carry rlarrow's exact value (torch's records never do)
    more = ok & ~plain if exact else np.zeros(k, dtype=bool)
    if more.all():  # (rlarrow's own files of float64 values: every record)
        kind, exact_value, value_int = _fast_exact(buf, p + 5, end)
        value = np.where(kind > 0, exact_value, value)
    elif more.any():
        at_more = np.flatnonzero(more)
        kind[at_more], exact_value, value_int[at_more] = _fast_exact(buf, p[at_more] + 5, end[at_more])
        value[at_more] = np.where(kind[at_more] > 0, exact_value, value[at_more])
    return {"ok": plain | (kind > 0), "wall_time": wall, "step": stepv.view(np.int64), "tag_start": tag_start,
            "tag_len": np.where(ok, tag_len, 0), "value": value, "kind": kind, "value_int": value_int}


# kinds of the vectorised path: a plain simple_value, or rlarrow's exact float64 / int64 beside it
# (with the tensor's own encoding, ``logger``, or none: a row written without one)
_FAST_DOUBLE, _FAST_INT64, _FAST_LOGGER_DOUBLE, _FAST_LOGGER_INT64 = 1, 2, 3, 4
_FAST_BARE_DOUBLE, _FAST_BARE_INT64 = 5, 6
_FAST_ENCODINGS = pa.array(["simple_value", "double_val", "int64_val", "logger", "logger", None, None])
_FAST_DTYPES = pa.array(["float32", "float64", "int64", "float64", "int64", "float64", "int64"])
#: the encoding field of an exact value whose row had no encoding (``""``: read back as null)
_NO_ENCODING_FIELD = b"\x12\x00"


def _fast_exact(buf: np.ndarray, r: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised decoding of the :data:`EXACT_PLUGIN` metadata that follows a simple_value at ``r``.

    Given only the records with more after their simple_value (``r < end``: the only ones
    that can carry it), so files without it (torch's, tianshou's...) skip this scan. Only
    the common shapes: a ``double_val`` float64 or ``int64_val`` int64 tensor, with no
    encoding field (the tensor's own), ``logger`` or empty (none), and no plugin. Returns ``(kind, value,
    value_int)``; kind 0 marks records left to the generic path.
    """
    k = len(r)
    last = len(buf) - 1

    def at(p: np.ndarray) -> np.ndarray:
        got: np.ndarray = buf[np.clip(p, 0, last)]
        return got

    ok = at(r) == 0x4A
    for key in (0x0A, None):  # SummaryMetadata, then PluginData: each runs to the record's end
        n, r, bad = _varints(buf, r + 1, ok)
        ok &= ~bad & (r + n.astype(np.int64) == end)
        if key is not None:
            ok &= at(r) == key
    for j, byte in enumerate(EXACT_NAME_FIELD):
        ok &= at(r + j) == byte
    r = r + len(EXACT_NAME_FIELD)
    ok &= at(r) == 0x12  # content
    n, r, bad = _varints(buf, r + 1, ok)
    ok &= ~bad & (r + n.astype(np.int64) == end) & (at(r) == 0x0A)  # content: the tensor first
    n, r, bad = _varints(buf, r + 1, ok)
    tensor_end = r + n.astype(np.int64)
    ok &= ~bad & (tensor_end <= end) & (at(r) == 0x08)
    code = at(r + 1)
    is_double = ok & (code == 2) & (at(r + 2) == 0x32) & (at(r + 3) == 8) & (r + 12 == tensor_end)
    is_int = ok & (code == 9) & (at(r + 2) == 0x52) & (at(r + 3) < 0x80)
    iv, after, bad = _varints(buf, r + 4, is_int)
    is_int &= ~bad & (after == r + 4 + at(r + 3).astype(np.int64)) & (after == tensor_end)
    logger = tensor_end + len(LOGGER_ENCODING_FIELD) == end
    for j, byte in enumerate(LOGGER_ENCODING_FIELD):
        logger &= at(tensor_end + j) == byte
    own = tensor_end == end
    bare = tensor_end + len(_NO_ENCODING_FIELD) == end
    for j, byte in enumerate(_NO_ENCODING_FIELD):
        bare &= at(tensor_end + j) == byte
    kind = np.zeros(k, dtype=np.int8)
    kind[is_double & own] = _FAST_DOUBLE
    kind[is_int & own] = _FAST_INT64
    kind[is_double & logger] = _FAST_LOGGER_DOUBLE
    kind[is_int & logger] = _FAST_LOGGER_INT64
    kind[is_double & bare] = _FAST_BARE_DOUBLE
    kind[is_int & bare] = _FAST_BARE_INT64
    f64 = unaligned(buf, "<f8")
    double = f64[np.clip(r + 4, 0, max(len(f64) - 1, 0))] if len(f64) else np.zeros(k)
    value_int = iv.view(np.int64)
    return kind, np.where(is_int, value_int.astype(np.float64), double), value_int
