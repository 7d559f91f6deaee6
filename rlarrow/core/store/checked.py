"""Reading a store's Parquet files with every page checked: the one definition every read path uses.

The store writes a CRC-32 of every Parquet page (:func:`~rlarrow.core.store.files.open_parquet`).
pyarrow checks them when asked (``page_checksum_verification``); DuckDB and Polars never do.
So there are two ways a reader here sees only undamaged values:

- read through pyarrow with the checks on: :func:`open_checked` (a ``ParquetFile`` whose
  reads check every page and raise :class:`~rlarrow.core.errors.CorruptFileError` naming
  the file, never a pyarrow error or an ``OSError``), and ``Store.dataset`` / ``Store.read``;
- or hand another engine only files checked whole before: :func:`verify_pages` reads every
  page of a file once and records it as verified, keyed by the file's device, inode, size
  and modification time, so a file changed afterwards (a new inode by a rename, as the store
  writes, or new bytes, which move the modification time) is checked again. The record is
  kept for the process and, so that each ``rlarrow sql`` does not read every file again, in
  the user's cache (:func:`record_path`: ``$RLARROW_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/rlarrow``, else ``~/.cache/rlarrow``; one line per file, appended), never
  in the store, which a reader does not write; another process trusts a recorded check for
  :data:`RECHECK_SECONDS` (a day), so damage that changes neither size nor modification time
  (bit rot, a copy that keeps the time) is found by the next check after that, and at once
  by ``Store.read`` and the loaders, which check every page they read. Set
  ``RLARROW_CACHE_DIR=off`` to keep it in the process only. A record that cannot be read or
  written is left aside: files are then checked again, nothing is trusted that was not checked.

Example:
    >>> import pathlib, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = pathlib.Path(tempfile.mkdtemp(), "part-0.parquet")
    >>> pq.write_table(pa.table({"x": [1, 2]}), path, write_page_checksum=True)
    >>> verify_pages(path)  # checked once; a second call answers from the record
    >>> with open_checked(path) as pf:
    ...     pf.read_row_group(0).column("x").to_pylist()
    [1, 2]
    >>> data = bytearray(path.read_bytes()); data[40] ^= 0xFF
    >>> path.unlink(); _ = path.write_bytes(bytes(data))  # (a new file, as the store writes them)
    >>> verify_pages(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rlarrow.core.errors.CorruptFileError: ...part-0.parquet: damaged Parquet (...)...
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core.errors import CorruptFileError

__all__ = ["open_checked"]

#: What pyarrow raises for a damaged file (a garbled column name is a UnicodeDecodeError).
READ_ERRORS: tuple[type[BaseException], ...] = (pa.ArrowException, OSError, UnicodeDecodeError)

#: (check, device, inode, size, mtime_ns) of the files found whole by a check (not the change
#: time: a reader pinning a file by a hard link moves it)
#: (:data:`PAGES`: :func:`verify_pages`; :data:`POLARS`: Polars read them)
_VERIFIED: set[tuple[int, ...]] = set()
PAGES, POLARS = 0, 1
#: the record file :data:`_VERIFIED` was loaded from (None: not yet, "": none)
_LOADED: list[str] = []
#: a file changed this recently is checked again at every read, never recorded: a file replaced
#: within one tick of the file system's clock by one of the same size may reuse the inode and get
#: the same modification time (git's "racy clean" problem, solved as git does)
_RACY_SECONDS = 2.0
#: a record grown past this is started again (about 600,000 files)
_RECORD_LIMIT = 32 << 20
#: how long a check recorded by another process is trusted, in seconds: a file damaged in place
#: without a change to its size or modification time (bit rot, a copy that keeps the time) is
#: checked again a day after its last check at the latest (RLARROW_RECHECK_SECONDS to change it)
RECHECK_SECONDS = 24 * 3600


def record_path() -> Path | None:
    """The file keeping :func:`verify_pages`'s record across processes; None: ``RLARROW_CACHE_DIR=off``."""
    base = os.environ.get("RLARROW_CACHE_DIR")
    if base is not None and base.strip().lower() in ("off", "0", "none", ""):
        return None
    if base is None:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg or home, "rlarrow")
    return Path(base) / "verified-parquet-v2.txt"


