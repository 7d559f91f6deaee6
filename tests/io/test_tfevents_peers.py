"""Event files rlarrow writes are read by every peer reader, and exactly by rlarrow's own.

The logger's mirror (``ArrowLogger(tfevents_dir=...)``) and ``export_tfevents`` output are read
with TensorBoard's ``EventAccumulator``, tbparse's ``SummaryReader``, tianshou 2's
``TensorboardLogger.restore_logged_data`` and skrl's ``TensorboardFileIterator``: each sees the
same tags and steps, and the float32 of every stored value. rlarrow's reader gets the exact
float64 / int64 values (beyond 2^53, NaN, ±inf) back.
"""

from __future__ import annotations

import importlib.util
import struct
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

import rlarrow
from rlarrow.io import tfevents as tfe
from rlarrow.io.tfevents.proto import parse_event
from rlarrow.record.logger import ArrowLogger

pytest.importorskip("tensorboard", reason="tensorboard (test-only peer) reads the files back")
from tensorboard.backend.event_processing import event_accumulator as ea_mod  # noqa: E402
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter as TBWriter  # noqa: E402

HAS = {m: importlib.util.find_spec(m) is not None
       for m in ("tbparse", "tianshou", "skrl", "torch", "tensorflow")}

#: tag -> the values logged at steps 1, 2, 3 (what a training loop hands a logger)
VALUES: dict[str, list[Any]] = {
    "f64": [0.1, np.pi, -1e-310],
    "f32": [np.float32(0.1), np.float32(-0.0), np.float32(3.4e38)],
    "big_int": [2**53 + 1, 2**62 + 3, -(2**63)],
    "nan_inf": [float("nan"), float("inf"), float("-inf")],
    "huge": [1e300, -1e300, 5e-324],
    "flag": [True, False, True],
    "i32": [np.int32(7), np.int32(-7), np.int32(2**31 - 1)],
    "f16": [np.float16(1.5), np.float16(65504), np.float16(-0.0)],
}


