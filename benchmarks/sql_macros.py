"""rlarrow's SQL macros against the best query we could write by hand over the same files.

A macro is only worth having if it costs nothing over writing the SQL yourself. Each macro
of ``rlarrow.connect`` runs on the store's views; its peer is the same question asked in
plain DuckDB SQL straight over the same Parquet files (``read_parquet([...])``), written
the fastest way we know. Timed warm (best of 3, files in the page cache), in one process:

- ``episode_returns(0.99)`` over 10,000,000 steps (``sql_returns.py``'s store), against a
  hand-written ``group by`` with ``sum(coalesce(reward, 0) * pow(0.99, step))``; the note
  gives the list form the macro used before (``discounted_return(list(reward order by
  step))``);
- ``smoothed(100)``, ``ema(0.9)``, ``steps_to_threshold`` over 1,000,000 scalars (4 runs x
  50 tags x 5,000 points), against a window ``avg``, the one-window EMA
  ``w^i * sum(x * w^-i) over (...)`` (right only while ``w^-i`` does not overflow: 5,000
  points at 0.9 are within it), and a ``min(step) filter (...)`` aggregate;
- ``count(*) from transitions`` over the 10M steps, against ``lead()`` over each episode
  ordered by step, the window a user writes.

The target: every macro within 1.2x of its hand-written peer.

Run: ``.venv/bin/python benchmarks/sql_macros.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def scalars_store() -> Path:
    import rlarrow

    path = DATA / "scalars-1000000"
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    with rlarrow.Store.create(path) as st:
        for r in range(4):
            for t in range(50):
                st.append("scalars", {"run_id": f"run-{r}", "scope": "train", "tag": f"tag-{t:02d}",
                                      "step": np.arange(5000) * 10,
                                      "value": np.cumsum(rng.standard_normal(5000)) / 50,
                                      "wall_time": np.arange(5000, dtype=float)})
        st.compact()
    return path


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    from _report import best_of, report
    from sql_returns import generate

    import rlarrow

    rows = []

    def compare(name: str, con, macro: str, hand: str, note: str = "") -> None:  # noqa: ANN001
        mine = con.sql(macro).fetchnumpy()
        theirs = con.sql(hand).fetchnumpy()
        for (k, a), b in zip(mine.items(), theirs.values(), strict=True):
            if a.dtype.kind == "f":
                assert np.allclose(a, b, rtol=1e-9, equal_nan=True), (name, k)
            else:
                assert (a == b).all(), (name, k)
        t_macro = best_of(lambda: con.sql(macro).fetchnumpy())
        t_hand = best_of(lambda: con.sql(hand).fetchnumpy())
        rows.append({"path": name, "rlarrow": t_macro, "peer": t_hand, "unit": "s", "ratio": t_macro / t_hand,
                     "note": ("target <= 1.2; " + note).rstrip("; ")})
        print(rows[-1], flush=True)

    steps = generate()
    con = rlarrow.connect(steps)
    files = "[" + ", ".join(f"'{f}'" for f in rlarrow.Store.open(steps, readonly=True).files("steps")) + "]"
    t_list = best_of(lambda: con.sql(
        "select run_id, episode_id, list_sum(list_transform(list(reward order by step), "
        "lambda x, i: coalesce(x, 0) * pow(0.99, i - 1))) from steps group by all").fetchnumpy())
    compare("episode_returns(0.99), 10M steps", con,
            "select * from episode_returns(0.99) order by run_id, episode_id",
            f"""select run_id, episode_id, count(action), sum(reward),
                       sum(coalesce(reward, 0) * pow(0.99, step)), bool_or(is_terminal)
                from read_parquet({files}) group by run_id, episode_id order by run_id, episode_id""",
            f"the list form it replaced: {t_list:.2f} s")
    compare("count(*) from transitions, 10M steps", con, "select count(*) from transitions",
            f"""select count(*) from (select action, lead(step) over (partition by run_id, episode_id
                order by step) as next_step from read_parquet({files}))
                where next_step is not null and action is not null""")

    scalars = scalars_store()
    con = rlarrow.connect(scalars)
    files = rlarrow.Store.open(scalars, readonly=True).files("scalars")
    files = "[" + ", ".join(f"'{f}'" for f in files) + "]"
    order = "order by run_id, tag, step, wall_time"
    compare("smoothed(100), 1M scalars", con,
            f"select run_id, tag, step, moving_average from smoothed(100) {order}",
            f"""select run_id, tag, step, avg(value) over (partition by run_id, tag
                order by step, wall_time rows between 99 preceding and current row)
                from read_parquet({files}) {order}""")
    compare("ema(0.9), 1M scalars", con, f"select run_id, tag, step, ema from ema(0.9) {order}",
            f"""select run_id, tag, step, pow(0.9, i) * s * 0.1 / (1 - pow(0.9, i + 1)) from (
                  select *, sum(value * pow(0.9, -i)) over (partition by run_id, tag order by i) as s
                  from (select *, row_number() over (partition by run_id, tag order by step, wall_time) - 1
                        as i from read_parquet({files}))) {order}""",
            "peer: one window, right only while 0.9^-i does not overflow (under 6,700 points)")
    compare("steps_to_threshold('tag-07', 1.0), 1M scalars", con,
            "select * from steps_to_threshold('tag-07', 1.0)",
            f"""select run_id, min(step) filter (where value >= 1.0) from read_parquet({files})
                where tag = 'tag-07' group by run_id order by run_id""")
    report("sql_macros", rows)


if __name__ == "__main__":
    main()
