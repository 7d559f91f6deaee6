"""An offline-RL user's day, end to end, against what the environment itself reported.

A ``Pendulum-v1`` agent (a noisy energy-shaping controller) is recorded by Minari's own
``DataCollector`` into its default HDF5 backend, while the test keeps the env's own log of every
observation, action and reward. Then, as a user would from a shell and from Python:

1. ``rlarrow convert`` the Minari dataset (HDF5, read in chunks) into a store;
2. SQL: each episode's return equals the rewards the env gave, and Minari's own ``rewards_sum``;
3. stream transitions into a PyTorch DataLoader and check them against the env's log;
4. ``rlarrow export --format robomimic``: robomimic's ``SequenceDataset`` reads the same
   observations and actions; ``--format rlds``: imported again, the same rows; ``--format
   lerobot``: lerobot's own ``LeRobotDataset`` gives the env's observations, actions and rewards;
5. the same log written in D4RL's MuJoCo-v2 layout (``timeouts`` where Pendulum's time limit
   cut episodes, ``next_observations``) imports to the same steps, final observations included.
"""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
import warnings

import numpy as np
import pytest

HAVE = all(importlib.util.find_spec(m) is not None for m in ("gymnasium", "torch", "minari", "h5py", "jax"))
pytestmark = [
    pytest.mark.skipif(not HAVE, reason="needs gymnasium, torch, h5py and minari[create] (test extras)"),
    pytest.mark.slow,
]
EPISODES, LIMIT = 6, 120


