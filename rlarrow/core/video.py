"""The video layout: camera frames kept as mp4 streams in the ``videos`` table, decoded on demand.

A camera in the video layout is one mp4 stream per episode, sub-environment and camera: a
``videos`` row (``schemas/videos.v1.json``) holding the file's bytes, which step each frame
belongs to (``steps``), each frame's presentation timestamp (``pts``) and the key frames. The
``steps`` rows of such a run do not hold the camera's field; the readers that decode put it
back, as uint8 ``(H, W, C)`` tensors (binary layout), null on steps without a frame:

- :class:`VideoFrames` finds a store's video rows and decodes the frames of any steps, reading
  only the rows it needs (a few kept, decoded from the key frame before each frame asked);
- :func:`with_frames` adds the decoded fields to a ``steps`` table (``Reader``, exports, ...);
- :func:`remux_segment` copies a segment of an mp4 (a LeRobot episode's) into a stream of its
  own without decoding it; :func:`encode_frames` encodes frames (AV1, as LeRobot does).

PyAV (the ``video`` extra) decodes and encodes; this module imports it when called.

Example:
    >>> import numpy as np
    >>> frames = np.zeros((4, 16, 16, 3), np.uint8); frames[:, :, :, 0] = [[[10]], [[90]], [[170]], [[250]]]
    >>> stream = encode_frames(frames, fps=10)  # doctest: +SKIP
    >>> decode(stream, [2, 0])[:, 0, 0, 0]  # doctest: +SKIP
    array([170,  10], dtype=uint8)
"""

from __future__ import annotations

import io
import os
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.core.errors import CorruptFileError, InvalidInputError, MissingDependencyError

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

__all__ = ["VideoFrames", "VideoRefs", "decode", "with_frames"]

_OURS = (CorruptFileError, InvalidInputError, MissingDependencyError)

#: the ``videos`` columns that locate and describe a stream (all but its bytes)
INDEX_COLUMNS = (
    "run_id",
    "episode_id",
    "env_index",
    "column",
    "steps",
    "pts",
    "time_base",
    "keyframes",
    "codec",
    "height",
    "width",
    "channels",
)


@dataclass
class VideoStream:
    """One mp4 stream and what decoding it needs: frame k is at ``pts[k]`` (``time_base`` units)."""

    data: bytes
    pts: list[int]
    time_base: str
    keyframes: list[int]
    codec: str
    height: int
    width: int
    channels: int

    @property
    def frames(self) -> int:
        """How many frames the stream holds."""
        return len(self.pts)


def _av(what: str) -> Any:
    try:
        import av
    except ImportError as exc:
        raise MissingDependencyError(
            f"{what} needs PyAV, which is not installed: pip install 'rlarrow[video]'", name="av"
        ) from exc
    return av


def _described(av: Any, data: bytes, channels: int, where: Any) -> VideoStream:
    """A stream's frame timestamps and key frames, read from its packets (nothing decoded)."""
    try:
        with av.open(io.BytesIO(data), format="mp4") as container:
            stream = container.streams.video[0]
            packets = [
                (int(p.pts), bool(p.is_keyframe)) for p in container.demux(stream) if p.pts is not None
            ]
            codec, height, width = (
                stream.codec_context.codec.canonical_name,
                stream.codec_context.height,
                stream.codec_context.width,
            )
            time_base = str(stream.time_base)
    except (av.FFmpegError, IndexError) as exc:
        raise CorruptFileError(where, f"the video written cannot be read back ({exc})") from exc
    packets.sort()
    pts = [p for p, _ in packets]
    keyframes = [k for k, (_, key) in enumerate(packets) if key]
    return VideoStream(data, pts, time_base, keyframes, codec, int(height), int(width), channels)