def _load_record() -> None:
    """Add the cross-process record to :data:`_VERIFIED` (once per process and record file)."""
    path = record_path()
    where = "" if path is None else os.fspath(path)
    if _LOADED and _LOADED[0] == where:
        return
    _LOADED[:] = [where]
    if path is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(_RECORD_LIMIT + 1)
    except OSError:
        return
    if len(data) > _RECORD_LIMIT:
        return
    try:
        recheck = float(os.environ.get("RLARROW_RECHECK_SECONDS", RECHECK_SECONDS))
    except ValueError:
        recheck = RECHECK_SECONDS
    oldest = time.time() - recheck
    for line in data.split(b"\n"):
        parts = line.split()
        if len(parts) == 6 and all(p.isdigit() for p in parts) and int(parts[5]) >= oldest:
            _VERIFIED.add(tuple(int(p) for p in parts[:5]))


def _remember(key: tuple[int, ...]) -> None:
    """Record ``key`` for this process and append it to the record file (one ``write``: atomic)."""
    if len(_VERIFIED) > 1_000_000:
        _VERIFIED.clear()
    _VERIFIED.add(key)
    path = record_path()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size > _RECORD_LIMIT:
            os.ftruncate(fd, 0)
        os.write(fd, (" ".join(map(str, (*key, int(time.time())))) + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)

_VIEWS = ".rlarrow-views"


def shown_path(path: str | os.PathLike[str]) -> Path:
    """The store file a path names: a reader's pinned link (``.rlarrow-views/...``) is its table's file.

    Example:
        >>> shown_path("/s/.rlarrow-views/host-1-ab/steps/part-0.parquet").as_posix()
        '/s/steps/part-0.parquet'
    """
    p = Path(path)
    parts = p.parts
    if _VIEWS in parts:
        root = Path(*parts[:parts.index(_VIEWS)])
        return root / p.parent.name / p.name
    return p


def damaged_file(path: str | os.PathLike[str], exc: BaseException) -> CorruptFileError:
    """The error a damaged store file raises on every read path (it names the file and the fix)."""
    shown = shown_path(path)
    store = shown.parent.parent
    return CorruptFileError(shown, f"damaged Parquet ({type(exc).__name__}: {exc}); `rlarrow info {store}` "
                            f"names every damaged file and `rlarrow repair {store} --apply` sets them aside")


class _CheckedFile(pq.ParquetFile):  # type: ignore[misc]  # (pyarrow ships no types)
    """A ``ParquetFile`` whose reads check page CRCs and raise :class:`CorruptFileError`."""

    _path: str

    def read_row_group(self, *args: Any, **kwargs: Any) -> pa.Table:
        try:
            return super().read_row_group(*args, **kwargs)
        except READ_ERRORS as exc:
            raise damaged_file(self._path, exc) from exc

    def read_row_groups(self, *args: Any, **kwargs: Any) -> pa.Table:
        try:
            return super().read_row_groups(*args, **kwargs)
        except READ_ERRORS as exc:
            raise damaged_file(self._path, exc) from exc

    def read(self, *args: Any, **kwargs: Any) -> pa.Table:
        try:
            return super().read(*args, **kwargs)
        except READ_ERRORS as exc:
            raise damaged_file(self._path, exc) from exc


def open_checked(path: str | os.PathLike[str], filesystem: Any = None, *, metadata: Any = None,
                 pre_buffer: bool = False, buffer_size: int = 0) -> pq.ParquetFile:
    """``path`` as a ``ParquetFile`` whose reads check every page against its CRC-32.

    Its ``read_row_group``, ``read_row_groups`` and ``read`` raise
    :class:`~rlarrow.core.errors.CorruptFileError` naming the file for any damage.
    ``metadata``: the file's footer read before (``ParquetFile.metadata``), so that it is not
    fetched again; ``pre_buffer``: fetch a read's column chunks in a few concurrent, coalesced
    requests (pyarrow's option, for object storage, where each request costs a round trip);
    ``buffer_size``: read column chunks as streams of that many bytes at a time, not whole (a
    read of a row group's first rows then fetches its first pages only).

    Raises:
        CorruptFileError: the footer cannot be read (the file is missing, cut or damaged).
    """
    try:
        pf = _CheckedFile(os.fspath(path), filesystem=filesystem, page_checksum_verification=True,
                          metadata=metadata, pre_buffer=pre_buffer, buffer_size=buffer_size)
    except READ_ERRORS as exc:
        raise damaged_file(path, exc) from exc
    pf._path = os.fspath(path)
    return pf


def checked_format() -> Any:
    """A ``pyarrow.dataset`` Parquet format that checks every page it reads against its CRC-32.

    For datasets scanned by other engines (DuckDB, Polars) over a store's files where no
    whole-file check runs first (a store on object storage): a damaged page fails the scan
    with pyarrow's error, never hands on changed values.
    """
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))


