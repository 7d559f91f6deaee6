"""The manifest's segments: a long table file list kept in immutable pieces.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

A store of many files would otherwise rewrite its whole file list at every commit (8 ms of
JSON at 10,000 files, growing with each). So :func:`encode_manifest` writes each table's
list as whole segments of :data:`SEGMENT_FILES` entries, files in ``_rlarrow_segments/``
named for the table and the digest of their bytes, written once, before the first manifest
that refers to them, and never changed; the manifest lists them by reference and keeps the
rest of the list itself. A commit then writes at most that many entries, as Apache
Iceberg's snapshots reuse their manifest files. :class:`Segments` reads them back: a
segment whose bytes do not match its name, or that is missing, is a
:class:`~rlarrow.core.errors.CorruptFileError` naming it.

Example:
    >>> import rlarrow, tempfile, os
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"), auto_compact=None)
    >>> for step in range(SEGMENT_FILES + 3):
    ...     _ = store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
    ...                                  "step": [step], "value": [1.0]})
    >>> len(os.listdir(store.path / SEGMENTS_DIR)), len(store.files("scalars"))
    (1, 259)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, StoreError
from rlarrow.core.store.entries import open_lock, read_entry
from rlarrow.core.store.manifest import SEGMENTED_FORMAT, ManifestChecker, fsync_dir, write_error, write_file

__all__: list[str] = []

#: the directory (in the store's root) of the manifest's segments: a table's file list
#: beyond the last SEGMENT_FILES entries, in immutable pieces (docs/format.md, "The manifest")
SEGMENTS_DIR = "_rlarrow_segments"
#: files per segment. A table's list is written as its whole segments of this many entries
#: (each written once, then referenced by name) and the rest in the manifest itself, so a
#: commit writes at most this many file entries, however many the store has.
SEGMENT_FILES = 256
# A segment is named for its table and the BLAKE2b-128 digest of its bytes.
_SEGMENT_NAME = re.compile(r"([a-z][a-z0-9_.]{0,70})-([0-9a-f]{32})\.json\Z")


def is_segment_name(name: object, table: str) -> bool:
    """Whether ``name`` is the plain name of one of ``table``'s manifest segments.

    >>> is_segment_name("steps-" + "0" * 32 + ".json", "steps")
    True
    >>> [is_segment_name(n, "steps") for n in ("../steps-x.json", "memory-" + "0" * 32 + ".json")]
    [False, False]
    """
    match = _SEGMENT_NAME.match(name) if isinstance(name, str) else None
    return match is not None and match.group(1) == table


def _digest(data: bytes) -> str:
    # hashlib's BLAKE2b (a maintained C implementation): 128 bits name a segment's bytes
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class Segments:
    """Where a manifest's segments are read from: a store's ``_rlarrow_segments`` directory.

    Attributes:
        key: names the store (its path or URI), for the cache of segments it has
        read: a segment's bytes by name; raises FileNotFoundError when there is none
        where: the segment's path as errors name it
        exists: whether the segment is there (asked of one this process read before)
    """

    key: str
    read: Callable[[str], bytes]
    where: Callable[[str], str]
    exists: Callable[[str], bool]

    def expand(self, manifest: Any, path: object) -> None:
        """Replace each table's ``segments`` in a decoded manifest by their file entries.

        Raises:
            CorruptFileError: a reference is malformed, or its segment missing or damaged.
        """
        _expand(manifest, path, self)


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (a link is not looked through)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def local_segments(root: Path) -> Segments:
    """The segments of the store at ``root`` (never through a symbolic link)."""
    directory = root / SEGMENTS_DIR

    def read(name: str) -> bytes:
        if directory.is_symlink():
            raise CorruptFileError(directory, "is a symbolic link; rlarrow never follows a link out of "
                                   "a store: move it aside and restore the directory from a backup")
        fd = os.open(directory / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read()

    return Segments(os.fspath(root), read, lambda name: os.fspath(directory / name),
                    lambda name: _is_file(directory / name))


# Segments read or written by this process, by name: a name is its bytes' digest, so an
# entry never goes stale. Their file entries are shared by every manifest tree made from
# them, which is why no file entry is ever changed in place (a changed file is a new dict).
_segment_entries: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
_SEGMENT_CACHE = 4096  # (a million files)
# The segments a store's tables were last read or written as, by (Segments.key, table):
# [(name, entries, reference)], so that a commit finds its table's whole segments unchanged
# with a list comparison (identical entries compare in C) and writes only what is new.
_positions: dict[tuple[str, str], list[tuple[str, list[dict[str, Any]], dict[str, Any]]]] = {}


# (a segment lost: the table's Delta log still lists its files, so they are not lost with it)
_DELTA_HINT = ("; or rebuild the list from the table's Delta log, which lists the same files: "
               "`rlarrow repair STORE --apply` (meanwhile Delta Lake readers read the table through it: "
               "deltalake.DeltaTable('STORE/TABLE'), polars.scan_delta)")


def _remember(name: str, entries: list[dict[str, Any]]) -> None:
    _segment_entries.pop(name, None)
    _segment_entries[name] = entries  # (last: the most recent)
    while len(_segment_entries) > _SEGMENT_CACHE:
        with contextlib.suppress(KeyError):  # (another thread's eviction)
            _segment_entries.popitem(last=False)


def forget(key: str | None = None) -> None:
    """Drop what this process knows of segments (of the store ``key``; None: of every store).

    After ``Store.maintenance()``: a tool may have changed file entries in place, which the
    cached segments would share.
    """
    _segment_entries.clear()
    for k in [k for k in _positions if key is None or k[0] == key]:
        _positions.pop(k, None)


def _load_segment(c: ManifestChecker, segments: Segments, name: str, count: int, rows: int,
                  where: str) -> list[dict[str, Any]]:
    try:
        return _read_segment(c, segments, name, count, rows, where)
    except CorruptFileError as exc:
        exc.segment = name  # type: ignore[attr-defined]  # (what `rlarrow repair` rebuilds from the Delta log)
        raise


def _read_segment(c: ManifestChecker, segments: Segments, name: str, count: int, rows: int,
                  where: str) -> list[dict[str, Any]]:
    entries = _segment_entries.get(name)
    at = segments.where(name)
    if entries is not None and not segments.exists(name):
        entries = None  # (known here, yet gone from the store: say so, as any other process will)
    if entries is None:
        try:
            data = segments.read(name)
        except FileNotFoundError:
            raise CorruptFileError(at, f"is missing, yet the store's manifest lists it ({where}); the "
                                   f"store's file list cannot be read without it: restore it from a "
                                   f"backup of the store{_DELTA_HINT}") from None
        except OSError as exc:
            raise CorruptFileError(at, f"cannot be read ({exc.strerror or exc}), yet the store's "
                                   f"manifest lists it ({where}); a segment must be a plain file in the "
                                   "store") from exc
        if _digest(data) != name[-37:-5]:
            raise CorruptFileError(at, "is damaged: its bytes do not match the digest in its name; "
                                   f"restore it from a backup of the store{_DELTA_HINT}")
        try:
            loaded = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # pragma: no cover - digest checked
            raise CorruptFileError(at, f"is not JSON text ({exc})") from exc
        if not isinstance(loaded, list):
            raise CorruptFileError(at, "is not a list of file entries")
        check = ManifestChecker(at)
        for i, f in enumerate(loaded):  # (named here, by their place in the segment)
            check.file_entry(f, f"entry [{i}]", name.rsplit("-", 1)[0])
        entries = loaded
    held = sum(f["rows"] for f in entries)
    if len(entries) != count or held != rows:
        raise c.fail(where, f"says {count} files of {rows} rows, but its segment {name} holds "
                     f"{len(entries)} files of {held} rows")
    _remember(name, entries)
    return entries


def _expand(manifest: Any, path: object, segments: Segments) -> None:
    """Put each table's segments' file entries before the files the manifest itself lists."""
    tables = manifest.get("tables") if isinstance(manifest, dict) else None
    if not isinstance(tables, dict):
        return  # (validate names the problem)
    c = ManifestChecker(path)
    for table, entry in tables.items():
        _positions[(segments.key, table)] = []  # (a table a later manifest does not segment)
        if not isinstance(entry, dict) or "segments" not in entry:
            continue
        refs = c.lst(entry.pop("segments"), f"tables.{table}.segments")
        tail = c.lst(entry.get("files"), f"tables.{table}.files")
        if not refs:
            continue
        files: list[Any] = []
        known = []
        for i, ref in enumerate(refs):
            where = f"tables.{table}.segments[{i}]"
            ref = c.obj(ref, where)
            name = ref.get("name")
            if not isinstance(name, str) or not is_segment_name(name, table):
                raise c.fail(f"{where}.name", f"{name!r:.200} is not a segment name of table {table!r} "
                             "(TABLE-<32 hex digits>.json, in the store's _rlarrow_segments)")
            entries = _load_segment(c, segments, name, c.count(ref.get("files"), f"{where}.files"),
                                    c.count(ref.get("rows"), f"{where}.rows"), where)
            files.extend(entries)
            known.append((name, entries, {"name": name, "files": ref["files"], "rows": ref["rows"]}))
        entry["files"] = files + tail
        _positions[(segments.key, table)] = known


def _segment(root: Path, key: str, table: str, files: list[dict[str, Any]],
             settled: dict[tuple[str, str], list[Any]]) -> list[dict[str, Any]]:
    """The references to ``files``' whole segments, writing those not yet in the store.

    What the store's tables are segmented as is recorded in ``settled``, for
    :data:`_positions` once the manifest naming them is written: a segment written for a
    manifest that then failed is listed nowhere, and a vacuum may delete it.
    """
    whole = len(files) // SEGMENT_FILES
    known = _positions.get((key, table), [])
    now = []
    made = False
    for i in range(whole):
        chunk = files[i * SEGMENT_FILES:(i + 1) * SEGMENT_FILES]
        if i < len(known) and known[i][1] == chunk:  # (the same dicts: compared by identity, in C)
            now.append(known[i])
            continue
        data = json.dumps(chunk, separators=(",", ":")).encode("utf-8")
        name = f"{table}-{_digest(data)}.json"
        directory = root / SEGMENTS_DIR
        if not made:
            if directory.is_symlink():  # (a StoreError: the commit it is part of is taken back)
                raise StoreError(f"{directory}: could not write (it is a symbolic link, and rlarrow never "
                                 "writes through a link out of a store: move it aside). Nothing of this "
                                 "operation was committed; every earlier commit is intact")
            try:
                directory.mkdir(exist_ok=True)
            except OSError as exc:
                raise write_error(directory, exc) from exc
            fsync_dir(root)
            made = True
        write_file(directory, name, data)
        _remember(name, chunk)
        now.append((name, chunk, {"name": name, "files": len(chunk), "rows": sum(f["rows"] for f in chunk)}))
    settled[(key, table)] = now
    return [ref for _, _, ref in now]


def segment_names(data: bytes) -> set[str]:
    """The segments the manifest ``data`` (its bytes, as on disk) refers to: what a vacuum keeps.

    Raises:
        CorruptFileError: ``data`` is not a manifest's JSON (a vacuum then deletes nothing).
    """
    try:
        manifest = json.loads(data.decode("utf-8"))
        return {ref["name"] for entry in manifest["tables"].values() for ref in entry.get("segments", [])}
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptFileError("manifest", f"cannot list its segments ({exc})") from exc


def delete_segments(root: Path, keep: set[str]) -> None:
    """Delete the segments in ``root``'s segment directory that are not in ``keep``."""
    directory = root / SEGMENTS_DIR
    if directory.is_symlink() or not directory.is_dir():
        return
    for p in directory.iterdir():
        if _SEGMENT_NAME.match(p.name) and p.name not in keep:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    fsync_dir(directory)


