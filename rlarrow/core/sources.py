"""Episode sources: what every episode format reads to, with no store in between.

A format's ``read_<format>(path, ...)`` (``read_minari``, ``read_rlds``, ``read_lerobot``,
``read_hdf5``, ``read_envlogger``) returns an :class:`EpisodeSource`: the run's
:class:`RunInfo`, the declared types of its tensor columns, and a stream of
:class:`EpisodeChunk` s, each the ``steps`` rows of one or more episodes (RLDS alignment,
:mod:`rlarrow.core.alignment`) with the ``episodes`` rows of the episodes that end in it,
and rows of other tables (``videos``) where the format has them. Nothing is read before
the stream is iterated, and it is read a chunk at a time, so memory stays bounded by the
largest chunk (an episode, or a format's block of steps).

The same source is what :func:`rlarrow.core.ingest.ingest` writes into a store (one
transaction, one report), what a format's writer takes, and what Polars, pyarrow and
DuckDB users read directly:

* :meth:`EpisodeSource.steps`: a ``pyarrow.RecordBatchReader`` of the steps
  (``polars.from_arrow(reader)``, ``duckdb.sql("... FROM reader")``);
* :meth:`EpisodeSource.read`: the whole ``steps`` and ``episodes`` tables;
* iterating the source gives the chunks.

Every row carries the source's :attr:`EpisodeSource.run_id` (a new id unless given), as
the store's rows do, so steps join episodes on ``(run_id, episode_id)``.

Example:
    >>> import numpy as np
    >>> from rlarrow.core import schema
    >>> def chunks(run_id):
    ...     for ep in range(2):
    ...         steps = schema.build("steps", {
    ...             "run_id": run_id, "episode_id": ep, "step": np.arange(3), "env_index": 0,
    ...             "observation": np.zeros((3, 2), np.float32), "reward": [1.0, 1.0, None],
    ...             "is_first": [True, False, False], "is_last": [False, False, True],
    ...             "is_terminal": [False, False, True]})
    ...         rows = EpisodeRows()
    ...         rows.add(ep, num_steps=2, total=2.0, terminated=True, truncated=False,
    ...                  partial_end=False, metadata=None)
    ...         yield EpisodeChunk(steps, rows.table(run_id))
    >>> source = EpisodeSource(RunInfo(source="toy"), {}, chunks, run_id="r1", episodes=2)
    >>> steps, episodes = source.read()
    >>> steps.num_rows, episodes.column("return").to_pylist()
    (6, [2.0, 2.0])
    >>> source.steps().read_all().num_rows
    6
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError, InvalidInputError

if TYPE_CHECKING:
    from rlarrow.core.store import Store

__all__ = ["EpisodeChunk", "EpisodeRows", "EpisodeSource", "RunInfo"]


@dataclass(frozen=True)
class RunInfo:
    """The ``runs`` row a source becomes: where it came from and what it is.

    Attributes:
        source: the format's name (``"minari"``), the run's ``source``.
        name: the run's name (a dataset id), or None.
        source_path: the path read.
        source_version: the writer's version as the source says it (``"minari 0.5.4"``).
        alignment: how the format aligned its steps before rlarrow's RLDS rows.
        num_envs: environments the run's steps come from.
        metadata: the run's metadata (JSON-like), kept whole.
        env_specs: observation and action specs or spaces, as the format describes them.
    """

    source: str
    name: str | None = None
    source_path: str | None = None
    source_version: str | None = None
    alignment: str | None = None
    num_envs: int | None = 1
    metadata: Any = None
    env_specs: Any = None


@dataclass
class EpisodeChunk:
    """Steps of one or more episodes, the rows of the episodes ending in them, rows of other tables.

    Attributes:
        steps: ``steps`` rows (the table's schema, :func:`rlarrow.core.schema.build`).
        episodes: ``episodes`` rows of the episodes whose last step is in ``steps`` (or an
            earlier chunk), or None.
        tables: rows of other tables, by table name (``{"videos": ...}``).
        count: how many units of the source's progress this chunk completes (episodes,
            or files); None: the number of ``episodes`` rows.
    """

    steps: pa.Table
    episodes: pa.Table | None = None
    tables: Mapping[str, pa.Table] = field(default_factory=dict)
    count: int | None = None


class EpisodeRows:
    """The ``episodes`` rows a reader collects (one env, ``partial_start`` false), made a table at once.

    Example:
        >>> rows = EpisodeRows()
        >>> rows.add(0, num_steps=4, total=3.0, terminated=True, truncated=False, partial_end=False,
        ...          metadata={"split": "train"})
        >>> len(rows), rows.table("r").column("num_steps").to_pylist()
        (1, [4])
    """

    COLUMNS = ("episode_id", "num_steps", "return", "terminated", "truncated", "partial_end", "metadata")

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {k: [] for k in self.COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["episode_id"])

    def add(self, episode_id: int, *, num_steps: int, total: float | None, terminated: bool,
            truncated: bool, partial_end: bool, metadata: Any) -> None:
        """One episode: its id, its steps, its return (``total``), how it ended, its metadata."""
        for key, value in zip(self.COLUMNS, (episode_id, num_steps, total, terminated, truncated, partial_end,
                                             metadata), strict=True):
            self.columns[key].append(value)

    def table(self, run_id: str) -> pa.Table:
        """The rows as an ``episodes`` table of run ``run_id``."""
        return _schema.build("episodes", {"run_id": run_id, "env_index": 0, "partial_start": False,
                                          **self.columns}, num_rows=len(self))

    def append_to(self, store: Store, run_id: str) -> None:
        """Append the rows to ``store``'s ``episodes`` (none: nothing)."""
        if len(self):
            store.append("episodes", self.table(run_id))


