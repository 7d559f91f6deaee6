"""What a program leaves open is committed when it exits or is asked to stop.

Training scripts rarely close their loggers: skrl never closes its ``SummaryWriter``,
tianshou's examples never call ``finalize()``, a notebook is just left. Every rlarrow
writer, logger and recorder that buffers rows therefore registers itself here while it is
open (:func:`track`) and leaves when it is closed (:func:`untrack`). What is still open is
closed, newest first, which commits what it buffered:

- when the interpreter exits normally (the end of the script, ``sys.exit``, an uncaught
  exception, Ctrl-C's ``KeyboardInterrupt``), by an :mod:`atexit` hook;
- when the process is asked to stop with ``SIGTERM`` (or ``SIGHUP``, a closed terminal):
  where that signal still has its default action (nobody installed a handler) and a
  recorder is opened in the main thread, rlarrow installs a handler that raises
  :class:`SystemExit` (status 128 + the signal number, as a shell reports a signal), so
  ``finally`` blocks and the exit hook run as for Ctrl-C. A handler the program set
  itself is left alone: its author decides, and can call :func:`close_all`.

A ``SIGKILL`` (or a crash of the interpreter) cannot be caught: what was committed by then
survives (each commit is atomic), and what was buffered since the last flush is lost. The
flush intervals bound that (``flush_every_steps``/``flush_every_seconds`` of the
recorders, ``flush_seconds`` of the loggers).

An object stays registered, so alive, until it is closed or the interpreter exits: one
dropped without ``close()`` is still committed at exit. A forked child (a DataLoader
worker) starts with an empty registry: the parent's objects are the parent's to commit.

Example:
    >>> class Buffer:
    ...     def __init__(self):
    ...         self.rows, self.saved = [], []
    ...         track(self, self.close)
    ...     def close(self):
    ...         untrack(self)
    ...         self.saved += self.rows
    >>> b = Buffer(); b.rows.append(1)
    >>> is_tracked(b)  # until closed: the exit hook (close_all) would close it
    True
    >>> b.close()
    >>> b.saved, is_tracked(b)
    ([1], False)
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["STOP_SIGNALS", "close_all", "is_tracked", "track", "untrack"]

#: The signals whose default action (ending the process) rlarrow turns into a clean exit.
STOP_SIGNALS: tuple[str, ...] = ("SIGTERM", "SIGHUP")

_lock = threading.RLock()
# id(obj) -> (obj, close): insertion ordered, closed newest first. Strong references on
# purpose: an object dropped without close() must still be committed at exit.
_open: dict[int, tuple[Any, Callable[[], object]]] = {}
_hooked = False
_pid = os.getpid()


def track(obj: Any, close: Callable[[], object]) -> None:
    """Have ``close()`` called at exit (or on SIGTERM) unless :func:`untrack` comes first.

    ``close`` must commit what ``obj`` buffered and be harmless when called twice. Objects
    are closed newest first, so an owner registered after what it owns is closed before it.
    """
    global _hooked
    with _lock:
        _open[id(obj)] = (obj, close)
        if not _hooked:
            _hooked = True
            atexit.register(_at_exit)
            os.register_at_fork(after_in_child=_forget)
    _install_signal_handlers()


def untrack(obj: Any) -> None:
    """Forget ``obj`` (it was closed); unknown objects are ignored."""
    with _lock:
        entry = _open.get(id(obj))
        if entry is not None and entry[0] is obj:
            del _open[id(obj)]


def is_tracked(obj: Any) -> bool:
    """Whether ``obj`` is open and will be closed at exit."""
    with _lock:
        entry = _open.get(id(obj))
        return entry is not None and entry[0] is obj


def close_all() -> list[tuple[Any, BaseException]]:
    """Close every tracked object, newest first; return the ``(object, error)`` of those that failed.

    A failure does not stop the others from being closed.
    """
    failed: list[tuple[Any, BaseException]] = []
    while True:
        with _lock:
            if not _open:
                return failed
            key = next(reversed(_open))
            obj, close = _open.pop(key)
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - close the others, then report
            failed.append((obj, exc))


def _at_exit() -> None:
    if os.getpid() != _pid:
        return
    for obj, exc in close_all():
        # the interpreter is going away: stderr is all there is to tell the user with
        print(f"rlarrow: at exit, committing what {obj!r} buffered failed: {exc}", file=sys.stderr)


def _forget() -> None:
    global _pid
    _pid = os.getpid()
    with _lock:
        _open.clear()


def _stop(signum: int, frame: object) -> None:
    """A stop signal: exit as Ctrl-C would, so that ``finally`` blocks and :func:`_at_exit` run."""
    sys.exit(128 + signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works only there; a recorder opened in a thread still commits at exit
    for name in STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:  # (Windows has no SIGHUP)
            continue
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _stop)
        except (ValueError, OSError):  # an embedded interpreter may refuse
            continue
