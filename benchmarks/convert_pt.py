"""``rlarrow convert`` of a skrl ``.pt`` memory export against ``torch.load``, in CPU time (issue 37).

Scenario: a replay memory as skrl's ``Memory.save(format="pt")`` writes it (states f32[32],
actions f32[8], rewards f32[1], terminated and truncated bool[1]; 100,000 x 16 is ~266 MB). Two
comparisons, each the median of ``--repeat`` runs, in CPU seconds (user + system, all threads):

* **CLI, fresh process**: ``rlarrow convert FILE -o STORE`` run as a command against
  ``python -c "import torch; torch.load(FILE, weights_only=True)"``, as a user would run them
  side by side from outside (interpreter start and imports included in both);
* **in process, warm**: :func:`rlarrow.io.importing.import_paths` (what the CLI runs: the
  source's SHA-256 with the zip CRC-32s checked in the same pass over a map of the file, the
  tensors taken from that map, Arrow encoding, the Parquet files and the one-transaction
  commit) against ``torch.load`` alone, both after a first call (imports, page cache warm).

Run: ``.venv/bin/python benchmarks/convert_pt.py`` (``--memory-size 25000`` for a quick look).
The file is generated once into ``benchmarks/data/`` (ignored by git).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def generate(memory_size: int, num_envs: int) -> Path:
    """The export as skrl writes it, generated once and kept."""
    import numpy as np

    from rlarrow.io.memory.pt import write_pt

    path = DATA / f"pt-{memory_size}x{num_envs}" / "memories" / "26-11-22_00-00-00-000000_memory_0x1.pt"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    shape = (memory_size, num_envs)
    write_pt({"states": rng.standard_normal((*shape, 32), dtype=np.float32),
              "actions": rng.standard_normal((*shape, 8), dtype=np.float32),
              "rewards": rng.standard_normal((*shape, 1), dtype=np.float32),
              "terminated": rng.random((*shape, 1)) < 0.01,
              "truncated": rng.random((*shape, 1)) < 0.002}, path, overwrite=True)
    return path


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fresh_process(argv: list[str]) -> float:
    """CPU seconds of one command, run to the end in its own process."""
    before = _children_cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return _children_cpu() - before


def cli(path: Path, repeat: int) -> tuple[float, float]:
    """Median CPU seconds of ``rlarrow convert`` and of a ``torch.load`` script, each in a fresh process."""
    rlarrow = Path(sys.executable).with_name("rlarrow")
    load = f"import torch; torch.load({os.fspath(path)!r}, weights_only=True)"
    ours, peer = [], []
    for _ in range(repeat):
        out = Path(tempfile.mkdtemp(dir=DATA, prefix="convert-"))
        try:
            ours.append(fresh_process([os.fspath(rlarrow), "convert", os.fspath(path), "-o",
                                       os.fspath(out / "s")]))
        finally:
            shutil.rmtree(out)
        peer.append(fresh_process([sys.executable, "-c", load]))
    return statistics.median(ours), statistics.median(peer)


def in_process(path: Path, repeat: int) -> tuple[float, float, float, float]:
    """Median CPU and wall seconds of ``import_paths`` and of ``torch.load``, warm."""
    import torch

    from rlarrow.io.importing import import_paths

    def convert() -> None:
        out = Path(tempfile.mkdtemp(dir=DATA, prefix="convert-"))
        try:
            import_paths([path], out / "s", progress=False)
        finally:
            shutil.rmtree(out)

    results = []
    for fn in (convert, lambda: torch.load(path, weights_only=True)):
        fn()  # first call: imports, page cache
        cpu, wall = [], []
        for _ in range(repeat):
            c, t = _self_cpu(), time.perf_counter()
            fn()
            cpu.append(_self_cpu() - c)
            wall.append(time.perf_counter() - t)
        results += [statistics.median(cpu), statistics.median(wall)]
    return results[0], results[1], results[2], results[3]


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    from _report import report

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory-size", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5, help="median of N")
    args = parser.parse_args()
    DATA.mkdir(exist_ok=True)
    path = generate(args.memory_size, args.num_envs)
    mb = path.stat().st_size / 1e6
    print(f"{path} ({mb:.0f} MB)", file=sys.stderr)
    ours_cli, peer_cli = cli(path, args.repeat)
    ours_cpu, ours_wall, peer_cpu, peer_wall = in_process(path, args.repeat)
    rows = [
        {"path": f"rlarrow convert CLI vs torch.load, fresh process ({mb:.0f} MB)", "rlarrow": ours_cli,
         "peer": peer_cli, "unit": "CPU s", "ratio": ours_cli / peer_cli,
         "note": "target ratio <= 2; interpreter start and imports included in both"},
        {"path": f"import_paths vs torch.load, warm ({mb:.0f} MB)", "rlarrow": ours_cpu, "peer": peer_cpu,
         "unit": "CPU s", "ratio": ours_cpu / peer_cpu,
         "note": f"wall {ours_wall:.2f} vs {peer_wall:.2f} s; torch.load only copies the bytes, rlarrow "
                 "also hashes them and writes Parquet"},
    ]
    report(f"convert_pt_{args.memory_size}x{args.num_envs}", rows)


if __name__ == "__main__":
    main()
