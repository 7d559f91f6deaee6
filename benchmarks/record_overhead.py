"""Recording overhead on Catch, as the recording thread's CPU: rlarrow.EnvLogger against envlogger.

Issue 37: the recorder's per-step cost, taken as CPU time of the thread that runs the
environment loop (``time.thread_time``) next to the bare environment's, so that it can be
read on a shared machine, where wall-clock runs swing more than the overhead measured.
The recorders commit on the recording thread by default, so the commits (Parquet,
statistics) are counted; with ``--background on`` they move to a writer thread that this
clock does not see, though they still cost the loop wall time (the thread competes for the
interpreter's lock): ``--clock wall`` or ``--clock process`` show that.

Run: ``.venv/bin/python benchmarks/record_overhead.py`` (``--steps 100000 --runs 5``);
needs envlogger (its Catch environment and the peer). Prints the medians of the runs,
each run the bare env, rlarrow and envlogger (on a tenth of the steps) one after another.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def drive(env: Any, steps: int) -> None:
    rng = random.Random(0)
    ts = env.reset()
    for _ in range(steps):
        ts = env.reset() if ts.last() else env.step(rng.randrange(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clock", choices=("thread", "process", "wall"), default="thread")
    parser.add_argument("--background", choices=("default", "on", "off"), default="default",
                        help="rlarrow.EnvLogger's background argument")
    args = parser.parse_args()
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_  # envlogger 1.2 on NumPy 2
    import envlogger
    from envlogger.testing import catch_env

    import rlarrow

    clock = {"thread": time.thread_time, "process": time.process_time, "wall": time.perf_counter}[args.clock]
    options = {} if args.background == "default" else {"background": args.background == "on"}
    n, tmp = args.steps, Path(tempfile.mkdtemp(prefix="record-overhead-"))

    def timed(run: Callable[[], None]) -> float:
        start = clock()
        run()
        return clock() - start

    def bare() -> None:
        drive(catch_env.Catch(seed=1), n)

    def ours() -> None:
        shutil.rmtree(tmp / "ours", ignore_errors=True)
        with rlarrow.EnvLogger(catch_env.Catch(seed=1), tmp / "ours", **options) as env:
            drive(env, n)

    def theirs() -> None:
        shutil.rmtree(tmp / "theirs", ignore_errors=True)
        (tmp / "theirs").mkdir()
        with envlogger.EnvLogger(catch_env.Catch(seed=1), data_directory=str(tmp / "theirs")) as env:
            drive(env, n // 10)

    base, rl, peer = [], [], []
    try:
        for _ in range(args.runs):
            t_bare, t_ours, t_theirs = timed(bare), timed(ours), timed(theirs)
            base.append(t_bare / n * 1e6)
            rl.append((t_ours - t_bare) / n * 1e6)
            peer.append((t_theirs - t_bare / 10) / (n // 10) * 1e6)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = statistics.median
    print(f"{args.clock} clock, {n} steps, median of {args.runs} runs (us/step):")
    print(f"  bare env {median(base):.2f}; rlarrow overhead {median(rl):.2f} "
          f"(runs {', '.join(f'{x:.2f}' for x in rl)}); envlogger overhead {median(peer):.1f}; "
          f"ratio {median(rl) / median(peer):.3f}")


if __name__ == "__main__":
    main()
