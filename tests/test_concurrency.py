"""Eight processes appending to one store at once lose no rows and corrupt nothing."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import duckdb

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
    glob = f"{path}/scalars/*.parquet"
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall()[0][0] == 1600
