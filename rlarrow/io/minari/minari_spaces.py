"""Minari's spaces: columns in their space's shape, and gymnasium spaces for an export.

Reading, :func:`shaped_column` (arrow and parquet parts) and :func:`h5_column` (HDF5
datasets) give a column the shape and order ``minari.load_dataset`` gives it: Minari writes a
``Box`` of any rank as a flat list, images as JPEG when the dataset says ``jpeg_encoding``
(decoded as Minari decodes them, with Pillow), Dict and Tuple spaces as structs or groups.
Writing, :func:`gym_space` makes a gymnasium space from what a run records and
:func:`for_space` arranges NumPy columns as that space wants them.

Example:
    >>> import pyarrow as pa
    >>> from pathlib import Path
    >>> from rlarrow.core.tensors import to_numpy
    >>> box = {"type": "Box", "shape": [2, 2], "dtype": "float32"}
    >>> flat = pa.array([[1.0, 2.0, 3.0, 4.0]])  # as Minari writes a Box(2, 2)
    >>> to_numpy(shaped_column(flat, box, False, Path("part-0.arrow"), "observations"))
    array([[[1., 2.],
            [3., 4.]]], dtype=float32)

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.errors import CorruptFileError, InvalidInputError, MissingDependencyError
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.io.codecs.hdf5_files import plain

__all__: list[str] = []


_FLAT_SPACES = ("Box", "MultiDiscrete", "MultiBinary")


def _is_image(space: dict[str, Any]) -> bool:
    """Minari's test for a space it stores as JPEG: a uint8 Box of 2 or 3 dims, at least 32x32, 0..255."""
    shape: list[Any] = list(space.get("shape") or [])
    low, high = np.asarray(space.get("low", 0)), np.asarray(space.get("high", 0))
    return (space.get("type") == "Box" and len(shape) in (2, 3) and shape[0] >= 32 and shape[1] >= 32
            and space.get("dtype") == "uint8" and bool(np.all(low == 0)) and bool(np.all(high == 255)))


def h5_column(node: Any, space: Any, jpeg: bool, where: str, name: str, rows: int) -> pa.Array:
    """A dataset (or group, for Dict and Tuple spaces) of an HDF5 episode as a column of ``rows`` rows."""
    kind = space.get("type") if isinstance(space, dict) else None
    if kind in ("Dict", "Tuple"):
        if not hasattr(node, "keys"):
            raise CorruptFileError(where, f"{name} is a dataset; the dataset's {kind} space needs a group")
        subspaces: Any = space.get("subspaces") or ({} if kind == "Dict" else [])
        items = list(subspaces.items()) if kind == "Dict" else \
            [(str(i), s) for i, s in enumerate(subspaces)]
        keys = [k if kind == "Dict" else f"_index_{k}" for k, _ in items]
        if sorted(node) != sorted(keys):
            raise CorruptFileError(where, f"{name} holds {sorted(node)}; the dataset's {kind} space has "
                                   f"{keys}: the dataset is damaged or was written by another tool")
        children = [h5_column(node[key], sub, jpeg, where, f"{name}.{k}", rows)
                    for key, (k, sub) in zip(keys, items, strict=True)]
        return pa.StructArray.from_arrays(children, names=[k for k, _ in items])
    if hasattr(node, "keys"):
        raise CorruptFileError(where, f"{name} is a group; its space ({kind}) needs a dataset")
    if len(node) != rows:
        raise CorruptFileError(where, f"{name} has {len(node)} rows; the episode needs {rows}")
    if kind == "Text":
        return pa.array([plain(v) for v in node[()].tolist()], pa.string())
    if jpeg and isinstance(space, dict) and _is_image(space):
        shape = tuple(int(d) for d in space["shape"])
        encoded = pa.array([np.asarray(row, np.uint8).tobytes() for row in node[()]], pa.binary())
        values = _decode_jpeg(encoded, shape, np.dtype(np.uint8), Path(where), name)
    else:
        values = np.asarray(node[()])
        if values.dtype.kind not in "biuf":
            raise CorruptFileError(where, f"{name} holds {values.dtype} values, not numbers")
        if isinstance(space, dict) and kind in _FLAT_SPACES + ("Discrete",):
            want = tuple(int(d) for d in space.get("shape") or ()) if kind != "Discrete" else ()
            if kind in ("MultiBinary", "MultiDiscrete") and not want:
                want = values.shape[1:]
            if values.shape[1:] != want:
                raise CorruptFileError(where, f"{name} has rows of shape {values.shape[1:]}; the dataset's "
                                       f"{kind} space has shape {want}: the dataset is damaged")
    return to_arrow(values, tensor_type(values.dtype, values.shape[1:], layout="auto"))


