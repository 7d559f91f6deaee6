"""LeRobot v3.0 and v2.1 datasets written by LeRobot's own writers import without LeRobot.

The fixtures (``tests/fixtures/lerobot``, made by ``make_lerobot_fixtures.py`` with lerobot 0.4.4
and 0.3.3) carry ``<name>.written.npz``: every value given to ``add_frame``. Numbers and PNG
images come back exactly; the AV1 camera is lossy, so each decoded frame is checked to be the
frame written at its place (every frame is a flat color that names its episode and frame).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.tensors import to_numpy

HAVE_AV = importlib.util.find_spec("av") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"
)
SRC = FIXTURES / "lerobot" / "pusht_v30"
VERSIONS = {"pusht_v30": "v3.0", "pusht_v21": "v2.1"}
LENGTHS = (6, 8, 5)


def color(e, t):  # (as make_lerobot_fixtures.py paints each frame)
    return np.array([40 + 60 * e, 20 + 25 * t, 200 - 25 * t], float)


@pytest.mark.parametrize("name", list(VERSIONS))
def test_frames_actions_images_and_video_come_back_as_written(tmp_path, name):
    from rlarrow.io.lerobot import import_lerobot, is_lerobot_dir

    src = FIXTURES / "lerobot" / name
    assert is_lerobot_dir(src)
    report = import_lerobot(src, tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (3, sum(LENGTHS) + 3)
    written = np.load(FIXTURES / "lerobot" / f"{name}.written.npz")
    store = rlarrow.Store.open(tmp_path / "s")
    steps = store.read("steps")
    run = store.runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert (run["source"], meta["info"]["codebase_version"], meta["tasks"]) == (
        "lerobot",
        VERSIONS[name],
        {0: "push the T onto the target", 1: "hold still"},
    )
    if name == "pusht_v30":  # (v2.1 keeps only each episode's stats)
        assert set(meta["stats"]) >= {"observation.state", "action", "observation.images.top"}
    for ep in store.read("episodes").sort_by("episode_id").to_pylist():
        e = ep["episode_id"]
        n = LENGTHS[e]
        rows = steps.filter(pc.equal(steps["episode_id"], e)).sort_by("step")
        assert rows.num_rows == ep["num_steps"] == n + 1  # N frames, and the final step LeRobot does not keep
        assert rows["is_last"].to_pylist() == [False] * n + [True]
        assert rows["observation"][n].as_py() is None and rows["action"][n].as_py() is None
        obs = to_numpy(rows["observation"].combine_chunks().slice(0, n), fill_value=0)
        assert obs["state"].dtype == np.float32 and np.array_equal(
            obs["state"], written[f"{e}/observation.state"]
        )
        assert np.array_equal(obs["image"], written[f"{e}/observation.image"])  # PNG: exact
        action = to_numpy(rows["action"].combine_chunks().slice(0, n))
        assert np.array_equal(action, written[f"{e}/action"])
        top = obs["images"]["top"]
        assert top.shape == (n, 24, 32, 3) and top.dtype == np.uint8
        for t in range(n):  # the right frame in the right place: nearest of all the episode's colors
            mean = top[t].reshape(-1, 3).mean(0)
            assert int(np.argmin([np.abs(mean - color(e, u)).sum() for u in range(n)])) == t, (e, t)
            assert np.abs(mean - color(e, t)).max() < 6  # AV1 is lossy; not that lossy
        infos = rows["infos"].combine_chunks()  # LeRobot's per-frame numbers, typed (steps 1.1)
        assert infos.type == pa.struct([("timestamp", pa.float32()), ("frame_index", pa.int64()),
                                        ("episode_index", pa.int64()), ("index", pa.int64()),
                                        ("task_index", pa.int64())])  # info.json's dtypes
        assert infos.is_null().to_pylist() == [False] * n + [True]  # none after the last frame
        assert infos.field("frame_index").to_pylist()[:n] == list(range(n))
        assert infos.field("episode_index").to_pylist()[:n] == [e] * n
        assert infos.field("task_index").to_pylist()[:n] == [e % 2] * n
        assert np.allclose(infos.field("timestamp").slice(0, n).to_numpy(), np.arange(n) / 10)
        assert rows["metadata"].null_count == n + 1  # (nothing else per frame: no JSON text)
        ep_meta = json.loads(ep["metadata"])
        assert ep_meta["tasks"] == [["push the T onto the target", "hold still"][e % 2]]
        assert ep_meta["length"] == n and "observation.state" in ep_meta["stats"]


def test_convert_takes_both_versions_and_names_older_ones(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlarrow",
            "convert",
            str(SRC),
            str(FIXTURES / "lerobot" / "pusht_v21"),
            "-o",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.read("sources")["format"].to_pylist() == ["lerobot", "lerobot"]
    old = tmp_path / "old"
    shutil.copytree(SRC, old)
    info = json.loads((old / "meta" / "info.json").read_text())
    (old / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    out = subprocess.run(
        [sys.executable, "-m", "rlarrow", "convert", str(old), "-o", str(tmp_path / "t")],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "looks like a LeRobot dataset of an older codebase" in out.stderr


@pytest.mark.parametrize("damage", ["frames", "video"])
def test_a_damaged_dataset_is_refused_and_the_store_left_as_it_was(tmp_path, damage):
    import pyarrow.parquet as pq

    from rlarrow.io.lerobot import import_lerobot

    src = tmp_path / "ds"
    shutil.copytree(SRC, src)
    if damage == "frames":  # a frame of episode 1 lost
        path = src / "data" / "chunk-000" / "file-000.parquet"
        table = pq.read_table(path)
        pq.write_table(table.filter(pc.not_equal(table["index"], 9)), path)
        match = "episode 1 has 7 frames here"
    else:  # the video cut short: the last episode's frames are missing
        path = src / "videos" / "observation.images.top" / "chunk-000" / "file-000.mp4"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        match = "file-000.mp4"
    store = rlarrow.Store.create(tmp_path / "s")
    store.add_run(source="user", run_id="before")
    with pytest.raises(rlarrow.CorruptFileError, match=match):
        import_lerobot(src, store, progress=False)
    assert [r["run_id"] for r in store.runs().to_pylist()] == ["before"] and store.row_count("steps") == 0


def test_reader_columns_of_an_episode_with_a_null_final_observation(tmp_path):
    # (to_numpy of a struct field taken from a longer parent made a list array of the parent's
    # length: Reader.episode_columns and the envlogger export crashed on every LeRobot import)
    from rlarrow.io.lerobot import import_lerobot

    import_lerobot(SRC, tmp_path / "s", progress=False)
    steps = rlarrow.Store.open(tmp_path / "s").read("steps").sort_by(
        [("episode_id", "ascending"), ("step", "ascending")])
    want = to_numpy(steps.column("observation"), fill_value=0)["state"]
    reader = rlarrow.Reader(tmp_path / "s")
    np.testing.assert_array_equal(reader.episode_columns(0)["observation"]["state"], want[: LENGTHS[0] + 1])
    got = reader.episode_columns(1)["observation"]["state"]
    np.testing.assert_array_equal(got, want[LENGTHS[0] + 1 : LENGTHS[0] + LENGTHS[1] + 2])
