"""Run every benchmark in this folder and write ``benchmarks/RESULTS.md`` (``make bench``).

Each script runs in its own process, one after the other (never side by side: they would
share the 2 cores), and saves its rows to ``benchmarks/results/<scenario>.json``. Peers that
are not rlarrow's test dependencies are installed by the scripts themselves into
``benchmarks/.peer-venv`` (Hugging Face ``datasets``); skrl, envlogger, tbparse and
TensorBoard come with the ``dev`` extra. The report lists the machine, the versions, and for
every path rlarrow's figure, the peer's in the same run, and the ratio. A script that fails
is reported as failed, and the others still run.

Run: ``make bench`` or ``.venv/bin/python benchmarks/run_all.py [--only torch_stream ...]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPORT = HERE / "RESULTS.md"
#: RESULTS.md below this line is measured by hand (before/after runs of one change): kept as it is
KEEP = "<!-- measured by hand below this line: run_all.py keeps it as it is -->"

#: script -> (scenario files it writes, what it needs)
SCRIPTS: dict[str, tuple[list[str], str | None]] = {
    "store_io.py": (["store_io"], None),
    "store_commit.py": (["store_commit"], None),
    "store_history.py": (["store_history"], None),
    "step_stats.py": (["step_stats"], None),
    "memory_convert.py": (["memory_convert_100000x16"], None),
    "convert_pt.py": (["convert_pt_100000x16"], None),
    "episodes_record.py": (["episodes_record"], None),
    "record_paths.py": (["record_paths"], None),
    "tfevents_io.py": (["tfevents_io"], None),
    "tfevents_crc.py": (["tfevents_crc"], None),
    "hdf5_import.py": (["hdf5_import"], None),
    "rlds_import.py": (["rlds_import"], "tfds"),
    "video_layout.py": (["video_layout"], "lerobot"),
    "sql_returns.py": (["sql_returns"], None),
    "sql_macros.py": (["sql_macros"], None),
    "export_memory.py": (["export_memory_20M"], None),
    "torch_stream.py": (["torch_stream"], None),
    "torch_windows.py": (["torch_windows"], None),
    "stream_bucket.py": (["stream_bucket"], "lance"),
    "open_bucket.py": (["open_bucket"], "moto"),
    "gpu_memory_check.py": ([], "cuda"),
}
PEERS = ("skrl", "envlogger", "dm-env", "tbparse", "tensorboard", "tianshou", "pandas", "minari", "gymnasium",
         "h5py")
OURS = ("rlarrow", "pyarrow", "numpy", "duckdb", "polars", "torch")


def _versions(names: tuple[str, ...]) -> str:
    out = []
    for name in names:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def _peer_venv_versions() -> str:
    python = HERE / ".peer-venv" / "bin" / "python"
    if not python.exists():
        return ""
    got = subprocess.run([os.fspath(python), "-c", "import datasets; print(datasets.__version__)"],
                         capture_output=True, text=True)
    return f"datasets {got.stdout.strip()} (in benchmarks/.peer-venv)" if got.returncode == 0 else ""


def _machine() -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        mem = next(line for line in meminfo if line.startswith("MemTotal"))
        memory = f"{int(mem.split()[1]) / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration):
        memory = "?"
    peers = _versions(PEERS)
    if extra := _peer_venv_versions():
        peers += f"; {extra}"
    return [f"- machine: {cpu}, {os.cpu_count()} cores, {memory} memory, {platform.system()} "
            f"{platform.release()}",
            f"- Python {platform.python_version()}; {_versions(OURS)}",
            f"- peers: {peers}"]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run(only: list[str] | None) -> dict[str, tuple[str, float]]:
    status: dict[str, tuple[str, float]] = {}
    for script, (_, needs) in SCRIPTS.items():
        if only and Path(script).stem not in only:
            continue
        if needs == "cuda" and not _cuda():
            status[script] = ("skipped: needs a CUDA device", 0.0)
            continue
        if needs == "lerobot" and (importlib.util.find_spec("lerobot") is None
                                   or importlib.util.find_spec("av") is None):
            status[script] = ("skipped: needs lerobot and PyAV (make installs them)", 0.0)
            continue
        if needs == "lance" and (importlib.util.find_spec("lance") is None
                                 or importlib.util.find_spec("moto") is None):
            status[script] = ("skipped: needs pylance and moto[server] (the dev extra)", 0.0)
            continue
        if needs == "moto" and (importlib.util.find_spec("moto") is None
                                or importlib.util.find_spec("deltalake") is None):
            status[script] = ("skipped: needs moto[server] and deltalake (the dev extra)", 0.0)
            continue
        if needs == "tfds" and importlib.util.find_spec("tensorflow_datasets") is None:
            status[script] = ("skipped: needs TensorFlow and tensorflow-datasets (see the script)", 0.0)
            continue
        print(f"== {script}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, os.fspath(HERE / script)], cwd=HERE.parent)
        took = time.perf_counter() - started
        status[script] = ("ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})", took)
    return status


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def write_report(status: dict[str, tuple[str, float]]) -> None:
    lines = ["# Benchmark results", "",
             "Written by `make bench` (`benchmarks/run_all.py`); every peer figure was measured in the",
             "same run as rlarrow's, on the same data. Ratios are rlarrow / peer in the unit given: for",
             "seconds lower is better, for rates higher is better.", "",
             f"Run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}:", "", *_machine(), ""]
    lines += ["| script | status | wall time |", "| --- | --- | --- |"]
    for script, (state, took) in status.items():
        lines.append(f"| `{script}` | {state} | {took:.0f} s |")
    for script, (scenarios, _) in SCRIPTS.items():
        for scenario in scenarios:
            path = RESULTS / f"{scenario}.json"
            if not path.is_file():
                continue
            data = json.loads(path.read_text())
            fresh = script in status and status[script][0] == "ok"
            lines += ["", f"## {scenario} (`{script}`)" + ("" if fresh else " — from an earlier run"), "",
                      f"measured {data['machine'].get('date', '?')}", "",
                      "| path | rlarrow | peer | unit | rlarrow/peer | note |",
                      "| --- | ---: | ---: | --- | ---: | --- |"]
            for row in data["rows"]:
                note = str(row.get("note", "")).replace("|", "/")
                lines.append(f"| {row['path']} | {_fmt(row['rlarrow'])} | {_fmt(row['peer'])} "
                             f"| {row['unit']} | {row['ratio']:.2f} | {note} |")
    old = REPORT.read_text() if REPORT.is_file() else ""
    if KEEP in old:
        lines += ["", KEEP + old.split(KEEP, 1)[1].rstrip("\n")]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="script names without .py (default: all)")
    parser.add_argument("--report-only", action="store_true", help="rewrite RESULTS.md from saved results")
    args = parser.parse_args()
    status = {} if args.report_only else run(args.only)
    write_report(status)
    if any(state.startswith("failed") for state, _ in status.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
