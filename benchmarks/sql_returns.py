"""Per-episode returns over 10,000,000 steps in SQL, against pandas on the same Parquet files.

A store of 10M steps (100,000 episodes of 100 steps, 4 runs, a float32[8] observation) is
generated once into ``benchmarks/data/``. Timed warm (best of 3, files in the page cache):

- rlarrow: ``con.sql("select * from episode_returns(0.99)")`` on ``rlarrow.connect(STORE)``,
  and the plain undiscounted form (``sum(reward) group by run_id, episode_id``);
- pandas: ``pd.read_parquet(files, columns=[run_id, episode_id, reward])`` then
  ``groupby([run_id, episode_id]).reward.sum()`` (pandas reads the same files, same columns).

Run: ``.venv/bin/python benchmarks/sql_returns.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
STEPS = 10_000_000
LENGTH = 100


def generate() -> Path:
    import pyarrow as pa

    import rlarrow

    path = DATA / f"sql-steps-{STEPS}"
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    with rlarrow.Store.create(path) as st:
        per_run = STEPS // 4
        for r in range(4):
            for start in range(0, per_run, 1_000_000):
                n = min(1_000_000, per_run - start)
                i = np.arange(start, start + n)
                step = i % LENGTH
                last = step == LENGTH - 1
                reward = pa.array(rng.standard_normal(n), mask=last)  # the final step has none
                st.append("steps", rlarrow.core.schema.build("steps", {
                    "run_id": f"run-{r}", "episode_id": i // LENGTH, "step": step, "env_index": 0,
                    "observation": rng.standard_normal((n, 8)).astype(np.float32),
                    "action": pa.array(rng.integers(0, 4, n), mask=last), "reward": reward,
                    "discount": pa.array(np.ones(n), mask=last),
                    "is_first": step == 0, "is_last": last, "is_terminal": last}))
    return path


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    import pandas as pd
    from _report import report

    import rlarrow

    path = generate()
    con = rlarrow.connect(path)
    t_macro, ours = best_of(lambda: con.sql("select * from episode_returns(0.99)").fetchnumpy())
    t_sql, plain = best_of(lambda: con.sql(
        "select run_id, episode_id, sum(reward) as r from steps group by run_id, episode_id").fetchnumpy())
    files = [os.fspath(f) for f in rlarrow.Store.open(path, readonly=True).files("steps")]

    def pandas_returns():  # noqa: ANN202
        df = pd.read_parquet(files, columns=["run_id", "episode_id", "reward"])
        return df.groupby(["run_id", "episode_id"], sort=False)["reward"].sum()

    t_pd, theirs = best_of(pandas_returns)
    assert len(theirs) == len(plain["r"]) == len(ours["return"]) == STEPS // LENGTH
    assert np.isclose(np.sort(theirs.to_numpy()), np.sort(plain["r"])).all()
    rows = [
        {"path": "episode returns, 10M steps: SQL sum vs pandas", "rlarrow": t_sql, "peer": t_pd, "unit": "s",
         "ratio": t_sql / t_pd, "note": f"target < 1 s warm; speedup {t_pd / t_sql:.1f}x"},
        {"path": "episode_returns(0.99) macro vs pandas (undiscounted)", "rlarrow": t_macro, "peer": t_pd,
         "unit": "s", "ratio": t_macro / t_pd, "note": "also the discounted return, in step order"},
    ]
    report("sql_returns", rows)


if __name__ == "__main__":
    main()
