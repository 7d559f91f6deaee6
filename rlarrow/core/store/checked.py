"""Reading a store's Parquet files with every page checked: the one definition every read path uses.

The store writes a CRC-32 of every Parquet page (:func:`~rlarrow.core.store.files.open_parquet`).
pyarrow checks them when asked (``page_checksum_verification``); DuckDB and Polars never do.
So there are two ways a reader here sees only undamaged values:

- read through pyarrow with the checks on: :func:`open_checked` (a ``ParquetFile`` whose
  reads check every page and raise :class:`~rlarrow.core.errors.CorruptFileError` naming
  the file, never a pyarrow error or an ``OSError``), and ``Store.dataset`` / ``Store.read``;
- or hand another engine only files checked whole before: :func:`verify_pages` reads every
  page of a file once and records it as verified for this process, keyed by the file's
  device, inode, size and modification time, so a file changed afterwards (a new inode by a
  rename, or new bytes, which move the modification time) is checked again.

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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core.errors import CorruptFileError

__all__ = ["READ_ERRORS", "damaged_file", "open_checked", "shown_path", "verify_pages"]

#: What pyarrow raises for a damaged file (a garbled column name is a UnicodeDecodeError).
READ_ERRORS: tuple[type[BaseException], ...] = (pa.ArrowException, OSError, UnicodeDecodeError)

#: (device, inode, size, mtime_ns) of the files :func:`verify_pages` found whole.
_VERIFIED: set[tuple[int, int, int, int]] = set()

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


def open_checked(path: str | os.PathLike[str], filesystem: Any = None) -> pq.ParquetFile:
    """``path`` as a ``ParquetFile`` whose reads check every page against its CRC-32.

    Its ``read_row_group``, ``read_row_groups`` and ``read`` raise
    :class:`~rlarrow.core.errors.CorruptFileError` naming the file for any damage.

    Raises:
        CorruptFileError: the footer cannot be read (the file is missing, cut or damaged).
    """
    try:
        pf = _CheckedFile(os.fspath(path), filesystem=filesystem, page_checksum_verification=True)
    except READ_ERRORS as exc:
        raise damaged_file(path, exc) from exc
    pf._path = os.fspath(path)
    return pf


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
        got = pc.min_max(column).as_py()
        if not (_same(stats.min, got["min"]) and _same(stats.max, got["max"])):
            return name
    return None


def _same(recorded: Any, actual: Any) -> bool:
    """A recorded statistic equals the value computed (NaN aside: writers leave it out)."""
    nan = actual != actual or recorded != recorded  # noqa: PLR0124 - NaN is the one value unequal to itself
    if isinstance(actual, float) and nan:
        return True
    return bool(recorded == actual)


def verify_pages(path: str | os.PathLike[str]) -> None:
    """Read every page of ``path`` with its CRC-32 checked, once per process for an unchanged file.

    A missing file is left to the read that needs it (which names it). The cost is one
    read of the file through pyarrow, a row group at a time.

    Raises:
        CorruptFileError: a page fails its CRC-32 or the file cannot be decoded.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise damaged_file(path, exc) from exc
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    with open_checked(path) as pf:
        for i in range(pf.num_row_groups):
            _check_statistics(path, pf.metadata.row_group(i), pf.read_row_group(i))
    if len(_VERIFIED) > 1_000_000:
        _VERIFIED.clear()
    _VERIFIED.add(key)
