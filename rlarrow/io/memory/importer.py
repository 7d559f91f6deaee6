"""Replay-memory exports in and out of a store: ``rlarrow convert`` and ``rlarrow export``.

:func:`import_memory` imports skrl/rofunc memory exports (``.pt``, ``.npz``, ``.csv``, and
rlarrow's own ``.parquet`` memory exports) into a store's ``memory`` table, one snapshot per
file, under one run. :func:`export_memory` writes a store's snapshots back out as skrl
lays them out (``<directory>/memories/<name>.<pt|npz|csv>``). :func:`snapshots` (from
:mod:`rlarrow.io.memory.stored`) reads them back as :class:`~rlarrow.io.memory.MemorySnapshot`
objects. ``convert_memory`` is the deprecated old name of :func:`import_memory`.

Example:
    >>> import numpy as np, rlarrow, tempfile, os
    >>> from rlarrow.io.memory.npz import write_npz
    >>> tmp = tempfile.mkdtemp()
    >>> _ = write_npz({"states": np.zeros((8, 2, 3), np.float32),
    ...                "terminated": np.zeros((8, 2, 1), bool)}, f"{tmp}/memories/m.npz")
    >>> report = import_memory([f"{tmp}/memories"], f"{tmp}/store", progress=False)
    >>> report.snapshots, report.rows
    (1, 16)
    >>> [p.name for p in export_memory(f"{tmp}/store", f"{tmp}/out", "pt", progress=False)]
    ['m.pt']
"""

from __future__ import annotations

import glob
import os
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.confined import file_name_part
from rlarrow.core.errors import ArgumentError, AssumptionWarning, CorruptFileError, UnsupportedInputError
from rlarrow.core.progress import bar
from rlarrow.core.store import Store, StoreLike, as_store, opened
from rlarrow.io.memory.snapshot import MemorySnapshot, is_zip
from rlarrow.io.memory.stored import snapshots

__all__ = [
    "ConvertReport", "export_memory", "import_memory", "iter_memory_tables", "read_memory", "snapshots",
    "write_memory",
]

#: The memory export formats, by file extension.
MEMORY_FORMATS = ("pt", "npz", "csv", "parquet")


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"pt"``, ``"npz"``, ``"csv"`` or ``"parquet"``: from the extension, else the content.

    Raises:
        UnsupportedInputError: neither says it is a memory export.
    """
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext in MEMORY_FORMATS:
        return ext
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    if is_zip(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, EOFError, ValueError, OSError, NotImplementedError) as exc:
            raise CorruptFileError(path, f"a damaged zip archive ({exc}): not readable as a .pt or .npz "
                                   "memory export; export the memory again") from exc
        if any(n.endswith(".npy") for n in names):
            return "npz"
        if any(n.endswith("data.pkl") for n in names):
            return "pt"
    elif head[:1] == b"\x80":  # a legacy (non-zip) torch.save pickle
        return "pt"
    elif head and b"\x00" not in head and head.split(b"\n", 1)[0].count(b".") >= 1:
        return "csv"
    raise UnsupportedInputError(
        path, "not a memory export (expected .pt, .npz, .csv or an rlarrow .parquet memory file)"
    )


def expand_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files named by ``inputs``, sorted within each input.

    Files are taken as given, directories are searched recursively for memory exports,
    glob patterns (``**`` too) are expanded.

    Raises:
        FileNotFoundError: an input that names nothing.
    """
    files: list[Path] = []
    for item in inputs:
        text = os.fspath(item)
        path = Path(text)
        if path.is_file():
            found = [path]
        elif path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower().lstrip(".") in MEMORY_FORMATS
                and not p.name.startswith(".")
            )
        else:
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not found:
            raise FileNotFoundError(
                f"{text}: no such file, or no memory exports (.pt, .npz, .csv, .parquet) in it"
            )
        files.extend(p for p in found if p not in files)
    return files


