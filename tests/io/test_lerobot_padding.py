"""``delta_timestamps`` give what lerobot's own ``LeRobotDataset`` gives, sample for sample.

The LeRobot fixture (``tests/fixtures/lerobot/pusht_v30``, written by lerobot's own writer: 3
episodes of 6, 8 and 5 frames at 10 fps, a state, an action, a PNG camera and an AV1 camera)
is imported with its camera kept as video, and streamed by ``StreamingDataset`` with the
``delta_timestamps`` a policy asks for: offsets before the first frame and past the last,
action chunks that run off each episode's end. lerobot 0.4.4 reads the same files in a
subprocess (``lerobot_peer.py``). Every frame must be one sample (the final-observation row
rlarrow adds to each episode is none), every value and every ``*_is_pad`` mask LeRobot's,
padded positions included (LeRobot repeats the episode's edge frame there); with
``normalize=`` a padded position is 0, never a normalised number.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

pytestmark = [
    pytest.mark.slow,  # (lerobot loads in a subprocess: about 30 s)
    pytest.mark.skipif(importlib.util.find_spec("av") is None,
                       reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'"),
    pytest.mark.skipif(importlib.util.find_spec("lerobot") is None,
                       reason="lerobot is not installed (make test installs it: see the Makefile)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="the torch extra: pip install 'rlarrow[torch]'"),
]
SRC = FIXTURES / "lerobot" / "pusht_v30"
LENGTHS = (6, 8, 5)
FPS = 10
DELTAS = {
    "observation.state": [-0.2, -0.1, 0.0, 0.1],
    "observation.images.top": [-0.1, 0.0, 0.1],
    "action": [k / FPS for k in range(7)],  # a chunk longer than the last episode
}
INFOS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """Every item of ``LeRobotDataset(root=SRC, delta_timestamps=DELTAS)``, stacked."""
    tmp = tmp_path_factory.mktemp("peer")
    out = tmp / "peer.npz"
    done = subprocess.run(
        [sys.executable, os.fspath(Path(__file__).with_name("lerobot_peer.py")), os.fspath(SRC),
         os.fspath(out), json.dumps(DELTAS)],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp / "hf")},
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as f:
        return dict(f)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlarrow.io.lerobot import import_lerobot

    path = tmp_path_factory.mktemp("store") / "s.rlarrow"
    import_lerobot(SRC, path, video="keep", progress=False)
    return path


def _ours(store: Path, **options: object) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """Each sample of the stream by (episode, step), with LeRobot's flat names."""
    from rlarrow.train.torch import StreamingDataset

    ds = StreamingDataset(store, columns=["episode_id", "step", "observation", "action", "infos"],
                          delta_timestamps=DELTAS, fps=FPS, batch_size=4, shuffle=True, buffer_rows=8,
                          **options)
    out: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for b in ds:
        obs = b["observation"]
        columns = {
            "observation.state": obs["state"], "observation.state_is_pad": obs["state_is_pad"],
            "observation.images.top": obs["images"]["top"],
            "observation.images.top_is_pad": obs["images"]["top_is_pad"],
            "action": b["action"], "action_is_pad": b["action_is_pad"],
            **{name: b["infos"][name] for name in INFOS},  # the frame's own (typed infos, steps 1.1)
        }
        for r, key in enumerate(zip(b["episode_id"].tolist(), b["step"].tolist(), strict=True)):
            assert key not in out  # each frame once
            out[key] = {k: v[r].numpy() for k, v in columns.items()}
    return out


def test_samples_are_lerobots_own(store, lerobot):
    ours = _ours(store)
    theirs = {(int(e), int(f)): i for i, (e, f) in
              enumerate(zip(lerobot["episode_index"], lerobot["frame_index"], strict=True))}
    assert sorted(ours) == sorted(theirs)  # the frames, no final-observation rows
    assert len(ours) == sum(LENGTHS)
    padded = 0
    for key, i in theirs.items():
        got = ours[key]
        for name in DELTAS:
            np.testing.assert_array_equal(got[name + "_is_pad"], lerobot[name + "_is_pad"][i],
                                          err_msg=f"{key} {name}")
            padded += int(got[name + "_is_pad"].sum())
        np.testing.assert_array_equal(got["observation.state"], lerobot["observation.state"][i])
        np.testing.assert_array_equal(got["action"], lerobot["action"][i])  # padded: the edge action
        for name in INFOS:  # LeRobot's per-frame numbers, in LeRobot's dtypes
            assert got[name].dtype == lerobot[name].dtype and got[name] == lerobot[name][i], (key, name)
        frames = np.round(lerobot["observation.images.top"][i].transpose(0, 2, 3, 1) * 255).astype(np.uint8)
        np.testing.assert_array_equal(got["observation.images.top"], frames)  # no black frame
    assert padded > 20  # (the offsets reach past every episode's start and end)


def test_normalised_padding_is_the_fill(store, lerobot):
    """normalize= never makes a padded position a plausible number: it is 0 there."""
    ours = _ours(store, normalize={"action": "mean_std", "observation.state": "min_max"})
    plain = _ours(store)
    for key, got in ours.items():
        for name in ("action", "observation.state"):
            pad = got[name + "_is_pad"]
            assert (got[name][pad] == 0).all()
            assert np.array_equal(pad, plain[key][name + "_is_pad"])
            assert not np.isnan(got[name]).any()
    assert any(got["action_is_pad"].any() for got in ours.values())
