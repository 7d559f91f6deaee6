"""Opening a store of many files on a bucket: ``RemoteStore`` and SQL against the local store and Delta.

Issue 38 asks for the time to open a store of 10,000 files on the bucket. A store of
``--files`` files of the ``scalars`` table (one row each, auto-compaction off: what a logger
flushing every few seconds for a day leaves) is written locally, in commits of 1,000 staged
files, and pushed (:func:`rlarrow.core.remote.push`) to a real S3 server started by this script
(moto's server mode on 127.0.0.1, ``tests/s3_server.py``). Then, in one run, each the best of
``--repeat``:

- open: ``Store.open(path, readonly=True)`` and its file list locally; ``RemoteStore(uri)`` and
  its file list on the bucket (the manifest and its segments); the peer, deltalake's
  ``DeltaTable(uri + "/scalars")`` and its ``file_uris()`` (the table's Delta log on the same
  bucket, replayed by delta-rs);
- a first query: ``rlarrow.sql(uri, "select count(*), sum(value) from scalars")`` (open, plan
  and read every file's one row) against the same over the local store, and deltalake's
  ``to_pyarrow_dataset()`` read whole.

Run: ``.venv/bin/python benchmarks/open_bucket.py [--files 10000] [--repeat 3]``.

Figures, ``--files 10000 --repeat 2`` (2026-11-29, the 2-core VM, nothing else running; the
10,000 files made in 22.7 s and pushed in 378 s, moto taking a PUT at a time):

==========================================  ===========  ================  ===========
what                                        bucket       deltalake (same)  local disk
==========================================  ===========  ================  ===========
open, its file list                         0.034 s      0.21 s (0.16x)    0.18 s
a first SQL query reading every file        129 s        93 s (1.39x)      6.5 s
==========================================  ===========  ================  ===========

Opening reads the manifest and its segments (40 objects of 256 entries here), where delta-rs
replays the table's log; the local open takes the store's lock and checks what a killed
writer may have left. A query of every file pays a footer and a column chunk per file:
20,000 small GETs of moto, a Python server on the same two cores, at about 6 ms each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def make_store(path: Path, files: int) -> None:
    """``files`` one-row files of ``scalars``, committed 1,000 at a time, never compacted."""
    import rlarrow
    from rlarrow.core import schema

    with rlarrow.Store.create(path, auto_compact=None) as st:
        st.add_run(source="bench", run_id="run")
        for start in range(0, files, 1000):
            with st.stage("scalars") as staging:
                staged = [staging.write(schema.build("scalars", {
                    "run_id": "run", "scope": "train", "tag": "train/loss", "step": [step],
                    "value": [1.0 / (step + 1)], "wall_time": [1.7e9 + step]}))
                    for step in range(start, min(files, start + 1000))]
                st.commit_staged(staged)


def best(fn, repeat: int) -> tuple[float, object]:  # noqa: ANN001
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "tests"))
    sys.path.insert(0, os.fspath(HERE))
    import deltalake
    import s3_server
    from _report import report

    import rlarrow
    from rlarrow.core.remote import RemoteStore, push

    tmp = Path(tempfile.mkdtemp(prefix="open-bucket-"))
    path = tmp / "many.rlarrow"
    t0 = time.perf_counter()
    make_store(path, ns.files)
    made = time.perf_counter() - t0
    server = s3_server.start()
    try:
        os.environ.update(server.env)
        uri = f"s3://{server.bucket}/bench/many.rlarrow"
        t0 = time.perf_counter()
        push(path, uri, progress=False)
        pushed = time.perf_counter() - t0
        print(f"{ns.files} files: made in {made:.1f} s, pushed in {pushed:.1f} s", flush=True)
        query = "select count(*) as n, sum(value) as s from scalars"

        def local_open() -> int:
            with rlarrow.Store.open(path, readonly=True) as st:
                return len(st.files("scalars"))

        def bucket_open() -> int:
            return len(RemoteStore(uri).files("scalars"))

        options = server.storage_options

        def delta_open() -> int:
            return len(deltalake.DeltaTable(f"{uri}/scalars", storage_options=options).file_uris())

        def local_sql() -> object:
            return rlarrow.sql(path, query).to_pylist()

        def bucket_sql() -> object:
            return rlarrow.sql(uri, query).to_pylist()

        def delta_read() -> object:
            table = deltalake.DeltaTable(f"{uri}/scalars", storage_options=options)
            return table.to_pyarrow_dataset().to_table(columns=["value"]).num_rows

        t_local, n_local = best(local_open, ns.repeat)
        t_bucket, n_bucket = best(bucket_open, ns.repeat)
        t_delta, n_delta = best(delta_open, ns.repeat)
        assert n_local == n_bucket == n_delta == ns.files, (n_local, n_bucket, n_delta)
        s_local, r_local = best(local_sql, ns.repeat)
        s_bucket, r_bucket = best(bucket_sql, ns.repeat)
        d_read, rows = best(delta_read, ns.repeat)
        same = r_local[0]["n"] == r_bucket[0]["n"] == rows == ns.files  # type: ignore[index]
        assert same and abs(r_local[0]["s"] - r_bucket[0]["s"]) < 1e-9, (r_local, r_bucket, rows)  # type: ignore[index]
    finally:
        server.stop()
    n = ns.files
    rows_out = [
        {"path": f"open, {n} files (bucket vs Delta)", "rlarrow": t_bucket, "peer": t_delta, "unit": "s",
         "ratio": t_bucket / t_delta, "note": "RemoteStore(uri).files(); peer deltalake.DeltaTable(uri)"
                                              f".file_uris(); local disk {t_local:.3f} s"},
        {"path": f"open, {n} files (bucket vs local)", "rlarrow": t_bucket, "peer": t_local, "unit": "s",
         "ratio": t_bucket / t_local, "note": "Store.open(path, readonly=True).files()"},
        {"path": f"first SQL over {n} files (bucket vs Delta)", "rlarrow": s_bucket, "peer": d_read,
         "unit": "s", "ratio": s_bucket / d_read,
         "note": f"rlarrow.sql(uri, count+sum); peer deltalake's dataset read; local {s_local:.2f} s"},
    ]
    report("open_bucket", rows_out)


if __name__ == "__main__":
    main()
