"""Store API: create/open, append, writers, atomic commits, recovery, compaction."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import episode_columns, populate

import rlarrow
from rlarrow.core import schema
from rlarrow.core.store import MANIFEST_NAME


def scalar_rows(start: int, n: int, run: str = "r") -> dict:
    steps = np.arange(start, start + n)
    return {"run_id": run, "scope": "train", "tag": "loss", "step": steps, "value": steps * 0.5}


def manifest(store) -> dict:
    return json.loads((store.path / MANIFEST_NAME).read_text())


def test_create_refuses_existing_or_nonempty(tmp_path):
    rlarrow.Store.create(tmp_path / "s")
    with pytest.raises(rlarrow.StoreError, match="already exists"):
        rlarrow.Store.create(tmp_path / "s")
    assert rlarrow.Store.create(tmp_path / "s", exist_ok=True).path == tmp_path / "s"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file.txt").write_text("x")
    with pytest.raises(rlarrow.StoreError, match="not an empty directory"):
        rlarrow.Store.create(tmp_path / "other")


def test_open_missing_or_foreign_directory(tmp_path):
    with pytest.raises(rlarrow.StoreError, match="no such store"):
        rlarrow.Store.open(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(rlarrow.StoreError, match="not an rlarrow store"):
        rlarrow.Store.open(tmp_path / "plain")
    assert rlarrow.Store.open(tmp_path / "new", create=True).tables() == list(schema.TABLE_NAMES)


@pytest.mark.skipif(importlib.util.find_spec("av") is None,
                    reason="the videos table's row is encoded with PyAV: pip install 'rlarrow[video]'")
def test_layout_on_disk(populated):
    from conftest import add_video_row

    add_video_row(populated)  # (a row in every table)
    root = populated.path
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [MANIFEST_NAME, ".rlarrow.lock", *schema.TABLE_NAMES])
    m = manifest(populated)
    assert m["format"] == "rlarrow-store" and m["format_version"] == "1.4"
    for name in schema.TABLE_NAMES:
        entry = m["tables"][name]
        assert entry["rows"] == sum(f["rows"] for f in entry["files"]) > 0
        for f in entry["files"]:
            info = schema.read_file_info(root / name / f["name"])
            want = (1, 1) if name == "steps" else (1, 0)  # steps 1.1 added the typed `infos` column
            assert (info.table, info.schema_version, info.num_rows) == (name, want, f["rows"])


def test_append_reads_back_and_counts(populated):
    assert populated.row_count("steps") == 3 * 6
    assert populated.row_count("episodes") == 3
    runs = populated.runs().to_pylist()
    assert len(runs) == 1 and runs[0]["source"] == "test" and runs[0]["num_envs"] == 2
    steps = populated.read("steps", columns=["episode_id", "step"],
                           filter=pa.compute.field("episode_id") == 1)
    assert steps.column("step").to_pylist() == list(range(6))


def test_add_run_refuses_duplicate_id(store):
    store.add_run(source="user", run_id="mine")
    with pytest.raises(rlarrow.StoreError, match="already exists"):
        store.add_run(source="user", run_id="mine")


def test_many_small_writes_make_one_file(store):
    with store.writer("scalars") as w:
        for i in range(500):
            w.write(scalar_rows(i, 1))
        assert store.row_count("scalars") == 0  # nothing visible before the commit
    assert len(store.files("scalars")) == 1
    assert store.row_count("scalars") == 500
    assert store.read("scalars").column("step").to_pylist() == list(range(500))


def test_flush_rows_commits_periodically_and_row_groups_are_sized(store):
    with store.writer("scalars", flush_rows=100, row_group_bytes=1 << 10) as w:
        for i in range(250):
            w.write(scalar_rows(i, 1))
            if i == 149:
                assert store.row_count("scalars") == 100
    assert [f.name for f in store.files("scalars")] == sorted(f.name for f in store.files("scalars"))
    assert store.row_count("scalars") == 250
    md = pq.read_metadata(store.files("scalars")[0])
    assert md.num_row_groups > 1  # 1 KiB row groups: the buffer was spilled in pieces


def test_writer_abort_on_exception_commits_nothing(store):
    def write_then_fail():
        with store.writer("scalars") as w:
            w.write(scalar_rows(0, 10))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_then_fail()
    assert store.row_count("scalars") == 0
    assert not [p for p in (store.path / "scalars").iterdir()]


def test_invalid_write_leaves_store_untouched(populated):
    before = manifest(populated)["tables"]
    with pytest.raises(rlarrow.SchemaMismatchError):
        populated.append("steps", {"run_id": "r", "episode_id": 0})
    assert manifest(populated)["tables"] == before


def test_tensor_type_fixed_by_first_commit(store):
    store.append("steps", episode_columns("r", 0, 3))
    bad = episode_columns("r", 1, 3)
    bad["observation"]["position"] = bad["observation"]["position"].astype(np.float64)
    with pytest.raises(rlarrow.SchemaMismatchError, match="the store holds") as info:
        store.append("steps", bad)
    assert "expected schema:" in str(info.value)


def test_declare_types_before_data(store):
    obs = rlarrow.core.tensors.tensor_type("uint8", (2, 2))
    store.declare("steps", {"observation": obs, "action": pa.int64()})
    store.declare("steps", {"observation": obs, "action": pa.int64()})  # same again: fine
    rows = {"run_id": "r", "episode_id": 0, "step": [0], "env_index": 0,
            "observation": np.zeros((1, 2, 2), np.uint8), "action": [None],
            "is_first": [True], "is_last": [True], "is_terminal": [False]}
    store.append("steps", rows)  # an all-null action column takes the declared type
    assert store.schema("steps").field("action").type == pa.int64()
    with pytest.raises(rlarrow.SchemaMismatchError, match="already fixed"):
        store.declare("steps", {"observation": obs, "action": pa.int32()})
    with pytest.raises(rlarrow.SchemaMismatchError, match="not a tensor column"):
        store.declare("steps", {"reward": pa.float32()})


def test_all_null_tensor_without_declaration_says_what_to_do(store):
    rows = {"run_id": "r", "episode_id": 0, "step": [0], "env_index": 0,
            "observation": np.zeros((1, 2), np.float32), "action": [None],
            "is_first": [True], "is_last": [True], "is_terminal": [False]}
    with pytest.raises(rlarrow.SchemaMismatchError, match=r"Store.declare\('steps'"):
        store.append("steps", rows)


def test_compact_merges_small_files_in_order(store):
    for i in range(10):
        store.append("scalars", scalar_rows(i * 10, 10))
    assert len(store.files("scalars")) == 10
    old = store.files("scalars")
    assert store.compact() == {"scalars": (10, 1)}
    assert len(store.files("scalars")) == 1
    # the old files leave the table directory (a glob of it is exact) and stay aside, where
    # earlier versions read them, until vacuumed
    aside = [store.path / ".rlarrow-retired" / "scalars" / p.name for p in old]
    assert not any(p.exists() for p in old) and all(p.exists() for p in aside)
    assert [q.name for q in (store.path / "scalars").glob("*.parquet")] == [store.files("scalars")[0].name]
    assert manifest(store)["retired"] == sorted(f"scalars/{p.name}" for p in old)
    assert store.read("scalars").column("step").to_pylist() == list(range(100))
    assert manifest(store)["pending"] is None
    assert sorted(store.vacuum(retain_hours=0)) == sorted(f"scalars/{p.name}" for p in old)
    assert not any(p.exists() for p in old + aside) and manifest(store)["retired"] == []
    assert store.read("scalars").column("step").to_pylist() == list(range(100))


def test_auto_compaction_bounds_the_file_count(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=8)
    for i in range(30):
        store.append("scalars", scalar_rows(i, 1))
    assert len(store.files("scalars")) <= 9
    assert store.read("scalars").column("step").to_pylist() == list(range(30))


def test_orphan_from_crash_between_rename_and_manifest_is_adopted(populated):
    # A complete file renamed into place, whose manifest update never happened.
    extra = schema.build("scalars", scalar_rows(100, 5))
    pq.write_table(extra, populated.path / "scalars" / "part-29990101T000000000000-deadbeef.parquet")
    reader = rlarrow.Store.open(populated.path, readonly=True)
    assert reader.row_count("scalars") == 15  # adopted in memory by a reader
    assert manifest(populated)["tables"]["scalars"]["rows"] == 10  # and not written
    writer = rlarrow.Store.open(populated.path)
    assert writer.row_count("scalars") == 15
    assert manifest(populated)["tables"]["scalars"]["rows"] == 15  # persisted by a writer


def test_stale_temporary_files_are_removed_live_ones_kept(populated):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    host = rlarrow.core.store.files.HOST
    stale = populated.path / "steps" / f".tmp-{host}-{dead_pid}-part-x.parquet.partial"
    live = populated.path / "steps" / f".tmp-{host}-{os.getpid()}-part-y.parquet.partial"
    stale.write_bytes(b"PAR1 half written")
    live.write_bytes(b"PAR1 being written")
    rlarrow.Store.open(populated.path)
    assert not stale.exists()
    assert live.exists()
    assert populated.row_count("steps") == 18


def test_interrupted_compaction_rolls_forward_or_back(store):
    for i in range(3):
        store.append("scalars", scalar_rows(i * 10, 10))
    names = [p.name for p in store.files("scalars")]
    m = manifest(store)
    merged = schema.build("scalars", scalar_rows(0, 30))
    new_name = "part-29990101T000000000000-00c0ffee.parquet"
    # Killed after the journal entry and the rename, before the manifest swap: roll forward.
    pq.write_table(merged, store.path / "scalars" / new_name)
    m["pending"] = {"op": "compact", "table": "scalars", "old": names, "new": [new_name],
                    "new_entries": [{"name": new_name, "rows": 30, "bytes": 1}]}
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    reopened = rlarrow.Store.open(store.path)
    assert [p.name for p in reopened.files("scalars")] == [new_name]
    assert reopened.read("scalars").column("step").to_pylist() == list(range(30))
    assert set(manifest(reopened)["retired"]) == {f"scalars/{n}" for n in names}
    reopened.vacuum(retain_hours=0)
    assert not any((store.path / "scalars" / n).exists() for n in names)


def test_interrupted_compaction_before_rename_rolls_back(store):
    for i in range(3):
        store.append("scalars", scalar_rows(i * 10, 10))
    names = [p.name for p in store.files("scalars")]
    m = manifest(store)
    new_name = "part-29990101T000000000000-00c0ffee.parquet"  # journaled, never renamed into place
    m["pending"] = {"op": "compact", "table": "scalars", "old": names, "new": [new_name],
                    "new_entries": [{"name": new_name, "rows": 30, "bytes": 1}]}
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    reopened = rlarrow.Store.open(store.path)
    assert [p.name for p in reopened.files("scalars")] == names
    assert reopened.row_count("scalars") == 30
    assert manifest(reopened)["pending"] is None


def test_readers_never_show_part_of_an_unfinished_multi_file_commit(store):
    """A writer killed between the renames of a journaled append: readers see none of it."""
    store.append("scalars", scalar_rows(0, 10))
    m = manifest(store)
    first = "part-29990101T000000000000-0000000a.parquet"
    second = "part-29990101T000000000000-0000000b.parquet"
    pq.write_table(schema.build("scalars", scalar_rows(10, 10)), store.path / "scalars" / first)
    # (the second file was not renamed into place yet)
    m["pending"] = {"op": "append", "table": "scalars", "old": [], "new": [first, second],
                    "new_entries": [{"name": first, "rows": 10, "bytes": 1},
                                    {"name": second, "rows": 10, "bytes": 1}]}
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    reader = rlarrow.Store.open(store.path, readonly=True)
    assert reader.row_count("scalars") == 10 and reader.read("scalars").num_rows == 10  # not 20
    assert rlarrow.sql(store.path, "select count(*) as n from scalars").column("n").to_pylist() == [10]
    rlarrow.Store.open(store.path)  # recovery rolls the step back
    assert not (store.path / "scalars" / first).exists()
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == 10


def test_retired_files_are_never_adopted_again(store):
    for i in range(3):
        store.append("scalars", scalar_rows(i * 10, 10))
    old = store.files("scalars")
    data = [p.read_bytes() for p in old]
    store.compact()
    m = manifest(store)
    # A crash after the swap but before the deletes: the old files are back on disk.
    for p, b in zip(old, data, strict=True):
        p.write_bytes(b)
    m["retired"] = [f"scalars/{p.name}" for p in old]
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == 30
    assert rlarrow.Store.open(store.path).row_count("scalars") == 30  # kept, never adopted
    # retired by an rlarrow before versions (no time recorded): deleted by the next writer
    del m["retired_at"]
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    assert rlarrow.Store.open(store.path).row_count("scalars") == 30
    assert not any(p.exists() for p in old)


def test_damaged_manifest_names_the_file(populated):
    (populated.path / MANIFEST_NAME).write_text('{"format": "rlarrow-store", "tab')
    with pytest.raises(rlarrow.CorruptFileError, match=MANIFEST_NAME):
        rlarrow.Store.open(populated.path)


def test_damaged_data_file_names_the_file(populated):
    victim = populated.files("episodes")[0]
    victim.write_bytes(victim.read_bytes()[:-40])  # truncate the footer
    with pytest.raises(rlarrow.CorruptFileError, match=victim.name):
        rlarrow.Store.open(populated.path).read("episodes")
    assert populated.read("steps").num_rows == 18  # the other tables are unaffected


def test_readonly_store_refuses_writes(populated):
    ro = rlarrow.Store.open(populated.path, readonly=True)
    with pytest.raises(rlarrow.StoreError, match="read-only"):
        ro.append("scalars", scalar_rows(0, 1))


def test_info_summarises(populated):
    info = populated.info()
    assert info.tables["steps"].rows == 18 and info.tables["memory"].rows == 8
    assert info.tables["steps"].schema_version == "1.1"
    assert info.runs[0]["source"] == "test"
    assert info.bytes_on_disk >= sum(t.bytes for t in info.tables.values()) > 0
    as_dict = info.to_dict()
    assert as_dict["tables"]["memory"]["columns"]["states"] == "fixed_size_list<item: float>[3]"
    assert "steps=18" in repr(populated)


def test_two_runs_one_store(store):
    a = populate(store)
    b = populate(store)
    assert a != b
    assert store.row_count("runs") == 2
    assert set(store.read("steps", columns=["run_id"]).column("run_id").to_pylist()) == {a, b}


def test_fast_path_still_checks_values(store):
    first = schema.build("scalars", scalar_rows(0, 2))
    with store.writer("scalars") as w:
        w.write(first)  # fixes the writer's schema
        bad = pa.Table.from_arrays(
            [pa.array(["r", None]), *first.columns[1:]], schema=first.schema)  # same schema, a null id
        with pytest.raises(rlarrow.SchemaMismatchError, match="'run_id' must not be null"):
            w.write(bad)
        enum_bad = first.set_column(first.schema.get_field_index("encoding"),
                                    first.schema.field("encoding"), pa.array(["morse", None]))
        with pytest.raises(rlarrow.SchemaMismatchError, match="morse"):
            w.write(enum_bad)
    assert store.row_count("scalars") == 2


FULL_DISK = r"""
import resource, signal, sys
import numpy as np, rlarrow
store = rlarrow.Store.open(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # get EFBIG instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))  # no file may grow past 64 kB
rng = np.random.default_rng(0)
try:
    store.append("scalars", {"run_id": "r", "scope": "train", "tag": "noise",
                             "step": np.arange(200_000), "value": rng.standard_normal(200_000)})
except rlarrow.StoreError as exc:
    print("StoreError:", exc)
"""


def test_failed_write_names_the_file_and_damages_nothing(populated):
    import subprocess
    import sys

    before = populated.read("scalars")
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(populated.path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "StoreError:" in out.stdout and ".parquet.partial" in out.stdout, out.stdout
    assert "File too large" in out.stdout
    reopened = rlarrow.Store.open(populated.path)
    assert reopened.read("scalars").equals(before)
    assert not [p for p in (populated.path / "scalars").iterdir() if p.name.startswith(".tmp-")]


def test_large_append_is_written_in_parallel_files_in_order(tmp_path, monkeypatch):
    import rlarrow.core.store.files as store_module

    monkeypatch.setattr(store_module, "ROW_GROUP_BYTES", 64 << 10)  # "large" = over 128 KiB here
    hinted = []  # each file's writeback is started after every row group (the real call, counted)
    real_hint = store_module._start_writeback
    monkeypatch.setattr(store_module, "_start_writeback", lambda path: (hinted.append(path), real_hint(path)))
    store = rlarrow.Store.create(tmp_path / "s")
    rows = rlarrow.core.schema.build("memory", {
        "run_id": "r", "snapshot_id": 0, "memory_index": np.arange(20000), "env_index": 0,
        "memory_size": 20000, "num_envs": 1, "states": np.random.rand(20000, 4).astype(np.float32)})
    info = store.append("memory", rows, threads=3)
    assert len(info.files) == 3 and info.rows == 20000
    groups = [pq.ParquetFile(p).metadata.num_row_groups for p in store.files("memory")]
    assert min(groups) > 1 and len(hinted) == sum(groups) and len(set(hinted)) == 3
    assert [f"memory/{p.name}" for p in store.files("memory")] == list(info.files)
    back = store.read("memory")
    assert back.column("memory_index").to_pylist() == list(range(20000))
    assert back.column("states").equals(rows.column("states"))
    manifest = json.loads((tmp_path / "s" / "_rlarrow_store.json").read_text())
    assert manifest["pending"] is None
    with pytest.raises(rlarrow.SchemaMismatchError):
        store.append("memory", rows.drop_columns(["states"]).append_column(
            "states", rlarrow.core.tensors.to_arrow(np.zeros((20000, 5), np.float32))), threads=3)
    assert store.row_count("memory") == 20000
    assert [p.name for p in (tmp_path / "s" / "memory").iterdir() if p.name.startswith(".")] == []


def test_codecs_zstd_where_it_pays_and_plain_for_noise(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s")
    rng = np.random.default_rng(0)
    n = 20000
    noise = rng.standard_normal((n, 8)).astype(np.float32)
    store.append("steps", {
        "run_id": "r", "episode_id": 0, "step": np.arange(n), "env_index": 0,
        "observation": {"frame": np.zeros((n, 4, 4), np.uint8),              # compressible image
                        "noise": noise,  # incompressible
                        "grid": np.tile(np.arange(6, dtype=np.float64), (n, 1))},  # compressible floats
        "action": rng.standard_normal((n, 2)), "reward": rng.standard_normal(n),
        "is_first": np.arange(n) == 0, "is_last": np.arange(n) == n - 1, "is_terminal": np.zeros(n, bool),
    })
    [path] = store.files("steps")
    meta = pq.ParquetFile(path).metadata.row_group(0)
    codec = {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)}
    assert codec["observation.noise.list.element"] == "UNCOMPRESSED"
    assert codec["action.list.element"] == "UNCOMPRESSED"
    assert codec["observation.frame.list.element.list.element"] == "ZSTD"
    assert codec["observation.grid.list.element"] == "ZSTD"
    assert codec["reward"] == codec["run_id"] == codec["step"] == "ZSTD"  # flat columns always
    stats = {meta.column(i).path_in_schema: meta.column(i).is_stats_set for i in range(meta.num_columns)}
    assert stats["step"] and not stats["observation.noise.list.element"]
    back = rlarrow.core.tensors.to_numpy(store.read("steps").column("observation"))
    assert back["noise"].tobytes() == noise.tobytes() and back["frame"].dtype == np.uint8


def test_repeating_binary_tensors_are_dictionary_encoded(tmp_path):
    """Board-like tensors that repeat (Catch's 10x5 grids) are stored once each; noise is not."""
    store = rlarrow.Store.create(tmp_path / "s")
    rng = np.random.default_rng(0)
    n = 20000
    boards = np.zeros((50, 10, 5), np.float32)
    boards[np.arange(50), np.arange(50) % 10, np.arange(50) % 5] = 1.0
    obs = boards[rng.integers(0, 50, n)]
    frames = rng.integers(0, 256, (n, 8, 8), np.uint8)
    store.declare("steps", {"observation": pa.struct([
        ("board", rlarrow.core.tensors.tensor_type(np.float32, (10, 5), layout="binary")),
        ("frame", rlarrow.core.tensors.tensor_type(np.uint8, (8, 8), layout="binary")),
        ("flag", rlarrow.core.tensors.tensor_type(np.bool_, (1,), layout="binary"))])})
    flags = rng.random((n, 1)) < 0.1
    store.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(n), "env_index": 0,
                           "observation": {"board": obs, "frame": frames, "flag": flags},
                           "is_first": np.arange(n) == 0, "is_last": np.arange(n) == n - 1,
                           "is_terminal": np.zeros(n, bool)})
    [path] = store.files("steps")
    meta = pq.ParquetFile(path).metadata.row_group(0)
    cols = [meta.column(i) for i in range(meta.num_columns)]
    enc = {c.path_in_schema: c.encodings for c in cols}
    size = {c.path_in_schema: c.total_compressed_size for c in cols}
    assert "RLE_DICTIONARY" in enc["observation.board"]
    assert "RLE_DICTIONARY" not in enc["observation.frame"]
    assert size["observation.board"] < n  # under a byte a row for 200-byte boards
    # one-byte flags repeat too, but zstd alone stores them as small and writes faster
    assert "RLE_DICTIONARY" not in enc["observation.flag"] and size["observation.flag"] < n / 2
    back = rlarrow.core.tensors.to_numpy(store.read("steps").column("observation"))
    assert back["board"].tobytes() == obs.tobytes() and back["frame"].tobytes() == frames.tobytes()
    assert np.array_equal(back["flag"], flags)