def f32_bits(values: Any) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store logged with a tfevents mirror, its export, and the stored rows."""
    root = tmp_path_factory.mktemp("peers")
    store = root / "s.rlarrow"
    with ArrowLogger(store, run_id="run", tfevents_dir=root / "mirror", update_interval=1) as log:
        for i, step in enumerate((1, 2, 3)):
            log.log_update_data({tag: values[i] for tag, values in VALUES.items()}, step)
    tfe.export_tfevents(store, root / "export")
    with rlarrow.Store.open(store) as st:
        rows = st.read("scalars")
    return {"store": store, "rows": rows, "mirror": root / "mirror", "export": root / "export" / "run"}


def read_back_encoding(rows: Any) -> list[str]:
    """A float32 point is a plain ``simple_value`` (nothing to add): it reads back as such."""
    return ["simple_value" if d == "float32" else e
            for e, d in zip(rows["encoding"].to_pylist(), rows["dtype"].to_pylist(), strict=True)]


def expected(rows: Any) -> dict[str, tuple[list[int], np.ndarray]]:
    """tag -> (steps, float32 bits of the stored values), in step order."""
    out = {}
    for tag in set(rows["tag"].to_pylist()):
        t = rows.filter(pc.equal(rows["tag"], tag)).sort_by("step")
        out[tag] = (t["step"].to_pylist(), f32_bits(t["value"].to_numpy()))
    return out


def test_the_store_holds_the_exact_values(written: dict[str, Any]) -> None:
    rows = written["rows"]
    assert set(rows["tag"].to_pylist()) == {f"update/{t}" for t in VALUES} | {"update/update_step"}
    big = rows.filter(pc.equal(rows["tag"], "update/big_int")).sort_by("step")
    assert big["value_int"].to_pylist() == VALUES["big_int"]


@pytest.mark.parametrize("source", ["mirror", "export"])
def test_event_accumulator_reads_every_scalar(written: dict[str, Any], source: str) -> None:
    acc = ea_mod.EventAccumulator(str(written[source]), size_guidance={ea_mod.SCALARS: 0})
    acc.Reload()
    want = expected(written["rows"])
    assert sorted(acc.Tags()["scalars"]) == sorted(want) and acc.Tags()["tensors"] == []
    for tag, (steps, values) in want.items():
        got = acc.Scalars(tag)
        assert [e.step for e in got] == steps, tag
        assert np.array_equal(f32_bits([e.value for e in got]), values), tag


@pytest.mark.skipif(not HAS["tbparse"], reason="needs tbparse (test-only peer)")
@pytest.mark.parametrize("source", ["mirror", "export"])
def test_tbparse_reads_every_scalar(written: dict[str, Any], source: str) -> None:
    from tbparse import SummaryReader

    df = SummaryReader(str(written[source])).scalars
    want = expected(written["rows"])
    assert sorted(set(df["tag"])) == sorted(want)
    for tag, (steps, values) in want.items():
        got = df[df["tag"] == tag].sort_values("step")
        assert got["step"].tolist() == steps, tag
        assert np.array_equal(f32_bits(got["value"].to_numpy()), values), tag


@pytest.mark.skipif(not (HAS["tianshou"] and HAS["torch"]),
                    reason="needs tianshou 2 and torch (test-only peers)")
@pytest.mark.parametrize("source", ["mirror", "export"])
def test_tianshou_restore_logged_data_reads_every_scalar(written: dict[str, Any], source: str) -> None:
    from tianshou.utils.logger.tensorboard import TensorboardLogger

    data = TensorboardLogger.restore_logged_data(str(written[source]))
    want = expected(written["rows"])
    assert sorted(f"update/{k}" for k in data["update"]) == sorted(want)
    for tag, (_steps, values) in want.items():
        assert np.array_equal(f32_bits(data["update"][tag.split("/", 1)[1]]), values), tag


def _tfrecord_events(path: str) -> Any:
    """What TensorFlow's ``summary_iterator`` yields: every Event of a TFRecord file, in order."""
    with open(path, "rb") as fh:
        while header := fh.read(12):
            (n,) = struct.unpack("<Q", header[:8])
            data = fh.read(n)
            fh.read(4)
            yield event_pb2.Event.FromString(data)


