"""HDF5 files read without trusting them: what rlarrow's HDF5 importers share.

Minari's HDF5 backend (:mod:`rlarrow.io.minari`) and the D4RL and robomimic layouts
(:mod:`rlarrow.io.hdf5`) read HDF5 through h5py (the ``hdf5`` extra), which we prefer to a
reader of our own: HDF5's format is large, and h5py wraps the reference library. This module
holds what they share:

* :func:`open_hdf5`: the file opened read-only, an error naming the file when it is not HDF5
  or is damaged, and the extra to install when h5py is missing;
* :func:`guarded`: the errors h5py raises on damaged data (``OSError``, ``KeyError``,
  ``ValueError``, ...) turned into a :class:`~rlarrow.core.errors.CorruptFileError` that names
  the file and what was being read;
* :func:`plain`: an attribute's value as plain Python (NumPy scalars and arrays, bytes that
  are UTF-8 text), for run and episode metadata;
* :func:`leaves`: the datasets below a group, by path, in the file's order;
* :func:`chunk_rows`: how many rows to read at a time so that a chunk stays within a byte budget
  (the importers never read a whole file, nor a whole long episode, at once).

Example:
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.hdf5"
    >>> _ = p.write_bytes(b"not hdf5")
    >>> is_hdf5_file(p)
    False
    >>> plain(b"text"), plain([1, 2])
    ('text', [1, 2])
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.errors import CorruptFileError, RLArrowError, UnsupportedInputError

__all__ = [
    "CHUNK_BYTES",
    "HDF5_SIGNATURE",
    "HDF5_SUFFIXES",
    "chunk_rows",
    "guarded",
    "is_hdf5_file",
    "leaves",
    "open_hdf5",
    "plain",
]

#: the first 8 bytes of an HDF5 file (at offset 0, or 512, 1024, ... after a user block)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: the suffixes HDF5 files are given
HDF5_SUFFIXES = (".hdf5", ".h5", ".he5", ".hdf")
#: what the importers read at a time, over all of a chunk's datasets
CHUNK_BYTES = 32 << 20

#: what h5py raises on damaged files and data: the HDF5 library's errors come up as
#: OSError/RuntimeError/KeyError/ValueError, its type conversions as TypeError
_H5_ERRORS = (
    OSError,
    RuntimeError,
    KeyError,
    ValueError,
    TypeError,
    IndexError,
    AttributeError,
    OverflowError,
)


def is_hdf5_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file with HDF5's signature: at its start, or after a user block.

    HDF5 allows a user block of 512, 1024, 2048, ... bytes before the signature; up to 1 MiB
    is looked at (a few 8-byte reads).
    """
    try:
        with open(path, "rb") as fh:
            for offset in (0, *(512 << k for k in range(12))):
                fh.seek(offset)
                head = fh.read(8)
                if len(head) < 8:
                    return False
                if head == HDF5_SIGNATURE:
                    return True
    except OSError:
        return False
    return False


@contextmanager
def guarded(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Turn h5py's errors inside the block into a :class:`CorruptFileError` naming ``path`` and ``what``.

    rlarrow's own errors pass through unchanged.

    Example:
        >>> try:
        ...     with guarded("/data/x.hdf5", "the episode's rewards"):
        ...         raise KeyError("Unable to open object")
        ... except CorruptFileError as exc:
        ...     print(str(exc).split(":")[0])
        /data/x.hdf5
    """
    try:
        yield
    except RLArrowError:
        raise
    except _H5_ERRORS as exc:
        raise CorruptFileError(
            path,
            f"{what} cannot be read ({type(exc).__name__}: {exc}); the file is "
            "damaged or was not written by the tool its layout names: restore it or "
            "write it again",
        ) from exc


@contextmanager
def open_hdf5(path: str | os.PathLike[str]) -> Iterator[Any]:
    """``path`` opened read-only with h5py (an ``h5py.File``), closed when the block ends.

    Raises:
        MissingDependencyError: h5py is not installed (``pip install 'rlarrow[hdf5]'``).
        UnsupportedInputError: not an HDF5 file.
        CorruptFileError: an HDF5 file the library cannot open.
    """
    from rlarrow.core.deps import require

    h5py = require("h5py", feature="reading HDF5 files (Minari's HDF5 backend, D4RL, robomimic)")
    p = Path(path)
    if not is_hdf5_file(p):
        raise UnsupportedInputError(p, "not an HDF5 file (no HDF5 signature)")
    try:
        handle = h5py.File(p, "r")
    except _H5_ERRORS as exc:
        raise CorruptFileError(
            p,
            f"an HDF5 file that cannot be opened ({type(exc).__name__}: {exc}); it is "
            "truncated or damaged: restore it or write it again",
        ) from exc
    try:
        yield handle
    finally:
        try:
            handle.close()
        except _H5_ERRORS:  # closing a damaged file can fail too; nothing was written to it
            pass


def plain(value: Any) -> Any:
    """An HDF5 attribute's value as plain Python (for metadata).

    NumPy scalars and arrays become numbers and lists, UTF-8 bytes text (other bytes stay
    bytes), h5py's empty value None.

    Example:
        >>> import numpy as np
        >>> plain(np.float32(0.5)), plain(np.array([b"a", b"b"])), plain(bytes([255])) == bytes([255])
        (0.5, ['a', 'b'], True)
    """
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [plain(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__name__ == "Empty":  # h5py.Empty: an attribute with no value
        return None
    return value


def leaves(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The datasets below ``group`` as ``(path, dataset)``, in the file's order (h5py's iteration order).

    Paths are relative to ``group``, parts joined with ``/`` (``"infos/qpos"``).
    """
    out: list[tuple[str, Any]] = []
    for name in group:
        node = group[name]
        path = f"{prefix}{name}"
        if hasattr(node, "keys"):
            out += leaves(node, path + "/")
        elif hasattr(node, "shape"):
            out.append((path, node))
    return out


def chunk_rows(datasets: list[Any], budget: int = CHUNK_BYTES) -> int:
    """Rows to read at a time so that one row of each of ``datasets`` times it stays within ``budget`` bytes.

    At least 1; a dataset's row is its size divided by its first dimension.

    Example:
        >>> import numpy as np
        >>> class D:
        ...     shape, dtype = (1000, 256), np.dtype("float32")
        >>> chunk_rows([D()], budget=1 << 20)
        1024
    """
    per_row = 0
    for ds in datasets:
        shape = tuple(ds.shape or ())
        itemsize = np.dtype(ds.dtype).itemsize if ds.dtype.kind != "O" else 64
        per_row += itemsize * int(np.prod(shape[1:], dtype=np.int64))
    return max(1, budget // max(1, per_row))
