"""What a commit costs now that every commit is also a Delta Lake transaction.

Issue 20 asks that the commit cost stay within 1.5x of the store before Delta logs. This
runs the same commits through both, each in its own process, alternately (twice each, the
best kept, so that the two share the machine's state): rlarrow as it is, and rlarrow at
``BASELINE`` (the last commit before Delta logs, taken from this repository's history with
``git archive``). The Delta Lake peer, ``deltalake.write_deltalake`` appending the same rows
to a Delta table, runs in this process.

Paths: 400 appends of 8 scalar rows (a logger's commits), 300 recorder-style commits of
``steps`` and ``episodes`` together (``append_together``: two tables, one store version), and
the compaction of 64 small files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import report  # noqa: E402

#: The last commit before Delta logs (issue 20): what "today's commit cost" means.
BASELINE = "31d5d6b"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APPENDS, TOGETHER, SMALL = 400, 300, 64

CHILD = r"""
import json, sys, time, numpy as np
import rlarrow
path, = sys.argv[1:]

def scalars(i):
    return {"run_id": "r", "scope": "train", "tag": "loss", "step": np.arange(8 * i, 8 * i + 8),
            "value": np.full(8, float(i))}

out = {}
st = rlarrow.Store.create(path + "/a", auto_compact=None)
times = []
for i in range(%(appends)d):
    t = time.perf_counter(); st.append("scalars", scalars(i)); times.append(time.perf_counter() - t)
out["append"] = times

st = rlarrow.Store.create(path + "/b", auto_compact=None)
times = []
for i in range(%(together)d):
    steps = {"run_id": "r", "episode_id": i, "step": np.arange(9), "env_index": 0,
             "observation": np.random.rand(9, 4).astype(np.float32),
             "action": [0] * 8 + [None], "reward": [1.0] * 8 + [None],
             "is_first": [True] + [False] * 8, "is_last": [False] * 8 + [True], "is_terminal": [False] * 9}
    ep = {"run_id": "r", "episode_id": [i], "num_steps": [9], "env_index": 0, "terminated": False,
          "truncated": True, "partial_start": False, "partial_end": False}
    t = time.perf_counter()
    st.append_together({"steps": steps, "episodes": ep})
    times.append(time.perf_counter() - t)
out["together"] = times

st = rlarrow.Store.create(path + "/c", auto_compact=None)
for i in range(%(small)d):
    st.append("scalars", scalars(i))
