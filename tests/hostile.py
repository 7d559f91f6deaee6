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


def traced(args: list[str], *, canary: Path, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 300, module: str = "rlarrow"
           ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``python -m rlarrow ARGS`` (or ``python ARGS`` with ``module=""``) under strace.

    Returns the finished process and the strace lines whose call reached ``canary`` (resolved).
    ``args`` with ``module=""`` is e.g. ``["-c", CODE]``.
    """
    log = cwd / f".strace-{os.getpid()}-{len(list(cwd.glob('.strace-*')))}.log"
    argv = [sys.executable] + (["-m", module] if module else []) + list(args)
    done = subprocess.run(["strace", "-f", "-qq", "-y", "-s", "4096", "-e", "trace=%file,%desc",
                           "-o", str(log), "--", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    root = Path(os.path.realpath(canary))
    touched = []
    for line in log.read_text(errors="replace").splitlines():
        for path in _accessed(line, cwd):
            if path == root or root in path.parents:
                touched.append(line)
    log.unlink()
    return done, touched
