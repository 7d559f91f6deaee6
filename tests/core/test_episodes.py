"""rlarrow.EnvLogger and rlarrow.Reader against envlogger itself, run side by side."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pyarrow.compute as pc
import pytest

import rlarrow

HAVE_DM_ENV = importlib.util.find_spec("dm_env") is not None


def import_envlogger():
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_  # envlogger 1.2 uses the alias NumPy 2 removed
    import envlogger
    from envlogger.testing import catch_env

    return envlogger, catch_env


def _envlogger_loads() -> bool:
    if importlib.util.find_spec("envlogger") is None:
        return False
    try:
        import_envlogger()
    except ImportError:  # e.g. envlogger 1.3's extension needs glibc 2.38
        return False
    return True


pytestmark = pytest.mark.skipif(not HAVE_DM_ENV, reason="needs dm_env: pip install 'rlarrow[dm-env]'")
needs_envlogger = pytest.mark.skipif(
    not _envlogger_loads(),
    reason="needs an envlogger that loads here (test-only peer): "
           "pip install -c constraints.txt 'rlarrow[envlogger]'")


def play(env, episodes: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(episodes):
        ts = env.reset()
        while not ts.last():
            ts = env.step(rng.randrange(3))


def recorded_catch(path, episodes: int, *, flush_every_steps: int, seeds: tuple[int, int]):
    """A Reader over ``episodes`` of Catch recorded by rlarrow (env seed, action seed)."""
    _, catch_env = import_envlogger()
    with rlarrow.EnvLogger(catch_env.Catch(seed=seeds[0]), path, flush_every_steps=flush_every_steps) as env:
        play(env, episodes, seed=seeds[1])
    return rlarrow.Reader(path)


def step_fn(timestep, action, env):
    return {"note": "first" if timestep.first() else "mid", "global_step": np.int64(env._t)} \
        if hasattr(env, "_t") else {"first": bool(timestep.first())}


def episode_fn(timestep, action, env):
    if timestep.last():
        return {"last_reward": np.float64(timestep.reward), "last_step_type": int(timestep.step_type)}
    return None


def same_step(a, b) -> None:
    assert a.timestep.step_type == b.timestep.step_type
    assert (a.timestep.reward is None) == (b.timestep.reward is None)
    if a.timestep.reward is not None:
        assert float(a.timestep.reward) == float(b.timestep.reward)
        assert float(a.timestep.discount) == float(b.timestep.discount)
    assert np.array_equal(a.timestep.observation, b.timestep.observation)
    assert a.timestep.observation.dtype == b.timestep.observation.dtype
    assert (a.action is None) == (b.action is None)
    if a.action is not None:
        assert int(a.action) == int(b.action)
    assert a.custom_data == b.custom_data


@needs_envlogger
def test_records_and_reads_what_envlogger_does(tmp_path):
    envlogger, catch_env = import_envlogger()
    meta = {"agent": "random", "params": {"lr": np.float64(3e-4)}, "seed": 1}
    (tmp_path / "theirs").mkdir()
    with envlogger.EnvLogger(catch_env.Catch(seed=1), data_directory=str(tmp_path / "theirs"),
                             metadata=dict(meta), step_fn=step_fn, episode_fn=episode_fn) as env:
        play(env, 6, seed=0)
    with rlarrow.EnvLogger(catch_env.Catch(seed=1), tmp_path / "ours", metadata=meta,
                           step_fn=step_fn, episode_fn=episode_fn) as env:
        play(env, 6, seed=0)
    with envlogger.Reader(data_directory=str(tmp_path / "theirs")) as theirs, \
            rlarrow.Reader(tmp_path / "ours") as ours:
        assert len(ours.episodes) == len(theirs.episodes) == 6
        assert len(ours.steps) == len(theirs.steps)
        for a, b in zip(theirs.steps, ours.steps, strict=True):
            same_step(a, b)
        for ea, eb in zip(theirs.episodes, ours.episodes, strict=True):
            assert len(ea) == len(eb)
            for a, b in zip(ea, eb, strict=True):
                same_step(a, b)
        assert ours.episode_metadata() == list(theirs.episode_metadata())
        assert {k: v for k, v in ours.metadata().items() if k != "environment_specs"} == meta
        assert ours.observation_spec() == theirs.observation_spec()
        assert ours.action_spec() == theirs.action_spec()
        assert ours.reward_spec() == theirs.reward_spec()
        assert ours.discount_spec() == theirs.discount_spec()


@needs_envlogger
def test_random_access_and_independent_iterators(tmp_path):
    reader = recorded_catch(tmp_path / "s", 9, flush_every_steps=7, seeds=(2, 1))
    everything = list(reader.steps)
    assert len(rlarrow.Store.open(tmp_path / "s").files("steps")) > 3  # several commits
    for n in [0, 1, 9, 10, 11, len(everything) - 1, -1, 37]:
        same_step(reader.steps[n], everything[n])
    assert [s.timestep.step_type for s in reader.steps[5:12]] == \
        [s.timestep.step_type for s in everything[5:12]]
    k = 4
    start = sum(len(e) for e in reader.episodes[:k])
    for i, step in enumerate(reader.episodes[k]):
        same_step(step, everything[start + i])
    one, two = iter(reader.steps), iter(reader.steps)  # envlogger's share one cursor
    next(one)
    next(one)
    same_step(next(two), everything[0])
    same_step(next(one), everything[2])
    with pytest.raises(IndexError):
        reader.steps[len(everything)]
    cols = reader.episode_columns(slice(0, 3))
    n = sum(len(reader.episodes[i]) for i in range(3))
    assert cols["observation"].shape == (n, 10, 5) and cols["is_first"].sum() == 3
    assert np.isnan(cols["reward"][cols["is_last"]]).all()


@needs_envlogger
def test_episode_columns_match_the_steps_across_row_groups(tmp_path):
    """Bulk reads (only the asked columns, whole row groups uncached) give the per-step values."""
    reader = recorded_catch(tmp_path / "s", 12, flush_every_steps=13, seeds=(3, 4))
    assert len(reader._rows.groups) > 5
    everything = list(reader.steps)
    lengths = [len(e) for e in reader.episodes]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for k in [slice(None), slice(2, 9), slice(0, 12, 3), slice(5, 6), 7]:
        reader.close()
        if k == slice(2, 9):
            reader.episode_columns(4)  # one row group cached, its neighbours read in bulk
        ks = range(*k.indices(12)) if isinstance(k, slice) else [k]
        cols = reader.episode_columns(k)
        rows = [i for e in ks for i in range(starts[e], starts[e + 1])]
        want = np.stack([everything[i].timestep.observation for i in rows])
        assert cols["observation"].dtype == np.float32 and np.array_equal(cols["observation"], want)
        # RLDS alignment: a row's action is the one the next dm_env step carries
        acts = [everything[i + 1].action if i + 1 < starts[-1] and not everything[i + 1].timestep.first()
                else 0 for i in rows]
        assert cols["action"].tolist() == acts
        assert cols["is_first"].tolist() == [everything[i].timestep.first() for i in rows]
        assert set(reader.episode_columns(k, ["reward"])) == {"reward"}
    assert len(reader._rows.cache) <= 8


@needs_envlogger
def test_reader_cache_is_bounded_by_bytes(tmp_path, monkeypatch):
    """Big decoded row groups (frames) are not all kept: the cache holds to a byte budget."""
    everything = [s.timestep.observation
                  for s in recorded_catch(tmp_path / "s", 6, flush_every_steps=13, seeds=(3, 4)).steps]
    monkeypatch.setattr("rlarrow.core.dm_env_rows._CACHED_BYTES", 1)  # every group is over budget
    reader = rlarrow.Reader(tmp_path / "s")
    assert len(reader._rows.groups) > 3
    steps = zip(reader.steps, everything, strict=True)
    assert all(np.array_equal(s.timestep.observation, o) for s, o in steps)
    assert len(reader._rows.cache) == 1  # the newest one only
    assert all(np.array_equal(reader.steps[n].timestep.observation, everything[n]) for n in (30, 2, 45))
    assert len(reader._rows.cache) == 1


class DictEnv:
    """dm_env with a dict observation: a uint8 image and a nested dict; truncates at 4 steps."""

    def __init__(self):
        import dm_env

        self.dm_env = dm_env
        self.t = 0

    def _obs(self):
        return {"frame": np.full((84, 84), self.t, np.uint8),
                "proprio": {"pos": np.array([self.t, -self.t], np.float64),
                            "flag": np.array(self.t % 2 == 0)}}

    def reset(self):
        self.t = 0
        return self.dm_env.restart(self._obs())

    def step(self, action):
        self.t += 1
        if self.t == 4:
            return self.dm_env.truncation(0.5, self._obs())
        return self.dm_env.transition(np.float32(0.25), self._obs())

    def observation_spec(self):
        from dm_env import specs

        return {"frame": specs.Array((84, 84), np.uint8, "frame"),
                "proprio": {"pos": specs.Array((2,), np.float64, "pos"),
                            "flag": specs.Array((), bool, "flag")}}

    def action_spec(self):
        from dm_env import specs

        return specs.BoundedArray((2,), np.float32, -1.0, 1.0, "action")

    def reward_spec(self):
        from dm_env import specs

        return specs.Array((), np.float64, "reward")

    def discount_spec(self):
        from dm_env import specs

        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")


def test_dict_observations_images_truncation_and_partial_episodes(tmp_path):
    env = rlarrow.EnvLogger(DictEnv(), tmp_path / "s")
    for _ in range(2):
        ts = env.reset()
        while not ts.last():
            ts = env.step(np.array([0.5, -0.5], np.float32))
    env.reset()
    env.step(np.array([0.1, 0.2], np.float32))  # an episode left running
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    episodes = store.read("episodes").to_pylist()
    assert [(e["num_steps"], e["terminated"], e["truncated"], e["partial_end"]) for e in episodes] == [
        (5, False, True, False), (5, False, True, False), (2, False, False, True)]
    assert episodes[0]["return"] == 0.25 * 3 + 0.5
    reader = rlarrow.Reader(tmp_path / "s")
    steps = list(reader.episodes[0])
    assert [int(s.timestep.step_type) for s in steps] == [0, 1, 1, 1, 2]
    obs = steps[3].timestep.observation
    assert obs["frame"].dtype == np.uint8 and obs["frame"].shape == (84, 84) and obs["frame"][0, 0] == 3
    assert obs["proprio"]["pos"].tolist() == [3.0, -3.0] and bool(obs["proprio"]["flag"]) is False
    assert steps[4].timestep.discount == 1.0 and steps[1].timestep.reward == 0.25
    assert np.array_equal(steps[1].action, np.array([0.5, -0.5], np.float32))
    partial = list(reader.episodes[2])
    assert len(partial) == 2 and partial[-1].timestep.step_type == partial[-1].timestep.step_type.MID
    assert reader.observation_spec()["proprio"]["pos"].shape == (2,)
    reader.close()
    cols = reader.episode_columns(slice(None), ["observation", "is_last"])
    assert cols["observation"]["frame"].shape == (12, 84, 84) and cols["observation"]["frame"][8, 0, 0] == 3
    assert cols["observation"]["proprio"]["flag"].dtype == bool and cols["is_last"].sum() == 2


def test_flush_policy_commits_while_recording(tmp_path):
    env = rlarrow.EnvLogger(DictEnv(), tmp_path / "s", flush_every_steps=3, flush_every_seconds=None,
                            background=False)
    env.reset()
    for _ in range(2):
        env.step(np.zeros(2, np.float32))
    ro = rlarrow.Store.open(tmp_path / "s", readonly=True)
    assert ro.row_count("steps") == 2  # 3 steps taken: the newest row waits for its action
    env.step(np.zeros(2, np.float32))
    env.step(np.zeros(2, np.float32))  # LAST: episode ended
    env.reset()
    ro.refresh()
    assert ro.row_count("steps") == 5 and ro.row_count("episodes") == 1
    env.close()
    env2 = rlarrow.EnvLogger(DictEnv(), tmp_path / "s", flush_every_steps=None, flush_every_seconds=None,
                             flush_on_episode_end=True, background=False)
    ts = env2.reset()
    while not ts.last():
        ts = env2.step(np.zeros(2, np.float32))
    ro.refresh()
    assert ro.row_count("steps") == 6 + 5 and ro.row_count("runs") == 2
    env2.close()


RECORDER_CHILD = r"""
import sys, numpy as np, dm_env, rlarrow
from dm_env import specs

