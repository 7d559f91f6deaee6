"""Kill suites for the logger and the converter: SIGKILL at random moments, many times.

After every kill the store opens, ``rlarrow info`` works on it as the kill left it, every
commit the child reported is there, and nothing is partial or duplicated. (The store's own
writers and the recorders have theirs in ``test_kill.py`` and ``test_episodes.py``.) The
children are real processes forked from one server that imported rlarrow once
(``tests/forking.py``), and killed by real SIGKILLs.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from forking import Child, ForkServer

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


#: what the children and ``rlarrow info`` import (some only when first used): the fork server's imports
MODULES = ["numpy", "pyarrow.dataset", "pyarrow.pandas_compat", "numpy.typing", "tqdm.auto",
           "rlarrow.record.logger", "rlarrow.io.memory.importer", "rlarrow.cli.commands"]


def kill(child: Child, rng: random.Random, longest: float, at_least: float = 0.0) -> list[str]:
    child.wait_ready()
    time.sleep(at_least + rng.uniform(0.0, longest))
    return child.kill()


def kill_logger(tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "s.rlarrow"
    reported: set[int] = set()
    with ForkServer(MODULES) as server:
        for _ in range(kills):
            reported.update(int(x) for x in kill(server.start(LOGGER_CHILD, str(path)), rng, 0.5)
                            if x.isdigit())
            server.info_works(path)
            check_points(path, reported)


def check_points(path: Path, reported: set[int]) -> None:
    """Every point the logger reported flushed is there once, with its value."""
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


def memory_keys(path: Path) -> Counter[tuple[str, str]]:
    """(run, snapshot name) -> rows, of every memory snapshot in the store, from three columns."""
    keys: Counter[tuple[str, str]] = Counter()
    with rlarrow.Store.open(path, readonly=True) as st:
        for layout in st.layouts("memory"):
            t = st.read("memory", columns=["run_id", "snapshot_name"], layout=layout.layout)
            keys.update(zip(t["run_id"].to_pylist(), t["snapshot_name"].to_pylist(), strict=True))
    return keys


def check_snapshots(path: Path, made: dict[str, dict[str, np.ndarray]], runs: set[str]) -> None:
    """Each snapshot of ``runs``, read back: whole and exact (each file is one commit)."""
    from rlarrow.io.memory.stored import snapshots

    for run in runs:
        for snap in snapshots(path, run_id=run):
            want = made[snap.name]
            assert set(snap.tensors) == set(want)
            for k, v in want.items():
                assert np.array_equal(snap.tensors[k], v), (snap.name, k)


def kill_converter(tmp_path: Path, kills: int, seed: int) -> None:
    """``rlarrow convert`` of 24 memory exports, killed at a random moment of the convert.

    The kill lands anywhere in an uninterrupted convert's time (measured first, in a child
    forked the same way) or shortly after it; the last one well after it. After each kill
    ``rlarrow info`` works, the runs the kill left are whole (24 snapshots, each exact) or
    absent, and every earlier snapshot is still there with all its rows. Earlier snapshots
    are checked by their keys and row counts, the new ones value for value (reading every
    snapshot after every kill made the loop quadratic); all of them are read value for value
    once more at the end.
    """
    from rlarrow.io.memory.stored import snapshots

    rng = random.Random(seed)
    exports = tmp_path / "memories"
    exports.mkdir()
    made = memory_exports(exports, 24)
    rows = {name: t["states"].shape[0] * t["states"].shape[1] for name, t in made.items()}
    path = tmp_path / "s.rlarrow"
    rlarrow.Store.create(path).close()
    added: list[int] = []
    kept: Counter[tuple[str, str]] = Counter()
    with ForkServer(MODULES) as server:
        start = time.monotonic()  # an uninterrupted convert, to place the kills in its time
        took = server.run(CONVERTER_CHILD, str(tmp_path / "timed.rlarrow"), str(exports))
        assert took[0] == 0, took[1]
        longest = 1.2 * (time.monotonic() - start)
        for i in range(kills):
            # the last kill waits 4.8-6 times the timed convert, so one surely lands after a
            # commit however slow the machine (under a busy CI the rest may all land before it)
            last = i == kills - 1 and kills >= 20
            kill(server.start(CONVERTER_CHILD, str(path), str(exports)), rng, longest,
                 at_least=4 * longest if last else 0.0)
            server.info_works(path)
            with rlarrow.Store.open(path):  # a writer's open recovers
                pass
            assert not list((path / "memory").glob(".tmp-*")), "a temporary file outlived recovery"
            keys = memory_keys(path)
            lost = {k: n for k, n in kept.items() if keys[k] != n}
            assert not lost, f"a kill lost or changed snapshots committed before it: {lost}"
            new = keys - kept
            assert all(n == rows[name] for (_, name), n in new.items()), "a partial snapshot"
            new_runs = {run for run, _ in new}
            for run in new_runs:  # one convert commits all of its files or none of them
                assert sorted(name for r, name in new if r == run) == sorted(made), run
            check_snapshots(path, made, new_runs)
            added.append(len(new))
            kept = keys
    print("snapshots committed per run before its kill:", added)
    if kills >= 20:  # (a few kills may all land before the commit)
        assert 0 in added and 24 in added, f"the kills all landed before or all after the commit: {added}"
    check_snapshots(path, made, {run for run, _ in kept})  # every snapshot, once more, value for value
    # a convert left to finish imports the files once; the next one recognises them all
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", CONVERTER_CHILD, str(path), str(exports)],
                              capture_output=True, text=True, timeout=300, env=ENV)
        assert done.returncode == 0, done.stderr
        assert sum(1 for _ in snapshots(path)) == 24
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
