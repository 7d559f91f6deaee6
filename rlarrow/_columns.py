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

    mask = np.fromiter((v is None for v in values), bool, len(values))
    if not mask.any():
        return np.asarray(values, np.float64)
    return pa.array(np.asarray([0.0 if v is None else v for v in values], np.float64), mask=mask)


def actions(values: list[Any], dtype: Any) -> Any:
    """Actions (scalars or arrays, None where not taken) as one tensor column."""
    from rlarrow.tensors import to_arrow, with_null_rows

    mask = np.fromiter((v is None for v in values), bool, len(values))
    present = [v for v in values if v is not None]
    if not present:
        return values
    if isinstance(present[0], dict):
        fill = present[0]
        dense = stack([fill if v is None else v for v in values])
    else:
        dense = np.asarray([present[0] if v is None else v for v in values], dtype=dtype)
    arr = to_arrow(dense)
    return with_null_rows(arr, mask) if mask.any() else arr


def stack(values: list[Any]) -> Any:
    """Per-step arrays (or dicts of them) stacked into one ``(steps, ...)`` array (or dict)."""
    if isinstance(values[0], dict):
        return {k: stack([v[k] for v in values]) for k in values[0]}
    return np.stack(values)
