"""Exports refuse a target that holds something, replace it whole with overwrite, and keep dtypes.

Every export format (pt, npz, csv, parquet, envlogger, tfevents) is written twice into one
directory: the second time is refused (the error names the directory and --overwrite), and
with overwrite the old content is replaced, never added to. envlogger exports are read back
with envlogger's own Reader: every field equal to the original's, dtype included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from test_episodes import _envlogger_loads, import_envlogger

import rlarrow
from rlarrow.cli.commands import cli
from rlarrow.core.errors import InvalidInputError, RLArrowError
from rlarrow.io._target import fresh_directory
from rlarrow.io.envlogger import export_envlogger
from rlarrow.io.envlogger import import_envlogger as import_dir
from rlarrow.io.memory.importer import export_memory, import_memory

CATCH = FIXTURES / "envlogger" / "catch"
SKRL = FIXTURES / "skrl" / "wrapped" / "memories"
TORCH_EVENTS = FIXTURES / "tfevents" / "torch"
needs_envlogger = pytest.mark.skipif(
    not _envlogger_loads(), reason="needs envlogger 1.2 (test-only peer): pip install 'envlogger<1.3'")


def _listing(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ------------------------------------------------------------------ memory formats


@pytest.fixture(scope="module")
def memory_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("mem") / "s"
    import_memory([next(SKRL.glob("*.npz"))], path, progress=False)
    return path


@pytest.mark.parametrize("fmt", ["pt", "npz", "csv", "parquet"])
def test_memory_export_refuses_a_non_empty_target_and_replaces_it_with_overwrite(tmp_path, memory_store, fmt):
    if fmt == "pt":
        pytest.importorskip("torch", reason="pt exports need torch (pip install 'rlarrow[torch]')")
    first = export_memory(memory_store, tmp_path / "out", fmt, progress=False)
    assert len(first) == 1 and first[0].is_file() and first[0].parent == tmp_path / "out" / "memories"
    before = first[0].read_bytes()
    with pytest.raises(InvalidInputError, match="--overwrite") as err:
        export_memory(memory_store, tmp_path / "out", fmt, progress=False)
    assert str(tmp_path / "out" / "memories") in str(err.value)
    assert _listing(tmp_path / "out") == ["memories", f"memories/{first[0].name}"]  # untouched
    (tmp_path / "out" / "memories" / "stale.npz").write_bytes(b"old")
    again = export_memory(memory_store, tmp_path / "out", fmt, overwrite=True, progress=False)
    assert again == first and first[0].read_bytes() == before
    assert _listing(tmp_path / "out") == ["memories", f"memories/{first[0].name}"]  # replaced, not added to


def test_cli_memory_export_names_the_flag(tmp_path, memory_store):
    runner = CliRunner()
    args = ["export", str(memory_store), "-o", str(tmp_path / "out"), "--format", "npz"]
    assert runner.invoke(cli, args).exit_code == 0
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 1 and "--overwrite" in refused.output and "memories" in refused.output
    assert runner.invoke(cli, [*args, "--overwrite"]).exit_code == 0


# ------------------------------------------------------------------ tfevents (owned elsewhere: checked only)


def test_tfevents_export_already_refuses_a_second_copy(tmp_path):
    from rlarrow.io.tfevents import export_tfevents, import_tfevents

    import_tfevents(TORCH_EVENTS, tmp_path / "s", progress=False)
    first = export_tfevents(tmp_path / "s", tmp_path / "out")
    assert first
    with pytest.raises((RLArrowError, FileExistsError), match="overwrite"):
        export_tfevents(tmp_path / "s", tmp_path / "out")
    again = export_tfevents(tmp_path / "s", tmp_path / "out", overwrite=True)
    assert len(list((tmp_path / "out").rglob("*tfevents*"))) == len(again) == len(first)


# ------------------------------------------------------------------ the swap itself


def test_a_failed_write_leaves_the_old_directory(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    def half_way():
        with fresh_directory(target, overwrite=True, what="an export") as tmp:
            (tmp / "new.txt").write_text("new")
            raise RuntimeError("half way")

    with pytest.raises(RuntimeError, match="half way"):
        half_way()
    assert _listing(tmp_path) == ["out", "out/old.txt"]  # nothing left behind either
    with fresh_directory(target, overwrite=True, what="an export") as tmp:
        (tmp / "new.txt").write_text("new")
    assert _listing(tmp_path) == ["out", "out/new.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="is a file"), \
            fresh_directory(tmp_path / "file", overwrite=True, what="an export"):
        pass


# ------------------------------------------------------------------ envlogger


def _steps(reader):
    return [list(e) for e in reader.episodes]


def _same_value(a, b, where):
    """Equal values of equal types (NumPy scalars and arrays with their dtypes; dicts; None)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _same_value(a[k], b[k], f"{where}.{k}")
        return
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b), (where, a.dtype, b.dtype)
        assert np.array_equal(a, b), where
    else:
        assert a == b, where


