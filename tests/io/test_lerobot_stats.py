"""``rlarrow stats -o`` and ``export_lerobot`` write LeRobot's ``stats.json``, with one quantile definition.

The LeRobot fixture is imported; ``rlarrow stats STORE -o stats.json`` and the export's
``meta/stats.json`` are compared with lerobot 0.4.4's own ``compute_episode_stats`` and
``aggregate_stats`` (``lerobot_stats_peer.py``, in a subprocess) on the same frames, LeRobot's
bookkeeping features (timestamp, frame_index, episode_index, index, task_index) included.

Quantile definitions. rlarrow's ``qNN`` is the quantile of every value of the selection
merged, by ``numpy``'s ``inverted_cdf`` definition (the smallest value whose share of values
at or below it is at least q; KLL sketches, exact while an element has fewer than 200 values,
within 1.33 % of rank beyond). lerobot 0.4.4 computes each episode's quantile from a
5,000-bin histogram between the episode's min and max, interpolating linearly inside the
bin, and ``aggregate_stats`` averages the episodes' quantiles weighted by their frame counts,
which is not a quantile of the union (LeRobot issue 4156). So rlarrow's quantiles are compared
with LeRobot's own quantile of the union (every frame given to ``compute_episode_stats`` as one
episode): for a numeric element, LeRobot's value lies between the order statistics next to
rank q * N (it interpolates where rlarrow takes one of them), within a bin's width; for camera
channels (pixel values k / 255, whose quantiles rlarrow counts exactly) within 0.02. Moments,
min, max and count agree with ``aggregate_stats`` to 1e-6, relative (LeRobot averages float32
features in float32), but for the cameras' std: lerobot 0.4.4 squares uint8 pixels in uint8,
which wraps, so its image std is wrong; rlarrow's is numpy's of the same pixels.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import rlarrow
from rlarrow.cli import cli

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("av") is None,
                       reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"),
    pytest.mark.skipif(importlib.util.find_spec("datasketches") is None,
                       reason="quantiles need datasketches: pip install 'rlarrow[stats]'"),
]
needs_lerobot = pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="lerobot is not installed (make test installs it, with --no-deps: see the Makefile)")

SRC = FIXTURES / "lerobot" / "pusht_v30"
FEATURES = ("observation.state", "action", "observation.image", "observation.images.top")
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # LeRobot's own
IMAGES = ("observation.image", "observation.images.top")
LEROBOT_STATS = json.loads((SRC / "meta" / "stats.json").read_text())
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def lerobots_stats(frames: dict[int, dict[str, np.ndarray]], tmp_path: Path) -> dict[str, np.ndarray]:
    given = tmp_path / "frames.npz"
    arrays = {f"{e}/{n}": v for e, ep in frames.items() for n, v in ep.items()}
    np.savez(given, _images=np.array(IMAGES), **arrays)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, os.fspath(Path(__file__).with_name("lerobot_stats_peer.py")),
                           os.fspath(given), os.fspath(tmp_path / "theirs.npz")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "theirs.npz") as f:
        return dict(f)


def stored_frames(store: rlarrow.Store) -> dict[int, dict[str, np.ndarray]]:
    """Each episode's frames as the store holds them (cameras decoded), as LeRobot would get them,
    with the bookkeeping columns of the fixture's own data files (LeRobot's, not rlarrow's)."""
    import pyarrow.parquet as pq

    data = pq.read_table(SRC / "data" / "chunk-000" / "file-000.parquet", columns=list(BOOKKEEPING))
    own = {name: data.column(name).to_numpy() for name in BOOKKEEPING}
    out: dict[int, dict[str, np.ndarray]] = {}
    with rlarrow.Reader(store) as reader:
        for k in range(len(reader.episodes)):
            cols = reader.episode_columns(k)
            frame = ~np.isnan(cols["action"]).any(axis=1)  # a step with an action (not the final one)
            obs = cols["observation"]
            out[k] = {"observation.state": obs["state"][frame], "action": cols["action"][frame],
                      "observation.image": obs["image"][frame],
                      "observation.images.top": obs["images"]["top"][frame]}
            mine = own["episode_index"] == k
            assert mine.sum() == frame.sum()  # the same frames
            out[k].update({name: own[name][mine] for name in BOOKKEEPING})
    return out


