"""tfevents: reading every encoding written by the real tools, damage, runs, and writing back."""

from __future__ import annotations

import json
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.io import tfevents as tfe
from rlarrow.io.codecs.crc32c import crc32c, crc32c_many, mask

TFE = FIXTURES / "tfevents"
LAYOUT = json.loads((TFE / "LAYOUT.json").read_text())

tb = pytest.importorskip("tensorboard", reason="tensorboard (test-only peer) writes, reads references")
from tensorboard.backend.event_processing import event_accumulator as ea_mod  # noqa: E402
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter as TBWriter  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402


def accumulate(path: Path) -> ea_mod.EventAccumulator:
    acc = ea_mod.EventAccumulator(str(path), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0,
                                                             ea_mod.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.uint64)


def tb_event(tag: str, step: int, wall_time: float, *, simple: float | None = None,
             tensor: tensor_pb2.TensorProto | None = None, plugin: str | None = None) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(tag=tag)
    if simple is not None:
        value.simple_value = simple
    if tensor is not None:
        value.tensor.CopyFrom(tensor)
    if plugin is not None:
        value.metadata.plugin_data.plugin_name = plugin
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=[value]))


def write_with_tensorboard(directory: Path, events: list[event_pb2.Event]) -> Path:
    """Write events with TensorBoard's own (TensorFlow-free) event file writer."""
    w = TBWriter(str(directory))
    for ev in events:
        w.add_event(ev)
    w.close()
    (path,) = [p for p in directory.iterdir() if "tfevents" in p.name]
    return path


def scalar_tensor(dtype: int, **fields) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(), **fields)


# ---------------------------------------------------------------- checksums


def test_crc32c_matches_known_vectors_and_tensorboard() -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as tb_crc

    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 50_000, dtype=np.uint8)
    starts = rng.integers(3, 40_000, 2000)
    lengths = rng.integers(0, 600, 2000)
    got = crc32c_many(data, starts, lengths, threads=2)
    for i in range(0, 2000, 13):
        assert int(got[i]) == tb_crc(data[starts[i]:starts[i] + lengths[i]].tobytes())
    assert mask(0) == 0xA282EAD8