def test_append_together_commits_several_tables_in_one_manifest_write(tmp_path, monkeypatch):
    store = rlarrow.Store.create(tmp_path / "s")
    store.add_run(source="test", run_id="r")
    ep_rows = {"run_id": "r", "episode_id": [0], "num_steps": [6], "env_index": 0, "terminated": True,
               "truncated": False, "partial_start": False, "partial_end": False}
    writes = []
    original = rlarrow.Store._write_manifest
    monkeypatch.setattr(rlarrow.Store, "_write_manifest",
                        lambda self, m: (writes.append(1), original(self, m)))
    infos = store.append_together({"steps": episode_columns("r", 0, 5), "episodes": ep_rows})
    assert [(i.table, i.rows) for i in infos] == [("steps", 6), ("episodes", 1)]
    assert len(writes) == 1
    assert store.read("steps").column("step").to_pylist() == list(range(6))
    again = rlarrow.Store.open(tmp_path / "s")  # what another process sees
    assert again.row_count("steps") == 6 and again.row_count("episodes") == 1
    # one table that does not fit: nothing of either is committed, no temporary file is left
    bad = dict(ep_rows, num_steps=["six"])
    with pytest.raises(rlarrow.SchemaMismatchError, match="num_steps"):
        store.append_together({"steps": episode_columns("r", 1, 5), "episodes": bad})
    assert store.row_count("steps") == 6 and store.row_count("episodes") == 1
    assert not [p for p in (tmp_path / "s").rglob("*") if p.name.startswith(".tmp")]
    assert store.append_together({}) == []


