"""dm_env values (observations, actions, rewards) gathered per step, turned into columns.

Dict observations and actions are stored as structs whose field order is fixed (see
``docs/format.md``, "Field order"): the first writer of a store fixes it (the spec's or
space's order, or sorted where the source keeps none), and a later writer whose fields are
the same in another order takes the store's (:func:`declare_steps`, :func:`ordered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rlarrow.core.store import Store

__all__ = ["actions", "declare_steps", "flat_value", "ordered", "same_fields", "scalars", "stack"]


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
    is_nan = np.isnan(dense)
    nan = np.flatnonzero(is_nan)
    if not len(nan):
        return dense
    nones = values.count(None)  # (in C: a recorder's discounts are all None, 10,000 a commit)
    if nones == len(nan):  # every NaN a None: no NaN value was given
        mask = is_nan
    elif not nones:
        return dense
    else:
        mask = np.zeros(len(values), bool)
        mask[nan] = [values[i] is None for i in nan]
    dense[mask] = 0.0
    return pa.array(dense, mask=mask)


def actions(values: list[Any], dtype: Any, missing: np.ndarray | None = None, type_: Any = None) -> Any:
    """Actions (scalars or arrays, None where not taken) as one tensor column.

    ``missing``, when given, marks the rows known to be None (the others are not);
    ``type_`` (the column's Arrow type) puts dict actions in its field order.
    """
    from rlarrow.core.tensors import to_arrow, with_null_rows

    if missing is None:
        missing = np.fromiter((v is None for v in values), bool, len(values))
    if missing.all():
        return values
    if missing.any():
        fill = values[int(np.argmin(missing))]
        values = [fill if v is None else v for v in values]
    dense = ordered(stack(values), type_) if isinstance(values[0], dict) else np.asarray(values, dtype=dtype)
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


def ordered(value: Any, type_: Any) -> Any:
    """``value`` (nested dicts of columns) with its keys in the struct ``type_``'s field order.

    Anything that is not a dict, or a ``type_`` that is not a struct, is returned as is.
    """
    import pyarrow as pa

    if not isinstance(value, Mapping) or type_ is None or not pa.types.is_struct(type_):
        return value
    names = [type_.field(i).name for i in range(type_.num_fields)]
    if set(names) != {str(k) for k in value}:
        return value  # not this type's fields: the schema check says what differs
    by_name = {str(k): v for k, v in value.items()}
    return {name: ordered(by_name[name], type_.field(name).type) for name in names}


def same_fields(a: Any, b: Any) -> bool:
    """Whether two Arrow types are equal up to the order of struct fields (at any depth)."""
    import pyarrow as pa

    if pa.types.is_struct(a) and pa.types.is_struct(b):
        names_a = sorted(a.field(i).name for i in range(a.num_fields))
        names_b = sorted(b.field(i).name for i in range(b.num_fields))
        return names_a == names_b and len(set(names_a)) == len(names_a) and all(
            same_fields(a.field(n).type, b.field(n).type) for n in names_a)
    return bool(a == b)


def declare_steps(store: Store, tensor_types: Mapping[str, Any]) -> dict[str, Any]:
    """Declare the ``steps`` tensor types; return the types the store holds.

    A layout of the table whose types equal these but for the order of struct fields gives
    its order (so a recording or import appends to a layout whose order another writer
    fixed); types no layout holds start a new layout (CartPole and pixel episodes in one
    store: :meth:`rlarrow.Store.layouts`).
    """
    import pyarrow as pa

    def adopt(current: Any) -> dict[str, Any] | None:
        types = {}
        for name, type_ in tensor_types.items():
            if not (isinstance(current, pa.Schema) and name in current.names):
                return None
            have = current.field(name).type
            if have != type_ and not same_fields(have, type_):
                return None
            types[name] = have if same_fields(have, type_) else type_
        return types

    types = dict(tensor_types)
    for info in store.layouts("steps"):
        adopted = adopt(info.schema)
        if adopted is not None:
            types = adopted
            break
    schema = store.declare("steps", types, new_layout=True)
    return {name: schema.field(name).type for name in types}
