"""The ``transitions`` table: one definition, for SQL and for NumPy.

A transition pairs a step row of ``steps`` (RLDS alignment: observation *t*, the action taken
at it, the reward and discount that followed) with the next row of its episode, whose
observation is the one that action led to. :data:`COLUMNS` says where each column of a
transition comes from:

=====================  ============  =========================================================
column                 row           value
=====================  ============  =========================================================
``run_id``,            the step      the step's keys (SQL only: the NumPy samples read keys
``episode_id``,                      when asked for them by name)
``env_index``,
``step``
``observation``        the step      the step's observation
``action``             the step      the action taken at it
``reward``             the step      the reward that followed
``discount``           the step      the discount that followed
``next_observation``   the next row  the next row's observation
``done``               the next row  ``is_terminal``: the next observation is terminal
``truncated``          the next row  ``is_last and not is_terminal``: the episode stopped
                                     there without terminating
=====================  ============  =========================================================

A flag is false where its expression is null (``coalesce(..., false)`` in SQL).

Which rows become transitions (:data:`NEXT_ROW`, :data:`REQUIRED`): a step row whose episode
(same ``run_id`` and ``episode_id``) has a next row and whose ``observation`` and ``action``
are not null. An episode's last row (null action) makes none, so an episode of N actions gives
N transitions; a row whose own observation or action is null is left out. The next row's
observation may be null (:data:`NEXT_MASKED`): a LeRobot import's last action (LeRobot keeps no
observation after it), a memory's transition that ends an episode with same-step autoreset
(the final observation was never stored). Such a transition is kept, with its reward and its
``done`` / ``truncated``, since RL needs it (a terminal transition's target does not bootstrap
from the next observation): ``next_observation`` is null in SQL, and in the NumPy samples it
holds the fill with ``next_observation_is_pad`` true (``rlarrow.core.padding``: a null is
never handed over without a mask that says so). A null ``reward`` or ``discount`` is kept too,
with its mask (``reward_is_pad``) in the NumPy samples.

Two constructions derive from this definition:

* :func:`sql_view`: DuckDB SQL for the view (``rlarrow.sql(store, "select * from
  transitions")``). The next row is the episode's next row by ``step``: rows in storage
  order whose successor is the row after them stream in one pass; the others go through a
  window over their episode (see :func:`sql_select`).
* :func:`from_windows` / :func:`from_steps`: NumPy columns (``rlarrow.train.torch``,
  ``rlarrow.train.ray``), from windows of two consecutive steps of one episode (step *t* and
  step *t + 1*) that the sample reader assembles across row groups and commits.

On a store whose episodes have every step (``0`` to ``N``) and an action on every row but
the last, both give the same transitions. They part only on damaged episodes: where a step
is missing, SQL pairs the step before the gap with the one after it and NumPy makes no
transition there.

Example:
    >>> import numpy as np
    >>> from rlarrow.core import transitions
    >>> windows = {"observation": np.array([[0.0, 1.0], [1.0, 2.0]]), "action": np.array([[1, 0], [0, 0]]),
    ...            "is_terminal": np.array([[False, False], [False, True]]),
    ...            "is_last": np.array([[False, False], [False, True]])}
    >>> out = transitions.from_windows(windows)
    >>> list(out)
    ['observation', 'next_observation', 'action', 'done', 'truncated']
    >>> out["next_observation"].tolist(), out["done"].tolist()
    ([1.0, 2.0], [False, True])
    >>> transitions.STEP_COLUMNS
    ('observation', 'action', 'reward', 'discount', 'is_terminal', 'is_last')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

__all__ = ["REQUIRED", "from_steps"]


@dataclass(frozen=True)
class TransitionColumn:
    """One column of a transition: which row it reads and what it makes of it.

    Attributes:
        name: the transition's column.
        row: ``"step"``, the step row itself, or ``"next"``, the next row of its episode.
        value: the ``steps`` column copied (None: a flag, from ``when`` and ``unless``).
        when: a flag is true where these ``steps`` columns are all true ...
        unless: ... and these are all false (null counts as false: the whole flag is false).
        key: one of the step's key columns (``run_id``, ``episode_id``, ``env_index``, ``step``).
    """

    name: str
    row: Literal["step", "next"]
    value: str | None = None
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    key: bool = False

    @property
    def sources(self) -> tuple[str, ...]:
        """The ``steps`` columns this column reads."""
        return (self.value,) if self.value is not None else (*self.when, *self.unless)


#: The transition's columns, in the SQL view's order.
COLUMNS: tuple[TransitionColumn, ...] = (
    TransitionColumn("run_id", "step", "run_id", key=True),
    TransitionColumn("episode_id", "step", "episode_id", key=True),
    TransitionColumn("env_index", "step", "env_index", key=True),
    TransitionColumn("step", "step", "step", key=True),
    TransitionColumn("observation", "step", "observation"),
    TransitionColumn("action", "step", "action"),
    TransitionColumn("reward", "step", "reward"),
    TransitionColumn("discount", "step", "discount"),
    TransitionColumn("next_observation", "next", "observation"),
    TransitionColumn("done", "next", when=("is_terminal",)),
    TransitionColumn("truncated", "next", when=("is_last",), unless=("is_terminal",)),
)

#: The column names, in order.
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

#: The columns read from the next row (not in ``steps`` under their own name).
DERIVED: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.row == "next")

#: The ``steps`` columns the non-key transition columns are made of, in order.
STEP_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys(s for c in COLUMNS if not c.key for s in c.sources))

#: How the next row of a step row is found: same episode (these columns) ...
EPISODE: tuple[str, ...] = ("run_id", "episode_id")
#: ... and the next ``step`` (SQL: the next higher one; NumPy windows: ``step + 1``).
NEXT_ROW = "step"

#: A step row where one of these ``steps`` columns is null makes no transition (in the NumPy
#: samples they so come without a mask of their step row: it would never be true).
REQUIRED: tuple[str, ...] = ("observation", "action")
#: A next row may be null in any column: none is required of it (kept for older callers:
#: empty since a terminal transition without its final observation is kept, masked).
NEXT_REQUIRED: tuple[str, ...] = ()
#: The ``steps`` columns read from the next row that may be null there: the transition's copy
#: (``next_observation``) is null in SQL, and in the NumPy samples the fill with a mask
#: ``next_observation_is_pad`` (``rlarrow.core.padding``; per dict leaf where the step's masks are).
NEXT_MASKED: tuple[str, ...] = ("observation",)

#: The ``steps`` columns read from the next row, each once, in order.
NEXT_SOURCES: tuple[str, ...] = tuple(dict.fromkeys(s for c in COLUMNS if c.row == "next" for s in c.sources))
#: The ``steps`` columns that exist in a transition only as flags (not copied through by from_steps).
FLAG_ONLY: frozenset[str] = frozenset(
    s for c in COLUMNS if c.value is None for s in c.sources) - {c.value for c in COLUMNS if c.value}


# ------------------------------------------------------------------ SQL


def _sql_flag(column: TransitionColumn, ref: Any) -> str:
    parts = [ref(s) for s in column.when] + [f"not {ref(s)}" for s in column.unless]
    return f"coalesce({' and '.join(parts)}, false)"


def _sql_columns(next_ref: Any) -> str:
    """The select list, with ``next_ref(source)`` naming the next row's value of a steps column."""
    out = []
    for c in COLUMNS:
        if c.row == "step":
            out.append(c.name)
        elif c.value is not None:
            ref = next_ref(c.value)
            out.append(ref if ref == c.name else f"{ref} as {c.name}")
        else:
            out.append(f"{_sql_flag(c, next_ref)} as {c.name}")
    return ", ".join(out)


