"""Reader leases: hard links that keep a reader's files readable while writers compact.

:class:`ReaderLease` (made by :meth:`rlarrow.Store.lease` and
:meth:`rlarrow.Store.process_lease`) links the files of a reader's view under
``STORE/.rlarrow-views/<reader>/`` and holds a shared ``flock`` there for its life;
:func:`sweep_views` is how a writer removes the links of readers that are gone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rlarrow.core.errors import StoreError
from rlarrow.core.store.files import HOST

try:  # POSIX advisory locks; without them (Windows) one writer at a time is assumed.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["ReaderLease"]

#: Readers' hard links to the files of their views (see :class:`ReaderLease`).
VIEWS_DIR = ".rlarrow-views"


class _Listing(Protocol):
    """What :meth:`ReaderLease.pin_view` needs of a store."""

    path: Path

    def refresh(self) -> None: ...

    def files(self, table: str, *, refresh: bool = True, layout: int | None = None) -> list[Path]: ...


class ReaderLease:
    """Hard links that keep a reader's files readable while writers compact the store.

    A compaction deletes the files it merged as soon as its output is listed, so a plain
    glob over a table never counts a row twice. A reader whose view (a DuckDB
    connection, a StreamingDataset) names such a file would fail; :meth:`pin` gives it a
    path to the same file under ``STORE/.rlarrow-views/<reader>/`` instead, which stays
    valid until :meth:`release` (or garbage collection) removes the links. The links are
    outside every table directory and cost no copy (one directory entry per file). A
    lease holds a shared ``flock`` on a file in its directory for its life, and a writer
    removes only directories whose lock it can take (readers that died), whatever host
    or PID namespace they ran in. Where links cannot be made (read-only media, where no
    writer runs either; filesystems without hard links) :meth:`pin` returns the path as
    it is.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> with store.lease() as lease:
        ...     paths = [lease.pin(f) for f in store.files("steps")]  # readable until the block ends
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / VIEWS_DIR / f"{HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        self._usable: bool | None = None
        self._state: dict[str, Any] = {"fd": None, "pid": os.getpid(), "directory": None}
        self._finalizer: Any = weakref.finalize(self, _release_view, self._state)

    def _open(self) -> bool:
        """Make this lease's directory and take its lock; False where that cannot be done."""
        views = self.root / VIEWS_DIR
        for _ in range(5):  # another lease may be removing an empty views directory meanwhile
            try:
                if views.is_symlink() or (views.exists() and not views.is_dir()):
                    return False  # never make links through a link out of the store
                views.mkdir(exist_ok=True)
                self.directory.mkdir()
                self._state["directory"] = self.directory  # (what release removes)
                break
            except FileExistsError:
                break
            except FileNotFoundError:
                continue
            except OSError:
                return False
        else:  # pragma: no cover
            return False
        if fcntl is not None:
            # The lock file gets its name only once it is locked: a writer sweeping dead readers
            # that saw it unlocked in between would take the lock and remove this directory,
            # leaving pins that fall back to plain paths (found by the concurrency test).
            held = self.directory / _HELD_NAME
            fresh = held.with_name(f"{_HELD_NAME}.{secrets.token_hex(4)}")
            try:
                fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                os.replace(fresh, held)
            except OSError:
                os.close(fd)
                return False
            self._state["fd"] = fd
        return True

    def pin(self, path: Path) -> Path:
        """A path to ``path``'s file that stays readable while this lease is held.

        Raises:
            FileNotFoundError: the file is gone (a new view may no longer list it).
        """
        if self._usable is None:
            self._usable = self._open()
        if not self._usable:
            return path
        for attempt in range(2):
            target = self.directory / path.parent.name / path.name
            try:
                target.parent.mkdir(exist_ok=True)
                os.link(path, target, follow_symlinks=False)
            except FileExistsError:
                pass
            except FileNotFoundError:
                if not os.path.lexists(path):
                    raise
                # our directory went away (removed by hand, say): pin into a new one, once
                if attempt == 0 and self._reopen():
                    continue
                self._usable = False  # plain paths from now on
                return path
            except OSError:  # no hard links here (EXDEV, EPERM, EMLINK, ...): the plain path
                self._usable = False
                return path
            return target
        return path  # pragma: no cover (the loop returns)

    def _reopen(self) -> bool:
        """A new directory and lock for this lease, after its directory disappeared."""
        fd = self._state.get("fd")
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._state["fd"] = None
        self.directory = self.root / VIEWS_DIR / f"{HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        self._usable = self._open()
        return self._usable

    def release(self) -> None:
        """Remove the links (idempotent): what they pinned may now be deleted by writers."""
        if self._finalizer is not None:
            self._finalizer()

    def pin_view(self, store: _Listing, tables: Sequence[str]) -> dict[str, list[Path]]:
        """The committed files of ``tables``, from one manifest of ``store``, pinned.

        A listed file that is missing (damage, which `rlarrow info` names) keeps its plain
        path: a query that reads it fails naming it; other tables read as usual.

        Raises:
            StoreError: the store changed under 20 attempts in a row.
        """
        for _ in range(20):
            store.refresh()
            view = {t: store.files(t, refresh=False) for t in tables}
            pinned: dict[str, list[Path]] = {t: [] for t in tables}
            for t, files in view.items():
                for f in files:
                    try:
                        pinned[t].append(self.pin(f))
                    except FileNotFoundError:
                        pinned[t].append(f)
            store.refresh()
            if all(store.files(t, refresh=False) == view[t] for t in tables):
                return pinned  # the view held while it was pinned: what is missing is damage
        raise StoreError(f"{store.path}: the store changed under every attempt to take a consistent view "
                         "of it (20 compactions in a row?); try again")

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process (a DataLoader worker) reads the links; only the lease
        # that made them removes them.
        return {"root": self.root, "directory": self.directory, "_usable": self._usable}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state = {"fd": None, "pid": -1}
        self._finalizer = None

    def __enter__(self) -> ReaderLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD_NAME = ".held"
#: The reader lease of each store this process opened (see ``Store.process_lease``).
PROCESS_LEASES: dict[str, ReaderLease] = {}


def _release_view(state: dict[str, Any]) -> None:
    """Remove a lease's links and drop its lock (only in the process that made them)."""
    if state.get("pid") != os.getpid() or state.get("directory") is None:
        return  # a forked child exiting must not take its parent's links with it
    import shutil

    shutil.rmtree(state["directory"], ignore_errors=True)
    fd = state.pop("fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def sweep_views(root: Path) -> None:
    """Remove the link directories of readers that are gone (their lock can be taken)."""
    views = root / VIEWS_DIR
    try:
        if not stat.S_ISDIR(os.lstat(views).st_mode):
            return  # missing, or a link: never followed
        entries = list(os.scandir(views))
    except OSError:
        return
    import shutil

    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            fd = os.open(os.path.join(entry.path, _HELD_NAME), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:  # a lease making its directory now, or one that died doing so
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime > 60:
                    shutil.rmtree(entry.path, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live reader holds it
                shutil.rmtree(entry.path, ignore_errors=True)  # (rmtree never follows links)
        finally:
            os.close(fd)
