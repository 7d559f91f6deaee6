"""Commits: appends, writers, transactions, and files written elsewhere.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Every way rows enter a store ends here: :meth:`CommittingStore.append` (a large append
written as several files in parallel), :meth:`CommittingStore.writer` (a
:class:`~rlarrow.core.store.writer.TableWriter`), :meth:`CommittingStore.append_together`
(several tables, one manifest write), :meth:`CommittingStore.transaction` (all or nothing
of a block), and :meth:`CommittingStore.commit_staged`
(files written by other processes, :mod:`~rlarrow.core.store.staging`). A commit renames
finished hidden files into place and lists them under the lock; one that renames several
journals it first (:mod:`~rlarrow.core.store.journal`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.deps import has_module
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    RLArrowError,
    SchemaMismatchError,
    StoreError,
)
from rlarrow.core.store import files as _files
from rlarrow.core.store.base import Transaction, TxFile
from rlarrow.core.store.compaction import CompactingStore
from rlarrow.core.store.files import (
    FILE_BYTES,
    ROW_GROUP_BYTES,
    CommitInfo,
    fsync_file,
    new_file_name,
    open_parquet,
    temp_name,
    temp_owner,
    undo,
    write_row_groups,
)
from rlarrow.core.store.journal import apply_pending
from rlarrow.core.store.layouts import table_of
from rlarrow.core.store.manifest import decode_schema, encode_schema, fsync_dir, write_error
from rlarrow.core.store.staging import StagedFile, Staging
from rlarrow.core.store.writer import FinishedFile, TableWriter
from rlarrow.core.tensors import tensor_problems

__all__: list[str] = []


class CommittingStore(CompactingStore):
    """Everything that commits rows to a store (see :class:`rlarrow.Store`)."""

    _step_stats: str | None = None

    @property
    def step_stats(self) -> str | None:
        """What each commit of ``steps`` rows keeps in the ``stats`` table (:mod:`rlarrow.core.step_stats`).

        ``"sketches"`` (moments per episode, and a KLL quantile sketch per element per
        commit), ``"moments"`` (no quantiles; about a quarter of the computing cost),
        ``"off"``; None (the default): sketches when ``datasketches`` (the ``stats`` extra)
        is installed, else moments. A setting of this store object, not of the store: set
        it before writing, ``store.step_stats = "moments"`` (a wrong name is refused here).
        """
        return self._step_stats

    @step_stats.setter
    def step_stats(self, mode: str | None) -> None:
        from rlarrow.core import step_stats

        self._step_stats = None if mode is None else step_stats.check_mode(mode)

    def _stats_builder(self, layout: str, schema: pa.Schema) -> Any:
        """A :class:`~rlarrow.core.step_stats.StepStatsBuilder` for a steps layout's rows (else None)."""
        from rlarrow.core import step_stats

        if table_of(layout) != "steps":
            return None
        default = "sketches" if has_module("datasketches") else "moments"
        mode = step_stats.check_mode(self.step_stats or default)
        return None if mode == "off" else step_stats.StepStatsBuilder(schema, layout, mode=mode)

    def _stats_file(self, rows: pa.Table | None) -> FinishedFile | None:
        """``stats`` rows written to a hidden file, ready for :meth:`_commit_files`."""
        if rows is None or rows.num_rows == 0:
            return None
        final = new_file_name()
        directory = self.path / "stats"
        directory.mkdir(exist_ok=True)
        tmp = directory / temp_name(final)
        try:
            # (no sample: the codec trial of tensor columns picks zstd for every column of
            # these rows, and cost 2.5-4 ms of a 10,000-step Catch commit's 60-90)
            writer = open_parquet(tmp, rows.schema)
            try:
                write_row_groups(writer, rows, _files.ROW_GROUP_BYTES, tmp)
            finally:
                writer.close()
            fsync_file(tmp)
        except BaseException:  # (a full disk): no hidden file is left for the next writer to sweep
            tmp.unlink(missing_ok=True)
            raise
        return "stats", tmp, final, rows.schema, rows.num_rows

    def declare(self, table: str, tensor_types: Mapping[str, pa.DataType], *,
                new_layout: bool = False) -> pa.Schema:
        """Fix the types of a table's tensor columns before any data is written.

        Useful when the first batch cannot show a type (e.g. all actions null), and to
        make sure every later writer agrees. Declaring the types one of the table's
        layouts already has is a no-op. Other types are refused unless ``new_layout``:
        then they are fixed as a new, empty layout of the table (``TABLE.N/``), which data
        of those types (of runs not yet in another layout) goes to. Writes start a new
        layout by themselves; declaring one chooses its types (say, the binary layout).
        A declare is a store version of its own: the table (or the new layout) becomes a
        Delta table with no file (its Delta version 0), which every Delta engine opens as 0
        rows of these columns (docs/format.md, "A declared table is a Delta table").

        Example:
            >>> import pyarrow as pa, rlarrow, tempfile, os
            >>> s = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> s.declare("steps", {"observation": rlarrow.core.tensors.tensor_type("uint8", (84, 84)),
            ...                     "action": pa.int64()}).field("action").type
            DataType(int64)

        Raises:
            SchemaMismatchError: the store already holds other types (and not
                ``new_layout``), or a type is not a tensor type.
        """
        spec = _schema.table(table)
        problems = []
        for name, type_ in tensor_types.items():
            try:
                is_tensor = spec.column(name).is_tensor
            except KeyError:
                is_tensor = spec.tensor_columns_allowed
            if not is_tensor:
                problems.append(f"{name!r} is not a tensor column of {table!r}")
            problems += tensor_problems(type_, name)
        if problems:
            raise SchemaMismatchError(table, problems)
        wanted = spec.arrow_schema(tensor_types).remove_metadata()
        with self._locked():
            manifest = self._recover(self._read_manifest())
            entry = manifest["tables"][table]
            if entry.get("schema") is not None:
                current = decode_schema(entry["schema"])
                if not current.equals(wanted):
                    existing = self._matching_layout(manifest, table, wanted)
                    if existing is not None:
                        return wanted
                    if not new_layout:
                        raise SchemaMismatchError(table, [
                            "the store already fixed other types (pass new_layout=True to add a layout "
                            "of the table with these types)"], expected=current, got=wanted)
                    self._new_layout_entry(manifest, table, wanted)
                    self._write_manifest(manifest)
                    return wanted
                return current
            entry["schema"] = encode_schema(wanted)
            self._write_manifest(manifest)
            if self._tx is not None:  # a transaction that fails un-fixes it
                self._tx.fixed.append(table)
        return wanted

    def writer(
        self,
        table: str,
        *,
        row_group_bytes: int = ROW_GROUP_BYTES,
        file_bytes: int = FILE_BYTES,
        flush_rows: int | None = None,
        flush_seconds: float | None = None,
    ) -> TableWriter:
        """A buffered writer for ``table``; see :class:`TableWriter`."""
        _schema.table(table_of(table))
        w = TableWriter(self, table, row_group_bytes=row_group_bytes, file_bytes=file_bytes,
                        flush_rows=flush_rows, flush_seconds=flush_seconds)
        self._writers.append(w)
        if self._tx is not None:
            self._tx.writers.append(w)  # the transaction closes or aborts it
        else:
            exits.track(w, w.close)  # committed at exit when the program never closes it
        return w

    def append(self, table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any], *,
               threads: int | None = None,
               before_commit: Callable[[], None] | None = None) -> CommitInfo | None:
        """Validate ``data`` and commit it to ``table`` at once.

        ``data`` is an Arrow table or record batch, or a mapping of columns as
        :func:`rlarrow.core.schema.build` takes them. For many small pieces use
        :meth:`writer`, which buffers them into few files. Data larger than two row
        groups is written as up to ``threads`` files in parallel (default: one per CPU),
        row order kept, committed together in one journaled step.

        ``before_commit`` is called once the files are written, before they are
        committed; if it raises, nothing is committed (a checksum of the source checked
        while the data was being written, say).

        Rows whose tensor types no layout of the table has start a new layout
        (:meth:`layouts`); a run's rows of a table all go to one layout.

        Returns:
            What was committed, or None when ``data`` has no rows.

        Raises:
            SchemaMismatchError: every problem with the data, at once (one line per column
                whose type differs from the layout's).
        """
        if not isinstance(data, (pa.Table, pa.RecordBatch, Mapping)):
            raise ArgumentTypeError(f"data: give an Arrow table or record batch, or a mapping of column "
                                    f"names to values, not {type(data).__name__} {data!r:.60}")
        _schema.table(table_of(table))
        if threads is not None:
            _arguments.integer(threads, "threads", minimum=1)
        threads = threads or os.cpu_count() or 1
        row_group_bytes = _files.ROW_GROUP_BYTES  # (read now: a tuning knob tests and benchmarks set)
        if threads > 1 and isinstance(data, (pa.Table, pa.RecordBatch)) and data.nbytes > 2 * row_group_bytes:
            valid, layout = self._place(table, data)
            parts = min(threads, -(-valid.nbytes // row_group_bytes))
            return self._append_parallel(layout, valid, parts, before_commit)
        with self.writer(table) as w:
            w.write(data)
            if before_commit is not None:
                w._spill()  # written, not committed (a failing check aborts the writer)
                before_commit()
            info = w.flush()
        return info

    def _append_parallel(self, table: str, data: pa.Table, parts: int,
                         before_commit: Callable[[], None] | None = None) -> CommitInfo:
        from concurrent.futures import ThreadPoolExecutor

        directory = self.path / table
        step = -(-data.num_rows // parts)
        slices = [data.slice(i, step) for i in range(0, data.num_rows, step)]
        finals = [new_file_name() for _ in slices]
        tmps = [directory / temp_name(f) for f in finals]

        def write(i: int) -> None:
            writer = open_parquet(tmps[i], data.schema, slices[i])
            try:
                write_row_groups(writer, slices[i], _files.ROW_GROUP_BYTES, tmps[i])
            finally:
                writer.close()
            fsync_file(tmps[i])

        try:
            try:
                with ThreadPoolExecutor(len(slices)) as pool:
                    list(pool.map(write, range(len(slices))))
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"{directory}: writing table {table!r} failed ({exc}); nothing was "
                                 "committed, and every earlier commit is intact") from exc
            if before_commit is not None:
                before_commit()
        except BaseException:  # nothing of it is committed: no temporary file is left either
            for tmp in tmps:
                tmp.unlink(missing_ok=True)
            raise
        info = self._commit_many(table, list(zip(tmps, finals, [len(x) for x in slices], strict=True)),
                                 data.schema)
        self._commit_stats_of(table, data, finals[0])
        return info

    def _commit_stats_of(self, layout: str, data: pa.Table, block: str) -> None:
        """Commit the statistics of steps rows committed already (a parallel append's).

        A commit of its own, after the rows': a process killed between the two leaves
        rows without statistics, which :func:`rlarrow.core.step_stats.combine_stored`
        finds (by counting each run's rows) and reads from the data.
        """
        builder = self._stats_builder(layout, data.schema)
        if builder is None:
            return
        builder.add(data)
        finished = self._stats_file(builder.finish(block))
        if finished is not None:
            self._commit_files([finished])

    def _commit_many(self, table: str, parts: list[tuple[Path, str, int]], schema: pa.Schema) -> CommitInfo:
        """Rename finished temporary files into place and list them, all or none (journaled)."""
        directory = self.path / table
        if self._tx is not None:
            infos = [self._tx_add(table, tmp, final, schema, rows) for tmp, final, rows in parts]
            names = tuple(i.file for i in infos)
            return CommitInfo(table=table, file=names[0], rows=sum(i.rows for i in infos),
                              bytes=sum(i.bytes for i in infos), files=names)
        with self._locked():
            manifest = self._recover(self._read_manifest())
            entry = manifest["tables"][table]
            try:
                self._check_file_schema(table, entry, schema, parts[0][0])
            except SchemaMismatchError:
                for tmp, _, _ in parts:
                    tmp.unlink(missing_ok=True)
                raise
            renamed: list[Path] = []
            try:
                entries: list[dict[str, Any]] = [
                    {"name": final, "rows": rows, "bytes": tmp.stat().st_size} for tmp, final, rows in parts]
                manifest["pending"] = {"op": "append", "table": table, "old": [],
                                       "new": [final for _, final, _ in parts], "new_entries": entries}
                self._write_manifest(manifest)  # journal: a kill before the last rename rolls back
                for tmp, final, _ in parts:
                    os.replace(tmp, directory / final)
                    renamed.append(directory / final)
                fsync_dir(directory)
                apply_pending(manifest, manifest["pending"])
                self._write_manifest(manifest)
            except (OSError, StoreError) as exc:
                # Not committed: with a new file missing, recovery rolls the journal back.
                undo(renamed, [tmp for tmp, _, _ in parts], exc)
                self._forget_failed_commit()
                raise exc if isinstance(exc, StoreError) else write_error(directory, exc) from exc
        self._auto_compact([table])
        names = tuple(f"{table}/{e['name']}" for e in entries)
        return CommitInfo(table=table, file=names[0], rows=sum(e["rows"] for e in entries),
                          bytes=sum(e["bytes"] for e in entries), files=names)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """Commit everything written inside the block together, or nothing of it.

        Inside the block, commits (:meth:`append`, :meth:`append_together`, writers'
        flushes, the catalog's ``add_run``, every importer) write their files but list none of them:
        this store object reads them back (``read``, ``files``, ``row_count``, ``schema``),
        other readers see nothing yet. Leaving the block commits all of them in one
        journaled step (a process killed at any moment leaves all or none); an exception
        in the block, or a failed commit, deletes them and re-raises: nothing of the block
        is in the store. Writers opened in the block and still open are closed first.
        A transaction inside a transaction joins it.

        Example:
            >>> import tempfile, os, rlarrow
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> try:
            ...     with store.transaction():
            ...         run = store.add_run(source="user")
            ...         raise RuntimeError("the import failed half-way")
            ... except RuntimeError:
            ...     pass
            >>> store.row_count("runs")
            0
        """
        if self._tx is not None:
            yield self
            return
        if self.readonly:
            raise StoreError(f"{self.path}: cannot write: {self._readonly_reason}")
        tx = self._tx = Transaction()
        try:
            yield self
            for w in [w for w in self._writers if w in tx.writers]:
                w.close()
        except BaseException:
            self._tx = None
            for w in [w for w in self._writers if w in tx.writers]:
                w.abort()
            tx.discard()
            self._tx_rollback(tx)
            raise
        self._tx = None
        try:
            self._commit_transaction(tx)
        except BaseException:
            self._tx_rollback(tx)
            raise

    def _tx_rollback(self, tx: Transaction) -> None:
        """Un-fix the schemas a failed transaction fixed, where the table still has no file."""
        if not tx.fixed:
            return
        with contextlib.suppress(RLArrowError), self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            changed = False
            for table in dict.fromkeys(tx.fixed):
                entry = manifest["tables"].get(table)
                if entry is not None and not entry["files"] and entry.get("schema") is not None:
                    entry["schema"] = None
                    changed = True
            if changed:
                self._write_manifest(manifest)

    def _commit_transaction(self, tx: Transaction) -> None:
        """Rename a transaction's files into place and list them, all or none (journaled)."""
        if not tx.files:
            return
        by_table: dict[str, list[TxFile]] = {}
        for f in tx.files:
            by_table.setdefault(f.table, []).append(f)
        with self._locked():
            manifest = self._recover(self._read_manifest())
            try:
                for table, files in by_table.items():
                    self._check_file_schema(table, manifest["tables"][table], tx.schemas[table], files[0].tmp)
            except SchemaMismatchError:
                tx.discard()
                raise
            parts = [{"op": "append", "table": table, "old": [], "new": [f.final for f in files],
                      "new_entries": [{"name": f.final, "rows": f.rows, "bytes": f.bytes} for f in files]}
                     for table, files in by_table.items()]
            self._journaled_step(manifest, parts, [(f.tmp, self.path / f.table / f.final) for f in tx.files])
        self._auto_compact(list(by_table))

    def _journaled_step(self, manifest: dict[str, Any], parts: list[dict[str, Any]],
                        moves: list[tuple[Path, Path]]) -> None:
        """Under the lock: journal ``parts`` (one per table), rename ``moves`` into place, list them.

        All or none: a kill before the last rename rolls back on recovery, after it forward;
        a failure takes the renamed files back out and raises a StoreError.
        """
        pending = dict(parts[0])
        if len(parts) > 1:
            pending["also"] = parts[1:]
        renamed: list[Path] = []
        try:
            manifest["pending"] = pending
            self._write_manifest(manifest)  # journal: a kill before the last rename rolls back
            for tmp, final in moves:
                os.replace(tmp, final)
                renamed.append(final)
            for directory in dict.fromkeys(final.parent for _, final in moves):
                fsync_dir(directory)
            apply_pending(manifest, pending)
            self._write_manifest(manifest)
        except (OSError, StoreError) as exc:
            # Not committed: with a new file missing, recovery rolls the journal back.
            undo(renamed, [tmp for tmp, _ in moves], exc)
            self._forget_failed_commit()
            raise exc if isinstance(exc, StoreError) else write_error(self.path, exc) from exc

    def _tx_add(self, table: str, tmp: Path, final: str, schema: pa.Schema, rows: int) -> CommitInfo:
        """Inside a transaction: keep a finished file for the transaction's commit."""
        assert self._tx is not None
        plain = schema.remove_metadata()
        # The schema is fixed in the manifest at once (as a declare is), so that layouts are
        # chosen as outside a transaction; a transaction that fails un-fixes it (_tx_rollback).
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            entry = manifest["tables"][table]
            unfixed = entry.get("schema") is None
            try:
                self._check_file_schema(table, entry, plain, tmp)
            except SchemaMismatchError:
                tmp.unlink(missing_ok=True)
                raise
            if unfixed:
                self._write_manifest(manifest)
                self._tx.fixed.append(table)
            else:
                self._manifest = manifest
        self._tx.schemas[table] = plain
        size = tmp.stat().st_size
        self._tx.files.append(TxFile(table, tmp, final, rows, size))
        return CommitInfo(table=table, file=f"{table}/{final}", rows=rows, bytes=size)

    def _commit_files(self, files: list[FinishedFile]) -> list[CommitInfo]:
        """Rename finished temporary files (one per table) into place; list them in one manifest write.

        A kill between the renames and the manifest write leaves files that recovery
        adopts (as a kill after a single rename does): each file is whole or absent.
        """
        if self._tx is not None:
            return [self._tx_add(*f[:4], f[4]) for f in files]
        infos: list[CommitInfo] = []
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            try:
                for table, tmp, _, schema, _ in files:
                    self._check_file_schema(table, manifest["tables"][table], schema, tmp)
            except SchemaMismatchError:
                for _, tmp, _, _, _ in files:
                    tmp.unlink(missing_ok=True)
                raise
            renamed: list[Path] = []
            try:
                for table, tmp, final_name, _, rows in files:
                    path = self.path / table / final_name
                    os.replace(tmp, path)
                    renamed.append(path)
                    fsync_dir(path.parent)
                    size = path.stat().st_size
                    entry = manifest["tables"][table]
                    entry["files"].append({"name": final_name, "rows": rows, "bytes": size})
                    entry["rows"] += rows
                    infos.append(CommitInfo(table=table, file=f"{table}/{final_name}", rows=rows, bytes=size))
                self._write_manifest(manifest)
            except (OSError, StoreError) as exc:
                # Not committed: the files leave the table again, so no later recovery adopts
                # what the caller was told failed.
                undo(renamed, [tmp for _, tmp, _, _, _ in files], exc)
                self._forget_failed_commit()
                raise exc if isinstance(exc, StoreError) else write_error(self.path, exc) from exc
        self._auto_compact(list(dict.fromkeys(info.table for info in infos)))
        return infos

    def append_together(
        self, data: Mapping[str, pa.Table | pa.RecordBatch | Mapping[str, Any]]
    ) -> list[CommitInfo]:
        """Validate rows for several tables and commit them with one manifest write.

        Each table's rows become one file; what :meth:`append` does per table, at the cost
        of one commit (one lock, one manifest write) instead of one per table. A recorder
        commits its ``steps`` and ``episodes`` rows this way.

        Returns:
            What was committed, one entry per table that had rows.

        Raises:
            SchemaMismatchError: a table's data does not fit (nothing is committed).

        Example:
            >>> import tempfile, os, numpy as np, rlarrow
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s.rlarrow"))
            >>> infos = store.append_together({"episodes": {"run_id": "r", "episode_id": [0],
            ...     "num_steps": [3], "env_index": 0, "terminated": True, "truncated": False,
            ...     "partial_start": False, "partial_end": False}})
            >>> [(i.table, i.rows) for i in infos]
            [('episodes', 1)]
        """
        writers = [self.writer(table, file_bytes=1 << 62) for table in data]  # one file each, any size
        try:
            for w, rows in zip(writers, data.values(), strict=True):
                w.write(rows)
            files = [f for w in writers for f in w._finish_files()]
        except BaseException:
            for w in writers:
                w.abort()
            raise
        for w in writers:
            w.abort()  # nothing left in them: this only unregisters
        infos = self._commit_files(files) if files else []
        # (the statistics of the steps rows were committed with them: not what was asked for)
        return [i for i in infos if i.table != "stats" or "stats" in data]

    def stage(self, table: str, *, tag: str = "stage") -> Staging:
        """Where code that writes its own Parquet files of ``table`` puts them before a commit.

        The one entry point for writers that are not this object (Ray tasks, other
        processes on the store's filesystem): they write rows with
        :meth:`Staging.write <rlarrow.core.store.staging.Staging.write>`, this process commits
        what they return with :meth:`commit_staged`. Use it as a context manager: leaving
        the block deletes every file of it not committed (a failed job's).

        Args:
            table: the table the files are for.
            tag: a word in the files' hidden names (``ray``, say), for whoever lists them.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> rows = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "train",
            ...                                  "tag": "loss", "step": [0, 1], "value": [1.0, 0.5]})
            >>> with store.stage("scalars") as staging:  # (a Staging pickles: send it to tasks)
            ...     files = [staging.write(rows)]        # in a task
            ...     info = store.commit_staged(files)    # back here
            >>> info.rows
            2
        """
        _schema.table(table)
        owner = temp_owner(f"{tag}{secrets.token_hex(4)}-")  # this process's: alive until it commits
        return Staging(Path(os.path.abspath(self.path / table)), table, owner)

    def commit_staged(self, files: Sequence[StagedFile]) -> CommitInfo | None:
        """Commit files a :class:`~rlarrow.core.store.staging.Staging` wrote: all or none.

        The files go to the layout of their types (a new one when no layout of the table
        has them, as :meth:`append` does), renamed into place and listed in one journaled
        step, in the order given; inside a :meth:`transaction` they join it. See
        :meth:`stage` for an example.

        Returns:
            What was committed (None: no files).

        Raises:
            ArgumentError: the files are of several tables.
            SchemaMismatchError: the files disagree on their types, or hold runs whose rows
                of the table are in another layout (nothing is committed).
            StoreError: the commit failed (nothing of it is committed).
        """
        if not files:
            return None
        table = files[0].table
        if any(f.table != table for f in files):
            raise ArgumentError(f"staged files of several tables ({sorted({f.table for f in files})}): "
                                "commit each table's files apart")
        schema = files[0].schema
        odd = [f for f in files if not f.schema.equals(schema)]
        if odd:
            raise SchemaMismatchError(table, [
                f"the staged files disagree on the table's types ({len(odd)} of {len(files)} differ from "
                "the first); fix them first with Store.declare(table, types)"],
                expected=schema, got=odd[0].schema)
        # the layout of the files' types (a new one when the table has none: Store.layouts)
        target = self._add_layout(table, schema) if self.schema(table, layout=1) is not None else table
        self._check_runs(table, target, {r for f in files for r in f.runs})
        return self._commit_many(target, [(Path(f.path), f.name, f.rows) for f in files], schema)
