"""The journal: how a commit or compaction interrupted at any moment is finished or undone.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A step that renames several files (a parallel append, a transaction, a compaction, a
migration) first writes its plan to the manifest's ``pending`` record (one part per
table: the files it adds and those it replaces), then renames, then lists the result.
Whoever opens the store next rolls such a step forward when every new file is in place
(the renames were the commit) and back otherwise (:func:`roll_forward`,
:meth:`JournalStore._recover`); files a killed writer renamed but never listed are
adopted, files replaced by a compaction are deleted, dead processes' temporary files are
swept. Readers take the same view without writing it (:meth:`JournalStore._snapshot`).

Example:
    >>> manifest = {"tables": {"steps": {"rows": 3, "files": [{"name": "a.parquet", "rows": 3,
    ...             "bytes": 10}]}}, "retired": [], "pending": {"op": "compact", "table": "steps",
    ...             "old": ["a.parquet"], "new": ["b.parquet"],
    ...             "new_entries": [{"name": "b.parquet", "rows": 3, "bytes": 8}]}}
    >>> roll_forward(manifest, exists=lambda rel: rel == "steps/b.parquet")
    True
    >>> manifest["tables"]["steps"]["files"][0]["name"], manifest["retired"], manifest["pending"]
    ('b.parquet', ['steps/a.parquet'], None)
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, InvalidInputError, RLArrowError, SchemaMismatchError
from rlarrow.core.store import manifest as _manifest
from rlarrow.core.store.base import StoreBase
from rlarrow.core.store.files import TMP_PREFIX, tmp_owner_alive
from rlarrow.core.store.layouts import table_of
from rlarrow.core.store.lease import sweep_views
from rlarrow.core.store.manifest import (
    MANIFEST_NAME,
    decode_schema,
    encode_schema,
    parse_manifest,
    retired_location,
)
from rlarrow.core.store.segments import SEGMENTS_DIR, local_segments
from rlarrow.core.type_names import schema_differences

__all__: list[str] = []

#: Files a compaction or an edit replaced are kept this long for reading earlier versions
#: (Delta Lake's default ``deletedFileRetentionDuration``); :meth:`rlarrow.Store.vacuum` frees them sooner.
RETAIN_HOURS = 168

#: Attempts at a consistent view (a compaction may replace files under a reader).
READ_ATTEMPTS = 5


def pending_parts(pending: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The per-table parts of a journaled step: ``pending`` itself and ``pending.also``."""
    if not pending:
        return []
    return [pending, *pending.get("also", [])]


def apply_pending(manifest: dict[str, Any], pending: dict[str, Any]) -> None:
    """Apply a journaled step to ``manifest``: list its new files, retire the ones it replaced.

    Each part's new files take the place of the first old file they replace (row order
    is kept), or go last; the replaced files join ``retired`` (deleted by the next
    writer). ``pending`` is then cleared.
    """
    for part in pending_parts(pending):
        _apply_part(manifest, part)
    manifest["pending"] = None


def roll_forward(manifest: dict[str, Any], exists: Callable[[str], bool]) -> bool:
    """Apply ``manifest``'s journaled step if every new file of it is in place.

    ``exists(rel)`` says whether ``TABLE/NAME`` (relative to the store) is there: the
    renames were the commit, so the step counts as done. Returns whether it was applied
    (a step with a file missing is left as it is: a writer's recovery undoes it).
    """
    pending = manifest.get("pending")
    if pending and all(exists(f"{part['table']}/{n}")
                       for part in pending_parts(pending) for n in part["new"]):
        apply_pending(manifest, pending)
        return True
    return False


