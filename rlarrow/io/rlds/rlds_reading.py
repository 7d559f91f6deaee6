"""RLDS datasets in TFDS directories into a store, without TensorFlow.

A TFDS dataset directory (what ``tfds`` builders, envlogger's TFDS backend and the Open
X-Embodiment releases write) holds ``dataset_info.json`` (splits, shard lengths), ``features.json``
(the feature tree) and TFRecord shards ``<name>-<split>.tfrecord-<shard>``. Each record is a
serialized ``tf.train.Example`` holding one RLDS episode: its ``steps`` (a ``Dataset`` feature,
every step's values concatenated under ``steps/<field>``) and its episode-level fields.

This module reads them with rlarrow's own TFRecord framing (both CRC-32Cs checked,
:mod:`rlarrow.core.tfrecord`) and protobuf (``tf.train.Example``'s message types built at run
time: no TensorFlow, no compiled ``.proto``), one shard and one episode at a time, so memory
stays bounded by the largest episode. Values come back as ``tfds`` gives them:

- ``Tensor`` features in their dtype and shape (TFDS stores floats as float32 and integers and
  bools as int64 on disk: a float64 feature holds float32 values);
- ``Image`` features decoded to uint8 ``(H, W, C)`` arrays: PNG with Pillow, JPEG with
  simplejpeg set as TensorFlow decodes (integer-fast DCT), which gives ``tfds``'s pixels exactly
  (without simplejpeg, Pillow's decoder: a few units off in some pixels), or on request
  (``images="encoded"``) kept as the PNG/JPEG bytes the shard holds, for :func:`decode_image`
  to decode on demand; ``Text`` as ``str``; ``ClassLabel`` as int64.

Steps are already in RLDS alignment (``runs.alignment = 'rlds'``): ``observation``, ``action``
(tensors or dicts of them), ``reward``, ``discount`` (scalars), ``is_first``, ``is_last``,
``is_terminal``. On a step with ``is_last`` the action, reward and discount are undefined in
RLDS; they are stored null, and kept in the step's ``metadata`` as ``rlds_last`` where they
are not all zero. Observation fields that are not tensors (a ``language_instruction``) and
every other step field are the step's ``metadata``; episode-level fields are the episode's
``metadata``, with its ``split``. One run per dataset (all splits, in ``dataset_info.json``'s
order); its ``metadata`` holds ``dataset_info`` and ``features`` as the files had them.

Example:
    >>> from rlarrow.io.rlds import import_rlds  # doctest: +SKIP
    >>> import_rlds("~/tensorflow_datasets/bridge/0.1.0", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.confined import MAX_IMAGE_PIXELS, file_name_part, inflate, inside, png_size
from rlarrow.core.episodes import EpisodeRows
from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedInputError,
)
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.store import StoreLike, opened
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.io import EpisodesReport

__all__ = [
    "IMAGE_MODES",
    "RLDS_STEP_FIELDS",
    "Episode",
    "Feature",
    "dataset_dir",
    "decode_image",
    "export_rlds",
    "import_rlds",
    "is_rlds_dir",
    "parse_features",
    "read_episodes",
]

#: how :func:`import_rlds` stores images: decoded to uint8 tensors, or kept as their PNG/JPEG bytes
IMAGE_MODES = ("decode", "encoded")
#: the step fields RLDS defines; the rest of a step is its metadata
RLDS_STEP_FIELDS = ("observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal")

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


def _example_class() -> Any:
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


def _values(feature: Any) -> Any:
    """A ``Feature``'s values: a NumPy array (floats, ints) or a list of bytes."""
    kind = feature.WhichOneof("kind")
    if kind == "float_list":
        return np.asarray(feature.float_list.value, np.float32)
    if kind == "int64_list":
        return np.asarray(feature.int64_list.value, np.int64)
    if kind == "bytes_list":
        return list(feature.bytes_list.value)
    return np.empty(0, np.float32)  # an empty feature: no values


# --------------------------------------------------------------------------- decoding an episode


