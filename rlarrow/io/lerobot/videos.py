"""A LeRobot episode's camera frames: its segment of a camera's mp4, decoded or copied.

A v3.0 dataset keeps many episodes in one mp4 a camera (each episode a segment between two
timestamps its episodes row names); v2.x one mp4 an episode and camera. :func:`episode_video`
gives an episode's frames decoded with PyAV (uint8 ``(N, H, W, C)``, in presentation order,
AV1, H.264 and whatever FFmpeg decodes), or its segment copied into a stream of its own,
not decoded (the store's video layout: ``import_lerobot(video="keep")``).

Example:
    >>> from rlarrow.io.lerobot.videos import episode_video  # doctest: +SKIP
    >>> episode_video(root, info, "observation.images.top", episode, 96, (96, 96, 3)).shape  # doctest: +SKIP
    (96, 96, 96, 3)

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.errors import CorruptFileError, RLArrowError, UnsupportedInputError
from rlarrow.core.video import VideoStream, remux_segment
from rlarrow.io.lerobot.dataset_meta import formatted

__all__: list[str] = []


def episode_video(
    root: Path,
    info: dict[str, Any],
    key: str,
    ep: dict[str, Any],
    n: int,
    shape: tuple[int, ...],
    *,
    keep: bool = False,
) -> Any:
    """The episode's ``n`` frames of camera ``key``: its segment of the video file, decoded with PyAV.

    ``keep``: the segment copied into a stream of its own, not decoded: (VideoStream, source),
    the source the file and segment it came from.

    Raises:
        CorruptFileError: a file that cannot be decoded, or a segment of other than ``n``
            frames of ``shape``.
        UnsupportedInputError: a depth-map camera.
    """
    path, start, stop = _segment(root, info, key, ep)
    if ((info.get("features") or {}).get(key) or {}).get("info", {}).get("video.is_depth_map"):
        raise UnsupportedInputError(path, f"{key} is a depth-map video, which rlarrow does not decode yet")
    fps = float(Fraction(str(info.get("fps") or 1)).limit_denominator(1000))
    if keep:
        stream = _copied(path, ep, (start, stop), fps, n, shape)
        segment = "" if ep.get("_v2") else f" [{start}, {stop}) s"  # (v2: the whole file)
        return stream, f"{path.relative_to(os.path.realpath(root))}{segment}"
    return _decoded(path, key, ep, (float(start), float(stop)), fps, n, shape)


def _segment(root: Path, info: dict[str, Any], key: str, ep: dict[str, Any]) -> tuple[Path, Any, Any]:
    """Where the episode's frames of ``key`` are: the file, and the segment's start and stop (s)."""
    if ep.get("_v2"):  # v2: a video file per episode and camera, the whole of it
        index = int(ep["episode_index"])
        template = str(
            info.get("video_path")
            or "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        )
        path = formatted(
            root,
            template,
            video_key=key,
            episode_index=index,
            episode_chunk=index // int(info.get("chunks_size") or 1000),
        )
        return path, 0.0, float("inf")
    template = str(
        info.get("video_path") or "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    chunk, file = ep.get(f"videos/{key}/chunk_index"), ep.get(f"videos/{key}/file_index")
    start, stop = ep.get(f"videos/{key}/from_timestamp"), ep.get(f"videos/{key}/to_timestamp")
    if not isinstance(chunk, int) or not isinstance(file, int) or start is None or stop is None:
        raise CorruptFileError(root, f"episode {ep['episode_index']} does not say where its {key} video is")
    return formatted(root, template, video_key=key, chunk_index=chunk, file_index=file), start, stop


def _copied(path: Path, ep: dict[str, Any], segment: tuple[Any, Any], fps: float, n: int,
            shape: tuple[int, ...]) -> VideoStream:
    """The segment copied (remuxed, not decoded) into a stream of its own, checked to hold ``n`` frames."""
    start, stop = segment
    copied = remux_segment(path, float(start), float(stop), fps, channels=int(shape[-1]) if shape else 3)
    if ep.get("_v2") and copied.frames > n:  # (v2: the episode's file; its first n frames, as decoded)
        copied.keyframes = [k for k in copied.keyframes if k < n]
        copied.pts = copied.pts[:n]
    if copied.frames != n or (len(shape) == 3 and (copied.height, copied.width) != shape[:2]):
        raise CorruptFileError(
            path,
            f"episode {ep['episode_index']}'s segment {start}..{stop} s holds {copied.frames} frames of "
            f"{copied.height}x{copied.width}; the episode has {n} of {shape}: the dataset is damaged, "
            "or its episodes share frames across their bounds (an open-GOP stream) and cannot be "
            "copied apart: import it with its cameras decoded",
        )
    return copied


def _decoded(path: Path, key: str, ep: dict[str, Any], segment: tuple[float, float], fps: float, n: int,
             shape: tuple[int, ...]) -> np.ndarray:
    """The segment's frames decoded, checked to be ``n`` of ``shape``."""
    import av

    out = np.empty((n, *shape), np.uint8) if len(shape) == 3 else None
    try:
        with av.open(os.fspath(path), format="mp4") as container:  # (never a playlist naming other files)
            if not container.streams.video:
                raise CorruptFileError(path, "holds no video stream: the dataset is damaged")
            stream = container.streams.video[0]
            size = (stream.codec_context.height, stream.codec_context.width)
            if len(shape) == 3 and size != (0, 0) and size != tuple(shape[:2]):  # (before a frame is decoded)
                raise CorruptFileError(
                    path, f"{key}: the video's frames are {size[0]}x{size[1]}; info.json says {shape}"
                )
            if segment[0] > 0 and stream.time_base:  # to the key frame before the segment: not from 0
                container.seek(int(segment[0] / stream.time_base), stream=stream, backward=True,
                               any_frame=False)
            got = _fill(container.decode(stream), out, segment, 0.5 / fps, n, path, shape)
    except RLArrowError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:  # (FFmpeg's errors, a file cut short)
        raise CorruptFileError(path, f"the video cannot be decoded ({type(exc).__name__}: {exc})") from exc
    if got != n:
        raise CorruptFileError(
            path,
            f"episode {ep['episode_index']}'s segment {segment[0]}..{segment[1]} s holds {got} "
            f"frames; the episode has {n}: the dataset is damaged",
        )
    return out if out is not None else np.empty((0, *shape), np.uint8)


def _fill(frames: Any, out: np.ndarray | None, segment: tuple[float, float], half: float, n: int, path: Path,
          shape: tuple[int, ...]) -> int:
    """Decoded ``frames`` of the segment into ``out``; how many (a frame is the segment's by its time)."""
    got = 0
    for frame in frames:
        if frame.pts is None or frame.time_base is None:
            continue
        t = float(frame.pts * frame.time_base)
        if t < segment[0] - half:
            continue
        if t >= segment[1] - half or got >= n:
            break
        image = frame.to_ndarray(format="gray" if shape[-1:] == (1,) else "rgb24")
        if image.ndim == 2:
            image = image[:, :, None]
        if out is None or image.shape != out.shape[1:]:
            raise CorruptFileError(path, f"frame of shape {image.shape}; info.json says {shape}")
        out[got] = image
        got += 1
    return got
