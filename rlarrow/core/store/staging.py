"""Staging: the one way in for writers that write a store's Parquet files themselves.

A Ray task (or any other process) cannot hold a :class:`rlarrow.Store`, but can write a
file the store then commits. :meth:`rlarrow.Store.stage` gives a :class:`Staging` (it
pickles, so it travels to the tasks); :meth:`Staging.write` writes rows as one finished,
synced, hidden Parquet file of the store and returns a :class:`StagedFile`; back in the
process that holds the store, :meth:`rlarrow.Store.commit_staged` renames the staged files
into place and lists them, all or none, in one journaled step (as a parallel append).
Leaving the ``with`` block deletes what is left of them (a failed job's files).

Example:
    >>> import rlarrow, tempfile, os
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> rows = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
    ...                                              "step": [0, 1], "value": [1.0, 0.5]})
    >>> with store.stage("scalars") as staging:
    ...     staged = [staging.write(rows.slice(0, 1)), staging.write(rows.slice(1))]  # in tasks, say
    ...     info = store.commit_staged(staged)
    >>> info.rows, len(info.files), store.row_count("scalars")
    (2, 2, 2)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from rlarrow.core.store import files as _files
from rlarrow.core.store.files import fsync_file, new_file_name, open_parquet, temp_name, write_row_groups
from rlarrow.core.store.layouts import data_run_ids

__all__ = ["StagedFile", "Staging"]

#: The rows a staged file's codecs are chosen from (see :func:`rlarrow.core.store.files.open_parquet`).
_SAMPLE_ROWS = 4096


@dataclass(frozen=True)
class StagedFile:
    """A finished, synced Parquet file under a hidden name, not yet committed.

    Attributes:
        table: the table its rows are for (``memory``).
        path: the hidden file (a path inside the store).
        name: the name it is committed under (``part-....parquet``).
        rows: its rows.
        schema: its Arrow schema, without metadata (the layout it goes to is chosen by it).
        runs: the run ids of its rows (a run's rows of a table stay in one layout).
    """

    table: str
    path: str
    name: str
    rows: int
    schema: pa.Schema
    runs: tuple[str, ...]


class Staging:
    """Where files of one table are written before :meth:`rlarrow.Store.commit_staged` lists them.

    Made by :meth:`rlarrow.Store.stage`. It holds only names (it pickles: send it to Ray
    tasks or other processes on the store's filesystem). Its files are hidden temporary
    files owned by the process that made it: other writers leave them alone while that
    process lives, and remove them once it is gone.

    Attributes:
        table: the table.
        directory: where the files are written (the table's directory in the store).
        owner: the start of the files' names (see :func:`rlarrow.core.store.files.temp_owner`).
    """

    def __init__(self, directory: Path, table: str, owner: str) -> None:
        self.directory = directory
        self.table = table
        self.owner = owner

    def write(self, data: pa.Table, *, row_group_bytes: int | None = None) -> StagedFile:
        """Write ``data`` as one finished, synced, hidden file; nothing is committed yet.

        ``data`` must be rows in their exact form for the table (as
        :func:`rlarrow.core.store.layouts.validate_rows` gives them): the commit checks
        the file's schema, not its values.

        Args:
            data: the rows.
            row_group_bytes: the row-group size (default:
                :data:`rlarrow.core.store.files.ROW_GROUP_BYTES`).

        Raises:
            OSError: the write failed (the partial file is removed when the block ends).
        """
        final = new_file_name()
        tmp = self.directory / temp_name(final, self.owner)
        writer = open_parquet(tmp, data.schema, data.slice(0, _SAMPLE_ROWS))
        try:
            write_row_groups(writer, data, row_group_bytes or _files.ROW_GROUP_BYTES)
        finally:
            writer.close()
        fsync_file(tmp)
        return StagedFile(table=self.table, path=os.fspath(tmp), name=final, rows=data.num_rows,
                          schema=data.schema.remove_metadata(), runs=tuple(sorted(data_run_ids(data))))

    def discard(self) -> None:
        """Delete this staging's files that are still hidden (committed ones are not: they moved)."""
        for left in self.directory.glob(self.owner + "*"):
            left.unlink(missing_ok=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()
