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

from rlarrow.core import metadata
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


def read_back(directory):
    from rlarrow.io.rlds import read_rlds

    with read_rlds(directory, run_id="r") as source:
        return pa.concat_tables(chunk.steps for chunk in source)


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

    steps = read_back(out)  # rlarrow's reader: the same numbers, typed infos again, none in metadata
    assert steps.schema.field("infos").type.field("frame_index").type == pa.int64()
    assert steps.schema.field("infos").type.field("timestamp").type == pa.float32()
    leaves, valid = infos_leaves(steps)
    assert valid.all()
    assert not any("index" in m for m in steps["metadata"].drop_null().to_pylist())  # (only rlds_last)
    everything = frames.sort_by([("episode_index", "ascending"), ("frame_index", "ascending")])
    kept = ~steps["is_last"].to_numpy(zero_copy_only=False)
    for key in ("frame_index", "index", "task_index"):
        assert leaves[key].dtype == np.int64 and leaves[key][kept].tolist() == everything[key].to_pylist()
    assert np.array_equal(leaves["timestamp"][kept], everything["timestamp"].to_numpy())


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

    steps = read_back(out)
    back, all_valid = infos_leaves(steps)
    assert all_valid.all()
    for key, values in want.items():
        assert back[key].dtype == values.dtype and np.array_equal(back[key][valid], values), key


def test_an_rlds_step_field_of_numbers_is_typed_infos_declared_and_written_back(tmp_path):
    """envlogger's Catch in RLDS (envlogger's own TFDS writer): ``timestep_id`` int64 on every step."""
    from rlarrow.io.rlds import read_rlds, write_rlds

    want = np.load(FIXTURES / "rlds" / "catch.expected.npz")
    with read_rlds(FIXTURES / "rlds" / "catch", run_id="r") as source:
        assert source.types["infos"] == pa.struct([("timestep_id", pa.int64())])  # from features.json
        steps = pa.concat_tables(chunk.steps for chunk in source)
    assert steps["infos"].null_count == 0  # (RLDS defines it on the last step too: not rlds_last)
    leaves, _ = infos_leaves(steps)
    keys = sorted({k.rsplit("/steps/", 1)[0] for k in want.files if k.endswith("/steps/timestep_id")})
    ids = np.concatenate([want[f"{k}/steps/timestep_id"] for k in keys])
    assert leaves["timestep_id"].tolist() == ids.tolist()
    with read_rlds(FIXTURES / "rlds" / "catch", run_id="r") as source:
        out = write_rlds(source, tmp_path / "again")
    assert step_features(out)["timestep_id"] == step_features(FIXTURES / "rlds" / "catch")["timestep_id"]
    assert read_back(out).equals(steps)  # value-exact, the rlds_last metadata included


def tensor(dtype, *shape, encoding="none"):
    dims = {"dimensions": [str(d) for d in shape]}
    return {"tensor": {"shape": dims, "dtype": dtype, "encoding": encoding}}


def test_a_nested_step_field_keeps_its_numbers_typed_and_its_text_in_metadata(tmp_path):
    """A TFDS dataset (features.json and a shard made here with protobuf) of a ``language`` dict
    step field holding text and an embedding: the embedding is ``infos.language.embedding``
    (float32, (3,)), the text step metadata; written back, the shard holds the same values."""
    from rlarrow.io.codecs.tfrecord import frame_records
    from rlarrow.io.rlds import write_rlds
    from rlarrow.io.rlds.rlds_dataset import example_class

    steps = {"observation": tensor("float32", 2), "action": tensor("int64"), "reward": tensor("float32"),
             "discount": tensor("float32"), "is_first": tensor("bool"), "is_last": tensor("bool"),
             "is_terminal": tensor("bool"), "score": tensor("float64", encoding="bytes"),
             "language": {"featuresDict": {"features": {"instruction": {"text": {}},
                                                        "embedding": tensor("float32", 3)}}}}
    spec = {"featuresDict": {"features": {"steps": {"sequence": {"feature": {"featuresDict": {
        "features": steps}}, "length": "-1"}}}}}
    src = tmp_path / "mixed" / "1.0.0"
    src.mkdir(parents=True)
    (src / "features.json").write_text(json.dumps(spec))
    rng = np.random.default_rng(0)
    embedding = rng.standard_normal((2, 3, 3)).astype(np.float32)
    score = np.array([[0.1, np.nan, 1 / 3], [2.0, -0.0, 1e-300]])
    texts = [["pick", "place", "stop"], ["push", "", "wait"]]
    records = []
    for e in range(2):
        message = example_class()()
        feature = message.features.feature
        feature["steps/observation"].float_list.value.extend(rng.standard_normal(6).astype(np.float32).tolist())
        feature["steps/action"].int64_list.value.extend([1, 2, 3])
        for key in ("reward", "discount"):
            feature[f"steps/{key}"].float_list.value.extend([1.0, 0.5, 0.0])
        for key, flags in (("is_first", [1, 0, 0]), ("is_last", [0, 0, 1]), ("is_terminal", [0, 0, e])):
            feature[f"steps/{key}"].int64_list.value.extend(flags)
        feature["steps/score"].bytes_list.value.extend([v.astype("<f8").tobytes() for v in score[e][:, None]])
        feature["steps/language/instruction"].bytes_list.value.extend([t.encode() for t in texts[e]])
        feature["steps/language/embedding"].float_list.value.extend(embedding[e].reshape(-1).tolist())
        records.append(message.SerializeToString())
    (src / "mixed-train.tfrecord-00000-of-00001").write_bytes(frame_records(records))
    (src / "dataset_info.json").write_text(json.dumps({"name": "mixed", "version": "1.0.0", "splits": [
        {"name": "train", "shardLengths": ["2"],
         "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"}
    ]}))

    got = read_back(src)
    infos = got.schema.field("infos").type
    assert infos.field("score").type == pa.float64() and infos.field("language").type.num_fields == 1
    leaves, valid = infos_leaves(got)
    assert valid.all() and leaves["language/embedding"].dtype == np.float32
    assert np.array_equal(leaves["language/embedding"], embedding.reshape(6, 3))
    assert np.array_equal(leaves["score"], score.reshape(-1), equal_nan=True)
    assert np.signbit(leaves["score"][4]) and leaves["score"][5] == 1e-300  # float64, exactly
    meta = metadata.decode_column(got["metadata"].to_pylist(), got["metadata_types"].to_pylist())
    assert [m["language"]["instruction"] for m in meta] == sum(texts, [])
    assert not any("embedding" in m["language"] or "score" in m for m in meta)

    from rlarrow.io.rlds import read_rlds

    with read_rlds(src, run_id="r") as source:
        out = write_rlds(source, tmp_path / "again")
    assert step_features(out)["language"] == steps["language"]  # (a dataset's own features, kept)
    raw = raw_steps(out)
    for e in range(2):
        assert list(raw[e]["steps/language/instruction"].bytes_list.value) == [t.encode() for t in texts[e]]
        assert np.array_equal(np.asarray(raw[e]["steps/language/embedding"].float_list.value, np.float32),
                              embedding[e].reshape(-1))
        scores = [v.astype("<f8").tobytes() for v in score[e][:, None]]
        assert raw[e]["steps/score"].bytes_list.value[:] == scores
    again = read_back(out)
    assert again.drop_columns(["infos"]).equals(got.drop_columns(["infos"]))
    assert again.schema.field("infos").type == infos
    for key, values in infos_leaves(again)[0].items():  # (NaN: equal by value, which Arrow's equals is not)
        assert values.dtype == leaves[key].dtype and np.array_equal(values, leaves[key], equal_nan=True), key


