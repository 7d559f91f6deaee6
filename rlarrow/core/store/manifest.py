"""The store manifest on disk: checked parsing and checked, whole-file writes.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A manifest (``_rlarrow_store.json``) comes from a store someone may have downloaded,
shared or damaged, so nothing in it is trusted: :func:`parse` checks every key and type
the store uses, and every file name in it (listed files, ``retired``, the ``pending``
journal) must be a plain name inside its table directory, so that no manifest can make
rlarrow read, rename or delete a file outside the store.

:func:`write_file` replaces a file only with a complete, synced copy: every byte written
(a short write, as on a full disk, is retried or fails), fsync, atomic rename, directory
fsync. A failure raises :class:`~rlarrow.core.errors.StoreError` and leaves the previous file.

:func:`parse_manifest` is :func:`parse` plus what the store adds (tables of a later minor
format, schemas decoded); :func:`encode_schema` and :func:`decode_schema` are how a table's
Arrow schema is kept in the manifest; :func:`empty_manifest` is a new store's.
"""

from __future__ import annotations

import base64
import errno
import functools
import json
import os
import re
import secrets
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from rlarrow._version import __version__
from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, StoreError

__all__: list[str] = []

MANIFEST_NAME = "_rlarrow_store.json"
#: The store format of a manifest that lists a table's files in segments (segments.py):
#: what it adds cannot be ignored (the manifest's own ``files`` are then only the last of a
#: table's files), so an rlarrow of format 1 must refuse it. A store without segments is
#: written as :data:`rlarrow.core.schema.FORMAT_VERSION`, readable by every rlarrow 1.x.
SEGMENTED_FORMAT: tuple[int, int] = (2, 1)


class Expands(Protocol):
    """What reads a decoded manifest's table segments into its file lists (``segments.Segments``)."""

    @property
    def key(self) -> str:
        """Names the store."""

    def expand(self, manifest: Any, path: object) -> None:
        """Replace each table's ``segments`` by their file entries, before its own ``files``."""


# A table's first layout is its own directory (``steps``); further layouts of a table with
# tensor columns are ``steps.2``, ``steps.3``, ... (docs/format.md, "Layouts").
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}(?:\.(?:[2-9]|[1-9][0-9]{1,5}))?\Z")
_VERSION = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\Z")
# What rlarrow writes is part-<stamp>-<hex>.parquet; other writers' names (Ray, older
# versions) are accepted when they are plain: no separator, no leading dot, no control
# characters, a .parquet suffix.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]{0,254}\.parquet\Z")


def is_plain_file_name(name: object) -> bool:
    """Whether ``name`` can only mean a data file directly inside its table directory.

    >>> is_plain_file_name("part-20260101T000000000000-0a1b2c3d.parquet")
    True
    >>> [is_plain_file_name(n) for n in ("../x.parquet", "/etc/x.parquet", ".x.parquet", "a/b.parquet")]
    [False, False, False, False]
    """
    return isinstance(name, str) and _FILE_NAME.match(name) is not None and ".." not in name


def is_table_name(name: object) -> bool:
    """Whether ``name`` is a plain table (directory) name: lower-case letters, digits, ``_``.

    A further layout of a table is ``TABLE.N`` (N from 2): still one plain directory name.

    >>> [is_table_name(n) for n in ("steps", "steps.2", "steps.1", "steps.02", "../steps", ".steps")]
    [True, True, False, False, False, False]
    """
    return isinstance(name, str) and _TABLE_NAME.match(name) is not None