def remux_segment(
    path: str | os.PathLike[str], start: float, stop: float, fps: float, *, channels: int = 3
) -> VideoStream:
    """Frames ``[start, stop)`` seconds of ``path``'s first video stream, as an mp4 of their own.

    The packets are copied, not decoded and encoded again: the frames decode to exactly what
    decoding the source gives. The copy starts at the key frame at or before ``start`` (a
    LeRobot v3.0 episode starts at one) and ends before the first key frame at or after
    ``stop``; frames outside ``[start, stop)`` (half a frame either side) are in the stream
    but not in its ``pts``, so they are never returned.

    Raises:
        CorruptFileError: the file cannot be read, or holds no video stream.
        MissingDependencyError: PyAV is missing.
    """
    av = _av(f"{path}: copying its video")
    half = 0.5 / float(fps)
    try:
        with av.open(os.fspath(path), format="mp4") as src:  # (never a playlist naming other files)
            if not src.streams.video:
                raise CorruptFileError(path, "holds no video stream: the dataset is damaged")
            stream = src.streams.video[0]
            tb = stream.time_base
            if start > 0 and tb:
                src.seek(int(start / tb), stream=stream, backward=True, any_frame=False)
            packets: list[Any] = []
            for packet in src.demux(stream):
                if packet.pts is None or packet.size == 0:
                    continue
                t = float(packet.pts * tb)
                if t >= stop - half and packet.is_keyframe:
                    break
                if not packets and not packet.is_keyframe:
                    continue  # (a seek lands on a key frame; anything before one cannot be decoded)
                packets.append(packet)
            if not packets:
                raise CorruptFileError(path, f"holds no frames between {start} and {stop} s")
            shift = min(int(p.pts) for p in packets)
            kept = {int(p.pts) - shift for p in packets if start - half <= float(p.pts * tb) < stop - half}
            buffer = io.BytesIO()
            with av.open(buffer, "w", format="mp4") as out:
                ostream = out.add_stream_from_template(stream, opaque=True)  # (packets copied: no encoder)
                for packet in packets:
                    packet.pts -= shift
                    if packet.dts is not None:
                        packet.dts -= shift
                    packet.stream = ostream
                    out.mux(packet)
    except _OURS:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise CorruptFileError(path, f"the video cannot be read ({type(exc).__name__}: {exc})") from exc
    whole = _described(av, buffer.getvalue(), channels, path)
    scale = Fraction(whole.time_base) / tb if whole.time_base != str(tb) else Fraction(1)
    wanted = {round(p / scale) if scale != 1 else p for p in kept}
    # frames of the segment: those of the copy whose time is in [start, stop); key frames among them
    ks = [k for k, p in enumerate(whole.pts) if p in wanted]
    keyset = set(whole.keyframes)
    # (when the segment's first frame is no key frame, decoding starts at the copy's first packet)
    return VideoStream(
        whole.data,
        [whole.pts[k] for k in ks],
        whole.time_base,
        [i for i, k in enumerate(ks) if k in keyset],
        whole.codec,
        whole.height,
        whole.width,
        channels,
    )


def encode_frames(
    frames: np.ndarray, fps: int, *, codec: str = "libsvtav1", crf: int = 30, gop: int = 2
) -> VideoStream:
    """uint8 ``(n, H, W, 3)`` frames as an mp4 stream: AV1 (libsvtav1, yuv420p) by default, as LeRobot.

    Lossy: decoded frames are near, not equal, to ``frames``.

    Raises:
        InvalidInputError: frames that are not uint8 RGB of an even size of 4 pixels or more.
        MissingDependencyError: PyAV is missing.
    """
    av = _av("encoding frames as video")
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise InvalidInputError(
            None, f"frames of {frames.dtype} {frames.shape[1:]}: video holds uint8 (H, W, 3) frames"
        )
    height, width = frames.shape[1:3]
    if height % 2 or width % 2 or min(height, width) < 4:
        raise InvalidInputError(
            None, f"frames of {height}x{width}: video needs an even height and width of 4 or more"
        )
    os.environ.setdefault("SVT_LOG", "1")  # (SVT-AV1 prints its settings at every start unless told not to)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream(codec, rate=Fraction(fps), options={"g": str(gop), "crf": str(crf)})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return _described(av, buffer.getvalue(), 3, "the encoded frames")


