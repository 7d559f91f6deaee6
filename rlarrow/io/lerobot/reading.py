"""LeRobot datasets (codebases v3.0 and v2.x) into a store, without LeRobot.

A LeRobot v3.0 dataset holds ``meta/info.json`` (features, fps, path templates),
``meta/episodes/chunk-*/file-*.parquet`` (one row per episode: its length, tasks, where its
frames and video segments are, its statistics), ``meta/tasks.parquet``, ``meta/stats.json``,
frames in ``data/chunk-*/file-*.parquet`` (many episodes a file) and camera streams in
``videos/<key>/chunk-*/file-*.mp4`` (many episodes a file, each a segment between two
timestamps). This module reads them one episode at a time:

- numeric features in their dtype and shape; ``image`` features (PNG bytes in the frame's
  ``{bytes, path}`` struct) decoded with Pillow; ``video`` features decoded with PyAV (the
  ``video`` extra) to uint8 ``(H, W, C)`` frames, the episode's segment of the file, frame by
  frame in presentation order (AV1, H.264 and whatever FFmpeg decodes);
- ``observation.*`` features are one struct observation, nested at the dots
  (``observation.images.top`` is ``observation["images"]["top"]``), ``action`` the action
  (``action.*`` features a struct action, nested the same way);
  ``next.reward`` the reward and ``next.done`` the last step's ``is_terminal`` where the
  dataset has them; ``timestamp``, ``frame_index``, ``index``, ``task_index`` and any other
  feature are the step's ``metadata`` (typed);
- each episode's N frames are N + 1 steps in RLDS alignment: LeRobot keeps no observation after
  the last action, so the last step's observation is null (never invented), as for a D4RL file
  without ``next_observations``;
- the episode's ``metadata`` is its tasks, length and statistics (``stats/...``); the run's
  ``info.json``, ``stats.json`` and the tasks by index.

LeRobot v2.x datasets (``meta/episodes.jsonl``, ``tasks.jsonl``, ``episodes_stats.jsonl``, a
data file and an mp4 per episode) are read the same way; older codebases are refused.

Example:
    >>> from rlarrow.io.lerobot import import_lerobot  # doctest: +SKIP
    >>> import_lerobot("~/.cache/huggingface/lerobot/lerobot/pusht", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import math
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core.confined import MAX_IMAGE_PIXELS, check_template, inside, png_size
from rlarrow.core.episodes import EpisodeRows
from rlarrow.core.errors import (
    ArgumentError,
    CorruptFileError,
    MissingDependencyError,
    RLArrowError,
    UnsupportedInputError,
)
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.store import StoreLike, opened
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.core.video import remux_segment, video_row
from rlarrow.io import EpisodesReport

__all__ = ["FRAME_KEYS", "VIDEO_MODES", "VIDEO_ROW_GROUP_BYTES", "import_lerobot", "is_lerobot_dir"]

#: how :func:`import_lerobot` stores video features: decoded uint8 frames, or kept as video
VIDEO_MODES = ("decode", "keep")
#: row groups of the ``videos`` table (the store keeps them at most this: a stream is read alone)
VIDEO_ROW_GROUP_BYTES = 2 << 20

#: the per-frame bookkeeping features LeRobot adds; kept as each step's metadata
FRAME_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _check_info(path: Path, info: dict[str, Any]) -> None:
    """``fps`` a positive number, each feature's dtype one LeRobot writes and its shape sizes."""
    fps = info.get("fps")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float))
                            or not math.isfinite(fps) or fps <= 0):
        raise CorruptFileError(path, f"fps {fps!r:.30} is not a positive number of frames per second: "
                                     "the dataset is damaged (LeRobot writes e.g. \"fps\": 30)")
    for key, spec in info["features"].items():
        dtype = spec["dtype"]
        if dtype not in ("image", "video", "string"):
            try:
                numeric = np.dtype(dtype).kind in "biuf"
            except TypeError:
                numeric = False
            if not numeric:
                raise CorruptFileError(path, f"feature {key!r} has dtype {dtype!r:.30}, not one LeRobot "
                                             "writes (float32, int64, bool, ..., image, video, string)")
        shape = spec.get("shape") or []
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise CorruptFileError(path, f"feature {key!r} has shape {shape!r:.40}; LeRobot writes a list "
                                         "of sizes, e.g. [2]")


