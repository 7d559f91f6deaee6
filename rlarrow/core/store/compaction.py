"""Compaction and in-place rewrites: many small files merged into few, journaled.

:meth:`CompactingStore.compact` merges consecutive small files of each layout (row order
kept); a commit runs it by itself past ``auto_compact`` small files. Each merge is one
:meth:`CompactingStore._rewrite`: the new file is written hidden, the swap journaled
(:mod:`rlarrow.core.store.journal`), so a kill leaves the old files or the new one listed,
never both. :meth:`CompactingStore.maintenance` gives tools that rewrite a store in place
(``rlarrow migrate``) the same step, under the lock, as a :class:`Maintenance`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, RLArrowError, StoreError
from rlarrow.core.progress import iterate as _iterate
from rlarrow.core.store import manifest as _manifest
from rlarrow.core.store import segments as _segments
from rlarrow.core.store.files import (
    FILE_BYTES,
    ROW_GROUP_BYTES,
    batch_rows,
    fsync_file,
    new_file_name,
    open_parquet,
    temp_name,
    undo,
    write_row_groups,
)
from rlarrow.core.store.journal import RETAIN_HOURS, apply_pending
from rlarrow.core.store.layouts import table_of
from rlarrow.core.store.manifest import check_inside, failure_cause, fsync_dir, write_error
from rlarrow.core.store.repair import RepairStore

__all__ = ["Maintenance"]


class Maintenance:
    """A store's manifest held under its lock, for tools that rewrite the store in place.

    :meth:`CompactingStore.maintenance` makes one (``rlarrow migrate`` is such a tool): no
    other writer commits while it is held. ``manifest`` is the store's manifest as
    recovery left it; change it and :meth:`write` it, or rewrite files with
    :meth:`rewrite`, which journals and writes each step itself.

    Attributes:
        store: the store.
        manifest: the manifest (tables, their files and schemas), to read and change.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"), auto_compact=None)
        >>> for step in range(3):
        ...     _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
        ...                                  "step": [step], "value": [1.0]})
        >>> with store.maintenance() as m:
        ...     names = [f["name"] for f in m.manifest["tables"]["scalars"]["files"]]
        ...     m.rewrite("scalars", names, transform=lambda t: t)  # three files into one
        >>> len(store.files("scalars")), store.row_count("scalars")
        (1, 3)
    """

    def __init__(self, store: CompactingStore, manifest: dict[str, Any]) -> None:
        self.store = store
        self.manifest = manifest

    def rewrite(self, table: str, names: Sequence[str], *,
                transform: Callable[[pa.Table], pa.Table] | None = None,
                row_group_bytes: int = ROW_GROUP_BYTES) -> None:
        """Rewrite the files ``names`` of ``table`` (a layout directory) into one new file, journaled.

        ``transform`` is applied to each file's rows (a migration); None keeps them (a
        compaction). The step is written to the manifest before the files change and
        applied after: a process killed meanwhile leaves the old files listed, or the new
        one. ``manifest`` is updated (and written); on failure it is as it was.

        Raises:
            StoreError: the write failed; the store is as it was.
            CorruptFileError: an old file cannot be read.
        """
        self.store._rewrite(self.manifest, table, list(names), transform=transform,
                            row_group_bytes=row_group_bytes)

    def write(self) -> None:
        """Write ``manifest`` (whole, synced, atomically): the store's new state.

        Raises:
            StoreError: the write failed (full disk, ...); the previous manifest is in place.
        """
        self.store._write_manifest(self.manifest)


class CompactingStore(RepairStore):
    """Compaction and journaled rewrites of a store's files (see :class:`rlarrow.Store`)."""

    @contextlib.contextmanager
    def maintenance(self) -> Iterator[Maintenance]:
        """Hold the store's lock, recover it, and give its manifest to change in place.

        For tools that rewrite a store (migrations): see :class:`Maintenance`. Other
        writers wait for the block to end; readers see each step as it is written.

        Raises:
            StoreError: the store was opened read-only.
        """
        with self._locked(), self._delta_operation("MIGRATE", True):
            manifest = self._recover(self._read_manifest())
            # (file entries of its own: a tool may change them in place, and the process's
            # cached trees and segments share theirs; see manifest.copy_tree)
            try:
                yield Maintenance(self, copy.deepcopy(manifest))
            finally:
                # What it wrote now shares its entries, which it may still change and not
                # write: this process reads the manifest and segments from disk again.
                _manifest.forget()
                _segments.forget(os.fspath(self.path))
                self.__dict__.pop("_delta_logs", None)
                with contextlib.suppress(RLArrowError):
                    self._manifest = self._read_manifest()

    def vacuum(self, *, retain_hours: float = RETAIN_HOURS) -> list[str]:
        """Delete the files compactions and edits replaced more than ``retain_hours`` ago.

        Such files are kept aside (``STORE/.rlarrow-retired/TABLE/``, out of their table
        directory, so a glob of the table is exact meanwhile) so that earlier versions stay
        readable (``version=``), and are deleted ``retain_hours`` after they were replaced
        (7 days by default, as Delta Lake does). ``retain_hours=0`` deletes all of them now:
        versions before the last compaction or edit can no longer be read. Manifest
        segments no manifest names any more (``segments.py``) are deleted too.

        Raises:
            StoreError: the manifest could not be written after files were deleted (a full
                disk): the error says how many were deleted; the store reads as before,
                less the versions that needed them.

        Returns:
            The files deleted (``TABLE/NAME``).

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> for i in range(3):
            ...     _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
            ...                                  "step": [i], "value": [1.0]})
            >>> _ = store.compact()
            >>> len(store.vacuum()), len(store.vacuum(retain_hours=0))
            (0, 3)
        """
        retain_hours = _arguments.number(retain_hours, "retain_hours", minimum=0)
        with self._locked():
            manifest = self._recover(self._read_manifest())
            before = list(manifest.get("retired", []))
            deleted = self._delete_retired(
                manifest, older_than_ms=int(time.time() * 1000 - retain_hours * 3_600_000) + 1)
            if manifest.get("retired", []) != before:
                try:
                    self._write_manifest(manifest)
                except StoreError as exc:
                    cause = failure_cause(exc)
                    raise StoreError(
                        f"{self.path}: vacuum deleted {len(deleted)} replaced files, but recording that in "
                        f"the manifest failed ({cause}). The tables are whole and read as before; the "
                        "versions that needed those files can no longer be read, and the next writer "
                        "forgets them (run `rlarrow vacuum` again once there is space)") from exc
            # Manifest segments no longer listed (a compaction or edit changed a table's list):
            # a reader that read an earlier manifest reads the current one again.
            _segments.delete_segments(self.path, _segments.segment_names(self._manifest_bytes()))
        return deleted

    def _auto_compact(self, tables: list[str]) -> None:
        """Compact after a commit where due; a failure there is a warning (the commit stands)."""
        for table in tables:
            if self.auto_compact is None or self._small_files(table) <= self.auto_compact:
                continue
            try:
                self.compact(table)
            except (StoreError, CorruptFileError) as exc:
                import warnings

                from rlarrow.core.errors import RLArrowWarning

                warnings.warn(f"the commit to {table!r} succeeded; compacting it afterwards did not "
                              f"({exc}); the table is whole, with more small files", RLArrowWarning,
                              stacklevel=3)

    def _small_files(self, table: str, target_file_bytes: int = FILE_BYTES) -> int:
        """Small files of ``table``'s fullest layout (or of the layout directory ``table``)."""
        names = [table] if table != table_of(table) else (self._layout_names(table) or [table])
        return max(sum(1 for f in self._manifest["tables"][n]["files"] if f["bytes"] < target_file_bytes // 2)
                   for n in names)

    def compact(
        self,
        table: str | Sequence[str] | None = None,
        *,
        target_file_bytes: int = FILE_BYTES,
        row_group_bytes: int = ROW_GROUP_BYTES,
        progress: bool = False,
    ) -> dict[str, tuple[int, int]]:
        """Merge runs of small files into files of up to ``target_file_bytes``.

        Row order is kept. The swap is journaled in the manifest, so a process killed
        during compaction leaves either the old files or the new ones, never both listed.

        Args:
            table: one table, several, or None for all.
            target_file_bytes: the largest file a merge makes.
            row_group_bytes: row-group size of the merged files.
            progress: show a progress bar (on a terminal).

        Each layout of a table (:meth:`layouts`) is compacted on its own: a merged file
        holds the rows of one layout.

        Returns:
            table -> (files before, files after) for the tables that changed (a further
            layout of a table under its directory's name, ``steps.2``).
        """
        tables = _arguments.names(table, "table", what="table name") or list(_schema.TABLE_NAMES)
        for name in tables:
            _schema.table(table_of(name))
        self.refresh()
        tables = list(dict.fromkeys(n for name in tables for n in (
            [name] if name != table_of(name) else (self._layout_names(name) or [name]))))
        changed: dict[str, tuple[int, int]] = {}
        for name in tables:
            before = 0
            manifest: dict[str, Any] = {}
            try:
                with self._locked(), self._delta_operation("OPTIMIZE", False):
                    manifest = self._recover(self._read_manifest())
                    entry = manifest["tables"][name]
                    before = len(entry["files"])
                    groups = _plan_compaction(entry["files"], target_file_bytes)
                    for group in _iterate(groups, f"compact {name}", "group", None if progress else False):
                        self._rewrite(manifest, name, group, row_group_bytes=row_group_bytes)
                    if groups:
                        changed[name] = (before, len(manifest["tables"][name]["files"]))
            except (StoreError, CorruptFileError) as exc:
                # each merge is a commit of its own: say which ones stand (a failed one
                # leaves the manifest as the merges before it wrote it)
                after = len(manifest.get("tables", {}).get(name, {}).get("files", [])) if manifest else before
                if after != before:
                    changed[name] = (before, after)
                if not changed:
                    raise
                raise StoreError(_partly_compacted(self.path, changed, exc)) from exc
        return changed

    def _rewrite(
        self,
        manifest: dict[str, Any],
        table: str,
        old_names: list[str],
        *,
        transform: Any = None,
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        """Under the lock: rewrite ``old_names`` of ``table`` into one new file, journaled.

        ``transform`` (a function of a pyarrow Table) is applied file by file (migrations).
        """
        directory = self.path / table
        final = new_file_name()
        tmp = directory / temp_name(final)
        spec = _schema.table(table_of(table))  # (a layout directory TABLE.N: its table's)
        writer: pq.ParquetWriter | None = None
        rows = 0
        out_schema: pa.Schema | None = None
        buffered: list[pa.Table] = []
        buffered_bytes = 0

        def write_buffered() -> None:
            # Small files' rows are gathered into row groups of ``row_group_bytes``: merging
            # 400 commits of 8 rows made 400 row groups of 8 rows (a file 20x its data).
            nonlocal writer, out_schema, buffered, buffered_bytes
            if not buffered:
                return
            data = pa.concat_tables(buffered)
            buffered, buffered_bytes = [], 0
            if writer is None:
                out_schema = data.schema
                writer = open_parquet(tmp, out_schema, data)
            write_row_groups(writer, data, row_group_bytes, tmp)

        try:
            for name in old_names:
                path = check_inside(directory, name)
                try:
                    pf = pq.ParquetFile(path)
                except (pa.ArrowInvalid, OSError) as exc:
                    raise CorruptFileError(path, f"cannot read for rewriting ({exc}); run `rlarrow "
                                           "repair STORE` to see what can be kept") from exc
                if transform is None:
                    batches: Iterator[pa.Table] = (
                        pa.Table.from_batches([b]) for b in pf.iter_batches(batch_size=batch_rows(spec.name))
                    )
                else:
                    batches = iter([transform(pf.read())])
                for part in batches:
                    part = part.replace_schema_metadata(spec.file_metadata())
                    if out_schema is None:
                        out_schema = part.schema
                    part = part.cast(out_schema)
                    rows += part.num_rows
                    buffered.append(part)
                    buffered_bytes += part.nbytes
                    if buffered_bytes >= row_group_bytes:
                        write_buffered()
            write_buffered()
            if writer is None:  # nothing to read: an empty merge
                assert out_schema is None
                return
            writer.close()
            writer = None
            fsync_file(tmp)
        except BaseException as exc:
            if writer is not None:
                with contextlib.suppress(OSError, pa.ArrowException):
                    writer.close()
            tmp.unlink(missing_ok=True)
            if isinstance(exc, (OSError, pa.ArrowException)) and not isinstance(exc, FileNotFoundError):
                raise StoreError(f"{tmp}: rewriting {table!r} failed ({exc}); the store is as it "
                                 "was") from exc
            raise
        saved = copy.deepcopy(manifest)
        try:
            new_entry = {"name": final, "rows": rows, "bytes": tmp.stat().st_size}
            manifest["pending"] = {
                "op": "migrate" if transform is not None else "compact",
                "table": table,
                "old": list(old_names),
                "new": [final],
                "new_entries": [new_entry],
            }
            self._write_manifest(manifest)  # journal: the old files are still the listed ones
            os.replace(tmp, directory / final)
            fsync_dir(directory)
            apply_pending(manifest, manifest["pending"])
            if transform is not None:
                # A migration's old files are of a format this rlarrow no longer reads as
                # it is: deleted at once, not kept for earlier versions.
                for name in old_names:
                    manifest.get("retired_at", {}).pop(f"{table}/{name}", None)
            self._write_manifest(manifest)  # new file listed, old ones retired
        except (OSError, StoreError) as exc:
            # Rolled back: without the new file the journal undoes itself on recovery.
            undo([directory / final], [tmp], exc)
            manifest.clear()
            manifest.update(saved)  # the caller's (and self._manifest's) view: as on disk
            raise exc if isinstance(exc, StoreError) else write_error(directory, exc) from exc
        self._delete_retired(manifest)
        with contextlib.suppress(StoreError):  # only the retired list: the next writer cleans it
            self._write_manifest(manifest)


def _partly_compacted(path: os.PathLike[str], changed: dict[str, tuple[int, int]], exc: Exception) -> str:
    """What a compaction that stopped part way says: what it committed, and why it stopped."""
    done = ", ".join(f"{name}: {a} -> {b} files" for name, (a, b) in changed.items())
    cause = str(exc).replace("Nothing of this operation was committed; every earlier commit is intact",
                             "that merge was not committed").replace("; the store is as it was",
                                                                     "; that merge was not committed")
    return (f"{path}: compaction stopped part way; committed before it stopped (kept, readable): {done}. "
            f"It stopped at: {cause}. Run the compaction again once the cause is fixed to merge the rest")


def _plan_compaction(files: list[dict[str, Any]], target: int) -> list[list[str]]:
    """Consecutive runs of small files, each run up to ``target`` bytes, at least 2 files."""
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for f in files:
        small = f["bytes"] < target // 2
        if not small or size + f["bytes"] > target:
            if len(current) > 1:
                groups.append(current)
            current, size = ([], 0) if not small else ([f["name"]], f["bytes"])
            continue
        current.append(f["name"])
        size += f["bytes"]
    if len(current) > 1:
        groups.append(current)
    return groups
