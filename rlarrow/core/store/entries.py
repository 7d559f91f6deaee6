"""The store's own entries are opened where they are, never through a link out of the store.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A store may be downloaded, merged or planted: its lock file, manifest, ``_damaged/``,
``.rlarrow-retired/``, segments, Delta log entries and data files could each be a symbolic
link to a file anywhere. rlarrow never reads or writes through one (issue 36): each entry
is opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO cannot stall it) and must be a
regular file, and each directory of the store it writes into is looked at with ``lstat``
first. A link is refused with a :class:`~rlarrow.core.errors.CorruptFileError` that names it
and says how to fix it; nothing is done to what it points to.

Example:
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> os.symlink("/etc/hostname", d / "_rlarrow_store.json")
    >>> try:
    ...     read_entry(d / "_rlarrow_store.json", what="the store's manifest")
    ... except CorruptFileError as exc:
    ...     print("symbolic link" in str(exc))
    True
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlarrow.core.errors import CorruptFileError

__all__: list[str] = []

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: How to mend a manifest that is a link
MANIFEST_FIX = ("replace the link with a regular copy of this store's manifest, or rebuild the manifest from "
                "the tables' Delta logs with `rlarrow repair STORE --apply` (which sets the link aside in "
                "_damaged/)")


def linked(path: str | os.PathLike[str], what: str, fix: str = "") -> CorruptFileError:
    """The error for a store entry that is a symbolic link (or not the kind of entry it must be)."""
    fix = fix or f"replace it with a regular one (`rm '{os.fspath(path)}'` removes the link)"
    return CorruptFileError(path, f"is a symbolic link, or not a regular file or directory; {what} must be "
                            "one, inside the store, and rlarrow never reads or writes through a link out "
                            f"of a store: {fix}")


def is_regular(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file, looked at with ``lstat`` (a link is not, whatever it names)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_directory(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory, looked at with ``lstat`` (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def refuse_link(path: Path, what: str, fix: str = "") -> bool:
    """Whether ``path`` exists; raises when it is a symbolic link (looked at with ``lstat`` only).

    Raises:
        CorruptFileError: ``path`` is a symbolic link.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError:
        return False  # (what the caller does next reports it)
    if stat.S_ISLNK(mode):
        raise linked(path, what, fix)
    return True


def open_entry(path: Path, flags: int, mode: int = 0o644, *, what: str, fix: str = "") -> int:
    """``os.open(path, flags)`` that never follows a link and opens only a regular file.

    Raises:
        CorruptFileError: ``path`` is a symbolic link, a FIFO, a device or a directory.
        OSError: any other failure to open it (missing, permissions, full disk).
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno in (errno.EISDIR, errno.ENXIO)):
            raise linked(path, what, fix) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise linked(path, what, fix)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_entry(path: Path, *, what: str, fix: str = "") -> bytes:
    """A store entry's bytes, never through a link.

    Raises:
        CorruptFileError: ``path`` is a symbolic link or not a regular file.
        OSError: it cannot be read (missing, permissions).
    """
    fd = open_entry(path, os.O_RDONLY, what=what, fix=fix)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def open_lock(root: Path) -> int:
    """A descriptor of ``root``'s lock file (made when missing) to ``flock``; never through a link.

    Raises:
        CorruptFileError: the lock file is a link (or not a regular file): a writer that
            followed it would sign the first bytes of a file outside the store.
        StoreError: it cannot be opened (permissions, full disk), saying what to do.
    """
    from rlarrow.core.store.files import LOCK_NAME
    from rlarrow.core.store.manifest import write_error

    path = root / LOCK_NAME
    what, fix = "the store's lock file", (f"remove the link (`rm '{path}'`); the next writer makes a regular "
                                         "lock file in its place")
    try:
        return open_entry(path, os.O_RDWR | os.O_CREAT, 0o644, what=what, fix=fix)
    except PermissionError:
        try:  # another user's lock file: flock needs only a read-only descriptor
            return open_entry(path, os.O_RDONLY, what=what, fix=fix)
        except OSError as exc:
            raise write_error(path, exc) from exc
    except OSError as exc:
        raise write_error(path, exc) from exc


def store_dirs(root: Path, rel: str | os.PathLike[str], what: str) -> Path:
    """``root / rel``, each of its directories below ``root`` made where missing and none a link.

    The store's own directories (``_damaged/TABLE``, ``.rlarrow-retired/TABLE``) are looked
    at with ``lstat`` one level at a time, so a planted link at any level is refused before
    anything is moved through it.

    Raises:
        CorruptFileError: a level is a link or not a directory.
        OSError: a directory could not be made (permissions, full disk).
    """
    path = root
    for part in Path(rel).parts:
        path = path / part
        try:
            path.mkdir()
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise linked(path, what, f"move it out of the store (`mv '{path}' ...`) and run the command "
                         "again")
    return path
