"""The RL catalog on top of the store's engine: runs, episodes and their labels.

The store's *engine* (the other modules here: manifest, journal, files, commits,
compaction, the Delta logs) keeps tables of rows and commits them whole; it does not know
what a run or an episode is. The *catalog* does: it adds a run, finds one, lists a run's
episodes, labels runs and episodes and deletes them. :attr:`rlarrow.Store.catalog` is the
catalog of a store, a sub-object as delta-rs's ``DeltaTable.optimize`` is one: everything
it does goes through the engine's public methods (``append``, ``read``, ``row_count``, and
the journaled ``label`` and ``delete`` edits), so the engine can be read, copied and
checked without it. The store's own ``add_run``, ``has_run``, ``runs``, ``label`` and
``delete`` stay, and do the same. Statistics are computed above the store
(:mod:`rlarrow.query.dataset_stats`), from the ``stats`` table commits write
(:mod:`rlarrow.core.step_stats`).

Example:
    >>> import rlarrow, tempfile, os
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> run = store.catalog.add_run(source="user", run_id="ppo-1", name="PPO")
    >>> store.catalog.has_run("ppo-1"), store.has_run("ppo-1")
    (True, True)
    >>> _ = store.append("episodes", {"run_id": run, "episode_id": [0, 1], "num_steps": [5, 9],
    ...     "env_index": 0, "terminated": True, "truncated": False, "partial_start": False,
    ...     "partial_end": False})
    >>> store.catalog.label({"split": "validation"}, episodes=[(run, 1)])
    {'episodes': 1}
    >>> store.catalog.episodes("ppo-1").column("num_steps").to_pylist()
    [5, 9]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core.store.edits import EditingStore

__all__ = ["Catalog", "RunFields"]


class RunFields(TypedDict, total=False):
    """The fields of a ``runs`` row :meth:`Catalog.add_run` takes (``docs/format.md``)."""

    source: Required[str]
    run_id: str | None
    name: str | None
    source_path: str | os.PathLike[str] | None
    source_version: str | None
    alignment: str | None
    num_envs: int | None
    metadata: Any
    env_specs: Any
    created_at: datetime | None


class Catalog:
    """Runs and episodes of a store, on its engine's public methods (:attr:`rlarrow.Store.catalog`).

    Args:
        store: the store (any layer from :class:`~rlarrow.core.store.edits.EditingStore` up).
    """

    def __init__(self, store: EditingStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"Catalog({os.fspath(self.store.path)!r})"

    def runs(self) -> pa.Table:
        """The ``runs`` table: one row per run."""
        return self.store.read("runs")

    def has_run(self, run_id: str) -> bool:
        """Whether the store holds a run ``run_id`` (a row of ``runs``)."""
        return self.store.has_run(run_id)

    def add_run(self, **fields: Unpack[RunFields]) -> str:
        """Add a run (a ``runs`` row: ``source`` and the other :class:`RunFields`); return its id.

        Raises:
            StoreError: a run with this id already exists.
        """
        return self.store.add_run(**fields)

    def episodes(self, runs: str | Sequence[str] | None = None) -> pa.Table:
        """The ``episodes`` rows of ``runs`` (a run id or a list of them; None: every run's).

        Raises:
            ArgumentTypeError: ``runs`` is not a run id or a list of them.
        """
        ids = _arguments.names(runs, "runs", what="a run id")
        if ids is None:
            return self.store.read("episodes")
        import pyarrow.compute as pc

        return self.store.read("episodes", filter=pc.field("run_id").isin(ids))

    def label(self, metadata: Mapping[str, Any], *, runs: Sequence[str] | None = None,
              episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Merge ``metadata`` into runs' or episodes' metadata: one commit (:meth:`rlarrow.Store.label`)."""
        return self.store.label(metadata, runs=runs, episodes=episodes)

    def delete(self, *, runs: Sequence[str] | None = None,
               episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Delete runs or episodes from every table, in one commit (:meth:`rlarrow.Store.delete`)."""
        return self.store.delete(runs=runs, episodes=episodes)
