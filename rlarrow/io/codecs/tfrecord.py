"""TFRecord framing: finding the records in the bytes, checking them, writing them.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A TFRecord file (a TensorBoard event file, a TFDS/RLDS shard) is a sequence of records, each
framed as::

    uint64 length | uint32 masked CRC-32C of the length | payload | uint32 masked CRC-32C of the payload

(all little-endian; :mod:`rlarrow.io.codecs.crc32c` computes the checksums). This module
knows nothing of what a payload holds (an ``Event`` message: :mod:`rlarrow.io.tfevents.proto`;
a ``tf.train.Example``: :mod:`rlarrow.io.rlds`). It owns:

- :func:`read_records`: a file read a chunk at a time (memory stays bounded), each chunk
  handed on with the offsets and lengths of its whole records, every record's two CRCs
  checked. Damage is handled here: a truncated last record ends the file with a
  :class:`~rlarrow.core.errors.TruncatedInputWarning`; a record whose checksum fails raises
  :class:`~rlarrow.core.errors.CorruptFileError`, or (``on_corrupt="skip"``) is skipped and
  reading resumes at the next valid record header. A length field is never trusted beyond
  the bytes the file still holds.
- :func:`frame_records`: the framed bytes of many payloads at once (what a writer appends).

Example:
    >>> import io
    >>> from pathlib import Path
    >>> framed = frame_records([b"first", b"second payload"])
    >>> len(framed) == 5 + 14 + 2 * FRAMING_BYTES
    True
    >>> log = ReadCounts()
    >>> [(chunk.offsets.tolist(), chunk.lengths.tolist())
    ...  for chunk in read_records(io.BytesIO(framed), Path("mem"), log=log)]
    [([0, 21], [5, 14])]
    >>> log.bytes, log.corrupt, log.truncated
    (51, [], [])
"""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

import numpy as np

from rlarrow.core.errors import CorruptFileError, TruncatedInputWarning
from rlarrow.io.codecs.crc32c import crc32c, crc32c_many, mask, unaligned

__all__: list[str] = []

#: how much of a file is read and decoded at once, by default
CHUNK_BYTES = 8 << 20
#: bytes before a record's payload: its length (8) and the length's CRC (4)
HEADER_BYTES = 12
#: bytes a record adds to its payload: the header and the payload's CRC (4)
FRAMING_BYTES = 16
_THREADS = min(2, os.cpu_count() or 1)
_U64 = struct.Struct("<Q")


class Chunk(NamedTuple):
    """A stretch of a file with its whole, checked records.

    ``offsets[i]`` is where record ``i`` (its length field) starts in ``data``, ``lengths[i]``
    its payload's length: the payload is ``data[offsets[i] + HEADER_BYTES:][:lengths[i]]``.
    """

    buf: np.ndarray  #: ``data`` as a uint8 array (no copy)
    data: bytes
    offsets: np.ndarray
    lengths: np.ndarray


class ReadLog(Protocol):
    """Where :func:`read_records` writes down what it read and the damage it found.

    :class:`~rlarrow.io.tfevents.TfeventsReport` is one; :class:`ReadCounts` is the bare one.
    """

    bytes: int
    corrupt: list[tuple[str, int]]  #: (file, byte offset) of each record skipped as corrupt
    truncated: list[str]  #: files that ended in an incomplete record


@dataclass
class ReadCounts:
    """A :class:`ReadLog` and nothing else."""

    bytes: int = 0
    corrupt: list[tuple[str, int]] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)


