"""RLDS as an episode source: read to Arrow without a store, written from any source, imported in one commit.

``read_rlds`` gives the rows ``import_rlds`` stores (the import is ``ingest(store, read_rlds(...))``);
``write_rlds`` writes a source read from another format (a Minari dataset) or from RLDS itself, and
rlarrow's reader reads it back value for value; a dataset damaged in its last episode leaves the
store at the version it had.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.core.errors import ArgumentError, CorruptFileError
from rlarrow.core.tensors import to_numpy

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("google.protobuf") is None,
    reason="RLDS needs protobuf: pip install 'rlarrow[rlds]'",
)
RLDS = FIXTURES / "rlds"
MINARI = FIXTURES / "minari" / "cartpole" / "arrow-v0"


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("episode_id", "ascending"), ("step", "ascending")])


def _same_columns(stored: pa.Table, read: pa.Table, skip: tuple[str, ...] = ()) -> None:
    for name in read.column_names:
        if name in skip:
            continue
        a, b = stored.column(name).combine_chunks(), read.column(name).combine_chunks()
        assert a.type == b.type, name
        assert a.equals(b), name


def _whole_episodes(chunks) -> None:
    """Each chunk holds whole episodes: the ``episodes`` rows of exactly the episodes its steps hold."""
    for c in chunks:
        assert c.episodes is not None
        ids = c.episodes["episode_id"].to_pylist()
        assert sorted(set(c.steps["episode_id"].to_pylist())) == \
            sorted(i for i, n in zip(ids, c.episodes["num_steps"].to_pylist(), strict=True) if n)
        assert c.steps.num_rows == sum(c.episodes["num_steps"].to_pylist())


@pytest.mark.parametrize("name", ["catch", "robot", "labels"])
def test_read_rlds_gives_what_the_import_stores_without_a_store(tmp_path, name, monkeypatch):
    from rlarrow.io.rlds import import_rlds, read_rlds, rlds_reading

    source = read_rlds(RLDS / name, run_id="r")
    chunks = list(source)
    assert len(chunks) == 1  # (a small dataset: one chunk)
    _whole_episodes(chunks)
    monkeypatch.setattr(rlds_reading, "CHUNK_BYTES", 1)  # a chunk an episode: memory holds one
    one_each = list(source)
    _whole_episodes(one_each)
    assert [c.episodes.num_rows for c in one_each] == [1] * chunks[0].episodes.num_rows
    monkeypatch.undo()
    steps, episodes = source.read()
    assert not (tmp_path / "s").exists()

    report = import_rlds(RLDS / name, tmp_path / "s", run_id="r", progress=False)
    store = rlarrow.Store.open(tmp_path / "s")
    assert (report.episodes, report.steps) == (episodes.num_rows, steps.num_rows)
    _same_columns(_sorted(store.read("steps")), _sorted(steps))
    _same_columns(store.read("episodes").sort_by("episode_id"), episodes.sort_by("episode_id"))
    # RLDS's last step: no action, reward or discount (core.alignment.last_null)
    last = steps.filter(pa.compute.equal(steps["is_last"], True))
    assert last.num_rows == sum(1 for n in episodes["num_steps"].to_pylist() if n)  # (labels: one of none)
    assert last["reward"].null_count == last["action"].null_count == last.num_rows


def test_read_rlds_reads_into_polars_and_duckdb():
    import duckdb

    from rlarrow.io.rlds import read_rlds

    frame = pl.from_arrow(read_rlds(RLDS / "catch").steps())
    assert isinstance(frame, pl.DataFrame)
    lengths = read_rlds(RLDS / "catch").read()[1]["num_steps"].to_pylist()
    assert len(lengths) == 6
    assert frame.group_by("episode_id").len().sort("episode_id")["len"].to_list() == lengths
    assert frame.filter(pl.col("is_last"))["reward"].null_count() == 6
    reader = read_rlds(RLDS / "catch").steps()  # noqa: F841 (DuckDB finds it by name)
    total = duckdb.sql("SELECT count(*) FROM reader WHERE is_last").fetchall()
    assert total == [(6,)]


def test_a_source_pickles_by_reading_again_and_options_are_checked():
    from rlarrow.io.rlds import RldsOptions, read_rlds

    source = read_rlds(RLDS / "robot", splits=["val"], images="encoded", run_id="r")
    again = pickle.loads(pickle.dumps(source))
    assert again.run_id == "r" and again.run.metadata["images"] == "encoded"
    a, b = source.read()[0], again.read()[0]
    assert a.equals(b) and pa.types.is_binary(a.schema.field("observation").type.field("image").type)
    assert {m["rlds"]["split"] for m in map(json.loads, source.read()[1]["metadata"].to_pylist())} == {"val"}
    with pytest.raises(ArgumentError, match="images='png'"):
        RldsOptions(images="png")
    with pytest.raises(ArgumentError, match="not both"):
        read_rlds(RLDS / "robot", options=RldsOptions(), images="encoded")
    assert RldsOptions(splits="train").splits == ("train",)  # a bare string is one split


def test_write_rlds_writes_a_minari_dataset_that_reads_back_value_for_value(tmp_path):
    from rlarrow.io.minari import read_minari
    from rlarrow.io.rlds import read_rlds, write_rlds

    out = write_rlds(read_minari(MINARI), tmp_path / "rlds" / "1.0.0", episodes_per_shard=4)
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["splits"][0]["shardLengths"] == ["4", "4", "2"]
    assert sorted(p.name for p in out.glob("*.tfrecord-*"))[-1].endswith("-00002-of-00003")
    want_steps, want_episodes = read_minari(MINARI).read()
    got_steps, got_episodes = read_rlds(out).read()
    want_steps, got_steps = _sorted(want_steps), _sorted(got_steps)
    assert got_steps.num_rows == want_steps.num_rows == 266
    for name in ("episode_id", "step", "is_first", "is_last", "is_terminal", "reward"):
        assert got_steps[name].to_pylist() == want_steps[name].to_pylist(), name
    for name in ("observation", "action"):
        want = to_numpy(want_steps[name].combine_chunks(), fill_value=0)
        got = to_numpy(got_steps[name].combine_chunks(), fill_value=0)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
        assert got_steps[name].null_count == want_steps[name].null_count, name
    # Minari has no discount: dm_env's, 1 and 0 into a terminal state, null on the last step
    discount = got_steps["discount"].to_pylist()
    flags = zip(got_steps["is_last"].to_pylist(), discount, strict=True)
    assert all((d is None) == last for last, d in flags)
    keep = ["episode_id", "num_steps", "return", "terminated", "truncated", "partial_end"]
    assert got_episodes.select(keep).sort_by("episode_id").to_pylist() == \
        want_episodes.select(keep).sort_by("episode_id").to_pylist()


@pytest.mark.parametrize("name", ["robot", "catch"])
def test_rlds_to_rlds_without_a_store_keeps_every_value(tmp_path, name):
    from rlarrow.io.rlds import read_rlds, write_rlds

    out = write_rlds(read_rlds(RLDS / name, images="encoded"), tmp_path / name)
    a, ea = read_rlds(RLDS / name, images="encoded").read()
    b, eb = read_rlds(out, images="encoded").read()
    _same_columns(_sorted(a), _sorted(b), skip=("run_id",))
    for x, y in zip(ea["metadata"].to_pylist(), eb["metadata"].to_pylist(), strict=True):
        x, y = json.loads(x), json.loads(y)
        x["rlds"].pop("shard"), y["rlds"].pop("shard")
        assert x == y


def test_a_dataset_damaged_in_its_last_episode_leaves_the_store_at_its_version(tmp_path):
    from rlarrow.io.rlds import import_rlds

    src = tmp_path / "catch"
    shutil.copytree(RLDS / "catch", src)
    store = rlarrow.Store.create(tmp_path / "s")
    store.add_run(source="user", run_id="before")
    before = rlarrow.Store.open(tmp_path / "s").version
    shard = src / "catch_example-train.tfrecord-00002"  # the last shard; its last record's payload
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="00002"):
        import_rlds(src, tmp_path / "s", run_id="new", progress=False)
    after = rlarrow.Store.open(tmp_path / "s")
    assert after.version == before
    assert after.runs()["run_id"].to_pylist() == ["before"]
    assert after.row_count("steps") == after.row_count("episodes") == 0
