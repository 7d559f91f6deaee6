"""skrl/rofunc replay-memory exports as ``.npz`` files (one member per tensor).

Loaded with ``allow_pickle=False``: object arrays are refused, never unpickled.
:func:`write_npz` writes what skrl's ``Memory.save(format="npz")`` writes (``np.savez``,
uncompressed, names sorted), byte for byte.
"""

from __future__ import annotations

import os
import zipfile
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
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise CorruptFileError(path, f"not a readable .npz ({exc})") from exc
    return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="npz")


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
