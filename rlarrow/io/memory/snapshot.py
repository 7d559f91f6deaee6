"""Replay-memory snapshots: the in-memory form every memory importer produces.

A snapshot is what a skrl/rofunc ``Memory`` export holds: named tensors shaped
``(memory_size, num_envs, *size)``. :meth:`MemorySnapshot.to_table` lays it out as rows
of the store's ``memory`` table (memory-major: memory index, then env index), without
copying the tensors.

Example:
    >>> import numpy as np
    >>> snap = MemorySnapshot({"states": np.zeros((4, 2, 3), np.float32)}, name="m")
    >>> snap.memory_size, snap.num_envs, snap.to_table("run", 0).num_rows
    (4, 2, 8)
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, InvalidInputError
from rlarrow.core.targets import atomic_file

__all__ = ["MemorySnapshot"]


@dataclass
class MemorySnapshot:
    """Named tensors of one replay-memory export, ``(memory_size, num_envs, *size)`` each.

    Attributes:
        tensors: name -> array, in the order the file holds them.
        name: the snapshot's name (the export's file stem).
        path: the file it came from, if any.
        source_format: ``"pt"``, ``"npz"``, ``"csv"`` or ``"parquet"``.
        is_full, write_pointer, env_pointer: the buffer state, None when the source does not
            say (legacy exports never do).
    """

    tensors: dict[str, np.ndarray]
    name: str = ""
    path: str | None = None
    source_format: str = ""
    is_full: bool | None = None
    write_pointer: int | None = None
    env_pointer: int | None = None

    def __post_init__(self) -> None:
        problems = []
        shapes = {}
        for name, value in self.tensors.items():
            if not isinstance(value, np.ndarray) or value.ndim < 3:
                problems.append(f"{name!r}: expected an array of shape (memory_size, num_envs, size), "
                                f"got {getattr(value, 'shape', type(value).__name__)}")
                continue
            shapes[name] = value.shape[:2]
            if name in _schema.table("memory").column_names:
                problems.append(f"{name!r}: the name of a memory-table column; rename the tensor")
        if not self.tensors:
            problems.append("no tensors")
        if len(set(shapes.values())) > 1:
            problems.append("tensors disagree on (memory_size, num_envs): "
                            + ", ".join(f"{n} {s}" for n, s in shapes.items()))
        if problems:
            raise InvalidInputError(self.path, "not a replay-memory snapshot: " + "; ".join(problems))

    @property
    def memory_size(self) -> int:
        """Rows per environment."""
        return int(next(iter(self.tensors.values())).shape[0])

    @property
    def num_envs(self) -> int:
        """Number of environments."""
        return int(next(iter(self.tensors.values())).shape[1])

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {v.dtype}{list(v.shape[2:])}" for n, v in self.tensors.items())
        return (f"MemorySnapshot({self.name!r}, memory_size={self.memory_size}, "
                f"num_envs={self.num_envs}, {shapes})")

    def to_table(self, run_id: str, snapshot_id: int) -> pa.Table:
        """Rows of the store's ``memory`` table, memory index major, env index minor."""
        ms, ne = self.memory_size, self.num_envs
        rows = ms * ne
        memory_index = np.repeat(np.arange(ms, dtype=np.int64), ne)
        columns: dict[str, Any] = {
            "run_id": run_id,
            "snapshot_id": snapshot_id,
            "snapshot_name": self.name or None,
            "memory_index": memory_index,
            "env_index": np.tile(np.arange(ne, dtype=np.int32), ms),
            "memory_size": ms,
            "num_envs": ne,
            "is_full": self.is_full,
            "write_pointer": self.write_pointer,
            "env_pointer": self.env_pointer,
        }
        if self.is_full:
            columns["filled"] = np.full(rows, True)
        elif self.is_full is False and self.write_pointer is not None:
            # the rows before the write pointer, and at it the envs before the env pointer
            # (written when fewer samples than num_envs were added at a time, as skrl does)
            env_index = columns["env_index"]
            at_pointer = (memory_index == self.write_pointer) & (env_index < (self.env_pointer or 0))
            columns["filled"] = (memory_index < self.write_pointer) | at_pointer
        for name, value in self.tensors.items():
            columns[name] = value.reshape(rows, *value.shape[2:])
        return _schema.build("memory", columns, num_rows=rows)


    @classmethod
    def from_table(cls, table: pa.Table | Iterable[pa.Table | pa.RecordBatch], *, name: str | None = None,
                   path: str | None = None, constants: Mapping[str, Any] | None = None) -> MemorySnapshot:
        """The snapshot held by ``table``: the ``memory`` rows of one (run, snapshot).

        ``table`` may also be an iterable of tables or record batches (say, one per row
        group): each is copied into the snapshot's arrays as it comes, so memory holds the
        snapshot plus one piece. The pieces need ``memory_index``, ``env_index`` and the
        tensors; the per-snapshot columns (``memory_size``, ``num_envs``, ``is_full``,
        ``write_pointer``, ``env_pointer``, ``snapshot_name``) come from ``constants`` when
        given, else from the first row.

        Rows may come in any order and may be missing (a csv import holds only the
        filled rows): missing rows are NaN for floats, 0 for integers, False for bools,
        as a fresh skrl memory holds them. When the buffer state was not recorded and
        the rows present are a prefix, the rest is taken as never written (``is_full``
        False, the write pointer after the last row).
        """
        from rlarrow.core.tensors import to_numpy

        pieces = [table] if isinstance(table, pa.Table) else table
        declared = set(_schema.table("memory").column_names)
        first: dict[str, Any] | None = dict(constants) if constants is not None else None
        tensors: dict[str, np.ndarray] = {}
        seen: np.ndarray | None = None
        prefix = 0  # rows 0..prefix-1 arrived in order, so far
        ms = ne = total = 0
        for piece in pieces:
            if piece.num_rows == 0:
                continue
            if first is None:
                first = piece.slice(0, 1).to_pylist()[0]
            if seen is None:
                ms, ne = int(first["memory_size"]), int(first["num_envs"])
                total = ms * ne
                seen = np.zeros(total, bool)
            assert seen is not None
            pos = (piece.column("memory_index").to_numpy() * ne
                   + piece.column("env_index").to_numpy().astype(np.int64))
            contiguous = bool(pos[0] >= 0 and pos[-1] < total and (np.diff(pos) == 1).all())
            if not contiguous and (pos.min() < 0 or pos.max() >= total):
                raise InvalidInputError(path, f"memory rows do not fit (memory_size={ms}, num_envs={ne}): "
                                        "indices out of range")
            where: slice | np.ndarray = slice(int(pos[0]), int(pos[0]) + len(pos)) if contiguous else pos
            if seen[where].any() or (not contiguous and len(np.unique(pos)) != len(pos)):
                raise InvalidInputError(path, "memory rows repeated: the same (memory_index, env_index) "
                                        "twice in one snapshot")
            seen[where] = True
            if contiguous and pos[0] == prefix:
                prefix += len(pos)
            for col in piece.column_names:
                if col in declared:
                    continue
                values = to_numpy(piece.column(col))
                if col not in tensors:
                    tensors[col] = np.empty((total, *values.shape[1:]), values.dtype)
                tensors[col][where] = values
        if first is None or seen is None:
            raise InvalidInputError(path, "no memory rows")
        is_full, write_pointer, env_pointer = first["is_full"], first["write_pointer"], first["env_pointer"]
        count = int(seen.sum())
        if count < total:
            for values in tensors.values():
                values[~seen] = np.nan if values.dtype.kind == "f" else 0
        if is_full is None and count < total and prefix == count:
            # only a prefix was stored (a csv export holds the filled rows): the rest was never written
            is_full, write_pointer, env_pointer = False, count // ne, count % ne
        return cls({k: v.reshape(ms, ne, *v.shape[1:]) for k, v in tensors.items()},
                   name=name if name is not None else (first["snapshot_name"] or ""),
                   path=path, source_format="parquet", is_full=is_full,
                   write_pointer=write_pointer, env_pointer=env_pointer)


