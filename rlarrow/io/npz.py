"""skrl/rofunc replay-memory exports as ``.npz`` files (one member per tensor).

Loaded with ``allow_pickle=False``: object arrays are refused, never unpickled. An
uncompressed export (what ``np.savez`` writes) is memory-mapped instead of copied, and its
members' CRC-32 checksums are verified (:func:`open_npz` hands that check back, to run while
the arrays are used: a conversion checks them while it writes, before it commits);
compressed ones go through ``np.load``.
:func:`write_npz` writes what skrl's ``Memory.save(format="npz")`` writes (``np.savez``,
uncompressed, names sorted), byte for byte.
"""

from __future__ import annotations

import math
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.errors import CorruptFileError, UnsupportedInputError
from rlarrow.io.memory import MemorySnapshot, atomic_output, export_tensors

__all__ = ["open_npz", "read_npz", "write_npz"]


def read_npz(path: str | os.PathLike[str]) -> MemorySnapshot:
    """Read a ``.npz`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Raises:
        UnsupportedInputError: a member is an object (pickled) array, or not an ``.npy``.
        CorruptFileError: the file is truncated or damaged.
    """
    snap, verify = open_npz(path)
    verify()
    return snap


def open_npz(path: str | os.PathLike[str]) -> tuple[MemorySnapshot, Callable[[], None]]:
    """:func:`read_npz`, with the checksum verification handed back to run later.

    For an uncompressed export (memory-mapped), ``verify()`` reads the members through and
    checks their CRC-32s, raising :class:`CorruptFileError` on a mismatch; it may run in
    another thread (zlib releases the GIL) while the arrays are used, and must have passed
    before anything made from them is trusted. For compressed exports ``np.load`` has
    checked them already and ``verify`` does nothing.
    """
    path = Path(path)
    tensors: dict[str, np.ndarray] = {}
    try:
        found = _mapped(path)
        if found is not None:
            mapped, verify = found
            return MemorySnapshot(mapped, name=path.stem, path=os.fspath(path), source_format="npz"), verify
        with open(path, "rb") as fh:  # our handle: np.load leaks its own on a damaged zip
            loaded = np.load(fh, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise UnsupportedInputError(path, "a single .npy array, not an .npz of named tensors")
            with loaded as npz:
                for name in npz.files:
                    tensors[name] = npz[name]
    except FileNotFoundError:
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise UnsupportedInputError(path, "holds an object (pickled) array; refused without "
                                        "unpickling it") from exc
        raise CorruptFileError(path, f"not a readable .npz ({exc})") from exc
    except (zipfile.BadZipFile, EOFError, OSError, SyntaxError, tokenize.TokenError) as exc:
        raise CorruptFileError(path, f"not a readable .npz ({exc})") from exc
    return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="npz"), _nothing


def _nothing() -> None:
    return None


def _mapped(path: Path) -> tuple[dict[str, np.ndarray], Callable[[], None]] | None:
    """The members of an uncompressed ``.npz`` as read-only memory maps, and their checksum check.

    None when a member is compressed or encrypted (``np.load`` reads those). Raises what
    :func:`read_npz` documents for damage and object arrays; the returned check raises
    :class:`CorruptFileError` for a member whose CRC-32 does not match.
    """
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    if not infos or any(i.compress_type != zipfile.ZIP_STORED or i.flag_bits & 1 for i in infos):
        return None
    size = path.stat().st_size
    out: dict[str, np.ndarray] = {}
    sums: list[tuple[str, int, np.ndarray | None, int]] = []  # member, header's CRC, data, expected
    with open(path, "rb") as fh:
        for info in infos:
            fh.seek(info.header_offset)
            local = fh.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise CorruptFileError(path, f"member {info.filename!r}: no local header at its offset")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            end = start + info.file_size
            if end > size:
                raise CorruptFileError(path, f"member {info.filename!r} runs past the end of the file "
                                       f"({end} > {size} bytes): truncated")
            fh.seek(start)
            try:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            except (ValueError, SyntaxError, TypeError, tokenize.TokenError) as exc:  # a Python literal
                raise CorruptFileError(path, f"member {info.filename!r}: damaged .npy header "
                                       f"({exc})") from exc
            if dtype.hasobject:
                raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
            offset = fh.tell()
            if offset + math.prod(shape) * dtype.itemsize != end:
                raise CorruptFileError(path, f"member {info.filename!r}: its array header does not match "
                                       "its size")
            fh.seek(start)
            head_crc = zlib.crc32(fh.read(offset - start))
            data = None
            if math.prod(shape) == 0:
                array = np.empty(shape, dtype, order="F" if fortran else "C")
            else:
                array = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                  order="F" if fortran else "C")
                data = array.reshape(-1, order="A").view(np.uint8)
            sums.append((info.filename, head_crc, data, info.CRC))
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            out[name] = np.asarray(array)

    def verify() -> None:
        for member, crc, data, expected in sums:
            if data is not None:
                crc = zlib.crc32(data.data, crc)
            if crc != expected:
                raise CorruptFileError(path, f"member {member!r} fails its CRC-32 check: the file is damaged")

    return out, verify


def write_npz(data: MemorySnapshot | Mapping[str, Any], path: str | os.PathLike[str], *,
              overwrite: bool = False) -> Path:
    """Write tensors ``(memory_size, num_envs, *size)`` as skrl's ``.npz`` memory export.

    Args:
        data: a snapshot, or a mapping of names to NumPy arrays or torch tensors.
        path: the file to write, ending in ``.npz`` (written atomically).
        overwrite: replace an existing file.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: an .npz export's name must end in .npz (np.savez would add it)")
    arrays = export_tensors(data)
    with atomic_output(path, overwrite=overwrite) as tmp:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
    return path
