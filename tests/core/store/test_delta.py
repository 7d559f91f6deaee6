"""Store versions: every commit is a Delta Lake transaction, and every reader reads any version.

Each table directory's ``_delta_log/`` is read back by the real ``deltalake`` (delta-rs)
and by Polars, at every version, and compared with what rlarrow reads at the same store
version.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import assert_delta_current, episode_columns

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core.errors import NotFoundError
from rlarrow.core.store.delta import LOG_DIR, DeltaLog, order_between

deltalake = pytest.importorskip("deltalake", reason="needs deltalake (the dev extra) to read the logs back")


def scalars(start: int, n: int = 5) -> dict:
    return {"run_id": "r", "scope": "train", "tag": "loss", "step": np.arange(start, start + n),
            "value": np.arange(start, start + n, dtype=np.float64) / 7}


@pytest.fixture
def history(tmp_path):
    """A store made by appends, a transaction over two tables, a new layout and a compaction."""
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    versions = {}
    for i in range(3):
        store.append("scalars", scalars(5 * i))
        versions[f"append{i}"] = store.version
    with store.transaction():
        store.append("steps", episode_columns("r", 0, 6))
        store.append("episodes", {"run_id": "r", "episode_id": [0], "num_steps": [7], "env_index": 0,
                                  "terminated": True, "truncated": False, "partial_start": False,
                                  "partial_end": False})
    versions["transaction"] = store.version
    store.append("steps", episode_columns("q", 0, 3, image=False))  # other tensor types: steps.2
    assert len(store.layouts("steps")) == 2
    versions["layout"] = store.version
    store.compact("scalars")
    versions["compact"] = store.version
    return store, versions


def test_each_change_is_one_store_version_and_one_delta_commit_per_table(history):
    store, v = history
    assert [v["append0"], v["append1"], v["append2"]] == [1, 2, 3]
    assert v["transaction"] == 4  # two tables, one store version
    assert v["compact"] == v["layout"] + 1
    items = store.history()
    assert [i["version"] for i in items] == sorted({i["version"] for i in items})
    by_version = {i["version"]: i for i in items}
    assert set(by_version[4]["tables"]) == {"steps", "episodes", "stats"}  # (with the steps' statistics)
    assert by_version[v["compact"]]["operation"] == "OPTIMIZE"
    assert by_version[v["compact"]]["tables"] == {"scalars": 3}
    assert_delta_current(store)


def test_deltalake_reads_every_version_as_rlarrow_does(history):
    store, v = history
    for version in range(store.version + 1):
        at = rlarrow.Store.open(store.path, version=version)
        for table, delta_version in at.delta_versions().items():
            base, _, n = table.partition(".")
            ours = at.read(base, layout=int(n or 1)) if base in ("steps", "memory") else at.read(table)
            if table == "scalars" and version < v["compact"]:
                # the files the compaction replaced left the table directory (so that a glob of it
                # is exact): a Delta engine reads scalars from the compaction on; rlarrow, which
                # finds them aside, every version (below)
                with pytest.raises(OSError, match="not found|No such file"):
                    deltalake.DeltaTable(os.fspath(store.path / table),
                                         version=delta_version).to_pyarrow_table()
                continue
            theirs = deltalake.DeltaTable(os.fspath(store.path / table),
                                          version=delta_version).to_pyarrow_table()
            assert theirs.num_rows == ours.num_rows, (version, table)
            if table == "scalars":  # flat columns: the same rows (Delta promises no file order)
                assert theirs.sort_by("step").select(["step", "value"]).equals(
                    ours.sort_by("step").select(["step", "value"]))
    # before the compaction, the three appends; after it, the same rows from one file
    before = rlarrow.Store.open(store.path, version=v["layout"])
    after = rlarrow.Store.open(store.path, version=v["compact"])
    assert len(before.files("scalars")) == 3 and len(after.files("scalars")) == 1
    assert before.read("scalars").equals(after.read("scalars"))
    assert rlarrow.Store.open(store.path, version=v["append1"]).read("scalars").column("step").to_pylist() \
        == list(range(10))


def test_tensor_types_survive_in_the_log_and_in_other_engines(history):
    store, _ = history
    meta = DeltaLog(store.path / "steps")
    meta.refresh()
    fields = {f["name"]: f for f in json.loads(meta.metadata["schemaString"])["fields"]}
    obs = {f["name"]: f for f in fields["observation"]["type"]["fields"]}
    # Delta has no fixed-size list: the nearest type, and the tensor's dtype and shape beside it
    assert obs["position"]["type"]["type"] == "array"
    assert json.loads(obs["position"]["metadata"]["rlarrow.tensor"])["shape"] == [3]
    # ... and the exact Arrow schema, which rlarrow restores when it reads a version
    at = rlarrow.Store.open(store.path, version=store.version)
    assert at.schema("steps", layout=1) == store.schema("steps", layout=1)
    # deltalake reads values equal (fixed-size lists as lists)
    dt = deltalake.DeltaTable(os.fspath(store.path / "steps")).to_pyarrow_table()
    ours = store.read("steps", layout=1)
    pos = pa.array(ours.column("observation").combine_chunks().field("position").to_pylist())
    assert dt.column("observation").combine_chunks().field("position").to_pylist() == pos.to_pylist()


def test_polars_scan_delta_reads_versions(history):
    pl = pytest.importorskip("polars")
    store, v = history
    delta_v = rlarrow.Store.open(store.path, version=v["compact"]).delta_versions()["scalars"]
    frame = pl.scan_delta(os.fspath(store.path / "scalars"), version=delta_v).collect()
    assert sorted(frame["step"].to_list()) == list(range(15))
    delta_v = rlarrow.Store.open(store.path, version=v["transaction"]).delta_versions()["steps"]
    frame = pl.scan_delta(os.fspath(store.path / "steps"), version=delta_v, use_pyarrow=True).collect()
    assert frame.height == 7
    # list-layout tensors: Polars' native reader compares the file's fixed-size Array with
    # the Delta schema's List and refuses; its pyarrow path reads them
    steps = pl.scan_delta(os.fspath(store.path / "steps"), use_pyarrow=True).collect()
    assert steps.height == store.row_count("steps", layout=1)


def test_every_reader_takes_version(history, tmp_path):
    store, v = history
    old = v["append1"]
    count = "select count(*) as n from scalars"
    assert rlarrow.sql(store.path, count, version=old).column("n").to_pylist() == [10]
    assert rlarrow.sql(store.path, "select count(*) as n from scalars").column("n").to_pylist() == [15]
    con = rlarrow.connect(store.path, version=old)
    assert con.sql("select max(step) from scalars").fetchall() == [(9,)]
    con.close()
    assert rlarrow.scan(store.path, "scalars", version=old).collect().height == 10
    assert rlarrow.scan(store, "scalars", version=old).collect().height == 10  # a Store given
    assert rlarrow.Store.open(store.path, version=v["append0"]).row_count("steps") == 0
    out = CliRunner().invoke(cli, ["sql", os.fspath(store.path), "select count(*) as n from scalars",
                                   "--version", str(old), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output.strip().splitlines()[0]) == {"n": 10}
    hist = CliRunner().invoke(cli, ["history", os.fspath(store.path)])
    assert hist.exit_code == 0 and "OPTIMIZE" in hist.output
    assert f"current version: {store.version}" in hist.output


def test_reader_and_streaming_dataset_read_a_version(history):
    store, v = history
    from rlarrow.query.reader import Reader

    assert Reader(store.path, run_id="r", version=v["transaction"]).num_episodes == 1
    with pytest.raises(rlarrow.StoreError):
        Reader(store.path, run_id="r", version=v["append2"])  # no steps yet then
    torch = pytest.importorskip("torch", reason="needs torch (the torch extra)")
    from rlarrow.train.torch import StreamingDataset

    ds = StreamingDataset(store.path, "steps", columns=["reward"], batch_size=4, shuffle=False,
                          layout=1, version=v["transaction"])
    assert ds.version == v["transaction"]
    assert sum(len(b["reward"]) for b in ds) == 7
    assert isinstance(next(iter(ds))["reward"], torch.Tensor)
    assert StreamingDataset(store.path, "steps", columns=["reward"], layout=1).version == store.version


def test_a_version_is_read_only_and_a_missing_one_says_which_exist(history):
    store, _ = history
    at = rlarrow.Store.open(store.path, version=1)
    with pytest.raises(rlarrow.StoreError, match="version 1"):
        at.append("scalars", scalars(100))
    with pytest.raises(NotFoundError, match=f"0 to {store.version}"):
        rlarrow.Store.open(store.path, version=store.version + 1)


def test_vacuum_frees_replaced_files_and_then_old_versions_say_so(history):
    store, v = history
    replaced = store.manifest()["retired"]
    aside = [store.path / ".rlarrow-retired" / r for r in replaced]
    assert len(replaced) == 3 and all(p.exists() for p in aside)  # out of the table directory
    assert not any((store.path / r).exists() for r in replaced)
    assert store.vacuum() == []  # kept for 7 days by default
    info = CliRunner().invoke(cli, ["info", os.fspath(store.path)])
    assert "replaced 3 files" in info.output and "rlarrow vacuum" in info.output
    assert store.info().retired_files == 3 and store.info().version == store.version
    out = CliRunner().invoke(cli, ["vacuum", os.fspath(store.path), "--retain-hours", "0"])
    assert out.exit_code == 0 and "deleted 3" in out.output
    assert not any(p.exists() for p in aside)
    with pytest.raises(NotFoundError, match="vacuum"):
        rlarrow.Store.open(store.path, version=v["append2"])
    assert rlarrow.Store.open(store.path, version=v["compact"]).row_count("scalars") == 15


def test_a_writer_killed_after_its_manifest_leaves_the_delta_commit_to_the_next(tmp_path):
    """The Delta commit follows the manifest; the next writer writes a missing one for that version."""
    import subprocess
    import sys

    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    # A child that dies (SIGKILL, from inside) right after its manifest write, before its Delta commit.
    child = r"""
