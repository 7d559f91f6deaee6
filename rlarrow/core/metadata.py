"""Metadata of any nesting as queryable, exactly round-tripping JSON.

Metadata (run metadata, environment specs, episode metadata, per-step custom data)
is stored in two string columns:

* ``metadata``: plain JSON of the value, so any engine can query it by key
  (DuckDB ``metadata->>'$.params.lr'``, Polars ``str.json_path_match("$.params.lr")``);
* ``metadata_types``: the type tags JSON cannot express, mirroring the value's tree
  only where needed; null when the value is plain JSON (str, int, finite float,
  bool, None, lists and str-keyed dicts of those).

Tags (format "rlarrow typed JSON v1", see docs/format.md):

=============================  ==================================================
tag                            value stored in the JSON
=============================  ==================================================
``"float"``                    non-finite Python float: ``"NaN"``, ``"Infinity"``,
                               ``"-Infinity"``
``"bytes"``                    base64 text
``"np:<dtype>"``               NumPy scalar, e.g. ``"np:float32"``; number, bool or
                               text (complex as ``[re, im]``; non-finite as above)
``{"nd": dtype, "shape": s}``  NumPy array as nested lists (``tolist()``)
``{"dict": {k: tag}}``         dict with tagged children; ``"keys": {k: "int"}``
                               marks integer keys
``{"list": {i: tag}}``         list with tagged children
``{"tuple": {i: tag}}``        tuple (always tagged)
=============================  ==================================================

Example:
    >>> import numpy as np
    >>> from rlarrow.core import metadata
    >>> text, types = metadata.encode({"lr": np.float32(0.5), "tags": ["a"]})
    >>> text
    '{"lr":0.5,"tags":["a"]}'
    >>> types
    '{"dict":{"lr":"np:float32"}}'
    >>> value = metadata.decode(text, types)
    >>> type(value["lr"]).__name__
    'float32'
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core.errors import ArgumentError, ArgumentTypeError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["decode", "encode"]

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_ND_KINDS = "biufcU"


def _float_out(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _has_nonfinite(x: Any) -> bool:
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, list):
        return any(_has_nonfinite(v) for v in x)
    return False


def _sanitize_list(x: Any, complex_: bool) -> Any:
    if isinstance(x, list):
        return [_sanitize_list(v, complex_) for v in x]
    if complex_:
        return [_float_out(x.real), _float_out(x.imag)]
    if isinstance(x, float):
        return _float_out(x)
    return x


def _enc(value: Any, path: str) -> tuple[Any, Any]:
    """Return (json-able value, tag or None)."""
    if isinstance(value, np.generic):
        return _enc_numpy_scalar(value, path)
    if value is None or isinstance(value, (bool, str)):
        return value, None
    if isinstance(value, Enum):
        return _enc(value.value, path)
    if isinstance(value, int):
        return int(value), None
    if isinstance(value, float):
        return (value, None) if math.isfinite(value) else (_float_out(value), "float")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii"), "bytes"
    if isinstance(value, np.ndarray):
        return _enc_ndarray(value, path)
    if isinstance(value, dict):
        return _enc_dict(value, path)
    if isinstance(value, (list, tuple)):
        return _enc_sequence(value, path)
    raise ArgumentTypeError(
        f"{path or 'value'}: {type(value).__name__} is not supported in metadata "
        "(use dicts, lists, tuples, str, int, float, bool, None, bytes, NumPy scalars or arrays)"
    )


def _enc_numpy_scalar(value: np.generic, path: str) -> tuple[Any, str]:
    """A NumPy scalar as its Python value, tagged with its dtype."""
    dtype = value.dtype
    tag = "np:str_" if dtype.kind == "U" else "np:bytes_" if dtype.kind == "S" else f"np:{dtype.name}"
    if dtype.kind == "b":
        return bool(value), tag
    if dtype.kind in "iu":
        return int(value), tag
    if dtype.kind == "f":
        return _float_out(float(value)), tag
    if dtype.kind == "c":
        return [_float_out(float(value.real)), _float_out(float(value.imag))], tag
    if dtype.kind == "U":
        return str(value), tag
    if dtype.kind == "S":
        return base64.b64encode(value.tobytes()).decode("ascii"), tag
    raise ArgumentTypeError(f"{path or 'value'}: NumPy scalar of dtype {dtype} is not supported "
                            "in metadata")


def _enc_ndarray(value: np.ndarray, path: str) -> tuple[Any, dict[str, Any]]:
    """A NumPy array as nested lists, tagged with its dtype and shape."""
    if value.dtype.kind not in _ND_KINDS:
        raise ArgumentTypeError(
            f"{path or 'value'}: NumPy arrays of dtype {value.dtype} are not supported in "
            f"metadata (supported kinds: bool, int, uint, float, complex, str)"
        )
    listed = value.tolist()
    return _sanitize_list(listed, value.dtype.kind == "c"), {
        "nd": value.dtype.str,
        "shape": list(value.shape),
    }


def _dict_key(k: Any, path: str) -> tuple[str, bool]:
    """A dict key as JSON writes it, and whether it was an int."""
    if isinstance(k, str):
        return k, False
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        return str(int(k)), True
    raise ArgumentTypeError(
        f"{path or 'value'}: dict key {k!r} of type {type(k).__name__} is not "
        "supported in metadata (use str or int keys)"
    )


def _enc_dict(value: dict[Any, Any], path: str) -> tuple[dict[str, Any], Any]:
    """A dict with str (or int) keys; its tag names its children's tags and its int keys."""
    out: dict[str, Any] = {}
    child_tags: dict[str, Any] = {}
    key_tags: dict[str, str] = {}
    for k, v in value.items():
        key, was_int = _dict_key(k, path)
        if was_int:
            key_tags[key] = "int"
        if key in out:
            raise ArgumentTypeError(f"{path or 'value'}: keys {key!r} and {k!r} collide once written "
                                    "as JSON")
        out[key], tag = _enc(v, f"{path}.{key}" if path else key)
        if tag is not None:
            child_tags[key] = tag
    if not child_tags and not key_tags:
        return out, None
    dict_tag: dict[str, Any] = {"dict": child_tags}
    if key_tags:
        dict_tag["keys"] = key_tags
    return out, dict_tag


