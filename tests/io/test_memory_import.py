"""skrl .pt/.npz memory exports import value-exactly; unsafe or damaged files are refused."""

from __future__ import annotations

import importlib.util
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import tensors
from rlarrow.io.memory.npz import read_npz
from rlarrow.io.memory.pt import read_pt
from rlarrow.io.memory.snapshot import MemorySnapshot

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch: pip install 'rlarrow[torch]'")
SKRL = FIXTURES / "skrl"


def fixture_files(kind: str, ext: str) -> Path:
    return next((SKRL / kind / "memories").glob(f"*.{ext}"))


def back_from_store(store: rlarrow.Store, snap: MemorySnapshot) -> dict[str, np.ndarray]:
    store.append("memory", snap.to_table("run", 0))
    table = store.read("memory")
    return {name: tensors.to_numpy(table.column(name)).reshape(snap.memory_size, snap.num_envs,
                                                               *snap.tensors[name].shape[2:])
            for name in snap.tensors}


def assert_exact(original: np.ndarray, back: np.ndarray) -> None:
    assert back.dtype == original.dtype and back.shape == original.shape
    assert back.tobytes() == np.ascontiguousarray(original).tobytes()


@needs_torch
@pytest.mark.parametrize("kind", ["wrapped", "partial"])
def test_real_skrl_pt_and_npz_import_exactly(tmp_path, kind):
    import torch

    pt_file, npz_file = fixture_files(kind, "pt"), fixture_files(kind, "npz")
    raw_pt = torch.load(pt_file, weights_only=True)
    raw_npz = dict(np.load(npz_file))
    for snap, raw in [(read_pt(pt_file), {k: v.numpy() for k, v in raw_pt.items()}),
                      (read_npz(npz_file), raw_npz)]:
        assert list(snap.tensors) == list(raw)  # key order kept
        assert (snap.memory_size, snap.num_envs) == (64, 4)
        store = rlarrow.Store.create(tmp_path / f"{snap.source_format}-{kind}")
        back = back_from_store(store, snap)
        for name, original in raw.items():
            assert_exact(original, back[name])
        assert store.read("memory", columns=["snapshot_name"]).column(0)[0].as_py() == Path(
            snap.path).stem
    if kind == "partial":  # rows 10..63 were never written: NaN in the float tensors
        assert np.isnan(raw_npz["states"][10:]).all() and not np.isnan(raw_npz["states"][:10]).any()


@needs_torch
def test_pt_and_npz_of_one_memory_give_the_same_rows():
    a = read_pt(fixture_files("wrapped", "pt")).to_table("r", 0)
    b = read_npz(fixture_files("wrapped", "npz")).to_table("r", 0)
    drop = ["snapshot_name"]
    assert a.drop_columns(drop).equals(b.drop_columns(drop))


@needs_torch
def test_keep_dimensions_and_every_dtype(tmp_path):
    import torch

    data = {
        "images": torch.randint(0, 256, (5, 2, 3, 4), dtype=torch.uint8),  # keep_dimensions=True
        "states": torch.randn(5, 2, 6, dtype=torch.float64),
        "actions": torch.randint(-(2**62), 2**62, (5, 2, 1), dtype=torch.int64),
        "flags": torch.rand(5, 2, 1) > 0.5,
        "half": torch.randn(5, 2, 2, dtype=torch.float16),
    }
    data["states"][3:] = float("nan")
    torch.save(data, tmp_path / "m.pt")
    np.savez(tmp_path / "m.npz", **{k: v.numpy() for k, v in data.items()})
    for i, snap in enumerate([read_pt(tmp_path / "m.pt"), read_npz(tmp_path / "m.npz")]):
        store = rlarrow.Store.create(tmp_path / f"s{i}")
        back = back_from_store(store, snap)
        for name, original in data.items():
            assert_exact(original.numpy(), back[name])
        assert store.schema("memory").field("images").type == tensors.tensor_type("uint8", (3, 4))


class RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@needs_torch
def test_malicious_pickles_are_refused_and_run_nothing(tmp_path):
    import torch

    marker = tmp_path / "pwned"
    zipped = tmp_path / "evil.pt"
    torch.save({"states": torch.zeros(2, 1, 1), "x": RunsCode(marker)}, zipped)
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps({"states": RunsCode(marker)}))
    for path in (zipped, legacy):
        with pytest.raises(rlarrow.UnsupportedInputError, match=f"{path.name}.*refused"):
            read_pt(path)
    assert not marker.exists()


