"""SQL text for DuckDB: string literals, quoted identifiers and file lists, escaped.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Example:
    >>> print(quote("it's"), ident("a.b"), file_list(["a.parquet", "b's.parquet"]))
    'it''s' "a.b" ['a.parquet', 'b''s.parquet']
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__: list[str] = []


def quote(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (a column name with any characters)."""
    return '"' + name.replace('"', '""') + '"'


def file_list(files: Sequence[str | os.PathLike[str]]) -> str:
    """A SQL list of file names, for ``read_parquet``."""
    return "[" + ", ".join(quote(os.fspath(f)) for f in files) + "]"
