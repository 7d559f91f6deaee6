"""An RLDS dataset's TFDS directory: finding it, its ``features.json`` tree, its JSON and shards.

Also ``tf.train.Example``'s message type, built at run time from its field numbers (no
TensorFlow, no compiled ``.proto``): what the reader decodes and the writer encodes.

Example:
    >>> f = parse_features({"featuresDict": {"features": {"x": {"tensor": {
    ...     "shape": {"dimensions": ["2"]}, "dtype": "float32", "encoding": "none"}}}}})
    >>> f.children["x"].kind, f.children["x"].shape
    ('tensor', (2,))
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.confined import inside
from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedInputError,
)

__all__ = ["is_rlds_dir"]

_SHARD = re.compile(r"\.tfrecord-(\d+)(?:-of-(\d+))?$")


# --------------------------------------------------------------------------- finding a dataset


def dataset_dir(path: str | os.PathLike[str]) -> Path | None:
    """The TFDS dataset directory ``path`` is, or holds one version folder of (the newest); else None."""
    p = Path(path)
    if _is_dataset(p):
        return p
    if not p.is_dir():
        return None
    versions = [d for d in p.iterdir() if _version_dir(p, d.name) and _is_dataset(d)]
    if not versions:
        return None
    return max(versions, key=lambda d: tuple(int(x) if x.isdigit() else 0 for x in d.name.split(".")))


def _version_dir(root: Path, name: str) -> bool:
    """Whether ``root/name`` is a folder inside ``root`` (an entry leading outside is no version of it)."""
    try:
        return inside(root, name).is_dir()
    except InvalidInputError:
        return False


def _is_dataset(p: Path) -> bool:
    if not (inside(p, "dataset_info.json").is_file() and inside(p, "features.json").is_file()):
        return False
    return any(".tfrecord" in f.name for f in p.iterdir())


def is_rlds_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a TFDS dataset directory of TFRecord shards (or a folder of its versions)."""
    return dataset_dir(path) is not None


# --------------------------------------------------------------------------- features.json


@dataclass
class Feature:
    """One node of a TFDS feature tree (``features.json``).

    Attributes:
        kind: ``"dict"``, ``"sequence"`` (``Dataset``/``Sequence``), ``"tensor"``, ``"image"``,
            ``"text"``.
        dtype: a tensor's, image's or class label's dtype.
        shape: its shape (-1 for a dimension of any size).
        encoding: a tensor's (``"none"``, ``"bytes"``, ``"zlib"``) or an image's (``"png"``, ``"jpeg"``).
        children: a dict's fields, in the file's order.
        item: a sequence's feature.
    """

    kind: str
    dtype: np.dtype[Any] | None = None
    shape: tuple[int, ...] = ()
    encoding: str = "none"
    children: dict[str, Feature] = field(default_factory=dict)
    item: Feature | None = None


