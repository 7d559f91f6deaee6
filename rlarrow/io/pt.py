"""skrl/rofunc replay-memory exports as ``.pt`` files (a dict of tensors).

Files are loaded with ``torch.load(..., weights_only=True)`` only: a pickle that would
construct anything but tensors and plain containers is refused before it runs.

:func:`write_pt` writes what skrl's ``Memory.save(format="pt")`` writes: ``torch.save`` of a
dict of tensors, names sorted; with the same file name the bytes are the same.

Example:
    >>> from rlarrow.io import pt  # doctest: +SKIP
    >>> snapshot = pt.read_pt("memories/26-11-22_13-53-58-633722_memory_0x7fc63c2dcdd0.pt")  # doctest: +SKIP
    >>> pt.write_pt(snapshot, "out/memories/" + snapshot.name + ".pt")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
import struct
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow._deps import require
from rlarrow.errors import CorruptFileError, UnsupportedInputError
from rlarrow.io.memory import MemorySnapshot, atomic_output, check_mapping, export_tensors

__all__ = ["read_pt", "write_pt"]


def read_pt(path: str | os.PathLike[str], *, mmap: bool = False) -> MemorySnapshot:
    """Read a ``.pt`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Raises:
        UnsupportedInputError: the file's pickle asks for code or types that are not
            tensors (nothing of it is run), or it does not hold a dict of tensors.
        CorruptFileError: the file is truncated or damaged.
        MissingDependencyError: torch is not installed.

    ``mmap=True`` maps the file's tensors instead of reading them (zip-format files only;
    the arrays then read from the file as they are used).
    """
    torch = require("torch", feature="reading .pt memory exports")
    path = Path(path)
    try:
        with warnings.catch_warnings():
            # torch's note about legacy pickle protocols; the safe unpickler still decides
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            data = torch.load(path, map_location="cpu", weights_only=True,
                              mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as exc:
        raise UnsupportedInputError(
            path, "refused: its pickle asks for something other than tensors and plain containers, "
            f"which could run code, so it was not loaded ({str(exc).splitlines()[0]})") from exc
    except (EOFError, zipfile.BadZipFile, RuntimeError, ValueError, OSError, IndexError, KeyError,
            TypeError, AttributeError, AssertionError, struct.error) as exc:
        # a damaged pickle fails inside torch's safe unpickler in all of these ways
        if isinstance(exc, FileNotFoundError):
            raise
        raise CorruptFileError(path, f"not a readable torch file ({exc})") from exc
    mapping = check_mapping(path, data, "torch.load of a .pt memory export")
    tensors = {}
    for name, value in mapping.items():
        if not isinstance(value, torch.Tensor):
            raise UnsupportedInputError(path, f"{name!r} is a {type(value).__name__}, not a tensor")
        if value.dtype == torch.bfloat16:
            raise UnsupportedInputError(path, f"{name!r} is bfloat16, which NumPy and Parquet cannot "
                                        "hold exactly; convert it to float32 first")
        tensors[name] = np.asarray(value.detach().cpu().numpy())
    return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="pt")


def write_pt(data: MemorySnapshot | Mapping[str, Any], path: str | os.PathLike[str], *,
             overwrite: bool = False) -> Path:
    """Write tensors ``(memory_size, num_envs, *size)`` as skrl's ``.pt`` memory export.

    Args:
        data: a snapshot, or a mapping of names to NumPy arrays or torch tensors.
        path: the file to write (written atomically: a failure leaves no partial file).
        overwrite: replace an existing file.

    Returns:
        The path written.
    """
    torch = require("torch", feature="writing .pt memory exports")
    tensors = {}
    for name, value in export_tensors(data).items():
        tensors[name] = torch.from_numpy(value if value.flags.writeable and value.flags.c_contiguous
                                         else np.array(value, order="C"))
    with atomic_output(path, overwrite=overwrite) as tmp:
        torch.save(tensors, tmp)
    return Path(path)