def test_a_writer_scans_for_left_files_only_after_another_held_the_lock(tmp_path):
    """Files a killed writer renamed into place are adopted by the next commit of a writer
    that finds another's signature on the lock; the same writer committing again, with no
    other writer in between, skips that scan (a cost that grew with every file)."""
    import json
    import shutil

    def listed(path):
        manifest = json.loads((path / "_rlarrow_store.json").read_text())
        return [f["name"] for f in manifest["tables"]["scalars"]["files"]]

    from rlarrow.core.store import LOCK_NAME

    path = tmp_path / "s.rlarrow"
    st = rlarrow.Store.create(path, auto_compact=None)
    st.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [0], "value": [1.0]})
    first = path / "scalars" / st.manifest()["tables"]["scalars"]["files"][0]["name"]
    left = first.with_name("part-zzzz-left-by-a-killed-writer.parquet")
    shutil.copy(first, left)  # as if renamed in by a writer killed before its manifest write
    st.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [1], "value": [2.0]})
    assert left.name not in listed(path)  # (on disk; a reader adopts it in memory)
    assert rlarrow.Store.open(path, readonly=True).read("scalars").num_rows == 3  # a reader sees it
    (path / LOCK_NAME).write_bytes(b"another writer".ljust(64))  # another writer held the lock
    st.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [2], "value": [3.0]})
    assert left.name in listed(path)
    assert st.read("scalars").num_rows == 4


