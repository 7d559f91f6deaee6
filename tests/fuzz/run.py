"""Fuzz every importer for a while and report, per importer, what became of its inputs.

Run: ``.venv/bin/python -m tests.fuzz.run [--inputs 300] [--only pt csv]``. Each input is a
real file with 1-4 random mutations. It is tallied as *rejected* (an rlarrow error naming
the file), *equal* (imported the seed's values: the mutation hit bytes that carry none),
*partial* (the importer announced a partial import, and every row is one the seed gives),
*reframed* (unannounced, every row one the seed gives but some more or less often: the
mutation repeated or cut out exactly one whole record, which makes a valid file) or
*different* (imported without an error, with values the seed does not give). *different*
must be 0 except for the formats without checksums (``targets.NO_CHECKSUM``). Anything
else (a crash, a foreign exception, damage to a store's earlier data) is printed with the
mutation that caused it as a *bug*. The exit status is 1 on a bug, or on a *different*
from an importer whose format has checksums.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

from .targets import NO_CHECKSUM, TARGETS, mutated_copy, random_ops, run_one, seeds

COLUMNS = ("rejected", "equal", "partial", "reframed", "different", "bug")


def main() -> None:
    """Run the fuzz loop (see the module docs); print a table, optionally write it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=300, help="inputs per importer")
    parser.add_argument("--only", nargs="*", help="importers (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the tallies here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    warnings.simplefilter("ignore")  # envlogger's reader complains as it fails; tallied instead
    with tempfile.TemporaryDirectory() as seed_dir:
        all_seeds = seeds(Path(seed_dir))
        report: dict[str, dict[str, float]] = {}
        failed = False
        print(f"{'importer':15s} {'fed':>5s} " + " ".join(f"{c:>9s}" for c in COLUMNS) + "  slowest",
              flush=True)
        for name in args.only or list(TARGETS):
            if not all_seeds.get(name):
                print(f"{name:15s} skipped: no seed files", flush=True)
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
                        outcome = run_one(name, seed, path, Path(tmp))
                    except Exception:  # noqa: BLE001 - a bug: report it and go on
                        outcome = "bug"
                        print(f"BUG {name} seed={seed.name} pick={pick} ops={ops}\n{traceback.format_exc()}")
                    if outcome == "different" and name not in NO_CHECKSUM:
                        print(f"DIFFERENT {name} seed={seed.name} pick={pick} ops={ops}")
                    tally[outcome] += 1
                    slowest = max(slowest, time.perf_counter() - t0)
            failed |= bool(tally["bug"]) or (bool(tally["different"]) and name not in NO_CHECKSUM)
            report[name] = {"fed": sum(tally.values()), **{c: tally[c] for c in COLUMNS},
                            "slowest_s": round(slowest, 2)}
            print(f"{name:15s} {sum(tally.values()):5d} " + " ".join(f"{tally[c]:9d}" for c in COLUMNS)
                  + f"  {slowest:5.2f} s", flush=True)
    for name, why in NO_CHECKSUM.items():
        print(f"  {name}: may import different values: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