def decode(stream: VideoStream, ks: Any, *, where: Any = None) -> np.ndarray:
    """Frames ``ks`` (numbers into the stream, any order, repeats allowed) as uint8 ``(len(ks), H, W, C)``.

    Each run of wanted frames is decoded from the key frame before it (a seek), not from the
    stream's start.

    Raises:
        CorruptFileError: the stream cannot be decoded, or lacks a frame it lists.
        MissingDependencyError: PyAV is missing.
    """
    av = _av("decoding video frames")
    ks = np.asarray(ks, dtype=np.int64).reshape(-1)
    out = np.empty((len(ks), stream.height, stream.width, stream.channels), np.uint8)
    if not len(ks):
        return out
    if ks.min() < 0 or ks.max() >= stream.frames:
        raise CorruptFileError(
            where, f"the videos index names frame {int(ks.max())} of a stream of {stream.frames} frames"
        )
    unique, back = np.unique(ks, return_inverse=True)
    images = np.empty((len(unique), *out.shape[1:]), np.uint8)
    fmt = "gray" if stream.channels == 1 else "rgb24"
    try:
        with av.open(io.BytesIO(stream.data), format="mp4") as container:
            vs = container.streams.video[0]
            frames: Any = None
            at = -1  # the frame number decoded last (-1: none yet)
            for i, k in enumerate(unique.tolist()):
                start = bisect_right(stream.keyframes, k) - 1  # the key frame at or before k
                key = stream.keyframes[start] if start >= 0 else 0
                if frames is None or at >= k or key > at:
                    container.seek(
                        stream.pts[key] if start >= 0 else 0, stream=vs, backward=True, any_frame=False
                    )
                    frames = container.decode(vs)
                target = stream.pts[k]
                for frame in frames:
                    if frame.pts is None or frame.pts < target:
                        continue
                    if frame.pts > target:
                        raise CorruptFileError(
                            where, f"the stream has no frame at {target} ({stream.time_base} s)"
                        )
                    image = frame.to_ndarray(format=fmt)
                    images[i] = image[:, :, None] if image.ndim == 2 else image
                    at = k
                    break
                else:
                    raise CorruptFileError(where, f"the stream ended before frame {k} of {stream.frames}")
    except _OURS:
        raise
    except (av.FFmpegError, ValueError, IndexError) as exc:  # (IndexError: no video stream in the bytes)
        raise CorruptFileError(where, f"the video cannot be decoded ({type(exc).__name__}: {exc})") from exc
    out[:] = images[back]
    return out


def video_row(
    run_id: str,
    episode_id: int,
    env_index: int,
    column: str,
    stream: VideoStream,
    steps: Any,
    source: str | None = None,
) -> dict[str, Any]:
    """A ``videos`` row (as a dict of one-row columns) for ``stream``, frame k showing ``steps[k]``."""
    steps = [int(s) for s in steps]
    if len(steps) != stream.frames:
        raise InvalidInputError(None, f"{column}: {stream.frames} frames for {len(steps)} steps")
    return {
        "run_id": [run_id],
        "episode_id": [int(episode_id)],
        "env_index": [int(env_index)],
        "column": [column],
        "steps": [steps],
        "pts": [list(stream.pts)],
        "time_base": [stream.time_base],
        "keyframes": [list(stream.keyframes)],
        "codec": [stream.codec],
        "height": [stream.height],
        "width": [stream.width],
        "channels": [stream.channels],
        "data": pa.array([stream.data], pa.large_binary()),
        "source": [source],
    }