def test_crc32c_of_long_records_from_combined_pieces() -> None:
    """Records of 4 KiB and more (images, histograms) are cut into 256-byte pieces whose CRCs
    combine (up to 128 KiB all at once, longer ones each in log steps): every length around
    the cuts, at any offset, alone or beside others, must give TensorBoard's CRC."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as tb_crc

    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 1_200_000, dtype=np.uint8)
    cases = [(3, 1 << 15), (4, (1 << 15) + 1), (5, (1 << 15) + 255), (6, 1 << 16), (7, (1 << 16) + 257),
             (11, (1 << 20) + 3), (100_001, 300_000), (13, 1_100_000), (8, 4096), (9, 4096 + 257),
             (10, (1 << 17) - 1), (12, 1 << 17)]
    for start, n in cases:
        want = tb_crc(data[start:start + n].tobytes())
        assert int(crc32c_many(data, np.array([start]), np.array([n]))[0]) == want, (start, n)
    starts = np.array([s for s, _ in cases] + [20, 40, 50, 60])
    lengths = np.array([n for _, n in cases] + [12, 700, 5000, 5001])
    got = crc32c_many(data, starts, lengths)
    want = [tb_crc(data[s:s + n].tobytes()) for s, n in zip(starts, lengths, strict=True)]
    assert [int(g) for g in got] == want


# ---------------------------------------------------------------- encodings


def test_every_scalar_encoding_decodes_to_its_true_value(tmp_path: Path) -> None:
    half = np.array([1.5, -0.0, np.inf], np.float16)
    half_bits = half.view(np.uint16).tolist()
    bf16_value = np.float32(3.140625)  # exactly representable in bfloat16
    bf16_bits = int(bf16_value.view(np.uint32)) >> 16
    big = 2**53 + 1
    events = [
        tb_event("simple", 1, 1.5, simple=0.1),
        tb_event("simple_nan", 2, 2.0, simple=float("nan")),
        tb_event("simple_neg_zero", 3, 3.0, simple=-0.0),
        tb_event("float_val", 4, 4.0, tensor=scalar_tensor(1, float_val=[0.1]), plugin="scalars"),
        tb_event("double_val", 5, 5.0, tensor=scalar_tensor(2, double_val=[0.1]), plugin="scalars"),
        tb_event("half_val", 6, 6.0, tensor=scalar_tensor(19, half_val=[half_bits[0]])),
        tb_event("half_neg_zero", 7, 7.0, tensor=scalar_tensor(19, half_val=[half_bits[1]])),
        tb_event("half_inf", 8, 8.0, tensor=scalar_tensor(19, half_val=[half_bits[2]])),
        tb_event("bfloat16", 9, 9.0, tensor=scalar_tensor(14, half_val=[bf16_bits])),
        tb_event("int_val", 10, 10.0, tensor=scalar_tensor(3, int_val=[-7])),
        tb_event("int64_val", 11, 11.0, tensor=scalar_tensor(9, int64_val=[big])),
        tb_event("content_f32", 12, 12.0, tensor=scalar_tensor(1, tensor_content=np.float32(0.1).tobytes()),
                 plugin="scalars"),
        tb_event("content_f64", 13, 13.0, tensor=scalar_tensor(2, tensor_content=np.float64(-0.0).tobytes())),
        tb_event("content_i64", 14, 14.0, tensor=scalar_tensor(9, tensor_content=np.int64(-big).tobytes())),
        tb_event("content_f16", 15, 15.0, tensor=scalar_tensor(19, tensor_content=half[:1].tobytes())),
        tb_event("content_bf16", 16, 16.0,
                 tensor=scalar_tensor(14, tensor_content=np.uint16(bf16_bits).tobytes())),
        tb_event("big_step", 2**62, 2**31 + 0.123456789, simple=1.0),
    ]
    write_with_tensorboard(tmp_path, events)
    t = tfe.read_tfevents(tmp_path)
    rows = {r["tag"]: r for r in t.to_pylist()}
    expect = {
        "simple": (float(np.float32(0.1)), None, "simple_value", "float32"),
        "simple_nan": (float("nan"), None, "simple_value", "float32"),
        "simple_neg_zero": (-0.0, None, "simple_value", "float32"),
        "float_val": (float(np.float32(0.1)), None, "float_val", "float32"),
        "double_val": (0.1, None, "double_val", "float64"),
        "half_val": (1.5, None, "half_val", "float16"),
        "half_neg_zero": (-0.0, None, "half_val", "float16"),
        "half_inf": (float("inf"), None, "half_val", "float16"),
        "bfloat16": (3.140625, None, "bfloat16_val", "bfloat16"),
        "int_val": (-7.0, -7, "int_val", "int32"),
        "int64_val": (float(big), big, "int64_val", "int64"),
        "content_f32": (float(np.float32(0.1)), None, "tensor_content", "float32"),
        "content_f64": (-0.0, None, "tensor_content", "float64"),
        "content_i64": (float(-big), -big, "tensor_content", "int64"),
        "content_f16": (1.5, None, "tensor_content", "float16"),
        "content_bf16": (3.140625, None, "tensor_content", "bfloat16"),
        "big_step": (1.0, None, "simple_value", "float32"),
    }
    assert set(rows) == set(expect)
    for tag, (value, as_int, encoding, dtype) in expect.items():
        r = rows[tag]
        assert bits([r["value"]])[0] == bits([value])[0] or (np.isnan(value) and np.isnan(r["value"])), tag
        assert (r["value_int"], r["encoding"], r["dtype"]) == (as_int, encoding, dtype), tag
    assert rows["big_step"]["step"] == 2**62
    assert rows["big_step"]["wall_time"] == 2**31 + 0.123456789
    assert rows["float_val"]["plugin"] == "scalars" and rows["simple"]["plugin"] is None


def test_non_scalar_summaries_are_counted_and_skipped(tmp_path: Path) -> None:
    histo = summary_pb2.HistogramProto(min=0, max=1, num=2, sum=1, bucket_limit=[1], bucket=[2])
    events = [
        tb_event("loss", 1, 1.0, simple=0.5),
        event_pb2.Event(step=1, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="h", histo=histo)])),
        event_pb2.Event(step=1, summary=summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag="img", image=summary_pb2.Summary.Image(height=1, width=1))])),
        tb_event("text", 1, 1.0, tensor=tensor_pb2.TensorProto(dtype=7, string_val=[b"hello"]),
                 plugin="text"),
        tb_event("hp", 1, 1.0, tensor=scalar_tensor(1, float_val=[0.0]), plugin="hparams"),
        tb_event("vector", 1, 1.0, tensor=tensor_pb2.TensorProto(
            dtype=1, float_val=[1.0, 2.0],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]))),
        event_pb2.Event(step=1, graph_def=b"\x0a\x00"),
        event_pb2.Event(step=1, session_log=event_pb2.SessionLog(status=1)),
        tb_event("loss", 2, 2.0, simple=0.25),
    ]
    write_with_tensorboard(tmp_path, events)
    reader = tfe.TfeventsReader(tmp_path)
    t = reader.read_all()
    assert t["tag"].to_pylist() == ["loss", "loss"] and t["value"].to_pylist() == [0.5, 0.25]
    assert dict(reader.report.skipped) == {"histogram": 1, "image": 1, "text": 1, "hparams": 1, "tensor": 1,
                                           "graph": 1, "session_log": 1}


@pytest.mark.parametrize("tool", ["torch", "tianshou", "tensorboardx"])
def test_fixtures_read_like_tensorboard_reads_them(tool: str) -> None:
    """Every scalar TensorBoard's EventAccumulator (unsampled) sees, with exact step, time and value."""
    reader = tfe.TfeventsReader(TFE / tool)
    t = reader.read_all()
    info = LAYOUT[tool]
    assert sorted(reader.report.runs) == sorted(info["readback"]["event_accumulator"])
    counts: dict[str, int] = {}
    for f in info["files"]:
        for key, n in f["value_counts"].items():
            tag, kind, _ = (x.strip() for x in key.split("|"))
            if kind in ("simple_value", "tensor") and "plugin=text" not in key:
                counts[tag] = counts.get(tag, 0) + n
    assert t.num_rows == sum(counts.values())
    for run, seen in info["readback"]["event_accumulator"].items():
        acc = accumulate(TFE / tool / run if run != "." else TFE / tool)
        mine = t.filter(pa.compute.equal(t["run_id"], run))
        for tag in seen["scalars"]:
            ref = acc.Scalars(tag)
            got = mine.filter(pa.compute.equal(mine["tag"], tag))
            assert got["step"].to_pylist() == [e.step for e in ref]
            assert got["wall_time"].to_pylist() == [e.wall_time for e in ref]
            assert np.array_equal(bits(got["value"]), bits([e.value for e in ref]))
        for tag in seen["tensors"]:
            ref = acc.Tensors(tag)
            if ref and ref[0].tensor_proto.dtype == 7:
                continue  # text
            got = mine.filter(pa.compute.equal(mine["tag"], tag))
            want = [float(np.asarray(tensor_util.make_ndarray(e.tensor_proto)).item()) for e in ref]
            assert got["step"].to_pylist() == [e.step for e in ref]
            assert np.array_equal(bits(got["value"]), bits(want))