def sql_select(steps: str = "steps") -> str:
    """The DuckDB query of the transitions of ``steps`` (a table or view name, as SQL text).

    Rows are stored in step order almost always (recorders and importers write episodes in
    order), so one streaming pass over the files pairs a row with the row after it whenever
    that row is its successor (same run and episode, step + 1): DuckDB streams
    ``lead() over ()`` in bounded memory, in file order. The rows left over (episodes split
    across files out of order, interleaved environments, gaps) go through the general window
    over their episode ordered by step, which then holds only them. A row takes the first
    branch exactly when the row after it is its successor, and the second branch only holds
    rows for which that is not so (or whose predecessor is not the row before them), so every
    transition comes out once. Both passes see the files in the same order: DuckDB runs a
    streaming window in one ordered pipeline.

    Example:
        >>> "lead(observation) over w" in sql_select()
        True
    """
    run, episode = EPISODE
    order = NEXT_ROW
    follows = (f"coalesce(lead({run}) over () = {run} and lead({episode}) over () = {episode}\n"
               f"                    and lead({order}) over () = {order} + 1, false) as _next_follows")
    precedes = (f"coalesce(lag({run}) over () = {run} and lag({episode}) over () = {episode}\n"
                f"                    and lag({order}) over () = {order} - 1, false) as _prev_precedes")
    streamed = ",\n".join(f"           lead({s}) over () as _next_{s}" for s in NEXT_SOURCES)
    windowed = ",\n".join(f"             lead({s}) over w as next_{s}" for s in NEXT_SOURCES)
    required = "".join(f" and {c} is not null" for c in REQUIRED)
    streamed_next = "".join(f" and _next_{c} is not null" for c in NEXT_REQUIRED)
    windowed_next = "".join(f" and next_{c} is not null" for c in NEXT_REQUIRED)
    return f"""with paired as not materialized (
    select *,
           {follows},
           {precedes},
{streamed}
    from {steps})
select {_sql_columns(lambda s: f"_next_{s}")}
from paired
where _next_follows{required}{streamed_next}
union all
select {_sql_columns(lambda s: f"next_{s}")}
from (select *,
{windowed},
             lead({order}) over w as next_{order}
      from paired
      where not _next_follows or not _prev_precedes
      window w as (partition by {", ".join(EPISODE)} order by {order}))
where not _next_follows and next_{order} is not null{required}{windowed_next}
"""