@pytest.mark.slow
@needs_lerobot
def test_stats_json_is_lerobots_and_the_export_writes_the_same_quantiles(tmp_path):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    import_lerobot(SRC, tmp_path / "s", progress=False)
    store = rlarrow.Store.open(tmp_path / "s")
    result = CliRunner().invoke(cli, ["stats", str(tmp_path / "s"), "-o", str(tmp_path / "stats.json")])
    assert result.exit_code == 0, result.output
    ours = json.loads((tmp_path / "stats.json").read_text())
    assert set(FEATURES) <= set(ours)  # LeRobot's feature names
    export_lerobot(store, tmp_path / "out", progress=False)
    exported = json.loads((tmp_path / "out" / "meta" / "stats.json").read_text())
    frames = stored_frames(store)
    theirs = lerobots_stats(frames, tmp_path)
    assert set(ours) == set(exported) == set(LEROBOT_STATS)  # LeRobot's own stats.json's features
    for name in BOOKKEEPING:  # the export's own numbers; LeRobot's aggregate is checked below
        assert ours[name] == exported[name], name
        for key in ("min", "max", "mean", "std", "count"):  # and what lerobot wrote for the fixture
            np.testing.assert_allclose(ours[name][key], LEROBOT_STATS[name][key], rtol=1e-6, err_msg=name)
    for name in FEATURES + BOOKKEEPING:
        ours_f = {k: np.asarray(v) for k, v in ours[name].items()}
        # one definition: the export's dataset statistics are the ones `rlarrow stats` gives
        for key, value in ours_f.items():
            np.testing.assert_allclose(np.asarray(exported[name][key]), value, rtol=1e-12, err_msg=name)
        values = np.concatenate([frames[e][name] for e in sorted(frames)])
        if name in IMAGES:  # lerobot 0.4.4 squares uint8 pixels in uint8 (they wrap): its std is wrong
            pixels = values.reshape(-1, 3).astype(np.float64) / 255
            np.testing.assert_allclose(ours_f["std"].reshape(-1), pixels.std(axis=0), rtol=1e-9)
            assert not np.allclose(theirs[f"aggregate/{name}/std"].reshape(-1), pixels.std(axis=0), rtol=0.1)
        for key in ("min", "max", "mean", "count") + (() if name in IMAGES else ("std",)):
            want = theirs[f"aggregate/{name}/{key}"]
            assert ours_f[key].shape == want.shape, (name, key, ours_f[key].shape, want.shape)
            np.testing.assert_allclose(ours_f[key], want, rtol=1e-6, atol=1e-12, err_msg=f"{name} {key}")
        for key, q in QUANTILES.items():
            got, want = ours_f[key], theirs[f"union/{name}/{key}"]
            assert got.shape == want.shape, (name, key)
            if name in IMAGES:  # per channel, in [0, 1]: (C, 1, 1)
                assert got.shape == (3, 1, 1)
                np.testing.assert_allclose(got, want, atol=0.02, err_msg=f"{name} {key}")
                continue
            flat = values.reshape(len(values), -1).astype(np.float64)
            for j in range(flat.shape[1]):
                column = np.sort(flat[:, j])
                i = max(0, math.ceil(q * len(column)) - 1)
                assert got.reshape(-1)[j] == column[i]  # inverted_cdf: the data's own value
                width = (column[-1] - column[0]) / 5000
                lo, hi = column[max(0, i - 1)] - width, column[min(len(column) - 1, i + 1)] + width
                assert lo <= want.reshape(-1)[j] <= hi, (name, key, j, want.reshape(-1)[j], lo, hi)


