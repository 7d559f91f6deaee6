"""Drop-in replacements for skrl's ``skrl.utils.postprocessing`` iterators.

:class:`MemoryFileIterator` yields ``(filename, data)`` for each file matching a glob
pattern, as skrl's does: a dict of torch tensors ``(memory_size, num_envs, size)`` for
``.pt``, of NumPy arrays of the same shape for ``.npz``, and of lists of rows
``(memory_size * num_envs, size)`` for ``.csv``. Unlike skrl's, it loads ``.pt`` files
with ``weights_only=True`` only, reads csv bools as real bools (skrl's reads every one
as ``True``), parses csv with pyarrow, and says what is wrong with a file instead of
yielding an empty dict.

:class:`ArrowMemoryFileIterator` yields ``(filename, pyarrow.RecordBatch)`` in the store's
``memory`` layout, streaming: a large csv never sits in memory whole.

:class:`TensorboardFileIterator` yields ``(dirname, {tag: [[step, value], ...]})`` per event
file, as skrl's does, but without TensorFlow and for every scalar encoding (skrl's reads
only ``simple_value``, so tensor-encoded scalars come back as 0.0).

Example:
    >>> import numpy as np, tempfile
    >>> from rlarrow.io.memory.csv import write_csv
    >>> tmp = tempfile.mkdtemp()
    >>> _ = write_csv({"done": np.array([[[False]], [[True]]]), "x": np.ones((2, 1, 2))},
    ...               f"{tmp}/m.csv")
    >>> for filename, data in MemoryFileIterator(f"{tmp}/*.csv"):
    ...     print(filename, data)
    m.csv {'done': [[False], [True]], 'x': [[1.0, 1.0], [1.0, 1.0]]}
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.errors import UnsupportedInputError

__all__ = ["ArrowMemoryFileIterator", "MemoryFileIterator", "TensorboardFileIterator"]


class MemoryFileIterator:
    """Iterate over exported memories matching ``pathname`` (a glob), in sorted order.

    Args:
        pathname: a path or glob pattern, e.g. ``"runs/*/memories/*.pt"``.

    Yields:
        ``(file name, data)``: data maps tensor names to torch tensors (pt), NumPy arrays
        (npz) or lists of rows (csv; numbers as floats, bools as bools).

    Raises:
        UnsupportedInputError: a file with another extension, or not a memory export.
    """

    def __init__(self, pathname: str) -> None:
        self.n = 0
        self.file_paths = sorted(glob.glob(pathname))

    def __iter__(self) -> MemoryFileIterator:
        return self

    def __len__(self) -> int:
        return len(self.file_paths)

    def __next__(self) -> tuple[str, dict[str, Any]]:
        if self.n >= len(self.file_paths):
            raise StopIteration
        path = self.file_paths[self.n]
        self.n += 1
        ext = Path(path).suffix
        filename = os.path.basename(path)
        if ext == ".pt":
            return filename, _torch_tensors(path)
        if ext == ".npz":
            from rlarrow.io.memory.npz import read_npz

            return filename, dict(read_npz(path).tensors)
        if ext == ".csv":
            return filename, _csv_lists(path)
        raise UnsupportedInputError(path, "unsupported format; memory exports end in .pt, .npz or .csv")


def _torch_tensors(path: str) -> dict[str, Any]:
    from rlarrow.core.deps import require
    from rlarrow.io.memory.pt import read_pt

    torch = require("torch", feature="reading .pt memory exports")
    snapshot = read_pt(path)  # weights_only; refuses anything but a dict of tensors
    return {name: torch.from_numpy(value) for name, value in snapshot.tensors.items()}


def _csv_lists(path: str) -> dict[str, list[list[Any]]]:
    """The lists of rows per tensor that skrl's iterator gives, parsed by pyarrow chunk by chunk."""
    from rlarrow.io.memory.csv import csv_layout, iter_batches

    tensors, types = csv_layout(path)
    names = sorted(tensors)  # skrl's order: names sorted
    out: dict[str, list[list[Any]]] = {name: [] for name in names}
    column_types = {c: pa.bool_() if t == "bool" else pa.float64() for c, t in types.items()}
    for batch in iter_batches(path, column_types):
        for name in names:
            parts = [batch.column(c).to_numpy(zero_copy_only=False) for c in tensors[name]]
            out[name].extend(np.column_stack(parts).tolist())
    return out


