"""Real processes for the kill loops, forked from one interpreter that imported rlarrow once.

A kill loop starts a writer, SIGKILLs it at a random moment and checks the store, fifty times.
Started as ``python -c`` each time, every round paid an interpreter's start and the imports of
rlarrow, NumPy, PyArrow and the recorder (about a second of CPU each, twice a round with
``rlarrow info``), which was most of the loop. A :class:`ForkServer` is started once, imports
those modules, then forks a child per round: a real process with its own pid, running the same
script in the same way (``sys.argv`` set, ``__name__ == "__main__"``), killed by a real SIGKILL.
The server opens no store and writes no file: it only imports. (Its only other threads are the
pools NumPy's OpenBLAS and PyArrow start on import, which both libraries rebuild after a fork.)

Example:
    >>> with ForkServer(["rlarrow"]) as server:
    ...     child = server.start("import sys; print('ready', flush=True); print(sys.argv[1])", "x")
    ...     child.wait_ready()
    ...     child.kill()
    ['x', 'done', '0']
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}

SERVER = r"""
import importlib, json, os, signal, sys, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
print("server", flush=True)
for line in sys.stdin:
    order = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the child: the script, as `python -c SCRIPT ARGS...` runs it
        code = 1
        try:
            code = 0
            sys.stdin.close()
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            if order["out"] is not None:
                fd = os.open(order["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
            print("pid", os.getpid(), flush=True)
            sys.argv = ["-c", *order["argv"]]
            exec(compile(order["code"], "<child>", "exec"), {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            if order["linger"]:  # finished: wait for the kill (never reaped before it: no pid reused)
                print("done", code, flush=True)
                os.close(os.open(order["done"], os.O_WRONLY | os.O_CREAT))
                while True:
                    signal.pause()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    # (on a line of its own: a child killed in the middle of a line left that line unended)
    print("\nexit", os.waitstatus_to_exitcode(status), flush=True)
"""


class Child:
    """One forked child: its pid, the lines it printed, how it ended."""

    def __init__(self, server: ForkServer, done: Path) -> None:
        self.server = server
        self.pid = 0
        self.lines: list[str] = []
        self.done = done

    def ended(self) -> bool:
        """Whether the child's script has ended (it waits for its kill then), without blocking."""
        return self.done.exists()

    def _line(self) -> str:
        """The next line the child (or the server) printed, blank lines skipped."""
        assert self.server.proc.stdout is not None
        while True:
            line = self.server.proc.stdout.readline()
            assert line, "the fork server died"
            if line.strip():
                return line.strip()

    def wait_ready(self) -> None:
        """Read the child's pid, then its lines until ``ready`` (as ``python -c`` children print)."""
        words = self._line().split()
        assert words[0] == "pid", words
        self.pid = int(words[1])
        while (line := self._line()) != "ready":
            assert not line.startswith("exit "), f"the child ended before it was ready: {self.lines}"
            self.lines.append(line)

    def readline(self) -> str:
        """The child's next line of output."""
        line = self._line()
        assert not line.startswith("exit "), f"the child ended: {self.lines}"
        self.lines.append(line)
        return line

    def kill(self) -> list[str]:
        """SIGKILL the child; return what it printed after ``ready`` (one word per item).

        A child whose script ended before the kill printed ``done CODE`` and waited for it.
        """
        os.kill(self.pid, signal.SIGKILL)
        code, out = self.finish()
        assert code == -signal.SIGKILL, f"the child ended ({code}) before its kill: {out}"
        return out

    def finish(self) -> tuple[int, list[str]]:
        """Wait for the child's end: its exit code (minus the signal that killed it), its words."""
        while not (line := self._line()).startswith("exit "):
            self.lines.append(line)
        return int(line.split()[1]), " ".join(self.lines).split()


class ForkServer:
    """A Python process that imports ``modules`` once, then forks a child per :meth:`start`."""

    def __init__(self, modules: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, *modules], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=ENV)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "server"
        self.scratch = Path(tempfile.mkdtemp(prefix="forkserver-"))
        self.started = 0

    def start(self, code: str, *argv: str, out: Path | None = None, linger: bool = True) -> Child:
        """Fork a child running ``code`` with ``sys.argv[1:] == argv`` (its output to ``out`` if given).

        With ``linger``, a child whose script ends prints ``done CODE`` and waits to be killed.
        """
        assert self.proc.stdin is not None
        self.started += 1
        done = self.scratch / f"done-{self.started}"
        order = {"code": code, "argv": list(argv), "out": None if out is None else os.fspath(out),
                 "linger": linger, "done": os.fspath(done)}
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()
        return Child(self, done)

    def run(self, code: str, *argv: str) -> tuple[int, str]:
        """Run ``code`` in a child to its end: (exit code, its standard output and error)."""
        out = self.scratch / "out"
        child = self.start(code, *argv, out=out, linger=False)
        code_, _ = child.finish()
        return code_, out.read_text()

    def info_works(self, path: Path) -> None:
        """``rlarrow info PATH`` exits 0 in a fresh process, on the store as the last kill left it."""
        code, out = self.run("import sys\nfrom rlarrow.cli.commands import main\nmain(['info', sys.argv[1]])",
                             os.fspath(path))
        assert code == 0, out

    def close(self) -> None:
        """End the server (it exits when its standard input closes)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:  # (a failed check: its children are killed already, or die with the test's tmp_path)
            self.proc.kill()
            self.close()
