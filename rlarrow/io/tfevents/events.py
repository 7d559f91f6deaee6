"""Event files to and from Arrow: find the runs, read their scalars, write new event files.

This is the layer a user calls (all of it is re-exported by :mod:`rlarrow.io.tfevents`):

- **Finding runs**: :func:`find_runs` (every directory holding event files is one
  TensorBoard run, named by its path below the root), :func:`is_event_file`,
  :func:`is_tfevents_source`.
- **Reading**: :class:`TfeventsReader` streams a source's scalars as record batches of the
  ``scalars`` table, file by file and chunk by chunk (:mod:`rlarrow.io.codecs.tfrecord` finds and checks the
  records, :mod:`.decode` turns them into rows) and fills in a :class:`TfeventsReport`;
  :func:`read_tfevents` reads them all into one table, :func:`scan_tfevents` streams them as a
  ``pa.RecordBatchReader`` (no store either way).
- **Writing**: :class:`EventFileWriter` writes one new event file as ``SummaryWriter`` does
  (payloads from :mod:`.proto`, frames from :mod:`rlarrow.io.codecs.tfrecord`); :func:`write_tfevents`
  writes ``scalars`` rows, one file per run.

Moving scalars between event files and a store is :mod:`.transfer`'s.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> rows = {"run_id": ["ppo", "ppo"], "tag": ["train/loss"] * 2, "scope": ["train"] * 2,
    ...         "step": [1, 2], "value": [0.5, 0.1]}
    >>> write_tfevents(rows, d)  # doctest: +ELLIPSIS
    [PosixPath('.../ppo/events.out.tfevents...')]
    >>> [name for name, _files in find_runs(d)]
    ['ppo']
    >>> t = read_tfevents(d)
    >>> t.column("value").to_pylist(), t.column("dtype").to_pylist()
    ([0.5, 0.1], ['float32', 'float64'])
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError, InvalidInputError
from rlarrow.io.codecs.tfrecord import CHUNK_BYTES, frame_records, read_records
from rlarrow.io.tfevents.decode import decode_chunk
from rlarrow.io.tfevents.proto import PLAIN_ENCODINGS, event_bytes, f32_bytes, len_field, value_message

__all__ = [
    "EventFileWriter", "TfeventsReader", "TfeventsReport", "is_event_file", "read_tfevents", "scan_tfevents",
    "write_tfevents",
]


# --------------------------------------------------------------------------- finding runs


def is_event_file(path: str | os.PathLike[str]) -> bool:
    """A regular file whose name contains ``tfevents`` (as TensorBoard decides); folders never are."""
    p = Path(path)
    return "tfevents" in p.name and p.is_file() and not p.name.startswith(".")


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def find_runs(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[tuple[str, list[Path]]]:
    """The TensorBoard runs under ``source``: ``[(run name, [event files in order]), ...]``.

    ``source`` is an event file, a directory (searched recursively), a glob, or a list of
    them. A run's name is its directory relative to the root given (``"."`` for the root).

    Raises:
        InvalidInputError: a path does not exist, nothing under it is an event file, or a
            run's folder name is not UTF-8 (it could not be a ``run_id``).
    """
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    runs: dict[str, list[Path]] = {}
    for src in sources:
        text = os.fspath(src)
        if _has_magic(text):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
            if not matches:
                raise InvalidInputError(text, "no file or directory matches this pattern")
            dirs = [m if m.is_dir() else m.parent for m in matches]
            root = Path(os.path.commonpath([os.fspath(d) for d in dirs]))
            for m in matches:
                if m.is_dir():
                    _walk(m, root, runs)
                elif is_event_file(m):
                    runs.setdefault(_rel(m.parent, root), []).append(m)
            continue
        p = Path(text)
        if p.is_file():
            runs.setdefault(".", []).append(p)
        elif p.is_dir():
            _walk(p, p, runs)
        else:
            raise InvalidInputError(p, "no such file or directory")
    if not runs:
        raise InvalidInputError(", ".join(os.fspath(s) for s in sources),
                                "no TensorBoard event files (names containing 'tfevents') here")
    for name, files in runs.items():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(files[0].parent, "this run's folder name is not valid UTF-8, so no "
                                    "run_id can hold it; rename it with UTF-8 characters only") from None
    return [(name, sorted(set(files), key=lambda f: (f.name, os.fspath(f))))
            for name, files in sorted(runs.items())]


def _rel(path: Path, root: Path) -> str:
    rel = os.path.relpath(path, root)
    return "." if rel == "." else rel.replace(os.sep, "/")


def _walk(directory: Path, root: Path, runs: dict[str, list[Path]]) -> None:
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files = [Path(dirpath) / f for f in sorted(filenames)]
        events = [f for f in files if is_event_file(f)]
        if events:
            runs.setdefault(_rel(Path(dirpath), root), []).extend(events)


def is_tfevents_source(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an event file, or a directory with an event file anywhere below it."""
    p = Path(path)
    if p.is_file():
        return is_event_file(p)
    if p.is_dir():
        for _dirpath, dirnames, filenames in os.walk(p):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            if any("tfevents" in f and not f.startswith(".") for f in filenames):
                return True
    return False


