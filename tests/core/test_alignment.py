"""dm_env order (envlogger) and Minari's N+1 layout convert to RLDS alignment and back losslessly."""

from __future__ import annotations

import importlib.util

import numpy as np
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

from rlarrow.core import alignment, tensors

HAVE_DM_ENV = importlib.util.find_spec("dm_env") is not None
MINARI = FIXTURES / "minari" / "cartpole"


def test_dm_env_roundtrip_plain_lists():
    rlds = alignment.dm_env_to_rlds(step_type=[0, 1, 1, 2], action=[None, 3, 4, 5],
                                    reward=[None, 0.5, 0.0, 1.0], discount=[None, 1.0, 1.0, 0.0])
    assert rlds["action"] == [3, 4, 5, None]
    assert rlds["is_terminal"] == [False, False, False, True]
    back = alignment.rlds_to_dm_env(**{k: rlds[k] for k in alignment.RLDS_COLUMNS})
    assert back == {"step_type": [0, 1, 1, 2], "action": [None, 3, 4, 5],
                    "reward": [None, 0.5, 0.0, 1.0], "discount": [None, 1.0, 1.0, 0.0]}


def test_dm_env_truncation_and_unfinished_recordings():
    truncated = alignment.dm_env_to_rlds(step_type=[0, 1, 2], action=[None, 1, 1],
                                         reward=[None, 0.0, 0.0], discount=[None, 1.0, 1.0])
    assert truncated["is_last"][-1] and not truncated["is_terminal"][-1]
    unfinished = alignment.dm_env_to_rlds(step_type=[0, 1], action=[None, 1],
                                          reward=[None, 0.0], discount=[None, 1.0])
    assert unfinished["is_last"] == [False, False]
    back = alignment.rlds_to_dm_env(**{k: unfinished[k] for k in alignment.RLDS_COLUMNS})
    assert back["step_type"] == [0, 1]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"step_type": [1, 2], "action": [0, 1], "reward": [0.0, 1.0], "discount": [1.0, 0.0]}, "FIRST"),
    ({"step_type": [0, 1], "action": [0, 1], "reward": [None, 1.0], "discount": [None, 0.0]},
     "already RLDS"),
    ({"step_type": [0, 1], "action": [None], "reward": [None, 1.0], "discount": [None, 0.0]},
     "differ in length"),
])
def test_dm_env_refuses_what_it_cannot_keep(kwargs, message):
    with pytest.raises(ValueError, match=message):
        alignment.dm_env_to_rlds(**kwargs)