def encode_manifest(manifest: dict[str, Any], root: Path) -> tuple[bytes, Callable[[], None]]:
    """The bytes of the manifest of the store at ``root``, writing the segments it refers to.

    A table of at least :data:`SEGMENT_FILES` files lists its first whole segments by
    reference (``segments``); ``files`` holds the rest. A segment is written the first time
    it is referenced (whole, synced, before the manifest that names it) and never changed.
    The second value is to be called once the bytes are the store's manifest: the next
    encoding then takes the segments they name as written.

    Raises:
        StoreError: a segment could not be written (full disk, ...); nothing was replaced.
    """
    key = os.fspath(root)
    tables = {}
    settled: dict[tuple[str, str], list[Any]] = {}
    for table, entry in manifest["tables"].items():
        files = entry["files"]
        if len(files) < SEGMENT_FILES:
            settled[(key, table)] = []
            tables[table] = entry
            continue
        refs = _segment(root, key, table, files, settled)
        out = {k: v for k, v in entry.items() if k != "files"}
        out["segments"] = refs
        out["files"] = files[len(refs) * SEGMENT_FILES:]
        tables[table] = out
    # Segments are format 2.0 (an earlier rlarrow would read only the manifest's own files);
    # a store without them stays of format 1 (FORMAT_VERSION), which every rlarrow 1.x reads.
    # A later minor of 2 (features this rlarrow keeps but does not know) stays what it is.
    # (2.0, which rlarrow wrote before the videos table, is an older minor: made 2.1 or 1.4)
    fmt = _schema.parse_version(manifest.get("format_version", "1.0"))
    if any("segments" in t for t in tables.values()):
        if fmt[0] != SEGMENTED_FORMAT[0] or fmt < SEGMENTED_FORMAT:
            manifest["format_version"] = _schema.format_version(SEGMENTED_FORMAT)
    elif fmt[0] == SEGMENTED_FORMAT[0] and fmt <= SEGMENTED_FORMAT:
        manifest["format_version"] = _schema.format_version(_schema.FORMAT_VERSION)
    # compact: with indent= the json module leaves its C encoder for the Python one, which
    # made this dump most of a commit's cost at 1,500 files (5 ms of 30)
    data = json.dumps({**manifest, "tables": tables}, separators=(",", ":")).encode("utf-8")
    return data, functools.partial(_positions.update, settled)