class VideoFrames:
    """A store's video-layout cameras: which runs have them, and their frames decoded on demand.

    The index (every row but its bytes) is read once; a stream's bytes are read when first
    asked for, and kept up to ``cache_bytes`` (256 MB) of streams.

    Example:
        >>> frames = VideoFrames.of(store)  # doctest: +SKIP
        >>> frames.columns("run-1")  # doctest: +SKIP
        ['observation.images.top']
        >>> top = "observation.images.top"
        >>> images, has = frames.frames("run-1", 0, 0, top, np.arange(10))  # doctest: +SKIP
    """

    def __init__(self, files: list[Any], *, cache_bytes: int = 256 << 20) -> None:

        self._where: dict[tuple[str, int, int, str], tuple[Any, int, int]] = {}
        self._meta: dict[tuple[str, int, int, str], dict[str, Any]] = {}
        self._cols: dict[str, list[str]] = {}
        self._cache: OrderedDict[tuple[str, int, int, str], VideoStream] = OrderedDict()
        self._limit, self._held = cache_bytes, 0
        self._groups: dict[tuple[Any, int], list[tuple[str, int, int, str]]] = {}  # a row group's streams
        self._shapes: dict[tuple[str, str], tuple[int, int, int]] = {}
        for path in files:
            groups = _read_groups(path, None, list(INDEX_COLUMNS))
            for g, part in enumerate(t.to_pylist() for t in groups):
                for offset, r in enumerate(part):
                    key = (r["run_id"], int(r["episode_id"]), int(r["env_index"]), r["column"])
                    self._where[key] = (path, g, offset)
                    self._groups.setdefault((path, g), []).append(key)
                    self._meta[key] = r
                    self._shapes.setdefault(
                        (key[0], key[3]), (int(r["height"]), int(r["width"]), int(r["channels"]))
                    )
                    if r["column"] not in self._cols.setdefault(r["run_id"], []):
                        self._cols[r["run_id"]].append(r["column"])

    @classmethod
    def of(cls, store: StoreReader) -> VideoFrames | None:
        """The store's video rows, or None when it has none (a store of format 1.3 or before, too)."""
        try:
            files = store.files("videos")
        except (KeyError, LookupError):
            return None
        return cls(list(files)) if files else None

    def runs(self) -> list[str]:
        """The runs that have video-layout fields."""
        return list(self._cols)

    def columns(self, run_id: str) -> list[str]:
        """The video-layout fields of a run (``observation.images.top``, ...), in the order first met."""
        return list(self._cols.get(run_id, []))

    def shape(self, run_id: str, column: str) -> tuple[int, int, int]:
        """(H, W, C) of a run's video field."""
        found = self._shapes.get((run_id, column))
        if found is None:
            raise InvalidInputError(None, f"run {run_id} has no video field {column}")
        return found

    def stream(self, key: tuple[str, int, int, str]) -> VideoStream | None:
        """The stream of (run_id, episode_id, env_index, column), or None when there is none.

        A miss reads the stream's row group (about 8 MB) and keeps every stream in it, the
        least recently used dropped beyond ``cache_bytes``.
        """
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        where = self._where.get(key)
        if where is None:
            return None
        path, g, _ = where
        blobs = _read_groups(path, g, ["data"])[0].column(0)
        for other in self._groups[(path, g)]:
            offset = self._where[other][2]
            if other not in self._cache:
                r = self._meta[other]
                self._cache[other] = VideoStream(
                    blobs[offset].as_py(),
                    list(r["pts"]),
                    r["time_base"],
                    list(r["keyframes"]),
                    r["codec"],
                    int(r["height"]),
                    int(r["width"]),
                    int(r["channels"]),
                )
                self._held += len(self._cache[other].data)
        stream = self._cache[key]
        self._cache.move_to_end(key)
        while self._held > self._limit and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._held -= len(dropped.data)
        return stream

    def path_of(self, key: tuple[str, int, int, str]) -> Path:
        """The videos file that holds the stream of ``key`` (what an error names)."""
        return Path(str(self._where[key][0]))

    def numbers(self, key: tuple[str, int, int, str], steps: Any) -> tuple[np.ndarray, np.ndarray]:
        """The frame number of each of ``steps`` in the stream of ``key``, and which steps have one."""
        steps = np.asarray(steps, dtype=np.int64).reshape(-1)
        meta = self._meta.get(key)
        if meta is None or not len(meta["steps"]):
            return np.zeros(len(steps), np.int64), np.zeros(len(steps), bool)
        listed = np.asarray(meta["steps"], dtype=np.int64)
        order = np.argsort(listed, kind="stable")
        pos = np.minimum(np.searchsorted(listed[order], steps), len(listed) - 1)
        return order[pos], listed[order][pos] == steps

    def frames(
        self, run_id: str, episode_id: int, env_index: int, column: str, steps: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """The frames of ``steps`` of one episode: (uint8 (n, H, W, C) images, which steps have one)."""
        key = (run_id, int(episode_id), int(env_index), column)
        h, w, c = self.shape(run_id, column)
        ks, has = self.numbers(key, steps)
        images = np.zeros((len(ks), h, w, c), np.uint8)
        stream = self.stream(key) if has.any() else None
        if stream is not None:
            images[has] = decode(stream, ks[has], where=Path(str(self._where[key][0])))
        return images, has


def _read_groups(path: Any, group: int | None, columns: list[str]) -> list[pa.Table]:
    """Row group ``group`` (None: every one) of a videos file, ``columns`` only; damage named."""
    from rlarrow.core.store.checked import open_checked

    try:
        with open_checked(path) as pf:  # (every page against its CRC-32, as every read path)
            which = range(pf.metadata.num_row_groups) if group is None else [group]
            return [pf.read_row_group(g, columns=columns) for g in which]
    except (pa.ArrowException, OSError) as exc:
        raise CorruptFileError(
            path,
            f"the videos file cannot be read ({type(exc).__name__}: {exc}); `rlarrow check STORE` names "
            "damaged files",
        ) from exc


def read_videos_file(path: Any, columns: list[str]) -> pa.Table:
    """``columns`` of a ``videos`` file, every page checked against its CRC-32; damage named.

    Example:
        >>> import tempfile, os, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "v.parquet")
        >>> pq.write_table(pa.table({"height": [96]}), path, write_page_checksum=True)
        >>> read_videos_file(path, ["height"]).column("height").to_pylist()
        [96]
    """
    parts = _read_groups(path, None, columns)
    return pa.concat_tables(parts) if parts else pa.table({c: [] for c in columns})


def _episodes_of(run_ids: Any, episodes: Any, envs: Any) -> Iterator[tuple[str, int, int, np.ndarray]]:
    """(run_id, episode_id, env_index, rows) of each episode the rows are of: one sort, no scan each."""
    names, codes = np.unique(np.asarray(run_ids, dtype=object).astype(str), return_inverse=True)
    keys = np.stack(
        [np.asarray(codes).reshape(-1), np.asarray(episodes, np.int64), np.asarray(envs, np.int64)], 1
    )
    groups, group_of = np.unique(keys, axis=0, return_inverse=True)
    group_of = np.asarray(group_of).reshape(-1)
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(len(groups) + 1))
    for g, (r, e, v) in enumerate(groups.tolist()):
        yield str(names[r]), int(e), int(v), order[bounds[g] : bounds[g + 1]]


