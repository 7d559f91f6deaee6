"""skrl/rofunc replay-memory exports as ``.npz`` files (one member per tensor).

Loaded with ``allow_pickle=False``: object arrays are refused, never unpickled. An
uncompressed export (what ``np.savez`` writes) is memory-mapped instead of copied, and its
members' CRC-32 checksums are verified (:func:`open_npz` hands that check back, to run while
the arrays are used: a conversion checks them while it writes, before it commits);
compressed ones go through ``np.load``. Member names must be ``<tensor name>.npy``: a damaged
name is a :class:`~rlarrow.core.errors.CorruptFileError`, never a tensor under a garbled name.
:func:`write_npz` writes what skrl's ``Memory.save(format="npz")`` writes (``np.savez``,
uncompressed, names sorted), byte for byte.
"""

from __future__ import annotations

import math
import mmap
import os
import tokenize
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from rlarrow.core.errors import ArgumentError, CorruptFileError, RLArrowError, UnsupportedInputError
from rlarrow.io.memory.snapshot import (
    MemorySnapshot,
    ZipMember,
    atomic_output,
    export_tensors,
    is_zip,
    map_file,
    tensor_name_problem,
    zip_crc_check,
    zip_members,
)

__all__ = ["open_npz", "read_npz", "write_npz"]


def read_npz(path: str | os.PathLike[str]) -> MemorySnapshot:
    """Read a ``.npz`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Raises:
        UnsupportedInputError: a member is an object (pickled) array.
        CorruptFileError: the file is truncated or damaged: a member fails its CRC-32, or is
            not named ``<tensor name>.npy``, or its array header does not fit its size.
    """
    snap, verify = open_npz(path)
    verify()
    return snap


def open_npz(path: str | os.PathLike[str]) -> tuple[MemorySnapshot, Callable[[], None]]:
    """:func:`read_npz`, with the checksum verification handed back to run later.

    Every member must be named ``<tensor name>.npy`` (see
    :func:`rlarrow.io.memory.tensor_name_problem`), with the same name in its local header
    as in the archive's directory. For an uncompressed export (memory-mapped), ``verify()``
    reads the members through and checks their CRC-32s, raising :class:`CorruptFileError`
    on a mismatch; it may run in another thread (zlib releases the GIL) while the arrays
    are used, and must have passed before anything made from them is trusted. For
    compressed exports ``np.load`` has checked them already and ``verify`` does nothing.
    """
    path = Path(path)
    tensors: dict[str, np.ndarray] = {}
    try:
        with open(path, "rb") as fh:  # the one open (and our handle: np.load leaks its own on a damaged zip)
            members = zip_members(path, fh) if is_zip(path, fh) else []
            for member in members:
                _check_name(path, member.name)
            if members and all(m.stored for m in members):
                whole = map_file(fh)
                mapped = _mapped(path, members, fh, whole)
                return (MemorySnapshot(mapped, name=path.stem, path=os.fspath(path), source_format="npz"),
                        zip_crc_check(path, members, whole))
            fh.seek(0)
            loaded = np.load(fh, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise UnsupportedInputError(path, "a single .npy array, not an .npz of named tensors")
            with loaded as npz:
                for name in npz.files:
                    tensors[name] = npz[name]
    except (FileNotFoundError, RLArrowError):
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


def _check_name(path: Path, member: str) -> None:
    """Refuse a member that is not ``<tensor name>.npy`` (np.savez names members so)."""
    problem = None if member.endswith(".npy") else "not '<tensor name>.npy'"
    if problem is None:
        problem = tensor_name_problem(member[:-4])
    if problem is not None:
        raise CorruptFileError(path, f"member {member!r} cannot name a tensor ({problem}): np.savez "
                               "writes '<tensor name>.npy', so the file is damaged or not a memory export; "
                               "export the memory again")


def _mapped(path: Path, members: list[ZipMember], fh: IO[bytes], whole: mmap.mmap | None
            ) -> dict[str, np.ndarray]:
    """The (stored) members of an ``.npz`` as read-only views of ``whole`` (the file's map), by tensor name.

    Raises what :func:`read_npz` documents for damage and object arrays (their checksums
    are :func:`open_npz`'s ``verify``).
    """
    out: dict[str, np.ndarray] = {}
    for member in members:
        end = member.start + member.size
        fh.seek(member.start)
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        except (ValueError, SyntaxError, TypeError, tokenize.TokenError) as exc:  # a Python literal
            raise CorruptFileError(path, f"member {member.name!r}: damaged .npy header "
                                   f"({exc})") from exc
        if dtype.hasobject:
            raise UnsupportedInputError(path, f"member {member.name!r} holds an object (pickled) array; "
                                        "refused without unpickling it")
        offset = fh.tell()
        if offset + math.prod(shape) * dtype.itemsize != end:
            raise CorruptFileError(path, f"member {member.name!r}: its array header does not match "
                                   "its size")
        if math.prod(shape) == 0 or whole is None:
            array = np.empty(shape, dtype, order="F" if fortran else "C")
        else:
            flat = np.frombuffer(whole, dtype=dtype, count=math.prod(shape), offset=offset)
            array = flat.reshape(shape, order="F" if fortran else "C")
        out[member.name[:-4]] = array
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
        raise ArgumentError(f"{path}: an .npz export's name must end in .npz (np.savez would add it)")
    arrays = export_tensors(data)
    with atomic_output(path, overwrite=overwrite) as tmp:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
    return path
