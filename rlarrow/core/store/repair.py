"""Checking a store, repairing it, and the summary ``rlarrow info`` prints.

:meth:`RepairStore.check` finds listed files that are missing or damaged
(:class:`FileProblem`), :meth:`RepairStore.repair` drops them (:class:`RepairReport`),
:meth:`RepairStore.info` sums a store up (:class:`StoreInfo`, :class:`TableInfo`); a read
that fails names the damaged file through here.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, RLArrowError
from rlarrow.core.store.entries import is_directory, is_regular, open_lock, read_entry, store_dirs
from rlarrow.core.store.layouts import layout_number, table_of
from rlarrow.core.store.lease import VIEWS_DIR
from rlarrow.core.store.manifest import check_inside, decode_schema, retired_location, write_error
from rlarrow.core.store.tables import TableStore

if TYPE_CHECKING:
    from rlarrow.core.store.delta import DeltaLog

__all__ = ["FileProblem", "RepairReport", "StoreInfo", "TableInfo"]

#: Where :meth:`RepairStore.repair` moves damaged files: outside every table directory.
_QUARANTINE = "_damaged"


@dataclass(frozen=True)
class TableInfo:
    """Summary of one table of a store."""

    name: str
    rows: int
    files: int
    bytes: int
    schema_version: str
    schema: pa.Schema | None

    @property
    def tensors(self) -> dict[str, str]:
        """Each tensor column -> its dtype, shape and layout, e.g. ``"uint8 (84, 84) binary"``.

        A dict observation lists each field (``"observation.position"``). The layout is
        ``binary`` (one blob per row; SQL decodes it with the ``*_decoded`` views) or
        ``list`` (nested fixed-size lists).

        Example:
            >>> import numpy as np, rlarrow, tempfile
            >>> from rlarrow.core.tensors import tensor_type
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s.rlarrow")
            >>> _ = st.append("steps", {"run_id": "a", "episode_id": 0, "step": [0], "env_index": 0,
            ...     "observation": rlarrow.core.tensors.to_arrow(np.zeros((1, 4), np.float32),
            ...                                             tensor_type("float32", (4,), layout="binary")),
            ...     "action": [2], "reward": [0.5], "discount": [1.0], "is_first": [True],
            ...     "is_last": [True], "is_terminal": [True]})
            >>> st.info().tables["steps"].tensors
            {'observation': 'float32 (4,) binary', 'action': 'int64 () list'}
        """
        import numpy as np

        from rlarrow.core.tensors import TensorType, tensor_dtype, tensor_shape

        if self.schema is None or table_of(self.name) not in _schema.TABLE_NAMES:
            return {}
        declared = {c.name for c in _schema.table(table_of(self.name)).columns if not c.is_tensor}
        out: dict[str, str] = {}

        def describe(where: str, type_: pa.DataType) -> None:
            if isinstance(type_, pa.ExtensionType) and not isinstance(type_, TensorType):
                type_ = type_.storage_type
            if pa.types.is_struct(type_):
                for field in type_:
                    describe(f"{where}.{field.name}", field.type)
            elif pa.types.is_null(type_):
                out[where] = "null (nothing written yet)"
            else:
                layout = "binary" if isinstance(type_, TensorType) else "list"
                leaf = tensor_dtype(type_)
                numeric = pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)
                dtype = np.dtype(leaf.to_pandas_dtype()).name if numeric else str(leaf)  # float32, not float
                out[where] = f"{dtype} {tensor_shape(type_)} {layout}"

        for field in self.schema:
            if field.name not in declared:
                describe(field.name, field.type)
        return out


@dataclass(frozen=True)
class FileProblem:
    """A file the manifest lists that cannot be read as listed.

    Attributes:
        table: its table.
        file: its path relative to the store (``steps/part-....parquet``).
        rows: the rows the manifest lists for it (lost if it is dropped).
        problem: what is wrong (missing, a link, truncated, damaged, ...).
    """

    table: str
    file: str
    rows: int
    problem: str


@dataclass(frozen=True)
class RepairReport:
    """What :meth:`Store.repair` found, and whether it dropped it.

    Attributes:
        problems: the damaged or missing files.
        applied: whether they were dropped from the manifest (False: a dry run).
        quarantine: where damaged files that were present were moved (``STORE/_damaged``).
    """

    problems: list[FileProblem]
    applied: bool
    quarantine: str

    @property
    def rows_lost(self) -> int:
        """Rows of the dropped files (what the store no longer holds)."""
        return sum(p.rows for p in self.problems)

    def __str__(self) -> str:
        if not self.problems:
            return "every listed file is whole: nothing to repair"
        head = "dropped" if self.applied else "would drop (dry run; --apply to do it)"
        lines = [f"{head} {len(self.problems)} file(s), {self.rows_lost:,} row(s):"]
        lines += [f"  {p.file}: {p.problem} ({p.rows:,} rows)" for p in self.problems]
        if self.applied:
            lines.append(f"damaged files that were present are kept in {self.quarantine}")
        return "\n".join(lines)


@dataclass(frozen=True)
class StoreInfo:
    """Summary of a store, as ``rlarrow info`` prints it."""

    path: str
    format_version: str
    writer: str
    created_at: str
    tables: dict[str, TableInfo]
    #: one dict per run: run_id, name, source, created_at (ISO text), num_envs, and metadata
    #: (its plain JSON value, whole; None when the run has none)
    runs: list[dict[str, Any]]
    bytes_on_disk: int
    #: listed files that are missing or damaged (``rlarrow repair`` drops them)
    problems: list[FileProblem] = dataclasses.field(default_factory=list)
    #: the store version (each commit, compaction or edit makes one)
    version: int = 0
    #: files compactions and edits replaced, kept for earlier versions until ``rlarrow vacuum``
    retired_files: int = 0
    retired_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the summary."""
        return {
            "path": self.path,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "format_version": self.format_version,
            "writer": self.writer,
            "created_at": self.created_at,
            "bytes_on_disk": self.bytes_on_disk,
            "version": self.version,
            "retired_files": self.retired_files,
            "retired_bytes": self.retired_bytes,
            "tables": {
                name: {
                    "rows": t.rows,
                    "files": t.files,
                    "bytes": t.bytes,
                    "schema_version": t.schema_version,
                    "columns": None if t.schema is None else {f.name: str(f.type) for f in t.schema},
                    "tensors": t.tensors,
                }
                for name, t in self.tables.items()
            },
            "runs": self.runs,
        }



