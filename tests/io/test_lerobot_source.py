"""LeRobot on the new house: ``read_lerobot`` without a store, ``write_lerobot`` from any source.

The LeRobot fixture (``tests/fixtures/lerobot``, written by lerobot's own writer) read to
Arrow must be what ``import_lerobot`` stores, value for value; a Minari dataset read by
``read_minari`` and written by ``write_lerobot`` must load in lerobot's own ``LeRobotDataset``
(``lerobot_peer.py``, a subprocess) with Minari's values; an import that finds its last
episode damaged leaves the store at its version before.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("av") is None, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"
)
needs_lerobot = pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="lerobot is not installed (make test installs it, with --no-deps: see the Makefile)",
)
SRC = FIXTURES / "lerobot" / "pusht_v30"
V21 = FIXTURES / "lerobot" / "pusht_v21"
CARTPOLE = FIXTURES / "minari" / "cartpole" / "arrow-v0"
LENGTHS = (6, 8, 5)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("episode_id", "ascending"), ("step", "ascending")])


def _same(got: pa.ChunkedArray, want: pa.ChunkedArray, name: str) -> None:
    """Two columns hold the same values (tensors compared as NumPy, null rows included)."""
    assert got.null_count == want.null_count, name
    assert got.is_null().to_pylist() == want.is_null().to_pylist(), name
    a, b = to_numpy(got, fill_value=0), to_numpy(want, fill_value=0)
    if isinstance(b, dict):
        assert isinstance(a, dict) and a.keys() == b.keys(), name
        for key in b:
            _same_values(a[key], b[key], f"{name}.{key}")
    else:
        _same_values(a, b, name)


def _same_values(a: object, b: object, name: str) -> None:
    if isinstance(b, dict):
        assert isinstance(a, dict) and a.keys() == b.keys(), name
        for key in b:
            _same_values(a[key], b[key], f"{name}.{key}")
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b, err_msg=name)


def test_read_lerobot_is_arrow_without_a_store_and_what_the_import_stores(tmp_path: Path) -> None:
    import polars as pl

    from rlarrow.io.lerobot import import_lerobot, read_lerobot

    source = read_lerobot(SRC, run_id="r")
    assert not any(tmp_path.iterdir())  # (nothing written: no store)
    assert [chunk.steps.num_rows for chunk in source] == [n + 1 for n in LENGTHS]  # an episode a chunk
    steps, episodes = source.read()
    import_lerobot(SRC, tmp_path / "s", run_id="r", progress=False)
    store = rlarrow.Store.open(tmp_path / "s")
    stored = _sorted(store.read("steps"))
    assert steps.num_rows == stored.num_rows == sum(LENGTHS) + len(LENGTHS)
    for name in ("episode_id", "step", "reward", "is_first", "is_last", "is_terminal", "metadata",
                 "metadata_types", "infos", "observation", "action"):
        _same(_sorted(steps).column(name), stored.column(name), name)
    assert episodes.column("num_steps").to_pylist() == [n + 1 for n in LENGTHS]
    stored_episodes = store.read("episodes").sort_by("episode_id")
    assert episodes.column("metadata").to_pylist() == stored_episodes.column("metadata").to_pylist()
    # polars reads the stream (the numeric columns; the cameras are tensors of an extension type)
    frame = pl.from_arrow(source.steps()).select("episode_id", "step", "reward", "is_last")
    assert frame.height == steps.num_rows and frame["is_last"].sum() == len(LENGTHS)
    assert frame["step"].to_list() == _sorted(steps).column("step").to_pylist()
    again = pickle.loads(pickle.dumps(source))  # (a recipe: it reads the dataset again)
    assert again.run_id == "r" and again.read()[0].num_rows == steps.num_rows


def test_read_lerobot_keeps_numeric_frames_in_arrow() -> None:
    import pyarrow.parquet as pq

    from rlarrow.io.lerobot import read_lerobot

    chunk = next(iter(read_lerobot(SRC)))
    frames = pq.read_table(SRC / "data" / "chunk-000" / "file-000.parquet")
    first = frames.filter(pc.equal(frames["episode_index"], 0)).sort_by("frame_index")
    state = chunk.steps.column("observation").combine_chunks().field("state")
    assert state.type == first.column("observation.state").type == pa.list_(pa.float32(), 2)
    assert state.slice(0, LENGTHS[0]).to_pylist() == first.column("observation.state").to_pylist()
    assert chunk.steps.column("observation")[LENGTHS[0]].as_py() is None  # (none after the last action)
    action = chunk.steps.column("action")
    assert action.slice(0, LENGTHS[0]).to_pylist() == first.column("action").to_pylist()
    assert action[LENGTHS[0]].as_py() is None


def test_keep_video_puts_videos_rows_in_the_chunks() -> None:
    from rlarrow.io.lerobot import read_lerobot

    chunks = list(read_lerobot(SRC, run_id="r", video="keep"))
    videos = [chunk.tables["videos"] for chunk in chunks]
    assert [v.num_rows for v in videos] == [1, 1, 1]
    assert {v.column("column")[0].as_py() for v in videos} == {"observation.images.top"}
    assert [v.column("episode_id")[0].as_py() for v in videos] == [0, 1, 2]
    fields = [f.name for f in chunks[0].steps.column("observation").type]
    assert "images" not in fields and "state" in fields  # (the camera is the videos row, not decoded)


def test_an_import_damaged_in_its_last_episode_leaves_the_store_at_its_version(tmp_path: Path) -> None:
    from rlarrow.io.lerobot import import_lerobot, read_lerobot

    src = tmp_path / "ds"
    shutil.copytree(V21, src)
    last = src / "data" / "chunk-000" / "episode_000002.parquet"
    last.write_bytes(last.read_bytes()[:100])  # the last episode's frames cut short
    chunks = iter(read_lerobot(src))  # (read an episode at a time: the damage is found at the last)
    assert [next(chunks).steps.num_rows for _ in LENGTHS[:2]] == [n + 1 for n in LENGTHS[:2]]
    with pytest.raises(rlarrow.CorruptFileError, match="episode_000002.parquet"):
        next(chunks)
    import_lerobot(V21, tmp_path / "s", run_id="before", progress=False)
    store = rlarrow.Store.open(tmp_path / "s")
    version, rows = store.version, store.row_count("steps")
    with pytest.raises(rlarrow.CorruptFileError, match="episode_000002.parquet"):
        import_lerobot(src, store, run_id="after", progress=False)
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.version == version and store.row_count("steps") == rows
    assert [r["run_id"] for r in store.runs().to_pylist()] == ["before"]


def _peer(root: Path, tmp_path: Path) -> dict[str, np.ndarray]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = tmp_path / "peer.npz"
    done = subprocess.run([sys.executable, os.fspath(Path(__file__).with_name("lerobot_peer.py")),
                           os.fspath(root), os.fspath(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as f:
        return dict(f)


def _minari_values() -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """CartPole's episodes as Minari holds them: lengths, observations (not the last), actions, rewards."""
    from rlarrow.io.minari import read_minari

    lengths, obs, actions, rewards = [], [], [], []
    for table, _ in read_minari(CARTPOLE).by_episode():
        n = table.num_rows - 1
        lengths.append(n)
        obs.append(to_numpy(table.column("observation").slice(0, n)))
        actions.append(to_numpy(table.column("action").slice(0, n)))
        rewards.append(to_numpy(table.column("reward").slice(0, n)))
    return lengths, np.concatenate(obs), np.concatenate(actions), np.concatenate(rewards)