@pytest.mark.skipif(not HAVE_DM_ENV, reason="needs dm_env: pip install 'rlarrow[dm-env]'")
def test_real_dm_env_episodes_through_a_store_and_back(store):
    import dm_env
    from dm_env import specs

    class Walk(dm_env.Environment):
        """Random walk on 0..4: terminates at 4, truncates after 6 steps."""

        def __init__(self):
            self.rng = np.random.default_rng(0)

        def reset(self):
            self.pos, self.t = 2, 0
            return dm_env.restart(self._obs())

        def step(self, action):
            self.pos = int(np.clip(self.pos + (1 if action else -1), 0, 4))
            self.t += 1
            if self.pos == 4:
                return dm_env.termination(np.float64(1.0), self._obs())
            if self.t >= 6:
                return dm_env.truncation(np.float64(0.0), self._obs())
            return dm_env.transition(np.float64(-0.1), self._obs())

        def _obs(self):
            board = np.zeros((2, 5), np.float32)
            board[0, self.pos] = 1.0
            return {"board": board, "t": np.int32(self.t)}

        def observation_spec(self):
            return {"board": specs.Array((2, 5), np.float32), "t": specs.Array((), np.int32)}

        def action_spec(self):
            return specs.DiscreteArray(2)

    env = Walk()
    recorded = []  # envlogger's view: (timestep, action that led to it)
    for _ in range(6):
        ts = env.reset()
        episode = [(ts, None)]
        while not ts.last():
            a = np.int64(env.rng.integers(0, 2))
            ts = env.step(a)
            episode.append((ts, a))
        recorded.append(episode)
    assert {ep[-1][0].discount for ep in recorded} == {0.0, 1.0}  # both endings occur

    for e, episode in enumerate(recorded):
        rlds = alignment.dm_env_to_rlds(
            step_type=[ts.step_type for ts, _ in episode], action=[a for _, a in episode],
            reward=[ts.reward for ts, _ in episode], discount=[ts.discount for ts, _ in episode])
        store.append("steps", {
            "run_id": "walk", "episode_id": e, "step": np.arange(len(episode)), "env_index": 0,
            "observation": [ts.observation for ts, _ in episode],
            **{k: rlds[k] for k in alignment.RLDS_COLUMNS}})

    table = store.read("steps")
    for e, episode in enumerate(recorded):
        rows = table.filter(table.column("episode_id").to_numpy() == e)
        back = alignment.rlds_to_dm_env(
            action=list(tensors.to_numpy(rows.column("action"), fill_value=-1)),
            reward=rows.column("reward").to_pylist(), discount=rows.column("discount").to_pylist(),
            is_first=rows.column("is_first").to_pylist(), is_last=rows.column("is_last").to_pylist())
        obs = tensors.to_numpy(rows.column("observation"))
        for t, (ts, a) in enumerate(episode):
            assert back["step_type"][t] == int(ts.step_type)
            assert back["reward"][t] == ts.reward and back["discount"][t] == ts.discount
            assert (back["action"][t] is None) == (a is None)
            if a is not None:
                assert back["action"][t] == a and back["action"][t].dtype == np.int64
            assert np.array_equal(obs["board"][t], ts.observation["board"])
            assert obs["t"][t] == ts.observation["t"] and obs["t"].dtype == np.int32


def minari_episodes(backend: str):
    root = MINARI / f"{backend}-v0" / "data"
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: int(p.name)):
        f = d / f"part-0.{backend}"
        yield ipc.open_file(f).read_all() if backend == "arrow" else pq.read_table(f)


@pytest.mark.parametrize("backend", ["arrow", "parquet"])
def test_real_minari_episodes_roundtrip(store, backend):
    episodes = list(minari_episodes(backend))
    assert len(episodes) == 10
    total = 0
    for e, t in enumerate(episodes):
        n = t.num_rows - 1  # the last row only pads action/reward/flags
        real = t.slice(0, n)
        rlds = alignment.minari_to_rlds(
            action=real.column("actions").to_pylist(), reward=real.column("rewards").to_pylist(),
            termination=real.column("terminations").to_pylist(),
            truncation=real.column("truncations").to_pylist(), num_observations=t.num_rows)
        store.append("steps", {"run_id": backend, "episode_id": e, "step": range(n + 1), "env_index": 0,
                               "observation": t.column("observations"),
                               **{k: rlds[k] for k in alignment.RLDS_COLUMNS}})
        total += n
    assert total == 256  # Minari's total_steps
    table = store.read("steps")
    for e, t in enumerate(episodes):
        rows = table.filter(table.column("episode_id").to_numpy() == e)
        assert rows.num_rows == t.num_rows
        assert rows.column("action")[-1].as_py() is None  # null, not Minari's 0 padding
        back = alignment.rlds_to_minari(
            action=rows.column("action").to_pylist(), reward=rows.column("reward").to_pylist(),
            is_last=rows.column("is_last").to_pylist(), is_terminal=rows.column("is_terminal").to_pylist())
        n = t.num_rows - 1
        assert back["action"] == t.column("actions").to_pylist()[:n]
        assert back["reward"] == t.column("rewards").to_pylist()[:n]
        assert back["termination"] == t.column("terminations").to_pylist()[:n]
        assert back["truncation"] == t.column("truncations").to_pylist()[:n]
        assert np.array_equal(tensors.to_numpy(rows.column("observation")),
                              tensors.to_numpy(t.column("observations")))


def test_minari_refuses_an_early_ending():
    with pytest.raises(ValueError, match="before the last step"):
        alignment.minari_to_rlds(action=[0, 1], reward=[1.0, 1.0], termination=[True, False],
                                 truncation=[False, False])