class ManifestChecker:
    """Collects the first problem of a manifest, named by its place (``tables.steps.files[3].name``)."""

    def __init__(self, path: object) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> CorruptFileError:
        """The CorruptFileError for the problem ``what`` at ``where`` in the manifest."""
        return CorruptFileError(
            os.fspath(self.path) if isinstance(self.path, (str, os.PathLike)) else str(self.path),
            f"damaged store manifest: {where} {what}; restore the manifest from a backup, or run "
            "`rlarrow repair STORE` to see what can be kept",
        )

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        """``value``, checked to be an object."""
        if not isinstance(value, dict):
            raise self.fail(where, f"should be an object, not {type(value).__name__}")
        return value

    def lst(self, value: Any, where: str) -> list[Any]:
        """``value``, checked to be a list."""
        if not isinstance(value, list):
            raise self.fail(where, f"should be a list, not {type(value).__name__}")
        return value

    def count(self, value: Any, where: str) -> int:
        """``value``, checked to be a count (an integer >= 0)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(where, f"should be a count (an integer >= 0), not {value!r:.60}")
        return value

    def text(self, value: Any, where: str) -> str:
        """``value``, checked to be text."""
        if not isinstance(value, str):
            raise self.fail(where, f"should be text, not {type(value).__name__}")
        return value

    def version(self, value: Any, where: str) -> str:
        """``value``, checked to be a MAJOR.MINOR version."""
        if not isinstance(value, str) or _VERSION.match(value) is None:
            raise self.fail(where, f"should be a MAJOR.MINOR version, not {value!r:.60}")
        return value

    def file_name(self, value: Any, where: str, table: str) -> str:
        """``value``, checked to be a plain file name inside ``table``'s directory."""
        if not is_plain_file_name(value):
            raise self.fail(where, f"{value!r:.200} is not a plain file name inside {table}/ (no "
                            "separators, no '..', not absolute, not hidden, ending in .parquet); "
                            "rlarrow never reads or deletes a file outside the store")
        return str(value)

    def file_entry(self, value: Any, where: str, table: str) -> None:
        """Check one file entry of ``table``: its name, rows and bytes."""
        entry = self.obj(value, where)
        for key in ("name", "rows", "bytes"):
            if key not in entry:
                raise self.fail(where, f"has no {key!r}")
        self.file_name(entry["name"], f"{where}.name", table)
        self.count(entry["rows"], f"{where}.rows")
        self.count(entry["bytes"], f"{where}.bytes")