class Walk(dm_env.Environment):
    def reset(self):
        self.t = 0
        return dm_env.restart(np.zeros(3, np.float32))
    def step(self, action):
        self.t += 1
        obs = np.full(3, self.t, np.float32)
        return dm_env.termination(1.0, obs) if self.t == 7 else dm_env.transition(0.5, obs)
    def observation_spec(self): return specs.Array((3,), np.float32, "obs")
    def action_spec(self): return specs.DiscreteArray(2, name="action")

env = rlarrow.EnvLogger(Walk(), sys.argv[1], flush_every_steps=5, flush_every_seconds=None,
                        metadata={"child": True})
print("ready", flush=True)
while True:
    ts = env.reset()
    while not ts.last():
        ts = env.step(1)
"""


def check_new_run(store, run: str) -> None:
    """The run the last kill stopped: every episode's steps in order, all but its last one whole."""
    ends = store.read("episodes", filter=pc.field("run_id") == run).column("num_steps").to_pylist()
    assert all(n == 8 for n in ends), ends
    if store.read("steps", columns=["run_id"], filter=pc.field("run_id") == run).num_rows == 0:
        return
    reader = rlarrow.Reader(store, run_id=run)
    for k, episode in enumerate(reader.episodes):
        steps = list(episode)
        obs = [float(s.timestep.observation[0]) for s in steps]
        assert obs == list(range(len(steps))), obs  # no step lost or repeated inside
        complete = k < len(reader.episodes) - 1
        if complete:  # every episode before the last one was committed whole
            assert len(steps) == 8 and steps[-1].timestep.last()


