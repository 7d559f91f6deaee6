"""Each table directory is also a Delta Lake table: its ``_delta_log/``, written to the spec.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The store's manifest stays the commit point (its journal makes commits, compactions and
transactions all-or-nothing). After every manifest write that settles a change
(:meth:`rlarrow.Store._write_manifest` with no step pending), each table whose committed
files differ from its Delta log gets one Delta commit: ``add`` actions for the files the
manifest now lists, ``remove`` actions for those it no longer does. So every engine that
reads Delta Lake (``deltalake``, ``polars.scan_delta``, ``ray.data.read_delta``, Spark,
DuckDB's ``delta_scan``) reads a consistent snapshot of every table, and any earlier version.

Why written here and not with the ``deltalake`` package: the log is plain JSON lines, a
commit writes one small file, and the store already holds the lock that serialises its
commits; ``deltalake``'s transaction API would add a 40 MB dependency to every install and
re-read the table state on every commit (measured in ``benchmarks/store_commit.py``). The
tests read every log back with ``deltalake`` and Polars.

Versions: each table's Delta log counts its own commits (0, 1, ...), as the protocol
requires (no gaps). The store counts its changes too (``version`` in the manifest); each
Delta commit records the store version it belongs to (``commitInfo.rlarrow.storeVersion``),
which is how ``Store.open(path, version=S)`` finds every table's state at store version S.

What rlarrow keeps in the log beyond the protocol's required fields (all optional to
readers): the store's exact Arrow schema (``metaData.configuration["rlarrow.schema"]``,
because Delta has no fixed-size list, no unsigned integers and no tensor extension type:
the Delta schema names the nearest Delta type and the field's metadata the tensor's dtype
and shape), each file's row count (``add.stats.numRecords``) and its place in the table's
row order (``add.tags["rlarrow.order"]``, so that a file a compaction wrote reads where
the files it replaced did).

Example:
    >>> import rlarrow, tempfile, os, json
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [0, 1],
    ...                              "value": [1.0, 0.5]})
    >>> log = DeltaLog(store.path / "scalars")
    >>> log.refresh(); log.version, sorted(f.rows for f in log.files.values())
    (0, [2])
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import pyarrow as pa

from rlarrow._version import __version__
from rlarrow.core.errors import CorruptFileError, StoreError
from rlarrow.core.store.delta_commits import (
    MAX_LONG,
    ORDER_SEGMENT_DIGITS,
    ORDER_TAG,
    SCHEMA_KEY,
    CheckedCommit,
    CommitChecker,
    refuse_constant,
)
from rlarrow.core.store.delta_commits import (
    PROTOCOL as PROTOCOL,
)
from rlarrow.core.store.delta_commits import (
    DeltaFile as DeltaFile,
)
from rlarrow.core.store.entries import is_regular
from rlarrow.core.store.files import TMP_PREFIX, temp_owner, tmp_owner_alive
from rlarrow.core.store.manifest import (
    encode_schema,
    fsync_dir,
    retired_location,
    write_error,
)

__all__: list[str] = []

#: The Delta log directory inside each table directory.
LOG_DIR = "_delta_log"


@dataclass
class _State:
    version: int = -1
    store_version: int = -1
    #: the log was started for files that were there already (a store written before Delta
    #: logs, or a log rlarrow repair set aside): the store version it starts at
    history_from: int | None = None
    files: dict[str, DeltaFile] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None


def order_after(key: str | None) -> str:
    """An order key after ``key`` (after every key when appending at the end).

    Example:
        >>> order_after(None), order_after("000000000004.000000000001"), order_after(".000000000001")
        ('000000000001', '000000000005', '000000000001')
    """
    if key is None:
        return f"{1:0{ORDER_SEGMENT_DIGITS}d}"
    head = key.split(".")[0]  # ('' for a key made before every other: ".000000000001")
    return f"{int(head or 0) + 1:0{ORDER_SEGMENT_DIGITS}d}"


def order_between(before: str | None, after: str | None) -> str:
    """An order key strictly between two keys (None: no bound on that side).

    Keys are dot-joined fixed-width segments; ``.`` sorts before digits, so a key's
    extension sorts right after it.

    Example:
        >>> a = order_between("000000000001", "000000000002"); a
        '000000000001.000000000001'
        >>> "000000000001" < a < "000000000002", order_between(None, "000000000001") < "000000000001"
        (True, True)
    """
    if after is None:
        return order_after(before)
    base = before if before is not None else ""
    zero, one = "0" * ORDER_SEGMENT_DIGITS, f"{1:0{ORDER_SEGMENT_DIGITS}d}"
    candidate = f"{base}.{one}" if base else f".{one}"
    while candidate >= after:  # ``after`` extends ``before``: go one level deeper
        candidate = f"{candidate[:-ORDER_SEGMENT_DIGITS]}{zero}.{one}"
    return candidate


def _delta_type(t: pa.DataType) -> tuple[Any, dict[str, str]]:
    """The Delta type of an Arrow type, and field metadata that says what Delta cannot."""
    from rlarrow.core import tensors

    meta: dict[str, str] = {}
    if isinstance(t, pa.ExtensionType):
        if isinstance(t, tensors.TensorType):
            meta["rlarrow.tensor"] = _tensor_meta(t, "binary")
        return _delta_type(t.storage_type)[0], meta
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        element, _ = _delta_type(t.value_type)
        if pa.types.is_fixed_size_list(t):
            meta["rlarrow.tensor"] = _tensor_meta(t, "list")
        return {"type": "array", "elementType": element, "containsNull": True}, meta
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_delta_field(t.field(i)) for i in range(t.num_fields)]}, meta
    if pa.types.is_timestamp(t):
        return "timestamp", meta  # (the store's timestamps are UTC microseconds)
    simple = {
        pa.bool_(): "boolean", pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer",
        pa.int64(): "long", pa.float32(): "float", pa.float64(): "double", pa.string(): "string",
        pa.large_string(): "string", pa.binary(): "binary", pa.large_binary(): "binary",
        pa.date32(): "date",
        # Delta has no unsigned integers: the next wider signed type holds every value (as
        # Spark reads Parquet's UINT_8/16/32); the field metadata keeps the Arrow type.
        pa.uint8(): "short", pa.uint16(): "integer", pa.uint32(): "long", pa.uint64(): "decimal(20,0)",
        pa.float16(): "float",
    }
    if t in simple:
        if t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(), pa.float16()):
            meta["rlarrow.arrow_type"] = str(t)
        return simple[t], meta
    if pa.types.is_fixed_size_binary(t):
        return "binary", meta
    raise StoreError(f"the Arrow type {t} has no Delta Lake type; rlarrow cannot log it")


def _tensor_meta(t: pa.DataType, layout: str) -> str:
    from rlarrow.core import tensors

    dtype = tensors.tensor_dtype(t)
    return json.dumps({"dtype": str(dtype), "shape": list(tensors.tensor_shape(t)), "layout": layout})


def _delta_field(f: pa.Field) -> dict[str, Any]:
    type_, meta = _delta_type(f.type)
    return {"name": f.name, "type": type_, "nullable": bool(f.nullable), "metadata": meta}


def delta_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Delta Lake schema (``metaData.schemaString``, decoded) of an Arrow schema.

    Example:
        >>> import pyarrow as pa
        >>> delta_schema(pa.schema([("step", pa.int64())]))["fields"][0]["type"]
        'long'
    """
    return {"type": "struct", "fields": [_delta_field(f) for f in schema]}


