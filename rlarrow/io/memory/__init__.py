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
)
from rlarrow.io.memory.snapshot import (
    ZipMember as ZipMember,
)
from rlarrow.io.memory.snapshot import (
    atomic_output as atomic_output,
)
from rlarrow.io.memory.snapshot import (
    check_mapping as check_mapping,
)
from rlarrow.io.memory.snapshot import (
    check_zip_crcs as check_zip_crcs,
)
from rlarrow.io.memory.snapshot import (
    export_tensors as export_tensors,
)
from rlarrow.io.memory.snapshot import (
    is_zip as is_zip,
)
from rlarrow.io.memory.snapshot import (
    tensor_name_problem as tensor_name_problem,
)
from rlarrow.io.memory.snapshot import (
    zip_crc_check as zip_crc_check,
)
from rlarrow.io.memory.snapshot import (
    zip_members as zip_members,
)

__all__ = ["MemorySnapshot"]
