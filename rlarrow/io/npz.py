"""skrl/rofunc replay-memory exports as ``.npz`` files (one member per tensor).

Loaded with ``allow_pickle=False``: object arrays are refused, never unpickled.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from rlarrow.errors import CorruptFileError, UnsupportedInputError
from rlarrow.io.memory import MemorySnapshot

__all__ = ["read_npz"]


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
