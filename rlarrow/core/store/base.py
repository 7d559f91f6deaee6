"""The store's state and its manifest: reading it, replacing it, and the writers' lock.

:class:`StoreBase` is the bottom of :class:`rlarrow.Store`: it declares what a store object
holds (its path, the manifest of its current view, the open writers and transaction, the
lock it may hold) and owns the manifest's bytes and the ``flock`` every change is made
under. Each layer above adds one concern (:mod:`~rlarrow.core.store.journal`,
:mod:`~rlarrow.core.store.tables`, :mod:`~rlarrow.core.store.repair`,
:mod:`~rlarrow.core.store.compaction`, :mod:`~rlarrow.core.store.commits`).
"""

from __future__ import annotations

import contextlib
import json
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
from rlarrow.core.store.files import LOCK_NAME
from rlarrow.core.store.manifest import (
    MANIFEST_NAME,
    check_manifest_versions,
    decode_schema,
    now_iso,
    parse_manifest,
    write_error,
)
from rlarrow.core.store.writer import TableWriter

__all__ = ["StoreBase"]

try:  # POSIX advisory locks; without them (Windows) one writer at a time is assumed.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class _TxFile:
    table: str
    tmp: Path
    final: str
    rows: int
    bytes: int


class _Transaction:
    """What an open :meth:`Store.transaction` has written: hidden files, not yet listed."""

    def __init__(self) -> None:
        self.files: list[_TxFile] = []
        self.schemas: dict[str, pa.Schema] = {}
        #: tables whose schema the transaction fixed (un-fixed again if it fails)
        self.fixed: list[str] = []
        self.writers: list[TableWriter] = []

    def discard(self) -> None:
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
    _tx: _Transaction | None
    _lock_depth: int
    _lock_fd: int | None
    #: the manifest of this object's current view (what :meth:`manifest` copies)
    _manifest: dict[str, Any]

    def _read_manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST_NAME
        return parse_manifest(self._manifest_bytes(), path)

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
        data = json.dumps(manifest, indent=1, sort_keys=False).encode("utf-8")
        _manifest.write_file(root, MANIFEST_NAME, data)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest; when it settles a change, log the change in each table's Delta log.

        The manifest is the commit point: the Delta commits follow it (a Delta reader never
        sees what the store could still take back). A process killed between the two, or a
        Delta write that fails, leaves the table in ``delta_due``: the next writer's
        recovery writes the missing Delta commit for that same store version
        (:meth:`_delta_heal`), so no store version is missing from a table's log.
        """
        plan = [] if manifest.get("pending") else self._delta_plan(manifest)
        self._write_manifest_at(self.path, manifest)
        self._manifest = manifest
        self._delta_write(plan, manifest)

    # ---------------------------------------------------------------- the Delta logs

    def _delta_log(self, table: str) -> DeltaLog:
        logs: dict[str, DeltaLog] | None = self.__dict__.get("_delta_logs")
        if logs is None:
            logs = self.__dict__["_delta_logs"] = {}
        log = logs.get(table)
        if log is None:
            log = logs[table] = DeltaLog(self.path / table)
        return log

    def _delta_changes(self, table: str,
                       entry: dict[str, Any]) -> tuple[list[DeltaFile], list[DeltaFile]] | None:
        """What ``table``'s Delta log lacks of ``entry`` (None: nothing; it is current)."""
        log = self._delta_log(table)
        log.refresh()
        if not entry["files"] and log.version < 0:
            return None  # never had a file: no Delta table yet
        adds, removes = log.diff(entry["files"])
        schema_changed = entry.get("schema") is not None and (
            (log.metadata or {}).get("configuration", {}).get("rlarrow.schema") != entry["schema"])
        if not adds and not removes and not schema_changed:
            return None
        return adds, removes

    def _delta_plan(self, manifest: dict[str, Any]) -> list[tuple[str, list[DeltaFile], list[DeltaFile]]]:
        """Before a settling manifest write: each table's Delta commit, and the new store version."""
        plan = []
        unreadable = []
        for table, entry in manifest["tables"].items():
            try:
                changes = self._delta_changes(table, entry)
            except (CorruptFileError, OSError) as exc:
                # A damaged log must not stop commits (the manifest is the store's truth).
                self._delta_warn(table, exc)
                unreadable.append(table)
                continue
            if changes is not None:
                plan.append((table, *changes))
        if plan or unreadable:
            manifest["version"] = int(manifest.get("version", 0)) + 1
        manifest["delta_due"] = [table for table, _, _ in plan] + unreadable
        return plan

    def _delta_warn(self, table: str, exc: Exception) -> None:
        import warnings

        from rlarrow.core.errors import RLArrowWarning

        warnings.warn(f"{self.path}: the commit stands, but its Delta log entry for {table!r} was not "
                      f"written ({exc}); the next writer writes it. Until then Delta readers see the "
                      "version before", RLArrowWarning, stacklevel=5)

    def _delta_write(self, plan: list[tuple[str, list[DeltaFile], list[DeltaFile]]],
                     manifest: dict[str, Any]) -> None:
        """After the manifest: write the planned Delta commits (a failure is left to recovery)."""
        operation, data_change = self.__dict__.get("_delta_operation", ("WRITE", True))
        for table, adds, removes in plan:
            entry = manifest["tables"][table]
            try:
                self._delta_log(table).commit(
                    adds, removes, schema=decode_schema(entry["schema"]) if entry.get("schema") else None,
                    schema_version=entry.get("schema_version", "1.0"),
                    store_version=int(manifest.get("version", 0)),
                    operation=operation, data_change=data_change, table=table)
            except (StoreError, CorruptFileError, OSError) as exc:
                self._delta_warn(table, exc)

    def _delta_heal(self, manifest: dict[str, Any]) -> None:
        """Under the lock: write the Delta commits a killed or failed writer left due."""
        version = int(manifest.get("version", 0))
        plan = []
        due = set(manifest.get("delta_due", []))
        for table, entry in manifest["tables"].items():
            log = self._delta_log(table)
            try:
                log.refresh()
            except (CorruptFileError, OSError) as exc:
                self._delta_warn(table, exc)
                continue
            # due: a writer died (or failed) after its manifest write; no log yet: a store
            # an rlarrow before Delta logs wrote (its present state becomes Delta version 0)
            lags = table in due and log.store_version < version
            if not lags and not (log.version < 0 and entry["files"]):
                continue
            changes = self._delta_changes(table, entry)
            if changes is not None:
                plan.append((table, *changes))
        if plan:
            with self._delta_operation("WRITE", True):  # (another writer's commit, finished for it)
                self._delta_write(plan, manifest)

    @contextlib.contextmanager
    def _delta_operation(self, operation: str, data_change: bool) -> Iterator[None]:
        """Name the Delta operation of the commits made inside the block (compaction, repair, ...)."""
        previous = self.__dict__.get("_delta_operation")
        self.__dict__["_delta_operation"] = (operation, data_change)
        try:
            yield
        finally:
            if previous is None:
                self.__dict__.pop("_delta_operation", None)
            else:
                self.__dict__["_delta_operation"] = previous

    def _check_versions(self, manifest: dict[str, Any]) -> None:
        check_manifest_versions(manifest, os.fspath(self.path))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.readonly:
            raise StoreError(f"{self.path}: cannot write: {self._readonly_reason}")
        if self._lock_depth == 0 and fcntl is not None:
            try:
                fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            except PermissionError:
                try:  # another user's lock file: flock needs only a read-only descriptor
                    fd = os.open(self.path / LOCK_NAME, os.O_RDONLY)
                except OSError as exc:
                    raise write_error(self.path / LOCK_NAME, exc) from exc
            except OSError as exc:
                raise write_error(self.path / LOCK_NAME, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd
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
            with contextlib.suppress(OSError):  # no lock file (a copy of a store): no writer here
                fd = os.open(self.path / LOCK_NAME, os.O_RDONLY)
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
            return path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{self.path}: the store's manifest {MANIFEST_NAME} disappeared") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the store's manifest ({exc.strerror or exc}); check "
                             "the permissions of the store directory") from exc