def parse_features(spec: Any, where: str = "features") -> Feature:
    """A feature tree from ``features.json``'s JSON (what ``tfds.features.FeatureConnector.to_json`` wrote).

    Raises:
        UnsupportedInputError: a feature this reader does not decode (video, audio, bounding
            boxes, ragged tensors inside steps), named by its path.

    Example:
        >>> f = parse_features({"featuresDict": {"features": {"x": {"tensor": {
        ...     "shape": {"dimensions": ["2"]}, "dtype": "float32", "encoding": "none"}}}}})
        >>> f.children["x"].kind, f.children["x"].shape
        ('tensor', (2,))
    """
    if not isinstance(spec, dict):
        raise UnsupportedInputError(None, f"{where}: not a TFDS feature description")
    if "featuresDict" in spec:
        features = _object(spec["featuresDict"], f"{where}: featuresDict").get("features") or {}
        features = _object(features, f"{where}: featuresDict.features")
        return Feature("dict", children={k: parse_features(v, f"{where}/{k}") for k, v in features.items()})
    if "sequence" in spec:
        seq = _object(spec["sequence"], f"{where}: sequence")
        try:
            length = int(seq.get("length", -1) or -1)
        except (TypeError, ValueError):
            raise InvalidInputError(None, f"{where}: sequence length {seq.get('length')!r} is not a "
                                          "number") from None
        if length not in (-1, 0):
            raise UnsupportedInputError(
                None,
                f"{where}: a sequence of fixed length {length}; rlarrow reads "
                "RLDS step sequences (any length)",
            )
        return Feature("sequence", item=parse_features(seq.get("feature"), where))
    if "tensor" in spec or "image" in spec or "classLabel" in spec:
        body = _object(spec.get("tensor") or spec.get("image") or {}, f"{where}: tensor")
        dims = _dimensions(body.get("shape"), where)
        if "classLabel" in spec:
            return Feature("tensor", np.dtype(np.int64), ())
        dtype = body.get("dtype") or "uint8"
        if dtype == "string":
            return Feature("text", shape=dims)
        if "image" in spec:
            fmt = body.get("encodingFormat") or "png"
            if fmt not in ("png", "jpeg"):
                raise InvalidInputError(None, f"{where}: image encodingFormat {fmt!r}; TFDS writes 'png' or "
                                              "'jpeg'")
            return Feature("image", _dtype(dtype, where), dims, fmt)
        encoding = body.get("encoding") or "none"
        if encoding not in ("none", "bytes", "zlib"):
            raise InvalidInputError(None, f"{where}: tensor encoding {encoding!r}; TFDS writes 'none', "
                                          "'bytes' or 'zlib'")
        return Feature("tensor", _dtype(dtype, where), dims, encoding)
    if "text" in spec:
        return Feature("text")
    name = str(spec.get("pythonClassName", "?")).rsplit(".", 1)[-1]
    raise UnsupportedInputError(
        None,
        f"{where}: a {name} feature, which rlarrow does not decode yet (it reads "
        "tensors, scalars, images, text, class labels, dicts and step datasets)",
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an error naming where in features.json."""
    if not isinstance(value, dict):
        raise InvalidInputError(None, f"{where} is {type(value).__name__} {value!r:.40}; TFDS writes an "
                                      "object")
    return value


def _dimensions(shape: Any, where: str) -> tuple[int, ...]:
    """A tensor's ``shape.dimensions`` (strings of integers, -1 for a size known per record)."""
    dims = _object(shape if shape is not None else {}, f"{where}: shape").get("dimensions") or []
    if not isinstance(dims, list):
        raise InvalidInputError(None, f"{where}: shape dimensions {dims!r:.40} are not a list")
    out = []
    for d in dims:
        try:
            n = int(d)
        except (TypeError, ValueError):
            n = -2
        if n < -1 or isinstance(d, (bool, float)):
            raise InvalidInputError(None, f"{where}: shape dimension {d!r:.20} is not a size (an integer "
                                          ">= 0, or -1 for one known per record)")
        out.append(n)
    return tuple(out)


def _dtype(name: Any, where: str) -> np.dtype[Any]:
    """A tensor's numeric dtype by TFDS's name (``float32``, ``uint8``, ``bool``...)."""
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        raise InvalidInputError(None, f"{where}: dtype {name!r:.30} is not a numeric type TFDS writes "
                                      "(bool, int8..int64, uint8..uint64, float16..float64, string)")
    return dtype


# --------------------------------------------------------------------------- tf.train.Example


_EXAMPLE: Any = None


def example_class() -> Any:
    """``tf.train.Example``'s message type, built from its field numbers (wire-compatible), once."""
    global _EXAMPLE
    if _EXAMPLE is not None:
        return _EXAMPLE
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as exc:
        raise MissingDependencyError(
            "reading RLDS/TFDS records needs protobuf, which is not installed; "
            "install it with: pip install 'rlarrow[rlds]'",
            name="google.protobuf",
        ) from exc
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="rlarrow/tf_example.proto", package="rlarrow.tfexample", syntax="proto3"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> Any:
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fd = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
        return msg

    rep, opt = f.LABEL_REPEATED, f.LABEL_OPTIONAL
    message("BytesList", [("value", 1, f.TYPE_BYTES, rep, "")])
    message("FloatList", [("value", 1, f.TYPE_FLOAT, rep, "")])
    message("Int64List", [("value", 1, f.TYPE_INT64, rep, "")])
    feature = message(
        "Feature",
        [
            ("bytes_list", 1, f.TYPE_MESSAGE, opt, ".rlarrow.tfexample.BytesList"),
            ("float_list", 2, f.TYPE_MESSAGE, opt, ".rlarrow.tfexample.FloatList"),
            ("int64_list", 3, f.TYPE_MESSAGE, opt, ".rlarrow.tfexample.Int64List"),
        ],
    )
    feature.oneof_decl.add(name="kind")
    for fd in feature.field:
        fd.oneof_index = 0
    features = message(
        "Features", [("feature", 1, f.TYPE_MESSAGE, rep, ".rlarrow.tfexample.Features.FeatureEntry")]
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=opt)
    entry.field.add(
        name="value", number=2, type=f.TYPE_MESSAGE, label=opt, type_name=".rlarrow.tfexample.Feature"
    )
    entry.options.map_entry = True
    message("Example", [("features", 1, f.TYPE_MESSAGE, opt, ".rlarrow.tfexample.Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    _EXAMPLE = message_factory.GetMessageClass(pool.FindMessageTypeByName("rlarrow.tfexample.Example"))
    return _EXAMPLE


def feature_values(feature: Any) -> Any:
    """A ``Feature``'s values: a NumPy array (floats, ints) or a list of bytes."""
    kind = feature.WhichOneof("kind")
    if kind == "float_list":
        return np.asarray(feature.float_list.value, np.float32)
    if kind == "int64_list":
        return np.asarray(feature.int64_list.value, np.int64)
    if kind == "bytes_list":
        return list(feature.bytes_list.value)
    return np.empty(0, np.float32)  # an empty feature: no values



def shard_files(data: Path, name: str, split: str) -> list[Path]:
    """The TFRecord shards of ``split`` in ``data`` (``<name>-<split>.tfrecord-<i>[-of-<n>]``), in order."""
    found = []
    for p in data.iterdir():
        m = _SHARD.search(p.name)
        if m and p.name.startswith(f"{name}-{split}."):
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def parsed_features(data: Path, spec: Any) -> Feature:
    """:func:`parse_features` of ``data/features.json``, its errors naming that file."""
    try:
        return parse_features(spec)
    except InvalidInputError as exc:
        if exc.path is not None:
            raise
        raise type(exc)(data / "features.json", str(exc)) from None


def read_json(path: Path) -> Any:
    """``path``'s JSON (``dataset_info.json``, ``features.json``); else a CorruptFileError."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"not readable JSON ({exc})") from exc


def class_labels(data: Path) -> dict[str, list[str]]:
    """ClassLabel names: ``<feature>.labels.txt`` (``steps-action``, ``outcome``), one name a line."""
    out = {}
    for path in sorted(data.glob("*.labels.txt")):
        # (a label file that is a symlink must stay inside the dataset: its text goes into the run)
        text = inside(data, path.name, what="the ClassLabel names file")
        try:
            out[path.name[: -len(".labels.txt")]] = text.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CorruptFileError(path, f"ClassLabel names that cannot be read ({exc})") from exc
    return out
