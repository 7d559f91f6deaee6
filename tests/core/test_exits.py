"""Nothing recorded is lost when a script exits, is stopped or is interrupted without close().

Each test runs a real script (tests/exit_scripts.py) in a subprocess, the way a user's
training script runs: it records through rlarrow and never calls ``close()``. The store must
then hold every point and episode the script made (rlarrow.core.exits).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

import rlarrow
from rlarrow.core import exits

HAS = {m: importlib.util.find_spec(m) is not None
       for m in ("torch", "gymnasium", "dm_env", "skrl", "tianshou")}

SCRIPT = Path(__file__).resolve().parents[1] / "exit_scripts.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                    os.environ.get("PYTHONPATH", "")])}
needs_gym = pytest.mark.skipif(not HAS["gymnasium"], reason="needs gymnasium (pip install rlarrow[gym])")
needs_dm_env = pytest.mark.skipif(not HAS["dm_env"], reason="needs dm-env (pip install rlarrow[dm-env])")


def run(scenario: str, store: Path, timeout: float = 120) -> Any:
    proc = subprocess.run([sys.executable, str(SCRIPT), scenario, str(store)], capture_output=True, text=True,
                          env=ENV, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rlarrow: at exit" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["made"]


@needs_dm_env
def test_envlogger_never_closed_keeps_every_episode(tmp_path: Path) -> None:
    made = run("envlogger", tmp_path / "s.rlarrow")
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        episodes = st.read("episodes")
        assert episodes.num_rows == made["episodes"] == 10
        assert st.row_count("steps") == made["steps"]
        assert not any(episodes["partial_end"].to_pylist())
        assert episodes["return"].to_pylist() == [3.5] * 10  # 7 rewards of 0.5


@needs_gym
def test_vector_recorder_never_closed_keeps_every_finished_episode(tmp_path: Path) -> None:
    made = run("vector", tmp_path / "s.rlarrow")
    assert len(made) > 50
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        eps = st.read("episodes")
    done = eps.filter(pc.invert(eps["partial_end"]))
    ours = sorted(zip(done["env_index"].to_pylist(), done["return"].to_pylist(),
                      (n - 1 for n in done["num_steps"].to_pylist()), strict=True))
    # what gymnasium's RecordEpisodeStatistics reported, episode for episode
    assert ours == sorted((e, r, n) for e, r, n in made)
    assert eps.num_rows == len(made) + 4  # and each env's running episode, cut at exit (partial)


def test_table_writer_never_closed_commits_at_exit(tmp_path: Path) -> None:
    assert run("table-writer", tmp_path / "s.rlarrow") == 250
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        assert st.read("scalars")["step"].to_pylist() == list(range(250))


@pytest.mark.skipif(not HAS["torch"], reason="needs torch (pip install rlarrow[torch])")
def test_replay_memory_exports_its_last_rows_at_exit(tmp_path: Path) -> None:
    from rlarrow.io.memory.importer import import_memory, read_memory

    run("memory", tmp_path)
    files = sorted((tmp_path / "memories").glob("*.parquet"))
    assert len(files) == 3  # two fills, then the rows of the unfilled third cycle, at exit
    last = read_memory(files[-1])
    assert (last.is_full, last.write_pointer) == (True, 50)
    # the rows the pointer says are new are the last 50 steps the script added
    assert last.tensors["states"][:50, :, 0].tolist() == [[float(t)] * 2 for t in range(200, 250)]
    # one memory's exports are one time series: every step once, 25 whole episodes of 10 per env
    import_memory([tmp_path / "memories"], tmp_path / "s.rlarrow", episodes=True, autoreset="same-step")
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        eps, steps = st.read("episodes"), st.read("steps", columns=["env_index", "observation", "is_last"])
    assert eps.num_rows == 50 and not any(eps["partial_end"].to_pylist())
    # (a full first export could follow a fill nobody exported: each env's first start is unknown)
    assert sum(eps["partial_start"].to_pylist()) == 2
    assert eps["num_steps"].to_pylist() == [11] * 50 and eps["return"].to_pylist() == [10.0] * 50
    for env in (0, 1):
        rows = steps.filter(pc.and_(pc.equal(steps["env_index"], env), pc.invert(steps["is_last"])))
        assert [o[0] for o in rows["observation"].to_pylist()] == list(range(250))


@pytest.mark.skipif(not (HAS["skrl"] and HAS["torch"] and HAS["gymnasium"]),
                    reason="needs skrl 2, torch and gymnasium (test-only peers)")
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_skrl_with_the_readme_writer_swap_keeps_every_point(tmp_path: Path) -> None:
    from rlarrow.io.tfevents import read_tfevents

    made = run("skrl-writer", tmp_path / "s.rlarrow", timeout=280)
    assert len(made) > 100
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        t = st.read("scalars")
    ours = sorted(zip(t["tag"].to_pylist(), t["step"].to_pylist(), strict=True))
    assert ours == sorted((tag, step) for tag, step in made)  # the last interval's points too
    mirror = read_tfevents(tmp_path / "mirror")  # and the event files beside it
    assert mirror.num_rows == len(made)


@pytest.mark.skipif(not (HAS["tianshou"] and HAS["torch"] and HAS["gymnasium"]),
                    reason="needs tianshou 2, torch and gymnasium (test-only peers)")
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tianshou_without_finalize_then_resumed_keeps_every_epoch(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "tianshou_train.py"
    store = tmp_path / "s.rlarrow"
    for epochs, mode in ((2, "--no-finalize"), (3, "--resume-no-finalize")):
        proc = subprocess.run([sys.executable, str(script), str(store), mode, str(epochs)],
                              capture_output=True, text=True, env=ENV, timeout=280)
        assert proc.returncode == 0, proc.stderr[-3000:]
    with rlarrow.Store.open(store) as st:
        t = st.read("scalars")
    pairs = list(zip(t["tag"].to_pylist(), t["step"].to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs)), "a resumed run logged a point twice"
    assert sorted(s for tag, s in pairs if tag == "info/epoch") == [1, 2, 3]
    tests = [tag for tag, _ in pairs if tag == "test/returns_stat/mean"]
    assert len(tests) == 4  # tianshou tests before training, then after each epoch: the last one's too
    infos = {tag for tag, _ in pairs if tag.startswith("info/")}
    assert all(sum(t == tag for t, _ in pairs) == 3 for tag in infos)  # every epoch's info/*


def _start(scenario: str, store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SCRIPT), scenario, str(store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def _lines_until(proc: subprocess.Popen[str], count: int) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    lines = []
    while len(lines) < count:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        lines.append(json.loads(line))
    return lines


@needs_dm_env
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stopped_recorder_commits_every_finished_episode(tmp_path: Path, sig: int) -> None:
    store = tmp_path / "s.rlarrow"
    with _start("envlogger-forever", store) as proc:
        _lines_until(proc, 20)  # no flush policy: nothing was committed while it ran
        proc.send_signal(sig)
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()  # (through the buffer readline filled)
        proc.wait(timeout=60)
    # inside rlarrow's code a clean SystemExit (128 + N), elsewhere the signal's own ending
    assert proc.returncode in ({128 + sig, -sig} if sig != signal.SIGINT else {1, -sig}), err[-2000:]
    assert "rlarrow: at exit" not in err
    finished = 20 + sum('"finished"' in line for line in out.splitlines())
    with rlarrow.Store.open(store) as st:
        eps = st.read("episodes")
        steps = st.read("steps", columns=["episode_id", "step", "action", "is_last"])
    whole = eps.filter(pc.invert(eps["partial_end"]))
    assert whole.num_rows in (finished, finished + 1)  # (one may end between the print and the signal)
    assert whole["episode_id"].to_pylist() == list(range(whole.num_rows))
    assert whole["return"].to_pylist() == [3.5] * whole.num_rows
    assert eps.num_rows - whole.num_rows <= 1  # the running episode, cut where the signal came
    # the columns agree: every episode's rows are 0..n-1, its last has no action
    assert steps.num_rows == sum(eps["num_steps"].to_pylist())
    ids = np.asarray(steps["episode_id"])
    for ep in eps.to_pylist():
        rows = steps.filter(pc.equal(steps["episode_id"], ep["episode_id"]))
        assert rows["step"].to_pylist() == list(range(ep["num_steps"]))
        assert rows["action"].to_pylist()[-1] is None
    assert len(np.unique(ids)) == eps.num_rows


@needs_dm_env
def test_a_programs_own_stop_handler_is_left_in_place(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "own-handler", str(tmp_path / "s.rlarrow")],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[0]) == {"kept": True}
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        assert st.row_count("episodes") == 1  # and it still commits at exit


def test_close_all_closes_newest_first_and_reports_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exits, "_open", {})  # (a registry of its own: not what other tests left open)
    closed: list[str] = []

    class Thing:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail
            exits.track(self, self.close)

        def close(self) -> None:
            exits.untrack(self)
            closed.append(self.name)
            if self.fail:
                raise OSError(28, "No space left on device")

    writer, logger, broken = Thing("writer"), Thing("logger"), Thing("broken", fail=True)
    failed = exits.close_all()
    assert closed == ["broken", "logger", "writer"]
    assert [(obj, type(exc)) for obj, exc in failed] == [(broken, OSError)]
    assert not exits.is_tracked(writer) and not exits.is_tracked(logger)


def test_a_closed_writer_is_forgotten(tmp_path: Path) -> None:
    store = rlarrow.Store.create(tmp_path / "s")
    w = store.writer("scalars")
    assert exits.is_tracked(w)
    w.write({"run_id": "r", "scope": "train", "tag": "t", "step": [1], "value": [1.0]})
    w.close()
    w.close()  # harmless
    assert not exits.is_tracked(w)
    with store.transaction():
        inner = store.writer("scalars")
        assert not exits.is_tracked(inner)  # the transaction commits or drops it, never the exit hook
    time.sleep(0)
    assert store.row_count("scalars") == 1


@needs_dm_env
def test_a_stop_signal_ends_a_program_that_catches_everything(tmp_path: Path) -> None:
    """pytest, a notebook or a task loop catch SystemExit: the signal must still end the process."""
    store = tmp_path / "s.rlarrow"
    with _start("catch-all", store) as proc:
        _lines_until(proc, 1)
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == -signal.SIGTERM, err[-2000:]
    with rlarrow.Store.open(store) as st:
        assert st.row_count("episodes") == 3  # committed before it ended


@needs_dm_env
def test_a_forked_multiprocessing_child_commits_what_it_recorded(tmp_path: Path) -> None:
    assert run("forked", tmp_path / "s.rlarrow") == 0
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        assert st.read("episodes")["run_id"].to_pylist() == ["child"] * 4


@pytest.mark.skipif(not HAS["torch"], reason="needs torch (pip install rlarrow[torch])")
def test_a_dropped_replay_memory_is_freed(tmp_path: Path) -> None:
    import gc
    import weakref

    import torch

    from rlarrow.io.memory.importer import read_memory
    from rlarrow.record.replay import RandomMemory

    memory = RandomMemory(memory_size=8, num_envs=1, device="cpu", export=True, export_format="parquet",
                          export_directory=tmp_path)
    memory.create_tensor("states", 2)
    memory.add_samples(states=torch.zeros(1, 2))
    assert exits.is_tracked(memory)
    gone = weakref.ref(memory)
    del memory
    gc.collect()
    assert gone() is None  # an agent per trial of a sweep does not keep every memory alive
    [export] = (tmp_path / "memories").glob("*.parquet")  # and its last rows were exported as it went
    assert read_memory(export).write_pointer == 1
