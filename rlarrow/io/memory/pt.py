"""skrl/rofunc replay-memory exports as ``.pt`` files (a dict of tensors).

Files are loaded with ``torch.load(..., weights_only=True)`` only: a pickle that would
construct anything but tensors and plain containers is refused before it runs. An export that
``rlarrow convert`` has just read whole to hash it (see
:func:`rlarrow.io.memory.snapshot.take_kept`) is not read again: its pickle's opcodes are parsed
(``pickletools.genops``; never unpickled) by a reader that knows only a dict of contiguous tensors
(any other opcode or global, and the file goes to ``torch.load`` as above), and the tensors are
NumPy views of the bytes that were hashed. Every member of a zip-format file (what ``torch.save``
writes) is checked against its CRC-32, which torch itself does not do: a damaged file is a
:class:`~rlarrow.core.errors.CorruptFileError` naming the member, never tensors with changed values.
(Legacy non-zip ``torch.save`` files carry no checksums.)

:func:`write_pt` writes what skrl's ``Memory.save(format="pt")`` writes: ``torch.save`` of a
dict of tensors, names sorted; with the same file name the bytes are the same.

Example:
    >>> from rlarrow.io import pt  # doctest: +SKIP
    >>> snapshot = pt.read_pt("memories/26-11-22_13-53-58-633722_memory_0x7fc63c2dcdd0.pt")  # doctest: +SKIP
    >>> pt.write_pt(snapshot, "out/memories/" + snapshot.name + ".pt")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
import pickletools
import struct
import sys
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.deps import require
from rlarrow.core.errors import CorruptFileError, UnsupportedInputError
from rlarrow.core.targets import write_failure
from rlarrow.io.memory.snapshot import (
    KeptExport,
    MemorySnapshot,
    atomic_output,
    check_mapping,
    check_zip_crcs,
    export_tensors,
    is_zip,
    map_file,
    take_kept,
    zip_crc_check,
    zip_members,
)

__all__ = ["open_pt", "read_pt", "write_pt"]


def read_pt(path: str | os.PathLike[str], *, mmap: bool = False) -> MemorySnapshot:
    """Read a ``.pt`` memory export into a :class:`~rlarrow.io.memory.MemorySnapshot`.

    Every member of the file's zip archive must match its CRC-32 (torch's own reader does
    not check them): damage is an error, never changed values.

    Raises:
        UnsupportedInputError: the file's pickle asks for code or types that are not
            tensors (nothing of it is run), or it does not hold a dict of tensors.
        CorruptFileError: the file is truncated or damaged (a member fails its CRC-32, or
            torch cannot read it); the message names the member.
        MissingDependencyError: torch is not installed, and the file is not a plain dict of
            contiguous tensors in a zip archive (which rlarrow parses itself).

    ``mmap=True`` maps the file's tensors instead of reading them (zip-format files only;
    the arrays then read from the file as they are used).
    """
    snap, verify = open_pt(path, mmap=mmap)
    verify()
    return snap


#: Members up to this size (the pickle, the version and byte-order records) are checked
#: before torch reads them; larger ones (tensor storages) by the returned ``verify``.
_CHECK_FIRST_BYTES = 1 << 20


def open_pt(path: str | os.PathLike[str], *,
            mmap: bool = False) -> tuple[MemorySnapshot, Callable[[], None]]:
    """:func:`read_pt`, with the checksum check of the tensor storages handed back to run later.

    The archive's small members (its pickle above all) are checked before ``torch.load``
    sees them, so a damaged pickle is reported as damage. ``verify()`` checks the CRC-32
    of the rest (the tensors' bytes) and raises :class:`CorruptFileError` naming the first
    member that fails; it may run in a thread while the arrays are used (as
    :func:`rlarrow.io.memory.importer.import_memory` does, before it commits) and must have passed
    before anything made from them is trusted. A legacy (non-zip) ``torch.save`` file
    carries no checksums: ``verify`` does nothing for it.

    Raises:
        What :func:`read_pt` raises, except the CRC-32 failures of tensor storages.
    """
    path = Path(path)
    kept = take_kept(path)  # read whole, hashed and CRC-checked by the convert's hash pass
    if kept is not None and (tensors := _plain_tensors(kept)) is not None:
        return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="pt"), _nothing
    verify: Callable[[], None] = _nothing
    with open(path, "rb") as fh:  # one open for the archive's directory and its checksums
        zipped = is_zip(path, fh)
        if zipped:
            members = zip_members(path, fh)
            mapped = map_file(fh)
            check_zip_crcs(path, [m for m in members if m.size <= _CHECK_FIRST_BYTES], mapped)
            verify = zip_crc_check(path, [m for m in members if m.size > _CHECK_FIRST_BYTES], mapped)
            # a plain dict of tensors (what skrl saves) is parsed here, as for a convert, torch not
            # needed: protocol 4-5 pickles too, whose FRAME torch's weights-only reader refuses
            plain = (_plain_tensors(KeptExport(mapped, tuple(members)))
                     if mapped is not None and all(m.stored for m in members) else None)
            if plain is not None:
                if not mmap:  # the arrays read into memory, as torch.load would give them
                    plain = {name: np.array(value) for name, value in plain.items()}
                snap = MemorySnapshot(plain, name=path.stem, path=os.fspath(path), source_format="pt")
                return snap, verify
    torch = require("torch", feature="reading .pt memory exports")
    try:
        with warnings.catch_warnings():
            # torch's note about legacy pickle protocols; the safe unpickler still decides
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipped)
    except pickle.UnpicklingError as exc:
        raise UnsupportedInputError(
            path, "refused: its pickle asks for something other than tensors and plain containers, "
            f"which could run code, so it was not loaded ({str(exc).splitlines()[0]})") from exc
    except (EOFError, zipfile.BadZipFile, RuntimeError, ValueError, OSError, IndexError, KeyError,
            TypeError, AttributeError, AssertionError, struct.error) as exc:
        # a damaged pickle fails inside torch's safe unpickler in all of these ways
        if isinstance(exc, FileNotFoundError):
            raise
        verify()  # a storage whose checksum fails names the damage better than torch's error
        raise CorruptFileError(path, f"not a readable torch file ({exc}); export the memory again") from exc
    mapping = check_mapping(path, data, "torch.load of a .pt memory export")
    tensors = {}
    for name, value in mapping.items():
        if not isinstance(value, torch.Tensor):
            raise UnsupportedInputError(path, f"{name!r} is a {type(value).__name__}, not a tensor")
        if value.dtype == torch.bfloat16:
            raise UnsupportedInputError(path, f"{name!r} is bfloat16, which NumPy and Parquet cannot "
                                        "hold exactly; convert it to float32 first")
        tensors[name] = np.asarray(value.detach().cpu().numpy())
    return MemorySnapshot(tensors, name=path.stem, path=os.fspath(path), source_format="pt"), verify


def _nothing() -> None:
    return None


# ---------------------------------------------------------------- a kept export's plain pickle

#: torch's storage classes (as its pickles name them) -> the NumPy dtype of their elements.
_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
             "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
             "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _NotPlain(Exception):
    """The pickle is not a plain dict of contiguous tensors: ``torch.load`` decides about it."""


# Why a parser of our own: a restricted ``pickle.Unpickler`` is still the pickle machine running a
# user's file, and torch's own weights-only unpickler is torch-internal API that needs torch imported,
# which this path avoids (not importing torch took the CLI from 1.52-1.66x to 0.65-0.77x torch.load's
# CPU time). ``pickletools.genops`` only tokenizes (it executes nothing); _TorchPickle below interprets
# the few opcodes torch.save writes for a dict of contiguous tensors and builds nothing but str, int,
# bool, None, tuples, dicts and _Ref values. Any other opcode or global: _NotPlain, torch.load decides.
# (Protocol 4-5 files, whose FRAME torch's weights-only reader refuses, are read here as the data
# they are.)

#: A pickle member larger than this, or a stack deeper than _MAX_DEPTH, is not parsed here. A dict of
#: tensors needs ~150 bytes a tensor, and pickle writes SETITEMS in batches of 1,000 key-value pairs
#: (2,000 stack entries, plus ~12 for the tensor being built).
_MAX_PICKLE_BYTES = 1 << 20
_MAX_DEPTH = 2048

#: The globals the parser knows (``module name`` as GLOBAL writes it) -> what they are to it.
_GLOBALS = {"torch._utils _rebuild_tensor_v2": "rebuild", "collections OrderedDict": "odict",
            **{f"torch {name}": "storage_type" for name in _STORAGES}}


class _Ref:
    """A value only the parser makes: a known global, a storage type, a storage or a tensor's array."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any) -> None:
        self.kind, self.value = kind, value


class _Mark:
    """The MARK opcode's place on the stack."""


_MARK = _Mark()


#: Opcodes that push their argument, and those that push a constant.
_PUSH_ARG = frozenset({"BINUNICODE", "SHORT_BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1"})
_PUSH_CONST: dict[str, Any] = {"EMPTY_DICT": dict, "EMPTY_TUPLE": tuple, "NEWTRUE": lambda: True,
                               "NEWFALSE": lambda: False, "NONE": lambda: None, "MARK": lambda: _MARK}


class _TorchPickle:
    """Interprets torch's ``data.pkl`` of a dict of contiguous tensors, storages as views of the kept bytes.

    Each opcode the parser knows has a method ``op_<NAME>`` taking the opcode's decoded argument;
    there is no other way for a pickle to make anything happen.
    """

    def __init__(self, kept: KeptExport, prefix: str) -> None:
        self.kept, self.prefix = kept, prefix
        self.members = {m.name: m for m in kept.members}
        self.storages: dict[str, _Ref] = {}
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}

    def parse(self, pickled: bytes) -> Any:
        if len(pickled) > _MAX_PICKLE_BYTES:
            raise _NotPlain("a pickle larger than a dict of tensors needs")
        for op, arg, _pos in pickletools.genops(pickled):
            if len(self.stack) > _MAX_DEPTH:
                raise _NotPlain("a stack deeper than a dict of tensors needs")
            if op.name == "STOP":
                if len(self.stack) != 1:
                    raise _NotPlain("a pickle that leaves more than its result")
                return self.stack[0]
            if op.name in _PUSH_ARG:
                self.stack.append(arg)
            elif op.name in _PUSH_CONST:
                self.stack.append(_PUSH_CONST[op.name]())
            else:
                handler = getattr(self, f"op_{op.name}", None)
                if handler is None:
                    raise _NotPlain(f"opcode {op.name}")
                handler(arg)
        raise _NotPlain("a pickle without STOP")

    def pop_to_mark(self) -> list[Any]:
        at = max(i for i, x in enumerate(self.stack) if x is _MARK)  # ValueError (no MARK): not plain
        items = self.stack[at + 1:]
        del self.stack[at:]
        return items

    def pop(self, count: int) -> list[Any]:
        if len(self.stack) < count or any(x is _MARK for x in self.stack[len(self.stack) - count:]):
            raise _NotPlain("an opcode's operands across a MARK")
        items = self.stack[len(self.stack) - count:]
        del self.stack[len(self.stack) - count:]
        return items

    def op_PROTO(self, arg: Any) -> None:
        if not 2 <= arg <= 5:
            raise _NotPlain(f"pickle protocol {arg}")

    def op_FRAME(self, arg: Any) -> None:
        return None  # protocol 4's length of the next frame; genops reads through frames

    def op_GLOBAL(self, arg: Any) -> None:
        kind = _GLOBALS.get(arg)
        if kind is None:
            raise _NotPlain(f"global {arg}")
        dtype = np.dtype(_STORAGES[arg.split(" ")[1]]) if kind == "storage_type" else None
        self.stack.append(_Ref(kind, dtype))

    def op_STACK_GLOBAL(self, arg: Any) -> None:
        module, name = self.pop(2)
        if type(module) is not str or type(name) is not str:
            raise _NotPlain("STACK_GLOBAL of a non-string")
        self.op_GLOBAL(f"{module} {name}")

    def op_BINPERSID(self, arg: Any) -> None:
        (pid,) = self.pop(1)
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Ref)
                and pid[1].kind == "storage_type" and type(pid[2]) is str and type(pid[4]) is int):
            raise _NotPlain("a storage reference of another form")
        kind, key, numel = pid[1].value, pid[2], pid[4]
        if key not in self.storages:
            member = self.members.get(f"{self.prefix}data/{key}")
            if member is None or numel < 0 or member.size != numel * kind.itemsize:
                raise _NotPlain(f"storage {key!r} is not the member it names")
            self.storages[key] = _Ref("storage", np.frombuffer(self.kept.data, kind, numel, member.start))
        self.stack.append(self.storages[key])

    def op_TUPLE(self, arg: Any) -> None:
        self.stack.append(tuple(self.pop_to_mark()))

    def op_TUPLE1(self, arg: Any) -> None:
        self.stack.append(tuple(self.pop(1)))

    def op_TUPLE2(self, arg: Any) -> None:
        self.stack.append(tuple(self.pop(2)))

    def op_TUPLE3(self, arg: Any) -> None:
        self.stack.append(tuple(self.pop(3)))

    def op_REDUCE(self, arg: Any) -> None:
        func, args = self.pop(2)
        if not (isinstance(func, _Ref) and func.kind in ("rebuild", "odict") and type(args) is tuple):
            raise _NotPlain("REDUCE of something but a tensor or an empty OrderedDict")
        if func.kind == "odict" and args:
            raise _NotPlain("an OrderedDict with items")
        self.stack.append(_rebuild_tensor(*args) if func.kind == "rebuild" else {})

    def op_SETITEM(self, arg: Any) -> None:
        self.set_items(self.pop(2))

    def op_SETITEMS(self, arg: Any) -> None:
        self.set_items(self.pop_to_mark())

    def set_items(self, items: list[Any]) -> None:
        target = self.stack[-1]
        if type(target) is not dict or len(items) % 2:
            raise _NotPlain("SETITEM(S) on something but a dict")
        for key, value in zip(items[::2], items[1::2], strict=True):
            if type(key) is not str:
                raise _NotPlain("a key that is not a string")
            target[key] = value

    def op_BINPUT(self, arg: Any) -> None:
        if self.stack[-1] is _MARK:
            raise _NotPlain("a MARK memoized")
        self.memo[arg] = self.stack[-1]

    def op_LONG_BINPUT(self, arg: Any) -> None:
        self.op_BINPUT(arg)

    def op_MEMOIZE(self, arg: Any) -> None:
        self.op_BINPUT(len(self.memo))

    def op_BINGET(self, arg: Any) -> None:
        self.stack.append(self.memo[arg])  # KeyError (never put): not plain

    def op_LONG_BINGET(self, arg: Any) -> None:
        self.op_BINGET(arg)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                    hooks: Any = None, metadata: Any = None) -> _Ref:
    """A contiguous tensor's array: a view of its storage (anything else is not plain)."""
    if not (isinstance(storage, _Ref) and storage.kind == "storage" and type(offset) is int
            and type(size) is tuple and type(stride) is tuple and len(size) == len(stride)
            and all(type(d) is int and d >= 0 for d in (*size, *stride)) and type(requires_grad) is bool
            and all(x is None or (type(x) is dict and not x) for x in (hooks, metadata))):
        raise _NotPlain("a tensor of another form")
    want, count = [], 1
    for d in reversed(size):
        want.append(count)
        count *= d
    flat: np.ndarray = storage.value
    if tuple(reversed(want)) != stride and count > 1 or not 0 <= offset <= offset + count <= len(flat):
        raise _NotPlain("a strided or out-of-range tensor")
    return _Ref("tensor", flat[offset:offset + count].reshape(size))


