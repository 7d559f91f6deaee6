"""rlarrow.train.ray on a real local Ray cluster (ray.init(num_cpus=2)): reads, samples, writes, convert."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import episode_columns, run_python_blocks

import rlarrow
from rlarrow.core.errors import SchemaMismatchError
from rlarrow.core.tensors import tensor_type, to_numpy

ray = pytest.importorskip("ray", reason="Ray Data is the optional extra 'ray': pip install 'rlarrow[ray]'")
torch = pytest.importorskip("torch",
                            reason="the sample tests compare with rlarrow.train.torch (the torch extra)")
import rlarrow.train.ray as rray  # noqa: E402
from rlarrow.train.torch import StreamingDataset  # noqa: E402

LENGTHS = [4 + (e * 5) % 11 for e in range(24)]
ORDER = [("run_id", "ascending"), ("episode_id", "ascending"), ("step", "ascending")]


@pytest.fixture(scope="module")
def cluster(request):
    """A local Ray cluster whose workers have the tests' S3 server's AWS variables (as a cluster's nodes
    are given a bucket's): Ray's workers read ``s3://`` with their own credentials."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        env = request.getfixturevalue("s3_server").env
    except pytest.skip.Exception:  # (no S3 server here: the s3 variants skip, the rest run)
        env = {}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False,
             object_store_memory=256 << 20, runtime_env={"env_vars": env})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Steps in small row groups over three commits (episodes straddle row groups), 84x84 frames."""
    path = tmp_path_factory.mktemp("ray") / "s.rlarrow"
    st = rlarrow.Store.create(path)
    st.declare("steps", {"observation": pa.struct([("position", tensor_type("float32", (3,))),
                                                   ("grid", tensor_type("uint8", (4, 5)))]),
                         "action": tensor_type("int64", (2,))})
    for part in range(3):
        with st.writer("steps", row_group_bytes=4000) as w:
            for e in range(part * 8, (part + 1) * 8):
                w.write(episode_columns("r", e, LENGTHS[e]))
    (path / "steps" / "stray.parquet").write_bytes((path / "steps" / st.files("steps")[0].name).read_bytes())
    return st


def test_read_gives_the_table_as_stored_over_committed_files_only(cluster, store):
    ds = rray.read(store, "steps")
    got = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    want = store.read("steps")
    assert got.num_rows == want.num_rows  # not the stray file in the table's directory
    assert got.sort_by(ORDER).equals(want.sort_by(ORDER))
    assert got.schema.metadata == want.schema.metadata
    assert ds.schema().base_schema.field("action").type == want.schema.field("action").type


def test_read_projects_and_filters_like_the_store(cluster, store):
    want = store.read("steps", ["episode_id", "step", "reward"], pc.field("reward") > 0.5)
    for flt in (pc.field("reward") > 0.5, "reward > 0.5"):
        ds = rray.read(store.path, "steps", columns=["episode_id", "step", "reward"], filter=flt)
        got = pa.concat_tables(ray.get(ds.to_arrow_refs()))
        assert got.column_names == ["episode_id", "step", "reward"]
        assert got.sort_by([("episode_id", "ascending"), ("step", "ascending")]).equals(
            want.sort_by([("episode_id", "ascending"), ("step", "ascending")]))
    with pytest.raises(KeyError, match="no column"):
        rray.read(store, "steps", columns=["nope"])


def _windows(batches):
    """(episode, first step) -> the window's observation grid, from flat or nested batches."""
    out = {}
    for b in batches:
        grid = b["observation.grid"] if "observation.grid" in b else b["observation"]["grid"]
        for e, s, g in zip(np.asarray(b["episode_id"])[:, 0], np.asarray(b["step"])[:, 0], np.asarray(grid),
                           strict=True):
            assert (int(e), int(s)) not in out
            out[(int(e), int(s))] = g
    return out