def test_sub_runs_are_distinct_runs_named_like_tbparse() -> None:
    t = tfe.read_tfevents(TFE / "tensorboardx")
    runs = set(t["run_id"].to_pylist())
    assert runs == {".", "rewards/max", "rewards/mean"}
    assert t.num_rows == LAYOUT["tensorboardx"]["readback"]["tbparse_scalars_rows"]


# ---------------------------------------------------------------- damage


def _torch_like_file(tmp_path: Path, n: int = 200) -> Path:
    events = [tb_event(f"train/m{i % 3}", i, 1.7e9 + i, simple=float(i)) for i in range(n)]
    return write_with_tensorboard(tmp_path, events)


def _record_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += struct.unpack_from("<Q", data, pos)[0] + 16
    return out


def test_truncated_last_record_keeps_everything_before_with_a_warning(tmp_path: Path) -> None:
    src = _torch_like_file(tmp_path / "src")
    data = src.read_bytes()
    offsets = _record_offsets(src)
    last = offsets[-1]
    for cut in [last + 1, last + 5, last + 12, len(data) - 1]:
        broken = tmp_path / f"cut{cut}" / src.name
        broken.parent.mkdir()
        broken.write_bytes(data[:cut])
        with pytest.warns(rlarrow.TruncatedInputWarning, match=f"byte {last}"):
            t = tfe.read_tfevents(broken)
        assert t["step"].to_pylist() == list(range(199))  # all but the cut record


