"""Padding is never data (``rlarrow.core.padding``): nulls of any dtype reach training masked.

An episode's last row has a null action, reward and discount (RLDS alignment). Read as rows,
windows or ``delta_steps`` samples, a null int or bool action must come with
``action_is_pad`` and hold the fill (0 / False), never a valid action; ``normalize=`` must
leave padded positions at 0. Transitions streamed from a PPO memory that skrl saved (no
``next_states``: each episode's final observation is null once unrolled) must keep the
transitions that end an episode, with their reward and ``done``, and their next observation
masked (``next_observation_is_pad``, the fill 0), as the SQL view keeps them with a null
``next_observation``: never NaN, never dropped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import rlarrow

torch = pytest.importorskip("torch", reason="the torch extra: pip install 'rlarrow[torch]'")
from rlarrow.train.torch import StreamingDataset  # noqa: E402


def _store(path: Path, actions: list) -> Path:
    """Two episodes of 3 actions (4 rows each) with these actions, the last of each null."""
    store = rlarrow.Store.create(path)
    run = store.add_run(source="user", name="pad")
    for episode in range(2):
        store.append("steps", {
            "run_id": run, "episode_id": episode, "step": np.arange(4), "env_index": 0,
            "observation": np.arange(8, dtype=np.float32).reshape(4, 2) + 10 * episode,
            "action": actions, "reward": [1.0, 2.0, 3.0, None], "discount": [1.0, 1.0, 0.0, None],
            "is_first": [True, False, False, False], "is_last": [False, False, False, True],
            "is_terminal": [False, False, False, True],
        })
    return path


@pytest.mark.parametrize("actions", [[2, 0, 1, None], [True, False, True, None]], ids=["int", "bool"])
def test_a_null_action_is_masked_in_rows_and_windows(tmp_path, actions):
    path = _store(tmp_path / "s", actions)
    want = np.array(actions[:3] + [0])
    rows = list(StreamingDataset(path, columns=["step", "action", "reward"], batch_size=100,
                                 shuffle=False))[0]
    assert rows["action"].dtype == (torch.bool if isinstance(actions[0], bool) else torch.int64)
    assert rows["action"].numpy().astype(int).tolist() == np.tile(want, 2).astype(int).tolist()
    assert rows["action_is_pad"].tolist() == rows["reward_is_pad"].tolist() == (rows["step"] == 3).tolist()
    assert (rows["reward"][rows["reward_is_pad"]] == 0).all()  # the fill, not NaN
    windows = list(StreamingDataset(path, columns=["step", "action"], sequence_length=3, batch_size=100,
                                    shuffle=False))[0]
    assert windows["action_is_pad"].tolist() == (windows["step"] == 3).tolist()
    assert not windows["action"][windows["action_is_pad"]].any()  # 0 / False, masked


def test_normalised_padding_stays_the_fill(tmp_path):
    path = _store(tmp_path / "s", [2, 0, 1, None])
    for options in ({"sequence_length": 4}, {"delta_steps": {"action": [0, 1, 2, 3], "reward": [-1, 0, 1]}}):
        columns = ["step", "observation", "action", "reward"]
        plain = list(StreamingDataset(path, columns=columns, batch_size=100, shuffle=False, **options))[0]
        normed = list(StreamingDataset(path, columns=columns, batch_size=100, shuffle=False,
                                       normalize={"action": "mean_std", "reward": "min_max"}, **options))[0]
        for name in ("action", "reward"):
            pad = normed[name + "_is_pad"]
            assert pad.any() and torch.equal(pad, plain[name + "_is_pad"])
            assert (normed[name][pad] == 0).all() and not normed[name].isnan().any()
            assert (normed[name][~pad] != plain[name][~pad].to(normed[name].dtype)).any()  # (normalised)
    # delta_steps: the samples are the 6 frames; the action chunk past the end holds the last action
    assert plain["step"].tolist() == [0, 1, 2, 0, 1, 2]
    assert plain["action"][2].tolist() == [1, 1, 1, 1]
    assert plain["action_is_pad"][2].tolist() == [False, True, True, True]


@pytest.mark.skipif(importlib.util.find_spec("skrl") is None,
                    reason="skrl writes the memory: pip install skrl")
def test_ppo_memory_terminal_transitions_are_kept_with_a_masked_next_observation(tmp_path):
    from skrl.memories.torch import RandomMemory

    from rlarrow.io.memory.importer import import_memory

    memory = RandomMemory(memory_size=32, num_envs=2, device="cpu")
    for name, size, dtype in [("states", 3, torch.float32), ("actions", 1, torch.int64),
                              ("rewards", 1, torch.float32), ("terminated", 1, torch.bool),
                              ("truncated", 1, torch.bool), ("log_prob", 1, torch.float32)]:
        memory.create_tensor(name, size=size, dtype=dtype)  # PPO's: no next_states
    g = torch.Generator().manual_seed(0)
    for _ in range(32):
        memory.add_samples(states=torch.randn(2, 3, generator=g),
                           actions=torch.randint(0, 3, (2, 1), generator=g),
                           rewards=torch.randn(2, 1, generator=g),
                           terminated=torch.rand(2, 1, generator=g) < 0.1,
                           truncated=torch.zeros(2, 1, dtype=torch.bool),
                           log_prob=torch.randn(2, 1, generator=g))
    terminated = int(memory.get_tensor_by_name("terminated").sum())
    rewards = memory.get_tensor_by_name("rewards").reshape(-1).numpy()
    memory.save(str(tmp_path), format="npz")
    import_memory([tmp_path / "memories"], tmp_path / "s", episodes=True, progress=False)
    null = rlarrow.sql(tmp_path / "s", "select count(*) as n from steps where observation is null")["n"]
    assert null[0].as_py() > 0  # (each episode's final observation was never stored: same-step autoreset)
    sql = rlarrow.sql(tmp_path / "s", "select episode_id, step, reward, next_observation, done, truncated "
                                      "from transitions order by episode_id, step")
    # every stored row is a transition: those that end an episode too (they were left out before,
    # so `terminated` never reached a Q-learning target); their next observation is null in SQL
    assert sql.num_rows == 64
    done = np.asarray(sql["done"].to_pylist())
    no_next = np.asarray(sql["next_observation"].is_null().to_pylist())
    assert done.sum() == terminated > 0 and no_next[done].all()
    assert sorted(sql["reward"].to_pylist()) == sorted(rewards.astype(np.float64).tolist())  # each once
    got: dict[str, list] = {}
    for b in StreamingDataset(tmp_path / "s", "transitions", batch_size=16, seed=1,
                              columns=["episode_id", "step", "observation", "action", "reward"]):
        assert set(b) >= {"next_observation", "next_observation_is_pad"}
        assert not b["next_observation"].isnan().any() and not b["observation"].isnan().any()
        for k, v in b.items():
            got.setdefault(k, []).append(v.numpy())
    rows = {k: np.concatenate(v) for k, v in got.items()}
    order = np.lexsort((rows["step"], rows["episode_id"]))
    rows = {k: v[order] for k, v in rows.items()}
    # torch and SQL agree row for row: the null next observations are the masked ones, at the fill
    assert rows["episode_id"].tolist() == sql["episode_id"].to_pylist()
    assert rows["step"].tolist() == sql["step"].to_pylist()
    assert rows["done"].tolist() == done.tolist()
    assert rows["truncated"].tolist() == sql["truncated"].to_pylist()
    assert rows["next_observation_is_pad"].tolist() == no_next.tolist()
    assert (rows["next_observation"][no_next] == 0).all()
    want = np.array([v for v in sql["next_observation"].to_pylist() if v is not None], np.float32)
    np.testing.assert_array_equal(rows["next_observation"][~no_next], want)
    np.testing.assert_array_equal(rows["reward"], np.asarray(sql["reward"].to_pylist(), np.float32))
    # normalize= leaves the padded next observations at the fill, never a normalised number
    normed = list(StreamingDataset(tmp_path / "s", "transitions", batch_size=64, shuffle=False,
                                   normalize="mean_std"))[0]
    pad = normed["next_observation_is_pad"]
    assert pad.sum() == no_next.sum() and (normed["next_observation"][pad] == 0).all()
    assert (normed["next_observation"][~pad] != 0).all()


def test_table_dataset_masks_null_rows_of_every_dtype(tmp_path: Path) -> None:
    """Map-style access too: a null int action or float reward is 0 with a mask, never a valid value."""
    from rlarrow.train.torch import TableDataset

    st = rlarrow.Store.create(tmp_path / "s")
    st.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(3), "env_index": 0,
                        "observation": np.ones((3, 2), np.float32), "action": [3, 1, None],
                        "reward": [1.0, 2.0, None], "discount": [1.0, 1.0, None],
                        "is_first": [True, False, False], "is_last": [False, False, True],
                        "is_terminal": [False, False, True]})
    ds = TableDataset(st, columns=["step", "action", "reward", "observation"])
    rows = ds[[0, 1, 2]]
    assert rows["action"].tolist() == [3, 1, 0] and rows["action_is_pad"].tolist() == [False, False, True]
    assert rows["reward"].tolist() == [1.0, 2.0, 0.0]
    assert rows["reward_is_pad"].tolist() == [False, False, True]
    assert rows["observation_is_pad"].tolist() == [False, False, False]
    assert "step_is_pad" not in rows  # (a column that is never null has no mask)
    assert bool(ds[2]["action_is_pad"]) and int(ds[2]["action"]) == 0
