"""Typed infos (steps 1.1) through RLDS: written as step fields of their own, read back as ``infos``.

A LeRobot dataset's per-frame numbers (``timestamp``, ``frame_index``, ``index``, ...) and a D4RL
file's ``infos/qpos``/``infos/qvel`` are the typed ``infos`` column; ``write_rlds`` writes each as
an RLDS step field named as the field, in its dtype and shape, with zeros on the final step that
has none (RLDS has no null, as for the last step's action). The shards are checked as TFRecord
bytes parsed here with protobuf (TensorFlow is not needed), and read back with ``read_rlds``.
The data: the LeRobot fixture (written by lerobot's own writer) and the D4RL fixture (h5py).
"""

from __future__ import annotations

import importlib.util
import json
import struct

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

from rlarrow.core.step_columns import infos_leaves

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.protobuf") is None,
    reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'",
)
HAVE_AV = importlib.util.find_spec("av") is not None
LEROBOT = FIXTURES / "lerobot" / "pusht_v30"
D4RL = FIXTURES / "hdf5" / "d4rl_mujoco.hdf5"


def raw_steps(directory):
    """Each episode's step fields as the shards hold them: {name: list or array per episode}, by TFRecord."""
    from rlarrow.io.rlds.rlds_dataset import example_class

    example = example_class()
    episodes = []
    for shard in sorted(directory.glob("*.tfrecord-*")):
        data, pos = shard.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            message = example()
            message.ParseFromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            episodes.append(message.features.feature)
    return episodes


def step_features(directory):
    spec = json.loads((directory / "features.json").read_text())
    return spec["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]


@pytest.mark.skipif(not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'")
def test_lerobot_frame_numbers_are_rlds_step_fields_in_their_dtypes(tmp_path):
    from rlarrow.io.lerobot import read_lerobot
    from rlarrow.io.rlds import write_rlds

    with read_lerobot(LEROBOT) as source:
        out = write_rlds(source, tmp_path / "rlds")
    features = step_features(out)
    assert features["timestamp"]["tensor"]["dtype"] == "float32"
    for key in ("frame_index", "episode_index", "index", "task_index"):
        assert features[key]["tensor"]["dtype"] == "int64", key
    frames = pq.read_table(next((LEROBOT / "data").rglob("*.parquet")))
    episodes = raw_steps(out)
    assert len(episodes) == len(pc.unique(frames["episode_index"]))
    for raw in episodes:
        ep = int(raw["steps/episode_index"].int64_list.value[0])
        own = frames.filter(pc.equal(frames["episode_index"], ep)).sort_by("frame_index")
        n = own.num_rows
        assert len(raw["steps/is_last"].int64_list.value) == n + 1  # the final observation's step
        for key in ("frame_index", "episode_index", "index", "task_index"):
            values = list(raw[f"steps/{key}"].int64_list.value)
            assert values == own[key].to_pylist() + [0], key  # the step after the last frame: zeros
        stamps = np.asarray(raw["steps/timestamp"].float_list.value, np.float32)
        assert np.array_equal(stamps[:n], own["timestamp"].to_numpy()) and stamps[n] == 0


def test_d4rl_infos_are_rlds_step_fields_exactly(tmp_path):
    from rlarrow.io.hdf5 import read_hdf5
    from rlarrow.io.rlds import write_rlds

    with read_hdf5(D4RL, run_id="r") as source:
        stored = pa.concat_tables(chunk.steps for chunk in source)
    with read_hdf5(D4RL, run_id="r") as source:
        out = write_rlds(source, tmp_path / "rlds")
    features = step_features(out)
    for key in ("qpos", "qvel"):  # float64: raw bytes, exactly, where a float list would round
        assert features[key]["tensor"] == {"shape": {"dimensions": ["2"]}, "dtype": "float64",
                                           "encoding": "bytes"}
    assert features["action_log_probs"]["tensor"]["dtype"] == "float32"
    with h5py.File(D4RL) as f:
        want = {k: f[f"infos/{k}"][()] for k in ("qpos", "qvel", "action_log_probs")}
    leaves, valid = infos_leaves(stored)
    assert valid.sum() == len(want["qpos"])  # (the final steps have none: null)
    for key, values in want.items():
        assert np.array_equal(leaves[key][valid], values)

    for key in ("qpos", "qvel"):
        raw = np.concatenate([np.frombuffer(b"".join(ep[f"steps/{key}"].bytes_list.value), "<f8")
                              for ep in raw_steps(out)]).reshape(-1, 2)
        assert np.array_equal(raw[valid], want[key]) and not raw[~valid].any()  # null: zeros