def cli_stats_json(store: Path, out: Path, *args: str) -> dict[str, dict[str, list[float]]]:
    result = CliRunner().invoke(cli, ["stats", str(store), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def assert_same_stats(ours: dict, exported: dict, names: dict[str, str], *,
                      apart: tuple[str, ...] = ()) -> None:
    """``stats -o`` against the export's ``meta/stats.json``: bookkeeping exactly, data to 1e-12.

    ``names``: the export's feature name of each of rlarrow's columns, where they differ;
    ``apart``: columns whose values are not compared.
    """
    assert {names.get(k, k) for k in ours} == set(exported) - {"next.done"}
    for name in BOOKKEEPING:
        assert ours[name] == exported[name], name
    for name, value in ours.items():
        if name in apart:
            continue
        assert value.keys() == exported[names.get(name, name)].keys(), name
        for key, got in value.items():
            np.testing.assert_allclose(exported[names.get(name, name)][key], got, rtol=1e-12, err_msg=name)


def test_stats_o_is_the_exports_stats_json_for_a_lerobot_import(tmp_path):
    from rlarrow.io.lerobot import export_lerobot, import_lerobot

    import_lerobot(SRC, tmp_path / "s", progress=False)
    ours = cli_stats_json(tmp_path / "s", tmp_path / "stats.json")
    export_lerobot(tmp_path / "s", tmp_path / "out", images="png", progress=False)
    exported = json.loads((tmp_path / "out" / "meta" / "stats.json").read_text())
    assert set(ours) == set(exported) == set(LEROBOT_STATS)
    assert_same_stats(ours, exported, {})
    assert ours["timestamp"]["max"] == [np.float32(0.7).item()]  # the run's own (float32) timestamps
    assert ours["task_index"]["max"] == [1] and ours["index"]["max"] == [18]
    # a selection is numbered as an export of it would be: from 0, in the episodes' order
    part = cli_stats_json(tmp_path / "s", tmp_path / "part.json", "--where", "episode_id >= 1")
    assert part["episode_index"]["max"] == [1] and part["index"]["max"] == [8 + 5 - 1]
    assert part["index"]["count"] == part["action"]["count"] == [13]
    only = cli_stats_json(tmp_path / "s", tmp_path / "only.json", "--column", "index", "--column", "action")
    assert set(only) == {"index", "action"} and only["index"] == ours["index"]


def test_stats_o_is_the_exports_stats_json_for_a_gym_recording(tmp_path):
    import gymnasium as gym

    from rlarrow.io.lerobot import export_lerobot
    from rlarrow.record.gym import RecordEpisodes

    lengths: dict[str, list[int]] = {}
    for run, seed in (("a", 1), ("b", 2)):
        env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "s", run_id=run)
        env.reset(seed=seed)
        env.action_space.seed(seed)
        for _ in range(3):
            n, done = 0, False
            while not done:
                _, _, term, trunc, _ = env.step(env.action_space.sample())
                n, done = n + 1, term or trunc
            lengths.setdefault(run, []).append(n)
            env.reset()
        env.close()  # (a fourth episode, open: its one observation has no action, so no frame)
    ours = cli_stats_json(tmp_path / "s", tmp_path / "stats.json", "--run", "b")
    with pytest.warns(UserWarning, match="3 final observation"):
        export_lerobot(tmp_path / "s", tmp_path / "out", run_id="b", progress=False)
    exported = json.loads((tmp_path / "out" / "meta" / "stats.json").read_text())
    frames = sum(lengths["b"])
    # (not yet the same: stats -o's observation is of every step, each episode's final
    # observation too, which the export leaves out, LeRobot having no frame for it)
    assert ours["observation"]["count"] == [frames + 4]
    assert_same_stats(ours, exported, {"observation": "observation.state", "reward": "next.reward"},
                      apart=("observation",))
    assert ours["index"]["count"] == [frames] and ours["index"]["max"] == [frames - 1]
    assert ours["episode_index"]["max"] == [2] and ours["frame_index"]["max"] == [max(lengths["b"]) - 1]
    assert ours["timestamp"]["max"] == [np.float32((max(lengths["b"]) - 1) / 30).item()]  # frame / 30 fps
    assert ours["task_index"]["min"] == ours["task_index"]["max"] == [0]  # the export's one task
    # both runs: numbered on, the runs in the store's order
    both = cli_stats_json(tmp_path / "s", tmp_path / "both.json")
    total = sum(lengths["a"]) + frames
    assert both["index"]["max"] == [total - 1] and both["episode_index"]["max"] == [5]
    # a mixture leaves out the runs of weight 0: run a alone, numbered from 0
    mixed = cli_stats_json(tmp_path / "s", tmp_path / "mix.json", "--weight", "a=1", "--weight", "b=0")
    assert mixed["index"]["mean"] == [(sum(lengths["a"]) - 1) / 2]
    assert mixed["episode_index"]["mean"] == [pytest.approx(np.average(range(3), weights=lengths["a"]))]