def _decode(
    feature: Feature,
    key: str,
    values: dict[str, Any],
    rows: int | None,
    path: Path,
    where: str,
    encoded: bool = False,
) -> Any:
    """The values of ``feature`` (under ``key``) from an Example's flat values, as NumPy.

    ``rows``: inside ``steps``, the number of steps (every value has that many rows); None
    outside (one value). ``encoded``: images as their PNG/JPEG bytes (an Arrow binary array
    inside ``steps``), not decoded.
    """
    if feature.kind == "dict":
        return {
            k: _decode(c, f"{key}/{k}" if key else k, values, rows, path, where, encoded)
            for k, c in feature.children.items()
        }
    if feature.kind == "sequence":
        raise UnsupportedInputError(path, f"{where}: {key} is a nested sequence, which rlarrow does not read")
    got = values.get(key)
    n = 1 if rows is None else rows
    if got is None:
        raise CorruptFileError(path, f"{where}: the record has no {key!r}, which features.json declares")
    if feature.kind == "text":
        if not isinstance(got, list) or len(got) != n:
            raise CorruptFileError(path, f"{where}: {key} holds {len(got)} values for {n} steps")
        try:
            texts = [b.decode("utf-8") for b in got]
        except UnicodeDecodeError as exc:
            raise CorruptFileError(path, f"{where}: {key} is not UTF-8 text ({exc})") from exc
        return texts if rows is not None else texts[0]
    if feature.kind == "image":
        if not isinstance(got, list) or len(got) != n:
            raise CorruptFileError(
                path, f"{where}: {key} holds {len(got) if isinstance(got, list) else 0} images for {n} steps"
            )
        if encoded:  # as the shard holds them (its CRC checked); decode_image gives tfds's pixels
            if not all(isinstance(b, bytes) for b in got):
                raise CorruptFileError(path, f"{where}: {key} holds something other than encoded images")
            return pa.array(got, pa.binary()) if rows is not None else got[0]
        images = _images(got, feature, path, f"{where}: {key}")
        return images if rows is not None else images[0]
    dtype = feature.dtype if feature.dtype is not None else np.dtype(np.float32)
    shape = feature.shape
    if -1 in shape:
        raise UnsupportedInputError(
            path, f"{where}: {key} has a dimension of any size {shape}; rlarrow reads tensors of fixed shape"
        )
    if feature.encoding in ("bytes", "zlib"):
        if not isinstance(got, list) or len(got) != n:
            raise CorruptFileError(
                path,
                f"{where}: {key} holds {len(got) if isinstance(got, list) else 0} "
                f"encoded tensors for {n} steps",
            )
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        # (zlib: decompressed to the declared size at most, refused at once if the bytes cannot hold it)
        raw = [inflate(b, size, source=path, what=f"{where}: {key}") if feature.encoding == "zlib" else b
               for b in got]
        if any(len(b) != size for b in raw):
            raise CorruptFileError(
                path, f"{where}: {key} holds a tensor of another size than {shape} {dtype}"
            )
        out = np.frombuffer(b"".join(raw), dtype.newbyteorder("<")).astype(dtype).reshape(n, *shape)
        return out if rows is not None else out[0]
    if isinstance(got, list):
        if dtype.kind in "SUO":
            return got if rows is not None else got[0]
        raise CorruptFileError(path, f"{where}: {key} holds bytes; features.json says {dtype} numbers")
    size = int(np.prod(shape, dtype=np.int64))
    if got.size != n * size:
        raise CorruptFileError(
            path, f"{where}: {key} holds {got.size} values; {n} step(s) of shape {shape} need {n * size}"
        )
    if dtype.kind == "b":
        out = (got != 0).reshape(n, *shape)
    else:
        out = got.astype(dtype).reshape(n, *shape)  # TFDS: floats stored as float32, ints as int64
    return out if rows is not None else out[0]


def decode_image(blob: bytes, channels: int = 3) -> np.ndarray:
    """An image kept encoded (``import_rlds(..., images="encoded")``) decoded as ``tfds`` decodes it.

    Returns uint8 ``(H, W, channels)``: JPEG with simplejpeg set to TensorFlow's integer-fast
    DCT (``tfds``'s pixels exactly), PNG with Pillow (16-bit grey PNGs as uint16).

    Raises:
        CorruptFileError: ``blob`` is not a readable image.
        MissingDependencyError: Pillow is missing.

    Example:
        >>> import io, numpy as np
        >>> from PIL import Image
        >>> buffer = io.BytesIO()
        >>> Image.fromarray(np.full((2, 3, 3), 7, np.uint8)).save(buffer, "PNG")
        >>> decode_image(buffer.getvalue()).shape
        (2, 3, 3)
    """
    feature = Feature("image", np.dtype(np.uint8), (-1, -1, int(channels)))
    decoded: np.ndarray = _images([bytes(blob)], feature, Path("<image>"), "the image")[0]
    return decoded


def _jpeg_decoder(channels: int) -> Any:
    """A JPEG decoder that gives ``tfds``'s pixels, or None when simplejpeg is not installed.

    simplejpeg (libjpeg-turbo) set as TensorFlow's ``decode_jpeg`` decodes: integer-fast DCT,
    fancy upsampling.
    """
    try:
        import simplejpeg
    except ImportError:
        return None
    colorspace = "GRAY" if channels == 1 else "RGB"

    def decode(blob: bytes) -> np.ndarray:
        return np.asarray(
            simplejpeg.decode_jpeg(blob, colorspace=colorspace, fastdct=True, fastupsample=False)
        )

    return decode


def _pillow(image: Any, blob: bytes, shape: tuple[int, ...], path: Path, where: str) -> np.ndarray:
    """A Pillow image in the channels the feature declares (palette, alpha, grey converted as tfds does)."""
    channels = shape[-1] if len(shape) == 3 else None
    if blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 25 and blob[24] == 16 and blob[25] in (2, 4, 6):
        raise UnsupportedInputError(
            path,
            f"{where} is a 16-bit color PNG, which rlarrow does not decode exactly "
            "yet (Pillow would cut it to 8 bits)",
        )
    if image.mode in ("I;16", "I;16B", "I"):  # 16-bit grey: the values as they are
        return np.asarray(image).astype(np.uint16)
    if channels == 3 and image.mode != "RGB":
        image = image.convert("RGB")
    elif channels == 4 and image.mode != "RGBA":
        image = image.convert("RGBA")
    elif channels == 1 and image.mode not in ("L", "1"):
        image = image.convert("L")
    return np.asarray(image)


