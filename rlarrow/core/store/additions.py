"""Rows added to a store after the fact, all in one commit: the write side of ``rlarrow check --fix``.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The data doctor (:mod:`rlarrow.query.doctor`) only reads: it works out which ``runs`` and
``episodes`` rows a store lacks and hands them here as a stream of ``(table, rows)`` pairs.
:func:`add_rows` appends them inside one :meth:`~rlarrow.Store.transaction`, so readers see
every added row or none, and the store's version rises by one (not at all when nothing is
added). Nothing already in the store is deleted or rewritten.

Example:
    >>> import rlarrow, tempfile, os
    >>> st = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> rows = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
    ...                                              "step": [0, 1], "value": [1.0, 0.5]})
    >>> add_rows(st, [("scalars", rows), ("scalars", rows.slice(0, 0))]), st.version
    ({'scalars': 2}, 1)
    >>> add_rows(st, []), st.version  # nothing to add: no commit
    ({}, 1)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from rlarrow.core.errors import StoreError

if TYPE_CHECKING:
    from rlarrow.core.store import Store

__all__: list[str] = []


def add_rows(store: Store, rows: Iterable[tuple[str, pa.Table | pa.RecordBatch]], *,
             what: str = "add rows to") -> dict[str, int]:
    """Append each ``(table, rows)`` of ``rows`` in one commit; return the rows added per table.

    ``rows`` may be a generator that reads the store as it goes (a DuckDB query streamed in
    record batches): the views it reads are those committed before the transaction opened.
    Empty pieces are skipped; when every piece is empty nothing is committed.

    Args:
        store: a writable :class:`~rlarrow.Store`.
        rows: ``(table name, Arrow rows of that table's schema)`` pairs, in the order written.
        what: how the error for a read-only store names the change (``"fix"``).

    Raises:
        StoreError: ``store`` is read-only (or opened at a version), or a write failed (then
            nothing was added: the transaction is rolled back).

    Example:
        >>> import rlarrow, tempfile, os
        >>> st = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> add_rows(rlarrow.Store.open(st.path, readonly=True), [])
        Traceback (most recent call last):
        ...
        rlarrow.core.errors.StoreError: ...: cannot add rows to a store opened read-only ...
    """
    if store.readonly:
        raise StoreError(f"{store.path}: cannot {what} a store opened read-only (or at a version); "
                         "open it writable")
    added: dict[str, int] = {}
    with store.transaction():
        for table, piece in rows:
            if not piece.num_rows:
                continue
            store.append(table, piece)
            added[table] = added.get(table, 0) + piece.num_rows
    return added
