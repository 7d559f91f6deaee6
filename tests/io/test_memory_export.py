"""Memory exports come back out exactly as skrl writes them, and skrl reads them."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.io.memory.csv import read_csv, write_csv
from rlarrow.io.memory.importer import detect_format, export_memory, import_memory, read_memory, snapshots
from rlarrow.io.memory.npz import read_npz, write_npz
from rlarrow.io.memory.pt import read_pt, write_pt
from rlarrow.io.memory.snapshot import MemorySnapshot

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_SKRL = importlib.util.find_spec("skrl") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch: pip install 'rlarrow[torch]'")
needs_skrl = pytest.mark.skipif(not (HAVE_SKRL and HAVE_TORCH),
                                reason="needs skrl (test-only peer): pip install skrl torch==2.13.0")
SKRL = FIXTURES / "skrl"
KINDS = ["wrapped", "partial"]
FILLED = {"wrapped": 256, "partial": 40}


def fixture(kind: str, ext: str) -> Path:
    return next((SKRL / kind / "memories").glob(f"*.{ext}"))


def read_fixture(kind: str, ext: str) -> MemorySnapshot:
    path = fixture(kind, ext)
    if ext == "csv":
        return read_csv(path, num_envs=4, memory_size=64)
    return read_pt(path) if ext == "pt" else read_npz(path)


WRITERS = {"pt": write_pt, "npz": write_npz, "csv": write_csv}


@needs_torch
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ext", ["pt", "npz", "csv"])
def test_write_gives_skrls_bytes(tmp_path, kind, ext):
    source = fixture(kind, ext)
    out = WRITERS[ext](read_fixture(kind, ext), tmp_path / source.name)
    assert out.read_bytes() == source.read_bytes()


@needs_torch
@pytest.mark.parametrize("kind", KINDS)
def test_pt_to_csv_gives_skrls_csv(tmp_path, kind):
    """The pt export knows no write pointer: say how many rows skrl had filled."""
    out = write_csv(read_fixture(kind, "pt"), tmp_path / "m.csv", rows=FILLED[kind])
    assert out.read_bytes() == fixture(kind, "csv").read_bytes()


@needs_torch
@pytest.mark.parametrize("ext", ["pt", "npz", "csv"])
def test_store_round_trip_gives_back_the_same_files(tmp_path, ext):
    store = tmp_path / "s"
    for kind in KINDS:
        import_memory([fixture(kind, ext)], store, num_envs=4, memory_size=64, progress=False)
    written = export_memory(store, tmp_path / "out", ext, progress=False)
    assert [p.parent for p in written] == [tmp_path / "out" / "memories"] * 2
    for kind, path in zip(KINDS, written, strict=True):
        assert path.name == fixture(kind, ext).name
        assert path.read_bytes() == fixture(kind, ext).read_bytes()


@needs_torch
def test_every_dtype_and_keep_dimensions_round_trip_through_pt_and_npz(tmp_path):
    rng = np.random.default_rng(0)
    data = {
        "states": rng.standard_normal((6, 3, 4)),
        "images": rng.integers(0, 256, (6, 3, 2, 5), dtype=np.uint8),
        "actions": rng.integers(-(2**62), 2**62, (6, 3, 1)),
        "done": rng.random((6, 3, 1)) > 0.5,
        "half": rng.standard_normal((6, 3, 2)).astype(np.float16),
    }
    data["states"][4:] = np.nan
    for ext in ("pt", "npz"):
        snap = read_memory(WRITERS[ext](data, tmp_path / f"m.{ext}"))
        assert list(snap.tensors) == sorted(data)  # skrl's key order
        for name, value in data.items():
            got = snap.tensors[name]
            assert got.dtype == value.dtype and got.shape == value.shape
            assert got.tobytes() == value.tobytes()


def test_csv_refuses_keep_dimensions_and_nothing_is_left_behind(tmp_path):
    with pytest.raises(rlarrow.UnsupportedInputError, match="keep_dimensions.*pt or npz"):
        write_csv({"images": np.zeros((2, 1, 3, 3))}, tmp_path / "m.csv")
    assert list(tmp_path.iterdir()) == []


def test_existing_files_are_kept_unless_overwrite(tmp_path):
    path = tmp_path / "m.npz"
    write_npz({"x": np.zeros((2, 1, 1))}, path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="m.npz.*overwrite"):
        write_npz({"x": np.ones((2, 1, 1))}, path)
    assert path.read_bytes() == before
    write_npz({"x": np.ones((2, 1, 1))}, path, overwrite=True)
    assert read_npz(path).tensors["x"].tolist() == [[[1.0]], [[1.0]]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]  # no temporary left


@needs_skrl
def test_skrl_reads_what_rlarrow_writes(tmp_path):
    import torch
    from skrl.memories.torch import RandomMemory
    from skrl.utils.postprocessing import MemoryFileIterator as SkrlIterator

    rng = np.random.default_rng(1)
    data = {
        "states": rng.standard_normal((8, 2, 3)).astype(np.float32),
        "rewards": rng.standard_normal((8, 2, 1)),
        "terminated": rng.random((8, 2, 1)) > 0.5,
    }
    for ext in ("pt", "npz", "csv"):
        WRITERS[ext](data, tmp_path / "memories" / f"m.{ext}")
    seen = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # skrl's own deprecation notes
        for filename, got in SkrlIterator(str(tmp_path / "memories" / "*")):
            seen[filename] = got
    for ext in ("pt", "npz"):
        got = seen[f"m.{ext}"]
        for name, value in data.items():
            arr = got[name].numpy() if ext == "pt" else got[name]
            assert arr.dtype == value.dtype and np.array_equal(arr, value)
    csv = seen["m.csv"]
    assert np.array_equal(np.array(csv["states"], np.float32), data["states"].reshape(16, 3))
    assert np.array_equal(np.array(csv["rewards"]), data["rewards"].reshape(16, 1))
    # skrl's Memory.load restores pt and npz into its tensors
    for ext in ("pt", "npz"):
        memory = RandomMemory(memory_size=8, num_envs=2, device="cpu")
        for name, value in data.items():
            memory.create_tensor(name, size=value.shape[-1],
                                 dtype=torch.from_numpy(value).dtype)
        memory.load(str(tmp_path / "memories" / f"m.{ext}"))
        assert np.array_equal(np.asarray(memory._tensor_states), data["states"])


@needs_torch
def test_format_is_detected_from_content(tmp_path):
    for ext in ("pt", "npz", "csv"):
        blind = tmp_path / f"memory-{ext}.bin"
        blind.write_bytes(fixture("wrapped", ext).read_bytes())
        assert detect_format(blind) == ext
    (tmp_path / "notes.txt").write_bytes(b"\x00\x01binary")
    with pytest.raises(rlarrow.UnsupportedInputError, match="notes.txt.*not a memory export"):
        detect_format(tmp_path / "notes.txt")


@needs_torch
def test_convert_directories_and_globs_into_one_run(tmp_path):
    report = import_memory([SKRL / "wrapped" / "memories", str(SKRL / "partial" / "memories" / "*.pt")],
                            tmp_path / "s", num_envs=4, memory_size=64, name="fixtures", progress=False)
    assert report.snapshots == 4 and len(report.files) == 4
    assert report.rows == 64 * 4 * 3 + 256  # the csv holds the 256 filled rows
    assert "4 snapshot(s)" in str(report)
    store = rlarrow.Store.open(tmp_path / "s")
    runs = store.runs().to_pylist()
    assert [(r["run_id"], r["name"], r["source"]) for r in runs] == [
        (report.run_id, "fixtures", "memory-export")]
    snaps = list(snapshots(store))
    assert [s.name for s in snaps] == [p.stem for p in report.files]
    # a second convert into the same run continues its snapshot numbering
    again = import_memory([fixture("partial", "npz")], store, run_id=report.run_id, progress=False)
    assert again.run_id == report.run_id
    ids = store.read("memory", columns=["snapshot_id"]).column(0).unique().to_pylist()
    assert sorted(ids) == [0, 1, 2, 3, 4]
    assert store.row_count("runs") == 1


def test_csv_without_num_envs_says_what_it_assumed(tmp_path):
    report = import_memory([fixture("partial", "csv")], tmp_path / "s", progress=False)
    assert len(report.assumptions) == 1 and "assuming 1" in report.assumptions[0]
    snap = next(snapshots(tmp_path / "s"))
    assert (snap.memory_size, snap.num_envs) == (40, 1)


@needs_torch
def test_a_bad_file_names_itself_and_commits_nothing_of_itself(tmp_path):
    good = fixture("wrapped", "npz")
    bad = tmp_path / "in" / "broken.csv"
    bad.parent.mkdir()
    text = fixture("wrapped", "csv").read_text()
    bad.write_text(text[: len(text) * 3 // 4] + "not,a,number\r\n")
    store = tmp_path / "s"
    with pytest.raises(rlarrow.InvalidInputError, match="broken.csv"):
        import_memory([good, bad], store, num_envs=4, progress=False)
    s = rlarrow.Store.open(store)
    assert s.row_count("memory") == 256  # the good file only
    assert [x.name for x in snapshots(s)] == [good.stem]


def test_parquet_memory_export_keeps_the_buffer_state(tmp_path):
    from rlarrow.io.memory.importer import write_memory

    snap = MemorySnapshot({"x": np.arange(12, dtype=np.float32).reshape(6, 2, 1)}, name="m",
                          is_full=True, write_pointer=2, env_pointer=0)
    path = write_memory(snap, tmp_path / "m.parquet")
    back = read_memory(path)
    assert (back.is_full, back.write_pointer, back.env_pointer) == (True, 2, 0)
    assert back.tensors["x"].tobytes() == snap.tensors["x"].tobytes()
    import duckdb

    rows = duckdb.execute(f"SELECT count(*), max(memory_index) FROM read_parquet('{path}')").fetchall()
    assert rows == [(12, 5)]


@needs_torch
def test_cli_convert_and_export(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    runner = CliRunner()
    store = tmp_path / "s"
    out = runner.invoke(cli, ["convert", str(SKRL / "wrapped" / "memories"), "-o", str(store),
                              "--num-envs", "4", "--name", "w"])
    assert out.exit_code == 0, out.output
    assert "converted 3 file(s)" in out.output and "3 snapshot(s), 768 memory rows" in out.output
    out = runner.invoke(cli, ["export", str(store), "-o", str(tmp_path / "legacy"), "--format", "npz"])
    assert out.exit_code == 0, out.output
    written = sorted((tmp_path / "legacy" / "memories").iterdir())
    assert len(written) == 3 and all(p.suffix == ".npz" for p in written)
    npz_source = fixture("wrapped", "npz")
    assert (tmp_path / "legacy" / "memories" / npz_source.name).read_bytes() == npz_source.read_bytes()
    again = runner.invoke(cli, ["export", str(store), "-o", str(tmp_path / "legacy"), "--format", "npz"])
    assert again.exit_code == 1 and "exists" in again.output and "--overwrite" in again.output
    missing = runner.invoke(cli, ["convert", str(tmp_path / "nothing-*.pt"), "-o", str(store)])
    assert missing.exit_code == 1 and "nothing-*.pt" in missing.output and "Traceback" not in missing.output


@needs_torch
def test_snapshots_survive_compaction_into_one_file(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s")
    import_memory([SKRL / "wrapped" / "memories"], store, num_envs=4, progress=False)
    before = {s.name: s for s in snapshots(store)}
    store.compact("memory", target_file_bytes=1 << 30)
    assert len(store.files("memory")) == 1
    after = {s.name: s for s in snapshots(store)}
    assert sorted(after) == sorted(before) and len(after) == 3
    for name, snap in after.items():
        for tensor, value in snap.tensors.items():
            assert value.tobytes() == before[name].tensors[tensor].tobytes()
    [only] = list(snapshots(store, snapshot_id=1))
    assert only.name == sorted(p.stem for p in (SKRL / "wrapped" / "memories").iterdir())[1]
