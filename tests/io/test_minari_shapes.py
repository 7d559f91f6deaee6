"""Minari datasets written by Minari itself import with the shapes minari.load_dataset gives.

The datasets are made here, from real gymnasium envs, by Minari's own writer
(``minari.create_dataset_from_buffers``, or ``minari.DataCollector`` where jax, which it needs,
is installed), into a temporary ``MINARI_DATASETS_PATH``; then every episode rlarrow imports is
compared with the one ``minari.load_dataset`` returns: values, shapes and dtypes exactly.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import warnings
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pytest

import rlarrow
from rlarrow.io.minari import import_minari

HAVE_MINARI = all(importlib.util.find_spec(m) is not None for m in ("minari", "gymnasium"))
HAVE_JAX = importlib.util.find_spec("jax") is not None
pytestmark = pytest.mark.skipif(not HAVE_MINARI, reason="needs minari and gymnasium (test-only peers): "
                                                        "pip install 'minari>=0.5' gymnasium")


def _envs():
    import gymnasium as gym
    from gymnasium import spaces

    class Frames(gym.Env):
        """A 2-D Box observation (a grey image Minari stores as JPEG) and a 2-D Box action."""

        observation_space = spaces.Box(0, 255, (36, 40), np.uint8)
        action_space = spaces.Box(-1.0, 1.0, (2, 3), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), float(self.t) / 4, self.t == 6, False, {}

    class Grid(gym.Env):
        """A small 2-D float Box (not an image: stored raw) and a Discrete action."""

        observation_space = spaces.Box(-2.0, 2.0, (5, 3), np.float32)
        action_space = spaces.Discrete(4)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), -1.0, False, self.t == 4, {}

    class Robot(gym.Env):
        """A Dict observation (not sorted) of an image, a 2-D Box, a Tuple; MultiDiscrete actions."""

        observation_space = spaces.Dict(OrderedDict([
            ("pos", spaces.Box(-1.0, 1.0, (3,), np.float32)),
            ("grid", spaces.Box(0, 9, (4, 5), np.int32)),
            ("pair", spaces.Tuple((spaces.Discrete(3), spaces.Box(0.0, 1.0, (2,), np.float64)))),
            ("camera", spaces.Box(0, 255, (32, 32, 3), np.uint8)),
        ]))
        action_space = spaces.MultiDiscrete([3, 5])

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.observation_space.seed(seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), float(action[0]), self.t == 5, False, {}

    return {"frames": Frames, "grid": Grid, "robot": Robot, "cartpole": lambda: gym.make("CartPole-v1")}


def _columns(values):
    """Per-step values as Minari's episode buffers hold them: lists, dicts and tuples of lists.

    Dict keys go in reverse order, as an env may return them: the files' struct order is then
    not the space's, which the import must put right.
    """
    first = values[0]
    if isinstance(first, dict):
        return {k: _columns([v[k] for v in values]) for k in reversed(list(first))}
    if isinstance(first, tuple):
        return tuple(_columns([v[i] for v in values]) for i in range(len(first)))
    return list(values)


def make_dataset(root, name, env, backend, episodes=3, collector=False, record_infos=False):
    """Write a dataset with Minari's own writer; return its directory."""
    import minari

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari warns about the metadata a test leaves out
        if collector:  # minari.DataCollector (needs jax: minari[create])
            env = minari.DataCollector(env, data_format=backend, record_infos=record_infos)
            for ep in range(episodes):
                env.reset(seed=ep)
                env.action_space.seed(ep)
                done = False
                while not done:
                    _, _, term, trunc, _ = env.step(env.action_space.sample())
                    done = term or trunc
            env.create_dataset(dataset_id=f"rlarrow/{name}-v0", algorithm_name="random")
            env.close()  # removes the collector's temporary directory, but leaves its finalizer armed:
            del env  # collected here, its "implicitly cleaning up" ResourceWarning is ignored with the rest
            gc.collect()
        else:
            from minari.data_collector.episode_buffer import EpisodeBuffer

            buffers = []
            for ep in range(episodes):
                obs, _ = env.reset(seed=ep)
                env.action_space.seed(ep)
                seen, actions, rewards, terms, truncs = [obs], [], [], [], []
                while not (terms and (terms[-1] or truncs[-1])):
                    action = env.action_space.sample()
                    obs, reward, term, trunc, _ = env.step(action)
                    seen.append(obs)
                    actions.append(action)
                    rewards.append(reward)
                    terms.append(term)
                    truncs.append(trunc)
                buffers.append(EpisodeBuffer(id=ep, seed=ep, observations=_columns(seen),
                                             actions=_columns(actions), rewards=rewards, terminations=terms,
                                             truncations=truncs, infos={}))
            minari.create_dataset_from_buffers(f"rlarrow/{name}-v0", buffers, env=env,
                                               algorithm_name="random", data_format=backend)
    return root / "rlarrow" / f"{name}-v0"