class ArrowMemoryFileIterator:
    """Iterate over exported memories matching ``pathname`` as Arrow record batches.

    Each batch holds rows of the store's ``memory`` table (``memory_index``, ``env_index``,
    ..., one column per tensor), with ``run_id`` and ``snapshot_name`` set to the file's
    stem. csv files stream in blocks.

    Args:
        pathname: a path or glob pattern.
        num_envs, memory_size, dtype: for csv exports (see :func:`rlarrow.io.memory.csv.iter_csv_tables`).
        batch_rows: the most rows per batch.

    Example:
        >>> for filename, batch in ArrowMemoryFileIterator("memories/*.npz"):  # doctest: +SKIP
        ...     print(filename, batch.num_rows, batch.schema.field("states").type)
    """

    def __init__(self, pathname: str, *, num_envs: int | None = None, memory_size: int | None = None,
                 dtype: str = "float32", batch_rows: int = 65536) -> None:
        self.file_paths = sorted(glob.glob(pathname))
        self.num_envs = num_envs
        self.memory_size = memory_size
        self.dtype = dtype
        self.batch_rows = batch_rows

    def __len__(self) -> int:
        return len(self.file_paths)

    def __iter__(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        import warnings

        from rlarrow.core.errors import AssumptionWarning, RLArrowError
        from rlarrow.io.memory.importer import detect_format, iter_memory_tables

        def is_csv(path: str) -> bool:
            try:
                return detect_format(Path(path)) == "csv"
            except (RLArrowError, OSError):  # said in its turn, after the files before it
                return False

        num_envs = self.num_envs
        csv_files = [Path(p).name for p in self.file_paths if is_csv(p)]
        if num_envs is None and csv_files:  # said once for all the files, not once per file
            shown = ", ".join(csv_files[:3]) + (", ..." if len(csv_files) > 3 else "")
            warnings.warn(f"assumed num_envs=1 for {len(csv_files)} csv file(s) ({shown}): csv memory "
                          "exports do not record it, so each row is taken as one memory row; pass "
                          "num_envs=... to recover the (memory, env) layout", AssumptionWarning, stacklevel=2)
            num_envs = 1
        for path in self.file_paths:
            p = Path(path)
            for table in iter_memory_tables(p, detect_format(p), p.stem, 0, num_envs, self.memory_size,
                                             self.dtype):
                for batch in table.to_batches(max_chunksize=self.batch_rows):
                    yield p.name, batch


class TensorboardFileIterator:
    """skrl's ``TensorboardFileIterator`` without TensorFlow, for every scalar encoding.

    Each event file matching ``pathname`` (a glob; sorted) yields ``(dirname, data)``:
    ``dirname`` is the name of the file's folder, ``data`` maps each requested tag found in
    the file to ``[[step, value], ...]`` in file order. Values are Python floats (ints for
    integer-encoded scalars, exact beyond 2^53). Unlike skrl's, every value of an event
    counts (not only the first), and a damaged file raises
    :class:`~rlarrow.core.errors.CorruptFileError` instead of being cut short silently.

    Example:
        >>> from rlarrow.io.tfevents import EventFileWriter
        >>> import tempfile
        >>> tmp = tempfile.mkdtemp()
        >>> with EventFileWriter(f"{tmp}/run1") as w:
        ...     w.add_scalar("Reward / Total reward (mean)", 1.5, step=10)
        >>> for dirname, data in TensorboardFileIterator(f"{tmp}/*/events.*", "Reward / Total reward (mean)"):
        ...     print(dirname, data)
        run1 {'Reward / Total reward (mean)': [[10, 1.5]]}
    """

    def __init__(self, pathname: str, tags: str | list[str]) -> None:
        from rlarrow.io.tfevents import is_event_file

        self.n = 0
        self.file_paths = sorted(p for p in glob.glob(pathname) if is_event_file(p))
        self.tags = [tags] if isinstance(tags, str) else list(tags)

    def __iter__(self) -> TensorboardFileIterator:
        return self

    def __next__(self) -> tuple[str, dict[str, list[list[Any]]]]:
        from rlarrow.io.tfevents import TfeventsReader

        if self.n >= len(self.file_paths):
            raise StopIteration
        file_path = self.file_paths[self.n]
        self.n += 1
        import pyarrow.compute as pc

        data: dict[str, list[list[Any]]] = {}
        for batch in TfeventsReader(file_path):
            batch = batch.filter(pc.is_in(batch.column("tag"), pa.array(self.tags, pa.string())))
            tags = batch.column("tag").to_pylist()
            steps = batch.column("step").to_pylist()
            values = batch.column("value").to_pylist()
            ints = batch.column("value_int").to_pylist()
            for tag, step, value, as_int in zip(tags, steps, values, ints, strict=True):
                data.setdefault(tag, []).append([step, value if as_int is None else as_int])
        return os.path.dirname(file_path).split(os.sep)[-1], data
