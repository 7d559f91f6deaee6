"""Normalisation for training loops: column statistics turned into a batch transform.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

:func:`normalizer` maps a batch (a dict of arrays) with :class:`~rlarrow.core.stats.ColumnStats`
(``mean_std``, ``min_max`` or ``quantile``, as LeRobot and openpi do), and back
(``inverse=True``). :class:`rlarrow.train.torch.StreamingDataset`'s ``normalize=`` uses it.
It lived in ``rlarrow.core.stats``; that path still works and warns (until rlarrow 1.0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rlarrow.core.errors import ArgumentError
from rlarrow.core.stats import ColumnStats

__all__: list[str] = []

#: how :func:`normalizer` maps values (see there)
NormalizationMode = Literal["mean_std", "min_max", "quantile"]

_F64 = npt.NDArray[np.float64]
_MODES = ("mean_std", "min_max", "quantile")


def normalizer(stats: Mapping[str, ColumnStats],
               mode: NormalizationMode | Mapping[str, NormalizationMode] = "mean_std", *,
               eps: float = 1e-8, quantiles: tuple[float, float] = (0.01, 0.99),
               inverse: bool = False) -> Callable[[Mapping[str, npt.ArrayLike]], dict[str, npt.NDArray[Any]]]:
    """A function that normalises a batch (a dict of arrays) with these statistics.

    Modes (``mode`` may also map column names to modes):

    * ``"mean_std"``: ``(x - mean) / (std + eps)``, as LeRobot's ``MEAN_STD``;
    * ``"min_max"``: ``(x - min) / (max - min + eps) * 2 - 1``, to [-1, 1], as LeRobot's
      ``MIN_MAX``;
    * ``"quantile"``: ``(x - q_lo) / (q_hi - q_lo + eps) * 2 - 1`` with ``quantiles``
      (q01 and q99 by default): [-1, 1] for all but the outer 2 %, as openpi's
      quantile normalisation; values beyond are not clipped.

    ``eps`` (1e-8, LeRobot's; openpi uses 1e-6) keeps a constant element (std 0, or
    max = min) finite: such an element maps to 0 (mean_std) or -1 (min_max, quantile)
    where it equals its constant. ``inverse=True`` gives the inverse map (actions a
    policy predicted, back to the environment's units).

    Arrays keep a float dtype they have (float32 stays float32); bool and int become
    float64. An array's trailing axes must be the statistics' shape; leading axes
    (batch, time) broadcast. Columns without statistics pass through unchanged.

    Example:
        >>> import numpy as np
        >>> stats = {"action": ColumnStats.from_array(np.array([[0.0, 10.0], [4.0, 30.0]]))}
        >>> norm = normalizer(stats, "min_max")
        >>> out = norm({"action": np.array([[4.0, 10.0], [1.0, 25.0]]), "step": np.array([7, 8])})
        >>> out["action"].round(6).tolist(), out["step"].tolist()
        ([[1.0, -1.0], [-0.5, 0.5]], [7, 8])
        >>> back = normalizer(stats, "min_max", inverse=True)(out)
        >>> back["action"].round(6).tolist()
        [[4.0, 10.0], [1.0, 25.0]]
    """
    if isinstance(mode, Mapping):
        unknown = sorted(set(mode) - set(stats))
        if unknown:
            raise ArgumentError(f"modes for columns without statistics: {unknown} (have {sorted(stats)})")
        modes = dict(mode)
    else:
        modes = {name: mode for name in stats}
    for name, m in modes.items():
        if m not in _MODES:
            raise ArgumentError(f"normalisation mode {m!r} (column {name!r}) is not one of {list(_MODES)}")
    lo_q, hi_q = quantiles
    # per column: (shape, low, scale, spread), x -> (x - low) / scale * spread - (spread - 1)
    params: dict[str, tuple[tuple[int, ...], _F64, _F64, float]] = {}
    for name, m in modes.items():
        column_stats = stats[name]
        if m == "mean_std":
            params[name] = (column_stats.shape, column_stats.mean, column_stats.std + eps, 1.0)
            continue
        if m == "min_max":
            lo, hi = column_stats.min, column_stats.max
        else:
            lo, hi = column_stats.quantile([lo_q, hi_q])
        params[name] = (column_stats.shape, lo, hi - lo + eps, 2.0)

    return _Normalizer(params, inverse)


class _Normalizer:
    """What :func:`normalizer` returns: a picklable callable (DataLoader workers under spawn)."""

    def __init__(self, params: dict[str, tuple[tuple[int, ...], _F64, _F64, float]], inverse: bool) -> None:
        self.params = params
        self.inverse = inverse

    def __call__(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, npt.NDArray[Any]]:
        out: dict[str, npt.NDArray[Any]] = {}
        for name, value in batch.items():
            array = np.asarray(value)
            if name not in self.params:
                out[name] = array
                continue
            shape, low, scale, spread = self.params[name]
            if array.shape[array.ndim - len(shape):] != shape or array.ndim < len(shape):
                raise ArgumentError(f"column {name!r}: values of shape {array.shape} do not end in the "
                                    f"statistics' shape {shape}")
            dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.dtype(np.float64)
            x = array.astype(np.float64, copy=False)
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                if self.inverse:
                    y = (x + (spread - 1)) / spread * scale + low
                else:
                    y = (x - low) / scale * spread - (spread - 1)
            out[name] = y.astype(dtype, copy=False)
        return out
