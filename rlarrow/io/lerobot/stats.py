"""A LeRobot dataset's statistics: each episode's and the dataset's, with LeRobot's keys and shapes.

min, max, mean, std, count, and (v3.0) the quantiles q01 ... q99; images per channel in
[0, 1]. The dataset's are every episode's merged (moments pooled, quantiles of all the values:
KLL sketches, :func:`rlarrow.core.stats.lerobot_entry`). :func:`frame_key_stats` gives those
of LeRobot's bookkeeping features for ``rlarrow stats -o``.

Example:
    >>> import numpy as np
    >>> from rlarrow.io.lerobot.features import numeric_feature
    >>> f = numeric_feature("x", np.zeros(3), None)
    >>> stats_entry(column_stats(np.array([1.0, 2.0, 3.0]), f), f, quantiles=False)["max"]
    array([3.])
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from rlarrow.core import metadata as _metadata
from rlarrow.core.stats import DEFAULT_QUANTILES, ColumnStats, ImageStats, image_channel_stats, lerobot_entry
from rlarrow.core.store import StoreLike
from rlarrow.io.lerobot.dataset_meta import FRAME_KEYS
from rlarrow.io.lerobot.episode_frames import frame_count, frame_keys, numbering, run_info
from rlarrow.io.lerobot.features import Feature, numeric_feature

__all__ = ["frame_key_stats"]


def frame_key_stats(
    store: StoreLike,
    runs: Iterable[str],
    *,
    episodes: Collection[tuple[str, int]] | None = None,
    weights: Mapping[str, float] | None = None,
    quantiles: bool = True,
) -> dict[str, dict[str, np.ndarray]]:
    """The statistics of LeRobot's bookkeeping features, as :func:`export_lerobot` writes them.

    ``timestamp``, ``frame_index``, ``episode_index``, ``index`` and ``task_index`` (LeRobot's
    ``FRAME_KEYS``) of the frames an export of these episodes writes: the steps with an
    action; timestamps the run's own for a LeRobot import, else frame / fps (30 unless the
    run's ``info.json`` says); episodes numbered from 0 and frames from 0 over the runs in the
    order given, each run's episodes in its order (``episodes``: only these ``(run_id,
    episode_id)``); ``task_index`` the run's own, else 0 (the export's one task). Each entry
    has LeRobot's keys and shapes; the quantiles (``quantiles``, and ``datasketches``
    installed) are those of the values merged. With ``weights`` (``{run_id: w}``) each run's
    statistics are mixed with its weight (:meth:`ColumnStats.combine`); runs of weight 0
    are left out. ``rlarrow stats -o`` adds these to the data features' statistics.

    Example:
        >>> frame_key_stats("pusht.rlarrow", ["pusht"])["index"]["max"]  # doctest: +SKIP
        array([18])
    """
    from rlarrow.core.dm_env_rows import DmEnvRows

    features: dict[str, Feature] = {}
    parts: dict[str, list[tuple[str, ColumnStats]]] = {}
    episode = first = 0
    for run_id in runs:
        if weights is not None and not float(weights.get(run_id, 0.0)) > 0:
            continue
        with DmEnvRows(store, run_id=run_id) as reader:
            run = reader.run
            _, info, own = run_info(run.get("source"), _metadata.decode(run.get("metadata"),
                                                                      run.get("metadata_types")))
            rate = own or 30
            schema = reader.store.schema("steps")
            have = set(schema.names) if schema is not None else set()
            if "action" not in have:
                continue  # (no frames: the export refuses such a run)
            kept = ["infos", "metadata", "metadata_types"] if info is not None else []  # (its frame features)
            columns = ["is_last", "action", *kept]
            columns = [c for c in columns if c in have]
            for k in range(reader.num_episodes):
                if episodes is not None and (run_id, int(reader.episode_ids[k])) not in episodes:
                    continue
                table = reader.episode_table(k, columns=columns)
                n = frame_count(table)
                if not n:
                    continue
                values = frame_keys(table, n, info is not None, rate, timestamps=rate == own)
                values.update(numbering(n, episode, first))
                for name in FRAME_KEYS:
                    if name not in features:  # fixed by the first frames, as the export's
                        features[name] = numeric_feature(name, values[name], info)
                    feature = features[name]
                    stats = column_stats(feature.check(values[name], name, episode), feature)
                    assert isinstance(stats, ColumnStats)  # (numeric)
                    parts.setdefault(name, []).append((run_id, stats))
                episode, first = episode + 1, first + n
    out = {}
    for name, got in parts.items():
        if weights is None:
            whole = ColumnStats.combine([p for _, p in got])
        else:
            order = list(dict.fromkeys(run for run, _ in got))
            per_run = [ColumnStats.combine([p for r, p in got if r == run]) for run in order]
            whole = ColumnStats.combine(per_run, weights=[float(weights[run]) for run in order])
        out[name] = stats_entry(whole, features[name], quantiles=quantiles)
    return out


def column_stats(values: np.ndarray, feature: Feature) -> ColumnStats | ImageStats:
    """An episode's mergeable statistics of a feature (images: per channel, in [0, 1]).

    Quantiles of numeric features need ``datasketches`` (the ``stats`` extra): without it,
    none are written for them.
    """
    import importlib.util

    if feature.kind in ("image", "video"):
        return image_channel_stats(values)
    shaped = values.reshape(len(values), *(feature.shape or (1,)))
    return ColumnStats.from_array(shaped, sketches=importlib.util.find_spec("datasketches") is not None)


def stats_entry(stats: ColumnStats | ImageStats, feature: Feature, *,
                quantiles: bool) -> dict[str, np.ndarray]:
    """LeRobot's keys and shapes (:func:`rlarrow.core.stats.lerobot_entry`); v2.1 has no quantiles."""
    qs = DEFAULT_QUANTILES if quantiles else ()
    if isinstance(stats, ImageStats):
        return stats.lerobot_entry(qs)
    integer = feature.kind == "numeric" and feature.dtype.kind in "biu"
    return lerobot_entry(stats, integer=integer, quantiles=qs)


def listed(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Statistics as JSON-ready lists."""
    return {name: {k: v.tolist() for k, v in values.items()} for name, values in stats.items()}