import os, signal, sys, numpy as np, rlarrow
from rlarrow.core.store.delta import DeltaLog
DeltaLog.commit = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
rlarrow.Store.open(sys.argv[1]).append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
    "step": np.arange(5, 10), "value": np.zeros(5)})
"""
    proc = subprocess.run([sys.executable, "-c", child, os.fspath(path)])
    assert proc.returncode == -9
    m = json.loads((path / "_rlarrow_store.json").read_text())
    assert m["version"] == 2 and m["delta_due"] == [{"table": "scalars", "version": 2}]
    log = DeltaLog(path / "scalars")
    log.refresh()
    assert log.version == 0  # the Delta reader still sees version 1's files: consistent, older
    reopened = rlarrow.Store.open(path)  # recovery writes the missing commit, for version 2
    assert_delta_current(reopened)
    assert rlarrow.Store.open(path, version=2).row_count("scalars") == 10
    assert rlarrow.Store.open(path, version=1).row_count("scalars") == 5


def test_a_store_from_before_delta_logs_gets_one_on_its_next_write(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    # as an rlarrow before Delta logs left it: no logs, no version
    import shutil

    shutil.rmtree(path / "scalars" / LOG_DIR)
    m = json.loads((path / "_rlarrow_store.json").read_text())
    for key in ("version", "delta_due"):
        m.pop(key)
    m["format_version"] = "1.1"
    (path / "_rlarrow_store.json").write_text(json.dumps(m))
    ro = rlarrow.Store.open(path, readonly=True)
    assert ro.version == 0 and ro.history() == []
    assert rlarrow.Store.open(path, version=0).row_count("scalars") == 5
    writer = rlarrow.Store.open(path)  # its present state becomes Delta version 0 (store version 0)
    assert_delta_current(writer)
    writer.append("scalars", scalars(5))
    assert writer.version == 1
    assert rlarrow.Store.open(path, version=0).row_count("scalars") == 5
    assert deltalake.DeltaTable(os.fspath(path / "scalars"), version=0).to_pyarrow_table().num_rows == 5


def test_a_damaged_log_never_stops_a_commit_and_is_named(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    (path / "scalars" / LOG_DIR / f"{1:020d}.json").write_text("{not json\n")
    with pytest.warns(rlarrow.RLArrowWarning, match="Delta log"):
        store.append("scalars", scalars(5))
    assert store.row_count("scalars") == 10  # the commit stands
    with pytest.raises(rlarrow.CorruptFileError, match="00000000000000000001.json"):
        DeltaLog(path / "scalars").refresh()


def test_a_log_that_names_a_file_outside_the_table_is_refused(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    bad = {"add": {"path": "../../etc/passwd.parquet", "size": 1, "partitionValues": {},
                   "modificationTime": 0, "dataChange": True}}
    (path / "scalars" / LOG_DIR / f"{1:020d}.json").write_text(json.dumps(bad) + "\n")
    with pytest.raises(rlarrow.CorruptFileError, match="not a plain name"):
        DeltaLog(path / "scalars").refresh()


def test_order_keys_keep_row_order_through_compactions():
    keys = ["000000000001", "000000000002", "000000000003"]
    mid = order_between(keys[0], keys[1])
    deeper = order_between(keys[0], mid)
    first = order_between(None, keys[0])
    assert first < keys[0] < deeper < mid < keys[1]


def test_delta_commits_that_keep_failing_are_kept_in_order_and_written_later(tmp_path, monkeypatch):
    """Two commits in a row whose Delta writes fail: each version is still logged, exactly, later."""
    import errno

    path = tmp_path / "s"
    store = rlarrow.Store.create(path, auto_compact=None)
    store.append("scalars", scalars(0))
    real = DeltaLog._write_new

    def full(self, version, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DeltaLog, "_write_new", full)
    expected = {}
    for i in (1, 2, 3):
        with pytest.warns(rlarrow.RLArrowWarning, match="Delta log"):
            store.append("scalars", scalars(5 * i))
        expected[store.version] = store.read("scalars").column("step").to_pylist()
    m = json.loads((path / "_rlarrow_store.json").read_text())
    assert [d["version"] for d in m["delta_due"]] == [2, 3, 4]  # the last: as the manifest lists it
    assert all("files" in d for d in m["delta_due"][:-1])
    monkeypatch.setattr(DeltaLog, "_write_new", real)
    assert_delta_current(rlarrow.Store.open(path))  # the next writer writes them, in order
    for version, steps in expected.items():
        assert rlarrow.Store.open(path, version=version).read("scalars").column("step").to_pylist() == steps
        delta_version = rlarrow.Store.open(path, version=version).delta_versions()["scalars"]
        theirs = deltalake.DeltaTable(os.fspath(path / "scalars"), version=delta_version).to_pyarrow_table()
        assert sorted(theirs.column("step").to_pylist()) == sorted(steps)


def test_a_reader_that_adopts_a_killed_writers_file_reads_it_as_the_next_version(tmp_path):
    """Readers finish a killed writer's commit in memory: the version they report reads it again."""
    import subprocess
    import sys

    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    child = r"""
import os, sys, numpy as np, rlarrow
from rlarrow.core.store.base import StoreBase
StoreBase._write_manifest_at = staticmethod(lambda root, m: os.kill(os.getpid(), 9))  # renamed, not listed
rlarrow.Store.open(sys.argv[1]).append_together({"scalars": {"run_id": "r", "scope": "train", "tag": "loss",
    "step": np.arange(5, 10), "value": np.zeros(5)}})
"""
    assert subprocess.run([sys.executable, "-c", child, os.fspath(path)]).returncode == -9
    reader = rlarrow.Store.open(path, readonly=True)
    assert reader.row_count("scalars") == 10 and reader.version == 2  # the adopted file: version 2
    assert rlarrow.Store.open(path, version=1).row_count("scalars") == 5  # (version 1 never had it)
    assert rlarrow.Store.open(path, version=2).row_count("scalars") == 10
    writer = rlarrow.Store.open(path)  # recovery numbers it 2 too
    assert writer.version == 2 and rlarrow.Store.open(path, version=2).row_count("scalars") == 10
    assert rlarrow.Store.open(path, version=1).row_count("scalars") == 5
    assert_delta_current(writer)


