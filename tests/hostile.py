"""Run an rlarrow command under ``strace`` and list every file access that reached a canary directory.

The hostile-input suite (issue 36) plants symlinks, ``../`` names, absolute paths and HDF5
external links that point into a *canary* directory outside the store, the input and the ``-o``
target, runs the command in a subprocess under ``strace -f``, and asserts that no system call
touched the canary. Paths are judged after resolution: a successful ``openat("STORE/.rlarrow.lock")``
through a symlink into the canary is an access to the canary, while ``lstat``/``readlink``/
``unlink`` of the link itself (or an ``O_NOFOLLOW`` open, which fails on a link) is not.

    >>> from hostile import traced                                  # doctest: +SKIP
    >>> done, touched = traced(["check", str(store)], canary=outside, cwd=tmp_path)
    >>> assert not touched, touched
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HAVE_STRACE = shutil.which("strace") is not None
needs_strace = pytest.mark.skipif(not HAVE_STRACE, reason="the hostile-input suite traces file access with "
                                  "strace: apt-get install strace")

#: system calls that act on a symlink itself rather than what it points to (when given a path)
_NO_FOLLOW = {"lstat", "lstat64", "readlink", "readlinkat", "unlink", "unlinkat", "rename", "renameat",
              "renameat2", "symlink", "symlinkat", "rmdir", "lchown", "lgetxattr", "llistxattr",
              "lsetxattr", "lremovexattr", "lutimes"}
#: system calls whose first (rename, link: first two) string arguments are paths
_PATHS = {"open", "openat", "openat2", "creat", "stat", "lstat", "newfstatat", "statx", "access", "faccessat",
          "faccessat2", "readlink", "readlinkat", "unlink", "unlinkat", "rename", "renameat", "renameat2",
          "mkdir", "mkdirat", "rmdir", "symlink", "symlinkat", "link", "linkat", "chmod", "fchmodat",
          "chown", "fchownat", "lchown", "truncate", "utimensat", "utimes", "chdir", "execve", "getxattr",
          "lgetxattr", "setxattr", "lsetxattr", "listxattr", "llistxattr", "statfs", "mknod", "mknodat",
          "inotify_add_watch", "name_to_handle_at"}
_CALL = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)\]?\s+(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?)")
_DIRFD = re.compile(r"^(?:AT_FDCWD|\d+<(?P<dir>[^>]*)>),\s*")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_FD = re.compile(r"\b\d+<(/[^>]*)>")


def _decode(s: str) -> str:
    return bytes(s, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def _accessed(line: str, cwd: Path) -> list[Path]:
    """The paths one strace line's successful call resolved (symlinks followed where the call follows)."""
    m = _CALL.match(line)
    if not m or m["ret"] == "?" or int(m["ret"]) < 0:
        return []
    name, args = m["name"], m["args"]
    base = cwd
    d = _DIRFD.match(args)
    if d and name.endswith("at") or name in ("statx", "newfstatat", "faccessat2", "openat2"):
        if d and d["dir"]:
            base = Path(d["dir"])
    no_follow = name in _NO_FOLLOW or "AT_SYMLINK_NOFOLLOW" in args or "O_NOFOLLOW" in args
    out = [Path(fd) for fd in _FD.findall(line)]  # (-y: every fd as the file it is, symlinks resolved)
    strings = _STRING.findall(args)[:2] if name in _PATHS else []
    if name in ("symlink", "symlinkat"):
        strings = strings[1:]  # (the first is the link's text, not a path it touches)
    for raw in strings:
        text = _decode(raw)
        if "\x00" in text or not text:
            break
        p = Path(text)
        p = p if p.is_absolute() else base / p
        if no_follow or name in ("rename", "renameat", "renameat2", "symlink", "symlinkat"):
            out.append(Path(os.path.realpath(p.parent)) / p.name)
        else:
            out.append(Path(os.path.realpath(p)))
        if name not in ("rename", "renameat", "renameat2", "link", "linkat"):
            break
    return out


