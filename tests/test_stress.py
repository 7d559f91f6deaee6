"""Kill suites for the logger and the converter: SIGKILL at random moments, many times.

After every kill the store opens, ``rlarrow info`` works on it as the kill left it, every
commit the child reported is there, and nothing is partial or duplicated. (The store's own
writers and the recorders have theirs in ``test_kill.py`` and ``test_episodes.py``.)
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import rlarrow

ENV = {**os.environ, "PYTHONPATH": os.getcwd()}

LOGGER_CHILD = r"""
import sys
from rlarrow.record.logger import ArrowLogger
log = ArrowLogger(sys.argv[1], run_id="run", update_interval=1, flush_seconds=0)
print("ready", flush=True)
for step in range(1_000_000):
    log.log_update_data({"loss": step / 2, "grad_norm": step}, step)  # flushed when it returns
    print(step, flush=True)
"""


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, env=ENV)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def kill(child: subprocess.Popen[str], rng: random.Random, longest: float) -> list[str]:
    time.sleep(rng.uniform(0.0, longest))
    os.kill(child.pid, signal.SIGKILL)
    out, _ = child.communicate()
    return out.split()


def info_works(path: Path) -> None:
    info = subprocess.run([sys.executable, "-m", "rlarrow", "info", str(path)], capture_output=True,
                          text=True, env=ENV)
    assert info.returncode == 0, info.stderr


def kill_logger(tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "s.rlarrow"
    reported: set[int] = set()
    for _ in range(kills):
        child = spawn(LOGGER_CHILD, str(path))
        reported.update(int(x) for x in kill(child, rng, 0.5) if x.isdigit())
        info_works(path)
        with rlarrow.Store.open(path) as st:
            t = st.read("scalars", columns=["tag", "step", "value"])
        for tag in ("update/loss", "update/grad_norm"):
            rows = t.filter(pc.equal(t["tag"], tag))
            steps = rows["step"].to_pylist()
            assert len(steps) == len(set(steps)), f"{tag}: a resumed logger wrote a point twice"
            assert reported <= set(steps), f"{tag}: flushed points lost: {sorted(reported - set(steps))[:5]}"
        loss = t.filter(pc.equal(t["tag"], "update/loss"))
        assert np.array_equal(loss["value"].to_numpy(), loss["step"].to_numpy() / 2)


CONVERTER_CHILD = r"""
import sys
from rlarrow.cli.commands import main
print("ready", flush=True)
main(["convert", *sys.argv[2:], "-o", sys.argv[1], "--num-envs", "2"])
"""


def memory_exports(directory: Path, count: int) -> dict[str, dict[str, np.ndarray]]:
    from rlarrow.io.memory.npz import write_npz

    made = {}
    for i in range(count):
        rng = np.random.default_rng(i)
        tensors = {"states": rng.standard_normal((400, 2, 8)).astype(np.float32),
                   "rewards": rng.standard_normal((400, 2, 1)).astype(np.float32),
                   "terminated": rng.random((400, 2, 1)) < 0.05}
        name = f"26-11-22_00-00-{i:02d}-000000_memory_{i}"
        write_npz(tensors, directory / f"{name}.npz")
        made[name] = tensors
    return made


def kill_converter(tmp_path: Path, kills: int, seed: int) -> None:
    from rlarrow.io.memory.importer import snapshots

    rng = random.Random(seed)
    exports = tmp_path / "memories"
    exports.mkdir()
    made = memory_exports(exports, 24)
    path = tmp_path / "s.rlarrow"
    rlarrow.Store.create(path).close()
    before = 0
    added: list[int] = []
    for _ in range(kills):
        child = spawn(CONVERTER_CHILD, str(path), str(exports))
        kill(child, rng, 0.8)
        info_works(path)
        keyed = list(snapshots(path, with_keys=True))
        got = [snap for snap, _ in keyed]
        assert len(got) >= before, "a kill lost snapshots committed before it"
        per_run = Counter((key[0], snap.name) for snap, key in keyed)
        assert max(per_run.values(), default=1) == 1, "a file imported twice into one run"
        for snap in got:  # each file is one commit: whole and exact, or absent
            want = made[snap.name]
            assert set(snap.tensors) == set(want)
            for k, v in want.items():
                assert np.array_equal(snap.tensors[k], v), (snap.name, k)
        added.append(len(got) - before)
        before = len(got)
        with rlarrow.Store.open(path) as st:  # a writer's open recovers: no temporary file is left
            assert not list((st.path / "memory").glob(".tmp-*"))
    # one convert commits all of its files or none of them, wherever the kill landed
    assert set(added) <= {0, 24}, added
    print("snapshots committed per run before its kill:", added)
    # a convert left to finish imports the files once; the next one recognises them all
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CONVERTER_CHILD, str(path), str(exports)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert len(list(snapshots(path))) == 24
    assert "imported before" in done.stdout


def test_killed_logger_keeps_every_flushed_point(tmp_path):
    kill_logger(tmp_path, kills=3, seed=0)


def test_killed_converter_leaves_whole_snapshots(tmp_path):
    kill_converter(tmp_path, kills=4, seed=0)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_logger_killed_fifty_times(tmp_path):
    kill_logger(tmp_path, kills=50, seed=1)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_converter_killed_fifty_times(tmp_path):
    kill_converter(tmp_path, kills=50, seed=1)
