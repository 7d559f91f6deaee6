"""TensorBoard event files (``tfevents``) to and from the ``scalars`` table, without TensorFlow.

An event file is a sequence of TFRecords (``uint64`` length, masked CRC-32C of the length,
the bytes, masked CRC-32C of the bytes), each an ``Event`` protocol buffer. rlarrow decodes
them itself:

- **Framing and checksums** are vectorised with NumPy over chunks of the file (memory stays
  bounded: a chunk at a time), and every record's two CRCs are checked.
- **Scalars in every encoding** become rows of ``scalars``: ``simple_value``; tensors with
  ``float_val``, ``double_val``, ``half_val`` (float16 and bfloat16, decoded to their true
  values), ``int_val``/``int64_val`` (exact integers in ``value_int``, also beyond 2^53),
  ``bool_val``, ``uint32_val``/``uint64_val``, and raw little-endian ``tensor_content`` as
  TensorFlow 2 writes it. NaN, ±inf and -0.0 are kept; steps and wall times are exact.
- **rlarrow's own exact values**: what rlarrow writes is always a ``simple_value`` (float32,
  the one field every reader of event files reads: TensorBoard's ``EventAccumulator``,
  tbparse, tianshou's ``restore_logged_data``, skrl's ``TensorboardFileIterator``). A value
  float32 does not hold exactly (float64, int64, another dtype or encoding) also carries,
  in its summary metadata, plugin :data:`EXACT_PLUGIN` (``rlarrow_exact``) whose content is
  a one-element ``TensorProto`` with the exact value (field 1), the row's ``encoding`` when
  not the tensor's own (field 2) and its ``plugin`` (field 3). Other readers ignore plugin
  metadata on a ``simple_value``; rlarrow's reader takes the exact row from it. Files
  written before (a ``double_val``/``int64_val`` tensor per value) still read exactly.
- **Everything else** (histograms, images, audio, text, other plugins' tensors, graphs, run
  metadata, session logs) is counted by kind in the :class:`TfeventsReport` and skipped.
- **Damage**: a truncated last record (a run still writing, or killed) ends the file with an
  :class:`~rlarrow.core.errors.TruncatedInputWarning`, keeping every complete record before it; a
  record whose checksum fails raises :class:`~rlarrow.core.errors.CorruptFileError` naming the
  file and byte offset, or is skipped (and counted) with ``on_corrupt="skip"``. A length
  field is never trusted beyond the bytes the file still holds: a huge one (up to 2^64 - 1)
  fails its checksum, or reads as that incomplete last record, and never allocates.

A directory is read recursively: every directory holding event files (names containing
``tfevents``) is one TensorBoard run, named by its path below the root (``"."`` for the root
itself), so ``add_scalars`` folders stay distinct runs. Files of a run are read in name
order, which is time order.

Example:
    >>> import rlarrow.io.tfevents as tfe
    >>> table = tfe.read_tfevents("runs/")  # doctest: +SKIP
    >>> table.group_by(["run_id", "tag"]).aggregate([("value", "mean")])  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import math
import os
import socket
import struct
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, InvalidInputError, TruncatedInputWarning
from rlarrow.io.tfevents._crc32c import crc32c, crc32c_many, mask, unaligned

__all__ = [
    "EXACT_PLUGIN",
    "EventFileWriter",
    "TfeventsReader",
    "TfeventsReport",
    "find_runs",
    "is_event_file",
    "is_tfevents_source",
    "read_tfevents",
    "scope_of",
    "write_tfevents",
]

CHUNK_BYTES = 8 << 20
_HEADER = 12
_FRAMING = 16
_THREADS = min(2, os.cpu_count() or 1)

# tag prefix -> scope; anything else keeps its first path component as a free-text scope
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


def is_event_file(path: str | os.PathLike[str]) -> bool:
    """A regular file whose name contains ``tfevents`` (as TensorBoard decides); folders never are."""
    p = Path(path)
    return "tfevents" in p.name and p.is_file() and not p.name.startswith(".")


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def find_runs(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[tuple[str, list[Path]]]:
    """The TensorBoard runs under ``source``: ``[(run name, [event files in order]), ...]``.

    ``source`` is an event file, a directory (searched recursively), a glob, or a list of
    them. A run's name is its directory relative to the root given (``"."`` for the root).

    Raises:
        InvalidInputError: a path does not exist, or nothing under it is an event file.
    """
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    runs: dict[str, list[Path]] = {}
    for src in sources:
        text = os.fspath(src)
        if _has_magic(text):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
            if not matches:
                raise InvalidInputError(text, "no file or directory matches this pattern")
            dirs = [m if m.is_dir() else m.parent for m in matches]
            root = Path(os.path.commonpath([os.fspath(d) for d in dirs]))
            for m in matches:
                if m.is_dir():
                    _walk(m, root, runs)
                elif is_event_file(m):
                    runs.setdefault(_rel(m.parent, root), []).append(m)
            continue
        p = Path(text)
        if p.is_file():
            runs.setdefault(".", []).append(p)
        elif p.is_dir():
            _walk(p, p, runs)
        else:
            raise InvalidInputError(p, "no such file or directory")
    if not runs:
        raise InvalidInputError(", ".join(os.fspath(s) for s in sources),
                                "no TensorBoard event files (names containing 'tfevents') here")
    return [(name, sorted(set(files), key=lambda f: (f.name, os.fspath(f))))
            for name, files in sorted(runs.items())]


def _rel(path: Path, root: Path) -> str:
    rel = os.path.relpath(path, root)
    return "." if rel == "." else rel.replace(os.sep, "/")


def _walk(directory: Path, root: Path, runs: dict[str, list[Path]]) -> None:
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files = [Path(dirpath) / f for f in sorted(filenames)]
        events = [f for f in files if is_event_file(f)]
        if events:
            runs.setdefault(_rel(Path(dirpath), root), []).extend(events)


def is_tfevents_source(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an event file, or a directory with an event file anywhere below it."""
    p = Path(path)
    if p.is_file():
        return is_event_file(p)
    if p.is_dir():
        for _dirpath, dirnames, filenames in os.walk(p):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            if any("tfevents" in f and not f.startswith(".") for f in filenames):
                return True
    return False


