"""dm_env values (observations, actions, rewards) gathered per step, turned into columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["actions", "flat_value", "scalars", "stack"]


def flat_value(obs: Any, spec: Any) -> Any:
    """Tuple/list observations become dicts {"0": ..., "1": ...} (stored as structs)."""
    if isinstance(spec, Mapping):
        return {str(k): flat_value(obs[k], spec[k]) for k in spec}
    if isinstance(spec, (list, tuple)):
        return {str(i): flat_value(obs[i], s) for i, s in enumerate(spec)}
    return np.array(obs, dtype=spec.dtype)  # a copy: envs may reuse their buffers


def scalars(values: list[Any]) -> Any:
    """Rewards or discounts (NumPy or Python scalars, None) as one float64 column."""
    import pyarrow as pa

    dense = np.array(values, np.float64)  # None becomes NaN: told apart from a NaN value below
    nan = np.flatnonzero(np.isnan(dense))
    if not len(nan):
        return dense
    mask = np.zeros(len(values), bool)
    mask[nan] = [values[i] is None for i in nan]
    if not mask.any():
        return dense
    dense[mask] = 0.0
    return pa.array(dense, mask=mask)


def actions(values: list[Any], dtype: Any, missing: np.ndarray | None = None) -> Any:
    """Actions (scalars or arrays, None where not taken) as one tensor column.

    ``missing``, when given, marks the rows known to be None (the others are not).
    """
    from rlarrow.tensors import to_arrow, with_null_rows

    if missing is None:
        missing = np.fromiter((v is None for v in values), bool, len(values))
    if missing.all():
        return values
    if missing.any():
        fill = values[int(np.argmin(missing))]
        values = [fill if v is None else v for v in values]
    dense = stack(values) if isinstance(values[0], dict) else np.asarray(values, dtype=dtype)
    arr = to_arrow(dense)
    return with_null_rows(arr, missing) if missing.any() else arr


def stack(values: list[Any]) -> Any:
    """Per-step arrays (or dicts of them) stacked into one ``(steps, ...)`` array (or dict)."""
    if isinstance(values[0], dict):
        return {k: stack([v[k] for v in values]) for k in values[0]}
    try:
        return np.array(values)  # one pass in C; refuses ragged rows
    except ValueError:
        return np.stack(values)  # says which shapes differ