@needs_torch
def test_pt_that_is_not_a_dict_of_tensors(tmp_path):
    import torch

    torch.save(torch.zeros(4, 2, 1), tmp_path / "tensor.pt")
    with pytest.raises(rlarrow.InvalidInputError, match="tensor.pt.*dict of named tensors"):
        read_pt(tmp_path / "tensor.pt")
    torch.save({"states": torch.zeros(4, 2, 1), "note": "text"}, tmp_path / "mixed.pt")
    with pytest.raises(rlarrow.UnsupportedInputError, match="'note' is a str"):
        read_pt(tmp_path / "mixed.pt")
    torch.save({"a": torch.zeros(4, 2, 1), "b": torch.zeros(3, 2, 1)}, tmp_path / "shapes.pt")
    with pytest.raises(rlarrow.InvalidInputError, match="disagree"):
        read_pt(tmp_path / "shapes.pt")
    torch.save({"a": torch.zeros(4, 2, 1, dtype=torch.bfloat16)}, tmp_path / "bf16.pt")
    with pytest.raises(rlarrow.UnsupportedInputError, match="bfloat16"):
        read_pt(tmp_path / "bf16.pt")


@needs_torch
@pytest.mark.parametrize("ext", ["pt", "npz"])
def test_truncated_files_name_the_file(tmp_path, ext):
    source = fixture_files("wrapped", ext)
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    reader = read_pt if ext == "pt" else read_npz
    with pytest.raises(rlarrow.CorruptFileError, match=f"cut.{ext}"):
        reader(cut)


def test_npz_object_arrays_are_refused(tmp_path):
    np.savez(tmp_path / "obj.npz", states=np.array([{"a": 1}], dtype=object))
    with pytest.raises(rlarrow.UnsupportedInputError, match="obj.npz.*pickled"):
        read_npz(tmp_path / "obj.npz")


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_members_read_exactly_mapped_or_not(tmp_path, compressed):
    """Uncompressed exports are memory-mapped (checksums verified), compressed ones loaded."""
    rng = np.random.default_rng(0)
    arrays = {
        "states": rng.standard_normal((6, 2, 3)).astype(np.float32),
        "actions": np.asfortranarray(rng.standard_normal((6, 2, 4))),
        "terminated": rng.random((6, 2, 1)) < 0.5,
        "frames": rng.integers(0, 255, (6, 2, 2, 2), dtype=np.uint8),
        "index": np.arange(12, dtype=np.int64).reshape(6, 2, 1) + 2**60,
        "empty": np.zeros((6, 2, 0), np.float32),
    }
    arrays["states"][3:] = np.nan
    (np.savez_compressed if compressed else np.savez)(tmp_path / "m.npz", **arrays)
    snap = read_npz(tmp_path / "m.npz")
    for name, want in arrays.items():
        got = snap.tensors[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name


def test_npz_damaged_inside_an_array_fails_its_checksum(tmp_path):
    np.savez(tmp_path / "m.npz", states=np.zeros((100, 2, 8), np.float32))
    raw = bytearray((tmp_path / "m.npz").read_bytes())
    raw[400] ^= 0xFF  # a byte of the array's data: only the CRC can tell
    (tmp_path / "bad.npz").write_bytes(bytes(raw))
    with pytest.raises(rlarrow.CorruptFileError, match=r"bad.npz.*'states.npy'.*CRC-32"):
        read_npz(tmp_path / "bad.npz")


@pytest.mark.parametrize("parallel", [False, True])
def test_convert_checks_the_npz_checksums_before_it_commits(tmp_path, monkeypatch, parallel):
    """The CRC-32s are checked while the files are written: a damaged export commits nothing."""
    from rlarrow.io.memory.importer import import_memory

    if parallel:  # written as several files at once (the path large exports take)
        monkeypatch.setattr("rlarrow.core.store.files.ROW_GROUP_BYTES", 1024)
    np.savez(tmp_path / "good.npz", states=np.ones((100, 2, 8), np.float32))
    np.savez(tmp_path / "m.npz", states=np.zeros((100, 2, 8), np.float32))
    raw = bytearray((tmp_path / "m.npz").read_bytes())
    raw[400] ^= 0xFF
    (tmp_path / "bad.npz").write_bytes(bytes(raw))
    store = tmp_path / "s"
    import_memory([tmp_path / "good.npz"], store, progress=False)
    with pytest.raises(rlarrow.CorruptFileError, match=r"bad.npz.*'states.npy'.*CRC-32"):
        import_memory([tmp_path / "bad.npz"], store, progress=False)
    st = rlarrow.Store.open(store)
    assert st.row_count("memory") == 200  # the good export only
    assert not [p for p in (store / "memory").iterdir()
                if not p.name.startswith("part-") and p.name != "_delta_log"]
    assert (len(st.files("memory")) > 1) == parallel


def test_no_inputs_is_an_argument_error(tmp_path):
    from rlarrow.io.memory.importer import import_memory

    with pytest.raises(rlarrow.ArgumentError, match="no inputs"):
        import_memory([], tmp_path / "s")
    assert not (tmp_path / "s").exists()
