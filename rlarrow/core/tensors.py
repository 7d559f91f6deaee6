"""Tensors as native Arrow columns.

A tensor column holds one tensor per row. Its Arrow type keeps the dtype and the
shape. In the default *list layout* there is no extension type and no blob, so DuckDB,
Polars, Spark and Ray read it as nested arrays:

* shape ``()``: the primitive type itself (``float32``, ``uint8``, ``bool``, ...);
* shape ``(d0, d1, ...)``: nested fixed-size lists,
  ``fixed_size_list<fixed_size_list<T>[d1]>[d0]`` (the outer list is the first axis);
* a dict (nested) observation: a struct whose fields are tensors.

The canonical ``arrow.fixed_shape_tensor`` extension type is accepted as input and
stored as the equivalent nested fixed-size lists.

Large tensors (images) may instead use the *binary layout*: :class:`TensorType`, the
extension type ``rlarrow.tensor``, one ``fixed_size_binary`` value per row holding the
tensor's bytes (C order, little-endian) with dtype and shape in the type's metadata.
Parquet then stores one value per row instead of one per element with its levels, which
writes and reads tens of times faster and compresses better; DuckDB sees a BLOB, Polars
an extension of Binary, pyarrow with rlarrow imported the tensor type.

Example:
    >>> import numpy as np
    >>> from rlarrow.core import tensors
    >>> frames = np.zeros((5, 84, 84), dtype=np.uint8)
    >>> column = tensors.to_arrow(frames)
    >>> column.type
    FixedSizeListType(fixed_size_list<item: fixed_size_list<item: uint8>[84]>[84])
    >>> tensors.to_numpy(column).shape
    (5, 84, 84)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core.errors import ArgumentError, ArgumentTypeError

__all__ = ["TensorBytesType", "TensorType", "tensor_type", "to_arrow", "to_numpy"]

#: A batch of tensors: an array whose first axis is rows, a dict of those (dict
#: observations), or a sequence of per-row arrays of one shape.
TensorLike: TypeAlias = "np.ndarray | Mapping[str, Any] | Sequence[Any] | pa.Array | pa.ChunkedArray"

#: Where rlarrow chooses the layout (recorders, importers: ``layout="auto"``), tensors of two
#: or more dimensions (images, boards, grids) and vectors of at least this many elements use
#: the binary layout; shorter vectors stay nested fixed-size lists, so SQL reaches their
#: elements.
BINARY_MIN_ELEMENTS = 1024


#: the tensor types Arrow has deserialized, by (storage type, serialized bytes)
_DESERIALIZED: dict[tuple[pa.DataType, bytes], TensorType] = {}


class TensorType(pa.ExtensionType):  # type: ignore[misc]
    """``rlarrow.tensor``: a tensor per row as ``fixed_size_binary`` bytes (the binary layout).

    Example:
        >>> t = TensorType("uint8", (84, 84))
        >>> t.storage_type, t.shape, t.numpy_dtype
        (FixedSizeBinaryType(fixed_size_binary[7056]), (84, 84), dtype('uint8'))
    """

    def __init__(self, dtype: Any, shape: Sequence[int]) -> None:
        np_dtype = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)
        if np_dtype.kind not in "biuf":
            raise ArgumentTypeError(
                f"the binary layout holds bool, integer and float tensors, not {np_dtype}")
        self.numpy_dtype = np_dtype
        self.shape = tuple(int(d) for d in shape)
        super().__init__(pa.binary(int(np_dtype.itemsize * int(np.prod(self.shape, dtype=np.int64)))),
                         "rlarrow.tensor")

    def __arrow_ext_serialize__(self) -> bytes:
        import json

        return json.dumps({"dtype": self.numpy_dtype.str, "shape": list(self.shape)}).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> TensorType:
        # once per distinct type (a type is immutable): Arrow asks for each column chunk it
        # reads, which cost a 1M-step episode_columns a tenth of its time in JSON
        known = _DESERIALIZED.get((storage_type, serialized))
        if known is not None:
            return known
        import json

        meta = json.loads(serialized)
        made = cls(meta["dtype"], meta["shape"])
        if made.storage_type != storage_type and _variable_binary(storage_type):
            # (the bytes as another library hands them back: Polars has no fixed-size binary)
            return TensorBytesType(meta["dtype"], meta["shape"], storage_type)
        if made.storage_type == storage_type and len(_DESERIALIZED) < 4096:
            _DESERIALIZED[(storage_type, serialized)] = made
        return made

    def __reduce__(self) -> Any:
        return TensorType, (self.numpy_dtype.str, self.shape)


def _variable_binary(type_: pa.DataType) -> bool:
    checks = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    return any(check(type_) for check in checks)


class TensorBytesType(pa.ExtensionType):  # type: ignore[misc]
    """``rlarrow.tensor`` handed back with its bytes in a variable-size binary column.

    Polars has no fixed-size binary: it reads a binary-layout tensor column (an image
    observation) as plain binary that keeps the extension's name, and hands it to Arrow that
    way (``frame.to_arrow()``, ``to_pandas()``). Such a column arrives as this type, with the
    tensor's dtype and shape; :meth:`fixed` is the :class:`TensorType` it stands for, and
    :func:`to_numpy`, :func:`to_arrow` and every store write take it as that type (each
    value must hold exactly one tensor's bytes).

    Example:
        >>> t = TensorBytesType("uint8", (2, 2), pa.large_binary())
        >>> t.fixed(), t.storage_type
        (TensorType(FixedSizeBinaryType(fixed_size_binary[4])), DataType(large_binary))
        >>> arr = pa.ExtensionArray.from_storage(t, pa.array([bytes(range(4))], pa.large_binary()))
        >>> to_numpy(arr).tolist()
        [[[0, 1], [2, 3]]]
    """

    def __init__(self, dtype: Any, shape: Sequence[int], storage: pa.DataType) -> None:
        self._fixed = TensorType(dtype, shape)
        self.numpy_dtype, self.shape = self._fixed.numpy_dtype, self._fixed.shape
        super().__init__(storage, "rlarrow.tensor")

    def fixed(self) -> TensorType:
        """The binary-layout type these bytes are of."""
        return self._fixed

    def __arrow_ext_serialize__(self) -> bytes:
        return bytes(self._fixed.__arrow_ext_serialize__())

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> TensorBytesType:
        import json

        meta = json.loads(serialized)
        return cls(meta["dtype"], meta["shape"], storage_type)

    def __reduce__(self) -> Any:
        return TensorBytesType, (self.numpy_dtype.str, self.shape, self.storage_type)


def fixed_tensors(arr: pa.Array) -> pa.Array:
    """A :class:`TensorBytesType` column as the :class:`TensorType` column it stands for (others as they are).

    Raises:
        ArgumentTypeError: a value is not one tensor's bytes long.
    """
    if not isinstance(arr.type, TensorBytesType):
        return arr
    fixed = arr.type.fixed()
    try:
        storage = arr.storage.cast(fixed.storage_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ArgumentTypeError(
            f"a {fixed.numpy_dtype} {fixed.shape} tensor column holds a value of another length "
            f"than its {fixed.storage_type.byte_width} bytes ({exc})") from exc
    return pa.ExtensionArray.from_storage(fixed, storage)


try:
    pa.register_extension_type(TensorType("uint8", ()))
except pa.ArrowKeyError:  # registered already (a module reload)
    pass

_LEAF_CHECKS = (
    pa.types.is_boolean,
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def tensor_problems(type_: pa.DataType, where: str = "") -> list[str]:
    """List why ``type_`` is not a tensor type (empty when it is one)."""
    if isinstance(type_, TensorType):
        return []
    if isinstance(type_, pa.ExtensionType):
        return tensor_problems(type_.storage_type, where)
    if any(check(type_) for check in _LEAF_CHECKS):
        return []
    if pa.types.is_fixed_size_list(type_):
        inner = type_.value_type
        if pa.types.is_struct(inner):
            return [f"{where or 'value'}: a fixed-size list of structs is not a tensor "
                    "(use a struct of tensors instead)"]
        return tensor_problems(inner, where)
    if pa.types.is_struct(type_):
        problems: list[str] = []
        if type_.num_fields == 0:
            problems.append(f"{where or 'value'}: an empty struct is not a tensor")
        for field in type_:
            problems += tensor_problems(field.type, f"{where}.{field.name}" if where else field.name)
        return problems
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_list_view(type_):
        return [f"{where or 'value'}: {type_} has no fixed shape; tensors are fixed-size lists "
                "(pass a NumPy array whose rows all have one shape)"]
    return [f"{where or 'value'}: {type_} is not a tensor type (expected bool, integer, float, "
            "string or binary values in fixed-size lists or structs)"]


def is_tensor_type(type_: pa.DataType) -> bool:
    """Whether ``type_`` is a valid tensor column type."""
    return not tensor_problems(type_)


def tensor_shape(type_: pa.DataType) -> tuple[int, ...]:
    """Shape of one row's tensor (not for struct types).

    >>> tensor_shape(pa.list_(pa.list_(pa.float32(), 5), 10))
    (10, 5)
    """
    if isinstance(type_, (pa.FixedShapeTensorType, TensorType)):
        return tuple(type_.shape)
    shape: list[int] = []
    while pa.types.is_fixed_size_list(type_):
        shape.append(type_.list_size)
        type_ = type_.value_type
    if pa.types.is_struct(type_):
        raise ArgumentTypeError("a struct tensor has one shape per field")
    return tuple(shape)


def tensor_dtype(type_: pa.DataType) -> pa.DataType:
    """Element type of a (non-struct) tensor type."""
    if isinstance(type_, pa.FixedShapeTensorType):
        return type_.value_type
    if isinstance(type_, TensorType):
        return pa.from_numpy_dtype(type_.numpy_dtype)
    while pa.types.is_fixed_size_list(type_):
        type_ = type_.value_type
    return type_


def tensor_type(dtype: Any, shape: Sequence[int] = (), *, layout: str = "list") -> pa.DataType:
    """The tensor column type for a NumPy/Arrow dtype and a per-row shape.

    ``layout="binary"`` gives the binary layout (:class:`TensorType`); ``"auto"`` gives it
    for tensors of two or more dimensions and for vectors of :data:`BINARY_MIN_ELEMENTS`
    elements or more, nested lists otherwise.

    >>> tensor_type("uint8", (84, 84))
    FixedSizeListType(fixed_size_list<item: fixed_size_list<item: uint8>[84]>[84])
    """
    if layout == "auto":
        big = len(tuple(shape)) >= 2 or int(np.prod(tuple(shape), dtype=np.int64)) >= BINARY_MIN_ELEMENTS
        layout = "binary" if big and np.dtype(_np_dtype(dtype)).kind in "biuf" else "list"
    if layout == "binary":
        return TensorType(_np_dtype(dtype), shape)
    if layout != "list":
        raise ArgumentError(f"layout must be 'list', 'binary' or 'auto', not {layout!r}")
    if isinstance(dtype, pa.DataType):
        t = dtype
    else:
        np_dtype = np.dtype(dtype)
        if np_dtype.kind == "U":
            t = pa.string()
        elif np_dtype.kind == "S":
            t = pa.binary()
        else:
            t = pa.from_numpy_dtype(np_dtype)
    for dim in reversed(tuple(shape)):
        t = pa.list_(t, int(dim))
    return t


def empty_array(type_: pa.DataType) -> pa.Array:
    """An array of no rows of any type, extension types inside structs and lists included.

    (``pa.array([], type)`` and ``Schema.empty_table()`` refuse an extension type nested in a
    struct: a declared table with binary-layout tensors in a dict observation.)

    Example:
        >>> t = pa.struct([("image", tensor_type("uint8", (2, 2), layout="binary"))])
        >>> empty_array(t).type == t, len(empty_array(t))
        (True, 0)
    """
    if isinstance(type_, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type_, empty_array(type_.storage_type))
    if pa.types.is_struct(type_):
        fields = [type_.field(i) for i in range(type_.num_fields)]
        return pa.StructArray.from_arrays([empty_array(f.type) for f in fields], fields=fields)
    if pa.types.is_fixed_size_list(type_):
        return pa.FixedSizeListArray.from_arrays(empty_array(type_.value_type), type=type_)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        offsets = pa.array([0], pa.int64() if pa.types.is_large_list(type_) else pa.int32())
        cls = pa.LargeListArray if pa.types.is_large_list(type_) else pa.ListArray
        return cls.from_arrays(offsets, empty_array(type_.value_type), type=type_)
    return pa.array([], type_)


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows in ``schema`` (see :func:`empty_array`)."""
    return pa.Table.from_arrays([empty_array(f.type) for f in schema], schema=schema)


def _np_dtype(dtype: Any) -> np.dtype:
    out: np.dtype = np.dtype(dtype.to_pandas_dtype() if isinstance(dtype, pa.DataType) else dtype)
    return out


def _binary_from_numpy(arr: np.ndarray, type_: TensorType) -> pa.Array:
    if tuple(arr.shape[1:]) != type_.shape:
        raise ArgumentTypeError(
            f"tensor shape {tuple(arr.shape[1:])} does not match {type_.shape} of {type_}")
    if arr.dtype != type_.numpy_dtype:
        cast = arr.astype(type_.numpy_dtype)
        if not np.array_equal(cast, arr, equal_nan=arr.dtype.kind == "f"):
            raise ArgumentTypeError(f"{arr.dtype} values do not fit {type_.numpy_dtype} exactly")
        arr = cast
    arr = np.ascontiguousarray(arr)
    storage = pa.FixedSizeBinaryArray.from_buffers(type_.storage_type, len(arr), [None, pa.py_buffer(arr)])
    return pa.ExtensionArray.from_storage(type_, storage)


def _leaf_from_numpy(flat: np.ndarray, type_: pa.DataType | None) -> pa.Array:
    if flat.dtype.kind in "US":
        return pa.array(flat.tolist(), type=type_ or (pa.string() if flat.dtype.kind == "U" else pa.binary()))
    if flat.dtype.kind == "O":
        raise ArgumentTypeError("object arrays are not tensors; give a numeric, bool or string dtype")
    if flat.dtype.byteorder == ">" or (flat.dtype.byteorder == "=" and not np.little_endian):
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    return pa.array(np.ascontiguousarray(flat), type=type_)


def to_arrow(values: TensorLike, type: pa.DataType | None = None) -> pa.Array:  # noqa: A002
    """Convert a batch of tensors (rows on the first axis) to an Arrow array.

    Args:
        values: a NumPy array of shape ``(rows, *shape)``; a mapping of name to such
            arrays (a dict observation, becomes a struct); a sequence of per-row arrays
            of one shape; or an Arrow array (returned as is, extension types unwrapped).
        type: the tensor type wanted; the data is converted to it when given.

    Raises:
        TypeError: the values are not a batch of equally shaped tensors.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return _arrow_to_arrow(values, type)
    if isinstance(values, Mapping):
        return _struct_to_arrow(values, type)
    if not isinstance(values, np.ndarray):
        rows_list = list(values)
        mask = np.fromiter((v is None for v in rows_list), dtype=bool, count=len(rows_list))
        present = [v for v in rows_list if v is not None]
        if present and isinstance(present[0], Mapping):
            if mask.any():
                raise ArgumentTypeError("null rows in a dict tensor are not supported; give every row")
            return to_arrow({k: [row[k] for row in rows_list] for k in present[0]}, type)
        if mask.any():
            return _rows_with_nulls(rows_list, present, mask, type)
        return _numpy_to_arrow(_stacked(rows_list), type)
    return _numpy_to_arrow(values, type)


def _arrow_to_arrow(arr: pa.Array, type_: pa.DataType | None) -> pa.Array:
    """An Arrow array as is, extension tensors unwrapped, in ``type_`` (a cast or a change of layout)."""
    arr = fixed_tensors(arr)
    if isinstance(arr.type, pa.FixedShapeTensorType):
        arr = to_arrow(arr.to_numpy_ndarray())
    if type_ is None or arr.type == type_:
        return arr
    if isinstance(type_, TensorType) or isinstance(arr.type, TensorType):  # change of layout
        out = to_arrow(to_numpy(arr, fill_value=0), type_)
        if arr.null_count:
            return with_null_rows(out, arr.is_null().to_numpy(zero_copy_only=False))
        return out
    return arr.cast(type_)


def _struct_to_arrow(values: Mapping[str, Any], type_: pa.DataType | None) -> pa.Array:
    """A dict of batches as a struct array, one field each."""
    if not values:
        raise ArgumentTypeError("a dict tensor needs at least one field")
    children = []
    for name, child in values.items():
        child_type = type_.field(name).type if type_ is not None and pa.types.is_struct(type_) else None
        children.append(to_arrow(child, child_type))
    lengths = {len(c) for c in children}
    if len(lengths) != 1:
        raise ArgumentTypeError(
            f"the fields of a dict tensor have different row counts: {sorted(lengths)}")
    return pa.StructArray.from_arrays(children, names=[str(k) for k in values])


def _rows_with_nulls(rows_list: list[Any], present: list[Any], mask: np.ndarray,
                     type_: pa.DataType | None) -> pa.Array:
    """Per-row tensors, some of them None: null rows over zeros of the others' shape."""
    if not present:
        return pa.nulls(len(rows_list), type_ or pa.null())
    filler = np.zeros_like(np.asarray(present[0]))
    dense = to_arrow(np.asarray([filler if v is None else v for v in rows_list]), type_)
    return with_null_rows(dense, mask)


_RAGGED = ("the rows do not form one array (ragged shapes or mixed types); tensors in a "
           "column must all have the same shape and dtype")


def _stacked(rows_list: list[Any]) -> np.ndarray:
    try:
        return np.asarray(rows_list)
    except ValueError as exc:
        raise ArgumentTypeError(_RAGGED) from exc


def _numpy_to_arrow(arr_np: np.ndarray, type_: pa.DataType | None) -> pa.Array:
    """A ``(rows, *shape)`` array as nested fixed-size lists (or a binary tensor type), checked."""
    if arr_np.ndim == 0:
        raise ArgumentTypeError("a batch of tensors needs a first (row) axis; got a 0-d value")
    if arr_np.dtype.kind == "O":
        raise ArgumentTypeError(_RAGGED)
    if isinstance(type_, TensorType):
        return _binary_from_numpy(arr_np, type_)
    rows, shape = arr_np.shape[0], arr_np.shape[1:]
    leaf_type = tensor_dtype(type_) if type_ is not None else None
    if (leaf_type is not None and arr_np.dtype.kind in "biuf"
            and pa.from_numpy_dtype(arr_np.dtype) != leaf_type):
        raise ArgumentTypeError(f"{arr_np.dtype} tensors are not {leaf_type}; convert them first "
                                "(nothing is cast silently)")
    if type_ is not None and tensor_shape(type_) != tuple(shape):
        raise ArgumentTypeError(f"tensor shape {tuple(shape)} does not match {tensor_shape(type_)} "
                                f"of {type_}")
    flat = arr_np.reshape(-1) if arr_np.flags.c_contiguous else np.ascontiguousarray(arr_np).reshape(-1)
    result = _leaf_from_numpy(flat, leaf_type)
    for dim in reversed(shape):
        result = pa.FixedSizeListArray.from_arrays(result, int(dim))
    assert len(result) == rows
    return result


def with_null_rows(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    """The same array with the rows where ``mask`` is true set to null."""
    if arr.offset:  # (a slice: the layouts below build on the buffers, which start before it)
        arr = pa.concat_arrays([arr])
    pa_mask = pa.array(mask, pa.bool_())
    if isinstance(arr.type, TensorType):
        storage = arr.storage
        masked = pa.FixedSizeBinaryArray.from_buffers(
            storage.type, len(storage), [pc.invert(pa_mask).buffers()[1], storage.buffers()[1]],
            offset=storage.offset)
        return pa.ExtensionArray.from_storage(arr.type, masked)
    if pa.types.is_fixed_size_list(arr.type):
        # (.values is the whole child, which may be longer than the array: a struct's field
        # taken from a longer parent; the array's rows are the first len(arr) lists of it)
        size = arr.type.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return pa.FixedSizeListArray.from_arrays(values, type=arr.type, mask=pa_mask)
    if pa.types.is_struct(arr.type):
        return pa.StructArray.from_arrays([arr.field(i) for i in range(arr.type.num_fields)],
                                          fields=list(arr.type), mask=pa_mask)
    return pc.if_else(pa_mask, pa.nulls(len(arr), arr.type), arr)


def to_numpy(
    column: pa.Array | pa.ChunkedArray,
    *,
    fill_value: Any = None,
) -> Any:
    """Convert a tensor column back to NumPy: ``(rows, *shape)``, or a dict for structs.

    Args:
        column: the Arrow column.
        fill_value: value for null rows. Without it, null rows of a float column become
            NaN and null rows of any other dtype raise ``ValueError``.

    Zero-copy where Arrow's layout allows (numeric columns without nulls).
    """
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks > 1 and column.nbytes >= _JOIN_BYTES:
            return _join([to_numpy(chunk, fill_value=fill_value) for chunk in column.chunks])
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if isinstance(column.type, TensorBytesType):
        column = fixed_tensors(column)
    if isinstance(column.type, TensorType):
        return _binary_to_numpy(column, fill_value)
    if isinstance(column.type, pa.ExtensionType):
        column = column.storage
    type_ = column.type
    if pa.types.is_struct(type_):
        out: dict[str, Any] = {}
        parent_null = None if column.null_count == 0 else np.asarray(
            column.is_null().to_numpy(zero_copy_only=False))
        for i, field in enumerate(type_):
            child = column.field(i)
            if parent_null is not None:  # a null row is null in every field (binary tensors, structs too)
                child_null = np.asarray(child.is_null().to_numpy(zero_copy_only=False)) if child.null_count \
                    else np.zeros(len(child), bool)
                child = with_null_rows(child, parent_null | child_null)
            out[field.name] = to_numpy(child, fill_value=fill_value)
        return out
    shape = tensor_shape(type_)
    rows = len(column)
    null_mask = None
    if column.null_count:
        null_mask = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
    leaf = column
    while pa.types.is_fixed_size_list(leaf.type):
        # .values keeps the slots of null rows (flatten() would drop them)
        size = leaf.type.list_size
        leaf = leaf.values.slice(leaf.offset * size, len(leaf) * size)
    if pa.types.is_floating(leaf.type) and leaf.null_count == 0:
        flat = leaf.to_numpy(zero_copy_only=False)
    elif leaf.null_count:
        if fill_value is None and pa.types.is_floating(leaf.type):
            flat = leaf.fill_null(float("nan")).to_numpy(zero_copy_only=False)
        elif fill_value is not None:
            flat = leaf.fill_null(pa.scalar(fill_value).cast(leaf.type)).to_numpy(zero_copy_only=False)
        else:
            raise ArgumentError(
                f"column of {type_} has {column.null_count} null row(s) and no NaN to stand for "
                "them; pass fill_value=... or filter the nulls out first"
            )
    else:
        flat = leaf.to_numpy(zero_copy_only=False)
    result = flat.reshape((rows, *shape))
    if null_mask is not None and null_mask.any():
        if fill_value is None and pa.types.is_floating(leaf.type):
            result = result.copy() if not result.flags.writeable else result
            result[null_mask] = np.nan
        elif fill_value is not None:
            result = result.copy() if not result.flags.writeable else result
            result[null_mask] = fill_value
        else:
            raise ArgumentError(
                f"column of {type_} has {int(null_mask.sum())} null row(s) and no NaN to stand "
                "for them; pass fill_value=... or filter the nulls out first"
            )
    return result


#: a chunked column of at least this many bytes is joined by :func:`_join` (in parallel)
_JOIN_BYTES = 16 << 20


def _join(parts: list[Any]) -> Any:
    """Chunks' arrays (or dicts of them) joined into new arrays, the copies in threads.

    ``combine_chunks`` copies a column in one thread, which was a third of reading a 1M-step
    recording's 200 MB of observations with ``episode_columns``; NumPy's copies release the
    GIL, so each thread writes (and first touches) its own part of the output.
    """
    if isinstance(parts[0], dict):
        return {key: _join([p[key] for p in parts]) for key in parts[0]}
    out = np.empty((sum(len(p) for p in parts), *parts[0].shape[1:]), parts[0].dtype)
    ends = np.cumsum([len(p) for p in parts])
    threads = min(os.cpu_count() or 1, 8)
    if threads < 2 or out.nbytes < _JOIN_BYTES:
        np.concatenate(parts, out=out)
        return out
    from concurrent.futures import ThreadPoolExecutor

    spans = [(int(end) - len(p), int(end), p) for p, end in zip(parts, ends, strict=True)]

    def copy(share: list[tuple[int, int, np.ndarray]]) -> None:
        for lo, hi, part in share:
            out[lo:hi] = part

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(copy, [spans[i::threads] for i in range(threads)]))
    return out


def _binary_to_numpy(column: pa.Array, fill_value: Any) -> np.ndarray:
    """The binary layout back to ``(rows, *shape)``: zero-copy when there are no nulls."""
    type_: TensorType = column.type
    storage = column.storage
    rows = len(storage)
    width = type_.storage_type.byte_width
    data = storage.buffers()[1]
    flat = np.frombuffer(data, dtype=type_.numpy_dtype, count=rows * width // type_.numpy_dtype.itemsize,
                         offset=storage.offset * width) if rows else np.empty(0, type_.numpy_dtype)
    result = flat.reshape((rows, *type_.shape))
    if storage.null_count:
        mask = np.asarray(storage.is_null().to_numpy(zero_copy_only=False))
        if fill_value is None and type_.numpy_dtype.kind != "f":
            raise ArgumentError(f"column of {type_} has {int(mask.sum())} null row(s) and no NaN to stand "
                                "for them; pass fill_value=... or filter the nulls out first")
        result = result.copy()
        result[mask] = np.nan if fill_value is None else fill_value
    return result
