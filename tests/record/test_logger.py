"""ArrowLogger: tianshou's logger interface on the scalars table."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import FIXTURES

import rlarrow
from rlarrow.io.tfevents import read_tfevents
from rlarrow.record.logger import ArrowLogger, DataScope, LazyLogger, LoggedSeries

HAS_TIANSHOU = all(importlib.util.find_spec(m) is not None for m in ("tianshou", "torch"))
needs_tianshou = pytest.mark.skipif(not HAS_TIANSHOU, reason="needs tianshou 2 and torch (test-only peers)")


def calls(logger) -> None:
    """One sequence of logger calls, as a trainer makes them (nested stats, arrays, None)."""
    for step in range(0, 5000, 250):
        logger.log_training_data({"returns_stat": {"mean": step / 10, "std": np.float32(0.5)},
                                  "returns": np.arange(3.0), "n_collected_steps": 250, "none": None}, step)
        logger.log_update_data({"loss": {"actor": 1.0 / (step + 1), "critic": np.float64(step)}}, step // 10)
    for epoch in (1, 2, 3):
        logger.log_test_data({"returns_stat": {"mean": float(epoch)}}, epoch * 1000)
        logger.log_info_data({"best_reward": 10.0 * epoch, "epoch": epoch}, epoch)


def test_data_scope_values_are_tianshous_prefixes() -> None:
    assert [s.value for s in DataScope] == ["training", "test", "update", "info"]
    assert DataScope.TRAIN is DataScope.TRAINING
    assert [s.scope for s in DataScope] == ["train", "test", "update", "info"]


@needs_tianshou
def test_same_points_as_tianshous_tensorboard_logger(tmp_path: Path) -> None:
    """Same calls, same tags, steps and values as tianshou's own logger writes (read back)."""
    from tianshou.utils.logger.tensorboard import TensorboardLogger
    from torch.utils.tensorboard import SummaryWriter

    theirs = TensorboardLogger(SummaryWriter(str(tmp_path / "tb")), training_interval=500, update_interval=50)
    calls(theirs)
    theirs.finalize()
    ours = ArrowLogger(tmp_path / "s.rlarrow", run_id="r", training_interval=500, update_interval=50)
    calls(ours)
    ours.finalize()
    want = read_tfevents(tmp_path / "tb")
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        got = st.read("scalars")
    key = [("tag", "ascending"), ("step", "ascending")]
    got, want = got.sort_by(key), want.sort_by(key)
    assert got.select(["tag", "step"]).to_pylist() == want.select(["tag", "step"]).to_pylist()
    assert "training/returns" not in got["tag"].to_pylist()  # arrays excluded, as tianshou does
    # tianshou stores float32 simple_values; ours keep the float64/int originals
    assert np.array_equal(got["value"].to_numpy().astype(np.float32), want["value"].to_numpy())
    assert theirs.prepare_dict_for_logging({"a": {"b": 1, "c": np.ones(2)}, "d": 2.0}) == \
        ours.prepare_dict_for_logging({"a": {"b": 1, "c": np.ones(2)}, "d": 2.0})


def test_values_keep_their_types_and_the_interval_logic(tmp_path: Path) -> None:
    with ArrowLogger(tmp_path / "s.rlarrow", run_id="r", train_interval=1000) as log:
        assert log.training_interval == 1000
        log.log_train_data({"x": 0}, 0)  # tianshou's rule: 0 - (-1) < 1000, dropped
        log.log_train_data({"x": 2**60 + 1}, 999)
        log.log_train_data({"x": 1}, 1000)  # inside the interval: dropped
        log.log_train_data({"x": np.float32(0.1)}, 1999)
        log.log_info_data({"flag": True}, 1)
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        t = st.read("scalars").to_pylist()
    x = [r for r in t if r["tag"] == "training/x"]
    assert [r["step"] for r in x] == [999, 1999]
    assert x[0]["value_int"] == 2**60 + 1 and x[0]["dtype"] == "int64"
    assert x[1]["value"] == float(np.float32(0.1)) and x[1]["dtype"] == "float32"
    assert {r["scope"] for r in t} == {"train", "info"}
    assert all(r["encoding"] == "logger" for r in t)