def assert_same(ours, theirs, where):
    """rlarrow's column (NumPy, dicts for structs) equals Minari's (arrays, dicts, tuples)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and set(ours) == set(theirs), where
        for k in theirs:
            assert_same(ours[k], theirs[k], f"{where}.{k}")
    elif isinstance(theirs, tuple):
        assert isinstance(ours, dict) and list(ours) == [str(i) for i in range(len(theirs))], where
        for i, sub in enumerate(theirs):
            assert_same(ours[str(i)], sub, f"{where}.{i}")
    else:
        theirs = np.asarray(theirs)
        assert ours.shape == theirs.shape, (where, ours.shape, theirs.shape)
        assert ours.dtype == theirs.dtype, (where, ours.dtype, theirs.dtype)
        assert np.array_equal(ours, theirs), where


def _rows(value, n):
    """The first ``n`` rows of a column (dicts of columns too)."""
    return {k: _rows(v, n) for k, v in value.items()} if isinstance(value, dict) else value[:n]


def check_against_minari(tmp_path, name, backend, env_factory, collector=False):
    import minari

    src = make_dataset(tmp_path / "minari", name, env_factory(), backend, collector=collector)
    dataset = minari.load_dataset(f"rlarrow/{name}-v0")
    report = import_minari(src, tmp_path / "s", progress=False)
    theirs = list(dataset.iterate_episodes())
    assert report.episodes == len(theirs) == 3
    with rlarrow.Reader(tmp_path / "s") as reader:
        assert len(reader.episodes) == len(theirs)
        for k, ep in enumerate(theirs):
            cols = reader.episode_columns(k)
            n = len(ep.rewards)
            assert len(cols["reward"]) == n + 1  # RLDS: one step per observation
            assert_same(cols["observation"], ep.observations, f"{name} episode {k} observations")
            assert_same(_rows(cols["action"], n), ep.actions, f"{name} episode {k} actions")
            assert np.array_equal(cols["reward"][:n], np.asarray(ep.rewards, np.float64))
            assert bool(cols["is_terminal"][-1]) == bool(ep.terminations[-1])
        # the spec the space describes, as a dm_env spec
        space = dataset.observation_space
        if type(space).__name__ == "Box":
            spec = reader.observation_spec()
            assert spec.shape == space.shape and spec.dtype == space.dtype
            assert np.array_equal(np.broadcast_to(spec.minimum, space.shape), space.low)
    return dataset


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


HAVE_H5PY = importlib.util.find_spec("h5py") is not None
BACKENDS = ["arrow", "parquet", pytest.param("hdf5", marks=pytest.mark.skipif(
    not HAVE_H5PY, reason="Minari's HDF5 backend needs h5py: pip install 'rlarrow[hdf5]'"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["frames", "grid", "robot", "cartpole"])
def test_minari_import_keeps_the_spaces_shapes(tmp_path, minari_root, name, backend):
    check_against_minari(tmp_path, name, backend, _envs()[name])
    store = rlarrow.Store.open(tmp_path / "s")
    obs_type = store.schema("steps").field("observation").type
    if name == "frames":  # Box(36, 40): a (36, 40) tensor, not 1440 values
        assert rlarrow.core.tensors.tensor_shape(obs_type) == (36, 40)
    if name == "robot":  # the space's order, whatever order the files hold
        names = [obs_type.field(i).name for i in range(obs_type.num_fields)]
        assert names == ["pos", "grid", "pair", "camera"]


@pytest.mark.skipif(not HAVE_JAX, reason="minari.DataCollector needs jax (pip install 'minari[create]'); the "
                                         "same datasets are written with minari.create_dataset_from_buffers")
@pytest.mark.parametrize("backend", ["arrow", BACKENDS[2]])
@pytest.mark.parametrize("name", ["frames", "robot", "cartpole"])
def test_minari_data_collector_datasets_import_as_minari_loads_them(tmp_path, minari_root, name, backend):
    check_against_minari(tmp_path, name, backend, _envs()[name], collector=True)


def test_minari_and_gym_recordings_of_one_env_share_a_store(tmp_path, minari_root):
    from rlarrow.record.gym import RecordEpisodes

    robot = _envs()["robot"]
    src = make_dataset(minari_root, "robot", robot(), "parquet")
    import_minari(src, tmp_path / "s", progress=False)
    env = RecordEpisodes(robot(), tmp_path / "s")
    env.reset(seed=0)
    for _ in range(7):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    env.close()
    store = rlarrow.Store.open(tmp_path / "s")
    assert len(store.runs()) == 2
    with rlarrow.Reader(store, run_id=env.run_id) as reader:
        obs = reader.episodes[0][0].timestep.observation
        assert list(obs) == ["pos", "grid", "pair", "camera"] and obs["camera"].shape == (32, 32, 3)
        assert isinstance(obs["pair"], tuple) and obs["grid"].dtype == np.int32
        spec = reader.observation_spec()
        assert spec["grid"].shape == (4, 5) and spec["pair"][0].num_values == 3
        assert reader.action_spec().shape == (2,) and int(reader.action_spec().maximum[1]) == 4


@pytest.mark.skipif(not HAVE_JAX or not HAVE_H5PY, reason="needs minari.DataCollector (pip install "
                    "'minari[create]') and h5py (pip install 'rlarrow[hdf5]')")
def test_minari_hdf5_and_arrow_backends_import_the_same_rows(tmp_path, monkeypatch):
    import gymnasium as gym
    from gymnasium import spaces

    class Infos(gym.Env):
        """Infos of several kinds (a float, an int, a vector, a nested dict) on every step and reset."""

        observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

        def _info(self):
            return {"t": self.t, "energy": float(self.t) * 0.25, "q": np.full(4, self.t, np.float32),
                    "inner": {"ok": self.t % 2 == 0}, "name": "x"}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.observation_space.seed(seed)  # the same observations for both backends
            self.t = 0
            return self.observation_space.sample(), self._info()

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), float(action[0]), self.t == 5, False, self._info()

    stores = {}
    for backend in ("arrow", "hdf5"):
        root = tmp_path / backend
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
        src = make_dataset(root, "infos", Infos(), backend, collector=True, record_infos=True)
        import_minari(src, tmp_path / f"{backend}.rlarrow", run_id="r", progress=False)
        stores[backend] = rlarrow.Store.open(tmp_path / f"{backend}.rlarrow")
    for table in ("steps", "episodes"):
        a, h = (stores[b].read(table).drop_columns(["metadata_types"]) for b in ("arrow", "hdf5"))
        assert a.num_rows == h.num_rows > 0
        for column in a.column_names:
            if column == "metadata":
                got = [json.loads(t) if t else t for t in h.column(column).to_pylist()]
                want = [json.loads(t) if t else t for t in a.column(column).to_pylist()]
                assert got == want, (table, got[:2], want[:2])
            else:
                assert h.column(column).equals(a.column(column)), (table, column)
    steps = stores["hdf5"].read("steps")
    # numbers are the typed infos column (steps 1.1), in their dtypes; text stays the steps' metadata
    assert steps.schema.field("infos").type == pa.struct([
        ("energy", pa.float64()), ("inner", pa.struct([("ok", pa.bool_())])),
        ("q", pa.list_(pa.float32(), 4)), ("t", pa.int64())])
    infos = steps.column("infos")
    assert infos[1].as_py() == {"energy": 0.25, "inner": {"ok": False}, "q": [1.0] * 4, "t": 1}
    assert steps.column("infos").null_count == 0  # (Minari's infos: one a step, the final one's too)
    assert json.loads(steps.column("metadata")[1].as_py()) == {"infos": {"name": "x"}}


def _flagged_buffers(infos):
    """Three CartPole-shaped episodes ending terminated, terminated *and* truncated, truncated."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    rng = np.random.default_rng(0)
    buffers = []
    for ep, (term, trunc) in enumerate([(True, False), (True, True), (False, True)]):
        n = 4 + ep
        info = {"t": np.arange(n + 1, dtype=np.int64) + 10 * ep,
                "energy": rng.random(n + 1).astype(np.float32),
                "ok": np.arange(n + 1) % 2 == 0,
                "q": rng.random((n + 1, 3)),
                "inner": {"depth": rng.random(n + 1)}} if infos else {}
        obs = list(rng.random((n + 1, 4)).astype(np.float32))
        buffers.append(EpisodeBuffer(id=ep, seed=ep, observations=obs,
                                     actions=[int(a) for a in rng.integers(0, 2, n)],
                                     rewards=list(rng.random(n)), terminations=[False] * (n - 1) + [term],
                                     truncations=[False] * (n - 1) + [trunc], infos=info))
    return buffers