def check_mapping(path: str | os.PathLike[str], data: Any, what: str) -> Mapping[str, Any]:
    """Refuse anything but a str-keyed mapping, naming the file."""
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise InvalidInputError(path, f"expected a dict of named tensors, got {type(data).__name__}"
                                f" ({what})")
    return data


def export_tensors(data: MemorySnapshot | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The tensors to export, as NumPy arrays in skrl's order (names sorted)."""
    tensors = data.tensors if isinstance(data, MemorySnapshot) else data
    out = {}
    for name in sorted(tensors):
        value = tensors[name]
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        out[name] = np.asarray(value)
    MemorySnapshot(out)  # the same checks as an import: shapes agree, 3 or more dims
    return out


#: Write one file whole or not at all (see :func:`rlarrow.core.targets.atomic_file`): a
#: temporary name in a hidden sibling directory, renamed into place when complete.
atomic_output = atomic_file


def tensor_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a tensor's name in an export, or None when it can.

    A tensor name is what skrl and rofunc give ``create_tensor``: non-empty, printable,
    without surrounding spaces or path separators. Damage to a file's member names usually
    breaks one of these rules. (A name that is one of the ``memory`` table's own columns is
    a valid name but cannot be stored: :class:`MemorySnapshot` says so.)
    """
    if not name:
        return "an empty name"
    if not name.isprintable():
        return "a name with non-printable characters"
    if name != name.strip():
        return "a name with leading or trailing spaces"
    if "/" in name or "\\" in name:
        return "a name with a path separator"
    return None


# ---------------------------------------------------------------- zip archives (.pt, .npz)

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip's local file header, 30 bytes
_UTF8_NAMES = 0x800  # general-purpose flag: the member name is UTF-8 (else cp437)
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


@dataclass(frozen=True)
class ZipMember:
    """Where one member of a zip archive lies in the file, and its recorded CRC-32.

    Attributes:
        name: the member's name (from the central directory; the local header agrees).
        start: file offset of the member's (stored or compressed) bytes.
        size: how many bytes it occupies in the file.
        crc: the CRC-32 the archive records for its uncompressed bytes.
        stored: whether it is stored uncompressed (``start``/``size`` are then the data itself).
    """

    name: str
    start: int
    size: int
    crc: int
    stored: bool


def is_zip(path: str | os.PathLike[str], fh: IO[bytes] | None = None) -> bool:
    """Whether ``path`` is a zip archive (a damaged one too: :func:`zip_members` then says how).

    ``zipfile.is_zipfile`` raises, rather than answers, for some damaged end records. ``fh``:
    the file, already open (read through it, not opened again).
    """
    try:
        return zipfile.is_zipfile(fh if fh is not None else path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error,
            NotImplementedError):
        return True


def zip_members(path: str | os.PathLike[str], fh: IO[bytes] | None = None) -> list[ZipMember]:
    """The members of a zip archive (a ``.pt`` or ``.npz`` export), checked against the file.

    Each member's local header must be where the central directory says, carry the same
    name, and its bytes must end within the file. Their checksums are left to
    :func:`check_zip_crcs`. ``fh``: the file, already open (read through it, not opened again).

    Raises:
        CorruptFileError: not a readable zip archive, or a member that the file does not hold
            as the archive describes it.
    """
    path = Path(path)
    if fh is None:
        with open(path, "rb") as own:
            return zip_members(path, own)
    try:
        with zipfile.ZipFile(fh) as zf:  # (a file object given: ZipFile leaves it open)
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error,
            NotImplementedError) as exc:  # "zip file version 6.4": a damaged directory entry
        raise CorruptFileError(path, f"not a readable zip archive ({exc}); the file is damaged or "
                               "truncated: export the memory again") from exc
    size = os.fstat(fh.fileno()).st_size
    out = []
    listed = _listed_members(fh, size)
    if listed is not None and listed != len(infos):
        # zipfile reads the directory until its byte size is used up: an entry whose name or
        # extra-field length is damaged swallows the entries after it without a word
        raise CorruptFileError(path, f"the archive's end record lists {listed} members, its directory "
                               f"holds {len(infos)} (the directory is damaged); export the memory again")
    for info in infos:
        where = f"member {info.filename!r}"
        if info.compress_type not in _ZIP_METHODS:
            raise CorruptFileError(path, f"{where}: compression method {info.compress_type}, which "
                                   "neither torch.save nor np.savez writes (the file is damaged); "
                                   "export the memory again")
        if not 0 <= info.header_offset <= size - _LOCAL_HEADER.size:
            raise CorruptFileError(path, f"{where}: its header lies past the end of the file "
                                   "(truncated or damaged); export the memory again")
        fh.seek(info.header_offset)
        head = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
        name_len, extra_len = head[10], head[11]
        if head[0] != b"PK\x03\x04":
            raise CorruptFileError(path, f"{where}: no local header at its offset (the file is "
                                   "damaged); export the memory again")
        raw = fh.read(name_len)
        local = raw.decode("utf-8" if info.flag_bits & _UTF8_NAMES else "cp437", "replace")
        if local != info.orig_filename:
            raise CorruptFileError(path, f"{where}: its local header names it {local!r} (the file's "
                                   "member names are damaged); export the memory again")
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.compress_size > size:
            raise CorruptFileError(path, f"{where} runs past the end of the file "
                                   f"({start + info.compress_size} > {size} bytes): truncated; "
                                   "export the memory again")
        out.append(ZipMember(info.filename, start, info.compress_size, info.CRC,
                             info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1))
    return out


_END = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes (+ a comment)
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # zip64 end record locator, 20 bytes, just before _END
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record, 56 bytes


def _listed_members(fh: Any, size: int) -> int | None:
    """How many members a zip's end record says the archive has (None if it cannot be told).

    Reads at most the last 64 KiB + 22 bytes (the end record and its longest comment) and
    the 56-byte zip64 record; every offset is checked against ``size`` before it is read.
    """
    tail_len = min(size, _END.size + 0xFFFF)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _END.size > len(tail):
        return None
    total: int = _END.unpack_from(tail, at)[4]
    if total != 0xFFFF:
        return total
    if at < _ZIP64_LOCATOR.size:
        return None
    signature, _disk, offset, _disks = _ZIP64_LOCATOR.unpack_from(tail, at - _ZIP64_LOCATOR.size)
    if signature != b"PK\x06\x07" or offset + _ZIP64_END.size > size:
        return None
    fh.seek(offset)
    record = fh.read(_ZIP64_END.size)
    if record[:4] != b"PK\x06\x06":
        return None
    zip64_total: int = _ZIP64_END.unpack(record)[7]
    return zip64_total


def check_zip_crcs(path: str | os.PathLike[str], members: Iterable[ZipMember],
                   mapped: mmap.mmap | None = None) -> None:
    """Check the CRC-32 of each of ``members`` (from :func:`zip_members`) against its bytes.

    Stored members are checked in place (the file is memory-mapped, or ``mapped`` is its map
    from :func:`map_file`; ``zlib.crc32`` releases the GIL, so this may run in a thread while
    the data is used); compressed ones are read through :mod:`zipfile`, which checks them as
    it inflates. Members whose bytes :func:`digest_export` checked as it hashed the file, in
    this :func:`crc_record`, are not read again.

    Raises:
        CorruptFileError: naming the first member whose bytes do not match their CRC-32.
    """
    path = Path(path)
    done = _checked_before(path)
    members = [m for m in members if m not in done]
    stored = [m for m in members if m.stored]
    if stored and mapped is None:
        with open(path, "rb") as fh:
            own = map_file(fh)
            if own is not None:
                with own:
                    _check_stored(path, stored, own)
    elif stored:
        _check_stored(path, stored, mapped)
    packed = [m for m in members if not m.stored]
    if packed:
        try:
            with zipfile.ZipFile(path) as zf:
                for m in packed:
                    with zf.open(m.name) as fh:
                        while fh.read(1 << 20):
                            pass
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
            name = next((m.name for m in packed if m.name in str(exc)), packed[0].name)
            raise CorruptFileError(path, f"member {name!r} cannot be read back intact ({exc}): the "
                                   "file is damaged; export the memory again") from exc


def _check_stored(path: Path, stored: list[ZipMember], mapped: mmap.mmap | None) -> None:
    if mapped is None:  # (an empty file: no member holds a byte)
        return
    with memoryview(mapped) as view:
        for m in stored:
            with view[m.start:m.start + m.size] as data:
                ok = zlib.crc32(data) == m.crc
            if not ok:
                raise _crc_mismatch(path, m.name)


def zip_crc_check(path: str | os.PathLike[str], members: Iterable[ZipMember],
                  mapped: mmap.mmap | None = None) -> Callable[[], None]:
    """:func:`check_zip_crcs` of ``members``, as a function to call later (say, in a thread).

    Members the calling thread's :func:`crc_record` holds as checked are left out now.
    """
    done = _checked_before(Path(path))
    members = [m for m in members if m not in done]
    return lambda: check_zip_crcs(path, members, mapped)


def map_file(fh: IO[bytes]) -> mmap.mmap | None:
    """The open file ``fh`` mapped read-only (None when it is empty); the map outlives ``fh``."""
    if not os.fstat(fh.fileno()).st_size:
        return None
    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


#: ``.record``: while a :func:`crc_record` is open in this thread, the members
#: :func:`digest_export` found intact, by file identity (else None); ``.kept``: the torch
#: exports it read whole, by file identity.
_THREAD = threading.local()
_HASH_CHUNK = 1 << 20
#: At most this many bytes of hashed torch exports are kept in memory at once by a
#: :func:`crc_record` for their import to parse (:func:`take_kept`); an export that does not
#: fit is read again by its import.
KEEP_BYTES = 1 << 30


@dataclass(frozen=True)
class KeptExport:
    """A torch ``.pt`` export's bytes as :func:`digest_export` read, hashed and CRC-checked them.

    Attributes:
        data: the whole file, mapped read-only (every member matched its CRC-32 when it was hashed).
        members: its zip members (all stored uncompressed), from :func:`zip_members`.
    """

    data: mmap.mmap
    members: tuple[ZipMember, ...]


def take_kept(path: str | os.PathLike[str]) -> KeptExport | None:
    """The bytes of ``path`` that :func:`digest_export` kept in this thread's :func:`crc_record`.

    Handed out once (the record lets go of them) and only while the file's identity (size,
    inode, modification and change times) is what it was when they were read; else None, and
    the caller reads the file itself. The bytes are those the source's SHA-256 was taken of.
    """
    kept: dict[tuple[int, ...], KeptExport] | None = getattr(_THREAD, "kept", None)
    if not kept:
        return None
    try:
        return kept.pop(_identity(os.stat(path)), None)
    except OSError:
        return None


@contextmanager
def crc_record() -> Iterator[None]:
    """Within it (in this thread), members :func:`digest_export` checked are not checked again.

    ``rlarrow convert`` hashes each source before it imports it (:mod:`rlarrow.io.importing`):
    with this record open, the hash's one pass over a ``.pt``/``.npz`` export checks its
    stored members' CRC-32s too, and the import does not read the bytes again to check them.
    A file changed since (its size, inode, modification or change time) is checked again; the
    record is forgotten when the outermost one exits.
    """
    outer = _record()
    _THREAD.record = {} if outer is None else outer
    if outer is None:
        _THREAD.kept = {}
    try:
        yield
    finally:
        _THREAD.record = outer
        if outer is None:
            _THREAD.kept = None


def _record() -> dict[tuple[int, ...], frozenset[ZipMember]] | None:
    record: dict[tuple[int, ...], frozenset[ZipMember]] | None = getattr(_THREAD, "record", None)
    return record


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _checked_before(path: Path) -> frozenset[ZipMember]:
    record = _record()
    if not record:
        return frozenset()
    try:
        return record.get(_identity(os.stat(path)), frozenset())
    except OSError:
        return frozenset()


def digest_export(path: str | os.PathLike[str]) -> tuple[str, int]:
    """SHA-256 (hex) and size of a file, read once; a zip export's CRC-32s checked in the same pass.

    The hash :func:`rlarrow.io.importing.content_hash` gives. Inside a :func:`crc_record`, the
    CRC-32 of each stored member of a zip archive (a ``.pt`` or ``.npz`` export) is computed
    from the same chunks as the hash, while they are in the CPU's cache, and the members
    that match are recorded, so that reading the export does not check them again. A torch
    ``.pt`` export whose members all match is hashed from a map of the file and the map is kept
    (up to :data:`KEEP_BYTES` at once): its import takes its tensors from that map
    (:func:`take_kept`) and does not open the file again. Damage is not raised here: the
    import that reads the file says what is damaged, as it would without.

    Example:
        >>> import hashlib, tempfile, numpy as np
        >>> p = Path(tempfile.mkdtemp()) / "m.npz"; np.savez(p, states=np.zeros((4, 1, 2)))
        >>> with crc_record():
        ...     sha, size = digest_export(p)  # hashed; its one member's CRC-32 checked on the way
        >>> sha == hashlib.sha256(p.read_bytes()).hexdigest(), size == p.stat().st_size
        (True, True)
    """
    path = Path(path)
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        members: list[ZipMember] = []
        listed = 0  # members of any kind
        record = _record()
        if record is not None:
            if is_zip(path, fh):
                try:
                    every = zip_members(path, fh)
                except CorruptFileError:
                    every = []  # (the import says how)
                listed = len(every)
                members = sorted((m for m in every if m.stored), key=lambda m: m.start)
            fh.seek(0)  # (both looked at the file's end)
        keep = bool(members) and len(members) == listed and _keepable(members, st.st_size)
        mapped = _populated_map(fh) if keep else None
        digest, crcs, pos = _digest(fh, mapped, members)
        if mapped is not None and os.fstat(fh.fileno()).st_size != pos:  # changed while hashed: read it
            mapped = None
            digest, crcs, pos = _digest(fh, None, members)
    if record is not None and members and pos == st.st_size:
        intact = frozenset(m for m, crc in zip(members, crcs, strict=True) if crc == m.crc)
        record[_identity(st)] = intact
        if mapped is not None and len(intact) == len(members):
            _THREAD.kept[_identity(st)] = KeptExport(mapped, tuple(members))
    return digest, pos


def _digest(fh: io.BufferedIOBase, mapped: mmap.mmap | None,
            members: list[ZipMember]) -> tuple[str, list[int], int]:
    """SHA-256 of the file (its map, else read through ``fh``), each of ``members``' CRC-32, its size."""
    h = hashlib.sha256()
    crcs = [0] * len(members)
    pos = first = 0  # first: the first member not yet wholly behind ``pos``
    for chunk in _chunks(fh, mapped):
        n = len(chunk)
        h.update(chunk)
        while first < len(members) and members[first].start + members[first].size <= pos:
            first += 1
        for k in range(first, len(members)):
            m = members[k]
            if m.start >= pos + n:
                break
            lo, hi = max(m.start - pos, 0), min(m.start + m.size - pos, n)
            if hi > lo:
                crcs[k] = zlib.crc32(chunk[lo:hi], crcs[k])
        pos += n
    return h.hexdigest(), crcs, pos