def validate(manifest: Any, path: object) -> dict[str, Any]:
    """Check a decoded manifest's structure, types and file names; returns it.

    Raises:
        CorruptFileError: the first problem, naming its place in the manifest.
    """
    c = ManifestChecker(path)
    m = c.obj(manifest, "the manifest")
    if m.get("format") != "rlarrow-store":
        raise c.fail("'format'", f"is {m.get('format')!r:.60}, not 'rlarrow-store' (is this a store?)")
    c.version(m.get("format_version", "0.0"), "'format_version'")
    tables = c.obj(m.get("tables"), "'tables'")
    for table, value in tables.items():
        where = f"tables.{table}"
        if not is_table_name(table):
            raise c.fail(f"table {table!r:.80}", "is not a plain table name (a-z, 0-9, _; a layout TABLE.N)")
        entry = c.obj(value, where)
        c.version(entry.get("schema_version", "0.0"), f"{where}.schema_version")
        if entry.get("schema") is not None:
            c.text(entry["schema"], f"{where}.schema")
        files = c.lst(entry.get("files"), f"{where}.files")
        names = set()
        for i, f in enumerate(files):
            c.file_entry(f, f"{where}.files[{i}]", table)
            if f["name"] in names:
                raise c.fail(f"{where}.files[{i}].name", f"lists {f['name']!r} twice")
            names.add(f["name"])
        if files and entry.get("schema") is None:
            raise c.fail(f"{where}.schema", "is missing, yet the table lists files")
        rows = c.count(entry.get("rows"), f"{where}.rows")
        if rows != sum(f["rows"] for f in files):
            raise c.fail(f"{where}.rows", f"is {rows}, but its files hold {sum(f['rows'] for f in files)}")
    listed = {f"{t}/{f['name']}" for t, e in tables.items() for f in e["files"]}
    for i, rel in enumerate(c.lst(m.get("retired", []), "'retired'")):
        table, sep, name = c.text(rel, f"retired[{i}]").partition("/")
        if not sep or table not in tables:
            raise c.fail(f"retired[{i}]", f"{rel!r:.200} is not TABLE/FILE of one of the store's tables")
        c.file_name(name, f"retired[{i}]", table)
        if rel in listed:
            raise c.fail(f"retired[{i}]", f"{rel!r:.200} is listed too (committed or retired, not both)")
    retired = set(m.get("retired", []))
    for rel, at in c.obj(m.get("retired_at", {}), "'retired_at'").items():
        if rel not in retired:
            raise c.fail("'retired_at'", f"names {rel!r:.200}, which is not retired")
        c.count(at, f"retired_at[{rel!r:.200}]")
    c.count(m.get("version", 0), "'version'")
    for i, item in enumerate(c.lst(m.get("delta_due", []), "'delta_due'")):
        due = c.obj(item, f"delta_due[{i}]")
        due_table = due.get("table")
        if not isinstance(due_table, str) or due_table not in tables:
            raise c.fail(f"delta_due[{i}].table", f"{due_table!r:.80} is not one of the store's tables")
        c.count(due.get("version"), f"delta_due[{i}].version")
        if "files" in due:
            for j, f in enumerate(c.lst(due["files"], f"delta_due[{i}].files")):
                c.file_entry(f, f"delta_due[{i}].files[{j}]", due_table)
        if due.get("schema") is not None:
            c.text(due["schema"], f"delta_due[{i}].schema")
        if not isinstance(due.get("rebuilt", False), bool):
            raise c.fail(f"delta_due[{i}].rebuilt", "should be true or false")
    pending = m.get("pending")
    if pending is not None:
        p = c.obj(pending, "'pending'")
        c.text(p.get("op", ""), "pending.op")
        # A transaction's append journals files of several tables: the first in `pending`
        # itself, the others in `pending.also`, each of the same shape.
        parts = [("pending", p)]
        for i, part in enumerate(c.lst(p.get("also", []), "pending.also")):
            parts.append((f"pending.also[{i}]", c.obj(part, f"pending.also[{i}]")))
        for where, part in parts:
            _check_pending_part(c, part, where, tables, listed)
    return m


def _check_pending_part(c: ManifestChecker, p: dict[str, Any], where: str, tables: dict[str, Any],
                        listed: set[str]) -> None:
    if not isinstance(p.get("table"), str) or p["table"] not in tables:
        raise c.fail(f"{where}.table", f"{p.get('table')!r:.80} is not one of the store's tables")
    table = p["table"]
    for key in ("old", "new"):
        for i, name in enumerate(c.lst(p.get(key), f"{where}.{key}")):
            c.file_name(name, f"{where}.{key}[{i}]", table)
            if key == "new" and f"{table}/{name}" in listed:
                raise c.fail(f"{where}.new[{i}]", f"{name!r} is listed already (a journal adds new ones)")
    entries = c.lst(p.get("new_entries"), f"{where}.new_entries")
    for i, f in enumerate(entries):
        c.file_entry(f, f"{where}.new_entries[{i}]", table)
    if [f["name"] for f in entries] != p["new"]:
        raise c.fail(f"{where}.new_entries", f"do not match {where}.new")


