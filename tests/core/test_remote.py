"""rlarrow.core.remote: a store on any pyarrow filesystem, pushed there and read back (file:// URIs).

The same against a real S3 server: ``test_remote_s3.py`` (and the ``s3`` variants here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import duckdb
import numpy as np
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from conftest import episode_columns, populate

import rlarrow
from rlarrow.core.errors import CorruptFileError, FormatVersionError, StoreError
from rlarrow.core.remote import RemoteStore, push
from rlarrow.core.store import MANIFEST_NAME


def keyed(t):
    return t.sort_by([("run_id", "ascending"), ("episode_id", "ascending"), ("step", "ascending")])


def test_pushed_store_reads_back_identically_through_a_uri(populated, tmp_path):
    uri = f"file://{tmp_path}/bucket/runs.rlarrow"
    copied = push(populated, uri, progress=False)
    assert len(copied) == sum(len(populated.files(t)) for t in populated.tables())
    remote = RemoteStore(uri)
    for table in populated.tables():
        assert remote.row_count(table) == populated.row_count(table)
        got, want = remote.read(table), populated.read(table)
        assert got.equals(want), table
        assert got.schema.metadata == want.schema.metadata
    assert remote.schema("steps").equals(populated.schema("steps"))
    # the filter and projection of Store.read
    f, cols = pc.field("step") >= 3, ["episode_id", "step"]
    assert remote.read("steps", cols, f).equals(populated.read("steps", cols, f))
    # DuckDB scans the remote table's pyarrow dataset
    steps = remote.dataset("steps")  # noqa: F841 - DuckDB finds it by name
    n = duckdb.sql("select count(*) from steps where is_last").fetchall()[0][0]
    assert n == 3


def test_a_file_uri_copy_is_a_whole_local_store(populated, tmp_path):
    push(populated, f"file://{tmp_path}/copy", progress=False)
    with rlarrow.Store.open(tmp_path / "copy") as copy:
        assert copy.read("scalars").equals(populated.read("scalars"))
        copy.append("steps", episode_columns("x", 0, 2))  # writable: the lock file came along
        assert copy.row_count("steps") == populated.row_count("steps") + 3


def test_push_again_copies_only_new_files_and_the_manifest_moves_last(populated, tmp_path):
    dest = tmp_path / "bucket"
    push(populated, f"file://{dest}", progress=False)
    before = RemoteStore(f"file://{dest}")
    populated.append("steps", episode_columns("late", 0, 4))
    copied = push(populated, f"file://{dest}", progress=False)
    assert sorted(c.split("/")[0] for c in copied) == ["stats", "steps"]  # the rows, and their statistics
    after = RemoteStore(f"file://{dest}")
    assert after.row_count("steps") == before.row_count("steps") + 5
    assert keyed(after.read("steps")).equals(keyed(populated.read("steps")))
    # a reader that opened the old manifest still reads its files (nothing was deleted)
    assert before.read("steps").num_rows == before.row_count("steps")


def test_prune_deletes_files_a_compaction_replaced(store, tmp_path):
    for e in range(4):
        store.append("steps", episode_columns("r", e, 3))
    dest = f"file://{tmp_path}/b"
    push(store, dest, progress=False)
    store.compact("steps")
    push(store, dest, prune=True, progress=False)
    remote = RemoteStore(dest)
    on_disk = sorted(p.name for p in (tmp_path / "b" / "steps").glob("*.parquet"))
    assert on_disk == sorted(f.rsplit("/", 1)[1] for f in remote.files("steps"))
    assert len(on_disk) == 1
    assert keyed(remote.read("steps")).equals(keyed(store.read("steps")))


def test_remote_store_on_an_explicit_filesystem(populated, tmp_path):
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    push(populated, "mirror/runs", filesystem=fs, progress=False)
    remote = RemoteStore("mirror/runs", filesystem=fs)
    assert remote.read("memory").equals(populated.read("memory"))


@pytest.mark.parametrize("where", ["file", "s3"])
def test_streaming_dataset_reads_a_remote_store(tmp_path, where, request):
    """The same batches from a local store and its copy: at a file:// URI and on a real S3 server (``s3``)."""
    torch_mod = pytest.importorskip("rlarrow.train.torch", reason="the torch extra is not installed")
    uri = f"file://{tmp_path}/b" if where == "file" else f"{request.getfixturevalue('s3').prefix}/b"
    st = rlarrow.Store.create(tmp_path / "s")
    for e in range(6):
        st.append("steps", episode_columns("r", e, 4 + e))
    push(st, uri, progress=False)
    local = torch_mod.StreamingDataset(st, "transitions", batch_size=7, shuffle=False)
    remote = torch_mod.StreamingDataset(RemoteStore(uri), "transitions", batch_size=7, shuffle=False)
    by_uri = torch_mod.StreamingDataset(uri, "transitions", batch_size=7, shuffle=False)  # the URI itself
    assert by_uri.version is None  # (a remote store's: see StreamingDataset.version)
    rows = 0
    for a, b, c in zip(local, remote, by_uri, strict=True):
        assert a.keys() == b.keys() == c.keys()
        for k in a:
            pairs = ([(a[k][kk], b[k][kk], c[k][kk]) for kk in a[k]] if isinstance(a[k], dict)
                     else [(a[k], b[k], c[k])])
            for x, y, z in pairs:
                assert x.dtype == y.dtype == z.dtype, k
                assert np.array_equal(x.numpy(), y.numpy()) and np.array_equal(x.numpy(), z.numpy()), k
        rows += len(a["reward"])
    assert rows == sum(4 + e for e in range(6))
    # an earlier version of the pushed store, from its Delta logs: as the local store had it
    early = torch_mod.StreamingDataset(uri, "transitions", batch_size=100, shuffle=False, version=3)
    want = torch_mod.StreamingDataset(st, "transitions", batch_size=100, shuffle=False, version=3)
    [a], [b] = list(early), list(want)
    assert np.array_equal(a["reward"].numpy(), b["reward"].numpy()) and len(a["reward"]) == 4 + 5 + 6


