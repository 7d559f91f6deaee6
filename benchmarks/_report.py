"""Shared reporting for benchmark scripts: machine, versions, a table, a JSON record."""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    versions = {}
    for pkg in ("rlarrow", "pyarrow", "numpy", "duckdb", "polars", "torch"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "versions": versions,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(script: str, args: list[str]) -> dict[str, Any]:
    """Run ``script --child ARGS`` in a fresh process; its last stdout line is a JSON result."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, script, "--child", *args], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def report(scenario: str, rows: list[dict[str, Any]]) -> None:
    """Print rows of {path, rlarrow, peer, unit, ratio, note} and save them."""
    print(f"\n{scenario}")
    print(f"{'path':<44} {'rlarrow':>12} {'peer':>12} {'unit':<10} {'rlarrow/peer':>12}")
    for r in rows:
        print(f"{r['path']:<44} {r['rlarrow']:>12.4g} {r['peer']:>12.4g} {r['unit']:<10} "
              f"{r['ratio']:>12.2f}  {r.get('note', '')}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{scenario}.json"
    out.write_text(json.dumps({"scenario": scenario, "machine": machine(), "rows": rows}, indent=1))
    print(f"saved {out}")
