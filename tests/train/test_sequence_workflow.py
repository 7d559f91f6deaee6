"""Sequence windows and ``delta_steps`` on what a real gymnasium vector env played.

A ``CartPole-v1`` vector env (4 sub-envs, gymnasium 1.x's next-step autoreset) is driven by a
noisy heuristic and recorded by rlarrow's vector recorder, while the test keeps its own log of
every observation, action and reward the env returned. Then, as a user training a sequence
policy would: windows of 16 steps and ``delta_steps`` samples (the step before and the step,
an action chunk of 8) are streamed, shuffled, through 2 DataLoader workers, and each is checked
against the env's own log (LeRobot's clamping and padding at episode edges); a small policy
then learns the action chunk from them (behaviour cloning), its loss falling as it should.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

HAVE = all(importlib.util.find_spec(m) is not None for m in ("gymnasium", "torch"))
pytestmark = [pytest.mark.skipif(not HAVE, reason="needs gymnasium 1.x and torch (the test extras)"),
              pytest.mark.slow]
ENVS, STEPS, L, CHUNK = 4, 1500, 16, 8
RANDOM = 0.2  # (a share of random actions)


def heuristic(obs: np.ndarray) -> np.ndarray:
    return (obs[:, 2] > 0).astype(np.int64)  # (the pole angle alone: falls within ~40 steps)


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """The store the recorder wrote, and each episode as the env reported it: obs, actions, rewards."""
    import gymnasium as gym

    from rlarrow.record.gym import RecordVectorEpisodes

    path = tmp_path_factory.mktemp("seq") / "runs.rlarrow"
    env = RecordVectorEpisodes(gym.make_vec("CartPole-v1", num_envs=ENVS), path)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=7)
    current = [{"obs": [obs[i].copy()], "act": [], "rew": []} for i in range(ENVS)]
    episodes = []
    resetting = np.zeros(ENVS, bool)
    for _ in range(STEPS):
        action = np.where(rng.random(ENVS) < RANDOM, rng.integers(0, 2, ENVS), heuristic(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        for i in range(ENVS):
            if resetting[i]:  # (next-step autoreset: this step reset the sub-env; its action was ignored)
                current[i] = {"obs": [obs[i].copy()], "act": [], "rew": []}
                continue
            current[i]["act"].append(int(action[i]))
            current[i]["rew"].append(float(reward[i]))
            current[i]["obs"].append(obs[i].copy())
            if terminated[i] or truncated[i]:
                episodes.append(current[i])
        resetting = terminated | truncated
    env.close()  # (the episodes still running are recorded as partial; not compared here)
    return path, [{k: np.array(v) for k, v in e.items()} for e in episodes]


def locate(episodes, first_obs: np.ndarray):
    """The episode and step whose observation is ``first_obs`` (CartPole's floats do not repeat)."""
    for e in episodes:
        hit = np.flatnonzero((e["obs"] == first_obs).all(axis=1))
        if len(hit):
            return e, int(hit[0])
    return None, -1


def test_windows_are_what_the_env_played(played):
    from rlarrow.train.torch import DataLoader, StreamingDataset

    path, episodes = played
    assert len(episodes) > 60 and sum(len(e["act"]) for e in episodes) > 4000
    ds = StreamingDataset(path, sequence_length=L, columns=["observation", "action", "reward", "is_last"],
                          batch_size=64, seed=1)
    seen = 0
    for batch in DataLoader(ds, num_workers=2):
        obs, act, rew = batch["observation"].numpy(), batch["action"].numpy(), batch["reward"].numpy()
        last = batch["is_last"].numpy()
        assert obs.shape[1:] == (L, 4) and act.shape[1:] == (L,)
        for w in range(len(obs)):
            e, t = locate(episodes, obs[w, 0])
            if e is None:
                continue  # (an episode still running when the env closed)
            assert t + L <= len(e["obs"])  # a window never leaves its episode
            assert np.array_equal(obs[w], e["obs"][t:t + L])
            n = min(L, len(e["act"]) - t)  # (the last step has no action or reward)
            assert np.array_equal(act[w, :n], e["act"][t:t + n])
            assert np.array_equal(rew[w, :n], e["rew"][t:t + n])
            assert last[w].tolist() == [t + k == len(e["obs"]) - 1 for k in range(L)]
            # the last step's null action is no action 0: masked, at the fill
            pads = batch["action_is_pad"][w].tolist(), batch["reward_is_pad"][w].tolist()
            assert pads == (last[w].tolist(), last[w].tolist())
            assert (act[w][last[w]] == 0).all() and not batch["observation_is_pad"][w].any()
            seen += 1
    whole = sum(max(0, len(e["obs"]) - L + 1) for e in episodes)
    assert seen == whole  # every window of every finished episode, once


def test_delta_steps_are_lerobots_rule_on_what_the_env_played(played):
    from rlarrow.train.torch import DataLoader, StreamingDataset

    path, episodes = played
    ds = StreamingDataset(path, delta_steps={"observation": [-1, 0], "action": range(CHUNK)},
                          columns=["observation", "action"], batch_size=64, seed=2)
    seen = 0
    for batch in DataLoader(ds, num_workers=2):
        obs, act = batch["observation"].numpy(), batch["action"].numpy()
        obs_pad, act_pad = batch["observation_is_pad"].numpy(), batch["action_is_pad"].numpy()
        for s in range(len(obs)):
            e, t = locate(episodes, obs[s, 1])  # (offset 0: the sample's own step)
            if e is None:
                continue
            last = len(e["obs"]) - 1
            for k, o in enumerate([-1, 0]):  # clamped into the episode, padded outside it
                assert np.array_equal(obs[s, k], e["obs"][min(max(t + o, 0), last)])
                assert obs_pad[s, k] == (not 0 <= t + o <= last)
            assert t < last  # the final-observation row (no action) is no sample
            for o in range(CHUNK):  # row `last` has no action (a recorder's null): padding too,
                assert act_pad[s, o] == (t + o >= last)  # holding the last action, as LeRobot pads
                assert act[s, o] == e["act"][min(t + o, last - 1)]
            seen += 1
    assert seen == sum(len(e["obs"]) - 1 for e in episodes)  # one per action


def test_a_policy_learns_its_action_chunks_from_the_stream(played):
    """Behaviour cloning of the heuristic from (obs[-1], obs[0]) -> actions[0:8], masked."""
    import torch

    from rlarrow.train.torch import DataLoader, StreamingDataset

    path, _ = played
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2 * CHUNK))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    ds = StreamingDataset(path, delta_steps={"observation": [-1, 0], "action": range(CHUNK)},
                          columns=["observation", "action"], batch_size=128, seed=3)
    losses, hits, total = [], 0, 0
    for epoch in range(4):
        ds.set_epoch(epoch)
        for batch in DataLoader(ds, num_workers=2):
            x = batch["observation"].reshape(len(batch["observation"]), -1).float()
            target = batch["action"].long()
            keep = ~batch["action_is_pad"]  # (a padded action is never NaN nor a stray 0)
            logits = model(x).reshape(-1, CHUNK, 2)
            loss = torch.nn.functional.cross_entropy(logits[keep], target[keep])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if epoch == 3:
                first = keep[:, 0]
                hits += int((logits[:, 0].argmax(-1) == target[:, 0])[first].sum())
                total += int(first.sum())
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    assert hits / total > 0.8  # the heuristic gave 90% of the actions (20% were random)
