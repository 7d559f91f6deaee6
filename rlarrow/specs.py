"""dm_env specs as plain data (for ``runs.env_specs``) and as tensor column types.

A spec is stored as a dict: ``{"kind": "Array" | "BoundedArray" | "DiscreteArray" |
"StringArray", "name", "shape", "dtype", "minimum", "maximum", "num_values"}``; nested specs
(dicts, lists, tuples of specs) keep their structure. :func:`from_dict` rebuilds the
dm_env spec objects (dm_env needed); :func:`to_dict` and :func:`tensor_type` do not need it.

Example:
    >>> import numpy as np
    >>> class Spec:  # anything with shape and dtype, like dm_env.specs.Array
    ...     shape, dtype, name = (10, 5), np.dtype("float32"), "board"
    >>> to_dict(Spec())
    {'kind': 'Spec', 'name': 'board', 'shape': [10, 5], 'dtype': 'float32'}
    >>> tensor_type(Spec())
    FixedSizeListType(fixed_size_list<item: fixed_size_list<item: float>[5]>[10])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.tensors import tensor_type as _tensor_type

__all__ = ["from_dict", "tensor_type", "to_dict"]


def _plain(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.item() if x.ndim == 0 else x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def to_dict(spec: Any) -> Any:
    """A spec (or nested specs) as plain data: kind, name, shape, dtype, bounds."""
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        return {str(k): to_dict(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return [to_dict(v) for v in spec]
    out: dict[str, Any] = {"kind": type(spec).__name__, "name": getattr(spec, "name", None),
                           "shape": [int(d) for d in spec.shape], "dtype": np.dtype(spec.dtype).name}
    for attr in ("minimum", "maximum", "num_values"):
        if hasattr(spec, attr):
            out[attr] = _plain(getattr(spec, attr))
    return out


def from_dict(data: Any) -> Any:
    """dm_env spec objects from :func:`to_dict`'s output (needs dm_env)."""
    from rlarrow._deps import require

    dm_env = require("dm_env", feature="rebuilding dm_env specs")
    if data is None:
        return None
    if isinstance(data, list):
        return [from_dict(v) for v in data]
    if isinstance(data, Mapping) and "kind" not in data:
        return {k: from_dict(v) for k, v in data.items()}
    kind, shape, dtype, name = data["kind"], tuple(data["shape"]), np.dtype(data["dtype"]), data.get("name")
    if kind == "DiscreteArray":
        return dm_env.specs.DiscreteArray(int(data["num_values"]), dtype=dtype, name=name)
    if kind == "BoundedArray":
        return dm_env.specs.BoundedArray(shape, dtype, data["minimum"], data["maximum"], name=name)
    if kind == "StringArray":
        return dm_env.specs.StringArray(shape, name=name)
    return dm_env.specs.Array(shape, dtype, name=name)


def tensor_type(spec: Any) -> pa.DataType:
    """The tensor column type for a spec; nested specs become structs (dicts) of them.

    Tensors of two or more dimensions and long vectors get the binary layout
    (``layout="auto"``, see :mod:`rlarrow.tensors`).
    """
    if isinstance(spec, Mapping):
        return pa.struct([pa.field(str(k), tensor_type(v)) for k, v in spec.items()])
    if isinstance(spec, (list, tuple)):
        return pa.struct([pa.field(str(i), tensor_type(v)) for i, v in enumerate(spec)])
    return _tensor_type(np.dtype(spec.dtype), tuple(int(d) for d in spec.shape), layout="auto")
