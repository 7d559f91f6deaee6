"""Fuzz every importer for a while and report how many inputs each was fed.

Run: ``.venv/bin/python -m tests.fuzz.run [--inputs 500] [--only pt csv]``. Each input is a
real file with 1-4 random mutations; the outcome is tallied as ``ok`` or the rlarrow error
it raised. Anything else (a crash, a foreign exception, damage to a store's earlier data)
is printed with the mutation that caused it, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from .targets import TARGETS, mutated_copy, random_ops, run_one, seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=300, help="inputs per importer")
    parser.add_argument("--only", nargs="*", help="importers (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the tallies here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as seed_dir:
        all_seeds = seeds(Path(seed_dir))
        report: dict[str, dict[str, int]] = {}
        bugs = 0
        for name in args.only or list(TARGETS):
            if not all_seeds.get(name):
                print(f"{name:10s} skipped: no seed files", flush=True)
                continue
            tally: Counter[str] = Counter()
            slowest = 0.0
            for _ in range(args.inputs):
                seed = rng.choice(all_seeds[name])
                ops, pick = random_ops(rng), rng.randrange(1 << 16)
                with tempfile.TemporaryDirectory() as tmp:
                    path = mutated_copy(seed, Path(tmp), ops, pick)
                    t0 = time.perf_counter()
                    try:
                        tally[run_one(name, path, Path(tmp))] += 1
                    except Exception:  # noqa: BLE001 - a bug: report it and go on
                        bugs += 1
                        tally["BUG"] += 1
                        print(f"BUG {name} seed={seed.name} pick={pick} ops={ops}\n{traceback.format_exc()}")
                    slowest = max(slowest, time.perf_counter() - t0)
            report[name] = dict(tally)
            print(f"{name:10s} {sum(tally.values()):5d} inputs  slowest {slowest:5.2f} s  {dict(tally)}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    sys.exit(1 if bugs else 0)


if __name__ == "__main__":
    main()