#: what the recorder and ``rlarrow info`` import (some only when first used): the fork server's imports
RECORDER_MODULES = ["numpy", "dm_env", "pyarrow.dataset", "pyarrow.pandas_compat", "rlarrow.record.dm_env",
                    "rlarrow.core.step_stats", "rlarrow.cli.commands"]

#: how each table's rows are put in one order, to compare them across kills
ROW_ORDER = {"steps": ["run_id", "episode_id", "step"], "episodes": ["run_id", "episode_id"]}


def kill_recorder(tmp_path, kills: int, seed: int) -> None:
    """SIGKILL a recorder ``kills`` times, a new process (and run) each time, at a random moment.

    After each kill: ``rlarrow info`` works on the store as the kill left it; the store opens
    (a writer's recovery) with one run more; the new run's episodes read back step by step, in
    order, each whole but the one the kill cut; and the earlier runs' steps and episodes are,
    value for value, what they were after the previous kill (nothing lost, nothing added).
    Earlier runs are compared as tables rather than read step by step again (which made the
    loop quadratic), and the recorder and ``rlarrow info`` are forked from one server that
    imported them (tests/forking.py) rather than started as two interpreters a round.
    """
    import time

    import pyarrow as pa
    from forking import ForkServer

    rng = random.Random(seed)
    path = tmp_path / "store"
    checked: list[str] = []  # the runs read step by step after their kill
    kept: dict[str, pa.Table] = {}  # their steps and episodes then
    with ForkServer(RECORDER_MODULES) as server:
        for i in range(kills):
            child = server.start(RECORDER_CHILD, str(path))
            child.wait_ready()
            time.sleep(rng.uniform(0.0, 0.3))
            child.kill()
            server.info_works(path)  # on the store as the kill left it
            store = rlarrow.Store.open(path)
            runs = store.runs().column("run_id").to_pylist()
            assert len(runs) == i + 1 and set(checked) < set(runs)
            (new,) = set(runs) - set(checked)
            for table, keys in ROW_ORDER.items():
                now = store.read(table).sort_by([(k, "ascending") for k in keys])
                old = now.filter(pc.is_in(now.column("run_id"), pa.array(checked, pa.string())))
                if table in kept:  # every earlier run as it was: nothing lost, nothing added
                    assert old.equals(kept[table]), \
                        f"{table} of earlier runs changed: {old.num_rows} rows, were {kept[table].num_rows}"
                kept[table] = now
            check_new_run(store, new)
            checked.append(new)


