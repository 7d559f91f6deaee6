"""A pyarrow filesystem that logs the bytes each process reads, by Ray node: what a node fetched.

``counting(log_dir)`` wraps ``pyarrow.fs.LocalFileSystem``, or another filesystem (``inner``: the
S3 test server's), as a ``PyFileSystem``, which pickles, so Ray tasks get it with the store;
it only reads. Every read of a file appends ``node bytes path`` to
``log_dir/<pid>.log`` (node: the Ray node id; ``driver`` outside a Ray task).
:func:`bytes_by_node` sums the logs.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


def _where() -> str:
    import sys

    ray = sys.modules.get("ray")  # (asking Ray where it runs would start one when none is)
    if ray is None or not ray.is_initialized():
        return "driver"
    try:
        ctx = ray.get_runtime_context()
        if ctx.get_task_id() is None:
            return "driver"
        return str(ctx.get_node_id())
    except Exception:  # (no Ray here)
        return "driver"


class _Counted:
    """A file whose reads are logged."""

    def __init__(self, raw: Any, path: str, log_dir: str) -> None:
        self.raw, self.path, self.log_dir = raw, path, log_dir
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        got = self.raw.read(n) if n is not None and n >= 0 else self.raw.read()
        with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as log:  # (each read, as it is)
            log.write(f"{_where()} {len(got)} {self.path}\n")
        return bytes(got)

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def size(self) -> int:
        return int(self.raw.size())

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.raw.close()


class CountingHandler(pafs.FileSystemHandler):
    """The files of ``inner`` (default: the local disk), each read counted (see the module)."""

    def __init__(self, log_dir: str, inner: pafs.FileSystem | None = None) -> None:
        self.log_dir = log_dir
        self.fs = inner if inner is not None else pafs.LocalFileSystem()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CountingHandler) and other.log_dir == self.log_dir

    def __hash__(self) -> int:
        return hash(self.log_dir)

    def __reduce__(self) -> tuple[Any, ...]:
        return (CountingHandler, (self.log_dir, self.fs))

    def get_type_name(self) -> str:
        return "counting"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_Counted(self.fs.open_input_file(path), path, self.log_dir), mode="r")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("a counting filesystem only reads")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def counting(log_dir: str | os.PathLike[str], inner: pafs.FileSystem | None = None) -> pafs.PyFileSystem:
    """A filesystem over the local disk (or ``inner``) that logs its reads into ``log_dir``."""
    os.makedirs(log_dir, exist_ok=True)
    return pafs.PyFileSystem(CountingHandler(os.fspath(log_dir), inner))


def bytes_by_node(log_dir: str | os.PathLike[str], suffix: str = "") -> Counter:
    """Bytes read per node (``driver``: outside Ray tasks), of the files whose path ends in ``suffix``."""
    total: Counter = Counter()
    for log in Path(log_dir).glob("*.log"):
        for line in log.read_text().splitlines():
            node, count, path = line.split(" ", 2)
            if path.endswith(suffix):
                total[node] += int(count)
    return total
