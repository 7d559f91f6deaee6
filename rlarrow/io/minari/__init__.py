"""Minari datasets (``arrow``, ``parquet`` and ``hdf5`` backends): read, imported, written.

The package's parts: :mod:`~rlarrow.io.minari.minari_reading` (:func:`read_minari`,
:func:`import_minari`, :func:`is_minari_dir`). ``from rlarrow.io.minari import X`` keeps
working for every name the module had.

Example:
    >>> import rlarrow.io.minari as minari_io
    >>> [name for name in minari_io.__all__ if name.startswith(("read_", "write_"))]
    ['read_minari', 'write_minari']
"""

from __future__ import annotations

from rlarrow.io.minari.minari_reading import (
    DATA_FORMATS,
    DATASET_KEYS,
    export_minari,
    import_minari,
    is_minari_dir,
    read_minari,
    write_minari,
)

__all__ = ["DATASET_KEYS", "DATA_FORMATS", "export_minari", "import_minari", "is_minari_dir", "read_minari",
           "write_minari"]
