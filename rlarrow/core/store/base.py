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
from rlarrow.core.store.files import LOCK_NAME
from rlarrow.core.store.manifest import (
    MANIFEST_NAME,
    check_manifest_versions,
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
        self._write_manifest_at(self.path, manifest)
        self._manifest = manifest

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