def shaped_column(col: pa.ChunkedArray | pa.Array, space: Any, jpeg: bool, path: Path, name: str) -> pa.Array:
    """A Minari column in its space's shape and order (what ``minari.load_dataset`` gives).

    Minari writes a ``Box`` (any rank), ``MultiDiscrete`` or ``MultiBinary`` value as a flat
    list, an image space as JPEG bytes when the dataset says ``jpeg_encoding``, Dict and
    Tuple values as structs (fields in the order of the values it was given). A column
    whose space is not described is kept as it is.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not isinstance(space, dict):
        return arr
    kind = space.get("type")
    if kind in ("Dict", "Tuple"):
        subspaces: Any = space.get("subspaces") or ({} if kind == "Dict" else [])
        items = list(subspaces.items()) if kind == "Dict" else [(str(i), s) for i, s in enumerate(subspaces)]
        held = sorted(arr.type.field(i).name for i in range(arr.type.num_fields)) \
            if pa.types.is_struct(arr.type) else None
        if held != sorted(k for k, _ in items):
            raise CorruptFileError(path, f"the {name} column is {arr.type}, the dataset's {kind} space has "
                                   f"the fields {[k for k, _ in items]}: the dataset is damaged or was "
                                   "written by another tool")
        children = [shaped_column(arr.field(k), sub, jpeg, path, f"{name}.{k}") for k, sub in items]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, names=[k for k, _ in items], mask=mask)
    if kind not in _FLAT_SPACES:
        return arr
    shape = tuple(int(d) for d in space.get("shape") or ())
    if kind == "MultiBinary" and not shape:
        n = space.get("n")
        shape = (int(n),) if isinstance(n, int) else tuple(int(d) for d in n or ())
    if kind == "MultiDiscrete" and not shape:
        shape = tuple(np.shape(space.get("nvec") or ()))
    dtype = np.dtype(space.get("dtype") or ("int8" if kind == "MultiBinary" else "float32"))
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        if not jpeg:
            raise CorruptFileError(path, f"the {name} column holds bytes, but the dataset says it is not "
                                   "JPEG-encoded (jpeg_encoding false): the dataset is damaged")
        values = _decode_jpeg(arr, shape, dtype, path, name)
    else:
        size = int(np.prod(shape, dtype=np.int64))
        try:
            nested = pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type)
            flat = arr.flatten() if nested else arr
            values = np.asarray(flat.to_numpy(zero_copy_only=False))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise CorruptFileError(path, f"the {name} column ({arr.type}) cannot be read as numbers ({exc}): "
                                   "the dataset is damaged") from exc
        if values.size != len(arr) * size:
            raise CorruptFileError(path, f"the {name} column holds {values.size} values for {len(arr)} "
                                   f"steps; its {kind} space has shape {shape} ({size} values a step): the "
                                   "dataset is damaged")
        values = values.astype(dtype, copy=False).reshape(len(arr), *shape)
    out = to_arrow(values, tensor_type(dtype, shape, layout="auto"))
    if arr.null_count:
        out = with_null_rows(out, arr.is_null().to_numpy(zero_copy_only=False))
    return out


def _decode_jpeg(arr: pa.Array, shape: tuple[int, ...], dtype: np.dtype[Any], path: Path, name: str) -> Any:
    """JPEG-encoded images as one ``(rows, *shape)`` array, decoded as Minari decodes them."""
    import io

    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"{path}: the {name} are JPEG-encoded images; decoding them needs Pillow, which is not "
            "installed: pip install pillow", name="PIL") from exc
    out = np.empty((len(arr), *shape), dtype)
    for i, data in enumerate(arr.to_pylist()):
        if data is None:
            out[i] = 0
            continue
        try:
            image = np.array(Image.open(io.BytesIO(data)))
        except (OSError, ValueError, SyntaxError) as exc:
            raise CorruptFileError(path, f"row {i} of the {name} column is not a readable JPEG image "
                                   f"({exc}): the dataset is damaged") from exc
        if image.shape != shape:
            raise CorruptFileError(path, f"row {i} of the {name} column is an image of shape "
                                   f"{image.shape}; the dataset's space says {shape}: the dataset is damaged")
        out[i] = image
    return out


def for_space(values: Any, space: Any) -> Any:
    """NumPy columns in the structure a space wants: dicts for Dict, tuples for Tuple (fields "0", "1")."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: for_space(values[k], sub) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(for_space(values[str(i)], sub) for i, sub in enumerate(space.spaces))
    return values


def gym_space(desc: Any, what: str) -> Any:
    """A gymnasium space from what a run records: Minari's JSON, the gym recorder's description, or a spec."""
    from gymnasium import spaces

    if isinstance(desc, list):
        return spaces.Tuple([gym_space(d, what) for d in desc])
    if not isinstance(desc, dict):
        raise InvalidInputError(None, f"the run records no {what} space or spec: a Minari dataset needs one")
    kind = desc.get("type", desc.get("kind"))
    if kind is None:  # the gym recorder's Dict space, or a dict of specs
        return spaces.Dict({str(k): gym_space(v, what) for k, v in desc.items()})
    if "type" in desc:  # Minari's own JSON
        from minari.serialization import deserialize_space

        return deserialize_space(json.dumps(desc))
    if kind in ("Dict",):
        return spaces.Dict({str(k): gym_space(v, what) for k, v in (desc.get("subspaces") or {}).items()})
    if kind in ("Tuple",):
        return spaces.Tuple([gym_space(v, what) for v in desc.get("subspaces") or []])
    shape = tuple(int(d) for d in desc.get("shape") or ())
    dtype = np.dtype(desc.get("dtype") or "float32")
    if kind == "Discrete":
        return spaces.Discrete(int(desc["n"]), start=int(desc.get("start") or 0))
    if kind == "DiscreteArray":
        return spaces.Discrete(int(desc["num_values"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(desc["nvec"], dtype=dtype)
    if kind == "MultiBinary":
        return spaces.MultiBinary(desc.get("n") or list(shape))
    if kind in ("Box", "BoundedArray", "Array", "Spec"):
        low = desc.get("low", desc.get("minimum"))
        high = desc.get("high", desc.get("maximum"))
        if dtype.kind == "f":
            lo, hi = -np.inf, np.inf
        elif dtype.kind == "b":
            lo, hi = 0, 1
        else:
            info = np.iinfo(dtype.name)
            lo, hi = info.min, info.max
        low = np.broadcast_to(np.asarray(lo if low is None else low, dtype), shape)
        high = np.broadcast_to(np.asarray(hi if high is None else high, dtype), shape)
        return spaces.Box(low, high, shape, dtype)
    raise InvalidInputError(None, f"the run's {what} is a {kind}, which rlarrow cannot give Minari as a "
                            "space")
