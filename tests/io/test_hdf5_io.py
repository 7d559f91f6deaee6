"""D4RL and robomimic HDF5 files, written by the peers' own writers, import as RLDS episodes.

The fixtures (``tests/fixtures/hdf5``, made by ``make_hdf5_fixtures.py``) come from d4rl 1.1's
``DatasetWriter``, D4RL's MuJoCo-v2 ``convert_buffer.py`` and robomimic 0.3.0's
``convert_d4rl.py``. Each import is compared with the file read whole by h5py, as d4rl's
``get_dataset`` and robomimic's ``SequenceDataset`` read it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.step_columns import infos_leaves
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("h5py") is None, reason="HDF5 import needs h5py: pip install 'rlarrow[hdf5]'"
)

HDF5 = FIXTURES / "hdf5"
D4RL = [HDF5 / "d4rl_writer.hdf5", HDF5 / "d4rl_mujoco.hdf5"]
ROBOMIMIC = HDF5 / "robomimic_d4rl.hdf5"


def whole(path):
    """Every dataset of the file, read whole (what d4rl's get_dataset returns)."""
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, node: out.__setitem__(k, node[()]) if isinstance(node, h5py.Dataset) else None)
    return out


def episodes_of(store):
    steps = store.read("steps")
    eps = store.read("episodes").sort_by("episode_id").to_pylist()
    for ep in eps:
        rows = steps.filter(pc.equal(steps["episode_id"], ep["episode_id"])).sort_by("step")
        yield ep, rows


@pytest.mark.parametrize("path", D4RL, ids=lambda p: p.stem)
def test_d4rl_file_imports_every_transition_as_the_file_holds_it(tmp_path, path):
    from rlarrow.io.hdf5 import import_hdf5

    report = import_hdf5(path, tmp_path / "s", progress=False)
    src = whole(path)
    n = len(src["observations"])
    ends = np.flatnonzero(src["terminals"].reshape(-1) | src.get("timeouts", np.zeros(n, bool)).reshape(-1))
    assert report.episodes == len(ends) + (ends[-1] < n - 1)
    tail = ends[-1] < n - 1 and "next_observations" in src  # a partial episode's next observation
    assert report.steps == n + len(ends) + tail  # one final step per ended episode
    store = rlarrow.Store.open(tmp_path / "s")
    run = store.runs().to_pylist()[0]
    assert (run["source"], run["alignment"], run["num_envs"]) == ("d4rl", "rlds", 1)
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["columns"]["observations"] == {"dtype": "<f4", "shape": [4]}
    seen = 0
    for ep, rows in episodes_of(store):
        first, stop = ep["metadata"] and json.loads(ep["metadata"])["source_rows"]
        k = stop - first  # transitions
        assert first == seen
        seen = stop
        obs = to_numpy(rows["observation"].combine_chunks(), fill_value=np.nan)
        assert obs.dtype == np.float32 and np.array_equal(obs[:k], src["observations"][first:stop])
        act = to_numpy(rows["action"].combine_chunks(), fill_value=np.nan)
        assert np.array_equal(act[:k], src["actions"][first:stop])
        assert rows["reward"].to_pylist()[:k] == src["rewards"].reshape(-1)[first:stop].astype(float).tolist()
        assert ep["return"] == float(np.sum(src["rewards"].reshape(-1)[first:stop], dtype=np.float64))
        typed = infos_leaves(rows)  # each row's infos: the typed column, in their dtypes (steps 1.1)
        for key in [k for k in src if k.startswith("infos/")]:
            assert typed is not None, "infos/* of numbers are the typed infos column"
            value = typed[0][key.split("/", 1)[1]]
            assert value.dtype == src[key].dtype and np.array_equal(value[:k], src[key][first:stop])
        if typed is not None:
            assert typed[1][:k].all() and not typed[1][k:].any()  # the final step: null
        if ep["partial_end"]:
            assert rows.num_rows == k + tail and not any(rows["is_last"].to_pylist())
            if tail:  # the data stops, the episode does not: its last transition kept
                assert np.array_equal(obs[k], src["next_observations"][stop - 1])
                assert rows["action"][k].as_py() is None and rows["reward"][k].as_py() is None
            continue
        assert rows.num_rows == k + 1 and rows["is_last"].to_pylist() == [False] * k + [True]
        assert rows["action"][k].as_py() is None and rows["reward"][k].as_py() is None
        assert ep["terminated"] == bool(src["terminals"][stop - 1]) == rows["is_terminal"][k].as_py()
        if "next_observations" in src:
            assert np.array_equal(obs[k], src["next_observations"][stop - 1])
        else:
            assert rows["observation"][k].as_py() is None  # never invented
    assert seen == n
    if "metadata/algorithm" in src:
        assert meta["metadata"] == {"algorithm": "SAC", "iteration": 7}


