"""Learning curves and episode returns from a store, with matplotlib (the ``plot`` extra).

:func:`plot_scalars` draws one panel per tag: a line per run (value against step, smoothed
by a moving average of ``smooth`` points) and, with two runs or more, their mean with a
band of ± one standard deviation (runs are put on a common step grid by linear
interpolation). ``group_by`` draws one mean ± std per group of runs instead of one across
all of them: by a ``runs`` column (``name``, ``source``, ...) or by a key of the runs'
metadata (``algo``, ``params.lr``), so that runs of different algorithms are not averaged
together. :func:`plot_episodes` draws each run's episode returns against the env steps
taken when each episode ended (the same grouping applies), and their histogram. Runs are
chosen by id or by name. The same from a shell:
``rlarrow plot STORE --tag TAG --group-by algo -o curves.png``.

Example:
    >>> from rlarrow.query.plot import plot_scalars  # doctest: +SKIP
    >>> fig = plot_scalars("runs.rlarrow", "train/episode_return", smooth=10, group_by="algo",
    ...                    output="c.png")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import StoreError

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["PlotError", "moving_average", "plot_episodes", "plot_scalars"]

#: ``runs`` columns ``group_by`` can name; any other name is a key of the runs' metadata.
RUN_COLUMNS = ("run_id", "name", "source", "source_path", "source_version", "alignment", "num_envs")


class PlotError(StoreError, ValueError):
    """What a plot asks for is not in the store: a run, a tag, episodes with returns."""


def _pyplot() -> Any:
    from rlarrow.core.deps import require

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


class _Runs:
    """The store's runs, read once per plot: names, groups, and the runs chosen by id or name."""

    def __init__(self, con: Any, store_path: str, table: str, runs: Sequence[str] | str | None,
                 group_by: str | None, within: Sequence[str] = ()):
        self.within = list(within)  # tables read in one layout (connect's layout=): their runs only
        data = con.execute("select run_id, name, num_envs from runs order by run_id").fetchall()
        # runs the plotted table has without a row in runs (appended without add_run) count too
        self.ids = [r[0] for r in data] + [r[0] for r in con.execute(
            f"select distinct run_id from {table} where run_id not in (select run_id from runs)").fetchall()]
        self.names = {r[0]: r[1] for r in data if r[1] is not None}
        self.num_envs = {r[0]: r[2] for r in data if r[2] is not None}
        self.chosen = self._choose(store_path, _arguments.names(runs, "runs", what="run id"))
        self.group_by = group_by
        self.groups: dict[str, str] = {}
        if group_by is not None:
            self.groups = self._groups(con, store_path, group_by)
        counts: dict[str, int] = {}
        for name in self.names.values():
            counts[name] = counts.get(name, 0) + 1
        self._shared = {n for n, c in counts.items() if c > 1}

    def _choose(self, store_path: str, runs: Sequence[str] | None) -> list[str] | None:
        if not runs:
            return None
        chosen: list[str] = []
        unknown = []
        for item in runs:
            matches = [item] if item in self.ids else [r for r, n in self.names.items() if n == item]
            if not matches:
                unknown.append(item)
            chosen += [m for m in matches if m not in chosen]
        if unknown:
            known = sorted(set(self.names.values())) or ["(no run has a name)"]
            shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
            raise PlotError(f"{store_path}: no run has the id or name {', '.join(map(repr, unknown))}; the "
                            f"runs' names: {shown} (`rlarrow info {store_path} --runs 0` lists ids, names)")
        return chosen

    def _groups(self, con: Any, store_path: str, key: str) -> dict[str, str]:
        if key in RUN_COLUMNS:
            rows = con.execute(f'select run_id, "{key}"::varchar from runs').fetchall()
        else:
            path = "$" + "".join('."' + part.replace('"', '\\"') + '"' for part in key.split("."))
            rows = con.execute("select run_id, json_extract(metadata, ?)::varchar from runs",
                               [path]).fetchall()
            if self.ids and all(v is None for _, v in rows):
                raise PlotError(f"{store_path}: group_by={key!r} (--group-by) is neither a runs column "
                                f"({', '.join(RUN_COLUMNS)}) nor a metadata key of any run; "
                                f"`rlarrow info {store_path}` shows the runs' metadata")
        out = {}
        for run_id, value in rows:
            text = "(none)" if value is None else value.strip('"') if value.startswith('"') else value
            out[run_id] = text if key == "name" else f"{key}={text}"
        return out

    def where(self, params: list[Any]) -> str:
        """A SQL condition choosing the chosen runs (appending their ids to ``params``)."""
        layouts = "".join(f" and run_id in (select distinct run_id from {t})" for t in self.within)
        if self.chosen is None:
            return layouts
        params.extend(self.chosen)
        return f" and run_id in ({', '.join('?' for _ in self.chosen)})" + layouts

    def label(self, run_id: str) -> str:
        """The run's name (with its id where two runs share the name), or its id."""
        name = self.names.get(run_id)
        if name is None:
            return str(run_id)
        return f"{name} ({run_id})" if name in self._shared else name