def _now_ms() -> int:
    return int(time.time() * 1000)


class DeltaLog:
    """One table directory's Delta log: read incrementally, written one commit at a time.

    ``refresh()`` reads the commits written since the last one it read (by this process
    or another); the state is then ``version``, ``store_version`` and ``files``. Writers
    call :meth:`commit` under the store's lock.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.log_dir = self.directory / LOG_DIR
        self._state = _State()
        # (entries, order key after the last): a listing (manifest file entries) whose files
        # are exactly the state's, in the order a diff walks them; a diff of it plus new files
        # at the end (an append's) places only those, where walking the whole listing took
        # 6 ms at 10,000 files, twice per commit. The prefix is compared as a list: manifests
        # share their file entries (manifest.copy_tree), so that is a pointer comparison in C per
        # entry. Dropped whenever the state changes another way.
        self._synced: tuple[list[dict[str, Any]], str | None] | None = None
        self._planned: tuple[list[dict[str, Any]], str | None, list[DeltaFile], list[DeltaFile]] | None = None

    # ------------------------------------------------------------------ reading

    @property
    def version(self) -> int:
        """The last Delta version read (-1: no log yet)."""
        return self._state.version

    @property
    def store_version(self) -> int:
        """The store version of the last Delta commit read (-1: none)."""
        return self._state.store_version

    @property
    def files(self) -> dict[str, DeltaFile]:
        """The files of the last version read, by name."""
        return self._state.files

    @property
    def history_from(self) -> int | None:
        """The store version this log starts at when it was started for files already there."""
        return self._state.history_from

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The table's current ``metaData`` action (None: no log yet)."""
        return self._state.metadata

    def _path(self, version: int) -> Path:
        return self.log_dir / f"{version:020d}.json"

    def exists(self) -> bool:
        """Whether the table has a Delta log (its first commit was written)."""
        return is_regular(self._path(0))

    def _check_dir(self) -> bool:
        """Whether the log directory exists; refused when it is a link or not a directory."""
        try:
            mode = os.lstat(self.log_dir).st_mode
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise CorruptFileError(self.log_dir, f"cannot be looked at ({exc.strerror or exc})") from exc
        if not stat.S_ISDIR(mode):  # (a link is not a directory to lstat)
            raise CorruptFileError(self.log_dir, "is not a directory of the store (a link?); rlarrow never "
                                   "follows a link out of a store: move it away (its Delta log is "
                                   "written again by the next commit)")
        return True

    @staticmethod
    def read_commit(path: Path) -> bytes | None:
        """A commit file's bytes (None: there is none), never through a link, a FIFO or a device.

        Raises:
            CorruptFileError: the name is taken by something that is not a regular file.
        """
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptFileError(path, f"cannot be read ({exc.strerror or exc}); a Delta commit must be a "
                                   "regular file in the table's _delta_log (not a link)") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CorruptFileError(path, "is not a regular file; a Delta commit must be one")
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        finally:
            os.close(fd)

    def _read(self, path: Path) -> bytes | None:
        """A commit's bytes (None: none yet); a log elsewhere (a bucket) reads its own way."""
        return self.read_commit(path)

    def refresh(self, *, until_store_version: int | None = None) -> None:
        """Read the commits written since the last one read (up to a store version).

        Every field rlarrow writes is checked before anything is applied: a commit that is
        not JSON lines, or one whose value of any field is not of its type (a damaged log), is
        a CorruptFileError naming it, and the state stays that of the commit before. A
        commit after ``until_store_version`` is never needed, so damage there does not stop
        reading an earlier version.

        Raises:
            CorruptFileError: a commit file is damaged (above), or the log or a commit is a
                link or not a regular file.
        """
        if not self._check_dir():
            return
        while True:
            if until_store_version is not None and self._state.version >= 0 \
                    and self._state.store_version >= until_store_version:
                return  # (each commit is of a later store version than the one before)
            path = self._path(self._state.version + 1)
            data = self._read(path)
            if data is None:
                return
            if until_store_version is not None:
                first = self.first_info(data)
                if first is not None and first[0] > until_store_version:
                    if self._state.version < 0 and (first[1]["rlarrow"] or {}).get("rebuilt") is True:
                        self._state.history_from = first[0]
                    return
            commit = CommitChecker(path).commit(self._parse(path, data))
            if self._state.version < 0 and commit.rebuilt:
                self._state.history_from = commit.store_version
            if until_store_version is not None and commit.store_version > until_store_version:
                return
            if self._state.version >= 0 and commit.store_version <= self._state.store_version:
                raise CorruptFileError(path, f"is a damaged Delta commit: its store version "
                                       f"{commit.store_version} is not after the one before "
                                       f"({self._state.store_version}); `rlarrow repair STORE --apply` sets "
                                       "the table's log aside and starts a new one")
            self._apply(commit)
            self._state.version += 1
            self._state.store_version = commit.store_version

    @staticmethod
    def first_info(data: bytes) -> tuple[int, dict[str, Any]] | None:
        """The store version and commitInfo of a commit's first line (rlarrow's), if it is whole."""
        try:
            first = data.split(b"\n", 1)[0].decode("utf-8")
            info = json.loads(first, parse_constant=refuse_constant)["commitInfo"]
            found = info["rlarrow"]["storeVersion"]
        except (ValueError, RecursionError, UnicodeDecodeError, AttributeError, KeyError, TypeError):
            return None
        if isinstance(found, bool) or not isinstance(found, int) or not 0 <= found <= MAX_LONG:
            return None
        return found, info

    @staticmethod
    def _parse(path: Path, data: bytes) -> list[dict[str, Any]]:
        try:
            actions = [json.loads(line, parse_constant=refuse_constant)
                       for line in data.decode("utf-8").splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise CorruptFileError(path, f"is not a Delta Lake commit (JSON lines): {str(exc):.200}") \
                from None
        if not all(isinstance(a, dict) for a in actions):
            raise CorruptFileError(path, "is not a Delta Lake commit: a line is not a JSON object")
        return actions

    def _apply(self, commit: CheckedCommit) -> None:
        self._synced = self._planned = None
        state = self._state
        if commit.metadata is not None:
            state.metadata = commit.metadata
        for name in commit.removes:
            state.files.pop(name, None)
        for f in commit.adds:
            state.files[f.name] = f

    @staticmethod
    def _name(path: Path, action: Any) -> str:
        if not isinstance(action, dict):
            raise CorruptFileError(path, "is a damaged Delta commit: an add or remove is not a JSON object")
        return CommitChecker(path).name(action, "path")

    def check_not_ahead(self, latest: int) -> None:
        """Refuse a log that says it holds a store version after the store's latest (damage).

        Raises:
            CorruptFileError: it does (a writer would otherwise skip every commit up to it).
        """
        if self._state.store_version > latest:
            raise CorruptFileError(self.log_dir, f"is a damaged Delta log: a commit says it is of store "
                                   f"version {self._state.store_version}, after the store's latest "
                                   f"({latest}); `rlarrow repair STORE --apply` sets it aside and starts a "
                                   "new one")

    def ordered(self) -> list[DeltaFile]:
        """The files in the table's row order."""
        return sorted(self._state.files.values(), key=lambda f: (f.order, f.name))

    # ------------------------------------------------------------------ writing

    def diff(self, listed: list[dict[str, Any]]) -> tuple[list[DeltaFile], list[DeltaFile]]:
        """What a commit must add and remove for the log to list ``listed`` (manifest entries).

        New files get order keys from their place among the listed files: a file a
        compaction wrote goes where the first of the files it replaced was.
        """
        current = self._state.files
        synced = self._synced
        if synced is not None:
            kept = len(synced[0])
            if len(listed) >= kept and listed[:kept] == synced[0] \
                    and not any(f["name"] in current for f in listed[kept:]):
                adds = []
                previous = synced[1]
                for entry in listed[kept:]:  # as the walk below places new names at the end
                    previous = order_between(previous, None)
                    adds.append(DeltaFile(entry["name"], int(entry["rows"]), int(entry["bytes"]), previous))
                return self._plan(list(listed), previous, adds, [])
        listed_names = {f["name"] for f in listed}
        removes = [f for n, f in current.items() if n not in listed_names]
        adds = []
        previous = None
        pending: list[dict[str, Any]] = []

        def place(next_key: str | None) -> None:
            nonlocal previous
            for entry in pending:
                key = order_between(previous, next_key)
                adds.append(DeltaFile(entry["name"], int(entry["rows"]), int(entry["bytes"]), key))
                previous = key
            pending.clear()

        for entry in listed:
            known = current.get(entry["name"])
            if known is None:
                pending.append(entry)
                continue
            if pending:
                place(known.order if known.order > (previous or "") else None)
            previous = known.order if known.order > (previous or "") else previous
        place(None)
        return self._plan(list(listed), previous, adds, removes)

    def _plan(self, listed: list[dict[str, Any]], last: str | None, adds: list[DeltaFile],
              removes: list[DeltaFile]) -> tuple[list[DeltaFile], list[DeltaFile]]:
        """Remember a diff's outcome, and return it.

        The state is ``listed`` now (nothing to do), or once :meth:`commit` has written these
        very ``adds`` and ``removes``.
        """
        if not adds and not removes and len(listed) == len(self._state.files):
            self._synced = (listed, last)
        self._planned = (listed, last, adds, removes)
        return adds, removes

    def commit(
        self,
        adds: list[DeltaFile],
        removes: list[DeltaFile],
        *,
        schema: pa.Schema | None,
        schema_version: str,
        store_version: int,
        operation: str = "WRITE",
        data_change: bool = True,
        table: str = "",
        rebuilt: bool = False,
    ) -> int:
        """Write the next Delta commit (under the store's lock); returns its version.

        Raises:
            StoreError: the commit file could not be written (full disk, ...), or another
                writer wrote this version meanwhile (a Delta writer that is not rlarrow).
        """
        state = self._state
        version = state.version + 1
        now = _now_ms()
        if operation == "WRITE" and version == 0 and not adds and not removes:
            operation = "CREATE TABLE"  # (a declared table: its schema, no file yet)
        actions: list[dict[str, Any]] = [{"commitInfo": {
            "timestamp": now, "operation": operation,
            "operationParameters": {"mode": "Append"} if operation == "WRITE" else {},
            "isBlindAppend": operation == "WRITE" and not removes,
            "engineInfo": f"rlarrow/{__version__}",
            "rlarrow": {"storeVersion": store_version, "table": table,
                        **({"rebuilt": True} if rebuilt else {})},
        }}]
        new_meta: dict[str, Any] | None = None
        if schema is not None:
            encoded = encode_schema(schema)
            old = state.metadata
            if old is None or (old.get("configuration") or {}).get(SCHEMA_KEY) != encoded:
                new_meta = {
                    "id": (old or {}).get("id") or str(uuid.uuid4()),
                    "name": table or None, "description": None,
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(delta_schema(schema)),
                    "partitionColumns": [],
                    "configuration": {SCHEMA_KEY: encoded, "rlarrow.schemaVersion": schema_version},
                    "createdTime": (old or {}).get("createdTime") or now,
                }
        if version == 0:
            if rebuilt:
                state.history_from = store_version
            if new_meta is None:
                raise StoreError(f"{self.directory}: a table's first Delta commit needs its schema")
            actions.append({"protocol": dict(PROTOCOL)})
        if new_meta is not None:
            actions.append({"metaData": new_meta})
        for f in removes:
            actions.append({"remove": {"path": quote(f.name), "deletionTimestamp": now,
                                       "dataChange": data_change, "extendedFileMetadata": True,
                                       "partitionValues": {}, "size": f.bytes}})
        for f in adds:
            actions.append({"add": {"path": quote(f.name), "partitionValues": {}, "size": f.bytes,
                                    "modificationTime": now, "dataChange": data_change,
                                    "stats": json.dumps({"numRecords": f.rows}),
                                    "tags": {ORDER_TAG: f.order}}})
        data = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode("utf-8")
        self._write_new(version, data)
        planned = self._planned
        self._apply(CommitChecker(self._path(version)).commit(actions))
        state.version = version
        state.store_version = store_version
        if planned is not None and planned[2] is adds and planned[3] is removes \
                and len(planned[0]) == len(state.files):
            self._synced = (planned[0], planned[1])
        return version

    def _write_new(self, version: int, data: bytes) -> None:
        """Create ``version``'s file whole, or not at all, never over an existing one."""
        final = self._path(version)
        try:
            if not self._check_dir():
                self.log_dir.mkdir(exist_ok=True)
                fsync_dir(self.directory)
        except OSError as exc:
            raise write_error(self.log_dir, exc) from exc
        # (a hidden name the store's sweeper knows; Delta readers list only NNN.json names)
        tmp = self.log_dir / f"{temp_owner('delta')}{secrets.token_hex(4)}.json.partial"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, final)  # put-if-absent, as the protocol requires of a commit
            except FileExistsError:
                raise StoreError(f"{final}: Delta version {version} was written by someone else; only "
                                 "rlarrow may write an rlarrow store's Delta log (read it with any "
                                 "Delta engine, write it with rlarrow)") from None
        except OSError as exc:
            raise write_error(final, exc) from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        fsync_dir(self.log_dir)

    def sweep(self) -> None:
        """Delete temporary commit files of dead writers."""
        if not self._check_dir():
            return
        for p in self.log_dir.glob(TMP_PREFIX + "*"):
            if not tmp_owner_alive(p.name):
                with contextlib.suppress(OSError):
                    p.unlink()