@pytest.fixture
def tensorflow_summary_iterator(monkeypatch: pytest.MonkeyPatch) -> None:
    """skrl's iterator imports TensorFlow's ``summary_iterator``; without TensorFlow, provide it.

    The stand-in reads the TFRecord frames and parses each record with TensorBoard's own
    ``Event`` protobuf, as TensorFlow's does; skrl's code that picks the value runs unchanged.
    """
    if HAS["tensorflow"]:
        return
    from tensorboard.compat import tf

    assert tf.__name__  # resolve TensorBoard's lazy TensorFlow stub before a stand-in exists
    for name in ("tensorflow", "tensorflow.python", "tensorflow.python.summary",
                 "tensorflow.python.summary.summary_iterator"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["tensorflow.python.summary.summary_iterator"].summary_iterator = (  # type: ignore[attr-defined]
        _tfrecord_events)


@pytest.mark.skipif(not HAS["skrl"], reason="needs skrl (test-only peer)")
@pytest.mark.parametrize("source", ["mirror", "export"])
def test_skrl_tensorboard_file_iterator_reads_every_scalar(written: dict[str, Any], source: str,
                                                           tensorflow_summary_iterator: None) -> None:
    from skrl.utils.postprocessing import TensorboardFileIterator

    want = expected(written["rows"])
    out = list(TensorboardFileIterator(str(written[source] / "events.*"), sorted(want)))
    assert [dirname for dirname, _ in out] == [written[source].name]
    data = out[0][1]
    assert sorted(data) == sorted(want)
    for tag, (steps, values) in want.items():
        assert [s for s, _ in data[tag]] == steps, tag
        assert np.array_equal(f32_bits([v for _, v in data[tag]]), values), tag


@pytest.mark.parametrize("source", ["mirror", "export"])
def test_rlarrows_reader_gets_the_exact_rows_back(written: dict[str, Any], source: str) -> None:
    back = tfe.read_tfevents(written[source])
    rows = written["rows"]
    key = [("tag", "ascending"), ("step", "ascending")]
    back, rows = back.sort_by(key), rows.sort_by(key)
    for col in ("tag", "step", "value_int", "wall_time", "dtype", "plugin"):
        assert back[col].to_pylist() == rows[col].to_pylist(), col
    assert back["encoding"].to_pylist() == read_back_encoding(rows)
    assert set(read_back_encoding(rows)) == {"logger", "simple_value"}
    assert np.array_equal(back["value"].to_numpy().view(np.uint64), rows["value"].to_numpy().view(np.uint64))
    nan_inf = back.filter(pc.equal(back["tag"], "update/nan_inf"))["value"].to_pylist()
    assert np.isnan(nan_inf[0]) and nan_inf[1:] == [np.inf, -np.inf]


def test_import_of_the_export_is_exact(written: dict[str, Any], tmp_path: Path) -> None:
    report = tfe.import_tfevents(written["export"], tmp_path / "again.rlarrow", run_id="again")
    assert report.scalars == written["rows"].num_rows
    with rlarrow.Store.open(tmp_path / "again.rlarrow") as st:
        again = st.read("scalars")
    key = [("tag", "ascending"), ("step", "ascending")]
    a, b = written["rows"].sort_by(key), again.sort_by(key)
    for col in ("scope", "tag", "step", "value_int", "wall_time", "dtype"):
        assert a[col].equals(b[col]), col
    assert b["encoding"].to_pylist() == read_back_encoding(a)
    assert np.array_equal(a["value"].to_numpy().view(np.uint64), b["value"].to_numpy().view(np.uint64))


def test_files_from_older_rlarrow_tensor_encoded_still_import_exactly(tmp_path: Path) -> None:
    """Before simple_value, rlarrow wrote a double_val / int64_val tensor (plugin scalars) per value."""
    def old(tag: str, step: int, **tensor: Any) -> event_pb2.Event:
        dtype = 2 if "double_val" in tensor else 9
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
            dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(), **tensor))
        value.metadata.plugin_data.plugin_name = "scalars"
        return event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))

    w = TBWriter(str(tmp_path / "old"))
    for ev in [old("loss", 1, double_val=[0.1]), old("loss", 2, double_val=[float("nan")]),
               old("n", 1, int64_val=[2**62 + 1]), old("n", 2, int64_val=[-(2**63)])]:
        w.add_event(ev)
    w.close()
    tfe.import_tfevents(tmp_path / "old", tmp_path / "s.rlarrow", run_id="old")
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        t = st.read("scalars").sort_by([("tag", "ascending"), ("step", "ascending")]).to_pylist()
    assert [(r["tag"], r["step"], r["encoding"], r["dtype"]) for r in t] == [
        ("loss", 1, "double_val", "float64"), ("loss", 2, "double_val", "float64"),
        ("n", 1, "int64_val", "int64"), ("n", 2, "int64_val", "int64")]
    assert t[0]["value"] == 0.1 and np.isnan(t[1]["value"])
    assert [t[2]["value_int"], t[3]["value_int"]] == [2**62 + 1, -(2**63)]


