"""A plain glob of a table directory counts every row once after every rlarrow command returns.

Users read stores with DuckDB's and Polars' own readers, without rlarrow (README, "Any engine
reads the store"). Files a compaction or an edit replaced must therefore leave the table
directory as the command returns (docs/format.md, "When a plain glob is exact").
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.io.memory.importer import write_memory
from rlarrow.io.memory.snapshot import MemorySnapshot


def glob_counts(store: Path, table: str) -> tuple[int, int]:
    pattern = f"{store}/{table}/**/*.parquet"
    return (duckdb.sql(f"select count(*) from read_parquet('{pattern}')").fetchall()[0][0],
            pl.scan_parquet(pattern).select(pl.len()).collect().item())


def exports(directory: Path, algo: str, count: int) -> None:
    """``count`` consecutive memory exports of a PPO-like (float actions) or DQN-like (int) memory."""
    rng = np.random.default_rng(0)
    for k in range(count):
        actions = (rng.normal(size=(16, 2, 1)).astype(np.float32) if algo == "ppo"
                   else rng.integers(0, 2, (16, 2, 1)).astype(np.int64))
        snap = MemorySnapshot({"states": rng.normal(size=(16, 2, 3)).astype(np.float32), "actions": actions,
                               "rewards": np.ones((16, 2, 1), np.float32),
                               "terminated": rng.random((16, 2, 1)) < 0.1,
                               "truncated": np.zeros((16, 2, 1), bool)}, name=f"{k:02d}")
        write_memory(snap, directory / algo / "memories" / f"{k:02d}.npz")


def test_every_command_leaves_an_exact_glob(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    exports(runs, "ppo", 6)
    exports(runs, "dqn", 6)
    store = tmp_path / "s.rlarrow"
    runner = CliRunner()
    out = runner.invoke(cli, ["convert", os.fspath(runs), "-o", os.fspath(store), "--episodes"])
    assert out.exit_code == 0, out.output
    st = rlarrow.Store.open(store)
    assert len(st.layouts("memory")) == 2  # float and int actions: memory/ and memory.2/

    def exact() -> None:
        st.refresh()
        for table in ("memory", "memory.2", "steps", "episodes", "runs"):
            if (store / table).is_dir():
                n = len(st.read(table.partition(".")[0], layout=int(table.partition(".")[2] or 1)))
                assert glob_counts(store, table) == (n, n), table
        # every layout of a table at once (docs/format.md: "A table of several layouts")
        both = duckdb.sql(f"select count(*) from read_parquet('{store}/memory*/*.parquet', "
                          "union_by_name = true)").fetchall()[0][0]
        assert both == st.row_count("memory") == 2 * 6 * 16 * 2  # 2 runs of 6 exports of 16 x 2 rows
        assert pl.scan_parquet(f"{store}/memory*/*.parquet", missing_columns="insert").select(
            pl.len()).collect().item() == both  # (binary-layout tensors: one Arrow type)

    exact()  # convert compacts by itself
    converted, steps_then = st.version, st.row_count("steps")
    runs_ = st.read("runs")
    ids = dict(zip(runs_["name"].to_pylist(), runs_["run_id"].to_pylist(), strict=True))
    for _ in range(3):
        st.append("scalars", {"run_id": ids["ppo"], "scope": "train", "tag": "loss", "step": [0],
                              "value": [1.0]})
    assert runner.invoke(cli, ["compact", os.fspath(store)]).exit_code == 0
    assert glob_counts(store, "scalars") == (3, 3)
    exact()
    out = runner.invoke(cli, ["label", os.fspath(store), "--run", ids["ppo"], "--set", "good=true"])
    assert out.exit_code == 0, out.output
    exact()
    out = runner.invoke(cli, ["delete", os.fspath(store), "--run", ids["dqn"], "--episode", "0"])
    assert out.exit_code == 0, out.output
    exact()
    # the replaced files are kept aside, where the versions before read them
    assert any((store / ".rlarrow-retired").rglob("*.parquet"))
    for version in range(1, converted + 1):  # (the convert's commit, then its compactions)
        before = rlarrow.Store.open(store, version=version)
        assert sum(before.read("memory", layout=n).num_rows for n in (1, 2)) == before.row_count("memory")
    assert st.row_count("steps") < steps_then  # (an episode deleted), but not in the versions before
    then = rlarrow.Store.open(store, version=converted)
    assert sum(then.read("steps", layout=n).num_rows for n in (1, 2)) == steps_then
    assert runner.invoke(cli, ["vacuum", os.fspath(store), "--retain-hours", "0"]).exit_code == 0
    assert not any((store / ".rlarrow-retired").rglob("*.parquet"))
    exact()


def test_a_writer_killed_before_moving_the_replaced_files_leaves_them_to_the_next(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(4):
        store.append("scalars", {"run_id": "r", "scope": "train", "tag": "t", "step": [i], "value": [1.0]})
    # compacts, then dies (SIGKILL) at its first move of a replaced file: after the commit
    child = r"""
import os, signal, sys, rlarrow
real = os.replace
def dying(a, b):
    if ".rlarrow-retired" in os.fspath(b):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(a, b)
os.replace = dying
rlarrow.Store.open(sys.argv[1]).compact("scalars")
"""
    proc = subprocess.run([sys.executable, "-c", child, os.fspath(store.path)])
    assert proc.returncode == -9
    assert glob_counts(store.path, "scalars")[0] == 8  # the window the docs name: until the next writer
    rlarrow.Store.open(store.path)  # a writer's recovery moves them out
    assert glob_counts(store.path, "scalars") == (4, 4)


def test_a_linked_retired_directory_is_never_written_read_or_deleted_through(tmp_path: Path) -> None:
    """A received store whose `.rlarrow-retired` links elsewhere: nothing outside is touched."""
    outside = tmp_path / "outside"
    (outside / "scalars").mkdir(parents=True)
    victim = outside / "scalars" / "keep.txt"
    victim.write_text("not the store's")
    store = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for i in range(3):
        store.append("scalars", {"run_id": "r", "scope": "train", "tag": "t", "step": [i], "value": [1.0]})
    before = store.version
    store.compact("scalars")
    replaced = store.manifest()["retired"]
    aside = tmp_path / "s" / ".rlarrow-retired"
    for rel in replaced:  # the kept files go elsewhere, and the directory becomes a link there
        os.replace(aside / rel, outside / rel)
    (aside / "scalars").rmdir()
    aside.rmdir()
    aside.symlink_to(outside)
    with pytest.raises(rlarrow.CorruptFileError, match="symbolic link"):
        rlarrow.Store.open(store.path, version=before).read("scalars")
    assert rlarrow.Store.open(store.path).vacuum(retain_hours=0) == []  # nothing deleted through it
    assert victim.read_text() == "not the store's"
    assert all((outside / rel).exists() for rel in replaced)
    assert rlarrow.Store.open(store.path).manifest()["retired"] == []  # (the entries are gone all the same)
    assert rlarrow.Store.open(store.path).read("scalars").num_rows == 3