def _plain_tensors(kept: KeptExport) -> dict[str, np.ndarray] | None:
    """The tensors of a kept torch export, or None when its pickle is not a plain dict of tensors."""
    pickles = [m for m in kept.members if m.name == "data.pkl" or m.name.endswith("/data.pkl")]
    if len(pickles) != 1:
        return None
    prefix = pickles[0].name.removesuffix("data.pkl")
    order = next((m for m in kept.members if m.name == f"{prefix}byteorder"), None)
    if sys.byteorder != "little" or (order is not None and bytes(
            kept.data[order.start:order.start + order.size]) != b"little"):
        return None
    pickled = bytes(kept.data[pickles[0].start:pickles[0].start + pickles[0].size])
    try:
        data = _TorchPickle(kept, prefix).parse(pickled)
    except Exception:  # noqa: BLE001 (whatever fails here, torch.load's safe unpickler decides about the file)
        return None
    items = data.items() if type(data) is dict else ()
    if not (items and all(isinstance(v, _Ref) and v.kind == "tensor" for _k, v in items)):
        return None
    return {name: value.value for name, value in data.items()}


def write_pt(data: MemorySnapshot | Mapping[str, Any], path: str | os.PathLike[str], *,
             overwrite: bool = False) -> Path:
    """Write tensors ``(memory_size, num_envs, *size)`` as skrl's ``.pt`` memory export.

    Args:
        data: a snapshot, or a mapping of names to NumPy arrays or torch tensors.
        path: the file to write (written atomically: a failure leaves no partial file).
        overwrite: replace an existing file.

    Returns:
        The path written.
    """
    torch = require("torch", feature="writing .pt memory exports")
    tensors = {}
    for name, value in export_tensors(data).items():
        tensors[name] = torch.from_numpy(value if value.flags.writeable and value.flags.c_contiguous
                                         else np.array(value, order="C"))
    with atomic_output(path, overwrite=overwrite) as tmp:
        try:
            torch.save(tensors, tmp)
        except RuntimeError as exc:  # torch's writer says a failed write (a full disk) in its own words
            raise write_failure(exc, tmp) from exc
    return Path(path)