def read_memory(
    path: str | os.PathLike[str],
    *,
    num_envs: int | None = None,
    memory_size: int | None = None,
    dtype: str = "float32",
) -> MemorySnapshot:
    """Read one memory export of any format into a snapshot (whole, in memory).

    ``num_envs``, ``memory_size`` and ``dtype`` matter for csv only (see
    :func:`rlarrow.io.memory.csv.read_csv`). For large csv files, :func:`import_memory` streams.
    """
    fmt = detect_format(path)
    if fmt == "pt":
        from rlarrow.io.memory.pt import read_pt

        return read_pt(path)
    if fmt == "npz":
        from rlarrow.io.memory.npz import read_npz

        return read_npz(path)
    if fmt == "csv":
        from rlarrow.io.memory.csv import read_csv

        return read_csv(path, num_envs=num_envs, memory_size=memory_size, dtype=dtype)
    table = _schema.read_file(path)
    info = _schema.read_file_info(path)
    if info.table != "memory":
        raise UnsupportedInputError(path, f"an rlarrow {info.table!r} file, not a memory snapshot")
    return MemorySnapshot.from_table(table, name=Path(path).stem, path=os.fspath(path))


def write_memory(
    snapshot: MemorySnapshot, path: str | os.PathLike[str], fmt: str | None = None, *, overwrite: bool = False
) -> Path:
    """Write one snapshot as ``fmt`` (default: from ``path``'s extension).

    ``"parquet"`` writes one rlarrow ``memory`` file that keeps the write pointer, fill
    flag and env indices (readable by :func:`read_memory`, DuckDB, Polars, ...).
    """
    fmt = fmt or Path(path).suffix.lstrip(".")
    if fmt == "pt":
        from rlarrow.io.memory.pt import write_pt

        return write_pt(snapshot, path, overwrite=overwrite)
    if fmt == "npz":
        from rlarrow.io.memory.npz import write_npz

        return write_npz(snapshot, path, overwrite=overwrite)
    if fmt == "csv":
        from rlarrow.io.memory.csv import write_csv

        return write_csv(snapshot, path, overwrite=overwrite)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        from rlarrow.io.memory.snapshot import atomic_output

        table = snapshot.to_table(run_id=snapshot.name or "memory", snapshot_id=0)
        with atomic_output(path, overwrite=overwrite) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        return Path(path)
    raise ArgumentError(f"unknown memory format {fmt!r}; choose one of {', '.join(MEMORY_FORMATS)}")


@dataclass
class ConvertReport:
    """What :func:`import_memory` wrote."""

    store: Path
    run_id: str
    #: the snapshot id of ``files[0]``; file ``i`` became snapshot ``first_snapshot + i``
    first_snapshot: int = 0
    files: list[Path] = field(default_factory=list)
    snapshots: int = 0
    rows: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    episodes: int = 0
    steps: int = 0
    assumptions: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        mb = self.bytes_read / 1e6
        lines = [
            f"converted {len(self.files)} file(s), {mb:.1f} MB, into {self.store} in "
            f"{self.seconds:.1f} s: run {self.run_id}, {self.snapshots} snapshot(s), "
            f"{self.rows} memory rows"
            + (f", unrolled into {self.episodes} episodes, {self.steps} steps" if self.steps else "")
        ]
        lines += [f"assumed: {a}" for a in collapse_assumptions(self.assumptions)]
        return "\n".join(lines)


def collapse_assumptions(messages: Sequence[str]) -> list[str]:
    """Say each assumption once: messages ``"FILE: text"`` with the same text are merged.

    Example:
        >>> collapse_assumptions(["a.pt: no write pointer", "b.pt: no write pointer", "c.csv: 1 env"])
        ['no write pointer (2 files: a.pt, b.pt)', 'c.csv: 1 env']
    """
    groups: dict[str, list[str]] = {}
    for m in messages:
        where, sep, text = m.partition(": ")
        groups.setdefault(text if sep else m, []).append(where if sep else "")
    out = []
    for text, wheres in groups.items():
        if len(wheres) == 1:
            out.append(f"{wheres[0]}: {text}" if wheres[0] else text)
        else:
            shown = ", ".join(wheres[:3]) + (", ..." if len(wheres) > 3 else "")
            out.append(f"{text} ({len(wheres)} files: {shown})")
    return out


