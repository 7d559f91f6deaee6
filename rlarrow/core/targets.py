"""Output files and directories written whole or not at all: what every exporter writes through.

An export (``rlarrow export``, ``write_pt``, a SQL result to a file) writes under a hidden
temporary name in the target's own directory and renames it into place only once it is
complete and synced. A failure of any kind (a full disk, a file size limit, Ctrl-C, a bug)
removes the temporary file or directory, and the directories the export created for it,
so that nothing partial is left behind; a file-system failure is raised as an
:class:`~rlarrow.core.errors.OutputError` naming the target and how to fix it.

* :func:`atomic_file`: one file (``DIR/demo.hdf5``, ``memories/x.pt``);
* :func:`fresh_directory`: a directory written whole (a Minari, RLDS, LeRobot or envlogger
  dataset, ``memories/``), which replaces the old one only when asked (``overwrite``);
* :func:`check_target`: whether a directory may be written, before any work is done.

Example:
    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "new", "result.txt")
    >>> with atomic_file(out) as tmp:
    ...     _ = tmp.write_text("done")
    >>> open(out).read(), sorted(os.listdir(os.path.dirname(out)))
    ('done', ['result.txt'])
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from rlarrow.core.errors import InvalidInputError, OutputError, RLArrowError

__all__ = ["atomic_file", "check_target", "fresh_directory", "output_error", "write_failure"]

#: below this many free bytes a writer's own error (torch, HDF5) is taken for a full disk
_NEARLY_FULL = 1 << 20


def write_failure(exc: BaseException, path: str | os.PathLike[str]) -> OSError:
    """``exc`` as an OSError: a writer library's own error (torch's, HDF5's) about writing ``path``.

    Libraries that write files report a full disk in their own words (torch's
    ``RuntimeError: ... iostream error``): an OSError keeps its errno; another error is
    ENOSPC when the filesystem holding ``path`` has (nearly) no room left, else EIO.
    """
    if isinstance(exc, OSError):
        return exc
    try:
        st = os.statvfs(Path(path).parent)
        full = st.f_bavail * st.f_frsize < _NEARLY_FULL
    except OSError:
        full = False
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, f"{os.strerror(code)} ({type(exc).__name__}: {exc})".strip(), os.fspath(path))


def _as_write_failure(exc: BaseException, path: Path) -> OSError | None:
    """The OSError an export's failure amounts to, or None for one that is not about writing.

    An OSError is one (but for a target that exists or went missing, which say so
    themselves); another library's error (Minari's, PyAV's, HDF5's) is one only when the
    disk is (nearly) full: anything else, a bug included, is raised as it is.
    """
    if isinstance(exc, OSError):
        return None if isinstance(exc, FileExistsError | FileNotFoundError) else exc
    if isinstance(exc, RLArrowError) or not isinstance(exc, Exception):
        return None
    failure = write_failure(exc, path)
    return failure if failure.errno == errno.ENOSPC else None


def output_error(target: str | os.PathLike[str], exc: OSError, *, replacing: bool = False) -> OutputError:
    """The :class:`OutputError` for an export to ``target`` that failed with ``exc``.

    The message names the target, the cause, what to do about it, and that nothing was left
    (and, when ``replacing``, that what the target held before is as it was).
    """
    if isinstance(exc, OutputError):
        reason, code = exc.reason, exc.errno
    else:
        reason, code = exc.strerror or str(exc), exc.errno
    hint = {
        errno.ENOSPC: "the disk is full: free space (or write elsewhere with -o) and retry",
        errno.EDQUOT: "the disk quota is used up: free space and retry",
        errno.EFBIG: "a file size limit was reached (ulimit -f): raise it, or write elsewhere",
        errno.EROFS: "the target is on read-only media: write elsewhere with -o",
        errno.EACCES: "permission denied: write elsewhere with -o, or ask for write access",
        errno.EPERM: "permission denied: write elsewhere with -o, or ask for write access",
    }.get(code or 0, "")
    kept = "; what it held before is as it was" if replacing else ""
    return OutputError(target, f"could not be written ({reason}){'; ' + hint if hint else ''}. Nothing "
                       f"partial was left there{kept}; the store was only read, it is unchanged",
                       reason=reason, errno_=code)


def _make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; return those created, deepest first."""
    missing = []
    for p in [directory, *directory.parents]:
        if p.exists():
            break
        missing.append(p)
    directory.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_created(created: list[Path]) -> None:
    """Remove the (empty) directories an export created before it failed, deepest first."""
    for p in created:
        try:
            p.rmdir()
        except OSError:  # not empty (another writer's), or gone: left as it is
            break


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path with ``path``'s file name; move it into place on success.

    The temporary file lies in a hidden sibling directory so that writers which record
    the file name (``torch.save`` names its archive after it) write the same bytes. A
    failure or a kill leaves ``path`` untouched, and no temporary file or directory the
    export created is left. A file-system failure (a full disk) raises an
    :class:`OutputError` naming ``path``.

    Raises:
        FileExistsError: ``path`` exists and not ``overwrite``.
        OutputError: the file could not be written.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: exists; remove it, or replace it (overwrite=True; "
                              "--overwrite in the CLI)")
    created: list[Path] = []
    tmp_dir = path.parent / f".rlarrow-tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        try:
            created = _make_parents(path.parent)
            tmp_dir.mkdir()
            tmp = tmp_dir / path.name
            yield tmp
            _fsync(tmp)
            os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    except BaseException as exc:
        failure = _as_write_failure(exc, path)  # (before the directories go: it asks their disk)
        _remove_created(created)
        if failure is not None:
            raise output_error(path, failure, replacing=path.exists()) from exc
        raise


