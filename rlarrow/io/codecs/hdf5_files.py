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
  (the importers never read a whole file, nor a whole long episode, at once);
* :func:`check_contained`: what :func:`open_hdf5` checks before anything is read. Nothing
  outside the input is read: external links, virtual datasets (VDS) and external raw storage
  are refused (:class:`HDF5RefusedError`); ``allow_links=True`` lets external links and VDS
  sources through when they name files inside the input's own directory (relative names, no
  ``..``, symlinks resolved), each such file checked the same way. Work is bounded by the
  file: every dataset larger than :data:`SMALL_ELEMENTS` elements or :data:`SMALL_BYTES`
  must hold its data (every chunk written, contiguous storage allocated), in chunks of at most
  :data:`MAX_CHUNK_BYTES`, compressed at most :data:`MAX_RATIO` to 1: a dataset declared huge
  and never written (a "sparse bomb") is refused before a row is read.

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

from rlarrow.core.errors import CorruptFileError, InvalidInputError, RLArrowError, UnsupportedInputError

__all__ = ["HDF5RefusedError"]

#: the first 8 bytes of an HDF5 file (at offset 0, or 512, 1024, ... after a user block)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: the suffixes HDF5 files are given
HDF5_SUFFIXES = (".hdf5", ".h5", ".he5", ".hdf")
#: what the importers read at a time, over all of a chunk's datasets
CHUNK_BYTES = 32 << 20

#: a dataset of at most this many elements (and :data:`SMALL_BYTES`) need not hold its data:
#: HDF5 gives its fill value where nothing was written, and so little is bounded work
SMALL_ELEMENTS = 4096
#: ... and at most this many bytes
SMALL_BYTES = 1 << 20
#: the largest chunk read (HDF5 decompresses a whole chunk to read any row of it)
MAX_CHUNK_BYTES = 64 << 20
#: the most a dataset's values may outnumber its bytes in the file (deflate reaches about 1000:1
#: on zeros; a dataset declared far larger than what it stores is refused)
MAX_RATIO = 4096
#: how deep external links and VDS sources may lead from file to file (with ``allow_links``)
_MAX_DEPTH = 8
#: what makes HDF5 look for linked files elsewhere first (with ``allow_links``, refused when set)
_PREFIX_VARIABLES = ("HDF5_EXT_PREFIX", "HDF5_VDS_PREFIX")

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


class HDF5RefusedError(InvalidInputError):
    """An HDF5 file that reaches outside itself, or declares far more data than it holds.

    Raised by :func:`open_hdf5` (:func:`check_contained`) before anything of the file is read;
    the message names the file, the dataset or link, and what to do.
    """