def test_killed_recorder_leaves_a_readable_store(tmp_path):
    kill_recorder(tmp_path, kills=3, seed=0)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_killed_recorder_many_times(tmp_path):
    kill_recorder(tmp_path, kills=50, seed=1)


def test_background_commits_give_the_same_rows(tmp_path):
    tables = []
    for background in (False, True):
        env = rlarrow.EnvLogger(DictEnv(), tmp_path / f"s{background}", flush_every_steps=3,
                                flush_every_seconds=None, background=background)
        for _ in range(5):
            ts = env.reset()
            while not ts.last():
                ts = env.step(np.zeros(2, np.float32))
        env.close()
        store = rlarrow.Store.open(tmp_path / f"s{background}")
        tables.append(store.read("steps").drop_columns(["run_id"]))
        assert store.row_count("episodes") == 5
    assert tables[0].equals(tables[1])


def test_statistics_are_committed_with_their_steps_from_the_writer_thread(tmp_path):
    """A recorder that commits in a writer thread (``background=True``; off by default)
    commits the same steps and the same ``stats`` rows as on the recording thread, each
    commit's statistics describing exactly its steps."""
    stats = []
    for background in (False, True):
        path = tmp_path / f"s{background}"
        env = rlarrow.EnvLogger(DictEnv(), path, flush_every_steps=3, flush_every_seconds=None,
                                background=background)
        assert env._sink.background is background
        for _ in range(5):
            ts = env.reset()
            while not ts.last():
                ts = env.step(np.zeros(2, np.float32))
        env.close()
        store = rlarrow.Store.open(path)
        table = store.read("stats").drop_columns(["run_id", "block"])
        stats.append(table.sort_by([("column", "ascending"), ("episode_id", "ascending"),
                                    ("count", "ascending")]))
        reward = table.filter(pc.and_(pc.equal(table.column("column"), "reward"),
                                      pc.is_valid(table.column("episode_id"))))
        assert pc.sum(reward.column("rows")).as_py() == store.row_count("steps") == 25
        # one stats file per steps file: each commit wrote both
        assert len(store.files("stats")) == len(store.files("steps")) > 1
    assert stats[0].num_rows > 0 and stats[0].equals(stats[1])
    # the default: commits on the recording thread, whoever opened the store
    for target in (tmp_path / "own", rlarrow.Store.open(tmp_path / "passed", create=True)):
        env = rlarrow.EnvLogger(DictEnv(), target)
        assert env._sink.background is False
        env.close()


