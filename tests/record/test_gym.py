"""rlarrow.record.gym records gymnasium envs; a vector env's episodes equal each sub-env run alone."""

from __future__ import annotations

import importlib.util

import numpy as np
import pyarrow.compute as pc
import pytest

import rlarrow

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None,
                                reason="needs gymnasium: pip install gymnasium")


def episodes_of(store, run_id):
    steps = store.read("steps", filter=pc.field("run_id") == run_id)
    out = {}
    for row in store.read("episodes", filter=pc.field("run_id") == run_id).to_pylist():
        ep = steps.filter(pc.equal(steps.column("episode_id"), row["episode_id"]))
        out[row["episode_id"]] = (row, ep)
    return out


def sub_env_alone(store, make_env, seed, used, vec_eps, i):
    """Sub-env ``i`` of a vector recording replayed alone (same seed, the actions it took,
    resetting where it reset): its episodes and the vector run's, as (row, steps) pairs."""
    from rlarrow.record.gym import RecordEpisodes

    alone = RecordEpisodes(make_env(), store)
    alone.reset(seed=seed)
    for a in used[i]:
        if isinstance(a, str):
            alone.reset()
        else:
            alone.step(a)
    alone.close()
    mine = [(row, ep) for row, ep in vec_eps.values() if row["env_index"] == i]
    theirs = list(episodes_of(rlarrow.Store.open(store.path), alone.run_id).values())
    return mine, theirs


def test_single_env_episodes(tmp_path):
    import gymnasium as gym

    from rlarrow.record.gym import RecordEpisodes

    env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "s", metadata={"agent": "left"}, keep_infos=True)
    obs, _ = env.reset(seed=3)
    first_obs = obs.copy()
    lengths = []
    n = 0
    for _ in range(3):
        done = False
        while not done:
            obs, reward, term, trunc, _ = env.step(0)
            n += 1
            done = term or trunc
        lengths.append(n)
        n = 0
        obs, _ = env.reset()
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    eps = episodes_of(store, env.run_id)
    assert [row["num_steps"] for row, _ in eps.values()][:3] == [k + 1 for k in lengths]
    row, steps = eps[0]
    assert row["terminated"] and row["return"] == lengths[0]
    assert np.array_equal(rlarrow.core.tensors.to_numpy(steps.column("observation"))[0], first_obs)
    assert steps.column("action").to_pylist() == [0] * lengths[0] + [None]
    assert steps.column("discount").null_count == steps.num_rows  # gymnasium has no discount
    assert steps.column("is_terminal").to_pylist()[-1] is True
    assert list(eps)[-1] == 3 and eps[3][0]["partial_end"]  # the episode left open at close
    run = store.runs().to_pylist()[0]
    assert run["source"] == "rlarrow.gym" and run["name"] == "CartPole-v1"


@pytest.mark.parametrize("mode", ["NEXT_STEP", "SAME_STEP"])
def test_vector_env_episodes_equal_each_sub_env_alone(tmp_path, mode):
    import gymnasium as gym

    from rlarrow.record.gym import RecordEpisodes, RecordVectorEpisodes

    seeds = [10, 11, 12]
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (120, 3))
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3,
                                   autoreset_mode=getattr(gym.vector.AutoresetMode, mode))
    with pytest.raises(TypeError, match="RecordVectorEpisodes"):
        RecordEpisodes(vec, tmp_path / "x")
    rec = RecordVectorEpisodes(vec, tmp_path / "s", flush_every_steps=50)
    rec.reset(seed=seeds)
    used = [[] for _ in seeds]  # the actions each sub-env really took
    pending_reset = [False] * 3
    for t in range(len(actions)):
        _, _, term, trunc, _ = rec.step(actions[t])
        for i in range(3):
            if pending_reset[i]:  # NEXT_STEP: this step reset sub-env i, its action unused
                pending_reset[i] = False
                used[i].append("reset")
                continue
            used[i].append(int(actions[t, i]))
            if term[i] or trunc[i]:
                if mode == "NEXT_STEP":
                    pending_reset[i] = True
                else:  # SAME_STEP: reset in the same step
                    used[i].append("reset")
    rec.close()
    store = rlarrow.Store.open(tmp_path / "s")
    vec_eps = episodes_of(store, rec.run_id)
    # every sub-env alone, same seed, same actions, resetting where the vector env did
    for i, seed in enumerate(seeds):
        mine, theirs = sub_env_alone(store, lambda: gym.make("CartPole-v1"), seed, used, vec_eps, i)
        assert len(mine) == len(theirs) > 1
        for (r1, e1), (r2, e2) in zip(mine, theirs, strict=True):
            assert (r1["num_steps"], r1["terminated"], r1["truncated"], r1["partial_end"]) == \
                (r2["num_steps"], r2["terminated"], r2["truncated"], r2["partial_end"])
            for col in ("observation", "action", "reward", "is_first", "is_last", "is_terminal"):
                assert e1.column(col).to_pylist() == e2.column(col).to_pylist(), col