def test_tensorboards_own_server_side_reader_sees_scalars(written: dict[str, Any]) -> None:
    """TensorBoard's UI reader (plugin_event_accumulator) turns the values into its scalar series."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    acc = pea.EventAccumulator(str(written["export"]), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    want = expected(written["rows"])
    assert sorted(acc.PluginTagToContent("scalars")) == sorted(want)
    for tag, (steps, values) in want.items():
        got = acc.Tensors(tag)
        assert [e.step for e in got] == steps
        got_values = [tensor_util.make_ndarray(e.tensor_proto).item() for e in got]
        assert np.array_equal(f32_bits(got_values), values)


def test_vectorised_and_generic_decoding_agree(written: dict[str, Any]) -> None:
    """Each record parsed on its own (the generic path) gives the rows the vectorised reader gives."""
    from collections import Counter

    (path,) = written["mirror"].glob("*tfevents*")
    data = path.read_bytes()
    rows: list[tuple[Any, ...]] = []
    pos = i = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        parse_event(data[pos + 12:pos + 12 + n], rows, i, Counter(), [])
        pos, i = pos + n + 16, i + 1
    fast = tfe.read_tfevents(path)
    assert len(rows) == fast.num_rows == written["rows"].num_rows
    cols = ["tag", "step", "value", "value_int", "wall_time", "encoding", "dtype", "plugin"]
    generic = [dict(zip(cols, r[2:], strict=True)) for r in rows]
    got = fast.select(cols).to_pylist()
    for a, b in zip(got, generic, strict=True):
        assert np.float64(a.pop("value")).view(np.uint64) == np.float64(b.pop("value")).view(np.uint64)
        assert a == b
    chunked = tfe.TfeventsReader(path, chunk_bytes=1000).read_all()  # records split across chunks
    assert chunked.drop_columns(["value"]).equals(fast.drop_columns(["value"]))
    assert np.array_equal(chunked["value"].to_numpy().view(np.uint64),
                          fast["value"].to_numpy().view(np.uint64))


def test_damaged_exact_metadata_is_a_corrupt_record(tmp_path: Path) -> None:
    def event(step: int, content: bytes) -> event_pb2.Event:
        value = summary_pb2.Summary.Value(tag="x", simple_value=1.0)
        value.metadata.plugin_data.plugin_name = tfe.EXACT_PLUGIN
        value.metadata.plugin_data.content = content
        return event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value]))

    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)])
    vector = tensor_pb2.TensorProto(dtype=2, double_val=[1.0, 2.0], tensor_shape=shape).SerializeToString()
    w = TBWriter(str(tmp_path))
    # a cut-off content; a two-element tensor; no tensor at all
    for ev in [event(1, b"\x0a\x00\x12"), event(2, b"\x0a" + bytes([len(vector)]) + vector),
               event(3, b"\x12\x06logger")]:
        w.add_event(ev)
    w.close()
    with pytest.raises(rlarrow.CorruptFileError, match="not a valid Event message"):
        tfe.read_tfevents(tmp_path)
    reader = tfe.TfeventsReader(tmp_path, on_corrupt="skip")
    assert reader.read_all().num_rows == 0
    assert len(reader.report.corrupt) == 3


def test_unsigned_and_out_of_range_integers_round_trip(tmp_path: Path) -> None:
    """uint32_val / uint64_val are protobuf fields 16 / 17 (two-byte keys); too-big integers stay floats."""
    table = rlarrow.core.schema.build("scalars", {
        "run_id": "r", "scope": "", "tag": ["u32", "u64", "u64_top", "i64_nan"], "step": [1, 1, 1, 1],
        "value": [float(2**32 - 1), float(2**62 + 1), float(2**64 - 1), float("nan")],
        "value_int": [2**32 - 1, 2**62 + 1, None, None],
        "encoding": ["uint32_val", "uint64_val", "logger", "logger"],
        "dtype": ["uint32", "uint64", "uint64", "int64"],
    })
    tfe.write_tfevents(table, tmp_path)
    back = {r["tag"]: r for r in tfe.read_tfevents(tmp_path / "r").to_pylist()}
    assert [(back[t]["value_int"], back[t]["dtype"], back[t]["encoding"]) for t in ("u32", "u64")] == [
        (2**32 - 1, "uint32", "uint32_val"), (2**62 + 1, "uint64", "uint64_val")]
    assert (back["u64_top"]["value"], back["u64_top"]["dtype"]) == (float(2**64 - 1), "float64")
    assert np.isnan(back["i64_nan"]["value"]) and back["i64_nan"]["value_int"] is None
    acc = ea_mod.EventAccumulator(str(tmp_path / "r"))
    acc.Reload()
    assert acc.Scalars("u64")[0].value == float(np.float32(2**62 + 1))
