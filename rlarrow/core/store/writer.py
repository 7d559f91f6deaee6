"""TableWriter: buffered, streaming writes to one table, committed file by file.

The writer validates rows as they come, buffers them into row groups, streams them into
one hidden temporary file (:mod:`rlarrow.core.store.files`) and hands the finished file to
its store to commit (:meth:`rlarrow.Store.writer` makes one; the store chooses the layout).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.errors import StoreError
from rlarrow.core.store.files import (
    FILE_BYTES,
    ROW_GROUP_BYTES,
    CommitInfo,
    fsync_file,
    new_file_name,
    open_parquet,
    temp_name,
    write_row_groups,
)
from rlarrow.core.store.layouts import data_run_ids, validate_rows

__all__ = ["TableWriter"]

#: spills of at least this many bytes compute their statistics in a thread of their own
BESIDE_BYTES = 4 << 20


class _Beside:
    """``fn(data)`` run in a thread of its own while the caller works, for data worth a thread.

    A plain thread per call (no pool): a pool's idle threads do not survive a fork (a
    DataLoader worker), a thread started and joined here always has finished.
    """

    def __init__(self, fn: Any, data: pa.Table) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if data.nbytes < BESIDE_BYTES:
            fn(data)
            return

        def run() -> None:
            try:
                fn(data)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="rlarrow-stats", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for ``fn`` to end."""
        if self._thread is not None:
            self._thread.join()

    def result(self) -> None:
        """Wait for ``fn`` to end; raise what it raised."""
        self.join()
        if self._error is not None:
            raise self._error


#: A finished file for :meth:`rlarrow.Store._commit_files`: (layout directory, temporary path,
#: final name, schema, rows).
FinishedFile = tuple[str, Path, str, pa.Schema, int]


