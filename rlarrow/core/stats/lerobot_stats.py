"""LeRobot's ``stats.json`` entries from column statistics, and its image statistics.

What :func:`~rlarrow.query.dataset_stats.lerobot_stats` and ``export_lerobot`` write: one
feature's entry from :class:`~rlarrow.core.stats.ColumnStats` (:func:`lerobot_entry`), and
the per-channel statistics of camera frames, on the frames LeRobot itself samples
(:func:`lerobot_frames`, :func:`image_channel_stats`, :class:`ImageStats`).

Example:
    >>> import numpy as np
    >>> entry = lerobot_entry(ColumnStats.from_array(np.array([1.0, 3.0])), quantiles=())
    >>> sorted(entry), entry["mean"].tolist()
    (['count', 'max', 'mean', 'min', 'std'], [2.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rlarrow.core.errors import ArgumentError
from rlarrow.core.stats.column import DEFAULT_QUANTILES, ColumnStats, check_ranks

__all__ = ["lerobot_entry"]

_F64 = npt.NDArray[np.float64]


def lerobot_frames(n: int) -> npt.NDArray[np.int64]:
    """The frames of an ``n``-frame episode LeRobot's image statistics look at.

    Every frame up to 100; beyond, ``max(100, min(int(n ** 0.75), 10000))`` frames evenly
    spread (lerobot 0.4's ``sample_indices``).

    Example:
        >>> lerobot_frames(5).tolist(), len(lerobot_frames(1000))
        ([0, 1, 2, 3, 4], 177)
    """
    count = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, count)).astype(np.int64)


class ImageStats:
    """Per-channel statistics, in [0, 1], of camera frames, as LeRobot's ``stats.json`` has them.

    ``moments``: a ``(C,)`` :class:`ColumnStats` without sketches (mean, std, min, max of
    the pixel values / 255); ``histogram``: ``(C, 256)`` counts of each uint8 value, from
    which the quantiles are exact (``inverted_cdf``, the definition :meth:`ColumnStats.quantile`
    uses) and the same whatever order episodes merge in; ``frames``: the frames seen
    (LeRobot's ``count``). Build with :func:`image_channel_stats`, merge with :meth:`combine`.

    Example:
        >>> import numpy as np
        >>> frames = np.zeros((2, 4, 4, 3), np.uint8); frames[1] = 255
        >>> both = ImageStats.combine([image_channel_stats(frames[:1]), image_channel_stats(frames[1:])])
        >>> both.frames, both.quantile([0.5, 0.51])[:, 0].tolist(), both.moments.mean.tolist()
        (2, [0.0, 1.0], [0.5, 0.5, 0.5])
    """

    def __init__(self, moments: ColumnStats, histogram: npt.NDArray[np.float64], frames: int) -> None:
        self.moments, self.histogram, self.frames = moments, histogram, frames

    @classmethod
    def combine(cls, parts: Sequence[ImageStats], weights: Sequence[float] | None = None) -> ImageStats:
        """Merge several episodes' or runs' (with ``weights``: mix them, as :meth:`ColumnStats.combine`)."""
        if not parts:
            raise ArgumentError("nothing to combine: give at least one ImageStats")
        moments = ColumnStats.combine([p.moments for p in parts], weights=weights)
        if weights is None:
            histogram = np.sum([p.histogram for p in parts], axis=0)
        else:
            if len(weights) != len(parts):
                raise ArgumentError(f"{len(weights)} weights for {len(parts)} parts")
            shares = [p.histogram / np.maximum(p.histogram.sum(axis=1, keepdims=True), 1) for p in parts]
            histogram = np.sum([w * h for w, h in zip(weights, shares, strict=True)], axis=0)
        return cls(moments, histogram, sum(p.frames for p in parts))

    def quantile(self, q: Sequence[float]) -> _F64:
        """``(len(q), C)``: per channel, the smallest value whose share of values at or below it is >= q."""
        ranks, _ = check_ranks(q)
        cdf = np.cumsum(self.histogram, axis=1)
        total = cdf[:, -1:]
        out = np.full((ranks.size, self.histogram.shape[0]), np.nan)
        for c in range(self.histogram.shape[0]):
            if total[c, 0] > 0:
                idx = np.searchsorted(cdf[c] / total[c, 0], np.maximum(ranks, 1e-300) * (1.0 - 1e-12))
                out[:, c] = np.minimum(idx, 255) / 255.0
        return out

    def lerobot_entry(self, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, npt.NDArray[Any]]:
        """LeRobot's keys, each ``(C, 1, 1)`` (``count``: ``[frames]``); see :func:`lerobot_entry`."""
        out = lerobot_entry(self.moments, count=self.frames, image=True, quantiles=())
        keys = [f"q{round(q * 100):02d}" for q in quantiles]
        if keys:
            for key, value in zip(keys, self.quantile(list(quantiles)), strict=True):
                out[key] = value.reshape(-1, 1, 1)
        return out


def image_channel_stats(frames: npt.ArrayLike) -> ImageStats:
    """Per-channel statistics, in [0, 1], of one episode's camera frames, as LeRobot takes them.

    ``frames`` are ``(n, H, W, C)`` uint8. The frames :func:`lerobot_frames` picks, each
    downsampled as LeRobot does (every ``f``-th pixel where the larger side is 300 or more),
    are divided by 255 and pooled per channel (:class:`ImageStats`), merged over episodes
    with :meth:`ImageStats.combine`.

    Example:
        >>> import numpy as np
        >>> frames = np.zeros((4, 2, 2, 3), np.uint8); frames[..., 0] = 255
        >>> stats = image_channel_stats(frames)
        >>> stats.moments.mean.tolist(), stats.frames
        ([1.0, 0.0, 0.0], 4)
    """
    array = np.asarray(frames)
    if array.ndim != 4 or array.dtype != np.uint8:
        raise ArgumentError(f"camera frames are (n, H, W, C) uint8; got {array.dtype} {array.shape}")
    picked = array[lerobot_frames(len(array))]
    height, width = picked.shape[1:3]
    if max(height, width) >= 300:
        step = int(width / 150) if width > height else int(height / 150)
        picked = picked[:, ::step, ::step]
    pixels = picked.reshape(-1, picked.shape[-1])
    histogram = np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(pixels.shape[1])])
    moments = ColumnStats.from_array(pixels.astype(np.float64) / 255.0, sketches=False)
    return ImageStats(moments, histogram.astype(np.float64), len(picked))


