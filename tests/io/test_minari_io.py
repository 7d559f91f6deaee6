"""Minari datasets (arrow and parquet backends) import as whole RLDS episodes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.io.minari import import_minari, is_minari_dir

MINARI = FIXTURES / "minari" / "cartpole"


def read_episode_file(path):
    if path.suffix == ".parquet":
        return pq.read_table(path)
    with pa.memory_map(str(path)) as f:
        return pa.ipc.open_file(f).read_all()
@pytest.mark.parametrize("backend", ["arrow", "parquet"])
def test_minari_dataset_imports_whole_episodes(tmp_path, backend):
    src = MINARI / f"{backend}-v0"
    assert is_minari_dir(src) and is_minari_dir(src / "data") and not is_minari_dir(tmp_path)
    report = import_minari(src, tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (10, 256 + 10)
    store = rlarrow.Store.open(tmp_path / "s")
    run = store.runs().to_pylist()[0]
    assert (run["source"], run["alignment"]) == ("minari", "minari")
    meta = rlarrow.core.metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["action_space"] == {"type": "Discrete", "dtype": "int64", "start": 0, "n": 2}
    steps = store.read("steps")
    for ep_dir in sorted((src / "data").glob("[0-9]*")):
        raw = read_episode_file(next(ep_dir.glob("part-0.*")))
        k = int(ep_dir.name)
        ep = steps.filter(pa.compute.equal(steps.column("episode_id"), k))
        n = raw.num_rows - 1
        assert ep.num_rows == n + 1
        assert ep.column("observation").to_pylist() == raw.column("observations").to_pylist()
        assert ep.column("action").to_pylist() == raw.column("actions").to_pylist()[:n] + [None]
        assert ep.column("reward").to_pylist() == raw.column("rewards").to_pylist()[:n] + [None]
        assert ep.column("is_last").to_pylist()[-1] == (
            raw.column("terminations")[n - 1].as_py() or raw.column("truncations")[n - 1].as_py()
        )
    episodes = store.read("episodes").to_pylist()
    first = next(e for e in episodes if e["episode_id"] == 0)
    ep_meta = rlarrow.core.metadata.decode(first["metadata"], first["metadata_types"])
    assert ep_meta["seed"] == 0 and first["return"] == ep_meta["rewards_sum"] == 18.0
    assert first["num_steps"] == ep_meta["total_steps"] + 1 and first["terminated"]
def test_episode_split_over_parts_comes_back_whole(tmp_path):
    src = tmp_path / "ds"
    shutil.copytree(MINARI / "parquet-v0", src)
    ep = src / "data" / "5"
    whole = pq.read_table(ep / "part-0.parquet")
    half = whole.num_rows // 2
    pq.write_table(whole.slice(0, half), ep / "part-0.parquet")
    pq.write_table(whole.slice(half), ep / "part-1.parquet")
    import_minari(src, tmp_path / "s", progress=False)
    steps = rlarrow.Store.open(tmp_path / "s").read("steps")
    got = steps.filter(pa.compute.equal(steps.column("episode_id"), 5))
    assert got.num_rows == whole.num_rows
    assert np.array_equal(
        rlarrow.core.tensors.to_numpy(got.column("observation")),
        rlarrow.core.tensors.to_numpy(whole.column("observations")),
    )


def test_other_data_formats_are_refused_with_the_way_out(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "metadata.json").write_text(json.dumps({"data_format": "zarr", "total_episodes": 1}))
    with pytest.raises(rlarrow.UnsupportedInputError, match="zarr.*arrow.*parquet.*hdf5"):
        import_minari(tmp_path, tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_an_hdf5_dataset_without_its_file_is_refused(tmp_path):
    src = tmp_path / "ds"
    shutil.copytree(MINARI / "hdf5-v0", src)
    (src / "data" / "main_data.hdf5").unlink()
    with pytest.raises(rlarrow.CorruptFileError, match="main_data.hdf5.*missing"):
        import_minari(src, tmp_path / "s")
