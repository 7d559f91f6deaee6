"""Normalisation statistics of any selection of a store, from what its ``stats`` table keeps.

:func:`stats` merges the statistics every commit of steps stored
(:mod:`rlarrow.core.step_stats`) for the episodes a SQL filter, a list of runs or a list
of episodes selects, or for a weighted mixture of runs; no pass over the steps is made
for what is stored. :func:`lerobot_stats` gives them in the shape of LeRobot's
``meta/stats.json``; ``rlarrow stats STORE -o stats.json`` writes that file.

Example:
    >>> import os, tempfile, numpy as np, rlarrow
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s.rlarrow"))
    >>> for run, offset in (("a", 0.0), ("b", 10.0)):
    ...     _ = store.append("steps", {"run_id": run, "episode_id": [0, 0, 1], "step": [0, 1, 0],
    ...         "env_index": 0, "action": np.array([[0.0], [1.0], [2.0]]) + offset,
    ...         "reward": [1.0, 1.0, 0.0], "is_first": [True, False, True], "is_last": False,
    ...         "is_terminal": False})
    ...     _ = store.append("episodes", {"run_id": run, "episode_id": [0, 1], "num_steps": [2, 1],
    ...         "env_index": 0, "terminated": True, "truncated": False, "partial_start": False,
    ...         "partial_end": False, "return": [2.0, 0.0]})
    >>> stats(store)["action"].mean.tolist()
    [6.0]
    >>> stats(store, where="return > 1")["action"].max.tolist()
    [11.0]
    >>> stats(store, weights={"a": 3, "b": 1})["action"].mean.tolist()
    [3.5]
    >>> lerobot_stats(stats(store, runs=["a"]))["action"]["q50"]
    [1.0]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError
from rlarrow.core.stats import DEFAULT_QUANTILES, ColumnStats
from rlarrow.core.store import StoreLike

__all__ = ["lerobot_stats", "selected_episodes", "stats", "write_stats_json"]


def selected_episodes(store: StoreLike, where: str, *, version: int | None = None) -> pa.Table:
    """The ``(run_id, episode_id)`` pairs of the ``episodes`` rows a SQL filter keeps.

    ``where`` is a DuckDB boolean expression over the ``episodes`` view (``return > 100``,
    ``metadata->>'split' = 'train'``, ``run_id IN (SELECT run_id FROM runs WHERE ...)``).
    """
    from rlarrow.query.connection import connect

    con = connect(store, version=version, warn=False)
    import duckdb

    try:
        return con.sql(f"SELECT run_id, episode_id FROM episodes WHERE {where}").to_arrow_table()
    except duckdb.Error as exc:  # the user's SQL: say so, and what it runs over
        columns = [c[0] for c in con.sql("SELECT * FROM episodes LIMIT 0").description]
        first = str(exc).strip().splitlines()[0]
        raise ArgumentError(f"where={where!r} is not a filter DuckDB can run over the episodes table "
                            f"({first}); its columns are {columns}; a run's labels: run_id IN "
                            "(SELECT run_id FROM runs WHERE metadata->>'split' = 'train')") from None
    finally:
        con.close()


def stats(store: StoreLike, *, where: str | None = None, runs: Iterable[str] | None = None,
          episodes: Iterable[tuple[str, int]] | pa.Table | None = None,
          weights: Mapping[str, float] | None = None, columns: Iterable[str] | None = None,
          quantiles: bool = True, version: int | None = None,
          layout: int | None = None) -> dict[str, ColumnStats]:
    """Per-element statistics of the steps of the episodes selected, merged from the store.

    Args:
        store: a store or its path.
        where: a SQL filter over the ``episodes`` table (:func:`selected_episodes`); only
            episodes with an ``episodes`` row are then selected.
        runs: only these runs.
        episodes: only these ``(run_id, episode_id)`` pairs (or a table of those columns,
            such as :func:`selected_episodes` gives).
        weights: a mixture: ``{run_id: weight}``, each run's statistics weighted as if
            sampled with that probability (weights are normalised; see
            :meth:`ColumnStats.combine`), within what the other arguments select.
        columns: only these columns (``observation``, ``action``, ``observation.state``,
            ``reward``, ``discount``).
        quantiles: merge the quantile sketches too; False is faster (moments only).
        version: the store as it was at this version.
        layout: one steps layout, for stores whose runs' observations differ in shape.

    Returns:
        ``{column: ColumnStats}``: ``.mean``, ``.std``, ``.min``, ``.max``,
        ``.quantile(q)``, ``.to_dict()``, and :func:`rlarrow.core.stats.normalizer`.

    Example:
        >>> stats("runs.rlarrow", where="metadata->>'split' = 'train'")  # doctest: +SKIP
        {'action': ColumnStats(shape=(6,), count=81920, ...), ...}
    """
    if isinstance(runs, str):
        raise ArgumentTypeError("runs takes a list of run ids, not one string")
    try:
        return _stats(store, where, runs, episodes, weights, columns, quantiles, version, layout)
    except CorruptFileError:
        if version is not None:
            raise
    # A commit between this call's reads (a recorder writing) makes the moments and the
    # sketches disagree, which reads as damage: ask again of one version, pinned.
    from rlarrow.core.store import opened

    with opened(store, readonly=True) as st:
        pinned = st.version
    return _stats(store, where, runs, episodes, weights, columns, quantiles, pinned, layout)


def _stats(store: StoreLike, where: str | None, runs: Iterable[str] | None,
           episodes: Iterable[tuple[str, int]] | pa.Table | None, weights: Mapping[str, float] | None,
           columns: Iterable[str] | None, quantiles: bool, version: int | None,
           layout: int | None) -> dict[str, ColumnStats]:
    from rlarrow.core.step_stats import combine_stored
    from rlarrow.core.store import opened

    with opened(store, readonly=True, version=version) as st:
        chosen: Any = None
        if isinstance(episodes, pa.Table):
            pairs = (episodes.column("run_id").to_pylist(), episodes.column("episode_id").to_pylist())
            chosen = list(zip(*pairs, strict=True))
        elif episodes is not None:
            chosen = list(episodes)
        if where is not None:
            by_sql = selected_episodes(st, where)
            if chosen is not None:
                keep = {(str(r), int(e)) for r, e in chosen}
                chosen = [(r, e) for r, e in zip(by_sql.column("run_id").to_pylist(),
                                                 by_sql.column("episode_id").to_pylist(), strict=True)
                          if (r, e) in keep]
            else:
                chosen = by_sql
        run_list = None if runs is None else [str(r) for r in runs]
        wanted = None if columns is None else [columns] if isinstance(columns, str) else list(columns)
        wanted = _check_names(st, run_list, list(weights or ()), wanted)
        if weights is None:
            return combine_stored(st, runs=run_list, episodes=chosen, columns=wanted, quantiles=quantiles,
                                  layout=layout)
        if not isinstance(weights, Mapping) or not weights:
            raise ArgumentError("weights: give {run_id: weight, ...} for the runs of the mixture")
        parts: dict[str, list[ColumnStats]] = {}
        mix: dict[str, list[float]] = {}
        for run, weight in weights.items():
            if run_list is not None and run not in run_list:
                continue
            if not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
                raise ArgumentError(f"weights: run {run!r} has weight {weight!r}; weights are finite "
                                    "and >= 0")
            if weight == 0:
                continue  # (left out of the mixture: it need not have steps)
            got = combine_stored(st, runs=[run], episodes=chosen, columns=wanted, quantiles=quantiles,
                                 layout=layout)
            if not got:
                raise ArgumentError(f"weights: run {run!r} has no steps in the selection")
            for name, value in got.items():
                parts.setdefault(name, []).append(value)
                mix.setdefault(name, []).append(float(weight))
        if not parts:
            raise ArgumentError(f"weights: no run of {sorted(weights)} has a weight above 0 in the selection")
        return {name: ColumnStats.combine(parts[name], weights=mix[name]) for name in sorted(parts)}


def _check_names(st: Any, runs: list[str] | None, weighted: list[str],
                 columns: list[str] | None) -> list[str] | None:
    """Runs and columns that name nothing in the store are errors, not empty answers.

    Returns the columns, a dict column given by its name (``observation``) as its leaves.
    """
    from rlarrow.core.step_stats import stat_leaves

    infos = [info for info in st.layouts("steps") if info.schema is not None]
    if runs is not None or weighted:
        known = {r for info in infos for r in info.run_ids}
        unknown = sorted({*(runs or []), *weighted} - known)
        if unknown:
            sample = sorted(known)[:5]
            raise ArgumentError(f"no steps of run(s) {unknown} in the store; its runs include {sample} "
                                "(rlarrow sql STORE \"select run_id from runs\")")
        outside = sorted(set(weighted) - set(runs or weighted))
        if outside:
            raise ArgumentError(f"weights: run(s) {outside} are not among runs={runs}; weight the runs "
                                "selected, or select them too")
    if columns is not None:
        known_columns = {name for info in infos for name, _, _ in stat_leaves(info.schema)}
        prefixes = {name.split(".")[0] for name in known_columns}
        unknown = sorted(c for c in columns if c not in known_columns and c not in prefixes)
        if unknown:
            raise ArgumentError(f"no statistics of column(s) {unknown}; the steps have statistics of "
                                f"{sorted(known_columns)} (columns wider than 4,096 elements have none)")
        return sorted({leaf for c in columns for leaf in known_columns
                       if leaf == c or leaf.startswith(c + ".")})
    return None


def lerobot_stats(stats: Mapping[str, ColumnStats],
                  quantiles: Iterable[float] = DEFAULT_QUANTILES) -> dict[str, dict[str, list[Any]]]:
    """Statistics in the shape of LeRobot's ``meta/stats.json``: ``{feature: {mean, std, ...}}``.

    Each feature has ``mean``, ``std``, ``min``, ``max`` (shaped like one value),
    ``count`` (``[rows]``) and ``q01``...``q99`` when there are sketches
    (:meth:`ColumnStats.to_dict`). A column without values is left out.
    """
    qs = tuple(quantiles)
    return {name: value.to_dict(qs) for name, value in stats.items() if value.count}


def write_stats_json(stats: Mapping[str, ColumnStats], path: str | os.PathLike[str],
                     quantiles: Iterable[float] = DEFAULT_QUANTILES) -> Path:
    """Write :func:`lerobot_stats` to ``path`` (NaN as JSON ``NaN``, as Python's json writes it)."""
    target = Path(path)
    text = json.dumps(lerobot_stats(stats, quantiles), indent=2)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target
