"""envlogger directories import losslessly and export so that envlogger reads them back the same."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES
from test_episodes import DictEnv, _envlogger_loads, import_envlogger, same_step

import rlarrow
from rlarrow.io.envlogger import export_envlogger
from rlarrow.io.envlogger import import_envlogger as import_dir

CATCH = FIXTURES / "envlogger" / "catch"
needs = pytest.mark.skipif(
    not _envlogger_loads(),
    reason="needs envlogger 1.2 (test-only peer): pip install 'envlogger<1.3'",
)


def same_tree(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(same_tree(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
    return a == b


def steps_of(reader):
    return [list(e) for e in reader.episodes]


def assert_same_run(theirs, ours) -> None:
    a, b = steps_of(theirs), steps_of(ours)
    assert [len(e) for e in a] == [len(e) for e in b]
    for ea, eb in zip(a, b, strict=True):
        for x, y in zip(ea, eb, strict=True):
            same_step(x, y)
    assert list(theirs.episode_metadata()) == list(ours.episode_metadata())


@needs
def test_fixture_imports_and_reads_as_envlogger_reads_it(tmp_path):
    envlogger, _ = import_envlogger()
    report = import_dir(CATCH, tmp_path / "s", progress=False)
    assert (report.episodes, report.steps) == (20, 200)
    store = rlarrow.Store.open(tmp_path / "s")
    run = store.runs().to_pylist()[0]
    assert run["source"] == "envlogger" and run["alignment"] == "dm_env"
    assert run["source_version"].startswith("envlogger 1.2")
    assert store.row_count("steps") == 200 and store.row_count("episodes") == 20
    # RLDS alignment in the table: the last step of each episode has no action or reward
    last = store.read("steps").filter(store.read("steps").column("is_last"))
    assert last.num_rows == 20 and last.column("reward").null_count == 20
    with envlogger.Reader(data_directory=str(CATCH)) as theirs:
        ours = rlarrow.Reader(tmp_path / "s")
        assert_same_run(theirs, ours)
        theirs_meta = theirs.metadata()
        ours_meta = ours.metadata()
        assert same_tree(ours_meta, theirs_meta)
        assert ours.observation_spec() == theirs.observation_spec()
        assert ours.action_spec() == theirs.action_spec()


@needs
def test_export_reads_back_identically_in_envlogger(tmp_path):
    envlogger, _ = import_envlogger()
    import_dir(CATCH, tmp_path / "s", progress=False)
    out = export_envlogger(tmp_path / "s", tmp_path / "out")
    with (
        envlogger.Reader(data_directory=str(CATCH)) as original,
        envlogger.Reader(data_directory=str(out)) as again,
    ):
        assert_same_run(original, again)
        m1, m2 = original.metadata(), again.metadata()
        assert set(m1) == set(m2) and m1["params"] == m2["params"]
        assert same_tree(m1, m2)
        assert again.observation_spec() == original.observation_spec()


@needs
def test_rlarrow_recordings_export_to_envlogger_with_dict_observations(tmp_path):
    envlogger, _ = import_envlogger()
    env = rlarrow.EnvLogger(
        DictEnv(),
        tmp_path / "s",
        metadata={"who": "rlarrow"},
        episode_fn=lambda ts, a, e: {"t": e.t} if ts.last() else None,
    )
    for _ in range(3):
        ts = env.reset()
        while not ts.last():
            ts = env.step(np.array([0.5, 0.5], np.float32))
    env.close()
    out = export_envlogger(tmp_path / "s", tmp_path / "out")
    with envlogger.Reader(data_directory=str(out)) as theirs:
        ours = rlarrow.Reader(tmp_path / "s")
        assert len(theirs.episodes) == 3
        for ea, eb in zip(theirs.episodes, ours.episodes, strict=True):
            for x, y in zip(ea, eb, strict=True):
                assert x.timestep.step_type == y.timestep.step_type
                assert np.array_equal(x.timestep.observation["frame"], y.timestep.observation["frame"])
                assert np.array_equal(
                    x.timestep.observation["proprio"]["pos"], y.timestep.observation["proprio"]["pos"]
                )
        assert list(theirs.episode_metadata()) == [{"t": 4}] * 3
        assert theirs.metadata()["who"] == "rlarrow"
        assert theirs.observation_spec()["frame"].shape == (84, 84)


@needs
def test_cli_converts_envlogger_and_minari_and_exports_envlogger(tmp_path):
    from click.testing import CliRunner

    from rlarrow.cli.commands import cli

    envlogger, _ = import_envlogger()
    minari = FIXTURES / "minari" / "cartpole" / "arrow-v0"
    runner = CliRunner()
    out = runner.invoke(cli, ["convert", str(CATCH), "-o", str(tmp_path / "catch")])
    assert out.exit_code == 0, out.output
    assert "20 episodes, 200 steps" in out.output
    if minari.is_dir():
        out = runner.invoke(cli, ["convert", str(minari), "-o", str(tmp_path / "minari")])
        assert out.exit_code == 0 and "10 episodes, 266 steps" in out.output, out.output
    out = runner.invoke(
        cli, ["export", str(tmp_path / "catch"), "-o", str(tmp_path / "back"), "--format", "envlogger"]
    )
    assert out.exit_code == 0, out.output
    with envlogger.Reader(data_directory=str(tmp_path / "back")) as again:
        assert len(again.episodes) == 20 and len(again.steps) == 200
