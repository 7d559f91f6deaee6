"""RLDS datasets in TFDS directories, written by envlogger's TFDS backend and a tfds builder, import
without TensorFlow to exactly what ``tfds.builder_from_directory`` reads.

The fixtures (``tests/fixtures/rlds``, made by ``make_rlds_fixtures.py`` with TensorFlow) carry
``<name>.expected.npz``: every value ``tfds`` returned for every episode, which each import is
compared with here, in a process that has no TensorFlow.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import warnings

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

RLDS = FIXTURES / "rlds"


def imported(tmp_path, name):
    from rlarrow.io.rlds import import_rlds

    report = import_rlds(RLDS / name, tmp_path / name, progress=False)
    store = rlarrow.Store.open(tmp_path / name)
    steps = store.read("steps")
    out = []
    for ep in store.read("episodes").sort_by("episode_id").to_pylist():
        rows = steps.filter(pc.equal(steps["episode_id"], ep["episode_id"])).sort_by("step")
        meta = json.loads(ep["metadata"])
        out.append((f"{meta['rlds']['split']}/{meta['rlds']['index']}", ep, rows))
    return report, store, out


def step_meta(rows):
    return [
        metadata.decode(t, ty)
        for t, ty in zip(rows["metadata"].to_pylist(), rows["metadata_types"].to_pylist(), strict=True)
    ]


@pytest.mark.parametrize("name", ["catch", "robot"])
def test_rlds_import_gives_what_tfds_reads(tmp_path, name):
    want = np.load(RLDS / f"{name}.expected.npz")
    report, store, episodes = imported(tmp_path, name)
    keys = sorted({k.rsplit("/steps/", 1)[0] for k in want.files if "/steps/" in k})
    assert sorted(k for k, _, _ in episodes) == keys and report.episodes == len(keys)
    run = store.runs().to_pylist()[0]
    assert (run["source"], run["alignment"]) == ("rlds", "rlds")
    for key, ep, rows in episodes:
        n = rows.num_rows
        last = bool(want[f"{key}/steps/is_last"][-1])
        assert ep["num_steps"] == n == len(want[f"{key}/steps/is_first"])
        for flag in ("is_first", "is_last", "is_terminal"):
            assert rows[flag].to_pylist() == want[f"{key}/steps/{flag}"].tolist(), (key, flag)
        obs = to_numpy(rows["observation"].combine_chunks(), fill_value=0)
        fields = obs if isinstance(obs, dict) else {"": obs}
        for field, values in fields.items():
            expected = want[f"{key}/steps/observation" + (f"/{field}" if field else "")]
            assert values.dtype == expected.dtype and values.shape == expected.shape, (key, field)
            assert np.array_equal(values, expected), (key, field)  # PNG and JPEG pixels as tfds decodes them
        action = to_numpy(rows["action"].combine_chunks(), fill_value=0)
        expected = want[f"{key}/steps/action"]
        assert action.dtype == expected.dtype and np.array_equal(action[: n - last], expected[: n - last])
        rewards = rows["reward"].to_pylist()
        assert rewards[: n - last] == want[f"{key}/steps/reward"].astype(np.float64)[: n - last].tolist()
        assert (rewards[-1] is None) == last and (rows["action"][n - 1].as_py() is None) == last
        meta = step_meta(rows)
        if last and want[f"{key}/steps/reward"][-1] != 0:  # undefined in RLDS: kept aside, not lost
            assert meta[-1]["rlds_last"]["reward"] == want[f"{key}/steps/reward"][-1]
            assert np.array_equal(meta[-1]["rlds_last"]["action"], expected[-1])
        if f"{key}/steps/observation/language_instruction" in want.files:
            texts = [m["observation"]["language_instruction"] for m in meta]
            assert texts == [t.decode() for t in want[f"{key}/steps/observation/language_instruction"]]
        if f"{key}/steps/timestep_id" in want.files:  # envlogger's step field: a typed info, every step's
            ids = to_numpy(rows["infos"].combine_chunks(), fill_value=None)["timestep_id"]
            assert ids.dtype == np.int64 and ids.tolist() == want[f"{key}/steps/timestep_id"].tolist()
            assert rows["infos"].null_count == 0 and not any("timestep_id" in (m or {}) for m in meta)
        ep_meta = metadata.decode(ep["metadata"], ep["metadata_types"])
        for field in [
            k.rsplit("/", 1)[1] for k in want.files if k.startswith(f"{key}/") and "/steps/" not in k
        ]:
            got, expected = ep_meta[field], want[f"{key}/{field}"].item()
            assert got == expected and type(got) is not bytes, (key, field)
        assert ep["terminated"] == bool(want[f"{key}/steps/is_terminal"][-1])


def test_convert_takes_an_rlds_directory_or_its_parent(tmp_path):
    parent = tmp_path / "robot_example"
    shutil.copytree(RLDS / "robot", parent / "1.0.0")
    out = subprocess.run(
        [sys.executable, "-m", "rlarrow", "convert", str(parent), "-o", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    store = rlarrow.Store.open(tmp_path / "s")
    assert store.runs()["source"].to_pylist() == ["rlds"]
    assert store.read("sources")["format"].to_pylist() == ["rlds"]
    assert store.row_count("episodes") == 5
    run = store.runs().to_pylist()[0]
    meta = metadata.decode(run["metadata"], run["metadata_types"])
    assert meta["dataset_info"]["name"] == "robot_example" and "featuresDict" in meta["features"]


@pytest.mark.parametrize("damage", ["bit", "truncated", "missing shard", "features"])
def test_damaged_datasets_are_refused_or_announced_and_the_store_is_left_as_it_was(tmp_path, damage):
    from rlarrow.io.rlds import import_rlds

    src = tmp_path / "catch"
    shutil.copytree(RLDS / "catch", src)
    shard = src / "catch_example-train.tfrecord-00001"
    store = rlarrow.Store.create(tmp_path / "s")
    run = store.add_run(source="user", run_id="before")
    store.append(
        "scalars",
        {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(2), "value": np.arange(2.0)},
    )
    if damage == "bit":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x04
        shard.write_bytes(bytes(data))
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-7])
    elif damage == "missing shard":
        shard.unlink()
    else:
        text = (src / "features.json").read_text().replace('"10"', '"11"', 1)  # observation (11, 5)
        (src / "features.json").write_text(text)
    if damage == "truncated":  # the last record cut: said, and the shard's count does not add up
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rlarrow.core.errors.TruncatedInputWarning)
            report = import_rlds(src, store, progress=False)
        assert report.episodes == 5
    else:
        with pytest.raises(rlarrow.CorruptFileError, match="catch"):
            import_rlds(src, store, progress=False)
        assert [r["run_id"] for r in store.runs().to_pylist()] == ["before"]
        assert store.row_count("steps") == 0
    assert store.read("scalars")["value"].to_pylist() == [0.0, 1.0]


def test_without_protobuf_the_error_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['google.protobuf'] = None\n"
        "import rlarrow\n"
        "from rlarrow.io.rlds import import_rlds\n"
        "try:\n"
        f"    import_rlds({str(RLDS / 'catch')!r}, {str(tmp_path / 's')!r})\n"
        "except rlarrow.MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'rlarrow[rlds]'" in out.stdout, out.stderr