class RepairStore(TableStore):
    """Checks, repair and the summary of a store (see :class:`rlarrow.Store`)."""

    def _find_damage(self, table: str, exc: Exception) -> Exception:
        """The error a failed read of ``table`` raises: naming the damaged file, where one is."""
        for problem in self.check(table, deep=True):
            return CorruptFileError(
                self.path / problem.file,
                f"{problem.problem} (a file of table {table!r}, {problem.rows:,} rows); restore it from a "
                f"backup, or run `rlarrow repair {self.path}` to see what dropping it costs, then "
                "`--apply` to drop it")
        return super()._find_damage(table, exc)

    def check(self, table: str | Sequence[str] | None = None, *, deep: bool = False) -> list[FileProblem]:
        """The listed files that are missing or damaged.

        Each file must be a regular file inside its table directory, of the size the
        manifest lists, with a readable Parquet footer holding the listed rows. With
        ``deep``, every page is decoded too (what :meth:`repair` does; it reads the table).

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> store.check()
            []
        """
        self.refresh()
        names = _arguments.names(table, "table", what="table name") or list(self._manifest["tables"])
        for name in names:
            _schema.table(table_of(name))
        # a table's further layouts (TABLE.N) are checked with it
        names = list(dict.fromkeys(n for name in names for n in (self._layout_names(name) or [name])))
        problems: list[FileProblem] = []
        for name in names:
            for f in self._manifest["tables"][name]["files"]:
                problem = self._file_problem(name, f, deep)
                if problem is not None:
                    problems.append(FileProblem(name, f"{name}/{f['name']}", int(f["rows"]), problem))
        return problems

    def _file_problem(self, table: str, f: dict[str, Any], deep: bool) -> str | None:
        try:
            path = check_inside(self.path / table, f["name"])
        except CorruptFileError as exc:
            return "a symbolic link or not a regular file" if "link" in str(exc) else str(exc)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return "missing"
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        if size != f["bytes"] and f["bytes"] > 1:  # (bytes of 0/1: written by hand, unknown)
            return f"{size:,} bytes where {f['bytes']:,} were written (truncated or overwritten)"
        try:
            pf = pq.ParquetFile(path, page_checksum_verification=True)
            if pf.metadata.num_rows != f["rows"]:
                return f"holds {pf.metadata.num_rows:,} rows where {f['rows']:,} were written"
            expected = self.schema(table_of(table), layout=layout_number(table))  # its layout's
            if expected is not None and not pf.schema_arrow.remove_metadata().equals(expected):
                return "damaged Parquet: its columns are not the table's (a damaged footer)"
            if deep:
                for i in range(pf.num_row_groups):
                    pf.read_row_group(i)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # (a garbled column name)
            return f"damaged Parquet ({exc})"
        return None

    def _set_aside(self, source: Path, rel: str) -> None:
        """Move a damaged file (or log) to ``_damaged/REL``; a link is removed, never followed.

        No level of ``_damaged/REL``'s directory may be a link (it could lead outside the store).
        """
        if source.is_symlink():
            source.unlink()  # the link only, never what it points at
        elif source.exists():
            target = self.path / _QUARANTINE / rel
            try:
                store_dirs(self.path, Path(_QUARANTINE, rel).parent, "repair's _damaged directory")
                os.replace(source, target)
            except OSError as exc:
                raise write_error(target, exc) from exc

    def _damaged_logs(self) -> list[FileProblem]:
        """Tables whose Delta log cannot be read: --apply sets it aside and starts a new one."""
        from rlarrow.core.store.delta import LOG_DIR, DeltaLog

        problems = []
        for table in self._manifest["tables"]:
            try:
                log = DeltaLog(self.path / table)
                log.refresh()
                log.check_not_ahead(int(self._manifest.get("version", 0)))
            except CorruptFileError as exc:
                problems.append(FileProblem(table, f"{table}/{LOG_DIR}", 0, f"Delta log damaged ({exc}); "
                                            "--apply sets it aside and starts a new one at the current "
                                            "version (earlier versions of this table can no longer be read)"))
                continue
            # rlarrow writes no checkpoints: one there is another writer's (or damage), which
            # Delta engines would read before the commits; set aside, the commits read as before
            log_dir = self.path / table / LOG_DIR
            if log_dir.is_dir() and not log_dir.is_symlink():
                for found in sorted(log_dir.iterdir()):
                    if found.name == "_last_checkpoint" or ".checkpoint." in found.name:
                        problems.append(FileProblem(table, f"{table}/{LOG_DIR}/{found.name}", 0,
                                                    "a Delta checkpoint rlarrow did not write (Delta engines "
                                                    "read it before the commits); --apply sets it aside"))
        return problems

    def _unadoptable(self) -> list[FileProblem]:
        """Unlisted files in the tables that recovery cannot adopt (they stop writers opening)."""
        problems = []
        manifest = self._read_manifest()
        for table, names in self._scan_orphans(manifest).items():
            for name in names:
                trial = copy.deepcopy(manifest)
                try:
                    self._adopt(trial, table, name)
                except (RLArrowError, OSError) as exc:
                    problems.append(FileProblem(table, f"{table}/{name}", 0, f"not listed, and cannot be "
                                                f"adopted ({exc})"))
        return problems

    def repair(self, *, apply: bool = False) -> RepairReport:
        """Find missing or damaged files (:meth:`check` with ``deep``); with ``apply``, drop them.

        Dropping takes a file out of the manifest (the rest of its table reads again) and
        moves it, when it is there, to ``STORE/_damaged/TABLE/`` (outside every table, so
        no engine or recovery reads it; delete it once you no longer want it). The report
        says how many rows were lost. Without ``apply`` nothing changes (a dry run).

        Raises:
            StoreError: ``apply`` on a store opened read-only.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> print(store.repair())
            every listed file is whole: nothing to repair
        """
        quarantine = self.path / _QUARANTINE
        problems = self.check(deep=True) + self._unadoptable() + self._damaged_logs()
        if not apply or not problems:
            return RepairReport(problems, applied=False, quarantine=os.fspath(quarantine))
        with self._locked(), self._delta_operation("DELETE", True):
            manifest = self._read_manifest()
            if quarantine.is_symlink() or (quarantine.exists() and not quarantine.is_dir()):
                raise CorruptFileError(quarantine, "is not a directory of the store (a link?); move it "
                                       "away: repair moves damaged files there")
            # A damaged Delta log is set aside first; the heal then starts the table's new log
            # at this version, with the files this version lists (marked as a new start).
            stamp = time.strftime("%Y%m%dT%H%M%S")
            for p in problems:
                if p.file.endswith("/_delta_log"):
                    self._set_aside(self.path / p.file, f"{p.file}-{stamp}")
                    self.__dict__.get("_delta_logs", {}).pop(p.table, None)
                    # the new log's first commit says that the table's history starts there
                    for item in manifest.get("delta_due", []):
                        if item["table"] == p.table:
                            item["rebuilt"] = True
            self._delta_heal(manifest)  # (commits left due are written, or kept, before this one)
            # An interrupted replacement is finished or undone first, as recovery would (the
            # check's view already saw it so): dropping files from a journal's half state
            # would count a compaction's rows twice or keep part of an append.
            self._finish_pending(manifest)
            dropped = {p.file for p in problems}
            for table, entry in manifest["tables"].items():
                keep = [f for f in entry["files"] if f"{table}/{f['name']}" not in dropped]
                entry["files"], entry["rows"] = keep, sum(f["rows"] for f in keep)
            for p in problems:
                if not p.file.endswith("/_delta_log"):
                    self._set_aside(self.path / p.file, p.file)
            self._write_manifest(manifest)
            self._manifest = self._recover(self._read_manifest())
        return RepairReport(problems, applied=True, quarantine=os.fspath(quarantine))

    def info(self) -> StoreInfo:
        """Tables, row counts, schema versions, size on disk, and missing or damaged files.

        It reads only the files' footers (:meth:`check`): a damaged file is named in
        ``problems`` and the rest is summed as listed; ``rlarrow repair`` drops such files.
        The engine knows no runs: :meth:`rlarrow.Store.info` adds the catalog's.
        """
        problems = self.check()
        m = self._manifest
        tables = table_infos(m)
        size = _disk_bytes(os.fspath(self.path), skip=VIEWS_DIR)  # (views: readers' links, the same bytes)
        retired_bytes = 0
        for rel in m.get("retired", []):
            sizes: list[Path] = []
            with contextlib.suppress(CorruptFileError):  # (kept aside through a link: not counted)
                sizes.append(retired_location(self.path, rel))
            for path in (*sizes, self.path / rel):  # (moved out, or not yet)
                with contextlib.suppress(OSError):
                    retired_bytes += path.lstat().st_size  # (a link is not followed)
                    break
        return StoreInfo(
            version=int(m.get("version", 0)),
            retired_files=len(m.get("retired", [])),
            retired_bytes=retired_bytes,
            path=os.fspath(self.path),
            format_version=m["format_version"],
            writer=m.get("writer", "?"),
            created_at=m.get("created_at", "?"),
            tables=tables,
            runs=[],  # (the RL catalog's: :meth:`rlarrow.Store.info` lists them)
            bytes_on_disk=size,
            problems=problems,
        )


