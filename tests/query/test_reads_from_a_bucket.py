"""Reading a store on object storage by its URI: ``sql``, ``connect``, ``rlarrow sql``, ``scan``, ``Reader``.

The store is written locally (runs of two steps layouts, a binary-layout camera, episodes,
scalars, memories), pushed to the real S3 server the tests start (``tests/s3_server.py``),
and every query is asked of both: the bucket's answer must be the local store's, row for
row, views, per-layout views, decoded tensors and macros alike.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import populate

import rlarrow
from rlarrow.cli import cli
from rlarrow.core.errors import ArgumentError, CorruptFileError, NotFoundError, RLArrowWarning
from rlarrow.core.remote import RemoteStore, push
from rlarrow.core.tensors import TensorType

# (the combined views' note that the two layouts' observations and actions differ: asserted below)
pytestmark = pytest.mark.filterwarnings("ignore::rlarrow.core.errors.RLArrowWarning")

QUERIES = [
    "select * from runs order by run_id",
    "select * from episodes order by run_id, episode_id",
    "select run_id, episode_id, step, reward, is_last from steps order by all",
    "select * from steps_1 order by run_id, episode_id, step",
    "select * from steps_2_decoded order by run_id, episode_id, step",
    "select count(*), sum(reward) from transitions",
    "select * from transitions_2_decoded order by run_id, episode_id, step",
    "select * from episode_returns(0.99) order by all",
    "select * from scalars order by step",
    "select * from smoothed(3) order by all",
    "select * from memory_decoded order by snapshot_id, memory_index, env_index",
]


@pytest.fixture
def stores(tmp_path, s3):
    """A local store and its copy on the S3 server: (local path, URI)."""
    local = tmp_path / "runs.rlarrow"
    with rlarrow.Store.create(local) as st:
        populate(st)  # float32 (3,) observations, int actions, episodes, scalars, memories
        run = st.add_run(source="test", name="camera")
        frames = TensorType(np.uint8, (4, 4, 3))  # a camera in the binary layout: another layout
        n = 6
        pixels = np.random.default_rng(0).integers(0, 256, (n, 48), dtype=np.uint8)
        st.append("steps", {
            "run_id": run, "episode_id": 0, "step": np.arange(n), "env_index": 0,
            "observation": pa.ExtensionArray.from_storage(frames, pa.array(list(map(bytes, pixels)),
                                                                           pa.binary(48))),
            "action": [0.5, -1.0, 2.0, 0.25, np.nan, None], "reward": [1.0, 0.0, 2.0, -1.0, 0.5, None],
            "discount": [1.0] * 5 + [None], "is_first": [True] + [False] * 5,
            "is_last": [False] * 5 + [True], "is_terminal": [False] * 5 + [True]})
        assert len(st.layouts("steps")) == 2
    uri = f"{s3.prefix}/runs.rlarrow"
    push(local, uri, progress=False)
    return local, uri


def same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema.names == b.schema.names
    assert a.to_pylist() == b.to_pylist() or _nan_equal(a, b)


def _nan_equal(a: pa.Table, b: pa.Table) -> bool:
    """Equal but for NaN (NaN != NaN in Python lists)."""
    return repr(a.to_pylist()) == repr(b.to_pylist())


def test_every_query_reads_the_same_rows_from_the_bucket(stores):
    local, uri = stores
    for query in QUERIES:
        same(rlarrow.sql(uri, query), rlarrow.sql(local, query))
    # a RemoteStore as it is, and the Polars output
    remote = RemoteStore(uri)
    assert rlarrow.sql(remote, "select count(*) as n from steps").to_pylist() == [{"n": 24}]
    frame = rlarrow.sql(uri, "select * from episodes order by episode_id", output="polars")
    assert frame.height == 3


def test_connect_gives_the_views_and_macros_over_the_bucket(stores):
    local, uri = stores
    con = rlarrow.connect(uri, warn=False)
    here = rlarrow.connect(local, warn=False)
    for view in ("steps_2_decoded", "transitions", "memory_decoded", "stats"):
        q = f"select * from {view} order by all"
        assert repr(con.sql(q).fetchall()) == repr(here.sql(q).fetchall()), view
    # filters are pushed into the scan: a query of one episode reads its rows only
    assert con.sql("select count(*) from steps where episode_id = 1").fetchall() == [(6,)]
    con.close()
    here.close()


def test_the_cli_queries_a_bucket(stores):
    local, uri = stores
    result = CliRunner().invoke(cli, ["sql", uri, "select count(*) as n from transitions", "--format", "csv"])
    assert result.exit_code == 0, result.output
    want = rlarrow.sql(local, "select count(*) as n from transitions").column("n")[0].as_py()
    assert result.stdout.strip().splitlines()[-1] == str(want)


def test_earlier_versions_of_a_bucket_read_as_they_were(stores):
    """``version=`` on a URI: the store as it was, from the tables' Delta logs on the bucket."""
    local, uri = stores
    st = rlarrow.Store.open(local)
    pushed = st.version
    for step in (99, 100):
        st.append("scalars", {"run_id": "x", "scope": "train", "tag": "train/loss", "step": [step],
                              "value": [0.5]})
    unpushed = st.version  # (its two new files are merged by the compaction before any push)
    st.compact()  # (the files of `pushed` leave the local tables; the bucket keeps them)
    assert st.manifest()["tables"]["scalars"]["files"][0]["rows"] == 12
    st.append("scalars", {"run_id": "y", "scope": "train", "tag": "train/loss", "step": [7], "value": [0.25]})
    push(local, uri, progress=False)
    for version in (pushed, st.version):
        for query in ("select * from scalars order by all",
                      "select * from episode_returns(0.9) order by all"):
            same(rlarrow.sql(uri, query, version=version), rlarrow.sql(local, query, version=version))
        same(RemoteStore(uri, version=version).read("steps", layout=2),  # (NaN actions: compared by repr)
             rlarrow.Store.open(local, version=version).read("steps", layout=2))
    assert rlarrow.scan(uri, "scalars", version=pushed).collect().height == 10
    # a version whose files no push copied (compacted away before the second push): said so
    with pytest.raises(NotFoundError, match="never pushed"):
        RemoteStore(uri, version=unpushed)
    with pytest.raises(NotFoundError, match="no version"):
        RemoteStore(uri, version=st.version + 1)
    with pytest.raises(ArgumentError, match="RemoteStore"):
        rlarrow.sql(RemoteStore(uri), "select 1", version=0)