def _enc_sequence(value: list[Any] | tuple[Any, ...], path: str) -> tuple[list[Any], Any]:
    """A list or tuple; a tuple is always tagged (it must come back a tuple)."""
    items = []
    tags: dict[str, Any] = {}
    for i, v in enumerate(value):
        enc, tag = _enc(v, f"{path}[{i}]")
        items.append(enc)
        if tag is not None:
            tags[str(i)] = tag
    if isinstance(value, tuple):
        return items, {"tuple": tags}
    return items, ({"list": tags} if tags else None)


def encode(value: Any) -> tuple[str | None, str | None]:
    """Encode a metadata value as ``(json_text, types_text)``.

    ``None`` encodes as ``(None, None)`` (a null cell). ``types_text`` is None when
    the value needs no tags.

    Raises:
        TypeError: the value holds something that cannot round-trip (the message names
            the path of the offending item).
    """
    if value is None:
        return None, None
    obj, tag = _enc(value, "")
    text = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text, None if tag is None else json.dumps(tag, separators=(",", ":"))


def _from_float(x: Any) -> float:
    return _NONFINITE[x] if isinstance(x, str) else float(x)


def _dec(obj: Any, tag: Any) -> Any:
    if tag is None:
        return obj
    if isinstance(tag, str):
        if tag == "float":
            return _from_float(obj)
        if tag == "bytes":
            return base64.b64decode(obj)
        if tag == "np:str_":
            return np.str_(obj)
        if tag == "np:bytes_":
            return np.bytes_(base64.b64decode(obj))
        if tag.startswith("np:"):
            dtype = np.dtype(tag[3:])
            if dtype.kind == "f":
                return dtype.type(_from_float(obj))
            if dtype.kind == "c":
                return dtype.type(complex(_from_float(obj[0]), _from_float(obj[1])))
            return dtype.type(obj)
        raise ArgumentError(f"unknown metadata type tag {tag!r}")
    if "nd" in tag:
        dtype = np.dtype(tag["nd"])
        shape = tuple(tag["shape"])
        if dtype.kind == "c":
            flat = list(_flatten_pairs(obj))
            data = np.array([complex(_from_float(r), _from_float(i)) for r, i in flat], dtype=dtype)
        elif dtype.kind == "f":
            data = np.array(obj, dtype=object).reshape(-1) if shape else np.array([obj], dtype=object)
            data = np.array([_from_float(v) for v in data], dtype=dtype)
        else:
            data = np.array(obj, dtype=dtype)
        return data.reshape(shape)
    if "dict" in tag:
        children = tag["dict"]
        keys = tag.get("keys", {})
        return {
            (int(k) if keys.get(k) == "int" else k): _dec(v, children.get(k))
            for k, v in obj.items()
        }
    if "list" in tag:
        children = tag["list"]
        return [_dec(v, children.get(str(i))) for i, v in enumerate(obj)]
    if "tuple" in tag:
        children = tag["tuple"]
        return tuple(_dec(v, children.get(str(i))) for i, v in enumerate(obj))
    raise ArgumentError(f"unknown metadata type tag {tag!r}")