def _write(minari_root, name, buffers, backend):
    import gymnasium as gym
    import minari

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(f"rlarrow/{name}-v0", buffers, env=gym.make("CartPole-v1"),
                                           algorithm_name="random", data_format=backend)
    return minari_root / "rlarrow" / f"{name}-v0"


def test_an_episode_whose_infos_differ_keeps_them_in_its_metadata(minari_root):
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rlarrow.core.metadata import decode
    from rlarrow.io.minari import read_minari

    rng = np.random.default_rng(1)
    buffers, qs = [], []
    for ep, width in enumerate([3, 3, 2]):  # the last episode's q has another shape
        n = 3
        qs.append(rng.random((n + 1, width)))
        obs = list(rng.random((n + 1, 4)).astype(np.float32))
        buffers.append(EpisodeBuffer(id=ep, seed=ep, observations=obs, actions=[0] * n, rewards=[1.0] * n,
                                     terminations=[False] * (n - 1) + [True], truncations=[False] * n,
                                     infos={"q": qs[-1]}))
    src = _write(minari_root, "mixed", buffers, "hdf5")
    with read_minari(src) as source:
        steps = source.steps().read_all()  # one schema for every episode
    assert steps.schema.field("infos").type == pa.struct([("q", pa.list_(pa.float64(), 3))])
    by_ep = steps.column("episode_id").to_pylist()
    typed = [v for e, v in zip(by_ep, steps.column("infos").to_pylist(), strict=True) if e < 2]
    assert np.array_equal(np.asarray([v["q"] for v in typed]), np.concatenate(qs[:2]))
    last = [i for i, e in enumerate(by_ep) if e == 2]
    assert all(steps.column("infos")[i].as_py() is None for i in last)
    meta, types = steps.column("metadata"), steps.column("metadata_types")
    kept = [decode(meta[i].as_py(), types[i].as_py())["infos"]["q"] for i in last]
    assert np.asarray(kept).dtype == np.float64 and np.array_equal(np.asarray(kept), qs[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_episode_both_terminated_and_truncated_keeps_both_flags(tmp_path, minari_root, backend):
    import minari

    from rlarrow.io.minari import export_minari

    src = _write(minari_root, "flags", _flagged_buffers(infos=False), backend)
    import_minari(src, tmp_path / "s", progress=False)
    rows = rlarrow.Store.open(tmp_path / "s").read("episodes").sort_by("episode_id").to_pylist()
    assert [(r["terminated"], r["truncated"], r["partial_end"]) for r in rows] == [
        (True, False, False), (True, True, False), (False, True, False)]
    theirs = list(minari.load_dataset("rlarrow/flags-v0").iterate_episodes())
    for out_format in ("hdf5", "arrow", "parquet"):
        name = f"back{out_format}-v0"
        export_minari(tmp_path / "s", minari_root / "rlarrow" / name, data_format=out_format,
                      dataset_id=f"rlarrow/{name}")
        ours = list(minari.load_dataset(f"rlarrow/{name}").iterate_episodes())
        assert len(ours) == len(theirs) == 3
        for a, b in zip(theirs, ours, strict=True):
            for field in ("terminations", "truncations"):
                assert np.array_equal(getattr(a, field), getattr(b, field)), (out_format, a.id, field)


def _per_step(value):
    """Minari 0.5.4's arrow reader gives a nested info as an array of per-step dicts: as a dict of arrays."""
    if isinstance(value, np.ndarray) and value.dtype == object and len(value) and isinstance(value[0], dict):
        return {k: np.asarray([v[k] for v in value]) for k in value[0]}
    return value


def _assert_infos(ours, theirs, where):
    ours = _per_step(ours)
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and set(ours) == set(theirs), where
        for key in theirs:
            _assert_infos(ours[key], theirs[key], f"{where}.{key}")
        return
    assert ours.shape == theirs.shape and np.array_equal(ours, theirs), (where, ours, theirs)
    assert ours.dtype == theirs.dtype, (where, ours.dtype, theirs.dtype)


@pytest.mark.skipif(not HAVE_H5PY, reason="the source dataset is written with Minari's HDF5 backend, which "
                    "needs h5py: pip install 'rlarrow[hdf5]'")
@pytest.mark.parametrize("out_format", ["arrow", "parquet"])
def test_scalar_and_nested_infos_export_to_arrow_and_parquet_loadably(tmp_path, minari_root, out_format):
    import minari

    from rlarrow.io.minari import export_minari

    # Minari's own arrow writer cannot write scalar infos it can read back: the source is HDF5
    src = _write(minari_root, "infos", _flagged_buffers(infos=True), "hdf5")
    import_minari(src, tmp_path / "s", progress=False)
    export_minari(tmp_path / "s", minari_root / "rlarrow" / "back-v0", data_format=out_format,
                  dataset_id="rlarrow/back-v0")
    theirs = list(minari.load_dataset("rlarrow/infos-v0").iterate_episodes())
    ours = list(minari.load_dataset("rlarrow/back-v0").iterate_episodes())
    assert len(ours) == len(theirs) == 3
    for a, b in zip(theirs, ours, strict=True):
        assert a.id == b.id
        _assert_infos(b.infos, a.infos, f"episode {a.id} infos")
        assert np.array_equal(a.observations, b.observations) and np.array_equal(a.rewards, b.rewards)