def test_gym_recordings_have_dm_env_specs_from_their_spaces(tmp_path):
    import gymnasium as gym
    from gymnasium import spaces

    from rlarrow.record.gym import RecordEpisodes

    env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "s")
    env.reset(seed=0)
    env.step(0)
    env.close()
    with rlarrow.Reader(tmp_path / "s") as reader:
        obs = reader.observation_spec()
        space = gym.make("CartPole-v1").observation_space
        assert obs.shape == (4,) and obs.dtype == np.float32
        assert np.array_equal(obs.minimum, space.low) and np.array_equal(obs.maximum, space.high)
        assert reader.action_spec().num_values == 2 and reader.action_spec().dtype == np.int64
        assert reader.reward_spec().dtype == np.float64 and reader.discount_spec() is None
        first = reader.episodes[0][0].timestep.observation
        obs.validate(first)  # what was recorded fits the spec

    class Arm(gym.Env):
        observation_space = spaces.Dict({
            "joints": spaces.Box(-1.0, 1.0, (2, 3), np.float32),
            "mode": spaces.Discrete(4, start=1),
            "pair": spaces.Tuple((spaces.MultiBinary(3), spaces.MultiDiscrete([2, 5]))),
        })
        action_space = spaces.Box(0, 255, (8, 8), np.uint8)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.observation_space.seed(seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, True, False, {}

    env = RecordEpisodes(Arm(), tmp_path / "arm")
    env.reset(seed=1)
    env.step(env.action_space.sample())
    env.close()
    with rlarrow.Reader(tmp_path / "arm") as reader:
        spec = reader.observation_spec()
        assert list(spec) == ["joints", "mode", "pair"]  # the space's order
        assert spec["joints"].shape == (2, 3) and spec["joints"].dtype == np.float32
        assert (int(spec["mode"].minimum), int(spec["mode"].maximum)) == (1, 4)
        assert spec["pair"][0].shape == (3,) and int(spec["pair"][1].maximum[1]) == 4
        assert reader.action_spec().shape == (8, 8) and reader.action_spec().dtype == np.uint8
        for step in reader.episodes[0]:
            obs = step.timestep.observation
            spec["joints"].validate(obs["joints"])
            spec["mode"].validate(obs["mode"])
            assert isinstance(obs["pair"], tuple)
            spec["pair"][1].validate(obs["pair"][1])


def _arm_env():
    """A gymnasium env with a nested Dict observation and a Box action; 2-6 step episodes."""
    import gymnasium as gym
    from gymnasium import spaces

    class Arm(gym.Env):
        def __init__(self):  # spaces of its own: a sub-env's samples depend on its seed alone
            self.observation_space = spaces.Dict({
                "joints": spaces.Box(-1.0, 1.0, (2, 3), np.float32),
                "pair": spaces.Tuple((spaces.MultiBinary(3), spaces.Discrete(4, start=1))),
            })
            self.action_space = spaces.Box(-2.0, 2.0, (2,), np.float64)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            if seed is not None:  # else its samples go on from where they were
                self.observation_space.seed(seed)
            self.left = int(self.np_random.integers(2, 7))
            return self.observation_space.sample(), {}

        def step(self, action):
            self.left -= 1
            obs = self.observation_space.sample()
            obs["joints"][0, 0] = float(action[0]) / 2  # the action leaves a trace
            return obs, float(action.sum()), self.left == 0 and self.left % 2 == 0, self.left == 0, {}

    return Arm()


@pytest.mark.parametrize("mode", ["NEXT_STEP", "SAME_STEP"])
def test_vector_dict_observations_equal_each_sub_env_alone(tmp_path, mode):
    """Nested Dict observations of a vector env are split per sub-env once per step: every
    sub-env's episodes equal the same env recorded alone (NaN-free, dtype for dtype)."""
    import gymnasium as gym

    from rlarrow.record.gym import RecordVectorEpisodes

    n, seeds = 3, [4, 5, 6]
    vec = gym.vector.SyncVectorEnv([_arm_env] * n, autoreset_mode=getattr(gym.vector.AutoresetMode, mode))
    rec = RecordVectorEpisodes(vec, tmp_path / "s", flush_every_steps=7)
    rec.reset(seed=seeds)
    actions = np.random.default_rng(1).uniform(-2, 2, (40, n, 2))
    used = [[] for _ in range(n)]
    pending = [False] * n
    for t in range(len(actions)):
        _, _, term, trunc, _ = rec.step(actions[t])
        for i in range(n):
            if pending[i]:
                pending[i] = False
                used[i].append("reset")
                continue
            used[i].append(actions[t, i])
            if term[i] or trunc[i]:
                if mode == "NEXT_STEP":
                    pending[i] = True
                else:
                    used[i].append("reset")
    rec.close()
    store = rlarrow.Store.open(tmp_path / "s")
    vec_eps = episodes_of(store, rec.run_id)
    for i, seed in enumerate(seeds):
        mine, theirs = sub_env_alone(store, _arm_env, seed, used, vec_eps, i)
        assert len(mine) == len(theirs) > 3
        for (r1, e1), (r2, e2) in zip(mine, theirs, strict=True):
            assert (r1["num_steps"], r1["return"], r1["partial_end"]) == (r2["num_steps"], r2["return"],
                                                                          r2["partial_end"])
            for col in ("observation", "action", "reward", "is_first", "is_last", "is_terminal"):
                assert e1.column(col).type == e2.column(col).type, col
                assert e1.column(col).to_pylist() == e2.column(col).to_pylist(), col


def test_vector_step_after_a_final_flush_is_refused_until_a_reset(tmp_path):
    import gymnasium as gym

    from rlarrow.core.errors import UsageError
    from rlarrow.record.gym import RecordVectorEpisodes

    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    rec = RecordVectorEpisodes(vec, tmp_path / "s")
    rec.reset(seed=0)
    rec.step(np.zeros(2, np.int64))
    rec.flush(final=True)  # the open episodes are cut (partial_end)
    with pytest.raises(UsageError, match="call reset"):
        rec.step(np.zeros(2, np.int64))
    rec.reset()
    rec.step(np.ones(2, np.int64))
    rec.close()
    with pytest.raises(UsageError, match="call reset"):  # nor after close()
        rec.step(np.ones(2, np.int64))
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.row_count("steps") == 2 * 2 + 2 * 2  # two episodes of 2 rows per sub-env
    assert store.read("episodes").column("partial_end").to_pylist() == [True] * 4


@pytest.mark.parametrize("mode", ["NEXT_STEP", "SAME_STEP"])
def test_vector_observations_are_what_each_sub_env_returned(tmp_path, mode):
    """Plain observations are kept as bytes per row (one join at commit): every sub-env's rows,
    in time order across episodes and commits, are bit for bit what the env returned (a
    SAME_STEP episode's last one from ``final_obs``); a batch of another shape is refused."""
    import gymnasium as gym

    from rlarrow.record.gym import RecordVectorEpisodes

    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3,
                                   autoreset_mode=getattr(gym.vector.AutoresetMode, mode))
    rec = RecordVectorEpisodes(vec, tmp_path / "s", flush_every_steps=50)
    assert rec._lanes[0].packed == ((4,), np.dtype(np.float32))
    obs, _ = rec.reset(seed=[1, 2, 3])
    log = [[o.copy()] for o in obs]
    for a in np.random.default_rng(0).integers(0, 2, (150, 3)):
        obs, _, term, trunc, info = rec.step(a)
        for i in range(3):
            if mode == "SAME_STEP" and (term[i] or trunc[i]):
                log[i].append(info["final_obs"][i].copy())
            log[i].append(obs[i].copy())
    rec.close()
    steps = rlarrow.Store.open(tmp_path / "s").read("steps").sort_by([("episode_id", "ascending"),
                                                                      ("step", "ascending")])
    env_index = steps.column("env_index").to_numpy()
    stored = rlarrow.core.tensors.to_numpy(steps.column("observation"))
    for i in range(3):
        assert np.array_equal(stored[env_index == i], np.array(log[i]))

    bad = RecordVectorEpisodes(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3),
                               tmp_path / "b")
    bad.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3, 2\); its observation space says \(3, 4\)"):
        bad._vector_step(np.zeros(3, np.int64), np.zeros((3, 2), np.float32), np.zeros(3), np.zeros(3, bool),
                         np.zeros(3, bool), {})
    bad.close()
