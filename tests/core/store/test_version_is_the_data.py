"""A version is the data: the version a reader reports reads exactly the rows it read.

Another process appends (and compacts) in a loop while datasets are opened here; each
dataset's ``version`` must read again exactly the rows it yielded. Time travel to every
committed version, including versions whose Delta commits are still waiting in the
store's backlog (``delta_due``), must read exactly what was committed then.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import rlarrow
from rlarrow.core.store.delta import DeltaLog

torch = pytest.importorskip("torch", reason="StreamingDataset needs torch (the train extra)")

from rlarrow.train.torch import StreamingDataset  # noqa: E402

_APPENDER = textwrap.dedent("""
    import os, sys, numpy as np, rlarrow
    path, stop = sys.argv[1], sys.argv[2]
    store = rlarrow.Store.open(path, auto_compact=8)  # (compactions too: same rows, new files)
    i = 1
    while not os.path.exists(stop) and i < 2000:
        n = 4
        store.append("steps", {
            "run_id": "w", "episode_id": i, "step": np.arange(n), "env_index": 0,
            "observation": np.full((n, 2), i, np.float32), "action": [np.int64(i)] * (n - 1) + [None],
            "reward": [float(i)] * (n - 1) + [None], "discount": [1.0] * (n - 1) + [None],
            "is_first": [True] + [False] * (n - 1), "is_last": [False] * (n - 1) + [True],
            "is_terminal": [False] * (n - 1) + [True]})
        i += 1
""")


def _episode(i: int, n: int = 4) -> dict:
    return {"run_id": "w", "episode_id": i, "step": np.arange(n), "env_index": 0,
            "observation": np.full((n, 2), i, np.float32), "action": [np.int64(i)] * (n - 1) + [None],
            "reward": [float(i)] * (n - 1) + [None], "discount": [1.0] * (n - 1) + [None],
            "is_first": [True] + [False] * (n - 1), "is_last": [False] * (n - 1) + [True],
            "is_terminal": [False] * (n - 1) + [True]}


def _rows(ds: StreamingDataset) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for batch in ds:
        out += list(zip(batch["episode_id"].tolist(), batch["step"].tolist(), strict=True))
    return out


def test_a_datasets_version_reads_exactly_its_rows_while_another_process_appends(tmp_path):
    path = tmp_path / "s"
    rlarrow.Store.create(path).append("steps", _episode(0))
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", _APPENDER, os.fspath(path), os.fspath(stop)],
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                              stderr=subprocess.PIPE)
    try:
        seen_versions: set[int] = set()
        deadline = time.monotonic() + 6
        checked = 0
        while time.monotonic() < deadline and (checked < 40 or len(seen_versions) < 5):
            ds = StreamingDataset(path, columns=["episode_id", "step"], shuffle=False, batch_size=1 << 16)
            rows = _rows(ds)
            assert ds.version is not None
            again = StreamingDataset(path, columns=["episode_id", "step"], shuffle=False, batch_size=1 << 16,
                                     version=ds.version)
            assert again.version == ds.version
            assert _rows(again) == rows, f"version {ds.version} does not read the rows the dataset yielded"
            at = rlarrow.Store.open(path, version=ds.version)
            assert at.row_count("steps") == len(rows)
            seen_versions.add(ds.version)
            checked += 1
    finally:
        stop.touch()
        _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err.decode()
    assert len(seen_versions) >= 3, "the appender made no versions while the datasets were opened"


def _ids(store: rlarrow.Store) -> list[int]:
    return store.read("steps", columns=["episode_id"]).column("episode_id").to_pylist()


def _history(path) -> dict[int, list[int]]:
    """Commit appends (a compaction among them); each store version -> its episode ids in order."""
    store = rlarrow.Store.create(path, auto_compact=None)
    committed = {store.version: []}
    for i in range(4):
        store.append("steps", _episode(i))
        committed[store.version] = _ids(store)
    store.compact("steps")
    committed[store.version] = _ids(store)
    return committed


def _read_at(path, version: int) -> list[int]:
    return rlarrow.Store.open(path, version=version).read("steps", columns=["episode_id"]) \
        .column("episode_id").to_pylist()


def test_every_committed_version_reads_what_was_committed(tmp_path):
    path = tmp_path / "s"
    committed = _history(path)
    for version, ids in committed.items():
        assert _read_at(path, version) == ids, version
    latest = max(committed)
    with pytest.raises(rlarrow.NotFoundError, match="no version"):
        rlarrow.Store.open(path, version=latest + 1)


def test_a_version_waiting_in_the_delta_backlog_reads_that_version(tmp_path, monkeypatch):
    """Versions whose Delta commits could not be written yet (``delta_due``) read as committed."""
    path = tmp_path / "s"
    committed = _history(path)
    store = rlarrow.Store.open(path, auto_compact=None)
    real = DeltaLog._write_new

    def full(self, version, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DeltaLog, "_write_new", full)
    for i in range(4, 7):
        with pytest.warns(rlarrow.RLArrowWarning, match="Delta log"):
            store.append("steps", _episode(i))
        committed[store.version] = _ids(store)
    due = rlarrow.Store.open(path, readonly=True).manifest()["delta_due"]
    assert len([d for d in due if d["table"] == "steps"]) == 3  # three versions in the backlog
    for version, ids in committed.items():
        assert _read_at(path, version) == ids, version
    sd = StreamingDataset(path, columns=["episode_id", "step"], shuffle=False, version=max(committed) - 1)
    assert sorted({e for e, _ in _rows(sd)}) == sorted(set(committed[max(committed) - 1]))
    monkeypatch.setattr(DeltaLog, "_write_new", real)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rlarrow.RLArrowWarning)
        rlarrow.Store.open(path)  # the backlog is written now; every version still reads the same
    for version, ids in committed.items():
        assert _read_at(path, version) == ids, version
