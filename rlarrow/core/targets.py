"""Output files and directories written whole or not at all: what every exporter writes through.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

An export (``rlarrow export``, ``write_pt``, a SQL result to a file) writes under a hidden
temporary name in the target's own directory and renames it into place only once it is
complete and synced. A failure of any kind (a full disk, a file size limit, Ctrl-C, a bug)
removes the temporary file or directory, and the directories the export created for it,
so that nothing partial is left behind; a file-system failure is raised as an
:class:`~rlarrow.core.errors.OutputError` naming the target and how to fix it.

* :func:`atomic_file`: one file (``DIR/demo.hdf5``, ``memories/x.pt``);
* :func:`fresh_directory`: a directory written whole (a Minari, RLDS, LeRobot or envlogger
  dataset, ``memories/``), which replaces the old one only when asked (``overwrite``);
* :func:`check_target`: whether a directory may be written, before any work is done;
* :func:`in_child`: a native writer that can crash the process on a full disk (HDF5 does)
  run in a child process, whose death by a signal becomes an :class:`OutputError`;
* :func:`incomplete`: the :class:`OutputError` for a writer that wrote less than it was
  given without saying so (envlogger's Riegeli writer on a full disk).

A relative target is taken from the current directory: the temporary path each helper
yields is absolute, so that a writer which joins paths itself (Minari's) writes inside it.

Example:
    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "new", "result.txt")
    >>> with atomic_file(out) as tmp:
    ...     _ = tmp.write_text("done")
    >>> Path(out).read_text(), sorted(os.listdir(os.path.dirname(out)))
    ('done', ['result.txt'])
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from rlarrow.core.arguments import object_storage_refusal
from rlarrow.core.errors import InvalidInputError, OutputError, RLArrowError

__all__: list[str] = []

_T = TypeVar("_T")

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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:  # (a file system that cannot sync a directory: nothing to do)
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _sync_tree(root: Path) -> None:
    """Sync every file under ``root``, then every directory, deepest first: all of it on disk."""
    dirs = []
    for here, _subdirs, files in os.walk(root):
        dirs.append(Path(here))
        for name in files:
            p = Path(here) / name
            if p.is_file() and not p.is_symlink():
                _fsync(p)
    for d in reversed(dirs):
        _fsync_dir(d)


#: the hidden siblings this module makes: ``.rlarrow-tmp-TOKEN`` (a file's), ``.NAME.rlarrow-new-TOKEN``
#: and ``.NAME.rlarrow-old-TOKEN`` (a directory's), TOKEN being ``PID-HEX``; and beside them the lock
#: ``.rlarrow-live-TOKEN`` that the export holds while it runs
_LEFTOVER = re.compile(
    r"^\.(?:rlarrow-tmp|(?P<name>.+)\.rlarrow-(?P<kind>new|old))-(?P<token>(?P<pid>\d+)-[0-9a-f]{8})$")
_LIVE = re.compile(r"^\.rlarrow-live-(?P<token>(?P<pid>\d+)-[0-9a-f]{8})$")
#: how old a leftover without its lock must be, its process gone, before it is removed (an
#: rlarrow that made no lock, or a disk too full for one)
STALE_SECONDS = 3600.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (EPERM: a process of another user)
        return True
    return True


@contextlib.contextmanager
def _live(parent: Path, token: str) -> Iterator[None]:
    """Hold the lock that says the export ``token`` runs, so that :func:`sweep_leftovers` leaves it be.

    A lock (``flock``), not a pid: an export on another host sharing the directory has its own
    pids, and its lock holds there too (where the file system supports locks).
    """
    import fcntl

    lock = parent / f".rlarrow-live-{token}"
    fd: int | None = None
    with contextlib.suppress(OSError):  # (no room for it: the pid and age rule stands in)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(lock)
            os.close(fd)


def _gone(parent: str, token: str, pid: int, changed: float, older_than: float) -> bool:
    """Whether the export ``token`` has ended (its lock is free; without one: its pid gone, its files old)."""
    import fcntl

    try:
        fd = os.open(os.path.join(parent, f".rlarrow-live-{token}"), os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return pid != os.getpid() and not _alive(pid) and time.time() - changed >= older_than
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: the export runs
    finally:
        os.close(fd)
    return True


def sweep_leftovers(parent: str | os.PathLike[str], *, older_than: float = STALE_SECONDS) -> list[Path]:
    """Clear what killed exports left in ``parent``; return what was removed or put back.

    An export killed (SIGKILL, a power cut) leaves its hidden temporary sibling beside the
    target, never a partial target. When the next export writes beside it, a leftover whose
    export has ended (its lock free; an export holds it while it runs, on any host sharing the
    directory) is removed. One exception: a kill between moving the old target aside and
    moving the new one in leaves no target, and then the old one is put back, as it was.

    Example:
        >>> import tempfile, subprocess, sys
        >>> parent = Path(tempfile.mkdtemp())
        >>> dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
        ...                       capture_output=True, text=True).stdout.strip()
        >>> (parent / f".out.rlarrow-new-{dead}-0123abcd").mkdir()
        >>> [p.name for p in sweep_leftovers(parent, older_than=0)] == [f".out.rlarrow-new-{dead}-0123abcd"]
        True
    """
    done: list[Path] = []
    where = os.fspath(parent)
    try:
        entries = sorted(os.scandir(where), key=lambda e: e.name)
    except OSError:
        return done
    kept = set()  # the tokens of exports still running (or not known to have ended)
    for entry in entries:
        found = _LEFTOVER.match(entry.name)
        if not found:
            continue
        try:
            changed = entry.stat(follow_symlinks=False).st_mtime
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        if not _gone(where, found["token"], int(found["pid"]), changed, older_than):
            kept.add(found["token"])
            continue
        target = os.path.join(where, found["name"] or "")
        if found["kind"] == "old" and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.replace(entry.path, target)  # (killed between the two renames: as it was)
                done.append(Path(target))
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        done.append(Path(entry.path))
    for entry in entries:  # the locks of ended exports
        found = _LIVE.match(entry.name)
        if found and found["token"] not in kept and _gone(where, found["token"], int(found["pid"]), 0.0, 0.0):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    return done


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
    refuse_object_storage(path, "a file")
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: exists; remove it, or replace it (overwrite=True; "
                              "--overwrite in the CLI)")
    created: list[Path] = []
    sweep_leftovers(os.path.abspath(path.parent))
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp_dir = Path(os.path.abspath(path.parent)) / f".rlarrow-tmp-{token}"
    live = contextlib.ExitStack()
    try:
        try:
            created = _make_parents(path.parent)
            live.enter_context(_live(tmp_dir.parent, token))
            tmp_dir.mkdir()
            tmp = tmp_dir / path.name
            yield tmp
            _fsync(tmp)
            os.replace(tmp, path)
            with contextlib.suppress(OSError):  # (the file is in place: a failed sync here loses nothing)
                _fsync_dir(path.parent)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            live.close()
    except BaseException as exc:
        failure = _as_write_failure(exc, path)  # (before the directories go: it asks their disk)
        _remove_created(created)
        if failure is not None:
            raise output_error(path, failure, replacing=path.exists()) from exc
        raise


def refuse_object_storage(target: str | os.PathLike[str], what: str) -> None:
    """Raise an :class:`OutputError` when ``target`` is a URI (``s3://...``): exports write locally.

    ``Path("s3://bucket/x")`` is the local ``s3:/bucket/x``: without this an export would
    create a directory named ``s3:``. The error says how to get the data there today.
    """
    refusal = object_storage_refusal(target, what, kind="output")
    if refusal is not None:
        raise OutputError(target, refusal.partition(": ")[2])


def check_target(directory: str | os.PathLike[str], *, overwrite: bool, what: str) -> Path:
    """``directory`` as a Path, after checking that an export may write into it.

    Args:
        directory: the directory the export writes.
        overwrite: whether its content may be replaced.
        what: what is exported (named in the error), e.g. ``"an envlogger export"``.

    Raises:
        InvalidInputError: ``directory`` is a file, or holds something and ``overwrite`` is false;
            the message names the directory and ``--overwrite`` / ``overwrite=True``.
        OutputError: ``directory`` is a URI (``s3://...``): exports write to local directories.
    """
    refuse_object_storage(directory, what)
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
    sweep_leftovers(os.path.abspath(path.parent))
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = Path(os.path.abspath(path.parent)) / f".{path.name}.rlarrow-new-{token}"
    created: list[Path] = []
    live = contextlib.ExitStack()
    try:
        created = _make_parents(path.parent)
        live.enter_context(_live(tmp.parent, token))
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
        try:
            _sync_tree(tmp)  # every file on disk before the rename makes it the target
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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
        with contextlib.suppress(OSError):  # (the directory is in place: a failed sync loses nothing)
            _fsync_dir(path.parent)
        live.close()
    except BaseException as exc:
        live.close()
        failure = _as_write_failure(exc, tmp)  # (before the directories go: it asks their disk)
        _remove_created(created)
        if failure is not None:
            raise output_error(path, failure, replacing=replacing) from exc
        raise


def _on_disk(target: str | os.PathLike[str]) -> Path:
    """A path in the directory nearest ``target`` that exists: where :func:`write_failure` asks for room."""
    where = Path(os.path.abspath(target))
    while not where.exists() and where != where.parent:
        where = where.parent
    return where / "x"


def incomplete(target: str | os.PathLike[str], what: str) -> OutputError:
    """The :class:`OutputError` for ``what`` written short, a writer having said nothing of it.

    Some native writers (envlogger's Riegeli writer) log a failed write and carry on: the
    export checks what it wrote and raises this when it is not all there. The cause is
    taken for a full disk when the target's filesystem has (nearly) no room left.

    Example:
        >>> import tempfile
        >>> "incomplete" in str(incomplete(tempfile.mkdtemp(), "steps.riegeli holds 3 of 5 records"))
        True
    """
    failure = write_failure(RuntimeError(f"the writer left its output incomplete: {what}"), _on_disk(target))
    return output_error(target, failure)


def _child_main() -> None:
    """A child of :func:`in_child`: die with the parent (Linux), run the call it is sent, answer.

    ``argv``: the parent's pid and the file descriptor to answer on; the call, pickled, on stdin.
    """
    import ctypes
    import pickle
    import sys

    parent, fd = int(sys.argv[1]), int(sys.argv[2])
    if sys.platform.startswith("linux"):  # a parent killed takes its writer with it
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != parent:  # (the parent died before that)
        os._exit(1)
    # (pickle only between this process and the rlarrow process that started it, over its stdin
    # pipe and an inherited fd: never a file, nothing a user or an input supplies)
    fn, args, kwargs = pickle.load(sys.stdin.buffer)
    try:
        answer: tuple[str, object] = ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # the parent raises it, or what it says when it does not pickle
        answer = ("error", exc)
    try:
        data = pickle.dumps(answer)
        pickle.loads(data)
    except Exception:
        data = pickle.dumps(("error-text", f"{type(answer[1]).__name__}: {answer[1]}"))
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _stderr_fd() -> int | None:
    """The process's standard error file descriptor (None: there is none to hand a child)."""
    import sys

    try:
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else None
    except (OSError, ValueError):
        return None


def in_child(target: str | os.PathLike[str], fn: Callable[..., _T], /, *args: object, what: str,
             **kwargs: object) -> _T:
    """``fn(*args, **kwargs)`` run in a fresh Python process, for a writer that may crash it.

    HDF5 can end the process with a segmentation fault when a full disk stops a write:
    nothing in the process can catch that. In a child, its death by a signal is an
    :class:`OutputError` naming ``target`` (a full disk when the filesystem has no room
    left), and the caller's temporary target is removed as for any failure. ``fn`` and its
    arguments must pickle (a module-level function; paths, not open stores), and so must its
    result; an exception ``fn`` raises is raised here. The child is a new interpreter
    (``python -c``, never the caller's ``__main__`` again) importing this rlarrow: it costs
    the imports ``fn`` needs, about a second. It dies with the parent (Linux), and its
    standard output goes to the parent's standard error.

    Raises:
        OutputError: the child died by a signal or exited without an answer.

    Example:
        >>> import tempfile
        >>> in_child(tempfile.mkdtemp(), divmod, 7, 2, what="test")
        (3, 1)
    """
    import pickle
    import signal
    import subprocess
    import sys

    payload = pickle.dumps((fn, args, kwargs))  # (read back only by the child, from a private pipe)
    root = os.fspath(Path(__file__).resolve().parents[2])  # (the child imports this rlarrow)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    read_fd, write_fd = os.pipe()
    try:
        child = subprocess.Popen(
            # (-P: the current directory is not put on the child's path, so a downloaded dataset's
            # h5py.py or numpy.py beside the user is never imported)
            [sys.executable, "-P", "-c", "from rlarrow.core.targets import _child_main; _child_main()",
             str(os.getpid()), str(write_fd)],
            stdin=subprocess.PIPE, stdout=_stderr_fd(),
            pass_fds=(write_fd,), env=env)
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as answers:
        try:
            assert child.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                child.stdin.write(payload)
                child.stdin.close()
            data = answers.read()
            child.wait()
        except BaseException:  # Ctrl-C: the writer stops too, before the temporary target goes
            child.kill()
            child.wait()
            raise
    if not data:
        code = child.returncode
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"exited with status {code} without finishing")
        failure = write_failure(RuntimeError(f"the {what} writer {how}"), _on_disk(target))
        if failure.errno != errno.ENOSPC:
            failure = OSError(errno.EIO, f"the {what} writer {how}; the disk may be full", os.fspath(target))
        raise output_error(target, failure)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    if kind == "error-text":
        raise OutputError(target, f"the {what} writer failed: {value}. Nothing partial was left there; "
                          "the store was only read, it is unchanged", reason=str(value))
    return value  # type: ignore[no-any-return]