class BufferEnv:
    """Plain float32 observations written into one reused buffer (as many envs do).

    ``width`` 3 (12 bytes) is recorded as bytes per step, 300 (1200 bytes) in the
    recorder's preallocated rows: the first three values say which observation it is.
    ``dtype`` float64 hands out other than the spec's float32 (the recorder casts).
    """

    def __init__(self, lengths, bad_shape_at=None, width=3, dtype=np.float32):
        import dm_env

        self.dm_env = dm_env
        self.lengths = list(lengths)
        self.width = width
        self.buf = np.zeros(width, dtype)
        self.count = 0  # observations handed out so far
        self.bad_shape_at = bad_shape_at

    def _obs(self):
        self.count += 1
        if self.count == self.bad_shape_at:
            return np.zeros(2, np.float32)
        self.buf[:3] = (self.count, -self.count, np.nan if self.count % 5 == 0 else 0.5)
        return self.buf

    def reset(self):
        self.t, self.length = 0, self.lengths.pop(0)
        return self.dm_env.restart(self._obs())

    def step(self, action):
        self.t += 1
        obs = self._obs()
        if self.t == self.length:
            return self.dm_env.termination(1.0, obs)
        return self.dm_env.transition(np.float32(0.25), obs)

    def observation_spec(self):
        from dm_env import specs
        return specs.Array((self.width,), np.float32, "obs")

    def action_spec(self):
        from dm_env import specs
        return specs.DiscreteArray(3, name="action")

    def reward_spec(self):
        from dm_env import specs
        return specs.Array((), np.float64, "reward")

    def discount_spec(self):
        from dm_env import specs
        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")


@pytest.mark.parametrize("width", [3, 300], ids=["bytes", "rows"])
@pytest.mark.parametrize(("flush_every_steps", "background"),
                         [(1, False), (2, True), (5, False), (None, False)])
def test_plain_observations_are_copied_in_order_whatever_the_flushes(tmp_path, flush_every_steps, background,
                                                                     width):
    """Observations are copied as bytes (small ones) or into the recorder's preallocated rows:
    a reused env buffer, commits every 1, 2 or 5 steps (in a writer thread too), an abandoned
    episode and growth past the first allocation all keep every row and its order."""
    # without a step count, 5100 steps: more rows than first allocated (1026); else 204
    lengths = [1, 4, 2, 7, 3] * (300 if flush_every_steps is None else 12)
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)  # every commit stays a file
    env = rlarrow.EnvLogger(BufferEnv(lengths, width=width), store, flush_every_steps=flush_every_steps,
                            flush_every_seconds=None, background=background)
    episodes = len(lengths)
    for k in range(episodes):
        ts = env.reset()
        steps = 0
        while not ts.last() and not (k == 3 and steps == 2):  # episode 3 is left after 2 steps
            ts = env.step(k % 3)
            steps += 1
    env.close()
    steps = store.read("steps")
    n = env._env.count
    assert steps.num_rows == n
    obs = rlarrow.core.tensors.to_numpy(steps.column("observation"))
    assert obs.shape == (n, width)
    want = np.arange(1, n + 1, dtype=np.float32)
    np.testing.assert_array_equal(obs[:, 0], want)
    np.testing.assert_array_equal(obs[:, 1], -want)
    assert np.array_equal(np.isnan(obs[:, 2]), want % 5 == 0)
    eps = store.read("episodes").sort_by("episode_id")
    assert eps.num_rows == episodes
    assert eps.column("num_steps").to_pylist()[:5] == [2, 5, 3, 3, 4]  # episode 3: 2 steps + FIRST
    assert eps.column("partial_end").to_pylist()[3] is True
    assert eps.column("return").to_pylist()[:3] == [1.0, 0.25 * 3 + 1.0, 1.25]
    reward = steps.column("reward")
    assert reward.null_count == episodes  # each episode's last row has no reward, nothing else
    if flush_every_steps is not None:
        assert len(store.files("steps")) > 200 / (flush_every_steps + 4)
    store.close()