def test_sequence_windows_match_the_torch_dataset(cluster, store):
    cols = ["episode_id", "step", "observation"]
    ray_ds = rray.read_samples(store, "steps", columns=cols, sequence_length=5, shuffle=True, seed=3)
    got = _windows(ray_ds.iter_batches(batch_size=64, batch_format="numpy"))
    want = _windows(StreamingDataset(store, "steps", columns=cols, sequence_length=5, batch_size=64))
    assert got.keys() == want.keys()
    assert len(got) == sum(n + 1 - 4 for n in LENGTHS)  # every window of 5 of every episode, once
    for k in want:
        assert np.array_equal(got[k], want[k])
    first = next(iter(ray_ds.iter_torch_batches(batch_size=8)))
    assert first["observation.grid"].shape == (8, 5, 4, 5) and first["observation.grid"].dtype == torch.uint8


def test_transitions_match_the_torch_dataset(cluster, store):
    got = ray.data.Dataset.take_batch(rray.read_samples(store, "transitions"), batch_size=10_000,
                                      batch_format="numpy")
    want = next(iter(StreamingDataset(store, "transitions", batch_size=10_000, shuffle=False)))
    assert len(got["done"]) == sum(LENGTHS)
    key = np.lexsort((got["reward"], got["action"][:, 0], got["observation.position"][:, 0]))
    wkey = np.lexsort((want["reward"].numpy(), want["action"][:, 0].numpy(),
                       want["observation"]["position"][:, 0].numpy()))
    assert np.array_equal(got["next_observation.grid"][key], want["next_observation"]["grid"].numpy()[wkey])
    assert np.array_equal(got["done"][key], want["done"].numpy()[wkey])
    assert got["done"].sum() == len(LENGTHS)


@ray.remote(num_cpus=0)
class Trainer:
    def consume(self, shard):
        seen = []
        for b in shard.iter_torch_batches(batch_size=16):
            seen += list(zip(b["episode_id"].tolist(), b["step"].tolist(), strict=True))
        return seen


def test_every_row_exactly_once_across_two_consumers(cluster, store):
    ds = rray.read_samples(store, "steps", columns=["episode_id", "step", "reward"])
    shards = ds.streaming_split(2, equal=False)
    trainers = [Trainer.remote() for _ in shards]
    seen = ray.get([t.consume.remote(s) for t, s in zip(trainers, shards, strict=True)])
    t = store.read("steps", ["episode_id", "step"])
    want = Counter(zip(t["episode_id"].to_pylist(), t["step"].to_pylist(), strict=True))
    assert Counter(seen[0] + seen[1]) == want
    assert seen[0] and seen[1]  # both trainers got a share


def test_write_round_trips_a_store_in_one_commit(cluster, store, tmp_path):
    info = rray.write(rray.read(store, "steps").repartition(4), tmp_path / "copy", "steps")
    assert info is not None and len(info.files) == 4 and info.rows == store.row_count("steps")
    copy = rlarrow.Store.open(tmp_path / "copy")
    assert copy.read("steps").sort_by(ORDER).equals(store.read("steps").sort_by(ORDER))
    assert len(copy.files("steps")) == 4
    assert rray.write(rray.read(store, "steps", filter="step < 0"), copy, "steps") is None


def test_a_bad_block_commits_nothing_and_leaves_no_files(cluster, store, tmp_path):
    st = rlarrow.Store.create(tmp_path / "w")
    st.append("steps", episode_columns("keep", 0, 3))
    before = st.read("steps")

    def spoil(batch):
        if 7 in batch["episode_id"].to_pylist():
            return batch.set_column(batch.schema.get_field_index("is_first"), "is_first",
                                    pa.nulls(batch.num_rows, pa.bool_()))
        return batch

    bad = rray.read(store, "steps").repartition(3).map_batches(spoil, batch_format="pyarrow")
    with pytest.raises(SchemaMismatchError, match="is_first"):  # Ray's task error is one too
        rray.write(bad, st, "steps")
    assert st.read("steps").equals(before)
    assert not [p for p in (st.path / "steps").iterdir() if p.name.startswith(".tmp-")]


