"""A LeRobot episode's frames as RLDS steps, in Arrow.

:class:`Frames` reads an episode's frames (v3.0: its rows of a data file many episodes
share, the file read once for all of them; v2.x: its own file), checked against its
metadata and put in frame order. :func:`episode_columns` takes each feature to its place:

- numeric features in their dtype and shape, Arrow to Arrow: a column already of the step's
  Arrow type is kept as it is, other layouts of the same values viewed or cast (lists as
  fixed-size lists, binary-layout tensors a view of the values), not taken through NumPy;
  frames LeRobot wrote in order are a slice of their data file, not a copy; ``image``
  features (PNG bytes in the frame's ``{bytes, path}`` struct) decoded with Pillow;
  ``video`` features decoded (or copied) by :mod:`rlarrow.io.lerobot.videos`;
- ``observation.*`` features are one struct observation, nested at the dots
  (``observation.images.top`` is ``observation["images"]["top"]``), ``action`` the action
  (``action.*`` features a struct action, nested the same way); ``next.reward`` the reward
  and ``next.done`` the last step's ``is_terminal``; ``timestamp``, ``frame_index``,
  ``episode_index``, ``index``, ``task_index`` and any other numeric feature the step's
  ``infos`` (a struct, one field per feature, in the dtype ``info.json`` declares); text
  features the step's ``metadata``.

:func:`episode_steps` makes the N frames N + 1 steps in RLDS alignment: LeRobot keeps no
observation after the last action, so the last step's observation is null (never invented).

Example:
    >>> from rlarrow.io.lerobot.frame_steps import Frames, episode_columns, episode_steps  # doctest: +SKIP
    >>> columns = episode_columns(meta, Frames(root, info).episode(ep), ep)  # doctest: +SKIP
    >>> episode_steps(columns, "run", 0).num_rows  # doctest: +SKIP
    97

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core.alignment import last_null
from rlarrow.core.confined import MAX_IMAGE_PIXELS, png_size
from rlarrow.core.errors import CorruptFileError, MissingDependencyError
from rlarrow.core.tensors import TensorType, tensor_type, to_arrow
from rlarrow.io.lerobot.dataset_meta import formatted, nest, read_parquet
from rlarrow.io.lerobot.videos import episode_video

__all__: list[str] = []


class Frames:
    """Frames of episodes, from data files read one at a time (the last one kept)."""

    def _episode_v2(self, ep: dict[str, Any]) -> pa.Table:
        index = int(ep["episode_index"])
        template = str(
            self.info.get("data_path") or "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        )
        path = formatted(self.root, template, episode_chunk=index // self.chunks, episode_index=index)
        return _in_order(read_parquet(path, "an episode's data file"), ep, path, int(ep["length"]))

    def __init__(self, root: Path, info: dict[str, Any]) -> None:
        self.info = info
        self.chunks = int(info.get("chunks_size") or 1000)
        self.root, self.template = (
            root,
            str(info.get("data_path") or "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        )
        self.key: tuple[int, int] | None = None
        self.path = root
        self.table: pa.Table | None = None
        self.index: np.ndarray = np.empty(0, np.int64)
        self.ascending = True

    def episode(self, ep: dict[str, Any]) -> pa.Table:
        """The episode's frames, in frame order, checked to be as many as its metadata says.

        Frames LeRobot wrote in order (an episode's rows one run of the file, by ``index`` and
        ``frame_index``) are a slice of the file's table, not a copy; others are taken.
        """
        if ep.get("_v2"):  # v2: a file per episode
            return self._episode_v2(ep)
        key = (int(ep["data/chunk_index"]), int(ep["data/file_index"]))
        if key != self.key:
            self.path = formatted(self.root, self.template, chunk_index=key[0], file_index=key[1])
            self.table, self.key = read_parquet(self.path, "a data file"), key
            self.index = np.asarray(self.table.column("index").to_numpy())
            self.ascending = bool(np.all(self.index[1:] >= self.index[:-1]))
        assert self.table is not None
        lo, hi = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
        if hi - lo != int(ep["length"]):
            raise CorruptFileError(
                self.path,
                f"episode {ep['episode_index']}'s index range {lo}..{hi} is not its "
                f"length {ep['length']}: the dataset is damaged",
            )
        if self.ascending:  # (an episode's rows are one run of the file: a slice)
            first, end = (int(i) for i in np.searchsorted(self.index, [lo, hi]))
            part = self.table.slice(first, end - first)
        else:
            index = self.index
            part = self.table.take(pa.array(np.flatnonzero((index >= lo) & (index < hi))))
        return _in_order(part, ep, self.path, int(ep["length"]))


def _in_order(part: pa.Table, ep: dict[str, Any], path: Path, length: int) -> pa.Table:
    """An episode's frames, checked to be as many as its metadata says, in frame order."""
    if part.num_rows != length:
        raise CorruptFileError(
            path,
            f"episode {ep['episode_index']} has {part.num_rows} frames here; its "
            f"metadata says {length}: the dataset is damaged",
        )
    frame = np.asarray(part.column("frame_index").to_numpy())
    if np.all(frame[1:] >= frame[:-1]):  # (in order already, as LeRobot writes them: no copy)
        return part
    return part.take(pa.array(np.argsort(frame, kind="stable")))


