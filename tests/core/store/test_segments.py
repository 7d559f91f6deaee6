"""A long file list is kept in manifest segments: each written once, read back checked.

Segments of 4 files here (the store's are 256), so that a few commits cross several.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_delta_current

import rlarrow
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.store import MANIFEST_NAME, segments
from rlarrow.core.store import manifest as manifest_module

SEG = 4


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(segments, "SEGMENT_FILES", SEG)


def fresh_process_caches() -> None:
    """Forget what this process read or wrote, as a new process would not know it."""
    segments.forget()
    manifest_module.forget()


def append(store: rlarrow.Store, i: int) -> None:
    store.append("scalars", {"run_id": "r", "scope": "train", "tag": "x", "step": [i], "value": [i * 0.5]})


def on_disk(path) -> dict:
    return json.loads((path / MANIFEST_NAME).read_text())


def segment_files(path) -> dict[str, int]:
    directory = path / segments.SEGMENTS_DIR
    return {p.name: p.stat().st_ino for p in directory.iterdir()} if directory.exists() else {}


def make(tmp_path, commits: int = 10) -> rlarrow.Store:
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(commits):
        append(store, i)
    return store


def test_each_segment_is_written_once_and_the_manifest_keeps_only_the_rest(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    seen: dict[str, int] = {}
    for i in range(11):
        append(store, i)
        files = i + 1
        m = on_disk(store.path)["tables"]["scalars"]
        now = segment_files(store.path)
        assert len(now) == files // SEG and len(m["files"]) == files % SEG
        assert {k: v for k, v in now.items() if k in seen} == seen  # never rewritten (same inode)
        seen = now
        # the table's rows count its segments' files too: an rlarrow of format 1, which sees
        # only the manifest's own files, refuses it before it recovers anything (docs/format.md)
        assert m["rows"] == files
        assert (sum(f["rows"] for f in m["files"]) == files) == (files < SEG)
        assert on_disk(store.path)["format_version"] == ("2.1" if files >= SEG else "1.4")
    m = on_disk(store.path)["tables"]["scalars"]
    assert [r["files"] for r in m["segments"]] == [SEG, SEG] and len(m["files"]) == 3
    assert store.files("scalars") == sorted(store.files("scalars"))
    assert store.row_count("scalars") == 11
    assert_delta_current(store)


def test_a_new_process_reads_the_whole_list_back(tmp_path):
    store = make(tmp_path)
    want = store.files("scalars")
    code = ("import rlarrow, json, sys; s = rlarrow.Store.open(sys.argv[1], readonly=True); "
            "print(json.dumps([[str(f) for f in s.files('scalars')], s.row_count('scalars'), "
            "s.read('scalars').column('value').to_pylist()]))")
    out = subprocess.run([sys.executable, "-c", code, os.fspath(store.path)], capture_output=True, text=True,
                         check=True)
    files, rows, values = json.loads(out.stdout)
    assert files == [str(f) for f in want] and rows == 10 and values == [i * 0.5 for i in range(10)]
    fresh_process_caches()
    again = rlarrow.Store.open(store.path)  # a writer opening it, then committing on
    append(again, 10)
    assert again.row_count("scalars") == 11 and len(segment_files(store.path)) == 2


def _damage(path, how: str) -> str:
    directory = path / segments.SEGMENTS_DIR
    m = on_disk(path)
    first = m["tables"]["scalars"]["segments"][0]
    victim = directory / first["name"]
    if how == "flipped byte":
        data = bytearray(victim.read_bytes())
        data[5] ^= 0x01
        victim.write_bytes(bytes(data))
        return "do not match the digest"
    if how == "missing":
        victim.unlink()
        return "is missing"
    if how == "linked directory":
        shutil.move(os.fspath(directory), os.fspath(path.parent / "elsewhere"))
        directory.symlink_to(path.parent / "elsewhere")
        return "symbolic link"
    if how == "linked segment":
        shutil.move(os.fspath(victim), os.fspath(path.parent / "elsewhere.json"))
        victim.symlink_to(path.parent / "elsewhere.json")
        return "cannot be read"
    if how in ("outside the store", "another table's"):
        first["name"] = "../../x-" + "0" * 32 + ".json" if how == "outside the store" else \
            "steps-" + first["name"].split("-", 1)[1]
        (path / MANIFEST_NAME).write_text(json.dumps(m))
        return "is not a segment name of table 'scalars'"
    if how == "wrong count":
        first["rows"] += 1
        (path / MANIFEST_NAME).write_text(json.dumps(m))
        return "holds 4 files of 4 rows"
    if how == "bad entry":
        data = json.loads(victim.read_text())
        data[2]["name"] = "../../escape.parquet"
        raw = json.dumps(data, separators=(",", ":")).encode()
        name = "scalars-" + segments._digest(raw) + ".json"
        (directory / name).write_bytes(raw)
        first["name"] = name
        (path / MANIFEST_NAME).write_text(json.dumps(m))
        return r"scalars-[0-9a-f]{32}\.json: damaged store manifest: entry \[2\]"
    raise ValueError(how)


@pytest.mark.parametrize("how", ["flipped byte", "missing", "linked directory", "linked segment",
                                 "outside the store", "another table's", "wrong count", "bad entry"])
def test_a_damaged_missing_or_foreign_segment_is_refused_by_name(tmp_path, how):
    store = make(tmp_path)
    said = _damage(store.path, how)
    fresh_process_caches()
    with pytest.raises(CorruptFileError, match=said) as caught:
        rlarrow.Store.open(store.path, readonly=True)
    assert segments.SEGMENTS_DIR in str(caught.value) or "scalars" in str(caught.value)  # says where
    assert (tmp_path / "s" / "scalars").is_dir()  # nothing was deleted or moved
    assert len(list((tmp_path / "s" / "scalars").glob("*.parquet"))) == 10


def test_a_compaction_unsegments_the_list_and_vacuum_deletes_what_no_manifest_names(tmp_path):
    store = make(tmp_path)
    reader = rlarrow.Store.open(store.path, readonly=True)
    old = set(segment_files(store.path))
    store.compact("scalars")
    assert on_disk(store.path)["format_version"] == "1.4"  # no segments: format 1 again
    assert set(segment_files(store.path)) == old  # kept until a vacuum
    for i in range(10, 19):
        append(store, i)
    kept = set(segment_files(store.path)) - old
    assert len(kept) == 10 // SEG
    store.vacuum(retain_hours=0)
    assert set(segment_files(store.path)) == kept
    reader.refresh()
    assert reader.read("scalars").column("step").to_pylist() == list(range(19))
    fresh_process_caches()
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == 19
    assert_delta_current(store)


def test_a_segment_written_for_a_manifest_that_failed_is_written_again(tmp_path):
    """A vacuum may delete a segment no manifest names; a commit must not take it as written."""
    store = make(tmp_path, SEG * 2 - 1)
    real = manifest_module.write_file

    def failing(directory, name, data):  # (our own function, failing once after the segments)
        if name == MANIFEST_NAME:
            raise rlarrow.StoreError("injected: the manifest write failed")
        real(directory, name, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_module, "write_file", failing)
        with pytest.raises(rlarrow.StoreError, match="injected"):
            append(store, 100)
    assert len(segment_files(store.path)) == 2  # the second segment, named by no manifest
    store.vacuum(retain_hours=0)
    assert len(segment_files(store.path)) == 1
    append(store, 100)
    assert len(segment_files(store.path)) == 2
    fresh_process_caches()
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == SEG * 2


def test_remote_reads_and_push_of_a_segmented_store(tmp_path):
    from rlarrow.core.remote import RemoteStore, push

    store = make(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(store.path, copy)
    fresh_process_caches()
    remote = RemoteStore(f"file://{copy}")
    assert remote.read("scalars").column("step").to_pylist() == list(range(10))
    push(store, f"file://{tmp_path}/pushed")
    assert RemoteStore(f"file://{tmp_path}/pushed").read("scalars").num_rows == 10


def test_rows_and_values_survive_segments_with_many_tables(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(9):
        append(store, i)
        store.add_run(source="t", run_id=f"r{i}")
    fresh_process_caches()
    again = rlarrow.Store.open(store.path, readonly=True)
    assert again.row_count("runs") == 9 and again.row_count("scalars") == 9
    assert np.array_equal(again.read("scalars").column("value").to_numpy(), np.arange(9) * 0.5)
    assert {n.split("-")[0] for n in segment_files(store.path)} == {"runs", "scalars"}


def test_segments_count_as_written_only_once_their_manifest_is(tmp_path):
    """A recovery's manifest write that failed lists the same files again at the next try: its
    segments must be written again then, as a vacuum may have deleted them meanwhile."""
    store = make(tmp_path, SEG * 2)
    manifest = store.manifest()
    for name in segment_files(store.path):
        (store.path / segments.SEGMENTS_DIR / name).unlink()  # (a vacuum, had no manifest named them)
    segments._positions.clear()
    data, settle = segments.encode_manifest(manifest, store.path)  # written, but never settled
    assert len(segment_files(store.path)) == 2
    for name in segment_files(store.path):
        (store.path / segments.SEGMENTS_DIR / name).unlink()
    data, settle = segments.encode_manifest(manifest, store.path)
    assert len(segment_files(store.path)) == 2  # written again
    settle()
    for name in segment_files(store.path):
        (store.path / segments.SEGMENTS_DIR / name).unlink()
    segments.encode_manifest(manifest, store.path)
    assert segment_files(store.path) == {}  # settled: taken as written, not written again


def test_a_dead_writers_half_written_segment_is_swept(tmp_path):
    store = make(tmp_path)
    directory = store.path / segments.SEGMENTS_DIR
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # (a pid that has exited)
    stale = directory / f".scalars-{'0' * 32}.json.{dead}.abcdef.tmp"
    ours = directory / f".scalars-{'1' * 32}.json.{os.getpid()}.abcdef.tmp"
    stale.write_bytes(b"[")
    ours.write_bytes(b"[")
    rlarrow.Store.open(store.path).close()  # a writer's recovery sweeps
    assert not stale.exists() and ours.exists()


def test_vacuum_keeps_what_the_manifest_names_however_it_was_cut(tmp_path, monkeypatch):
    """Segments another rlarrow cut otherwise (another size) are the manifest's as much."""
    store = make(tmp_path)
    named = {r["name"] for r in on_disk(store.path)["tables"]["scalars"]["segments"]}
    monkeypatch.setattr(segments, "SEGMENT_FILES", 256)
    fresh_process_caches()
    rlarrow.Store.open(store.path).vacuum(retain_hours=0)
    assert set(segment_files(store.path)) == named
    fresh_process_caches()
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == 10