# --------------------------------------------------------------------------- reading


@dataclass
class TfeventsReport:
    """What a read or import found: files, runs, scalars, and what it skipped (by kind)."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    scalars: int = 0
    runs: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    truncated: list[str] = field(default_factory=list)
    corrupt: list[tuple[str, int]] = field(default_factory=list)
    file_versions: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        text = (f"{self.scalars} scalars from {self.files} event file(s), {len(self.runs)} run(s)"
                f" in {self.seconds:.1f} s")
        if self.skipped:
            text += "; skipped " + ", ".join(f"{n} {k}" for k, n in sorted(self.skipped.items()))
        if self.truncated:
            text += f"; {len(self.truncated)} file(s) ended in a truncated record"
        if self.corrupt:
            text += f"; {len(self.corrupt)} corrupt record(s) skipped"
        return text


class TfeventsReader:
    """Stream the scalars of event files, directories of runs, or globs as record batches.

    Args:
        source: an event file, a directory (recursive), a glob, or a list of them.
        on_corrupt: ``"raise"`` (default) raises :class:`~rlarrow.core.errors.CorruptFileError`
            at the first record whose checksum fails; ``"skip"`` skips it, finds the next
            valid record, and counts it in ``report.corrupt``.
        run_prefix: prepended to each run's name in the ``run_id`` column (``prefix/name``;
            the root run ``"."`` becomes ``prefix`` itself).
        chunk_bytes: how much of a file is decoded at once (memory stays about 3x this).

    Every batch has the ``scalars`` table's schema. ``report`` fills in as batches are read.

    Example:
        >>> reader = TfeventsReader("runs/")  # doctest: +SKIP
        >>> for batch in reader:  # doctest: +SKIP
        ...     print(batch.num_rows)
        >>> print(reader.report)  # doctest: +SKIP
    """

    def __init__(self, source: Any, *, on_corrupt: str = "raise", run_prefix: str | None = None,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        if on_corrupt not in ("raise", "skip"):
            raise ArgumentError(f"on_corrupt must be 'raise' or 'skip', not {on_corrupt!r}")
        self.runs = find_runs(source)
        self.on_corrupt = on_corrupt
        self.run_prefix = run_prefix
        self.chunk_bytes = chunk_bytes
        self.schema = _schema.table("scalars").arrow_schema()
        self.report = TfeventsReport(runs=[self.run_id(name) for name, _ in self.runs])
        self.progress: Any = None

    def run_id(self, name: str) -> str:
        """The ``run_id`` a run of this name gets."""
        if self.run_prefix is None:
            return name
        return self.run_prefix if name == "." else f"{self.run_prefix}/{name}"

    @property
    def total_bytes(self) -> int:
        """Bytes of every event file to read."""
        return sum(f.stat().st_size for _, files in self.runs for f in files)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        t0 = time.perf_counter()
        for name, files in self.runs:
            for path in files:
                yield from self.read_file(path, self.run_id(name))
        self.report.seconds += time.perf_counter() - t0

    def read_all(self) -> pa.Table:
        """Every scalar as one table (file order within a run, runs by name)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def read_file(self, path: Path, run_id: str) -> Iterator[pa.RecordBatch]:
        """The scalars of one event file, a batch per chunk."""
        report = self.report
        report.files += 1
        versions: list[str] = []
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise InvalidInputError(path, f"cannot open ({exc.strerror or exc})") from exc
        with fh:
            for chunk in read_records(fh, path, log=report, on_corrupt=self.on_corrupt,
                                      chunk_bytes=self.chunk_bytes, progress=self.progress):
                report.records += len(chunk.offsets)
                batch = decode_chunk(chunk, run_id=run_id, path=path, schema=self.schema,
                                     on_corrupt=self.on_corrupt, skipped=report.skipped,
                                     corrupt=report.corrupt, file_versions=versions)
                report.scalars += batch.num_rows
                if batch.num_rows:
                    yield batch
        if versions:
            report.file_versions[os.fspath(path)] = versions[0]


def read_tfevents(source: Any, *, on_corrupt: str = "raise", run_prefix: str | None = None) -> pa.Table:
    """Every scalar of ``source`` (file, directory, glob, or list) as a ``scalars`` table.

    See :class:`TfeventsReader` for the arguments, and :mod:`rlarrow.io.tfevents` for what is read:
    ``on_corrupt`` is ``"raise"`` at a record whose checksum fails or ``"skip"`` it (counted);
    ``run_prefix`` the run id of the root run (sub-runs' ids begin with it).

    Example:
        >>> t = read_tfevents("runs/exp1")  # doctest: +SKIP
        >>> t.filter(t["tag"] == "train/loss").select(["step", "value"])  # doctest: +SKIP
    """
    return TfeventsReader(source, on_corrupt=on_corrupt, run_prefix=run_prefix).read_all()


