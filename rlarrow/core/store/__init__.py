"""The store: a directory of Parquet tables any engine can read without rlarrow.

Layout (``docs/format.md`` is the full description)::

    STORE/
      _rlarrow_store.json     manifest: format version, tables, files, row counts
      .rlarrow.lock           lock taken while the manifest changes
      runs/part-*.parquet
      episodes/part-*.parquet
      steps/part-*.parquet
      scalars/part-*.parquet
      memory/part-*.parquet
      memory.2/part-*.parquet   a further layout of a table: runs with other tensors

A table with tensor columns has one layout (a concrete schema, one directory) per set of
tensor types its runs hold; a run's rows of a table are in one layout (:meth:`Store.layouts`).

Commits are atomic: a file is written under a hidden temporary name, synced, renamed
to ``part-*.parquet`` and only then listed in the manifest, which is itself replaced
atomically. A process killed at any moment leaves every earlier commit readable; an
unfinished temporary file is removed by the next writer. Many small writes do not make
many small files: :class:`TableWriter` buffers rows into row groups, and
:meth:`Store.compact` (run automatically past a threshold) merges small files.

Example:
    >>> import numpy as np, rlarrow, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.rlarrow")
    >>> with rlarrow.Store.create(path) as store:
    ...     run = store.add_run(source="user", metadata={"seed": 1})
    ...     _ = store.append("scalars", {"run_id": run, "scope": "train", "tag": "loss",
    ...                                  "step": np.arange(3), "value": [1.0, 0.5, 0.25]})
    ...     store.row_count("scalars")
    3
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import os
import secrets
import socket
import stat
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlarrow._version import __version__
from rlarrow.core import schema as _schema
from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    RLArrowError,
    SchemaMismatchError,
    StoreError,
)
from rlarrow.core.progress import iterate as _iterate
from rlarrow.core.store import manifest as _manifest
from rlarrow.core.store.manifest import MANIFEST_NAME, check_inside, fsync_dir, write_error
from rlarrow.core.tensors import tensor_problems

try:  # POSIX advisory locks; without them (Windows) one writer at a time is assumed.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["MANIFEST_NAME", "CommitInfo", "FileProblem", "ReaderLease", "RepairReport", "Store", "StoreInfo",
           "StoreLike", "TableWriter", "as_store", "opened"]

LOCK_NAME = ".rlarrow.lock"
#: Readers' hard links to the files of their views (see :class:`ReaderLease`).
_VIEWS_DIR = ".rlarrow-views"
_TMP_PREFIX = ".tmp-"
_TMP_SUFFIX = ".parquet.partial"
_HOST = socket.gethostname().replace("-", "_")[:32] or "host"

#: Default sizes: row groups of ~64 MiB in memory, files up to ~1 GiB.
ROW_GROUP_BYTES = 64 << 20
FILE_BYTES = 1 << 30
#: Auto-compaction starts when a table has more small files than this.
AUTO_COMPACT_FILES = 64
_COMPRESSION = "zstd"
_BINARY_ZSTD_LEVEL = 3
_READ_ATTEMPTS = 5
#: Where :meth:`Store.repair` moves damaged files: outside every table directory.
_QUARANTINE = "_damaged"


@dataclass(frozen=True)
class _TxFile:
    table: str
    tmp: Path
    final: str
    rows: int
    bytes: int


class _Transaction:
    """What an open :meth:`Store.transaction` has written: hidden files, not yet listed."""

    def __init__(self) -> None:
        self.files: list[_TxFile] = []
        self.schemas: dict[str, pa.Schema] = {}
        #: tables whose schema the transaction fixed (un-fixed again if it fails)
        self.fixed: list[str] = []
        self.writers: list[TableWriter] = []

    def discard(self) -> None:
        for f in self.files:
            with contextlib.suppress(OSError):
                f.tmp.unlink()
        self.files = []


def _pending_parts(pending: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The per-table parts of a journaled step: ``pending`` itself and ``pending.also``."""
    if not pending:
        return []
    return [pending, *pending.get("also", [])]


def _logical(name: str) -> str:
    """The table a layout directory belongs to: ``steps.2`` -> ``steps`` (``steps`` -> ``steps``)."""
    return name.partition(".")[0]


def _layout_number(name: str) -> int:
    """The layout a table directory holds: ``steps`` -> 1, ``steps.2`` -> 2."""
    return int(name.partition(".")[2] or 1)


def _layout_dir(table: str, layout: int) -> str:
    """The directory of layout ``layout`` of ``table``: ``steps`` (1), ``steps.2``, ..."""
    return table if layout == 1 else f"{table}.{layout}"


def _one(name: str) -> int | None:
    """The ``layout=`` that selects exactly the layout directory ``name`` (given as the table)."""
    return 1 if name == _logical(name) else None


def union_layouts(schemas: Sequence[tuple[str, pa.Schema | None]]) -> tuple[pa.Schema | None,
                                                                          dict[str, list[str]]]:
    """The schema of layouts read together, and the columns left out (with each layout's type).

    ``schemas``: (layout directory, its schema or None) in layout order. Union by name, in
    order of first appearance: a column some layouts lack is nullable (their rows read
    null); a column whose type differs between layouts is left out.
    """
    known = [(n, s) for n, s in schemas if s is not None]
    if not known:
        return None, {}
    if len(known) == 1:
        return known[0][1], {}
    fields: dict[str, pa.Field] = {}
    types: dict[str, list[str]] = {}
    clash: set[str] = set()
    for n, s in known:
        for f in s:
            types.setdefault(f.name, []).append(
                f"layout {_layout_number(n)} ({n}/) has {_schema.describe_type(f.type)}")
            if f.name not in fields:
                fields[f.name] = f
            elif fields[f.name].type != f.type:
                clash.add(f.name)
    out = []
    for name, f in fields.items():
        if name in clash:
            continue
        if any(name not in s.names for _, s in known):
            f = f.with_nullable(True)
        out.append(f)
    return pa.schema(out), {name: types[name] for name in fields if name in clash}


def _has_layouts(table: str) -> bool:
    """Whether ``table`` has tensor columns, whose types may differ from run to run (layouts)."""
    spec = _schema.table(_logical(table))
    return spec.tensor_columns_allowed or any(c.is_tensor for c in spec.columns)


def _file_run_ids(path: Path) -> frozenset[str]:
    """The run ids in one data file (row groups of one run: from their statistics alone)."""
    pf = pq.ParquetFile(path)
    md = pf.metadata
    leaf = next((i for i in range(md.num_columns) if md.schema.column(i).path == "run_id"), None)
    if leaf is None:
        return frozenset()
    ids: set[str] = set()
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(leaf).statistics
        if stats is not None and stats.has_min_max and stats.min == stats.max and stats.null_count == 0:
            ids.add(stats.min if isinstance(stats.min, str) else bytes(stats.min).decode())
        else:
            column = pf.read_row_group(g, columns=["run_id"]).column(0)
            ids.update(v for v in pc.unique(column).to_pylist() if v is not None)
    return frozenset(ids)


@dataclass(frozen=True)
class LayoutInfo:
    """One layout of a table: a concrete schema, in its own directory.

    Attributes:
        table: the table (``steps``).
        layout: its number: 1 is the directory ``TABLE/``, N > 1 is ``TABLE.N/``.
        directory: the directory, relative to the store (``steps.2``).
        schema: its concrete Arrow schema (None: the table holds nothing yet).
        rows: committed rows.
        files: committed files.
        run_ids: the runs with rows in it (a run's rows of a table are in one layout).
    """

    table: str
    layout: int
    directory: str
    schema: pa.Schema | None
    rows: int
    files: int
    run_ids: list[str]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _new_file_name() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"part-{stamp}-{secrets.token_hex(4)}.parquet"


def _tmp_owner(tag: str = "") -> str:
    """The start of this process's temporary file names (``tag`` marks a group of them)."""
    return f"{_TMP_PREFIX}{_HOST}-{os.getpid()}-{tag}"


def _tmp_name(final_name: str, owner: str | None = None) -> str:
    """The hidden name ``final_name`` is written under, owned by this process (or by ``owner``)."""
    return f"{_tmp_owner() if owner is None else owner}{final_name[:-len('.parquet')]}{_TMP_SUFFIX}"


def _tmp_owner_alive(name: str) -> bool:
    """Whether the process that owns a temporary file may still be writing it."""
    try:
        host, pid_text = name[len(_TMP_PREFIX):].split("-", 2)[:2]
        pid = int(pid_text)
    except ValueError:
        return False
    if host != _HOST:
        return True  # another machine's writer: never touch it
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unwritable(path: Path) -> str | None:
    """Why the store at ``path`` cannot be written (read-only media, permissions), or None."""
    # (a commit replaces the manifest by a rename and locks a read-only descriptor: the
    # directory is what must be writable, not the files, as in a group-shared store)
    for p in (path,):
        if p.exists() and not os.access(p, os.W_OK | os.X_OK):
            try:
                readonly_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
            except (OSError, AttributeError):  # pragma: no cover - no statvfs
                readonly_fs = False
            if readonly_fs:
                return "the store is on read-only media (open it with readonly=True to read it)"
            return f"no permission to write {p} (open it with readonly=True to read it)"
    return None


class ReaderLease:
    """Hard links that keep a reader's files readable while writers compact the store.

    A compaction deletes the files it merged as soon as its output is listed, so a plain
    glob over a table never counts a row twice. A reader whose view (a DuckDB
    connection, a StreamingDataset) names such a file would fail; :meth:`pin` gives it a
    path to the same file under ``STORE/.rlarrow-views/<reader>/`` instead, which stays
    valid until :meth:`release` (or garbage collection) removes the links. The links are
    outside every table directory and cost no copy (one directory entry per file). A
    lease holds a shared ``flock`` on a file in its directory for its life, and a writer
    removes only directories whose lock it can take (readers that died), whatever host
    or PID namespace they ran in. Where links cannot be made (read-only media, where no
    writer runs either; filesystems without hard links) :meth:`pin` returns the path as
    it is.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> with store.lease() as lease:
        ...     paths = [lease.pin(f) for f in store.files("steps")]  # readable until the block ends
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / _VIEWS_DIR / f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        self._usable: bool | None = None
        self._state: dict[str, Any] = {"fd": None, "pid": os.getpid(), "directory": None}
        self._finalizer: Any = weakref.finalize(self, _release_view, self._state)

    def _open(self) -> bool:
        """Make this lease's directory and take its lock; False where that cannot be done."""
        views = self.root / _VIEWS_DIR
        for _ in range(5):  # another lease may be removing an empty views directory meanwhile
            try:
                if views.is_symlink() or (views.exists() and not views.is_dir()):
                    return False  # never make links through a link out of the store
                views.mkdir(exist_ok=True)
                self.directory.mkdir()
                self._state["directory"] = self.directory  # (what release removes)
                break
            except FileExistsError:
                break
            except FileNotFoundError:
                continue
            except OSError:
                return False
        else:  # pragma: no cover
            return False
        if fcntl is not None:
            # The lock file gets its name only once it is locked: a writer sweeping dead readers
            # that saw it unlocked in between would take the lock and remove this directory,
            # leaving pins that fall back to plain paths (found by the concurrency test).
            held = self.directory / _HELD_NAME
            fresh = held.with_name(f"{_HELD_NAME}.{secrets.token_hex(4)}")
            try:
                fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                os.replace(fresh, held)
            except OSError:
                os.close(fd)
                return False
            self._state["fd"] = fd
        return True

    def pin(self, path: Path) -> Path:
        """A path to ``path``'s file that stays readable while this lease is held.

        Raises:
            FileNotFoundError: the file is gone (a new view may no longer list it).
        """
        if self._usable is None:
            self._usable = self._open()
        if not self._usable:
            return path
        for attempt in range(2):
            target = self.directory / path.parent.name / path.name
            try:
                target.parent.mkdir(exist_ok=True)
                os.link(path, target, follow_symlinks=False)
            except FileExistsError:
                pass
            except FileNotFoundError:
                if not os.path.lexists(path):
                    raise
                # our directory went away (removed by hand, say): pin into a new one, once
                if attempt == 0 and self._reopen():
                    continue
                self._usable = False  # plain paths from now on
                return path
            except OSError:  # no hard links here (EXDEV, EPERM, EMLINK, ...): the plain path
                self._usable = False
                return path
            return target
        return path  # pragma: no cover (the loop returns)

    def _reopen(self) -> bool:
        """A new directory and lock for this lease, after its directory disappeared."""
        fd = self._state.get("fd")
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._state["fd"] = None
        self.directory = self.root / _VIEWS_DIR / f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        self._usable = self._open()
        return self._usable

    def release(self) -> None:
        """Remove the links (idempotent): what they pinned may now be deleted by writers."""
        if self._finalizer is not None:
            self._finalizer()

    def pin_view(self, store: Store, tables: Sequence[str]) -> dict[str, list[Path]]:
        """The committed files of ``tables``, from one manifest of ``store``, pinned.

        A listed file that is missing (damage, which `rlarrow info` names) keeps its plain
        path: a query that reads it fails naming it; other tables read as usual.

        Raises:
            StoreError: the store changed under 20 attempts in a row.
        """
        for _ in range(20):
            store.refresh()
            view = {t: store.files(t, refresh=False) for t in tables}
            pinned: dict[str, list[Path]] = {t: [] for t in tables}
            for t, files in view.items():
                for f in files:
                    try:
                        pinned[t].append(self.pin(f))
                    except FileNotFoundError:
                        pinned[t].append(f)
            store.refresh()
            if all(store.files(t, refresh=False) == view[t] for t in tables):
                return pinned  # the view held while it was pinned: what is missing is damage
        raise StoreError(f"{store.path}: the store changed under every attempt to take a consistent view "
                         "of it (20 compactions in a row?); try again")

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process (a DataLoader worker) reads the links; only the lease
        # that made them removes them.
        return {"root": self.root, "directory": self.directory, "_usable": self._usable}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state = {"fd": None, "pid": -1}
        self._finalizer = None

    def __enter__(self) -> ReaderLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD_NAME = ".held"