t = time.perf_counter(); st.compact("scalars"); out["compact"] = time.perf_counter() - t
print(json.dumps(out))
"""
for _key, _value in (("appends", APPENDS), ("together", TOGETHER), ("small", SMALL)):
    CHILD = CHILD.replace(f"%({_key})d", str(_value))


def baseline_tree(tmp: Path) -> Path | None:
    """rlarrow at BASELINE, unpacked from git (None: not a git checkout)."""
    target = tmp / "baseline"
    try:
        archive = subprocess.run(["git", "-C", os.fspath(REPO), "archive", BASELINE, "rlarrow"],
                                 capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    target.mkdir()
    subprocess.run(["tar", "-x", "-C", os.fspath(target)], input=archive, check=True)
    return target


def run(code_root: Path | None, tmp: Path) -> dict:
    work = Path(tempfile.mkdtemp(dir=tmp))
    env = dict(os.environ)
    if code_root is not None:
        env["PYTHONPATH"] = os.fspath(code_root)
    out = subprocess.run([sys.executable, "-c", CHILD, os.fspath(work)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    shutil.rmtree(work, ignore_errors=True)
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def per_commit_ms(times: list[float]) -> float:
    """The median commit, in ms (a commit's cost without the odd slow fsync)."""
    ordered = sorted(times)
    return 1000 * ordered[len(ordered) // 2]


def deltalake_appends(tmp: Path) -> list[float]:
    import deltalake
    import numpy as np
    import pyarrow as pa

    path = os.fspath(tmp / "delta")
    times = []
    for i in range(APPENDS):
        batch = pa.table({"run_id": ["r"] * 8, "tag": ["loss"] * 8, "step": np.arange(8 * i, 8 * i + 8),
                          "value": np.full(8, float(i))})
        t = time.perf_counter()
        deltalake.write_deltalake(path, batch, mode="append")
        times.append(time.perf_counter() - t)
    return times


def time_travel(tmp: Path) -> list[dict]:
    """Opening an earlier version of a 400-commit store (replaying the JSON log) vs deltalake."""
    import numpy as np

    import rlarrow

    st = rlarrow.Store.create(tmp / "travel", auto_compact=None)
    for i in range(APPENDS):
        st.append("scalars", {"run_id": "r", "scope": "train", "tag": "loss",
                              "step": np.arange(8 * i, 8 * i + 8), "value": np.full(8, float(i))})
    middle = APPENDS // 2
    t = time.perf_counter()
    for _ in range(5):
        n = rlarrow.Store.open(st.path, version=middle).row_count("scalars")
    ours = (time.perf_counter() - t) / 5
    assert n == 8 * (middle - 0)
    rows = [{"path": f"open version {middle} of a {APPENDS}-commit store", "rlarrow": 1000 * ours,
             "peer": float("nan"), "unit": "ms", "ratio": float("nan"),
             "note": "no checkpoints yet: the JSON commits are replayed"}]
    try:
        import deltalake
    except ImportError:
        return rows
    t = time.perf_counter()
    for _ in range(5):
        delta = deltalake.DeltaTable(os.fspath(st.path / "scalars"), version=middle - 1)
        m = delta.to_pyarrow_dataset().count_rows()
    theirs = (time.perf_counter() - t) / 5
    assert m == n
    rows[0].update(peer=1000 * theirs, ratio=ours / theirs,
                   note="peer: deltalake.DeltaTable(version=).to_pyarrow_dataset() of the same log")
    return rows


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rlarrow-commit-"))
    try:
        base = baseline_tree(tmp)
        runs: dict[str, list[dict]] = {"now": [], "before": []}
        for _ in range(2):
            runs["now"].append(run(None, tmp))
            if base is not None:
                runs["before"].append(run(base, tmp))

        def best(side: str, key: str) -> float:
            values = [per_commit_ms(r[key]) if isinstance(r[key], list) else 1000 * r[key]
                      for r in runs[side]]
            return min(values) if values else float("nan")

        def late(side: str, key: str) -> float:  # the last 50 commits: cost against history
            return min(per_commit_ms(r[key][-50:]) for r in runs[side]) if runs[side] else float("nan")

        rows = []
        for key, label in (("append", f"{APPENDS} appends of 8 scalar rows"),
                           ("together", f"{TOGETHER} recorder commits (steps + episodes)")):
            now, before = best("now", key), best("before", key)
            rows.append({"path": f"{label}: median commit", "rlarrow": now, "peer": before, "unit": "ms",
                         "ratio": now / before,
                         "note": f"peer: rlarrow at {BASELINE} (no Delta log); ratio = cost, goal <= 1.5"})
            rows.append({"path": f"{label}: median of the last 50", "rlarrow": late("now", key),
                         "peer": late("before", key), "unit": "ms",
                         "ratio": late("now", key) / late("before", key),
                         "note": "cost against history (issue 21 asks for it to stay flat)"})
        now, before = best("now", "compact"), best("before", "compact")
        rows.append({"path": f"compact {SMALL} small files", "rlarrow": now, "peer": before, "unit": "ms",
                     "ratio": now / before, "note": f"peer: rlarrow at {BASELINE}"})
        try:
            peer = per_commit_ms(deltalake_appends(tmp))
            rows.append({"path": f"{APPENDS} appends of 8 scalar rows: median commit",
                         "rlarrow": best("now", "append"), "peer": peer, "unit": "ms",
                         "ratio": best("now", "append") / peer,
                         "note": "peer: deltalake.write_deltalake(mode='append') of the same rows"})
        except ImportError:
            print("deltalake is not installed (the dev extra): its row is left out", file=sys.stderr)
        rows.extend(time_travel(tmp))
        report("store_commit", rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