class VideoRefs:
    """Frames named by one integer each (a stream's id and the frame's number), decoded when asked.

    What a sample reader keeps for a video field instead of its frames (8 bytes a row; -1:
    no frame): windows, shuffles and batches move the integers, and :meth:`decode` makes
    the frames of a batch only.
    """

    def __init__(self, frames: VideoFrames) -> None:
        self.frames = frames
        self._keys: list[tuple[str, int, int, str]] = []
        self._ids: dict[tuple[str, int, int, str], int] = {}

    def refs(self, column: str, run_ids: Any, episodes: Any, envs: Any, steps: Any) -> np.ndarray:
        """The reference of each row's frame of ``column`` (-1 where it has none)."""
        steps = np.asarray(steps, dtype=np.int64).reshape(-1)
        out = np.full(len(steps), -1, np.int64)
        if not len(steps):
            return out
        for run, e, v, rows in _episodes_of(run_ids, episodes, envs):
            key = (run, e, v, column)
            ks, has = self.frames.numbers(key, steps[rows])
            if has.any():
                if key not in self._ids:
                    self._ids[key] = len(self._keys)
                    self._keys.append(key)
                out[rows[has]] = (self._ids[key] << 32) | ks[has]
        return out

    def decode(self, refs: np.ndarray, shape: tuple[int, ...], out: Any = None) -> np.ndarray:
        """uint8 frames of shape ``refs.shape + shape``, zeros where a reference is -1.

        ``out(shape, dtype)``, when given, returns the array to write them into.
        """
        full = tuple(refs.shape) + tuple(shape)
        images = out(full, np.dtype(np.uint8)) if out is not None else np.empty(full, np.uint8)
        flat_refs = refs.reshape(-1)
        flat_images = images.reshape(-1, *shape)
        flat_images[flat_refs < 0] = 0
        for stream_id in np.unique(flat_refs[flat_refs >= 0] >> 32).tolist():
            rows = np.flatnonzero((flat_refs >= 0) & ((flat_refs >> 32) == stream_id))
            key = self._keys[stream_id]
            stream = self.frames.stream(key)
            assert stream is not None
            flat_images[rows] = decode(stream, flat_refs[rows] & 0xFFFFFFFF, where=self.frames.path_of(key))
        return images


