"""A run written as a LeRobot dataset: codebase v3.0, or v2.1 for users pinned to older lerobot.

What :func:`export_lerobot` writes is what ``lerobot``'s own ``LeRobotDataset`` loads (tested
with lerobot 0.4.4 for v3.0 and 0.3.3 for v2.1), written without LeRobot:

- one frame per step that has an action (LeRobot keeps no observation after the last action,
  so an episode's final observation is not written, and said in one warning);
- ``observation.*`` from the observation (a struct's fields joined at dots, as the importer
  nests them; a plain one is ``observation.state``, or ``observation.image`` for a frame),
  ``action``, ``next.reward`` (the reward that followed) and ``next.done`` (true on the last
  frame of an episode that ended terminal), ``timestamp`` (frame / fps), ``frame_index``,
  ``episode_index``, ``index`` and ``task_index``;
- camera frames (uint8 ``(H, W, 3)``) as AV1 video (LeRobot's own settings: libsvtav1,
  yuv420p, a key frame every 2 frames, CRF 30: lossy) or, with ``images="png"``, as PNG
  images in the frames (lossless; grayscale frames always are);
- each episode's statistics with LeRobot's keys and shapes (min, max, mean, std, count; the
  quantiles q01 ... q99 in v3.0; images per channel in [0, 1] over LeRobot's sample of
  frames), and the dataset's in ``meta/stats.json``: moments pooled, quantiles those of all
  the values merged (KLL sketches, :func:`rlarrow.core.stats.lerobot_entry`), the same
  definition ``rlarrow stats -o`` writes, where lerobot 0.4 averages episodes' quantiles;
- a run imported from LeRobot keeps its features (names, dtypes, image or video), fps,
  robot type, tasks, each frame's ``timestamp``, ``task_index`` and other features, and
  each episode's tasks: importing the export gives back the same steps (video frames within
  the codec's loss).

Not written: discounts (LeRobot has none), per-step metadata of runs from other formats,
episodes without an action.

Example:
    >>> from rlarrow.io.lerobot import export_lerobot  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_export")  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_v21", codebase="v2.1", images="png")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import metadata as _metadata
from rlarrow.core.confined import file_name_part
from rlarrow.core.errors import ArgumentError, InvalidInputError, MissingDependencyError
from rlarrow.core.stats import DEFAULT_QUANTILES, ColumnStats, ImageStats, image_channel_stats, lerobot_entry
from rlarrow.core.store import StoreLike
from rlarrow.io.lerobot.reading import FRAME_KEYS

__all__ = ["CODEBASES", "IMAGE_MODES", "export_lerobot", "frame_key_stats"]

#: the LeRobot codebase versions :func:`export_lerobot` writes
CODEBASES = ("v3.0", "v2.1")
#: how camera frames are written: ``auto`` (a LeRobot run's own choice per camera, else video
#: where the frames are RGB of even size), ``video`` (AV1, lossy) or ``png`` (lossless)
IMAGE_MODES = ("auto", "video", "png")

_CHUNKS = 1000  # files per chunk directory, LeRobot's default
_DATA_MB, _VIDEO_MB = 100, 200  # v3.0 file sizes, LeRobot's defaults
_V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_V3_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
_V2_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
_V2_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
#: LeRobot's video settings (lerobot's encode_video_frames): AV1, 4:2:0, key frame every 2, CRF 30
_CODEC, _CODEC_NAME, _VIDEO_OPTIONS = "libsvtav1", "av1", {"g": "2", "crf": "30"}
_MIN_SIDE = 4  # SVT-AV1 refuses frames narrower or lower than 4 pixels
_RENAME = (
    "a LeRobot dataset names its video folders after its features (and keys its statistics by "
    "'stats/NAME/...'); rlarrow has no command to rename a field in a store: rename it where the "
    "run came from and import it again"
)


@dataclass
class _Feature:
    """A LeRobot feature: ``kind`` is numeric, string, image (PNG in the frames) or video."""

    kind: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # the per-frame shape; () for scalars (LeRobot's [1])
    spec: dict[str, Any] = field(default_factory=dict)  # info.json's entry

    def check(self, values: np.ndarray, name: str, episode: int) -> np.ndarray:
        if self.kind == "string":
            return values
        if values.shape[1:] != self.shape:
            raise InvalidInputError(
                None,
                f"episode {episode}: {name} has shape {values.shape[1:]}, the first episode's "
                f"{self.shape}: a LeRobot dataset's features have one shape; export the runs apart",
            )
        return values.astype(self.dtype, copy=False)


def export_lerobot(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    codebase: str = "v3.0",
    images: str = "auto",
    fps: int | None = None,
    task: str | None = None,
    progress: bool | None = None,
) -> Path:
    """Write a run as a LeRobot dataset that ``LeRobotDataset`` loads (see the module docs).

    Args:
        store: the store (or its path).
        directory: the dataset directory to write (``meta/``, ``data/``, ``videos/``).
        run_id: the run (needed when the store holds several).
        overwrite: replace what ``directory`` holds.
        codebase: ``"v3.0"`` (lerobot 0.4 and later) or ``"v2.1"`` (lerobot 0.1 to 0.3).
        images: ``"auto"``, ``"video"`` (AV1, lossy, LeRobot's default) or ``"png"``
            (lossless) for uint8 ``(H, W, C)`` observations.
        fps: frames per second (``timestamp``, the videos): the run's own for a LeRobot
            import, else 30 unless given (a LeRobot run's timestamps are then recomputed).
        task: the task of every episode of a run not imported from LeRobot (default: the
            run's name).
        progress: show a progress bar (None: when stderr is a terminal).

    Returns:
        ``directory``.

    Raises:
        ArgumentError: an unknown ``codebase`` or ``images``.
        InvalidInputError: ``directory`` holds something and not ``overwrite``; episodes whose
            features differ in shape; video frames of odd size (use ``images="png"``).
        MissingDependencyError: PyAV for videos (``pip install 'rlarrow[video]'``), Pillow
            for PNG images.

    Example:
        >>> export_lerobot("runs.rlarrow", "my_dataset", codebase="v2.1")  # doctest: +SKIP
    """
    import warnings

    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.progress import bar
    from rlarrow.core.targets import check_target, fresh_directory

    if codebase not in CODEBASES:
        raise ArgumentError(f"codebase={codebase!r}: rlarrow writes LeRobot {' and '.join(CODEBASES)}")
    if images not in IMAGE_MODES:
        raise ArgumentError(f"images={images!r}: one of {', '.join(IMAGE_MODES)}")
    check_target(directory, overwrite=overwrite, what="a LeRobot export")
    with DmEnvRows(store, run_id=run_id) as reader:
        reader.refuse_bytes("a LeRobot dataset")
        meta, info, own = _run_info(reader.run)
        mine = info is not None
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int) or fps < 1):
            raise ArgumentError(f"fps={fps!r}: LeRobot's fps is a positive integer")
        rate = int(fps or own or 30)
        # next.reward where any step has a reward (the run's, not its first episode's: NaN elsewhere)
        rewards = (
            reader.episode_table(slice(None), columns=["reward"]).column("reward").null_count
            < reader.num_steps
        )
        tasks: dict[int, str] = (
            {int(k): str(v) for k, v in meta["tasks"].items()}
            if mine and isinstance(meta.get("tasks"), dict) and meta["tasks"]
            else {0: task or str(reader.run.get("name") or reader.run_id)}
        )
        ep_meta = reader.episode_metadata()
        with (
            fresh_directory(directory, overwrite=overwrite, what="a LeRobot export") as tmp,
            bar(reader.num_episodes, "export lerobot", "episode", progress) as pbar,
        ):
            out = _Dataset(tmp, codebase, rate, images, info)
            for k in range(reader.num_episodes):
                frames = _frames(reader, k, mine, rate, timestamps=rate == own, rewards=rewards)
                if frames is not None:
                    em = ep_meta[k] if isinstance(ep_meta[k], dict) else {}
                    names = em.get("tasks") if mine and isinstance(em.get("tasks"), list) else None
                    out.add(frames, [str(t) for t in names] if names else [tasks[min(tasks)]])
                else:
                    out.skipped += 1
                pbar.update(1)
            out.finish(tasks, robot_type=info.get("robot_type") if info else None)
    if out.skipped or out.finals:
        warnings.warn(
            f"{directory}: LeRobot keeps no observation after an episode's last action: "
            f"{out.finals} final observation(s) not written"
            + (f"; {out.skipped} episode(s) without an action left out" if out.skipped else ""),
            stacklevel=2,
        )
    return Path(directory)


def frame_key_stats(
    store: StoreLike,
    runs: Iterable[str],
    *,
    episodes: Collection[tuple[str, int]] | None = None,
    weights: Mapping[str, float] | None = None,
    quantiles: bool = True,
) -> dict[str, dict[str, np.ndarray]]:
    """The statistics of LeRobot's bookkeeping features, as :func:`export_lerobot` writes them.

    ``timestamp``, ``frame_index``, ``episode_index``, ``index`` and ``task_index`` (LeRobot's
    ``FRAME_KEYS``) of the frames an export of these episodes writes: the steps with an
    action; timestamps the run's own for a LeRobot import, else frame / fps (30 unless the
    run's ``info.json`` says); episodes numbered from 0 and frames from 0 over the runs in the
    order given, each run's episodes in its order (``episodes``: only these ``(run_id,
    episode_id)``); ``task_index`` the run's own, else 0 (the export's one task). Each entry
    has LeRobot's keys and shapes; the quantiles (``quantiles``, and ``datasketches``
    installed) are those of the values merged. With ``weights`` (``{run_id: w}``) each run's
    statistics are mixed with its weight (:meth:`ColumnStats.combine`); runs of weight 0
    are left out. ``rlarrow stats -o`` adds these to the data features' statistics.

    Example:
        >>> frame_key_stats("pusht.rlarrow", ["pusht"])["index"]["max"]  # doctest: +SKIP
        array([18])
    """
    from rlarrow.core.dm_env_rows import DmEnvRows

    features: dict[str, _Feature] = {}
    parts: dict[str, list[tuple[str, ColumnStats]]] = {}
    episode = first = 0
    for run_id in runs:
        if weights is not None and not float(weights.get(run_id, 0.0)) > 0:
            continue
        with DmEnvRows(store, run_id=run_id) as reader:
            _, info, own = _run_info(reader.run)
            rate = own or 30
            schema = reader.store.schema("steps")
            have = set(schema.names) if schema is not None else set()
            if "action" not in have:
                continue  # (no frames: the export refuses such a run)
            columns = ["is_last", "action"] + (["metadata", "metadata_types"] if info is not None else [])
            columns = [c for c in columns if c in have]
            for k in range(reader.num_episodes):
                if episodes is not None and (run_id, int(reader.episode_ids[k])) not in episodes:
                    continue
                table = reader.episode_table(k, columns=columns)
                n = _frame_count(table)
                if not n:
                    continue
                values = _frame_keys(table, n, info is not None, rate, timestamps=rate == own)
                values.update(_numbering(n, episode, first))
                for name in FRAME_KEYS:
                    if name not in features:  # fixed by the first frames, as the export's
                        features[name] = _numeric_feature(name, values[name], info)
                    feature = features[name]
                    stats = _column_stats(feature.check(values[name], name, episode), feature)
                    assert isinstance(stats, ColumnStats)  # (numeric)
                    parts.setdefault(name, []).append((run_id, stats))
                episode, first = episode + 1, first + n
    out = {}
    for name, got in parts.items():
        if weights is None:
            whole = ColumnStats.combine([p for _, p in got])
        else:
            order = list(dict.fromkeys(run for run, _ in got))
            per_run = [ColumnStats.combine([p for r, p in got if r == run]) for run in order]
            whole = ColumnStats.combine(per_run, weights=[float(weights[run]) for run in order])
        out[name] = _entry(whole, features[name], quantiles=quantiles)
    return out


def _flat(values: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(values, dict):
        return {prefix: values}
    out: dict[str, Any] = {}
    for key, value in values.items():
        out.update(_flat(value, f"{prefix}.{key}"))
    return out


def _has_nulls(arr: Any) -> bool:
    """Whether any value of a column (a struct's fields too) is null."""
    if arr.null_count:
        return True
    if isinstance(arr, pa.ChunkedArray):
        return any(_has_nulls(chunk) for chunk in arr.chunks)
    if pa.types.is_struct(arr.type):
        return any(_has_nulls(arr.field(i)) for i in range(arr.type.num_fields))
    return False


def _frames(
    reader: Any, k: int, mine: bool, rate: int, *, timestamps: bool, rewards: bool
) -> dict[str, Any] | None:
    """Episode ``k``'s frames (the steps with an action) as {feature: array}, or None if it has none.

    ``timestamps``: keep a LeRobot run's own ``timestamp`` (false when the fps changes);
    ``rewards``: write ``next.reward`` (NaN where a step has none).
    """
    from rlarrow.core.tensors import to_numpy

    table = reader.episode_table(k)
    rows = table.num_rows
    names = table.column_names
    n = _frame_count(table)
    if not n:
        return None
    action = table.column("action")
    episode = int(reader.episode_ids[k])
    out: dict[str, Any] = {"_final": False}
    for name in ("observation", "action"):
        if name in names and _has_nulls(table.column(name).slice(0, n)):
            raise InvalidInputError(
                None,
                f"episode {episode}: a step before the last has a null {name} (or a null field of it); "
                "a LeRobot frame needs every value: delete the episode or export the others",
            )
    if "observation" in names and table.column("observation").null_count < rows:
        column = table.column("observation")
        obs = to_numpy(column.slice(0, n))
        out["_final"] = n < rows and column[n].is_valid
        if isinstance(obs, dict):
            out.update(_flat(obs, "observation"))
        else:
            out["observation"] = obs  # named by _Dataset (observation, .state or .image)
    out.update(_flat(to_numpy(action.slice(0, n)), "action"))
    if rewards and "reward" in names:
        out["next.reward"] = (
            table.column("reward").slice(0, n).to_numpy(zero_copy_only=False).astype(np.float64)
        )
    done = np.zeros(n, bool)
    if n < rows:
        done[-1] = bool(table.column("is_terminal")[n].as_py())
    out["next.done"] = done
    out.update(_frame_keys(table, n, mine, rate, timestamps=timestamps))
    return out


def _run_info(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None, int | None]:
    """A run's metadata, its LeRobot ``info.json`` (None unless imported from LeRobot) and fps."""
    meta = _metadata.decode(run.get("metadata"), run.get("metadata_types"))
    meta = meta if isinstance(meta, dict) else {}
    info = meta.get("info") if run.get("source") == "lerobot" else None
    if not (isinstance(info, dict) and isinstance(info.get("features"), dict)):
        return meta, None, None
    return meta, info, int(info["fps"]) if isinstance(info.get("fps"), int) else None


def _frame_count(table: pa.Table) -> int:
    """How many of an episode's first rows are LeRobot frames (0: none).

    A frame is a step with an action: an episode that ended (``is_last``, or a null last
    action) leaves its final observation out. ``table`` needs ``is_last`` and ``action``.
    """
    rows = table.num_rows
    if rows == 0 or "action" not in table.column_names:
        return 0
    action = table.column("action")
    last = table.column("is_last").to_numpy(zero_copy_only=False)
    ended = bool(last[-1]) or not action[rows - 1].is_valid
    n = rows - 1 if ended else rows
    return 0 if n <= 0 or action.null_count >= rows else n


def _frame_keys(table: pa.Table, n: int, mine: bool, rate: int, *, timestamps: bool) -> dict[str, Any]:
    """An episode's first ``n`` rows' ``timestamp``, ``frame_index`` and ``task_index``.

    For a LeRobot run (``mine``) also the other frame features its import kept as step
    metadata. ``timestamps``: a LeRobot run's own (false when the fps changes them); else frame / ``rate``.
    ``table`` needs ``metadata`` and ``metadata_types`` for a LeRobot run.
    """
    out: dict[str, Any] = {}
    if mine and "metadata" in table.column_names:  # the frame features the import kept as step metadata
        rows_meta = _metadata.decode_column(
            table.column("metadata").slice(0, n).to_pylist(),
            table.column("metadata_types").slice(0, n).to_pylist(),
        )
        keys = [key for key in (rows_meta[0] or {}) if isinstance(key, str)] if rows_meta else []
        for key in keys:
            if key == "timestamp" and not timestamps:
                continue
            values = [r.get(key) if isinstance(r, dict) else None for r in rows_meta]
            if any(isinstance(v, str) for v in values):
                out[key] = np.asarray(values, dtype=object)
            else:
                out[key] = np.asarray(values)
    out.setdefault("timestamp", (np.arange(n) / rate).astype(np.float32))
    out["frame_index"] = np.arange(n, dtype=np.int64)
    out.setdefault("task_index", np.zeros(n, np.int64))
    return out


def _numbering(n: int, episode: int, first: int) -> dict[str, np.ndarray]:
    """An exported episode's ``episode_index`` and ``index`` (its frames' places in the dataset)."""
    return {"episode_index": np.full(n, episode, np.int64),
            "index": np.arange(first, first + n, dtype=np.int64)}


def _numeric_feature(name: str, values: np.ndarray, info: dict[str, Any] | None) -> _Feature:
    """A numeric feature: the LeRobot run's own dtype (``info``), else the values'."""
    original = dict(((info or {}).get("features") or {}).get(name) or {})
    dtype = (
        np.dtype(original["dtype"])
        if original.get("dtype") not in (None, "image", "video")
        else values.dtype
    )
    if dtype.kind not in "biuf":
        raise InvalidInputError(
            None, f"{name}: values of dtype {values.dtype} have no LeRobot feature type"
        )
    spec = {"dtype": dtype.name, "shape": list(values.shape[1:]) or [1], "names": original.get("names")}
    return _Feature("numeric", dtype, tuple(values.shape[1:]), spec)


def _is_frame(values: np.ndarray) -> bool:
    return values.dtype == np.uint8 and values.ndim == 4 and values.shape[-1] in (1, 3)


class _Dataset:
    """The dataset being written: features fixed by the first episode, files, statistics."""

    def __init__(self, root: Path, codebase: str, fps: int, images: str, info: dict[str, Any] | None) -> None:
        self.root, self.codebase, self.fps, self.images, self.info = root, codebase, fps, images, info
        self.features: dict[str, _Feature] | None = None
        self.episodes: list[dict[str, Any]] = []
        self.ep_stats: list[dict[str, dict[str, np.ndarray]]] = []
        self.merged: dict[str, list[ColumnStats | ImageStats]] = {}  # per feature, each episode's
        self.frames = 0
        self.skipped = self.finals = 0
        self.data: _DataFiles | None = None
        self.videos: dict[str, _Videos] = {}

    # ------------------------------------------------------------------ features

    def _name_plain(self, values: np.ndarray) -> str:
        original = (self.info or {}).get("features", {})
        if "observation" in original:
            return "observation"
        return "observation.image" if _is_frame(values) else "observation.state"

    def _feature(self, name: str, values: np.ndarray) -> _Feature:
        original = dict(((self.info or {}).get("features") or {}).get(name) or {})
        if values.dtype == object:
            if any(isinstance(v, bytes) for v in values):
                raise InvalidInputError(
                    None,
                    f"{name} holds bytes (images kept encoded by an RLDS import?); LeRobot features are "
                    "numbers, text and images: import the dataset with its images decoded to export it",
                )
            return _Feature("string", np.dtype(object), (), {"dtype": "string", "shape": [1], "names": None})
        shape = tuple(values.shape[1:])
        frame = _is_frame(values)
        if frame:
            kind = original.get("dtype") if self.images == "auto" and original else None
            encodable = not (shape[0] % 2 or shape[1] % 2) and min(shape[:2]) >= _MIN_SIDE
            if kind not in ("image", "video"):
                kind = "png" if self.images == "png" else "video"
                if self.images == "auto" and not encodable:
                    kind = "png"
                kind = "image" if kind == "png" or shape[-1] == 1 else "video"
            if kind == "video" and (not encodable or shape[-1] != 3):
                raise InvalidInputError(
                    None,
                    f"{name}: frames of shape {shape} cannot be AV1 video (it needs an even height and "
                    f"width of {_MIN_SIDE} or more, and 3 channels); export with images='png' (--images png)",
                )
            spec = {
                "dtype": kind,
                "shape": list(shape),
                "names": original.get("names") or ["height", "width", "channels"],
            }
            if kind == "video":
                spec["info"] = {
                    "video.height": shape[0],
                    "video.width": shape[1],
                    "video.codec": _CODEC_NAME,
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": 3,
                    "has_audio": False,
                }
            return _Feature(kind, np.dtype(np.uint8), shape, spec)
        return _numeric_feature(name, values, self.info)

    def _fix(self, frames: dict[str, Any]) -> dict[str, _Feature]:
        order = list((self.info or {}).get("features") or {})
        keys = [k for k in frames if not k.startswith("_") and k not in FRAME_KEYS]
        if self.info is not None:  # a LeRobot run's own features, next.* only where it had them
            keys = [k for k in keys if not k.startswith("next.") or k in order]
        keys.sort(key=lambda k: order.index(k) if k in order else len(order))
        keys += list(FRAME_KEYS)
        for key in keys:  # (a camera's name is a folder of videos/; names come from the store's fields)
            file_name_part(key, what="the LeRobot feature", fix=_RENAME)
        features = {k: self._feature(k, frames[k]) for k in keys}
        for name, f in features.items():
            # lerobot 0.1-0.3 takes every feature named *image* for an RGB camera: its statistics
            # must be (3, 1, 1), or LeRobotDataset refuses to load the dataset
            if (
                self.codebase == "v2.1"
                and "image" in name
                and (f.kind not in ("image", "video") or f.shape[-1] != 3)
            ):
                raise InvalidInputError(
                    None,
                    f"{name}: lerobot 0.3 and older (codebase v2.1) take a feature named 'image' for a "
                    f"3-channel camera and refuse to load one of shape {f.shape}; export as codebase "
                    "v3.0 (lerobot 0.4 on)",
                )
        return features

    # ------------------------------------------------------------------ episodes

    def add(self, frames: dict[str, Any], ep_tasks: list[str]) -> None:
        e = len(self.episodes)
        n = len(frames["frame_index"])
        frames.update(_numbering(n, e, self.frames))
        if "observation" in frames:
            plain = frames.pop("observation")
            frames[self._name_plain(plain)] = plain
        if self.features is None:
            self.features = self._fix(frames)
            self.data = _DataFiles(self.root, self.codebase, self.features)
        self.finals += bool(frames["_final"])
        values: dict[str, np.ndarray] = {}
        for name, feature in self.features.items():
            if name not in frames:
                raise InvalidInputError(None, f"episode {e} has no {name}, which the first episode has")
            values[name] = feature.check(frames[name], name, e)
        row: dict[str, Any] = {"episode_index": e, "tasks": ep_tasks, "length": n}
        row.update(self.data.write(values, e))  # type: ignore[union-attr]
        for name, feature in self.features.items():
            if feature.kind == "video":
                videos = self.videos.get(name)
                if videos is None:
                    videos = self.videos[name] = _Videos(self.root, self.codebase, name, self.fps)
                row.update(videos.write(values[name], e))
        row["dataset_from_index"], row["dataset_to_index"] = self.frames, self.frames + n
        stats = {}
        for name, feature in self.features.items():
            if feature.kind == "string":
                continue
            self.merged.setdefault(name, []).append(_column_stats(values[name], feature))
            stats[name] = _entry(self.merged[name][-1], feature, quantiles=self.codebase != "v2.1")
        self.ep_stats.append(stats)
        self.episodes.append(row)
        self.frames += n

    # ------------------------------------------------------------------ meta/

    def finish(self, tasks: dict[int, str], robot_type: Any) -> None:
        if not self.episodes:
            raise InvalidInputError(
                None, "the run has no episode with an action: a LeRobot dataset needs one"
            )
        if self.data is not None:
            self.data.close()
        for videos in self.videos.values():
            videos.close()
        features = {name: f.spec for name, f in (self.features or {}).items()}
        info: dict[str, Any] = {
            "codebase_version": self.codebase,
            "robot_type": robot_type,
            "total_episodes": len(self.episodes),
            "total_frames": self.frames,
            "total_tasks": len(tasks),
        }
        meta = self.root / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        if self.codebase == "v2.1":
            info.update(
                total_videos=len(self.videos) * len(self.episodes),
                total_chunks=max(1, -(-len(self.episodes) // _CHUNKS)),
                chunks_size=_CHUNKS,
                fps=self.fps,
                splits={"train": f"0:{len(self.episodes)}"},
                data_path=_V2_DATA,
                video_path=_V2_VIDEO if self.videos else None,
                features=features,
            )
            _jsonl(
                meta / "episodes.jsonl",
                [
                    {"episode_index": r["episode_index"], "tasks": r["tasks"], "length": r["length"]}
                    for r in self.episodes
                ],
            )
            _jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": t} for i, t in sorted(tasks.items())])
            _jsonl(
                meta / "episodes_stats.jsonl",
                [{"episode_index": e, "stats": _listed(s)} for e, s in enumerate(self.ep_stats)],
            )
        else:
            info.update(
                chunks_size=_CHUNKS,
                data_files_size_in_mb=_DATA_MB,
                video_files_size_in_mb=_VIDEO_MB,
                fps=self.fps,
                splits={"train": f"0:{len(self.episodes)}"},
                data_path=_V3_DATA,
                video_path=_V3_VIDEO if self.videos else None,
                features=features,
            )
            rows = []
            for row, stats in zip(self.episodes, self.ep_stats, strict=True):
                flat = dict(row)
                for name, values in stats.items():
                    for stat, value in values.items():
                        flat[f"stats/{name}/{stat}"] = value.tolist()
                flat["meta/episodes/chunk_index"], flat["meta/episodes/file_index"] = 0, 0
                rows.append(flat)
            (meta / "episodes" / "chunk-000").mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(rows), meta / "episodes" / "chunk-000" / "file-000.parquet")
            _write_tasks(meta / "tasks.parquet", tasks)
            (meta / "stats.json").write_text(json.dumps(_listed(self._aggregate()), indent=4))
        (meta / "info.json").write_text(json.dumps(info, indent=4))

    def _aggregate(self) -> dict[str, dict[str, np.ndarray]]:
        """The dataset's statistics: every episode's merged (moments pooled, quantiles of all values)."""
        out = {}
        for name, parts in self.merged.items():
            images = [p for p in parts if isinstance(p, ImageStats)]
            whole = ImageStats.combine(images) if images else ColumnStats.combine(
                [p for p in parts if isinstance(p, ColumnStats)])
            out[name] = _entry(whole, (self.features or {})[name], quantiles=True)
        return out


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _write_tasks(path: Path, tasks: dict[int, str]) -> None:
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


def _hf_feature(feature: _Feature, codebase: str) -> dict[str, Any]:
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


def _column(values: np.ndarray, feature: _Feature, name: str) -> pa.Array:
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


class _DataFiles:
    """The frames' Parquet files: v3.0 many episodes a file (up to 100 MB), v2.1 one an episode."""

    def __init__(self, root: Path, codebase: str, features: dict[str, _Feature]) -> None:
        self.root, self.codebase, self.features = root, codebase, features
        columns = [name for name, f in features.items() if f.kind != "video"]
        hf = {"info": {"features": {name: _hf_feature(features[name], codebase) for name in columns}}}
        self.metadata = {"huggingface": json.dumps(hf)}
        self.columns = columns
        self.writer: pq.ParquetWriter | None = None
        self.number = 0
        self.size = 0

    def write(self, values: dict[str, np.ndarray], episode: int) -> dict[str, Any]:
        table = pa.table({name: _column(values[name], self.features[name], name) for name in self.columns})
        table = table.replace_schema_metadata(self.metadata)
        if self.codebase == "v2.1":
            path = self.root / _V2_DATA.format(episode_chunk=episode // _CHUNKS, episode_index=episode)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            return {}
        if self.writer is not None and self.size >= _DATA_MB * 2**20:
            self.close()
            self.number += 1
        chunk, file = divmod(self.number, _CHUNKS)
        if self.writer is None:
            path = self.root / _V3_DATA.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer, self.size = pq.ParquetWriter(path, table.schema), 0
        self.writer.write_table(table)
        self.size += table.nbytes
        return {"data/chunk_index": chunk, "data/file_index": file}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _Videos:
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
        self.stream = self.container.add_stream(_CODEC, rate=Fraction(self.fps), options=dict(_VIDEO_OPTIONS))
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.count = self.bytes = 0

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self.bytes += packet.size
            self.container.mux(packet)

    def write(self, frames: np.ndarray, episode: int) -> dict[str, Any]:
        height, width = frames.shape[1:3]
        if self.codebase == "v2.1":
            self._open(
                self.root
                / _V2_VIDEO.format(
                    episode_chunk=episode // _CHUNKS, video_key=self.key, episode_index=episode
                ),
                height,
                width,
            )
        elif self.container is None or self.bytes >= _VIDEO_MB * 2**20:
            if self.container is not None:
                self.close()
                self.number += 1
            chunk, file = divmod(self.number, _CHUNKS)
            self._open(
                self.root / _V3_VIDEO.format(video_key=self.key, chunk_index=chunk, file_index=file),
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
                f"{self.key}: FFmpeg's {_CODEC} encoder refused the frames ({exc}); export with images='png'",
            ) from exc
        chunk, file = divmod(self.number, _CHUNKS)
        prefix = f"videos/{self.key}/"
        return {
            prefix + "chunk_index": chunk,
            prefix + "file_index": file,
            prefix + "from_timestamp": start / self.fps,
            prefix + "to_timestamp": self.count / self.fps,
        }

    def close(self) -> None:
        if self.container is not None:
            self._mux(self.stream.encode(None))
            self.container.close()
            self.container = None


def _column_stats(values: np.ndarray, feature: _Feature) -> ColumnStats | ImageStats:
    """An episode's mergeable statistics of a feature (images: per channel, in [0, 1]).

    Quantiles of numeric features need ``datasketches`` (the ``stats`` extra): without it,
    none are written for them.
    """
    import importlib.util

    if feature.kind in ("image", "video"):
        return image_channel_stats(values)
    shaped = values.reshape(len(values), *(feature.shape or (1,)))
    return ColumnStats.from_array(shaped, sketches=importlib.util.find_spec("datasketches") is not None)


def _entry(stats: ColumnStats | ImageStats, feature: _Feature, *, quantiles: bool) -> dict[str, np.ndarray]:
    """LeRobot's keys and shapes (:func:`rlarrow.core.stats.lerobot_entry`); v2.1 has no quantiles."""
    qs = DEFAULT_QUANTILES if quantiles else ()
    if isinstance(stats, ImageStats):
        return stats.lerobot_entry(qs)
    integer = feature.kind == "numeric" and feature.dtype.kind in "biu"
    return lerobot_entry(stats, integer=integer, quantiles=qs)


def _listed(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {name: {k: v.tolist() for k, v in values.items()} for name, values in stats.items()}