def check_target(directory: str | os.PathLike[str], *, overwrite: bool, what: str) -> Path:
    """``directory`` as a Path, after checking that an export may write into it.

    Args:
        directory: the directory the export writes.
        overwrite: whether its content may be replaced.
        what: what is exported (named in the error), e.g. ``"an envlogger export"``.

    Raises:
        InvalidInputError: ``directory`` is a file, or holds something and ``overwrite`` is false;
            the message names the directory and ``--overwrite`` / ``overwrite=True``.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise InvalidInputError(path, f"is a file, not a directory: {what} writes a directory; choose "
                                "another -o DIR")
    if not overwrite and path.is_dir():
        held = sorted(p.name for p in path.iterdir())
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise InvalidInputError(path, f"exists and is not empty (holds {shown}); {what} into it would "
                                    "mix with what is there. Choose an empty or new directory, or replace "
                                    "its content with --overwrite (overwrite=True in Python)")
    return path


@contextlib.contextmanager
def fresh_directory(directory: str | os.PathLike[str], *, overwrite: bool, what: str,
                    skip_empty: bool = False) -> Iterator[Path]:
    """Yield an empty directory to write into; it becomes ``directory`` when the block succeeds.

    The files are written into a hidden sibling directory. On success it takes
    ``directory``'s place (the old one, when ``overwrite`` allowed one, is moved aside and
    then deleted); on failure it is deleted, with the parent directories made for it, and
    ``directory`` is left as it was. With ``skip_empty``, a block that wrote nothing leaves
    ``directory`` as it was too. A file-system failure (a full disk) raises an
    :class:`OutputError` naming ``directory``.

    Raises:
        InvalidInputError: see :func:`check_target`.
        OutputError: the directory could not be written.
    """
    path = check_target(directory, overwrite=overwrite, what=what)
    replacing = path.exists()
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = path.parent / f".{path.name}.rlarrow-new-{token}"
    created: list[Path] = []
    try:
        created = _make_parents(path.parent)
        tmp.mkdir()
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if skip_empty and not any(tmp.iterdir()):
            tmp.rmdir()
            _remove_created(created)
            return
        old = path.parent / f".{path.name}.rlarrow-old-{token}"
        if path.exists():
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old.exists():
                os.replace(old, path)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        failure = _as_write_failure(exc, tmp)  # (before the directories go: it asks their disk)
        _remove_created(created)
        if failure is not None:
            raise output_error(path, failure, replacing=replacing) from exc
        raise
