"""RLDS exports that ``tfds.builder_from_directory`` reads back equal (where TensorFlow is installed),
and that rlarrow's own reader imports to the same rows (everywhere).

The package never needs TensorFlow; the check against ``tfds`` runs in a test or benchmark
environment that has it (``pip install tensorflow-cpu tensorflow-datasets``) and skips elsewhere.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core import metadata
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.protobuf") is None,
    reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'",
)
HAVE_TFDS = importlib.util.find_spec("tensorflow_datasets") is not None
RLDS = FIXTURES / "rlds"


def rows_of(path):
    store = rlarrow.Store.open(path)
    steps = store.read("steps").sort_by([("episode_id", "ascending"), ("step", "ascending")])
    episodes = store.read("episodes").sort_by("episode_id")
    return steps, episodes


@pytest.mark.parametrize("name", ["catch", "robot"])
def test_an_rlds_dataset_exported_imports_to_the_same_rows(tmp_path, name):
    from rlarrow.io.rlds import export_rlds, import_rlds

    import_rlds(RLDS / name, tmp_path / "s", run_id="r", progress=False)
    out = export_rlds(tmp_path / "s", tmp_path / "out")
    info = json.loads((out / "dataset_info.json").read_text())
    assert [s["name"] for s in info["splits"]] == [
        s["name"] for s in json.loads((RLDS / name / "dataset_info.json").read_text())["splits"]
    ]
    import_rlds(out, tmp_path / "back", run_id="r", progress=False)
    (steps, episodes), (steps2, episodes2) = rows_of(tmp_path / "s"), rows_of(tmp_path / "back")
    assert steps.equals(steps2)  # values, dtypes, step metadata (text, rlds_last) alike
    drop = ["metadata", "metadata_types"]
    assert episodes.drop_columns(drop).equals(episodes2.drop_columns(drop))
    for a, b in zip(episodes["metadata"].to_pylist(), episodes2["metadata"].to_pylist(), strict=True):
        a, b = json.loads(a), json.loads(b)
        a["rlds"].pop("shard"), b["rlds"].pop("shard")
        assert a == b


@pytest.mark.skipif(
    not HAVE_TFDS,
    reason="the check against tfds needs TensorFlow and tensorflow-datasets "
    "(a test-only peer: pip install tensorflow-cpu tensorflow-datasets)",
)
@pytest.mark.parametrize("source", ["robot", "robot-encoded", "minari"])
def test_tfds_reads_the_export_back_equal(tmp_path, source):
    import tensorflow_datasets as tfds

    from rlarrow.io.rlds import decode_image, export_rlds, import_rlds

    if source == "minari":
        from rlarrow.io.minari import import_minari

        import_minari(
            FIXTURES / "minari" / "cartpole" / "arrow-v0", tmp_path / "s", run_id="r", progress=False
        )
    else:  # (robot-encoded: its JPEG and PNG bytes kept, and written back as they are)
        images = "encoded" if source.endswith("-encoded") else "decode"
        import_rlds(RLDS / "robot", tmp_path / "s", run_id="r", images=images, progress=False)
    out = export_rlds(tmp_path / "s", tmp_path / "out")
    builder = tfds.builder_from_directory(str(out))
    steps, episodes = rows_of(tmp_path / "s")
    seen = 0
    for split in builder.info.splits:
        for index, episode in enumerate(tfds.as_numpy(builder.as_dataset(split=split))):
            if source.startswith("robot"):
                eid = next(
                    e["episode_id"]
                    for e in episodes.to_pylist()
                    if json.loads(e["metadata"])["rlds"]["split"] == split
                    and json.loads(e["metadata"])["rlds"]["index"] == index
                )
            else:
                eid = episodes["episode_id"][seen].as_py()
            seen += 1
            rows = steps.filter(pc.equal(steps["episode_id"], eid))
            theirs = list(episode["steps"])
            assert len(theirs) == rows.num_rows
            obs = to_numpy(rows["observation"].combine_chunks(), fill_value=0)
            for t, step in enumerate(theirs):
                if isinstance(obs, dict):
                    for key, values in obs.items():
                        theirs_t = step["observation"][key]
                        mine = (
                            decode_image(values[t], theirs_t.shape[-1])
                            if values.dtype == object
                            else values[t]
                        )
                        assert np.array_equal(theirs_t, mine), (split, index, t, key)
                    meta = metadata.decode(rows["metadata"][t].as_py(), rows["metadata_types"][t].as_py())
                    if "language_instruction" in step["observation"]:
                        assert (
                            step["observation"]["language_instruction"].decode()
                            == meta["observation"]["language_instruction"]
                        )
                else:
                    assert (
                        np.array_equal(step["observation"], obs[t]) and step["observation"].dtype == obs.dtype
                    )
                for flag in ("is_first", "is_last", "is_terminal"):
                    assert bool(step[flag]) == rows[flag][t].as_py()
                reward = rows["reward"][t].as_py()
                if reward is not None:
                    assert float(step["reward"]) == reward
    assert seen == episodes.num_rows


def one_episode(path, obs, rewards):
    """A store of one run (source "user", no discounts) of one terminal episode of 4 steps."""
    store = rlarrow.Store.create(path)
    run = store.add_run(source="user", run_id="r")
    store.append(
        "steps",
        {
            "run_id": run,
            "episode_id": 0,
            "step": np.arange(4),
            "env_index": 0,
            "observation": obs,
            "action": np.arange(4, dtype=np.int64),
            "reward": rewards,
            "is_first": [True, False, False, False],
            "is_last": [False, False, False, True],
            "is_terminal": [False, False, False, True],
        },
    )
    store.close()


def test_the_cli_exports_rlds_and_float64_values_come_back_exactly(tmp_path):
    import subprocess
    import sys

    from rlarrow.io.rlds import import_rlds

    obs = np.random.default_rng(0).standard_normal((4, 3))  # float64: not representable in float32
    one_episode(tmp_path / "s", obs, [0.1, 0.2, 1 / 3, None])
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlarrow",
            "export",
            str(tmp_path / "s"),
            "-o",
            str(tmp_path / "out"),
            "--format",
            "rlds",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    import_rlds(tmp_path / "out", tmp_path / "back", progress=False)
    steps, _ = rows_of(tmp_path / "back")
    assert np.array_equal(to_numpy(steps["observation"].combine_chunks()), obs)
    assert steps["reward"].to_pylist() == [0.1, 0.2, 1 / 3, None]


def test_nested_observations_and_recorded_discounts_export_as_rlds_expects(tmp_path):
    from rlarrow.io.rlds import export_rlds, import_rlds

    obs = {
        "state": np.arange(8, dtype=np.float32).reshape(4, 2),
        "images": {"top": np.arange(4 * 6, dtype=np.uint8).reshape(4, 2, 3)},
    }
    one_episode(tmp_path / "s", obs, [1.0, 1.0, 1.0, None])
    import_rlds(export_rlds(tmp_path / "s", tmp_path / "out"), tmp_path / "back", progress=False)
    steps, _ = rows_of(tmp_path / "back")
    back = to_numpy(steps["observation"].combine_chunks())
    assert np.array_equal(back["images"]["top"], obs["images"]["top"]) and np.array_equal(
        back["state"], obs["state"]
    )
    # no discount was recorded: dm_env's (1, and 0 into the terminal state), not 0 everywhere
    assert steps["discount"].to_pylist() == [1.0, 1.0, 0.0, None]


def test_a_dataset_without_shard_counts_numbers_its_episodes_once(tmp_path):
    import shutil

    from rlarrow.io.rlds import import_rlds

    src = tmp_path / "catch"
    shutil.copytree(RLDS / "catch", src)
    info = json.loads((src / "dataset_info.json").read_text())
    for split in info["splits"]:
        split.pop("shardLengths")
    (src / "dataset_info.json").write_text(json.dumps(info))
    import_rlds(src, tmp_path / "s", progress=False)
    ids = rlarrow.Store.open(tmp_path / "s").read("episodes")["episode_id"].to_pylist()
    assert sorted(ids) == list(range(6))