def assert_same_log(original, again):
    a, b = _steps(original), _steps(again)
    assert [len(e) for e in a] == [len(e) for e in b]
    for k, (ea, eb) in enumerate(zip(a, b, strict=True)):
        for i, (x, y) in enumerate(zip(ea, eb, strict=True)):
            where = f"episode {k} step {i}"
            assert x.timestep.step_type == y.timestep.step_type, where
            _same_value(x.timestep.reward, y.timestep.reward, f"{where} reward")
            _same_value(x.timestep.discount, y.timestep.discount, f"{where} discount")
            _same_value(x.timestep.observation, y.timestep.observation, f"{where} observation")
            _same_value(x.action, y.action, f"{where} action")
            assert x.custom_data == y.custom_data, where
    assert list(original.episode_metadata()) == list(again.episode_metadata())


FLOAT32_ENV = textwrap.dedent('''
    import sys
    import numpy as np
    np.unicode_ = np.str_
    import dm_env, envlogger
    from dm_env import specs

    class Float32Env(dm_env.Environment):
        """float32 rewards and discounts, as its specs declare."""

        def reset(self):
            self.t = 0
            return dm_env.restart(np.zeros(3, np.float32))

        def step(self, action):
            self.t += 1
            obs = np.full(3, self.t, np.float32)
            if self.t == 4:  # dm_env.termination would give a Python float discount, float64 in envlogger
                return dm_env.TimeStep(dm_env.StepType.LAST, np.float32(1.5), np.float32(0.0), obs)
            return dm_env.transition(np.float32(0.25), obs, discount=np.float32(0.9))

        def observation_spec(self):
            return specs.Array((3,), np.float32, "obs")

        def action_spec(self):
            return specs.BoundedArray((), np.int32, 0, 2, "action")

        def reward_spec(self):
            return specs.Array((), np.float32, "reward")

        def discount_spec(self):
            return specs.BoundedArray((), np.float32, 0.0, 1.0, "discount")

    with envlogger.EnvLogger(Float32Env(), data_directory=sys.argv[1], metadata={"who": "test"}) as env:
        for _ in range(3):
            ts = env.reset()
            while not ts.last():
                ts = env.step(np.int32(1))
''')


@needs_envlogger
def test_envlogger_export_keeps_float32_rewards_and_discounts(tmp_path):
    envlogger, _ = import_envlogger()
    logs = tmp_path / "logs"
    logs.mkdir()
    subprocess.run([sys.executable, "-c", FLOAT32_ENV, str(logs)], check=True, capture_output=True,
                   env={**os.environ})
    import_dir(logs, tmp_path / "s", progress=False)
    export = export_envlogger(tmp_path / "s", tmp_path / "out")
    with envlogger.Reader(data_directory=str(logs)) as original, \
            envlogger.Reader(data_directory=str(export)) as again:
        assert original.reward_spec().dtype == np.float32
        assert type(original.episodes[0][1].timestep.reward) is np.float32  # what the test is about
        assert_same_log(original, again)
        assert again.reward_spec() == original.reward_spec()
        assert again.discount_spec() == original.discount_spec()


@needs_envlogger
def test_envlogger_fixture_exports_with_every_dtype(tmp_path):
    envlogger, _ = import_envlogger()
    import_dir(CATCH, tmp_path / "s", progress=False)
    export = export_envlogger(tmp_path / "s", tmp_path / "out")
    with envlogger.Reader(data_directory=str(CATCH)) as original, \
            envlogger.Reader(data_directory=str(export)) as again:
        assert_same_log(original, again)


@needs_envlogger
def test_envlogger_export_refuses_a_second_copy_and_overwrite_replaces_it(tmp_path):
    envlogger, _ = import_envlogger()

    import_dir(CATCH, tmp_path / "s", progress=False)
    out = export_envlogger(tmp_path / "s", tmp_path / "out")
    listing = _listing(out)
    with pytest.raises(InvalidInputError, match="--overwrite") as err:
        export_envlogger(tmp_path / "s", out)
    assert str(out) in str(err.value)
    assert _listing(out) == listing
    export_envlogger(tmp_path / "s", out, overwrite=True)
    with envlogger.Reader(data_directory=str(out)) as again:
        assert len(again.episodes) == 20 and len(again.steps) == 200  # not 40 and 400
    assert len([p for p in out.iterdir() if p.is_dir()]) == 1  # one shard: the old one is gone
    # the CLI: refused with the flag named, then replaced with it
    runner = CliRunner()
    args = ["export", str(tmp_path / "s"), "-o", str(out), "--format", "envlogger"]
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 1 and "--overwrite" in refused.output and str(out) in refused.output
    assert runner.invoke(cli, [*args, "--overwrite"]).exit_code == 0
    with envlogger.Reader(data_directory=str(out)) as again:
        assert len(again.episodes) == 20


@needs_envlogger
def test_gym_recordings_export_to_envlogger_with_their_specs(tmp_path):
    pytest.importorskip("gymnasium", reason="needs gymnasium: pip install gymnasium")
    import gymnasium as gym

    from rlarrow.record.gym import RecordEpisodes

    envlogger, _ = import_envlogger()
    env = RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "s")
    env.reset(seed=1)
    for _ in range(40):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    env.close()
    out = export_envlogger(tmp_path / "s", tmp_path / "out")
    with envlogger.Reader(data_directory=str(out)) as theirs, rlarrow.Reader(tmp_path / "s") as ours:
        assert theirs.observation_spec() == ours.observation_spec()
        assert theirs.observation_spec().shape == (4,) and theirs.action_spec().num_values == 2
        assert len(theirs.steps) == len(ours.steps)
