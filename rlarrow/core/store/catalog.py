"""The RL catalog on top of the store's engine: runs, episodes and their labels.

The store's *engine* (the other modules here: manifest, journal, files, commits,
compaction, the Delta logs) keeps tables of rows and commits them whole; it does not know
what a run or an episode is. The *catalog* does: it adds a run, finds one, lists a run's
episodes, labels runs and episodes and deletes them. :attr:`rlarrow.Store.catalog` is the
catalog of a store, a sub-object as delta-rs's ``DeltaTable.optimize`` is one: everything
it does goes through the engine's public methods (``append``, ``read``, ``row_count`` and
the journaled :meth:`~rlarrow.core.store.edits.EditingStore.rewrite_rows`), so the engine
can be read, copied and checked without it. What a run id is (:func:`new_run_id`), what a
``runs`` row holds, which rows deleting or labelling runs and episodes touches
(:class:`Selection`) are said here, and only here. The store's own ``add_run``,
``has_run``, ``runs``, ``label`` and ``delete`` stay, and call the catalog. Statistics are
computed above the store (:mod:`rlarrow.query.dataset_stats`), from the ``stats`` table commits write
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

import json
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Required, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, CorruptFileError, NotFoundError, StoreError
from rlarrow.core.store.edits import EditingStore
from rlarrow.core.store.repair import FileProblem

__all__ = ["Catalog", "new_run_id"]


def new_run_id() -> str:
    """A new run id: UTC time and random hex, sortable by creation time.

    >>> len(new_run_id())
    22
    """
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _episode_keys(episodes: Iterable[Any]) -> list[tuple[str, int]]:
    """``episodes`` as checked ``(run_id, episode_id)`` pairs."""
    if isinstance(episodes, (str, bytes)) or not isinstance(episodes, Iterable):
        raise ArgumentTypeError(f"episodes: give a list of (run_id, episode_id) pairs, not "
                                f"{type(episodes).__name__} {episodes!r:.60}")
    keys = []
    for item in episodes:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ArgumentError(f"episodes: give (run_id, episode_id) pairs, not {item!r:.60}")
        run = _arguments.text(item[0], "episodes", what="a run id (a string) first in each pair")
        episode = _arguments.integer(item[1], "episodes", minimum=0)
        keys.append((run, episode))
    return keys


class Selection:
    """Which rows an edit is about: whole runs, or episodes of runs.

    The engine's :class:`~rlarrow.core.store.edits.RowSelection` for ``delete`` and ``label``.

    Example:
        >>> Selection(["a"], [("b", 2)]).run_ids() == {"a", "b"}
        True
    """

    def __init__(self, runs: Sequence[str] | None, episodes: Iterable[Any] | None) -> None:
        self.runs = sorted(set(_arguments.names(runs, "runs", what="run id") or []))
        self.episodes = sorted(set(_episode_keys(episodes if episodes is not None else [])))
        if not self.runs and not self.episodes:
            raise ArgumentError("nothing selected: give runs=[...] and/or "
                                "episodes=[(run_id, episode_id), ...]")

    def run_ids(self) -> set[str]:
        """Every run the selection touches (files holding none of them need no reading)."""
        return set(self.runs) | {r for r, _ in self.episodes}

    def applies(self, columns: Sequence[str]) -> bool:
        """Whether a table of these columns holds rows of runs (or, for episodes, of episodes)."""
        return "run_id" in columns and (bool(self.runs) or "episode_id" in columns)

    def mask(self, keys: pa.Table) -> np.ndarray:
        """Which rows of ``keys`` (run_id, and episode_id where the table has it) are selected."""
        run_id = keys.column("run_id")
        selected = np.zeros(keys.num_rows, bool)
        if self.runs:
            selected |= pc.is_in(run_id, pa.array(self.runs)).to_numpy(zero_copy_only=False)
        if self.episodes and "episode_id" in keys.column_names:
            episode = keys.column("episode_id")
            by_run: dict[str, list[int]] = {}
            for r, e in self.episodes:
                by_run.setdefault(r, []).append(e)
            for r, ids in by_run.items():
                hit = pc.and_(pc.equal(run_id, r), pc.is_in(episode, pa.array(ids, pa.int64())))
                selected |= pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
        return selected



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

    def run_summaries(self, problems: list[FileProblem]) -> list[dict[str, Any]]:
        """One dict per run, for :class:`~rlarrow.core.store.repair.StoreInfo`.

        Each holds run_id, name, source, created_at (ISO text), num_envs and metadata (its
        plain JSON value, whole). ``problems`` are the files :meth:`~rlarrow.Store.check`
        found damaged: with a ``runs`` file among them nothing is read; damage only reading
        shows is appended to them.
        """
        if not self.store.row_count("runs") or any(p.table == "runs" for p in problems):
            return []
        try:
            t = self.store.read("runs", columns=["run_id", "name", "source", "created_at", "num_envs",
                                                 "metadata"])
        except CorruptFileError as exc:  # damage the footers did not show: say so, list the rest
            problems.append(FileProblem("runs", os.path.relpath(exc.path or "runs", self.store.path),
                                        0, f"damaged ({exc})"))
            return []
        return run_rows(t)

    def has_run(self, run_id: str) -> bool:
        """Whether the store holds a run ``run_id`` (a row of ``runs``).

        Example:
            >>> import rlarrow, tempfile
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
            >>> run = st.catalog.add_run(source="user")
            >>> st.catalog.has_run(run), st.catalog.has_run("no-such-run")
            (True, False)
        """
        _arguments.text(run_id, "run_id", what="a run id")
        if self.store.row_count("runs") == 0:
            return False
        ids = self.store.read("runs", columns=["run_id"]).column("run_id")
        return bool(pc.any(pc.equal(ids, run_id)).as_py())

    def add_run(
        self,
        *,
        source: str,
        run_id: str | None = None,
        name: str | None = None,
        source_path: str | os.PathLike[str] | None = None,
        source_version: str | None = None,
        alignment: str | None = None,
        num_envs: int | None = None,
        metadata: Any = None,
        env_specs: Any = None,
        created_at: datetime | None = None,
    ) -> str:
        """Add a run (a ``runs`` row: ``source`` and the other :class:`RunFields`); return its id.

        ``run_id`` None: a new one (:func:`new_run_id`). Inside a transaction the row is
        committed with the rest of it.

        Raises:
            StoreError: a run with this id already exists.
        """
        if run_id is None:
            run_id = new_run_id()
        elif self.has_run(_arguments.text(run_id, "run_id", what="a run id")):
            raise StoreError(f"{self.store.path}: run {run_id!r} already exists; choose another run_id")
        row = _schema.build(
            "runs",
            {
                "run_id": run_id,
                "name": name,
                "created_at": [created_at or datetime.now(UTC)],
                "source": source,
                "source_path": None if source_path is None else os.fspath(source_path),
                "source_version": source_version,
                "alignment": alignment,
                "num_envs": num_envs,
                "metadata": [metadata],
                "env_specs": [env_specs],
            },
        )
        self.store.append("runs", row)
        return run_id

    def episodes(self, runs: str | Sequence[str] | None = None) -> pa.Table:
        """The ``episodes`` rows of ``runs`` (a run id or a list of them; None: every run's).

        Raises:
            ArgumentTypeError: ``runs`` is not a run id or a list of them.
        """
        ids = _arguments.names(runs, "runs", what="a run id")
        if ids is None:
            return self.store.read("episodes")
        return self.store.read("episodes", filter=pc.field("run_id").isin(ids))

    def label(self, metadata: Mapping[str, Any], *, runs: Sequence[str] | None = None,
              episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Set metadata keys of runs (their ``runs`` rows) or episodes (``episodes`` rows): one commit.

        ``metadata`` is merged into each row's metadata (a key given as None is removed):
        success labels, splits, annotations. Only the ``runs`` or ``episodes`` files that
        hold the rows are rewritten; steps and memory, the data, are untouched.

        Returns:
            Rows changed per table.

        Raises:
            ArgumentError: nothing selected, or metadata that is not a mapping.
            NotFoundError: no run or episode matched.

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> _ = store.append("episodes", {"run_id": "r", "episode_id": [0, 1], "num_steps": [5, 9],
            ...     "env_index": 0, "terminated": True, "truncated": False, "partial_start": False,
            ...     "partial_end": False})
            >>> store.label({"split": "validation"}, episodes=[("r", 1)])
            {'episodes': 1}
            >>> rlarrow.sql(store, "select episode_id, metadata->>'$.split' as split from episodes "
            ...             "order by episode_id").to_pylist()
            [{'episode_id': 0, 'split': None}, {'episode_id': 1, 'split': 'validation'}]
        """
        if not isinstance(metadata, Mapping):
            raise ArgumentError(f"metadata: give a mapping of keys to values, not {type(metadata).__name__}")
        selection = Selection(runs, episodes)
        target = "episodes" if selection.episodes else "runs"
        if selection.episodes and selection.runs:
            raise ArgumentError("label runs or episodes, not both in one call")
        changed = self.store.rewrite_rows(selection, (target, dict(metadata)))
        if not changed:
            which = selection.episodes or selection.runs
            raise NotFoundError(f"{self.store.path}: no {target} matched {which}")
        return changed

    def delete(self, *, runs: Sequence[str] | None = None,
               episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Delete runs, or episodes (``(run_id, episode_id)`` pairs), from every table: one commit.

        A run's rows go from ``runs``, ``episodes``, ``steps``, ``scalars``, ``memory`` and
        ``sources``; an episode's from ``episodes`` and ``steps``. Readers see the store
        before or after, never between; the version before still reads them (until
        ``rlarrow vacuum``). Files holding only deleted rows are dropped, files mixing
        deleted and kept rows are rewritten (streamed, row order kept).
        A bare string is one run id (``runs="r0"`` is ``runs=["r0"]``).

        Returns:
            Rows deleted per table directory (empty when nothing matched: no new version).

        Raises:
            ArgumentError: nothing selected.
            ArgumentTypeError: ``runs`` not a run id or a list of them, ``episodes`` not pairs.
            StoreError: the store is read-only, or a write failed (nothing changed).
        """
        return self.store.rewrite_rows(Selection(runs, episodes))


def run_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The ``runs`` rows as :class:`~rlarrow.core.store.repair.StoreInfo` lists them.

    ``created_at`` as ISO text, ``metadata`` as its plain JSON value (non-finite floats as
    ``"NaN"``: JSON-able as it is).
    """
    runs = []
    for row in table.to_pylist():
        row["created_at"] = row["created_at"].isoformat() if row["created_at"] else None
        row["metadata"] = None if row["metadata"] is None else json.loads(row["metadata"])
        runs.append(row)
    return runs
