"""skrl/rofunc replay-memory exports as ``.csv`` files, read in a stream.

skrl writes one header ``name.i`` per last-dimension column (names sorted), one row per
*filled* transition, memory-major (memory index, then env index), floats with 17
significant digits, bools as ``True``/``False``. The file says nothing about dtypes,
``num_envs``, the memory size or the write pointer, so:

* ``num_envs`` comes from the caller; without it one env is assumed (and said, with an
  :class:`~rlarrow.AssumptionWarning`): each csv row is then one memory row;
* floats are read as ``dtype`` (float32 by default, skrl's default): every value is checked
  to be exactly representable, else the read fails and asks for ``dtype="float64"``;
  integers are int64, bools real bools (not skrl's iterator's ``bool("False") == True``);
* ``memory_size`` defaults to the filled rows per env; every row is marked ``filled``.

Reading streams in blocks, so memory stays bounded whatever the file size.
:func:`write_csv` writes the layout skrl's ``Memory.save(format="csv")`` writes, byte for
byte: the same header, the same rows, the same number formatting and CRLF line ends.

Example:
    >>> from rlarrow.io import csv as memory_csv  # doctest: +SKIP
    >>> for table in memory_csv.iter_csv_tables("memory.csv", run_id="r", snapshot_id=0,
    ...                                         num_envs=16):  # doctest: +SKIP
    ...     store.append("memory", table)
"""

from __future__ import annotations

import csv as _pycsv
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from rlarrow.core import schema as _schema
from rlarrow.core.errors import AssumptionWarning, CorruptFileError, UnsupportedInputError
from rlarrow.core.tensors import to_numpy
from rlarrow.io.memory.snapshot import MemorySnapshot, atomic_output, export_tensors

__all__ = ["iter_csv_tables", "read_csv", "write_csv"]

_BLOCK = 1 << 20  # pyarrow parses ~1 MiB blocks in parallel fastest
#: A csv header line longer than this is refused before it is read whole: skrl names a column
#: ``name.index``, so 1 MiB holds about 80,000 columns, far more than any memory's tensors.
MAX_HEADER_BYTES = 1 << 20
# the longest value skrl writes: a float with 17 significant digits, sign and exponent
# ("-1.2345678901234567e-308", 24 characters), an int64 (20), "False"; 32 leaves room
_MAX_FIELD = 32
_CHUNK_ROWS = 65536


def _row_cap(columns: int) -> int:
    """The longest line ``columns`` values skrl writes can make (separators and CRLF included)."""
    return columns * (_MAX_FIELD + 1) + 2


def _line(fh: Any, path: Path, limit: int, what: str, why: str) -> str:
    """The next line of ``fh``, refused once it runs past ``limit`` bytes (never read further)."""
    raw = fh.readline(limit + 1)
    if len(raw) > limit:
        raise CorruptFileError(
            path, f"{what} runs past {limit:,} bytes without a line end, which {why}: this is not a skrl "
            "csv memory export, or a damaged one. Export the memory as .pt or .npz instead",
            offset=fh.tell())
    try:
        return str(raw.decode("utf-8").strip())
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not a text csv: its first lines are not UTF-8 ({exc})") from exc


def csv_layout(path: str | os.PathLike[str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Tensor names -> their csv columns, and csv column -> arrow type name, from the head.

    Raises:
        CorruptFileError: an empty file, a header line longer than :data:`MAX_HEADER_BYTES`,
            or a first row longer than its columns' numbers could be (found before reading
            the rest of the line).
        UnsupportedInputError: columns that are not skrl's ``name.index``.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        header = _line(fh, path, MAX_HEADER_BYTES, "the header line",
                       "no skrl header needs (a short 'name.index' per column)")
        columns = header.count(",") + 1
        first = _line(fh, path, max(MAX_HEADER_BYTES, _row_cap(columns)), "the first row",
                      f"{columns} numbers of at most {_MAX_FIELD} characters cannot fill (nor can "
                      "skrl's keep_dimensions '[...]' cells, which no reader can align)")
    if not header:
        raise CorruptFileError(path, "empty file: no csv header")
    names = header.split(",")
    tensors: dict[str, list[str]] = {}
    for col in names:
        base, dot, index = col.rpartition(".")
        if not dot or not index.isdigit():
            raise UnsupportedInputError(path, f"column {col!r} is not 'name.index' as skrl writes it")
        tensors.setdefault(base, []).append(col)
    for base, cols in tensors.items():
        if [int(c.rpartition(".")[2]) for c in cols] != list(range(len(cols))):
            raise UnsupportedInputError(
                path, f"tensor {base!r}: columns {cols} are not .0 .. .{len(cols) - 1}")
    types: dict[str, str] = {}
    values = first.split(",") if first else []
    if first and len(values) != len(names):
        raise UnsupportedInputError(
            path, f"the first row has {len(values)} values for {len(names)} columns; skrl writes "
            "keep_dimensions tensors this way ('[0.0, 1.0]' cells), which no reader can align: "
            "export that memory as .pt or .npz instead")
    for col, value in zip(names, values or ["0.0"] * len(names), strict=True):
        if value in ("True", "False"):
            types[col] = "bool"
        elif value.lstrip("-").isdigit():
            types[col] = "int64"
        else:
            types[col] = "float64"
    return tensors, types