# --------------------------------------------------------------------------- reading


@dataclass
class TfeventsReport:
    """What a read or import found: files, runs, scalars, and what it skipped (by kind)."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    scalars: int = 0
    runs: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    truncated: list[str] = field(default_factory=list)
    corrupt: list[tuple[str, int]] = field(default_factory=list)
    file_versions: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        text = (f"{self.scalars} scalars from {self.files} event file(s), {len(self.runs)} run(s)"
                f" in {self.seconds:.1f} s")
        if self.skipped:
            text += "; skipped " + ", ".join(f"{n} {k}" for k, n in sorted(self.skipped.items()))
        if self.truncated:
            text += f"; {len(self.truncated)} file(s) ended in a truncated record"
        if self.corrupt:
            text += f"; {len(self.corrupt)} corrupt record(s) skipped"
        return text


def _scalars_schema() -> pa.Schema:
    return _schema.table("scalars").arrow_schema()


class _Malformed(Exception):
    pass


def _varint_py(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Malformed("varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Malformed("varint longer than 10 bytes")


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Wire-format fields of a message: (number, wire type, value or (start, end))."""
    while pos < end:
        key, pos = _varint_py(data, pos)
        num, wt = key >> 3, key & 7
        value: Any
        if wt == 0:
            value, pos = _varint_py(data, pos)
        elif wt == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint_py(data, pos)
            value, pos = (pos, pos + n), pos + n
        elif wt == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise _Malformed(f"field {num} has unsupported wire type {wt}")
        if pos > end:
            raise _Malformed(f"field {num} runs past the end of its message")
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
            v, pos = _varint_py(data, pos)
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
            raise _Malformed(f"tensor_content holds {len(content)} bytes for one {name}")
        raw = arr[0].item()
        encoding = "tensor_content"
    else:
        values: list[Any] = []
        for wt, value in typed.get(num, []):
            values += _typed_values(data, wt, value, code)
        if len(values) > 1:
            raise _Malformed(f"{len(values)} values in a one-element {name} tensor")
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
        raise _Malformed(f"{EXACT_PLUGIN} metadata without its tensor")
    got = _tensor_scalar(data, *tensor)
    if isinstance(got, str):
        raise _Malformed(f"{EXACT_PLUGIN} metadata holds a {got}, not a one-element number")
    dtype, v, own = got
    if not has_encoding:
        encoding = own
    if isinstance(v, int):
        return float(v), v if -(1 << 63) <= v < (1 << 63) else None, encoding, dtype, plugin
    return v, None, encoding, dtype, plugin


def _parse_event(data: bytes, rows: list[tuple[Any, ...]], index: int, skipped: Counter[str],
                 file_versions: list[str]) -> None:
    """Append the scalars of one Event (generic path) to ``rows``; count what is skipped."""
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
    if summary is None:
        return
    sub = 0
    for num, wt, value in _fields(data, *summary):
        if num != 1 or wt != 2:
            continue
        tag = ""
        plugin: str | None = None
        simple: float | None = None
        tensor: tuple[int, int] | None = None
        content: tuple[int, int] | None = None
        kind: str | None = None
        for vnum, vwt, vval in _fields(data, *value):
            if vnum == 1 and vwt == 2:
                tag = data[vval[0]:vval[1]].decode("utf-8")
            elif vnum == 2 and vwt == 5:
                simple = struct.unpack("<f", vval)[0]
            elif vnum == 8 and vwt == 2:
                tensor = vval
            elif vnum == 9 and vwt == 2:
                for mnum, mwt, mval in _fields(data, *vval):
                    if mnum == 1 and mwt == 2:
                        for pnum, pwt, pval in _fields(data, *mval):
                            if pnum == 1 and pwt == 2:
                                plugin = data[pval[0]:pval[1]].decode("utf-8")
                            elif pnum == 2 and pwt == 2:
                                content = pval
            elif vnum in _VALUE_KINDS:
                kind = _VALUE_KINDS[vnum]
        if simple is not None and plugin == EXACT_PLUGIN and content is not None:
            ev, ei, enc, dt, plug = _exact_row(data, *content)
            rows.append((index, sub, tag, step, ev, ei, wall_time, enc, dt, plug))
            sub += 1
        elif simple is not None:
            rows.append((index, sub, tag, step, simple, None, wall_time, "simple_value", "float32", plugin))
            sub += 1
        elif tensor is not None:
            if plugin not in _SCALAR_PLUGINS:
                skipped[plugin or "tensor"] += 1
                continue
            got = _tensor_scalar(data, *tensor)
            if isinstance(got, str):
                skipped[got] += 1
                continue
            dtype, v, encoding = got
            if isinstance(v, int):
                as_int = v if -(1 << 63) <= v < (1 << 63) else None
                rows.append((index, sub, tag, step, float(v), as_int, wall_time, encoding, dtype, plugin))
            else:
                rows.append((index, sub, tag, step, v, None, wall_time, encoding, dtype, plugin))
            sub += 1
        else:
            skipped[kind or "empty value"] += 1