class LogPlace(Protocol):
    """Where :func:`manifest_at` finds a store's Delta logs and files when it is not a local directory."""

    #: why a file an earlier version lists may be missing there (said in the error)
    gone: str

    def log(self, table: str) -> DeltaLog:
        """The Delta log of the table directory ``table``."""

    def exists(self, rel: str) -> bool:
        """Whether the file ``TABLE/NAME`` is there."""


def _replaced_since(root: Path | str, name: str, files: list[DeltaFile], version: int,
                    where: LogPlace | None) -> set[str]:
    """Which of a version's ``files`` were replaced since (kept aside for earlier versions).

    Raises:
        NotFoundError: a file is in neither place (deleted since, or never copied there).
    """
    from rlarrow.core.errors import NotFoundError

    if where is None:
        here = Path(root) / name
        moved = {f.name for f in files if not is_regular(here / f.name)  # (links: never followed)
                 and is_regular(retired_location(Path(root), f"{name}/{f.name}"))}
        gone = [f.name for f in files if f.name not in moved and not is_regular(here / f.name)]
        why = "deleted by `rlarrow vacuum` or a migration, or moved out by `rlarrow repair`"
    else:  # (a copy keeps replaced files in their table directories)
        moved, gone, why = set(), [f.name for f in files if not where.exists(f"{name}/{f.name}")], where.gone
    if gone:
        raise NotFoundError(f"{root}: version {version} lists {name}/{gone[0]}"
                            f"{f' and {len(gone) - 1} more files' if len(gone) > 1 else ''}, "
                            f"no longer in the store ({why}); read a later version")
    return moved