def episode_columns(
    root: Path,
    table: pa.Table,
    features: dict[str, Any],
    ep: dict[str, Any],
    info: dict[str, Any],
    *,
    keep: bool = False,
) -> dict[str, Any]:
    """An episode's frames (``table``) as the columns of its steps: observation, action, reward, ...

    Returns ``{"observation", "action", "reward", "done", "infos", "extra", "n", "videos"}``:
    the observation and action (NumPy arrays, Arrow arrays where the frames' columns are kept
    as they are, or dicts of them), the rewards (or None), whether it ended terminal, the other
    numeric features (Arrow arrays) and the text ones (NumPy) by name, the number of frames,
    and (``keep``) each camera's copied segment.
    """
    n = table.num_rows
    out: dict[str, Any] = {"observation": None, "action": None, "reward": None, "done": False, "infos": {},
                           "extra": {}, "n": n, "videos": {}}
    obs: dict[str, Any] = {}
    acts: dict[str, Any] = {}
    for key, spec in features.items():
        dtype = spec.get("dtype")
        shape = tuple(spec.get("shape") or ())
        if dtype == "video":
            if keep:
                out["videos"][key] = episode_video(root, info, key, ep, n, shape, keep=True)
                continue
            values = episode_video(root, info, key, ep, n, shape)
        elif key not in table.column_names:
            raise CorruptFileError(
                root, f"episode {ep['episode_index']}: the frames have no {key!r}, which info.json declares"
            )
        elif dtype == "image":
            values = _images(table.column(key), root, key, shape)
        elif dtype == "string":
            out["extra"][key] = np.asarray(table.column(key).to_pylist(), dtype=object)
            continue
        elif key in ("next.reward", "next.done"):
            values = _numbers(table.column(key), np.dtype(dtype), shape, root, key)
        else:  # the observation's, the action's and the infos' numbers: the frames' own Arrow column
            values = _as_arrow(table.column(key), np.dtype(dtype), shape)
            if values is None:
                values = _numbers(table.column(key), np.dtype(dtype), shape, root, key)
        _place(out, obs, acts, key, values)
    if obs:
        out["observation"] = obs.get("") if "" in obs else nest(obs)
    if out["action"] is None and acts:
        out["action"] = nest(acts)
    return out


def _place(out: dict[str, Any], obs: dict[str, Any], acts: dict[str, Any], key: str, values: Any) -> None:
    """Feature ``key``'s values to their place: the observation's, the action's, reward, done, infos."""
    n = out["n"]
    if key.startswith("observation."):
        obs[key[len("observation."):]] = values
    elif key == "observation":
        obs[""] = values
    elif key == "action":
        out["action"] = values
    elif key.startswith("action."):  # a struct action's fields (as export_lerobot writes one)
        acts[key[len("action."):]] = values
    elif key == "next.reward":
        out["reward"] = values.reshape(n).astype(np.float64)
    elif key == "next.done":
        out["done"] = bool(values.reshape(n)[-1]) if n else False
    else:
        out["infos"][key] = values