def test_links_and_fifos_in_a_log_are_refused_and_nothing_is_written_outside(tmp_path):
    import shutil

    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(path / "scalars" / LOG_DIR)
    os.symlink(outside, path / "scalars" / LOG_DIR)
    with pytest.warns(rlarrow.RLArrowWarning, match="Delta log"):
        rlarrow.Store.open(path).append("scalars", scalars(5))
    assert list(outside.iterdir()) == []  # never written through the link
    with pytest.raises(rlarrow.CorruptFileError, match="link"):
        DeltaLog(path / "scalars").refresh()
    # a commit that is a link to a file outside, or a FIFO: refused, never followed or waited on
    other = rlarrow.Store.create(tmp_path / "o")
    other.append("scalars", scalars(0))
    secret = tmp_path / "secret.json"
    secret.write_text('{"commitInfo": {}}\n')
    os.symlink(secret, other.path / "scalars" / LOG_DIR / f"{1:020d}.json")
    with pytest.raises(rlarrow.CorruptFileError, match="not a link|link"):
        DeltaLog(other.path / "scalars").refresh()
    os.unlink(other.path / "scalars" / LOG_DIR / f"{1:020d}.json")
    os.mkfifo(other.path / "scalars" / LOG_DIR / f"{1:020d}.json")
    with pytest.raises(rlarrow.CorruptFileError, match="regular file"):
        DeltaLog(other.path / "scalars").refresh()