def test_a_damaged_page_on_the_bucket_is_an_error_not_values(stores, s3):
    import pyarrow.fs as pafs

    local, uri = stores
    remote = RemoteStore(uri)
    [path] = remote.files("episodes")
    fs = remote.filesystem
    with fs.open_input_file(path) as f:
        data = bytearray(f.read())
    # a flipped bit in the data of the first column chunk (after the 4-byte magic and a page header)
    data[40] ^= 0x01
    with fs.open_output_stream(path) as f:
        f.write(bytes(data))
    assert isinstance(fs, pafs.FileSystem)
    with pytest.raises(CorruptFileError, match=r"(?s)episodes/part-.*\.parquet.*CRC.*push the store again"):
        rlarrow.sql(uri, "select * from episodes")
    result = CliRunner().invoke(cli, ["sql", uri, "select * from episodes"])
    assert result.exit_code != 0 and "episodes/part-" in result.output and "push" in result.output
    # the other tables still read
    assert rlarrow.sql(uri, "select count(*) as n from scalars").to_pylist() == [{"n": 10}]


def test_scan_gives_the_local_frames_from_the_bucket(stores):
    import polars as pl

    local, uri = stores
    for layout in (1, 2):
        here = rlarrow.scan(local, "steps", layout=layout).collect()
        there = rlarrow.scan(uri, "steps", layout=layout).collect()
        assert there.schema == here.schema and there.equals(here), layout
    # the layouts together: the shared columns, the others left out with the local store's warning
    with pytest.warns(RLArrowWarning, match="leaves out the column"):
        there = rlarrow.scan(uri, "steps").collect()
    assert "observation" not in there.columns and there.height == 24
    # filters and projections reach the files
    loss = rlarrow.scan(uri, "scalars").filter(pl.col("step") >= 5).select("value").collect()
    assert loss["value"].to_list() == [1 / 6, 1 / 7, 1 / 8, 1 / 9, 1 / 10]