def table_infos(manifest: dict[str, Any]) -> dict[str, TableInfo]:
    """Each table (layout) of a manifest as :class:`StoreInfo` lists it: rows, files, bytes, schema."""
    return {name: TableInfo(name=name, rows=int(entry["rows"]), files=len(entry["files"]),
                            bytes=sum(int(f["bytes"]) for f in entry["files"]),
                            schema_version=entry.get("schema_version", "?"),
                            schema=None if entry.get("schema") is None else decode_schema(entry["schema"]))
            for name, entry in manifest["tables"].items()}


# --------------------------------------------------------------------------- a lost manifest


def _logged_names(log_dir: Path) -> set[str]:
    """Every file name any commit of a Delta log added (those removed since included)."""
    from rlarrow.core.store.delta import DeltaLog

    names: set[str] = set()
    version = 0
    while True:
        path = log_dir / f"{version:020d}.json"
        data = DeltaLog.read_commit(path)
        if data is None:
            return names
        for action in DeltaLog._parse(path, data):
            if "add" in action:
                names.add(DeltaLog._name(path, action["add"]))
        version += 1


def rebuild_manifest(root: str | os.PathLike[str], *, apply: bool = False) -> list[str]:
    """Rebuild a store's lost or damaged manifest from its tables' Delta logs and Parquet files.

    Each table directory's Delta log lists the files of its last version, their rows and
    order, and the table's exact schema: those become the table's entry. A file of the
    directory that an earlier commit of the log added and a later one removed is
    ``retired`` (earlier versions read it; ``vacuum`` deletes it in time); a ``part-*.parquet``
    no commit of the log names (a commit whose Delta log was still due when the manifest was
    lost, or a crashed writer's file, which rlarrow adopts on the next open anyway) is listed
    after the log's files, its rows read from its footer, and the table's Delta commit is
    left due. The store's version is the latest any log records. With ``apply`` the manifest
    is written (under the store's lock); without, nothing changes.

    Returns:
        One line per table rebuilt (and per thing it could not keep); ``[]`` when the
        manifest reads whole (nothing to rebuild).

    Raises:
        CorruptFileError: what cannot be rebuilt, said exactly: a directory that holds no
            table with a Delta log (not a store, or one whose logs are lost too), a table
            with Parquet files but no Delta log (which of its files were committed, and in
            what order, is not known), a damaged log, a file a log lists that is not there.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [0],
        ...                              "value": [1.0]})
        >>> os.remove(store.path / "_rlarrow_store.json")
        >>> rebuild_manifest(store.path, apply=True)[1]
        'scalars: 1 file(s), 1 row(s) from its Delta log'
        >>> rlarrow.Store.open(store.path).row_count("scalars")
        1
    """
    import fcntl

    from rlarrow.core.store import manifest as _manifest
    from rlarrow.core.store.delta import LOG_DIR

    root = Path(root)
    path = root / _manifest.MANIFEST_NAME
    tables = [d.name for d in sorted(root.iterdir()) if not d.is_symlink() and d.is_dir()
              and _manifest.is_table_name(d.name) and table_of(d.name) in _schema.TABLE_NAMES]
    fd = -1
    try:
        if apply and any(is_directory(root / t / LOG_DIR) for t in tables):
            fd = open_lock(root)
            fcntl.flock(fd, fcntl.LOCK_EX)  # (as every writer does: none commits meanwhile)
        lost = _manifest_loss(root, path)
        if lost is None:
            return []  # whole: nothing to rebuild (a later major format raises FormatVersionError)
        if not any(is_directory(root / t / LOG_DIR) for t in tables):
            raise CorruptFileError(path, f"is {lost.split(' ')[0]} and no table folder has a Delta log "
                                   f"({LOG_DIR}): nothing to rebuild the store from; restore it from a "
                                   "backup")
        manifest = _manifest.empty_manifest()
        manifest.update(retired=[], retired_at={}, delta_due=[], version=0)
        lines = [f"{_manifest.MANIFEST_NAME}: {lost}; {'rebuilt' if apply else 'would rebuild'} it from "
                 "the tables' Delta logs and Parquet files"]
        adopted: list[str] = []
        now_ms = int(time.time() * 1000)
        for table in tables:
            rebuilt = _rebuild_table(root / table, manifest, now_ms)
            if rebuilt is not None:
                line, unlogged = rebuilt
                lines.append(line)
                if unlogged:
                    adopted.append(table)
        if adopted:  # their Delta commits are due: the next writer writes them
            manifest["version"] += 1
            manifest["delta_due"] = [{"table": t, "version": manifest["version"]} for t in adopted]
        if apply:
            _write_rebuilt(root, path, manifest)
        return lines
    finally:
        if fd >= 0:
            os.close(fd)