def _info(path: Path) -> dict[str, Any] | None:
    info = inside(path, "meta/info.json")
    if not info.is_file():
        return None
    try:
        data = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and "features" in data else None


def is_lerobot_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a LeRobot v2.x or v3.x dataset (``meta/info.json`` of that codebase, ``data/``)."""
    p = Path(path)
    info = _info(p)
    version = str((info or {}).get("codebase_version", ""))
    return info is not None and version.startswith(("v2", "v3")) and inside(p, "data").is_dir()


def _read(path: Path, what: str) -> pa.Table:
    try:
        table = pq.read_table(path)
        table.validate(full=True)
        return table
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(
            path,
            f"{what} cannot be read ({type(exc).__name__}: {exc}); restore the dataset or download it again",
        ) from exc


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    return _metadata.nest(flat, sep=".")


def import_lerobot(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    video: str = "decode",
    progress: bool | None = None,
) -> EpisodesReport:
    """Import a LeRobot v3.0 or v2.x dataset into ``store`` as one run (see the module docs).

    ``video="keep"`` keeps the cameras as video (the store's video layout, ``videos`` table):
    each episode's segment of each camera's mp4 is copied, not decoded, into a stream of its
    own, and the readers that decode (``Reader``, exports, SQL's ``video_frame``) give the
    frames decoding the original gives. ``"decode"`` (default) stores uint8 frames.

    Raises:
        UnsupportedInputError: not a LeRobot dataset, or a codebase version not read yet.
        CorruptFileError: files that cannot be read or do not agree (episode lengths, frames,
            video segments).
        MissingDependencyError: PyAV (``pip install 'rlarrow[video]'``) for video features,
            Pillow for image features.

    Example:
        >>> import_lerobot("pusht", "runs.rlarrow")  # doctest: +SKIP
    """
    from rlarrow.core.progress import bar

    root = Path(directory)
    info = _info(root)
    if info is None:
        raise UnsupportedInputError(root, "not a LeRobot dataset (no meta/info.json with features)")
    version = str(info.get("codebase_version", "?"))
    if not version.startswith(("v2", "v3")):
        raise UnsupportedInputError(
            root,
            f"a LeRobot {version} dataset; rlarrow reads v2.x and v3.x (LeRobot's own converters "
            "upgrade older ones)",
        )
    features: dict[str, Any] = info["features"]
    if not isinstance(features, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("dtype"), str) for f in features.values()
    ):
        raise CorruptFileError(
            root / "meta" / "info.json", "its features are not {name: {dtype, shape}}: the dataset is damaged"
        )
    _check_info(root / "meta" / "info.json", info)
    episodes = _episodes(root)
    tasks = _tasks(root)
    stats_path = inside(root, "meta/stats.json")
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(stats_path, f"not readable JSON ({exc}): the dataset is damaged") from exc
    if video not in VIDEO_MODES:
        raise ArgumentError(f"video={video!r}: one of {', '.join(VIDEO_MODES)}")
    _check_pixels(root, features)
    for template in ("data_path", "video_path"):  # (before the store is opened: a bomb costs nothing)
        if isinstance(info.get(template), str):
            check_template(info[template], source=root / "meta" / "info.json")
    videos = [k for k, f in features.items() if f.get("dtype") == "video"]
    if videos:
        _require_av(root, keep=video == "keep")
    keep = video == "keep"
    if (
        keep
        and videos
        and not any(
            (k == "observation" or k.startswith("observation.")) and f.get("dtype") != "video"
            for k, f in features.items()
        )
    ):
        raise UnsupportedInputError(
            root,
            "every observation feature is a camera: kept as video, the steps would hold no observation, "
            "which StreamingDataset does not read yet; import it with its cameras decoded",
        )
    with opened(store, create=True) as st, st.transaction():  # all of the dataset or nothing of it
        frames = _Frames(root, info)
        report = None
        ep_rows = EpisodeRows()
        with (
            st.writer("steps") as writer,
            st.writer("videos", row_group_bytes=VIDEO_ROW_GROUP_BYTES) as video_writer,
            bar(len(episodes), "import lerobot", "episode", progress) as pbar,
        ):
            for ep in episodes:
                try:
                    table = frames.episode(ep)
                    columns = _columns(root, table, features, ep, videos, info, keep=keep)
                except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
                    raise CorruptFileError(
                        root,
                        f"episode {ep['episode_index']}'s frames are damaged ({type(exc).__name__}: {exc})",
                    ) from exc
                if report is None:  # the run, with the first episode's types declared before it
                    obs_type = (
                        _type_of(columns["observation"]) if columns["observation"] is not None else None
                    )
                    declared = (
                        {"action": _type_of(columns["action"])} if columns["action"] is not None else {}
                    )
                    if obs_type is not None:
                        declared["observation"] = obs_type
                    types = declare_steps(st, declared)
                    run = st.add_run(
                        source="lerobot",
                        run_id=run_id,
                        name=name or str(info.get("repo_id") or root.name),
                        source_path=os.fspath(root),
                        source_version=f"lerobot {version}",
                        alignment="rlds",
                        num_envs=1,
                        metadata={"info": info, "stats": stats, "tasks": tasks, "video": video},
                        env_specs=_specs(features),
                    )
                    report = EpisodesReport(run_id=run)
                steps = _steps(columns, types, run, int(ep["episode_index"]))
                writer.write(
                    _schema.build("steps", steps, num_rows=len(steps["step"]), established=st.schema("steps"))
                )
                for key, (stream, source) in columns[
                    "videos"
                ].items():  # the video layout: N frames, steps 0..N-1
                    row = video_row(
                        run, int(ep["episode_index"]), 0, key, stream, range(columns["n"]), source
                    )
                    video_writer.write(_schema.build("videos", row, num_rows=1))
                rewards = columns["reward"]
                ep_rows.add(
                    int(ep["episode_index"]),
                    num_steps=len(steps["step"]),
                    total=float(np.sum(rewards, dtype=np.float64)) if rewards is not None else None,
                    terminated=bool(columns["done"]),
                    truncated=not columns["done"],
                    partial_end=False,
                    metadata=_episode_meta(ep),
                )
                report.episodes += 1
                report.steps += len(steps["step"])
                pbar.update(1)
        if report is None:
            raise CorruptFileError(root / "meta" / "episodes", "the dataset lists no episodes")
        ep_rows.append_to(st, report.run_id)
        return report


def _check_pixels(root: Path, features: dict[str, Any]) -> None:
    """Refuse cameras of more than MAX_IMAGE_PIXELS pixels a frame, before any frame is decoded."""
    for key, spec in features.items():
        shape = spec.get("shape")
        if spec.get("dtype") not in ("image", "video") or not isinstance(shape, list):
            continue
        dims = [d for d in shape[:2] if isinstance(d, int) and not isinstance(d, bool)]
        if len(dims) == 2 and dims[0] * dims[1] > MAX_IMAGE_PIXELS:
            raise CorruptFileError(
                root / "meta" / "info.json",
                f"{key} declares frames of {dims[0]}x{dims[1]} pixels; rlarrow decodes frames of at most "
                f"{MAX_IMAGE_PIXELS} pixels (the limit of Pillow's Image.MAX_IMAGE_PIXELS): the dataset is "
                "damaged or hostile",
            )


def _require_av(root: Path, keep: bool = False) -> None:
    try:
        import av  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"{root}: the dataset's cameras are videos; {'copying' if keep else 'decoding'} them needs "
            "PyAV, which is not installed: pip install 'rlarrow[video]'",
            name="av",
        ) from exc


def _jsonl(path: Path) -> list[Any]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"not readable JSON lines ({exc}): the dataset is damaged") from exc


def _episodes_v2(root: Path) -> list[dict[str, Any]]:
    """v2.0/v2.1: meta/episodes.jsonl, with each episode's stats from episodes_stats.jsonl (v2.1)."""
    path = inside(root, "meta/episodes.jsonl")
    if not path.is_file():
        raise CorruptFileError(path, "missing: a LeRobot v2 dataset lists its episodes there")
    rows = [r for r in _jsonl(path) if isinstance(r, dict)]
    stats_path = inside(root, "meta/episodes_stats.jsonl")
    stats = (
        {r.get("episode_index"): r.get("stats") for r in _jsonl(stats_path) if isinstance(r, dict)}
        if stats_path.is_file()
        else {}
    )
    for r in rows:
        if not isinstance(r.get("episode_index"), int) or not isinstance(r.get("length"), int):
            raise CorruptFileError(path, "an episode without an integer episode_index and length")
        r["_v2"] = True
        if stats.get(r["episode_index"]) is not None:
            r["stats"] = stats[r["episode_index"]]
    return sorted(rows, key=lambda r: int(r["episode_index"]))


def _episodes(root: Path) -> list[dict[str, Any]]:
    if inside(root, "meta/episodes.jsonl").is_file() and not inside(root, "meta/episodes").is_dir():
        return _episodes_v2(root)
    files = _listed(root, "meta/episodes", "chunk-*", "file-*.parquet")
    if not files:
        raise CorruptFileError(
            root / "meta" / "episodes", "no episode files (meta/episodes/chunk-*/file-*.parquet)"
        )
    rows: list[dict[str, Any]] = []
    for path in files:
        rows += _read(path, "an episodes file").to_pylist()
    rows.sort(key=lambda r: int(r.get("episode_index", -1)))
    for r in rows:
        for key in (
            "episode_index",
            "length",
            "data/chunk_index",
            "data/file_index",
            "dataset_from_index",
            "dataset_to_index",
        ):
            if not isinstance(r.get(key), int):
                raise CorruptFileError(files[0], f"an episode row without an integer {key!r}")
    return rows


def _listed(root: Path, folder: str, *patterns: str) -> list[Path]:
    """The files under ``root/folder`` whose path below it matches ``patterns`` (one a level), sorted.

    Listed a folder at a time, each entry confined to ``root`` before it is looked into (a
    ``glob`` would list the folder a symlinked ``chunk-000`` points to, wherever it is).
    """
    import fnmatch

    found = [inside(root, folder)]
    for pattern in patterns:
        below = []
        for directory in found:
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            below += [inside(root, directory.relative_to(Path(os.path.realpath(root))) / name)
                      for name in names if fnmatch.fnmatchcase(name, pattern)]
        found = below
    return [p for p in found if p.is_file()]


def _tasks(root: Path) -> dict[int, str]:
    if inside(root, "meta/tasks.jsonl").is_file():  # v2
        return {
            int(r["task_index"]): str(r.get("task"))
            for r in _jsonl(inside(root, "meta/tasks.jsonl"))
            if isinstance(r, dict) and isinstance(r.get("task_index"), int)
        }
    path = inside(root, "meta/tasks.parquet")
    if not path.is_file():
        return {}
    table = _read(path, "the tasks file")
    names = [c for c in table.column_names if c != "task_index"]
    text = "task" if "task" in names else (names[0] if names else None)  # (pandas keeps it as the index)
    if text is None:
        return {}
    return {
        int(i): str(t)
        for i, t in zip(table.column("task_index").to_pylist(), table.column(text).to_pylist(), strict=True)
    }


class _Frames:
    """Frames of episodes, from data files read one at a time (the last one kept)."""

    def _episode_v2(self, ep: dict[str, Any]) -> pa.Table:
        index = int(ep["episode_index"])
        template = str(
            self.info.get("data_path") or "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        )
        path = _formatted(self.root, template, episode_chunk=index // self.chunks, episode_index=index)
        return _in_order(_read(path, "an episode's data file"), ep, path, int(ep["length"]))

    def __init__(self, root: Path, info: dict[str, Any]) -> None:
        self.info = info
        self.chunks = int(info.get("chunks_size") or 1000)
        self.root, self.template = (
            root,
            str(info.get("data_path") or "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        )
        self.key: tuple[int, int] | None = None
        self.table: pa.Table | None = None

    def episode(self, ep: dict[str, Any]) -> pa.Table:
        if ep.get("_v2"):  # v2: a file per episode
            return self._episode_v2(ep)
        key = (int(ep["data/chunk_index"]), int(ep["data/file_index"]))
        path = _formatted(self.root, self.template, chunk_index=key[0], file_index=key[1])
        if key != self.key:
            self.table, self.key = _read(path, "a data file"), key
        assert self.table is not None
        index = self.table.column("index").to_numpy()
        lo, hi = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
        rows = np.flatnonzero((index >= lo) & (index < hi))
        if hi - lo != int(ep["length"]):
            raise CorruptFileError(
                path,
                f"episode {ep['episode_index']}'s index range {lo}..{hi} is not its "
                f"length {ep['length']}: the dataset is damaged",
            )
        return _in_order(self.table.take(pa.array(rows)), ep, path, int(ep["length"]))


def _in_order(part: pa.Table, ep: dict[str, Any], path: Path, length: int) -> pa.Table:
    """An episode's frames, checked to be as many as its metadata says, in frame order."""
    if part.num_rows != length:
        raise CorruptFileError(
            path,
            f"episode {ep['episode_index']} has {part.num_rows} frames here; its "
            f"metadata says {length}: the dataset is damaged",
        )
    order = np.argsort(part.column("frame_index").to_numpy(), kind="stable")
    return part.take(pa.array(order))


def _columns(
    root: Path,
    table: pa.Table,
    features: dict[str, Any],
    ep: dict[str, Any],
    videos: list[str],
    info: dict[str, Any],
    *,
    keep: bool = False,
) -> dict[str, Any]:
    n = table.num_rows
    obs: dict[str, Any] = {}
    acts: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    action = reward = None
    done = False
    for key, spec in features.items():
        dtype = spec.get("dtype")
        if dtype == "video" and keep:
            kept[key] = _video(root, info, key, ep, n, tuple(spec.get("shape") or ()), keep=True)
            continue
        if dtype == "video":
            values = _video(root, info, key, ep, n, tuple(spec.get("shape") or ()))
        elif key not in table.column_names:
            raise CorruptFileError(
                root, f"episode {ep['episode_index']}: the frames have no {key!r}, which info.json declares"
            )
        elif dtype == "image":
            shape = tuple(spec.get("shape") or ())
            values = _images(table.column(key), root, key, shape)
        elif dtype == "string":
            extra[key] = np.asarray(table.column(key).to_pylist(), dtype=object)
            continue
        else:
            values = _numbers(table.column(key), np.dtype(dtype), tuple(spec.get("shape") or ()), root, key)
        if key.startswith("observation."):
            obs[key[len("observation.") :]] = values
        elif key == "observation":
            obs[""] = values
        elif key == "action":
            action = values
        elif key.startswith("action."):  # a struct action's fields (as export_lerobot writes one)
            acts[key[len("action.") :]] = values
        elif key == "next.reward":
            reward = values.reshape(n).astype(np.float64)
        elif key == "next.done":
            done = bool(values.reshape(n)[-1]) if n else False
        else:
            extra[key] = values
    observation: Any = obs.get("") if "" in obs else (_nest(obs) if obs else None)
    if action is None and acts:
        action = _nest(acts)
    return {
        "observation": observation,
        "action": action,
        "reward": reward,
        "done": done,
        "extra": extra,
        "n": n,
        "videos": kept,
    }


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


def _video(
    root: Path,
    info: dict[str, Any],
    key: str,
    ep: dict[str, Any],
    n: int,
    shape: tuple[int, ...],
    *,
    keep: bool = False,
) -> Any:
    """The episode's frames of camera ``key``: its segment of the video file, decoded with PyAV.

    ``keep``: the segment copied into a stream of its own, not decoded: (VideoStream, source).
    """
    import av

    if ep.get("_v2"):  # v2: a video file per episode and camera, the whole of it
        index = int(ep["episode_index"])
        template = str(
            info.get("video_path")
            or "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        )
        path = _formatted(
            root,
            template,
            video_key=key,
            episode_index=index,
            episode_chunk=index // int(info.get("chunks_size") or 1000),
        )
        start: Any = 0.0
        stop: Any = float("inf")
    else:
        template = str(
            info.get("video_path") or "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        )
        chunk, file = ep.get(f"videos/{key}/chunk_index"), ep.get(f"videos/{key}/file_index")
        start, stop = ep.get(f"videos/{key}/from_timestamp"), ep.get(f"videos/{key}/to_timestamp")
        if not isinstance(chunk, int) or not isinstance(file, int) or start is None or stop is None:
            raise CorruptFileError(
                root, f"episode {ep['episode_index']} does not say where its {key} video is"
            )
        path = _formatted(root, template, video_key=key, chunk_index=chunk, file_index=file)
    if ((info.get("features") or {}).get(key) or {}).get("info", {}).get("video.is_depth_map"):
        raise UnsupportedInputError(path, f"{key} is a depth-map video, which rlarrow does not decode yet")
    fps = Fraction(str(info.get("fps") or 1)).limit_denominator(1000)
    if keep:
        copied = remux_segment(
            path, float(start), float(stop), float(fps), channels=int(shape[-1]) if shape else 3
        )
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
        segment = "" if ep.get("_v2") else f" [{start}, {stop}) s"  # (v2: the whole file)
        return copied, f"{path.relative_to(os.path.realpath(root))}{segment}"
    out = np.empty((n, *shape), np.uint8) if len(shape) == 3 else None
    got = 0
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
            if float(start) > 0 and stream.time_base:  # to the key frame before the segment: not from 0
                container.seek(
                    int(float(start) / stream.time_base), stream=stream, backward=True, any_frame=False
                )
            half = 0.5 / float(fps)  # a frame belongs to the segment by its presentation time
            for frame in container.decode(stream):
                if frame.pts is None or frame.time_base is None:
                    continue
                t = float(frame.pts * frame.time_base)
                if t < float(start) - half:
                    continue
                if t >= float(stop) - half or got >= n:
                    break
                image = frame.to_ndarray(format="gray" if shape[-1:] == (1,) else "rgb24")
                if image.ndim == 2:
                    image = image[:, :, None]
                if out is None or image.shape != out.shape[1:]:
                    raise CorruptFileError(path, f"frame of shape {image.shape}; info.json says {shape}")
                out[got] = image
                got += 1
    except RLArrowError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:  # (FFmpeg's errors, a file cut short)
        raise CorruptFileError(path, f"the video cannot be decoded ({type(exc).__name__}: {exc})") from exc
    if got != n:
        raise CorruptFileError(
            path,
            f"episode {ep['episode_index']}'s segment {start}..{stop} s holds {got} "
            f"frames; the episode has {n}: the dataset is damaged",
        )
    return out


def _formatted(root: Path, template: str, **names: Any) -> Path:
    """A path template of info.json (``data_path``, ``video_path``) filled in: a file inside ``root``.

    The template is checked before it is filled in (no field wider than
    :data:`~rlarrow.core.confined.MAX_FORMAT_WIDTH`), and the path it gives must stay inside
    the dataset, symlinks followed (:func:`~rlarrow.core.confined.inside`).
    """
    source = root / "meta" / "info.json"
    check_template(template, source=source)
    try:
        name = template.format(**names)
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise CorruptFileError(
            source,
            f"the path template {template!r} cannot be filled in "
            f"({type(exc).__name__}: {exc}): the dataset is damaged",
        ) from exc
    fields = ", ".join(f"{k}={v!r}" for k, v in names.items())
    return inside(root, name, source=source, what=f"the path template {template!r} ({fields}) gives")


def _type_of(values: Any) -> pa.DataType:
    if isinstance(values, dict):
        return pa.struct([(k, _type_of(v)) for k, v in values.items()])
    return tensor_type(values.dtype, values.shape[1:], layout="auto")


def _steps(columns: dict[str, Any], types: dict[str, Any], run: str, episode_id: int) -> dict[str, Any]:
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
        values = columns[key]
        if values is None:
            continue
        arr = to_arrow(_padded(values), types.get(key) or _type_of(values))
        out[key] = _null_last(arr, last)
    if columns["reward"] is not None:
        out["reward"] = pa.array(np.append(columns["reward"], 0.0), mask=last)
    extra = dict(columns["extra"])
    if extra:
        texts, tags = _metadata.encode_rows({k: v for k, v in extra.items()})
        out["metadata"] = pa.concat_arrays([texts, pa.nulls(1, pa.string())])
        out["metadata_types"] = pa.concat_arrays([tags, pa.nulls(1, pa.string())])
    return out


def _padded(values: Any) -> Any:
    """One more row (a copy of the last, made null afterwards), dicts too."""
    if isinstance(values, dict):
        return {k: _padded(v) for k, v in values.items()}
    return np.concatenate(
        [values, values[-1:] if len(values) else np.zeros((1, *values.shape[1:]), values.dtype)]
    )


def _null_last(arr: pa.Array, last: np.ndarray) -> pa.Array:
    if pa.types.is_struct(arr.type):
        return pa.StructArray.from_arrays(
            [arr.field(i) for i in range(arr.type.num_fields)], fields=list(arr.type), mask=pa.array(last)
        )
    return with_null_rows(arr, last)


def _episode_meta(ep: dict[str, Any]) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for key, value in ep.items():
        if key.startswith("stats/"):
            feature, _, stat = key[len("stats/") :].rpartition("/")
            stats.setdefault(feature, {})[stat] = value
    if isinstance(ep.get("stats"), dict):  # v2.1: episodes_stats.jsonl
        stats = ep["stats"]
    out = {"tasks": ep.get("tasks"), "length": ep.get("length")}
    if stats:
        out["stats"] = stats
    return out


def _specs(features: dict[str, Any]) -> dict[str, Any]:
    obs: dict[str, Any] = {}
    acts: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for key, spec in features.items():
        if spec.get("dtype") == "string":
            continue
        dtype = "uint8" if spec.get("dtype") in ("image", "video") else str(spec.get("dtype"))
        array = {
            "kind": "Array",
            "name": key,
            "shape": [int(d) for d in spec.get("shape") or []],
            "dtype": dtype,
        }
        if key.startswith("observation."):
            obs[key[len("observation.") :]] = array
        elif key == "action":
            out["action_spec"] = array
        elif key.startswith("action."):
            acts[key[len("action.") :]] = array
    if obs:
        out["observation_spec"] = _nest(obs)
    if acts and "action_spec" not in out:
        out["action_spec"] = _nest(acts)
    return out
