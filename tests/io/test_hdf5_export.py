"""Exports read back by the peers' own readers: robomimic's SequenceDataset and Minari's MinariDataset.

A robomimic file imported and exported comes back with the same datasets, values, dtypes and
attributes; a Minari dataset imported and exported (any backend) gives Minari the same
episodes and episode metadata, and imports again to the same rows. Runs of other sources
(D4RL files, gymnasium recordings) export too, with spaces made from their specs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.tensors import to_numpy

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("h5py", "minari", "robomimic", "gymnasium")}
pytestmark = pytest.mark.skipif(not HAVE["h5py"], reason="HDF5 needs h5py: pip install 'rlarrow[hdf5]'")
NEEDS_MINARI = pytest.mark.skipif(
    not HAVE["minari"], reason="needs minari (test-only peer): pip install minari"
)
NEEDS_ROBOMIMIC = pytest.mark.skipif(
    not HAVE["robomimic"],
    reason="needs robomimic's reader (test-only peer): pip install --no-deps robomimic==0.3.0 termcolor",
)

HDF5 = FIXTURES / "hdf5"
ROBOMIMIC = HDF5 / "robomimic_d4rl.hdf5"
MINARI = FIXTURES / "minari" / "cartpole" / "hdf5-v0"


def walk(path):
    """Every dataset and attribute of an HDF5 file (JSON text attributes parsed)."""
    import h5py

    items = {}
    with h5py.File(path, "r") as f:

        def visit(name, node):
            attrs = {
                k: json.loads(v) if isinstance(v, str) and v[:1] in "{[" else v for k, v in node.attrs.items()
            }
            items[name] = (node[()] if isinstance(node, h5py.Dataset) else None, attrs)

        f.visititems(visit)
        items["/"] = (None, dict(f.attrs))
    return items


def test_a_robomimic_file_comes_back_as_it_was(tmp_path):
    from rlarrow.io.hdf5 import export_robomimic, import_hdf5

    import_hdf5(ROBOMIMIC, tmp_path / "s", progress=False)
    out = export_robomimic(tmp_path / "s", tmp_path / "out.hdf5")
    before, after = walk(ROBOMIMIC), walk(out)
    assert set(before) == set(after)
    for name, (data, attrs) in before.items():
        if data is not None:
            assert after[name][0].dtype == data.dtype and np.array_equal(after[name][0], data), name
        assert after[name][1] == attrs, name
    with pytest.raises(rlarrow.InvalidInputError, match="exists"):
        export_robomimic(tmp_path / "s", out)
    export_robomimic(tmp_path / "s", out, overwrite=True)
    assert not list(tmp_path.glob(".out.hdf5*"))  # no temporary file left


@NEEDS_ROBOMIMIC
@pytest.mark.parametrize("source", ["robomimic", "d4rl", "minari"])
def test_robomimics_reader_trains_on_the_export(tmp_path, source):
    import robomimic.utils.obs_utils as obs_utils
    from robomimic.utils.dataset import SequenceDataset

    from rlarrow.io.hdf5 import export_robomimic, import_hdf5
    from rlarrow.io.minari import import_minari

    if source == "minari":
        import_minari(MINARI, tmp_path / "s", progress=False)
    else:
        import_hdf5(
            ROBOMIMIC if source == "robomimic" else HDF5 / "d4rl_mujoco.hdf5", tmp_path / "s", progress=False
        )
    out = export_robomimic(tmp_path / "s", tmp_path / "demo.hdf5")
    obs_utils.initialize_obs_utils_with_obs_specs({"obs": {"low_dim": ["flat"], "rgb": []}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = SequenceDataset(
            hdf5_path=str(out),
            obs_keys=("flat",),
            dataset_keys=("actions", "rewards", "dones"),
            load_next_obs=source != "d4rl",
            frame_stack=1,
            seq_length=4,
            pad_frame_stack=True,
            pad_seq_length=True,
            get_pad_mask=False,
            goal_mode=None,
            hdf5_cache_mode="all",
            hdf5_use_swmr=True,
            hdf5_normalize_obs=False,
            filter_by_attribute=None,
        )
    store = rlarrow.Store.open(tmp_path / "s")
    steps = store.read("steps")
    transitions = sum(1 for a in steps["action"].to_pylist() if a is not None)
    assert len(dataset) == transitions
    sample = dataset[0]
    obs = to_numpy(
        steps.sort_by([("episode_id", "ascending"), ("step", "ascending")])["observation"].combine_chunks(),
        fill_value=np.nan,
    )
    flat = obs["flat"] if isinstance(obs, dict) else obs
    assert np.array_equal(sample["obs"]["flat"], flat[:4])


@NEEDS_MINARI
@pytest.mark.parametrize("data_format", ["hdf5", "arrow", "parquet"])
def test_a_minari_dataset_comes_back_in_any_backend(tmp_path, data_format):
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.minari import export_minari, import_minari

    import_minari(MINARI, tmp_path / "s", run_id="r", progress=False)
    out = export_minari(tmp_path / "s", tmp_path / "out", data_format=data_format)
    theirs, ours = MinariDataset(MINARI / "data"), MinariDataset(out / "data")
    assert ours.storage.metadata["data_format"] == data_format
    assert ours.spec.dataset_id == theirs.spec.dataset_id and ours.total_steps == theirs.total_steps
    assert ours.observation_space == theirs.observation_space and ours.action_space == theirs.action_space
    for a, b in zip(theirs.iterate_episodes(), ours.iterate_episodes(), strict=True):
        assert a.id == b.id
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            x, y = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
            assert x.shape == y.shape and np.array_equal(x, y), field
    assert list(theirs.storage.get_episode_metadata(range(10))) == list(
        ours.storage.get_episode_metadata(range(10))
    )
    import_minari(out, tmp_path / "again", run_id="r", progress=False)
    for table in ("steps", "episodes"):
        a = rlarrow.Store.open(tmp_path / "s").read(table).drop_columns(["metadata_types"])
        b = rlarrow.Store.open(tmp_path / "again").read(table).drop_columns(["metadata_types"])
        assert a.num_rows == b.num_rows
        for column in a.column_names:
            if column == "metadata":
                assert [json.loads(t) if t else t for t in a[column].to_pylist()] == [
                    json.loads(t) if t else t for t in b[column].to_pylist()
                ], table
            else:
                assert a[column].equals(b[column]), (table, column)


@NEEDS_MINARI
def test_other_runs_export_to_minari_with_spaces_from_their_specs(tmp_path):
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.hdf5 import import_hdf5
    from rlarrow.io.minari import export_minari

    report = import_hdf5(HDF5 / "d4rl_mujoco.hdf5", tmp_path / "s", progress=False)
    with pytest.warns(rlarrow.core.errors.RLArrowWarning, match="1 episode.*without a final observation"):
        out = export_minari(tmp_path / "s", tmp_path / "out", data_format="arrow")
    ours = MinariDataset(out / "data")
    assert ours.total_episodes == report.episodes - 1  # the partial last one cannot be held
    assert str(ours.observation_space) == "Box(-inf, inf, (4,), float32)"
    store = rlarrow.Store.open(tmp_path / "s")
    steps = store.read("steps").sort_by([("episode_id", "ascending"), ("step", "ascending")])
    first = next(ours.iterate_episodes())
    n = len(first.rewards)
    obs = to_numpy(steps["observation"].combine_chunks(), fill_value=np.nan)[: n + 1]
    assert np.array_equal(first.observations, obs) and first.terminations[-1]


@NEEDS_MINARI
@pytest.mark.parametrize("data_format", ["hdf5", "arrow", "parquet"])
def test_a_d4rl_file_exports_to_minari_with_its_infos_and_dtypes(tmp_path, data_format):
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.hdf5 import import_hdf5
    from rlarrow.io.minari import export_minari

    src = walk(HDF5 / "d4rl_mujoco.hdf5")
    import_hdf5(HDF5 / "d4rl_mujoco.hdf5", tmp_path / "s", progress=False)
    with pytest.warns(rlarrow.core.errors.RLArrowWarning, match="1 episode"):  # the partial one
        out = export_minari(tmp_path / "s", tmp_path / "out", data_format=data_format)
    episodes = list(MinariDataset(out / "data").iterate_episodes())
    rows = rlarrow.Store.open(tmp_path / "s").read("episodes").sort_by("episode_id").to_pylist()
    assert len(episodes) == 4
    for ep, row in zip(episodes, rows, strict=False):
        first, stop = json.loads(row["metadata"])["source_rows"]
        rewards = src["rewards"][0][first:stop].reshape(-1)
        assert ep.rewards.dtype == rewards.dtype == np.float32 and np.array_equal(ep.rewards, rewards)
        assert set(ep.infos) == {"action_log_probs", "qpos", "qvel"}
        for key, got in ep.infos.items():
            want = src[f"infos/{key}"][0][first:stop]
            # one a transition in D4RL, one an observation in Minari: the final one is not known (NaN)
            assert got.dtype == want.dtype and got.shape == (len(want) + 1, *want.shape[1:]), key
            assert np.array_equal(got[:-1], want) and np.isnan(got[-1]).all(), key


@NEEDS_MINARI
@pytest.mark.skipif(not HAVE["gymnasium"], reason="needs gymnasium")
def test_a_gym_recording_of_dict_and_tuple_spaces_exports_to_minari(tmp_path):
    from minari.dataset.minari_dataset import MinariDataset

    from rlarrow.io.minari import export_minari
    from rlarrow.record.gym import RecordEpisodes
    from tests.io.test_minari_shapes import _envs

    env = RecordEpisodes(_envs()["robot"](), tmp_path / "s")
    env.reset(seed=0)
    seen = 0
    while seen < 2:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            seen += 1
            if seen < 2:
                env.reset()
    env.close()
    out = export_minari(tmp_path / "s", tmp_path / "out")
    ours = MinariDataset(out / "data")
    assert ours.observation_space == env.observation_space and ours.action_space == env.action_space
    with rlarrow.Reader(tmp_path / "s") as reader:
        cols = reader.episode_columns(0)
    first = next(ours.iterate_episodes())
    assert np.array_equal(first.observations["camera"], cols["observation"]["camera"])
    assert np.array_equal(first.observations["pair"][1], cols["observation"]["pair"]["1"])


def test_the_cli_exports_robomimic_and_minari_and_refuses_misplaced_options(tmp_path):
    from rlarrow.io.hdf5 import import_hdf5

    import_hdf5(ROBOMIMIC, tmp_path / "s", progress=False)
    run = [sys.executable, "-m", "rlarrow", "export", str(tmp_path / "s")]
    out = subprocess.run(
        [*run, "-o", str(tmp_path / "r.hdf5"), "--format", "robomimic"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.hdf5").is_file()
    bad = subprocess.run(
        [*run, "-o", str(tmp_path / "x"), "--format", "robomimic", "--data-format", "arrow"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--data-format applies to --format minari" in bad.stderr
    if HAVE["minari"]:
        out = subprocess.run(
            [*run, "-o", str(tmp_path / "m"), "--format", "minari", "--data-format", "parquet"],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads((tmp_path / "m" / "data" / "metadata.json").read_text())["data_format"] == "parquet"


def test_robomimic_export_of_nested_and_text_observations(tmp_path):
    import h5py

    from rlarrow.io.hdf5 import export_robomimic
    from rlarrow.io.rlds import import_rlds

    import_rlds(FIXTURES / "rlds" / "robot", tmp_path / "r", progress=False)
    export_robomimic(tmp_path / "r", tmp_path / "r.hdf5")
    with h5py.File(tmp_path / "r.hdf5", "r") as f:
        assert sorted(f["data/demo_0/obs"]) == ["image", "state", "wrist"]
        assert f["data/demo_0/observation/language_instruction"][0] == b"open the drawer"
    if importlib.util.find_spec("av") is not None:
        from rlarrow.io.lerobot import import_lerobot

        import_lerobot(FIXTURES / "lerobot" / "pusht_v30", tmp_path / "l", progress=False)
        export_robomimic(tmp_path / "l", tmp_path / "l.hdf5")
        with h5py.File(
            tmp_path / "l.hdf5", "r"
        ) as f:  # nested fields joined at dots, as robomimic keys are flat
            assert sorted(f["data/demo_0/obs"]) == ["image", "images.top", "state"]
            assert f["data/demo_0/obs/images.top"].shape == (6, 24, 32, 3)


def test_the_cli_makes_the_robomimic_files_directory(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli import cli
    from rlarrow.io.hdf5 import import_hdf5

    import_hdf5(ROBOMIMIC, tmp_path / "s", progress=False)
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "s"), "-o", str(tmp_path / "new" / "dir"),
                                      "--format", "robomimic"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "new" / "dir" / "demo.hdf5").is_file()
