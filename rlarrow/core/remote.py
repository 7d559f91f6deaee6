"""A store on object storage (S3, GCS, Azure, HDFS, ...) through pyarrow filesystems.

A store is a manifest (``_rlarrow_store.json``) and immutable Parquet files, so it can live
anywhere pyarrow can read. Writing needs a local (or shared POSIX) directory: a store's
commits rename files and take a lock, which object stores do not offer. The way to a
bucket is to write locally, then :func:`push` (or ``rlarrow push STORE URI``): it copies
the committed files that are not there yet and writes the manifest last, so a reader of the
bucket sees either the old store or the new one, whole.

:class:`RemoteStore` reads a store at a URI (``s3://bucket/runs.rlarrow``,
``gs://...``, ``file:///...``) or on a given ``pyarrow.fs.FileSystem``: its tables as
pyarrow datasets (DuckDB and Polars scan those), or whole; :mod:`rlarrow.train.ray` and
:class:`rlarrow.train.torch.StreamingDataset` take it as they take a local store.

Example:
    >>> import rlarrow, tempfile, os
    >>> from rlarrow.core.remote import RemoteStore, push
    >>> tmp = tempfile.mkdtemp()
    >>> with rlarrow.Store.create(f"{tmp}/local") as st:
    ...     _ = st.append("scalars", {"run_id": "r", "scope": "train", "tag": "train/loss",
    ...                               "step": [0, 1], "value": [1.0, 0.5]})
    ...     copied = push(st, f"file://{tmp}/bucket/runs.rlarrow", progress=False)
    >>> remote = RemoteStore(f"file://{tmp}/bucket/runs.rlarrow")
    >>> remote.read("scalars", columns=["step", "value"]).to_pydict()
    {'step': [0, 1], 'value': [1.0, 0.5]}
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError, StoreError
from rlarrow.core.progress import bar
from rlarrow.core.store import (
    LOCK_NAME,
    MANIFEST_NAME,
    Store,
    StoreLike,
    StoreReader,
    as_store,
    check_manifest_versions,
    decode_schema,
    layout_number,
    parse_manifest,
    roll_forward,
    table_of,
    union_layouts,
)
from rlarrow.core.store.delta import DeltaLog, manifest_at
from rlarrow.core.store.manifest import SEGMENTED_FORMAT, check_inside, is_plain_file_name
from rlarrow.core.store.repair import StoreInfo, table_infos
from rlarrow.core.store.segments import SEGMENTS_DIR, Segments

__all__ = ["RemoteStore", "push"]

_COPY_CHUNK = 8 << 20


def resolve(location: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None,
            ) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of a store location: a URI, or a path on ``filesystem`` (default: local)."""
    text = os.fspath(location)
    if filesystem is not None:
        return filesystem, text.rstrip("/")
    if "://" in text:
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, ValueError, OSError) as exc:
            raise StoreError(f"{text}: pyarrow cannot open this location ({exc}); give a URI it "
                             "knows (s3://, gs://, abfs://, hdfs://, file://) or pass filesystem=") from exc
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(text)


class _BucketLog(DeltaLog):
    """A table's Delta log on a pyarrow filesystem, for reading an earlier version there."""

    def __init__(self, filesystem: pafs.FileSystem, directory: str) -> None:
        super().__init__(Path(directory))
        self._fs = filesystem

    def _check_dir(self) -> bool:
        return bool(self._fs.get_file_info(os.fspath(self.log_dir)).type == pafs.FileType.Directory)

    def exists(self) -> bool:
        return self._read(self._path(0)) is not None

    def _read(self, path: Path) -> bytes | None:
        try:
            with self._fs.open_input_stream(os.fspath(path)) as f:
                data: bytes = f.read()
        except FileNotFoundError:
            return None
        return data


class _Bucket:
    """Where :func:`~rlarrow.core.store.delta.manifest_at` reads a pushed store's logs and files."""

    gone = "never pushed there: it was replaced before a push copied it"

    def __init__(self, filesystem: pafs.FileSystem, root: str) -> None:
        self.filesystem, self.root = filesystem, root

    def log(self, table: str) -> DeltaLog:
        return _BucketLog(self.filesystem, f"{self.root}/{table}")

    def exists(self, rel: str) -> bool:
        return bool(self.filesystem.get_file_info(f"{self.root}/{rel}").type == pafs.FileType.File)


