"""Learning curves and episode returns from a store, with matplotlib (the ``plot`` extra).

:func:`plot_scalars` draws one panel per tag: a line per run (value against step, smoothed
by a moving average of ``smooth`` points), and, with two runs or more, their mean with a
band of ± one standard deviation across runs (runs are put on a common step grid by linear
interpolation). :func:`plot_episodes` draws each run's episode returns in order, smoothed,
and their histogram. The same from a shell: ``rlarrow plot STORE --tag TAG -o curves.png``.

Example:
    >>> from rlarrow.plot import plot_scalars  # doctest: +SKIP
    >>> plot_scalars("runs.rlarrow", "train/episode_return", smooth=10, output="c.png")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["moving_average", "plot_episodes", "plot_scalars"]


def _pyplot() -> Any:
    from rlarrow._deps import require

    matplotlib = require("matplotlib", feature="plots")
    if os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")  # files, not windows: works without a display
    import matplotlib.pyplot as plt

    return plt


def moving_average(values: np.ndarray, n: int) -> np.ndarray:
    """The mean of the last ``n`` points at each point (fewer at the start); ``n <= 1``: as is.

    >>> moving_average(np.array([1.0, 3.0, 2.0, 6.0]), 2).tolist()
    [1.0, 2.0, 2.5, 4.0]
    """
    values = np.asarray(values, dtype=np.float64)
    if n <= 1 or not len(values):
        return values
    sums = np.cumsum(np.concatenate([[0.0], values]))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - n, 0)
    result: np.ndarray = (sums[idx] - sums[lo]) / (idx - lo)
    return result


def _query(store: Any, sql: str, params: list[Any]) -> dict[str, np.ndarray]:
    from rlarrow.query import connect

    con = connect(store)
    try:
        got: dict[str, np.ndarray] = con.execute(sql, params).fetchnumpy()
        return got
    finally:
        con.close()


def _names(store: Any) -> dict[str, str]:
    """Run id -> the run's name, where it has one (legends read better)."""
    data = _query(store, "select run_id, name from runs where name is not null", [])
    return dict(zip(data["run_id"].tolist(), data["name"].tolist(), strict=True))


def _runs_clause(runs: Sequence[str] | None, params: list[Any]) -> str:
    if not runs:
        return ""
    params.extend(runs)
    return f" and run_id in ({', '.join('?' for _ in runs)})"


def plot_scalars(store: Any, tags: Sequence[str] | str, *, runs: Sequence[str] | None = None, smooth: int = 0,
                 spread: bool = True, output: str | os.PathLike[str] | None = None) -> Any:
    """Learning curves of ``tags`` (one panel each), a line per run; returns the Figure.

    Args:
        store: a store or its path.
        tags: the scalar tags to draw.
        runs: only these runs (default: every run that logged the tag).
        smooth: moving average over this many points (0: raw).
        spread: with two runs or more, draw their mean and a ± std band.
        output: save the figure there (png, svg, pdf: by the extension).

    Raises:
        ValueError: no run logged any of the tags.
    """
    plt = _pyplot()
    tags = [tags] if isinstance(tags, str) else list(tags)
    fig, axes = plt.subplots(len(tags), 1, figsize=(8, 3.2 * len(tags)), squeeze=False)
    drawn = 0
    for ax, tag in zip(axes[:, 0], tags, strict=True):
        params: list[Any] = [tag]
        data = _query(store, "select run_id, step, value from scalars where tag = ?"
                      + _runs_clause(runs, params) + " order by run_id, step, wall_time", params)
        ids = data["run_id"]
        names = _names(store)
        curves = []
        for run in dict.fromkeys(ids.tolist()):
            sel = ids == run
            x, y = data["step"][sel].astype(np.float64), moving_average(data["value"][sel], smooth)
            ax.plot(x, y, lw=1, alpha=0.55 if spread else 1.0, label=names.get(run) or str(run))
            curves.append((x, y))
        if spread and len(curves) >= 2:
            grid = np.unique(np.concatenate([x for x, _ in curves]))
            grid = grid[(grid >= max(x[0] for x, _ in curves)) & (grid <= min(x[-1] for x, _ in curves))]
            if len(grid):
                ys = np.stack([np.interp(grid, x, y) for x, y in curves])
                mean, std = ys.mean(axis=0), ys.std(axis=0)
                ax.plot(grid, mean, color="black", lw=2, label=f"mean of {len(curves)} runs")
                ax.fill_between(grid, mean - std, mean + std, color="black", alpha=0.15, lw=0)
        drawn += len(curves)
        ax.set_title(tag + (f" (moving average of {smooth})" if smooth > 1 else ""))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if curves:
            ax.legend(fontsize="small", loc="best")
    if not drawn:
        plt.close(fig)
        raise ValueError(f"no run logged {', '.join(tags)}" + (f" among {list(runs)}" if runs else "")
                         + "; `rlarrow sql STORE \"select distinct tag from scalars\"` lists the tags")
    fig.tight_layout()
    if output is not None:
        fig.savefig(output, dpi=120)
    return fig


def plot_episodes(store: Any, *, runs: Sequence[str] | None = None, smooth: int = 10,
                  output: str | os.PathLike[str] | None = None) -> Any:
    """Episode returns: per run in episode order (smoothed), and their histogram; returns the Figure.

    Raises:
        ValueError: the store has no episodes (for these runs).
    """
    plt = _pyplot()
    params: list[Any] = []
    data = _query(store, 'select run_id, episode_id, "return" from episodes where "return" is not null'
                  + _runs_clause(runs, params) + " order by run_id, episode_id", params)
    if not len(data["run_id"]):
        raise ValueError("no episodes with a return" + (f" among runs {list(runs)}" if runs else ""))
    fig, (curve, hist) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    ids = data["run_id"]
    names = _names(store)
    for run in dict.fromkeys(ids.tolist()):
        sel = ids == run
        returns = data["return"][sel]
        label = names.get(run) or str(run)
        curve.plot(np.arange(len(returns)), moving_average(returns, smooth), lw=1.2, label=label)
        hist.hist(returns, bins=30, alpha=0.5, label=label)
    curve.set_title("episode return" + (f" (moving average of {smooth})" if smooth > 1 else ""))
    curve.set_xlabel("episode")
    curve.grid(alpha=0.3)
    curve.legend(fontsize="small")
    hist.set_title("return histogram")
    hist.set_xlabel("return")
    fig.tight_layout()
    if output is not None:
        fig.savefig(output, dpi=120)
    return fig
