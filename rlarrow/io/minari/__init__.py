"""Minari datasets (``arrow``, ``parquet`` and ``hdf5`` backends): read, imported, written.

The package's parts, by concept: :mod:`~rlarrow.io.minari.minari_reading` (:func:`read_minari`,
:func:`import_minari`, :func:`is_minari_dir`: a dataset as an episode source),
:mod:`~rlarrow.io.minari.minari_episodes` (one episode's part files or HDF5 group read and
checked), :mod:`~rlarrow.io.minari.minari_spaces` (columns in their space's shape, JPEG images,
gymnasium spaces for an export) and :mod:`~rlarrow.io.minari.minari_writing`
(:func:`write_minari`, :func:`export_minari`, with Minari's own writer).
``from rlarrow.io.minari import X`` keeps working for every name the module had.

Example:
    >>> import rlarrow.io.minari as minari_io
    >>> [name for name in minari_io.__all__ if name.startswith(("read_", "write_"))]
    ['read_minari', 'write_minari']
"""

from __future__ import annotations

from rlarrow.io.minari.minari_reading import MinariOptions, import_minari, is_minari_dir, read_minari
from rlarrow.io.minari.minari_writing import DATA_FORMATS as DATA_FORMATS
from rlarrow.io.minari.minari_writing import DATASET_KEYS as DATASET_KEYS
from rlarrow.io.minari.minari_writing import export_minari, write_minari

__all__ = ["MinariOptions", "export_minari", "import_minari", "is_minari_dir", "read_minari", "write_minari"]