class RemoteStore:
    """A read-only store on any pyarrow filesystem, as its manifest listed it when opened.

    Args:
        location: a URI (``s3://bucket/runs.rlarrow``, ``file:///data/runs.rlarrow``) or,
            with ``filesystem``, a path on it.
        filesystem: a ``pyarrow.fs.FileSystem`` (credentials, region, endpoint); default:
            the one the URI names.
        version: the store as it was at this version (:attr:`rlarrow.Store.version`), from
            its tables' Delta logs, as :meth:`rlarrow.Store.open` reads one; the files of that
            version must have been pushed (a push copies the files of the version it pushes).

    Raises:
        StoreError: no store there.
        NotFoundError: no such version, or its files were never pushed.
        CorruptFileError: a damaged manifest.
        FormatVersionError: a store this rlarrow cannot read (see :meth:`rlarrow.Store.open`).
    """

    def __init__(self, location: str | os.PathLike[str], *,
                 filesystem: pafs.FileSystem | None = None, version: int | None = None) -> None:
        self.filesystem, self.root = resolve(location, filesystem)
        self.path = os.fspath(location)
        segments = Segments(f"{self.path}|remote", self._read_segment,
                            lambda name: f"{self.path}/{SEGMENTS_DIR}/{name}",
                            lambda name: self._exists(f"{SEGMENTS_DIR}/{name}"))
        data = self._manifest_bytes()
        for attempt in range(3):
            try:
                manifest = parse_manifest(data, self.path + "/" + MANIFEST_NAME, segments)
                break
            except CorruptFileError:
                # (a segment a vacuum deleted once a newer manifest stopped naming it: read that)
                again = self._manifest_bytes()
                if again == data or attempt == 2:
                    raise
                data = again
        check_manifest_versions(manifest, self.path)
        roll_forward(manifest, self._exists)  # a journaled step with all its files here: committed
        if version is not None and version != manifest.get("version", 0):
            manifest = manifest_at(self.path, manifest, version, where=_Bucket(self.filesystem, self.root))
        self._manifest = manifest

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={e['rows']}" for t, e in self._manifest["tables"].items() if e["rows"])
        return f"RemoteStore({self.path!r}, {counts or 'empty'})"

    def _manifest_bytes(self) -> bytes:
        try:
            with self.filesystem.open_input_stream(f"{self.root}/{MANIFEST_NAME}") as f:
                data: bytes = f.read()
        except FileNotFoundError:
            raise StoreError(f"{self.path}: no rlarrow store here (no {MANIFEST_NAME}); copy one "
                             "there with rlarrow.core.remote.push(store, uri)") from None
        return data

    def _read_segment(self, name: str) -> bytes:
        with self.filesystem.open_input_stream(f"{self.root}/{SEGMENTS_DIR}/{name}") as f:
            data: bytes = f.read()
        return data

    def _exists(self, rel: str) -> bool:
        return bool(self.filesystem.get_file_info(f"{self.root}/{rel}").type != pafs.FileType.NotFound)

    def tables(self) -> list[str]:
        """Names of the store's tables (a table's further layouts, ``TABLE.N``, are the table's)."""
        return [n for n in self._manifest["tables"] if n == table_of(n)]

    @property
    def version(self) -> int:
        """The store version pushed here (:attr:`rlarrow.Store.version` when it was pushed)."""
        return int(self._manifest.get("version", 0))

    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest as this object read it when opened (``docs/format.md``)."""
        return copy.deepcopy(self._manifest)

    def layout_dirs(self, table: str, layout: int | None = None) -> list[str]:
        """The layout directories of ``table`` that ``layout`` selects (None: all of them).

        As :meth:`rlarrow.Store.layout_dirs`: a file's layout is its directory's name.
        """
        _schema.table(table)
        names = sorted((n for n in self._manifest["tables"] if table_of(n) == table), key=layout_number)
        if layout is None:
            return names or [table]
        chosen = [n for n in names if layout_number(n) == layout]
        if not chosen:
            raise StoreError(f"{self.path}: table {table!r} has no layout {layout} (it has "
                             f"{', '.join(str(layout_number(n)) for n in names) or 'none'})")
        return chosen

    def layouts(self, table: str) -> list[int]:
        """The layout numbers of ``table`` (see :meth:`rlarrow.Store.layouts`)."""
        return [layout_number(n) for n in self.layout_dirs(table, None)]

    def files(self, table: str, *, layout: int | None = None) -> list[str]:
        """Paths (on :attr:`filesystem`) of the committed Parquet files of ``table``, oldest first.

        ``layout``: one layout's files (:meth:`rlarrow.Store.layouts`); None: every layout's.
        """
        out = []
        for name in self.layout_dirs(table, layout):
            entry = self._manifest["tables"].get(name, {"files": []})
            out += [f"{self.root}/{name}/{f['name']}" for f in entry["files"]]
        return out

    def row_count(self, table: str, *, layout: int | None = None) -> int:
        """Committed rows of ``table`` (of one layout with ``layout``)."""
        tables = self._manifest["tables"]
        return sum(int(tables.get(n, {}).get("rows", 0)) for n in self.layout_dirs(table, layout))

    def schema(self, table: str, *, layout: int | None = None) -> pa.Schema | None:
        """The store's concrete Arrow schema of ``table`` (None until it holds data).

        With several layouts and no ``layout``: the schema they are read with together
        (columns whose types differ left out), as :meth:`rlarrow.Store.schema` gives it.
        """
        names = self.layout_dirs(table, layout)
        return union_layouts([(n, self._layout_schema(n)) for n in names])[0]

    def _layout_schema(self, name: str) -> pa.Schema | None:
        text = self._manifest["tables"].get(name, {}).get("schema")
        return None if text is None else decode_schema(text)

    def info(self) -> StoreInfo:
        """Tables, row counts, runs, schema versions and the bytes listed (what ``rlarrow info`` shows).

        From the manifest and the ``runs`` table; the files themselves are not looked at (no
        ``problems``: ``rlarrow repair`` works on the local store that was pushed).
        """
        from rlarrow.core.store.catalog import run_rows

        m = self._manifest
        tables = table_infos(m)
        columns = ["run_id", "name", "source", "created_at", "num_envs", "metadata"]
        runs = run_rows(self.read("runs", columns=columns)) if self.row_count("runs") else []
        return StoreInfo(path=self.path, format_version=m["format_version"], writer=m.get("writer", "?"),
                         created_at=m.get("created_at", "?"), tables=tables, runs=runs,
                         bytes_on_disk=sum(t.bytes for t in tables.values()),
                         version=int(m.get("version", 0)))

    def dataset(self, table: str, *, layout: int | None = None) -> Any:
        """A ``pyarrow.dataset.Dataset`` over ``table``'s files (DuckDB and Polars scan it).

        Several layouts read together give the columns they share (see :meth:`schema`).
        """
        import pyarrow.dataset as ds

        from rlarrow.core.store.checked import checked_format

        checked = checked_format()  # (every page checked against its CRC-32 as it is read)
        schema = self.schema(table, layout=layout) or _schema.table(table).arrow_schema()
        located = [(n, self._layout_schema(n) or schema, self.files(table, layout=layout_number(n)))
                   for n in self.layout_dirs(table, layout)]
        located = [(n, own, files) for n, own, files in located if files]
        if not located:
            return ds.dataset(schema.empty_table())
        if len(located) == 1:
            _, own, files = located[0]
            return ds.dataset(files, format=checked, schema=own, filesystem=self.filesystem)
        # several layouts: each read with its own schema, joined by column name (read whole)
        tables = [ds.dataset(files, format=checked, schema=own, filesystem=self.filesystem)
                  .to_table(columns=[c for c in schema.names if c in own.names]) for _, own, files in located]
        joined = pa.concat_tables(tables, promote_options="default")
        return ds.dataset(joined.select(schema.names).cast(schema))

    def read(self, table: str, columns: Sequence[str] | None = None,
             filter: Any = None, *, layout: int | None = None) -> pa.Table:  # noqa: A002 - pyarrow's name
        """Read ``table`` (optionally some columns, a pyarrow filter expression, one layout).

        Raises:
            CorruptFileError: a file is missing or damaged (the error names the store).
        """
        try:
            result = self.dataset(table, layout=layout).to_table(
                columns=list(columns) if columns is not None else None, filter=filter)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptFileError(f"{self.path}/{table}", f"cannot read table {table!r} ({exc}); push "
                                   "the store again to replace missing or damaged files") from exc
        return result.replace_schema_metadata(_schema.table(table).file_metadata())


def open_reader(store: StoreLike | RemoteStore | StoreReader, *, version: int | None = None) -> StoreReader:
    """A store to read: a :class:`RemoteStore` for a URI, else the local :class:`~rlarrow.Store`.

    What the readers (``StreamingDataset``, :mod:`rlarrow.train.ray`) call with what a user
    passed: a ``Store`` or a local path (opened read-only, at ``version``), a URI
    (``s3://bucket/runs.rlarrow``, ``file:///...``: a store pushed there, read with
    :class:`RemoteStore` and the standard AWS variables), or a ``RemoteStore`` as it is.

    A URI is read at ``version`` from its tables' Delta logs, as a local store is (the files of
    that version must have been pushed).

    Raises:
        ArgumentError: ``version`` with a :class:`RemoteStore` opened already (open it at that
            version instead).
        NotFoundError: no such version, or its files were never pushed.

    Example:
        >>> import rlarrow, tempfile
        >>> tmp = tempfile.mkdtemp()
        >>> st = rlarrow.Store.create(f"{tmp}/s")
        >>> _ = push(st, f"file://{tmp}/bucket/s", progress=False)
        >>> type(open_reader(f"file://{tmp}/bucket/s")).__name__, type(open_reader(f"{tmp}/s")).__name__
        ('RemoteStore', 'Store')
    """
    from rlarrow.core.arguments import uri_scheme

    if isinstance(store, Store) or (isinstance(store, (str, os.PathLike)) and uri_scheme(store) is None):
        return as_store(store, readonly=True, version=version)
    if isinstance(store, (str, os.PathLike)):  # a URI
        return RemoteStore(os.fspath(store), version=version)
    if version is not None:
        raise ArgumentError(f"version={version} with a RemoteStore opened already: give the store's URI, or "
                            "open the RemoteStore at that version (RemoteStore(uri, version=...))")
    if not isinstance(store, StoreReader):
        raise ArgumentTypeError(f"store: a Store, a path, a URI or a RemoteStore, not {type(store).__name__}")
    return store


def push(store: StoreLike, destination: str | os.PathLike[str], *,
         filesystem: pafs.FileSystem | None = None, prune: bool = False,
         progress: bool | None = None) -> list[str]:
    """Copy a local store's committed data to ``destination`` (a URI or a path on ``filesystem``).

    Files the destination already has (same name and size: store files never change) are
    skipped, so pushing again after more commits copies only the new ones. The manifest is
    written last: readers of the destination see the old store or the new one, never half.

    Args:
        store: a :class:`~rlarrow.Store` or the path of one.
        destination: where the copy goes (``s3://bucket/runs.rlarrow``, ``file:///...``).
        filesystem: a ``pyarrow.fs.FileSystem`` for ``destination`` (default: the URI's).
        prune: afterwards, delete the destination's data files that the new manifest does
            not list (files a compaction replaced). Off by default: a reader that opened
            the old manifest may still be reading them.
        progress: a progress bar over the bytes copied (None: when stderr is a terminal).

    Returns:
        The store-relative names of the files copied.
    """
    st = as_store(store, readonly=True)
    fs, root = resolve(destination, filesystem)
    manifest = st.manifest()  # (re-read: the committed state)
    manifest["pending"] = None
    manifest["retired"], manifest["retired_at"], manifest["delta_due"] = [], {}, []
    if _schema.parse_version(manifest["format_version"]) == SEGMENTED_FORMAT:
        # (written below whole, with no segments: a store every rlarrow 1.x reads)
        manifest["format_version"] = _schema.format_version(_schema.FORMAT_VERSION)
    wanted: list[tuple[str, int]] = [(f"{table}/{f['name']}", int(f["bytes"]))
                                     for table, entry in manifest["tables"].items() for f in entry["files"]]
    for rel, _ in wanted:  # a data file that is a link is refused: its bytes would be copied from outside
        check_inside(Path(st.path) / rel.partition("/")[0], rel.partition("/")[2])
    made = []  # the destination and its parents that do not exist yet
    head = root
    while head and head not in made and fs.get_file_info(head).type == pafs.FileType.NotFound:
        made.append(head)
        head = head.rpartition("/")[0]
    fresh = bool(made)
    try:
        return _push(st, fs, root, manifest, wanted, prune=prune, progress=progress)
    except OSError as exc:  # a full disk at the destination, a quota, a lost connection
        if fresh:  # a copy begun here: nothing of it is left (it was never a store)
            with contextlib.suppress(OSError):
                fs.delete_dir(root)
                for parent in made[1:]:  # (the folders made for it, while empty)
                    if fs.get_file_info(pafs.FileSelector(parent)):
                        break
                    fs.delete_dir(parent)
        from rlarrow.core.errors import OutputError

        left = ("nothing of the copy was left there" if fresh else "its manifest is the one before: readers "
                "see the store as pushed last time, and a push again copies only what is missing")
        raise OutputError(destination, f"the push stopped ({exc.strerror or exc}): free space there, or push "
                          f"elsewhere, and push again; {left}. The store was only read",
                          reason=exc.strerror or str(exc), errno_=exc.errno) from exc


def _push(st: Store, fs: pafs.FileSystem, root: str, manifest: dict[str, Any], wanted: list[tuple[str, int]],
          *, prune: bool, progress: bool | None) -> list[str]:
    """:func:`push`'s copy, once the manifest to write is known."""
    fs.create_dir(root, recursive=True)
    for table in manifest["tables"]:
        fs.create_dir(f"{root}/{table}", recursive=True)
    have = {}
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            have[os.path.relpath(info.path, root).replace(os.sep, "/")] = info.size
    todo = [(rel, size) for rel, size in wanted if have.get(rel) != size]
    # each table's Delta log, after the files it lists (its commits never change: the new
    # ones only), so that Delta engines read the copy too (at versions whose files it has)
    version = int(manifest.get("version", 0))
    todo_logs = [(rel, data) for table in manifest["tables"]
                 for rel, data in _log_commits(Path(st.path), table, version, have)]
    total = sum(size for _, size in todo) + sum(len(data) for _, data in todo_logs)
    with bar(total, "push", "B", progress) as pbar:
        for rel, _ in todo:
            _copy(Path(st.path) / rel, fs, f"{root}/{rel}", pbar)
        for rel, data in todo_logs:
            fs.create_dir(f"{root}/{rel.rsplit('/', 1)[0]}", recursive=True)
            _write(data, fs, f"{root}/{rel}", pbar)
    if not fs.get_file_info(f"{root}/{LOCK_NAME}").type == pafs.FileType.File:
        with fs.open_output_stream(f"{root}/{LOCK_NAME}"):
            pass  # a file:// copy is then a whole local store, writable by rlarrow.Store
    tmp = f"{root}/.{MANIFEST_NAME}.{secrets.token_hex(4)}.tmp"
    try:
        with fs.open_output_stream(tmp) as out:
            out.write(json.dumps(manifest, indent=1).encode("utf-8"))
        fs.move(tmp, f"{root}/{MANIFEST_NAME}")
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise
    if prune:
        listed = {rel for rel, _ in wanted}
        for rel in have:
            table, _, name = rel.partition("/")
            # a table's own data files only (not readers' links, nothing outside the tables)
            if table in manifest["tables"] and is_plain_file_name(name) and rel not in listed:
                fs.delete_file(f"{root}/{rel}")
    return [rel for rel, _ in todo]


def _log_commits(store_path: Path, table: str, version: int, have: dict[str, int]) -> list[tuple[str, bytes]]:
    """``table``'s Delta commits of store versions up to ``version`` the destination lacks, with their bytes.

    Training may append while a push runs: commits written after the manifest was read belong
    to later store versions, and a copied log ahead of its manifest would be damage there
    (writers stop committing to it, ``repair`` sets it aside). The log is read in order and
    stops at the first commit of a later version, or one that is not whole, a link or not a
    regular file (a log has no gaps: nothing after it is copied either).
    """
    from rlarrow.core.store.delta import LOG_DIR, DeltaLog

    log_dir = store_path / table / LOG_DIR
    if log_dir.is_symlink() or not log_dir.is_dir():
        return []  # (never a link out of the store)
    out = []
    for n, path in enumerate(sorted(log_dir.glob("[0-9]" * 20 + ".json"))):
        if int(path.stem) != n:
            break  # (a gap)
        try:
            data = DeltaLog.read_commit(path)
        except CorruptFileError:
            break
        found = DeltaLog.first_info(data or b"")
        if data is None or found is None or found[0] > version:
            break
        rel = f"{table}/{LOG_DIR}/{path.name}"
        if rel not in have:
            out.append((rel, data))
    return out


def _copy(source: Path, fs: pafs.FileSystem, target: str, pbar: Any) -> None:
    """Copy ``source`` to ``target`` under a temporary name, moved into place when whole."""
    with open(source, "rb") as src:
        _write(iter(lambda: src.read(_COPY_CHUNK), b""), fs, target, pbar)


def _write(chunks: Iterable[bytes] | bytes, fs: pafs.FileSystem, target: str, pbar: Any) -> None:
    """Write ``chunks`` to ``target`` under a temporary name, moved into place when whole."""
    head, _, name = target.rpartition("/")
    tmp = f"{head}/.{name}.{secrets.token_hex(4)}.tmp"
    try:
        with fs.open_output_stream(tmp) as out:
            for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
                out.write(chunk)
                pbar.update(len(chunk))
        fs.move(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise
