"""Peak memory and time of the ``transitions`` view and of streamed SQL exports, 20,000,000 steps.

A store of 20M steps (100,000 episodes of 200 steps, 4 runs, a float32[4] observation in the
list layout, an int64 action) is generated once into ``benchmarks/data/``. Every path runs
in a fresh process, which reports its peak resident memory (``VmHWM``) and its wall time:

- ``count``: ``select count(*) from transitions`` on :func:`rlarrow.connect`;
- ``export-parquet``: :func:`rlarrow.query.export` of ``select * from transitions`` to Parquet;
- ``export-csv``: :func:`rlarrow.query.export` of ``select * from steps`` to csv (tensor cells as
  nested-list text);
- the same three the way rlarrow did them before (the peer column): the ``lead() over (partition
  by run_id, episode_id order by step)`` view, and ``sql(...)`` materialising the whole result
  before ``pyarrow.parquet.write_table`` / ``pyarrow.csv.write_csv`` (which cannot write a tensor
  column, so the old csv path is timed on the scalar columns only).

Run: ``.venv/bin/python benchmarks/export_memory.py`` (``--steps 2000000`` for a quick look;
``--only count`` for one path).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
LENGTH = 200
RUNS = 4
CHUNK = 1_000_000

# the transitions view as rlarrow 0.x defined it (a window over every step): the baseline
OLD_TRANSITIONS = """
create or replace view transitions as
select run_id, episode_id, env_index, step, observation, action, reward, discount,
       next_observation, coalesce(next_is_terminal, false) as done,
       coalesce(next_is_last and not next_is_terminal, false) as truncated
from (select *,
             lead(observation) over w as next_observation,
             lead(is_terminal) over w as next_is_terminal,
             lead(is_last) over w as next_is_last,
             lead(step) over w as next_step
      from steps
      window w as (partition by run_id, episode_id order by step))
where next_step is not null and action is not null
"""


def generate(steps: int) -> Path:
    import pyarrow as pa

    import rlarrow

    path = DATA / f"export-steps-{steps}"
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    per_run = steps // RUNS
    with rlarrow.Store.create(path) as st:
        for r in range(RUNS):
            for start in range(0, per_run, CHUNK):
                n = min(CHUNK, per_run - start)
                i = np.arange(start, start + n)
                step = i % LENGTH
                last = step == LENGTH - 1
                st.append("steps", rlarrow.core.schema.build("steps", {
                    "run_id": f"run-{r}", "episode_id": i // LENGTH, "step": step, "env_index": 0,
                    "observation": rng.standard_normal((n, 4)).astype(np.float32),
                    "action": pa.array(rng.integers(0, 4, n), mask=last),
                    "reward": pa.array(rng.standard_normal(n), mask=last),
                    "discount": pa.array(np.ones(n), mask=last),
                    "is_first": step == 0, "is_last": last, "is_terminal": last}))
    return path


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(path: str, scenario: str, variant: str) -> dict[str, object]:
    """One path in this (fresh) process: its result, seconds and peak RSS."""
    import rlarrow  # noqa: F401  (imported before the clock starts, as a user's process has it)
    from rlarrow.query import connect, sql

    out_dir = Path(tempfile.mkdtemp(prefix="rlarrow-bench-"))
    t0 = time.perf_counter()
    rows: int
    query_seconds = None
    if scenario == "count":
        con = connect(path)
        if variant == "before":
            con.execute(OLD_TRANSITIONS)
        t1 = time.perf_counter()
        rows = con.sql("select count(*) from transitions").fetchall()[0][0]
        query_seconds = time.perf_counter() - t1
        con.close()
    elif scenario == "export-parquet":
        target = out_dir / "t.parquet"
        if variant == "before":  # what `rlarrow sql -o t.parquet --format parquet` did
            import pyarrow.parquet as pq

            con = connect(path)
            con.execute(OLD_TRANSITIONS)
            table = con.sql("select * from transitions").to_arrow_table()
            con.close()
            pq.write_table(table, target)
            rows = table.num_rows
        else:
            from rlarrow.query import export

            rows = export(path, "select * from transitions", target, format="parquet")
    elif scenario == "export-csv":
        target = out_dir / "s.csv"
        if variant == "before":  # the old csv path, on the columns it could write (no tensors)
            import pyarrow.csv as pacsv

            table = sql(path, "select * exclude (observation, action) from steps")
            pacsv.write_csv(table, target)
            rows = table.num_rows
        else:
            from rlarrow.query import export

            rows = export(path, "select * from steps", target, format="csv")
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    seconds = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    for f in out_dir.iterdir():
        f.unlink()
    out_dir.rmdir()
    result: dict[str, object] = {"rows": rows, "seconds": seconds, "peak_rss_mb": peak_rss_mb(),
                                 "bytes": size}
    if query_seconds is not None:
        result["query_seconds"] = query_seconds
    return result


def run_child(path: Path, scenario: str, variant: str) -> dict[str, object]:
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--child", os.fspath(path), scenario, variant],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed",
                "returncode": out.returncode}
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000_000)
    parser.add_argument("--only", choices=["count", "export-parquet", "export-csv"], action="append")
    parser.add_argument("--variant", choices=["before", "after"], action="append")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each path, alternating before/after; the best time is reported")
    parser.add_argument("--child", nargs=3, metavar=("STORE", "SCENARIO", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    sys.path.insert(0, os.fspath(HERE))
    from _report import report

    t0 = time.perf_counter()
    path = generate(args.steps)
    print(f"store {path} ({time.perf_counter() - t0:.0f} s to make or find)")
    scenarios = args.only or ["count", "export-parquet", "export-csv"]
    variants = args.variant or ["after", "before"]
    rows = []
    for scenario in scenarios:
        runs: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for v in variants:
                r = run_child(path, scenario, v)
                print(f"{scenario:<16} {v:<7} {json.dumps(r)}", flush=True)
                if "seconds" in r:
                    runs[v].append(r)
        best = {v: min(rs, key=lambda r: float(r["seconds"])) for v, rs in runs.items() if rs}
        if "after" not in best or "before" not in best:
            continue
        keys = [("peak_rss_mb", "MiB"), ("seconds", "s")]
        if scenario == "count":
            keys.append(("query_seconds", "s"))
        for key, unit in keys:
            a, b = float(best["after"][key]), float(best["before"][key])
            rows.append({"path": f"{scenario}, {args.steps / 1e6:g}M steps: {key}", "rlarrow": a, "peer": b,
                         "unit": unit, "ratio": a / b,
                         "note": f"best of {args.repeat}; rows {best['after']['rows']} (before: "
                                 f"{best['before']['rows']}); peer = rlarrow before this change"})
    if rows:
        report(f"export_memory_{args.steps // 1_000_000}M", rows)


if __name__ == "__main__":
    main()
