"""Streaming steps and transitions into PyTorch: shuffled batches of 256, against in-memory tensors.

10,000,000 steps rows (observation float32[32], action float32[8], reward, done) are
written once into a store under ``benchmarks/data/`` (binary-layout tensors, as
``rlarrow convert`` fixes them). The faster of two epochs (``set_epoch`` between them, one
loader kept, as a training loop does), batches of 256:

- rlarrow: ``StreamingDataset(..., shuffle=True)`` read in this process, and through
  ``rlarrow.train.torch.DataLoader`` with 2 (persistent) workers;
- peer: the same data held in memory as one torch tensor, indexed with a random permutation
  batch by batch (``data[perm[i:i + 256]]``), the ceiling of any loader;
- peer: Hugging Face ``datasets`` streaming the same Parquet files (``load_dataset("parquet",
  streaming=True).shuffle(buffer_size=65536)``, batches of 256 as NumPy), on its first
  ``--hf-rows`` rows. It is installed by this script into its own environment,
  ``benchmarks/.peer-venv`` (``--skip-hf`` skips it).

Peak RSS is reported per epoch: it must stay flat.

Then real transitions, ``(s, a, r, s')`` with ``done`` and ``truncated``, as a recorder leaves
them (``torch_windows.py``'s store: episodes of 200 to 1,000 steps with a null action at
each one's last step, split between commits): ``StreamingDataset(path, "transitions")``, the
faster of two epochs, in-process and with 2 workers, against the same transitions gathered from
in-memory tensors (``obs[s]``, ``obs[s + 1]``, ... for a random permutation of the starts).

Run: ``.venv/bin/python benchmarks/torch_stream.py [--rows 1000000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def generate(rows: int) -> Path:
    import pyarrow as pa

    import rlarrow
    from rlarrow.core.tensors import tensor_type

    path = DATA / f"transitions-v2-{rows}"  # v2: episodes end with is_last
    if (path / "_rlarrow_store.json").is_file():
        return path
    rng = np.random.default_rng(0)
    with rlarrow.Store.create(path) as st:
        st.declare("steps", {"observation": tensor_type(np.float32, (32,), layout="binary"),
                             "action": tensor_type(np.float32, (8,), layout="binary")})
        chunk = 1_000_000
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            i = np.arange(start, start + n)
            st.append("steps", rlarrow.core.schema.build("steps", {
                "run_id": "bench", "episode_id": i // 1000, "step": i % 1000, "env_index": 0,
                "observation": rng.standard_normal((n, 32)).astype(np.float32),
                "action": rng.standard_normal((n, 8)).astype(np.float32),
                "reward": rng.standard_normal(n), "discount": np.ones(n),
                "is_first": i % 1000 == 0, "is_last": i % 1000 == 999,
                "is_terminal": pa.array(rng.random(n) < 0.001)}))
    return path


HF_CHILD = r"""
import json, sys, time
from datasets import load_dataset
files, rows = sys.argv[1].split(","), int(sys.argv[2])
ds = load_dataset("parquet", data_files=files, split="train", streaming=True)
ds = ds.select_columns(["observation", "action", "reward", "is_terminal"]).shuffle(seed=0, buffer_size=65536)
ds = ds.take(rows).with_format("numpy")
t0, n = time.perf_counter(), 0
for batch in ds.iter(batch_size=256):
    n += len(batch["reward"])
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": n}))
"""


def hf_rate(path: Path, rows: int) -> float:
    """Rows per second of Hugging Face datasets streaming the store's steps files."""
    import json
    import subprocess
    import venv

    import rlarrow

    env = HERE / ".peer-venv"
    python = env / "bin" / "python"
    if not python.exists():
        venv.create(env, with_pip=True)
        subprocess.run([os.fspath(python), "-m", "pip", "install", "-q", "datasets"], check=True)
    files = ",".join(os.fspath(f) for f in rlarrow.Store.open(path, readonly=True).files("steps"))
    out = subprocess.run([os.fspath(python), "-c", HF_CHILD, files, str(rows)], capture_output=True,
                         text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["rows"] == rows, result
    return float(rows / result["seconds"])


def transitions_rows(size: int, bs: int) -> list[dict]:
    """Real transitions from a recorder-like store: streamed (1 process, 2 workers) vs in memory."""
    import torch
    from torch_windows import _load
    from torch_windows import generate as recorder_like

    from rlarrow.train.torch import DataLoader, StreamingDataset

    path = recorder_like(size)

    def epoch(loader) -> tuple[float, int]:  # noqa: ANN001
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["reward"])
        return time.perf_counter() - t0, n

    def best(ds, loader, epochs: int = 2) -> tuple[float, int]:  # noqa: ANN001
        """The faster of two epochs, as a training loop runs them (one loader, set_epoch)."""
        out = []
        for e in range(epochs):
            ds.set_epoch(e)
            out.append(epoch(loader))
        return min(out)

    one = StreamingDataset(path, "transitions", batch_size=bs, seed=0)
    t_one, n_one = best(one, one)
    two = StreamingDataset(path, "transitions", batch_size=bs, seed=0)
    t_two, n_two = best(two, DataLoader(two, num_workers=2))  # (persistent workers: the default)
    assert n_one == n_two
    obs_np, act_np, keys = _load(path)
    ep, step = keys
    starts = np.flatnonzero((ep[1:] == ep[:-1]) & (step[1:] == step[:-1] + 1))
    assert len(starts) == n_one, (len(starts), n_one)
    obs, act = torch.from_numpy(obs_np), torch.from_numpy(act_np)
    reward = torch.from_numpy(np.random.default_rng(1).standard_normal(len(ep)))
    discount = torch.ones(len(ep))
    term, last = torch.zeros(len(ep), dtype=torch.bool), torch.zeros(len(ep), dtype=torch.bool)
    perm = torch.from_numpy(starts[np.random.default_rng(0).permutation(len(starts))])
    t0 = time.perf_counter()
    for i in range(0, len(perm), bs):
        s = perm[i:i + bs]
        nxt = s + 1
        _ = (obs[s], act[s], reward[s], discount[s], obs[nxt], term[nxt], last[nxt] & ~term[nxt])
    t_mem = time.perf_counter() - t0
    note = f"{n_one:,} transitions of a recorder-like store (null action at each episode's end)"
    return [
        {"path": "real transitions (s, a, r, s', done, truncated), shuffled, batch 256: in-process",
         "rlarrow": n_one / t_one, "peer": n_one / t_mem, "unit": "rows/s", "ratio": t_mem / t_one,
         "note": f"target >= 1.5M rows/s; peer: gathered from in-memory tensors; {note}"},
        {"path": "same, rlarrow.train.torch.DataLoader with 2 workers", "rlarrow": n_two / t_two,
         "peer": n_one / t_one, "unit": "rows/s", "ratio": t_one / t_two,
         "note": "peer: rlarrow in-process; target >= 1 (workers at least as fast)"},
    ]


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    import torch
    from _report import peak_rss_mb, report

    from rlarrow.train.torch import DataLoader, StreamingDataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--skip-hf", action="store_true", help="skip the Hugging Face datasets peer")
    parser.add_argument("--hf-rows", type=int, default=1_000_000, help="rows HF datasets streams (slow)")
    args = parser.parse_args()
    path = generate(args.rows)
    cols = ["observation", "action", "reward", "is_terminal"]
    bs = 256

    def epoch(loader) -> tuple[float, int]:  # noqa: ANN001
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["reward"])
        return time.perf_counter() - t0, n

    ds = StreamingDataset(path, columns=cols, batch_size=bs, seed=0)
    rss = []
    t_ours = float("inf")
    for e in range(args.epochs):
        ds.set_epoch(e)
        t, n = epoch(ds)
        assert n == args.rows, n
        t_ours = min(t_ours, t)
        rss.append(peak_rss_mb())
    ds2 = StreamingDataset(path, columns=cols, batch_size=bs, seed=0)
    loader2 = DataLoader(ds2, num_workers=2)  # one loader, as a training loop keeps (persistent workers)
    t_workers = float("inf")
    for e in range(args.epochs):
        ds2.set_epoch(e)
        t_workers = min(t_workers, epoch(loader2)[0])
    del loader2

    # the peer: everything in memory as one tensor, random batches by index
    whole = next(iter(StreamingDataset(path, columns=cols, batch_size=args.rows, shuffle=False)))
    data = torch.cat([whole["observation"], whole["action"], whole["reward"][:, None].float(),
                      whole["is_terminal"][:, None].float()], dim=1)
    del whole
    t_mem = float("inf")
    for e in range(args.epochs):
        perm = torch.from_numpy(np.random.default_rng(e).permutation(args.rows))
        t0 = time.perf_counter()
        for i in range(0, args.rows, bs):
            _ = data[perm[i:i + bs]]
        t_mem = min(t_mem, time.perf_counter() - t0)
    rate = lambda s: args.rows / s  # noqa: E731
    tr = transitions_rows(args.rows, bs)
    rows = [
        {"path": f"{args.rows:,} steps rows (obs, action, reward, is_terminal), shuffled, batch 256: "
                 "in-process",
         "rlarrow": rate(t_ours),
         "peer": rate(t_mem), "unit": "rows/s", "ratio": t_mem / t_ours,
         "note": f"target >= 0.5 of in-memory indexing; peak RSS by epoch {[round(r) for r in rss]} MB"},
        {"path": "same, rlarrow.train.torch.DataLoader with 2 workers", "rlarrow": rate(t_workers),
         "peer": rate(t_mem), "unit": "rows/s", "ratio": t_mem / t_workers,
         "note": f"workers decode in parallel; batches cross processes; {t_ours / t_workers:.2f}x "
                 "in-process (target >= 1)"},
    ]
    rows += tr
    if not args.skip_hf:
        hf = hf_rate(path, min(args.hf_rows, args.rows))
        rows.append({"path": "same, vs Hugging Face datasets streaming the files", "rlarrow": rate(t_ours),
                     "peer": hf, "unit": "rows/s", "ratio": hf / rate(t_ours),
                     "note": f"speedup {rate(t_ours) / hf:.1f}x (target >= 5x); HF on its first "
                             f"{min(args.hf_rows, args.rows):,} rows, tensors as raw bytes"})
    report("torch_stream", rows)


if __name__ == "__main__":
    main()