def _flatten_pairs(obj: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(obj, list) and len(obj) == 2 and not isinstance(obj[0], list):
        yield obj[0], obj[1]
    elif isinstance(obj, list):
        for item in obj:
            yield from _flatten_pairs(item)


def decode(text: str | None, types: str | None = None) -> Any:
    """Decode what :func:`encode` produced back into the original value."""
    if text is None:
        return None
    obj = json.loads(text)
    return _dec(obj, None if types is None else json.loads(types))


def encode_column(values: Iterable[Any]) -> tuple[list[str | None], list[str | None]]:
    """Encode many values: returns the ``metadata`` and ``metadata_types`` columns."""
    texts: list[str | None] = []
    types: list[str | None] = []
    for value in values:
        t, ty = encode(value)
        texts.append(t)
        types.append(ty)
    return texts, types


def nest(items: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """Values keyed by paths (``"infos/qpos"``) as nested dicts (``{"infos": {"qpos": ...}}``).

    Example:
        >>> nest({"options/a/b": 1, "options/c": 2, "seed": 0})
        {'options': {'a': {'b': 1}, 'c': 2}, 'seed': 0}
    """
    out: dict[str, Any] = {}
    for path, value in items.items():
        *parents, last = path.split(sep)
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _nested(paths: list[str], values: list[Any]) -> dict[str, Any]:
    return nest(dict(zip(paths, values, strict=True)))


def encode_rows(columns: Mapping[str, np.ndarray]) -> tuple[pa.Array, pa.Array]:
    """Encode row *i* of every array as one value ``{path: array[i]}``, as :func:`encode_column` would.

    ``columns`` maps a path (parts joined by ``/``: ``"infos/qpos"`` becomes
    ``{"infos": {"qpos": ...}}``) to an array whose first dimension is the rows; each row's
    value keeps its NumPy type (a scalar as ``np:<dtype>``, an array with its dtype and
    shape). Returns the ``metadata`` and ``metadata_types`` columns as Arrow string arrays.

    For numbers (the per-step infos of an HDF5 file) the text is built by Arrow's kernels,
    not row by row: the type tags are the same on every row, and Arrow writes each number as
    the shortest text that reads back as the same value, in its own dtype (a float32 as its
    float32 digits, ``0.1`` rather than ``0.10000000149011612``). :func:`decode` gives back
    what :func:`encode_column` would have encoded, value for value and type for type, about
    40 times faster. Non-finite floats, ``-0.0`` and other dtypes take the general path.

    Example:
        >>> import numpy as np
        >>> texts, types = encode_rows({"infos/qpos": np.array([[0.5, 1.0]], np.float32)})
        >>> texts[0].as_py(), types[0].as_py()
        ('{"infos":{"qpos":[0.5,1]}}', '{"dict":{"infos":{"dict":{"qpos":{"nd":"<f4","shape":[2]}}}}}')
        >>> decode(texts[0].as_py(), types[0].as_py())["infos"]["qpos"].dtype
        dtype('float32')
    """
    import pyarrow as pa

    paths = list(columns)
    arrays = [np.asarray(columns[p]) for p in paths]
    rows = len(arrays[0]) if arrays else 0
    if not arrays or rows == 0 or not all(_arrow_writes_exactly(a) for a in arrays):
        texts, types = encode_column(_nested(paths, [a[i] for a in arrays]) for i in range(rows))
        return pa.array(texts, pa.string()), pa.array(types, pa.string())
    _, tag = _enc(_nested(paths, [a[0] for a in arrays]), "")
    types_text = json.dumps(tag, separators=(",", ":"))
    parts: list[Any] = []
    _json_parts(_nested(paths, [_leaf_text(a) for a in arrays]), parts)
    merged: list[Any] = []
    for part in parts:  # adjacent literal text as one piece
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    import pyarrow.compute as pc

    texts = pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in merged], "")
    return texts, pa.array([types_text] * rows, pa.string())


def _arrow_writes_exactly(a: np.ndarray) -> bool:
    """Whether Arrow's number-to-text cast keeps every value of ``a`` exactly (and JSON can hold it)."""
    if a.dtype.kind not in "biuf" or a.dtype.byteorder == ">" or 0 in a.shape[1:] or a.dtype.itemsize > 8:
        return False  # (long double: Arrow has no such type)
    if a.dtype.kind == "f":  # NaN/inf are tagged text, -0.0 would read back as 0
        return bool(np.isfinite(a).all() and not (np.signbit(a) & (a == 0)).any())
    return True


def _leaf_text(a: np.ndarray) -> Any:
    """Each row of ``a`` as JSON text: a number, or nested lists of numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    flat = a.reshape(-1)
    if a.dtype == np.float16:
        flat = flat.astype(np.float32)  # (Arrow casts half floats to text through float32)
    text = pa.array(flat).cast(pa.string())
    for dim in reversed(a.shape[1:]):
        offsets = pa.array(np.arange(0, len(text) + 1, int(dim), dtype=np.int32))
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, text), ",")
        text = pc.binary_join_element_wise(pa.scalar("["), joined, pa.scalar("]"), "")
    return text


def _json_parts(node: dict[str, Any], out: list[Any]) -> None:
    """``node`` (a tree of Arrow text arrays) as a list of literal text and arrays, in JSON order."""
    out.append("{")
    for k, (key, value) in enumerate(node.items()):
        out.append(("," if k else "") + json.dumps(key, ensure_ascii=False) + ":")
        if isinstance(value, dict):
            _json_parts(value, out)
        else:
            out.append(value)
    out.append("}")


def decode_column(texts: Iterable[str | None], types: Iterable[str | None]) -> list[Any]:
    """Decode a ``metadata`` column with its ``metadata_types`` column."""
    return [decode(t, ty) for t, ty in zip(texts, types, strict=True)]