def manifest_at(root: Path | str, current: dict[str, Any], version: int, *,
                where: LogPlace | None = None) -> dict[str, Any]:
    """The manifest of store version ``version``, rebuilt from the tables' Delta logs.

    ``current`` is the store's manifest now (its tables and layouts name the logs to read).
    Every table lists the files its log listed at the last Delta commit of store version
    ``version`` or before, in the table's row order; a layout created later is absent.
    ``where``: the logs and files of a store elsewhere (a bucket); default: the local
    directory ``root``.

    Raises:
        NotFoundError: ``version`` is not one of the store's versions, or a file it
            lists was deleted since (``rlarrow vacuum``).
    """
    import copy

    from rlarrow.core.errors import NotFoundError
    from rlarrow.core.store.layouts import table_of

    latest = int(current.get("version", 0))
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= latest:
        raise NotFoundError(f"{root}: no version {version!r}; its versions are 0 to {latest} "
                            f"(`rlarrow history {root}` lists them)")
    manifest = copy.deepcopy(current)
    manifest["version"] = version
    manifest["pending"] = None
    manifest["retired"], manifest["retired_at"], manifest["delta_due"] = [], {}, []
    backlog = [d for d in current.get("delta_due") or () if isinstance(d, dict)]
    for name in list(manifest["tables"]):
        entry = manifest["tables"][name]
        # A version still waiting in the backlog (``delta_due`` with its files: its Delta commit
        # could not be written yet) is not in the log: the manifest keeps that version's files.
        # (An item without files names a commit that follows the manifest that lists it: the
        # current version, read from the manifest itself, or written already.)
        due = [d for d in backlog if d.get("table") == name and "files" in d
               and isinstance(d.get("version"), int) and d["version"] <= version]
        log = DeltaLog(Path(root) / name) if where is None else where.log(name)
        try:
            log.refresh(until_store_version=version)
        except CorruptFileError:
            if not due:
                raise
        listed: list[DeltaFile]
        if due and log.store_version < due[-1]["version"]:
            item = due[-1]
            listed = [DeltaFile(f["name"], int(f["rows"]), int(f["bytes"]), "") for f in item["files"]]
            config = {SCHEMA_KEY: item.get("schema"),
                      "rlarrow.schemaVersion": entry.get("schema_version", "1.0")}
        else:
            if log.version < 0 and log.history_from is not None and log.history_from > version:
                raise NotFoundError(f"{root}: table {name!r} has no history before version "
                                    f"{log.history_from} (its Delta log was started then, for files already "
                                    "there: set aside by `rlarrow repair`); read that version or a later one")
            if log.version < 0:
                if name != table_of(name):
                    del manifest["tables"][name]  # a layout made later
                else:
                    entry.update(schema=None, rows=0, files=[])
                continue
            config = (log.metadata or {}).get("configuration") or {}
            listed = log.ordered()
        files = listed
        moved = _replaced_since(root, name, files, version, where)
        entry["schema"] = config.get(SCHEMA_KEY) or entry.get("schema")
        entry["schema_version"] = config.get("rlarrow.schemaVersion", entry.get("schema_version", "1.0"))
        entry["files"] = [{"name": f.name, "rows": f.rows, "bytes": f.bytes, **({"retired": True} if
                                                                                  f.name in moved else {})}
                          for f in files]
        entry["rows"] = sum(f.rows for f in files)
    return manifest
