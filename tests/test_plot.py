"""Plots: learning curves with smoothing and spread across runs, episode returns; the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import populate

import rlarrow
from rlarrow.cli import main

pytest.importorskip("matplotlib", reason="plots need the plot extra (matplotlib)")
from rlarrow.plot import moving_average, plot_episodes, plot_scalars  # noqa: E402

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
    assert labels == ["a", "b", "c", "mean of 3 runs"]
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