def iter_memory_tables(
    path: Path,
    fmt: str,
    run_id: str,
    snapshot_id: int,
    num_envs: int | None = None,
    memory_size: int | None = None,
    dtype: str = "float32",
) -> Iterator[pa.Table]:
    """One export file as ``memory``-table rows: streamed for csv, one table otherwise."""
    if fmt == "csv":
        from rlarrow.io.memory.csv import iter_csv_tables

        yield from iter_csv_tables(
            path,
            run_id=run_id,
            snapshot_id=snapshot_id,
            num_envs=num_envs,
            memory_size=memory_size,
            dtype=dtype,
        )
        return
    _, table, verify = _snapshot_table(path, fmt, run_id, snapshot_id)
    verify()
    yield table


def _snapshot_table(path: Path, fmt: str, run_id: str,
                    snapshot_id: int) -> tuple[MemorySnapshot, pa.Table, Callable[[], None]]:
    """A pt/npz/parquet export: its snapshot, as one ``memory`` table, and the source's check still to run.

    A pt export's tensors and an uncompressed npz are mapped, and the CRC-32s of their bytes
    are left to ``verify()`` (see :func:`rlarrow.io.memory.pt.open_pt` and
    :func:`rlarrow.io.memory.npz.open_npz`); for the other formats ``verify`` does nothing.
    """
    verify: Callable[[], None] = _no_check
    if fmt == "pt":
        from rlarrow.io.memory.pt import open_pt

        snap, verify = open_pt(path, mmap=True)
    elif fmt == "npz":
        from rlarrow.io.memory.npz import open_npz

        snap, verify = open_npz(path)
    else:
        snap = read_memory(path)
    return snap, snap.to_table(run_id, snapshot_id), verify


def _no_check() -> None:
    return None


def _draining(pieces: list[pa.Table]) -> Iterator[pa.Table]:
    """``pieces`` from the first, each let go of once taken (memory holds one piece at a time)."""
    pieces.reverse()
    while pieces:
        yield pieces.pop()


