"""Eight processes appending to one store at once lose no rows and corrupt nothing."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import duckdb
from conftest import assert_delta_current

import rlarrow

WRITER = r"""
import sys, numpy as np, rlarrow
store = rlarrow.Store.open(sys.argv[1], auto_compact=6)
proc = int(sys.argv[2])
for i in range(10):
    store.append("scalars", {"run_id": f"p{proc}", "scope": "train", "tag": "x",
                             "step": np.arange(i * 20, (i + 1) * 20), "value": np.full(20, float(i))})
"""


def test_concurrent_appenders(tmp_path):
    path = tmp_path / "store"
    rlarrow.Store.create(path)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(p)]) for p in range(8)]
    try:
        # A reader running during the writes sees only complete commits.
        while any(p.poll() is None for p in procs):
            ro = rlarrow.Store.open(path, readonly=True)
            table = ro.read("scalars", columns=["run_id", "value"])
            counts = Counter(zip(table.column("run_id").to_pylist(),
                                 table.column("value").to_pylist(), strict=True))
            assert all(c == 20 for c in counts.values())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [0] * 8
    store = rlarrow.Store.open(path)
    assert store.row_count("scalars") == 8 * 10 * 20
    table = store.read("scalars", columns=["run_id", "step"])
    pairs = list(zip(table.column("run_id").to_pylist(), table.column("step").to_pylist(), strict=True))
    assert len(set(pairs)) == len(pairs) == 1600
    assert_delta_current(store)
    store.vacuum(retain_hours=0)  # (the files auto-compactions replaced stay for time travel till then)
    glob = f"{path}/scalars/*.parquet"
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall()[0][0] == 1600


COMPACTOR = r"""
import sys, time, rlarrow
deadline = time.time() + 60
while time.time() < deadline:
    with rlarrow.Store.open(sys.argv[1], auto_compact=None) as store:
        store.compact(target_file_bytes=1 << 20)
    if open(sys.argv[2]).read() == "stop":
        break
"""


def test_readers_see_whole_commits_under_eight_writers_and_two_compactors(tmp_path):
    """SQL, connections and Store.read in a loop while writers append and compactions swap files."""
    path = tmp_path / "store"
    rlarrow.Store.create(path)
    stop = tmp_path / "stop"
    stop.write_text("")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(p)]) for p in range(8)]
    compactors = [subprocess.Popen([sys.executable, "-c", COMPACTOR, str(path), str(stop)]) for _ in range(2)]
    failures: list[str] = []
    reads = 0
    try:
        while any(p.poll() is None for p in writers):
            for how in ("sql", "connect", "read"):
                try:
                    if how == "sql":
                        table = rlarrow.sql(path, "select run_id, value from scalars")
                    elif how == "connect":
                        con = rlarrow.connect(path)
                        con.sql("select count(*) from scalars").fetchall()  # planned ...
                        table = con.sql("select run_id, value from scalars").to_arrow_table()  # ... and rerun
                    else:
                        ro = rlarrow.Store.open(path, readonly=True)
                        table = ro.read("scalars", columns=["run_id", "value"])
                except Exception as exc:  # noqa: BLE001 - every failure is counted, then reported
                    failures.append(f"{how}: {type(exc).__name__}: {exc}")
                    continue
                reads += 1
                counts = Counter(zip(table.column("run_id").to_pylist(), table.column("value").to_pylist(),
                                     strict=True))
                if any(c != 20 for c in counts.values()):
                    failures.append(f"{how}: a commit seen partly or twice: {counts}")
    finally:
        stop.write_text("stop")
        for p in [*writers, *compactors]:
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert failures == [], f"{len(failures)} of {reads + len(failures)} reads failed: {failures[:3]}"
    assert reads > 10
    assert [p.returncode for p in [*writers, *compactors]] == [0] * 10
    store = rlarrow.Store.open(path)
    assert store.row_count("scalars") == 1600 and store.info().problems == []
    assert_delta_current(store)
