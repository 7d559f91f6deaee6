"""What a program leaves open is committed when it exits or is asked to stop.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Training scripts rarely close their loggers: skrl never closes its ``SummaryWriter``,
tianshou's examples never call ``finalize()``, a notebook is just left. Every rlarrow
writer, logger and recorder that buffers rows therefore registers itself here while it is
open (:func:`track`) and leaves when it is closed (:func:`untrack`). What is still open is
closed, newest first, which commits what it buffered:

- when the interpreter exits normally (the end of the script, ``sys.exit``, an uncaught
  exception, Ctrl-C's ``KeyboardInterrupt``), by an :mod:`atexit` hook;
- when the process is asked to stop with ``SIGTERM`` (or ``SIGHUP``, a closed terminal):
  where that signal still has its default action (nobody installed a handler) and a
  recorder is opened in the main thread, rlarrow installs a handler. It puts the default
  action back first (a second signal ends the process at once), then commits what is
  open and ends the process by the same signal, as the default action would (its exit
  status says so). Where the signal interrupts rlarrow's own code (a step being
  recorded, a commit), it raises :class:`SystemExit` (status 128 + the signal number)
  instead, so that code unwinds as on Ctrl-C before the exit hook commits. A handler
  the program set itself is left alone: its author decides, and can call
  :func:`close_all`.
- when a ``multiprocessing`` child started by fork ends (it leaves by ``os._exit``,
  skipping :mod:`atexit`): its own recorders are committed by a
  ``multiprocessing.util.Finalize`` hook.

A ``SIGKILL`` (or a crash of the interpreter) cannot be caught: what was committed by then
survives (each commit is atomic), and what was buffered since the last flush is lost. The
flush intervals bound that (``flush_every_steps``/``flush_every_seconds`` of the
recorders, ``flush_seconds`` of the loggers).

An object stays registered, so alive, until it is closed or the interpreter exits: one
dropped without ``close()`` is still committed at exit. An object tracked ``weak=True``
(a replay memory, whose tensors may be large) is not kept alive: dropped, it is gone
as it would be without rlarrow. A forked child (a DataLoader worker) starts with an
empty registry: the parent's objects are the parent's to commit.

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
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__: list[str] = []

#: The signals whose default action (ending the process) rlarrow turns into a clean exit.
STOP_SIGNALS: tuple[str, ...] = ("SIGTERM", "SIGHUP")

_lock = threading.RLock()
# id(obj) -> (obj or a weak reference to it, close): insertion ordered, closed newest first.
# Strong references by default: an object dropped without close() must still be committed.
_open: dict[int, tuple[Any, Any, bool]] = {}
_pid = os.getpid()
_stopping = False  # set once the exit commit began: no handler is installed again


def track(obj: Any, close: Callable[[], object], *, weak: bool = False) -> None:
    """Have ``close()`` called at exit (or on SIGTERM) unless :func:`untrack` comes first.

    ``close`` must commit what ``obj`` buffered and be harmless when called twice. Objects
    are closed newest first, so an owner registered after what it owns is closed before it.
    ``weak``: do not keep ``obj`` alive (``close`` must then be one of its methods).
    """
    with _lock:
        if weak:
            _open[id(obj)] = (weakref.ref(obj), weakref.WeakMethod(close), True)
        else:
            _open[id(obj)] = (obj, close, False)
    _install_signal_handlers()


def _target(entry: tuple[Any, Any, bool]) -> Any:
    return entry[0]() if entry[2] else entry[0]


def untrack(obj: Any) -> None:
    """Forget ``obj`` (it was closed); unknown objects are ignored."""
    with _lock:
        entry = _open.get(id(obj))
        if entry is not None and _target(entry) is obj:
            del _open[id(obj)]


def is_tracked(obj: Any) -> bool:
    """Whether ``obj`` is open and will be closed at exit."""
    with _lock:
        entry = _open.get(id(obj))
        return entry is not None and _target(entry) is obj


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
            entry = _open.pop(key)
        obj = _target(entry)
        close = entry[1]() if entry[2] else entry[1]
        if obj is None or close is None:
            continue  # (tracked weakly, and gone)
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - close the others, then report
            failed.append((obj, exc))


def _at_exit() -> None:
    global _stopping
    if os.getpid() != _pid:
        return
    _stopping = True
    for obj, exc in close_all():
        # the interpreter is going away: stderr is all there is to tell the user with
        print(f"rlarrow: at exit, committing what {obj!r} buffered failed: {exc}", file=sys.stderr)


def _forget() -> None:
    """In a forked child: an empty registry of its own."""
    global _pid, _lock, _stopping
    _pid, _stopping = os.getpid(), False
    _lock = threading.RLock()  # (the parent's may have been held by another thread at the fork)
    _open.clear()


class _Hook:
    """What multiprocessing calls in a child it forked (after clearing its finalizers)."""

    @staticmethod
    def in_child(hook: _Hook) -> None:
        import multiprocessing.util

        # a forked multiprocessing child ends by os._exit: atexit does not run, its finalizers do
        multiprocessing.util.Finalize(None, _at_exit, exitpriority=0)


def _hook_multiprocessing() -> None:
    import multiprocessing.util

    multiprocessing.util.register_after_fork(_HOOK, _Hook.in_child)


_HOOK = _Hook()
atexit.register(_at_exit)
os.register_at_fork(after_in_child=_forget)
_hook_multiprocessing()


def _inside_rlarrow(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it runs rlarrow's code (a step being recorded, a commit)."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("rlarrow."):
            return True
        frame = frame.f_back
    return False


def _stop(signum: int, frame: FrameType | None) -> None:
    """A stop signal: commit what is open, then end as the signal's default action would."""
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    if _inside_rlarrow(frame):
        sys.exit(128 + signum)  # unwind the step or commit first, as on Ctrl-C; the exit hook commits
    _at_exit()
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if _stopping or threading.current_thread() is not threading.main_thread():
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