def _data_rows(path: Path) -> int:
    rows = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_BLOCK):
            rows += chunk.count(b"\n")
        fh.seek(max(0, fh.tell() - 1))
        if fh.tell() and fh.read(1) != b"\n":
            rows += 1
    return max(0, rows - 1)


def iter_batches(path: str | os.PathLike[str], column_types: Mapping[str, pa.DataType], *,
                 block_size: int = _BLOCK, chunk_rows: int = _CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
    """A skrl csv's rows as record batches of at least ``chunk_rows`` rows, parsed in parallel.

    ``column_types`` gives each column's Arrow type; ``True``/``False`` are the bools.

    Raises:
        CorruptFileError: a row that does not parse (with pyarrow's reason and the row).
    """
    path = Path(path)
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=block_size, use_threads=True),
            convert_options=pacsv.ConvertOptions(column_types=dict(column_types), null_values=[],
                                                 strings_can_be_null=False, true_values=["True"],
                                                 false_values=["False"]),
        )
    except pa.ArrowInvalid as exc:
        raise CorruptFileError(path, f"cannot parse ({exc})") from exc
    yield from _chunks(reader, path, chunk_rows)


def _chunks(reader: pacsv.CSVStreamingReader, path: Path, rows: int) -> Iterator[pa.RecordBatch]:
    """The reader's batches, gathered into batches of at least ``rows`` rows."""
    pending: list[pa.RecordBatch] = []
    count = 0
    done = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as exc:
            raise CorruptFileError(path, f"near data row {done + count + 1}: {exc}") from exc
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]
            pending, done, count = [], done + count, 0
    if count:
        yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def iter_csv_tables(
    path: str | os.PathLike[str],
    *,
    run_id: str,
    snapshot_id: int,
    num_envs: int | None = None,
    memory_size: int | None = None,
    dtype: str = "float32",
    block_size: int = _BLOCK,
    chunk_rows: int = _CHUNK_ROWS,
) -> Iterator[pa.Table]:
    """Stream a csv memory export as rows of the store's ``memory`` table.

    Args:
        path: the csv file.
        run_id: the run the rows are filed under.
        snapshot_id: the snapshot number within the run.
        num_envs: environments of the memory (the csv does not say; 1 is assumed, with a
            warning, when not given).
        memory_size: the memory's size (default: the filled rows per env).
        dtype: ``"float32"`` (skrl's default) or ``"float64"`` for float tensors.
        block_size: bytes per parse task (pyarrow parses blocks in parallel).
        chunk_rows: rows per yielded table (at least; bounds memory).

    Raises:
        UnsupportedInputError: not a skrl memory csv, or a float that ``dtype`` cannot hold.
        CorruptFileError: a row that does not parse (the message gives pyarrow's reason).
    """
    path = Path(path)
    tensors, types = csv_layout(path)
    if num_envs is None:
        warnings.warn(f"{path}: a csv memory export does not record num_envs; assuming 1 (each row is "
                      "one memory row). Pass num_envs=... to recover the (memory, env) layout.",
                      AssumptionWarning, stacklevel=2)
        num_envs = 1
    if memory_size is None:  # the memory size column needs it up front: one fast byte count
        rows_total = _data_rows(path)
        if rows_total % num_envs:
            raise UnsupportedInputError(path, f"{rows_total} rows do not divide into num_envs={num_envs}")
        memory_size = rows_total // num_envs
    float_type = {"float32": np.float32, "float64": np.float64}[dtype]
    reader_types = {c: getattr(pa, t if t != "bool" else "bool_")() for c, t in types.items()}
    # pyarrow needs the header and a whole row in its first block (wide memories: long lines)
    header_bytes = sum(len(c.encode()) + 1 for c in types)
    block_size = max(block_size, header_bytes + 2 * _row_cap(len(types)))
    start = 0
    for batch in iter_batches(path, reader_types, block_size=block_size, chunk_rows=chunk_rows):
        n = batch.num_rows
        idx = np.arange(start, start + n)
        columns: dict[str, object] = {
            "run_id": run_id, "snapshot_id": snapshot_id, "snapshot_name": path.stem,
            "memory_index": idx // num_envs, "env_index": (idx % num_envs).astype(np.int32),
            "memory_size": memory_size, "num_envs": num_envs, "filled": np.ones(n, bool),
        }
        for name, cols in tensors.items():
            parts = [batch.column(c).to_numpy(zero_copy_only=False) for c in cols]
            if parts[0].dtype == np.float64 and float_type is np.float32:
                values = np.empty((n, len(cols)), np.float32)
                for j, part in enumerate(parts):  # narrow each column as it is copied in, then
                    values[:, j] = part           # check it came through exactly
                    exact = values[:, j] == part
                    if not exact.all():
                        exact |= np.isnan(part) & np.isnan(values[:, j])
                    if not exact.all():
                        row = int(np.flatnonzero(~exact)[0])
                        raise UnsupportedInputError(
                            path, f"{cols[j]} in data row {start + row + 1} ({part[row]!r}) is "
                            "not a float32; read it with dtype='float64'")
            else:
                values = np.column_stack(parts)
            columns[name] = values
        start += n
        if start > memory_size * num_envs:
            raise UnsupportedInputError(path, f"more than memory_size={memory_size} filled rows per env")
        yield _schema.build("memory", columns, num_rows=n)
    if start % num_envs:  # checked at the end: a writer fed by this generator aborts, committing nothing
        raise UnsupportedInputError(path, f"{start} rows do not divide into num_envs={num_envs}")


