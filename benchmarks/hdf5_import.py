"""HDF5 imports in bounded memory: a robomimic file larger than a process may use, and a D4RL file.

Two files are generated once into ``benchmarks/data/`` with h5py, in the layouts the peers write:

- ``robomimic``: 400 demos of 200 steps (80,000 rows) of ``obs/{agentview_image,
  robot0_eye_in_hand_image}`` (84x84x3 uint8), ``obs/{robot0_eef_pos, robot0_eef_quat,
  robot0_gripper_qpos}``, the same under ``next_obs/``, ``actions`` (7), ``rewards``,
  ``dones``, ``states`` (45 float64): about 6.4 GiB, uncompressed as robomimic's
  ``dataset_states_to_obs.py`` writes by default.
- ``d4rl``: the MuJoCo-v2 layout of 1,000,000 rows (hopper's sizes: 11 observations, 3 actions,
  ``next_observations``, ``timeouts`` every 1,000 rows, ``infos/{qpos,qvel,action_log_probs}``).

Each path runs in a fresh process that reports its peak resident memory (``VmHWM``) and wall
time; the robomimic paths run under a memory limit of 1 GiB (``--limit-gib``), far smaller than
the file: the RAM a cluster job, a container or a dataloader worker might be given. The limit
is a memory cgroup (``memory.limit_in_bytes``, what a container's limit is) where this process
may make one, else an address-space limit (``RLIMIT_AS``, which also counts memory a process
only reserves: give it 2 GiB or more).

- rlarrow: ``rlarrow.io.hdf5.import_hdf5`` of the file into a new store (every row, as
  RLDS episodes, in 32 MiB chunks);
- peer: the file read whole with h5py, every dataset into memory, which is what d4rl's
  ``get_dataset()`` does (``data_dict[k] = dataset_file[k][:]`` for every key) and what
  robomimic's ``SequenceDataset(hdf5_cache_mode="all")`` does for the keys it trains on. Under the
  limit it cannot finish: that is reported, then it is run again without the limit for its
  figures.

Run: ``.venv/bin/python benchmarks/hdf5_import.py [--only robomimic|d4rl] [--limit-gib 1.5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

IMAGE = (84, 84, 3)
DEMOS, DEMO_ROWS = 400, 200
D4RL_ROWS = 1_000_000


def make_robomimic(path: Path) -> Path:
    import h5py

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".tmp")
    yy, xx = np.mgrid[0:84, 0:84]
    with h5py.File(tmp, "w") as f:
        data = f.create_group("data")
        total = 0
        for d in range(DEMOS):
            g = data.create_group(f"demo_{d}")
            t = np.arange(DEMO_ROWS)[:, None, None]
            scene = ((xx[None] + yy[None] + t + d) % 256).astype(np.uint8)  # moving gradient
            images = {
                name: np.stack([scene, scene[:, ::-1], scene.transpose(0, 2, 1)], axis=-1)
                + rng.integers(0, 8, (DEMO_ROWS, *IMAGE), dtype=np.uint8)
                for name in ("agentview_image", "robot0_eye_in_hand_image")
            }
            low = {
                "robot0_eef_pos": rng.standard_normal((DEMO_ROWS, 3)),
                "robot0_eef_quat": rng.standard_normal((DEMO_ROWS, 4)),
                "robot0_gripper_qpos": rng.standard_normal((DEMO_ROWS, 2)),
            }
            for group in ("obs", "next_obs"):
                for key, value in {**images, **low}.items():
                    g.create_dataset(f"{group}/{key}", data=value)
            g["actions"] = rng.uniform(-1, 1, (DEMO_ROWS, 7))
            g["rewards"] = np.zeros(DEMO_ROWS)
            g["dones"] = np.zeros(DEMO_ROWS, np.int64)
            g["dones"][-1] = 1
            g["states"] = rng.standard_normal((DEMO_ROWS, 45))
            g.attrs["num_samples"] = DEMO_ROWS
            total += DEMO_ROWS
        data.attrs["total"] = total
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {}})
    tmp.replace(path)
    return path


def make_d4rl(path: Path) -> Path:
    import h5py

    if path.exists():
        return path
    rng = np.random.default_rng(1)
    n = D4RL_ROWS
    tmp = path.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        obs = rng.standard_normal((n + 1, 11)).astype(np.float32)
        f["observations"] = obs[:-1]
        f["next_observations"] = obs[1:]
        f["actions"] = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        f["rewards"] = rng.standard_normal(n).astype(np.float32)
        f["terminals"] = rng.random(n) < 0.001
        timeouts = np.zeros(n, bool)
        timeouts[999::1000] = True
        f["timeouts"] = timeouts & ~f["terminals"][()]
        f["infos/qpos"] = rng.standard_normal((n, 6)).astype(np.float32)
        f["infos/qvel"] = rng.standard_normal((n, 6)).astype(np.float32)
        f["infos/action_log_probs"] = rng.standard_normal(n).astype(np.float32)
        f["metadata/algorithm"] = np.bytes_("SAC")
    tmp.replace(path)
    return path


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


CGROUP = Path("/sys/fs/cgroup/memory")


def _limit(limit_gib: float) -> tuple[str, Path | None]:
    """A memory cgroup limited to ``limit_gib`` (cgroup v1), else None: the child sets RLIMIT_AS itself."""
    group = CGROUP / f"rlarrow-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(int(limit_gib * (1 << 30))))
        return "memory cgroup", group
    except OSError:
        return "RLIMIT_AS", None


def child(kind: str, path: str, limit_gib: float, group: str) -> None:
    import resource

    if group:
        Path(group, "cgroup.procs").write_text(str(os.getpid()))
    elif limit_gib:
        size = int(limit_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    t0 = time.perf_counter()
    try:
        if kind == "rlarrow":
            from rlarrow.io.hdf5 import import_hdf5

            with tempfile.TemporaryDirectory(dir=DATA) as tmp:
                report = import_hdf5(path, Path(tmp) / "s", progress=False)
                rows = report.steps
        else:
            import h5py

            data = {}
            with h5py.File(path, "r") as f:  # d4rl's get_dataset: every dataset, read whole
                f.visititems(
                    lambda k, node: data.__setitem__(k, node[()]) if isinstance(node, h5py.Dataset) else None
                )
            rows = sum(len(v) for k, v in data.items() if k.endswith("actions"))
        print(
            json.dumps({"ok": True, "seconds": time.perf_counter() - t0, "rows": rows, "peak_mb": _peak_mb()})
        )
    except MemoryError:
        print(
            json.dumps(
                {
                    "ok": False,
                    "seconds": time.perf_counter() - t0,
                    "error": "MemoryError",
                    "peak_mb": _peak_mb(),
                }
            )
        )


def run(kind: str, path: Path, limit_gib: float) -> dict:
    how, group = _limit(limit_gib) if limit_gib else ("none", None)
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(path), str(limit_gib), str(group or "")],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        if group is not None:
            group.rmdir()
    lines = out.stdout.strip().splitlines()
    if not lines:
        error = (
            "killed by the kernel's OOM killer"
            if out.returncode == -9
            else (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        )
        return {
            "ok": False,
            "error": error,
            "seconds": time.perf_counter() - t0,
            "peak_mb": float("nan"),
            "limit": how,
        }
    return {**json.loads(lines[-1]), "limit": how}


def main() -> None:
    from _report import report

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["robomimic", "d4rl"])
    parser.add_argument("--limit-gib", type=float, default=1.0)
    parser.add_argument("--child", nargs=4)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], float(args.child[2]), args.child[3])
        return
    DATA.mkdir(exist_ok=True)
    rows = []
    if args.only in (None, "robomimic"):
        path = make_robomimic(DATA / "robomimic-images.hdf5")
        gib = path.stat().st_size / (1 << 30)
        ours = run("rlarrow", path, args.limit_gib)
        capped = run("peer", path, args.limit_gib)
        peer = run("peer", path, 0)
        note = (
            f"a {gib:.2f} GiB robomimic file ({DEMOS * DEMO_ROWS:,} rows of two 84x84x3 images); "
            f"rlarrow under a {args.limit_gib} GiB limit ({ours['limit']}): "
            f"{'finished' if ours['ok'] else ours['error']}; the whole-file read under the same limit: "
            f"{'finished' if capped['ok'] else capped.get('error')}, so its figures are from a run "
            "without one"
        )
        rows.append(
            {
                "path": "robomimic images: peak RSS",
                "rlarrow": ours["peak_mb"],
                "peer": peer["peak_mb"],
                "unit": "MB",
                "ratio": ours["peak_mb"] / peer["peak_mb"],
                "note": note,
            }
        )
        rows.append(
            {
                "path": "robomimic images: wall time",
                "rlarrow": ours["seconds"],
                "peer": peer["seconds"],
                "unit": "s",
                "ratio": ours["seconds"] / peer["seconds"],
                "note": "rlarrow writes every row to a store (Parquet, episodes, stats); the peer only reads",
            }
        )
    if args.only in (None, "d4rl"):
        path = make_d4rl(DATA / "d4rl-hopper-1M.hdf5")
        ours = run("rlarrow", path, 0)
        peer = run("peer", path, 0)
        rows.append(
            {
                "path": "d4rl 1M rows: peak RSS",
                "rlarrow": ours["peak_mb"],
                "peer": peer["peak_mb"],
                "unit": "MB",
                "ratio": ours["peak_mb"] / peer["peak_mb"],
                "note": f"a {path.stat().st_size / 1e6:.0f} MB MuJoCo-v2 layout file with infos",
            }
        )
        rows.append(
            {
                "path": "d4rl 1M rows: rows/s",
                "rlarrow": D4RL_ROWS / ours["seconds"],
                "peer": D4RL_ROWS / peer["seconds"],
                "unit": "rows/s",
                "ratio": peer["seconds"] / ours["seconds"],
                "note": "rlarrow: episodes, RLDS steps, infos as the typed infos column, stats; the "
                "peer reads the arrays",
            }
        )
    report("hdf5_import", rows)
    shutil.rmtree(DATA / "tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