def _apply_part(manifest: dict[str, Any], pending: dict[str, Any]) -> None:
    table = pending["table"]
    entry = manifest["tables"][table]
    old = set(pending["old"])
    new_entries = pending["new_entries"]
    files: list[dict[str, Any]] = []
    inserted = False
    for f in entry["files"]:
        if f["name"] in old:
            if not inserted:
                files.extend(new_entries)
                inserted = True
            continue
        files.append(f)
    if not inserted:
        files.extend(new_entries)
    entry["files"] = files
    entry["rows"] = sum(f["rows"] for f in files)
    retire(manifest, [f"{table}/{n}" for n in old])


def retire(manifest: dict[str, Any], rels: list[str]) -> None:
    """List files (``TABLE/NAME``) as retired now: kept for reading earlier versions until vacuumed."""
    if not rels:
        return
    manifest["retired"] = sorted(set(manifest.get("retired", [])) | set(rels))
    when = manifest.setdefault("retired_at", {})
    now = int(time.time() * 1000)
    for rel in rels:
        when.setdefault(rel, now)


def _sweep_tmp(directory: Path, pattern: str) -> None:
    """Delete ``write_file``'s temporary files (``.NAME.PID.HEX.tmp``) whose process died."""
    for p in directory.glob(pattern):
        parts = p.name.split(".")
        with contextlib.suppress(ValueError, IndexError, FileNotFoundError, PermissionError):
            pid = int(parts[-3])
            if pid != os.getpid():
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    p.unlink()


def _fingerprint(manifest: dict[str, Any]) -> str:
    """What recovery can change of a manifest, in a few bytes whatever the store's history.

    Recovery finishes a journaled step (``pending``, and the files it lists), adopts
    orphans (files and rows of a table, its schema when it had none), deletes retired files
    (``retired``, ``retired_at``) and writes Delta commits left due (``delta_due``). A dump of
    the whole manifest before and after, which this replaces, cost two full serialisations
    per commit.
    """
    tables = [(name, len(e["files"]), e["files"][-1]["name"] if e["files"] else None, e["rows"],
               e.get("schema") is None) for name, e in manifest["tables"].items()]
    return json.dumps([manifest.get("pending"), manifest.get("retired"), manifest.get("retired_at"),
                       manifest.get("delta_due"), tables], sort_keys=True, default=str)


