"""Streaming transitions into PyTorch: shuffled batches of 256, against an in-memory tensor.

10,000,000 transitions (observation float32[32], action float32[8], reward, done) are
written once into a store under ``benchmarks/data/`` (binary-layout tensors, as
``rlarrow convert`` fixes them). One epoch, batches of 256:

- rlarrow: ``StreamingDataset(..., shuffle=True)`` read in this process, and through
  ``rlarrow.torch.DataLoader`` with 2 workers;
- peer: the same data held in memory as one torch tensor, indexed with a random permutation
  batch by batch (``data[perm[i:i + 256]]``), the ceiling of any loader.

Peak RSS is reported per epoch: it must stay flat.

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
    from rlarrow.tensors import tensor_type

    path = DATA / f"transitions-{rows}"
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
            st.append("steps", rlarrow.schema.build("steps", {
                "run_id": "bench", "episode_id": i // 1000, "step": i % 1000, "env_index": 0,
                "observation": rng.standard_normal((n, 32)).astype(np.float32),
                "action": rng.standard_normal((n, 8)).astype(np.float32),
                "reward": rng.standard_normal(n), "discount": np.ones(n),
                "is_first": i % 1000 == 0, "is_last": np.zeros(n, bool),
                "is_terminal": pa.array(rng.random(n) < 0.001)}))
    return path


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    import torch
    from _report import peak_rss_mb, report

    from rlarrow.torch import DataLoader, StreamingDataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--epochs", type=int, default=2)
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
    t_workers = min(epoch(DataLoader(ds2, num_workers=2))[0] for _ in range(args.epochs))

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
    rows = [
        {"path": f"{args.rows:,} transitions, shuffled, batch 256: in-process", "rlarrow": rate(t_ours),
         "peer": rate(t_mem), "unit": "rows/s", "ratio": t_mem / t_ours,
         "note": f"target >= 0.5 of in-memory indexing; peak RSS by epoch {[round(r) for r in rss]} MB"},
        {"path": "same, rlarrow.torch.DataLoader with 2 workers", "rlarrow": rate(t_workers),
         "peer": rate(t_mem), "unit": "rows/s", "ratio": t_mem / t_workers,
         "note": "workers decode in parallel; batches cross processes"},
    ]
    report("torch_stream", rows)


if __name__ == "__main__":
    main()
