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

import mmap
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError, InvalidInputError
from rlarrow.core.targets import atomic_file

__all__ = ["MemorySnapshot", "ZipMember", "atomic_output", "check_mapping", "check_zip_crcs",
           "export_tensors", "is_zip",
           "tensor_name_problem", "zip_crc_check", "zip_members"]


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


def is_zip(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a zip archive (a damaged one too: :func:`zip_members` then says how).

    ``zipfile.is_zipfile`` raises, rather than answers, for some damaged end records.
    """
    try:
        return zipfile.is_zipfile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error,
            NotImplementedError):
        return True


def zip_members(path: str | os.PathLike[str]) -> list[ZipMember]:
    """The members of a zip archive (a ``.pt`` or ``.npz`` export), checked against the file.

    Each member's local header must be where the central directory says, carry the same
    name, and its bytes must end within the file. Their checksums are left to
    :func:`check_zip_crcs`.

    Raises:
        CorruptFileError: not a readable zip archive, or a member that the file does not hold
            as the archive describes it.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error,
            NotImplementedError) as exc:  # "zip file version 6.4": a damaged directory entry
        raise CorruptFileError(path, f"not a readable zip archive ({exc}); the file is damaged or "
                               "truncated: export the memory again") from exc
    size = path.stat().st_size
    out = []
    with open(path, "rb") as fh:
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


def check_zip_crcs(path: str | os.PathLike[str], members: Iterable[ZipMember]) -> None:
    """Check the CRC-32 of each of ``members`` (from :func:`zip_members`) against its bytes.

    Stored members are checked in place (the file is memory-mapped; ``zlib.crc32`` releases
    the GIL, so this may run in a thread while the data is used); compressed ones are read
    through :mod:`zipfile`, which checks them as it inflates.

    Raises:
        CorruptFileError: naming the first member whose bytes do not match their CRC-32.
    """
    path = Path(path)
    members = list(members)
    stored = [m for m in members if m.stored]
    if stored:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                    for m in stored:
                        with view[m.start:m.start + m.size] as data:
                            ok = zlib.crc32(data) == m.crc
                        if not ok:
                            raise _crc_mismatch(path, m.name)
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


def zip_crc_check(path: str | os.PathLike[str], members: Iterable[ZipMember]) -> Callable[[], None]:
    """:func:`check_zip_crcs` of ``members``, as a function to call later (say, in a thread)."""
    members = list(members)
    return lambda: check_zip_crcs(path, members)


def _crc_mismatch(path: Path, member: str) -> CorruptFileError:
    return CorruptFileError(path, f"member {member!r} fails its CRC-32 check: the file is damaged "
                            "(bits changed since it was written); export the memory again, or restore "
                            "it from a copy")
