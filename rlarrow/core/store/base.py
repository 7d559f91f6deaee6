"""The store's state and its manifest: reading it, replacing it, and the writers' lock.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

:class:`StoreBase` is the bottom of :class:`rlarrow.Store`: it declares what a store object
holds (its path, the manifest of its current view, the open writers and transaction, the
lock it may hold) and owns the manifest's bytes and the ``flock`` every change is made
under. Each layer above adds one concern (:mod:`~rlarrow.core.store.journal`,
:mod:`~rlarrow.core.store.tables`, :mod:`~rlarrow.core.store.repair`,
:mod:`~rlarrow.core.store.compaction`, :mod:`~rlarrow.core.store.commits`).
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, StoreError
from rlarrow.core.store import manifest as _manifest
from rlarrow.core.store.delta import DeltaFile, DeltaLog
from rlarrow.core.store.entries import MANIFEST_FIX, open_entry, open_lock, read_entry
from rlarrow.core.store.files import LOCK_NAME
from rlarrow.core.store.manifest import (
    MANIFEST_NAME,
    check_manifest_versions,
    decode_schema,
    now_iso,
    parse_manifest,
    retired_location,
)
from rlarrow.core.store.segments import encode_manifest, local_segments
from rlarrow.core.store.writer import TableWriter

__all__: list[str] = []

try:  # POSIX advisory locks; without them (Windows) one writer at a time is assumed.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class TxFile:
    """One file a transaction wrote: hidden at ``tmp``, renamed to ``final`` in ``table`` at commit."""

    table: str
    tmp: Path
    final: str
    rows: int
    bytes: int


class Transaction:
    """What an open :meth:`Store.transaction` has written: hidden files, not yet listed."""

    def __init__(self) -> None:
        self.files: list[TxFile] = []
        self.schemas: dict[str, pa.Schema] = {}
        #: tables whose schema the transaction fixed (un-fixed again if it fails)
        self.fixed: list[str] = []
        self.writers: list[TableWriter] = []

    def discard(self) -> None:
        """Delete the hidden files written so far (the transaction failed)."""
        for f in self.files:
            with contextlib.suppress(OSError):
                f.tmp.unlink()
        self.files = []


class StoreBase:
    """A store's state, its manifest on disk and its lock (see :class:`rlarrow.Store`)."""

    #: the store directory
    path: Path
    #: True: never written by this object
    readonly: bool
    #: compact a table after a commit past this many small files (None: never by itself)
    auto_compact: int | None
    #: why the store is read-only when it was opened for writing but cannot be written
    _readonly_reason: str
    #: writers open on this store object (closed with it)
    _writers: list[TableWriter]
    #: the open :meth:`rlarrow.Store.transaction`, whose files are written but not yet committed
    _tx: Transaction | None
    _lock_depth: int
    _lock_fd: int | None
    #: the manifest of this object's current view (what :meth:`manifest` copies)
    _manifest: dict[str, Any]

    def _read_manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST_NAME
        raw = self._manifest_bytes()
        for _ in range(3):
            try:
                return parse_manifest(raw, path, local_segments(self.path))
            except CorruptFileError:
                # (without the lock, a segment a vacuum deleted once a newer manifest stopped
                # listing it: read the newer one; the same bytes again are damage)
                again = self._manifest_bytes()
                if again == raw:
                    raise
                raw = again
        return parse_manifest(raw, path, local_segments(self.path))

    def _check_table_dirs(self, manifest: dict[str, Any]) -> None:
        """Refuse a table directory that is a link (it could lead outside the store)."""
        for table in manifest["tables"]:
            directory = self.path / table
            if directory.is_symlink():
                raise CorruptFileError(directory, "is a symbolic link; a store's table directories must "
                                       "be inside it (rlarrow never follows a link out of a store)")

    @staticmethod
    def _write_manifest_at(root: Path, manifest: dict[str, Any]) -> None:
        """Replace the manifest, whole and synced (see :func:`rlarrow.core.store.manifest.write_file`).

        Raises:
            StoreError: the write failed (full disk, ...): the previous manifest is in place.
        """
        manifest["updated_at"] = now_iso()
        fmt = _schema.parse_version(manifest.get("format_version", "1.0"))
        if fmt[0] == _schema.FORMAT_VERSION[0] and fmt < _schema.FORMAT_VERSION:
            # a minor format only adds (a table, a journal field): the store is now of it
            manifest["format_version"] = _schema.format_version(_schema.FORMAT_VERSION)
        data, settle = encode_manifest(manifest, root)  # (segments written first)
        _manifest.write_file(root, MANIFEST_NAME, data)
        settle()
        _manifest.written(data, manifest, os.fspath(root))

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest; when it settles a change, log the change in each table's Delta log.

        The manifest is the commit point: the Delta commits follow it (a Delta reader never
        sees what the store could still take back). A process killed between the two, or a
        Delta write that fails, leaves the table in ``delta_due``: the next writer's
        recovery writes the missing Delta commit for that same store version
        (:meth:`_delta_heal`), so no store version is missing from a table's log.
        """
        settles = not manifest.get("pending")
        if settles:
            self._delta_plan(manifest)
        self._write_manifest_at(self.path, manifest)
        self._manifest = manifest
        if settles:
            behind = self._delta_write(manifest)
            # (the files this object has seen retired and moved need no look; the first write looks at all)
            moved: frozenset[str] = self.__dict__.get("_retired_moved", frozenset())
            retired = manifest.get("retired", [])
            self._move_retired(manifest, [r for r in retired if r not in moved], behind)
            self.__dict__["_retired_moved"] = frozenset(
                r for r in retired if r.partition("/")[0] not in behind)

    def _move_retired(self, manifest: dict[str, Any], rels: list[str],
                      behind: set[str] | None = None) -> None:
        """Move retired files out of their table directories (``STORE/.rlarrow-retired/TABLE/``).

        Only once the manifest and the table's Delta log no longer list them (a table whose
        log is ``behind``, or still due in ``delta_due``, waits: a Delta reader of its current
        version reads them). A file
        that cannot be moved stays, and the next writer's recovery tries again; a retired
        directory that is a link is never written through (it could lead outside the store).
        """
        due = set(behind or ()) | {d.get("table") for d in manifest.get("delta_due") or ()
                                   if isinstance(d, dict) and "files" in d}  # (still missing at start)
        for rel in rels:
            table = rel.partition("/")[0]
            source = self.path / rel
            if table in due or not source.is_file() or source.is_symlink():
                continue
            try:
                target = retired_location(self.path, rel)
                for directory in (target.parent.parent, target.parent):
                    with contextlib.suppress(FileExistsError):
                        directory.mkdir()
                    if directory.is_symlink() or not directory.is_dir():
                        raise CorruptFileError(directory, "is not a directory of the store (a link?); "
                                               "rlarrow moves replaced files only inside the store: "
                                               "remove it")
                os.replace(source, target)
            except (OSError, CorruptFileError):
                continue  # (left where it is: a glob counts it until a writer moves it)

    # ---------------------------------------------------------------- the Delta logs

    def _delta_log(self, table: str) -> DeltaLog:
        logs: dict[str, DeltaLog] | None = self.__dict__.get("_delta_logs")
        if logs is None:
            logs = self.__dict__["_delta_logs"] = {}
        log = logs.get(table)
        if log is None:
            log = logs[table] = DeltaLog(self.path / table)
        return log

    def _delta_changes(self, table: str, entry: dict[str, Any],
                       latest: int) -> tuple[list[DeltaFile], list[DeltaFile]] | None:
        """What ``table``'s Delta log lacks of ``entry`` (None: nothing; it is current)."""
        log = self._delta_log(table)
        log.refresh()
        log.check_not_ahead(latest)  # (the store's version before this change)
        if not entry["files"] and log.version < 0 and (entry.get("schema") is None or self._tx is not None):
            # neither a file nor declared types: no Delta table yet (a declared table is one, with
            # no file; one a transaction fixes becomes one with the transaction's version)
            return None
        adds, removes = log.diff(entry["files"])
        schema_changed = entry.get("schema") is not None and (
            (log.metadata or {}).get("configuration", {}).get("rlarrow.schema") != entry["schema"])
        if not adds and not removes and not schema_changed:
            return None
        return adds, removes

    def _delta_plan(self, manifest: dict[str, Any]) -> None:
        """Before a settling manifest write: the new store version, and the Delta commits due.

        ``delta_due`` lists the Delta commits that follow this manifest write
        (``{"table", "version"}``: the table as this manifest lists it), after those a
        writer found still missing when it started (:meth:`_delta_heal`), which carry the
        table's files at their version. A table still missing one is not diffed against
        its log (that would fold two versions into one commit): its change is queued.
        """
        queued = [d for d in manifest.get("delta_due", []) if "files" in d]
        changed: list[str] = []
        unreadable = False
        for table, entry in manifest["tables"].items():
            behind = [d for d in queued if d["table"] == table]
            if behind:
                last = behind[-1]
                if [f["name"] for f in last["files"]] != [f["name"] for f in entry["files"]] \
                        or last.get("schema") != entry.get("schema"):
                    changed.append(table)
                continue
            try:
                if self._delta_changes(table, entry, int(manifest.get("version", 0))) is not None:
                    changed.append(table)
            except (CorruptFileError, OSError) as exc:
                # A damaged log must not stop commits (the manifest is the store's truth); the
                # version still moves on, so that no two states share a number.
                self._delta_warn(table, exc)
                unreadable = True
        if changed or unreadable:
            manifest["version"] = int(manifest.get("version", 0)) + 1
        version = int(manifest.get("version", 0))
        manifest["delta_due"] = queued + [{"table": t, "version": version} for t in changed]

    def _delta_warn(self, table: str, exc: Exception) -> None:
        import warnings

        from rlarrow.core.errors import RLArrowWarning

        fix = (f"`rlarrow repair {self.path} --apply` sets the damaged log aside and starts a new one"
               if isinstance(exc, CorruptFileError) else "the next writer writes it")
        warnings.warn(f"{self.path}: the commit stands, but its Delta log entry for {table!r} was not "
                      f"written ({exc}); {fix}. Until then Delta readers see the version before",
                      RLArrowWarning, stacklevel=5)

    def _delta_write(self, manifest: dict[str, Any]) -> set[str]:
        """After the manifest: write the Delta commits due, in order (a failure is left to recovery).

        A table's commits stop at its first failure, so its log never skips a version.
        Returns the tables whose log is still behind.
        """
        operation, data_change = self.__dict__.get("_delta_op", ("WRITE", True))
        blocked: set[str] = set()
        for item in manifest.get("delta_due", []):
            table = item["table"]
            entry = manifest["tables"].get(table)
            if table in blocked or entry is None:
                continue
            files = item["files"] if "files" in item else entry["files"]
            schema = item.get("schema") if "files" in item else entry.get("schema")
            log = self._delta_log(table)
            try:
                log.refresh()
                log.check_not_ahead(int(manifest.get("version", 0)))
                if log.store_version >= item["version"] or (not files and log.version < 0 and not schema):
                    continue  # written already (or nothing to log yet; a declared table is a Delta table)
                adds, removes = log.diff(files)
                log.commit(adds, removes, schema=decode_schema(schema) if schema else None,
                           schema_version=entry.get("schema_version", "1.0"),
                           store_version=int(item["version"]),
                           operation=operation, data_change=data_change, table=table,
                           rebuilt=bool(item.get("rebuilt")) and log.version < 0)
            except (StoreError, CorruptFileError, OSError) as exc:
                self._delta_warn(table, exc)
                blocked.add(table)
        return blocked

    def _delta_heal(self, manifest: dict[str, Any]) -> None:
        """Under the lock, as a writer starts: write the Delta commits left due.

        Those still missing afterwards (the log cannot be written) keep the table's files
        of their version in ``delta_due``, for the next writer; a store an rlarrow before
        Delta logs wrote gets its present state as each table's Delta version 0.
        """
        version = int(manifest.get("version", 0))
        items = list(manifest.get("delta_due", []))
        for table, entry in manifest["tables"].items():
            log = self._delta_log(table)
            with contextlib.suppress(CorruptFileError, OSError):
                log.refresh()
                if log.version < 0 and entry["files"] and not any(d["table"] == table for d in items):
                    # (files with no log: a store from before Delta logs, or a damaged log repair
                    # set aside: its history starts here, and says so)
                    items.append({"table": table, "version": version, "rebuilt": True})
        if not items:
            return
        manifest["delta_due"] = items
        with self._delta_operation("WRITE", True):  # (another writer's commits, finished for it)
            self._delta_write(manifest)
        remaining = []
        for item in items:
            log = self._delta_log(item["table"])
            with contextlib.suppress(CorruptFileError, OSError):
                log.refresh()
                if log.store_version >= item["version"]:
                    continue
            if "files" not in item:  # still missing: keep the table's files of its version
                entry = manifest["tables"][item["table"]]
                item = {**item, "files": copy.deepcopy(entry["files"]), "schema": entry.get("schema")}
            remaining.append(item)
        manifest["delta_due"] = remaining

    @contextlib.contextmanager
    def _delta_operation(self, operation: str, data_change: bool) -> Iterator[None]:
        """Name the Delta operation of the commits made inside the block (compaction, repair, ...)."""
        previous = self.__dict__.get("_delta_op")
        self.__dict__["_delta_op"] = (operation, data_change)
        try:
            yield
        finally:
            if previous is None:
                self.__dict__.pop("_delta_op", None)
            else:
                self.__dict__["_delta_op"] = previous

    def _check_versions(self, manifest: dict[str, Any]) -> None:
        check_manifest_versions(manifest, os.fspath(self.path))

    def _mark_lock(self, fd: int) -> None:
        """Just locked: note whether this object was the last to hold the lock, and sign it.

        Each holder writes a token of its own into the lock file. Finding our last token
        still there means no other writer has held the lock since our last commit, so none
        can have left files behind (a writer killed between renaming its files and writing
        the manifest): recovery then skips listing the table directories, a scan that grew
        with every file of the store. An rlarrow before this writes no token; files such a
        writer leaves are adopted at the next open (or by any other writer's commit).
        """
        previous = self.__dict__.get("_lock_token")
        token = f"{os.getpid()}:{id(self)}:{os.urandom(6).hex()}".encode().ljust(64)
        try:
            found = os.pread(fd, 64, 0)
            os.pwrite(fd, token, 0)
        except OSError:  # (a read-only lock file: another user's store; never sure)
            self.__dict__["_lock_token"] = None
            self.__dict__["_sole_writer"] = False
            return
        self.__dict__["_sole_writer"] = previous is not None and found == previous
        self.__dict__["_lock_token"] = token

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.readonly:
            raise StoreError(f"{self.path}: cannot write: {self._readonly_reason}")
        if self._lock_depth == 0 and fcntl is not None:
            fd = open_lock(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd
            self._mark_lock(fd)
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fd is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
                self._lock_fd = None

    @contextlib.contextmanager
    def _no_commit_running(self) -> Iterator[bool]:
        """Hold off writers for a moment; yields False when one holds the lock (a commit runs)."""
        fd = None
        if fcntl is not None:
            # no lock file (a copy of a store), or a link (no writer takes a lock through one): no writer here
            with contextlib.suppress(OSError, CorruptFileError):
                fd = open_entry(self.path / LOCK_NAME, os.O_RDONLY, what="the store's lock file")
        if fd is None:
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _manifest_bytes(self) -> bytes:
        path = self.path / MANIFEST_NAME
        try:
            return read_entry(path, what="the store's manifest", fix=MANIFEST_FIX)
        except FileNotFoundError:
            raise StoreError(f"{self.path}: the store's manifest {MANIFEST_NAME} disappeared") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the store's manifest ({exc.strerror or exc}); check "
                             "the permissions of the store directory") from exc