def parse(data: bytes, path: object, segments: Expands | None = None) -> dict[str, Any]:
    """A manifest's bytes decoded and checked (``path`` names it in errors).

    A table's segments (``segments``: a reference to each) are read from ``segments`` and
    their file entries put before the table's own ``files``, as one list.

    Raises:
        CorruptFileError: not UTF-8 JSON, fails :func:`validate`, or a segment it lists
            is missing or damaged.
        FormatVersionError: a store of a later major format (whose keys may mean other things).
    """
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestChecker(path).fail("the file", f"is not JSON text ({exc})") from exc
    fmt = manifest.get("format_version") if isinstance(manifest, dict) else None
    if isinstance(fmt, str) and _VERSION.match(fmt):
        got = _schema.parse_version(fmt)
        if got[0] > SEGMENTED_FORMAT[0]:  # (said before checking keys it may define anew)
            _schema.check_version(str(path), f"store format {fmt}", got, SEGMENTED_FORMAT, store=str(path))
    _expand(manifest, path, segments)
    return validate(manifest, path)


def _expand(manifest: Any, path: object, segments: Expands | None) -> None:
    if segments is not None:
        segments.expand(manifest, path)
        return
    tables = manifest.get("tables") if isinstance(manifest, dict) else None
    for table, entry in (tables.items() if isinstance(tables, dict) else ()):
        if isinstance(entry, dict) and entry.get("segments"):
            raise ManifestChecker(path).fail(f"tables.{table}.segments",
                                             "lists segments, but there is no store to read them from")


#: Where the files a compaction or an edit replaced go (``STORE/.rlarrow-retired/TABLE/NAME``):
#: out of their table directory, so that a glob of the table counts each row once, and
#: kept for reading earlier versions until vacuumed.
RETIRED_DIR = ".rlarrow-retired"


def retired_location(root: Path, rel: str) -> Path:
    """Where the retired file ``rel`` (``TABLE/NAME``) of the store at ``root`` is kept.

    Raises:
        CorruptFileError: ``.rlarrow-retired`` or its table directory is a symbolic link
            (it could lead outside the store: rlarrow never reads, moves or deletes through one).

    Example:
        >>> retired_location(Path("runs.rlarrow"), "steps/a.parquet").as_posix()
        'runs.rlarrow/.rlarrow-retired/steps/a.parquet'
    """
    path = root / RETIRED_DIR / rel
    for directory in (root / RETIRED_DIR, path.parent):
        if directory.is_symlink():
            raise CorruptFileError(directory, "is a symbolic link; the replaced files a store keeps aside "
                                   "must be inside it (rlarrow never follows a link out of a store): "
                                   "remove the link (versions before the last compaction then cannot "
                                   "be read) or replace it with the directory itself")
    return path


def check_inside(table_dir: Path, name: str) -> Path:
    """``table_dir / name``, refused when it is a symbolic link (it could lead outside the store).

    A missing file is returned as is (the caller decides what a missing file means).

    Raises:
        CorruptFileError: the path is a symbolic link, or not a regular file.
    """
    path = table_dir / name
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:  # the table "directory" is a file, or unreadable
        raise CorruptFileError(path, f"cannot be looked at ({exc.strerror or exc}); is {table_dir} the "
                               "store's table directory?") from exc
    if stat.S_ISLNK(mode):
        raise CorruptFileError(path, "is a symbolic link; a store's data files must be regular files "
                               "inside it (rlarrow never follows a link out of a store): replace it "
                               "with the file itself, or run `rlarrow repair STORE`")
    if not stat.S_ISREG(mode):
        raise CorruptFileError(path, "is not a regular file; move it out of the store, or run "
                               "`rlarrow repair STORE`")
    return path


def write_file(directory: Path, name: str, data: bytes) -> None:
    """Replace ``directory/name`` with ``data``: whole, synced, renamed atomically, or not at all.

    Raises:
        StoreError: the write failed (full disk, read-only, permissions); the previous
            file is left as it was and no temporary file remains.
    """
    tmp = directory / f".{name}.{os.getpid()}.{secrets.token_hex(3)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise write_error(directory / name, exc) from exc
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # pragma: no cover - POSIX write returns >0 or raises
                    raise OSError(errno.ENOSPC, "no bytes written")
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / name)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise write_error(directory / name, exc) from exc
    fsync_dir(directory)


