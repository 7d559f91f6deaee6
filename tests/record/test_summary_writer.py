"""rlarrow.record.logger.SummaryWriter: torch's / skrl's SummaryWriter scalar calls into a store."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlarrow
from rlarrow.io.tfevents import read_tfevents
from rlarrow.record.logger import UNSTORED_METHODS, SummaryWriter

HAS = {m: importlib.util.find_spec(m) is not None for m in ("torch", "tensorboard", "skrl", "gymnasium")}
needs_torch = pytest.mark.skipif(not (HAS["torch"] and HAS["tensorboard"]),
                                 reason="needs torch and tensorboard (test-only peers)")


def scalars(store: Path) -> list[dict[str, Any]]:
    with rlarrow.Store.open(store) as st:
        t = st.read("scalars")
    return t.sort_by([("run_id", "ascending"), ("tag", "ascending"), ("step", "ascending")]).to_pylist()


def accumulate(path: Path) -> Any:
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc


def test_add_scalar_keeps_exact_values_types_steps_and_times(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    with SummaryWriter(store, run_id="r") as w:
        w.add_scalar("a/float", 0.1, 1, walltime=1.5)
        w.add_scalar("a/float", np.float32(0.25), global_step=np.int64(2), walltime=2.5)
        w.add_scalar("a/int", 2**62 + 1, 3, 3.5)
        w.add_scalar("a/int", np.int32(-7), 4, 4.5)
        w.add_scalar("a/flag", np.bool_(True), 5, 5.5)
        w.add_scalar("a/array", np.array(1.5, np.float16), 6, 6.5)
        w.add_scalar("a/none_step", float("nan"))  # global_step None: step 0, as torch writes it
        w.add_scalar(tag="skrl", value=np.float64(0.3), timestep=7)  # skrl's keyword call
        assert w.run_id == "r"
    rows = {(r["tag"], r["step"]): r for r in scalars(store)}
    assert [(r["value"], r["value_int"], r["dtype"], r["wall_time"]) for r in
            (rows["a/float", 1], rows["a/float", 2], rows["a/int", 3], rows["a/int", 4], rows["a/flag", 5],
             rows["a/array", 6])] == [
        (0.1, None, "float64", 1.5), (0.25, None, "float32", 2.5),
        (float(2**62 + 1), 2**62 + 1, "int64", 3.5), (-7.0, -7, "int32", 4.5), (1.0, 1, "bool", 5.5),
        (1.5, None, "float16", 6.5)]
    assert np.isnan(rows["a/none_step", 0]["value"])
    assert rows["skrl", 7]["value"] == 0.3 and rows["skrl", 7]["scope"] == ""
    assert {r["encoding"] for r in rows.values()} == {"logger"}
    assert {r["run_id"] for r in rows.values()} == {"r"}
    with rlarrow.Store.open(store) as st:
        assert st.read("runs")["source"].to_pylist() == ["rlarrow.SummaryWriter"]


@needs_torch
def test_torch_tensors_are_taken_by_their_dtype(tmp_path: Path) -> None:
    import torch

    store = tmp_path / "s.rlarrow"
    with SummaryWriter(store, run_id="r") as w:
        w.add_scalar("f32", torch.tensor(0.1), 1)
        w.add_scalar("bf16", torch.tensor(1.5, dtype=torch.bfloat16), 1)
        w.add_scalar("i64", torch.tensor(2**60 + 1), 1)
        w.add_scalar("one", torch.ones(1, 1, dtype=torch.float64) / 3, 1)
        with pytest.raises(rlarrow.InvalidInputError, match=r"run 'r', tag 'vec'.*not a scalar"):
            w.add_scalar("vec", torch.ones(3), 1)
    rows = {r["tag"]: r for r in scalars(store)}
    assert (rows["f32"]["value"], rows["f32"]["dtype"]) == (float(np.float32(0.1)), "float32")
    assert (rows["bf16"]["value"], rows["bf16"]["dtype"]) == (1.5, "bfloat16")
    assert (rows["i64"]["value_int"], rows["i64"]["dtype"]) == (2**60 + 1, "int64")
    assert (rows["one"]["value"], rows["one"]["dtype"]) == (1 / 3, "float64")


def test_torch_is_not_imported_for_python_and_numpy_values(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from rlarrow.record.logger import SummaryWriter
        with SummaryWriter({str(tmp_path / "s.rlarrow")!r}, log_dir={str(tmp_path / "tb")!r}) as w:
            w.add_scalar("x", 1.0, 1)
            w.add_scalar("y", np.float32(2.0), 1)
            w.add_scalars("z", {{"a": 1, "b": 2}}, 1)
        assert "torch" not in sys.modules, "torch was imported"
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr[-2000:]


@needs_torch
def test_add_scalars_writes_the_sub_runs_torch_writes(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    calls = [("loss", {"train": 0.5, "test": 0.75}, 1), ("loss", {"train": 0.25, "test": 0.5}, 2),
             ("a/b", {"x/y": 3}, 1)]
    theirs = TorchWriter(str(tmp_path / "torch"))
    ours = SummaryWriter(tmp_path / "s.rlarrow", run_id="r", log_dir=tmp_path / "ours")
    for main_tag, values, step in calls:
        theirs.add_scalars(main_tag, values, step)
        ours.add_scalars(main_tag, values, step)
    ours.add_scalar("plain", 1.0, 1)
    theirs.add_scalar("plain", 1.0, 1)
    theirs.close()
    ours.close()

    def run_dirs(root: Path) -> set[str]:
        return {os.path.relpath(p.parent, root) for p in root.rglob("*tfevents*")}

    assert run_dirs(tmp_path / "ours") == run_dirs(tmp_path / "torch") == {
        ".", "loss_train", "loss_test", "a_b_x/y"}
    for run in run_dirs(tmp_path / "torch"):
        want, got = accumulate(tmp_path / "torch" / run), accumulate(tmp_path / "ours" / run)
        assert got.Tags()["scalars"] == want.Tags()["scalars"], run
        for tag in want.Tags()["scalars"]:
            assert [(e.step, e.value) for e in got.Scalars(tag)] == \
                [(e.step, e.value) for e in want.Scalars(tag)]
    rows = scalars(tmp_path / "s.rlarrow")
    assert [(r["run_id"], r["tag"], r["step"], r["value"]) for r in rows] == [
        ("r", "plain", 1, 1.0), ("r/a_b_x/y", "a/b", 1, 3.0),
        ("r/loss_test", "loss", 1, 0.75), ("r/loss_test", "loss", 2, 0.5),
        ("r/loss_train", "loss", 1, 0.5), ("r/loss_train", "loss", 2, 0.25)]
    with rlarrow.Store.open(tmp_path / "s.rlarrow") as st:
        runs = {r["run_id"]: r for r in st.read("runs").to_pylist()}
    assert set(runs) == {"r", "r/loss_train", "r/loss_test", "r/a_b_x/y"}
    # the store's runs export to the same layout rlarrow's tfevents import reads back
    assert set(read_tfevents(tmp_path / "ours", run_prefix="r")["run_id"].to_pylist()) == set(runs)


def test_other_summary_writer_methods_do_nothing_and_warn_once(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    with SummaryWriter(store, run_id="r", log_dir=tmp_path / "tb") as w:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            w.add_histogram("h", np.arange(10), 1)
            w.add_histogram("h", np.arange(10), 2)  # warned once per method
            w.add_hparams({"lr": 0.1}, {"hparam/ret": 1.0})
            w.add_text("note", "hello", 1)
            w.add_image("img", np.zeros((3, 2, 2)), 1)
            w.add_graph(object())
            w.add_custom_scalars({"a": {"b": ["Multiline", ["x"]]}})
        assert all(issubclass(m.category, rlarrow.RLArrowWarning) for m in seen)
        assert all(m.filename == __file__ for m in seen)  # points at the caller's line
        assert [str(m.message).split(" is not")[0] for m in seen] == [
            "SummaryWriter.add_histogram",
            "SummaryWriter.add_hparams", "SummaryWriter.add_text", "SummaryWriter.add_image",
            "SummaryWriter.add_graph", "SummaryWriter.add_custom_scalars"]
        assert {"add_histogram", "add_hparams", "add_video", "add_embedding"} <= set(UNSTORED_METHODS)
        with pytest.raises(AttributeError):
            w.not_a_method  # noqa: B018
        w.add_scalar("x", 1.0, 1)
        assert w.get_logdir() == str(tmp_path / "tb")
    assert [r["tag"] for r in scalars(store)] == ["x"]


def test_bad_values_and_closed_writers_raise_errors_naming_run_and_tag(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    w = SummaryWriter(store, run_id="r")
    with pytest.raises(rlarrow.InvalidInputError, match=r"run 'r', tag 'name'.*str is not a real number"):
        w.add_scalar("name", "blob", 1)
    with pytest.raises(rlarrow.InvalidInputError, match=r"tag 'v'.*array of 2 values"):
        w.add_scalar("v", np.ones(2), 1)
    with pytest.raises(rlarrow.InvalidInputError, match=r"tag 'missing': no value given"):
        w.add_scalar("missing")
    w.add_scalar("ok", 1, 1)
    w.flush()
    assert [r["tag"] for r in scalars(store)] == ["ok"]  # flushed points are committed, writer still open
    w.close()
    w.close()  # harmless
    with pytest.raises(rlarrow.StoreError, match="closed"):
        w.add_scalar("late", 1.0, 2)
    assert [r["tag"] for r in scalars(store)] == ["ok"]


def test_reopening_a_run_resumes_without_duplicates(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    with SummaryWriter(store, run_id="r") as w:
        for step in range(5):
            w.add_scalar("loss", 1.0, step)
            w.add_scalars("ret", {"mean": 1.0}, step)
    with SummaryWriter(store, run_id="r") as w:  # a restart from the checkpoint at step 2
        for step in range(3, 8):
            w.add_scalar("loss", 2.0, step)
            w.add_scalars("ret", {"mean": 2.0}, step)
    rows = scalars(store)
    for run in ("r", "r/ret_mean"):
        mine = [(r["step"], r["value"]) for r in rows if r["run_id"] == run]
        assert mine == [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 8)], run


def test_flush_secs_commits_while_logging(tmp_path: Path) -> None:
    store = tmp_path / "s.rlarrow"
    w = SummaryWriter(store, run_id="r", flush_secs=0)
    w.add_scalar("x", 1.0, 1)
    w.add_scalars("y", {"a": 2.0}, 1)
    assert len(scalars(store)) == 2  # visible before close
    w.close()


# ---------------------------------------------------------------- a real skrl agent


class _Both:
    """skrl's own writer and rlarrow's, fed the same calls (to compare what each keeps)."""

    def __init__(self, *writers: Any) -> None:
        self.writers = writers

    def add_scalar(self, **kwargs: Any) -> None:
        for w in self.writers:
            w.add_scalar(**kwargs)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()

    def close(self) -> None:
        for w in self.writers:
            w.close()


@pytest.mark.skipif(not (HAS["skrl"] and HAS["torch"] and HAS["gymnasium"] and HAS["tensorboard"]),
                    reason="needs skrl 2, torch, gymnasium and tensorboard (test-only peers)")
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_skrl_dqn_agent_logs_into_the_store(tmp_path: Path) -> None:
    import gymnasium as gym
    from skrl.agents.torch.dqn import DQN, DQN_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed
    from skrl.utils.model_instantiators.torch import deterministic_model

    set_seed(0)
    env = wrap_env(gym.make("CartPole-v1"))
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [16], "activations": "relu"}]
    models = {role: deterministic_model(observation_space=env.observation_space,
                                        action_space=env.action_space, device=env.device, network=net,
                                        output="ACTIONS")
              for role in ("q_network", "target_q_network")}
    cfg = DQN_CFG(batch_size=16, learning_starts=50, random_timesteps=50)
    cfg.experiment.directory = str(tmp_path / "skrl")
    cfg.experiment.experiment_name = "dqn"
    cfg.experiment.write_interval = 50
    cfg.experiment.checkpoint_interval = 0
    agent = DQN(models=models, memory=RandomMemory(memory_size=1000, device=env.device), cfg=cfg,
                observation_space=env.observation_space, action_space=env.action_space, device=env.device)
    trainer = SequentialTrainer(env=env, agents=agent,
                                cfg={"timesteps": 400, "headless": True, "disable_progressbar": True,
                                     "close_environment_at_exit": False})
    skrls_writer = agent.writer  # created by agent.init(), which the trainer calls
    # the README's line: agent.writer = SummaryWriter(store, run_id=..., log_dir=...)
    ours = SummaryWriter(tmp_path / "s.rlarrow", run_id="dqn", log_dir=tmp_path / "mirror")
    agent.writer = _Both(skrls_writer, ours)
    trainer.train()
    agent.writer.close()
    env.close()

    rows = scalars(tmp_path / "s.rlarrow")
    acc = accumulate(Path(agent.experiment_dir))  # skrl's own event file
    tags = set(acc.Tags()["scalars"])
    assert {r["tag"] for r in rows} == tags
    assert {"Loss / Q-network loss", "Reward / Total reward (mean)",
            "Episode / Total timesteps (max)"} <= tags
    for tag in tags:
        mine = [r for r in rows if r["tag"] == tag]
        theirs = acc.Scalars(tag)
        assert [r["step"] for r in mine] == [e.step for e in theirs], tag
        assert [np.float32(r["value"]) for r in mine] == [np.float32(e.value) for e in theirs], tag
    assert {r["step"] for r in rows} == {50 * k for k in range(1, 9)}
    # the store keeps skrl's float64 means exactly; its event file holds their float32
    means = [r["value"] for r in rows if r["tag"] == "Reward / Total reward (mean)"]
    assert any(float(np.float32(v)) != v for v in means)
    mirror = accumulate(tmp_path / "mirror")
    for tag in tags:
        assert [(e.step, e.value) for e in mirror.Scalars(tag)] == \
            [(e.step, e.value) for e in acc.Scalars(tag)]
