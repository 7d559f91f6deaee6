"""LeRobot exports (codebase v3.0, and v2.1 for older lerobot) load in LeRobot and import back.

Two readers check each export: lerobot's own ``LeRobotDataset`` (0.4.4 for v3.0, 0.3.3 for
v2.1; ``make`` installs both as test-only peers, run in a subprocess by ``lerobot_peer.py``)
and rlarrow's importer. The data is the LeRobot fixture (``tests/fixtures/lerobot``, written
by lerobot's own writer; its ``written.npz`` holds every value given to it) and a run recorded
from a gymnasium-style environment (a dict observation with a camera, float64 rewards, an
episode that ends terminal and one cut short).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO

import rlarrow
from rlarrow.cli import cli
from rlarrow.core import metadata
from rlarrow.core.errors import ArgumentError, InvalidInputError
from rlarrow.core.tensors import to_numpy

HAVE_AV = importlib.util.find_spec("av") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"
)
HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None
LEROBOT_033 = REPO / ".venv" / "peers" / "lerobot-0.3.3"
needs_lerobot = pytest.mark.skipif(
    not HAVE_LEROBOT,
    reason="lerobot is not installed (make test installs it, with --no-deps: see the Makefile)",
)
NEEDS_033 = pytest.mark.skipif(
    not LEROBOT_033.is_dir(), reason="lerobot 0.3.3 (reads v2.1) is not in .venv/peers: make test installs it"
)
SRC = FIXTURES / "lerobot" / "pusht_v30"
WRITTEN = FIXTURES / "lerobot" / "pusht_v30.written.npz"
LENGTHS = (6, 8, 5)
TASKS = ("push the T onto the target", "hold still")
VIDEO_TOLERANCE = 12  # AV1 (lossy) twice: LeRobot's encode, then ours; each frame is a flat color


def lerobot_load(root: Path, codebase: str, tmp_path: Path) -> dict[str, np.ndarray]:
    """Every frame of ``root`` as lerobot's LeRobotDataset gives it (lerobot_peer.py, a subprocess)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    if codebase == "v2.1":  # (the tests that come here are marked NEEDS_033)
        env["PYTHONPATH"] = os.fspath(LEROBOT_033)
    out = tmp_path / f"peer-{codebase}.npz"
    done = subprocess.run(
        [
            sys.executable,
            os.fspath(Path(__file__).with_name("lerobot_peer.py")),
            os.fspath(root),
            os.fspath(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as f:
        return dict(f)


def imported(tmp_path: Path, name: str = "s") -> rlarrow.Store:
    from rlarrow.io.lerobot import import_lerobot

    import_lerobot(SRC, tmp_path / name, progress=False)
    return rlarrow.Store.open(tmp_path / name)


def frames_by_episode(peer: dict[str, np.ndarray], key: str) -> list[np.ndarray]:
    ends = np.cumsum(LENGTHS)
    return np.split(peer[key], ends[:-1])


@needs_lerobot
@pytest.mark.parametrize("codebase", ["v3.0", pytest.param("v2.1", marks=NEEDS_033)])
def test_lerobot_loads_the_export_of_a_lerobot_import(tmp_path, codebase):
    from rlarrow.io.lerobot import export_lerobot

    store = imported(tmp_path)
    export_lerobot(store, tmp_path / "out", codebase=codebase, progress=False)
    peer = lerobot_load(tmp_path / "out", codebase, tmp_path)
    written = np.load(WRITTEN)
    assert (str(peer["_version"]), int(peer["_episodes"])) == (codebase, 3)
    for e, n in enumerate(LENGTHS):
        lo = sum(LENGTHS[:e])
        got = {k: v[lo : lo + n] for k, v in peer.items() if not k.startswith("_")}
        np.testing.assert_array_equal(got["observation.state"], written[f"{e}/observation.state"])
        np.testing.assert_array_equal(got["action"], written[f"{e}/action"])
        # PNG images: exact; LeRobot gives float CHW in [0, 1]
        image = np.round(got["observation.image"].transpose(0, 2, 3, 1) * 255).astype(np.uint8)
        np.testing.assert_array_equal(image, written[f"{e}/observation.image"])
        top = got["observation.images.top"].transpose(0, 2, 3, 1) * 255
        assert np.abs(top - written[f"{e}/observation.images.top"]).max() <= VIDEO_TOLERANCE
        np.testing.assert_array_equal(got["episode_index"], e)
        np.testing.assert_array_equal(got["frame_index"], np.arange(n))
        np.testing.assert_allclose(got["timestamp"], np.arange(n) / 10, atol=1e-6)
        assert set(got["task"]) == {TASKS[e % 2]}
    np.testing.assert_array_equal(peer["index"], np.arange(sum(LENGTHS)))
    if codebase == "v3.0":  # meta/stats.json: the dataset's statistics, as LeRobot's own
        states = np.concatenate([written[f"{e}/observation.state"] for e in range(3)]).astype(np.float64)
        np.testing.assert_allclose(peer["_stats/observation.state/mean"], states.mean(0), rtol=1e-6)
        np.testing.assert_allclose(peer["_stats/observation.state/std"], states.std(0), rtol=1e-6)
        np.testing.assert_array_equal(peer["_stats/observation.state/min"], states.min(0))
        assert int(peer["_stats/action/count"][0]) == sum(LENGTHS)


@pytest.mark.parametrize(("codebase", "images"), [("v3.0", "auto"), ("v2.1", "auto"), ("v3.0", "png")])
def test_export_imports_back_to_the_same_steps(tmp_path, codebase, images):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    store = imported(tmp_path)
    export_lerobot(store, tmp_path / "out", codebase=codebase, images=images, progress=False)
    import_lerobot(tmp_path / "out", tmp_path / "again", progress=False)
    a = store.read("steps").sort_by([("episode_id", "ascending"), ("step", "ascending")])
    b = (
        rlarrow.Store.open(tmp_path / "again")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    assert a.num_rows == b.num_rows == sum(LENGTHS) + 3
    for name in ("episode_id", "step", "is_first", "is_last", "is_terminal", "metadata", "metadata_types"):
        assert a.column(name).to_pylist() == b.column(name).to_pylist(), name
    np.testing.assert_array_equal(
        to_numpy(a.column("action"), fill_value=0), to_numpy(b.column("action"), fill_value=0)
    )
    oa, ob = to_numpy(a.column("observation"), fill_value=0), to_numpy(b.column("observation"), fill_value=0)
    np.testing.assert_array_equal(oa["state"], ob["state"])
    np.testing.assert_array_equal(oa["image"], ob["image"])
    diff = np.abs(oa["images"]["top"].astype(int) - ob["images"]["top"].astype(int)).max()
    assert diff <= VIDEO_TOLERANCE
    assert a.column("observation").is_null().to_pylist() == b.column("observation").is_null().to_pylist()
    again = rlarrow.Store.open(tmp_path / "again")
    run = again.runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["tasks"] == {0: TASKS[0], 1: TASKS[1]}
    assert meta["info"]["codebase_version"] == codebase
    assert meta["info"]["robot_type"] == "pusht"
    kinds = {k: f["dtype"] for k, f in meta["info"]["features"].items()}
    assert kinds["observation.image"] == "image"
    assert kinds["observation.images.top"] == ("image" if images == "png" else "video")
    episodes = again.read("episodes").sort_by("episode_id").to_pylist()
    assert [metadata.decode(e["metadata"], e["metadata_types"])["tasks"] for e in episodes] == [
        [TASKS[0]],
        [TASKS[1]],
        [TASKS[0]],
    ]


def gym_store(path: Path, *, size: tuple[int, int] = (16, 20)) -> rlarrow.Store:
    """Two episodes of a dict-observation env: 4 steps ending terminal, 3 cut short (truncated)."""
    rng = np.random.default_rng(1)
    store = rlarrow.Store.create(path)
    for e, (n, terminal) in enumerate([(4, True), (3, False)]):
        rows = n + 1
        last = np.arange(rows) == n
        store.append(
            "steps",
            {
                "run_id": "gym",
                "episode_id": e,
                "step": np.arange(rows),
                "env_index": 0,
                "observation": {
                    "pixels": rng.integers(0, 256, (rows, *size, 3), dtype=np.uint8),
                    "state": rng.normal(size=(rows, 3)),
                },
                "action": [int(a) for a in rng.integers(0, 4, n)] + [None],
                "reward": [float(r) for r in rng.normal(size=n)] + [None],
                "discount": [1.0] * (n - 1) + [0.0 if terminal else 1.0] + [None],
                "is_first": np.arange(rows) == 0,
                "is_last": last,
                "is_terminal": last & terminal,
            },
        )
    return store


def test_a_recorded_run_exports_with_rewards_done_and_cameras(tmp_path):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    store = gym_store(tmp_path / "s")
    with pytest.warns(UserWarning, match="2 final observation"):
        export_lerobot(store, tmp_path / "out", images="png", fps=15, task="reach", progress=False)
    import_lerobot(tmp_path / "out", tmp_path / "back", progress=False)
    a = store.read("steps")
    b = (
        rlarrow.Store.open(tmp_path / "back")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    assert b.num_rows == a.num_rows  # N frames: N + 1 steps again, the last observation null
    keep = ~np.asarray(a.column("is_last").to_numpy(zero_copy_only=False))
    oa = to_numpy(a.column("observation"))
    ob = to_numpy(b.column("observation").filter(keep))
    np.testing.assert_array_equal(ob["pixels"], oa["pixels"][keep])  # PNG: exact
    np.testing.assert_array_equal(ob["state"], oa["state"][keep])  # float64 kept
    np.testing.assert_array_equal(
        to_numpy(b.column("action").filter(keep)), to_numpy(a.column("action").filter(keep))
    )
    assert b.column("reward").filter(keep).to_pylist() == a.column("reward").filter(keep).to_pylist()
    assert b.column("is_terminal").to_pylist() == a.column("is_terminal").to_pylist()
    info = metadata.decode(
        *rlarrow.Store.open(tmp_path / "back")
        .runs()
        .select(["metadata", "metadata_types"])
        .to_pylist()[0]
        .values()
    )["info"]
    assert info["fps"] == 15
    assert {k: f["dtype"] for k, f in info["features"].items()}["next.reward"] == "float64"
    timestamps = b.column("infos").combine_chunks().field("timestamp")  # (typed: steps 1.1)
    assert timestamps.type == pa.float32()
    assert timestamps.to_pylist()[:4] == pytest.approx([0, 1 / 15, 2 / 15, 3 / 15])


@needs_lerobot
def test_lerobot_loads_a_recorded_run_as_video(tmp_path):
    from rlarrow.io.lerobot import export_lerobot

    store = gym_store(tmp_path / "s")
    with pytest.warns(UserWarning, match="final observation"):
        export_lerobot(store, tmp_path / "out", progress=False)
    peer = lerobot_load(tmp_path / "out", "v3.0", tmp_path)
    a = store.read("steps")
    keep = ~np.asarray(a.column("is_last").to_numpy(zero_copy_only=False))
    obs = to_numpy(a.column("observation"))
    # the file holds float64 (the import above reads it back exactly); LeRobot's loader gives
    # float lists as torch.tensor's default float32
    np.testing.assert_array_equal(peer["observation.state"], obs["state"][keep].astype(np.float32))
    np.testing.assert_array_equal(peer["action"], to_numpy(a.column("action").filter(keep)))
    rewards = np.asarray(a.column("reward").filter(keep).to_pylist())
    np.testing.assert_array_equal(peer["next.reward"], rewards.astype(peer["next.reward"].dtype))
    np.testing.assert_array_equal(peer["next.done"], [0, 0, 0, 1, 0, 0, 0])
    assert peer["observation.pixels"].shape == (7, 3, 16, 20)  # AV1 of noise: lossy, shape and order kept
    assert set(peer["task"]) == {"gym"}


def test_bad_options_and_frames_video_cannot_hold_are_refused(tmp_path):
    from rlarrow.io.lerobot import export_lerobot

    store = gym_store(tmp_path / "s", size=(15, 20))
    with pytest.raises(ArgumentError, match="codebase"):
        export_lerobot(store, tmp_path / "o1", codebase="v2.0")
    with pytest.raises(ArgumentError, match="images"):
        export_lerobot(store, tmp_path / "o1", images="jpeg")
    with pytest.raises(InvalidInputError, match="even height") as info:
        export_lerobot(store, tmp_path / "o1", images="video", progress=False)
    assert "images='png'" in str(info.value)
    assert not (tmp_path / "o1").exists()  # nothing left behind
    with pytest.warns(UserWarning, match="final observation"):  # auto: odd-sized frames go as PNG
        export_lerobot(store, tmp_path / "o2", progress=False)
    assert not list((tmp_path / "o2").glob("videos"))


def test_cli_exports_lerobot_and_refuses_its_options_for_other_formats(tmp_path):
    gym_store(tmp_path / "s")
    runner = CliRunner()
    with pytest.warns(UserWarning, match="final observation"):
        result = runner.invoke(
            cli,
            [
                "export",
                str(tmp_path / "s"),
                "-o",
                str(tmp_path / "out"),
                "--format",
                "lerobot",
                "--codebase",
                "v2.1",
                "--images",
                "png",
                "--fps",
                "20",
            ],
        )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "meta" / "episodes.jsonl").is_file()
    assert '"fps": 20' in (tmp_path / "out" / "meta" / "info.json").read_text()
    result = runner.invoke(
        cli,
        ["export", str(tmp_path / "s"), "-o", str(tmp_path / "o"), "--format", "rlds", "--codebase", "v2.1"],
    )
    assert result.exit_code != 0
    assert "--codebase applies to --format lerobot" in result.output


def plain_store(path: Path, obs: np.ndarray, *, actions: Any = None, rewards: Any = None) -> rlarrow.Store:
    """One 4-step episode (5 rows) of a plain observation ``obs`` (5 rows)."""
    store = rlarrow.Store.create(path)
    last = np.arange(5) == 4
    store.append(
        "steps",
        {
            "run_id": "r",
            "episode_id": 0,
            "step": np.arange(5),
            "env_index": 0,
            "observation": obs,
            "action": actions if actions is not None else [np.float32([i, -i]) for i in range(4)] + [None],
            "reward": rewards if rewards is not None else [1.0, 2.0, 3.0, 4.0, None],
            "is_first": np.arange(5) == 0,
            "is_last": last,
            "is_terminal": last,
        },
    )
    return store


@needs_lerobot
def test_plain_observations_are_observation_state_or_image(tmp_path):
    from rlarrow.io.lerobot import export_lerobot

    states = np.arange(15, dtype=np.float32).reshape(5, 3)
    with pytest.warns(UserWarning, match="1 final observation"):
        export_lerobot(plain_store(tmp_path / "a", states), tmp_path / "oa", progress=False)
    peer = lerobot_load(tmp_path / "oa", "v3.0", tmp_path)
    np.testing.assert_array_equal(peer["observation.state"], states[:4])
    frames = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
    with pytest.warns(UserWarning, match="final observation"):
        export_lerobot(plain_store(tmp_path / "b", frames), tmp_path / "ob", images="png", progress=False)
    peer = lerobot_load(tmp_path / "ob", "v3.0", tmp_path)
    got = np.round(peer["observation.image"].transpose(0, 2, 3, 1) * 255).astype(np.uint8)
    np.testing.assert_array_equal(got, frames[:4])


@needs_lerobot
def test_a_new_fps_retimes_a_lerobot_run_and_its_video(tmp_path):
    from rlarrow.io.lerobot import export_lerobot

    export_lerobot(imported(tmp_path), tmp_path / "out", fps=20, progress=False)
    peer = lerobot_load(tmp_path / "out", "v3.0", tmp_path)
    written = np.load(WRITTEN)
    for e, top in enumerate(frames_by_episode(peer, "observation.images.top")):
        assert (
            np.abs(top.transpose(0, 2, 3, 1) * 255 - written[f"{e}/observation.images.top"]).max()
            <= VIDEO_TOLERANCE
        )
    np.testing.assert_allclose(peer["timestamp"][: LENGTHS[0]], np.arange(LENGTHS[0]) / 20, atol=1e-6)


def test_rewards_are_the_runs_not_the_first_episodes(tmp_path):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    store = rlarrow.Store.create(tmp_path / "s")
    for e, rewards in enumerate([[None] * 5, [1.5, 2.5, 3.5, 4.5, None]]):  # none in the first episode
        last = np.arange(5) == 4
        store.append(
            "steps",
            {
                "run_id": "r",
                "episode_id": e,
                "step": np.arange(5),
                "env_index": 0,
                "observation": np.zeros((5, 2), np.float32),
                "action": [np.float32([1, 2])] * 4 + [None],
                "reward": rewards,
                "is_first": np.arange(5) == 0,
                "is_last": last,
                "is_terminal": last,
            },
        )
    with pytest.warns(UserWarning, match="final observation"):
        export_lerobot(store, tmp_path / "out", progress=False)
    import_lerobot(tmp_path / "out", tmp_path / "back", progress=False)
    back = (
        rlarrow.Store.open(tmp_path / "back")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    rewards = back.column("reward").to_numpy(zero_copy_only=False)
    assert np.isnan(rewards[:4]).all()  # the episode without rewards: NaN, its rewards not left out
    assert rewards[5:9].tolist() == [1.5, 2.5, 3.5, 4.5]


def test_what_lerobot_cannot_hold_is_refused_with_what_to_do(tmp_path):
    from rlarrow.io.lerobot import export_lerobot

    grey = np.zeros((5, 8, 8, 1), np.uint8)
    with pytest.raises(InvalidInputError, match="codebase v3.0"):
        export_lerobot(plain_store(tmp_path / "g", grey), tmp_path / "o", codebase="v2.1", progress=False)
    with pytest.warns(UserWarning, match="final observation"):  # v3.0 holds a grey camera (as PNG)
        export_lerobot(plain_store(tmp_path / "g2", grey), tmp_path / "o3", progress=False)
    states = np.zeros((5, 2), np.float32)
    actions = [np.float32([0, 0]), None, np.float32([0, 0]), np.float32([0, 0]), None]
    with pytest.raises(InvalidInputError, match="null action"):
        export_lerobot(plain_store(tmp_path / "n", states, actions=actions), tmp_path / "o", progress=False)
    tiny = np.zeros((5, 2, 2, 3), np.uint8)
    with pytest.raises(InvalidInputError, match="4 or more"):
        export_lerobot(plain_store(tmp_path / "t", tiny), tmp_path / "o", images="video", progress=False)
    with pytest.warns(UserWarning, match="final observation"):  # auto: PNG
        export_lerobot(plain_store(tmp_path / "t2", tiny), tmp_path / "o4", progress=False)
    with pytest.raises(ArgumentError, match="positive integer"):
        export_lerobot(plain_store(tmp_path / "f", states), tmp_path / "o", fps=29.97)  # type: ignore[arg-type]
    rlarrow.Store.create(tmp_path / "empty")
    with pytest.raises(rlarrow.StoreError, match="no run has steps"):
        export_lerobot(tmp_path / "empty", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_struct_action_comes_back_a_struct(tmp_path):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    # (the last step's action is not null here, a struct column's rows cannot be given null; the
    # step is the episode's last all the same: is_last)
    actions = {"arm": np.float32([[i, i + 1] for i in range(5)]), "grip": np.arange(5) % 2}
    store = plain_store(tmp_path / "s", np.zeros((5, 2), np.float32), actions=actions)
    with pytest.warns(UserWarning, match="final observation"):
        export_lerobot(store, tmp_path / "out", progress=False)
    import_lerobot(tmp_path / "out", tmp_path / "back", progress=False)
    back = rlarrow.Store.open(tmp_path / "back").read("steps").sort_by("step")
    got = to_numpy(back.column("action").slice(0, 4))
    np.testing.assert_array_equal(got["arm"], np.float32([[i, i + 1] for i in range(4)]))
    np.testing.assert_array_equal(got["grip"], [0, 1, 0, 1])
