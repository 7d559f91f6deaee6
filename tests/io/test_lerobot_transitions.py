"""A LeRobot import's transitions: one per frame, the last of each episode with a masked next observation.

LeRobot keeps no observation after an episode's last action, so the step rlarrow adds after
it (RLDS alignment) has a null observation. That last transition still carries the episode's
final reward and ``next.done``: ``transitions`` must keep it (SQL: ``next_observation`` null;
torch: the fill 0 with ``next_observation_is_pad`` true), so there are exactly as many
transitions as LeRobot frames. Read from the fixture lerobot wrote (``pusht_v30``: 3 episodes of
6, 8 and 5 frames, no rewards), and from a copy of it given ``next.reward`` and ``next.done``
columns as LeRobot's Hub datasets (``lerobot/pusht``) hold them: float32 and bool scalars of
feature shape ``(1,)``, which lerobot 0.4.4's writer cannot write under NumPy 2.4
(``make_lerobot_fixtures.py``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

import rlarrow

# (LeRobot's cameras need PyAV; the samples, torch)
MISSING = [name for name in ("av", "torch") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(MISSING),
                                reason=f"{MISSING} missing: pip install 'rlarrow[video,torch]'")
SRC = FIXTURES / "lerobot" / "pusht_v30"
LENGTHS = (6, 8, 5)


def _with_rewards(root: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A copy of the fixture with LeRobot's ``next.reward`` and ``next.done`` (done on each last frame)."""
    shutil.copytree(SRC, root)
    data = root / "data" / "chunk-000" / "file-000.parquet"
    frames = pq.read_table(data)
    episode = frames.column("episode_index").to_numpy()
    reward = (np.arange(frames.num_rows, dtype=np.float32) + 1) / 4
    done = np.append(episode[1:] != episode[:-1], True)
    frames = frames.append_column("next.reward", pa.array(reward)).append_column("next.done", pa.array(done))
    pq.write_table(frames, data)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    info["features"]["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root, reward, done


def _samples(store: Path) -> dict[str, np.ndarray]:
    from rlarrow.train.torch import StreamingDataset

    got: dict[str, list[np.ndarray]] = {}
    ds = StreamingDataset(store, "transitions", batch_size=5, seed=0,
                          columns=["episode_id", "step", "observation", "action", "reward"])
    for b in ds:
        flat = {**b, "observation": b["observation"]["state"],
                "next_observation": b["next_observation"]["state"],
                "next_top": b["next_observation"]["images"]["top"]}
        for k, v in flat.items():
            got.setdefault(k, []).append(v.numpy())
    rows = {k: np.concatenate(v) for k, v in got.items()}
    order = np.lexsort((rows["step"], rows["episode_id"]))
    return {k: v[order] for k, v in rows.items()}


@pytest.mark.parametrize("rewards", [False, True], ids=["fixture", "with-next-reward-done"])
def test_every_lerobot_frame_is_a_transition(tmp_path, rewards):
    from rlarrow.io.lerobot import import_lerobot

    src, reward, done = _with_rewards(tmp_path / "src") if rewards else (SRC, None, None)
    import_lerobot(src, tmp_path / "s", progress=False)
    sql = rlarrow.sql(tmp_path / "s", "select episode_id, step, reward, next_observation is null as no_next, "
                                      "done, truncated from transitions order by episode_id, step")
    frames = sum(LENGTHS)
    data = SRC / "data" / "chunk-000" / "file-000.parquet"
    assert sql.num_rows == frames == pq.read_metadata(data).num_rows  # one per LeRobot frame
    last = np.concatenate([[t == n - 1 for t in range(n)] for n in LENGTHS])
    assert sql["no_next"].to_pylist() == last.tolist()  # each episode's last only: LeRobot keeps none after
    if rewards:  # the final reward and next.done reach the transition that ends the episode
        assert sql["reward"].to_pylist() == reward.astype(np.float64).tolist()
        assert sql["done"].to_pylist() == done.tolist() == last.tolist()
        assert not any(sql["truncated"].to_pylist())
    else:  # (no next.done: the episode stops there, not terminated; no rewards: null)
        assert sql["truncated"].to_pylist() == last.tolist() and not any(sql["done"].to_pylist())
        assert sql["reward"].null_count == frames
    got = _samples(tmp_path / "s")
    # torch gives the same rows: the missing next observations masked, at the fill (a black frame)
    assert got["episode_id"].tolist() == sql["episode_id"].to_pylist()
    assert got["step"].tolist() == sql["step"].to_pylist()
    assert got["next_observation_is_pad"].tolist() == last.tolist()
    assert got["done"].tolist() == sql["done"].to_pylist()
    assert got["truncated"].tolist() == sql["truncated"].to_pylist()
    assert not got["next_observation"][last].any() and not got["next_top"][last].any()
    inside = ~last[:-1]  # (a next observation that exists is the next transition's observation)
    np.testing.assert_array_equal(got["next_observation"][:-1][inside], got["observation"][1:][inside])
    assert got["reward_is_pad"].tolist() == [not rewards] * frames
    if rewards:
        np.testing.assert_array_equal(got["reward"], reward)