def with_frames(table: pa.Table, frames: VideoFrames | None) -> pa.Table:
    """``table`` (``steps`` rows) with each run's video fields decoded into its observation.

    Rows need ``run_id``, ``episode_id``, ``env_index`` and ``step``; a field is put back at
    its path in the observation struct (made when the run's observation has no other field),
    uint8 ``(H, W, C)`` in the binary layout, null on steps without a frame. A table of runs
    without video is returned as it is.
    """
    from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows

    if frames is None or not table.num_rows or "run_id" not in table.column_names:
        return table
    runs = set(table.column("run_id").to_pylist())
    columns: list[str] = []
    for run in sorted(runs, key=str):
        columns += [c for c in frames.columns(run) if c not in columns]
    if not columns:
        return table
    envs = (
        table.column("env_index").to_numpy()
        if "env_index" in table.column_names
        else np.zeros(table.num_rows, np.int64)
    )
    episodes = list(
        _episodes_of(
            table.column("run_id").to_numpy(zero_copy_only=False), table.column("episode_id").to_numpy(), envs
        )
    )
    steps = table.column("step").to_numpy()
    observation = (
        table.column("observation").combine_chunks() if "observation" in table.column_names else None
    )
    for column in columns:
        shape = next(frames.shape(r, column) for r in runs if column in frames.columns(r))
        images = np.zeros((table.num_rows, *shape), np.uint8)
        has = np.zeros(table.num_rows, bool)
        for run, e, v, rows in episodes:  # each episode's steps
            if column not in frames.columns(run):
                continue
            got, ok = frames.frames(run, e, v, column, steps[rows])
            images[rows], has[rows] = got, ok
        arr = with_null_rows(to_arrow(images, tensor_type(np.uint8, shape, layout="binary")), ~has)
        observation = _put(observation, column.split(".")[1:], arr, table.num_rows)
    index = table.column_names.index("observation") if "observation" in table.column_names else None
    if index is None:
        return table.append_column("observation", observation)
    return table.set_column(index, "observation", observation)


def _put(struct: pa.Array | None, path: list[str], value: pa.Array, rows: int) -> pa.Array:
    """``struct`` with ``value`` at ``path`` (fields made as needed); a plain observation if path is empty."""
    if not path:
        return value
    if struct is None or pa.types.is_null(struct.type):
        return pa.StructArray.from_arrays([_put(None, path[1:], value, rows)], names=[path[0]])
    if not pa.types.is_struct(struct.type):
        raise InvalidInputError(
            None, f"a video field at {'.'.join(path)} in an observation that is not a struct"
        )
    names = [f.name for f in struct.type]
    children = [struct.field(i) for i in range(len(names))]
    if path[0] in names:
        i = names.index(path[0])
        children[i] = _put(children[i], path[1:], value, rows)
    else:
        names.append(path[0])
        children.append(_put(None, path[1:], value, rows))
    mask = struct.is_null() if struct.null_count else None
    return pa.StructArray.from_arrays(children, names=names, mask=mask)