def _chunks(fh: io.BufferedIOBase, mapped: mmap.mmap | None) -> Iterator[memoryview]:
    """The file's bytes in chunks of ``_HASH_CHUNK``: views of its map, else read into one buffer."""
    if mapped is not None:
        with memoryview(mapped) as view:
            for lo in range(0, len(view), _HASH_CHUNK):
                with view[lo:lo + _HASH_CHUNK] as chunk:
                    yield chunk
        return
    fh.seek(0)
    buf = bytearray(_HASH_CHUNK)
    with memoryview(buf) as whole:
        while n := fh.readinto(buf):
            with whole[:n] as chunk:
                yield chunk


def _populated_map(fh: IO[bytes]) -> mmap.mmap | None:
    """``fh`` mapped read-only, its pages mapped in at once where the system can (Linux's MAP_POPULATE).

    One call maps the whole file instead of a page fault per few pages as the hash reads it;
    the tensors then read the same pages (no copy, no fault).
    """
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if not populate or not os.fstat(fh.fileno()).st_size:
        return map_file(fh)
    return mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)


def _keepable(members: list[ZipMember], size: int) -> bool:
    """Whether :func:`digest_export` keeps a zip's bytes: a torch export (none compressed) that fits."""
    kept: dict[tuple[int, ...], KeptExport] | None = getattr(_THREAD, "kept", None)
    if kept is None or size > KEEP_BYTES - sum(len(k.data) for k in kept.values()):
        return False
    return any(m.name == "data.pkl" or m.name.endswith("/data.pkl") for m in members)  # (not an .npz)


def _crc_mismatch(path: Path, member: str) -> CorruptFileError:
    return CorruptFileError(path, f"member {member!r} fails its CRC-32 check: the file is damaged "
                            "(bits changed since it was written); export the memory again, or restore "
                            "it from a copy")