@pytest.mark.parametrize("width", [3, 300], ids=["bytes", "rows"])
def test_observations_are_cast_to_the_spec_and_a_wrong_shape_is_refused_naming_both(tmp_path, width):
    env = rlarrow.EnvLogger(BufferEnv([3, 3], bad_shape_at=6, width=width, dtype=np.float64), tmp_path / "s",
                            flush_every_steps=2, flush_every_seconds=None)
    play(env, 1, seed=0)  # 4 observations
    env.reset()
    with pytest.raises(ValueError, match=rf"BufferEnv.step returned an observation of shape \(2,\); its "
                                         rf"observation spec says \({width},\)"):
        env.step(0)
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.row_count("steps") == 5  # the first episode and the second's first row
    assert store.row_count("episodes") == 2
    obs = rlarrow.core.tensors.to_numpy(store.read("steps").column("observation"))
    assert obs.dtype == np.float32 and obs.shape == (5, width)  # float64 from the env, the spec's float32
    np.testing.assert_array_equal(obs[:, 0], [1, 2, 3, 4, 5])


def test_a_failing_callback_leaves_the_columns_aligned(tmp_path):
    """A step_fn that raises loses that transition, and only it: every row stored keeps its
    own observation, step metadata, action and reward."""
    calls = []

    def step_fn(timestep, action, env):
        calls.append(action)
        if len(calls) == 4:
            raise RuntimeError("step_fn failed")
        return {"obs": float(timestep.observation[0]), "action": action}

    env = rlarrow.EnvLogger(BufferEnv([7, 3]), tmp_path / "s", step_fn=step_fn, flush_every_steps=2,
                            flush_every_seconds=None)
    for _ in range(2):
        ts = env.reset()
        a = 0
        while not ts.last():
            a += 1
            try:
                ts = env.step(a % 3)
            except RuntimeError:
                continue
    env.close()
    with rlarrow.Reader(tmp_path / "s") as reader:
        steps = list(reader.steps)
        assert len(steps) == 8 + 4 - 1  # 7 + 3 steps and two FIRSTs, less the one that failed
        for s in steps:
            assert s.custom_data["obs"] == s.timestep.observation[0]
        # dm_env order: a step holds the action that led to it; the failed step's (0) is not kept
        assert [s.action for s in steps[:4]] == [None, 1, 2, 1]
        assert [s.custom_data["action"] for s in steps[:4]] == [None, 1, 2, 1]
        assert [len(e) for e in reader.episodes] == [7, 4]


def test_null_and_nan_rewards_stay_apart(tmp_path):
    """A NaN reward is a value; a None one (outside dm_env's contract) is a null."""

    class Odd(BufferEnv):
        def step(self, action):
            ts = super().step(action)
            return ts._replace(reward=[np.nan, None, 2.0][self.t - 1]) if self.t <= 3 else ts

    with rlarrow.EnvLogger(Odd([4]), tmp_path / "s") as env:
        play(env, 1, seed=0)
    reward = rlarrow.Store.open(tmp_path / "s").read("steps").column("reward").to_pylist()
    assert np.isnan(reward[0]) and reward[1:] == [None, 2.0, 1.0, None]
    ep = rlarrow.Store.open(tmp_path / "s").read("episodes").to_pylist()[0]
    assert np.isnan(ep["return"])


def test_reader_reads_with_the_core_dm_env_rows(tmp_path):
    """rlarrow.Reader is the core DmEnvRows (what the envlogger exporter reads with) plus sequences."""
    import doctest

    from rlarrow.core import dm_env_rows

    assert doctest.testmod(dm_env_rows, optionflags=doctest.ELLIPSIS).failed == 0
    with rlarrow.EnvLogger(BufferEnv([3, 2]), tmp_path / "s") as env:
        play(env, 2, seed=0)
    reader = rlarrow.Reader(tmp_path / "s")
    rows = dm_env_rows.DmEnvRows(tmp_path / "s")
    assert isinstance(reader, dm_env_rows.DmEnvRows) and rlarrow.StepData is dm_env_rows.StepData
    assert rows.num_episodes == len(reader.episodes) == 2 and rows.num_steps == len(reader.steps)
    for k in range(rows.num_episodes):
        assert rows.episode_length(k) == len(reader.episodes[k])
        for ours, theirs in zip(rows.episode_steps(k), reader.episodes[k], strict=True):
            assert ours.timestep.step_type == theirs.timestep.step_type
            assert np.array_equal(ours.timestep.observation, theirs.timestep.observation, equal_nan=True)
            assert (ours.action, ours.timestep.reward, ours.custom_data) == \
                (theirs.action, theirs.timestep.reward, theirs.custom_data)
    assert [(s.timestep.step_type, s.action) for s in rows.step_range(1, 3)] == \
        [(s.timestep.step_type, s.action) for s in reader.steps[1:3]]
    assert rows.metadata() == reader.metadata() and rows.episode_metadata() == reader.episode_metadata()