def scan_tfevents(source: Any, *, on_corrupt: str = "raise", run_prefix: str | None = None,
                  chunk_bytes: int = CHUNK_BYTES) -> pa.RecordBatchReader:
    """Stream the scalars of ``source`` as a ``pa.RecordBatchReader``, in bounded memory, no store.

    Nothing is read until the first batch is asked for; then one chunk of a file at a time
    (a batch per chunk, memory about 3x ``chunk_bytes``), so a log of any size goes to
    DuckDB, Polars or a Parquet writer without being held at once. Damage is raised when
    the reading reaches it (:class:`TfeventsReader` gives the arguments and the report).

    Example:
        >>> import tempfile
        >>> import duckdb
        >>> log = tempfile.mkdtemp()
        >>> with EventFileWriter(log) as w:
        ...     for step in range(1, 5):
        ...         w.add_scalar("train/loss", 1 / step, step=step, wall_time=1.7e9 + step)
        >>> batches = scan_tfevents(log)
        >>> duckdb.sql("SELECT tag, count(*) AS n, max(step) AS last FROM batches GROUP BY tag").fetchall()
        [('train/loss', 4, 4)]
        >>> import polars as pl
        >>> pl.from_arrow(scan_tfevents(log)).select("step", "value").row(0)
        (1, 1.0)
    """
    reader = TfeventsReader(source, on_corrupt=on_corrupt, run_prefix=run_prefix, chunk_bytes=chunk_bytes)
    return pa.RecordBatchReader.from_batches(reader.schema, iter(reader))


# --------------------------------------------------------------------------- writing


_file_counter = 0


def _new_event_file_name(suffix: str = "") -> str:
    global _file_counter
    _file_counter += 1
    return (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
            f"{_file_counter}{suffix}")