def test_corrupt_record_in_the_middle_raises_naming_file_and_offset_or_is_skipped(tmp_path: Path) -> None:
    src = _torch_like_file(tmp_path / "src")
    data = bytearray(src.read_bytes())
    offsets = _record_offsets(src)
    target = offsets[100]  # record 100 holds step 99
    data[target + 20] ^= 0xFF
    bad = tmp_path / "bad" / src.name
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    with pytest.raises(rlarrow.CorruptFileError, match=f"at byte {target}") as err:
        tfe.read_tfevents(bad)
    assert str(bad) in str(err.value) and err.value.offset == target
    reader = tfe.TfeventsReader(bad, on_corrupt="skip")
    t = reader.read_all()
    assert t["step"].to_pylist() == [s for s in range(200) if s != 99]
    assert reader.report.corrupt == [(str(bad), target)]


def test_corrupt_length_field_is_caught_and_skipping_resynchronises(tmp_path: Path) -> None:
    src = _torch_like_file(tmp_path / "src")
    data = bytearray(src.read_bytes())
    offsets = _record_offsets(src)
    target = offsets[50]
    data[target] ^= 0x40  # the length now lies
    bad = tmp_path / "bad" / src.name
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    with pytest.raises(rlarrow.CorruptFileError, match=f"at byte {target}.*length"):
        tfe.read_tfevents(bad)
    t = tfe.read_tfevents(bad, on_corrupt="skip")
    assert t["step"].to_pylist() == [s for s in range(200) if s != 49]


def test_a_folder_named_like_an_event_file_is_a_run_not_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "events.out.tfevents.1234.host"
    _torch_like_file(folder, n=3)
    assert not tfe.is_event_file(folder)
    assert [name for name, _ in tfe.find_runs(tmp_path)] == ["events.out.tfevents.1234.host"]
    assert tfe.read_tfevents(tmp_path).num_rows == 3
    (tmp_path / "empty").mkdir()
    with pytest.raises(rlarrow.InvalidInputError, match="no TensorBoard event files"):
        tfe.find_runs(tmp_path / "empty")


def test_globs_and_small_chunks_read_the_same(tmp_path: Path) -> None:
    for run in ("a", "b/c"):
        _torch_like_file(tmp_path / run, n=500)
    whole = tfe.read_tfevents(tmp_path)
    assert set(whole["run_id"].to_pylist()) == {"a", "b/c"}
    chunked = tfe.TfeventsReader(tmp_path, chunk_bytes=1000).read_all()
    assert chunked.equals(whole)
    globbed = tfe.read_tfevents(str(tmp_path / "**" / "events*"))
    assert globbed.num_rows == 1000


# ---------------------------------------------------------------- writing