def _legend(ax: Any) -> None:
    """The axes' legend with each label once."""
    handles, labels = ax.get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for handle, label in zip(handles, labels, strict=True):
        seen.setdefault(label, handle)
    if seen:
        ax.legend(list(seen.values()), list(seen), fontsize="small", loc="best")


def _mean_std(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The curves on the x values every one of them covers: grid, mean, std."""
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    grid = grid[(grid >= max(x[0] for x, _ in curves)) & (grid <= min(x[-1] for x, _ in curves))]
    if not len(grid):
        return grid, grid, grid
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    return grid, ys.mean(axis=0), ys.std(axis=0)


def _draw(ax: Any, curves: list[tuple[str, np.ndarray, np.ndarray]], runs: _Runs, spread: bool) -> None:
    """A line per run; with ``spread``, mean ± std per group (all runs: one group) of two runs or more."""
    if runs.group_by is None:
        for run, x, y in curves:
            ax.plot(x, y, lw=1, alpha=0.55 if spread and len(curves) >= 2 else 1.0, label=runs.label(run))
        groups = {"all runs": [(x, y) for _, x, y in curves]} if spread and len(curves) >= 2 else {}
        colors = dict.fromkeys(groups, "black")
    else:
        members: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for run, x, y in curves:
            members.setdefault(runs.groups.get(run, "(none)"), []).append((x, y))
        import matplotlib

        cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
        colors = {g: cycle[i % len(cycle)] for i, g in enumerate(members)}
        groups = {}
        for group, items in members.items():
            many = spread and len(items) >= 2
            for x, y in items:
                ax.plot(x, y, lw=1, color=colors[group], alpha=0.35 if many else 1.0,
                        label="_nolegend_" if many else f"{group} ({len(items)} run{'s' * (len(items) > 1)})")
            if many:
                groups[group] = items
    for group, items in groups.items():
        grid, mean, std = _mean_std(items)
        if len(grid):
            ax.plot(grid, mean, color=colors[group], lw=2, label=f"{group} mean ± std ({len(items)} runs)")
            ax.fill_between(grid, mean - std, mean + std, color=colors[group], alpha=0.15, lw=0)


def _connect(store: StoreLike, layout: int | Mapping[str, int] | None) -> tuple[Any, str]:
    from rlarrow.query.connection import connect, readonly_store

    st = readonly_store(store)
    return connect(st, layout=layout, warn=False), os.fspath(st.path)


def _within(layout: int | Mapping[str, int] | None) -> list[str]:
    """The tables whose runs a plot is limited to: those ``layout`` reads one layout of."""
    return [] if layout is None else ["steps"] if isinstance(layout, int) else list(layout)


def plot_scalars(store: StoreLike, tags: Sequence[str] | str, *, runs: Sequence[str] | str | None = None,
                 smooth: int = 0, spread: bool = True, group_by: str | None = None,
                 output: str | os.PathLike[str] | None = None,
                 layout: int | Mapping[str, int] | None = None) -> Any:
    """Learning curves of ``tags`` (one panel each), a line per run; returns the Figure.

    Args:
        store: a store or its path.
        tags: the scalar tags to draw.
        runs: only these runs, by id or name (default: every run that logged the tag).
        smooth: moving average over this many points (0: raw).
        spread: with two runs or more, draw their mean and a ± std band (per group).
        group_by: a ``runs`` column (``name``, ``source``, ...) or a metadata key (``algo``;
            ``params.lr`` reaches into nested metadata): one mean ± std band per value, each
            labelled ``"VALUE mean ± std (n runs)"``; default: one across all runs.
        output: save the figure there (png, svg, pdf: by the extension).
        layout: only the runs whose steps are in this steps layout (a store whose runs'
            tensors differ, e.g. PPO and DQN runs: :meth:`~rlarrow.Store.layouts`), or
            ``{"memory": 2}``: those in memory layout 2.

    Raises:
        PlotError: no run logged any of the tags, a run is unknown, or ``group_by`` names
            nothing the runs have.

    Example:
        >>> fig = plot_scalars("runs.rlarrow", ["train/loss"], group_by="algo")  # doctest: +SKIP
        >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]  # doctest: +SKIP
        ['algo=ppo mean ± std (3 runs)', 'algo=sac mean ± std (3 runs)']
    """
    tags = _arguments.names(tags, "tags", what="scalar tag")
    _arguments.integer(smooth, "smooth", minimum=0)
    plt = _pyplot()
    con, path = _connect(store, layout)
    try:
        chosen = _Runs(con, path, "scalars", runs, group_by, _within(layout))
        fig, axes = plt.subplots(len(tags), 1, figsize=(8, 3.2 * len(tags)), squeeze=False)
        drawn = 0
        for ax, tag in zip(axes[:, 0], tags, strict=True):
            params: list[Any] = [tag]
            data = con.execute("select run_id, step, value from scalars where tag = ?" + chosen.where(params)
                               + " order by run_id, step, wall_time", params).fetchnumpy()
            ids = data["run_id"]
            curves = []
            for run in dict.fromkeys(ids.tolist()):
                sel = ids == run
                curves.append((run, data["step"][sel].astype(np.float64),
                               moving_average(data["value"][sel], smooth)))
            _draw(ax, curves, chosen, spread)
            drawn += len(curves)
            ax.set_title(tag + (f" (moving average of {smooth})" if smooth > 1 else ""))
            ax.set_xlabel("step")
            ax.set_ylabel(tag)
            ax.grid(alpha=0.3)
            _legend(ax)
    finally:
        con.close()
    if not drawn:
        plt.close(fig)
        raise PlotError(f"no run logged {', '.join(tags)}" + (f" among {list(chosen.chosen or [])}"
                                                             if runs else "")
                        + f"; `rlarrow sql {path} \"select distinct tag from scalars\"` lists the tags")
    fig.tight_layout()
    if output is not None:
        _save(fig, output)
    return fig


def episode_end_steps(run_episodes: dict[str, np.ndarray], num_envs: int | None = None) -> np.ndarray:
    """Env steps taken, all environments together, when each episode of one run ended.

    Each environment's episodes are in time order by ``episode_id``; an episode ends when
    its environment has taken the actions (``num_steps - 1``) of its episodes so far, and
    vectorized environments step together, so that is that many steps times the number of
    environments. ``episode_id`` alone is no clock: ids of episodes unrolled from a replay
    memory run environment by environment.

    Args:
        run_episodes: ``episode_id``, ``env_index`` and ``num_steps`` arrays of one run.
        num_envs: environments of the run (default: the env indices seen).

    Example:
        >>> episode_end_steps({"episode_id": np.array([0, 1, 2, 3]), "env_index": np.array([0, 0, 1, 1]),
        ...                    "num_steps": np.array([4, 3, 2, 6])}).tolist()
        [6, 10, 2, 12]
    """
    ids = np.asarray(run_episodes["episode_id"])
    envs = np.asarray(run_episodes["env_index"])
    actions = np.maximum(np.asarray(run_episodes["num_steps"], dtype=np.int64) - 1, 0)
    n_envs = num_envs or len(np.unique(envs)) or 1
    ends = np.zeros(len(ids), np.int64)
    for env in np.unique(envs):
        sel = np.flatnonzero(envs == env)
        order = sel[np.argsort(ids[sel], kind="stable")]
        ends[order] = np.cumsum(actions[order]) * n_envs
    return ends


def plot_episodes(store: StoreLike, *, runs: Sequence[str] | str | None = None, smooth: int = 10,
                  spread: bool = True, group_by: str | None = None,
                  output: str | os.PathLike[str] | None = None,
                  layout: int | Mapping[str, int] | None = None) -> Any:
    """Episode returns against env steps, per run (smoothed), and their histogram; returns the Figure.

    The x value of an episode is the env steps taken, all environments together, when it
    ended (see :func:`episode_end_steps`); each run's episodes are drawn in that order.

    Args:
        store: a store or its path.
        runs: only these runs, by id or name.
        smooth: moving average over this many episodes.
        spread: with two runs or more, their mean and a ± std band (per group).
        group_by: as in :func:`plot_scalars`.
        output: save the figure there.
        layout: only the runs of one layout, as in :func:`plot_scalars`.

    Raises:
        PlotError: the store has no episodes with a return (for these runs), or a run is unknown.
    """
    _arguments.integer(smooth, "smooth", minimum=0)
    plt = _pyplot()
    con, path = _connect(store, layout)
    try:
        chosen = _Runs(con, path, "episodes", runs, group_by, _within(layout))
        params: list[Any] = []
        data = con.execute('select run_id, episode_id, env_index, num_steps, "return" from episodes '
                           'where "return" is not null' + chosen.where(params)
                           + " order by run_id, episode_id", params).fetchnumpy()
    finally:
        con.close()
    if not len(data["run_id"]):
        raise PlotError(f"{path}: no episodes with a return" + (f" among runs {list(runs)}" if runs else ""))
    fig, (curve, hist) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    ids = data["run_id"]
    curves = []
    returns_of: dict[str, list[np.ndarray]] = {}
    for run in dict.fromkeys(ids.tolist()):
        sel = ids == run
        ends = episode_end_steps({k: data[k][sel] for k in ("episode_id", "env_index", "num_steps")},
                                 chosen.num_envs.get(run))
        order = np.argsort(ends, kind="stable")
        returns = np.asarray(data["return"][sel], dtype=np.float64)[order]
        curves.append((run, ends[order].astype(np.float64), moving_average(returns, smooth)))
        key = chosen.groups.get(run, "(none)") if group_by is not None else chosen.label(run)
        returns_of.setdefault(key, []).append(returns)
    _draw(curve, curves, chosen, spread)
    for label, parts in returns_of.items():
        hist.hist(np.concatenate(parts), bins=30, alpha=0.5, label=label)
    curve.set_title("episode return" + (f" (moving average of {smooth})" if smooth > 1 else ""))
    curve.set_xlabel("env steps")
    curve.set_ylabel("episode return")
    curve.grid(alpha=0.3)
    _legend(curve)
    hist.set_title("return histogram")
    hist.set_xlabel("episode return")
    hist.set_ylabel("episodes")
    _legend(hist)
    fig.tight_layout()
    if output is not None:
        _save(fig, output)
    return fig


def _save(fig: Any, output: str | os.PathLike[str]) -> None:
    """Save ``fig`` whole or not at all (a full disk leaves no half image; its folder is made)."""
    from rlarrow.core.targets import atomic_file

    with atomic_file(output, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=120)