def test_a_maintenance_tool_that_changes_an_entry_after_writing_and_gives_up(tmp_path):
    store = make(tmp_path)

    def tool_run() -> None:
        with store.maintenance() as tool:
            tool.write()
            entry = tool.manifest["tables"]["scalars"]["files"][0]
            entry["rows"], entry["bytes"] = 999, entry["bytes"] + 1  # then gives up, unwritten
            raise RuntimeError("gave up")

    with pytest.raises(RuntimeError, match="gave up"):
        tool_run()
    append(store, 10)
    store.vacuum(retain_hours=0)
    fresh_process_caches()
    again = rlarrow.Store.open(store.path, readonly=True)
    assert again.row_count("scalars") == 11 and again.check() == []
    assert again.read("scalars").column("step").to_pylist() == list(range(11))


def test_a_segment_that_cannot_be_written_takes_its_commit_back(tmp_path):
    store = make(tmp_path, SEG * 2 - 1)
    directory = store.path / segments.SEGMENTS_DIR
    shutil.move(os.fspath(directory), os.fspath(tmp_path / "elsewhere"))
    directory.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(rlarrow.StoreError, match="symbolic link.*every earlier commit is intact"):
        append(store, 100)
    assert len(list((store.path / "scalars").glob("*.parquet"))) == SEG * 2 - 1  # taken back out
    directory.unlink()
    shutil.move(os.fspath(tmp_path / "elsewhere"), os.fspath(directory))
    fresh_process_caches()
    assert rlarrow.Store.open(store.path).row_count("scalars") == SEG * 2 - 1  # nothing adopted


