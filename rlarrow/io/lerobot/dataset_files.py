"""The files of a LeRobot dataset being written: frames' Parquet, cameras' mp4, ``meta/`` tables.

v3.0 keeps many episodes a file (data files up to 100 MB, videos up to 200 MB, LeRobot's
defaults); v2.1 one file an episode. Videos are LeRobot's own settings (libsvtav1, yuv420p,
a key frame every 2 frames, CRF 30: lossy); PNG images are lossless.

Example:
    >>> import numpy as np
    >>> from rlarrow.io.lerobot.features import numeric_feature
    >>> arrow_column(np.arange(4.0).reshape(2, 2), numeric_feature("x", np.zeros((2, 2)), None), "x").type
    FixedSizeListType(fixed_size_list<item: double>[2])

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import io
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core.errors import InvalidInputError, MissingDependencyError
from rlarrow.io.lerobot.features import Feature

__all__: list[str] = []

CHUNKS = 1000  # files per chunk directory, LeRobot's default
DATA_MB, VIDEO_MB = 100, 200  # v3.0 file sizes, LeRobot's defaults
V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V2_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V2_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
#: LeRobot's video settings (lerobot's encode_video_frames): AV1, 4:2:0, key frame every 2, CRF 30
CODEC, CODEC_NAME, VIDEO_OPTIONS = "libsvtav1", "av1", {"g": "2", "crf": "30"}
MIN_SIDE = 4  # SVT-AV1 refuses frames narrower or lower than 4 pixels


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """A JSON-lines file of ``rows``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_tasks(path: Path, tasks: dict[int, str]) -> None:
    """meta/tasks.parquet as pandas writes LeRobot's: the task text is the (unnamed) index."""
    ordered = sorted(tasks.items())
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    table = pa.table(
        {
            "task_index": pa.array([i for i, _ in ordered], pa.int64()),
            "__index_level_0__": pa.array([t for _, t in ordered], pa.string()),
        }
    ).replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
    pq.write_table(table, path)


def _hf_feature(feature: Feature, codebase: str) -> dict[str, Any]:
    """The ``datasets`` feature of a column, as LeRobot declares it (Parquet's ``huggingface`` key)."""
    if feature.kind == "image":
        return {"_type": "Image"}
    if feature.kind == "string":
        return {"dtype": "string", "_type": "Value"}
    value = {"dtype": feature.dtype.name, "_type": "Value"}
    if not feature.shape or feature.shape == (1,):
        return value
    if len(feature.shape) == 1:  # datasets 4 (lerobot 0.4) names it List, datasets 3 Sequence
        return {
            "feature": value,
            "length": feature.shape[0],
            "_type": "List" if codebase == "v3.0" else "Sequence",
        }
    return {"shape": list(feature.shape), "dtype": feature.dtype.name, "_type": f"Array{len(feature.shape)}D"}


