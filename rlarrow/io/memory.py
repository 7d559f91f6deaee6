"""Replay-memory snapshots: the in-memory form every memory importer produces.

A snapshot is what a skrl/rofunc ``Memory`` export holds: named tensors shaped
``(memory_size, num_envs, *size)``. :meth:`MemorySnapshot.to_table` lays it out as rows
of the store's ``memory`` table (memory-major: memory index, then env index), without
copying the tensors.

Example:
    >>> import numpy as np
    >>> snap = MemorySnapshot({"states": np.zeros((4, 2, 3), np.float32)}, name="m")
    >>> snap.memory_size, snap.num_envs, snap.to_table("run", 0).num_rows
    (4, 2, 8)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow import schema as _schema
from rlarrow.errors import InvalidInputError

__all__ = ["MemorySnapshot"]


@dataclass
class MemorySnapshot:
    """Named tensors of one replay-memory export, ``(memory_size, num_envs, *size)`` each.

    Attributes:
        tensors: name -> array, in the order the file holds them.
        name: the snapshot's name (the export's file stem).
        path: the file it came from, if any.
        source_format: ``"pt"``, ``"npz"``, ``"csv"`` or ``"parquet"``.
        is_full, write_pointer, env_pointer: the buffer state, None when the source does not
            say (legacy exports never do).
    """

    tensors: dict[str, np.ndarray]
    name: str = ""
    path: str | None = None
    source_format: str = ""
    is_full: bool | None = None
    write_pointer: int | None = None
    env_pointer: int | None = None

    def __post_init__(self) -> None:
        problems = []
        shapes = {}
        for name, value in self.tensors.items():
            if not isinstance(value, np.ndarray) or value.ndim < 3:
                problems.append(f"{name!r}: expected an array of shape (memory_size, num_envs, size), "
                                f"got {getattr(value, 'shape', type(value).__name__)}")
                continue
            shapes[name] = value.shape[:2]
            if name in _schema.table("memory").column_names:
                problems.append(f"{name!r}: the name of a memory-table column; rename the tensor")
        if not self.tensors:
            problems.append("no tensors")
        if len(set(shapes.values())) > 1:
            problems.append("tensors disagree on (memory_size, num_envs): "
                            + ", ".join(f"{n} {s}" for n, s in shapes.items()))
        if problems:
            raise InvalidInputError(self.path, "not a replay-memory snapshot: " + "; ".join(problems))

    @property
    def memory_size(self) -> int:
        """Rows per environment."""
        return int(next(iter(self.tensors.values())).shape[0])

    @property
    def num_envs(self) -> int:
        """Number of environments."""
        return int(next(iter(self.tensors.values())).shape[1])

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {v.dtype}{list(v.shape[2:])}" for n, v in self.tensors.items())
        return (f"MemorySnapshot({self.name!r}, memory_size={self.memory_size}, "
                f"num_envs={self.num_envs}, {shapes})")

    def to_table(self, run_id: str, snapshot_id: int) -> pa.Table:
        """Rows of the store's ``memory`` table, memory index major, env index minor."""
        ms, ne = self.memory_size, self.num_envs
        rows = ms * ne
        idx = np.arange(rows)
        columns: dict[str, Any] = {
            "run_id": run_id,
            "snapshot_id": snapshot_id,
            "snapshot_name": self.name or None,
            "memory_index": idx // ne,
            "env_index": (idx % ne).astype(np.int32),
            "memory_size": ms,
            "num_envs": ne,
            "is_full": self.is_full,
            "write_pointer": self.write_pointer,
            "env_pointer": self.env_pointer,
        }
        if self.is_full:
            columns["filled"] = np.full(rows, True)
        elif self.is_full is False and self.write_pointer is not None:
            columns["filled"] = (idx // ne) < self.write_pointer
        for name, value in self.tensors.items():
            columns[name] = value.reshape(rows, *value.shape[2:])
        return _schema.build("memory", columns, num_rows=rows)


def check_mapping(path: str | os.PathLike[str], data: Any, what: str) -> Mapping[str, Any]:
    """Refuse anything but a str-keyed mapping, naming the file."""
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise InvalidInputError(path, f"expected a dict of named tensors, got {type(data).__name__}"
                                f" ({what})")
    return data