def lerobot_entry(stats: ColumnStats, *, count: int | None = None, image: bool = False,
                  integer: bool = False,
                  quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, npt.NDArray[Any]]:
    """One feature's statistics in LeRobot's ``stats.json`` keys and shapes, as arrays.

    ``min``, ``max``, ``mean``, ``std``, ``count`` and ``q01``...``q99`` (where there are
    sketches), each shaped like a value (``(1,)`` for a scalar), an image's per channel
    ``(C, 1, 1)`` (``image``: ``stats`` per channel, ``count`` the frames; :class:`ImageStats`
    gives its quantiles exactly). ``integer``: min and max as int64 (LeRobot's own, for an
    integer feature). The quantiles are those of every value merged (:meth:`ColumnStats.quantile`), never an
    average of episodes' quantiles: what ``rlarrow stats`` and ``export_lerobot`` both write.

    Example:
        >>> import numpy as np
        >>> entry = lerobot_entry(ColumnStats.from_array(np.array([1.0, 2.0, 3.0])), quantiles=[0.5])
        >>> {k: v.tolist() for k, v in entry.items()}
        {'min': [1.0], 'max': [3.0], 'mean': [2.0], 'std': [0.816496580927726], 'count': [3], 'q50': [2.0]}
    """
    shape: tuple[int, ...] = (stats.shape[0], 1, 1) if image else (stats.shape or (1,))
    out: dict[str, npt.NDArray[Any]] = {
        "min": stats.min.reshape(shape),
        "max": stats.max.reshape(shape),
        "mean": stats.mean.reshape(shape),
        "std": stats.std.reshape(shape),
        "count": np.array([stats.count if count is None else count], np.int64),
    }
    if integer:
        out["min"], out["max"] = out["min"].astype(np.int64), out["max"].astype(np.int64)
    keys = [f"q{round(q * 100):02d}" for q in quantiles]
    if stats.has_quantiles and keys:
        for key, value in zip(keys, stats.quantile(list(quantiles)), strict=True):
            out[key] = value.reshape(shape)
    return out