def test_reader_gives_the_local_episodes_from_the_bucket(stores):
    local, uri = stores
    runs = rlarrow.Store.open(local, readonly=True).runs()
    for run in runs.column("run_id").to_pylist():
        here, there = rlarrow.Reader(local, run_id=run), rlarrow.Reader(RemoteStore(uri), run_id=run)
        assert there.num_episodes == here.num_episodes and there.num_steps == here.num_steps
        for a, b in zip(here.steps, there.steps, strict=True):
            assert repr(a.timestep) == repr(b.timestep) and repr(a.action) == repr(b.action)
        here.close()
        there.close()


def test_statistics_of_a_bucket_are_the_local_ones(stores):
    """``stats`` and ``StreamingDataset(normalize=)`` on a URI merge the statistics stored there."""
    from rlarrow.query.dataset_stats import stats

    local, uri = stores
    for kwargs in ({"layout": 1}, {"layout": 2, "quantiles": False},
                   {"layout": 1, "where": "episode_id > 0"}):
        here, there = stats(local, **kwargs), stats(uri, **kwargs)
        assert sorted(here) == sorted(there) and here, kwargs
        for name in here:
            a, b = here[name], there[name]
            assert a.count == b.count and np.array_equal(a.mean, b.mean, equal_nan=True), (kwargs, name)
            assert np.array_equal(a.max, b.max, equal_nan=True), (kwargs, name)
    assert stats(uri, layout=1)["observation.position"].quantile(0.5) is not None


def test_a_stream_from_the_bucket_is_normalised_with_its_stored_statistics(stores):
    torch_mod = pytest.importorskip("rlarrow.train.torch", reason="needs torch (the torch extra)")
    local, uri = stores
    here = torch_mod.StreamingDataset(local, "steps", layout=1, batch_size=64, shuffle=False,
                                      columns=["observation", "reward"], normalize="mean_std")
    there = torch_mod.StreamingDataset(uri, "steps", layout=1, batch_size=64, shuffle=False,
                                       columns=["observation", "reward"], normalize="mean_std")
    [a], [b] = list(here), list(there)
    assert there.stats is not None and set(there.stats) == {"observation.position", "observation.grid"}
    position = b["observation"]["position"].double()  # normalised, not the identity: mean 0, std 1
    assert float(position.mean().abs()) < 1e-5 and abs(float(position.std(unbiased=False)) - 1) < 1e-5
    for key in ("observation", "reward"):
        x, y = a[key], b[key]
        pairs = [(x[k], y[k]) for k in x] if isinstance(x, dict) else [(x, y)]
        for u, v in pairs:
            assert np.array_equal(u.numpy(), v.numpy(), equal_nan=True), key


def test_info_of_a_bucket_says_what_the_local_info_says(stores):
    import json

    local, uri = stores
    here = json.loads(CliRunner().invoke(cli, ["info", str(local), "--json"]).stdout)
    result = CliRunner().invoke(cli, ["info", uri, "--json"])
    assert result.exit_code == 0, result.output
    there = json.loads(result.stdout)
    for key in ("format_version", "writer", "created_at", "version", "runs", "video_fields"):
        assert there[key] == here[key], key
    assert {n: (t["rows"], t["files"], t["bytes"]) for n, t in there["tables"].items()} == \
        {n: (t["rows"], t["files"], t["bytes"]) for n, t in here["tables"].items()}
    text = CliRunner().invoke(cli, ["info", uri]).stdout
    assert "listed (on object storage" in text and "steps.2" in text and "camera" in text