def test_write_with_layout_stores_binary_tensors(cluster, tmp_path):
    src = rlarrow.Store.create(tmp_path / "src")
    frames = np.random.default_rng(0).integers(0, 255, (12, 16, 16), dtype=np.uint8)
    src.append("memory", {"run_id": "r", "snapshot_id": 0, "snapshot_name": "m",
                          "memory_index": np.arange(12), "env_index": 0, "memory_size": 12, "num_envs": 1,
                          "is_full": True,
                          "write_pointer": 0, "env_pointer": 0, "filled": True, "frames": frames})
    rray.write(rray.read(src, "memory"), tmp_path / "dst", "memory", layout="binary")
    dst = rlarrow.Store.open(tmp_path / "dst")
    assert isinstance(dst.schema("memory").field("frames").type, rlarrow.core.tensors.TensorType)
    got = rlarrow.core.tensors.to_numpy(dst.read("memory").sort_by("memory_index").column("frames"))
    assert np.array_equal(got, frames)


def test_parallel_convert_matches_the_sequential_one(cluster, tmp_path):
    from rlarrow.io.memory.importer import import_memory
    from rlarrow.io.memory.npz import write_npz
    from rlarrow.io.memory.pt import write_pt

    rng = np.random.default_rng(1)
    for i in range(5):
        data = {"states": rng.standard_normal((20, 2, 3)).astype(np.float32),
                "actions": rng.integers(0, 9, (20, 2, 1)).astype(np.int64),
                "terminated": rng.random((20, 2, 1)) < 0.1}
        data["states"][15:] = np.nan  # an unfilled memory
        (write_pt if i % 2 else write_npz)(data, tmp_path / "memories" / f"m{i}.{'pt' if i % 2 else 'npz'}")
    info = rray.import_memory([tmp_path / "memories"], tmp_path / "par", run_id="r")
    assert info is not None and info.rows == 5 * 40
    import_memory([tmp_path / "memories"], tmp_path / "seq", run_id="r", progress=False)
    par, seq = rlarrow.Store.open(tmp_path / "par"), rlarrow.Store.open(tmp_path / "seq")
    assert par.schema("memory").equals(seq.schema("memory"))
    order = [("snapshot_id", "ascending"), ("memory_index", "ascending"), ("env_index", "ascending")]
    a, b = par.read("memory").sort_by(order), seq.read("memory").sort_by(order)
    assert a.equals(b)


def test_the_scale_doc_page_runs(cluster, s3, tmp_path, monkeypatch, capsys):
    """Every Python block of docs/scale.md; its S3 block on the test's own S3 server (the ``s3`` fixture)."""
    monkeypatch.chdir(tmp_path)
    assert run_python_blocks("docs/scale.md") >= 6
    out = capsys.readouterr().out
    for expected in ("[29.0, 28.0, 27.0]", "[(20,)]", "\n410 True\n", "\n100\n", "(32, 8, 4)",
                     "'next_observation'", "\n800\n", "\n255\n", "\n410 410 410 410\n"):
        assert expected in out


def test_ray_reads_the_delta_log_and_versions_as_rlarrow_does(cluster, store):
    """ray.data.read_delta (delta-rs underneath) and rlarrow's own Ray reader, at a version."""
    pytest.importorskip("deltalake", reason="ray.data.read_delta needs deltalake (the dev extra)")
    at = rlarrow.Store.open(store.path, version=2)  # the first of the three commits (1: the declare)
    delta_version = at.delta_versions()["steps"]
    theirs = ray.data.read_delta(os.fspath(store.path / "steps"), version=delta_version)
    ours = rray.read(store.path, "steps", columns=["run_id", "episode_id", "step"], version=2)
    want = at.read("steps", columns=["run_id", "episode_id", "step"]).sort_by(ORDER)
    assert theirs.count() == want.num_rows == sum(LENGTHS[e] + 1 for e in range(8))
    got = pa.concat_tables(ray.get(ours.to_arrow_refs())).sort_by(ORDER)
    assert got.equals(want)
    latest = ray.data.read_delta(os.fspath(store.path / "steps"))
    assert latest.count() == store.row_count("steps")  # not the stray file: the log lists files
    assert ray.data.read_delta(os.fspath(store.path / "steps"), version=0).count() == 0  # (declared)
    assert rray.read(store.path, "steps", version=1).count() == 0  # (the declare: no rows yet)


