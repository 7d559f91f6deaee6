"""LeRobot datasets (codebases v3.0 and v2.x) read as Arrow, without LeRobot and without a store.

A LeRobot v3.0 dataset holds ``meta/info.json`` (features, fps, path templates),
``meta/episodes/chunk-*/file-*.parquet`` (one row per episode: its length, tasks, where its
frames and video segments are, its statistics), ``meta/tasks.parquet``, ``meta/stats.json``,
frames in ``data/chunk-*/file-*.parquet`` (many episodes a file) and camera streams in
``videos/<key>/chunk-*/file-*.mp4`` (many episodes a file, each a segment between two
timestamps). :func:`read_lerobot` reads them one episode at a time, as an episode source
(:mod:`rlarrow.core.sources`); :func:`import_lerobot` is ``ingest(store, read_lerobot(...))``:

- numeric features in their dtype and shape; ``image`` features (PNG bytes) decoded with
  Pillow; ``video`` features decoded with PyAV (the ``video`` extra) to uint8 ``(H, W, C)``
  frames, or kept as video (``video="keep"``: the chunks carry ``videos`` rows);
- ``observation.*`` features are one struct observation, nested at the dots
  (``observation.images.top`` is ``observation["images"]["top"]``), ``action`` the action;
  ``next.reward`` the reward and ``next.done`` the last step's ``is_terminal`` where the
  dataset has them; ``timestamp``, ``frame_index``, ``episode_index``, ``index``,
  ``task_index`` and any other numeric feature are the step's typed ``infos`` (a struct, one
  field per feature, in the dtype ``info.json`` declares: int64 indices, float32 timestamps),
  text features its ``metadata``;
- each episode's N frames are N + 1 steps in RLDS alignment: LeRobot keeps no observation after
  the last action, so the last step's observation is null (never invented), as for a D4RL file
  without ``next_observations``;
- the episode's ``metadata`` is its tasks, length and statistics (``stats/...``); the run's
  ``info.json``, ``stats.json`` and the tasks by index.

LeRobot v2.x datasets (``meta/episodes.jsonl``, ``tasks.jsonl``, ``episodes_stats.jsonl``, a
data file and an mp4 per episode) are read the same way; older codebases are refused.
:mod:`rlarrow.io.lerobot.dataset_meta`, :mod:`~rlarrow.io.lerobot.frame_steps` and
:mod:`~rlarrow.io.lerobot.videos` hold the parts.

Example:
    >>> import polars as pl  # doctest: +SKIP
    >>> from rlarrow.io.lerobot import import_lerobot, read_lerobot  # doctest: +SKIP
    >>> pusht = "~/.cache/huggingface/lerobot/lerobot/pusht"
    >>> steps = pl.from_arrow(read_lerobot(pusht).steps())  # doctest: +SKIP
    >>> import_lerobot("~/.cache/huggingface/lerobot/lerobot/pusht", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo
from rlarrow.core.store import StoreLike
from rlarrow.core.video import video_row
from rlarrow.io.lerobot.dataset_meta import (
    FRAME_KEYS as FRAME_KEYS,
)
from rlarrow.io.lerobot.dataset_meta import (
    VIDEO_MODES as VIDEO_MODES,
)
from rlarrow.io.lerobot.dataset_meta import (
    DatasetMeta,
    episode_meta,
    is_lerobot_dir,
    open_dataset,
    specs,
)
from rlarrow.io.lerobot.frame_steps import Frames, episode_columns, episode_steps

__all__ = ["import_lerobot", "is_lerobot_dir", "read_lerobot"]

#: row groups of the ``videos`` table (a stream is read alone); every writer of the store keeps
#: them at most this (:data:`rlarrow.core.store.files.SMALL_ROW_GROUPS`), ingest's included
VIDEO_ROW_GROUP_BYTES = 2 << 20


def read_lerobot(directory: str | os.PathLike[str], *, run_id: str | None = None,
                 video: str = "decode") -> EpisodeSource:
    """A LeRobot v3.0 or v2.x dataset as an episode source, one chunk an episode (see the module docs).

    The dataset's metadata is read and checked at once; its frames as the source is iterated,
    an episode at a time (a v3.0 data file, which many episodes share, is read once for all
    of them). ``video="keep"``: each episode's segment of each camera's mp4 is copied, not
    decoded, into a stream of its own, carried as ``videos`` rows (``chunk.tables["videos"]``;
    the store's video layout); ``"decode"`` (default): uint8 frames in the observation.

    Raises:
        UnsupportedInputError: not a LeRobot dataset, or a codebase version not read yet.
        CorruptFileError: files that cannot be read or do not agree (episode lengths, frames,
            video segments); found as the source is read where they are the frames'.
        MissingDependencyError: PyAV (``pip install 'rlarrow[video]'``) for video features,
            Pillow for image features.

    Example:
        >>> import tempfile, warnings, numpy as np
        >>> from rlarrow.io.lerobot import export_lerobot
        >>> from rlarrow.core.store import Store
        >>> tmp = tempfile.mkdtemp()
        >>> with Store.create(tmp + "/s") as st:
        ...     _ = st.append("steps", {
        ...         "run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...         "observation": np.arange(6, dtype=np.float32).reshape(3, 2), "action": [1, 0, None],
        ...         "reward": [0.5, 1.0, None], "is_first": [True, False, False],
        ...         "is_last": [False, False, True], "is_terminal": [False, False, True]})
        >>> with warnings.catch_warnings():  # (LeRobot keeps no final observation: a warning says so)
        ...     warnings.simplefilter("ignore")
        ...     _ = export_lerobot(tmp + "/s", tmp + "/ds")
        >>> steps, episodes = read_lerobot(tmp + "/ds").read()
        >>> steps.column("reward").to_pylist(), episodes.column("return").to_pylist()
        ([0.5, 1.0, None], [1.5])
    """
    root = Path(directory)
    meta = open_dataset(root, video)
    keep = video == "keep"

    def chunks(run: str) -> Iterator[EpisodeChunk]:
        frames = Frames(root, meta.info)
        for ep in meta.episodes:
            yield _episode_chunk(meta, frames, ep, run, keep)

    info = RunInfo(source="lerobot", name=str(meta.info.get("repo_id") or root.name),
                   source_path=os.fspath(root),
                   source_version=f"lerobot {meta.version}", alignment="rlds", num_envs=1,
                   metadata={"info": meta.info, "stats": meta.stats, "tasks": meta.tasks, "video": video},
                   env_specs=specs(meta.features))
    return EpisodeSource(info, {}, chunks, run_id=run_id, episodes=len(meta.episodes),
                         recipe=(read_lerobot, (os.path.abspath(directory),), {"video": video}))


def _episode_chunk(meta: DatasetMeta, frames: Frames, ep: dict[str, Any], run: str,
                   keep: bool) -> EpisodeChunk:
    """One episode: its steps, its ``episodes`` row and (``keep``) its cameras' ``videos`` rows."""
    eid = int(ep["episode_index"])
    try:
        columns = episode_columns(meta.root, frames.episode(ep), meta.features, ep, meta.info, keep=keep)
        steps = episode_steps(columns, run, eid)
    except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
        raise CorruptFileError(
            meta.root, f"episode {eid}'s frames are damaged ({type(exc).__name__}: {exc})"
        ) from exc
    tables = {}
    if columns["videos"]:  # the video layout: N frames, steps 0..N-1
        tables["videos"] = pa.concat_tables([
            _schema.build("videos", video_row(run, eid, 0, key, stream, range(columns["n"]), source),
                          num_rows=1) for key, (stream, source) in columns["videos"].items()])
    rows = EpisodeRows()
    rewards = columns["reward"]
    rows.add(eid, num_steps=steps.num_rows,
             total=float(np.sum(rewards, dtype=np.float64)) if rewards is not None else None,
             terminated=bool(columns["done"]), truncated=not columns["done"], partial_end=False,
             metadata=episode_meta(ep))
    return EpisodeChunk(steps, rows.table(run), tables)


def import_lerobot(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    video: str = "decode",
    progress: bool | None = None,
) -> IngestReport:
    """Import a LeRobot v3.0 or v2.x dataset into ``store`` as one run: ``ingest(store, read_lerobot(..))``.

    One commit: a dataset found damaged part-way through leaves the store as it was.
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
    with read_lerobot(directory, run_id=run_id, video=video) as source:
        return ingest(store, source, name=name, progress=progress)
