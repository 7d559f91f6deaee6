"""Store.transaction: everything written inside commits together, or nothing does."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import rlarrow
from rlarrow.core.errors import SchemaMismatchError
from rlarrow.core.store import MANIFEST_NAME


def scalars(run: str, n: int = 5) -> dict:
    return {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(n), "value": np.arange(n) * 1.0}


def memory(run: str, width: int = 3) -> dict:
    return {"run_id": run, "snapshot_id": 0, "memory_index": np.arange(4), "env_index": 0, "memory_size": 4,
            "num_envs": 1, "states": np.ones((4, width), np.float32)}


def committed(path) -> dict:
    """What a manifest commits: tables (files, rows, schemas), retired files, the journal."""
    m = json.loads((path / MANIFEST_NAME).read_text())
    return {k: m[k] for k in ("tables", "retired", "pending")}


def listed(path) -> dict[str, int]:
    m = json.loads((path / MANIFEST_NAME).read_text())
    return {t: len(e["files"]) for t, e in m["tables"].items()}


def test_inside_the_block_own_reads_see_it_others_do_not(store):
    with store.transaction():
        run = store.add_run(source="user", name="a")
        store.append("scalars", scalars(run))
        store.append("memory", memory(run))
        assert store.has_run(run)
        assert store.row_count("scalars") == 5 and store.read("memory").num_rows == 4
        assert store.schema("memory").field("states").type == pa_fixed(3)
        other = rlarrow.Store.open(store.path, readonly=True)
        assert {t: other.row_count(t) for t in ("runs", "scalars", "memory")} == dict.fromkeys(
            ("runs", "scalars", "memory"), 0)
        # (a schema the block fixed is visible; a block that fails un-fixes it)
    after = rlarrow.Store.open(store.path)
    assert (after.row_count("runs"), after.row_count("scalars"), after.row_count("memory")) == (1, 5, 4)
    assert json.loads((store.path / MANIFEST_NAME).read_text())["pending"] is None


def pa_fixed(width: int):
    import pyarrow as pa

    return pa.list_(pa.float32(), width)


def test_an_exception_leaves_nothing_not_even_a_schema(store):
    before = committed(store.path)

    def failing_import():
        with store.transaction():
            run = store.add_run(source="user")
            store.declare("memory", {"states": pa_fixed(3)})
            store.append("memory", memory(run))
            with store.writer("scalars") as w:
                w.write(scalars(run))
            raise RuntimeError("the import failed half-way")

    with pytest.raises(RuntimeError):
        failing_import()
    assert committed(store.path) == before
    store.refresh()
    assert store.schema("memory") is None
    hidden = [p for t in ("runs", "memory", "scalars") for p in (store.path / t).iterdir()]
    assert hidden == []
    store.append("memory", memory("r", width=5))  # nothing fixed the old width
    assert store.schema("memory").field("states").type == pa_fixed(5)


def test_a_clash_inside_the_block_is_refused_at_once(store):
    store.append("memory", memory("r", width=3))
    with pytest.raises(SchemaMismatchError), store.transaction():
        store.append("memory", memory("r", width=4))  # one run, one layout
    assert store.row_count("memory") == 4


def test_open_writers_are_committed_with_the_block(store):
    with store.transaction():
        w = store.writer("scalars")
        w.write(scalars("r"))
    assert rlarrow.Store.open(store.path).row_count("scalars") == 5


def test_a_nested_block_joins_the_outer_one(store):
    def nested():
        with store.transaction():
            with store.transaction():
                store.append("scalars", scalars("r"))
            assert store.row_count("scalars") == 5
            raise KeyError("outer fails")

    with pytest.raises(KeyError):
        nested()
    assert store.row_count("scalars") == 0


CHILD = r"""
import sys, numpy as np, rlarrow
store = rlarrow.Store.open(sys.argv[1], auto_compact=None)
seq = int(sys.argv[2])
print("ready", flush=True)
while True:
    with store.transaction():
        run = store.add_run(source="user", run_id=f"t{seq}")
        store.append("scalars", {"run_id": run, "scope": "train", "tag": "x", "step": np.arange(30),
                                 "value": np.full(30, float(seq))}, threads=3)
        store.append("memory", {"run_id": run, "snapshot_id": 0, "memory_index": np.arange(4), "env_index": 0,
                                "memory_size": 4, "num_envs": 1, "states": np.ones((4, 3), np.float32)})
        store.append_together({"episodes": {"run_id": run, "episode_id": [0], "num_steps": [3],
            "env_index": 0, "terminated": True, "truncated": False, "partial_start": False,
            "partial_end": False}})
    print(seq, flush=True)
    seq += 1
"""


@pytest.mark.slow
def test_a_kill_at_any_moment_leaves_each_transaction_whole_or_absent(tmp_path):
    import rlarrow.core.store

    rng = random.Random(7)
    path = tmp_path / "store"
    rlarrow.Store.create(path)
    committed: set[int] = set()
    seq = waited = 0
    for _ in range(25):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(seq)], stdout=subprocess.PIPE,
                                 text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        first = ""
        if rng.random() < 0.8:
            # Most kills land after the first commit, at a random moment of a later one: the child's first
            # transaction also pays its imports (pyarrow.dataset pulls in pandas, ~0.3 s), which on a
            # loaded machine outlasts any fixed delay and left too few commits to test.
            first = child.stdout.readline()
            waited += 1
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        committed.update(int(x) for x in (first + out).split() if x.isdigit())
        for readonly in (True, False):  # a reader before recovery, then a writer's recovery
            st = rlarrow.Store.open(path, readonly=readonly)
            runs = set(st.read("runs", columns=["run_id"]).column("run_id").to_pylist())
            for table, per_run in (("scalars", 30), ("memory", 4), ("episodes", 1)):
                ids = st.read(table, columns=["run_id"]).column("run_id").to_pylist()
                assert set(ids) == runs, (table, set(ids) ^ runs)
                assert all(ids.count(r) == per_run for r in runs)
            assert {f"t{s}" for s in committed} <= runs
        seq = max([int(r[1:]) for r in runs], default=-1) + 1
        assert rlarrow.core.store.Store.open(path).manifest()["pending"] is None
    assert len(committed) >= waited > 10  # the kills fell among commits, not only before the first