def _check_size(size: tuple[int, int], shape: tuple[int, ...], path: Path, where: str) -> None:
    """An image's (width, height) from its header against its feature's shape and MAX_IMAGE_PIXELS."""
    width, height = size
    declared = tuple(shape[:2]) if len(shape) == 3 else (-1, -1)
    if width * height > MAX_IMAGE_PIXELS or any(
        d not in (-1, got) for d, got in zip(declared, (height, width), strict=True)
    ):
        raise CorruptFileError(
            path,
            f"{where} is {height}x{width} pixels; features.json says {shape} (and rlarrow decodes at most "
            f"{MAX_IMAGE_PIXELS} pixels an image): the dataset is damaged",
        )


def _images(data: list[bytes], feature: Feature, path: Path, where: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"{path}: {where} holds encoded images; decoding them needs Pillow, which "
            "is not installed: pip install pillow",
            name="PIL",
        ) from exc
    shape = feature.shape
    jpeg = _jpeg_decoder(shape[-1] if len(shape) == 3 else 3)
    out: np.ndarray | None = None
    for i, blob in enumerate(data):
        header = png_size(blob)  # (checked before Pillow looks at it, then again as Pillow reads it)
        if header is not None:
            _check_size(header[::-1], shape, path, f"{where}: image {i}")
        try:
            opened = Image.open(io.BytesIO(blob))  # (the header only: its size checked before decoding)
            _check_size(opened.size, shape, path, f"{where}: image {i}")
            if jpeg is not None and blob[:2] == b"\xff\xd8":
                image = jpeg(blob)
            else:
                image = _pillow(opened, blob, shape, path, f"{where}: image {i}")
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            if isinstance(exc, CorruptFileError):
                raise
            raise CorruptFileError(path, f"{where}: image {i} cannot be decoded ({exc})") from exc
        if image.ndim == 2 and len(shape) == 3:
            image = image[:, :, None]
        if len(shape) == 3 and -1 not in shape and image.shape != shape:
            raise CorruptFileError(path, f"{where}: image {i} is {image.shape}; features.json says {shape}")
        if out is None:
            out = np.empty((len(data), *image.shape), np.dtype(feature.dtype or np.uint8))
        elif image.shape != out.shape[1:]:
            raise CorruptFileError(path, f"{where}: image {i} is {image.shape}, image 0 {out.shape[1:]}")
        out[i] = image
    if out is None:
        out = np.empty((0, *(d if d > 0 else 0 for d in shape)), np.uint8)
    return out


@dataclass
class Episode:
    """One decoded RLDS episode: its steps' fields (NumPy, dicts of them) and its own fields."""

    steps: dict[str, Any]
    fields: dict[str, Any]
    num_steps: int
    split: str
    shard: str
    index: int  #: its place in its split, as tfds reads it
    number: int = 0  #: its place in the dataset (splits in dataset_info.json's order): its episode_id


def read_episodes(
    directory: str | os.PathLike[str], *, splits: list[str] | None = None, images: str = "decode"
) -> Iterator[Episode]:
    """The episodes of a TFDS RLDS dataset, decoded, one at a time, shard by shard (see the module docs).

    ``images="encoded"`` keeps each step's images as the PNG/JPEG bytes the shard holds (an
    Arrow binary array; :func:`decode_image` decodes one as ``tfds`` does).

    Raises:
        UnsupportedInputError: not a TFDS dataset of TFRecord shards, or a feature not decoded.
        CorruptFileError: a record that fails its checksum or does not match ``features.json``,
            or shards that hold other episode counts than ``dataset_info.json`` says.
    """
    from rlarrow.io.codecs.tfrecord import HEADER_BYTES, ReadCounts, read_records

    splits = _arguments.names(splits, "splits", what="split name")
    data = dataset_dir(directory)
    if data is None:
        raise UnsupportedInputError(
            directory, "not a TFDS dataset (dataset_info.json, features.json and *.tfrecord-* shards)"
        )
    info, features = _json(inside(data, "dataset_info.json")), _json(inside(data, "features.json"))
    root = _parsed_features(data, features)
    if root.kind != "dict" or "steps" not in root.children or root.children["steps"].kind != "sequence":
        raise UnsupportedInputError(
            data / "features.json", "not an RLDS dataset: no 'steps' sequence feature"
        )
    steps_feature = root.children["steps"].item
    assert steps_feature is not None
    others = {k: v for k, v in root.children.items() if k != "steps"}
    example = _example_class()
    name = str(info.get("name") or data.name)
    first_of_split = 0  # the dataset's episodes before this split (by dataset_info.json's counts)
    for split in info.get("splits") or []:
        split_name = str(split.get("name"))
        lengths = [int(x) for x in split.get("shardLengths") or []]
        before = first_of_split
        first_of_split += sum(lengths)
        if splits is not None and split_name not in splits:
            continue
        shards = _shards(data, name, split_name)
        if lengths and len(lengths) != len(shards):
            raise CorruptFileError(
                data / "dataset_info.json",
                f"split {split_name!r} has {len(lengths)} shards; "
                f"the directory holds {len(shards)} of it: shards are missing or extra",
            )
        read = 0  # episodes read in this split so far
        for s, shard in enumerate(shards):
            # numbered by the counts dataset_info.json declares, so that a damaged shard
            # (announced) does not renumber the episodes after it; without counts, by what is read
            index = sum(lengths[:s]) if lengths else read
            log = ReadCounts()
            count = 0
            with open(inside(data, shard.name, what="the shard"), "rb") as fh:
                for chunk in read_records(fh, shard, log=log):
                    for off, length in zip(chunk.offsets.tolist(), chunk.lengths.tolist(), strict=True):
                        payload = chunk.data[off + HEADER_BYTES : off + HEADER_BYTES + length]
                        ep = _episode(
                            example,
                            payload,
                            steps_feature,
                            others,
                            shard,
                            split_name,
                            index + count,
                            encoded=images == "encoded",
                        )
                        ep.number = before + index + count
                        yield ep
                        count += 1
                        read += 1
            if lengths and count != lengths[s] and not log.truncated:
                raise CorruptFileError(
                    shard,
                    f"holds {count} episodes; dataset_info.json says {lengths[s]}: the "
                    "dataset is damaged or incomplete",
                )
        if not lengths:  # (no counts: the next split's ids follow what was read)
            first_of_split += read