def read_csv(
    path: str | os.PathLike[str],
    *,
    num_envs: int | None = None,
    memory_size: int | None = None,
    dtype: str = "float32",
) -> MemorySnapshot:
    """Read a whole csv memory export into a snapshot (see :func:`iter_csv_tables`).

    Rows not in the csv (never filled) are NaN for floats, 0 for integers and False for
    bools, as a fresh skrl memory holds them.
    """
    path = Path(path)
    tensors_cols, _ = csv_layout(path)
    parts = list(iter_csv_tables(path, run_id="", snapshot_id=0, num_envs=num_envs,
                                 memory_size=memory_size, dtype=dtype))
    table = pa.concat_tables(parts) if parts else None
    ne = num_envs or 1
    ms = memory_size if memory_size is not None else (table.num_rows // ne if table is not None else 0)
    out: dict[str, np.ndarray] = {}
    for name in tensors_cols:
        filled = to_numpy(table.column(name)) if table is not None else None
        shape_tail = filled.shape[1:] if filled is not None else (len(tensors_cols[name]),)
        dtype_out = filled.dtype if filled is not None else np.dtype(dtype)
        full = np.zeros((ms * ne, *shape_tail), dtype_out)
        if dtype_out.kind == "f":
            full[:] = np.nan
        if filled is not None:
            full[: len(filled)] = filled
        out[name] = full.reshape(ms, ne, *shape_tail)
    rows = 0 if table is None else table.num_rows
    return MemorySnapshot(out, name=path.stem, path=os.fspath(path), source_format="csv",
                          is_full=(rows == ms * ne) if memory_size is not None else None,
                          write_pointer=(rows // ne) if memory_size is not None and rows < ms * ne else None,
                          env_pointer=0 if memory_size is not None else None)


def filled_rows(snapshot: MemorySnapshot) -> int:
    """Rows (memory-major, ``memory_size * num_envs`` at most) skrl would write for this state.

    skrl writes ``len(memory)`` rows: all of them once the buffer is full, else up to the
    write pointer. When the snapshot does not know its state (a legacy pt/npz import),
    every row is written.
    """
    total = snapshot.memory_size * snapshot.num_envs
    if snapshot.is_full is False and snapshot.write_pointer is not None:
        return min(total, snapshot.write_pointer * snapshot.num_envs + (snapshot.env_pointer or 0))
    return total


def write_csv(data: MemorySnapshot | Mapping[str, Any], path: str | os.PathLike[str], *,
              rows: int | None = None, overwrite: bool = False, chunk_rows: int = 16384) -> Path:
    """Write tensors ``(memory_size, num_envs, size)`` as skrl's ``.csv`` memory export.

    Args:
        data: a snapshot, or a mapping of names to NumPy arrays or torch tensors.
        path: the file to write (written atomically).
        rows: how many rows (memory-major) to write; default: what skrl would write for
            the snapshot's state (see :func:`filled_rows`), or all rows of a mapping.
        overwrite: replace an existing file.
        chunk_rows: rows formatted at a time (bounds memory).

    Raises:
        UnsupportedInputError: a tensor has more than one data dimension (skrl's
            ``keep_dimensions=True``), which the csv layout cannot hold.
    """
    tensors = export_tensors(data)
    for name, value in tensors.items():
        if value.ndim != 3:
            raise UnsupportedInputError(
                path, f"tensor {name!r} has shape {value.shape}: the csv layout holds one data "
                "dimension per tensor (skrl writes keep_dimensions tensors as unreadable "
                "'[..]' cells); export it as pt or npz instead")
    if rows is None:
        rows = filled_rows(data) if isinstance(data, MemorySnapshot) else None
    flat = {name: value.reshape(-1, value.shape[-1]) for name, value in tensors.items()}
    total = len(next(iter(flat.values())))
    rows = total if rows is None else min(rows, total)
    header = [f"{name}.{i}" for name, value in flat.items() for i in range(value.shape[1])]
    with atomic_output(path, overwrite=overwrite) as tmp, open(tmp, "w", newline="") as fh:
        writer = _pycsv.writer(fh)  # skrl's writer: excel dialect, "\r\n" line ends
        writer.writerow(header)
        for start in range(0, rows, chunk_rows):
            stop = min(rows, start + chunk_rows)
            parts = [value[start:stop].tolist() for value in flat.values()]
            writer.writerows([x for part in row for x in part] for row in zip(*parts, strict=True))
    return Path(path)