class EpisodeSource:
    """A run's episodes as Arrow, read a chunk at a time (see the module docs).

    Args:
        run: the run it becomes.
        types: the Arrow type of each tensor column of ``steps`` where the format fixes it
            before reading (``{"observation": ..., "action": ...}``); empty: the first
            chunk's types are the run's (a store declares them before a row is written).
        chunks: ``chunks(run_id)`` gives the chunks, every row of them with that run id;
            called once per iteration (a source can be iterated again where its format
            allows).
        run_id: the run id the rows carry (None: a new one).
        episodes: how many episodes (or other progress units) the source holds, where
            known before reading (progress bars).
        unit: what the progress counts (``"episode"``).
        notes: what the reader assumed or left out, one line each (reports say them).
        close: called once by :meth:`close` (an open file the reader holds).
        recipe: ``(function, args, kwargs)`` that makes this source again (a format's
            ``read_<format>`` and its arguments): what lets a source be pickled, to be
            read in another process (a writer that runs in a child, a Ray task). None:
            pickling it raises.
    """

    def __init__(self, run: RunInfo, types: Mapping[str, pa.DataType],
                 chunks: Callable[[str], Iterable[EpisodeChunk]], *, run_id: str | None = None,
                 episodes: int | None = None, unit: str = "episode", notes: Iterable[str] = (),
                 close: Callable[[], None] | None = None,
                 recipe: tuple[Callable[..., EpisodeSource], tuple[Any, ...], dict[str, Any]] | None = None,
                 ) -> None:
        from rlarrow.core.store import new_run_id

        self.run = run
        self.types = dict(types)
        self._chunks = chunks
        self.run_id = run_id or new_run_id()
        self.episodes_hint = episodes
        self.unit = unit
        self.notes: list[str] = list(notes)
        self._close = close
        self.recipe = recipe

    def __reduce__(self) -> tuple[Any, ...]:
        if self.recipe is None:
            raise ArgumentError(f"{self!r} cannot be pickled: it was not made by a format's reader "
                                "(give EpisodeSource a recipe=(function, args, kwargs) to make it again)")
        function, args, kwargs = self.recipe
        return (_remade, (function, args, {**kwargs, "run_id": self.run_id}))

    def __iter__(self) -> Iterator[EpisodeChunk]:
        return iter(self._chunks(self.run_id))

    def with_run_id(self, run_id: str) -> EpisodeSource:
        """The same source with its rows carrying ``run_id``."""
        other = EpisodeSource(self.run, self.types, self._chunks, run_id=run_id, episodes=self.episodes_hint,
                              unit=self.unit, close=self._close, recipe=self.recipe)
        other.notes = self.notes  # (one list: what a read notes, both say)
        return other

    def steps(self) -> pa.RecordBatchReader:
        """The ``steps`` rows as a stream of record batches (the ``episodes`` rows are dropped).

        Raises:
            InvalidInputError: a chunk whose columns differ from the first chunk's.
        """
        chunks = (chunk for chunk in self if chunk.steps.num_rows)  # (a chunk may only count progress)
        first = next(chunks, None)
        if first is None:
            return pa.RecordBatchReader.from_batches(_schema.table("steps").arrow_schema(), iter(()))
        schema = first.steps.schema

        def batches() -> Iterator[pa.RecordBatch]:
            yield from first.steps.to_batches()
            for chunk in chunks:
                if chunk.steps.schema != schema:
                    raise InvalidInputError(self.run.source_path or self.run.source,
                                            f"steps of another schema part-way through ({chunk.steps.schema}"
                                            f" after {schema}); read it with read() or ingest() instead")
                yield from chunk.steps.to_batches()

        return pa.RecordBatchReader.from_batches(schema, batches())

    def by_episode(self) -> Iterator[tuple[pa.Table, dict[str, Any] | None]]:
        """Each episode whole: its steps (in step order) and its ``episodes`` row as a dict.

        Episodes come in the order they end; one whose steps run over several chunks is
        held until its row (or the end of the source) comes. Episodes with steps but no
        row (a recording cut short) come last, with None. Memory holds the episodes not
        yet ended.
        """
        import pyarrow.compute as pc

        pending: dict[int, list[pa.Table]] = {}
        for chunk in self:
            steps = chunk.steps
            if steps.num_rows:
                ids = steps.column("episode_id")
                for eid in pc.unique(ids).to_pylist():
                    part = steps if len(pending) == 0 and pc.all(pc.equal(ids, eid)).as_py() \
                        else steps.filter(pc.equal(ids, eid))
                    pending.setdefault(eid, []).append(part)
            for row in ([] if chunk.episodes is None else chunk.episodes.to_pylist()):
                parts = pending.pop(row["episode_id"], [])
                yield _episode_steps(parts, steps.schema), row
        for parts in pending.values():
            yield _episode_steps(parts, parts[0].schema), None

    def read(self) -> tuple[pa.Table, pa.Table]:
        """The whole ``steps`` and ``episodes`` tables (for data that fits in memory)."""
        steps: list[pa.Table] = []
        episodes: list[pa.Table] = []
        for chunk in self:
            if chunk.steps.num_rows:
                steps.append(chunk.steps)
            if chunk.episodes is not None:
                episodes.append(chunk.episodes)
        return (_concat("steps", steps), _concat("episodes", episodes))

    def close(self) -> None:
        """Release what the reader holds open (a second call does nothing)."""
        close, self._close = self._close, None
        if close is not None:
            close()

    def __enter__(self) -> EpisodeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f" from {self.run.source_path}" if self.run.source_path else ""
        return f"<EpisodeSource {self.run.source}{where}, run {self.run_id}>"


def _episode_steps(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """One episode's steps from its parts, in step order."""
    if not parts:
        return schema.empty_table()
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")
    steps = table.column("step").to_numpy()
    if len(steps) > 1 and (steps[1:] < steps[:-1]).any():
        table = table.sort_by("step")
    return table


def _remade(function: Callable[..., EpisodeSource], args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> EpisodeSource:
    """A pickled source made again in this process (see ``recipe``)."""
    return function(*args, **kwargs)


def _concat(table: str, parts: list[pa.Table]) -> pa.Table:
    if not parts:
        return _schema.table(table).arrow_schema().empty_table()
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except pa.ArrowInvalid as exc:
        raise ArgumentError(f"{table} rows of different types cannot be one table ({exc}); "
                            "iterate the source's chunks instead") from exc