@pytest.mark.slow  # (a Ray job per version, its workers reading the bucket: ~8 s here)
def test_ray_read_delta_reads_the_store_pushed_to_s3_at_each_version(cluster, store, s3):
    """Ray Data's read_delta on the bucket, each Delta version, value for value as rlarrow at that version."""
    pytest.importorskip("deltalake", reason="ray.data.read_delta needs deltalake (the dev extra)")
    from rlarrow.core.remote import push

    uri = f"{s3.prefix}/delta.rlarrow"
    push(store, uri, progress=False)
    cols = ["run_id", "episode_id", "step", "action", "reward", "observation"]
    seen = []
    for version in range(store.version + 1):
        at = rlarrow.Store.open(store.path, version=version)
        delta_version = at.delta_versions().get("steps")
        if delta_version is None or delta_version in seen:
            continue
        seen.append(delta_version)
        theirs = ray.data.read_delta(f"{uri}/steps", version=delta_version, columns=cols,
                                     storage_options=s3.storage_options)
        got = pa.concat_tables(ray.get(theirs.to_arrow_refs())) if delta_version else None
        want = at.read("steps", columns=cols).sort_by(ORDER)
        if got is None:  # the declared table: no file, no rows
            assert theirs.count() == 0 == want.num_rows
            continue
        assert got.sort_by(ORDER).to_pylist() == want.to_pylist(), delta_version
    assert seen == [0, 1, 2, 3]
    latest = pa.concat_tables(ray.get(rray.read(uri, "steps", columns=cols).to_arrow_refs()))
    assert latest.sort_by(ORDER).equals(store.read("steps", columns=cols).sort_by(ORDER))


def test_delta_steps_match_the_torch_dataset(cluster, store):
    """LeRobot-style offsets around every frame, padded at episode edges and null rows, in Ray as in torch."""
    cols = ["episode_id", "step", "observation", "reward"]
    deltas = {"observation.position": [-2, 0], "reward": [0, 1, 2, 3]}
    ray_ds = rray.read_samples(store, "steps", columns=cols, delta_steps=deltas, shuffle=True, seed=1)
    got = {}
    for b in ray_ds.iter_batches(batch_size=64, batch_format="numpy"):
        for r in range(len(b["step"])):
            got[int(b["episode_id"][r]), int(b["step"][r])] = (
                b["observation.position"][r], b["reward"][r], b["observation.position_is_pad"][r],
                b["reward_is_pad"][r])
    want = {}
    for b in StreamingDataset(store, "steps", columns=cols, delta_steps=deltas, batch_size=64):
        for r in range(len(b["step"])):
            want[int(b["episode_id"][r]), int(b["step"][r])] = (
                b["observation"]["position"][r].numpy(), b["reward"][r].numpy(),
                b["observation"]["position_is_pad"][r].numpy(), b["reward_is_pad"][r].numpy())
    assert got.keys() == want.keys() and len(got) == sum(LENGTHS)  # the frames (rows with an action)
    for k, w in want.items():
        for a, b in zip(got[k], w, strict=True):
            assert np.array_equal(a, b, equal_nan=True)
    assert any(w[3].any() for w in want.values()) and any(w[2].any() for w in want.values())