@contextmanager
def open_hdf5(path: str | os.PathLike[str], *, allow_links: bool = False) -> Iterator[Any]:
    """``path`` opened read-only with h5py (an ``h5py.File``), checked, closed when the block ends.

    Every link and dataset of the file is checked first (:func:`check_contained`): nothing
    outside the input is read, and no dataset declares more than the file holds.

    Args:
        path: the HDF5 file.
        allow_links: let external links and virtual datasets whose files lie in ``path``'s own
            directory through (see :func:`check_contained`).

    Raises:
        MissingDependencyError: h5py is not installed (``pip install 'rlarrow[hdf5]'``).
        UnsupportedInputError: not an HDF5 file.
        CorruptFileError: an HDF5 file the library cannot open.
        HDF5RefusedError: an external link, virtual dataset or external storage (see above), or
            a dataset that declares far more than the file holds.
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
        check_contained(handle, p, allow_links=allow_links)
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


def check_contained(handle: Any, path: str | os.PathLike[str], *, allow_links: bool = False) -> None:
    """Refuse an HDF5 file that would make a reader look outside it, or do unbounded work.

    Walks every link of the open file ``handle`` without following any (h5py's
    ``visititems_links``) and every dataset it reaches by hard links; soft links stay inside
    the file and are fine. Refused, with :class:`HDF5RefusedError`:

    * an **external link**, and a **virtual dataset** (its sources are other files): unless
      ``allow_links``, and then only when each file named is a relative name without ``..``
      that resolves (symlinks followed) inside the directory of ``path``, exists, and passes
      these same checks (``HDF5_EXT_PREFIX``/``HDF5_VDS_PREFIX``, which make HDF5 look
      elsewhere first, must be unset); a VDS must also map every one of its elements;
    * a dataset with **external raw storage** (``external=``: its bytes live in other files),
      always;
    * a dataset of more than :data:`SMALL_ELEMENTS` elements or :data:`SMALL_BYTES` bytes that
      does not hold its data: chunks never written, contiguous storage never allocated (what
      HDF5 would fill in), chunks over :data:`MAX_CHUNK_BYTES`, or more than :data:`MAX_RATIO`
      times its size in the file. So a few KB of file never import millions of rows.

    Nothing is read but the file's structure (links, dataset headers, chunk indexes).

    Example:
        >>> import h5py, numpy as np, pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.hdf5"
        >>> with h5py.File(p, "w") as f:
        ...     f["actions"] = np.zeros((10, 2))
        ...     _ = f.create_dataset("rewards", shape=(10**9,), dtype="f4", chunks=(4096,))
        >>> with h5py.File(p, "r") as f:
        ...     try:
        ...         check_contained(f, p)
        ...     except HDF5RefusedError as exc:
        ...         print(str(exc).split(";")[0].split(": ", 1)[1])
        /rewards declares 1000000000 values (4000000000 bytes) but holds none of its 244141 chunks
    """
    p = Path(path)
    _Check(p, allow_links).file(handle, p, 0)


class _Check:
    """One walk of a file and of the files its allowed links lead to (each once)."""

    def __init__(self, top: Path, allow_links: bool) -> None:
        self.top, self.allow = top, allow_links
        self.root = Path(os.path.realpath(top.parent))
        self.seen: set[str] = {os.path.realpath(top)}

    def refuse(self, path: Path, what: str, fix: str | None = None, *,
               outside: bool = True) -> HDF5RefusedError:
        """The error: ``what`` is wrong in ``path`` (the input, or a file it links to), and ``fix``."""
        where = path if path == self.top else f"{self.top} (through {path})"
        fix = fix or ("copy the linked data into the file itself (read it with h5py, write it as a "
                      "dataset of this file), or, for links to files beside it, pass "
                      "allow_hdf5_links=True")
        why = "rlarrow reads nothing outside its input" if outside else "refused before anything is read"
        return HDF5RefusedError(where, f"{what}; {why}: {fix}")

    def bound(self, path: Path, what: str, fix: str) -> HDF5RefusedError:
        """A refusal for work out of proportion to the file (not for reaching outside it)."""
        return self.refuse(path, what, fix, outside=False)

    def file(self, handle: Any, path: Path, depth: int) -> None:
        import h5py

        found: list[tuple[str, Any]] = []
        with guarded(path, "the file's links"):
            handle.visititems_links(lambda name, link: found.append((name, link)))
        done: set[Any] = set()
        for name, link in found:
            where = f"/{name}"
            if isinstance(link, h5py.SoftLink):
                continue  # a path inside this file: what it names is checked where it is hard-linked
            if isinstance(link, h5py.ExternalLink):
                what = f"{where} is an HDF5 external link to {link.filename!r} ({link.path})"
                if not self.allow:
                    raise self.refuse(path, what)
                self.linked(path, link.filename, what, depth)
                continue
            if not isinstance(link, h5py.HardLink):
                raise self.refuse(path, f"{where} is a user-defined HDF5 link ({type(link).__name__})",
                                  "rlarrow follows hard and soft links only; write the file without it")
            with guarded(path, f"{where}'s header"):
                node = handle[name]
                if not isinstance(node, h5py.Dataset) or node.id in done:
                    continue
                done.add(node.id)
                self.dataset(node, path, where, depth)

    def dataset(self, ds: Any, path: Path, where: str, depth: int) -> None:
        from h5py import h5d

        plist = ds.id.get_create_plist()
        layout = plist.get_layout()
        size = int(np.prod(ds.shape, dtype=object)) if ds.shape is not None else 0
        itemsize = int(ds.dtype.itemsize)
        declared = size * itemsize
        if layout == h5d.VIRTUAL:
            what = f"{where} is a virtual dataset (VDS) whose data lies in other datasets"
            if not self.allow:
                raise self.refuse(path, what)
            mapped = 0
            for m in ds.virtual_sources():
                mapped += int(m.vspace.get_select_npoints())
                if m.file_name != ".":  # (".": this file, whose datasets are all checked)
                    self.linked(path, m.file_name, f"{what}, in {m.file_name!r} ({m.dset_name})", depth)
            if mapped < size:
                raise self.bound(path, f"{where} is a virtual dataset of {size} values that maps only "
                                 f"{mapped}: the rest would be made up of fill values",
                                 "write the file again with the data the dataset declares")
            return
        if plist.get_external_count():
            files = sorted({os.fsdecode(e[0]) for e in ds.external or []})
            raise self.refuse(path, f"{where} keeps its values in external raw storage ({files[:3]})",
                              "write the file again with the dataset's data inside it (h5py: "
                              "create_dataset without external=)")
        if size <= SMALL_ELEMENTS and declared <= SMALL_BYTES:
            return
        stored = int(ds.id.get_storage_size())
        head = f"{where} declares {size} values ({declared} bytes)"
        fix = "the file was not written completely: restore it or write it again"
        if layout == h5d.CHUNKED:
            chunks = tuple(int(c) for c in ds.chunks)
            chunk_bytes = int(np.prod(chunks, dtype=object)) * itemsize
            if chunk_bytes > MAX_CHUNK_BYTES:
                raise self.bound(path, f"{where} has chunks of {chunk_bytes} bytes, over rlarrow's limit of "
                                 f"{MAX_CHUNK_BYTES} (HDF5 decompresses a whole chunk to read a row of it)",
                                 "write the dataset again with smaller chunks (h5repack -l CHUNK=...)")
            need = 1
            for dim, chunk in zip(ds.shape, chunks, strict=True):
                need *= -(-int(dim) // chunk)
            written = int(ds.id.get_num_chunks())
            if written < need:
                held = f"only {written}" if written else "none"
                raise self.bound(path, f"{head} but holds {held} of its {need} chunks", fix)
        elif layout == h5d.CONTIGUOUS and stored < declared:
            raise self.bound(path, f"{head} but holds {stored} bytes of them", fix)
        if declared > MAX_RATIO * stored:
            raise self.bound(path, f"{head} from {stored} bytes in the file, more than rlarrow's limit of "
                             f"{MAX_RATIO}:1", "write the dataset again with the values it means "
                             "(a compression this strong is a file made to expand, not data)")

    def linked(self, path: Path, name: Any, what: str, depth: int) -> None:
        """A file an allowed link names: inside the input's directory, checked the same way."""
        import h5py

        text = os.fsdecode(name)
        inside = "must name a file inside the input's directory, relative and without '..'"
        set_prefix = [v for v in _PREFIX_VARIABLES if os.environ.get(v)]
        if set_prefix:
            raise self.refuse(path, f"{what}, and {set_prefix[0]} is set (HDF5 would look there first)",
                              f"unset {set_prefix[0]} to import with allow_hdf5_links=True")
        parts = Path(text).parts
        if not text or os.path.isabs(text) or ".." in parts or "%" in text or "\\" in text:
            raise self.refuse(path, what, f"with allow_hdf5_links=True a link {inside}; copy the data "
                              "into the file instead")
        target = Path(os.path.realpath(path.parent / text))
        if not target.is_relative_to(self.root):
            raise self.refuse(path, f"{what}, which resolves to {target}",
                              f"with allow_hdf5_links=True a link {inside} ({self.root}), symlinks resolved; "
                              "copy the data into the file instead")
        if not target.is_file() or not is_hdf5_file(target):
            raise self.refuse(path, f"{what}, which is not an HDF5 file beside it",
                              "restore the linked file next to the input")
        if os.fspath(target) in self.seen:
            return
        if depth >= _MAX_DEPTH:
            raise self.refuse(path, f"{what}: links lead more than {_MAX_DEPTH} files deep",
                              "copy the data into the file")
        self.seen.add(os.fspath(target))
        try:
            linked = h5py.File(target, "r")
        except _H5_ERRORS as exc:
            raise CorruptFileError(target, f"linked from {path}, cannot be opened ({type(exc).__name__}: "
                                   f"{exc}): restore it") from exc
        with linked:
            self.file(linked, target, depth + 1)
