"""DuckDB failures on a store's files, blamed on the file at fault and only on the store's own.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

:func:`damaged` turns a DuckDB error that names one of the store's files into a
:class:`~rlarrow.core.errors.CorruptFileError` naming it (another file: an
:class:`~rlarrow.core.errors.InvalidInputError`; the query's own errors stay DuckDB's);
:func:`locate` finds the file DuckDB could not read when its error names none.

Example:
    >>> import duckdb, rlarrow, tempfile, os
    >>> st = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> exc = duckdb.ParserException("syntax error at or near 'selct'")
    >>> damaged(st, exc) is exc  # the query's own error: DuckDB's, as it is
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    StoreError,
)
from rlarrow.core.store import damaged_file
from rlarrow.query.sql_text import quote

if TYPE_CHECKING:
    from rlarrow.core.store import Store, StoreReader

__all__: list[str] = []


def locate(st: Store, files: Sequence[str | os.PathLike[str]], exc: Exception) -> None:
    """Raise a CorruptFileError naming the first of ``files`` that DuckDB cannot read alone.

    For DuckDB failing on the store's files without naming one: each is read whole on
    its own connection (only after a failure, so its cost does not matter).
    """
    import duckdb

    for f in files:
        if not os.path.isfile(f):
            continue
        with duckdb.connect() as alone:
            try:
                alone.sql(f"select * from read_parquet({quote(os.fspath(f))})").to_arrow_table()
            except duckdb.Error as found:
                raise damaged_file(f, found) from exc


def damaged(st: Store, exc: Exception) -> Exception:
    """A StoreError for DuckDB failing to read the store's files; other errors as they are."""
    import duckdb

    # invalid input names the file when a file is at fault; error('...') in a query names none
    reading = type(exc) is duckdb.Error or isinstance(exc, duckdb.IOException) or (
        isinstance(exc, duckdb.InvalidInputException)
        and (".parquet" in str(exc) or os.fspath(st.path) in str(exc)))
    if not reading:  # the query's own errors (syntax, names, types, error()) stay DuckDB's
        return exc
    named = _named_files(exc)
    root = os.path.realpath(st.path)
    for path in named:  # a file of the store (or a reader's pinned link to one, inside it too)
        if os.path.realpath(path).startswith(root + os.sep) and os.path.isfile(path):
            return damaged_file(path, exc)
    if named:  # the query's own file (a COPY ... TO, a read_parquet of another file): not the store's
        return InvalidInputError(named[0], f"DuckDB failed on this file, which is not one of the store "
                                 f"{st.path}'s ({exc}); check the file, its path and the space left there")
    return StoreError(f"{st.path}: DuckDB could not read the store's files ({exc}); `rlarrow info` "
                      "and Store.read name a damaged file")


def _named_files(exc: Exception) -> list[str]:
    """The files a DuckDB error names: its ``*.parquet`` words, and an I/O error's paths.

    Example:
        >>> _named_files(OSError('IO Error: Could not write file "out/x.csv": No space left on device'))
        ['out/x.csv']
    """
    import duckdb

    text = str(exc)
    words = [w.rstrip(":,;.") for w in re.split(r"[\s'\"\\]+", text)]
    found = [w for w in words if w.endswith(".parquet")]
    if isinstance(exc, (duckdb.IOException, OSError)):  # (these name the file whatever its suffix)
        found += [w for w in words if "/" in w or os.sep in w]
        found += [w for w in re.findall(r"[\"']([^\"'\\\n]+)[\"']", text) if os.path.lexists(w)]
    return list(dict.fromkeys(found))


def locate_remote(st: StoreReader, tables: Sequence[str], exc: Exception) -> None:
    """For a store on object storage: raise a CorruptFileError naming the damaged file of ``tables``.

    DuckDB reads a bucket's files through pyarrow, which checks every page's CRC; its error
    names the view, not the file. Each file of ``tables`` is read with its pages checked
    until the damaged one is found (only after a failure). Nothing is raised when DuckDB's
    error is not about reading, or no file is found damaged.
    """
    from rlarrow.core.store import open_checked

    text = str(exc)
    if "_rlarrow_source_" not in text:  # (the query's own error, or a failure of no store file)
        return
    for table in tables:
        for path in st.files(table):
            try:
                open_checked(path, st.filesystem).read()
            except CorruptFileError as found:
                cause = found.__cause__ or found
                raise CorruptFileError(
                    os.fspath(path), f"damaged Parquet on object storage ({cause}); delete it and push the "
                    f"store again from a sound local copy (`rlarrow push STORE {st.path}`)") from exc