def test_written_files_read_back_by_tensorboard_bit_exact(tmp_path: Path) -> None:
    values32 = np.array([0.1, -0.0, np.inf, -np.inf, 1e-40, 3.4e38], np.float32).astype(np.float64)
    values64 = np.array([0.1, -0.0, np.pi, 1e-310, -1e300, 2.0**-1074])
    n = len(values32)
    table = rlarrow.core.schema.build("scalars", {
        "run_id": ["r"] * n + ["r/sub"] * n + ["r"],
        "scope": "train",
        "tag": ["f32"] * n + ["f64"] * n + ["int"],
        "step": list(range(n)) + list(range(n)) + [2**40],
        "value": list(values32) + list(values64) + [float(2**53 + 1)],
        "value_int": [None] * (2 * n) + [2**53 + 1],
        "wall_time": [1.7e9 + i / 7 for i in range(2 * n + 1)],
        "encoding": ["simple_value"] * n + ["double_val"] * n + ["int64_val"],
        "dtype": ["float32"] * n + ["float64"] * n + ["int64"],
        "plugin": [None] * n + ["scalars"] * n + [None],
    })
    files = tfe.write_tfevents(table, tmp_path)
    assert {f.parent for f in files} == {tmp_path / "r", tmp_path / "r" / "sub"}
    acc = accumulate(tmp_path / "r")
    assert acc.Tags()["tensors"] == []  # every value is a simple_value, for every reader
    got32 = acc.Scalars("f32")
    assert np.array_equal(bits([e.value for e in got32]), bits(values32))
    assert [e.wall_time for e in got32] == [1.7e9 + i / 7 for i in range(n)]
    (big,) = acc.Scalars("int")
    assert big.step == 2**40 and big.value == float(np.float32(2**53 + 1))
    got64 = accumulate(tmp_path / "r" / "sub").Scalars("f64")
    with np.errstate(over="ignore"):
        assert np.array_equal(bits([e.value for e in got64]), bits(values64.astype(np.float32)))
    back = tfe.read_tfevents(tmp_path, run_prefix="x")
    key = [("run_id", "ascending"), ("tag", "ascending"), ("step", "ascending")]
    back = back.sort_by(key)
    want = table.sort_by(key)
    for col in ("tag", "step", "value_int", "wall_time", "encoding", "dtype", "plugin"):
        assert back[col].to_pylist() == want[col].to_pylist(), col  # exact rows, encoding and plugin too
    assert np.array_equal(bits(back["value"]), bits(want["value"]))


def test_import_then_export_round_trips_through_the_cli(tmp_path: Path) -> None:
    from rlarrow.cli.commands import main

    store, out = tmp_path / "s.rlarrow", tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["convert", str(TFE / "torch"), "-o", str(store), "--run-id", "t"])
    assert done.value.code == 0
    with rlarrow.Store.open(store) as st:
        runs = st.read("runs", columns=["run_id", "source"]).to_pylist()
        assert {r["run_id"] for r in runs} == {"t", "t/rewards_max", "t/rewards_mean"}
        first = st.read("scalars")
    with pytest.raises(SystemExit) as done:
        main(["export", str(store), "-o", str(out), "--format", "tfevents"])
    assert done.value.code == 0
    again = tfe.read_tfevents(out / "t", run_prefix="t")
    key = ["run_id", "tag", "step"]
    a = first.sort_by([(k, "ascending") for k in key])
    b = again.sort_by([(k, "ascending") for k in key])
    for col in ("run_id", "tag", "step", "wall_time", "encoding", "dtype"):
        assert a[col].equals(b[col]), col
    assert np.array_equal(bits(a["value"]), bits(b["value"]))
    with pytest.raises(SystemExit) as done:
        main(["export", str(store), "-o", str(out), "--format", "tfevents"])
    assert done.value.code != 0  # files exist: refused without --overwrite


def test_many_rows_survive_the_writers_periodic_flushes(tmp_path: Path) -> None:
    n = 10_000
    tags = [f"t{i % 7}" for i in range(n)]
    table = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "", "tag": tags,
                                                  "step": np.arange(n),
                                             "value": np.arange(n) / 3})
    with tfe.EventFileWriter(tmp_path, flush_every=1000) as w:
        w.write_batch(table)
    back = tfe.read_tfevents(tmp_path)
    assert back["step"].to_pylist() == list(range(n))
    assert np.array_equal(back["value"].to_numpy(), np.arange(n) / 3)  # float64 kept exactly
    float32_rows = back.filter(pa.compute.equal(back["encoding"], "simple_value"))["step"].to_numpy()
    exact32 = (np.arange(n) / 3).astype(np.float32) == np.arange(n) / 3
    assert np.array_equal(float32_rows, np.flatnonzero(exact32))  # only those carry no exact value
    acc = accumulate(tmp_path)
    assert sum(len(acc.Scalars(f"t{i}")) for i in range(7)) == n