def test_a_store_of_steps_1_0_exports_its_step_fields_from_metadata_alike(tmp_path):
    """An RLDS import written by rlarrow with steps 1.0 kept ``timestep_id`` in each step's metadata:
    its export writes the same shards as one of steps 1.1 (typed infos)."""
    from rlarrow.core.sources import EpisodeChunk, EpisodeSource
    from rlarrow.core.tensors import to_numpy
    from rlarrow.io.rlds import read_rlds, write_rlds

    catch = FIXTURES / "rlds" / "catch"

    def as_1_0(steps):
        ids = to_numpy(steps["infos"].combine_chunks())["timestep_id"]
        old = metadata.decode_column(steps["metadata"].to_pylist(), steps["metadata_types"].to_pylist())
        rows = [{**(m or {}), "timestep_id": i} for m, i in zip(old, ids, strict=True)]
        texts, tags = metadata.encode_column(rows)
        rest = steps.drop_columns(["infos", "metadata", "metadata_types"])
        return rest.append_column("metadata", pa.array(texts, pa.string())).append_column(
            "metadata_types", pa.array(tags, pa.string()))

    with read_rlds(catch, run_id="r") as src:
        def chunks(run):
            for chunk in src.with_run_id(run):
                yield EpisodeChunk(as_1_0(chunk.steps), chunk.episodes, chunk.tables)

        old = EpisodeSource(src.run, {k: v for k, v in src.types.items() if k != "infos"}, chunks)
        write_rlds(old, tmp_path / "1.0")
    with read_rlds(catch, run_id="r") as src:
        write_rlds(src, tmp_path / "1.1")
    shards = sorted(p.name for p in (tmp_path / "1.1").glob("*.tfrecord-*"))
    assert shards == sorted(p.name for p in (tmp_path / "1.0").glob("*.tfrecord-*")) and shards
    for name in shards:
        assert (tmp_path / "1.0" / name).read_bytes() == (tmp_path / "1.1" / name).read_bytes(), name
    assert read_back(tmp_path / "1.0").equals(read_back(tmp_path / "1.1"))


@pytest.mark.skipif(not HAVE_AV, reason="LeRobot's cameras need PyAV: pip install 'rlarrow[video]'")
def test_convert_lerobot_to_rlds_keeps_the_frame_numbers(tmp_path):
    """``rlarrow convert LEROBOT_DIR --to rlds -o OUT``: LeRobot's ``index`` is a step field of the shards."""
    from click.testing import CliRunner

    from rlarrow.cli.transfer_commands import convert

    out = tmp_path / "rlds" / "1.0.0"
    result = CliRunner().invoke(convert, [str(LEROBOT), "--to", "rlds", "-o", str(out)])
    assert result.exit_code == 0, result.output
    frames = pq.read_table(next((LEROBOT / "data").rglob("*.parquet"))).sort_by("index")
    written = [v for ep in raw_steps(out) for v in list(ep["steps/index"].int64_list.value)[:-1]]
    assert sorted(written) == frames["index"].to_pylist()
