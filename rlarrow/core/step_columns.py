"""dm_env values (observations, actions, rewards) gathered per step, turned into columns.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

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

__all__: list[str] = []


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


def infos_leaves(steps: Any, rows: int | None = None) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """The typed ``infos`` of ``steps`` (its first ``rows``) as one array per leaf, and which rows have it.

    The leaves are keyed by their field path, parts joined with ``/`` (``"qpos"``,
    ``"inner/depth"``); a null row (a D4RL episode's final step) is NaN in float leaves and
    0 (False) in the others, and false in the returned mask. None: the steps have no
    ``infos`` column (steps written by rlarrow 1.0 keep infos in ``metadata``, see
    :func:`rlarrow.core.metadata.decode_column`).

    Example:
        >>> import pyarrow as pa
        >>> from rlarrow.core.tensors import to_arrow, with_null_rows
        >>> infos = with_null_rows(to_arrow({"qpos": np.ones((2, 3)), "n": np.array([4, 5])}),
        ...                        np.array([False, True]))
        >>> leaves, valid = infos_leaves(pa.table({"infos": infos}))
        >>> leaves["qpos"][1], leaves["n"].tolist(), valid.tolist()
        (array([nan, nan, nan]), [4, 0], [True, False])
    """
    import pyarrow as pa

    from rlarrow.core.tensors import tensor_dtype, to_numpy, with_null_rows

    if "infos" not in steps.column_names:
        return None
    column = steps.column("infos")
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if rows is not None:
        column = column.slice(0, rows)
    null = np.asarray(column.is_null().to_numpy(zero_copy_only=False), bool)
    out: dict[str, np.ndarray] = {}

    def walk(arr: Any, path: str, parent_null: np.ndarray) -> None:
        if pa.types.is_struct(arr.type):
            for i, field in enumerate(arr.type):
                walk(arr.field(i), f"{path}{field.name}/", parent_null)
            return
        child_null = parent_null | np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
        if child_null.any():
            arr = with_null_rows(arr, child_null)
        floats = pa.types.is_floating(tensor_dtype(arr.type))
        out[path[:-1]] = to_numpy(arr, fill_value=None if floats else 0)

    if not pa.types.is_struct(column.type):
        return None  # (not what steps 1.1 declares: leave it to the metadata)
    walk(column, "", null)
    return out, ~null


def infos_path(field: str, per_step: Mapping[str, Any] | None = None) -> str:
    """The path in a step's metadata (``{"infos": ...}`` of rlarrow 1.0) of typed infos field ``field``.

    A field is an info (``"qpos"`` is ``"infos/qpos"``) unless the run's ``per_step``
    (an HDF5 import's record of its per-row datasets) names it as a dataset of its own
    (robomimic's ``states``, kept under its name).

    Example:
        >>> infos_path("qpos"), infos_path("states", {"states": {}, "infos/qpos": {}})
        ('infos/qpos', 'states')
    """
    if per_step and f"infos/{field}" not in per_step and (
            field in per_step or any(k.startswith(f"{field}/") for k in per_step)):
        return field
    return f"infos/{field}"