def write_error(path: Path, exc: OSError) -> StoreError:
    """A StoreError for a failed write at ``path``, saying what to do about it."""
    reason = {
        errno.ENOSPC: "the disk is full: free space and retry",
        errno.EDQUOT: "the disk quota is used up: free space and retry",
        errno.EFBIG: "a file size limit was reached (ulimit -f)",
        errno.EROFS: "the store is on read-only media: open it with readonly=True to read it",
        errno.EACCES: "permission denied: open it with readonly=True to read it, or ask for write "
                      "access",
        errno.EPERM: "permission denied: open it with readonly=True to read it, or ask for write "
                     "access",
    }.get(exc.errno or 0, "")
    return StoreError(f"{path}: could not write ({exc.strerror or exc}){'; ' + reason if reason else ''}. "
                      f"{NOTHING_COMMITTED}")


#: What :func:`write_error` says of the operation; one that committed part of its work first
#: says what it did instead (:func:`failure_cause`).
NOTHING_COMMITTED = "Nothing of this operation was committed; every earlier commit is intact"


def failure_cause(exc: BaseException) -> str:
    """Why a step failed, without :data:`NOTHING_COMMITTED`: for an operation that committed earlier steps.

    Example:
        >>> failure_cause(StoreError(f"s/m: could not write (disk full). {NOTHING_COMMITTED}"))
        's/m: could not write (disk full).'
    """
    return str(exc).replace(f" {NOTHING_COMMITTED}", "").replace(NOTHING_COMMITTED, "").rstrip()