class ReusedDictEnv:
    """A dict observation whose leaf arrays the env rewrites in place each step (as many do).

    ``pos`` is float64 where the spec says float32 (the recorder casts); ``bad`` names a key
    to drop or a shape to give ``pos`` at observation 6.
    """

    def __init__(self, bad=None):
        import dm_env

        self.dm_env = dm_env
        self.buf = {"pos": np.zeros(3, np.float64),
                    "grip": {"open": np.array(False), "force": np.zeros(2, np.int16)}}
        self.count, self.bad = 0, bad

    def _obs(self):
        self.count += 1
        self.buf["pos"][:] = (self.count, -self.count, np.nan if self.count % 4 == 0 else 0.5)
        self.buf["grip"]["open"][()] = self.count % 3 == 0
        self.buf["grip"]["force"][:] = (self.count, 7)
        if self.count == 6 and self.bad == "missing":
            return {"pos": self.buf["pos"], "grip": {"force": self.buf["grip"]["force"]}}
        if self.count == 6 and self.bad == "shape":
            return {**self.buf, "pos": np.zeros(2)}
        return self.buf

    def reset(self):
        self.t = 0
        return self.dm_env.restart(self._obs())

    def step(self, action):
        self.t += 1
        return (self.dm_env.termination if self.t == 3 else self.dm_env.transition)(1.0, self._obs())

    def observation_spec(self):
        from dm_env import specs

        return {"pos": specs.Array((3,), np.float32, "pos"),
                "grip": {"open": specs.Array((), bool, "open"),
                         "force": specs.Array((2,), np.int16, "force")}}

    def action_spec(self):
        from dm_env import specs
        return specs.DiscreteArray(3, name="action")

    def reward_spec(self):
        from dm_env import specs
        return specs.Array((), np.float64, "reward")

    def discount_spec(self):
        from dm_env import specs
        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")


@pytest.mark.parametrize(("flush_every_steps", "background"), [(1, False), (2, True), (None, False)])
def test_dict_observations_are_packed_per_step_copied_and_cast(tmp_path, flush_every_steps, background):
    """Dict observations are packed into bytes at each step: a buffer the env reuses, float64
    cast to the spec's float32, a bool scalar and an int16 leaf come back value for value."""
    env = rlarrow.EnvLogger(ReusedDictEnv(), tmp_path / "s", flush_every_steps=flush_every_steps,
                            flush_every_seconds=None, background=background)
    assert env._pack is not None  # the packed path, not the leaf-by-leaf copy
    for _ in range(5):
        ts = env.reset()
        while not ts.last():
            ts = env.step(1)
    env.close()
    n = env._env.count
    cols = rlarrow.Reader(tmp_path / "s").episode_columns(slice(None), ["observation"])["observation"]
    want = np.arange(1, n + 1)
    assert cols["pos"].dtype == np.float32 and cols["pos"].shape == (n, 3)
    np.testing.assert_array_equal(cols["pos"][:, 0], want)
    np.testing.assert_array_equal(cols["pos"][:, 1], -want)
    assert np.array_equal(np.isnan(cols["pos"][:, 2]), want % 4 == 0)
    assert cols["grip"]["open"].dtype == bool and cols["grip"]["open"].tolist() == (want % 3 == 0).tolist()
    assert cols["grip"]["force"].dtype == np.int16 and cols["grip"]["force"][:, 0].tolist() == want.tolist()


@pytest.mark.parametrize(("bad", "message"), [
    ("missing", r"ReusedDictEnv.step returned an observation\['grip'\] without 'open'"),
    ("shape", r"ReusedDictEnv.step \(observation\['pos'\]\) returned an observation of shape \(2,\); its "
              r"observation spec says \(3,\)")])
def test_a_dict_observation_missing_a_key_or_of_a_wrong_shape_is_refused_naming_it(tmp_path, bad, message):
    env = rlarrow.EnvLogger(ReusedDictEnv(bad=bad), tmp_path / "s", flush_every_steps=2,
                            flush_every_seconds=None)
    ts = env.reset()
    while not ts.last():
        ts = env.step(0)  # observations 1-4
    env.reset()  # 5
    with pytest.raises(ValueError, match=message):
        env.step(0)
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.row_count("steps") == 5  # the rows before the bad one, aligned
    store.close()