def _manifest_loss(root: Path, path: Path) -> str | None:
    """What is wrong with the manifest (``missing``, ``damaged (...)``, ...), or None when it reads whole."""
    from rlarrow.core.store import manifest as _manifest
    from rlarrow.core.store.segments import local_segments

    try:
        raw = read_entry(path, what="the store's manifest")
        _manifest.parse_manifest(raw, path, local_segments(root))
        return None
    except FileNotFoundError:
        return "missing"
    except CorruptFileError as exc:
        if getattr(exc, "segment", None) is not None:
            return None  # (a lost segment of a whole manifest: its lists are restored from the logs)
        reason = str(exc).removeprefix(f"{path}: ").split("; restore")[0]
        return f"damaged ({reason[:200]})"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"


def _rebuild_table(directory: Path, manifest: dict[str, Any], now_ms: int) -> tuple[str, bool] | None:
    """One table's manifest entry rebuilt from its Delta log and Parquet files, in ``manifest``.

    Returns its report line and whether files in no Delta commit were adopted (its commit is
    then due), or None for a table folder without a log or files (nothing to list).
    """
    from rlarrow.core.store.delta import LOG_DIR, DeltaLog

    table = directory.name
    log = DeltaLog(directory)
    log.refresh()
    parquet = sorted(p.name for p in directory.glob("part-*.parquet") if is_regular(p))  # (no link)
    entry = manifest["tables"].get(table) or {
        "schema_version": manifest["tables"][table_of(table)]["schema_version"],
        "schema": None, "rows": 0, "files": []}
    manifest["tables"][table] = entry
    if log.version < 0:
        if parquet:
            raise CorruptFileError(directory, f"holds {len(parquet)} Parquet file(s) but no Delta "
                                   f"log ({LOG_DIR}): which of them were committed, and in what "
                                   "order, is not known, so the manifest cannot be rebuilt; "
                                   "restore the store from a backup, or move the table folder out "
                                   "and repair again to keep the other tables")
        if table != table_of(table):
            del manifest["tables"][table]
        return None
    config = (log.metadata or {}).get("configuration") or {}
    if not isinstance(config.get("rlarrow.schema"), str):
        raise CorruptFileError(directory / LOG_DIR, "has no rlarrow schema (metaData.configuration"
                               "[\"rlarrow.schema\"]): not rlarrow's log; restore the store from a "
                               "backup")
    files = _logged_files(directory, log)
    logged = _logged_names(directory / LOG_DIR)
    listed = {f["name"] for f in files}
    retired = [n for n in parquet if n in logged and n not in listed]
    unlogged = [n for n in parquet if n not in logged]
    files += _unlogged_files(directory, unlogged)  # (committed while its Delta commit was due, or a crash's)
    entry.update(schema=config["rlarrow.schema"],
                 schema_version=config.get("rlarrow.schemaVersion", entry["schema_version"]),
                 files=files, rows=sum(f["rows"] for f in files))
    manifest["version"] = max(manifest["version"], log.store_version)
    for name in retired:
        manifest["retired"].append(f"{table}/{name}")
        manifest["retired_at"][f"{table}/{name}"] = now_ms
    more = f", {len(unlogged)} of them in no Delta commit yet (listed last)" if unlogged else ""
    more += f"; {len(retired)} replaced file(s) kept for earlier versions" if retired else ""
    return f"{table}: {len(files)} file(s), {entry['rows']:,} row(s) from its Delta log{more}", bool(unlogged)