def _check_statistics(path: str | os.PathLike[str], meta: Any, table: pa.Table) -> None:
    """The footer's statistics of a row group's plain columns are those of the values read.

    The footer has no checksum, and engines skip row groups by these statistics: damaged,
    they would leave rows out of a filtered query without an error.
    """
    for j in range(meta.num_columns):
        try:
            name = _statistics_differ(meta.column(j), table)
        except (pa.ArrowException, OSError, ValueError) as exc:  # (a text min that is no UTF-8, say)
            raise damaged_file(path, exc) from exc
        if name is not None:
            raise damaged_file(path, ValueError(f"the footer's statistics of column {name!r} are not "
                                                "its values'"))


def _statistics_differ(chunk: Any, table: pa.Table) -> str | None:
    """The column's name if a column chunk's statistics are not those of its values in ``table``."""
    import pyarrow.compute as pc

    name: str = chunk.path_in_schema
    stats = chunk.statistics
    if stats is None or name not in table.column_names:
        return None  # (a nested column's leaves: the filters engines push down are on plain ones)
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_boolean(kind)):
        return None
    if stats.has_null_count and stats.null_count != column.null_count:
        return name
    if stats.has_min_max:
        low, high = stats.min, stats.max
        if pa.types.is_float16(kind):
            # (pyarrow has no min_max of half floats, and gives their statistics as the two raw
            # bytes: both are compared in float32, which holds every half float exactly)
            import numpy as np

            column = column.cast(pa.float32())
            low, high = (float(np.frombuffer(v, "<f2")[0]) if isinstance(v, bytes) and len(v) == 2 else v
                         for v in (low, high))
        got = pc.min_max(column).as_py()
        if not (_same(low, got["min"]) and _same(high, got["max"])):
            return name
    return None


def _same(recorded: Any, actual: Any) -> bool:
    """A recorded statistic equals the value computed (NaN aside: writers leave it out)."""
    nan = actual != actual or recorded != recorded  # noqa: PLR0124 - NaN is the one value unequal to itself
    if isinstance(actual, float) and nan:
        return True
    return bool(recorded == actual)


def checked_once(path: str | os.PathLike[str], check: int, run: Callable[[], object]) -> None:
    """Run ``run`` (a check of ``path`` that raises on damage) unless ``path``, unchanged, passed it before.

    ``check``: which check (:data:`PAGES`, :data:`POLARS`). A missing file is left to the
    read that needs it (which names it).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise damaged_file(path, exc) from exc
    key = (check, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    _load_record()
    if key in _VERIFIED:
        return
    run()
    if time.time() - st.st_mtime > _RACY_SECONDS:
        _remember(key)


def verify_pages(path: str | os.PathLike[str]) -> None:
    """Read every page of ``path`` with its CRC-32 checked, once for an unchanged file (:func:`checked_once`).

    The cost is one read of the file through pyarrow, a row group at a time.

    Raises:
        CorruptFileError: a page fails its CRC-32 or the file cannot be decoded.
    """

    def run() -> None:
        with open_checked(path) as pf:
            for i in range(pf.num_row_groups):
                _check_statistics(path, pf.metadata.row_group(i), pf.read_row_group(i))

    checked_once(path, PAGES, run)
