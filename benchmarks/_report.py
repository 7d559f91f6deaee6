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