def _episode(
    example: Any,
    payload: bytes,
    steps_feature: Feature,
    others: dict[str, Feature],
    shard: Path,
    split: str,
    index: int,
    *,
    encoded: bool = False,
) -> Episode:
    where = f"episode {index} of its split"
    try:
        message = example.FromString(payload)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, and what upb raises on garbage
        raise CorruptFileError(
            shard, f"{where} is not a tf.train.Example ({type(exc).__name__}: {exc})"
        ) from exc
    values = {k: _values(v) for k, v in message.features.feature.items()}
    first = values.get("steps/is_first")
    if first is None:
        raise CorruptFileError(shard, f"{where} has no steps/is_first: not an RLDS episode")
    rows = len(first)
    steps = _decode(steps_feature, "steps", values, rows, shard, where, encoded)
    fields = {k: _decode(f, k, values, None, shard, where, encoded) for k, f in others.items()}
    return Episode(steps, fields, rows, split, shard.name, index)


def _shards(data: Path, name: str, split: str) -> list[Path]:
    found = []
    for p in data.iterdir():
        m = _SHARD.search(p.name)
        if m and p.name.startswith(f"{name}-{split}."):
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def _parsed_features(data: Path, spec: Any) -> Feature:
    """:func:`parse_features` of ``data/features.json``, its errors naming that file."""
    try:
        return parse_features(spec)
    except InvalidInputError as exc:
        if exc.path is not None:
            raise
        raise type(exc)(data / "features.json", str(exc)) from None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"not readable JSON ({exc})") from exc


# --------------------------------------------------------------------------- into a store


def _tensors(value: Any, path: str, extra: dict[str, Any]) -> Any:
    """The numeric tensors of a (nested) step field; its other leaves (text) go to ``extra`` by path."""
    if isinstance(value, dict):
        kept = {k: t for k, v in value.items() if (t := _tensors(v, f"{path}/{k}", extra)) is not None}
        return kept or None
    if (isinstance(value, np.ndarray) and value.dtype.kind in "biuf") or isinstance(value, pa.Array):
        return value  # (a pa.Array: images kept encoded, one PNG/JPEG per step)
    extra[path] = value
    return None