def import_memory(
    inputs: Sequence[str | os.PathLike[str]],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    num_envs: int | None = None,
    memory_size: int | None = None,
    dtype: str = "float32",
    episodes: bool = False,
    names: Mapping[str, str] | None = None,
    layout: str = "binary",
    progress: bool | None = None,
    autoreset: str = "auto",
    max_episode_steps: int | None = None,
) -> ConvertReport:
    """Import memory exports into ``store``'s ``memory`` table, one snapshot per file.

    Args:
        inputs: files, directories (searched recursively) and glob patterns.
        store: a store, or the path of one (created when missing).
        run_id: the run to file the snapshots under (created; default: a new id). An
            existing run gets the snapshots after its last one.
        name: the run's name.
        num_envs: environments of csv exports, which do not record it (1 is assumed; with
            ``episodes`` it must be given: envs taken as one would interleave into garbage
            episodes).
        memory_size: memory size of csv exports (default: their rows per env).
        dtype: float dtype of csv exports (see :func:`rlarrow.io.memory.csv.iter_csv_tables`).
        episodes: also unroll the snapshots into ``episodes`` and ``steps`` rows: the
            consecutive exports of one memory as one time series, so that an episode crossing
            an export is one episode (see :func:`rlarrow.io.memory.unroll.unroll_series`).
        names: role -> tensor name for the unrolling, when the memory names them otherwise
            (skrl 2's and skrl 1's names are found without it; see
            :func:`rlarrow.io.memory.unroll.resolve_names`).
        layout: how a store without memory data yet stores the tensors: ``"binary"`` (the
            default: bulk data, written and read back at memory speed), ``"list"`` (SQL reaches
            every element) or ``"auto"`` (see :mod:`rlarrow.core.tensors`). A store keeps the
            layout its memory table already has.
        progress: a progress bar over the bytes read (None: when stderr is a terminal).
        autoreset: the vector env's autoreset mode for the unrolling: ``"auto"`` (read from
            each snapshot's data; where it does not show, next-step is assumed and said once
            in the report), ``"next-step"``, ``"same-step"`` or ``"none"`` (see
            :mod:`rlarrow.io.memory.unroll`). Each episode's metadata records the mode used.
        max_episode_steps: the env's time limit, for memories without a ``truncated`` tensor
            (skrl's DQN): episodes are cut after this many transitions, as gymnasium's
            ``TimeLimit`` truncates them (without it the report says they may be joined).

    Each file is one commit, made when the whole file has been read: a file that fails
    to read commits nothing of itself, and the error names it.

    Returns:
        A :class:`ConvertReport`.

    Example:
        >>> import numpy as np, tempfile
        >>> from rlarrow.io.memory.npz import write_npz
        >>> tmp = tempfile.mkdtemp()
        >>> _ = write_npz({"states": np.zeros((4, 1, 2), np.float32)}, f"{tmp}/m.npz")
        >>> import_memory([f"{tmp}/m.npz"], f"{tmp}/store", run_id="r", progress=False).rows
        4
    """
    from rlarrow.core.errors import InvalidInputError
    from rlarrow.io.memory.unroll import AUTORESET_MODES

    if autoreset not in AUTORESET_MODES:
        raise InvalidInputError(None, f"autoreset={autoreset!r}: choose one of "
                                f"{', '.join(AUTORESET_MODES)}")
    started = time.perf_counter()
    if not inputs:
        raise ArgumentError("no inputs: give memory export files, folders or glob patterns")
    files = expand_inputs(inputs)
    if max_episode_steps is not None and int(max_episode_steps) < 1:
        raise ArgumentError(f"max_episode_steps={max_episode_steps}: give the env's time limit, 1 or more "
                            "steps")
    if episodes and num_envs is None:
        csvs = [f for f in files if detect_format(f) == "csv"]
        if csvs:
            raise InvalidInputError(csvs[0], "a csv memory export does not record num_envs, and unrolling it "
                                    "into episodes with a wrong one interleaves the envs into garbage "
                                    "episodes: pass num_envs=N, the memory's number of envs")
    with opened(store, create=True) as st:
        next_snapshot = 0
        if run_id is not None and st.has_run(run_id):
            import pyarrow.compute as pc

            ids = st.read("memory", columns=["snapshot_id"], filter=pc.field("run_id") == run_id).column(
                "snapshot_id"
            )
            next_snapshot = (pc.max(ids).as_py() + 1) if len(ids) else 0
        else:
            run_id = st.add_run(
                source="memory-export",
                run_id=run_id,
                name=name,
                source_path=os.path.commonpath([os.path.abspath(f) for f in files]),
                num_envs=num_envs,
            )
        report = ConvertReport(store=st.path, run_id=run_id, first_snapshot=next_snapshot)
        autoreset_assumed: list[str] = []  # said once per conversion, not per file
        read: list[MemorySnapshot] = []  # with episodes: each file's snapshot as read, to unroll
        total = sum(f.stat().st_size for f in files)
        with bar(total, "convert", "B", progress) as pbar:
            for i, path in enumerate(files):
                fmt = detect_format(path)
                size = path.stat().st_size
                done = 0
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", AssumptionWarning)
                    if fmt != "csv":  # one table: written as parallel files, one commit
                        from concurrent.futures import ThreadPoolExecutor

                        snap, whole, verify = _snapshot_table(path, fmt, run_id, next_snapshot + i)
                        if episodes:
                            read.append(snap)
                        # the source's checksums are checked while the files are written
                        with ThreadPoolExecutor(1) as pool:
                            check = pool.submit(verify)
                            for table in _declaring(st, layout, iter([whole])):
                                st.append("memory", table, before_commit=check.result)
                                report.rows += table.num_rows
                    else:  # streamed: one file, committed when the whole csv has been read
                        tables = _declaring(st, layout, iter_memory_tables(
                            path, fmt, run_id, next_snapshot + i, num_envs, memory_size, dtype))
                        pieces: list[pa.Table] = []  # with episodes: the rows written, for the snapshot
                        with st.writer("memory") as writer:
                            for table in tables:
                                writer.write(table)
                                if episodes:
                                    pieces.append(table)
                                report.rows += table.num_rows
                                step = min(size - done, table.nbytes // 2 + 1)
                                done += step
                                pbar.update(step)
                        if episodes:  # the snapshot the store now holds, from the rows it was given
                            snap = MemorySnapshot.from_table(_draining(pieces), path=os.fspath(path))
                            snap.source_format = fmt
                            read.append(snap)
                    pbar.update(size - done)
                _sort_warnings(caught, report, autoreset_assumed)
                report.files.append(path)
                report.snapshots += 1
                report.bytes_read += size
        if episodes:  # one memory's consecutive exports unroll as one time series, from what was read
            from rlarrow.io.memory.unroll import unroll_snapshots

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", AssumptionWarning)
                report.episodes, report.steps = unroll_snapshots(
                    st, read, run_id=run_id, snapshot_ids=range(next_snapshot, next_snapshot + len(files)),
                    names=names, autoreset=autoreset, max_episode_steps=max_episode_steps,
                    formats=[detect_format(f) for f in files])
            read.clear()
            _sort_warnings(caught, report, autoreset_assumed)
        if autoreset_assumed:
            first = autoreset_assumed[0]
            report.assumptions.append(
                first if len(autoreset_assumed) == 1
                else f"{len(autoreset_assumed)} of {report.snapshots} snapshots do not show the autoreset "
                f"mode (the first: {first})")
        report.seconds = time.perf_counter() - started
        return report


def _sort_warnings(caught: Sequence[warnings.WarningMessage], report: ConvertReport,
                   autoreset_assumed: list[str]) -> None:
    """Assumptions into the report (the autoreset ones kept apart, said once); others warned on."""
    from rlarrow.io.memory.unroll import AutoresetAssumptionWarning

    for w in caught:
        if issubclass(w.category, AutoresetAssumptionWarning):
            autoreset_assumed.append(str(w.message))
        elif issubclass(w.category, AssumptionWarning):
            report.assumptions.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


_DEPRECATION_SAID = False


def _convert_memory(*args: Any, **kwargs: Any) -> ConvertReport:
    """Deprecated: the old name of :func:`import_memory` (a file into a store is an ``import_*``).

    Calls :func:`import_memory` with the same arguments; the first call warns with a
    :class:`DeprecationWarning`. It will be removed in rlarrow 1.0.
    """
    global _DEPRECATION_SAID
    if not _DEPRECATION_SAID:
        _DEPRECATION_SAID = True
        warnings.warn("rlarrow.io.memory.importer.convert_memory is deprecated: call import_memory, its new "
                      "name (the old name will be removed in rlarrow 1.0)", DeprecationWarning, stacklevel=2)
    return import_memory(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """The deprecated name ``convert_memory`` (PEP 562): importable, outside ``__all__``."""
    if name == "convert_memory":
        return _convert_memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _declaring(st: Store, layout: str, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Pass ``tables`` on; before the first, fix the tensors' storage for a new layout of ``memory``.

    A memory whose tensors (names, dtypes, shapes) an existing layout of the table holds goes
    there, however that layout stores them; one whose tensors no layout holds (the first
    memory, or a DQN memory beside a PPO one) starts a layout in ``layout`` storage.
    """
    first = True
    for table in tables:
        if first and layout != "list":
            types = layout_types("memory", table.schema, layout)
            if not any(_same_tensors(info.schema, types) for info in st.layouts("memory")):
                st.declare("memory", types, new_layout=True)
        first = False
        yield table


def _same_tensors(schema: pa.Schema | None, types: Mapping[str, pa.DataType]) -> bool:
    """Whether ``schema`` has exactly the tensor columns ``types``, in any storage (binary or list)."""
    if schema is None:
        return False
    declared = set(_schema.table("memory").column_names)
    have = {f.name: f.type for f in schema if f.name not in declared}

    def plain(t: pa.DataType) -> str:
        return _schema.describe_type(t).removesuffix(" binary")

    return have.keys() == types.keys() and all(plain(have[n]) == plain(t) for n, t in types.items())


def layout_types(table_name: str, schema: pa.Schema, layout: str) -> dict[str, pa.DataType]:
    """The tensor columns of ``schema`` with numeric tensors in ``layout``, for :meth:`Store.declare`.

    Struct columns and tensors of other dtypes keep their types.
    """
    from rlarrow.core import tensors as _tensors

    spec = _schema.table(table_name)
    types = {}
    for f in schema:
        try:
            is_tensor = spec.column(f.name).is_tensor
        except KeyError:
            is_tensor = spec.tensor_columns_allowed
        if not is_tensor:
            continue
        if pa.types.is_struct(f.type) or not _tensors.is_tensor_type(f.type):
            types[f.name] = f.type
            continue
        np_dtype = np.dtype(_tensors.tensor_dtype(f.type).to_pandas_dtype())
        types[f.name] = (
            _tensors.tensor_type(np_dtype, _tensors.tensor_shape(f.type), layout=layout)
            if np_dtype.kind in "biuf"
            else f.type
        )
    return types


def export_memory(
    store: StoreLike,
    directory: str | os.PathLike[str],
    fmt: str = "pt",
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
) -> list[Path]:
    """Write the store's snapshots as skrl memory exports: ``directory/memories/<name>.<fmt>``.

    Names are the snapshots' import names (the original file stems), so a converted
    export comes back under its own name; a name used twice gets a numeric suffix.
    csv files hold the filled rows only, as skrl writes them.

    ``directory/memories`` must be empty or new: with ``overwrite`` (``--overwrite``) its
    content is replaced whole, once every file is written (a failure leaves it as it was).

    Returns:
        The files written.

    Raises:
        InvalidInputError: ``directory/memories`` holds something and not ``overwrite``.
        OutputError: ``directory`` is a URI (``s3://...``): exports write locally.
    """
    from rlarrow.core.targets import check_target, fresh_directory, refuse_object_storage

    if fmt not in MEMORY_FORMATS:
        raise ArgumentError(f"unknown memory format {fmt!r}; choose one of {', '.join(MEMORY_FORMATS)}")
    what = f"a {fmt} memory export"
    refuse_object_storage(directory, what)  # (before Path() makes s3://b/x the local s3:/b/x)
    out_dir = Path(directory) / "memories"
    check_target(out_dir, overwrite=overwrite, what=what)
    st = as_store(store, readonly=True)
    written: list[Path] = []
    used: set[str] = set()
    with (fresh_directory(out_dir, overwrite=overwrite, what=what, skip_empty=True) as tmp,
          bar(st.row_count("memory"), f"export {fmt}", "row", progress) as pbar):
        for snap in snapshots(st, run_id=run_id):
            stem = file_name_part(snap.name or "memory", what="memory snapshot name",
                                  fix="export the other runs one at a time (run_id=...), or import the "
                                  "file again under a plain name")
            if stem in used:
                stem = f"{stem}-{len(written)}"
            used.add(stem)
            write_memory(snap, tmp / f"{stem}.{fmt}", fmt)
            written.append(out_dir / f"{stem}.{fmt}")
            pbar.update(snap.memory_size * snap.num_envs)
    return written