def read_records(fh: BinaryIO, path: Path, *, log: ReadLog, on_corrupt: str = "raise",
                 chunk_bytes: int = CHUNK_BYTES, progress: Any = None) -> Iterator[Chunk]:
    """The chunks of an open event file, each with the offsets and lengths of its checked records.

    A record never straddles two chunks: the bytes after a chunk's last whole record start
    the next chunk (a record longer than ``chunk_bytes`` gets a chunk of its own).

    Args:
        fh: the file, open for binary reading at its start.
        path: its name, for errors, warnings and ``log``.
        log: counts the bytes read and notes corrupt records and a truncated end.
        on_corrupt: ``"raise"`` raises :class:`~rlarrow.core.errors.CorruptFileError` at the
            first record whose checksum fails; ``"skip"`` drops it and reads on from the next
            valid record header.
        chunk_bytes: how much to read at once.
        progress: an object with ``update(n_bytes)`` (a progress bar), or None.

    Warns:
        TruncatedInputWarning: the file ends inside a record (every whole record before it
            is yielded first).
    """
    carry = b""
    base = 0  # file offset of data[0]
    want = chunk_bytes
    eof = False
    while not eof:
        more = fh.read(max(want - len(carry), 1 << 16))
        eof = not more
        log.bytes += len(more)
        if progress is not None:
            progress.update(len(more))
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
            good, resume = _check(buf, data, offs, lens, base, path, on_corrupt, log)
            if len(good[0]):
                offs_parts.append(good[0])
                lens_parts.append(good[1])
            if resume is not None:  # skipped a damaged stretch; frame again from there
                pos = resume
                continue
            pos = stop
            if pos + HEADER_BYTES <= end and not _header_ok(data, pos):
                bad_at = base + pos
                if on_corrupt == "raise":
                    raise CorruptFileError(path, "record length fails its checksum (the file is "
                                           "damaged; on_corrupt='skip' reads past it)", offset=bad_at)
                nxt = _resync(buf, data, pos + 1, end)
                log.corrupt.append((os.fspath(path), bad_at))
                if nxt is None:
                    pos = end  # nothing valid in this chunk: drop it
                    break
                pos = nxt
                continue
            break
        if offs_parts:
            yield Chunk(buf, data, np.concatenate(offs_parts), np.concatenate(lens_parts))
        rest = end - pos
        if eof and rest:
            log.truncated.append(os.fspath(path))
            said = ""
            if rest >= HEADER_BYTES:
                said = f", though its length field says {_U64.unpack_from(data, pos)[0]} bytes"
            # stacklevel 4: past this generator, TfeventsReader.read_file and __iter__, to the caller
            warnings.warn(TruncatedInputWarning(
                path, f"the last record at byte {base + pos} is incomplete ({rest} bytes{said}; a run "
                "still writing, or killed, or a damaged length); every complete record before it was "
                "read"), stacklevel=4)
            break
        if rest >= HEADER_BYTES:
            # a record longer than a chunk: read it whole, but never more than the file still
            # holds (a damaged length field can say 2^64 - 1); a record that runs past the end
            # is then the incomplete last record above
            (n,) = _U64.unpack_from(data, pos)
            left = max(os.fstat(fh.fileno()).st_size - fh.tell(), 0)
            want = max(chunk_bytes, min(n + FRAMING_BYTES, rest + left) + (1 << 16))
        else:
            want = chunk_bytes
        carry = data[pos:]
        base += pos