def sql_view(name: str = "transitions", steps: str = "steps") -> str:
    """DuckDB SQL that creates (or replaces) the view ``name`` of the transitions of ``steps``.

    ``name`` and ``steps`` are put in the text as they are (plain identifiers).

    Example:
        >>> import duckdb
        >>> con = duckdb.connect()
        >>> _ = con.execute("create table steps as select 'r' as run_id, 0::bigint as episode_id, "
        ...                 "0 as env_index, s::bigint as step, s::double as observation, "
        ...                 "case when s < 2 then s end as action, 1.0 as reward, 1.0 as discount, "
        ...                 "s = 2 as is_last, s = 2 as is_terminal from range(3) t(s)")
        >>> _ = con.execute(sql_view())
        >>> con.sql("select step, next_observation, done from transitions order by step").fetchall()
        [(0, 1.0, False), (1, 2.0, True)]
    """
    return f"create or replace view {name} as\n{sql_select(steps)}"


# ------------------------------------------------------------------ NumPy


def _valid(table: Any, names: tuple[str, ...]) -> np.ndarray:
    from rlarrow.core.padding import null_rows

    ok = np.ones(table.num_rows, bool)
    for name in names:
        if name in table.column_names:
            for null in null_rows(table.column(name)).values():
                ok &= ~null
    return ok


def valid_rows(table: Any) -> np.ndarray:
    """Which ``steps`` rows (a pyarrow table) may be a transition's step row (:data:`REQUIRED`)."""
    return _valid(table, REQUIRED)


def valid_next_rows(table: Any) -> np.ndarray:
    """Which ``steps`` rows may be a transition's next row (:data:`NEXT_REQUIRED`)."""
    return _valid(table, NEXT_REQUIRED)


def _split(name: str) -> tuple[str, str]:
    """A flat column name (``observation.position``) as its steps column and the rest."""
    head, dot, rest = name.partition(".")
    return head, dot + rest