def write_whole(root: Path, manifest: dict[str, Any], segments: Segments | None = None) -> None:
    """Write a manifest rebuilt by repair (its lists whole), under the lock the caller holds.

    It is checked whole first (nothing is written otherwise); the caches of this process
    forget the store's manifest and segments.
    """
    from rlarrow.core.store import manifest as _manifest

    path = root / _manifest.MANIFEST_NAME
    data = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
    _manifest.parse(data, path, segments)  # (whole and valid, or nothing is written)
    write_file(root, _manifest.MANIFEST_NAME, data)
    _manifest.forget()
    forget(os.fspath(root))


def restore_lists(root: Path, *, apply: bool = False) -> list[str]:
    """Rebuild from their Delta logs the file lists of tables whose segments are lost or damaged.

    A table's Delta log lists the files of each store version, so a lost segment loses no
    file: the table's list at the manifest's version is its log's, when the log is of that
    version and ends with the manifest's own files and rows. With ``apply`` the manifest is
    written with those lists whole (under the store's lock; the next commit cuts segments
    again). ``rlarrow repair`` runs this when the store cannot be opened for a segment.

    Returns:
        One line per table, what was (or, without ``apply``, would be) rebuilt.

    Raises:
        CorruptFileError: a table's list cannot be rebuilt (its log is behind the manifest,
            or does not end with the manifest's own files): restore the store from a backup.
    """
    import fcntl

    from rlarrow.core.store import manifest as _manifest
    from rlarrow.core.store.delta import DeltaLog

    fd = open_lock(root) if apply else -1
    try:
        if apply:
            fcntl.flock(fd, fcntl.LOCK_EX)  # (as every writer does: none commits meanwhile)
        path = root / _manifest.MANIFEST_NAME
        try:
            manifest = json.loads(read_entry(path, what="the store's manifest").decode("utf-8"))
            tables = list(manifest["tables"].items())
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptFileError(path, f"is not a manifest whose lists can be rebuilt ({exc})") from exc
        if (root / SEGMENTS_DIR).is_symlink():
            raise CorruptFileError(root / SEGMENTS_DIR, "is a symbolic link; rlarrow never follows a link "
                                   "out of a store: move it aside (and its segments back into the store, "
                                   "if they are whole), then repair again")
        segments = local_segments(root)
        lines = []
        for table, entry in tables:
            if not isinstance(entry, dict) or not isinstance(entry.get("files"), list):
                raise CorruptFileError(path, f"tables.{table} is not a table entry whose list can be rebuilt")
            refs = entry.get("segments") or []
            try:
                for i, ref in enumerate(refs):
                    _segment_entries.pop(ref["name"], None)  # (read from disk, not this process's cache)
                    _load_segment(ManifestChecker(path), segments, ref["name"], ref["files"], ref["rows"],
                                  f"tables.{table}.segments[{i}]")
                continue  # every segment whole
            except (CorruptFileError, KeyError, TypeError) as exc:
                lost = exc
            log = DeltaLog(root / table)
            log.refresh()
            files: list[dict[str, Any]] = [{"name": f.name, "rows": f.rows, "bytes": f.bytes}
                                           for f in log.ordered()]
            own = [f["name"] for f in entry["files"]]
            due = manifest.get("delta_due", [])  # (written, unless the log is still before its version)
            behind = any(isinstance(d, dict) and d.get("table") == table
                         and log.store_version < int(d.get("version", 0)) for d in due)
            if behind or log.store_version > manifest.get("version", 0) \
                    or [f["name"] for f in files[len(files) - len(own):]] != own \
                    or sum(f["rows"] for f in files) != entry["rows"] \
                    or not all(_manifest.is_plain_file_name(f["name"]) for f in files):
                raise CorruptFileError(root / table / "_delta_log", "cannot stand in for the lost segment: "
                                       "it is behind or ahead of the manifest, or does not end with its "
                                       f"files; restore the store from a backup ({lost})")
            del entry["segments"]
            entry["files"] = files
            lines.append(f"{table}: {'rebuilt' if apply else 'would rebuild'} its list of {len(files)} "
                         f"files from its Delta log ({lost})")
        if apply and lines:
            write_whole(root, manifest, segments)
        return lines
    finally:
        if fd >= 0:
            os.close(fd)