def test_robomimic_file_imports_each_demo_as_an_episode(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    report = import_hdf5(ROBOMIMIC, tmp_path / "s", progress=False)
    src = whole(ROBOMIMIC)
    demos = sorted({k.split("/")[1] for k in src}, key=lambda d: int(d.split("_")[1]))
    assert report.episodes == len(demos)
    store = rlarrow.Store.open(tmp_path / "s")
    run = store.runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["data_attrs"]["env_args"] == {
        "env_name": "cartpole-timelimit-v2",
        "type": 2,
        "env_kwargs": {},
    }
    assert meta["per_step"] == {"dones": {"dtype": "<i8", "shape": []}}
    with rlarrow.Reader(store) as reader:
        assert reader.observation_spec()["flat"].shape == (4,)
    for (ep, rows), demo in zip(episodes_of(store), demos, strict=True):
        g = f"data/{demo}"
        n = len(src[f"{g}/actions"])
        assert ep["episode_id"] == int(demo.split("_")[1]) and ep["num_steps"] == n + 1
        assert json.loads(ep["metadata"]) == {"demo": demo, "num_samples": n}
        flat = to_numpy(rows["observation"].combine_chunks().field("flat"), fill_value=np.nan)
        assert np.array_equal(flat[:n], src[f"{g}/obs/flat"]) and np.array_equal(
            flat[n], src[f"{g}/next_obs/flat"][-1]
        )
        assert np.array_equal(
            to_numpy(rows["action"].combine_chunks(), fill_value=0)[:n], src[f"{g}/actions"]
        )
        typed = infos_leaves(rows)  # per-row numbers: the typed infos column (steps 1.1)
        assert typed is not None and typed[1].tolist() == [True] * n + [False]
        dones = typed[0]["dones"][:n]
        assert dones.tolist() == src[f"{g}/dones"].tolist() and dones.dtype == np.int64
        assert rows["is_terminal"].to_pylist()[-1] == bool(src[f"{g}/dones"][-1]) == ep["terminated"]


@pytest.mark.parametrize("path", [*D4RL, ROBOMIMIC], ids=lambda p: p.stem)
def test_chunks_of_any_size_import_the_same_rows(tmp_path, path):
    from rlarrow.io.hdf5 import import_hdf5

    tables = []
    for chunk in (1, 700, 1 << 25):  # one row a chunk, a few rows, the whole file
        import_hdf5(path, tmp_path / f"s{chunk}", run_id="r", progress=False, chunk_bytes=chunk)
        store = rlarrow.Store.open(tmp_path / f"s{chunk}")
        tables.append(
            (
                store.read("steps").sort_by([("episode_id", "ascending"), ("step", "ascending")]),
                store.read("episodes").sort_by("episode_id"),
            )
        )
    for steps, eps in tables[1:]:
        assert steps.equals(tables[0][0]) and eps.equals(tables[0][1])


def test_convert_takes_each_hdf5_file_as_a_run_of_its_own(tmp_path):
    folder = tmp_path / "datasets"
    shutil.copytree(HDF5, folder, ignore=shutil.ignore_patterns("*.py", "*.json"))
    out = subprocess.run(
        [sys.executable, "-m", "rlarrow", "convert", str(folder), "-o", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    store = rlarrow.Store.open(tmp_path / "s")
    runs = store.runs().to_pylist()
    assert sorted(r["source"] for r in runs) == ["d4rl", "d4rl", "robomimic"]
    sources = store.read("sources").to_pylist()
    assert sorted(s["format"] for s in sources) == ["hdf5"] * 3
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlarrow",
            "convert",
            str(folder / "d4rl_writer.hdf5"),
            "-o",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "imported before" in again.stdout + again.stderr
    assert len(rlarrow.Store.open(tmp_path / "s").runs()) == 3


def test_an_hdf5_file_of_another_layout_is_refused_naming_what_it_holds(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import import_hdf5

    path = tmp_path / "other.hdf5"
    with h5py.File(path, "w") as f:
        f["images"] = np.zeros((3, 2))
    with pytest.raises(rlarrow.UnsupportedInputError, match=r"other.hdf5.*neither D4RL.*\['images'\]"):
        import_hdf5(path, tmp_path / "s")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("damage", ["rows", "shape", "truncated", "not hdf5"])
def test_damaged_files_are_refused_and_leave_the_store_as_it_was(tmp_path, damage):
    import h5py

    from rlarrow.io.hdf5 import import_hdf5

    store = rlarrow.Store.create(tmp_path / "s")
    run = store.add_run(source="user", run_id="before")
    store.append(
        "scalars",
        {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(3), "value": np.arange(3.0)},
    )
    path = tmp_path / "bad.hdf5"
    shutil.copyfile(D4RL[1], path)
    if damage == "rows":
        with h5py.File(path, "a") as f:
            data = f["timeouts"][()]
            del f["timeouts"]
            f["timeouts"] = data[:-3]
        match = "timeouts has 97 rows; observations has 100"
    elif damage == "shape":
        with h5py.File(path, "a") as f:
            data = f["terminals"][()]
            del f["terminals"]
            f["terminals"] = np.stack([data, data], axis=1)
        match = r"terminals has shape \(.*, 2\)"
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        match = "bad.hdf5"
    else:
        path.write_bytes(b"HDF but not\0" * 10)
        match = "not an HDF5 file"
    with pytest.raises((rlarrow.CorruptFileError, rlarrow.UnsupportedInputError), match=match):
        import_hdf5(path, store, progress=False, chunk_bytes=500)
    assert [r["run_id"] for r in store.runs().to_pylist()] == ["before"]
    assert store.row_count("steps") == store.row_count("episodes") == 0
    assert store.read("scalars")["value"].to_pylist() == [0.0, 1.0, 2.0]


def test_without_h5py_the_error_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['h5py'] = None\n"
        "import rlarrow\n"
        "from rlarrow.io.hdf5 import import_hdf5\n"
        "try:\n"
        f"    import_hdf5({str(D4RL[0])!r}, {str(tmp_path / 's')!r})\n"
        "except rlarrow.MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'rlarrow[hdf5]'" in out.stdout, out.stderr


def test_minari_hdf5_fixture_imports_as_minari_reads_it(tmp_path):
    minari = pytest.importorskip("minari", reason="needs minari (test-only peer)")
    from rlarrow.io.minari import import_minari

    src = FIXTURES / "minari" / "cartpole" / "hdf5-v0"
    report = import_minari(src, tmp_path / "s", progress=False)
    from minari.dataset.minari_dataset import MinariDataset

    theirs = list(MinariDataset(src / "data").iterate_episodes())
    assert report.episodes == len(theirs) == 10
    store = rlarrow.Store.open(tmp_path / "s")
    for (ep, rows), episode in zip(episodes_of(store), theirs, strict=True):
        n = len(episode.rewards)
        assert rows.num_rows == n + 1 and ep["episode_id"] == episode.id
        obs = to_numpy(rows["observation"].combine_chunks(), fill_value=np.nan)
        assert obs.dtype == episode.observations.dtype and np.array_equal(obs, episode.observations)
        assert rows["action"].to_pylist() == [*episode.actions.tolist(), None]
        assert json.loads(ep["metadata"])["seed"] == ep["episode_id"]
    del minari


# ---------------------------------------------------------------- odd but legal files, and damage


def write(path, datasets, attrs=None, userblock=0):
    """An HDF5 file of ``{path: array}`` (and ``{path: {attr: value}}`` attributes)."""
    import h5py

    with h5py.File(path, "w", userblock_size=userblock) as f:
        for key, value in datasets.items():
            f[key] = value
        for key, values in (attrs or {}).items():
            f.require_group(key).attrs.update(values)
    return path


def d4rl(n=6, **extra):
    rng = np.random.default_rng(0)
    out = {"observations": rng.standard_normal((n, 3)).astype(np.float32),
           "actions": rng.standard_normal((n, 2)).astype(np.float32),
           "rewards": np.arange(n, dtype=np.float32), "terminals": np.arange(n) % 3 == 2}
    out.update(extra)
    return out


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 64])
def test_a_trailing_episode_without_an_end_keeps_its_last_transition(tmp_path, chunk_bytes):
    from rlarrow.io.hdf5 import import_hdf5

    src = d4rl(8)
    src["terminals"] = np.arange(8) == 2  # episode 0: rows 0..2; rows 3..7 end nowhere
    nxt = np.roll(src["observations"], -1, axis=0)  # as D4RL writes it: the next row's observation
    nxt[[2, 7]] = np.random.default_rng(1).standard_normal((2, 3))  # the ends' own
    src["next_observations"] = nxt
    report = import_hdf5(write(tmp_path / "d.hdf5", src), tmp_path / "s", progress=False,
                         chunk_bytes=chunk_bytes)
    assert (report.episodes, report.steps) == (2, 8 + 2)
    store = rlarrow.Store.open(tmp_path / "s")
    last = store.read("episodes").sort_by("episode_id").to_pylist()[1]
    flags = (last["partial_end"], last["terminated"], last["truncated"], last["num_steps"])
    assert flags == (True, False, False, 6)
    assert json.loads(last["metadata"]) == {"source_rows": [3, 8], "final_observation": "next_observations"}
    with rlarrow.connect(store) as con:  # every row of the file is a transition, its next observation its own
        got = con.sql("select observation, action, reward, next_observation, done, truncated "
                      "from transitions order by episode_id, step").fetchall()
    assert len(got) == 8
    for i, (o, a, r, nxt, done, cut) in enumerate(got):
        assert np.allclose(o, src["observations"][i]) and np.allclose(a, src["actions"][i]) and r == i
        assert np.array_equal(np.asarray(nxt, np.float32), src["next_observations"][i])
        assert (done, cut) == (i == 2, False)


def test_a_robosuite_demo_without_observations_imports_with_its_states(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    states = np.random.default_rng(0).standard_normal((20, 32))
    path = write(tmp_path / "demo.hdf5",
                 {"data/demo_1/states": states, "data/demo_1/actions": np.ones((20, 7))},
                 attrs={"data/demo_1": {"model_file": "<mujoco/>"}, "data": {"env": "Lift"}})
    report = import_hdf5(path, tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (1, 21)
    steps = rlarrow.Store.open(tmp_path / "s").read("steps")
    assert steps["observation"].null_count == 21 if "observation" in steps.column_names else True
    first = infos_leaves(steps)[0]["states"]  # a row's numbers: the typed infos column
    assert np.array_equal(first[:20], states) and first.dtype == np.float64
    ep = rlarrow.Store.open(tmp_path / "s").read("episodes").to_pylist()[0]
    assert json.loads(ep["metadata"])["model_file"] == "<mujoco/>"


@pytest.mark.parametrize("case", ["narrow", "wide", "dtype"])
def test_next_obs_that_does_not_fit_obs_is_refused(tmp_path, case):
    from rlarrow.io.hdf5 import import_hdf5

    nxt = {"narrow": np.ones((3, 1), np.float32), "wide": np.ones((3, 4), np.float32),
           "dtype": np.ones((3, 3), np.float64)}[case]
    path = write(tmp_path / "r.hdf5", {"data/demo_0/actions": np.zeros((3, 2)),
                                       "data/demo_0/obs/pos": np.zeros((3, 3), np.float32),
                                       "data/demo_0/next_obs/pos": nxt})
    with pytest.raises(rlarrow.CorruptFileError, match="next_obs/pos"):
        import_hdf5(path, tmp_path / "s", progress=False)
    data = d4rl(next_observations=np.zeros((6, 3), np.float64))
    with pytest.raises(rlarrow.CorruptFileError, match="next_observations holds float64"):
        import_hdf5(write(tmp_path / "d.hdf5", data), tmp_path / "s2", progress=False)


def test_flags_that_are_not_numbers_are_refused(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    path = write(tmp_path / "d.hdf5", d4rl(terminals=np.array([b"0", b"0", b"1", b"0", b"0", b"1"])))
    with pytest.raises(rlarrow.CorruptFileError, match="terminals holds"):
        import_hdf5(path, tmp_path / "s", progress=False)


def test_datasets_named_like_the_runs_own_keys_do_not_replace_them(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    path = write(tmp_path / "d.hdf5", d4rl(layout=np.arange(3), columns=np.arange(2)))
    import_hdf5(path, tmp_path / "s", progress=False)
    run = rlarrow.Store.open(tmp_path / "s").runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["layout"] == "d4rl" and "observations" in meta["columns"]
    assert meta["datasets"] == {"layout": [0, 1, 2], "columns": [0, 1]}


def test_demos_that_differ_in_dtype_or_shape_are_refused_naming_both(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    path = write(tmp_path / "r.hdf5", {"data/demo_0/actions": np.zeros((3, 2)),
                                       "data/demo_0/obs/a": np.zeros((3, 3), np.float32),
                                       "data/demo_1/actions": np.zeros((3, 2)),
                                       "data/demo_1/obs/a": np.zeros((3, 3), np.float64)})
    with pytest.raises(rlarrow.CorruptFileError, match=r"data/demo_1 and data/demo_0 differ in \['obs/a'\]"):
        import_hdf5(path, tmp_path / "s", progress=False)


def test_a_file_after_a_user_block_and_odd_demos_import(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    report = import_hdf5(write(tmp_path / "u.hdf5", d4rl(), userblock=512), tmp_path / "s", progress=False)
    assert report.episodes == 2
    path = write(tmp_path / "r.hdf5", {"data/demo_0/actions": np.zeros((3, 2)),
                                       "data/demo_0/rewards": np.ones(3),
                                       "data/demo_0/lang": np.array([b"pick", b"pick", b"place"]),
                                       "data/demo_1/actions": np.zeros((0, 2))})
    with write_group(path, "data/demo_0/obs"):
        pass
    report = import_hdf5(path, tmp_path / "r", progress=False)
    assert report.episodes == 1  # the empty demo_1 is no episode, and said in the run's metadata
    store = rlarrow.Store.open(tmp_path / "r")
    run = store.runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["empty_demos"] == ["demo_1"]
    assert json.loads(run["env_specs"])["reward_spec"]["dtype"] == "float64"
    lang = [metadata.decode(t, ty) for t, ty in zip(store.read("steps")["metadata"].to_pylist()[:3],
                                                   store.read("steps")["metadata_types"].to_pylist()[:3],
                                                   strict=True)]
    assert [bytes(x["lang"]) for x in lang] == [b"pick", b"pick", b"place"]
    zero = write(tmp_path / "z.hdf5", d4rl(observations=np.zeros((6, 0), np.float32)))
    with pytest.raises(rlarrow.CorruptFileError, match="hold no values"):
        import_hdf5(zero, tmp_path / "z", progress=False)


class write_group:
    """An empty group added to an HDF5 file (robomimic's obs/ of a demo that observed nothing)."""

    def __init__(self, path, name):
        import h5py

        self.f = h5py.File(path, "a")
        self.f.require_group(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_folder_with_other_hdf5_files_converts_what_it_can(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copyfile(FIXTURES / "skrl" / "wrapped" / "memories" / next(
        p.name for p in (FIXTURES / "skrl" / "wrapped" / "memories").glob("*.npz")), folder / "m.npz")
    write(folder / "policy.h5", {"model_weights/dense/kernel": np.zeros((4, 4))})
    shutil.copyfile(D4RL[0], folder / "d4rl.hdf5")
    out = subprocess.run([sys.executable, "-m", "rlarrow", "convert", str(folder), "-o", str(tmp_path / "s")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    runs = rlarrow.Store.open(tmp_path / "s").runs().to_pylist()
    assert sorted(r["source"] for r in runs) == ["d4rl", "memory-export"]
    named = subprocess.run([sys.executable, "-m", "rlarrow", "convert", str(folder / "policy.h5"), "-o",
                            str(tmp_path / "t")], capture_output=True, text=True)
    said = "policy.h5: looks like an HDF5 file that h5py cannot open, or of another layout"
    assert named.returncode != 0 and said in named.stderr


def test_a_demo_whose_per_row_numbers_differ_keeps_them_in_its_metadata(tmp_path):
    from rlarrow.io.hdf5 import read_hdf5

    rng = np.random.default_rng(2)
    states = [rng.standard_normal((4, 3)), rng.standard_normal((5, 2))]  # demo_1's rows are another shape
    path = write(tmp_path / "demos.hdf5", {
        **{f"data/demo_{i}/states": s for i, s in enumerate(states)},
        **{f"data/demo_{i}/actions": np.ones((len(s), 2), np.float32) for i, s in enumerate(states)},
        **{f"data/demo_{i}/obs/x": np.zeros((len(s), 1), np.float32) for i, s in enumerate(states)}})
    with read_hdf5(path) as source:
        steps = source.steps().read_all()  # one schema for both demos
    demo = np.asarray(steps["episode_id"].to_pylist())
    typed, valid = infos_leaves(steps)
    assert np.array_equal(typed["states"][demo == 0][:4], states[0]) and valid[demo == 0].sum() == 4
    assert not valid[demo == 1].any()
    texts, types = steps["metadata"].to_pylist(), steps["metadata_types"].to_pylist()
    kept = [metadata.decode(t, ty)["states"] for t, ty, d in zip(texts, types, demo, strict=True)
            if d == 1 and t]
    assert np.array_equal(np.asarray(kept), states[1]) and kept[0].dtype == np.float64
