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
from collections.abc import Iterable
from enum import Enum
from typing import Any

import numpy as np

from rlarrow.core.errors import ArgumentError, ArgumentTypeError

__all__ = ["decode", "decode_column", "encode", "encode_column"]

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
    if value is None or isinstance(value, (bool, str)):
        return value, None
    if isinstance(value, Enum):
        return _enc(value.value, path)
    if isinstance(value, int) and not isinstance(value, np.generic):
        return int(value), None
    if isinstance(value, float) and not isinstance(value, np.generic):
        return (value, None) if math.isfinite(value) else (_float_out(value), "float")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii"), "bytes"
    if isinstance(value, np.ndarray):
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
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        child_tags: dict[str, Any] = {}
        key_tags: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = k
            elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
                key = str(int(k))
                key_tags[key] = "int"
            else:
                raise ArgumentTypeError(
                    f"{path or 'value'}: dict key {k!r} of type {type(k).__name__} is not "
                    "supported in metadata (use str or int keys)"
                )
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
    if isinstance(value, (list, tuple)):
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
    raise ArgumentTypeError(
        f"{path or 'value'}: {type(value).__name__} is not supported in metadata "
        "(use dicts, lists, tuples, str, int, float, bool, None, bytes, NumPy scalars or arrays)"
    )


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


def decode_column(texts: Iterable[str | None], types: Iterable[str | None]) -> list[Any]:
    """Decode a ``metadata`` column with its ``metadata_types`` column."""
    return [decode(t, ty) for t, ty in zip(texts, types, strict=True)]
