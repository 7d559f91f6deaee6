"""What a commit, an open and a loader's start cost as a store's history grows.

Issue 21 asks that a commit cost the same at 10 or 10,000 files, and for scaling figures
where nothing grows faster than linearly. With auto-compaction off (every commit leaves its
own file, the worst case), a logger appends 8 scalar rows 10,000 times. Measured in one
child process per variant, the variants alternating on the same machine:

- the median commit over the first 100 commits, and around 1,000 and 10,000 files;
- at 100, 1,000 and 10,000 files: ``Store.open`` (read-only) and ``Store.info()`` (which
  reads every file's footer; beside it, pyarrow reading every footer alone, the floor of
  that growth), and the start of a loader (``StreamingDataset(store,
  "scalars")`` made and its first batch drawn).

The peer is rlarrow at ``BASELINE`` (this repository before manifest segments, taken with
``git archive``; ``--baseline`` names another commit), on the same commits; ``--commits``
lowers the count for a quick look.

Run: ``.venv/bin/python benchmarks/store_history.py [--commits 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import report  # noqa: E402

#: rlarrow before manifest segments (the peer; ``--baseline c3fa3b9``: before any of the
#: commit-cost work of issue 21, whose commits take about 17 minutes to 10,000 files)
BASELINE = "c9a5fac"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = r"""
import json, sys, time, numpy as np, pyarrow.parquet as pq
import rlarrow
from rlarrow.train.torch import StreamingDataset
path, commits = sys.argv[1], int(sys.argv[2])
marks = {m for m in (100, 1000, 10000) if m <= commits}
st = rlarrow.Store.create(path, auto_compact=None)
times, points = [], {}
for i in range(commits):
    rows = {"run_id": "r", "scope": "train", "tag": "loss", "step": np.arange(8 * i, 8 * i + 8),
            "value": np.full(8, float(i))}
    t = time.perf_counter(); st.append("scalars", rows); times.append(time.perf_counter() - t)
    if i + 1 in marks:
        t = time.perf_counter()
        opened = rlarrow.Store.open(path, readonly=True)
        t_open = time.perf_counter() - t
        t = time.perf_counter(); opened.info(); t_info = time.perf_counter() - t
        t = time.perf_counter()
        for f in opened.files("scalars"):
            pq.read_metadata(f)
        t_footers = time.perf_counter() - t
        t = time.perf_counter()
        next(iter(StreamingDataset(path, "scalars", columns=["value"], batch_size=256)))
        t_loader = time.perf_counter() - t
        points[i + 1] = {"open": t_open, "info": t_info, "footers": t_footers, "loader": t_loader,
                         "commit": float(np.median(times[max(0, i + 1 - 100):i + 1]))}
print(json.dumps(points))
"""


def run_variant(root: Path | None, commits: int) -> dict[str, dict[str, float]]:
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = os.fspath(root)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", CHILD, f"{tmp}/s", str(commits)], capture_output=True,
                             text=True, env=env, cwd=tmp, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    got: dict[str, dict[str, float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--baseline", default=BASELINE, help="the peer: a commit of this repository")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", os.fspath(REPO), "archive", args.baseline, "rlarrow",
                                  "schemas"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", os.fspath(base)], input=archive, check=True)
        ours = run_variant(None, args.commits)
        theirs = run_variant(base, args.commits)
    rows = []
    first = min(ours, key=int)
    for n in sorted(ours, key=int):
        for what, label in (("commit", "median commit (last 100)"), ("open", "Store.open"),
                            ("info", "Store.info()"), ("footers", "pyarrow reading every footer"),
                            ("loader", "loader start + first batch")):
            if what not in theirs[n]:
                continue  # (a peer from before the row was measured)
            o, t = ours[n][what], theirs[n][what]
            growth = f"{o / ours[first][what]:.1f}x (peer {t / theirs[first][what]:.1f}x)"
            note = f"peer: rlarrow at {args.baseline}; growth since {int(first):,} files: {growth}"
            rows.append({"path": f"{label} at {int(n):,} files", "rlarrow": o * 1e3, "peer": t * 1e3,
                         "unit": "ms", "ratio": o / t, "note": note})
            print(rows[-1], flush=True)
    report("store_history", rows)


if __name__ == "__main__":
    main()