def test_restore_data_and_resume_without_duplicates(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    log = ArrowLogger(store, run_id="r", training_interval=1)
    for step in range(1, 6):
        log.log_training_data({"loss": 1.0}, step * 100)
        if step == 3:
            log.save_data(1, 300, 30)
    log.finalize()  # a crash after step 500: steps 400, 500 were logged after the checkpoint
    log = ArrowLogger(store, run_id="r", training_interval=1)
    assert log.restore_data() == (1, 300, 30)
    assert log.last_log_training_step == 300
    for step in range(4, 8):  # the trainer redoes 400 and 500
        log.log_training_data({"loss": 2.0}, step * 100)
    log.finalize()
    with rlarrow.Store.open(store) as st:
        t = st.read("scalars", filter=pc.field("tag") == "training/loss")
    assert sorted(t["step"].to_pylist()) == [100, 200, 300, 400, 500, 600, 700]
    assert LazyLogger().restore_data() == (0, 0, 0)


def test_nothing_is_sampled_and_steps_are_kept(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    with ArrowLogger(store, run_id="r", update_interval=1) as log:
        for step in range(15_000):  # TensorBoard's reservoir keeps 10,000 of these
            log.log_update_data({"loss": float(step)}, step)
    data = ArrowLogger.restore_logged_data(store)
    loss = data["update"]["loss"]
    assert isinstance(loss, LoggedSeries) and isinstance(loss, np.ndarray)
    assert len(loss) == 15_000 and np.array_equal(loss.steps, np.arange(15_000))
    assert np.array_equal(np.asarray(loss), np.arange(15_000.0))


def test_tfevents_mirror_is_read_by_tensorboard(tmp_path: Path) -> None:
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                             reason="tensorboard (test-only peer) reads the mirror")
    with ArrowLogger(tmp_path / "s.rlarrow", tfevents_dir=tmp_path / "tb", test_interval=1) as log:
        log.log_test_data({"returns_stat": {"mean": 0.1}}, 1000)
    acc = ea.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"test/env_step", "test/returns_stat/mean"}
    assert acc.Tags()["tensors"] == []
    (mean,) = acc.Scalars("test/returns_stat/mean")
    assert mean.step == 1000 and mean.value == float(np.float32(0.1))
    exact = {r["tag"]: r for r in read_tfevents(tmp_path / "tb").to_pylist()}  # rlarrow's reader: exact
    assert exact["test/returns_stat/mean"]["value"] == 0.1
    assert exact["test/env_step"]["value_int"] == 1000 and exact["test/env_step"]["dtype"] == "int64"
    assert {r["encoding"] for r in exact.values()} == {"logger"}


def test_restore_logged_data_reads_tianshou_logs_with_tianshous_structure() -> None:
    layout = json.loads((FIXTURES / "tfevents" / "LAYOUT.json").read_text())["tianshou"]
    data = ArrowLogger.restore_logged_data(FIXTURES / "tfevents" / "tianshou")

    def shape(d):
        return {k: shape(v) if isinstance(v, dict) else f"ndarray[{len(v)}] float64" for k, v in d.items()}

    assert shape(data) == layout["restore_logged_data_structure"]
    assert data["training"]["env_step"].steps.tolist() == list(range(100, 3001, 100))


def test_a_killed_logger_keeps_what_it_flushed(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    code = textwrap.dedent(f"""
        import os
        from rlarrow.record.logger import ArrowLogger
        log = ArrowLogger({str(store)!r}, run_id="r", update_interval=1, flush_seconds=0)
        for step in range(50):
            log.log_update_data({{"loss": step}}, step)
        log._add("update/unflushed", 99, 1.0, 0.0)  # buffered, never committed
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -9
    with rlarrow.Store.open(store) as st:
        t = st.read("scalars")
    assert sorted(t.filter(pc.equal(t["tag"], "update/loss"))["step"].to_pylist()) == list(range(50))
    assert "update/unflushed" not in t["tag"].to_pylist()


@needs_tianshou
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_plugs_into_a_real_tianshou_trainer_and_resumes(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "tianshou_train.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "s.rlarrow")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        t = st.read("scalars")
    pairs = list(zip(t["tag"].to_pylist(), t["step"].to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs)), "a resumed run logged a point twice"
    epochs = sorted(s for tag, s in pairs if tag == "info/epoch")
    assert epochs == [1, 2, 3]  # 2 epochs, then resumed for the third
    tags = {p[0] for p in pairs}
    assert {"training/env_step", "update/loss", "test/returns_stat/mean", "save/epoch"} <= tags