def test_missing_and_damaged_remote_stores_are_named(tmp_path, populated):
    with pytest.raises(StoreError, match="no rlarrow store here"):
        RemoteStore(f"file://{tmp_path}/nothing")
    push(populated, f"file://{tmp_path}/b", progress=False)
    manifest = tmp_path / "b" / MANIFEST_NAME
    good = manifest.read_bytes()
    manifest.write_bytes(good[:40])
    with pytest.raises(CorruptFileError, match=MANIFEST_NAME):
        RemoteStore(f"file://{tmp_path}/b")
    data = json.loads(good)
    data["format_version"] = "99.0"
    manifest.write_text(json.dumps(data))
    with pytest.raises(FormatVersionError, match="upgrade"):
        RemoteStore(f"file://{tmp_path}/b")
    manifest.write_bytes(good)
    victim = RemoteStore(f"file://{tmp_path}/b").files("steps")[0]
    pafs.LocalFileSystem().delete_file(victim)
    with pytest.raises(CorruptFileError, match="push the store again"):
        RemoteStore(f"file://{tmp_path}/b").read("steps")


def test_push_leaves_the_source_untouched(populated, tmp_path):
    before = {t: populated.read(t) for t in populated.tables()}
    populate(populated)
    push(populated, f"file://{tmp_path}/b", progress=False)
    for t, table in before.items():
        assert populated.read(t).slice(0, table.num_rows).equals(table)


def test_a_pushed_store_is_a_delta_table_too(store, tmp_path):
    """push copies each table's Delta log after its files: Delta engines read the copy."""
    deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the copy")
    for e in range(3):
        store.append("steps", episode_columns("r", e, 3))
    dest = tmp_path / "b"
    push(store, f"file://{dest}", progress=False)
    copy = deltalake.DeltaTable(str(dest / "steps"))
    assert copy.version() == deltalake.DeltaTable(str(store.path / "steps")).version()
    assert copy.to_pyarrow_table().num_rows == store.row_count("steps")
    store.append("steps", episode_columns("r", 3, 3))
    push(store, f"file://{dest}", progress=False)  # the new commit's log file follows
    assert deltalake.DeltaTable(str(dest / "steps")).to_pyarrow_table().num_rows == store.row_count("steps")
    with rlarrow.Store.open(dest, version=store.version) as at:
        assert at.row_count("steps") == store.row_count("steps")


_APPENDER = """
import os, sys, rlarrow
path, stop = sys.argv[1], sys.argv[2]
store = rlarrow.Store.open(path)
i = 0
while not os.path.exists(stop) and i < 3000:
    store.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [i],
                             "value": [float(i)]})
    i += 1
"""


