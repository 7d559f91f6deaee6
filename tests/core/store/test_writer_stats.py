"""A writer's statistics run beside its Parquet encoding: the same rows, and its errors are the writer's."""

from __future__ import annotations

import numpy as np
import pytest

import rlarrow
from rlarrow.core import step_stats
from rlarrow.core.store import writer as writer_module


def _steps(rows: int, run: str = "r") -> dict:
    rng = np.random.default_rng(3)
    ends = np.zeros(rows, bool)
    ends[999::1000] = True
    return {"run_id": run, "episode_id": np.arange(rows) // 1000, "step": np.arange(rows) % 1000,
            "env_index": 0, "observation": rng.standard_normal((rows, 17)).astype(np.float32),
            "action": rng.uniform(-1, 1, (rows, 6)).astype(np.float32), "reward": rng.standard_normal(rows),
            "is_first": np.arange(rows) % 1000 == 0, "is_last": ends, "is_terminal": ends}


def _written(path, monkeypatch, beside_bytes: int):
    monkeypatch.setattr(writer_module, "BESIDE_BYTES", beside_bytes)  # (a spill here is about 1 MiB)
    threads = []
    start = writer_module.threading.Thread.start

    def counted(self):
        threads.append(self.name)
        start(self)

    monkeypatch.setattr(writer_module.threading.Thread, "start", counted)
    store = rlarrow.Store.create(path)
    rows = _steps(20_000)
    with store.writer("steps", row_group_bytes=1 << 20) as w:
        for lo in range(0, 20_000, 5_000):
            w.write({k: (v[lo:lo + 5_000] if isinstance(v, np.ndarray) else v) for k, v in rows.items()})
    return store, [t for t in threads if t == "rlarrow-stats"]


def test_statistics_beside_the_encoding_are_the_serial_ones(tmp_path, monkeypatch):
    beside, threads = _written(tmp_path / "beside", monkeypatch, 1 << 18)
    serial, none = _written(tmp_path / "serial", monkeypatch, 1 << 40)
    assert threads and not none  # the threads ran in one, not in the other
    # (the block is the file's name; KLL sketches compact at random, so two runs' bytes differ)
    a = beside.read("stats").drop_columns(["block", "sketches"]).to_pylist()
    b = serial.read("stats").drop_columns(["block", "sketches"]).to_pylist()
    assert len(a) > 20 and sorted(map(repr, a)) == sorted(map(repr, b))
    sketches = [s.read("stats").column("sketches") for s in (beside, serial)]
    assert sketches[0].null_count == sketches[1].null_count < len(sketches[0])
    assert beside.read("steps").equals(serial.read("steps"))


def test_a_failure_of_the_statistics_is_the_writers_and_commits_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "BESIDE_BYTES", 1 << 18)

    def broken(self, data):
        raise ValueError("statistics failed")

    monkeypatch.setattr(step_stats.StepStatsBuilder, "add", broken)
    store = rlarrow.Store.create(tmp_path / "s")
    w = store.writer("steps", row_group_bytes=1 << 20)
    with pytest.raises(ValueError, match="statistics failed"):
        w.write(_steps(20_000))  # the spill's statistics fail in their thread
    w.abort()
    assert rlarrow.Store.open(store.path).row_count("steps") == 0