def test_packer_gives_what_a_leaf_by_leaf_copy_gives():
    from dm_env import specs

    from rlarrow.core.episodes import Packer, unpack
    from rlarrow.core.step_columns import flat_value, stack

    spec = {"b": (specs.Array((2,), np.uint8), specs.Array((), np.float64)),
            "a": specs.Array((2, 2), np.int64)}
    rng = np.random.default_rng(0)
    values = [{"b": (rng.integers(0, 255, 2).astype(np.uint8), float(rng.standard_normal())),
               "a": rng.integers(-2**62, 2**62, (2, 2))} for _ in range(7)]
    packer = Packer.of(spec)
    got = unpack(np.frombuffer(b"".join(packer(v) for v in values), packer.dtype))
    want = stack([flat_value(v, spec) for v in values])
    assert list(got) == ["b", "a"] and list(got["b"]) == ["0", "1"]
    for key, sub in (("a", None), ("b", "0"), ("b", "1")):
        g, w = (got[key], want[key]) if sub is None else (got[key][sub], want[key][sub])
        assert g.dtype == w.dtype and g.flags.c_contiguous
        np.testing.assert_array_equal(g, w)
    assert Packer.of(specs.Array((3,), np.float32)) is None  # a plain array has its own paths
    assert Packer.of({"s": specs.StringArray(())}) is None
    assert Packer.of({"": specs.Array((2,), np.float32), "b": specs.Array((), bool)}) is None  # NumPy: f0
    with pytest.raises(ValueError, match="struct's order"):
        Packer([(("a", "x"), (), np.int8), (("b",), (), np.int8), (("a", "y"), (), np.int8)])


def test_a_flat_dict_packer_checks_every_leaf_as_the_slow_path_does():
    """A flat dict spec gets the written-out packer (what a recorder calls each step): every
    leaf of another dtype is cast by value (never its bytes reinterpreted), one of another
    shape is refused even with as many bytes, and a missing key is named. It pickles and
    copies (made again from its leaves), and an empty one packs nothing."""
    import copy
    import pickle

    from dm_env import specs

    from rlarrow.core.episodes import Packer, unpack

    spec = {"pos": specs.Array((3,), np.float32), "n": specs.Array((), np.int16),
            "img": specs.Array((2, 2), np.uint8)}
    packer = Packer.of(spec, where="E.step")
    assert packer.fast is not None
    img = np.arange(4, dtype=np.uint8).reshape(2, 2)
    good = {"pos": np.array([1.5, 2, 3], np.float32), "n": np.array(7, np.int16), "img": img}
    cast = [dict(good, pos=np.array([1.5, 2, 3])), dict(good, pos=[1.5, 2.0, 3.0]),
            dict(good, n=7), dict(good, n=np.int16(7)), dict(good, pos=np.array([1.5, 2, 3], np.float16))]
    for value in [good, *cast]:
        got = packer(value)
        assert got == packer.slow(value)
        row = unpack(np.frombuffer(got, packer.dtype))
        assert row["n"].tolist() == [7] and row["img"].tolist() == [img.tolist()]
        assert row["pos"].tolist() == [[1.5, 2, 3]]
    as_int32 = dict(good, pos=np.array([1, 2, 3], np.int32))  # (as many bytes as float32)
    assert unpack(np.frombuffer(packer(as_int32), packer.dtype))["pos"].tolist() == [[1.0, 2.0, 3.0]]
    for other in (pickle.loads(pickle.dumps(packer)), copy.copy(packer)):  # a Packer travels
        assert other.fast is not packer.fast and other(good) == packer(good) and other.where == "E.step"
    assert Packer([])({}) == b""
    same_bytes = r"observation\['img'\]\) returned an observation of shape \(4,\); its observation spec says"
    for bad, message in [(dict(good, img=img.reshape(4)), same_bytes),
                         (dict(good, pos=np.ones(2, np.float32)), r"observation\['pos'\]\).*shape \(2,\)"),
                         ({"pos": good["pos"], "img": img}, "returned an observation without 'n'")]:
        with pytest.raises(ValueError, match=message):
            packer(bad)


def test_reward_and_discount_columns_keep_none_apart_from_nan():
    """A recorder's rewards and discounts: None is null, NaN stays a NaN value (all None, as a
    gymnasium recorder's discounts are, included)."""
    from rlarrow.core.step_columns import scalars

    mixed = scalars([1.0, None, float("nan"), np.float32(2), None])
    assert mixed.to_pylist()[:2] == [1.0, None] and np.isnan(mixed.to_pylist()[2])
    assert mixed.to_pylist()[3:] == [2.0, None] and mixed.null_count == 2
    assert scalars([None, None]).null_count == 2
    assert scalars([None, 1.0]).to_pylist() == [None, 1.0]
    nan_only = scalars([float("nan"), 1.0])
    assert isinstance(nan_only, np.ndarray) and np.isnan(nan_only[0])
