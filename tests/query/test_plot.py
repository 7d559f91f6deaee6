"""Plots: learning curves with smoothing and spread across runs, episode returns; the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import populate

import rlarrow
from rlarrow.cli.commands import main

pytest.importorskip("matplotlib", reason="plots need the plot extra (matplotlib)")
from rlarrow.query.plot import PlotError, episode_end_steps, moving_average, plot_episodes, plot_scalars  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def store(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s.rlarrow")
    for run, shift in (("a", 0.0), ("b", 1.0), ("c", 2.0)):
        steps = np.arange(0, 100, 5) + (1 if run == "b" else 0)
        st.append("scalars", {"run_id": run, "scope": "train", "tag": "train/return", "step": steps,
                              "value": np.sqrt(steps) + shift})
    populate(st, episodes=6, length=4)
    return st


def test_curves_one_line_per_run_smoothed_with_a_mean_band(store, tmp_path):
    fig = plot_scalars(store, ["train/return"], smooth=4, output=tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["a", "b", "c", "all runs mean ± std (3 runs)"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "train/return"
    a = ax.lines[0]
    steps = np.arange(0, 100, 5)
    assert np.allclose(a.get_ydata(), moving_average(np.sqrt(steps), 4))
    grid, mean = ax.lines[3].get_xdata(), ax.lines[3].get_ydata()
    runs = [np.interp(grid, line.get_xdata(), line.get_ydata()) for line in ax.lines[:3]]
    assert grid[0] == 1 and grid[-1] == 95  # the steps every run covers
    assert np.allclose(mean, np.mean(runs, axis=0))
    smoothed_a = moving_average(np.sqrt(steps), 4)
    assert np.allclose(mean[-1], smoothed_a[-1] + 1, atol=0.1)  # a, a + 1, a + 2
    assert len(ax.collections) == 1  # the band


def test_runs_filter_and_missing_tags(store):
    fig = plot_scalars(store, "train/return", runs=["a"])
    assert [line.get_label() for line in fig.axes[0].lines] == ["a"]
    with pytest.raises(ValueError, match="no run logged nope"):
        plot_scalars(store, ["nope"])


def test_episode_returns(store, tmp_path):
    fig = plot_episodes(store, smooth=2, output=tmp_path / "e.png")
    assert (tmp_path / "e.png").read_bytes()[:8] == PNG
    returns = store.read("episodes", columns=["return"])["return"].to_numpy()
    assert np.allclose(fig.axes[0].lines[0].get_ydata(), moving_average(returns, 2))


def test_cli_plot(store, tmp_path, capsys):
    out = tmp_path / "curves.png"
    with pytest.raises(SystemExit) as done:
        main(["plot", str(store.path), "--tag", "train/return", "--smooth", "3", "-o", str(out)])
    assert done.value.code == 0 and out.read_bytes()[:8] == PNG
    with pytest.raises(SystemExit) as done:
        main(["plot", str(store.path), "--episodes", "-o", str(tmp_path / "e.svg")])
    assert done.value.code == 0 and b"<svg" in (tmp_path / "e.svg").read_bytes()[:500]
    with pytest.raises(SystemExit) as done:
        main(["plot", str(store.path), "--tag", "nope", "-o", str(tmp_path / "x.png")])
    assert done.value.code != 0 and "no run logged nope" in capsys.readouterr().err


@pytest.fixture
def algos(tmp_path):
    """Two algorithms, two seeds each (named runs with metadata), and a named single run."""
    st = rlarrow.Store.create(tmp_path / "algos.rlarrow")
    steps = np.arange(0, 50, 10)
    for algo, seed, shift in (("ppo", 0, 0.0), ("ppo", 1, 2.0), ("sac", 0, 10.0), ("sac", 1, 14.0)):
        run = st.add_run(source="test", run_id=f"{algo}{seed}", name=f"{algo}-{seed}", num_envs=1,
                         metadata={"algo": algo, "params": {"seed": seed}})
        st.append("scalars", {"run_id": run, "scope": "train", "tag": "loss", "step": steps,
                              "value": steps / 10 + shift})
    return st


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_group_by_a_metadata_key_draws_mean_and_std_per_group(algos):
    fig = plot_scalars(algos, "loss", group_by="algo")
    ax = fig.axes[0]
    assert legend_texts(ax) == ["algo=ppo mean ± std (2 runs)", "algo=sac mean ± std (2 runs)"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "loss"
    means = {line.get_label(): line for line in ax.lines if "mean" in line.get_label()}
    ppo = means["algo=ppo mean ± std (2 runs)"]
    assert np.allclose(ppo.get_xdata(), np.arange(0, 50, 10))
    assert np.allclose(ppo.get_ydata(), np.arange(0, 50, 10) / 10 + 1.0)  # (x + 0 + x + 2) / 2
    assert np.allclose(means["algo=sac mean ± std (2 runs)"].get_ydata(), np.arange(0, 50, 10) / 10 + 12)
    assert len(ax.collections) == 2  # a band per group, not one across both algorithms
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(band.min(), 0.0 + 1 - 1) and np.isclose(band.max(), 4 + 1 + 1)  # mean ± std (1)
    # a nested key, and a run column
    assert legend_texts(plot_scalars(algos, "loss", group_by="params.seed").axes[0]) == [
        "params.seed=0 mean ± std (2 runs)", "params.seed=1 mean ± std (2 runs)"]
    assert legend_texts(plot_scalars(algos, "loss", group_by="source").axes[0]) == [
        "source=test mean ± std (4 runs)"]


def test_group_of_one_run_and_unknown_group_key(algos):
    fig = plot_scalars(algos, "loss", group_by="name", runs=["ppo-0", "sac1"])
    assert legend_texts(fig.axes[0]) == ["ppo-0 (1 run)", "sac-1 (1 run)"]
    assert not fig.axes[0].collections
    with pytest.raises(PlotError, match="'nope' .*--group-by.* neither a runs column"):
        plot_scalars(algos, "loss", group_by="nope")


def test_runs_by_name_or_id_and_unknown_names_listed(algos):
    fig = plot_scalars(algos, "loss", runs=["ppo-1", "sac0"])
    assert legend_texts(fig.axes[0]) == ["ppo-1", "sac-0", "all runs mean ± std (2 runs)"]
    assert np.allclose(fig.axes[0].lines[0].get_ydata(), np.arange(0, 50, 10) / 10 + 2.0)
    with pytest.raises(PlotError, match=r"'dqn-0'.*names: ppo-0, ppo-1, sac-0, sac-1"):
        plot_scalars(algos, "loss", runs=["ppo-1", "dqn-0"])


def test_legend_has_each_label_once(algos):
    twin = algos.add_run(source="test", run_id="twin", name="ppo-0")
    algos.append("scalars", {"run_id": twin, "scope": "train", "tag": "loss", "step": [0, 40],
                             "value": [0.0, 1.0]})
    fig = plot_scalars(algos, ["loss", "loss"], group_by="algo")
    for ax in fig.axes:
        texts = legend_texts(ax)
        assert len(texts) == len(set(texts)) == 3  # ppo, sac and the run without algo
        assert "algo=(none) (1 run)" in texts
    names = legend_texts(plot_scalars(algos, "loss").axes[0])
    assert "ppo-0 (ppo0)" in names and "ppo-0 (twin)" in names and len(names) == len(set(names))


def test_episode_end_steps_follow_each_env_in_time_order():
    # memory-derived ids run env by env: 0-2 are env 0's episodes, 3-4 env 1's
    got = episode_end_steps({"episode_id": np.array([0, 1, 2, 3, 4]), "env_index": np.array([0, 0, 0, 1, 1]),
                             "num_steps": np.array([3, 5, 2, 6, 4])})
    assert got.tolist() == [4, 12, 14, 10, 16]  # env steps of both envs together: 2 x each env's own
    assert episode_end_steps({"episode_id": np.array([1, 0]), "env_index": np.array([0, 0]),
                              "num_steps": np.array([3, 5])}, num_envs=4).tolist() == [24, 16]


def test_episodes_against_env_steps_in_time_order(tmp_path):
    st = rlarrow.Store.create(tmp_path / "e.rlarrow")
    run = st.add_run(source="test", run_id="r", name="vec", num_envs=2)
    st.append("episodes", {
        "run_id": run, "episode_id": np.arange(5), "env_index": [0, 0, 0, 1, 1],
        "num_steps": [3, 5, 2, 6, 4], "return": [1.0, 2.0, 3.0, 4.0, 5.0],
        "terminated": np.ones(5, bool), "truncated": np.zeros(5, bool),
        "partial_start": np.zeros(5, bool), "partial_end": np.zeros(5, bool)})
    fig = plot_episodes(st, smooth=1, runs="vec")
    curve, hist = fig.axes
    line = curve.lines[0]
    assert line.get_xdata().tolist() == [4, 10, 12, 14, 16]
    assert line.get_ydata().tolist() == [1.0, 4.0, 2.0, 3.0, 5.0]  # by end step, not by episode_id
    assert curve.get_xlabel() == "env steps" and curve.get_ylabel() == "episode return"
    assert hist.get_xlabel() == "episode return"
    assert legend_texts(curve) == ["vec"]


def test_cli_plot_group_by_and_run_names(algos, tmp_path, capsys):
    out = tmp_path / "g.png"
    with pytest.raises(SystemExit) as done:
        main(["plot", str(algos.path), "--tag", "loss", "--group-by", "algo", "--run", "ppo-0", "--run",
              "ppo-1", "-o", str(out)])
    assert done.value.code == 0 and out.read_bytes()[:8] == PNG
    with pytest.raises(SystemExit) as done:
        main(["plot", str(algos.path), "--tag", "loss", "--run", "nobody", "-o", str(out)])
    err = capsys.readouterr().err
    assert done.value.code == 1 and "'nobody'" in err and "ppo-0, ppo-1, sac-0, sac-1" in err
    assert "Traceback" not in err
