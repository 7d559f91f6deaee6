"""``rlarrow stats -o`` and ``export_lerobot`` write LeRobot's ``stats.json``, with one quantile definition.

The LeRobot fixture is imported; ``rlarrow stats STORE -o stats.json`` and the export's
``meta/stats.json`` are compared with lerobot 0.4.4's own ``compute_episode_stats`` and
``aggregate_stats`` (``lerobot_stats_peer.py``, in a subprocess) on the same frames.

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
IMAGES = ("observation.image", "observation.images.top")
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
    """Each episode's frames as the store holds them (cameras decoded), as LeRobot would get them."""
    out: dict[int, dict[str, np.ndarray]] = {}
    with rlarrow.Reader(store) as reader:
        for k in range(len(reader.episodes)):
            cols = reader.episode_columns(k)
            frame = ~np.isnan(cols["action"]).any(axis=1)  # a step with an action (not the final one)
            obs = cols["observation"]
            out[k] = {"observation.state": obs["state"][frame], "action": cols["action"][frame],
                      "observation.image": obs["image"][frame],
                      "observation.images.top": obs["images"]["top"][frame]}
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
    for name in FEATURES:
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