def _as_arrow(column: pa.ChunkedArray, dtype: np.dtype[Any], shape: tuple[int, ...]) -> pa.Array | None:
    """The frames' column in the step's Arrow type by Arrow alone, where every value is there (else None).

    LeRobot writes a vector feature as a fixed-size list of its dtype and a scalar as a
    scalar column: those are the steps' types, and stay as they are. Other layouts of the same
    values are viewed or cast, not taken through NumPy: lists of one length as fixed-size
    lists, another dtype than ``info.json`` declares cast to it (as NumPy's ``astype``),
    tensors the binary layout holds (:data:`rlarrow.core.tensors.BINARY_MIN_ELEMENTS`
    elements or more, two or more dimensions) a view of the values' buffer.
    """
    if not len(column) or column.null_count:
        return None
    arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()  # (one: no copy)
    if shape == (1,) and not (pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type)):
        shape = ()  # (a (1,) feature LeRobot writes as a scalar column)
    target = tensor_type(dtype, shape, layout="auto")
    if arr.type == target:
        if pa.types.is_fixed_size_list(arr.type) and arr.values.null_count:
            return None
        return arr
    flat = _flat_values(arr, shape)
    if flat is None:
        return None
    if flat.type != pa.from_numpy_dtype(dtype):
        try:
            flat = flat.cast(pa.from_numpy_dtype(dtype), safe=False)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return None
    if isinstance(target, TensorType):
        if dtype == np.bool_ or np.dtype(dtype).byteorder == ">":
            return None  # (Arrow packs bools in bits: NumPy makes the bytes)
        width = np.dtype(dtype).itemsize
        data = flat.buffers()[1].slice(flat.offset * width, len(flat) * width)
        storage = pa.FixedSizeBinaryArray.from_buffers(target.storage_type, len(arr), [None, data])
        return pa.ExtensionArray.from_storage(target, storage)
    for size in reversed(shape):
        flat = pa.FixedSizeListArray.from_arrays(flat, int(size))
    return flat if flat.type == target else None


def _flat_values(arr: pa.Array, shape: tuple[int, ...]) -> pa.Array | None:
    """The values of a column of (nested) lists of ``shape``, flat, where every one is there (else None)."""
    dims: list[int] = []
    while pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type) \
            or pa.types.is_large_list(arr.type):
        if arr.null_count:
            return None
        if pa.types.is_fixed_size_list(arr.type):
            dims.append(arr.type.list_size)
        else:
            lengths = pc.list_value_length(arr)
            bounds = pc.min_max(lengths)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low != high:
                return None
            dims.append(int(low or 0))
        arr = arr.flatten()
    if tuple(dims) != tuple(shape) or arr.null_count or not (
            pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)):
        return None
    return arr


def _numbers(
    column: pa.ChunkedArray, dtype: np.dtype[Any], shape: tuple[int, ...], root: Path, key: str
) -> Any:
    arr = column.combine_chunks()
    if shape == (1,) and not (pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type)):
        shape = ()  # (a (1,) feature LeRobot writes as a scalar column: timestamp, frame_index, ...)
    while pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type):
        arr = arr.flatten()
    values = np.asarray(arr.to_numpy(zero_copy_only=False))
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if values.size != len(column) * size:
        raise CorruptFileError(
            root, f"{key} holds {values.size} values for {len(column)} frames of shape {shape}"
        )
    out = values.astype(dtype, copy=False).reshape(len(column), *shape)
    if shape == (1,) and key in ("next.reward", "next.done"):
        return out.reshape(len(column))
    return out