def test_a_push_while_training_appends_copies_no_commit_newer_than_its_manifest(tmp_path):
    """Delta commits written after push read the manifest are not copied: the copy's log is not ahead."""
    deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the copy")
    path, stop = tmp_path / "s", tmp_path / "stop"
    rlarrow.Store.create(path).append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
                                                  "step": [-1], "value": [0.0]})
    writer = subprocess.Popen([sys.executable, "-c", _APPENDER, os.fspath(path), os.fspath(stop)],
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                              stderr=subprocess.PIPE)
    dests = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (len(dests) < 8 or rlarrow.Store.open(path).version < 10):
            dests.append(tmp_path / f"copy{len(dests)}")
            push(path, f"file://{dests[-1]}", progress=False)
    finally:
        stop.touch()
        _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err.decode()
    assert rlarrow.Store.open(path).version >= 10, "the appender made too few versions while pushing"
    at_manifest = 0
    for dest in dests:
        version = json.loads((dest / MANIFEST_NAME).read_text())["version"]
        log = sorted((dest / "scalars" / "_delta_log").glob("*.json"))
        last = json.loads(log[-1].read_text().splitlines()[0])["commitInfo"]["rlarrow"]["storeVersion"]
        assert last <= version, f"{dest}: the log holds store version {last}, after its manifest's {version}"
        at_manifest += last == version
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a log ahead of the manifest warns on open)
            copy = rlarrow.Store.open(dest)
            assert not copy.repair().problems
            rows = copy.row_count("scalars")
            # deltalake reads the version the copy's log ends at: the store's rows at that version
            table = deltalake.DeltaTable(os.fspath(dest / "scalars"))
            assert table.version() == len(log) - 1
            with rlarrow.Store.open(dest, version=last) as then:
                assert table.to_pyarrow_table().num_rows == then.row_count("scalars")
            copy.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss", "step": [10**6],
                                    "value": [1.0]})  # (a writer of the copy commits to its log)
            assert copy.row_count("scalars") == rows + 1
        assert deltalake.DeltaTable(os.fspath(dest / "scalars")).to_pyarrow_table().num_rows == rows + 1
    assert at_manifest, "no copy's log reached its manifest's version"


def _memory_rows(run, states):
    n = len(states)
    return {"run_id": run, "snapshot_id": 0, "memory_index": np.arange(n), "env_index": 0, "memory_size": n,
            "num_envs": 1, "states": states, "values": np.arange(n, dtype="f4").reshape(n, 1)}


@pytest.fixture
def two_layouts_pushed(tmp_path):
    """A local store whose ``memory`` has two layouts (states of 2 and of 3 numbers), and its push."""
    st = rlarrow.Store.create(tmp_path / "s")
    st.append("memory", _memory_rows("a", np.arange(8, dtype="f4").reshape(4, 2)))
    st.append("memory", _memory_rows("b", np.arange(9, dtype="f4").reshape(3, 3)))
    push(st, f"file://{tmp_path}/bucket", progress=False)
    return st, RemoteStore(f"file://{tmp_path}/bucket")


def test_a_local_and_a_pushed_store_are_one_store_reader(two_layouts_pushed):
    import inspect

    from rlarrow.core.store import StoreReader, layout_number

    local, remote = two_layouts_pushed
    assert isinstance(local, StoreReader) and isinstance(remote, StoreReader)
    assert not isinstance(object(), StoreReader)
    # every method of the protocol takes its parameters on both, by the protocol's names and kinds
    for name, member in vars(StoreReader).items():
        if name.startswith("_") or isinstance(member, property):
            continue
        wanted = inspect.signature(member).parameters
        for cls in (rlarrow.Store, RemoteStore):
            got = inspect.signature(getattr(cls, name)).parameters
            assert [(p, wanted[p].kind) for p in wanted] == [(p, got[p].kind) for p in wanted], (cls, name)
    assert local.filesystem is None and isinstance(remote.filesystem, pafs.LocalFileSystem)
    assert remote.version == local.version > 0
    assert remote.tables() == local.tables()  # (memory.2 is memory's)
    assert set(remote.manifest()["tables"]) == set(local.manifest()["tables"])
    remote.manifest()["tables"].clear()  # a copy
    assert remote.layout_dirs("memory") == local.layout_dirs("memory") == ["memory", "memory.2"]
    assert remote.layout_dirs("memory", 2) == ["memory.2"]
    for d in remote.layout_dirs("memory"):
        n = layout_number(d)
        assert [os.path.basename(f) for f in remote.files("memory", layout=n)] == \
            [f.name for f in local.files("memory", layout=n)]
        assert remote.read("memory", layout=n).equals(local.read("memory", layout=n))
    with pytest.raises(StoreError, match="no layout 3"):
        remote.layout_dirs("memory", 3)


def test_samples_of_a_pushed_store_are_the_local_ones_one_layout_at_a_time(two_layouts_pushed):
    from rlarrow.train.samples import SampleSource

    local, remote = two_layouts_pushed
    with pytest.raises(StoreError, match=r"has layouts \[1, 2\] here.*layout=N"):
        SampleSource.from_store(remote, "memory", columns=["states"])
    for layout, width in ((1, 2), (2, 3)):
        here = SampleSource.from_store(local, "memory", columns=["states", "values"], layout=layout)
        there = SampleSource.from_store(remote, "memory", columns=["states", "values"], layout=layout)
        assert here.version == local.version and there.version is None  # (a remote store's: not read again)
        assert here.lease is not None and there.lease is None
        assert there.filesystem is remote.filesystem and here.filesystem is None
        opened: dict = {}
        try:
            got = [there.read(u, opened) for u in there.units]
            want = [here.read(u, opened) for u in here.units]
        finally:
            for f in opened.values():
                f.close()
        assert len(got) == len(want) == 1
        assert got[0]["states"].shape[1] == width and got[0]["states"].dtype == np.float32
        for k in want[0]:
            assert np.array_equal(got[0][k], want[0][k]), k