def _split_step(steps: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """(observation tensors, action tensors, the rest as per-step metadata columns) of decoded steps."""
    extra: dict[str, Any] = {}
    obs = _tensors(steps.get("observation"), "observation", extra) if "observation" in steps else None
    action = _tensors(steps.get("action"), "action", extra) if "action" in steps else None
    for k, v in steps.items():
        if k in ("reward", "discount") and isinstance(v, np.ndarray) and v.ndim > 1:
            extra[k] = v  # (vector rewards are not a column of format 1: kept per step, in their dtype)
        elif k not in RLDS_STEP_FIELDS:
            extra[k] = v
    return obs, action, extra


def _rows_metadata(extra: dict[str, Any], rows: int, last_values: dict[str, Any] | None) -> list[Any] | None:
    if not extra and not last_values:
        return None
    out: list[Any] = []
    for i in range(rows):
        step: dict[str, Any] = {}
        for path, values in extra.items():
            value = values[i]
            *parents, leaf = path.split("/")
            node = step
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        out.append(step or None)
    if last_values:
        out[-1] = {**(out[-1] or {}), "rlds_last": last_values}
    return out


def _type_of(values: Any) -> pa.DataType:
    if isinstance(values, dict):
        return pa.struct([(k, _type_of(v)) for k, v in values.items()])
    if isinstance(values, pa.Array):
        return values.type
    return tensor_type(values.dtype, values.shape[1:], layout="auto")


def _nonzero(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_nonzero(v) for v in value.values())
    return bool(np.any(np.asarray(value) != 0))


def _last_row(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _last_row(v) for k, v in value.items()}
    return value[-1].as_py() if isinstance(value, pa.Array) else value[-1]


def _nulled_last(arr: pa.Array, last: bool) -> pa.Array:
    if not last:
        return arr
    mask = np.zeros(len(arr), bool)
    mask[-1] = True
    if pa.types.is_struct(arr.type):
        return pa.StructArray.from_arrays(
            [arr.field(i) for i in range(arr.type.num_fields)], fields=list(arr.type), mask=pa.array(mask)
        )
    return with_null_rows(arr, mask)


def import_rlds(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    splits: list[str] | None = None,
    images: str = "decode",
    progress: bool | None = None,
) -> EpisodesReport:
    """Import an RLDS dataset in a TFDS directory into ``store`` as one run (see the module docs).

    Args:
        directory: the dataset's version folder (``dataset_info.json`` beside the shards), or the
            folder of its versions (the newest is read).
        store: the store (created if missing).
        run_id: the new run's id (None: generated).
        name: the run's name (default: the dataset's).
        splits: the splits to read (default: every one).
        images: ``"decode"`` (uint8 tensors, ``tfds``'s pixels) or ``"encoded"`` (each image's
            PNG/JPEG bytes as the shard holds them, a ``binary`` field, decoded on demand with
            :func:`decode_image`; an RLDS export writes the same bytes back).
        progress: a progress bar (None: when stderr is a terminal).

    Raises:
        UnsupportedInputError: not a TFDS RLDS dataset, or a feature rlarrow does not decode.
        CorruptFileError: damaged shards, or records that do not match ``features.json``.
        MissingDependencyError: protobuf (``pip install 'rlarrow[rlds]'``) or, for images,
            Pillow is missing.

    Example:
        >>> import_rlds("tensorflow_datasets/rlds_catch/1.0.0", "runs.rlarrow")  # doctest: +SKIP
    """
    from rlarrow.core.errors import ArgumentError
    from rlarrow.core.progress import bar

    if images not in IMAGE_MODES:
        raise ArgumentError(f"images={images!r}: one of {', '.join(IMAGE_MODES)}")
    splits = _arguments.names(splits, "splits", what="split name")
    data = dataset_dir(directory)
    if data is None:
        raise UnsupportedInputError(
            directory, "not a TFDS dataset (dataset_info.json, features.json and *.tfrecord-* shards)"
        )
    info, features = _json(inside(data, "dataset_info.json")), _json(inside(data, "features.json"))
    if str(info.get("fileFormat", "tfrecord")) != "tfrecord":
        raise UnsupportedInputError(
            data,
            f"a TFDS dataset of {info.get('fileFormat')} shards; rlarrow reads "
            "tfrecord shards (tfds can convert: `tfds convert_format`)",
        )
    total = sum(
        int(x)
        for s in info.get("splits") or []
        if splits is None or s.get("name") in splits
        for x in s.get("shardLengths") or []
    )
    episodes = read_episodes(data, splits=splits, images=images)
    first = next(episodes, None)
    with opened(store, create=True) as st, st.transaction():  # all of the dataset or nothing of it
        types: dict[str, Any] = {}
        if first is not None:
            obs, action, _ = _split_step(first.steps)
            declared = {
                k: _type_of(v) for k, v in (("observation", obs), ("action", action)) if v is not None
            }
            types = declare_steps(st, declared)
        run = st.add_run(
            source="rlds",
            run_id=run_id,
            name=name or info.get("name") or data.name,
            source_path=os.fspath(directory),
            source_version=f"tfds dataset {info.get('version')}",
            alignment="rlds",
            num_envs=1,
            metadata={"dataset_info": info, "features": features, "images": images, "labels": _labels(data)},
            env_specs=_specs(parse_features(features)),
        )
        report = EpisodesReport(run_id=run)
        rows = EpisodeRows()
        with st.writer("steps") as writer, bar(total or None, "import rlds", "episode", progress) as pbar:
            while first is not None:
                _write_episode(st, writer, run, first.number, first, types, rows)
                report.episodes += 1
                report.steps += first.num_steps
                pbar.update(1)
                first = next(episodes, None)
        rows.append_to(st, run)
        return report


def _labels(data: Path) -> dict[str, list[str]]:
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


def _write_episode(
    st: Any,
    writer: Any,
    run: str,
    episode_id: int,
    ep: Episode,
    types: dict[str, Any],
    rows: EpisodeRows,
) -> None:
    n = ep.num_steps
    obs, action, extra = _split_step(ep.steps)
    is_last = np.asarray(ep.steps.get("is_last", np.zeros(n, bool)), bool)
    is_terminal = np.asarray(ep.steps.get("is_terminal", np.zeros(n, bool)), bool)
    ended = bool(n and is_last[-1])
    last_values: dict[str, Any] = {}
    if ended:  # RLDS: undefined on the last step; kept in its metadata where not all zero
        for key, value in (
            ("action", action),
            ("reward", ep.steps.get("reward")),
            ("discount", ep.steps.get("discount")),
        ):
            if value is not None and _nonzero(_last_row(value)):
                last_values[key] = _last_row(value)
    reward = ep.steps.get("reward")
    discount = ep.steps.get("discount")
    columns: dict[str, Any] = {
        "run_id": run,
        "episode_id": episode_id,
        "step": np.arange(n),
        "env_index": 0,
        "is_first": np.asarray(ep.steps.get("is_first", np.arange(n) == 0), bool),
        "is_last": is_last,
        "is_terminal": is_terminal,
        "metadata": _rows_metadata(extra, n, last_values or None),
    }
    for key, value in (("observation", obs), ("action", action)):
        if value is not None:  # in the store's types (a struct's fields in its order)
            arr = to_arrow(value, types.get(key) or _type_of(value))
            columns[key] = _nulled_last(arr, ended) if key == "action" else arr
    for key, value in (("reward", reward), ("discount", discount)):
        if value is not None and np.ndim(value) == 1:
            floats = np.asarray(value, np.float64)
            mask = np.zeros(n, bool)
            mask[-1:] = ended
            columns[key] = pa.array(floats, mask=mask)
    table = _schema.build("steps", columns, num_rows=n, established=st.schema("steps"))
    writer.write(table)
    rewards = np.asarray(reward, np.float64) if reward is not None and np.ndim(reward) == 1 else None
    rows.add(
        episode_id,
        num_steps=n,
        total=float(np.sum(rewards[:-1] if ended else rewards)) if rewards is not None else None,
        terminated=bool(n and is_terminal[-1]),
        truncated=bool(ended and not is_terminal[-1]),
        partial_end=not ended,
        metadata={**ep.fields, "rlds": {"split": ep.split, "shard": ep.shard, "index": ep.index}},
    )


def _specs(root: Feature) -> dict[str, Any]:
    """``runs.env_specs`` from the steps' features: Array specs of observation, action, reward, discount."""
    steps = root.children.get("steps")
    item = steps.item if steps is not None else None
    if item is None:
        return {}

    def spec(f: Feature, name: str) -> Any:
        if f.kind == "dict":
            return {k: spec(c, k) for k, c in f.children.items() if c.kind in ("tensor", "image", "dict")}
        return {
            "kind": "Array",
            "name": name,
            "shape": list(f.shape),
            "dtype": np.dtype(f.dtype or np.uint8).name,
        }

    out = {}
    for key in ("observation", "action", "reward", "discount"):
        f = item.children.get(key)
        if f is not None and f.kind in ("tensor", "image", "dict"):
            out[f"{key}_spec"] = spec(f, key)
    return out


# --------------------------------------------------------------------------- export


def export_rlds(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    episodes_per_shard: int = 1000,
) -> Path:
    """Write a run as an RLDS dataset in a TFDS directory that ``tfds.builder_from_directory`` reads.

    ``directory`` gets ``dataset_info.json``, ``features.json`` and the TFRecord shards
    ``<name>-<split>.tfrecord-<i>-of-<n>``, one ``tf.train.Example`` per episode, as ``tfds``
    writes them (no TensorFlow needed). A run imported from RLDS keeps its features, splits,
    episode and step fields, and the ``is_last`` values it kept aside (``rlds_last``); its JPEG
    images are written as PNG, losslessly (JPEG again would change pixels). Other runs get a
    ``train`` split and features made from their steps: tensors, float64 reward and discount
    (float64 values stored as raw bytes, exactly, where TFDS's float lists would round them to
    float32), the three flags.

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``.
        MissingDependencyError: protobuf is missing (``pip install 'rlarrow[rlds]'``).

    Example:
        >>> export_rlds("runs.rlarrow", "rlds/my_dataset/1.0.0")  # doctest: +SKIP
    """
    from rlarrow.core import metadata as _metadata
    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.targets import check_target, fresh_directory
    from rlarrow.io.codecs.tfrecord import frame_records

    check_target(directory, overwrite=overwrite, what="an RLDS export")
    example = _example_class()
    _arguments.integer(episodes_per_shard, "episodes_per_shard", minimum=1)
    with DmEnvRows(store, run_id=run_id) as reader:
        run = reader.run
        meta = _metadata.decode(run.get("metadata"), run.get("metadata_types"))
        meta = meta if isinstance(meta, dict) else {}
        mine = run.get("source") == "rlds" and isinstance(meta.get("features"), dict)
        ep_meta = reader.episode_metadata()
        first = reader.episode_table(0) if reader.num_episodes else None
        if not mine:
            features = _features_of(first)
        elif meta.get("images") == "encoded":  # the shards' own bytes, written back as they are: JPEG stays
            features = meta["features"]
        else:
            features = _png_images(meta["features"])
        root = parse_features(features)
        info = dict(meta.get("dataset_info") or {}) if mine else {}
        name = (
            re.sub(r"[^a-z0-9_]+", "_", str(info.get("name") or run.get("name") or "rlarrow").lower())
            or "rlds"
        )
        ids = [int(i) for i in reader.episode_ids]
        entries: list[tuple[int, Any, int | None]] = [(ids[k], ep_meta[k], k) for k in range(len(ids))]
        have = set(ids)
        for row in reader.store.read("episodes", filter=pc.field("run_id") == reader.run_id).to_pylist():
            if int(row["episode_id"]) not in have and not row.get("num_steps"):  # RLDS episodes of no steps
                entries.append(
                    (
                        int(row["episode_id"]),
                        _metadata.decode(row.get("metadata"), row.get("metadata_types")),
                        None,
                    )
                )
        entries.sort(key=lambda e: e[0])
        empty = first.slice(0, 0) if first is not None else None
        by_split: dict[str, list[tuple[int, Any, int | None]]] = {}
        for entry in entries:
            em = entry[1]
            split = (em.get("rlds") or {}).get("split") if mine and isinstance(em, dict) else None
            by_split.setdefault(str(split or "train"), []).append(entry)
        for split in by_split:  # (names of the shards: from the store, which a hostile dataset filled)
            file_name_part(split, what="the split", fix=_RENAME)
        labels: dict[str, Any] = meta["labels"] if mine and isinstance(meta.get("labels"), dict) else {}
        for key in labels:
            file_name_part(str(key), what="the ClassLabel feature", fix=_RENAME)
        with fresh_directory(directory, overwrite=overwrite, what="an RLDS export") as tmp:
            splits = []
            for split, ks in by_split.items():
                shards = [ks[i : i + episodes_per_shard] for i in range(0, len(ks), episodes_per_shard)] or [
                    []
                ]
                sizes = []
                for s, part in enumerate(shards):
                    size = 0
                    with open(tmp / f"{name}-{split}.tfrecord-{s:05d}-of-{len(shards):05d}", "wb") as fh:
                        for _, em, k in part:  # one episode in memory at a time
                            table = reader.episode_table(k) if k is not None else empty
                            framed = frame_records([_serialize(example, root, table, em, mine)])
                            fh.write(framed)
                            size += len(framed)
                    sizes.append(size)
                splits.append(
                    {
                        "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
                        "name": split,
                        "numBytes": str(sum(sizes)),
                        "shardLengths": [str(len(p)) for p in shards],
                    }
                )
            kept = {k: v for k, v in info.items() if k not in ("splits", "fileFormat", "name")}
            out_info = {
                **kept,
                "fileFormat": "tfrecord",
                "name": name,
                "splits": splits,
                "version": str(info.get("version") or "1.0.0"),
            }
            (tmp / "dataset_info.json").write_text(json.dumps(out_info, indent=1))
            (tmp / "features.json").write_text(json.dumps(features, indent=1))
            for key, names in labels.items():  # ClassLabel names
                (tmp / f"{key}.labels.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    return Path(directory)


_RENAME = ("an RLDS export names its files after it; rlarrow has no command to rename it in a store: "
           "rename it in the dataset and import that again")

_TENSOR_CLASS = "tensorflow_datasets.core.features.tensor_feature.Tensor"


def _tensor_json(dtype: np.dtype[Any], shape: tuple[int, ...]) -> dict[str, Any]:
    encoding = "bytes" if dtype == np.float64 else "none"  # float_list would round them to float32
    return {
        "pythonClassName": _TENSOR_CLASS,
        "tensor": {
            "shape": {"dimensions": [str(d) for d in shape]} if shape else {},
            "dtype": dtype.name,
            "encoding": encoding,
        },
    }


def _feature_json(values: Any) -> dict[str, Any]:
    """A (nested) dict of tensors, or a tensor, as TFDS features (a FeaturesDict of Tensors)."""
    if isinstance(values, dict):
        return {
            "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "featuresDict": {"features": {k: _feature_json(v) for k, v in values.items()}},
        }
    return _tensor_json(values.dtype, values.shape[1:])


def _features_of(table: pa.Table | None) -> dict[str, Any]:
    """features.json for a run that was not imported from RLDS: from its first episode's columns."""
    from rlarrow.core.tensors import to_numpy

    steps: dict[str, Any] = {}
    if table is not None:
        for key in ("observation", "action"):
            if key in table.column_names:
                steps[key] = _feature_json(to_numpy(table.column(key).combine_chunks(), fill_value=0))
    for key in ("reward", "discount"):
        steps[key] = _tensor_json(np.dtype(np.float64), ())
    for key in ("is_first", "is_last", "is_terminal"):
        steps[key] = _tensor_json(np.dtype(bool), ())
    return {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                "steps": {
                    "pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                    "sequence": {
                        "feature": {
                            "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                            "featuresDict": {"features": steps},
                        },
                        "length": "-1",
                    },
                }
            }
        },
    }


