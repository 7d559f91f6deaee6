"""A run of a store as an episode source: what every exporter writes from.

:func:`read_run` gives one run's episodes as an :class:`~rlarrow.core.sources.EpisodeSource`,
one chunk per episode in ``episode_id`` order (steps in RLDS alignment, cameras of the
video layout decoded into the observation), with the episode's ``episodes`` row. A format's
``write_<format>(source, path)`` takes it as it takes a source read from another format, so
``export_<format>(store, ...)`` is ``write_<format>(read_run(store, ...), ...)`` and
``rlarrow convert INPUT --to FORMAT`` needs no store at all.

Example:
    >>> import numpy as np, tempfile
    >>> from rlarrow.core.store import Store
    >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
    >>> with Store.create(path) as st:
    ...     _ = st.append("steps", {
    ...         "run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
    ...         "observation": np.arange(3, dtype=np.float32), "action": [1, 0, None],
    ...         "reward": [0.0, 1.0, None], "discount": [1.0, 0.0, None],
    ...         "is_first": [True, False, False], "is_last": [False, False, True],
    ...         "is_terminal": [False, False, True]})
    >>> source = read_run(path)
    >>> [chunk.steps.num_rows for chunk in source]
    [3]
    >>> source.run.source, source.run_id
    ('', 'a')
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core.dm_env_rows import DmEnvRows
from rlarrow.core.sources import EpisodeChunk, EpisodeSource, RunInfo
from rlarrow.core.store import Store

__all__ = ["read_run"]


def read_run(store: str | os.PathLike[str] | Store, *, run_id: str | None = None,
             version: int | None = None) -> EpisodeSource:
    """Run ``run_id`` of ``store`` (the only run with steps when None) as an episode source.

    Episodes without an ``episodes`` row (a recording cut by a kill) come with one made
    from their steps (``partial_end`` true when their last step is not ``is_last``).

    Raises:
        StoreError: no steps, or several runs and no ``run_id``, or the run has no steps.
    """
    rows = DmEnvRows(store, run_id=run_id, version=version)
    run = rows.run
    info = RunInfo(
        source=str(run.get("source") or ""), name=run.get("name"), source_path=run.get("source_path"),
        source_version=run.get("source_version"), alignment=run.get("alignment"),
        num_envs=run.get("num_envs"),
        metadata=_metadata.decode(run.get("metadata"), run.get("metadata_types")),
        env_specs=_metadata.decode(run.get("env_specs"), run.get("env_specs_types")))

    def chunks(run_as: str) -> Iterator[EpisodeChunk]:
        import pyarrow.compute as pc

        episodes = rows.store.read("episodes", filter=pc.field("run_id") == rows.run_id)
        by_id = {eid: i for i, eid in enumerate(episodes.column("episode_id").to_pylist())}
        for k, eid in enumerate(rows.episode_ids.tolist()):
            steps = rows.episode_table(k)
            i = by_id.get(eid)
            row = episodes.slice(i, 1) if i is not None else _made_row(steps, rows.run_id, eid)
            if run_as != rows.run_id:
                steps = _with_run(steps, run_as)
                row = _with_run(row, run_as)
            yield EpisodeChunk(steps, row)

    path = os.path.abspath(rows.store.path)
    return EpisodeSource(info, {}, chunks, run_id=rows.run_id, episodes=rows.num_episodes, close=rows.close,
                         recipe=(_read_again, (path, rows.run_id, rows.store.version), {}))


def _read_again(path: str, stored_run: str, version: int, run_id: str) -> EpisodeSource:
    """:func:`read_run` of the same version of a store, its rows carrying ``run_id`` (unpickling)."""
    source = read_run(path, run_id=stored_run, version=version)
    return source if run_id == stored_run else source.with_run_id(run_id)


def _with_run(table: pa.Table, run_id: str) -> pa.Table:
    i = table.schema.get_field_index("run_id")
    return table.set_column(i, table.schema.field(i), pa.array([run_id] * table.num_rows, pa.string()))


def _made_row(steps: pa.Table, run_id: str, episode_id: int) -> pa.Table:
    """An ``episodes`` row from an episode's steps (one the store has none of)."""
    n = steps.num_rows
    last = bool(steps.column("is_last")[n - 1].as_py()) if n else False
    terminal = bool(steps.column("is_terminal")[n - 1].as_py()) if n else False
    reward = steps.column("reward").to_numpy(zero_copy_only=False)
    total = float(np.nansum(reward.astype(np.float64))) if n else 0.0
    return _schema.build("episodes", {
        "run_id": run_id, "episode_id": episode_id, "env_index": int(steps.column("env_index")[0].as_py())
        if n else 0, "num_steps": n, "return": total, "terminated": terminal,
        "truncated": last and not terminal, "partial_start": False, "partial_end": not last,
        "metadata": [None]}, num_rows=1)
