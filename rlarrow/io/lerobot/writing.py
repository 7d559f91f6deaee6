"""Episodes written as a LeRobot dataset: codebase v3.0, or v2.1 for users pinned to older lerobot.

:func:`write_lerobot` writes any episode source (a dataset another format's ``read_<format>``
read, or a stored run: :func:`rlarrow.core.run_source.read_run`); :func:`export_lerobot` is
``write_lerobot(read_run(store, run_id=...), ...)``. What they write is what ``lerobot``'s own
``LeRobotDataset`` loads (tested with lerobot 0.4.4 for v3.0 and 0.3.3 for v2.1), written
without LeRobot:

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
- a run read from LeRobot (``read_lerobot``, or a store it was imported into) keeps its
  features (names, dtypes, image or video), fps, robot type, tasks, each frame's
  ``timestamp``, ``task_index`` and other features (its steps' typed ``infos``, or the step
  metadata of a store written by rlarrow with steps 1.0), and each episode's tasks:
  importing the export gives back the same steps (video frames within the codec's loss).

Not written: discounts (LeRobot has none), per-step metadata of runs from other formats,
episodes without an action. :mod:`~rlarrow.io.lerobot.episode_frames` makes steps frames,
:mod:`~rlarrow.io.lerobot.dataset_files` writes the files, :mod:`~rlarrow.io.lerobot.stats` the
statistics.

Example:
    >>> from rlarrow.io.lerobot import export_lerobot, write_lerobot  # doctest: +SKIP
    >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
    >>> write_lerobot(read_minari("cartpole-v0"), "cartpole_lerobot")  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_export")  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_v21", codebase="v2.1", images="png")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import metadata as _metadata
from rlarrow.core.confined import file_name_part
from rlarrow.core.errors import ArgumentError, InvalidInputError
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.stats import ColumnStats, ImageStats
from rlarrow.core.store import StoreLike
from rlarrow.io.lerobot.dataset_files import (
    CHUNKS,
    CODEC_NAME,
    DATA_MB,
    MIN_SIDE,
    V2_DATA,
    V2_VIDEO,
    V3_DATA,
    V3_VIDEO,
    VIDEO_MB,
    DataFiles,
    Videos,
    write_jsonl,
    write_tasks,
)
from rlarrow.io.lerobot.dataset_meta import FRAME_KEYS
from rlarrow.io.lerobot.episode_frames import episode_frames, numbering, run_info
from rlarrow.io.lerobot.features import Feature, is_frame, numeric_feature
from rlarrow.io.lerobot.stats import column_stats, frame_key_stats, listed, stats_entry

__all__ = ["LeRobotOptions", "export_lerobot", "frame_key_stats", "write_lerobot"]

#: the LeRobot codebase versions :func:`write_lerobot` writes
CODEBASES = ("v3.0", "v2.1")
#: how camera frames are written: ``auto`` (a LeRobot run's own choice per camera, else video
#: where the frames are RGB of even size), ``video`` (AV1, lossy) or ``png`` (lossless)
IMAGE_MODES = ("auto", "video", "png")

_RENAME = (
    "a LeRobot dataset names its video folders after its features (and keys its statistics by "
    "'stats/NAME/...'); rlarrow has no command to rename a field in a store: rename it where the "
    "run came from and import it again"
)


@dataclass(frozen=True)
class LeRobotOptions:
    """How a LeRobot dataset is written (checked when made).

    Attributes:
        codebase: ``"v3.0"`` (lerobot 0.4 and later) or ``"v2.1"`` (lerobot 0.1 to 0.3).
        images: ``"auto"``, ``"video"`` (AV1, lossy, LeRobot's default) or ``"png"``
            (lossless) for uint8 ``(H, W, C)`` observations.
        fps: frames per second (``timestamp``, the videos): a LeRobot run's own, else 30
            unless given (a LeRobot run's timestamps are then recomputed).
        task: the task of every episode of a run not read from LeRobot (default: the run's name).

    Example:
        >>> LeRobotOptions(codebase="v2.1", images="png").fps is None
        True
    """

    codebase: str = "v3.0"
    images: str = "auto"
    fps: int | None = None
    task: str | None = None

    def __post_init__(self) -> None:
        if self.codebase not in CODEBASES:
            raise ArgumentError(f"codebase={self.codebase!r}: rlarrow writes LeRobot "
                                f"{' and '.join(CODEBASES)}")
        if self.images not in IMAGE_MODES:
            raise ArgumentError(f"images={self.images!r}: one of {', '.join(IMAGE_MODES)}")
        fps = self.fps
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int) or fps < 1):
            raise ArgumentError(f"fps={fps!r}: LeRobot's fps is a positive integer")


def write_lerobot(source: EpisodeSource, directory: str | os.PathLike[str], *, overwrite: bool = False,
                  codebase: str = "v3.0", images: str = "auto", fps: int | None = None,
                  task: str | None = None, progress: bool | None = None) -> Path:
    """Write an episode source (any format's ``read_<format>``, or a stored run) as a LeRobot dataset.

    See the module docs for what is written and :class:`LeRobotOptions` for ``codebase``,
    ``images``, ``fps`` and ``task``. The dataset is written beside ``directory`` and moved
    there whole once written: a failure leaves ``directory`` as it was. ``next.reward`` is
    written where the first episode has rewards.

    Returns:
        ``directory``.

    Raises:
        ArgumentError: an unknown ``codebase`` or ``images``, or an ``fps`` that is not a
            positive integer.
        InvalidInputError: ``directory`` holds something and not ``overwrite``; episodes whose
            features differ in shape; video frames of odd size (write ``images="png"``);
            observations that hold bytes (images kept encoded).
        MissingDependencyError: PyAV for videos (``pip install 'rlarrow[video]'``), Pillow
            for PNG images.

    Example:
        >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
        >>> write_lerobot(read_minari("cartpole-v0"), "cartpole_lerobot", images="png")  # doctest: +SKIP
    """
    from rlarrow.core.targets import check_target

    options = LeRobotOptions(codebase=codebase, images=images, fps=fps, task=task)
    check_target(directory, overwrite=overwrite, what="a LeRobot export")
    return _write(source, directory, options, overwrite=overwrite, progress=progress)


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
    """Write a run as a LeRobot dataset that ``LeRobotDataset`` loads: ``write_lerobot(read_run(...))``.

    What the source does not carry is read of the store: whether any of the run's steps has
    a reward (``next.reward`` is then written, NaN where a step has none), and whether its
    observation or action holds bytes (refused before anything is written).

    Args:
        store: the store (or its path).
        directory: the dataset directory to write (``meta/``, ``data/``, ``videos/``).
        run_id: the run (needed when the store holds several).
        overwrite: replace what ``directory`` holds.
        codebase: see :class:`LeRobotOptions`.
        images: see :class:`LeRobotOptions`.
        fps: see :class:`LeRobotOptions`.
        task: see :class:`LeRobotOptions`.
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
    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.run_source import read_run
    from rlarrow.core.targets import check_target

    options = LeRobotOptions(codebase=codebase, images=images, fps=fps, task=task)
    check_target(directory, overwrite=overwrite, what="a LeRobot export")
    with DmEnvRows(store, run_id=run_id) as reader:
        reader.refuse_bytes("a LeRobot dataset")
        # next.reward where any step has a reward (the run's, not its first episode's: NaN elsewhere)
        rewards = (
            reader.episode_table(slice(None), columns=["reward"]).column("reward").null_count
            < reader.num_steps
        )
        run, version = reader.run_id, reader.store.version
    with read_run(store, run_id=run, version=version) as source:
        return _write(source, directory, options, overwrite=overwrite, progress=progress, rewards=rewards)


def _write(source: EpisodeSource, directory: str | os.PathLike[str], options: LeRobotOptions, *,
           overwrite: bool, progress: bool | None, rewards: bool | None = None) -> Path:
    """Write the dataset (``rewards``: write ``next.reward``; None: where the first episode has rewards)."""
    import warnings

    from rlarrow.core.progress import bar
    from rlarrow.core.targets import fresh_directory

    meta, info, own = run_info(source.run.source, source.run.metadata)
    mine = info is not None
    rate = int(options.fps or own or 30)
    tasks: dict[int, str] = (
        {int(k): str(v) for k, v in meta["tasks"].items()}
        if mine and isinstance(meta.get("tasks"), dict) and meta["tasks"]
        else {0: options.task or str(source.run.name or source.run_id)}
    )
    with (
        fresh_directory(directory, overwrite=overwrite, what="a LeRobot export") as tmp,
        bar(source.episodes_hint, "export lerobot", "episode", progress) as pbar,
    ):
        out = _Dataset(tmp, options.codebase, rate, options.images, info)
        for table, row in source.by_episode():
            if rewards is None and table.num_rows:
                rewards = "reward" in table.column_names and \
                    table.column("reward").null_count < table.num_rows
            frames = episode_frames(table, mine, rate, timestamps=rate == own, rewards=bool(rewards))
            if frames is not None:
                em = _metadata.decode(row.get("metadata"), row.get("metadata_types")) if row else None
                names = em.get("tasks") if mine and isinstance(em, dict) \
                    and isinstance(em.get("tasks"), list) else None
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
            stacklevel=3,
        )
    return Path(directory)


class _Dataset:
    """The dataset being written: features fixed by the first episode, files, statistics."""

    def __init__(self, root: Path, codebase: str, fps: int, images: str, info: dict[str, Any] | None) -> None:
        self.root, self.codebase, self.fps, self.images, self.info = root, codebase, fps, images, info
        self.features: dict[str, Feature] | None = None
        self.episodes: list[dict[str, Any]] = []
        self.ep_stats: list[dict[str, dict[str, np.ndarray]]] = []
        self.merged: dict[str, list[ColumnStats | ImageStats]] = {}  # per feature, each episode's
        self.frames = 0
        self.skipped = self.finals = 0
        self.data: DataFiles | None = None
        self.videos: dict[str, Videos] = {}

    # ------------------------------------------------------------------ features

    def _name_plain(self, values: np.ndarray) -> str:
        original = (self.info or {}).get("features", {})
        if "observation" in original:
            return "observation"
        return "observation.image" if is_frame(values) else "observation.state"

    def _feature(self, name: str, values: np.ndarray) -> Feature:
        original = dict(((self.info or {}).get("features") or {}).get(name) or {})
        if values.dtype == object:
            if any(isinstance(v, bytes) for v in values):
                raise InvalidInputError(
                    None,
                    f"{name} holds bytes (images kept encoded by an RLDS import?); LeRobot features are "
                    "numbers, text and images: import the dataset with its images decoded to export it",
                )
            return Feature("string", np.dtype(object), (), {"dtype": "string", "shape": [1], "names": None})
        shape = tuple(values.shape[1:])
        frame = is_frame(values)
        if frame:
            kind = original.get("dtype") if self.images == "auto" and original else None
            encodable = not (shape[0] % 2 or shape[1] % 2) and min(shape[:2]) >= MIN_SIDE
            if kind not in ("image", "video"):
                kind = "png" if self.images == "png" else "video"
                if self.images == "auto" and not encodable:
                    kind = "png"
                kind = "image" if kind == "png" or shape[-1] == 1 else "video"
            if kind == "video" and (not encodable or shape[-1] != 3):
                raise InvalidInputError(
                    None,
                    f"{name}: frames of shape {shape} cannot be AV1 video (it needs an even height and "
                    f"width of {MIN_SIDE} or more, and 3 channels); export with images='png'",
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
                    "video.codec": CODEC_NAME,
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": 3,
                    "has_audio": False,
                }
            return Feature(kind, np.dtype(np.uint8), shape, spec)
        return numeric_feature(name, values, self.info)

    def _fix(self, frames: dict[str, Any]) -> dict[str, Feature]:
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
        frames.update(numbering(n, e, self.frames))
        if "observation" in frames:
            plain = frames.pop("observation")
            frames[self._name_plain(plain)] = plain
        if self.features is None:
            self.features = self._fix(frames)
            self.data = DataFiles(self.root, self.codebase, self.features)
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
                    videos = self.videos[name] = Videos(self.root, self.codebase, name, self.fps)
                row.update(videos.write(values[name], e))
        row["dataset_from_index"], row["dataset_to_index"] = self.frames, self.frames + n
        stats = {}
        for name, feature in self.features.items():
            if feature.kind == "string":
                continue
            self.merged.setdefault(name, []).append(column_stats(values[name], feature))
            stats[name] = stats_entry(self.merged[name][-1], feature, quantiles=self.codebase != "v2.1")
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
                total_chunks=max(1, -(-len(self.episodes) // CHUNKS)),
                chunks_size=CHUNKS,
                fps=self.fps,
                splits={"train": f"0:{len(self.episodes)}"},
                data_path=V2_DATA,
                video_path=V2_VIDEO if self.videos else None,
                features=features,
            )
            write_jsonl(
                meta / "episodes.jsonl",
                [
                    {"episode_index": r["episode_index"], "tasks": r["tasks"], "length": r["length"]}
                    for r in self.episodes
                ],
            )
            write_jsonl(meta / "tasks.jsonl",
                        [{"task_index": i, "task": t} for i, t in sorted(tasks.items())])
            write_jsonl(
                meta / "episodes_stats.jsonl",
                [{"episode_index": e, "stats": listed(s)} for e, s in enumerate(self.ep_stats)],
            )
        else:
            info.update(
                chunks_size=CHUNKS,
                data_files_size_in_mb=DATA_MB,
                video_files_size_in_mb=VIDEO_MB,
                fps=self.fps,
                splits={"train": f"0:{len(self.episodes)}"},
                data_path=V3_DATA,
                video_path=V3_VIDEO if self.videos else None,
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
            write_tasks(meta / "tasks.parquet", tasks)
            (meta / "stats.json").write_text(json.dumps(listed(self._aggregate()), indent=4))
        (meta / "info.json").write_text(json.dumps(info, indent=4))

    def _aggregate(self) -> dict[str, dict[str, np.ndarray]]:
        """The dataset's statistics: every episode's merged (moments pooled, quantiles of all values)."""
        out = {}
        for name, parts in self.merged.items():
            images = [p for p in parts if isinstance(p, ImageStats)]
            whole = ImageStats.combine(images) if images else ColumnStats.combine(
                [p for p in parts if isinstance(p, ColumnStats)])
            out[name] = stats_entry(whole, (self.features or {})[name], quantiles=True)
        return out