@pytest.mark.slow  # (lerobot's own loader in a subprocess: 10-25 s)
@needs_lerobot
def test_a_minari_dataset_written_as_lerobot_loads_in_lerobot_value_for_value(tmp_path: Path) -> None:
    from rlarrow.io.lerobot import read_lerobot, write_lerobot
    from rlarrow.io.minari import read_minari

    with pytest.warns(UserWarning, match="final observation"):
        write_lerobot(read_minari(CARTPOLE), tmp_path / "out", task="balance", progress=False)
    lengths, obs, actions, rewards = _minari_values()
    got = _peer(tmp_path / "out", tmp_path)
    assert int(got["_episodes"]) == len(lengths) and got["_version"] == "v3.0"
    np.testing.assert_array_equal(got["observation.state"], obs)
    np.testing.assert_array_equal(got["action"].reshape(actions.shape), actions)
    np.testing.assert_array_equal(got["next.reward"].reshape(-1), rewards.astype(np.float32))
    assert set(got["task"].tolist()) == {"balance"}
    steps, _ = read_lerobot(tmp_path / "out").read()  # (and rlarrow's own reader)
    assert steps.num_rows == sum(lengths) + len(lengths)


@pytest.mark.slow  # (two rlarrow processes: 10-17 s)
def test_convert_to_lerobot_from_minari_and_to_minari_from_lerobot(tmp_path: Path) -> None:
    from rlarrow.io.lerobot import read_lerobot

    run = [sys.executable, "-m", "rlarrow", "convert"]
    out = subprocess.run([*run, str(CARTPOLE), "--to", "lerobot", "-o", str(tmp_path / "le")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "as lerobot" in out.stdout and not (tmp_path / "store").exists()
    lengths, obs, actions, _ = _minari_values()
    steps, episodes = read_lerobot(tmp_path / "le").read()
    assert episodes.column("num_steps").to_pylist() == [n + 1 for n in lengths]
    state = to_numpy(steps.column("observation").filter(pc.is_valid(steps.column("observation"))))["state"]
    np.testing.assert_array_equal(state, obs)
    # LeRobot keeps no observation after an episode's last action, which every Minari episode needs
    out = subprocess.run([*run, str(SRC), "--to", "minari", "-o", str(tmp_path / "mi")],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "final observation" in out.stderr
    assert not (tmp_path / "mi").exists()
