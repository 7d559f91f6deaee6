"""Codecs that several formats share, below the formats and above ``core/``.

Not a format (nothing here reads a whole dataset or touches a store): the byte-level pieces
that more than one format in :mod:`rlarrow.io` needs, and that ``core/`` (the data model and
the store) has no use for.

- :mod:`.tfrecord`: TFRecord framing, read and written a chunk at a time (TensorBoard event
  files and RLDS/TFDS shards);
- :mod:`.crc32c`: its CRC-32C, for many records at once;
- :mod:`.hdf5_files`: HDF5 files read without trusting them (what :mod:`rlarrow.io.hdf5` and
  :mod:`rlarrow.io.minari` share).

Formats may import this package; it imports only :mod:`rlarrow.core`.
"""

from __future__ import annotations

__all__: list[str] = []