# ---- framing


def _period(recent: list[int]) -> int:
    """The shortest period (at most 64) with which all of ``recent`` repeats, else 0."""
    r = np.array(recent, dtype=np.int64)
    for p in range(1, min(64, len(r) // 2) + 1):
        if (r[p:] == r[:-p]).all():
            return p
    return 0


_U64 = struct.Struct("<Q")


def _frame(data: bytes, u64: np.ndarray, pos: int, end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Offsets and lengths of the whole records in ``data[pos:end]``, and where they stop.

    Lengths are taken on trust here (checked against their CRCs afterwards). Runs of records
    whose lengths repeat with a short period (one event per tag, tag after tag) are found
    with NumPy: the next records' offsets are predicted, and the prefix whose lengths match
    the prediction is accepted; anything irregular walks one record at a time.
    """
    offs: list[np.ndarray] = []
    lens: list[np.ndarray] = []
    recent: list[int] = []
    while pos + _HEADER <= end:
        taken = 0
        p = _period(recent)
        if p:
            pattern = np.array(recent[-p:], dtype=np.int64)
            k = min(1 << 16, (end - pos) // (int(pattern.min()) + _FRAMING) + 1)
            plen = np.tile(pattern, -(-k // p))[:k]
            stride = plen + _FRAMING
            poff = np.empty(k, dtype=np.int64)
            poff[0] = pos
            np.cumsum(stride[:-1], out=poff[1:])
            poff[1:] += pos
            fit = int(np.searchsorted(poff + stride, end, side="right"))
            if fit:
                actual = u64[poff[:fit]].astype(np.int64)
                bad = np.flatnonzero(actual != plen[:fit])
                taken = int(bad[0]) if len(bad) else fit
                if taken:
                    offs.append(poff[:taken])
                    lens.append(plen[:taken])
                    pos = int(poff[taken - 1] + stride[taken - 1])
                    recent = (recent + plen[max(0, taken - 128):taken].tolist())[-128:]
        if taken >= 32:
            continue
        o_list: list[int] = []
        l_list: list[int] = []
        for _ in range(256):
            if pos + _HEADER > end:
                break
            (n,) = _U64.unpack_from(data, pos)
            if pos + n + _FRAMING > end:
                break
            o_list.append(pos)
            l_list.append(n)
            pos += n + _FRAMING
        if not o_list:
            break
        offs.append(np.array(o_list, dtype=np.int64))
        lens.append(np.array(l_list, dtype=np.int64))
        recent = (recent + l_list)[-128:]
    if not offs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), pos
    return np.concatenate(offs), np.concatenate(lens), pos


def _header_ok(data: bytes, pos: int) -> bool:
    return bool(mask(crc32c(data[pos:pos + 8])) == struct.unpack_from("<I", data, pos + 8)[0])


def _resync(buf: np.ndarray, data: bytes, start: int, end: int) -> int | None:
    """The first offset after ``start`` where a valid record header (length and CRC) begins."""
    words = unaligned(buf, "<u4")
    pos = start
    while pos + _HEADER <= end:
        stop = min(end - _HEADER + 1, pos + (1 << 20))
        cand = np.arange(pos, stop, dtype=np.int64)
        crcs = mask(crc32c_many(buf, cand, np.full(len(cand), 8), words=words))
        hits = np.flatnonzero(crcs == words[cand + 8])
        for h in hits.tolist():
            q = int(cand[h])
            (n,) = _U64.unpack_from(data, q)
            if q + n + _FRAMING <= end and mask(crc32c(data[q + _HEADER:q + _HEADER + n])) == \
                    struct.unpack_from("<I", data, q + _HEADER + n)[0]:
                return q
        pos = stop
    return None


class TfeventsReader:
    """Stream the scalars of event files, directories of runs, or globs as record batches.

    Args:
        source: an event file, a directory (recursive), a glob, or a list of them.
        on_corrupt: ``"raise"`` (default) raises :class:`~rlarrow.core.errors.CorruptFileError`
            at the first record whose checksum fails; ``"skip"`` skips it, finds the next
            valid record, and counts it in ``report.corrupt``.
        run_prefix: prepended to each run's name in the ``run_id`` column (``prefix/name``;
            the root run ``"."`` becomes ``prefix`` itself).
        chunk_bytes: how much of a file is decoded at once (memory stays about 3x this).

    Every batch has the ``scalars`` table's schema. ``report`` fills in as batches are read.

    Example:
        >>> reader = TfeventsReader("runs/")  # doctest: +SKIP
        >>> for batch in reader:  # doctest: +SKIP
        ...     print(batch.num_rows)
        >>> print(reader.report)  # doctest: +SKIP
    """

    def __init__(self, source: Any, *, on_corrupt: str = "raise", run_prefix: str | None = None,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        if on_corrupt not in ("raise", "skip"):
            raise ValueError(f"on_corrupt must be 'raise' or 'skip', not {on_corrupt!r}")
        self.runs = find_runs(source)
        self.on_corrupt = on_corrupt
        self.run_prefix = run_prefix
        self.chunk_bytes = chunk_bytes
        self.schema = _scalars_schema()
        self.report = TfeventsReport(runs=[self.run_id(name) for name, _ in self.runs])
        self.progress: Any = None

    def run_id(self, name: str) -> str:
        """The ``run_id`` a run of this name gets."""
        if self.run_prefix is None:
            return name
        return self.run_prefix if name == "." else f"{self.run_prefix}/{name}"

    @property
    def total_bytes(self) -> int:
        """Bytes of every event file to read."""
        return sum(f.stat().st_size for _, files in self.runs for f in files)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        t0 = time.perf_counter()
        for name, files in self.runs:
            for path in files:
                yield from self.read_file(path, self.run_id(name))
        self.report.seconds += time.perf_counter() - t0

    def read_all(self) -> pa.Table:
        """Every scalar as one table (file order within a run, runs by name)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def read_file(self, path: Path, run_id: str) -> Iterator[pa.RecordBatch]:
        """The scalars of one event file, a batch per chunk."""
        report = self.report
        report.files += 1
        versions: list[str] = []
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise InvalidInputError(path, f"cannot open ({exc.strerror or exc})") from exc
        with fh:
            for buf, data, offs, lens in self._records(fh, path):
                report.records += len(offs)
                batch = self._decode(buf, data, offs, lens, run_id, path, versions)
                report.scalars += batch.num_rows
                if batch.num_rows:
                    yield batch
        if versions:
            report.file_versions[os.fspath(path)] = versions[0]

    def _records(self, fh: BinaryIO, path: Path,
                 ) -> Iterator[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]]:
        """Chunks of the file with the offsets and lengths of their checked records."""
        carry = b""
        base = 0  # file offset of data[0]
        want = self.chunk_bytes
        eof = False
        while not eof:
            more = fh.read(max(want - len(carry), 1 << 16))
            eof = not more
            self.report.bytes += len(more)
            if self.progress is not None:
                self.progress.update(len(more))
            data = carry + more
            if not data:
                break
            buf = np.frombuffer(data, dtype=np.uint8)
            u64 = unaligned(buf, "<u8")
            pos = 0
            end = len(data)
            offs_parts: list[np.ndarray] = []
            lens_parts: list[np.ndarray] = []
            while True:
                offs, lens, stop = _frame(data, u64, pos, end)
                good, resume = self._check(buf, data, offs, lens, base, path)
                if len(good[0]):
                    offs_parts.append(good[0])
                    lens_parts.append(good[1])
                if resume is not None:  # skipped a damaged stretch; frame again from there
                    pos = resume
                    continue
                pos = stop
                if pos + _HEADER <= end and not _header_ok(data, pos):
                    bad_at = base + pos
                    if self.on_corrupt == "raise":
                        raise CorruptFileError(path, "record length fails its checksum (the file is "
                                               "damaged; on_corrupt='skip' reads past it)", offset=bad_at)
                    nxt = _resync(buf, data, pos + 1, end)
                    self.report.corrupt.append((os.fspath(path), bad_at))
                    if nxt is None:
                        pos = end  # nothing valid in this chunk: drop it
                        break
                    pos = nxt
                    continue
                break
            if offs_parts:
                yield buf, data, np.concatenate(offs_parts), np.concatenate(lens_parts)
            rest = end - pos
            if eof and rest:
                self.report.truncated.append(os.fspath(path))
                said = ""
                if rest >= _HEADER:
                    said = f", though its length field says {_U64.unpack_from(data, pos)[0]} bytes"
                warnings.warn(TruncatedInputWarning(
                    path, f"the last record at byte {base + pos} is incomplete ({rest} bytes{said}; a run "
                    "still writing, or killed, or a damaged length); every complete record before it was "
                    "read"), stacklevel=4)
                break
            if rest >= _HEADER:
                # a record longer than a chunk: read it whole, but never more than the file still
                # holds (a damaged length field can say 2^64 - 1); a record that runs past the end
                # is then the incomplete last record above
                (n,) = _U64.unpack_from(data, pos)
                left = max(os.fstat(fh.fileno()).st_size - fh.tell(), 0)
                want = max(self.chunk_bytes, min(n + _FRAMING, rest + left) + (1 << 16))
            else:
                want = self.chunk_bytes
            carry = data[pos:]
            base += pos

    def _check(self, buf: np.ndarray, data: bytes, offs: np.ndarray, lens: np.ndarray, base: int,
               path: Path) -> tuple[tuple[np.ndarray, np.ndarray], int | None]:
        """Drop records whose CRCs fail (or raise); where to frame again after a bad length."""
        if not len(offs):
            return (offs, lens), None
        words = unaligned(buf, "<u4")
        head = mask(crc32c_many(buf, offs, np.full(len(offs), 8), words=words, threads=_THREADS))
        head_ok = head == words[offs + 8]
        body = mask(crc32c_many(buf, offs + _HEADER, lens, words=words, threads=_THREADS))
        body_ok = body == words[offs + _HEADER + lens]
        if head_ok.all() and body_ok.all():
            return (offs, lens), None
        first_head = int(np.argmin(head_ok)) if not head_ok.all() else len(offs)
        bad_body = np.flatnonzero(~body_ok[:first_head])
        if self.on_corrupt == "raise":
            if len(bad_body):
                i = int(bad_body[0])
                raise CorruptFileError(path, "record fails its checksum (the file is damaged; "
                                       "on_corrupt='skip' skips such records)", offset=base + int(offs[i]))
            raise CorruptFileError(path, "record length fails its checksum (the file is damaged; "
                                   "on_corrupt='skip' reads past it)", offset=base + int(offs[first_head]))
        for i in bad_body.tolist():
            self.report.corrupt.append((os.fspath(path), base + int(offs[i])))
        keep = np.ones(first_head, dtype=bool)
        keep[bad_body] = False
        good = (offs[:first_head][keep], lens[:first_head][keep])
        if first_head == len(offs):
            return good, None
        bad_at = int(offs[first_head])
        self.report.corrupt.append((os.fspath(path), base + bad_at))
        nxt = _resync(buf, data, bad_at + 1, len(data))
        return good, len(data) if nxt is None else nxt

    # ---- decoding

    def _decode(self, buf: np.ndarray, data: bytes, offs: np.ndarray, lens: np.ndarray, run_id: str,
                path: Path, versions: list[str]) -> pa.RecordBatch:
        fast = _fast_simple_values(buf, offs + _HEADER, lens)
        ok = fast["ok"]
        rows: list[tuple[Any, ...]] = []
        slow = np.flatnonzero(~ok)
        for i in slow.tolist():
            start = int(offs[i]) + _HEADER
            try:
                _parse_event(data[start:start + int(lens[i])], rows, i, self.report.skipped, versions)
            except (_Malformed, UnicodeDecodeError, struct.error) as exc:
                if self.on_corrupt == "raise":
                    raise CorruptFileError(path, f"event record is not a valid Event message ({exc})",
                                           offset=int(offs[i])) from None
                self.report.corrupt.append((os.fspath(path), int(offs[i])))
        idx = np.flatnonzero(ok)
        tags, scopes = _tags_and_scopes(buf, fast["tag_start"][idx], fast["tag_len"][idx])
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
            is_int = (kind == _FAST_INT64) | (kind == _FAST_LOGGER_INT64)
            cols["value_int"] = pa.array(fast["value_int"][idx], mask=~is_int)
            codes = pa.array(kind.astype(np.int32))
            cols["encoding"] = pa.DictionaryArray.from_arrays(codes, _FAST_ENCODINGS).cast(pa.string())
            cols["dtype"] = pa.DictionaryArray.from_arrays(codes, _FAST_DTYPES).cast(pa.string())
        if rows:
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
        return pa.RecordBatch.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)