def from_steps(step: Mapping[str, Any], next_step: Mapping[str, Any]) -> dict[str, Any]:
    """Transitions from step rows and their next rows, as NumPy columns.

    ``step`` and ``next_step`` hold the same ``steps`` columns (flat names: ``observation.x``
    for a struct field; masks ``observation_is_pad``), row *i* of ``next_step`` the next row
    of row *i*'s episode. Every column of ``step`` comes through under its name
    (:func:`from_step_row`), but ``is_terminal`` and ``is_last``, which only make flags, and the
    masks of :data:`REQUIRED` columns; a column read from the next row comes right after its
    source (``next_observation.x`` after ``observation.x``, ``next_observation_is_pad`` for
    ``observation_is_pad``); ``done`` and ``truncated`` come last, when ``next_step`` holds
    the columns they are made of.

    Example:
        >>> import numpy as np
        >>> out = from_steps({"reward": np.array([1.0])},
        ...                  {"is_terminal": np.array([False]), "is_last": np.array([True])})
        >>> {k: v.tolist() for k, v in out.items()}
        {'reward': [1.0], 'done': [False], 'truncated': [True]}
    """
    out: dict[str, Any] = {}
    for key, value in step.items():
        if from_step_row(key):
            out[key] = value
        if key in next_step:
            for name in next_names(key):
                out[name] = next_step[key]
    out.update(flags(next_step))
    return out


def next_names(key: str) -> list[str]:
    """The transition columns a flat ``steps`` column (or its mask) also gives from the next row.

    Example:
        >>> next_names("observation.position"), next_names("reward")
        (['next_observation.position'], [])
        >>> next_names("observation_is_pad")  # (the mask of the next row's observation)
        ['next_observation_is_pad']
    """
    return list(_next_names(key))


def from_step_row(key: str) -> bool:
    """Whether a flat ``steps`` column (or mask) comes through from the step row as it is.

    All do but the flags' sources (``is_terminal``, ``is_last``) and the masks of
    :data:`REQUIRED` columns (never true on a transition's step row: it is left out there).

    Example:
        >>> [from_step_row(k) for k in ("observation.position", "observation_is_pad", "is_last")]
        [True, False, False]
    """
    return _from_step_row(key)


def _unmasked(key: str) -> tuple[str, str]:
    """A flat key as the column it is or masks, and the mask suffix (``""`` for a column)."""
    from rlarrow.core.padding import SUFFIX

    return (key[: -len(SUFFIX)], SUFFIX) if key.endswith(SUFFIX) else (key, "")


@lru_cache(maxsize=1024)
def _next_names(key: str) -> tuple[str, ...]:
    # (a loader asks for each column of each batch: 3 us a column in Python)
    column, mask = _unmasked(key)
    head, rest = _split(column)
    return tuple(c.name + rest + mask for c in COLUMNS if c.row == "next" and c.value == head)


@lru_cache(maxsize=1024)
def _from_step_row(key: str) -> bool:
    column, mask = _unmasked(key)
    head = _split(column)[0]
    return head not in FLAG_ONLY and not (mask and head in REQUIRED)


def flags(next_step: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The flags (``done``, ``truncated``) of transitions whose next rows are ``next_step``.

    Only the flags whose ``steps`` columns ``next_step`` holds are made.
    """
    out: dict[str, np.ndarray] = {}
    for c in COLUMNS:
        if c.value is None and all(s in next_step for s in c.sources):
            flag = np.ones(len(next_step[c.sources[0]]), dtype=bool)
            for s in c.when:
                flag &= np.asarray(next_step[s]).astype(bool)
            for s in c.unless:
                flag &= ~np.asarray(next_step[s]).astype(bool)
            out[c.name] = flag
    return out


def from_windows(windows: Mapping[str, Any]) -> dict[str, Any]:
    """Transitions from windows of two consecutive steps of one episode.

    Each column is ``(n, 2, ...)``: a window's step row, then its next row. See
    :func:`from_steps` for the columns made.
    """
    return from_steps({k: v[:, 0] for k, v in windows.items()},
                      {k: v[:, 1] for k, v in windows.items() if _split(k)[0] in NEXT_SOURCES})