def test_a_dead_writers_half_written_commit_is_swept(tmp_path):
    from rlarrow.core.store.files import HOST, TMP_PREFIX

    path = tmp_path / "s"
    rlarrow.Store.create(path).append("scalars", scalars(0))
    stale = path / "scalars" / LOG_DIR / f"{TMP_PREFIX}{HOST}-999999999-deltaabcd.json.partial"
    stale.write_text("{")
    rlarrow.Store.open(path)  # a writer's recovery
    assert not stale.exists()


def test_a_damaged_footer_that_renames_a_column_is_refused_not_read_as_nulls(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    store.append("scalars", scalars(0))
    victim = store.files("scalars")[0]
    data = bytearray(victim.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.index(b"value", footer)  # the column's name in the footer's schema (its first mention)
    data[at] = ord("w")
    victim.write_bytes(bytes(data))
    with pytest.raises(rlarrow.CorruptFileError, match="footer"):
        rlarrow.Store.open(path, readonly=True).read("scalars")


def test_repair_sets_a_damaged_log_aside_and_starts_a_new_one_that_says_so(tmp_path):
    path = tmp_path / "s"
    store = rlarrow.Store.create(path)
    for i in range(3):
        store.append("scalars", scalars(5 * i))
    (path / "scalars" / LOG_DIR / f"{1:020d}.json").write_text("{not json\n")
    with pytest.warns(rlarrow.RLArrowWarning, match="rlarrow repair"):  # (a new process reads the log)
        rlarrow.Store.open(path).append("scalars", scalars(15))
    with pytest.warns(rlarrow.RLArrowWarning, match="rlarrow repair"):
        dry = rlarrow.Store.open(path).repair()
    assert [p.file for p in dry.problems] == ["scalars/_delta_log"] and not dry.applied
    with warnings.catch_warnings():  # (its open warns as every writer's does, until repaired)
        warnings.simplefilter("ignore", rlarrow.RLArrowWarning)
        out = CliRunner().invoke(cli, ["repair", os.fspath(path), "--apply"])
    assert out.exit_code == 0, out.output
    assert list((path / "_damaged" / "scalars").glob("_delta_log-*"))  # set aside, not deleted
    fresh = rlarrow.Store.open(path)
    assert_delta_current(fresh)
    # the versions the damaged log held are gone, and say so; from the first one the store
    # could keep (it kept each version's files while the log could not be read), all read
    with pytest.raises(NotFoundError, match="no history before"):
        rlarrow.Store.open(path, version=1)
    assert rlarrow.Store.open(path, version=fresh.version).row_count("scalars") == 20
    fresh.append("scalars", scalars(20))
    assert deltalake.DeltaTable(os.fspath(path / "scalars")).to_pyarrow_table().num_rows == 25


def test_an_appends_diff_placed_at_the_end_equals_a_walk_of_the_whole_listing(tmp_path):
    """A diff of the files the log last wrote plus new ones at the end (an append) places only
    the new ones; it gives what walking the whole listing gives, and any other listing (one
    another writer's commit changed, a compaction's, files in another order) is walked."""
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(6):
        store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [i], "value": [0.5]})
    store.compact("scalars")  # one file, then appends after it
    for i in range(3):
        store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [9 + i],
                                 "value": [1.5]})
    listed = store.manifest()["tables"]["scalars"]["files"]
    log = DeltaLog(tmp_path / "s" / "scalars")
    log.refresh()
    store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [20], "value": [2.5]})
    new = store.manifest()["tables"]["scalars"]["files"]
    assert [f["name"] for f in new[:-1]] == [f["name"] for f in listed]
    extra = [{"name": f"part-x{i}.parquet", "rows": 1, "bytes": 10} for i in range(2)]

    def walk(listing):
        log._synced = None
        return log.diff(listing)

    for listing in (listed + extra, listed[1:] + extra, extra[:1] + listed, listed[::-1]):
        want = walk(listing)
        log._synced = (list(listed), max(f.order for f in log.files.values()))
        assert log.diff(listing) == want
    assert walk(listed) == ([], [])  # the log is current: the listing is remembered as synced
    assert log._synced is not None and log._synced[0] == listed
    changed = [*listed[:-1], {**listed[-1], "rows": listed[-1]["rows"] + 1}]  # (a file's entry, not its name)
    assert log.diff(changed) == walk(changed)
    adds, removes = log.diff(listed + extra)
    assert removes == [] and [a.name for a in adds] == [e["name"] for e in extra]
    assert adds[0].order > max(f.order for f in log.files.values()) and adds[1].order > adds[0].order
    assert_delta_current(store)