def _png_images(spec: Any) -> Any:
    """features.json with every JPEG image feature made PNG (the pixels, written losslessly)."""
    if isinstance(spec, dict):
        out = {k: _png_images(v) for k, v in spec.items()}
        if "image" in out and isinstance(out["image"], dict) and out["image"].get("encodingFormat") == "jpeg":
            out["image"] = {**out["image"], "encodingFormat": "png"}
        return out
    if isinstance(spec, list):
        return [_png_images(v) for v in spec]
    return spec


def _serialize(example: Any, root: Feature, table: pa.Table, ep_meta: Any, mine: bool) -> bytes:
    """One episode's steps (and fields) as a serialized ``tf.train.Example``."""
    from rlarrow.core import metadata as _metadata
    from rlarrow.core.tensors import to_numpy

    n = table.num_rows
    steps_feature = root.children["steps"].item
    assert steps_feature is not None
    metas = _metadata.decode_column(
        table.column("metadata").to_pylist(), table.column("metadata_types").to_pylist()
    )
    last = (metas[-1] or {}).get("rlds_last", {}) if n and isinstance(metas[-1], dict) else {}
    values: dict[str, Any] = {}
    for key, feature in steps_feature.children.items():
        if key in ("observation", "action"):
            column = (
                to_numpy(table.column(key).combine_chunks(), fill_value=0)
                if key in table.column_names
                else None
            )
            if key == "action" and column is not None and n and "action" in last:
                column = _with_last(column, last["action"])
            values[key] = _merge(
                column, [m.get(key) if isinstance(m, dict) else None for m in metas], feature, n
            )
        elif key in ("reward", "discount"):
            stored = table.column(key).combine_chunks()
            floats = np.nan_to_num(np.asarray(stored.to_numpy(zero_copy_only=False), np.float64), nan=0.0)
            if key == "discount" and not mine and stored.null_count == n:
                # a run that recorded no discount (gym, Minari, ...): dm_env's, 1 but into a terminal state
                floats = np.ones(n)
                if n >= 2 and bool(table.column("is_terminal")[n - 1].as_py()):
                    floats[n - 2] = 0.0
            if n and key in last:
                floats[-1] = last[key]
            values[key] = floats
        elif key in ("is_first", "is_last", "is_terminal"):
            values[key] = np.asarray(table.column(key).to_numpy(zero_copy_only=False), bool)
        else:
            values[key] = [m.get(key) if isinstance(m, dict) else None for m in metas]
    message = example()
    _fill(message, steps_feature, "steps", values, n)
    fields = {k: v for k, v in (ep_meta or {}).items() if k != "rlds"} if mine else {}
    for key, feature in root.children.items():
        if key != "steps":
            _fill(message, feature, key, fields.get(key), None)
    return bytes(message.SerializeToString())


