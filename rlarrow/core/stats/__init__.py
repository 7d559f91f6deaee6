"""Mergeable per-element normalisation statistics of tensor columns.

A :class:`ColumnStats` summarises one numeric column whose rows are tensors of one shape
(observations, actions, rewards; a scalar column has shape ``()``), element by element
(the tensor flattened in C order; ``shape`` restores it):

* ``count``: the rows seen; ``nan_count``: per element, the NaN values, which are left out
  of everything else (so each element has ``count - nan_count`` values);
* ``mean`` and ``m2`` (the sum of squared deviations from the mean) in float64, added and
  merged with Welford's and Chan et al.'s formulas, which keep their precision where a
  sum and a sum of squares would not (values of 1e6 + noise, long runs);
* ``min`` and ``max``;
* one KLL quantile sketch per element (Apache DataSketches' ``kll_doubles_sketch``, ``k``
  = 200 by default: about 1.3 % normalised rank error, a few KiB per element).

Every part merges exactly (the sketches within their rank error), so the statistics of
any selection of episodes, runs or datasets are a merge of the stored per-episode rows
(:func:`combine_rows`), never a second pass over the data, and never an average of
per-episode quantiles: the quantile of a union is not the average of the quantiles
(LeRobot issue 4156, where ``q01``/``q99`` of merged datasets came out wrong).

Weighted mixtures (sample dataset A with probability 0.7, B with 0.3) are
``ColumnStats.combine([a, b], weights=[0.7, 0.3])``; see :meth:`ColumnStats.combine` for
how their quantiles are found without a weighted sketch merge, which KLL does not have.

Storage: :meth:`ColumnStats.to_arrow_row` gives plain Arrow values (lists of float64 and
int64, and one binary KLL sketch per element, DataSketches' own serialisation, readable
by its Java and C++ libraries); :data:`STATS_SCHEMA` is the table of such rows with a
``column`` name, :func:`stats_table` builds one. Nothing is pickled.

Normalisation: :func:`rlarrow.train.normalize.normalizer` turns statistics into the function a
training loop applies to a batch (``mean_std``, ``min_max`` or ``quantile``, as LeRobot and
openpi do); ``rlarrow.core.stats.normalizer`` still works and warns.

The package, each part on the ones before it:

* :mod:`.moments`: counts, NaNs, mean, M2, min and max, and :func:`.moments.merge`, the one
  merge of a column's moments every caller uses;
* :mod:`.sketches`: the KLL sketches, fed, merged, and their bytes parsed before
  DataSketches reads stored ones;
* :mod:`.arrow_form`: the ``stats`` table's encoding (:data:`STATS_SCHEMA`), written and
  read back checked;
* :mod:`.column`: :class:`ColumnStats`, :func:`stats_table`, :func:`combine_rows`;
* :mod:`.lerobot_stats`: LeRobot's ``stats.json`` entries and image statistics.

``datasketches`` is an optional dependency (the ``stats`` extra); moments, min and max
work without it, quantiles need it.

Example:
    >>> import numpy as np
    >>> from rlarrow.core.stats import ColumnStats
    >>> episode_1 = ColumnStats.from_array(np.array([[0.0, 10.0], [2.0, 30.0]]))
    >>> episode_2 = ColumnStats.from_array(np.array([[4.0, 20.0]]))
    >>> both = ColumnStats.combine([episode_1, episode_2])
    >>> both.count, both.mean.tolist(), both.max.tolist(), both.quantile(0.5).tolist()
    (3, [2.0, 20.0], [4.0, 30.0], [2.0, 20.0])
    >>> sorted(both.to_dict())
    ['count', 'max', 'mean', 'min', 'q01', 'q10', 'q50', 'q90', 'q99', 'std']
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from rlarrow.core.stats.arrow_form import STATS_SCHEMA as STATS_SCHEMA
from rlarrow.core.stats.column import (
    DEFAULT_K as DEFAULT_K,
)
from rlarrow.core.stats.column import (
    DEFAULT_QUANTILES as DEFAULT_QUANTILES,
)
from rlarrow.core.stats.column import (
    ColumnStats,
    combine_rows,
    stats_table,
)
from rlarrow.core.stats.column import (
    adopt_sketches as adopt_sketches,
)
from rlarrow.core.stats.lerobot_stats import ImageStats as ImageStats
from rlarrow.core.stats.lerobot_stats import image_channel_stats as image_channel_stats
from rlarrow.core.stats.lerobot_stats import lerobot_entry
from rlarrow.core.stats.lerobot_stats import lerobot_frames as lerobot_frames
from rlarrow.core.stats.moments import merge_moments
from rlarrow.core.stats.sketches import datasketches, feed_sketches

__all__ = ["ColumnStats", "combine_rows", "lerobot_entry", "stats_table"]

#: names that moved out of core (to the layer that uses them): still found here, with a warning
_MOVED_NAMES = {"normalizer": "rlarrow.train.normalize", "NormalizationMode": "rlarrow.train.normalize"}

# (what rlarrow.core.step_stats reads by these names; the public ones are in .moments and .sketches)
_datasketches = datasketches
_feed_sketches = feed_sketches
_merge_moments = merge_moments


def __getattr__(name: str) -> Any:
    new = _MOVED_NAMES.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"rlarrow.core.stats.{name} has moved to {new}.{name}; import it from there "
                  "(the old path will be removed in rlarrow 1.0)", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(new), name)