class JournalStore(StoreBase):
    """Recovery, and the consistent view readers take (see :class:`rlarrow.Store`)."""

    def manifest(self, *, refresh: bool = True) -> dict[str, Any]:
        """A copy of the manifest this store object reads from: tables, files, rows.

        It is the committed state (an interrupted commit or compaction finished or undone,
        as the next writer's recovery would), re-read from disk first unless ``refresh``
        is False (then: the view of the last :meth:`refresh`). Changing the copy changes
        nothing; ``docs/format.md`` describes its keys.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> m = store.manifest()
            >>> m["format"], m["tables"]["steps"]["rows"], m["pending"]
            ('rlarrow-store', 0, None)
        """
        if refresh:
            self.refresh()
        return copy.deepcopy(self._manifest)

    def refresh(self) -> None:
        """Re-read the manifest to see commits made by other writers.

        A store opened at a version (``Store.open(path, version=N)``) stays at it.
        """
        if self.__dict__.get("_pinned_version") is not None:
            return
        self._manifest = self._snapshot()

    @property
    def version(self) -> int:
        """The store version this object reads: each commit, compaction or edit makes a new one.

        A training run that records it (with the path) can read exactly the same data
        again later with ``Store.open(path, version=...)`` (or ``version=`` of any
        reader), until ``rlarrow vacuum`` deletes files that version needs. Each table's
        Delta log has its own version numbers: :meth:`delta_versions` maps them.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> v0 = store.version
            >>> _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [0],
            ...                              "value": [1.0]})
            >>> store.version == v0 + 1, rlarrow.Store.open(store.path, version=v0).row_count("scalars")
            (True, 0)
        """
        return int(self._manifest.get("version", 0))

    def delta_versions(self) -> dict[str, int]:
        """Each table directory's Delta Lake version at this store version (tables with a log).

        What to give another engine to read the same data: for example
        ``deltalake.DeltaTable(f"{store.path}/steps", version=store.delta_versions()["steps"])``
        or ``ray.data.read_delta(path, version=...)``.
        """
        from rlarrow.core.store.delta import DeltaLog

        found = {}
        for name in self._manifest["tables"]:
            log = DeltaLog(self.path / name)
            log.refresh(until_store_version=self.version)
            if log.version >= 0:
                found[name] = log.version
        return found

    def history(self) -> list[dict[str, Any]]:
        """The store's versions, oldest first: version, time, operation, and the tables each changed.

        Read from the tables' Delta logs (each commit records its store version).
        """
        from rlarrow.core.store.delta import LOG_DIR, DeltaLog

        by_version: dict[int, dict[str, Any]] = {}
        for name in self._manifest["tables"]:
            log_dir = self.path / name / LOG_DIR
            if log_dir.is_symlink() or not log_dir.is_dir():
                continue  # (never a link out of the store)
            for path in sorted(log_dir.glob("[0-9]" * 20 + ".json")):
                with contextlib.suppress(OSError, CorruptFileError):
                    # (a damaged commit is left out: `rlarrow repair` names it)
                    found = DeltaLog.first_info(DeltaLog.read_commit(path) or b"")
                    if found is None:
                        continue
                    v, info = found
                    item = by_version.setdefault(v, {"version": v, "timestamp": info.get("timestamp"),
                                                     "operation": info.get("operation"), "tables": {}})
                    item["tables"][name] = int(path.stem)
        return [by_version[v] for v in sorted(by_version)]

    def _snapshot(self) -> dict[str, Any]:
        """One consistent view of the committed files, without the lock (for readers).

        The table directories are scanned for files a killed writer renamed into place
        but did not list (recovery's view). The scan and the manifest must be of the same
        moment: a compaction that finished between them would show its output beside the
        files it replaced, counted twice. So the manifest is read again after the scan,
        and the view is taken only when it did not change (or after a few attempts, as
        the last manifest says without the scan).
        """
        raw = self._manifest_bytes()
        segments = local_segments(self.path)
        for _ in range(READ_ATTEMPTS * 4):
            try:
                with self._no_commit_running() as quiet:
                    # While a writer holds the lock, an unlisted file may be a commit in flight
                    # (renamed, not yet listed, perhaps about to fail): only committed data is shown.
                    manifest = self._effective(parse_manifest(raw, self.path / MANIFEST_NAME, segments),
                                               orphans=quiet)
            except CorruptFileError:
                # (a segment a vacuum deleted after a newer manifest stopped listing it: read that)
                again = self._manifest_bytes()
                if again == raw:
                    raise
                raw = again
                continue
            again = self._manifest_bytes()
            # Unchanged: the scan and the manifest are of one moment (a compaction writes its
            # manifest before it deletes, so a file it deleted shows as a changed manifest;
            # a listed file missing under an unchanged one is damage, which info names).
            if again == raw:
                return manifest
            raw = again
            time.sleep(0.001)
        return self._effective(parse_manifest(raw, self.path / MANIFEST_NAME, segments), orphans=False)

    def _forget_failed_commit(self) -> None:
        """After a failed commit: the in-memory manifest as the disk has it again."""
        with contextlib.suppress(RLArrowError):
            self._manifest = self._snapshot()

    def _scan_orphans(self, manifest: dict[str, Any]) -> dict[str, list[str]]:
        """Committed-looking files the manifest does not list, per table."""
        retired = set(manifest.get("retired", []))
        pending_new = {f"{part['table']}/{n}" for part in pending_parts(manifest.get("pending"))
                       for n in part["new"]}
        found: dict[str, list[str]] = {}
        for name, entry in manifest["tables"].items():
            listed = {f["name"] for f in entry["files"]}
            directory = self.path / name
            if not directory.is_dir():
                continue
            # (names as strings, sorted: Path objects' sorting took 20 ms of a commit at 1,500 files)
            with os.scandir(directory) as entries:
                names = sorted(e.name for e in entries
                               if e.name.startswith("part-") and e.name.endswith(".parquet"))
            for file_name in names:
                rel = f"{name}/{file_name}"
                if file_name in listed or rel in retired or rel in pending_new:
                    continue  # (first: the files kept for earlier versions cost no system call)
                p = directory / file_name
                if p.is_symlink() or not p.is_file() or not _manifest.is_plain_file_name(p.name):
                    continue  # never adopted (a link could lead outside the store; a name the
                    # manifest may not hold would make it unreadable)
                found.setdefault(name, []).append(p.name)
        return found

    def _adopt(self, manifest: dict[str, Any], table: str, name: str) -> None:
        path = self.path / table / name
        try:
            info = _schema.read_file_info(path)
        except InvalidInputError as exc:
            raise type(exc)(path, f"{exc}; the file is not listed in the store's manifest: move it "
                            f"out of {table}/ (or run `rlarrow repair {self.path} --apply`) to open "
                            "the store") from exc
        if info.table != table_of(table):  # (a layout directory TABLE.N holds TABLE's files)
            raise CorruptFileError(path, f"holds table {info.table!r} but lies in {table}/; "
                                   f"move it out of the store (or run `rlarrow repair {self.path} --apply`)")
        _schema.check_file_version(info, store=self.path)
        entry = manifest["tables"][table]
        self._check_file_schema(table, entry, info.schema, path)
        entry["files"].append({"name": name, "rows": info.num_rows, "bytes": path.stat().st_size})
        entry["rows"] += info.num_rows

    def _check_file_schema(self, table: str, entry: dict[str, Any], schema: pa.Schema,
                           path: Path) -> None:
        plain = schema.remove_metadata()
        if entry.get("schema") is None:
            entry["schema"] = encode_schema(plain)
            return
        established = decode_schema(entry["schema"])
        if not plain.equals(established):
            where = "the table's schema" if table == table_of(table) else f"the schema of layout {table}/"
            raise SchemaMismatchError(
                table_of(table),
                [f"file {path} does not have {where}"],
                expected=established,
                got=plain,
                differences=schema_differences(established, plain),
            )

    def _finish_pending(self, manifest: dict[str, Any]) -> None:
        pending = manifest.get("pending")
        if not pending:
            return
        if self._pending_complete(pending):
            apply_pending(manifest, pending)  # roll forward
        else:  # roll back: the old files are still listed
            for part in pending_parts(pending):
                for n in part["new"]:
                    with contextlib.suppress(FileNotFoundError):
                        (self.path / part["table"] / n).unlink()
            manifest["pending"] = None

    def _pending_complete(self, pending: dict[str, Any]) -> bool:
        """Whether every new file of a journaled step is in place (then it rolls forward)."""
        return all((self.path / part["table"] / n).exists()
                   for part in pending_parts(pending) for n in part["new"])

    def _delete_retired(self, manifest: dict[str, Any], *, older_than_ms: int | None = None) -> list[str]:
        """Delete retired files that no version needs any more; returns them.

        Those an rlarrow before Delta logs retired (nothing reads them), and with
        ``older_than_ms`` those retired before it (:meth:`vacuum`).
        """
        keep = []
        when = manifest.get("retired_at", {})
        deleted = []
        for rel in manifest.get("retired", []):
            at = when.get(rel)
            if at is not None and (older_than_ms is None or at >= older_than_ms):
                keep.append(rel)  # an earlier version may read it (time travel)
                continue
            gone = False
            try:
                aside = [retired_location(self.path, rel)]
            except CorruptFileError:  # (a link: never deleted through; the entry goes all the same)
                aside = []
            for path in (*aside, self.path / rel):  # moved out, or not yet
                try:
                    path.unlink()
                    gone = True
                except FileNotFoundError:
                    pass
                except OSError:
                    keep.append(rel)
                    break
            else:
                if gone:
                    deleted.append(rel)
        manifest["retired"] = keep
        if when:
            kept = set(keep)
            manifest["retired_at"] = {rel: at for rel, at in when.items() if rel in kept}
        return deleted

    def _remove_stale_tmp(self) -> None:
        from rlarrow.core.store.delta import DeltaLog

        sweep_views(self.path)  # dead readers' links
        for name in self._manifest["tables"]:
            with contextlib.suppress(CorruptFileError, OSError):  # (a linked log: refused where read)
                DeltaLog(self.path / name).sweep()  # dead writers' half-written Delta commits
        layouts = [n for n in self._manifest["tables"] if n not in _schema.TABLE_NAMES]  # TABLE.N
        for directory in [self.path, *(self.path / n for n in [*_schema.TABLE_NAMES, *layouts])]:
            if not directory.is_dir():
                continue
            if directory == self.path and (self.path / SEGMENTS_DIR).is_dir() \
                    and not (self.path / SEGMENTS_DIR).is_symlink():
                _sweep_tmp(self.path / SEGMENTS_DIR, ".*.json.*.tmp")  # dead writers' half-written segments
            _sweep_tmp(directory, f".{MANIFEST_NAME}.*.tmp")
            for p in directory.glob(TMP_PREFIX + "*"):
                if not tmp_owner_alive(p.name):
                    with contextlib.suppress(OSError):  # (a directory of that name: left alone)
                        p.unlink()

    def _recover(self, manifest: dict[str, Any], *, sweep: bool = True) -> dict[str, Any]:
        """Under the lock: finish or undo interrupted operations and persist the result.

        ``sweep`` also deletes dead processes' temporary files: garbage, which nothing
        reads, so a commit leaves it to the next open, declare or compaction.
        """
        self._delta_heal(manifest)
        before = _fingerprint(manifest)
        self._finish_pending(manifest)
        # (no other writer since our last commit: none can have left files to adopt)
        orphans = {} if self.__dict__.get("_sole_writer") else self._scan_orphans(manifest)
        for table, names in orphans.items():
            for name in names:
                self._adopt(manifest, table, name)
        self._delete_retired(manifest, older_than_ms=int(time.time() * 1000) - RETAIN_HOURS * 3_600_000)
        if sweep:
            # retired files a writer killed after its commit left in their table directory
            self._move_retired(manifest, list(manifest.get("retired", ())))
            self._remove_stale_tmp()
        if _fingerprint(manifest) != before:
            self._write_manifest(manifest)
        return manifest

    def _effective(self, manifest: dict[str, Any], *, orphans: bool = True) -> dict[str, Any]:
        """The manifest as recovery would leave it, without writing (for readers).

        When that changes the committed files (a finished step rolled forward, files a killed
        writer renamed adopted), the view is the next version, as the recovery that will write
        it counts it: a reader that records its version reads these rows again with it.
        """
        # (a copy of every list and dict but the file entries, which no one changes in place:
        # copy.deepcopy took 45-180 ms of an open at 10,000 files)
        manifest = _manifest.copy_tree(manifest)
        listed = {t: [f["name"] for f in e["files"]] for t, e in manifest["tables"].items()}
        pending = manifest.get("pending")
        if pending and self._pending_complete(pending):
            apply_pending(manifest, pending)
        # (scanned while an unfinished step is still pending: its renamed files are not
        # orphans to adopt; recovery takes them back, so a reader must never show them)
        found = self._scan_orphans(manifest) if orphans else {}
        manifest["pending"] = None
        for table, names in found.items():
            for name in names:
                with contextlib.suppress(RLArrowError, FileNotFoundError):
                    self._adopt(manifest, table, name)
        if any(listed.get(t) != [f["name"] for f in e["files"]] for t, e in manifest["tables"].items()):
            manifest["version"] = int(manifest.get("version", 0)) + 1
        return manifest
