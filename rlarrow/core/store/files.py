"""Data files: how the store writes Parquet, names temporary files, and makes them durable.

A data file is written under a hidden temporary name (:func:`temp_name`: ``.tmp-HOST-PID-...``,
so the next writer can tell a dead process's leftovers from a live one's), in row groups
of about :data:`ROW_GROUP_BYTES` (:func:`write_row_groups`), with codecs chosen per tensor
column (:func:`open_parquet`), synced (:func:`fsync_file`), and only then renamed to its
``part-*.parquet`` name (:func:`new_file_name`) by a commit. :class:`CommitInfo` is what a
commit reports. The sizes here are the defaults of every writer.

Example:
    >>> name = new_file_name()
    >>> name.startswith("part-") and temp_name(name).endswith(".parquet.partial")
    True
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlarrow.core.errors import StoreError
from rlarrow.core.store.layouts import table_of

__all__ = ["CommitInfo"]

#: The lock file a writer holds while it changes the manifest.
LOCK_NAME = ".rlarrow.lock"
#: How every hidden temporary name starts (:func:`temp_name`).
TMP_PREFIX = ".tmp-"
_TMP_SUFFIX = ".parquet.partial"
#: This host, as temporary names and readers' views name it (``-`` made ``_``).
HOST = socket.gethostname().replace("-", "_")[:32] or "host"

#: Default sizes: row groups of ~64 MiB in memory, files up to ~1 GiB.
ROW_GROUP_BYTES = 64 << 20
#: tables whose rows are large and read one at a time, and their row groups' bytes: a ``videos``
#: row is an mp4 that a reader fetches alone, and a row group is the least it reads
SMALL_ROW_GROUPS = {b"videos": 2 << 20}


def batch_rows(table: str) -> int:
    """Rows a rewrite (compaction, an edit) reads at a time from a file of ``table``.

    65,536, but 16 for the videos table, whose rows are whole mp4 streams: 65,536 of them
    would be read at once, many GB.
    """
    return 16 if table.partition(".")[0] == "videos" else 65536
FILE_BYTES = 1 << 30
#: Auto-compaction starts when a table has more small files than this.
AUTO_COMPACT_FILES = 64
_COMPRESSION = "zstd"
_BINARY_ZSTD_LEVEL = 3


def new_file_name() -> str:
    """A new data file name: ``part-<UTC time>-<random hex>.parquet`` (sorts by creation time)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"part-{stamp}-{secrets.token_hex(4)}.parquet"


def temp_owner(tag: str = "") -> str:
    """The start of this process's temporary file names (``tag`` marks a group of them)."""
    return f"{TMP_PREFIX}{HOST}-{os.getpid()}-{tag}"


def temp_name(final_name: str, owner: str | None = None) -> str:
    """The hidden name ``final_name`` is written under, owned by this process (or by ``owner``)."""
    return f"{temp_owner() if owner is None else owner}{final_name[:-len('.parquet')]}{_TMP_SUFFIX}"


def tmp_owner_alive(name: str) -> bool:
    """Whether the process that owns a temporary file may still be writing it."""
    try:
        host, pid_text = name[len(TMP_PREFIX):].split("-", 2)[:2]
        pid = int(pid_text)
    except ValueError:
        return False
    if host != HOST:
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


def unwritable(path: Path) -> str | None:
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


def undo(renamed: list[Path], temporary: list[Path], cause: BaseException) -> None:
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


def fsync_file(path: Path) -> None:
    """Make ``path``'s bytes durable (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)



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
        object.__setattr__(self, "table", table_of(self.table))  # a layout's rows are the table's



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


def open_parquet(path: Path, schema: pa.Schema, sample: pa.Table | None = None) -> pq.ParquetWriter:
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


def write_row_groups(writer: pq.ParquetWriter, data: pa.Table, row_group_bytes: int,
                      path: Path | None = None) -> None:
    """``data`` as row groups of about ``row_group_bytes``.

    With ``path`` (the file ``writer`` writes) and more than one row group of data, the
    kernel is asked after each row group to start writing the file out (see
    :func:`_start_writeback`): the disk works while the next row group is encoded, and the
    fsync at commit has little left to wait for.
    """
    if data.num_rows == 0:
        return
    cap = SMALL_ROW_GROUPS.get((data.schema.metadata or {}).get(b"rlarrow.table", b""))
    if cap is not None:  # (whichever writer: append, TableWriter, compaction, an edit's rewrite)
        row_group_bytes = min(row_group_bytes, cap)
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

