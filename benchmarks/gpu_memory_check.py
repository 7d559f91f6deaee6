"""rlarrow.record.replay on a GPU: tensors stay on the device, sampling gathers only the batch.

Run on a CUDA machine: ``python benchmarks/gpu_memory_check.py``. It fills a 100,000 x 16
memory on ``cuda:0``, samples 4096-row batches, and checks that the extra GPU memory a
sample takes is a small fraction of the buffer (no whole-buffer copy).
"""

from __future__ import annotations

import time

import torch

from rlarrow.record.replay import RandomMemory


def main() -> None:
    m = RandomMemory(memory_size=100_000, num_envs=16, device="cuda:0")
    for name, size in (("states", 32), ("actions", 8), ("rewards", 1)):
        m.create_tensor(name, size)
    m.create_tensor("terminated", 1, dtype=torch.bool)
    for _ in range(1000):
        m.add_samples(states=torch.randn(16, 32, device="cuda"), actions=torch.randn(16, 8, device="cuda"),
                      rewards=torch.randn(16, 1, device="cuda"),
                      terminated=torch.zeros(16, 1, dtype=torch.bool, device="cuda"))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(200):
        [[states, _actions, _rewards]] = m.sample(["states", "actions", "rewards"], batch_size=4096)
    torch.cuda.synchronize()
    per_sample = (time.perf_counter() - t0) / 200
    peak = torch.cuda.max_memory_allocated() - base
    buffer = sum(x.numel() * x.element_size() for x in m.tensors.values())
    print(f"device {states.device}, sample of 4096 rows: {per_sample * 1e6:.0f} us; "
          f"peak extra GPU memory {peak / 1e6:.1f} MB vs buffer {buffer / 1e6:.0f} MB")
    assert states.device.type == "cuda" and peak < buffer / 10
    snap = m.snapshot()
    print("snapshot on the cpu:", snap, "write pointer", snap.write_pointer, "full", snap.is_full)


if __name__ == "__main__":
    main()
