"""A D4RL MuJoCo file with vector infos: rlarrow's import against h5py reading every array, in one run.

The file is made with h5py in D4RL's MuJoCo-v2 layout (what ``convert_buffer.py`` writes):
``observations`` (N, 17) float32, ``actions`` (N, 6) float32, ``rewards``, ``terminals`` and
``timeouts`` (every 1,000 rows), ``infos/qpos`` (N, 9) and ``infos/qvel`` (N, 8) float64
(halfcheetah's sizes). Three paths are timed, alternately, ``--repeat`` times each, and the
median reported (the machine may be shared: the medians and the spread say how much):

- ``h5py``: every dataset read whole into NumPy (d4rl's ``get_dataset()``);
- ``read``: ``rlarrow.io.hdf5.read_hdf5`` streamed to Arrow record batches, no store;
- ``import``: ``rlarrow.io.hdf5.import_hdf5`` into a new store (one commit).

Rows per second are the file's rows (transitions); the ratio is each path's time over h5py's.

Run: ``.venv/bin/python benchmarks/import_d4rl.py [--rows 1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def make(path: Path, rows: int) -> Path:
    import h5py

    rng = np.random.default_rng(0)
    timeouts = np.zeros(rows, bool)
    timeouts[999::1000] = True
    with h5py.File(path, "w") as f:
        f["observations"] = rng.standard_normal((rows, 17), np.float32)
        f["actions"] = rng.uniform(-1, 1, (rows, 6)).astype(np.float32)
        f["rewards"] = rng.standard_normal(rows, np.float32)
        f["terminals"] = np.zeros(rows, bool)
        f["timeouts"] = timeouts
        f["infos/qpos"] = rng.standard_normal((rows, 9))
        f["infos/qvel"] = rng.standard_normal((rows, 8))
    return path


def with_h5py(path: Path, work: Path) -> float:
    import h5py

    started = time.perf_counter()
    with h5py.File(path, "r") as f:
        data: dict[str, np.ndarray] = {}
        f.visititems(lambda k, n: data.__setitem__(k, n[()]) if isinstance(n, h5py.Dataset) else None)
    return time.perf_counter() - started


def with_read(path: Path, work: Path) -> float:
    from rlarrow.io.hdf5 import read_hdf5

    started = time.perf_counter()
    with read_hdf5(path) as source:
        rows = sum(batch.num_rows for batch in source.steps())
    assert rows > 0
    return time.perf_counter() - started


def with_import(path: Path, work: Path) -> float:
    from rlarrow.io.hdf5 import import_hdf5

    store = work / "store.rlarrow"
    shutil.rmtree(store, ignore_errors=True)
    started = time.perf_counter()
    import_hdf5(path, store, progress=False)
    took = time.perf_counter() - started
    shutil.rmtree(store, ignore_errors=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=["h5py", "read", "import"])
    args = parser.parse_args()
    import rlarrow.io.hdf5  # noqa: F401  (imports are not timed)

    paths = {"h5py": with_h5py, "read": with_read, "import": with_import}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = make(work / "halfcheetah-like.hdf5", args.rows)
        times: dict[str, list[float]] = {k: [] for k in args.only}
        for _ in range(args.repeat):
            for name in args.only:
                times[name].append(paths[name](path, work))
    base = statistics.median(times["h5py"]) if "h5py" in times else None
    result = {"rows": args.rows, "repeat": args.repeat, "paths": {}}
    print(f"{args.rows:,} rows, median of {args.repeat}:")
    for name, seconds in times.items():
        med = statistics.median(seconds)
        ratio = med / base if base else None
        result["paths"][name] = {"seconds": seconds, "median_s": med, "rows_per_s": args.rows / med,
                                 "x_h5py": ratio}
        every = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"  {name:7s} {med:8.3f} s  {args.rows / med:12,.0f} rows/s"
              + (f"  {ratio:6.1f}x h5py" if ratio else "") + f"  (all: {every})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