def _const(text: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([text])).cast(pa.string())


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
            raise _Malformed(f"a tag is not valid UTF-8 ({exc})") from None
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
        raise _Malformed(f"a tag is not valid UTF-8 ({exc})") from None
    return arr


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


def _fast_simple_values(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised decoding of the common event: [wall_time] [step] summary{one value{tag, simple_value}}.

    ``ok`` marks the records that have exactly that shape; the others go the generic way.
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
    kind, exact_value, value_int = _fast_exact(buf, p + 5, end, ok & ~plain)
    return {"ok": plain | (kind > 0), "wall_time": wall, "step": stepv.view(np.int64), "tag_start": tag_start,
            "tag_len": np.where(ok, tag_len, 0), "value": np.where(kind > 0, exact_value, value),
            "kind": kind, "value_int": value_int}


# kinds of the vectorised path: a plain simple_value, or rlarrow's exact float64 / int64 beside it
_FAST_DOUBLE, _FAST_INT64, _FAST_LOGGER_DOUBLE, _FAST_LOGGER_INT64 = 1, 2, 3, 4
_FAST_ENCODINGS = pa.array(["simple_value", "double_val", "int64_val", "logger", "logger"])
_FAST_DTYPES = pa.array(["float32", "float64", "int64", "float64", "int64"])


def _fast_exact(buf: np.ndarray, r: np.ndarray, end: np.ndarray, live: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised decoding of the :data:`EXACT_PLUGIN` metadata that follows a simple_value at ``r``.

    Only the common shapes: a ``double_val`` float64 or ``int64_val`` int64 tensor, with no
    encoding field (the tensor's own) or ``logger``, and no plugin. Returns ``(kind, value,
    value_int)``; kind 0 marks records left to the generic path.
    """
    k = len(r)
    last = len(buf) - 1

    def at(p: np.ndarray) -> np.ndarray:
        got: np.ndarray = buf[np.clip(p, 0, last)]
        return got

    ok = live & (at(r) == 0x4A)
    for key in (0x0A, None):  # SummaryMetadata, then PluginData: each runs to the record's end
        n, r, bad = _varints(buf, r + 1, ok)
        ok &= ~bad & (r + n.astype(np.int64) == end)
        if key is not None:
            ok &= at(r) == key
    for j, byte in enumerate(_EXACT_NAME):
        ok &= at(r + j) == byte
    r = r + len(_EXACT_NAME)
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
    logger = tensor_end + len(_LOGGER_FIELD) == end
    for j, byte in enumerate(_LOGGER_FIELD):
        logger &= at(tensor_end + j) == byte
    own = tensor_end == end
    kind = np.zeros(k, dtype=np.int8)
    kind[is_double & own] = _FAST_DOUBLE
    kind[is_int & own] = _FAST_INT64
    kind[is_double & logger] = _FAST_LOGGER_DOUBLE
    kind[is_int & logger] = _FAST_LOGGER_INT64
    f64 = unaligned(buf, "<f8")
    double = f64[np.clip(r + 4, 0, max(len(f64) - 1, 0))] if len(f64) else np.zeros(k)
    value_int = iv.view(np.int64)
    return kind, np.where(is_int, value_int.astype(np.float64), double), value_int


def read_tfevents(source: Any, *, on_corrupt: str = "raise", run_prefix: str | None = None) -> pa.Table:
    """Every scalar of ``source`` (file, directory, glob, or list) as a ``scalars`` table.

    See :class:`TfeventsReader` for the arguments, and the module docstring for what is read.

    Example:
        >>> t = read_tfevents("runs/exp1")  # doctest: +SKIP
        >>> t.filter(t["tag"] == "train/loss").select(["step", "value"])  # doctest: +SKIP
    """
    return TfeventsReader(source, on_corrupt=on_corrupt, run_prefix=run_prefix).read_all()


# --------------------------------------------------------------------------- writing


def _varint_bytes(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(key: int, payload: bytes) -> bytes:
    return bytes((key,)) + _varint_bytes(len(payload)) + payload


_SCALARS_METADATA = _len_field(0x4A, _len_field(0x0A, _len_field(0x0A, b"scalars")))
_F32 = struct.Struct("<f")
_PLAIN_ENCODINGS = (None, "simple_value", "logger")
#: plugin name of the exact value rlarrow writes next to a ``simple_value`` (see the module docstring)
EXACT_PLUGIN = "rlarrow_exact"
_EXACT_NAME = _len_field(0x0A, EXACT_PLUGIN.encode())
_LOGGER_FIELD = _len_field(0x12, b"logger")


def _plugin_metadata(plugin: str | None) -> bytes:
    if not plugin:
        return b""
    if plugin == "scalars":
        return _SCALARS_METADATA
    return _len_field(0x4A, _len_field(0x0A, _len_field(0x0A, plugin.encode())))


def _f32_bytes(value: float) -> bytes:
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
        return out + _len_field(0x22, raw_le)
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
    out = _len_field(0x0A, tensor)
    if encoding != own:
        out += _len_field(0x12, (encoding or "").encode())
    if plugin:
        out += _len_field(0x1A, plugin.encode())
    return out


def _value_message(tag: bytes, value: float, value_int: int | None, encoding: str | None, dtype: str | None,
                   plugin: str | None) -> bytes:
    """The serialised Summary.Value for one row: ``simple_value``, plus the exact value when needed.

    Every reader of TensorBoard files reads ``simple_value`` (float32). A row that float32
    does not hold exactly (a float64 or integer value, another dtype, a tensor encoding)
    also gets its exact value as :data:`EXACT_PLUGIN` metadata, which rlarrow's reader
    prefers and every other reader ignores.
    """
    head = _len_field(0x0A, tag) + b"\x15" + _f32_bytes(value)
    if encoding in _PLAIN_ENCODINGS and value_int is None and (
            dtype == "float32" or (dtype is None and _is_float32(value))):
        return head + _plugin_metadata(plugin)
    content = _exact_content(value, value_int, encoding, dtype, plugin)
    return head + _len_field(0x4A, _len_field(0x0A, _EXACT_NAME + _len_field(0x12, content)))


def _event_bytes(wall_time: float, step: int, value_msg: bytes | None = None,
                 file_version: str | None = None) -> bytes:
    out = b""
    if wall_time != 0.0 or math.copysign(1.0, wall_time) < 0:
        out += b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint_bytes(step)
    if file_version is not None:
        out += _len_field(0x1A, file_version.encode())
    if value_msg is not None:
        out += _len_field(0x2A, _len_field(0x0A, value_msg))
    return out


def _frames(payloads: list[bytes]) -> bytes:
    """TFRecord frames of ``payloads`` (CRCs computed for all of them at once)."""
    if not payloads:
        return b""
    lengths = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=len(payloads))
    blob = b"".join(payloads)
    buf = np.frombuffer(b"\0\0\0\0" + blob, dtype=np.uint8)
    starts = np.zeros(len(payloads), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    body = np.asarray(mask(crc32c_many(buf, starts + 4, lengths)))
    heads = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    hbuf = np.frombuffer(b"\0\0\0\0" + heads.tobytes(), dtype=np.uint8)
    n = len(payloads)
    head = np.asarray(mask(crc32c_many(hbuf, np.arange(n, dtype=np.int64) * 8 + 4, np.full(n, 8))))
    total = int(lengths.sum()) + _FRAMING * len(payloads)
    out = np.empty(total, dtype=np.uint8)
    rec_start = starts + _FRAMING * np.arange(len(payloads), dtype=np.int64)
    framing = np.empty((len(payloads), 12), dtype=np.uint8)
    framing[:, :8] = heads
    framing[:, 8:] = head.astype("<u4").view(np.uint8).reshape(-1, 4)
    idx = rec_start[:, None] + np.arange(12)
    out[idx] = framing
    data_pos = np.repeat(rec_start + _HEADER - starts, lengths) + np.arange(len(blob), dtype=np.int64)
    out[data_pos] = buf[4:]
    tail = (rec_start + _HEADER + lengths)[:, None] + np.arange(4)
    out[tail] = body.astype("<u4").view(np.uint8).reshape(-1, 4)
    return out.tobytes()


_file_counter = 0


def _new_event_file_name(suffix: str = "") -> str:
    global _file_counter
    _file_counter += 1
    return (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
            f"{_file_counter}{suffix}")


class EventFileWriter:
    """Write scalars to a new TensorBoard event file, as ``SummaryWriter`` does, without it.

    The file starts with the ``brain.Event:2`` version record. Records are buffered and
    written on :meth:`flush` (also every ``flush_every`` records, and on :meth:`close`);
    each flushed record is complete on disk, so TensorBoard (and rlarrow) can read a file
    that is still being written.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with EventFileWriter(d) as w:
        ...     w.add_scalar("train/loss", 0.5, step=1, wall_time=1.7e9)
        >>> read_tfevents(d).column("value").to_pylist()
        [0.5]
    """

    def __init__(self, directory: str | os.PathLike[str], *, filename_suffix: str = "",
                 flush_every: int = 4096, wall_time: float | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / _new_event_file_name(filename_suffix)
        self._fh: BinaryIO | None = open(self.path, "xb")
        self._pending: list[bytes] = [_event_bytes(time.time() if wall_time is None else wall_time, 0,
                                                   file_version="brain.Event:2")]
        self._tags: dict[str, bytes] = {}
        self.flush_every = flush_every
        self.flush()

    def add_scalar(self, tag: str, value: float | int, step: int = 0, wall_time: float | None = None, *,
                   encoding: str | None = None, dtype: str | None = None, plugin: str | None = None,
                   value_int: int | None = None) -> None:
        """Add one scalar, as a ``simple_value`` every TensorBoard reader reads.

        With neither ``dtype`` nor ``encoding`` the value is a float32, as ``SummaryWriter``
        writes it. A ``dtype`` other than float32 (``float64``, ``int64``, ...; an integer
        with an ``encoding`` is ``int64``) also records the exact value, read back by
        rlarrow's reader with that ``dtype`` and ``encoding`` (see :data:`EXACT_PLUGIN`).
        """
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        ints = isinstance(value, (int, np.integer))
        if dtype is None:
            dtype = "int64" if ints and encoding is not None else "float32"
        if value_int is None and ints and not dtype.startswith(("float", "bfloat")):
            value_int = int(value)
        wt = time.time() if wall_time is None else wall_time
        msg = _value_message(tag.encode(), float(value), value_int, encoding or "simple_value", dtype, plugin)
        self._pending.append(_event_bytes(wt, int(step), msg))
        if len(self._pending) >= self.flush_every:
            self.flush()

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add every row of a ``scalars`` batch (its run_id/scope are not written).

        Each row goes as ``simple_value``; a row float32 does not hold exactly (see
        :func:`write_tfevents`) carries its exact value too.
        """
        cols = {name: batch.column(name).to_pylist() for name in
                ("tag", "step", "value", "value_int", "wall_time", "encoding", "dtype", "plugin")
                if name in batch.schema.names}
        n = batch.num_rows
        get = cols.get
        tags, steps, values = cols["tag"], cols["step"], cols["value"]
        vints = get("value_int") or [None] * n
        walls = get("wall_time") or [None] * n
        encs = get("encoding") or [None] * n
        dtypes = get("dtype") or [None] * n
        plugins = get("plugin") or [None] * n
        as_f64 = np.asarray(batch.column("value").to_numpy(zero_copy_only=False), dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            fits = ((as_f64.astype(np.float32).astype(np.float64) == as_f64) | np.isnan(as_f64)).tolist()
        cache = self._tags
        pending = self._pending
        for i in range(n):
            tag = tags[i]
            tb = cache.get(tag)
            if tb is None:
                tb = cache[tag] = tag.encode()
            dt = dtypes[i]
            if encs[i] in _PLAIN_ENCODINGS and plugins[i] is None and vints[i] is None and (
                    dt == "float32" or (dt is None and fits[i])):
                msg = _len_field(0x0A, tb) + b"\x15" + _f32_bytes(values[i])
            else:
                msg = _value_message(tb, values[i], vints[i], encs[i], dt, plugins[i])
            wt = walls[i]
            pending.append(_event_bytes(0.0 if wt is None else wt, steps[i], msg))
            if len(pending) >= self.flush_every:
                self.flush()
                pending = self._pending

    def flush(self) -> None:
        """Write the buffered records (complete records only) and flush the file."""
        if self._fh is None:
            raise ValueError(f"{self.path}: the writer is closed")
        if self._pending:
            self._fh.write(_frames(self._pending))
            self._pending = []
        self._fh.flush()

    def close(self) -> None:
        """Flush, fsync and close the file."""
        if self._fh is None:
            return
        self.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None

    def __enter__(self) -> EventFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_directory(root: Path, run_id: str) -> Path:
    parts = [p for p in run_id.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return root.joinpath(*parts) if parts else root


def write_tfevents(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | Mapping[str, Any],
                   directory: str | os.PathLike[str], *, run_layout: bool = True) -> list[Path]:
    """Write ``scalars`` rows as TensorBoard event files, one file per run.

    Each run goes to ``directory/<run_id>/`` (``run_id`` split at ``/`` into folders, so
    sub-runs nest under their parent as TensorBoard expects); with ``run_layout=False``
    every row goes into one file in ``directory``. Every value is a ``simple_value``
    (float32), which TensorBoard, tbparse, tianshou and skrl all read. A row that float32
    does not hold exactly (``dtype`` other than float32, a ``value_int``, a tensor
    ``encoding``; a row without a dtype whose value is not a float32) also carries its
    exact value, dtype, encoding and plugin as :data:`EXACT_PLUGIN` metadata, so
    :func:`read_tfevents` gives the row back as it was.

    Returns:
        The files written.

    Example:
        >>> import tempfile
        >>> t = read_tfevents(...)  # doctest: +SKIP
        >>> write_tfevents(t, tempfile.mkdtemp())  # doctest: +SKIP
    """
    if isinstance(data, Mapping):
        data = _schema.build("scalars", dict(data))
    batches: Iterable[Any]
    if isinstance(data, pa.Table):
        batches = data.to_batches(max_chunksize=1 << 16)
    elif isinstance(data, pa.RecordBatch):
        batches = [data]
    else:
        batches = cast(Iterable[Any], data)
    root = Path(directory)
    writers: dict[str, EventFileWriter] = {}
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            groups: dict[str, Any]
            if not run_layout or "run_id" not in batch.schema.names:
                groups = {"": batch}
            else:
                ids = batch.column("run_id")
                distinct = pc.unique(ids).to_pylist()
                groups = {r: batch.filter(pc.equal(ids, r)) for r in distinct} if len(distinct) > 1 \
                    else {distinct[0]: batch}
            for run, part in groups.items():
                w = writers.get(run)
                if w is None:
                    w = writers[run] = EventFileWriter(_run_directory(root, run) if run_layout else root,
                                                       flush_every=1 << 16)
                w.write_batch(part)
    finally:
        for w in writers.values():
            w.close()
    return [w.path for w in writers.values()]


# --------------------------------------------------------------------------- the store


def import_tfevents(source: Any, store: Any, *, run_id: str | None = None, name: str | None = None,
                    on_corrupt: str = "raise", progress: bool | None = None,
                    existing_run: bool = False) -> TfeventsReport:
    """Import event files (a file, a directory of runs, a glob) into ``store``'s ``scalars``.

    Each TensorBoard run becomes a run of the store: the root run gets ``run_id`` (default:
    a new id), a sub-run ``run_id/<its path>`` (an ``add_scalars`` folder, a tianshou
    ``test/`` run...). The ``runs`` rows record ``source = 'tfevents'``, the directory, and
    the event files (``existing_run=True``: the root run's scalars go into the existing run
    ``run_id``, which gets no new row; an experiment import does this). Tags keep their
    prefixes; ``scope`` maps tianshou's ``training/``,
    ``test/``, ``update/``, ``info/`` (and ``train/``) to train/test/update/info. The scalars
    are one commit, made when every file has been read (the runs rows follow it): a damaged
    file stops the import with nothing written.

    Returns:
        A :class:`TfeventsReport` (scalars, skipped summaries by kind, damage found).

    Example:
        >>> import_tfevents("log/ppo", "runs.rlarrow")  # doctest: +SKIP
    """
    from rlarrow.core.progress import bar
    from rlarrow.core.store import Store, new_run_id

    base = run_id or new_run_id()
    reader = TfeventsReader(source, on_corrupt=on_corrupt, run_prefix=base)
    own = not isinstance(store, Store)
    st = Store.open(store, create=True) if own else store
    try:
        for run_name, _files in reader.runs:
            rid = reader.run_id(run_name)
            if existing_run and rid == base:
                if not st.has_run(rid):
                    raise InvalidInputError(st.path, f"run {rid!r} does not exist (existing_run=True)")
                continue
            if st.has_run(rid):
                raise InvalidInputError(st.path, f"run {rid!r} already exists; choose another run_id")
        with bar(reader.total_bytes, "importing tfevents", progress=progress) as pbar:
            reader.progress = pbar
            # one commit at the end: a damaged file stops the import with nothing written
            with st.writer("scalars", file_bytes=1 << 62) as w:
                for batch in reader:
                    w.write(batch)
        for run_name, files in reader.runs:
            if existing_run and reader.run_id(run_name) == base:
                continue
            st.add_run(source="tfevents", run_id=reader.run_id(run_name),
                       name=name if run_name == "." else (f"{name}/{run_name}" if name else run_name),
                       source_path=files[0].parent,
                       metadata={"tensorboard_run": run_name, "files": [f.name for f in files]})
    finally:
        if own:
            st.close()
    return reader.report


def export_tfevents(store: Any, directory: str | os.PathLike[str], *, run_id: str | None = None,
                    overwrite: bool = False) -> list[Path]:
    """Write a store's ``scalars`` as event files: ``directory/<run_id>/events.out.tfevents...``.

    Sub-runs (``run/sub``) nest under their run's folder, as TensorBoard shows them.
    ``directory`` must be empty or new: an export never mixes with what is there (TensorBoard
    would show both); ``overwrite`` replaces its content, once every file is written (a
    failure leaves the old content).

    Raises:
        InvalidInputError: ``directory`` holds something and ``overwrite`` is false.
    """
    from rlarrow.core.store import Store
    from rlarrow.io._target import fresh_directory

    root = Path(directory)
    own = not isinstance(store, Store)
    st = Store.open(store, readonly=True) if own else store
    try:
        flt = None if run_id is None else (pc.field("run_id") == run_id) | pc.starts_with(
            pc.field("run_id"), run_id + "/")
        ds = st.dataset("scalars")
        with fresh_directory(root, overwrite=overwrite, what="a tfevents export", skip_empty=True) as tmp:
            if st.row_count("scalars") == 0:
                return []
            written = write_tfevents(ds.to_batches(filter=flt), tmp)
        return [root / p.relative_to(tmp) for p in written]
    finally:
        if own:
            st.close()