def _run_traced(argv: list[str], *, cwd: Path, env: dict[str, str] | None, timeout: float
                ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``argv`` under ``strace -f``: the finished process and the trace's lines."""
    log = cwd / f".strace-{os.getpid()}-{len(list(cwd.glob('.strace-*')))}.log"
    done = subprocess.run(["strace", "-f", "-qq", "-y", "-s", "4096", "-e", "trace=%file",
                           "-o", str(log), "--", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    lines = log.read_text(errors="replace").splitlines()
    log.unlink()
    return done, lines


def _touching(lines: list[str], canary: Path, cwd: Path) -> list[str]:
    """The lines whose call reached ``canary`` (resolved)."""
    root = Path(os.path.realpath(canary))
    return [line for line in lines
            if any(path == root or root in path.parents for path in _accessed(line, cwd))]


def traced(args: list[str], *, canary: Path, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 300, module: str = "rlarrow"
           ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``python -m rlarrow ARGS`` (or ``python ARGS`` with ``module=""``) under strace.

    Returns the finished process and the strace lines whose call reached ``canary`` (resolved).
    ``args`` with ``module=""`` is e.g. ``["-c", CODE]``.
    """
    argv = [sys.executable] + (["-m", module] if module else []) + list(args)
    done, lines = _run_traced(argv, cwd=cwd, env=env, timeout=timeout)
    return done, _touching(lines, canary, cwd)


_DRIVER = r"""
import contextlib, io, json, os, sys
from rlarrow.cli.commands import main
cases = json.load(open(sys.argv[1]))
results = []
for i, argv in enumerate(cases):
    try:
        os.stat(f"/rlarrow-hostile-case-{i}")  # (a marker in the trace: case i begins)
    except OSError:
        pass
    err, out = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # (what `python -m rlarrow` would print as a traceback)
            import traceback
            traceback.print_exc()
            code = 1
    results.append({"returncode": code, "stderr": err.getvalue(), "stdout": out.getvalue()})
json.dump(results, open(sys.argv[2], "w"))
"""
_MARKER = re.compile(r"/rlarrow-hostile-case-(\d+)")


def traced_many(cases: list[list[str]], *, canaries: list[Path], cwd: Path, env: dict[str, str] | None = None,
                timeout: float = 600) -> list[tuple[int, str, list[str]]]:
    """:func:`traced` for many ``rlarrow`` command lines, run one after another in one traced process.

    One interpreter start for all (most of a traced command's time), each command run as
    ``python -m rlarrow`` runs it (``rlarrow.cli.commands.main``). Returns, per command, its
    exit status, what it printed to stderr and the calls that reached its canary (``canaries``:
    one per command; the interpreter's start, before the first, may reach none of them).
    """
    import json

    given, got = cwd / ".hostile-cases.json", cwd / ".hostile-results.json"
    given.write_text(json.dumps(cases))
    done, lines = _run_traced([sys.executable, "-c", _DRIVER, str(given), str(got)], cwd=cwd, env=env,
                              timeout=timeout)
    if done.returncode != 0 or not got.exists():
        raise AssertionError(f"the traced driver failed: {done.stderr[-3000:]}")
    results = json.loads(got.read_text())
    given.unlink()
    got.unlink()
    per_case: list[list[str]] = [[] for _ in cases]
    case = -1  # (before the first marker: the interpreter's start, which reads no case's input)
    for line in lines:
        marker = _MARKER.search(line)
        if marker:
            case = int(marker[1])
        elif case >= 0:
            per_case[case].append(line)
    start = lines[:next((i for i, x in enumerate(lines) if _MARKER.search(x)), len(lines))]
    assert not [t for c in canaries for t in _touching(start, c, cwd)]
    return [(r["returncode"], r["stderr"], _touching(mine, canary, cwd))
            for r, mine, canary in zip(results, per_case, canaries, strict=True)]
