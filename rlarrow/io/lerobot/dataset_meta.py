"""A LeRobot dataset's metadata: ``info.json``, its episodes, tasks and statistics, checked.

:func:`open_dataset` reads and checks what a dataset says of itself before a frame is read
(codebase, features, fps, path templates, cameras' sizes, the episodes' rows, tasks and
``stats.json``): a damaged or hostile dataset is refused at once, before anything is written.
Paths the dataset names are confined to it (:func:`formatted`).

Example:
    >>> from rlarrow.io.lerobot.dataset_meta import open_dataset  # doctest: +SKIP
    >>> meta = open_dataset(Path("pusht"), "decode")  # doctest: +SKIP
    >>> meta.version, len(meta.episodes)  # doctest: +SKIP
    ('v3.0', 206)

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import metadata as _metadata
from rlarrow.core.confined import MAX_IMAGE_PIXELS, check_template, inside
from rlarrow.core.errors import ArgumentError, CorruptFileError, MissingDependencyError, UnsupportedInputError

__all__: list[str] = []

#: how a LeRobot dataset's video features are read: decoded uint8 frames, or kept as video
VIDEO_MODES = ("decode", "keep")

#: the per-frame bookkeeping features LeRobot adds; kept as each step's typed ``infos``
FRAME_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass(frozen=True)
class DatasetMeta:
    """What a LeRobot dataset says of itself, checked (:func:`open_dataset`).

    Attributes:
        root: the dataset directory.
        info: ``meta/info.json``.
        version: its codebase version (``"v3.0"``).
        features: ``info["features"]``.
        episodes: one dict an episode, in ``episode_index`` order (v3.0: the episodes
            files' rows; v2.x: ``episodes.jsonl``'s, marked ``_v2``).
        tasks: the task texts by ``task_index``.
        stats: ``meta/stats.json``, or None.
        cameras: the ``video`` features.
    """

    root: Path
    info: dict[str, Any]
    version: str
    features: dict[str, Any]
    episodes: list[dict[str, Any]]
    tasks: dict[int, str]
    stats: Any
    cameras: list[str]


def open_dataset(root: Path, video: str) -> DatasetMeta:
    """A dataset's metadata, read and checked before any frame (``video``: one of :data:`VIDEO_MODES`).

    Raises:
        UnsupportedInputError: not a LeRobot dataset, a codebase not read yet, or (``"keep"``)
            an observation of cameras only.
        CorruptFileError: metadata that cannot be read or does not hold together.
        MissingDependencyError: PyAV for a dataset with cameras.
        ArgumentError: an unknown ``video``.
    """
    info = dataset_info(root)
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
    episodes = episode_list(root)
    tasks = task_names(root)
    stats_path = inside(root, "meta/stats.json")
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(stats_path, f"not readable JSON ({exc}): the dataset is damaged") from exc
    if video not in VIDEO_MODES:
        raise ArgumentError(f"video={video!r}: one of {', '.join(VIDEO_MODES)}")
    _check_pixels(root, features)
    for template in ("data_path", "video_path"):  # (before anything is read: a bomb costs nothing)
        if isinstance(info.get(template), str):
            check_template(info[template], source=root / "meta" / "info.json")
    cameras = [k for k, f in features.items() if f.get("dtype") == "video"]
    if cameras:
        _require_av(root, keep=video == "keep")
    if video == "keep" and cameras and not any(
        (k == "observation" or k.startswith("observation.")) and f.get("dtype") != "video"
        for k, f in features.items()
    ):
        raise UnsupportedInputError(
            root,
            "every observation feature is a camera: kept as video, the steps would hold no observation, "
            "which StreamingDataset does not read yet; import it with its cameras decoded",
        )
    if not episodes:
        raise CorruptFileError(root / "meta" / "episodes", "the dataset lists no episodes")
    return DatasetMeta(root, info, version, features, episodes, tasks, stats, cameras)


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


def dataset_info(path: Path) -> dict[str, Any] | None:
    """``meta/info.json`` of the dataset at ``path``, or None where it has none with features."""
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
    info = dataset_info(p)
    version = str((info or {}).get("codebase_version", ""))
    return info is not None and version.startswith(("v2", "v3")) and inside(p, "data").is_dir()


def read_parquet(path: Path, what: str) -> pa.Table:
    """A Parquet file of the dataset (``what`` it is), checked whole."""
    try:
        table = pq.read_table(path)
        table.validate(full=True)
        return table
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(
            path,
            f"{what} cannot be read ({type(exc).__name__}: {exc}); restore the dataset or download it again",
        ) from exc


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Flat names joined at dots made nested dicts (``{"a.b": 1}`` is ``{"a": {"b": 1}}``)."""
    return _metadata.nest(flat, sep=".")


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


def read_jsonl(path: Path) -> list[Any]:
    """The rows of a JSON-lines file of the dataset."""
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"not readable JSON lines ({exc}): the dataset is damaged") from exc


def _episodes_v2(root: Path) -> list[dict[str, Any]]:
    """v2.0/v2.1: meta/episodes.jsonl, with each episode's stats from episodes_stats.jsonl (v2.1)."""
    path = inside(root, "meta/episodes.jsonl")
    if not path.is_file():
        raise CorruptFileError(path, "missing: a LeRobot v2 dataset lists its episodes there")
    rows = [r for r in read_jsonl(path) if isinstance(r, dict)]
    stats_path = inside(root, "meta/episodes_stats.jsonl")
    stats = (
        {r.get("episode_index"): r.get("stats") for r in read_jsonl(stats_path) if isinstance(r, dict)}
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


def episode_list(root: Path) -> list[dict[str, Any]]:
    """The dataset's episodes, one dict each, in ``episode_index`` order (v3.0 or v2.x)."""
    if inside(root, "meta/episodes.jsonl").is_file() and not inside(root, "meta/episodes").is_dir():
        return _episodes_v2(root)
    files = _listed(root, "meta/episodes", "chunk-*", "file-*.parquet")
    if not files:
        raise CorruptFileError(
            root / "meta" / "episodes", "no episode files (meta/episodes/chunk-*/file-*.parquet)"
        )
    rows: list[dict[str, Any]] = []
    for path in files:
        rows += read_parquet(path, "an episodes file").to_pylist()
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


def task_names(root: Path) -> dict[int, str]:
    """The task texts by ``task_index`` (``tasks.parquet``, or v2's ``tasks.jsonl``)."""
    if inside(root, "meta/tasks.jsonl").is_file():  # v2
        return {
            int(r["task_index"]): str(r.get("task"))
            for r in read_jsonl(inside(root, "meta/tasks.jsonl"))
            if isinstance(r, dict) and isinstance(r.get("task_index"), int)
        }
    path = inside(root, "meta/tasks.parquet")
    if not path.is_file():
        return {}
    table = read_parquet(path, "the tasks file")
    names = [c for c in table.column_names if c != "task_index"]
    text = "task" if "task" in names else (names[0] if names else None)  # (pandas keeps it as the index)
    if text is None:
        return {}
    return {
        int(i): str(t)
        for i, t in zip(table.column("task_index").to_pylist(), table.column(text).to_pylist(), strict=True)
    }


def formatted(root: Path, template: str, **names: Any) -> Path:
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


def episode_meta(ep: dict[str, Any]) -> dict[str, Any]:
    """An episode's metadata as the store keeps it: its tasks, length and statistics."""
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


def specs(features: dict[str, Any]) -> dict[str, Any]:
    """The run's observation and action specs, from the dataset's features."""
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
        out["observation_spec"] = nest(obs)
    if acts and "action_spec" not in out:
        out["action_spec"] = nest(acts)
    return out
