"""skrl/rofunc replay-memory exports as ``.npz`` files (one member per tensor).

Loaded with ``allow_pickle=False``: object arrays are refused, never unpickled. An
uncompressed export (what ``np.savez`` writes) is memory-mapped instead of copied, after its
members' CRC-32 checksums are verified; compressed ones go through ``np.load``.
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.errors import CorruptFileError, UnsupportedInputError
from rlarrow.io.memory import MemorySnapshot, atomic_output, export_tensors

__all__ = ["read_npz", "write_npz"]


def read_npz(path: str | os.PathLike[str]) -> MemorySnapshot:
    """Read a ``.npz`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Raises:
        UnsupportedInputError: a member is an object (pickled) array, or not an ``.npy``.
        CorruptFileError: the file is truncated or damaged.
    """
    path = Path(path)
    tensors: dict[str, np.ndarray] = {}
    try:
        mapped = _mapped(path)
        if mapped is not None:
            return MemorySnapshot(mapped, name=path.stem, path=os.fspath(path), source_format="npz")
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
    return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="npz")


def _mapped(path: Path) -> dict[str, np.ndarray] | None:
    """The members of an uncompressed ``.npz`` as read-only memory maps, checksums verified.

    None when a member is compressed or encrypted (``np.load`` reads those). Raises what
    :func:`read_npz` documents for damage and object arrays.
    """
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    if not infos or any(i.compress_type != zipfile.ZIP_STORED or i.flag_bits & 1 for i in infos):
        return None
    size = path.stat().st_size
    out: dict[str, np.ndarray] = {}
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
            crc = zlib.crc32(fh.read(offset - start))
            if math.prod(shape) == 0:
                array = np.empty(shape, dtype, order="F" if fortran else "C")
            else:
                array = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                  order="F" if fortran else "C")
                crc = zlib.crc32(array.reshape(-1, order="A").view(np.uint8).data, crc)
            if crc != info.CRC:
                raise CorruptFileError(path, f"member {info.filename!r} fails its CRC-32 check: the "
                                       "file is damaged")
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            out[name] = np.asarray(array)
    return out


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
