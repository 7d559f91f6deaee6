"""A ``.pt`` export is read once by ``rlarrow convert`` (issue 37): tensors are views of the hashed map.

The hash's pass maps the export, hashes it and checks its CRC-32s; the import then parses the
pickle's opcodes (never unpickling it) and takes the tensors as views of that map, without
``torch.load`` and without opening the file again. Anything but a plain dict of contiguous
tensors goes to ``torch.load(weights_only=True)`` as before, which refuses what is not data.
"""

from __future__ import annotations

import importlib.util
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rlarrow
from rlarrow.io.importing import import_paths
from rlarrow.io.memory.snapshot import crc_record, digest_export, take_kept

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="writing a .pt export needs torch: pip install 'rlarrow[torch]'")

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def _tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for i, dtype in enumerate(DTYPES):
        shape = (7, 3, 1 + i % 4)
        if dtype == "bool":
            out[f"t_{dtype}"] = rng.random(shape) < 0.3
        elif dtype.startswith("float"):
            value = rng.standard_normal(shape).astype(dtype)
            value.flat[0] = np.nan  # NaN kept bit for bit
            out[f"t_{dtype}"] = value
        else:
            info = np.iinfo(dtype)
            out[f"t_{dtype}"] = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return out


def test_a_hashed_export_is_parsed_from_its_map_without_torch_load(tmp_path, monkeypatch):
    import torch

    from rlarrow.io.memory.pt import open_pt, read_pt, write_pt

    path = write_pt(_tensors(np.random.default_rng(0)), tmp_path / "memory.pt")
    want = read_pt(path).tensors  # through torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    with crc_record():
        sha, size = digest_export(path)
        snap, verify = open_pt(path, mmap=True)
        verify()
        assert take_kept(path) is None  # handed out once
    assert size == path.stat().st_size and len(sha) == 64
    assert list(snap.tensors) == list(want)
    for name, value in snap.tensors.items():
        assert value.dtype == want[name].dtype and value.shape == want[name].shape, name
        assert value.tobytes() == want[name].tobytes(), name  # NaN and every bit the same


def test_a_file_changed_after_its_hash_is_read_again_from_disk(tmp_path):
    from rlarrow.io.memory.pt import read_pt, write_pt

    path = write_pt({"states": np.zeros((4, 2, 3), np.float32)}, tmp_path / "memory.pt")
    with crc_record():
        digest_export(path)
        write_pt({"states": np.ones((4, 2, 3), np.float32)}, path, overwrite=True)  # same size, new file
        assert take_kept(path) is None
        assert read_pt(path).tensors["states"].sum() == 24.0


def test_convert_of_every_dtype_stores_torch_loads_values(tmp_path):
    from rlarrow.io.memory.pt import read_pt, write_pt
    from rlarrow.io.memory.stored import snapshots

    path = write_pt(_tensors(np.random.default_rng(1)), tmp_path / "memories" / "m.pt")
    report = import_paths([path], tmp_path / "s", progress=False)
    st = rlarrow.Store.open(tmp_path / "s", readonly=True)
    (stored,) = list(snapshots(st))
    for name, value in read_pt(path).tensors.items():
        assert stored.tensors[name].dtype == value.dtype
        assert stored.tensors[name].tobytes() == value.tobytes(), name
    again = import_paths([path], tmp_path / "s", progress=False)  # re-import found by its hash
    assert report.runs and not again.runs and "imported before" in again.skipped[0]


