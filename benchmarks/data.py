"""Data generators for the benchmarks (kept apart from the timing code)."""

from __future__ import annotations

import numpy as np


def steps_columns(run_id: str, n: int, *, frame: tuple[int, int] = (84, 84), seed: int = 0) -> dict:
    """`n` steps of 10-step episodes with uint8 frames and a float32 state, RLDS aligned."""
    rng = np.random.default_rng(seed)
    step = np.arange(n) % 10
    return {
        "run_id": run_id,
        "episode_id": np.arange(n) // 10,
        "step": step,
        "env_index": 0,
        "observation": {
            "frame": rng.integers(0, 256, (n, *frame), dtype=np.uint8),
            "state": rng.standard_normal((n, 8)).astype(np.float32),
        },
        "action": rng.integers(0, 4, n),
        "reward": rng.standard_normal(n),
        "discount": np.ones(n),
        "is_first": step == 0,
        "is_last": step == 9,
        "is_terminal": step == 9,
    }
