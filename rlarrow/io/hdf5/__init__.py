"""D4RL and robomimic HDF5 files: read as episode sources, imported, written (robomimic).

The package's parts: :mod:`~rlarrow.io.hdf5.hdf5_reading` (:func:`read_hdf5`, the importers,
layout detection), :mod:`~rlarrow.io.hdf5.d4rl` and :mod:`~rlarrow.io.hdf5.robomimic` (each
layout's datasets as chunks of RLDS rows, through :mod:`~rlarrow.io.hdf5.hdf5_steps`), and
:mod:`~rlarrow.io.hdf5.robomimic_writing` (:func:`write_robomimic`, :func:`export_robomimic`).
``from rlarrow.io.hdf5 import X`` keeps working for every name the module had.

Example:
    >>> import rlarrow.io.hdf5 as hdf5
    >>> [name for name in hdf5.__all__ if name.startswith(("read_", "write_"))]
    ['read_hdf5', 'write_robomimic']
"""

from __future__ import annotations

from rlarrow.io.hdf5.hdf5_common import D4RL_KEYS as D4RL_KEYS
from rlarrow.io.hdf5.hdf5_common import SMALL_ELEMENTS as SMALL_ELEMENTS
from rlarrow.io.hdf5.hdf5_reading import (
    HDF5Options,
    hdf5_layout,
    import_d4rl,
    import_hdf5,
    import_robomimic,
    read_hdf5,
)
from rlarrow.io.hdf5.robomimic_writing import export_robomimic, write_robomimic

__all__ = [
    "HDF5Options", "export_robomimic", "hdf5_layout", "import_d4rl", "import_hdf5", "import_robomimic",
    "read_hdf5", "write_robomimic",
]