def _with_pickle(src: Path, dst: Path, pickled: bytes) -> Path:
    """``src`` with its ``data.pkl`` replaced (CRC-32s right: only the pickle decides)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = pickled if info.filename.endswith("/data.pkl") else zin.read(info)
            zout.writestr(info.filename, data)
    return dst


class _Call:
    def __init__(self, fn: object, args: tuple[str, ...]) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return self.fn, self.args


def test_a_pickle_that_asks_for_code_is_refused_and_nothing_runs(tmp_path):
    import os

    from rlarrow.io.memory.pt import write_pt

    good = write_pt({"states": np.zeros((4, 2, 3), np.float32)}, tmp_path / "good.pt")
    canary = tmp_path / "ran"
    hostile = {"states": _Call(os.system, (f"touch {canary}",))}
    bad = _with_pickle(good, tmp_path / "memories" / "bad.pt", pickle.dumps(hostile, protocol=2))
    with pytest.raises(rlarrow.UnsupportedInputError, match="refused") as err:
        import_paths([bad], tmp_path / "s", progress=False)
    assert "bad.pt" in str(err.value) and not canary.exists()
    assert not (tmp_path / "s").exists()  # nothing committed: the new store is removed


def test_what_the_plain_reader_does_not_know_goes_to_torch_load(tmp_path):
    import torch

    from rlarrow.io.memory.pt import read_pt

    # a transposed (strided) tensor: torch.save keeps its storage and strides
    base = torch.arange(24, dtype=torch.float32).reshape(4, 2, 3)
    strided = base.permute(0, 2, 1).contiguous().permute(0, 2, 1)
    assert not strided.is_contiguous()
    path = tmp_path / "memories" / "strided.pt"
    path.parent.mkdir()
    torch.save({"states": strided}, path)
    import_paths([path], tmp_path / "s", progress=False)
    with crc_record():
        digest_export(path)
        assert np.array_equal(read_pt(path).tensors["states"], base.numpy())
    # bfloat16: still torch.load's reading, and its clear refusal
    torch.save({"states": torch.zeros(4, 2, 3, dtype=torch.bfloat16)}, tmp_path / "bf16.pt")
    with pytest.raises(rlarrow.UnsupportedInputError, match="bfloat16"):
        import_paths([tmp_path / "bf16.pt"], tmp_path / "s2", progress=False)


def test_no_bit_flip_outside_the_tensor_bytes_reads_changed_values_from_the_map(tmp_path):
    """A byte of the zip's headers, directory or pickle flipped: an rlarrow error or the same tensors."""
    from rlarrow.io.memory.pt import read_pt, write_pt
    from rlarrow.io.memory.snapshot import zip_members

    good = write_pt({"states": np.arange(24, dtype=np.float32).reshape(4, 2, 3),
                     "terminated": np.eye(4, 2, dtype=bool)[:, :, None]}, tmp_path / "good.pt")
    want = read_pt(good).tensors
    data = good.read_bytes()
    members = zip_members(good)
    tensor_bytes = {i for m in members if "/data/" in m.name for i in range(m.start, m.start + m.size)}
    pickled = next(m for m in members if m.name.endswith("/data.pkl"))
    # every byte of the pickle, every other byte of the zip's structure (each of its fields is 2+ bytes)
    flips = [i for i in range(len(data)) if i not in tensor_bytes
             and (pickled.start <= i < pickled.start + pickled.size or i % 2 == 0)]
    outcomes = {"same": 0, "error": 0}
    bad = tmp_path / "bad.pt"
    for where in flips:
        flipped = bytearray(data)
        flipped[where] ^= 0x24
        bad.write_bytes(flipped)
        got = _read_in_record(bad)
        if isinstance(got, rlarrow.RLArrowError):
            assert "bad.pt" in str(got), (where, got)
            outcomes["error"] += 1
            continue
        assert list(got) == list(want), where
        for name, value in got.items():
            assert value.dtype == want[name].dtype and value.tobytes() == want[name].tobytes(), (where, name)
        outcomes["same"] += 1
    assert outcomes["error"] > 100 and outcomes["same"] > 0, outcomes  # (a flip in padding changes nothing)


def _read_in_record(path: Path) -> dict[str, np.ndarray] | rlarrow.RLArrowError:
    """What convert reads of ``path`` (hashed in a record, then read), or the rlarrow error it raises."""
    from rlarrow.io.memory.pt import read_pt

    try:
        with crc_record():
            digest_export(path)
            return read_pt(path).tensors
    except rlarrow.RLArrowError as exc:
        return exc