class _Owner(Protocol):
    """What a :class:`TableWriter` needs of its store (a :class:`rlarrow.Store`)."""

    path: Path
    readonly: bool
    _readonly_reason: str
    _writers: list[TableWriter]

    def _place(self, table: str,
               data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> tuple[pa.Table, str]: ...

    def _layout_names(self, table: str) -> list[str]: ...

    def _check_runs(self, table: str, name: str, runs: set[str]) -> None: ...

    def _commit_files(self, files: list[FinishedFile]) -> list[CommitInfo]: ...

    def _stats_builder(self, layout: str, schema: pa.Schema) -> Any: ...

    def _stats_file(self, rows: pa.Table | None) -> FinishedFile | None: ...


class TableWriter:
    """Buffered, streaming writer for one table of a store.

    Rows are validated on :meth:`write`, buffered into row groups of about
    ``row_group_bytes``, streamed into a hidden temporary file, and committed (made
    visible atomically) by :meth:`flush`: when called, every ``flush_rows`` rows or
    ``flush_seconds`` seconds (checked on write), when the file reaches ``file_bytes``,
    and on :meth:`close`, which also happens when the interpreter exits or the process is
    stopped with SIGTERM without it (:mod:`rlarrow.core.exits`). Rows not yet committed
    are lost only if the process is killed (SIGKILL); every commit before survives.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> with store.writer("scalars", flush_rows=1000) as w:
        ...     for step in range(10):
        ...         w.write({"run_id": "r", "scope": "train", "tag": "loss",
        ...                  "step": [step], "value": [1.0 / (step + 1)]})
        >>> len(store.files("scalars")), store.row_count("scalars")
        (1, 10)
    """

    def __init__(
        self,
        store: _Owner,
        table: str,
        *,
        row_group_bytes: int = ROW_GROUP_BYTES,
        file_bytes: int = FILE_BYTES,
        flush_rows: int | None = None,
        flush_seconds: float | None = None,
    ) -> None:
        if store.readonly:
            raise StoreError(f"{store.path}: cannot write: {store._readonly_reason}")
        self.store = store
        self.table = table
        self.spec = _schema.table(table)
        #: the layout directory the rows go to (``steps``, ``steps.2``): chosen by the first rows
        self.layout_dir = table
        self._runs: set[str] = set()  # runs whose layout was checked
        self.row_group_bytes = row_group_bytes
        self.file_bytes = file_bytes
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._schema: pa.Schema | None = None
        self._buffer: list[pa.Table] = []
        self._buffer_bytes = 0
        self._buffer_rows = 0
        self._file_rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._final: str | None = None
        self._last_flush = time.monotonic()
        self._closed = False
        self.commits: list[CommitInfo] = []
        # steps layouts: the statistics of the rows written (rlarrow.core.step_stats)
        self._stats: Any = None

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return (f"TableWriter({self.table!r}, buffered={self._buffer_rows} rows, "
                f"uncommitted={self._file_rows + self._buffer_rows} rows, commits={len(self.commits)})")

    @property
    def pending_rows(self) -> int:
        """Rows written but not yet committed."""
        return self._file_rows + self._buffer_rows

    def write(self, data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> None:
        """Validate and buffer rows (see :meth:`Store.append` for accepted forms)."""
        if self._closed:
            raise StoreError(f"{self.store.path}: writer for {self.table!r} is closed")
        if self._schema is None:  # the first rows choose the layout (Store.layouts)
            table, self.layout_dir = self.store._place(self.table, data)
        else:
            table = validate_rows(self.table, data, self._schema)
        if table.num_rows == 0:
            return
        if self._schema is None:
            self._schema = table.schema
            self._runs = data_run_ids(table)
            self._stats = self.store._stats_builder(self.layout_dir, table.schema)
        elif len(self.store._layout_names(self.table)) > 1:  # another run: is it in another layout?
            runs = data_run_ids(table) - self._runs
            if runs:
                self.store._check_runs(self.table, self.layout_dir, runs)
                self._runs |= runs
        self._buffer.append(table)
        self._buffer_bytes += table.nbytes
        self._buffer_rows += table.num_rows
        if self._buffer_bytes >= self.row_group_bytes:
            self._spill()
        if (
            (self.flush_rows is not None and self.pending_rows >= self.flush_rows)
            or (self.flush_seconds is not None
                and time.monotonic() - self._last_flush >= self.flush_seconds)
            or (self._tmp is not None and self._tmp.stat().st_size >= self.file_bytes)
        ):
            self.flush()

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """Turn a failed write (disk full, file too large, ...) into a StoreError naming the file."""
        try:
            yield
        except (OSError, pa.ArrowException) as exc:
            path = self._tmp or (self.store.path / self.table)
            self.abort()
            raise StoreError(
                f"{path}: writing table {self.table!r} failed ({exc}); the rows not yet committed "
                "were dropped, and every earlier commit is intact"
            ) from exc

    def _spill(self) -> None:
        """Write the buffer as row group(s) of the temporary file."""
        if not self._buffer:
            return
        with self._io():
            self._spill_unchecked()

    def _spill_unchecked(self) -> None:
        assert self._schema is not None
        data = pa.concat_tables(self._buffer)
        self._buffer, self._buffer_bytes, self._buffer_rows = [], 0, 0
        # statistics from the rows in memory (no pass over the file later), beside the Parquet
        # encoding, which runs without the GIL: a D4RL import's statistics took 29% of its time
        stats = _Beside(self._stats.add, data) if self._stats is not None else None
        try:
            if self._parquet is None:
                self._final = new_file_name()
                self._tmp = self.store.path / self.layout_dir / temp_name(self._final)
                self._parquet = open_parquet(self._tmp, self._schema, data)
            write_row_groups(self._parquet, data, self.row_group_bytes, self._tmp)
        except BaseException:
            if stats is not None:
                stats.join()  # the write's error is the one to tell
            raise
        if stats is not None:
            stats.result()  # its error, if any; the next spill starts after it
        self._file_rows += data.num_rows

    def flush(self) -> CommitInfo | None:
        """Commit everything written so far; returns what was committed (None if nothing)."""
        files = self._finish_files()
        if not files:
            return None
        info = self.store._commit_files(files)[0]
        self.commits.append(info)
        return info

    def _finish_file(self) -> FinishedFile | None:
        """Close the temporary file on disk (synced): what :meth:`Store._commit_files` takes."""
        self._spill()
        self._last_flush = time.monotonic()
        if self._parquet is None:
            return None
        assert self._tmp is not None and self._final is not None and self._schema is not None
        with self._io():
            self._parquet.close()
            self._parquet = None
            fsync_file(self._tmp)
        rows, tmp, final = self._file_rows, self._tmp, self._final
        self._file_rows, self._tmp, self._final = 0, None, None
        return self.layout_dir, tmp, final, self._schema, rows

    def _finish_files(self) -> list[FinishedFile]:
        """The finished file, and for a steps layout the ``stats`` file of its rows with it.

        Both are committed in one manifest write: a reader sees the steps and their
        statistics together or neither.
        """
        finished = self._finish_file()
        if finished is None:
            return []
        if self._stats is None:
            return [finished]
        try:
            with self._io():
                extra = self.store._stats_file(self._stats.finish(finished[2]))
        except BaseException:
            finished[1].unlink(missing_ok=True)
            raise
        return [finished] if extra is None else [finished, extra]

    def abort(self) -> None:
        """Drop uncommitted rows and close."""
        self._buffer, self._buffer_bytes, self._buffer_rows = [], 0, 0
        if self._parquet is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._parquet.close()
            self._parquet = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        self._file_rows = 0
        if self._stats is not None:
            self._stats.reset()  # forget what was added
        self._closed = True
        exits.untrack(self)
        with contextlib.suppress(ValueError):
            self.store._writers.remove(self)

    def close(self) -> None:
        """Commit what is buffered and close."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            exits.untrack(self)
            with contextlib.suppress(ValueError):
                self.store._writers.remove(self)