_PROCESS_LEASES: dict[str, ReaderLease] = {}  # see Store.process_lease


def _release_view(state: dict[str, Any]) -> None:
    """Remove a lease's links and drop its lock (only in the process that made them)."""
    if state.get("pid") != os.getpid() or state.get("directory") is None:
        return  # a forked child exiting must not take its parent's links with it
    import shutil

    shutil.rmtree(state["directory"], ignore_errors=True)
    fd = state.pop("fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _sweep_views(root: Path) -> None:
    """Remove the link directories of readers that are gone (their lock can be taken)."""
    views = root / _VIEWS_DIR
    try:
        if not stat.S_ISDIR(os.lstat(views).st_mode):
            return  # missing, or a link: never followed
        entries = list(os.scandir(views))
    except OSError:
        return
    import shutil

    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            fd = os.open(os.path.join(entry.path, _HELD_NAME), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:  # a lease making its directory now, or one that died doing so
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime > 60:
                    shutil.rmtree(entry.path, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live reader holds it
                shutil.rmtree(entry.path, ignore_errors=True)  # (rmtree never follows links)
        finally:
            os.close(fd)


def _undo(renamed: list[Path], temporary: list[Path], cause: BaseException) -> None:
    """Take a failed commit's files back out; if a renamed one cannot be, say so.

    Raises:
        StoreError: a renamed file could not be removed (the disk went read-only, say):
            recovery would adopt it, so the commit's outcome is undetermined.
    """
    stuck = []
    for path in renamed:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            stuck.append(path)
    for path in temporary:
        with contextlib.suppress(OSError):
            path.unlink()
    if stuck:
        raise StoreError(f"{stuck[0].parent}: a commit failed ({cause}) and its files could not be taken "
                         f"back out ({', '.join(p.name for p in stuck)}): the next writer that opens the "
                         "store will adopt them, so the commit's outcome is undetermined; check with "
                         "`rlarrow info` once the store is writable again") from cause


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


@functools.lru_cache(maxsize=64)
def _decode_schema(text: str) -> pa.Schema:
    """Raises ValueError (binascii.Error) or pyarrow.ArrowInvalid when ``text`` is damaged.

    Cached: every commit asks for its table's schema, and a schema is immutable.
    """
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


def parse_manifest(data: bytes, path: Any) -> dict[str, Any]:
    """A store manifest's bytes, checked (``path`` names it in errors).

    Every key, type and file name is checked (:func:`rlarrow.core.store.manifest.validate`): a file
    name that could lead outside its table directory is refused here, before anything
    reads, renames or deletes it.

    Raises:
        CorruptFileError: not a store manifest, or a damaged one.
    """
    manifest = _manifest.parse(data, path)
    for name in _schema.TABLE_NAMES:  # a table added by a later minor format: empty here
        manifest["tables"].setdefault(name, {
            "schema_version": _schema.format_version(_schema.table(name).version),
            "schema": None, "rows": 0, "files": []})
    for name, entry in manifest["tables"].items():
        if entry.get("schema") is not None:
            try:
                _decode_schema(entry["schema"])  # damaged here, say so now, not on first use
            except (ValueError, TypeError, OSError, pa.ArrowException) as exc:
                raise CorruptFileError(path, f"damaged store manifest: tables.{name}.schema cannot be "
                                       f"decoded ({exc}); restore the manifest from a backup") from exc
    return manifest


def check_manifest_versions(manifest: dict[str, Any], where: str) -> None:
    """Check the format and table schema versions a manifest records."""
    fmt = _schema.parse_version(manifest.get("format_version", "0.0"))
    _schema.check_version(where, f"store format {_schema.format_version(fmt)}", fmt,
                          _schema.FORMAT_VERSION, store=where)
    for name, entry in manifest["tables"].items():
        try:
            current = _schema.table(_logical(name)).version  # (a layout: its table's version)
        except KeyError:
            continue  # a table of a newer minor format: the format check warned
        got = _schema.parse_version(entry.get("schema_version", "0.0"))
        _schema.check_version(where, f"table {name!r} schema {_schema.format_version(got)}", got,
                              current, store=where)


@dataclass(frozen=True)
class CommitInfo:
    """What one commit added: the table, the file (relative to the store) and its rows.

    A large append written in parallel commits several files at once: ``files`` lists
    them all (``file`` is the first). ``table`` is the table (``steps``); ``file`` names
    the layout directory the rows went to (``steps.2/part-....parquet``).
    """

    table: str
    file: str
    rows: int
    bytes: int
    files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", _logical(self.table))  # a layout's rows are the table's


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

        if self.schema is None or _logical(self.name) not in _schema.TABLE_NAMES:
            return {}
        declared = {c.name for c in _schema.table(_logical(self.name)).columns if not c.is_tensor}
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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the summary."""
        return {
            "path": self.path,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "format_version": self.format_version,
            "writer": self.writer,
            "created_at": self.created_at,
            "bytes_on_disk": self.bytes_on_disk,
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


def _empty_manifest() -> dict[str, Any]:
    return {
        "format": "rlarrow-store",
        "format_version": _schema.format_version(_schema.FORMAT_VERSION),
        "writer": f"rlarrow {__version__}",
        "created_at": _now_iso(),
        "updated_at": _now_iso(),
        "tables": {
            name: {
                "schema_version": _schema.format_version(_schema.table(name).version),
                "schema": None,
                "rows": 0,
                "files": [],
            }
            for name in _schema.TABLE_NAMES
        },
        "retired": [],
        "pending": None,
    }


class Store:
    """A directory of Parquet tables (runs, episodes, steps, scalars, memory).

    Create one with :meth:`Store.create`, open one with :meth:`Store.open`. A store is a
    context manager; leaving it closes open writers (committing what they buffered).

    Args:
        path: the store directory.
        readonly: True: never write (no recovery, no lock file), for shared or read-only
            media. False: open for writing (a StoreError when the store cannot be
            written). None (the default): for writing when the store can be written,
            read-only otherwise (read-only media, no permission), where a write then
            raises a StoreError saying why.
        auto_compact: compact a table after a commit once it has more than this many
            small files (None: only when :meth:`compact` is called).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        auto_compact: int | None = AUTO_COMPACT_FILES,
        _check_versions: bool = True,
        _recover: bool = True,
    ) -> None:
        self.path = Path(path)
        self.readonly = bool(readonly)
        #: why the store is read-only when it was opened for writing but cannot be written
        self._readonly_reason = "it was opened read-only (readonly=True)"
        self.auto_compact = auto_compact
        self._writers: list[TableWriter] = []
        #: the open :meth:`transaction`, whose files are written but not yet committed
        self._tx: _Transaction | None = None
        self._lock_depth = 0
        self._lock_fd: int | None = None
        manifest_path = self.path / MANIFEST_NAME
        if not manifest_path.is_file():
            if not self.path.exists():
                raise StoreError(f"{self.path}: no such store; create it with "
                                 f"rlarrow.Store.create({os.fspath(path)!r})")
            raise StoreError(f"{self.path}: not an rlarrow store (no {MANIFEST_NAME}); create "
                             "one with rlarrow.Store.create(path)")
        self._manifest = self._read_manifest()
        self._check_table_dirs(self._manifest)
        if _check_versions:
            self._check_versions(self._manifest)
        if readonly is None:
            reason = _unwritable(self.path)
            if reason is not None:
                self.readonly, self._readonly_reason = True, reason
        if self.readonly:
            self._manifest = self._snapshot()
        else:
            with self._locked():
                manifest = self._read_manifest()
                self._manifest = self._recover(manifest) if _recover else manifest

    # ---------------------------------------------------------------- creation / opening

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        exist_ok: bool = False,
        auto_compact: int | None = AUTO_COMPACT_FILES,
    ) -> Store:
        """Create a new, empty store at ``path`` (its parent directories too).

        Args:
            path: the directory to create; it must not exist or be empty.
            exist_ok: open the store instead of failing when one is already there.
            auto_compact: see :class:`Store`.

        Raises:
            StoreError: ``path`` holds a store (and not ``exist_ok``) or other files.
        """
        p = Path(path)
        if (p / MANIFEST_NAME).exists():
            if exist_ok:
                return cls(p, auto_compact=auto_compact)
            raise StoreError(f"{p}: a store already exists here; open it with "
                             "rlarrow.Store.open(path) or pass exist_ok=True")
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise StoreError(f"{p}: exists and is not an empty directory; choose a new path")
        try:
            p.mkdir(parents=True, exist_ok=True)
            for name in _schema.TABLE_NAMES:
                (p / name).mkdir(exist_ok=True)
            (p / LOCK_NAME).touch()
        except OSError as exc:
            raise write_error(p, exc) from exc
        cls._write_manifest_at(p, _empty_manifest())
        return cls(p, readonly=False, auto_compact=auto_compact)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        create: bool = False,
        auto_compact: int | None = AUTO_COMPACT_FILES,
    ) -> Store:
        """Open an existing store (or create it with ``create=True``).

        By default a store that cannot be written (read-only media, no permission) opens
        read-only, so ``Store.open(path).read(...)`` works there; see :class:`Store`.

        Raises:
            StoreError: no store at ``path``.
            FormatVersionError: written by an older major format (run ``rlarrow migrate``)
                or a newer one (upgrade rlarrow).
        """
        if create and not (Path(path) / MANIFEST_NAME).exists():
            return cls.create(path, auto_compact=auto_compact)
        return cls(path, readonly=readonly, auto_compact=auto_compact)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close open writers, committing what they buffered."""
        writers, self._writers = self._writers, []
        errors = []
        for writer in writers:
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - close every writer, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        m = self._manifest
        counts = ", ".join(f"{n}={t['rows']}" for n, t in m["tables"].items() if t["rows"])
        return f"Store({os.fspath(self.path)!r}, format {m['format_version']}, {counts or 'empty'})"

    # ---------------------------------------------------------------- manifest

    def _read_manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST_NAME
        return parse_manifest(self._manifest_bytes(), path)

    def _check_table_dirs(self, manifest: dict[str, Any]) -> None:
        """Refuse a table directory that is a link (it could lead outside the store)."""
        for table in manifest["tables"]:
            directory = self.path / table
            if directory.is_symlink():
                raise CorruptFileError(directory, "is a symbolic link; a store's table directories must "
                                       "be inside it (rlarrow never follows a link out of a store)")

    @staticmethod
    def _write_manifest_at(root: Path, manifest: dict[str, Any]) -> None:
        """Replace the manifest, whole and synced (see :func:`rlarrow.core.store.manifest.write_file`).

        Raises:
            StoreError: the write failed (full disk, ...): the previous manifest is in place.
        """
        manifest["updated_at"] = _now_iso()
        fmt = _schema.parse_version(manifest.get("format_version", "1.0"))
        if fmt[0] == _schema.FORMAT_VERSION[0] and fmt < _schema.FORMAT_VERSION:
            # a minor format only adds (a table, a journal field): the store is now of it
            manifest["format_version"] = _schema.format_version(_schema.FORMAT_VERSION)
        data = json.dumps(manifest, indent=1, sort_keys=False).encode("utf-8")
        _manifest.write_file(root, MANIFEST_NAME, data)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        self._write_manifest_at(self.path, manifest)
        self._manifest = manifest

    def _forget_failed_commit(self) -> None:
        """After a failed commit: the in-memory manifest as the disk has it again."""
        with contextlib.suppress(RLArrowError):
            self._manifest = self._snapshot()

    def _check_versions(self, manifest: dict[str, Any]) -> None:
        check_manifest_versions(manifest, os.fspath(self.path))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.readonly:
            raise StoreError(f"{self.path}: cannot write: {self._readonly_reason}")
        if self._lock_depth == 0 and fcntl is not None:
            try:
                fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            except PermissionError:
                try:  # another user's lock file: flock needs only a read-only descriptor
                    fd = os.open(self.path / LOCK_NAME, os.O_RDONLY)
                except OSError as exc:
                    raise write_error(self.path / LOCK_NAME, exc) from exc
            except OSError as exc:
                raise write_error(self.path / LOCK_NAME, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fd is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
                self._lock_fd = None

    def refresh(self) -> None:
        """Re-read the manifest to see commits made by other writers."""
        self._manifest = self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        """One consistent view of the committed files, without the lock (for readers).

        The table directories are scanned for files a killed writer renamed into place
        but did not list (recovery's view). The scan and the manifest must be of the same
        moment: a compaction that finished between them would show its output beside the
        files it replaced, counted twice. So the manifest is read again after the scan,
        and the view is taken only when it did not change (or after a few attempts, as
        the last manifest says without the scan).
        """
        raw = self._manifest_bytes()
        for _ in range(_READ_ATTEMPTS * 4):
            with self._no_commit_running() as quiet:
                # While a writer holds the lock, an unlisted file may be a commit in flight
                # (renamed, not yet listed, perhaps about to fail): only committed data is shown.
                manifest = self._effective(parse_manifest(raw, self.path / MANIFEST_NAME), orphans=quiet)
            again = self._manifest_bytes()
            # Unchanged: the scan and the manifest are of one moment (a compaction writes its
            # manifest before it deletes, so a file it deleted shows as a changed manifest;
            # a listed file missing under an unchanged one is damage, which info names).
            if again == raw:
                return manifest
            raw = again
            time.sleep(0.001)
        return self._effective(parse_manifest(raw, self.path / MANIFEST_NAME), orphans=False)

    @contextlib.contextmanager
    def _no_commit_running(self) -> Iterator[bool]:
        """Hold off writers for a moment; yields False when one holds the lock (a commit runs)."""
        fd = None
        if fcntl is not None:
            with contextlib.suppress(OSError):  # no lock file (a copy of a store): no writer here
                fd = os.open(self.path / LOCK_NAME, os.O_RDONLY)
        if fd is None:
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _manifest_bytes(self) -> bytes:
        path = self.path / MANIFEST_NAME
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{self.path}: the store's manifest {MANIFEST_NAME} disappeared") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the store's manifest ({exc.strerror or exc}); check "
                             "the permissions of the store directory") from exc

    # ---------------------------------------------------------------- recovery

    def _scan_orphans(self, manifest: dict[str, Any]) -> dict[str, list[str]]:
        """Committed-looking files the manifest does not list, per table."""
        retired = set(manifest.get("retired", []))
        pending_new = {f"{part['table']}/{n}" for part in _pending_parts(manifest.get("pending"))
                       for n in part["new"]}
        found: dict[str, list[str]] = {}
        for name, entry in manifest["tables"].items():
            listed = {f["name"] for f in entry["files"]}
            directory = self.path / name
            if not directory.is_dir():
                continue
            for p in sorted(directory.glob("part-*.parquet")):
                if p.is_symlink() or not p.is_file() or not _manifest.is_plain_file_name(p.name):
                    continue  # never adopted (a link could lead outside the store; a name the
                    # manifest may not hold would make it unreadable)
                rel = f"{name}/{p.name}"
                if p.name not in listed and rel not in retired and rel not in pending_new:
                    found.setdefault(name, []).append(p.name)
        return found

    def _adopt(self, manifest: dict[str, Any], table: str, name: str) -> None:
        path = self.path / table / name
        try:
            info = _schema.read_file_info(path)
        except InvalidInputError as exc:
            raise type(exc)(path, f"{exc}; the file is not listed in the store's manifest: move it "
                            f"out of {table}/ (or run `rlarrow repair {self.path} --apply`) to open "
                            "the store") from exc
        if info.table != _logical(table):  # (a layout directory TABLE.N holds TABLE's files)
            raise CorruptFileError(path, f"holds table {info.table!r} but lies in {table}/; "
                                   f"move it out of the store (or run `rlarrow repair {self.path} --apply`)")
        _schema.check_file_version(info, store=self.path)
        entry = manifest["tables"][table]
        self._check_file_schema(table, entry, info.schema, path)
        entry["files"].append({"name": name, "rows": info.num_rows, "bytes": path.stat().st_size})
        entry["rows"] += info.num_rows

    def _check_file_schema(self, table: str, entry: dict[str, Any], schema: pa.Schema,
                           path: Path) -> None:
        plain = schema.remove_metadata()
        if entry.get("schema") is None:
            entry["schema"] = _encode_schema(plain)
            return
        established = _decode_schema(entry["schema"])
        if not plain.equals(established):
            where = "the table's schema" if table == _logical(table) else f"the schema of layout {table}/"
            raise SchemaMismatchError(
                _logical(table),
                [f"file {path} does not have {where}"],
                expected=established,
                got=plain,
            )

    def _finish_pending(self, manifest: dict[str, Any]) -> None:
        pending = manifest.get("pending")
        if not pending:
            return
        if self._pending_complete(pending):
            self._apply_replacement(manifest, pending)  # roll forward
        else:  # roll back: the old files are still listed
            for part in _pending_parts(pending):
                for n in part["new"]:
                    with contextlib.suppress(FileNotFoundError):
                        (self.path / part["table"] / n).unlink()
            manifest["pending"] = None

    def _pending_complete(self, pending: dict[str, Any]) -> bool:
        """Whether every new file of a journaled step is in place (then it rolls forward)."""
        return all((self.path / part["table"] / n).exists()
                   for part in _pending_parts(pending) for n in part["new"])

    @staticmethod
    def _apply_replacement(manifest: dict[str, Any], pending: dict[str, Any]) -> None:
        for part in _pending_parts(pending):
            Store._apply_part(manifest, part)
        manifest["pending"] = None

    @staticmethod
    def _apply_part(manifest: dict[str, Any], pending: dict[str, Any]) -> None:
        table = pending["table"]
        entry = manifest["tables"][table]
        old = set(pending["old"])
        new_entries = pending["new_entries"]
        files: list[dict[str, Any]] = []
        inserted = False
        for f in entry["files"]:
            if f["name"] in old:
                if not inserted:
                    files.extend(new_entries)
                    inserted = True
                continue
            files.append(f)
        if not inserted:
            files.extend(new_entries)
        entry["files"] = files
        entry["rows"] = sum(f["rows"] for f in files)
        manifest["retired"] = sorted(set(manifest.get("retired", [])) | {f"{table}/{n}" for n in old})

    def _delete_retired(self, manifest: dict[str, Any]) -> None:
        keep = []
        for rel in manifest.get("retired", []):
            try:
                (self.path / rel).unlink()
            except FileNotFoundError:
                pass
            except OSError:
                keep.append(rel)
        manifest["retired"] = keep

    def lease(self) -> ReaderLease:
        """A :class:`ReaderLease`: pinned files stay readable while it is held."""
        return ReaderLease(self.path)

    def process_lease(self) -> ReaderLease:
        """The lease this process holds on the store until it ends.

        For readers whose results outlive any object that could hold a lease (a Polars
        LazyFrame and the frames derived from it, a lazy Ray dataset): their files stay
        readable for the process's life, so a file a compaction replaced is freed only when
        the process ends (its links are removed then, or by the next writer after a kill).
        """
        key = os.path.realpath(self.path)
        lease = _PROCESS_LEASES.get(key)
        if lease is None:
            lease = _PROCESS_LEASES[key] = ReaderLease(self.path)
        return lease

    def _remove_stale_tmp(self) -> None:
        _sweep_views(self.path)  # dead readers' links
        layouts = [n for n in self._manifest["tables"] if n not in _schema.TABLE_NAMES]  # TABLE.N
        for directory in [self.path, *(self.path / n for n in [*_schema.TABLE_NAMES, *layouts])]:
            if not directory.is_dir():
                continue
            for p in directory.glob(_TMP_PREFIX + "*"):
                if not _tmp_owner_alive(p.name):
                    with contextlib.suppress(OSError):  # (a directory of that name: left alone)
                        p.unlink()
            for p in directory.glob(f".{MANIFEST_NAME}.*.tmp"):
                parts = p.name.split(".")
                with contextlib.suppress(ValueError, IndexError, FileNotFoundError, PermissionError):
                    pid = int(parts[-3])
                    if pid != os.getpid():
                        try:
                            os.kill(pid, 0)
                        except ProcessLookupError:
                            p.unlink()

    def _recover(self, manifest: dict[str, Any], *, sweep: bool = True) -> dict[str, Any]:
        """Under the lock: finish or undo interrupted operations and persist the result.

        ``sweep`` also deletes dead processes' temporary files: garbage, which nothing
        reads, so a commit leaves it to the next open, declare or compaction.
        """
        before = json.dumps(manifest, sort_keys=True)
        self._finish_pending(manifest)
        for table, names in self._scan_orphans(manifest).items():
            for name in names:
                self._adopt(manifest, table, name)
        self._delete_retired(manifest)
        if sweep:
            self._remove_stale_tmp()
        if json.dumps(manifest, sort_keys=True) != before:
            self._write_manifest(manifest)
        return manifest

    def _effective(self, manifest: dict[str, Any], *, orphans: bool = True) -> dict[str, Any]:
        """The manifest as recovery would leave it, without writing (for readers)."""
        manifest = json.loads(json.dumps(manifest))
        pending = manifest.get("pending")
        if pending and self._pending_complete(pending):
            self._apply_replacement(manifest, pending)
        manifest["pending"] = None
        for table, names in (self._scan_orphans(manifest) if orphans else {}).items():
            for name in names:
                with contextlib.suppress(RLArrowError, FileNotFoundError):
                    self._adopt(manifest, table, name)
        return manifest

    # ---------------------------------------------------------------- schema

    def schema(self, table: str, *, layout: int | None = None) -> pa.Schema | None:
        """The store's concrete Arrow schema of ``table`` (None until it is known).

        A table whose runs hold different tensors has several layouts (:meth:`layouts`):
        ``layout=N`` gives the schema of one; None, the schema :meth:`read` gives for all of
        them together (union by name; a column whose type differs between layouts is left
        out). With one layout both are that layout's schema.
        """
        _schema.table(_logical(table))
        names = self._selected(table, layout)
        if len(names) > 1:
            return self._combined_schema(names)[0]
        table = names[0]
        text = self._manifest["tables"].get(table, {}).get("schema")
        return None if text is None else _decode_schema(text)

    def declare(self, table: str, tensor_types: Mapping[str, pa.DataType], *,
                new_layout: bool = False) -> pa.Schema:
        """Fix the types of a table's tensor columns before any data is written.

        Useful when the first batch cannot show a type (e.g. all actions null), and to
        make sure every later writer agrees. Declaring the types one of the table's
        layouts already has is a no-op. Other types are refused unless ``new_layout``:
        then they are fixed as a new, empty layout of the table (``TABLE.N/``), which data
        of those types (of runs not yet in another layout) goes to. Writes start a new
        layout by themselves; declaring one chooses its types (say, the binary layout).

        Example:
            >>> import pyarrow as pa, rlarrow, tempfile, os
            >>> s = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> s.declare("steps", {"observation": rlarrow.core.tensors.tensor_type("uint8", (84, 84)),
            ...                     "action": pa.int64()}).field("action").type
            DataType(int64)

        Raises:
            SchemaMismatchError: the store already holds other types (and not
                ``new_layout``), or a type is not a tensor type.
        """
        spec = _schema.table(table)
        problems = []
        for name, type_ in tensor_types.items():
            try:
                is_tensor = spec.column(name).is_tensor
            except KeyError:
                is_tensor = spec.tensor_columns_allowed
            if not is_tensor:
                problems.append(f"{name!r} is not a tensor column of {table!r}")
            problems += tensor_problems(type_, name)
        if problems:
            raise SchemaMismatchError(table, problems)
        wanted = spec.arrow_schema(tensor_types).remove_metadata()
        with self._locked():
            manifest = self._recover(self._read_manifest())
            entry = manifest["tables"][table]
            if entry.get("schema") is not None:
                current = _decode_schema(entry["schema"])
                if not current.equals(wanted):
                    existing = self._matching_layout(manifest, table, wanted)
                    if existing is not None:
                        return wanted
                    if not new_layout:
                        raise SchemaMismatchError(table, [
                            "the store already fixed other types (pass new_layout=True to add a layout "
                            "of the table with these types)"], expected=current, got=wanted)
                    self._new_layout_entry(manifest, table, wanted)
                    self._write_manifest(manifest)
                    return wanted
                return current
            entry["schema"] = _encode_schema(wanted)
            self._write_manifest(manifest)
            if self._tx is not None:  # a transaction that fails un-fixes it
                self._tx.fixed.append(table)
        return wanted

    # ---------------------------------------------------------------- layouts

    def _layout_names(self, table: str) -> list[str]:
        """The directories of ``table``'s layouts in the current view, first layout first."""
        return sorted((n for n in self._manifest["tables"] if _logical(n) == table), key=_layout_number)

    def _selected(self, table: str, layout: int | None) -> list[str]:
        """The layout directories ``table`` (or a layout directory's name) and ``layout`` select.

        Raises:
            StoreError: no such layout.
        """
        if table != _logical(table):  # a layout directory named directly (internal use)
            if table not in self._manifest["tables"]:
                raise StoreError(f"{self.path}: no layout directory {table!r}")
            return [table]
        if layout is None:
            return self._layout_names(table) or [table]
        if isinstance(layout, bool) or not isinstance(layout, int):
            raise TypeError(f"layout={layout!r}: a layout is a number (1, 2, ...: Store.layouts(table)); "
                            "a tensor's binary/list storage is chosen when writing, not reading")
        name = _layout_dir(table, layout)
        if name not in self._manifest["tables"]:
            have = ", ".join(str(_layout_number(n)) for n in self._layout_names(table))
            raise StoreError(f"{self.path}: table {table!r} has no layout {layout} (it has {have}; "
                             f"Store.layouts({table!r}) lists them)")
        return [name]

    def _combined_schema(self, names: list[str]) -> tuple[pa.Schema | None, dict[str, list[str]]]:
        """The schema of layouts read together, and the columns left out (with each layout's type).

        Union by name, in order of first appearance: a column some layouts lack is nullable
        (their rows read null); a column whose type differs between layouts is left out.
        """
        return union_layouts([(n, self.schema(_logical(n), layout=_layout_number(n))) for n in names])

    def _leave_out(self, table: str, names: list[str], columns: Sequence[str] | None) -> None:
        """Warn once (per store and table) of columns left out of layouts read together.

        Raises:
            SchemaMismatchError: ``columns`` asks for such a column.
        """
        if len(names) < 2:
            return
        clash = self._combined_schema(names)[1]
        if not clash:
            return
        asked = [c for c in columns or [] if c in clash]
        if asked:
            raise SchemaMismatchError(table, [
                f"column(s) {asked} of {table!r} have different types in its layouts, which cannot be "
                "read together: read one layout (layout=N; Store.layouts lists them)"] + [
                f"{c}: {'; '.join(clash[c])}" for c in asked])
        key = (table, tuple(sorted(clash)))
        warned = self.__dict__.setdefault("_warned_layouts", set())
        if columns is None and key not in warned:
            import warnings

            from rlarrow.core.errors import RLArrowWarning

            warned.add(key)
            warnings.warn(f"{self.path}: reading the layouts of {table!r} together leaves out the "
                          f"column(s) whose types differ: " + "; ".join(
                              f"{c} ({', '.join(t)})" for c, t in clash.items())
                          + " (read one layout with layout=N to have them)", RLArrowWarning, stacklevel=3)

    def layouts(self, table: str) -> list[LayoutInfo]:
        """The layouts of ``table``: their numbers, directories, schemas, rows and runs.

        A table with tensor columns holds runs whose tensors differ (a PPO and a DQN
        memory, CartPole and pixel episodes): each set of tensor types is a layout, a
        concrete schema in its own directory (``TABLE/`` for the first, ``TABLE.2/``,
        ``TABLE.3/``... for the others). A run's rows of a table are all in one layout.

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "ppo", "log_prob": np.zeros((1, 1), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "dqn", "next_states": np.zeros((1, 4), "f4")})
            >>> [(l.layout, l.directory, l.run_ids) for l in store.layouts("memory")]
            [(1, 'memory', ['ppo']), (2, 'memory.2', ['dqn'])]
        """
        _schema.table(table)
        self.refresh()
        out = []
        for name in self._layout_names(table):
            n = _layout_number(name)
            entry = self._manifest["tables"][name]
            out.append(LayoutInfo(table=table, layout=n, directory=name,
                                  schema=self.schema(table, layout=n), rows=self.row_count(table, layout=n),
                                  files=len(self.files(table, layout=n, refresh=False)),
                                  run_ids=sorted(self._runs_in(name)) if entry["files"] or self._tx else []))
        return out

    def layout_of(self, table: str, run_id: str) -> int | None:
        """The layout holding ``run_id``'s rows of ``table`` (None: the run has none there)."""
        _schema.table(table)
        self.refresh()
        names = self._layout_names(table)
        if len(names) == 1:
            return 1 if run_id in self._runs_in(names[0]) else None
        for name in names:
            if run_id in self._runs_in(name):
                return _layout_number(name)
        return None

    def _runs_in(self, name: str) -> frozenset[str]:
        """The run ids of one layout directory's files (each file read once per store object)."""
        cache: dict[str, frozenset[str]] = self.__dict__.setdefault("_run_ids", {})
        ids: set[str] = set()
        for path in self.files(_logical(name), layout=_layout_number(name), refresh=False):
            key = os.fspath(path)
            got = cache.get(key)
            if got is None:
                try:
                    got = cache[key] = _file_run_ids(path)
                except (OSError, pa.ArrowException) as exc:
                    raise self._find_damage(_logical(name), exc) from exc
            ids |= got
        return frozenset(ids)

    def _matching_layout(self, manifest: dict[str, Any], table: str, schema: pa.Schema) -> str | None:
        """The layout directory of ``table`` in ``manifest`` whose schema is ``schema``."""
        plain = schema.remove_metadata()
        names: list[str] = sorted((n for n in manifest["tables"] if _logical(n) == table), key=_layout_number)
        for name in names:
            text = manifest["tables"][name].get("schema")
            if text is not None and _decode_schema(text).equals(plain):
                return name
        return None

    def _new_layout_entry(self, manifest: dict[str, Any], table: str, schema: pa.Schema) -> str:
        """Add a new, empty layout of ``table`` with ``schema`` to ``manifest`` (under the lock).

        Its directory is made here: the first ``TABLE.N`` (N from 2) that the manifest does
        not list and that holds no data file (a directory left by hand is not taken over).
        """
        n = 2
        while True:
            name = _layout_dir(table, n)
            directory = self.path / name
            if name not in manifest["tables"] and not (
                    directory.is_symlink() or (directory.exists() and not directory.is_dir())
                    or (directory.is_dir() and any(directory.glob("*.parquet")))):
                break
            n += 1
        try:
            directory.mkdir(exist_ok=True)
            fsync_dir(self.path)
        except OSError as exc:
            raise write_error(directory, exc) from exc
        manifest["tables"][name] = {
            "schema_version": manifest["tables"][table]["schema_version"],
            "schema": _encode_schema(schema.remove_metadata()), "rows": 0, "files": []}
        return name

    def _add_layout(self, table: str, schema: pa.Schema) -> str:
        """The layout directory for data of ``schema``: an existing one, or a new one fixed now."""
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            name = self._matching_layout(manifest, table, schema)
            if name is None:
                if manifest["tables"][table].get("schema") is None and (
                        self._tx is None or table not in self._tx.schemas):
                    name = table  # the first layout: fixed by the first commit, as always
                else:
                    name = self._new_layout_entry(manifest, table, schema)
                    self._write_manifest(manifest)
            self._manifest = manifest
        return name

    def _place(self, table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> tuple[pa.Table, str]:
        """``data`` validated in the exact form of the layout it goes to, and that layout's directory.

        The layout holding the data's runs, if one does; else the first layout whose types
        the data has (tensors converted between the binary and list storage, missing
        tensor columns as nulls); else a new layout.

        Raises:
            SchemaMismatchError: the data does not fit the table, or a run it holds has rows
                in a layout whose types the data does not have (one line per column).
        """
        names = [n for n in self._layout_names(table)
                 if self.schema(table, layout=_layout_number(n)) is not None]
        if not names:
            return _validated(table, data, None), table  # the first commit fixes the first layout
        if not _has_layouts(table):
            return _validated(table, data, self.schema(table)), table
        runs = _data_run_ids(data)
        homes: dict[str, str] = {}
        if len(names) == 1:  # (the usual case: no run is looked up unless the data does not fit)
            candidates = names
        else:
            homes = {run: name for name in names for run in runs & self._runs_in(name)}
            if len(set(homes.values())) > 1:
                raise SchemaMismatchError(table, [
                    f"the data holds runs whose rows of {table!r} are in different layouts ("
                    + ", ".join(f"{r!r} in {n}/" for r, n in sorted(homes.items())) + "): write each run "
                    "apart"])
            candidates = sorted(set(homes.values())) if homes else names
        error: SchemaMismatchError | None = None
        for name in candidates:
            layout_schema = self.schema(table, layout=_layout_number(name))
            try:
                got = _validated(table, data, layout_schema)
            except SchemaMismatchError as exc:
                error = error or exc
                continue
            if layout_schema is not None and got.schema.remove_metadata().equals(layout_schema):
                return got, name
        if len(names) == 1:
            homes = {run: names[0] for run in runs & self._runs_in(names[0])}
        if homes:  # the data's run is in a layout whose types the data does not have
            home = next(iter(homes.values()))
            home_schema = self.schema(table, layout=_layout_number(home))
            problems = [f"run(s) {sorted(homes)} already have rows of {table!r} in layout "
                        f"{_layout_number(home)} ({home}/), whose types this data does not have: a run "
                        "keeps one layout per table (convert the data, or write it under a new run id, "
                        "which starts another layout)"]
            got_schema: object = None
            try:
                natural = _validated(table, data, None)
                got_schema = natural.schema.remove_metadata()
                _schema.conform(table, natural, home_schema)  # says what differs
            except SchemaMismatchError as exc:
                problems += exc.problems
                got_schema = exc.got if got_schema is None else got_schema
            raise SchemaMismatchError(table, problems, expected=home_schema, got=got_schema)
        natural = _validated(table, data, None)
        return natural, self._add_layout(table, natural.schema)

    def _check_runs(self, table: str, name: str, runs: set[str]) -> None:
        """Refuse rows for layout ``name`` of runs whose rows of ``table`` are in another layout."""
        others = [n for n in self._layout_names(table) if n != name]
        for other in others:
            clash = sorted(runs & self._runs_in(other))
            if clash:
                raise SchemaMismatchError(table, [
                    f"run(s) {clash} already have rows of {table!r} in layout {_layout_number(other)} "
                    f"({other}/), and these rows are of layout {_layout_number(name)} ({name}/): a run "
                    "keeps one layout per table (write this data under a new run id)"],
                    expected=self.schema(table, layout=_layout_number(other)),
                    got=self.schema(table, layout=_layout_number(name)))

    # ---------------------------------------------------------------- writing

    def writer(
        self,
        table: str,
        *,
        row_group_bytes: int = ROW_GROUP_BYTES,
        file_bytes: int = FILE_BYTES,
        flush_rows: int | None = None,
        flush_seconds: float | None = None,
    ) -> TableWriter:
        """A buffered writer for ``table``; see :class:`TableWriter`."""
        w = TableWriter(self, table, row_group_bytes=row_group_bytes, file_bytes=file_bytes,
                        flush_rows=flush_rows, flush_seconds=flush_seconds)
        self._writers.append(w)
        if self._tx is not None:
            self._tx.writers.append(w)
        return w

    def append(self, table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any], *,
               threads: int | None = None,
               before_commit: Callable[[], None] | None = None) -> CommitInfo | None:
        """Validate ``data`` and commit it to ``table`` at once.

        ``data`` is an Arrow table or record batch, or a mapping of columns as
        :func:`rlarrow.core.schema.build` takes them. For many small pieces use
        :meth:`writer`, which buffers them into few files. Data larger than two row
        groups is written as up to ``threads`` files in parallel (default: one per CPU),
        row order kept, committed together in one journaled step.

        ``before_commit`` is called once the files are written, before they are
        committed; if it raises, nothing is committed (a checksum of the source checked
        while the data was being written, say).

        Rows whose tensor types no layout of the table has start a new layout
        (:meth:`layouts`); a run's rows of a table all go to one layout.

        Returns:
            What was committed, or None when ``data`` has no rows.

        Raises:
            SchemaMismatchError: every problem with the data, at once (one line per column
                whose type differs from the layout's).
        """
        threads = threads or os.cpu_count() or 1
        if threads > 1 and isinstance(data, (pa.Table, pa.RecordBatch)) and data.nbytes > 2 * ROW_GROUP_BYTES:
            valid, layout = self._place(table, data)
            parts = min(threads, -(-valid.nbytes // ROW_GROUP_BYTES))
            return self._append_parallel(layout, valid, parts, before_commit)
        with self.writer(table) as w:
            w.write(data)
            if before_commit is not None:
                w._spill()  # written, not committed (a failing check aborts the writer)
                before_commit()
            info = w.flush()
        return info

    def _append_parallel(self, table: str, data: pa.Table, parts: int,
                         before_commit: Callable[[], None] | None = None) -> CommitInfo:
        from concurrent.futures import ThreadPoolExecutor

        directory = self.path / table
        step = -(-data.num_rows // parts)
        slices = [data.slice(i, step) for i in range(0, data.num_rows, step)]
        finals = [_new_file_name() for _ in slices]
        tmps = [directory / _tmp_name(f) for f in finals]

        def write(i: int) -> None:
            writer = _open_parquet(tmps[i], data.schema, slices[i])
            try:
                _write_row_groups(writer, slices[i], ROW_GROUP_BYTES, tmps[i])
            finally:
                writer.close()
            _fsync_file(tmps[i])

        try:
            try:
                with ThreadPoolExecutor(len(slices)) as pool:
                    list(pool.map(write, range(len(slices))))
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"{directory}: writing table {table!r} failed ({exc}); nothing was "
                                 "committed, and every earlier commit is intact") from exc
            if before_commit is not None:
                before_commit()
        except BaseException:  # nothing of it is committed: no temporary file is left either
            for tmp in tmps:
                tmp.unlink(missing_ok=True)
            raise
        return self._commit_many(table, list(zip(tmps, finals, [len(x) for x in slices], strict=True)),
                                 data.schema)

    def _commit_many(self, table: str, parts: list[tuple[Path, str, int]], schema: pa.Schema) -> CommitInfo:
        """Rename finished temporary files into place and list them, all or none (journaled)."""
        directory = self.path / table
        if self._tx is not None:
            infos = [self._tx_add(table, tmp, final, schema, rows) for tmp, final, rows in parts]
            names = tuple(i.file for i in infos)
            return CommitInfo(table=table, file=names[0], rows=sum(i.rows for i in infos),
                              bytes=sum(i.bytes for i in infos), files=names)
        with self._locked():
            manifest = self._recover(self._read_manifest())
            entry = manifest["tables"][table]
            try:
                self._check_file_schema(table, entry, schema, parts[0][0])
            except SchemaMismatchError:
                for tmp, _, _ in parts:
                    tmp.unlink(missing_ok=True)
                raise
            renamed: list[Path] = []
            try:
                entries: list[dict[str, Any]] = [
                    {"name": final, "rows": rows, "bytes": tmp.stat().st_size} for tmp, final, rows in parts]
                manifest["pending"] = {"op": "append", "table": table, "old": [],
                                       "new": [final for _, final, _ in parts], "new_entries": entries}
                self._write_manifest(manifest)  # journal: a kill before the last rename rolls back
                for tmp, final, _ in parts:
                    os.replace(tmp, directory / final)
                    renamed.append(directory / final)
                fsync_dir(directory)
                self._apply_replacement(manifest, manifest["pending"])
                self._write_manifest(manifest)
            except (OSError, StoreError) as exc:
                # Not committed: with a new file missing, recovery rolls the journal back.
                _undo(renamed, [tmp for tmp, _, _ in parts], exc)
                self._forget_failed_commit()
                raise exc if isinstance(exc, StoreError) else write_error(directory, exc) from exc
        self._auto_compact([table])
        names = tuple(f"{table}/{e['name']}" for e in entries)
        return CommitInfo(table=table, file=names[0], rows=sum(e["rows"] for e in entries),
                          bytes=sum(e["bytes"] for e in entries), files=names)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Store]:
        """Commit everything written inside the block together, or nothing of it.

        Inside the block, commits (:meth:`append`, :meth:`append_together`, writers'
        flushes, :meth:`add_run`, every importer) write their files but list none of them:
        this store object reads them back (``read``, ``files``, ``row_count``, ``schema``),
        other readers see nothing yet. Leaving the block commits all of them in one
        journaled step (a process killed at any moment leaves all or none); an exception
        in the block, or a failed commit, deletes them and re-raises: nothing of the block
        is in the store. Writers opened in the block and still open are closed first.
        A transaction inside a transaction joins it.

        Example:
            >>> import tempfile, os, rlarrow
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> try:
            ...     with store.transaction():
            ...         run = store.add_run(source="user")
            ...         raise RuntimeError("the import failed half-way")
            ... except RuntimeError:
            ...     pass
            >>> store.row_count("runs")
            0
        """
        if self._tx is not None:
            yield self
            return
        if self.readonly:
            raise StoreError(f"{self.path}: cannot write: {self._readonly_reason}")
        tx = self._tx = _Transaction()
        try:
            yield self
            for w in [w for w in self._writers if w in tx.writers]:
                w.close()
        except BaseException:
            self._tx = None
            for w in [w for w in self._writers if w in tx.writers]:
                w.abort()
            tx.discard()
            self._tx_rollback(tx)
            raise
        self._tx = None
        try:
            self._commit_transaction(tx)
        except BaseException:
            self._tx_rollback(tx)
            raise

    def _tx_rollback(self, tx: _Transaction) -> None:
        """Un-fix the schemas a failed transaction fixed, where the table still has no file."""
        if not tx.fixed:
            return
        with contextlib.suppress(RLArrowError), self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            changed = False
            for table in dict.fromkeys(tx.fixed):
                entry = manifest["tables"].get(table)
                if entry is not None and not entry["files"] and entry.get("schema") is not None:
                    entry["schema"] = None
                    changed = True
            if changed:
                self._write_manifest(manifest)

    def _commit_transaction(self, tx: _Transaction) -> None:
        """Rename a transaction's files into place and list them, all or none (journaled)."""
        if not tx.files:
            return
        by_table: dict[str, list[_TxFile]] = {}
        for f in tx.files:
            by_table.setdefault(f.table, []).append(f)
        with self._locked():
            manifest = self._recover(self._read_manifest())
            try:
                for table, files in by_table.items():
                    self._check_file_schema(table, manifest["tables"][table], tx.schemas[table], files[0].tmp)
            except SchemaMismatchError:
                tx.discard()
                raise
            parts = [{"op": "append", "table": table, "old": [], "new": [f.final for f in files],
                      "new_entries": [{"name": f.final, "rows": f.rows, "bytes": f.bytes} for f in files]}
                     for table, files in by_table.items()]
            pending = dict(parts[0])
            if len(parts) > 1:
                pending["also"] = parts[1:]
            renamed: list[Path] = []
            try:
                manifest["pending"] = pending
                self._write_manifest(manifest)  # journal: a kill before the last rename rolls back
                for f in tx.files:
                    os.replace(f.tmp, self.path / f.table / f.final)
                    renamed.append(self.path / f.table / f.final)
                for table in by_table:
                    fsync_dir(self.path / table)
                self._apply_replacement(manifest, pending)
                self._write_manifest(manifest)
            except (OSError, StoreError) as exc:
                # Not committed: with a new file missing, recovery rolls the journal back.
                _undo(renamed, [f.tmp for f in tx.files], exc)
                self._forget_failed_commit()
                raise exc if isinstance(exc, StoreError) else write_error(self.path, exc) from exc
        self._auto_compact(list(by_table))

    def _tx_add(self, table: str, tmp: Path, final: str, schema: pa.Schema, rows: int) -> CommitInfo:
        """Inside a transaction: keep a finished file for the transaction's commit."""
        assert self._tx is not None
        plain = schema.remove_metadata()
        # The schema is fixed in the manifest at once (as a declare is), so that layouts are
        # chosen as outside a transaction; a transaction that fails un-fixes it (_tx_rollback).
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            entry = manifest["tables"][table]
            unfixed = entry.get("schema") is None
            try:
                self._check_file_schema(table, entry, plain, tmp)
            except SchemaMismatchError:
                tmp.unlink(missing_ok=True)
                raise
            if unfixed:
                self._write_manifest(manifest)
                self._tx.fixed.append(table)
            else:
                self._manifest = manifest
        self._tx.schemas[table] = plain
        size = tmp.stat().st_size
        self._tx.files.append(_TxFile(table, tmp, final, rows, size))
        return CommitInfo(table=table, file=f"{table}/{final}", rows=rows, bytes=size)

    def add_run(
        self,
        *,
        source: str,
        run_id: str | None = None,
        name: str | None = None,
        source_path: str | os.PathLike[str] | None = None,
        source_version: str | None = None,
        alignment: str | None = None,
        num_envs: int | None = None,
        metadata: Any = None,
        env_specs: Any = None,
        created_at: datetime | None = None,
    ) -> str:
        """Add a row to ``runs`` and return its ``run_id`` (generated when not given).

        Raises:
            StoreError: a run with this id already exists.
        """
        if run_id is None:
            run_id = new_run_id()
        elif self.has_run(run_id):
            raise StoreError(f"{self.path}: run {run_id!r} already exists; choose another run_id")
        row = _schema.build(
            "runs",
            {
                "run_id": run_id,
                "name": name,
                "created_at": [created_at or datetime.now(UTC)],
                "source": source,
                "source_path": None if source_path is None else os.fspath(source_path),
                "source_version": source_version,
                "alignment": alignment,
                "num_envs": num_envs,
                "metadata": [metadata],
                "env_specs": [env_specs],
            },
        )
        self.append("runs", row)
        return run_id

    def has_run(self, run_id: str) -> bool:
        """Whether the ``runs`` table holds a row for ``run_id``.

        Example:
            >>> import rlarrow, tempfile
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
            >>> run = st.add_run(source="user")
            >>> st.has_run(run), st.has_run("no-such-run")
            (True, False)
        """
        if self.row_count("runs") == 0:
            return False
        import pyarrow.compute as pc

        ids = self.read("runs", columns=["run_id"]).column("run_id")
        return bool(pc.any(pc.equal(ids, run_id)).as_py())

    def _commit_files(self, files: list[tuple[str, Path, str, pa.Schema, int]]) -> list[CommitInfo]:
        """Rename finished temporary files (one per table) into place; list them in one manifest write.

        A kill between the renames and the manifest write leaves files that recovery
        adopts (as a kill after a single rename does): each file is whole or absent.
        """
        if self._tx is not None:
            return [self._tx_add(*f[:4], f[4]) for f in files]
        infos: list[CommitInfo] = []
        with self._locked():
            manifest = self._recover(self._read_manifest(), sweep=False)
            try:
                for table, tmp, _, schema, _ in files:
                    self._check_file_schema(table, manifest["tables"][table], schema, tmp)
            except SchemaMismatchError:
                for _, tmp, _, _, _ in files:
                    tmp.unlink(missing_ok=True)
                raise
            renamed: list[Path] = []
            try:
                for table, tmp, final_name, _, rows in files:
                    path = self.path / table / final_name
                    os.replace(tmp, path)
                    renamed.append(path)
                    fsync_dir(path.parent)
                    size = path.stat().st_size
                    entry = manifest["tables"][table]
                    entry["files"].append({"name": final_name, "rows": rows, "bytes": size})
                    entry["rows"] += rows
                    infos.append(CommitInfo(table=table, file=f"{table}/{final_name}", rows=rows, bytes=size))
                self._write_manifest(manifest)
            except (OSError, StoreError) as exc:
                # Not committed: the files leave the table again, so no later recovery adopts
                # what the caller was told failed.
                _undo(renamed, [tmp for _, tmp, _, _, _ in files], exc)
                self._forget_failed_commit()
                raise exc if isinstance(exc, StoreError) else write_error(self.path, exc) from exc
        self._auto_compact(list(dict.fromkeys(info.table for info in infos)))
        return infos

    def _auto_compact(self, tables: list[str]) -> None:
        """Compact after a commit where due; a failure there is a warning (the commit stands)."""
        for table in tables:
            if self.auto_compact is None or self._small_files(table) <= self.auto_compact:
                continue
            try:
                self.compact(table)
            except (StoreError, CorruptFileError) as exc:
                import warnings

                from rlarrow.core.errors import RLArrowWarning

                warnings.warn(f"the commit to {table!r} succeeded; compacting it afterwards did not "
                              f"({exc}); the table is whole, with more small files", RLArrowWarning,
                              stacklevel=3)

    def append_together(
        self, data: Mapping[str, pa.Table | pa.RecordBatch | Mapping[str, Any]]
    ) -> list[CommitInfo]:
        """Validate rows for several tables and commit them with one manifest write.

        Each table's rows become one file; what :meth:`append` does per table, at the cost
        of one commit (one lock, one manifest write) instead of one per table. A recorder
        commits its ``steps`` and ``episodes`` rows this way.

        Returns:
            What was committed, one entry per table that had rows.

        Raises:
            SchemaMismatchError: a table's data does not fit (nothing is committed).

        Example:
            >>> import tempfile, os, numpy as np
            >>> store = Store.create(os.path.join(tempfile.mkdtemp(), "s.rlarrow"))
            >>> infos = store.append_together({"episodes": {"run_id": "r", "episode_id": [0],
            ...     "num_steps": [3], "env_index": 0, "terminated": True, "truncated": False,
            ...     "partial_start": False, "partial_end": False}})
            >>> [(i.table, i.rows) for i in infos]
            [('episodes', 1)]
        """
        writers = [self.writer(table, file_bytes=1 << 62) for table in data]  # one file each, any size
        try:
            for w, rows in zip(writers, data.values(), strict=True):
                w.write(rows)
            files = [f for f in (w._finish_file() for w in writers) if f is not None]
        except BaseException:
            for w in writers:
                w.abort()
            raise
        for w in writers:
            w.abort()  # nothing left in them: this only unregisters
        return self._commit_files(files) if files else []

    # ---------------------------------------------------------------- reading

    def tables(self) -> list[str]:
        """Names of the store's tables (a table's further layouts, ``TABLE.N``, are the table's)."""
        return [n for n in self._manifest["tables"] if n == _logical(n)]

    def files(self, table: str, *, refresh: bool = True, layout: int | None = None) -> list[Path]:
        """Paths of the committed Parquet files of ``table``, oldest first.

        ``refresh=False`` answers from the view of the last :meth:`refresh` (so that
        several tables' files come from one manifest). ``layout``: only that layout's
        files (:meth:`layouts`); None: every layout's, the first layout's first.

        Raises:
            CorruptFileError: a listed file is a symbolic link (it could lead outside the
                store) or not a regular file.
        """
        _schema.table(_logical(table))
        if refresh:
            self.refresh()
        names = self._selected(table, layout)
        if len(names) > 1 or names[0] != table:
            return [f for n in names for f in self.files(n, refresh=False, layout=_one(n))]
        directory = self.path / table
        # files an open transaction of this store object wrote: read back by it alone
        uncommitted = [f.tmp for f in self._tx.files if f.table == table] if self._tx else []
        listed = self._manifest["tables"][table]["files"]
        return [check_inside(directory, f["name"]) for f in listed] + uncommitted

    def row_count(self, table: str, *, layout: int | None = None) -> int:
        """Committed rows of ``table`` (of one of its layouts with ``layout``)."""
        _schema.table(_logical(table))
        self.refresh()
        names = self._selected(table, layout)
        if len(names) > 1 or names[0] != table:
            return sum(self.row_count(n, layout=_one(n)) for n in names)
        uncommitted = sum(f.rows for f in self._tx.files if f.table == table) if self._tx else 0
        return int(self._manifest["tables"][table]["rows"]) + uncommitted

    def dataset(self, table: str, *, layout: int | None = None,
                files: Sequence[str | os.PathLike[str]] | None = None) -> Any:
        """A ``pyarrow.dataset.Dataset`` over the committed files of ``table``.

        It is a snapshot: a compaction by another writer may replace its files, so
        long-lived readers should call this again (:meth:`read` retries by itself).
        ``layout``: one layout of the table (:meth:`layouts`); None: all of them, in the
        schema :meth:`schema` gives (a column whose type differs between layouts is left
        out; rows of a layout without a column read null there).
        ``files``: only these of its files (paths :meth:`files` gave, e.g. the ones a
        :class:`ReaderLease` pinned), read in the table's schema.
        """
        import pyarrow.dataset as ds

        files = self.files(table, layout=layout) if files is None else files
        schema = self.schema(table, layout=layout)
        if not files:
            empty_schema = schema if schema is not None else _schema.table(_logical(table)).arrow_schema()
            return ds.dataset(empty_schema.empty_table())
        # pages' CRC-32s checked where the writer stored them (~8% of a read)
        fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            page_checksum_verification=True))
        return ds.dataset([os.fspath(f) for f in files], format=fmt, schema=schema)

    def read(
        self,
        table: str,
        columns: Sequence[str] | None = None,
        filter: Any = None,  # noqa: A002 - pyarrow's name
        *,
        layout: int | None = None,
    ) -> pa.Table:
        """Read ``table`` (optionally some columns and a pyarrow filter expression).

        A table whose runs hold different tensors has several layouts (:meth:`layouts`).
        ``layout=N`` reads one; None reads all of them together, the first layout's rows
        first: columns are matched by name (a layout without a column reads null there),
        and a column whose type differs between layouts is left out, with an
        :class:`~rlarrow.core.errors.RLArrowWarning` said once per store object (a run's rows
        are in one layout: read it with ``layout=store.layout_of(table, run_id)`` to have
        all its columns).

        Example:
            >>> import numpy as np, rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> base = {"snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            ...         "num_envs": 1}
            >>> _ = store.append("memory", {**base, "run_id": "ppo", "values": np.ones((1, 1), "f4")})
            >>> _ = store.append("memory", {**base, "run_id": "dqn", "next_states": np.ones((1, 2), "f4")})
            >>> store.read("memory", columns=["run_id", "values"]).to_pylist()
            [{'run_id': 'ppo', 'values': [1.0]}, {'run_id': 'dqn', 'values': None}]

        Raises:
            CorruptFileError: a file of the table is damaged (the error names it).
            SchemaMismatchError: ``columns`` names a column whose type differs between the
                layouts read together.
        """
        for attempt in range(_READ_ATTEMPTS):
            files = self.files(table, layout=layout)
            self._leave_out(table, self._selected(table, layout), columns)
            try:
                dataset = self.dataset(table, layout=layout, files=files)
                result = dataset.to_table(columns=list(columns) if columns is not None else None,
                                          filter=filter)
                break
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                # A concurrent compaction replaced files of this snapshot: read the new ones.
                if attempt + 1 < _READ_ATTEMPTS and not all(f.exists() for f in files):
                    continue
                raise self._find_damage(table, exc) from exc
        return result.replace_schema_metadata(_schema.table(table).file_metadata())

    def _find_damage(self, table: str, exc: Exception) -> Exception:
        for problem in self.check(table, deep=True):
            return CorruptFileError(
                self.path / problem.file,
                f"{problem.problem} (a file of table {table!r}, {problem.rows:,} rows); restore it from a "
                f"backup, or run `rlarrow repair {self.path}` to see what dropping it costs, then "
                "`--apply` to drop it")
        return CorruptFileError(self.path / table, f"cannot read table {table!r}: {exc}")

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
        names = [table] if isinstance(table, str) else list(table or self._manifest["tables"])
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
            expected = self.schema(_logical(table), layout=_layout_number(table))  # its layout's
            if expected is not None and not pf.schema_arrow.remove_metadata().equals(expected):
                return "damaged Parquet: its columns are not the table's (a damaged footer)"
            if deep:
                for i in range(pf.num_row_groups):
                    pf.read_row_group(i)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # (a garbled column name)
            return f"damaged Parquet ({exc})"
        return None

    def _unadoptable(self) -> list[FileProblem]:
        """Unlisted files in the tables that recovery cannot adopt (they stop writers opening)."""
        problems = []
        manifest = self._read_manifest()
        for table, names in self._scan_orphans(manifest).items():
            for name in names:
                trial = json.loads(json.dumps(manifest))
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
        problems = self.check(deep=True) + self._unadoptable()
        if not apply or not problems:
            return RepairReport(problems, applied=False, quarantine=os.fspath(quarantine))
        with self._locked():
            manifest = self._read_manifest()
            # An interrupted replacement is finished or undone first, as recovery would (the
            # check's view already saw it so): dropping files from a journal's half state
            # would count a compaction's rows twice or keep part of an append.
            self._finish_pending(manifest)
            dropped = {p.file for p in problems}
            for table, entry in manifest["tables"].items():
                keep = [f for f in entry["files"] if f"{table}/{f['name']}" not in dropped]
                entry["files"], entry["rows"] = keep, sum(f["rows"] for f in keep)
            if quarantine.is_symlink() or (quarantine.exists() and not quarantine.is_dir()):
                raise CorruptFileError(quarantine, "is not a directory of the store (a link?); move it "
                                       "away: repair moves damaged files there")
            for p in problems:
                source = self.path / p.file
                if source.is_symlink():
                    source.unlink()  # the link only, never what it points at
                elif source.exists():
                    target = quarantine / p.file
                    try:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(source, target)
                    except OSError as exc:
                        raise write_error(target, exc) from exc
            self._write_manifest(manifest)
            self._manifest = self._recover(self._read_manifest())
        return RepairReport(problems, applied=True, quarantine=os.fspath(quarantine))

    def runs(self) -> pa.Table:
        """The ``runs`` table."""
        return self.read("runs")

    def info(self) -> StoreInfo:
        """Tables, row counts, runs, schema versions, size on disk, and missing or damaged files.

        It reads only the files' footers (:meth:`check`): a damaged file is named in
        ``problems`` and the rest is summed as listed; ``rlarrow repair`` drops such files.
        """
        problems = self.check()
        m = self._manifest
        tables = {}
        for name, entry in m["tables"].items():
            tables[name] = TableInfo(
                name=name,
                rows=int(entry["rows"]),
                files=len(entry["files"]),
                bytes=sum(int(f["bytes"]) for f in entry["files"]),
                schema_version=entry.get("schema_version", "?"),
                schema=None if entry.get("schema") is None else _decode_schema(entry["schema"]),
            )
        runs: list[dict[str, Any]] = []
        if tables.get("runs") and tables["runs"].rows and not any(p.table == "runs" for p in problems):
            try:
                t = self.read("runs", columns=["run_id", "name", "source", "created_at", "num_envs",
                                               "metadata"])
            except CorruptFileError as exc:  # damage the footers did not show: say so, list the rest
                problems.append(FileProblem("runs", os.path.relpath(exc.path or "runs", self.path),
                                            0, f"damaged ({exc})"))
                t = pa.table({"run_id": [], "name": [], "source": [], "created_at": [], "num_envs": [],
                              "metadata": []})
            for row in t.to_pylist():
                row["created_at"] = row["created_at"].isoformat() if row["created_at"] else None
                # the plain JSON text (non-finite floats as "NaN" ...): JSON-able as it is
                row["metadata"] = None if row["metadata"] is None else json.loads(row["metadata"])
                runs.append(row)
        size = 0
        for root, dirs, fnames in os.walk(self.path):
            if root == os.fspath(self.path) and _VIEWS_DIR in dirs:
                dirs.remove(_VIEWS_DIR)  # readers' hard links: the same bytes again
            for f in fnames:
                with contextlib.suppress(OSError):
                    size += os.stat(os.path.join(root, f)).st_size
        return StoreInfo(
            path=os.fspath(self.path),
            format_version=m["format_version"],
            writer=m.get("writer", "?"),
            created_at=m.get("created_at", "?"),
            tables=tables,
            runs=runs,
            bytes_on_disk=size,
            problems=problems,
        )

    # ---------------------------------------------------------------- compaction

    def _small_files(self, table: str, target_file_bytes: int = FILE_BYTES) -> int:
        """Small files of ``table``'s fullest layout (or of the layout directory ``table``)."""
        names = [table] if table != _logical(table) else (self._layout_names(table) or [table])
        return max(sum(1 for f in self._manifest["tables"][n]["files"] if f["bytes"] < target_file_bytes // 2)
                   for n in names)

    def compact(
        self,
        table: str | Sequence[str] | None = None,
        *,
        target_file_bytes: int = FILE_BYTES,
        row_group_bytes: int = ROW_GROUP_BYTES,
        progress: bool = False,
    ) -> dict[str, tuple[int, int]]:
        """Merge runs of small files into files of up to ``target_file_bytes``.

        Row order is kept. The swap is journaled in the manifest, so a process killed
        during compaction leaves either the old files or the new ones, never both listed.

        Args:
            table: one table, several, or None for all.
            target_file_bytes: the largest file a merge makes.
            row_group_bytes: row-group size of the merged files.
            progress: show a progress bar (on a terminal).

        Each layout of a table (:meth:`layouts`) is compacted on its own: a merged file
        holds the rows of one layout.

        Returns:
            table -> (files before, files after) for the tables that changed (a further
            layout of a table under its directory's name, ``steps.2``).
        """
        tables = [table] if isinstance(table, str) else list(table or _schema.TABLE_NAMES)
        for name in tables:
            _schema.table(_logical(name))
        self.refresh()
        tables = list(dict.fromkeys(n for name in tables for n in (
            [name] if name != _logical(name) else (self._layout_names(name) or [name]))))
        changed: dict[str, tuple[int, int]] = {}
        for name in tables:
            with self._locked():
                manifest = self._recover(self._read_manifest())
                entry = manifest["tables"][name]
                before = len(entry["files"])
                groups = _plan_compaction(entry["files"], target_file_bytes)
                for group in _iterate(groups, f"compact {name}", "group", None if progress else False):
                    self._replace(manifest, name, group, row_group_bytes=row_group_bytes)
                if groups:
                    changed[name] = (before, len(manifest["tables"][name]["files"]))
        return changed

    def _replace(
        self,
        manifest: dict[str, Any],
        table: str,
        old_names: list[str],
        *,
        transform: Any = None,
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        """Under the lock: rewrite ``old_names`` of ``table`` into one new file, journaled.

        ``transform`` (a function of a pyarrow Table) is applied file by file (migrations).
        """
        directory = self.path / table
        final = _new_file_name()
        tmp = directory / _tmp_name(final)
        spec = _schema.table(_logical(table))  # (a layout directory TABLE.N: its table's)
        writer: pq.ParquetWriter | None = None
        rows = 0
        out_schema: pa.Schema | None = None
        buffered: list[pa.Table] = []
        buffered_bytes = 0

        def write_buffered() -> None:
            # Small files' rows are gathered into row groups of ``row_group_bytes``: merging
            # 400 commits of 8 rows made 400 row groups of 8 rows (a file 20x its data).
            nonlocal writer, out_schema, buffered, buffered_bytes
            if not buffered:
                return
            data = pa.concat_tables(buffered)
            buffered, buffered_bytes = [], 0
            if writer is None:
                out_schema = data.schema
                writer = _open_parquet(tmp, out_schema, data)
            _write_row_groups(writer, data, row_group_bytes, tmp)

        try:
            for name in old_names:
                path = check_inside(directory, name)
                try:
                    pf = pq.ParquetFile(path)
                except (pa.ArrowInvalid, OSError) as exc:
                    raise CorruptFileError(path, f"cannot read for rewriting ({exc}); run `rlarrow "
                                           "repair STORE` to see what can be kept") from exc
                if transform is None:
                    batches: Iterator[pa.Table] = (
                        pa.Table.from_batches([b]) for b in pf.iter_batches(batch_size=65536)
                    )
                else:
                    batches = iter([transform(pf.read())])
                for part in batches:
                    part = part.replace_schema_metadata(spec.file_metadata())
                    if out_schema is None:
                        out_schema = part.schema
                    part = part.cast(out_schema)
                    rows += part.num_rows
                    buffered.append(part)
                    buffered_bytes += part.nbytes
                    if buffered_bytes >= row_group_bytes:
                        write_buffered()
            write_buffered()
            if writer is None:  # nothing to read: an empty merge
                assert out_schema is None
                return
            writer.close()
            writer = None
            _fsync_file(tmp)
        except BaseException as exc:
            if writer is not None:
                with contextlib.suppress(OSError, pa.ArrowException):
                    writer.close()
            tmp.unlink(missing_ok=True)
            if isinstance(exc, (OSError, pa.ArrowException)) and not isinstance(exc, FileNotFoundError):
                raise StoreError(f"{tmp}: rewriting {table!r} failed ({exc}); the store is as it "
                                 "was") from exc
            raise
        saved = json.loads(json.dumps(manifest))
        try:
            new_entry = {"name": final, "rows": rows, "bytes": tmp.stat().st_size}
            manifest["pending"] = {
                "op": "migrate" if transform is not None else "compact",
                "table": table,
                "old": list(old_names),
                "new": [final],
                "new_entries": [new_entry],
            }
            self._write_manifest(manifest)  # journal: the old files are still the listed ones
            os.replace(tmp, directory / final)
            fsync_dir(directory)
            self._apply_replacement(manifest, manifest["pending"])
            self._write_manifest(manifest)  # new file listed, old ones retired
        except (OSError, StoreError) as exc:
            # Rolled back: without the new file the journal undoes itself on recovery.
            _undo([directory / final], [tmp], exc)
            manifest.clear()
            manifest.update(saved)  # the caller's (and self._manifest's) view: as on disk
            raise exc if isinstance(exc, StoreError) else write_error(directory, exc) from exc
        self._delete_retired(manifest)
        with contextlib.suppress(StoreError):  # only the retired list: the next writer cleans it
            self._write_manifest(manifest)


def _plan_compaction(files: list[dict[str, Any]], target: int) -> list[list[str]]:
    """Consecutive runs of small files, each run up to ``target`` bytes, at least 2 files."""
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for f in files:
        small = f["bytes"] < target // 2
        if not small or size + f["bytes"] > target:
            if len(current) > 1:
                groups.append(current)
            current, size = ([], 0) if not small else ([f["name"]], f["bytes"])
            continue
        current.append(f["name"])
        size += f["bytes"]
    if len(current) > 1:
        groups.append(current)
    return groups


def _leaves(name: str, arr: pa.Array | None, type_: pa.DataType) -> Iterator[tuple[str, pa.Array | None]]:
    """Parquet leaf column paths of a field, with the (sample) values of each."""
    if pa.types.is_fixed_size_list(type_) or pa.types.is_list(type_):
        values = None if arr is None else arr.flatten()
        yield from _leaves(f"{name}.list.element", values, type_.value_type)
    elif pa.types.is_struct(type_):
        for i, child in enumerate(type_):
            yield from _leaves(f"{name}.{child.name}", None if arr is None else arr.field(i), child.type)
    else:
        yield name, arr


def _is_tensor_field(field: pa.Field) -> bool:
    return pa.types.is_nested(field.type) or isinstance(field.type, pa.ExtensionType)


def _tensor_codecs(schema: pa.Schema, sample: pa.Table) -> tuple[dict[str, str], dict[str, int], list[str]]:
    """Codec (and zstd level) per Parquet leaf, and the tensor leaves worth a dictionary.

    A float (or binary-layout) tensor leaf whose first values zstd does not shrink by a
    fifth is stored plain: zstd would double its read time for a few percent. Binary-layout
    leaves that do compress get zstd level 3, which shrinks frames about a sixth more than
    level 1 at the same speed. A binary-layout leaf whose sample (its first 4096 rows at
    most, about 4 MiB) repeats values (at most one distinct value in four rows: board games,
    small grids, looping frames) is dictionary-encoded, which stores each distinct tensor
    once (Catch's boards: 7x smaller) and writes faster than zstd alone.
    """
    codecs: dict[str, str] = {}
    levels: dict[str, int] = {}
    dictionary: list[str] = []
    zstd = pa.Codec(_COMPRESSION)
    for field in schema:
        col = None
        if sample.num_rows and _is_tensor_field(field):  # flat columns keep the default codec
            # the first ~4 MiB of rows (at least 64): judging more costs a copy of the column
            chunked = sample.column(field.name)
            per_row = max(1, chunked.nbytes // sample.num_rows)
            col = chunked.slice(0, max(64, (4 << 20) // per_row)).combine_chunks()
        for path, leaf in _leaves(field.name, col, field.type):
            codec = _COMPRESSION
            if isinstance(leaf, pa.ExtensionArray):
                leaf = leaf.storage  # the binary layout: judge its bytes, whatever the dtype
            binary = leaf is not None and pa.types.is_fixed_size_binary(leaf.type)
            if _is_tensor_field(field) and leaf is not None and (binary or pa.types.is_floating(leaf.type)):
                limit = max(1, (1 << 18) // leaf.type.byte_width) if binary else 1 << 16  # 256 KiB
                raw = leaf.slice(0, min(len(leaf), limit))
                data = raw.buffers()[1]
                # distinct values over the whole sample, by rows (a MiB is 148 84x84 frames: too
                # few to see a loop of 64); hashing more than 4096 rows costs, says nothing new
                head = leaf.slice(0, 4096)
                # (rows under 8 bytes, flags and scalars, are left to zstd: as small, and faster)
                if binary and leaf.type.byte_width >= 8 and len(head) >= 64 and \
                        pc.count_distinct(head).as_py() * 4 <= len(head):
                    dictionary.append(path)
                    levels[path] = _BINARY_ZSTD_LEVEL
                elif data is not None and data.size >= 4096:
                    width = raw.type.byte_width if binary else raw.type.bit_width // 8
                    data = data.slice(raw.offset * width, len(raw) * width)
                    if zstd.compress(data).size > 0.8 * data.size:
                        codec = "none"
                    elif binary:
                        levels[path] = _BINARY_ZSTD_LEVEL
            codecs[path] = codec
    return codecs, levels, dictionary


def _open_parquet(path: Path, schema: pa.Schema, sample: pa.Table | None = None) -> pq.ParquetWriter:
    """A Parquet writer for a store file; ``sample`` (the first rows) picks tensor codecs."""
    # Statistics and dictionaries for the flat columns (keys, flags, scalars) only: for
    # tensor columns they cost write time and no reader uses them.
    flat = [f.name for f in schema if not _is_tensor_field(f)]
    compression: str | dict[str, str] = _COMPRESSION
    levels: dict[str, int] | None = None
    dictionary: list[str] = []
    if sample is not None and any(_is_tensor_field(f) for f in schema):
        compression, levels, dictionary = _tensor_codecs(schema, sample)
        if levels:  # a level for every zstd leaf: pyarrow wants the dict to cover them
            levels = {path: levels.get(path, 1) for path, codec in compression.items() if codec == "zstd"}
    return pq.ParquetWriter(
        path,
        schema,
        compression=compression,
        compression_level=levels or None,
        use_dictionary=flat + dictionary,
        write_statistics=flat,
        store_schema=True,
        # a CRC-32 per page (2% of the write time): Store.read and `rlarrow repair` verify
        # them, so a flipped bit in a data file is an error, not a changed value
        write_page_checksum=True,
    )


def _write_row_groups(writer: pq.ParquetWriter, data: pa.Table, row_group_bytes: int,
                      path: Path | None = None) -> None:
    """``data`` as row groups of about ``row_group_bytes``.

    With ``path`` (the file ``writer`` writes) and more than one row group of data, the
    kernel is asked after each row group to start writing the file out (see
    :func:`_start_writeback`): the disk works while the next row group is encoded, and the
    fsync at commit has little left to wait for.
    """
    if data.num_rows == 0:
        return
    per_row = max(1, data.nbytes // max(1, data.num_rows))
    rows_per_group = max(1, min(1 << 20, row_group_bytes // per_row))
    if path is None or data.num_rows <= rows_per_group:
        writer.write_table(data, row_group_size=rows_per_group)
        return
    for lo in range(0, data.num_rows, rows_per_group):
        writer.write_table(data.slice(lo, rows_per_group), row_group_size=rows_per_group)
        _start_writeback(path)


_sync_file_range: Any = None


def _start_writeback(path: Path) -> None:
    """Start writing ``path``'s dirty pages to disk without waiting (Linux; elsewhere nothing).

    ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` queues the writeback and returns: it is a
    hint, not a durability step (the fsync at commit is that), so failures are ignored.
    """
    global _sync_file_range
    if _sync_file_range is None:
        _sync_file_range = False
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _sync_file_range = fn
        except (OSError, AttributeError):  # not Linux, or no such libc function
            pass
    if _sync_file_range is False:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        _sync_file_range(fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE, the whole file
    finally:
        os.close(fd)


def _validated(table: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any],
               established: pa.Schema | None) -> pa.Table:
    """``data`` checked against ``table``'s schema (and the store's concrete one), in its exact form."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if established is not None and isinstance(data, pa.Table) and data.schema.equals(established):
        _schema.quick_check(table, data)  # already in the exact form: values only
        return data
    if isinstance(data, Mapping):
        return _schema.build(table, data, established=established)
    return _schema.conform(table, data, established)


def _data_run_ids(data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> set[str]:
    """The run ids in rows about to be written (as :func:`rlarrow.core.schema.build` takes them, or Arrow)."""
    if isinstance(data, Mapping):
        value = data.get("run_id")
        if value is None:
            return set()
        if isinstance(value, str):
            return {value}
        if not isinstance(value, (pa.Array, pa.ChunkedArray)):
            try:
                value = pa.array(value)
            except (pa.ArrowException, TypeError, ValueError):
                return set()
    elif "run_id" in data.schema.names:
        value = data.column("run_id")
    else:
        return set()
    try:
        return {str(v) for v in pc.unique(value).to_pylist() if v is not None}
    except pa.ArrowException:
        return set()


def new_run_id() -> str:
    """A new run id: UTC time and random hex, sortable by creation time.

    >>> len(new_run_id())
    22
    """
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


class TableWriter:
    """Buffered, streaming writer for one table of a store.

    Rows are validated on :meth:`write`, buffered into row groups of about
    ``row_group_bytes``, streamed into a hidden temporary file, and committed (made
    visible atomically) by :meth:`flush`: when called, every ``flush_rows`` rows or
    ``flush_seconds`` seconds (checked on write), when the file reaches ``file_bytes``,
    and on :meth:`close`. Rows not yet committed are lost if the process dies; every
    commit before survives.

    Example:
        >>> import rlarrow, tempfile, os
        >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
        >>> with store.writer("scalars", flush_rows=1000) as w:
        ...     for step in range(10):
        ...         w.write({"run_id": "r", "scope": "train", "tag": "loss",
        ...                  "step": [step], "value": [1.0 / (step + 1)]})
        >>> len(store.files("scalars")), store.row_count("scalars")
        (1, 10)
    """

    def __init__(
        self,
        store: Store,
        table: str,
        *,
        row_group_bytes: int = ROW_GROUP_BYTES,
        file_bytes: int = FILE_BYTES,
        flush_rows: int | None = None,
        flush_seconds: float | None = None,
    ) -> None:
        if store.readonly:
            raise StoreError(f"{store.path}: cannot write: {store._readonly_reason}")
        self.store = store
        self.table = table
        self.spec = _schema.table(table)
        #: the layout directory the rows go to (``steps``, ``steps.2``): chosen by the first rows
        self.layout_dir = table
        self._runs: set[str] = set()  # runs whose layout was checked
        self.row_group_bytes = row_group_bytes
        self.file_bytes = file_bytes
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._schema: pa.Schema | None = None
        self._buffer: list[pa.Table] = []
        self._buffer_bytes = 0
        self._buffer_rows = 0
        self._file_rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._final: str | None = None
        self._last_flush = time.monotonic()
        self._closed = False
        self.commits: list[CommitInfo] = []

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return (f"TableWriter({self.table!r}, buffered={self._buffer_rows} rows, "
                f"uncommitted={self._file_rows + self._buffer_rows} rows, commits={len(self.commits)})")

    @property
    def pending_rows(self) -> int:
        """Rows written but not yet committed."""
        return self._file_rows + self._buffer_rows

    def write(self, data: pa.Table | pa.RecordBatch | Mapping[str, Any]) -> None:
        """Validate and buffer rows (see :meth:`Store.append` for accepted forms)."""
        if self._closed:
            raise StoreError(f"{self.store.path}: writer for {self.table!r} is closed")
        if self._schema is None:  # the first rows choose the layout (Store.layouts)
            table, self.layout_dir = self.store._place(self.table, data)
        else:
            table = _validated(self.table, data, self._schema)
        if table.num_rows == 0:
            return
        if self._schema is None:
            self._schema = table.schema
            self._runs = _data_run_ids(table)
        elif len(self.store._layout_names(self.table)) > 1:  # another run: is it in another layout?
            runs = _data_run_ids(table) - self._runs
            if runs:
                self.store._check_runs(self.table, self.layout_dir, runs)
                self._runs |= runs
        self._buffer.append(table)
        self._buffer_bytes += table.nbytes
        self._buffer_rows += table.num_rows
        if self._buffer_bytes >= self.row_group_bytes:
            self._spill()
        if (
            (self.flush_rows is not None and self.pending_rows >= self.flush_rows)
            or (self.flush_seconds is not None
                and time.monotonic() - self._last_flush >= self.flush_seconds)
            or (self._tmp is not None and self._tmp.stat().st_size >= self.file_bytes)
        ):
            self.flush()

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """Turn a failed write (disk full, file too large, ...) into a StoreError naming the file."""
        try:
            yield
        except (OSError, pa.ArrowException) as exc:
            path = self._tmp or (self.store.path / self.table)
            self.abort()
            raise StoreError(
                f"{path}: writing table {self.table!r} failed ({exc}); the rows not yet committed "
                "were dropped, and every earlier commit is intact"
            ) from exc

    def _spill(self) -> None:
        """Write the buffer as row group(s) of the temporary file."""
        if not self._buffer:
            return
        with self._io():
            self._spill_unchecked()

    def _spill_unchecked(self) -> None:
        assert self._schema is not None
        data = pa.concat_tables(self._buffer)
        self._buffer, self._buffer_bytes, self._buffer_rows = [], 0, 0
        if self._writer is None:
            self._final = _new_file_name()
            self._tmp = self.store.path / self.layout_dir / _tmp_name(self._final)
            self._writer = _open_parquet(self._tmp, self._schema, data)
        _write_row_groups(self._writer, data, self.row_group_bytes, self._tmp)
        self._file_rows += data.num_rows

    def flush(self) -> CommitInfo | None:
        """Commit everything written so far; returns what was committed (None if nothing)."""
        finished = self._finish_file()
        if finished is None:
            return None
        info = self.store._commit_files([finished])[0]
        self.commits.append(info)
        return info

    def _finish_file(self) -> tuple[str, Path, str, pa.Schema, int] | None:
        """Close the temporary file on disk (synced): what :meth:`Store._commit_files` takes."""
        self._spill()
        self._last_flush = time.monotonic()
        if self._writer is None:
            return None
        assert self._tmp is not None and self._final is not None and self._schema is not None
        with self._io():
            self._writer.close()
            self._writer = None
            _fsync_file(self._tmp)
        rows, tmp, final = self._file_rows, self._tmp, self._final
        self._file_rows, self._tmp, self._final = 0, None, None
        return self.layout_dir, tmp, final, self._schema, rows

    def abort(self) -> None:
        """Drop uncommitted rows and close."""
        self._buffer, self._buffer_bytes, self._buffer_rows = [], 0, 0
        if self._writer is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._writer.close()
            self._writer = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        self._file_rows = 0
        self._closed = True
        with contextlib.suppress(ValueError):
            self.store._writers.remove(self)

    def close(self) -> None:
        """Commit what is buffered and close."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            with contextlib.suppress(ValueError):
                self.store._writers.remove(self)




#: What every function that takes a store accepts: an open :class:`Store` or its path.
StoreLike = Store | str | os.PathLike[str]


def as_store(store: StoreLike, *, readonly: bool | None = None, create: bool = False) -> Store:
    """The :class:`Store` itself, or the store at a path opened with ``readonly``/``create``.

    The caller owns a store opened here; :func:`opened` closes it for you.

    Example:
        >>> import rlarrow, tempfile
        >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
        >>> as_store(st) is st, as_store(st.path, readonly=True).readonly
        (True, True)
    """
    if isinstance(store, Store):
        return store
    return Store.open(store, readonly=readonly, create=create)


@contextlib.contextmanager
def opened(store: StoreLike, *, readonly: bool | None = None, create: bool = False) -> Iterator[Store]:
    """The store given (left open), or the one at a path, opened here and closed on exit.

    Example:
        >>> import rlarrow, tempfile
        >>> path = tempfile.mkdtemp() + "/s"
        >>> with opened(path, create=True) as st:
        ...     st.row_count("steps")
        0
    """
    if isinstance(store, Store):
        yield store
        return
    st = Store.open(store, readonly=readonly, create=create)
    try:
        yield st
    finally:
        st.close()