def _logged_files(directory: Path, log: DeltaLog) -> list[dict[str, Any]]:
    """The files of the log's last version, in order, each there (never through a link), with its rows."""
    table = directory.name
    files: list[dict[str, Any]] = [{"name": f.name, "rows": f.rows, "bytes": f.bytes} for f in log.ordered()]
    for f in files:
        check_inside(directory, f["name"])  # (a link the log names: refused, never read through)
    gone = [f["name"] for f in files if not is_regular(directory / f["name"])]
    if gone:
        raise CorruptFileError(directory / gone[0], f"is listed by {table}'s Delta log but is not "
                               f"there ({len(gone)} file(s) missing): restore them, or the store "
                               "from a backup")
    for f in files:
        if f["rows"] < 0:  # (a log without numRecords: the footer says)
            f["rows"] = pq.ParquetFile(directory / f["name"]).metadata.num_rows
    return files


def _unlogged_files(directory: Path, names: list[str]) -> list[dict[str, Any]]:
    """Parquet files no Delta commit names, their rows read from their footers."""
    files = []
    for name in names:
        file = directory / name
        try:
            rows = pq.ParquetFile(file).metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise CorruptFileError(file, f"is in no Delta commit and cannot be read ({exc}): move it "
                                   "out of the store and repair again") from exc
        files.append({"name": name, "rows": rows, "bytes": file.stat().st_size})
    return files


def _write_rebuilt(root: Path, path: Path, manifest: dict[str, Any]) -> None:
    """Write a rebuilt manifest, checked first; a damaged one is kept aside in ``_damaged``."""
    from rlarrow.core.store import manifest as _manifest
    from rlarrow.core.store.segments import write_whole

    _manifest.validate(json.loads(json.dumps(manifest)), path)  # (valid, or nothing changes)
    if os.path.lexists(path):  # the damaged one (or a link, never followed): kept aside
        quarantine = store_dirs(root, _QUARANTINE, "repair's _damaged directory")
        os.replace(path, quarantine / f"{_manifest.MANIFEST_NAME}-{time.strftime('%Y%m%dT%H%M%S')}")
    write_whole(root, manifest)


def _disk_bytes(root: str, skip: str = "") -> int:
    """Bytes of the files under ``root`` (its ``skip`` directory left out), no link followed or counted."""
    size = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name != skip:
                    size += _disk_bytes(entry.path)
            else:
                size += entry.stat(follow_symlinks=False).st_size
    return size