def test_event_file_writer_output_is_readable_while_still_open(tmp_path: Path) -> None:
    w = tfe.EventFileWriter(tmp_path)
    for i in range(10):
        w.add_scalar("loss", i / 3, step=i, wall_time=100.0 + i)
    w.flush()
    assert tfe.read_tfevents(tmp_path).num_rows == 10
    assert accumulate(tmp_path).Scalars("loss")[3].value == np.float32(1.0)
    w.close()


def test_tensorboard_file_iterator_is_skrls_shape_for_every_encoding(tmp_path: Path) -> None:
    from rlarrow.io.postprocessing import TensorboardFileIterator

    events = [tb_event("a", i, 1.0, tensor=scalar_tensor(2, double_val=[i / 2]), plugin="scalars")
              for i in range(3)]
    events += [tb_event("b", 5, 1.0, simple=2.5), tb_event("c", 6, 1.0, simple=1.0)]
    write_with_tensorboard(tmp_path / "run1", events)
    out = list(TensorboardFileIterator(str(tmp_path / "*" / "events*"), ["a", "b"]))
    assert out == [("run1", {"a": [[0, 0.0], [1, 0.5], [2, 1.0]], "b": [[5, 2.5]]})]


def test_damaged_input_never_touches_the_store(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    good = tmp_path / "good"
    _torch_like_file(good, n=20)
    tfe.import_tfevents(good, store, run_id="good")
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    (f,) = list(bad.iterdir())
    data = bytearray(f.read_bytes())
    data[_record_offsets(f)[5] + 14] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(rlarrow.CorruptFileError):
        tfe.import_tfevents(bad, store, run_id="bad")
    with rlarrow.Store.open(store) as st:
        assert st.read("scalars")["run_id"].unique().to_pylist() == ["good"]
        assert st.row_count("scalars") == 20
        assert st.read("runs")["run_id"].to_pylist() == ["good"]  # no run row for the failed import


def test_an_import_damaged_after_its_first_files_were_read_commits_nothing(tmp_path: Path) -> None:
    """One import is one transaction: runs a/ and b/ read and written, then c/'s file fails."""
    store = tmp_path / "s.rlarrow"
    tfe.import_tfevents(_torch_like_file(tmp_path / "before", n=10).parent, store, run_id="before")
    files_before = sorted(store.rglob("*.parquet"))
    log = tmp_path / "log"
    for run in ("a", "b", "c"):
        _torch_like_file(log / run, n=300)
    (f,) = list((log / "c").iterdir())
    data = bytearray(f.read_bytes())
    damaged_at = _record_offsets(f)[250]
    data[damaged_at + 14] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(rlarrow.CorruptFileError, match=f"at byte {damaged_at}"):
        tfe.import_tfevents(log, store, run_id="r", name="exp")
    with rlarrow.Store.open(store) as st:
        assert st.read("runs")["run_id"].to_pylist() == ["before"]  # no run row of a/ or b/
        assert st.read("scalars")["run_id"].unique().to_pylist() == ["before"]
        assert st.row_count("scalars") == 10
        assert len(st.files("scalars")) == 1
    assert sorted(store.rglob("*.parquet")) == files_before  # the failed import's files are deleted
    # the same import with the damage skipped commits every run at once
    report = tfe.import_tfevents(log, store, run_id="r", on_corrupt="skip")
    assert report.scalars == 3 * 300 - 1 and len(report.corrupt) == 1
    with rlarrow.Store.open(store) as st:
        assert sorted(st.read("runs")["run_id"].to_pylist()) == ["before", "r/a", "r/b", "r/c"]
        assert st.row_count("scalars") == 10 + 899


def test_an_import_failing_at_its_runs_rows_leaves_no_scalars(tmp_path: Path) -> None:
    """The scalars are written first, the runs rows last: one transaction, so a failure at the
    runs rows (a log folder whose name is not UTF-8 cannot be the row's source_path) takes the
    scalars back out. (Before, the scalars stayed in the store without a run.)"""
    import os

    store = tmp_path / "s.rlarrow"
    rlarrow.Store.create(store).close()
    log = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run-\xe9t\xe9"))  # Latin-1 "run-été"
    _torch_like_file(tmp_path / "written", n=50)
    (tmp_path / "written").rename(log)
    with pytest.raises(rlarrow.InvalidInputError, match="not valid UTF-8.*rename it"):
        tfe.import_tfevents(log, store, run_id="r")
    with rlarrow.Store.open(store) as st:
        assert st.row_count("scalars") == 0 and st.row_count("runs") == 0
    assert not list(store.rglob("*.parquet"))
    # a sub-run so named cannot even be a run_id: refused before anything is read
    _torch_like_file(tmp_path / "log" / "sub", n=5)
    (tmp_path / "log" / "sub").rename(os.fsdecode(os.fsencode(tmp_path / "log") + b"/sub-\xff"))
    with pytest.raises(rlarrow.InvalidInputError, match="run's folder name is not valid UTF-8"):
        tfe.read_tfevents(tmp_path / "log")


def test_import_maps_tianshou_prefixes_to_scopes(tmp_path: Path) -> None:
    events = [tb_event(tag, 1, 1.0, simple=1.0) for tag in
              ["training/env_step", "test/returns_stat/mean", "update/loss", "info/epoch", "save/epoch", "x"]]
    write_with_tensorboard(tmp_path / "log", events)
    tfe.import_tfevents(tmp_path / "log", tmp_path / "s.rlarrow", run_id="r")
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        t = st.read("scalars")
    assert t["scope"].to_pylist() == ["train", "test", "update", "info", "save", ""]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(rlarrow.InvalidInputError, match="already exists"):
            tfe.import_tfevents(tmp_path / "log", tmp_path / "s.rlarrow", run_id="r")


# --------------------------------------------------------------------------- the package itself

#: the package's modules, lowest first: each imports only modules before it in this list
LAYERS = ["proto", "decode", "events", "transfer"]  # (framing and CRC: rlarrow.io.codecs.tfrecord, .crc32c)


def test_package_all_lists_its_user_api() -> None:
    """``__all__`` is what users call; the helpers rlarrow's own modules share stay importable by name."""
    assert {"import_tfevents", "export_tfevents", "read_tfevents", "write_tfevents", "scan_tfevents",
            "scope_of", "TfeventsReader", "EventFileWriter"} <= set(tfe.__all__)
    for name in tfe.__all__:
        assert getattr(tfe, name) is not None and getattr(tfe, name).__doc__, name
    assert tfe.find_runs is not None  # left __all__ (a helper), still importable


def test_each_module_says_what_it_owns_and_imports_only_the_ones_below() -> None:
    import ast
    import importlib

    for level, name in enumerate(LAYERS):
        module = importlib.import_module(f"rlarrow.io.tfevents.{name}")
        assert module.__doc__ and len(module.__doc__) > 200, name
        for public in getattr(module, "__all__", []):
            assert hasattr(module, public), (name, public)
        assert module.__file__ is not None
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlarrow.io.tfevents"):
                parts = (node.module or "").split(".")
                used = parts[3] if len(parts) > 3 else None
                assert used in LAYERS[:level], f"{name} imports {node.module}"


def test_a_tag_that_is_not_utf8_is_a_corrupt_record(tmp_path):
    """A record whose CRCs hold but whose tag is not UTF-8: CorruptFileError, or skipped."""
    from rlarrow.io.codecs.tfrecord import frame_records
    from rlarrow.io.tfevents.proto import event_bytes, value_message

    good = event_bytes(1.0, 0, value_message(b"train/loss", 0.5, None, None, None, None))
    bad = event_bytes(1.0, 1, value_message(b"train/\xffloss", 0.25, None, None, None, None))
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(frame_records([event_bytes(0.0, 0, file_version="brain.Event:2"), good, bad]))
    with pytest.raises(rlarrow.CorruptFileError, match="not a valid Event message"):
        tfe.read_tfevents(path)
    table = tfe.read_tfevents(path, on_corrupt="skip")
    assert table.column("tag").to_pylist() == ["train/loss"]
    assert table.column("value").to_pylist() == [0.5]


def test_scan_streams_what_read_reads_a_chunk_at_a_time_without_a_store(tmp_path: Path) -> None:
    import duckdb

    src = _torch_like_file(tmp_path / "log", n=3000)  # written by TensorBoard's own writer
    table = tfe.read_tfevents(src)
    batches = tfe.scan_tfevents(src, chunk_bytes=16 << 10)
    assert isinstance(batches, pa.RecordBatchReader) and batches.schema == table.schema
    got = list(batches)
    assert len(got) > 1 and max(b.num_rows for b in got) < table.num_rows  # streamed: a chunk at a time
    assert pa.Table.from_batches(got).equals(table)
    con = duckdb.connect()
    con.register("scalars", tfe.scan_tfevents(src))
    assert con.sql("SELECT count(*), sum(step) FROM scalars WHERE tag = 'train/m0'").fetchall() == [
        (1000, sum(range(0, 3000, 3)))]
    # damage far into the file: nothing is read until asked, the early batches come, then the error
    data = bytearray(src.read_bytes())
    damaged_at = _record_offsets(src)[2900]
    data[damaged_at + 14] ^= 1
    src.write_bytes(bytes(data))
    lazy = tfe.scan_tfevents(src, chunk_bytes=16 << 10)
    assert lazy.read_next_batch().column("step").to_pylist()[:3] == [0, 1, 2]
    with pytest.raises(rlarrow.CorruptFileError, match=f"at byte {damaged_at}"):
        lazy.read_all()


def test_exact_values_written_without_an_encoding_take_the_vectorised_path_exactly(tmp_path: Path) -> None:
    """A table with no encoding or dtype column (polars', a user's): its float64 and int64 values
    carry an empty encoding field; they read back value-exact, with a null encoding, decoded all
    at once like the others (the generic path, a record at a time, took 20x as long)."""
    from collections import Counter

    from rlarrow.io.codecs import tfrecord as framing
    from rlarrow.io.tfevents import decode, proto

    values = [0.1, -0.0, float("nan"), float("inf"), 1e300, 0.5, 2.0**60 + 1]
    ints = [None, None, None, None, None, None, 2**60 + 1]
    n = len(values)
    written = pa.table({"tag": [f"train/m{i % 2}" for i in range(n)], "step": list(range(n)),
                        "value": values, "value_int": pa.array(ints, pa.int64()),
                        "wall_time": [1.7e9 + i for i in range(n)]})
    (path,) = tfe.write_tfevents(written, tmp_path, run_layout=False)
    got = tfe.read_tfevents(path)
    assert got.column("step").to_pylist() == list(range(n))
    assert [struct.pack("<d", v) for v in got.column("value").to_pylist()] == \
        [struct.pack("<d", v) for v in values[:6]] + [struct.pack("<d", float(2**60 + 1))]
    assert got.column("value_int").to_pylist() == ints
    assert got.column("dtype").to_pylist() == ["float64", "float32", "float32", "float32", "float64",
                                               "float32", "int64"]
    assert got.column("encoding").to_pylist() == [None, "simple_value", "simple_value", "simple_value", None,
                                                  "simple_value", None]
    with open(path, "rb") as fh:
        (chunk,) = framing.read_records(fh, path, log=framing.ReadCounts())
    buf, data, offs, lens = chunk
    fast = decode._fast_simple_values(buf, offs[1:] + framing.HEADER_BYTES, lens[1:])
    assert fast["ok"].all()  # every scalar record decoded at once, none left to the generic path
    rows: list[tuple[object, ...]] = []  # ... which reads them the same
    for i in range(1, len(offs)):
        start = int(offs[i]) + framing.HEADER_BYTES
        proto.parse_event(data[start:start + int(lens[i])], rows, i, Counter(), [])
    generic = [r[2:] for r in rows]
    fast_rows = list(zip(*(got.column(c).to_pylist() for c in
                           ("tag", "step", "value", "value_int", "wall_time", "encoding", "dtype", "plugin")),
                         strict=True))
    assert [struct.pack("<d", r[2]) + repr(r[:2] + r[3:]).encode() for r in fast_rows] == \
        [struct.pack("<d", r[2]) + repr(r[:2] + r[3:]).encode() for r in generic]