def _check_frame(size: tuple[int, int], shape: tuple[Any, ...], root: Path, key: str, i: int) -> None:
    """A frame's (height, width) from its header against the declared shape and MAX_IMAGE_PIXELS."""
    height, width = size
    if (len(shape) == 3 and size != tuple(shape[:2])) or width * height > MAX_IMAGE_PIXELS:
        raise CorruptFileError(
            root,
            f"{key}: frame {i} is an image of {height}x{width} pixels; info.json declares {shape} "
            f"(and rlarrow decodes at most {MAX_IMAGE_PIXELS} pixels): the dataset is damaged",
        )


def _images(column: pa.ChunkedArray, root: Path, key: str, shape: tuple[Any, ...] = ()) -> np.ndarray:
    """A column of PNG frames decoded, each checked against the declared ``(H, W, C)`` before decoding."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"{root}: {key} holds PNG images; decoding them needs Pillow: pip install pillow", name="PIL"
        ) from exc
    channels = int(shape[-1]) if len(shape) == 3 else 3
    out = []
    for i, cell in enumerate(column.to_pylist()):
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        if not isinstance(data, bytes):
            raise CorruptFileError(root, f"{key}: frame {i} holds no image bytes")
        header = png_size(data)  # (its size checked before Pillow looks at it, then again as Pillow reads it)
        if header is not None:
            _check_frame(header, shape, root, key, i)
        try:
            image = Image.open(io.BytesIO(data))  # (reads the header only)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise CorruptFileError(root, f"{key}: frame {i} is not a readable image ({exc})") from exc
        _check_frame(image.size[::-1], shape, root, key, i)
        try:
            out.append(
                np.asarray(image.convert("L"))[:, :, None]
                if channels == 1
                else np.asarray(image.convert("RGB"))
            )
        except (OSError, ValueError, SyntaxError) as exc:
            raise CorruptFileError(root, f"{key}: frame {i} is not a readable image ({exc})") from exc
    return np.stack(out) if out else np.empty((0, 0, 0, 3), np.uint8)


def _type_of(values: Any) -> pa.DataType:
    if isinstance(values, dict):
        return pa.struct([(k, _type_of(v)) for k, v in values.items()])
    return tensor_type(values.dtype, values.shape[1:], layout="auto")


def episode_steps(columns: dict[str, Any], run: str, episode_id: int) -> pa.Table:
    """N frames as N + 1 RLDS steps: the last has no observation (LeRobot keeps none after its action)."""
    n = columns["n"]
    last = np.zeros(n + 1, bool)
    last[n] = True
    out: dict[str, Any] = {
        "run_id": run,
        "episode_id": episode_id,
        "step": np.arange(n + 1),
        "env_index": 0,
        "is_first": np.arange(n + 1) == 0,
        "is_last": last,
        "is_terminal": last & bool(columns["done"]),
    }
    for key in ("observation", "action"):
        if columns[key] is not None:
            out[key] = last_null(_arrow(columns[key]), n)
    if columns["reward"] is not None:
        out["reward"] = last_null(pa.array(columns["reward"], pa.float64()), n)
    if columns["infos"]:  # (LeRobot's per-frame numbers, typed: none after the last frame)
        out["infos"] = last_null(_arrow(columns["infos"]), n)
    extra = dict(columns["extra"])
    if extra:
        texts, tags = _metadata.encode_rows({k: v for k, v in extra.items()})
        out["metadata"] = pa.concat_arrays([texts, pa.nulls(1, pa.string())])
        out["metadata_types"] = pa.concat_arrays([tags, pa.nulls(1, pa.string())])
    return _schema.build("steps", out, num_rows=n + 1)


def _arrow(values: Any) -> pa.Array:
    """Values in Arrow: Arrow values as they are, NumPy ones (decoded images) converted, dicts a struct."""
    if isinstance(values, dict):
        children = {k: _arrow(v) for k, v in values.items()}
        return pa.StructArray.from_arrays(list(children.values()), names=list(children))
    if isinstance(values, pa.Array):
        return values
    if not len(values):  # (no frames: one row of zeros, for last_null to make null)
        values = np.zeros((1, *values.shape[1:]), values.dtype)
    return to_arrow(values, _type_of(values))
