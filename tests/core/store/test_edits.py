"""Edits without rewriting the data: delete, label, merge; each one atomic commit, versioned."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from conftest import assert_delta_current, episode_columns

import rlarrow
from rlarrow.cli.commands import cli


def episode_row(run: str, episode: int, steps: int) -> dict:
    return {"run_id": run, "episode_id": [episode], "num_steps": [steps], "env_index": 0, "terminated": True,
            "truncated": False, "partial_start": False, "partial_end": False}


def record(store: rlarrow.Store, run: str, episodes: int = 3, length: int = 4) -> None:
    store.add_run(source="test", run_id=run)
    for e in range(episodes):
        store.append_together({"steps": episode_columns(run, e, length, image=False),
                               "episodes": episode_row(run, e, length + 1)})
    store.append("scalars", {"run_id": run, "scope": "train", "tag": "loss", "step": np.arange(5),
                             "value": np.arange(5) / 3})


@pytest.fixture
def two_runs(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    record(store, "a")
    record(store, "b")
    return store


def names(store: rlarrow.Store, table: str) -> set[str]:
    return {p.name for p in store.files(table)}


def test_deleting_a_run_drops_its_files_rewrites_none_and_every_reader_agrees(two_runs):
    store = two_runs
    before_version = store.version
    steps_before = names(store, "steps")
    kept_b = store.read("steps", filter=pc.field("run_id") == "b")
    stats_rows = store.read("stats", filter=pc.field("run_id") == "a").num_rows
    counts = store.delete(runs=["a"])
    assert counts == {"runs": 1, "episodes": 3, "steps": 15, "scalars": 5, "stats": stats_rows}
    assert store.version == before_version + 1
    assert names(store, "steps") < steps_before  # only drops: a's files held a's rows alone
    for table in ("runs", "episodes", "steps", "scalars"):
        assert rlarrow.sql(store.path, f"select count(*) as n from {table} where run_id = 'a'"
                           ).column("n").to_pylist() == [0]
        assert rlarrow.scan(store.path, table).filter(
            __import__("polars").col("run_id") == "a").collect().height == 0
    assert store.read("steps").equals(kept_b)
    assert_delta_current(store)  # Delta readers see the deletion at once too
    old = rlarrow.Store.open(store.path, version=before_version)
    assert old.read("steps", filter=pc.field("run_id") == "a").num_rows == 15  # and back, before it
    assert rlarrow.sql(store.path, "select count(*) as n from steps", version=before_version
                       ).column("n").to_pylist() == [30]


def test_deleting_episodes_rewrites_only_the_files_that_mix_them(tmp_path):
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    record(store, "a", episodes=4)
    store.compact()  # one file holds all four episodes
    store.vacuum(retain_hours=0)
    keep = store.read("steps", filter=~pc.field("episode_id").isin([1, 2]))
    scalars_files = names(store, "scalars")
    stats_rows = store.read("stats", filter=pc.field("episode_id").isin([1, 2]) & (pc.field("run_id") == "a"))
    assert stats_rows.num_rows > 0  # the episodes' segment rows; the block rows stay
    counts = store.delete(episodes=[("a", 1), ("a", 2)])
    assert counts == {"episodes": 2, "steps": 10, "stats": stats_rows.num_rows}
    after = store.read("steps")
    assert after.equals(keep)  # every kept value exact, in order
    assert names(store, "scalars") == scalars_files  # tables without episodes: untouched
    assert sorted(store.read("episodes").column("episode_id").to_pylist()) == [0, 3]
    assert store.read("runs").num_rows == 1
    assert_delta_current(store)


def test_labels_change_episode_metadata_without_touching_steps(two_runs):
    store = two_runs
    steps_files = names(store, "steps")
    before = store.version
    changed = store.label({"success": True, "split": "validation"}, episodes=[("a", 1), ("b", 2)])
    assert changed == {"episodes": 2}
    assert store.label({"split": "train"}, runs=["b"]) == {"runs": 1}
    assert names(store, "steps") == steps_files
    rows = rlarrow.sql(store.path, "select run_id, episode_id, metadata->>'$.split' as split, "
                       "(metadata->>'$.success')::bool as success from episodes order by all").to_pylist()
    labelled = {(r["run_id"], r["episode_id"]): (r["split"], r["success"]) for r in rows}
    assert labelled[("a", 1)] == ("validation", True) and labelled[("b", 2)] == ("validation", True)
    assert labelled[("a", 0)] == (None, None)
    runs = {r["run_id"]: r["split"] for r in rlarrow.sql(
        store.path, "select run_id, metadata->>'$.split' as split from runs").to_pylist()}
    assert runs == {"a": None, "b": "train"}
    # the typed metadata keeps Python types; a None value removes a key
    assert store.label({"success": None}, episodes=[("a", 1)]) == {"episodes": 1}
    meta = rlarrow.Store.open(store.path).read("episodes", filter=(pc.field("run_id") == "a") & (
        pc.field("episode_id") == 1)).column("metadata").to_pylist()[0]
    assert json.loads(meta) == {"split": "validation"}
    old = rlarrow.sql(store.path, "select count(*) as n from episodes where metadata->>'$.split' is not null",
                      version=before).column("n").to_pylist()
    assert old == [0]
    with pytest.raises(rlarrow.NotFoundError):
        store.label({"x": 1}, episodes=[("zzz", 0)])


def test_merge_shares_files_by_hard_link_and_refuses_a_run_in_both(tmp_path):
    a = rlarrow.Store.create(tmp_path / "a", auto_compact=None)
    record(a, "a")
    b = rlarrow.Store.create(tmp_path / "b", auto_compact=None)
    record(b, "b")
    b.append("steps", episode_columns("b2", 0, 3, image=True))  # other tensor types: a new layout
    before = a.version
    counts = a.merge(b.path)
    assert counts["steps"] == 15 + 4 and counts["runs"] == 1
    assert a.version == before + 1  # one commit
    assert a.history()[-1]["operation"] == "MERGE"
    inodes = {os.stat(p).st_ino for p in b.files("scalars")}
    assert {os.stat(p).st_ino for p in a.files("scalars")} & inodes == inodes  # shared, not copied
    assert sorted(pc.unique(a.read("runs").column("run_id")).to_pylist()) == ["a", "b"]
    assert len(a.layouts("steps")) == 2
    assert a.read("steps", layout=2).equals(b.read("steps", layout=2))
    assert_delta_current(a)
    with pytest.raises(rlarrow.StoreError, match="in both stores"):
        a.merge(b.path)
    assert rlarrow.Store.open(a.path, version=before).row_count("steps") == 15


@pytest.mark.parametrize("kill_at", [2, 3, 4, 5, 6])
def test_an_edit_killed_midway_leaves_all_of_it_or_none(two_runs, kill_at):
    """SIGKILL at the n-th rename (the journal's manifest, each file, the listing manifest, the
    replaced files moved out of their table directories)."""
    path = two_runs.path
    total = two_runs.row_count("steps")
    child = r"""
