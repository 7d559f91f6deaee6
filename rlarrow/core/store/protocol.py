"""What readers use of a store, local or remote: the :class:`StoreReader` protocol.

A local :class:`~rlarrow.Store` and a :class:`~rlarrow.core.remote.RemoteStore` (a store on
object storage) both satisfy it, so a reader (``rlarrow.train``, ``rlarrow.query``) takes
either through one typed parameter, and tells them apart with ``isinstance``, never by
looking for attributes. What only a local store can do (leases pinning its files, footers
and pages checked, versions to read again, appending) stays on :class:`~rlarrow.Store`:
code that needs it checks ``isinstance(store, Store)`` first.

The protocol is the store's *engine* as a reader sees it (files, schemas, layouts, the
manifest and its version); the RL catalog on top (runs, episodes, labels, statistics) is
read through tables like any other (``docs/architecture.md``, "engine and catalog").

Example:
    >>> import rlarrow, tempfile, os
    >>> from rlarrow.core.store import StoreReader, layout_number
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> isinstance(store, StoreReader), store.filesystem is None  # (None: the local disk)
    (True, True)
    >>> def files_by_layout(reader: StoreReader, table: str) -> dict[str, int]:
    ...     return {d: len(reader.files(table, layout=layout_number(d))) for d in reader.layout_dirs(table)}
    >>> _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [0],
    ...                              "value": [1.0]})
    >>> files_by_layout(store, "scalars")
    {'scalars': 1}
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from rlarrow.core.store.repair import StoreInfo

__all__ = ["StoreReader"]


@runtime_checkable
class StoreReader(Protocol):
    """The read side of a store that :class:`~rlarrow.Store` and ``RemoteStore`` share.

    Every path :meth:`files` gives is on :attr:`filesystem` (None: the local disk), so a
    reader opens them with ``open_checked(path, store.filesystem)``. Layouts are named by
    number (``layout=N``) and by directory (:meth:`layout_dirs`: a file's layout is its
    directory's name; ``layout_number(directory)`` is its number).
    """

    @property
    def path(self) -> str | os.PathLike[str]:
        """Where the store is: a local directory, or the URI it was opened at."""

    @property
    def filesystem(self) -> pafs.FileSystem | None:
        """The pyarrow filesystem :meth:`files` are on; None: the local disk."""

    @property
    def version(self) -> int:
        """The store version read (the manifest's: each commit makes a new one)."""

    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest read: tables, files, rows (``docs/format.md``)."""

    def tables(self) -> list[str]:
        """Names of the store's tables."""

    def layout_dirs(self, table: str, layout: int | None = None) -> list[str]:
        """The layout directories ``table`` and ``layout`` select (None: all of them)."""

    def files(self, table: str, *, layout: int | None = None) -> Sequence[str | os.PathLike[str]]:
        """The committed Parquet files of ``table`` (of one layout with ``layout``), oldest first."""

    def row_count(self, table: str, *, layout: int | None = None) -> int:
        """Committed rows of ``table`` (of one layout with ``layout``)."""

    def schema(self, table: str, *, layout: int | None = None) -> pa.Schema | None:
        """The concrete Arrow schema of ``table`` (None until it holds data)."""

    def dataset(self, table: str, *, layout: int | None = None) -> Any:
        """A ``pyarrow.dataset.Dataset`` over ``table``'s files."""

    def info(self) -> StoreInfo:
        """Tables, row counts, runs, schema versions and sizes: what ``rlarrow info`` shows."""

    def read(self, table: str, columns: Sequence[str] | None = None,
             filter: Any = None, *, layout: int | None = None) -> pa.Table:  # noqa: A002 - pyarrow's name
        """``table`` read whole (some columns, a pyarrow filter expression, one layout)."""