class EventFileWriter:
    """Write scalars to a new TensorBoard event file, as ``SummaryWriter`` does, without it.

    The file starts with the ``brain.Event:2`` version record. Records are buffered and
    written on :meth:`flush` (also every ``flush_every`` records, and on :meth:`close`,
    which also happens at exit or on SIGTERM when the program never calls it);
    each flushed record is complete on disk, so TensorBoard (and rlarrow) can read a file
    that is still being written.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with EventFileWriter(d) as w:
        ...     w.add_scalar("train/loss", 0.5, step=1, wall_time=1.7e9)
        >>> read_tfevents(d).column("value").to_pylist()
        [0.5]
    """

    def __init__(self, directory: str | os.PathLike[str], *, filename_suffix: str = "",
                 flush_every: int = 4096, wall_time: float | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / _new_event_file_name(filename_suffix)
        self._fh: BinaryIO | None = open(self.path, "xb")
        self._pending: list[bytes] = [event_bytes(time.time() if wall_time is None else wall_time, 0,
                                                   file_version="brain.Event:2")]
        self._tags: dict[str, bytes] = {}
        self.flush_every = flush_every
        try:
            self.flush()
        except BaseException:  # (a full disk): the file is not left open
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError):
                fh.close()
            raise
        exits.track(self, self.close)  # written out at exit (or on SIGTERM) when never closed

    def add_scalar(self, tag: str, value: float | int, step: int = 0, wall_time: float | None = None, *,
                   encoding: str | None = None, dtype: str | None = None, plugin: str | None = None,
                   value_int: int | None = None) -> None:
        """Add one scalar, as a ``simple_value`` every TensorBoard reader reads.

        With neither ``dtype`` nor ``encoding`` the value is a float32, as ``SummaryWriter``
        writes it. A ``dtype`` other than float32 (``float64``, ``int64``, ...; an integer
        with an ``encoding`` is ``int64``) also records the exact value, read back by
        rlarrow's reader with that ``dtype`` and ``encoding`` (see :data:`EXACT_PLUGIN`).
        """
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        ints = isinstance(value, (int, np.integer))
        if dtype is None:
            dtype = "int64" if ints and encoding is not None else "float32"
        if value_int is None and ints and not dtype.startswith(("float", "bfloat")):
            value_int = int(value)
        wt = time.time() if wall_time is None else wall_time
        msg = value_message(tag.encode(), float(value), value_int, encoding or "simple_value", dtype, plugin)
        self._pending.append(event_bytes(wt, int(step), msg))
        if len(self._pending) >= self.flush_every:
            self.flush()

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add every row of a ``scalars`` batch (its run_id/scope are not written).

        Each row goes as ``simple_value``; a row float32 does not hold exactly (see
        :func:`write_tfevents`) carries its exact value too.
        """
        cols = {name: batch.column(name).to_pylist() for name in
                ("tag", "step", "value", "value_int", "wall_time", "encoding", "dtype", "plugin")
                if name in batch.schema.names}
        n = batch.num_rows
        get = cols.get
        tags, steps, values = cols["tag"], cols["step"], cols["value"]
        vints = get("value_int") or [None] * n
        walls = get("wall_time") or [None] * n
        encs = get("encoding") or [None] * n
        dtypes = get("dtype") or [None] * n
        plugins = get("plugin") or [None] * n
        as_f64 = np.asarray(batch.column("value").to_numpy(zero_copy_only=False), dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            fits = ((as_f64.astype(np.float32).astype(np.float64) == as_f64) | np.isnan(as_f64)).tolist()
        cache = self._tags
        pending = self._pending
        for i in range(n):
            tag = tags[i]
            tb = cache.get(tag)
            if tb is None:
                tb = cache[tag] = tag.encode()
            dt = dtypes[i]
            if encs[i] in PLAIN_ENCODINGS and plugins[i] is None and vints[i] is None and (
                    dt == "float32" or (dt is None and fits[i])):
                msg = len_field(0x0A, tb) + b"\x15" + f32_bytes(values[i])
            else:
                msg = value_message(tb, values[i], vints[i], encs[i], dt, plugins[i])
            wt = walls[i]
            pending.append(event_bytes(0.0 if wt is None else wt, steps[i], msg))
            if len(pending) >= self.flush_every:
                self.flush()
                pending = self._pending

    def flush(self) -> None:
        """Write the buffered records (complete records only) and flush the file."""
        if self._fh is None:
            raise ArgumentError(f"{self.path}: the writer is closed")
        if self._pending:
            self._fh.write(frame_records(self._pending))
            self._pending = []
        self._fh.flush()

    def close(self) -> None:
        """Flush, fsync and close the file."""
        if self._fh is None:
            return
        exits.untrack(self)
        try:
            self.flush()
            os.fsync(self._fh.fileno())
        except BaseException:  # (a full disk): the file is closed all the same
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError):
                fh.close()
            raise
        self._fh.close()
        self._fh = None

    def __enter__(self) -> EventFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_directory(root: Path, run_id: str) -> Path:
    parts = [p for p in run_id.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return root.joinpath(*parts) if parts else root


def write_tfevents(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | Mapping[str, Any],
                   directory: str | os.PathLike[str], *, run_layout: bool = True) -> list[Path]:
    """Write ``scalars`` rows as TensorBoard event files, one file per run.

    Each run goes to ``directory/<run_id>/`` (``run_id`` split at ``/`` into folders, so
    sub-runs nest under their parent as TensorBoard expects); with ``run_layout=False``
    every row goes into one file in ``directory``. Every value is a ``simple_value``
    (float32), which TensorBoard, tbparse, tianshou and skrl all read. A row that float32
    does not hold exactly (``dtype`` other than float32, a ``value_int``, a tensor
    ``encoding``; a row without a dtype whose value is not a float32) also carries its
    exact value, dtype, encoding and plugin as :data:`EXACT_PLUGIN` metadata, so
    :func:`read_tfevents` gives the row back as it was.

    Returns:
        The files written.

    Example:
        >>> import tempfile
        >>> t = read_tfevents(...)  # doctest: +SKIP
        >>> write_tfevents(t, tempfile.mkdtemp())  # doctest: +SKIP
    """
    if isinstance(data, Mapping):
        data = _schema.build("scalars", dict(data))
    batches: Iterable[Any]
    if isinstance(data, pa.Table):
        batches = data.to_batches(max_chunksize=1 << 16)
    elif isinstance(data, pa.RecordBatch):
        batches = [data]
    else:
        batches = cast(Iterable[Any], data)
    root = Path(directory)
    writers: dict[str, EventFileWriter] = {}
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            groups: dict[str, Any]
            if not run_layout or "run_id" not in batch.schema.names:
                groups = {"": batch}
            else:
                ids = batch.column("run_id")
                distinct = pc.unique(ids).to_pylist()
                groups = {r: batch.filter(pc.equal(ids, r)) for r in distinct} if len(distinct) > 1 \
                    else {distinct[0]: batch}
            for run, part in groups.items():
                w = writers.get(run)
                if w is None:
                    w = writers[run] = EventFileWriter(_run_directory(root, run) if run_layout else root,
                                                       flush_every=1 << 16)
                w.write_batch(part)
    finally:
        failed: BaseException | None = None
        for w in writers.values():  # every one closed, the first failure raised
            try:
                w.close()
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
    return [w.path for w in writers.values()]