def _png(values: np.ndarray, name: str) -> pa.Array:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"{name}: writing frames as PNG images needs Pillow: pip install pillow", name="PIL"
        ) from exc
    blobs = []
    for frame in values:
        buffer = io.BytesIO()
        Image.fromarray(frame[:, :, 0] if frame.shape[-1] == 1 else frame).save(buffer, format="PNG")
        blobs.append(buffer.getvalue())
    paths = [f"frame-{i:06d}.png" for i in range(len(values))]
    return pa.StructArray.from_arrays(
        [pa.array(blobs, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"]
    )


def arrow_column(values: np.ndarray, feature: Feature, name: str) -> pa.Array:
    """A feature's values as the frames' Parquet column (PNG images, text, numbers, fixed-size lists)."""
    if feature.kind == "image":
        return _png(values, name)
    if feature.kind == "string":
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    if feature.shape == (1,):
        values = values.reshape(len(values))
    arr: pa.Array = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        arr = pa.FixedSizeListArray.from_arrays(arr, size)
    return arr


class DataFiles:
    """The frames' Parquet files: v3.0 many episodes a file (up to 100 MB), v2.1 one an episode."""

    def __init__(self, root: Path, codebase: str, features: dict[str, Feature]) -> None:
        self.root, self.codebase, self.features = root, codebase, features
        columns = [name for name, f in features.items() if f.kind != "video"]
        hf = {"info": {"features": {name: _hf_feature(features[name], codebase) for name in columns}}}
        self.metadata = {"huggingface": json.dumps(hf)}
        self.columns = columns
        self.writer: pq.ParquetWriter | None = None
        self.number = 0
        self.size = 0

    def write(self, values: dict[str, np.ndarray], episode: int) -> dict[str, Any]:
        """Write an episode's frames; returns where they went (its episodes row's fields)."""
        table = pa.table({name: arrow_column(values[name], self.features[name], name)
                          for name in self.columns})
        table = table.replace_schema_metadata(self.metadata)
        if self.codebase == "v2.1":
            path = self.root / V2_DATA.format(episode_chunk=episode // CHUNKS, episode_index=episode)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            return {}
        if self.writer is not None and self.size >= DATA_MB * 2**20:
            self.close()
            self.number += 1
        chunk, file = divmod(self.number, CHUNKS)
        if self.writer is None:
            path = self.root / V3_DATA.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer, self.size = pq.ParquetWriter(path, table.schema), 0
        self.writer.write_table(table)
        self.size += table.nbytes
        return {"data/chunk_index": chunk, "data/file_index": file}

    def close(self) -> None:
        """Finish the open file."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class Videos:
    """One camera's mp4 files: v3.0 many episodes a file (up to 200 MB, one stream), v2.1 one an episode."""

    def __init__(self, root: Path, codebase: str, key: str, fps: int) -> None:
        try:
            import av
        except ImportError as exc:
            raise MissingDependencyError(
                f"{key}: writing frames as video needs PyAV: pip install 'rlarrow[video]' "
                "(or export with images='png')",
                name="av",
            ) from exc
        self.av = av
        # SVT-AV1 prints its configuration to stderr at every encoder start unless told not to
        # (SVT_LOG=1: errors only); a user's own setting wins
        os.environ.setdefault("SVT_LOG", "1")
        self.root, self.codebase, self.key, self.fps = root, codebase, key, fps
        self.container: Any = None
        self.stream: Any = None
        self.number = 0
        self.count = self.bytes = 0  # frames and bytes in the open file

    def _open(self, path: Path, height: int, width: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = self.av.open(os.fspath(path), "w")
        self.stream = self.container.add_stream(CODEC, rate=Fraction(self.fps), options=dict(VIDEO_OPTIONS))
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.count = self.bytes = 0

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self.bytes += packet.size
            self.container.mux(packet)

    def write(self, frames: np.ndarray, episode: int) -> dict[str, Any]:
        """Write an episode's frames; returns where they went (its episodes row's fields)."""
        height, width = frames.shape[1:3]
        if self.codebase == "v2.1":
            self._open(
                self.root
                / V2_VIDEO.format(
                    episode_chunk=episode // CHUNKS, video_key=self.key, episode_index=episode
                ),
                height,
                width,
            )
        elif self.container is None or self.bytes >= VIDEO_MB * 2**20:
            if self.container is not None:
                self.close()
                self.number += 1
            chunk, file = divmod(self.number, CHUNKS)
            self._open(
                self.root / V3_VIDEO.format(video_key=self.key, chunk_index=chunk, file_index=file),
                height,
                width,
            )
        start = self.count
        time_base = Fraction(1, self.fps)
        try:
            for image in frames:
                frame = self.av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts, frame.time_base = self.count, time_base
                self.count += 1
                self._mux(self.stream.encode(frame))
            if self.codebase == "v2.1":
                self.close()
                return {}
        except self.av.FFmpegError as exc:
            raise InvalidInputError(
                None,
                f"{self.key}: FFmpeg's {CODEC} encoder refused the frames ({exc}); export with images='png'",
            ) from exc
        chunk, file = divmod(self.number, CHUNKS)
        prefix = f"videos/{self.key}/"
        return {
            prefix + "chunk_index": chunk,
            prefix + "file_index": file,
            prefix + "from_timestamp": start / self.fps,
            prefix + "to_timestamp": self.count / self.fps,
        }

    def close(self) -> None:
        """Finish the open file."""
        if self.container is not None:
            self._mux(self.stream.encode(None))
            self.container.close()
            self.container = None