def _period(recent: list[int]) -> int:
    """The shortest period (at most 64) with which all of ``recent`` repeats, else 0."""
    r = np.array(recent, dtype=np.int64)
    for p in range(1, min(64, len(r) // 2) + 1):
        if (r[p:] == r[:-p]).all():
            return p
    return 0


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
    # records predicted at once: twice the run last found (a histogram every 4,000 scalars cut
    # runs short, and predicting 65,536 each time took 0.3 s of a 1 s read of such logs)
    span = 1 << 12
    while pos + HEADER_BYTES <= end:
        taken = 0
        p = _period(recent)
        if p:
            pattern = np.array(recent[-p:], dtype=np.int64)
            k = min(span, (end - pos) // (int(pattern.min()) + FRAMING_BYTES) + 1)
            plen = np.tile(pattern, -(-k // p))[:k]
            stride = plen + FRAMING_BYTES
            poff = np.empty(k, dtype=np.int64)
            poff[0] = pos
            np.cumsum(stride[:-1], out=poff[1:])
            poff[1:] += pos
            fit = int(np.searchsorted(poff + stride, end, side="right"))
            if fit:
                actual = u64[poff[:fit]].astype(np.int64)
                bad = np.flatnonzero(actual != plen[:fit])
                taken = int(bad[0]) if len(bad) else fit
                span = min(1 << 16, max(1 << 10, 2 * taken))
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
            if pos + HEADER_BYTES > end:
                break
            (n,) = _U64.unpack_from(data, pos)
            if pos + n + FRAMING_BYTES > end:
                break
            o_list.append(pos)
            l_list.append(n)
            pos += n + FRAMING_BYTES
        if not o_list:
            break
        offs.append(np.array(o_list, dtype=np.int64))
        lens.append(np.array(l_list, dtype=np.int64))
        recent = (recent + l_list)[-128:]
    if not offs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), pos
    return np.concatenate(offs), np.concatenate(lens), pos


def _check(buf: np.ndarray, data: bytes, offs: np.ndarray, lens: np.ndarray, base: int, path: Path,
           on_corrupt: str, log: ReadLog) -> tuple[tuple[np.ndarray, np.ndarray], int | None]:
    """Drop records whose CRCs fail (or raise); where to frame again after a bad length."""
    if not len(offs):
        return (offs, lens), None
    words = unaligned(buf, "<u4")
    head = mask(crc32c_many(buf, offs, np.full(len(offs), 8), words=words, threads=_THREADS))
    head_ok = head == words[offs + 8]
    body = mask(crc32c_many(buf, offs + HEADER_BYTES, lens, words=words, threads=_THREADS))
    body_ok = body == words[offs + HEADER_BYTES + lens]
    if head_ok.all() and body_ok.all():
        return (offs, lens), None
    first_head = int(np.argmin(head_ok)) if not head_ok.all() else len(offs)
    bad_body = np.flatnonzero(~body_ok[:first_head])
    if on_corrupt == "raise":
        if len(bad_body):
            i = int(bad_body[0])
            raise CorruptFileError(path, "record fails its checksum (the file is damaged; "
                                   "on_corrupt='skip' skips such records)", offset=base + int(offs[i]))
        raise CorruptFileError(path, "record length fails its checksum (the file is damaged; "
                               "on_corrupt='skip' reads past it)", offset=base + int(offs[first_head]))
    for i in bad_body.tolist():
        log.corrupt.append((os.fspath(path), base + int(offs[i])))
    keep = np.ones(first_head, dtype=bool)
    keep[bad_body] = False
    good = (offs[:first_head][keep], lens[:first_head][keep])
    if first_head == len(offs):
        return good, None
    bad_at = int(offs[first_head])
    log.corrupt.append((os.fspath(path), base + bad_at))
    nxt = _resync(buf, data, bad_at + 1, len(data))
    return good, len(data) if nxt is None else nxt


def _header_ok(data: bytes, pos: int) -> bool:
    return bool(mask(crc32c(data[pos:pos + 8])) == struct.unpack_from("<I", data, pos + 8)[0])


def _resync(buf: np.ndarray, data: bytes, start: int, end: int) -> int | None:
    """The first offset after ``start`` where a valid record header (length and CRC) begins."""
    words = unaligned(buf, "<u4")
    pos = start
    while pos + HEADER_BYTES <= end:
        stop = min(end - HEADER_BYTES + 1, pos + (1 << 20))
        cand = np.arange(pos, stop, dtype=np.int64)
        crcs = mask(crc32c_many(buf, cand, np.full(len(cand), 8), words=words))
        hits = np.flatnonzero(crcs == words[cand + 8])
        for h in hits.tolist():
            q = int(cand[h])
            (n,) = _U64.unpack_from(data, q)
            if q + n + FRAMING_BYTES <= end and mask(crc32c(data[q + HEADER_BYTES:q + HEADER_BYTES + n])) == \
                    struct.unpack_from("<I", data, q + HEADER_BYTES + n)[0]:
                return q
        pos = stop
    return None


def frame_records(payloads: list[bytes]) -> bytes:
    """The TFRecord frames of ``payloads``, one after the other (CRCs computed for all at once)."""
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
    total = int(lengths.sum()) + FRAMING_BYTES * len(payloads)
    out = np.empty(total, dtype=np.uint8)
    rec_start = starts + FRAMING_BYTES * np.arange(len(payloads), dtype=np.int64)
    framing = np.empty((len(payloads), 12), dtype=np.uint8)
    framing[:, :8] = heads
    framing[:, 8:] = head.astype("<u4").view(np.uint8).reshape(-1, 4)
    idx = rec_start[:, None] + np.arange(12)
    out[idx] = framing
    data_pos = np.repeat(rec_start + HEADER_BYTES - starts, lengths) + np.arange(len(blob), dtype=np.int64)
    out[data_pos] = buf[4:]
    tail = (rec_start + HEADER_BYTES + lengths)[:, None] + np.arange(4)
    out[tail] = body.astype("<u4").view(np.uint8).reshape(-1, 4)
    return out.tobytes()
