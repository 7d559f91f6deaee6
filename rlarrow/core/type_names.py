"""Column types in a few words, and the columns two schemas disagree on: what error messages say.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Its own module so that :mod:`rlarrow.core.errors` (which words a schema mismatch) and
:mod:`rlarrow.core.schema` (which raises it) both use it without importing each other.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rlarrow.core import tensors as _tensors

__all__: list[str] = []


def describe_type(type_: pa.DataType | None) -> str:
    """A column type in a few words: tensors as ``float32 (4,)``, dict tensors as ``{name: ...}``.

    Example:
        >>> describe_type(_tensors.tensor_type("uint8", (84, 84, 3), layout="binary"))
        'uint8 (84, 84, 3) binary'
        >>> describe_type(pa.list_(pa.float32(), 4)), describe_type(pa.int64()), describe_type(None)
        ('float32 (4,)', 'int64', 'no such column')
    """
    if type_ is None:
        return "no such column"
    if pa.types.is_struct(type_):
        return "{" + ", ".join(f"{f.name}: {describe_type(f.type)}" for f in type_) + "}"
    if isinstance(type_, (_tensors.TensorType, pa.FixedShapeTensorType)) or \
            pa.types.is_fixed_size_list(type_):
        try:
            leaf = _tensors.tensor_dtype(type_)
            shape = _tensors.tensor_shape(type_)
        except (TypeError, ValueError):
            return str(type_)
        if pa.types.is_struct(leaf):
            return str(type_)
        binary = " binary" if isinstance(type_, _tensors.TensorType) else ""
        return f"{_numpy_name(leaf)} {shape}{binary}"
    if pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_boolean(type_):
        return _numpy_name(type_)
    return str(type_)


def _numpy_name(type_: pa.DataType) -> str:
    try:
        return str(np.dtype(type_.to_pandas_dtype()).name)
    except (NotImplementedError, TypeError):
        return str(type_)


def column_differences(expected: pa.Schema, got: pa.Schema, *, left: str = "store",
                       right: str = "data") -> list[str]:
    """One line per column whose type differs (or that only one schema has).

    Example:
        >>> column_differences(pa.schema([("observation", pa.list_(pa.float32(), 4))]),
        ...                    pa.schema([("observation", pa.list_(pa.uint8(), 2))]))
        ['observation: store has float32 (4,), data has uint8 (2,)']
    """
    names = list(dict.fromkeys([*expected.names, *got.names]))
    lines = []
    for name in names:
        a = expected.field(name).type if name in expected.names else None
        b = got.field(name).type if name in got.names else None
        if a is not None and b is not None and a == b:
            continue
        lines.append(f"{name}: {left} has {describe_type(a)}, {right} has {describe_type(b)}")
    return lines


def schema_differences(expected: object, got: object) -> list[str] | None:
    """:func:`column_differences` for a :class:`~rlarrow.SchemaMismatchError`: None unless both are schemas.

    Example:
        >>> schema_differences(pa.schema([("a", pa.int64())]), pa.schema([("a", pa.int64())]))
        ['(every column has the same type: their order or nullability differs)']
        >>> schema_differences(None, pa.schema([("a", pa.int64())])) is None
        True
    """
    if not isinstance(expected, pa.Schema) or not isinstance(got, pa.Schema):
        return None
    return column_differences(expected, got) or [
        "(every column has the same type: their order or nullability differs)"]