@pytest.mark.parametrize("where", ["file", pytest.param("s3", marks=pytest.mark.slow)])  # (25 s each here)
def test_a_pushed_store_reads_as_the_local_one_a_layout_at_a_time(cluster, tmp_path, where, request):
    """At a file:// URI and on a real S3 server (the ``s3`` fixture): Ray's workers read the bucket."""
    from rlarrow.core.errors import StoreError
    from rlarrow.core.remote import RemoteStore, push

    st = rlarrow.Store.create(tmp_path / "s")
    for run, width in (("a", 2), ("b", 3)):  # two layouts of memory: states of 2 and of 3 numbers
        st.append("memory", {"run_id": run, "snapshot_id": 0, "memory_index": np.arange(4), "env_index": 0,
                             "memory_size": 4, "num_envs": 1,
                             "states": np.arange(4 * width, dtype="f4").reshape(4, width)})
    uri = f"file://{tmp_path}/bucket" if where == "file" else f"{request.getfixturevalue('s3').prefix}/bucket"
    push(st, uri, progress=False)
    with pytest.raises(StoreError, match=r"has layouts \[1, 2\] here.*layout=N"):
        rray.read(uri, "memory")
    for layout in (1, 2):
        for remote in (uri, RemoteStore(uri)):
            got = pa.concat_tables(ray.get(rray.read(remote, "memory", layout=layout).to_arrow_refs()))
            assert got.equals(st.read("memory", layout=layout))
        samples = rray.read_samples(uri, "memory", columns=["states"], layout=layout).take_all()
        got_states = np.stack([s["states"] for s in samples])
        want_states = to_numpy(st.read("memory", layout=layout).column("states"))
        assert got_states.dtype == want_states.dtype == np.float32
        assert np.array_equal(got_states, want_states)


def _unit_runs(rows, unit_of):
    """The row groups ``rows`` (episode, step pairs, in the order read) came from, each once in a row."""
    out: list[int] = []
    for row in rows:
        if not out or out[-1] != unit_of[row]:
            out.append(unit_of[row])
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_shuffled_row_groups_come_in_the_order_the_torch_sampler_gives(cluster, store, seed):
    from rlarrow.core.errors import ArgumentError
    from rlarrow.train.samples import SampleSource
    from rlarrow.train.sampling import ShuffleSampler

    cols = ["episode_id", "step", "reward"]
    source = SampleSource.from_store(store, "steps", columns=cols)
    unit_of, files = {}, {}
    for i, unit in enumerate(source.units):  # which row group each step is in
        got = source.read_windows(unit, files)
        cols_ = got.gather(np.arange(len(got)))
        for e, s in zip(cols_["episode_id"].tolist(), cols_["step"].tolist(), strict=True):
            unit_of[(e, s)] = i
    for f in files.values():
        f.close()
    assert len(source.units) > 8
    torch_rows = [(int(b["episode_id"][0]), int(b["step"][0])) for b in StreamingDataset(
        store, "steps", columns=cols, batch_size=1, buffer_rows=1, shuffle=True, seed=seed)]
    ctx = ray.data.DataContext.get_current()
    kept, ctx.execution_options.preserve_order = ctx.execution_options.preserve_order, True
    try:
        by_flags = rray.read_samples(store, "steps", columns=cols, shuffle=True, seed=seed)
        by_sampler = rray.read_samples(store, "steps", columns=cols, sampler=ShuffleSampler(seed=seed))
        rows = [[(int(r["episode_id"]), int(r["step"])) for r in ds.iter_rows()]
                for ds in (by_flags, by_sampler)]
    finally:
        ctx.execution_options.preserve_order = kept
    want = _unit_runs(torch_rows, unit_of)
    assert sorted(want) == list(range(len(source.units))) and want != sorted(want)  # each once, shuffled
    assert _unit_runs(rows[0], unit_of) == want and _unit_runs(rows[1], unit_of) == want
    assert sorted(rows[0]) == sorted(torch_rows)  # the same samples, each once
    with pytest.raises(ArgumentError, match="not both"):
        rray.read_samples(store, "steps", shuffle=True, sampler=ShuffleSampler(seed=seed))
