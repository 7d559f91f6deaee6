"""``write_envlogger``: any episode source written with envlogger's own writer, read back by its Reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from test_episodes import _envlogger_loads, import_envlogger

from rlarrow.io.envlogger import read_envlogger, write_envlogger
from rlarrow.io.transcode import convert_format

CATCH = FIXTURES / "envlogger" / "catch"
CARTPOLE = FIXTURES / "minari" / "cartpole" / "arrow-v0"
pytestmark = pytest.mark.skipif(
    not _envlogger_loads(), reason="needs envlogger 1.2 (test-only peer): pip install 'envlogger<1.3'")


def same_value(a, b, where: str = "") -> None:
    """Equal values of the same types (NumPy dtypes included), at every depth."""
    if isinstance(a, dict) or isinstance(b, dict):
        assert isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            same_value(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_value(x, y, f"{where}[{i}]")
    elif isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        assert type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype, (where, a, b)
        assert np.array_equal(a, b, equal_nan=True), (where, a, b)
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def test_an_envlogger_source_written_again_reads_back_value_for_value(tmp_path: Path) -> None:
    envlogger, _ = import_envlogger()
    with read_envlogger(CATCH) as source:
        assert write_envlogger(source, tmp_path / "out") == tmp_path / "out"
    with (envlogger.Reader(data_directory=str(CATCH)) as original,
          envlogger.Reader(data_directory=str(tmp_path / "out")) as again):
        assert (len(again.episodes), len(again.steps)) == (20, 200)
        same_value(again.metadata(), original.metadata(), "metadata")
        same_value(list(again.episode_metadata()), list(original.episode_metadata()), "episode metadata")
        for name in ("observation_spec", "action_spec", "reward_spec", "discount_spec"):
            assert getattr(again, name)() == getattr(original, name)(), name
        for k, (ours, theirs) in enumerate(zip(again.episodes, original.episodes, strict=True)):
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
                at = f"episode {k} step {i}"
                assert a.timestep.step_type == b.timestep.step_type, at
                same_value(a.timestep.observation, b.timestep.observation, at)
                same_value(a.action, b.action, at)
                same_value(a.custom_data, b.custom_data, at)
                # envlogger itself gives the last discount in another dtype than the spec's
                # (see the fixtures' README): the values are compared, in the spec's dtype
                for field in ("reward", "discount"):
                    x, y = getattr(a.timestep, field), getattr(b.timestep, field)
                    assert (x is None) == (y is None), at
                    if x is not None:
                        spec = getattr(original, f"{field}_spec")()
                        assert np.asarray(x).dtype == spec.dtype and x == y, (at, field, x, y)


def test_a_minari_dataset_converted_to_envlogger_reads_back_as_minari_holds_it(tmp_path: Path) -> None:
    pytest.importorskip("minari", reason="Minari's own reader gives the values compared (pip install minari)")
    from minari.dataset.minari_dataset import MinariDataset

    envlogger, _ = import_envlogger()
    assert convert_format(CARTPOLE, "envlogger", tmp_path / "out") == [tmp_path / "out"]
    want = list(MinariDataset(CARTPOLE / "data").iterate_episodes())
    with envlogger.Reader(data_directory=str(tmp_path / "out")) as got:
        assert len(got.episodes) == len(want) == 10
        assert len(got.steps) == sum(len(ep.actions) + 1 for ep in want) == 266
        assert got.observation_spec().shape == (4,) and got.observation_spec().dtype == np.float32
        assert got.action_spec().num_values == 2
        assert got.metadata()["dataset_id"] == "cartpole/arrow-v0"
        metadata = list(got.episode_metadata())
        terminated: list[bool] = []
        for k, (steps, ep) in enumerate(zip(got.episodes, want, strict=True)):
            steps = list(steps)
            n = len(ep.actions)
            assert len(steps) == n + 1
            assert [int(s.timestep.step_type) for s in steps] == [0] + [1] * (n - 1) + [2]
            assert steps[0].action is None and steps[0].timestep.reward is None
            obs = np.stack([s.timestep.observation for s in steps])
            assert obs.dtype == ep.observations.dtype and np.array_equal(obs, ep.observations)
            actions = np.array([s.action for s in steps[1:]])
            assert actions.dtype == ep.actions.dtype and np.array_equal(actions, ep.actions)
            rewards = np.array([s.timestep.reward for s in steps[1:]])
            assert rewards.dtype == ep.rewards.dtype and np.array_equal(rewards, ep.rewards)
            # Minari has no discounts: dm_env's, 0 where the episode terminates, so it is kept
            discounts = np.array([s.timestep.discount for s in steps[1:]])
            assert discounts.dtype == np.float64 and steps[0].timestep.discount is None
            assert discounts.tolist() == [1.0] * (n - 1) + [0.0 if ep.terminations[-1] else 1.0]
            assert ep.terminations[-1] or ep.truncations[-1]
            terminated.append(bool(ep.terminations[-1]))
            assert metadata[k]["id"] == ep.id and metadata[k]["total_steps"] == n
    with read_envlogger(tmp_path / "out") as again:  # and read back, the episodes end as Minari's did
        _, episodes = again.read()
    assert episodes.column("terminated").to_pylist() == terminated


def test_the_cli_converts_to_envlogger_and_refuses_a_target_that_holds_something(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    envlogger, _ = import_envlogger()
    runner = CliRunner()
    out = runner.invoke(cli, ["convert", str(CATCH), "--to", "envlogger", "-o", str(tmp_path / "out")])
    assert out.exit_code == 0, out.output
    assert "envlogger" in out.output and not list(tmp_path.glob("*.rlarrow"))
    with envlogger.Reader(data_directory=str(tmp_path / "out")) as again:
        assert (len(again.episodes), len(again.steps)) == (20, 200)
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("mine")
    out = runner.invoke(cli, ["convert", str(CATCH), "--to", "envlogger", "-o", str(tmp_path / "kept")])
    assert out.exit_code != 0 and "--overwrite" in out.output, out.output
    assert (tmp_path / "kept" / "mine.txt").read_text() == "mine"
