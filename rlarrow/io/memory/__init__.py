"""Replay-memory exports (skrl/rofunc ``Memory``): named tensors ``(memory_size, num_envs, size)``.

* :mod:`~rlarrow.io.memory.snapshot`: the snapshot model shared by the three file formats;
* :mod:`~rlarrow.io.memory.pt`, :mod:`~rlarrow.io.memory.npz`, :mod:`~rlarrow.io.memory.csv`:
  each file format read to and written from a snapshot (``read_*``/``write_*``);
* :mod:`~rlarrow.io.memory.importer`: exports into a store's ``memory`` table and back;
* :mod:`~rlarrow.io.memory.unroll`: snapshots to episodes (gymnasium autoreset aware), on
  :mod:`~rlarrow.io.memory.rows` (tensors by role, each env's rows in time order) and
  :mod:`~rlarrow.io.memory.autoreset` (the vector env's autoreset mode, read from the data).
"""

from rlarrow.io.memory.snapshot import (
    MemorySnapshot,
    ZipMember,
    atomic_output,
    check_mapping,
    check_zip_crcs,
    export_tensors,
    is_zip,
    tensor_name_problem,
    zip_crc_check,
    zip_members,
)

__all__ = [
    "MemorySnapshot",
    "ZipMember",
    "atomic_output",
    "check_mapping",
    "check_zip_crcs",
    "export_tensors",
    "is_zip",
    "tensor_name_problem",
    "zip_crc_check",
    "zip_members",
]
