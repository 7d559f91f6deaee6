"""TensorBoard event files (``tfevents``) to and from the ``scalars`` table, without TensorFlow.

An event file is a sequence of TFRecords (``uint64`` length, masked CRC-32C of the length,
the bytes, masked CRC-32C of the bytes), each an ``Event`` protocol buffer. rlarrow decodes
them itself:

- **Framing and checksums** are vectorised with NumPy over chunks of the file (memory stays
  bounded: a chunk at a time), and every record's two CRCs are checked.
- **Scalars in every encoding** become rows of ``scalars``: ``simple_value``; tensors with
  ``float_val``, ``double_val``, ``half_val`` (float16 and bfloat16, decoded to their true
  values), ``int_val``/``int64_val`` (exact integers in ``value_int``, also beyond 2^53),
  ``bool_val``, ``uint32_val``/``uint64_val``, and raw little-endian ``tensor_content`` as
  TensorFlow 2 writes it. NaN, ±inf and -0.0 are kept; steps and wall times are exact.
- **rlarrow's own exact values**: what rlarrow writes is always a ``simple_value`` (float32,
  the one field every reader of event files reads: TensorBoard's ``EventAccumulator``,
  tbparse, tianshou's ``restore_logged_data``, skrl's ``TensorboardFileIterator``). A value
  float32 does not hold exactly (float64, int64, another dtype or encoding) also carries,
  in its summary metadata, plugin :data:`EXACT_PLUGIN` (``rlarrow_exact``) whose content is
  a one-element ``TensorProto`` with the exact value (field 1), the row's ``encoding`` when
  not the tensor's own (field 2) and its ``plugin`` (field 3). Other readers ignore plugin
  metadata on a ``simple_value``; rlarrow's reader takes the exact row from it. Files
  written before (a ``double_val``/``int64_val`` tensor per value) still read exactly.
- **Everything else** (histograms, images, audio, text, other plugins' tensors, graphs, run
  metadata, session logs) is counted by kind in the :class:`TfeventsReport` and skipped.
- **Damage**: a truncated last record (a run still writing, or killed) ends the file with an
  :class:`~rlarrow.core.errors.TruncatedInputWarning`, keeping every complete record before it; a
  record whose checksum fails raises :class:`~rlarrow.core.errors.CorruptFileError` naming the
  file and byte offset, or is skipped (and counted) with ``on_corrupt="skip"``. A length
  field is never trusted beyond the bytes the file still holds: a huge one (up to 2^64 - 1)
  fails its checksum, or reads as that incomplete last record, and never allocates.

A directory is read recursively: every directory holding event files (names containing
``tfevents``) is one TensorBoard run, named by its path below the root (``"."`` for the root
itself), so ``add_scalars`` folders stay distinct runs. Files of a run are read in name
order, which is time order.

The package, a module per concern (each imports only those above it in this list):

- (:mod:`rlarrow.io.codecs.tfrecord`, shared with the RLDS reader: TFRecord framing, finding and
  checking records in a file read a chunk at a time, truncated and corrupt records, framing
  payloads to write; and :mod:`rlarrow.io.codecs.crc32c`, its checksum, for many records at once.)
- :mod:`.proto`: the protobuf wire format of ``Event``, ``Summary`` and ``TensorProto``:
  decoding one record (the generic path), encoding what the writer writes.
- :mod:`.decode`: a chunk of records to a ``scalars`` record batch (vectorised for the
  common record shape, :mod:`.proto` for the rest); :func:`scope_of`.
- :mod:`.events`: event files to and from Arrow, without a store: :func:`find_runs`,
  :class:`TfeventsReader`, :func:`read_tfevents` (a table), :func:`scan_tfevents` (a
  ``pa.RecordBatchReader`` streamed in bounded memory), :class:`EventFileWriter`,
  :func:`write_tfevents`.
- :mod:`.transfer`: event files to and from a store: :func:`import_tfevents`,
  :func:`export_tfevents`.

Everything a user calls is importable from here (``__all__``).

Example:
    >>> import tempfile
    >>> import rlarrow.io.tfevents as tfe
    >>> log = tempfile.mkdtemp()
    >>> with tfe.EventFileWriter(log) as w:
    ...     for step in range(1, 4):
    ...         w.add_scalar("training/loss", 1 / step, step=step, wall_time=1.7e9 + step)
    >>> table = tfe.read_tfevents(log)
    >>> table.select(["tag", "scope", "step", "value"]).to_pylist()[-1]
    {'tag': 'training/loss', 'scope': 'train', 'step': 3, 'value': 0.3333333432674408}
    >>> sum(batch.num_rows for batch in tfe.scan_tfevents(log))  # streamed, a chunk at a time
    3
    >>> table = tfe.read_tfevents("runs/")  # doctest: +SKIP
    >>> table.group_by(["run_id", "tag"]).aggregate([("value", "mean")])  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.codecs.tfrecord import CHUNK_BYTES as CHUNK_BYTES
from rlarrow.io.tfevents.decode import SCOPES as SCOPES
from rlarrow.io.tfevents.decode import scope_of
from rlarrow.io.tfevents.events import (
    EventFileWriter,
    TfeventsReader,
    TfeventsReport,
    is_event_file,
    read_tfevents,
    scan_tfevents,
    write_tfevents,
)
from rlarrow.io.tfevents.events import (
    find_runs as find_runs,
)
from rlarrow.io.tfevents.events import (
    is_tfevents_source as is_tfevents_source,
)
from rlarrow.io.tfevents.proto import EXACT_PLUGIN as EXACT_PLUGIN
from rlarrow.io.tfevents.transfer import export_tfevents, import_tfevents

__all__ = [
    "EventFileWriter", "TfeventsReader", "TfeventsReport", "export_tfevents", "import_tfevents",
    "is_event_file", "read_tfevents", "scan_tfevents", "scope_of", "write_tfevents",
]