import os, signal, sys, rlarrow
real, calls = os.replace, [0]
def dying(a, b):
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(a, b)
os.replace = dying
rlarrow.Store.open(sys.argv[1]).label({"bad": True}, runs=["a", "b"])
"""
    proc = subprocess.run([sys.executable, "-c", child, os.fspath(path), str(kill_at)])
    assert proc.returncode == -9 if kill_at <= 5 else proc.returncode in (0, -9)
    store = rlarrow.Store.open(path)
    for table in ("runs", "steps", "episodes"):  # recovery moved out what the edit replaced: a glob is exact
        assert sorted(p.name for p in (path / table).glob("*.parquet")) == \
            sorted(p.name for p in store.files(table))
    labelled = rlarrow.sql(store, "select count(*) as n from runs where metadata->>'$.bad' is not null"
                           ).column("n").to_pylist()
    # killed before the last file's rename: rolled back; after it (the journal's files all in
    # place): rolled forward; never one run labelled without the other
    assert labelled == ([0] if kill_at <= 3 else [2])
    assert store.row_count("steps") == total
    assert_delta_current(store)


def test_cli_delete_label_merge(two_runs, tmp_path):
    runner = CliRunner()
    path = os.fspath(two_runs.path)
    out = runner.invoke(cli, ["label", path, "--run", "a", "--episode", "0", "--set", "success=true",
                              "--set", "note=fine"])
    assert out.exit_code == 0, out.output
    assert rlarrow.sql(path, "select metadata->>'$.note' as n from episodes where run_id = 'a' and "
                       "episode_id = 0").column("n").to_pylist() == ["fine"]
    out = runner.invoke(cli, ["delete", path, "--episode", "1"])
    assert out.exit_code == 2 and "--run" in out.output
    out = runner.invoke(cli, ["delete", path, "--run", "a", "--episode", "1"])
    assert out.exit_code == 0 and "steps: 5 rows" in out.output
    other = rlarrow.Store.create(tmp_path / "o")
    record(other, "c", episodes=1)
    out = runner.invoke(cli, ["merge", path, os.fspath(other.path)])
    assert out.exit_code == 0, out.output
    assert "c" in pc.unique(rlarrow.Store.open(path).read("runs").column("run_id")).to_pylist()
    out = runner.invoke(cli, ["merge", path, os.fspath(other.path)])
    assert out.exit_code == 1 and "in both stores" in out.output
