"""Counting the records of a riegeli file from its chunk headers, without envlogger.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

envlogger's reader skips damaged index records and unreadable episode metadata without a
word; what it returns is checked against these counts (:mod:`.envlogger_reading`).
"""


from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from rlarrow.core.errors import (
    CorruptFileError,
)

__all__: list[str] = []


# ------------------------------------------------------------ riegeli record counts

_BLOCK = 1 << 16
_BLOCK_HEADER = 24
_USABLE = _BLOCK - _BLOCK_HEADER
_CHUNK_HEADER = 40
_CHUNK = struct.Struct("<QQQB7sQ")  # header hash, data size, data hash, type, records, decoded size


def riegeli_record_count(path: str | os.PathLike[str]) -> int:
    """How many records a Riegeli/records file holds, from its chunk headers.

    Walks the chunks as the format lays them out (a block header every 64 KiB, a chunk's
    end from its data size and record count) without decoding them or checking their
    hashes: envlogger's reader checks those, and this count tells whether it read them all.
    Every size is checked against the bytes the file holds before it is used.

    Raises:
        CorruptFileError: not a Riegeli/records file, or a chunk that does not fit the file
            (damaged, or cut short).
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0:  # a Riegeli writer writes its signature chunk first: even no records is 64 bytes
        raise CorruptFileError(path, "is empty: not a Riegeli/records file (no file signature); "
                               "cut short or damaged", offset=0)
    total = 0
    pos = 0
    with open(path, "rb") as fh:
        while pos < size:
            raw = _read_across_blocks(fh, pos, _CHUNK_HEADER, size)
            if raw is None:
                raise CorruptFileError(path, "ends inside a chunk header (truncated)", offset=pos)
            _hash, data_size, _data_hash, kind, records_raw, _decoded = _CHUNK.unpack(raw)
            records = int.from_bytes(records_raw, "little")
            if pos == 0 and (kind != ord("s") or data_size or records):
                raise CorruptFileError(path, "not a Riegeli/records file (no file signature)", offset=0)
            # Python integers: a damaged size (up to 2^64 - 1) is compared, never allocated
            end = max(_add_with_overhead(pos, _CHUNK_HEADER + data_size), _chunk_boundary(pos + records))
            if end > size:
                raise CorruptFileError(path, f"a chunk header claims {data_size} bytes and {records} "
                                       f"records, which run to byte {end}, past the end of the file "
                                       f"({size} bytes): truncated or damaged", offset=pos)
            total += records
            pos = end
    return total


def _add_with_overhead(pos: int, length: int) -> int:
    """Where ``length`` bytes written from ``pos`` end, counting the block headers between."""
    blocks = (length + (pos + _USABLE - 1) % _BLOCK) // _USABLE
    return pos + length + blocks * _BLOCK_HEADER


def _chunk_boundary(pos: int) -> int:
    """The first position at or after ``pos`` where a chunk may end (not inside a block header)."""
    remaining = _BLOCK - 1 - (pos + _BLOCK - 1) % _BLOCK
    return pos + max(remaining - (_USABLE - 1), 0)


def _read_across_blocks(fh: Any, pos: int, length: int, size: int) -> bytes | None:
    """``length`` bytes from ``pos``, leaving out the block headers on the way; None past the end."""
    out = b""
    while len(out) < length:
        if pos % _BLOCK < _BLOCK_HEADER:
            pos += _BLOCK_HEADER - pos % _BLOCK
        take = min(length - len(out), _BLOCK - pos % _BLOCK)
        if pos + take > size:
            return None
        fh.seek(pos)
        out += fh.read(take)
        pos += take
    return out


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


