"""dm_env specs as plain data (for ``runs.env_specs``) and as tensor column types.

A spec is stored as a dict: ``{"kind": "Array" | "BoundedArray" | "DiscreteArray" |
"StringArray", "name", "shape", "dtype", "minimum", "maximum", "num_values"}``; nested specs
(dicts, lists, tuples of specs) keep their structure. :func:`from_dict` rebuilds the
dm_env spec objects (dm_env needed); :func:`to_dict` and :func:`tensor_type` do not need it.
:func:`from_space` gives the same plain data for a gymnasium space (as rlarrow's gym recorder
or Minari describe it), so gym recordings and Minari imports have dm_env specs too.
:func:`sorted_spec` puts dict specs in sorted key order (for sources that keep no order).

Example:
    >>> import numpy as np
    >>> class Spec:  # anything with shape and dtype, like dm_env.specs.Array
    ...     shape, dtype, name = (10, 5), np.dtype("float32"), "board"
    >>> to_dict(Spec())
    {'kind': 'Spec', 'name': 'board', 'shape': [10, 5], 'dtype': 'float32'}
    >>> from rlarrow.core.tensors import tensor_dtype, tensor_shape
    >>> tensor_shape(tensor_type(Spec())), tensor_dtype(tensor_type(Spec()))
    ((10, 5), DataType(float))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.tensors import tensor_type as _tensor_type

__all__ = ["from_space"]


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
    from rlarrow.core.deps import require

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
    (``layout="auto"``, see :mod:`rlarrow.core.tensors`).
    """
    if isinstance(spec, Mapping):
        return pa.struct([pa.field(str(k), tensor_type(v)) for k, v in spec.items()])
    if isinstance(spec, (list, tuple)):
        return pa.struct([pa.field(str(i), tensor_type(v)) for i, v in enumerate(spec)])
    return _tensor_type(np.dtype(spec.dtype), tuple(int(d) for d in spec.shape), layout="auto")


#: the reward spec of gymnasium sources (gym recordings, Minari imports): a float64 scalar
REWARD_SPEC: dict[str, Any] = {"kind": "Array", "name": "reward", "shape": [], "dtype": "float64"}


def sorted_spec(spec: Any) -> Any:
    """``spec`` with every dict of specs (at any depth) in sorted key order.

    envlogger decodes dicts from protobuf maps, whose order changes from process to process:
    its imports use this order, which every process agrees on.
    """
    if isinstance(spec, Mapping):
        return {str(k): sorted_spec(spec[k]) for k in sorted(spec, key=str)}
    if isinstance(spec, (list, tuple)):
        return type(spec)(sorted_spec(v) for v in spec)
    return spec


def _bound(values: Any, dtype: np.dtype[Any]) -> Any:
    """A bound as plain data: one number when it is the same everywhere, else nested lists."""
    arr = np.asarray(values, dtype=dtype if dtype.kind in "biuf" else None)
    if arr.size and bool(np.all(arr == arr.flat[0])):
        return _plain(arr.flat[0])
    return _plain(arr)


def from_space(space: Any) -> Any:
    """A gymnasium space's description as a dm_env spec in :func:`to_dict`'s form.

    Takes either description rlarrow stores: the gym recorder's (``{"kind": "Box", "shape",
    "dtype", "low", "high", ...}``, Dict spaces as dicts, Tuple spaces as lists) or Minari's
    JSON (``{"type": "Box", ...}``, ``{"type": "Dict", "subspaces": {...}}``). ``Box`` becomes
    a ``BoundedArray``; ``Discrete(n)`` a ``DiscreteArray`` (a ``BoundedArray`` from ``start``
    when it does not start at 0); ``MultiDiscrete`` and ``MultiBinary`` ``BoundedArray`` s; a
    ``Text`` space a ``StringArray``; Dict and Tuple spaces dicts and lists of those. A
    description it does not know gives None.

    Example:
        >>> spec = from_space({"type": "Box", "dtype": "uint8", "shape": [2, 3], "low": 0, "high": 255})
        >>> spec["kind"], spec["shape"], spec["dtype"], spec["minimum"], spec["maximum"]
        ('BoundedArray', [2, 3], 'uint8', 0, 255)
        >>> from_space({"type": "Discrete", "dtype": "int64", "start": 0, "n": 2})["num_values"]
        2
    """
    if isinstance(space, list):
        return [from_space(v) for v in space]
    if not isinstance(space, Mapping):
        return None
    kind = space.get("kind", space.get("type"))
    if kind is None:  # the gym recorder's Dict space: a dict of subspaces
        return {str(k): from_space(v) for k, v in space.items()}
    if kind == "Dict":
        return {str(k): from_space(v) for k, v in dict(space.get("subspaces") or {}).items()}
    if kind == "Tuple":
        return [from_space(v) for v in space.get("subspaces") or []]
    shape = [int(d) for d in space.get("shape") or []]
    dtype: np.dtype[Any]
    if kind == "Box":
        dtype = np.dtype(space.get("dtype") or "float32")
        return {"kind": "BoundedArray", "name": None, "shape": shape, "dtype": dtype.name,
                "minimum": _bound(space.get("low"), dtype), "maximum": _bound(space.get("high"), dtype)}
    if kind == "Discrete":
        dtype, n = np.dtype(space.get("dtype") or "int64"), int(space["n"])
        start = int(space.get("start") or 0)
        if start == 0:
            return {"kind": "DiscreteArray", "name": None, "shape": [], "dtype": dtype.name, "minimum": 0,
                    "maximum": n - 1, "num_values": n}
        return {"kind": "BoundedArray", "name": None, "shape": [], "dtype": dtype.name, "minimum": start,
                "maximum": start + n - 1}
    if kind == "MultiDiscrete":
        dtype = np.dtype(space.get("dtype") or "int64")
        nvec = np.asarray(space["nvec"], dtype)
        low = np.asarray(space.get("start") if space.get("start") is not None else 0, dtype)
        return {"kind": "BoundedArray", "name": None, "shape": list(nvec.shape), "dtype": dtype.name,
                "minimum": _bound(np.broadcast_to(low, nvec.shape), dtype),
                "maximum": _bound(low + nvec - 1, dtype)}
    if kind == "MultiBinary":
        size = space.get("n")
        shape = shape or ([int(size)] if isinstance(size, int) else [int(d) for d in size or []])
        return {"kind": "BoundedArray", "name": None, "shape": shape, "dtype": "int8", "minimum": 0,
                "maximum": 1}
    if kind == "Text":
        return {"kind": "StringArray", "name": None, "shape": [], "dtype": "object"}
    return None
