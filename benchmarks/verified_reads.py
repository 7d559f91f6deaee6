"""What checking page CRCs costs ``rlarrow.sql`` and ``rlarrow.scan`` (issue 36).

DuckDB and Polars check no Parquet page CRC, so ``sql``, ``connect``, ``rlarrow sql`` and
``scan`` now hand them only files found whole (``Store.verify``: every page read by pyarrow
against its CRC-32, once per process for an unchanged file; ``scan`` also has Polars read
each file once, for the damage outside the CRCs that pyarrow tolerates and Polars does not).
This measures, on a store of about 50 MB (``steps``: 200,000 rows of 64 random float32
observations, in the store's usual files and row groups), each in a fresh process with the
files in the page cache:

- before: the same query through DuckDB's / Polars' reads of the same files, unchecked;
- first: the first call in a process (it checks the files);
- again: a second call in the same process (the files are known whole: no check);
- next process: the first call of another process, with the record of checked files the
  first one left in the user's cache (what each ``rlarrow sql`` pays after the first).

Two queries each: one that reads every column (``select *``, ``collect()``), one that reads
one column (``avg(reward)``), the worst case for the check, which reads every column.

Run: ``.venv/bin/python benchmarks/verified_reads.py`` (a few seconds; the store is made
once under benchmarks/data).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _report import report, run_child  # noqa: E402

ROWS, WIDTH = 200_000, 64
QUERIES = {"all columns": "select * from steps", "one column": "select avg(reward) from steps"}


def store_path() -> Path:
    """The ~50 MB store (made once)."""
    import rlarrow

    path = HERE / "data" / f"verified_reads_{ROWS}"
    if (path / "steps").is_dir():
        return path
    rng = np.random.default_rng(0)
    tmp = path.with_name(path.name + ".tmp")
    with rlarrow.Store.create(tmp) as st:
        per = 1_000
        with st.writer("steps") as w:
            for e in range(ROWS // per):
                w.write({"run_id": "r", "episode_id": e, "step": np.arange(per), "env_index": 0,
                         "observation": rng.standard_normal((per, WIDTH), dtype=np.float32),
                         "action": rng.integers(0, 4, per), "reward": rng.standard_normal(per),
                         "discount": np.ones(per), "is_first": np.arange(per) == 0,
                         "is_last": np.arange(per) == per - 1, "is_terminal": np.zeros(per, bool)})
    tmp.rename(path)
    return path


def child(engine: str, query: str, mode: str) -> None:
    """One measurement in this fresh process: print {"first": s, "again": s} as JSON."""
    import polars as pl

    import rlarrow
    from rlarrow.query.views import connect_checked as _connect

    path = store_path()
    sql = QUERIES[query]

    def run() -> None:
        if engine == "sql" and mode == "before":
            con = _connect(path, ema_window=None, database=":memory:", version=None, layout=None,
                           warn=False, verify=())
            con.sql(sql).to_arrow_table()
            con.close()
        elif engine == "sql":
            rlarrow.sql(path, sql)
        else:
            files = [str(f) for f in rlarrow.Store.open(path, readonly=True).files("steps")]
            frame = pl.scan_parquet(files) if mode == "before" else rlarrow.scan(path, "steps")
            (frame.collect() if query == "all columns" else frame.select(pl.col("reward").mean()).collect())

    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"first": times[0], "again": times[1]}))


def main() -> None:
    path = store_path()
    size = sum(f.stat().st_size for f in (path / "steps").glob("*.parquet"))
    for f in (path / "steps").glob("*.parquet"):
        f.read_bytes()  # into the page cache
    import os
    import shutil
    import tempfile

    rows = []
    for engine in ("sql", "scan"):
        for query in QUERIES:
            cache = tempfile.mkdtemp(prefix="rlarrow-bench-cache-")
            os.environ["RLARROW_CACHE_DIR"] = cache  # (an empty record: the first call checks)
            before = run_child(__file__, [engine, query, "before"])
            after = run_child(__file__, [engine, query, "after"])
            after["next process"] = run_child(__file__, [engine, query, "after"])["first"]
            before["next process"] = before["first"]
            shutil.rmtree(cache, ignore_errors=True)
            for when in ("first", "again", "next process"):
                label = f"{when} call" if when != "next process" else when
                rows.append({"path": f"{engine}, {query}, {label}", "rlarrow": after[when],
                             "peer": before[when], "unit": "s", "ratio": after[when] / before[when],
                             "note": f"{size / 1e6:.0f} MB; peer: unchecked"})
    report("verified_reads", rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
    else:
        main()