def fsync_dir(path: Path) -> None:
    """Fsync a directory (a rename inside it becomes durable); a no-op where that is impossible."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def encode_schema(schema: pa.Schema) -> str:
    """How ``schema`` is kept in the manifest (``tables.NAME.schema``): Arrow IPC, base64.

    Example:
        >>> import pyarrow as pa
        >>> decode_schema(encode_schema(pa.schema([("step", pa.int64())]))).names
        ['step']
    """
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


@functools.lru_cache(maxsize=64)
def decode_schema(text: str) -> pa.Schema:
    """The Arrow schema :func:`encode_schema` wrote.

    Raises ValueError (binascii.Error) or pyarrow.ArrowInvalid when ``text`` is damaged.

    Cached: every commit asks for its table's schema, and a schema is immutable.
    """
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))


def parse_manifest(data: bytes, path: Any, segments: Expands | None = None) -> dict[str, Any]:
    """A store manifest's bytes, checked (``path`` names it in errors; ``segments``: see :func:`parse`).

    Every key, type and file name is checked (:func:`validate`): a file name that could
    lead outside its table directory is refused here, before anything reads, renames or
    deletes it.

    Raises:
        CorruptFileError: not a store manifest, or a damaged one.
    """
    global _last_checked, _last_tree, _last_key
    # (of the same store too: a copy of a store with the same bytes may lack its segments)
    again = data == _last_checked and (segments.key if segments is not None else None) == _last_key
    if again and _last_tree is not None:  # a writer re-reading what it wrote (or read) last
        copied: dict[str, Any] = copy_tree(_last_tree)
        return copied
    manifest: dict[str, Any]
    if again:  # the same bytes as the last manifest checked
        manifest = json.loads(data)
        _expand(manifest, path, segments)
    else:
        manifest = parse(data, path, segments)
    _complete(manifest)
    for name, entry in manifest["tables"].items():
        if entry.get("schema") is not None and not again:
            try:
                decode_schema(entry["schema"])  # damaged here, say so now, not on first use
            except (ValueError, TypeError, OSError, pa.ArrowException) as exc:
                raise CorruptFileError(path, f"damaged store manifest: tables.{name}.schema cannot be "
                                       f"decoded ({exc}); restore the manifest from a backup") from exc
    _last_checked, _last_tree = data, copy_tree(manifest)
    _last_key = segments.key if segments is not None else None
    return manifest


def _complete(manifest: dict[str, Any]) -> None:
    for name in _schema.TABLE_NAMES:  # a table added by a later minor format: empty here
        manifest["tables"].setdefault(name, {
            "schema_version": _schema.format_version(_schema.table(name).version),
            "schema": None, "rows": 0, "files": []})


def copy_tree(value: Any) -> Any:
    """A copy of a manifest (or a part) as JSON would give it back, to change and write.

    Dicts and lists (tuples as lists) are copied at every depth but the entries of ``files``
    lists (flat dicts of scalars, the bulk), which are shared: rlarrow never changes a file
    entry in place (a changed file is a new dict), and a manifest handed out to change
    (``Store.maintenance().manifest``, ``Store.manifest()``) has entries of its own. Copying
    each entry cost 2.5 ms per copy at 10,000 files, two copies per commit.
    """
    if isinstance(value, dict):
        return {key: list(item) if key == "files" and type(item) is list else copy_tree(item)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [copy_tree(item) for item in value]
    return value


# The bytes of the manifest parse_manifest last checked whole, or this process last wrote (made
# from a checked manifest by rlarrow's own changes): checking is a pure function of them, and
# took 8 ms of a 20 ms commit at 1,500 files (a writer reads the manifest again at each commit).
# Bytes that differ in any way, a manifest another process wrote or damaged, are checked.
_last_checked: bytes | None = None
# That manifest as parse_manifest returns it (see copy_tree), so that a writer's next read copies
# it instead of parsing the bytes again: json.loads took 4.5 ms of a 25 ms commit
# at 10,000 files. Set with _last_checked, always the two together.
_last_tree: dict[str, Any] | None = None
# The store the two are of (``Expands.key``; None: read without one).
_last_key: str | None = None


def forget() -> None:
    """Forget the manifest this process last checked or wrote: the next read parses the bytes."""
    global _last_checked, _last_tree
    _last_checked = _last_tree = None


def written(data: bytes, manifest: dict[str, Any] | None = None, key: str | None = None) -> None:
    """Note the manifest bytes this process has just written, and what they encode.

    ``manifest`` is the object ``data`` was encoded from (its keys all strings, file
    entries as rlarrow writes them); without it the next read parses ``data``. ``key``
    names the store (``Expands.key``).
    """
    global _last_checked, _last_tree, _last_key
    tree = None
    if manifest is not None:
        tree = copy_tree(manifest)
        _complete(tree)
    _last_checked, _last_tree, _last_key = data, tree, key


def check_manifest_versions(manifest: dict[str, Any], where: str) -> None:
    """Check the format and table schema versions a manifest records."""
    fmt = _schema.parse_version(manifest.get("format_version", "0.0"))
    # (2.0 is format 1 with segments: this rlarrow writes either, as the store needs)
    _schema.check_version(where, f"store format {_schema.format_version(fmt)}", fmt,
                          SEGMENTED_FORMAT if fmt[0] == SEGMENTED_FORMAT[0] else _schema.FORMAT_VERSION,
                          store=where)
    for name, entry in manifest["tables"].items():
        try:
            current = _schema.table(name.partition(".")[0]).version  # (a layout: its table's version)
        except KeyError:
            continue  # a table of a newer minor format: the format check warned
        got = _schema.parse_version(entry.get("schema_version", "0.0"))
        _schema.check_version(where, f"table {name!r} schema {_schema.format_version(got)}", got,
                              current, store=where)


def empty_manifest() -> dict[str, Any]:
    """The manifest of a new, empty store (every table of this format, no file)."""
    return {
        "format": "rlarrow-store",
        "format_version": _schema.format_version(_schema.FORMAT_VERSION),
        "writer": f"rlarrow {__version__}",
        "created_at": now_iso(),
        "updated_at": now_iso(),
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


def now_iso() -> str:
    """The time now, as the manifest records it (ISO 8601, UTC, microseconds)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")