@pytest.mark.parametrize(("before", "after"), [("1.3", "2.1"), ("2.0", "2.1"), ("2.2", "2.2")])
def test_the_format_version_moves_up_to_segments_and_a_later_minor_stays(tmp_path, before, after):
    store = make(tmp_path, SEG - 1)
    m = on_disk(store.path)
    m["format_version"] = before
    (store.path / MANIFEST_NAME).write_text(json.dumps(m))
    fresh_process_caches()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rlarrow.FormatVersionWarning)  # (2.2: newer, kept)
        again = rlarrow.Store.open(store.path, auto_compact=None)
        append(again, 50)
        assert on_disk(store.path)["format_version"] == after
        again.compact("scalars")
    assert on_disk(store.path)["format_version"] == ("1.4" if after == "2.1" else after)


def test_a_copy_without_its_segments_is_refused_in_the_process_that_wrote_it(tmp_path):
    store = make(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(store.path, copy, ignore=shutil.ignore_patterns(segments.SEGMENTS_DIR))
    with pytest.raises(CorruptFileError, match="is missing"):
        rlarrow.Store.open(copy, readonly=True)


def test_push_writes_a_whole_list_as_format_1(tmp_path):
    from rlarrow.core.remote import push

    store = make(tmp_path)
    push(store, f"file://{tmp_path}/pushed")
    m = json.loads((tmp_path / "pushed" / MANIFEST_NAME).read_text())
    assert m["format_version"] == "1.4" and "segments" not in m["tables"]["scalars"]
    assert len(m["tables"]["scalars"]["files"]) == 10


@pytest.mark.skipif(importlib.util.find_spec("deltalake") is None,
                    reason="needs deltalake (the test extras) to read the table through its Delta log")
def test_a_lost_segment_says_the_delta_log_still_reads_the_table(tmp_path):
    import deltalake

    store = make(tmp_path)
    for name in segment_files(store.path):
        (store.path / segments.SEGMENTS_DIR / name).unlink()
    fresh_process_caches()
    with pytest.raises(CorruptFileError, match="rlarrow repair STORE --apply.*Delta Lake readers read"):
        rlarrow.Store.open(store.path, readonly=True)
    table = deltalake.DeltaTable(store.path / "scalars").to_pyarrow_table()
    assert sorted(table.column("step").to_pylist()) == list(range(10))  # what the message promises


@pytest.mark.parametrize("others", [0, 3])
def test_rlarrow_repair_rebuilds_a_lost_segments_list_from_the_delta_log(tmp_path, others):
    from click.testing import CliRunner

    from rlarrow.cli import cli

    store = make(tmp_path)
    for i in range(others):
        store.add_run(source="t", run_id=f"r{i}")  # (other tables commit after: versions move on)
    want = store.read("scalars")
    lost = sorted(segment_files(store.path))[0]
    (store.path / segments.SEGMENTS_DIR / lost).unlink()
    fresh_process_caches()
    before = (store.path / MANIFEST_NAME).read_bytes()
    dry = CliRunner().invoke(cli, ["repair", os.fspath(store.path)])
    assert dry.exit_code == 0, dry.output
    assert "scalars: would rebuild its list of 10 files from its Delta log" in dry.output
    assert (store.path / MANIFEST_NAME).read_bytes() == before  # a dry run changes nothing
    done = CliRunner().invoke(cli, ["repair", os.fspath(store.path), "--apply"])
    assert done.exit_code == 0, done.output
    assert "scalars: rebuilt" in done.output and "nothing to repair" in done.output
    fresh_process_caches()
    again = rlarrow.Store.open(store.path)
    assert again.read("scalars").equals(want) and again.row_count("runs") == others
    append(again, 10)  # the next commit cuts segments again
    assert len(segment_files(store.path)) >= 2
    fresh_process_caches()
    assert rlarrow.Store.open(store.path, readonly=True).row_count("scalars") == 11
    assert_delta_current(again)


def test_repair_refuses_a_delta_log_that_cannot_stand_in(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli import cli

    store = make(tmp_path)
    for name in segment_files(store.path):
        (store.path / segments.SEGMENTS_DIR / name).unlink()
    logs = sorted((store.path / "scalars" / "_delta_log").glob("*.json"))
    logs[-1].unlink()  # the log now ends a commit early
    fresh_process_caches()
    before = (store.path / MANIFEST_NAME).read_bytes()
    done = CliRunner().invoke(cli, ["repair", os.fspath(store.path), "--apply"])
    assert done.exit_code != 0 and "cannot stand in for the lost segment" in done.output
    assert (store.path / MANIFEST_NAME).read_bytes() == before


def test_repair_refuses_a_linked_segment_directory(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli import cli

    store = make(tmp_path)
    directory = store.path / segments.SEGMENTS_DIR
    shutil.move(os.fspath(directory), os.fspath(tmp_path / "elsewhere"))
    directory.symlink_to(tmp_path / "elsewhere")
    fresh_process_caches()
    before = (store.path / MANIFEST_NAME).read_bytes()
    done = CliRunner().invoke(cli, ["repair", os.fspath(store.path), "--apply"])
    assert done.exit_code != 0 and "symbolic link" in done.output
    assert (store.path / MANIFEST_NAME).read_bytes() == before
