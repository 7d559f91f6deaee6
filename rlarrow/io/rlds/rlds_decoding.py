"""Decoding an RLDS episode's ``tf.train.Example`` values: tensors, text and images, as ``tfds`` does.

Example:
    >>> import io, numpy as np
    >>> from PIL import Image
    >>> buffer = io.BytesIO()
    >>> Image.fromarray(np.full((2, 3, 3), 7, np.uint8)).save(buffer, "PNG")
    >>> int(decode_image(buffer.getvalue())[1, 2, 0])
    7
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.confined import MAX_IMAGE_PIXELS, inflate, png_size
from rlarrow.core.errors import CorruptFileError, MissingDependencyError, UnsupportedInputError
from rlarrow.io.rlds.rlds_dataset import Feature

__all__ = ["decode_image"]



def decode_feature(
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
            k: decode_feature(c, f"{key}/{k}" if key else k, values, rows, path, where, encoded)
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
