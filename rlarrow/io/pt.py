"""skrl/rofunc replay-memory exports as ``.pt`` files (a dict of tensors).

Files are loaded with ``torch.load(..., weights_only=True)`` only: a pickle that would
construct anything but tensors and plain containers is refused before it runs.

Example:
    >>> from rlarrow.io import pt  # doctest: +SKIP
    >>> snapshot = pt.read_pt("memories/26-11-22_13-53-58-633722_memory_0x7fc63c2dcdd0.pt")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np

from rlarrow._deps import require
from rlarrow.errors import CorruptFileError, UnsupportedInputError
from rlarrow.io.memory import MemorySnapshot, check_mapping

__all__ = ["read_pt"]


def read_pt(path: str | os.PathLike[str]) -> MemorySnapshot:
    """Read a ``.pt`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Raises:
        UnsupportedInputError: the file's pickle asks for code or types that are not
            tensors (nothing of it is run), or it does not hold a dict of tensors.
        CorruptFileError: the file is truncated or damaged.
        MissingDependencyError: torch is not installed.
    """
    torch = require("torch", feature="reading .pt memory exports")
    path = Path(path)
    try:
        with warnings.catch_warnings():
            # torch's note about legacy pickle protocols; the safe unpickler still decides
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsupportedInputError(
            path, "refused: its pickle asks for something other than tensors and plain containers, "
            f"which could run code, so it was not loaded ({str(exc).splitlines()[0]})") from exc
    except (EOFError, zipfile.BadZipFile, RuntimeError, ValueError, OSError) as exc:
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