def test_the_module_parses_torch_pickles_and_never_unpickles(tmp_path, monkeypatch):
    """No pickle machine reads a kept export: its opcodes are interpreted (pickletools.genops)."""
    import ast
    import inspect

    import torch

    from rlarrow.io.memory import pt

    tree = ast.parse(inspect.getsource(pt))
    machine = {"Unpickler", "_Unpickler", "load", "loads"}
    assert not [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in machine
                and isinstance(n.value, ast.Name) and n.value.id in ("pickle", "_pickle")]
    assert not [n for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module in ("pickle", "_pickle")]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import)
                and any(a.name == "_pickle" or "dill" in a.name for a in n.names)]

    fixtures = Path(__file__).parents[1] / "fixtures" / "skrl"
    skrl = sorted(fixtures.glob("*/memories/*.pt"))
    many = tmp_path / "many.pt"  # two SETITEMS batches (pickle writes 1,000 pairs at once)
    torch.save({f"t{i:04d}": torch.full((2, 1, 1), i) for i in range(1100)}, many)
    assert len(skrl) == 2
    # the reference: torch's own reader (read_pt parses these itself now)
    want = {path: {k: v.numpy() for k, v in torch.load(path, weights_only=True).items()}
            for path in [*skrl, many]}
    # protocol 4 (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL): torch's weights-only reader
    # refuses FRAME, so the values torch.save was given are the reference
    proto4 = tmp_path / "proto4.pt"
    saved = {"states": torch.arange(24.0).reshape(4, 2, 3), "dones": torch.ones(4, 2, 1, dtype=torch.bool)}
    torch.save(saved, proto4, pickle_protocol=4)
    want[proto4] = {k: v.numpy() for k, v in saved.items()}
    paths = [*skrl, many, proto4]

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the pickle machine or torch.load was used")

    for name in ("Unpickler", "_Unpickler", "load", "loads"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    for path in paths:
        got = _read_in_record(path)
        assert not isinstance(got, Exception), (path, got)
        assert list(got) == list(want[path]), path
        for key, value in got.items():
            assert value.dtype == want[path][key].dtype and value.shape == want[path][key].shape, key
            assert value.tobytes() == want[path][key].tobytes(), (path, key)


def test_an_opcode_or_size_outside_the_parser_goes_to_torch_load(tmp_path, monkeypatch):
    import torch

    from rlarrow.io.memory.pt import write_pt

    tensors = {"states": np.arange(24, dtype=np.float32).reshape(4, 2, 3),
               "dones": np.eye(4, 2, dtype=bool)[:, :, None]}
    proto1 = tmp_path / "proto1.pt"  # protocol 1 writes False as INT, an opcode the parser does not know
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, proto1, pickle_protocol=1)
    good = write_pt(tensors, tmp_path / "good.pt")
    with zipfile.ZipFile(good) as zf:
        pickled = zf.read(next(n for n in zf.namelist() if n.endswith("/data.pkl")))
    # a pickle over the parser's 1 MiB bound (trailing bytes after STOP, which torch's reader ignores)
    big = _with_pickle(good, tmp_path / "big.pt", pickled + bytes(1 << 20))
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a[0]) or real_load(*a, **k))
    got = _read_in_record(big)
    assert loads == [big]  # torch.load read it: the parser handed the file over
    assert not isinstance(got, Exception), got
    assert list(got) == ["dones", "states"] and all(got[k].tobytes() == tensors[k].tobytes() for k in got)
    got = _read_in_record(proto1)
    assert loads == [big, proto1]  # handed over too, and torch's weights-only reader refuses INT
    assert isinstance(got, rlarrow.UnsupportedInputError) and "proto1.pt" in str(got), got


def test_read_pt_parses_a_plain_export_itself_protocol_4_included(tmp_path, monkeypatch):
    """Outside a convert too, a plain dict of tensors is parsed without torch.load, so a
    protocol-4 file (whose FRAME torch's weights-only reader refuses) reads; its values are
    what torch.save was given, copies unless ``mmap=True``."""
    import torch

    from rlarrow.io.memory.pt import read_pt

    saved = {"states": torch.arange(24.0).reshape(4, 2, 3), "dones": torch.ones(4, 2, 1, dtype=torch.bool),
             "steps": torch.tensor([2**40, -1, 0, 7]).reshape(4, 1, 1).expand(4, 2, 1).clone()}  # int64
    path = tmp_path / "proto4.pt"
    torch.save(saved, path, pickle_protocol=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's note about the protocol)
        with pytest.raises(pickle.UnpicklingError):
            torch.load(path, weights_only=True)  # what read_pt used to hand this file to

    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was used"))
    for mmap in (False, True):
        got = read_pt(path, mmap=mmap).tensors
        assert list(got) == list(saved)
        for key, value in saved.items():
            want = value.numpy()
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            assert got[key].tobytes() == want.tobytes()
            assert got[key].flags.writeable is not mmap  # mmap=True: read-only views of the file