def test_a_manifest_read_again_is_a_copy_nothing_done_to_an_earlier_read_reaches(tmp_path):
    """A writer's re-read of the manifest it wrote copies a kept tree instead of parsing the
    bytes: changing one read (as a commit does before its write, which may fail) must leave
    the next read equal to the bytes on disk."""
    import json

    from rlarrow.core.store import manifest as m

    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(3):
        store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [i], "value": [0.5]})
    data = (tmp_path / "s" / m.MANIFEST_NAME).read_bytes()
    assert m._last_checked == data and m._last_tree is not None  # what the last commit wrote
    want = m.parse(data, "manifest")
    m._complete(want)
    first = m.parse_manifest(data, "manifest")
    assert first == want
    entry = first["tables"]["scalars"]
    # (file entries are shared between reads and never changed in place: a changed file is a
    # new dict; a maintenance tool, which may change them in place, gets its own, below)
    entry["files"][0] = {**entry["files"][0], "rows": 999}
    entry["files"].append({"name": "part-x.parquet", "rows": 1, "bytes": 1})
    entry["rows"] += 1
    first["version"] = 99
    first["delta_due"].append({"table": "scalars", "version": 99})
    again = m.parse_manifest(data, "manifest")
    assert again == want and again is not first
    assert json.loads(json.dumps(again)) == again  # JSON's shape: lists, not tuples
    with store.maintenance() as tool:
        tool.manifest["tables"]["scalars"]["files"][0]["rows"] = 999  # and then give up
    assert m.parse_manifest(data, "manifest") == want
    store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [5], "value": [0.5]})
    assert store.row_count("scalars") == 4 and len(store.files("scalars")) == 4
