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

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError
from rlarrow.core.stats import DEFAULT_QUANTILES, ColumnStats, lerobot_entry
from rlarrow.core.store import Store, StoreLike, StoreReader

__all__ = ["lerobot_stats", "lerobot_stats_json", "stats", "write_stats_json"]


def selected_episodes(store: StoreLike | StoreReader, where: str, *, version: int | None = None) -> pa.Table:
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


def stats(store: StoreLike | StoreReader, *, where: str | None = None, runs: Iterable[str] | None = None,
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
        ``.quantile(q)``, ``.to_dict()``, and :func:`rlarrow.train.normalize.normalizer`.

    Example:
        >>> stats("runs.rlarrow", where="metadata->>'split' = 'train'")  # doctest: +SKIP
        {'action': ColumnStats(shape=(6,), count=81920, ...), ...}
    """
    runs = _arguments.names(runs, "runs", what="run id")
    columns = _arguments.names(columns, "columns", what="column name")
    try:
        return _stats(store, where, runs, episodes, weights, columns, quantiles, version, layout)
    except CorruptFileError:
        if version is not None or not _is_local(store):  # (a bucket's store is read from one manifest)
            raise
    # A commit between this call's reads (a recorder writing) makes the moments and the
    # sketches disagree, which reads as damage: ask again of one version, pinned.
    from rlarrow.core.store import opened

    with opened(store, readonly=True) as st:
        pinned = st.version
    return _stats(store, where, runs, episodes, weights, columns, quantiles, pinned, layout)


def _stats(store: StoreLike | StoreReader, where: str | None, runs: Iterable[str] | None,
           episodes: Iterable[tuple[str, int]] | pa.Table | None, weights: Mapping[str, float] | None,
           columns: Iterable[str] | None, quantiles: bool, version: int | None,
           layout: int | None) -> dict[str, ColumnStats]:
    from rlarrow.core.stored_stats import combine_stored

    with _reading(store, version) as st:
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
        run_list = _arguments.names(runs, "runs", what="run id")
        wanted = _arguments.names(columns, "columns", what="column name")
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


def _is_local(store: StoreLike | StoreReader) -> TypeGuard[StoreLike]:
    """Whether ``store`` is a local store or its path (not a URI, not a ``RemoteStore``)."""
    from rlarrow.core.arguments import uri_scheme

    return isinstance(store, Store) or (isinstance(store, (str, os.PathLike)) and uri_scheme(store) is None)


@contextlib.contextmanager
def _reading(store: StoreLike | StoreReader, version: int | None) -> Iterator[StoreReader]:
    """The store to read statistics from: opened here (and closed) from a path, a URI's as it is."""
    from rlarrow.core.remote import open_reader
    from rlarrow.core.store import opened

    if _is_local(store):
        with opened(store, readonly=True, version=version) as st:
            yield st
    else:  # (a bucket's store holds no open file)
        yield open_reader(store, version=version)


def _check_names(st: StoreReader, runs: list[str] | None, weighted: list[str],
                 columns: list[str] | None) -> list[str] | None:
    """Runs and columns that name nothing in the store are errors, not empty answers.

    Returns the columns, a dict column given by its name (``observation``) as its leaves.
    """
    from rlarrow.core.step_stats import stat_leaves
    from rlarrow.core.stored_stats import layouts_of

    infos = [info for info in layouts_of(st, "steps") if info.schema is not None]
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


def write_stats_json(stats: Mapping[str, ColumnStats] | Mapping[str, Mapping[str, Any]],
                     path: str | os.PathLike[str], quantiles: Iterable[float] = DEFAULT_QUANTILES) -> Path:
    """Write statistics to ``path`` as JSON (NaN as JSON ``NaN``, as Python's json writes it).

    ``stats``: what :func:`lerobot_stats_json` gives (LeRobot's ``stats.json`` itself), or
    ``{column: ColumnStats}`` (written as :func:`lerobot_stats` gives them).
    """
    target = Path(path)
    columns = {k: v for k, v in stats.items() if isinstance(v, ColumnStats)}
    shown = lerobot_stats(columns, quantiles) if len(columns) == len(stats) else stats
    text = json.dumps(shown, indent=2)
    from rlarrow.core.targets import atomic_file

    with atomic_file(target, overwrite=True) as tmp:  # (the one atomic-output helper: whole or absent)
        tmp.write_text(text + "\n", encoding="utf-8")
    return target


def _image_leaves(type_: pa.DataType, name: str = "observation",
                  path: tuple[str, ...] = ()) -> list[tuple[str, tuple[str, ...]]]:
    """The camera frames of an observation type: uint8 ``(H, W, C)`` leaves, C of 1, 3 or 4."""
    from rlarrow.core.tensors import tensor_dtype, tensor_shape

    if isinstance(type_, pa.ExtensionType) and pa.types.is_struct(type_.storage_type):
        type_ = type_.storage_type
    if pa.types.is_struct(type_):
        return [leaf for field in type_ for leaf in
                _image_leaves(field.type, f"{name}.{field.name}", (*path, field.name))]
    try:
        shape, dtype = tensor_shape(type_), tensor_dtype(type_)
    except (ArgumentError, ArgumentTypeError, AttributeError):
        return []
    return [(name, path)] if dtype == "uint8" and len(shape) == 3 and shape[-1] in (1, 3, 4) else []


def _image_stats(st: Store, runs: list[str], chosen: set[tuple[str, int]] | None,
                 weights: Mapping[str, float] | None, quantiles: bool,
                 wanted: list[str] | None) -> dict[str, dict[str, Any]]:
    """Per-channel image statistics in [0, 1] of the selected episodes' frames, as LeRobot's.

    A frame is a step with an action (what a LeRobot dataset holds); each episode's frames
    are sampled as LeRobot samples them (:func:`rlarrow.core.stats.image_channel_stats`).
    """
    import pyarrow.compute as pc

    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.stats import ImageStats, image_channel_stats
    from rlarrow.core.tensors import to_numpy

    per_run: dict[str, dict[str, ImageStats]] = {}
    with_steps = {run for info in st.layouts("steps") for run in info.run_ids}
    for run in runs:
        if run not in with_steps:
            continue  # (a run of scalars alone, or of memory snapshots: no frames)
        with DmEnvRows(st, run_id=run) as reader:
            leaves: list[tuple[str, tuple[str, ...]]] | None = None
            for k in range(reader.num_episodes):
                if chosen is not None and (run, int(reader.episode_ids[k])) not in chosen:
                    continue
                table = reader.episode_table(k, columns=["observation", "action"])
                if leaves is None:
                    leaves = [leaf for leaf in _image_leaves(table.schema.field("observation").type)
                              if wanted is None or leaf[0] in wanted]
                if not leaves:
                    break
                keep = pc.is_valid(table.column("action"))
                for name, path in leaves:
                    col: Any = table.column("observation").combine_chunks()
                    for part in path:
                        col = col.field(part)
                    frames = to_numpy(col.filter(keep), fill_value=0)
                    if not len(frames):
                        continue
                    got = image_channel_stats(frames)
                    have = per_run.setdefault(run, {}).get(name)
                    per_run[run][name] = got if have is None else ImageStats.combine([have, got])
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({n for parts in per_run.values() for n in parts}):
        parts = [(run, per_run[run][name]) for run in per_run if name in per_run[run]]
        mix = [float((weights or {}).get(run, 0.0)) for run, _ in parts] if weights else None
        if mix is not None:
            parts = [p for p, w in zip(parts, mix, strict=True) if w > 0]
            mix = [w for w in mix if w > 0]
            if not parts:
                continue
        merged = ImageStats.combine([p[1] for p in parts], weights=mix)
        out[name] = merged.lerobot_entry(DEFAULT_QUANTILES if quantiles else ())
    return out


def lerobot_stats_json(store: StoreLike, *, where: str | None = None, runs: Iterable[str] | None = None,
                       episodes: Iterable[tuple[str, int]] | pa.Table | None = None,
                       weights: Mapping[str, float] | None = None, columns: Iterable[str] | None = None,
                       quantiles: bool = True, version: int | None = None,
                       layout: int | None = None) -> dict[str, dict[str, list[Any]]]:
    """LeRobot's ``meta/stats.json`` of a selection (the arguments are :func:`stats`'s).

    What ``lerobot_dataset``'s ``stats.json`` holds, in its keys and shapes: numeric columns
    element by element (merged from the stored statistics, quantiles of all their values),
    camera frames (uint8 ``(H, W, C)`` observations) per channel in [0, 1] with shape
    ``(C, 1, 1)``, from the frames LeRobot would sample of each episode's steps with an
    action, and ``count`` those frames. Where every selected run came from LeRobot, columns
    take LeRobot's feature names (``reward`` is ``next.reward``). The quantiles are the
    same ones :func:`rlarrow.io.lerobot.export_lerobot` writes for the same data.

    Example:
        >>> lerobot_stats_json("pusht.rlarrow")["observation.image"]["mean"]  # doctest: +SKIP
        [[[0.51]], [[0.47]], [[0.43]]]
    """
    from rlarrow.core.store import opened
    from rlarrow.io.lerobot import FRAME_KEYS
    from rlarrow.io.lerobot.writing import frame_key_stats

    if episodes is not None and not isinstance(episodes, pa.Table):
        episodes = list(episodes)  # (read twice)
    runs = _arguments.names(runs, "runs", what="run id")
    wanted = _arguments.names(columns, "columns", what="column name")
    data = None if wanted is None else [c for c in wanted if c not in FRAME_KEYS]
    keys = FRAME_KEYS if wanted is None else tuple(k for k in FRAME_KEYS if k in wanted)
    result = stats(store, where=where, runs=runs, episodes=episodes, weights=weights, columns=data,
                   quantiles=quantiles, version=version, layout=layout) if data is None or data else {}
    with opened(store, readonly=True, version=version) as st:
        chosen = _chosen_episodes(st, episodes, where)
        all_runs = st.read("runs", columns=["run_id", "source", "metadata", "metadata_types"]).to_pylist()
        selected = [r for r in all_runs if (runs is None or r["run_id"] in set(runs))
                    and (weights is None or float(weights.get(r["run_id"], 0.0)) > 0)]
        images = _image_stats(st, [r["run_id"] for r in selected], chosen, weights, quantiles, data)
        bookkeeping = frame_key_stats(st, _framed_runs(st, all_runs, runs, layout), episodes=chosen,
                                      weights=weights, quantiles=quantiles) if keys else {}
    out = _numeric_entries(result, images, quantiles)
    out.update({name: {k: v.tolist() for k, v in value.items()} for name, value in images.items()})
    _lerobot_names(out, selected)
    out.update({name: {k: v.tolist() for k, v in bookkeeping[name].items()} for name in keys
                if name in bookkeeping})
    return out


def _chosen_episodes(st: Store, episodes: list[tuple[str, int]] | pa.Table | None,
                     where: str | None) -> set[tuple[str, int]] | None:
    """The ``(run_id, episode_id)`` pairs ``episodes`` and ``where`` both keep (None: every episode)."""
    chosen: set[tuple[str, int]] | None = None
    if isinstance(episodes, pa.Table):
        chosen = set(zip(episodes.column("run_id").to_pylist(), episodes.column("episode_id").to_pylist(),
                         strict=True))
    elif episodes is not None:
        chosen = {(str(r), int(e)) for r, e in episodes}
    if where is not None:
        sql = selected_episodes(st, where)
        found = set(zip(sql.column("run_id").to_pylist(), sql.column("episode_id").to_pylist(), strict=True))
        chosen = found if chosen is None else chosen & found
    return chosen


def _framed_runs(st: Store, all_runs: list[dict[str, Any]], runs: list[str] | None,
                 layout: int | None) -> list[str]:
    """The runs with steps (of ``layout``) among ``runs``: the runs table's order, then any without a row."""
    framed = sorted({run for info in st.layouts("steps") if layout is None or info.layout == layout
                     for run in info.run_ids if runs is None or run in set(runs)})
    known = [r["run_id"] for r in all_runs]
    framed.sort(key=lambda run: known.index(run) if run in known else len(known))
    return framed


def _numeric_entries(result: Mapping[str, ColumnStats], images: Mapping[str, Any],
                     quantiles: bool) -> dict[str, dict[str, list[Any]]]:
    """LeRobot's entries of the merged numeric statistics, but for the image columns (and their fields)."""
    out: dict[str, dict[str, list[Any]]] = {}
    for name, value in result.items():
        if value.count and name not in images and not any(name.startswith(i + ".") for i in images):
            out[name] = {k: v.tolist() for k, v in lerobot_entry(
                value, quantiles=DEFAULT_QUANTILES if quantiles and value.has_quantiles else ()).items()}
    return out


def _lerobot_names(out: dict[str, dict[str, list[Any]]], selected: list[dict[str, Any]]) -> None:
    """Where every selected run came from LeRobot, ``reward`` takes its feature name ``next.reward``."""
    from rlarrow.core import metadata as _metadata

    if not selected or not all(r["source"] == "lerobot" for r in selected):
        return
    features: set[str] = set()
    for r in selected:
        meta = _metadata.decode(r["metadata"], r["metadata_types"])
        info = meta.get("info") if isinstance(meta, dict) else None
        if isinstance(info, dict) and isinstance(info.get("features"), dict):
            features |= set(info["features"])
    if "reward" in out and "next.reward" in features:
        out["next.reward"] = out.pop("reward")