def controller(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cos, sin, speed = obs
    energy = 0.5 * speed**2 + 10.0 * (cos - 1.0)  # pump energy toward the upright state
    torque = np.clip(-2.0 * np.sign(speed * energy) if abs(energy) > 0.5 else -8 * sin - speed, -2, 2)
    return np.array([torque + rng.normal(0, 0.3)], np.float32).clip(-2, 2)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The Minari dataset DataCollector wrote, and each episode as the env reported it."""
    import os

    import gymnasium as gym
    import minari

    root = tmp_path_factory.mktemp("offline")
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    rng = np.random.default_rng(0)
    log = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = minari.DataCollector(gym.make("Pendulum-v1", max_episode_steps=LIMIT))
        for ep in range(EPISODES):
            obs, _ = env.reset(seed=ep)
            episode = {"obs": [obs], "act": [], "rew": []}
            done = False
            while not done:
                action = controller(obs, rng)
                obs, reward, term, trunc, _ = env.step(action)
                episode["obs"].append(obs)
                episode["act"].append(action)
                episode["rew"].append(reward)
                done = term or trunc
            log.append({k: np.array(v) for k, v in episode.items()})
        env.create_dataset(dataset_id="pendulum/controller-v0", algorithm_name="energy shaping")
        env.close()
        del env
        gc.collect()
    if before is None:
        del os.environ["MINARI_DATASETS_PATH"]
    else:
        os.environ["MINARI_DATASETS_PATH"] = before
    return root / "minari" / "pendulum" / "controller-v0", log, root


def rlarrow_cli(*args):
    out = subprocess.run([sys.executable, "-m", "rlarrow", *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_convert_then_sql_returns_are_the_envs(recorded):
    import json

    import rlarrow

    dataset, log, root = recorded
    assert json.loads((dataset / "data" / "metadata.json").read_text())["data_format"] == "hdf5"
    rlarrow_cli("convert", dataset, "-o", root / "s.rlarrow")
    returns = rlarrow.sql(
        root / "s.rlarrow", "select episode_id, sum(reward) as r from steps group by 1 order by 1"
    )
    assert np.allclose(returns["r"].to_numpy(), [e["rew"].sum() for e in log], rtol=0, atol=1e-9)
    meta = rlarrow.sql(
        root / "s.rlarrow", "select metadata->>'$.rewards_sum' as s from episodes order by episode_id"
    )
    assert np.allclose([float(s) for s in meta["s"].to_pylist()], [e["rew"].sum() for e in log], atol=1e-9)
    truncated = rlarrow.sql(root / "s.rlarrow", "select count(*) as n from episodes where truncated")
    assert truncated["n"][0].as_py() == EPISODES  # Pendulum only ends by its time limit


def test_transitions_stream_into_torch_as_the_env_gave_them(recorded):
    import torch

    from rlarrow.train.torch import StreamingDataset

    dataset, log, root = recorded
    store = root / "s.rlarrow"
    if not store.exists():
        rlarrow_cli("convert", dataset, "-o", store)
    # every transition the env gave, by its observation's bytes (the noise makes them unique)
    want = {
        e["obs"][t].tobytes(): (e["act"][t], e["rew"][t], e["obs"][t + 1])
        for e in log
        for t in range(len(e["act"]))
    }
    seen = 0
    loader = torch.utils.data.DataLoader(
        StreamingDataset(store, "transitions", batch_size=64, shuffle=True, seed=1), batch_size=None
    )
    for batch in loader:
        for i in range(len(batch["reward"])):
            action, reward, following = want.pop(batch["observation"][i].numpy().tobytes())
            assert np.array_equal(batch["next_observation"][i].numpy(), following)
            assert np.array_equal(batch["action"][i].numpy(), action)
            assert float(batch["reward"][i]) == float(reward)
            seen += 1
    assert not want
    assert seen == sum(len(e["act"]) for e in log)


def test_exports_to_robomimic_and_rlds_read_back(recorded):
    import rlarrow

    dataset, log, root = recorded
    store = root / "s.rlarrow"
    if not store.exists():
        rlarrow_cli("convert", dataset, "-o", store)
    rlarrow_cli("export", store, "-o", root / "demo.hdf5", "--format", "robomimic")
    if importlib.util.find_spec("robomimic") is not None:
        import robomimic.utils.obs_utils as obs_utils
        from robomimic.utils.dataset import SequenceDataset

        obs_utils.initialize_obs_utils_with_obs_specs({"obs": {"low_dim": ["flat"], "rgb": []}})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            demos = SequenceDataset(
                hdf5_path=str(root / "demo.hdf5"),
                obs_keys=("flat",),
                dataset_keys=("actions", "rewards"),
                load_next_obs=True,
                frame_stack=1,
                seq_length=1,
                pad_frame_stack=True,
                pad_seq_length=True,
                get_pad_mask=False,
                goal_mode=None,
                hdf5_cache_mode="all",
                hdf5_use_swmr=True,
                hdf5_normalize_obs=False,
                filter_by_attribute=None,
            )
        assert len(demos) == sum(len(e["act"]) for e in log)
        first = demos[0]
        assert np.array_equal(first["obs"]["flat"][0], log[0]["obs"][0])
        assert np.array_equal(first["next_obs"]["flat"][0], log[0]["obs"][1])
        assert np.array_equal(first["actions"][0], log[0]["act"][0])
    if importlib.util.find_spec("google.protobuf") is not None:
        rlarrow_cli("export", store, "-o", root / "rlds", "--format", "rlds")
        rlarrow_cli("convert", root / "rlds", "-o", root / "back.rlarrow")
        a = (
            rlarrow.Store.open(store)
            .read("steps")
            .sort_by([("episode_id", "ascending"), ("step", "ascending")])
        )
        b = (
            rlarrow.Store.open(root / "back.rlarrow")
            .read("steps")
            .sort_by([("episode_id", "ascending"), ("step", "ascending")])
        )
        for column in ("observation", "action", "reward", "is_first", "is_last", "is_terminal"):
            assert a[column].to_pylist() == b[column].to_pylist(), column


@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None or importlib.util.find_spec("av") is None,
    reason="lerobot and PyAV are not installed (make test installs them, lerobot with --no-deps)",
)
def test_lerobot_loads_the_export_as_the_env_gave_it(recorded):
    import os
    from pathlib import Path

    dataset, log, root = recorded
    store = root / "s.rlarrow"
    if not store.exists():
        rlarrow_cli("convert", dataset, "-o", store)
    out = root / "lerobot"
    rlarrow_cli("export", store, "-o", out, "--format", "lerobot", "--fps", "30")
    peer = Path(__file__).parent / "io" / "lerobot_peer.py"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf")}
    done = subprocess.run([sys.executable, str(peer), str(out), str(root / "peer.npz")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = dict(np.load(root / "peer.npz"))
    assert int(got["_episodes"]) == EPISODES
    # LeRobot keeps one frame per action: every observation but each episode's last
    np.testing.assert_array_equal(got["observation.state"], np.concatenate([e["obs"][:-1] for e in log]))
    actions = np.concatenate([e["act"] for e in log]).reshape(-1)  # (1,): LeRobot's [1], a scalar
    np.testing.assert_array_equal(got["action"].reshape(-1), actions)
    rewards = np.concatenate([e["rew"] for e in log])  # float64 in the files; LeRobot gives float32
    np.testing.assert_array_equal(got["next.reward"], rewards.astype(got["next.reward"].dtype))
    assert not got["next.done"].any()  # Pendulum only ends by its time limit
    lengths = np.bincount(got["episode_index"])
    assert lengths.tolist() == [len(e["act"]) for e in log]
    np.testing.assert_allclose(got["timestamp"][: lengths[0]], np.arange(lengths[0]) / 30, atol=1e-6)


def test_the_same_log_in_d4rls_layout_imports_the_same_transitions(recorded, tmp_path):
    import h5py

    import rlarrow

    dataset, log, root = recorded
    path = tmp_path / "pendulum.hdf5"
    with h5py.File(path, "w") as f:  # D4RL's MuJoCo-v2 layout, one row per transition
        f["observations"] = np.concatenate([e["obs"][:-1] for e in log])
        f["next_observations"] = np.concatenate([e["obs"][1:] for e in log])
        f["actions"] = np.concatenate([e["act"] for e in log])
        f["rewards"] = np.concatenate([e["rew"] for e in log]).astype(np.float32)
        f["terminals"] = np.zeros(sum(len(e["act"]) for e in log), bool)
        f["timeouts"] = np.concatenate([np.arange(len(e["act"])) == len(e["act"]) - 1 for e in log])
    rlarrow_cli("convert", path, "-o", tmp_path / "d.rlarrow")
    steps = (
        rlarrow.Store.open(tmp_path / "d.rlarrow")
        .read("steps")
        .sort_by([("episode_id", "ascending"), ("step", "ascending")])
    )
    from rlarrow.core.tensors import to_numpy

    obs = to_numpy(steps["observation"].combine_chunks(), fill_value=np.nan)
    assert np.array_equal(obs, np.concatenate([e["obs"] for e in log]))  # final observations included
    assert steps["is_last"].to_pylist().count(True) == EPISODES