def _with_last(column: Any, value: Any) -> Any:
    if isinstance(column, dict):
        return {k: _with_last(v, value[k]) for k, v in column.items()}
    column = np.array(column)
    column[-1] = value
    return column


def _merge(column: Any, from_meta: list[Any], feature: Feature, n: int) -> Any:
    """A step field's values: the tensor column, with the fields kept in step metadata (text) put back."""
    if feature.kind != "dict":
        return column if column is not None else from_meta
    out = dict(column) if isinstance(column, dict) else {}
    for key in feature.children:
        if key not in out:
            out[key] = [m.get(key) if isinstance(m, dict) else None for m in from_meta]
    return out


def _fill(message: Any, feature: Feature, key: str, value: Any, rows: int | None) -> None:
    """Put ``value`` (for ``rows`` steps, or one value) into the Example under ``key``, as TFDS encodes it."""
    if feature.kind == "dict":
        for k, child in feature.children.items():
            _fill(
                message, child, f"{key}/{k}", (value or {}).get(k) if isinstance(value, dict) else None, rows
            )
        return
    entry = message.features.feature[key]
    n = 1 if rows is None else rows
    items = value if rows is not None else [value]
    if feature.kind == "text":
        entry.bytes_list.value.extend([(v if isinstance(v, str) else "").encode("utf-8") for v in items])
        return
    if feature.kind == "image":
        from PIL import Image

        if (isinstance(items, np.ndarray) and items.dtype == object) or (
            isinstance(items, list) and all(isinstance(v, bytes) for v in items)
        ):  # kept encoded: the bytes as they were read
            entry.bytes_list.value.extend([bytes(v) for v in items])
            return
        for image in np.asarray(items).reshape(n, *np.shape(items)[1:]):
            buffer = io.BytesIO()
            Image.fromarray(image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image).save(
                buffer, "PNG"
            )
            entry.bytes_list.value.append(buffer.getvalue())
        return
    dtype = feature.dtype if feature.dtype is not None else np.dtype(np.float32)
    array = np.asarray(
        value if value is not None else np.zeros((n, *feature.shape) if rows else feature.shape), dtype
    )
    if feature.encoding in ("bytes", "zlib"):
        rows_of = array.reshape(n, -1) if rows is not None else array.reshape(1, -1)
        for row in rows_of:
            raw = row.astype(dtype.newbyteorder("<")).tobytes()
            entry.bytes_list.value.append(zlib.compress(raw) if feature.encoding == "zlib" else raw)
    elif dtype.kind == "f":
        entry.float_list.value.extend(array.reshape(-1).astype(np.float32).tolist())
    elif dtype.kind in "biu":
        entry.int64_list.value.extend(array.reshape(-1).astype(np.int64).tolist())
    else:
        entry.bytes_list.value.extend([bytes(v) for v in array.reshape(-1)])
