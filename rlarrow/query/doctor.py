"""The data doctor: what a store's users otherwise discover in training, found before it.

:func:`check_store` runs named checks over a store and returns a :class:`Report` of
findings (:class:`Finding`), one per problem (``rlarrow check STORE`` prints it). Each check is a
function registered in :data:`CHECKS`; ``checks=[...]`` picks some. The flat columns are
checked with DuckDB SQL over :func:`~rlarrow.query.connection.connect`'s views (aggregates,
joins and windows that stream and spill, never a Python loop over rows); tensors are
checked with NumPy over record batches streamed from the table's Parquet files, so memory
stays bounded by a few row groups whatever the store's size.

=================  ========  ===================================================================
check              severity  what it finds
=================  ========  ===================================================================
``alignment``      error     RLDS flags per episode: ``is_first`` exactly on the first step,
                             ``is_last`` only on the last step and present there (unless the
                             ``episodes`` row says ``partial_end``), ``is_terminal`` only with
                             ``is_last``, ``episodes.terminated`` equal to the last step's
                             ``is_terminal``
``duplicates``     error     two rows for one key: ``steps`` (run, episode, step), ``episodes``
                             (run, episode), ``runs`` (run), ``memory`` (run, snapshot, index,
                             env); ``scalars`` (run, tag, step, wall_time) as a warning
``references``     both      steps without an ``episodes`` row and episodes without steps
                             (warnings: a killed recorder leaves the first), ``num_steps`` or
                             ``env_index`` that disagree with the steps (errors), run ids with
                             no ``runs`` row (warnings)
``gaps``           error     ``step`` numbers missing within an episode (from 0)
``monotonic``      warning   an episode's steps stored out of step order (file order); a
                             scalar tag whose ``wall_time`` goes backwards as ``step`` grows
                             (a resumed run logging steps again). ``steps`` has no time column.
``nonfinite``      error     NaN or infinity in ``reward``, ``discount`` (SQL) and in every
                             float tensor of ``observation`` and ``action`` (NumPy; list and
                             binary layouts, dict observations field by field)
``frozen``         warning   one observation repeated for more than ``frozen_steps``
                             consecutive steps of an episode
``spikes``         warning   a float action element more than ``spike_sigma`` standard
                             deviations from its mean (stats per layout of ``steps``: two
                             passes). With N rows no value can be more than sqrt(N - 1) std
                             away, so a table of under ``spike_sigma**2 + 1`` rows has no spikes
``short_episodes`` warning   episodes of fewer than ``min_length`` steps (rows)
``memory``         error     replay-memory snapshots whose rows disagree with their own buffer
                             state: sizes or pointers that differ between rows, indices or
                             pointers outside the buffer, ``filled`` flags that contradict
                             ``is_full`` / ``write_pointer`` / ``env_pointer``
``empty_imports``  warning   a source in ``sources`` that gave no rows: an event file imported as
                             0 scalars (its run has none), a memory export whose snapshot has no
                             rows, an episode dataset whose run has no steps
``null_observations`` error  a null observation on a step that is not its episode's last (the
                             transition into it has no next observation)
``export_cuts``    warning   an episode unrolled from a memory export that is ``partial_end``
                             at the export's end (``partial_start`` at its start) while a later
                             (earlier) export of the same memory (skrl's ``<time>_memory_<id>``
                             names) is in the run: unrolled apart, or at a missing export (gap)
``reset_rows``     warning   an episode unrolled with next-step autoreset whose first step is the
                             autoreset row of the episode before it in its env (reward 0, the
                             observation that episode's final one)
``time_limit``     warning   an episode with more transitions than the env's time limit
                             (``max_episode_steps=``, else the one its metadata records): episodes
                             joined across it (a memory without ``truncated``)
``interleaved``    error     a one-env memory snapshot whose rows are several envs interleaved (a
                             csv converted without ``--num-envs``): with next states, row t's next
                             state is row t + k's state for 90% of rows at one k > 1 and under 50%
                             at k = 1; without, states k rows apart have a median distance under a
                             quarter of neighbouring rows'
=================  ========  ===================================================================

A check whose tables are empty is skipped and named in :attr:`Report.skipped`. Each check
keeps its first ``max_findings`` findings and counts the rest.

:func:`fix_store` (``rlarrow check STORE --fix``) then fixes what needs no guess and loses
no data, in one commit: the ``runs`` rows and ``episodes`` rows that ``references`` found
missing, the latter derived from the episodes' steps. Nothing is deleted or rewritten; every
other finding becomes a :class:`Hint` naming the ``rlarrow delete`` / ``rlarrow label``
commands that would deal with it.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
    >>> run = st.add_run(source="user", run_id="r")
    >>> _ = st.append("steps", {"run_id": run, "episode_id": 0, "step": [0, 1, 2], "env_index": 0,
    ...     "observation": np.zeros((3, 2), np.float32), "action": [1, 0, None],
    ...     "reward": [1.0, float("nan"), None], "is_first": [True, True, False],
    ...     "is_last": [False, False, True], "is_terminal": [False, False, True]})
    >>> report = check_store(st, checks=["alignment", "nonfinite"])
    >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
    steps run=r episode=0 step=1: is_first set after the first step (the episode starts at step 0)
    steps run=r episode=0 step=1: reward is nan
    2 errors, 0 warnings in 2 checks (alignment: 1 error; nonfinite: 1 error)
    >>> report.ok, report.findings[0].step
    (False, 1)
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError, StoreError

if TYPE_CHECKING:
    from rlarrow.core.store import ReaderLease, Store, StoreLike

__all__ = ["CHECKS", "DEFAULT_FROZEN_STEPS", "DEFAULT_MAX_FINDINGS", "DEFAULT_MIN_LENGTH",
           "DEFAULT_SPIKE_SIGMA", "FIX_SOURCE", "Check", "Finding", "FixReport", "Fixed", "Hint", "Report",
           "Severity", "check_store", "fix_store", "fixable"]

#: Episodes of fewer steps (rows) than this are reported (2: the 1-step episodes, no action).
DEFAULT_MIN_LENGTH = 2
#: One observation repeated for more than this many consecutive steps is reported.
DEFAULT_FROZEN_STEPS = 50
#: An action element this many standard deviations from its mean is reported.
DEFAULT_SPIKE_SIGMA = 10.0
#: Findings kept per check (the rest are counted).
DEFAULT_MAX_FINDINGS = 1000

Severity = Literal["error", "warning"]

# rows per record batch of a tensor scan: about this many bytes, within these bounds
_BATCH_BYTES = 16 << 20
_BATCH_ROWS = (256, 65_536)


@dataclass(frozen=True)
class Finding:
    """One problem: which check found it, how bad, where, and what.

    ``episode_id`` and ``step`` are None where the problem is not one step's (a run, a
    memory snapshot, a scalar tag: the message names the snapshot or tag). For ``scalars``
    findings, ``step`` is the logged global step.

    Example:
        >>> print(Finding("alignment", "error", "steps", "R", 3, 17, "is_first set after the first step"))
        steps run=R episode=3 step=17: is_first set after the first step
    """

    check: str
    severity: Severity
    table: str
    run_id: str | None
    episode_id: int | None
    step: int | None
    message: str

    def __str__(self) -> str:
        where = [self.table]
        if self.run_id is not None:
            where.append(f"run={self.run_id}")
        if self.episode_id is not None:
            where.append(f"episode={self.episode_id}")
        if self.step is not None:
            where.append(f"step={self.step}")
        return f"{' '.join(where)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready values.

        Example:
            >>> Finding("gaps", "error", "steps", "R", 0, 5, "step 5 is missing").to_dict()["step"]
            5
        """
        return {"check": self.check, "severity": self.severity, "table": self.table, "run_id": self.run_id,
                "episode_id": self.episode_id, "step": self.step, "message": self.message}


@dataclass
class Report:
    """What :func:`check_store` found.

    Attributes:
        store: the store's path.
        findings: the findings kept (each check's first ``max_findings``), check by check.
        skipped: checks that did not apply, with the reason (``{"memory": "no rows in memory"}``).
        counts: per check run, ``{"errors": n, "warnings": n, "listed": n, "seconds": s}``:
            every finding counted, ``listed`` of them kept in ``findings``.
        parameters: the thresholds and checks asked for.

    Example:
        >>> r = Report("s", [Finding("gaps", "error", "steps", "R", 0, 5, "step 5 is missing")], {},
        ...            {"gaps": {"errors": 1, "warnings": 0, "listed": 1, "seconds": 0.0}}, {})
        >>> r.ok, r.errors, r.warnings
        (False, 1, 0)
        >>> print(r)
        steps run=R episode=0 step=5: step 5 is missing
        1 error, 0 warnings in 1 check (gaps: 1 error)
    """

    store: str
    findings: list[Finding]
    skipped: dict[str, str]
    counts: dict[str, dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        """Errors found, listed or not."""
        return sum(int(c["errors"]) for c in self.counts.values())

    @property
    def warnings(self) -> int:
        """Warnings found, listed or not."""
        return sum(int(c["warnings"]) for c in self.counts.values())

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return self.errors == 0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values: store, ok, counts per check, parameters, findings.

        Example:
            >>> sorted(Report("s", [], {"memory": "no rows in memory"}, {}, {}).to_dict())
            ['checks', 'errors', 'findings', 'ok', 'parameters', 'skipped', 'store', 'warnings']
        """
        return {"store": self.store, "ok": self.ok, "errors": self.errors, "warnings": self.warnings,
                "parameters": dict(self.parameters), "checks": {k: dict(v) for k, v in self.counts.items()},
                "skipped": dict(self.skipped), "findings": [f.to_dict() for f in self.findings]}

    def summary(self) -> str:
        """The summary line: errors and warnings per check, what was not listed, what was skipped.

        Example:
            >>> Report("s", [], {"memory": "no rows in memory"}, {}, {}).summary()
            'no problems found in 0 checks; skipped: memory (no rows in memory)'
        """
        parts = []
        unlisted = 0
        for name, c in self.counts.items():
            found = int(c["errors"]) + int(c["warnings"])
            unlisted += found - int(c["listed"])
            if found:
                kinds = [_plural(int(c[k]), k[:-1]) for k in ("errors", "warnings") if c[k]]
                parts.append(f"{name}: {', '.join(kinds)}")
        checks = _plural(len(self.counts), "check")
        text = (f"{_plural(self.errors, 'error')}, {_plural(self.warnings, 'warning')} in {checks} "
                f"({'; '.join(parts)})" if parts else f"no problems found in {checks}")
        if unlisted:
            text += f"; {unlisted} more not listed (max_findings={self.parameters.get('max_findings')})"
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return text

    def __str__(self) -> str:
        return "\n".join([*(str(f) for f in self.findings), self.summary()])


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class Check:
    """A registered check: its function, the tables it reads (skipped when all are empty), a summary.

    Example:
        >>> CHECKS["gaps"].tables, CHECKS["gaps"].summary
        (('steps',), 'step numbers missing within an episode')
    """

    name: str
    function: Callable[[_Context], None]
    tables: tuple[str, ...]
    summary: str


#: The checks by name, in the order :func:`check_store` runs them.
CHECKS: dict[str, Check] = {}


def _register(name: str, tables: tuple[str, ...], summary: str) -> Callable[[Callable[[_Context], None]],
                                                                             Callable[[_Context], None]]:
    def add(fn: Callable[[_Context], None]) -> Callable[[_Context], None]:
        CHECKS[name] = Check(name, fn, tables, summary)
        return fn

    return add


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Tally:
    """Findings kept per check (the first ``limit``) and counted by severity."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.findings: list[Finding] = []
        self.counts: dict[str, dict[str, Any]] = {}

    def start(self, check: str) -> None:
        self.counts[check] = {"errors": 0, "warnings": 0, "listed": 0, "seconds": 0.0}

    def room(self, check: str) -> int:
        return self.limit - int(self.counts[check]["listed"])

    def count(self, check: str, severity: str, n: int = 1) -> None:
        self.counts[check]["errors" if severity == "error" else "warnings"] += n

    def add(self, finding: Finding) -> None:
        self.count(finding.check, finding.severity)
        if self.room(finding.check) > 0:
            self.findings.append(finding)
            self.counts[finding.check]["listed"] += 1


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class _Context:
    """What a check works with: the store, a DuckDB connection, the parameters, the tally."""

    def __init__(self, st: Store, con: Any, *, min_length: int, frozen_steps: int, spike_sigma: float,
                 tally: _Tally, max_episode_steps: int | None = None, layout: int | None = None) -> None:
        self.st = st
        self.max_episode_steps = max_episode_steps
        self.layout = layout  # the steps layout whose tensors are checked (None: every one)
        self.con = con
        self.min_length = min_length
        self.frozen_steps = frozen_steps
        self.spike_sigma = spike_sigma
        self.tally = tally
        self.check = ""
        self._lease: ReaderLease | None = None
        self._pinned: dict[str, list[Path]] = {}
        self._temp: set[str] = set()

    # -------------------------------------------------------------- findings

    def emit(self, severity: Severity, table: str, run_id: str | None, episode_id: int | None,
             step: int | None, message: str) -> None:
        self.tally.add(Finding(self.check, severity, table, run_id, episode_id, step, message))

    def emit_sql(self, query: str) -> None:
        """Findings from ``query``'s rows: severity, tbl, run_id, episode_id, step, message.

        The result streams in record batches: the first findings are kept, the rest counted.
        """
        rel = self.con.sql(f"select * from ({query}) as f(severity, tbl, run_id, episode_id, step, message) "
                           "order by tbl, run_id, episode_id, step, message")
        reader = rel.to_arrow_reader(4096)
        for batch in reader:
            room = max(self.tally.room(self.check), 0)
            for row in batch.slice(0, room).to_pylist():
                self.emit(row["severity"], row["tbl"], row["run_id"], _int(row["episode_id"]),
                          _int(row["step"]), row["message"])
            if batch.num_rows > room:
                severities = batch.column("severity").slice(room).to_numpy(zero_copy_only=False)
                errors = int(np.count_nonzero(severities == "error"))
                self.tally.count(self.check, "error", errors)
                self.tally.count(self.check, "warning", len(severities) - errors)

    # -------------------------------------------------------------- shared tables

    def rows(self, table: str) -> int:
        return int(self.st.row_count(table))

    def episode_stats(self) -> str:
        """A temporary table of the steps per episode: rows, steps, first and last step and flags."""
        name = "_doctor_episode_stats"
        if name not in self._temp:
            self.con.execute(f"""create or replace temp table {name} as
                select run_id, episode_id, count(*) as n_rows, count(distinct step) as n_steps,
                       min(step) as first_step, max(step) as last_step,
                       arg_min(is_first, step) as first_flag, arg_max(is_last, step) as last_flag,
                       arg_max(is_terminal, step) as last_terminal,
                       min(env_index) as env_lo, max(env_index) as env_hi
                from steps group by run_id, episode_id""")
            self._temp.add(name)
        return name

    def episode_rows(self) -> str:
        """A temporary table of the ``episodes`` rows per (run, episode): copies and what they say."""
        name = "_doctor_episode_rows"
        if name not in self._temp:
            self.con.execute(f"""create or replace temp table {name} as
                select run_id, episode_id, count(*) as copies, bool_or(partial_end) as partial_end,
                       bool_or(terminated) as terminated, min(num_steps) as num_lo, max(num_steps) as num_hi,
                       min(env_index) as env_lo, max(env_index) as env_hi
                from episodes group by run_id, episode_id""")
            self._temp.add(name)
        return name

    def layouts(self, table: str) -> list[tuple[str, int]]:
        """``table``'s layouts as (SQL view, layout number): ``steps`` alone, or ``steps_1``, ..."""
        from rlarrow.core.store import layout_number

        dirs = self.st.layout_dirs(table)
        if len(dirs) <= 1:
            return [(table, layout_number(dirs[0]) if dirs else 1)]
        return [(f"{table}_{layout_number(d)}", layout_number(d)) for d in dirs
                if table != "steps" or self.layout is None or layout_number(d) == self.layout]

    def files(self, table: str, layout: int) -> list[Path]:
        """The files of one layout of ``table``, pinned (readable whatever compactions do meanwhile)."""
        from rlarrow.core.store import layout_directory

        if table not in self._pinned:
            if self._lease is None:
                self._lease = self.st.lease()
            self._pinned.update(self._lease.pin_view(self.st, [table]))
        directory = layout_directory(table, layout)
        return [f for f in self._pinned[table] if f.parent.name == directory]

    def batches(self, table: str, layout: int, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        """``columns`` of one layout of ``table``, streamed in record batches of about 16 MiB."""
        files = self.files(table, layout)
        if not files:
            return
        dataset = self.st.dataset(table, layout=layout, files=files)
        width = sum(_row_bytes(dataset.schema.field(c).type) for c in columns)
        rows = int(min(max(_BATCH_BYTES // max(width, 1), _BATCH_ROWS[0]), _BATCH_ROWS[1]))
        yield from dataset.to_batches(columns=list(columns), batch_size=rows, batch_readahead=2,
                                      fragment_readahead=1)

    def close(self) -> None:
        for name in self._temp:
            self.con.execute(f"drop table if exists {name}")
        self._temp.clear()
        if self._lease is not None:
            self._lease.release()
            self._lease = None


def _row_bytes(type_: pa.DataType) -> int:
    """About how many bytes one value of ``type_`` takes in memory."""
    if isinstance(type_, pa.ExtensionType):
        return _row_bytes(type_.storage_type)
    if pa.types.is_fixed_size_list(type_):
        return int(type_.list_size) * _row_bytes(type_.value_type)
    if pa.types.is_struct(type_):
        return sum(_row_bytes(f.type) for f in type_)
    if pa.types.is_fixed_size_binary(type_):
        return int(type_.byte_width)
    try:
        return max(int(type_.bit_width) // 8, 1)
    except ValueError:  # variable width (strings)
        return 32


# ------------------------------------------------------------------ tensors as NumPy


def _valid(arr: pa.Array, parent: np.ndarray | None) -> np.ndarray:
    own = (np.ones(len(arr), bool) if arr.null_count == 0
           else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool))
    return own if parent is None else own & parent


def _float_leaves(name: str, arr: pa.Array, parent: np.ndarray | None = None) -> Iterator[
        tuple[str, np.ndarray, np.ndarray]]:
    """Each float tensor of ``arr`` (a struct's fields, at any depth) as ``(name, values, valid rows)``.

    ``values`` is ``(rows, *shape)`` with null rows filled with 0 (``valid`` says which rows hold
    a value); both layouts, zero-copy where Arrow allows.
    """
    from rlarrow.core.tensors import TensorType, tensor_dtype, to_numpy

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    type_ = arr.type
    valid = _valid(arr, parent)
    if pa.types.is_struct(type_):
        for i, f in enumerate(type_):
            yield from _float_leaves(f"{name}.{f.name}", arr.field(i), valid)
        return
    if not (type_.numpy_dtype.kind == "f" if isinstance(type_, TensorType)
            else pa.types.is_floating(tensor_dtype(type_))):
        return
    yield name, np.asarray(to_numpy(arr, fill_value=0)), valid


def _element(shape: tuple[int, ...], flat_index: int) -> str:
    """``[i, j]`` for an element of a tensor of ``shape`` ('' for a scalar)."""
    if not shape:
        return ""
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape)) + "]"


def _keys(batch: pa.RecordBatch, rows: np.ndarray) -> list[tuple[str, int, int]]:
    taken = batch.select(["run_id", "episode_id", "step"]).take(pa.array(rows, pa.int64()))
    return list(zip(taken.column(0).to_pylist(), taken.column(1).to_pylist(), taken.column(2).to_pylist(),
                    strict=True))


def _tensor_columns(ctx: _Context, layout: int, wanted: Sequence[str]) -> list[str]:
    schema = ctx.st.schema("steps", layout=layout)
    return [c for c in wanted if schema is not None and c in schema.names]


# ------------------------------------------------------------------ the checks


@_register("alignment", ("steps",), "RLDS is_first / is_last / is_terminal flags per episode")
def _alignment(ctx: _Context) -> None:
    stats, eps = ctx.episode_stats(), ctx.episode_rows()
    ctx.emit_sql(f"""
        select 'error' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.step,
               'is_first set after the first step (the episode starts at step ' || e.first_step || ')'
                   as message
        from steps s join {stats} e using (run_id, episode_id) where s.is_first and s.step > e.first_step
        union all
        select 'error', 'steps', run_id, episode_id, first_step, 'the first step lacks is_first'
        from {stats} where not first_flag
        union all
        select 'error', 'steps', s.run_id, s.episode_id, s.step,
               'is_last set before the last step (the episode goes on to step ' || e.last_step || ')'
        from steps s join {stats} e using (run_id, episode_id) where s.is_last and s.step < e.last_step
        union all
        select 'error', 'steps', e.run_id, e.episode_id, e.last_step,
               'the last step lacks is_last, but the episodes row says the episode ended '
               || '(partial_end is false)'
        from {stats} e join {eps} r using (run_id, episode_id) where not e.last_flag and not r.partial_end
        union all
        select 'error', 'steps', run_id, episode_id, step, 'is_terminal set on a step without is_last'
        from steps where is_terminal and not is_last
        union all
        select 'error', 'episodes', e.run_id, e.episode_id, e.last_step,
               case when r.terminated
                    then 'the episodes row says terminated, but the last step is not is_terminal'
                    else 'the last step is is_terminal, but the episodes row says not terminated' end
        from {stats} e join {eps} r using (run_id, episode_id)
        where e.last_flag and r.terminated <> e.last_terminal""")


@_register("duplicates", ("steps", "episodes", "runs", "memory", "scalars"),
           "two rows for one key in steps, episodes, runs, memory (scalars: a warning)")
def _duplicates(ctx: _Context) -> None:
    parts = []
    if ctx.rows("steps"):
        stats = ctx.episode_stats()
        parts.append(f"""
            select 'error' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.step,
                   count(*) || ' rows for this (run_id, episode_id, step)' as message
            from steps s semi join (select run_id, episode_id from {stats} where n_rows > n_steps) d
                using (run_id, episode_id)
            group by s.run_id, s.episode_id, s.step having count(*) > 1""")
    if ctx.rows("episodes"):
        parts.append(f"""
            select 'error', 'episodes', run_id, episode_id, null,
                   copies || ' rows in episodes for this episode'
            from {ctx.episode_rows()} where copies > 1""")
    if ctx.rows("runs"):
        parts.append("""
            select 'error', 'runs', run_id, null, null, count(*) || ' rows in runs for this run_id'
            from runs group by run_id having count(*) > 1""")
    if ctx.rows("memory"):
        parts.append("""
            select 'error', 'memory', run_id, null, null,
                   'snapshot ' || snapshot_id || ': ' || count(*)
                   || ' (memory_index, env_index) pairs have more than one row (first: memory_index '
                   || min(k).m || ', env_index ' || min(k).e || ')'
            from (select run_id, snapshot_id, struct_pack(m := memory_index, e := env_index) as k
                  from memory group by run_id, snapshot_id, memory_index, env_index having count(*) > 1)
            group by run_id, snapshot_id""")
    if ctx.rows("scalars"):
        parts.append("""
            select 'warning', 'scalars', run_id, null, min(step),
                   'tag ''' || tag || ''': ' || count(*) || ' (step, wall_time) pairs logged more than once'
            from (select run_id, tag, step from scalars
                  group by run_id, tag, step, wall_time having count(*) > 1)
            group by run_id, tag""")
    ctx.emit_sql(" union all ".join(parts))


@_register("references", ("steps", "episodes", "memory", "scalars", "sources"),
           "steps and episodes rows that miss each other or disagree, run ids with no runs row")
def _references(ctx: _Context) -> None:
    stats, eps = ctx.episode_stats(), ctx.episode_rows()
    ctx.emit_sql(f"""
        select 'warning' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.first_step as step,
               'no row in episodes for this episode (' || s.n_rows || ' steps)' as message
        from {stats} s anti join {eps} r using (run_id, episode_id)
        union all
        select 'warning', 'episodes', r.run_id, r.episode_id, null,
               'no steps for this episode (its row says num_steps ' || r.num_hi || ')'
        from {eps} r anti join {stats} s using (run_id, episode_id)
        union all
        select 'error', 'episodes', r.run_id, r.episode_id, null,
               'num_steps is ' || r.num_lo || ' but steps has ' || s.n_rows || ' rows for this episode'
        from {eps} r join {stats} s using (run_id, episode_id)
        where r.num_lo <> s.n_rows or r.num_hi <> s.n_rows
        union all
        select 'error', 'steps', s.run_id, s.episode_id, s.first_step,
               case when s.env_lo <> s.env_hi then 'the steps of this episode have env_index '
                        || s.env_lo || ' to ' || s.env_hi
                    else 'env_index is ' || s.env_lo || ' in steps but ' || r.env_lo || ' in episodes' end
        from {stats} s join {eps} r using (run_id, episode_id)
        where s.env_lo <> s.env_hi or r.env_lo <> s.env_lo or r.env_hi <> s.env_lo""")
    parts = [f"""select 'warning' as severity, {_quote(t)} as tbl, run_id, null::bigint as episode_id,
                        null::bigint as step, 'run_id has rows in {t} but no row in runs' as message
                 from (select distinct run_id from {t}) anti join runs using (run_id)"""
             for t in ("episodes", "steps", "memory", "scalars", "sources") if ctx.rows(t)]
    if parts:
        ctx.emit_sql(" union all ".join(parts))


@_register("gaps", ("steps",), "step numbers missing within an episode")
def _gaps(ctx: _Context) -> None:
    stats = ctx.episode_stats()
    ctx.emit_sql(f"""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, least(first_step, 0) as step,
               case when first_step > 0 then
                   (case when first_step = 1 then 'step 0 is'
                         else 'steps 0 to ' || (first_step - 1) || ' are' end)
                   || ' missing: the episode starts at step ' || first_step
                    else 'step numbers start at ' || first_step || ', below 0' end as message
        from {stats} where first_step <> 0
        union all
        select 'error', 'steps', run_id, episode_id, prev + 1,
               case when step - prev = 2 then 'step ' || (prev + 1) || ' is missing'
                    else 'steps ' || (prev + 1) || ' to ' || (step - 1) || ' are missing' end
               || ' (the episode goes on at step ' || step || ')'
        from (select run_id, episode_id, step,
                     lag(step) over (partition by run_id, episode_id order by step) as prev
              from (select distinct s.run_id, s.episode_id, s.step from steps s
                    semi join (select run_id, episode_id from {stats}
                               where n_steps <> last_step - first_step + 1) g using (run_id, episode_id)))
        where step - prev > 1""")


@_register("monotonic", ("steps", "scalars"),
           "steps stored out of step order; scalar wall times going backwards as the step grows")
def _monotonic(ctx: _Context) -> None:
    parts = []
    if ctx.rows("steps"):
        for _, layout in ctx.layouts("steps"):
            files = ctx.files("steps", layout)
            if not files:
                continue
            listed = "[" + ", ".join(_quote(os.fspath(f)) for f in files) + "]"
            # a row's place: its file in commit order, then its row in the file
            parts.append(f"""
                select 'warning' as severity, 'steps' as tbl, run_id, episode_id, arg_min(step, pos) as step,
                       count(*) || ' step(s) stored out of order: step ' || arg_min(step, pos)
                       || ' comes after step ' || arg_min(prev, pos) || ' in the files' as message
                from (select run_id, episode_id, step, pos,
                             lag(step) over (partition by run_id, episode_id order by pos) as prev
                      from (select run_id, episode_id, step,
                                   list_position({listed}, filename)::bigint * 4294967296
                                       + file_row_number as pos
                            from read_parquet({listed}, filename = true, file_row_number = true)))
                where step < prev group by run_id, episode_id""")
    if ctx.rows("scalars"):
        parts.append("""
            select 'warning', 'scalars', run_id, null, arg_min(step, k),
                   'tag ''' || tag || ''': wall_time goes backwards ' || count(*) || ' time(s) as the step '
                   || 'grows (first at step ' || arg_min(step, k)
                   || '): steps logged again, by a resumed run?'
            from (select run_id, tag, step, wall_time, struct_pack(s := step, w := wall_time) as k,
                         lag(wall_time) over (partition by run_id, tag order by step, wall_time) as prev
                  from scalars where wall_time is not null)
            where wall_time < prev group by run_id, tag""")
    if parts:
        ctx.emit_sql(" union all ".join(parts))


@_register("nonfinite", ("steps",), "NaN or infinity in rewards, discounts, observations and actions")
def _nonfinite(ctx: _Context) -> None:
    ctx.emit_sql("""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, step,
               concat_ws('; ', case when isnan(reward) or isinf(reward) then 'reward is ' || reward end,
                         case when isnan(discount) or isinf(discount) then 'discount is ' || discount end)
                   as message
        from steps where isnan(reward) or isinf(reward) or isnan(discount) or isinf(discount)""")
    for _, layout in ctx.layouts("steps"):
        columns = _tensor_columns(ctx, layout, ("observation", "action"))
        if not columns:
            continue
        for batch in ctx.batches("steps", layout, ["run_id", "episode_id", "step", *columns]):
            for column in columns:
                for name, values, valid in _float_leaves(column, batch.column(column)):
                    flat = values.reshape(len(values), -1)
                    bad_elements = ~np.isfinite(flat)
                    bad = np.flatnonzero(bad_elements.any(axis=1) & valid)
                    if not len(bad):
                        continue
                    room = ctx.tally.room(ctx.check)
                    ctx.tally.count(ctx.check, "error", max(len(bad) - max(room, 0), 0))
                    bad = bad[:max(room, 0)]
                    for row, (run_id, episode_id, step) in zip(bad.tolist(), _keys(batch, bad), strict=True):
                        first = int(np.argmax(bad_elements[row]))
                        n_bad = int(bad_elements[row].sum())
                        size = flat.shape[1]
                        ctx.emit("error", "steps", run_id, episode_id, step,
                                 f"{name}{_element(values.shape[1:], first)} is {flat[row, first]}"
                                 + (f" ({n_bad} of {size} elements not finite)" if size > 1 else ""))


@_register("frozen", ("steps",), "one observation repeated for more than frozen_steps steps")
def _frozen(ctx: _Context) -> None:
    for view, layout in ctx.layouts("steps"):
        if not _tensor_columns(ctx, layout, ("observation",)):
            continue
        # runs of equal hashes (consecutive steps: step - rank within the hash is constant),
        # then each run longer than frozen_steps confirmed by comparing the values themselves
        ctx.emit_sql(f"""
            with h as (select run_id, episode_id, step, hash(observation) as h from {view}
                       where observation is not null),
            c as (select run_id, episode_id, min(step) as s0, max(step) as s1, count(*) as n
                  from (select *, step - row_number() over (partition by run_id, episode_id, h
                                                            order by step) as grp from h)
                  group by run_id, episode_id, h, grp having count(*) > {int(ctx.frozen_steps)})
            select 'warning' as severity, 'steps' as tbl, c.run_id, c.episode_id, c.s0 as step,
                   'the same observation for ' || c.n || ' consecutive steps (' || c.s0 || ' to ' || c.s1
                   || '; frozen_steps=' || {int(ctx.frozen_steps)} || ')' as message
            from c join {view} v on v.run_id = c.run_id and v.episode_id = c.episode_id
                and v.step between c.s0 and c.s1
            group by c.run_id, c.episode_id, c.s0, c.s1, c.n having count(distinct v.observation) = 1""")


@_register("spikes", ("steps",), "float action elements more than spike_sigma std from their mean")
def _spikes(ctx: _Context) -> None:
    sigma = ctx.spike_sigma
    for _, layout in ctx.layouts("steps"):
        if not _tensor_columns(ctx, layout, ("action",)):
            continue
        # pass 1: count, mean and sum of squared deviations per element (Chan et al.'s merge)
        stats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for batch in ctx.batches("steps", layout, ["action"]):
            for name, values, valid in _float_leaves("action", batch.column("action")):
                x = values.reshape(len(values), -1)[valid].astype(np.float64)
                ok = np.isfinite(x)
                n_b = ok.sum(axis=0).astype(np.float64)
                xs = np.where(ok, x, 0.0)
                mean_b = np.divide(xs.sum(axis=0), n_b, out=np.zeros_like(n_b), where=n_b > 0)
                m2_b = np.where(ok, (xs - mean_b) ** 2, 0.0).sum(axis=0)
                if name not in stats:
                    stats[name] = (n_b, mean_b, m2_b)
                    continue
                n_a, mean_a, m2_a = stats[name]
                n = n_a + n_b
                delta = mean_b - mean_a
                frac = np.divide(n_b, n, out=np.zeros_like(n), where=n > 0)
                stats[name] = (n, mean_a + delta * frac, m2_a + m2_b + delta ** 2 * n_a * frac)
        if not stats:
            continue
        std = {name: np.sqrt(np.divide(m2, n, out=np.zeros_like(n), where=n > 0))
               for name, (n, _, m2) in stats.items()}
        # pass 2: the rows with an element beyond sigma std
        for batch in ctx.batches("steps", layout, ["run_id", "episode_id", "step", "action"]):
            for name, values, valid in _float_leaves("action", batch.column("action")):
                _, mean, _ = stats[name]
                s = std[name]
                x = values.reshape(len(values), -1).astype(np.float64)
                with np.errstate(invalid="ignore", divide="ignore"):
                    z = np.where(s > 0, np.abs(x - mean) / np.where(s > 0, s, 1.0), 0.0)
                z = np.where(np.isfinite(z), z, 0.0)
                bad = np.flatnonzero((z > sigma).any(axis=1) & valid)
                if not len(bad):
                    continue
                room = max(ctx.tally.room(ctx.check), 0)
                ctx.tally.count(ctx.check, "warning", max(len(bad) - room, 0))
                bad = bad[:room]
                for row, (run_id, episode_id, step) in zip(bad.tolist(), _keys(batch, bad), strict=True):
                    e = int(np.argmax(z[row]))
                    ctx.emit("warning", "steps", run_id, episode_id, step,
                             f"{name}{_element(values.shape[1:], e)} = {x[row, e]:.6g} is "
                             f"{z[row, e]:.3g} std from its mean {mean[e]:.6g} "
                             f"(std {s[e]:.3g}; spike_sigma={sigma:g})")


@_register("short_episodes", ("steps",), "episodes of fewer than min_length steps")
def _short_episodes(ctx: _Context) -> None:
    stats = ctx.episode_stats()
    ctx.emit_sql(f"""
        select 'warning' as severity, 'steps' as tbl, s.run_id, s.episode_id, s.first_step as step,
               'the episode has ' || s.n_steps || ' step(s), fewer than min_length=' || {int(ctx.min_length)}
               || (case when s.n_steps = 1 then ' (no action: it makes no transition)' else '' end)
               || (case when r.partial_end then '; partial_end: the recording stopped in it' else '' end)
               as message
        from {stats} s left join {ctx.episode_rows()} r using (run_id, episode_id)
        where s.n_steps < {int(ctx.min_length)}""")


@_register("memory", ("memory",), "replay-memory rows that disagree with their snapshot's buffer state")
def _memory(ctx: _Context) -> None:
    # filled as the pointers say: every row once full, else the rows before the write pointer,
    # and at the pointer the envs below env_pointer (written by a partial add_samples)
    expected = """case when is_full then true when memory_index < write_pointer then true
                       when memory_index > write_pointer then false
                       else env_index < coalesce(env_pointer, 0) end"""
    ctx.emit_sql(f"""
        with m as (
            select run_id, snapshot_id, count(*) as n_rows,
                   min(memory_size) as size_lo, max(memory_size) as size_hi,
                   min(num_envs) as envs_lo, max(num_envs) as envs_hi,
                   count(distinct struct_pack(f := is_full, w := write_pointer, e := env_pointer)) as states,
                   any_value(is_full) as is_full, any_value(write_pointer) as wp,
                   any_value(env_pointer) as ep,
                   count_if(memory_index < 0 or memory_index >= memory_size) as bad_index,
                   min(memory_index) filter (where memory_index < 0 or memory_index >= memory_size)
                       as bad_index_at,
                   count_if(env_index < 0 or env_index >= num_envs) as bad_env,
                   min(env_index) filter (where env_index < 0 or env_index >= num_envs) as bad_env_at,
                   count_if(filled is not null and is_full is not null and write_pointer is not null
                            and filled <> ({expected})) as bad_fill,
                   min(struct_pack(m := memory_index, e := env_index, f := filled)) filter (
                       where filled is not null and is_full is not null and write_pointer is not null
                       and filled <> ({expected})) as bad_fill_at
            from memory group by run_id, snapshot_id)
        select 'error' as severity, 'memory' as tbl, run_id, null::bigint as episode_id, null::bigint as step,
               'snapshot ' || snapshot_id || ': ' || message as message
        from (
            select run_id, snapshot_id,
                   'memory_size differs between its rows (' || size_lo || ' to ' || size_hi || ')' as message
            from m where size_lo <> size_hi
            union all
            select run_id, snapshot_id,
                   'num_envs differs between its rows (' || envs_lo || ' to ' || envs_hi || ')'
            from m where envs_lo <> envs_hi
            union all
            select run_id, snapshot_id, 'is_full, write_pointer or env_pointer differs between its rows ('
                   || states || ' states)' from m where states > 1
            union all
            select run_id, snapshot_id,
                   bad_index || ' row(s) have a memory_index outside 0..memory_size - 1 = ' || (size_hi - 1)
                    || ' (first: ' || bad_index_at || ')' from m where bad_index > 0
            union all
            select run_id, snapshot_id, bad_env || ' row(s) have an env_index outside 0..num_envs - 1 = '
                   || (envs_hi - 1) || ' (first: ' || bad_env_at || ')' from m where bad_env > 0
            union all
            select run_id, snapshot_id, 'write_pointer ' || wp || ' is outside the buffer (memory_size '
                   || size_hi || ')' from m where states = 1 and (wp < 0 or wp >= size_hi)
            union all
            select run_id, snapshot_id,
                   'env_pointer ' || ep || ' is outside the buffer (num_envs ' || envs_hi || ')'
            from m where states = 1 and (ep < 0 or ep >= envs_hi)
            union all
            select run_id, snapshot_id, 'is_full is ' || is_full || ' and write_pointer is ' || wp
                   || ', but filled is ' || bad_fill_at.f || ' at memory_index ' || bad_fill_at.m
                   || ', env_index ' || bad_fill_at.e || ' (' || bad_fill
                   || ' row(s) whose filled flag the pointers contradict)'
            from m where states = 1 and bad_fill > 0 and wp >= 0 and wp < size_hi)""")


@_register("null_observations", ("steps",), "null observations on steps that are not an episode's last")
def _null_observations(ctx: _Context) -> None:
    # a transition's next observation is the next step's: null inside an episode breaks it
    ctx.emit_sql(" union all ".join(f"""
        select 'error' as severity, 'steps' as tbl, run_id, episode_id, min(step) as step,
               'the observation is null on ' || count(*) || ' step(s) that are not the last (first: step '
               || min(step) || '): the transitions into them have no next observation; the source lost '
               || 'them (delete the episode, or import it again from a source that has them)' as message
        from {view} where observation is null and not is_last
        group by run_id, episode_id""" for view, _ in ctx.layouts("steps")))


_SKRL_MEMORY_ID = r"'^\d{2}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}-\d{6}_memory_(0x[0-9a-fA-F]+)$'"


@_register("export_cuts", ("episodes",),
           "episodes of a memory cut at an export's edge that the next export continues")
def _export_cuts(ctx: _Context) -> None:
    if not ctx.rows("memory"):
        return
    ctx.emit_sql(f"""
        with snaps as (
            select distinct run_id, snapshot_name as name,
                   regexp_extract(snapshot_name, {_SKRL_MEMORY_ID}, 1) as memory
            from memory where regexp_matches(snapshot_name, {_SKRL_MEMORY_ID})),
        e as (
            select run_id, episode_id, partial_start, partial_end,
                   metadata->>'$.snapshot' as first_name,
                   coalesce(metadata->>'$.snapshot_last', metadata->>'$.snapshot') as last_name,
                   metadata->>'$.partial_start_at' as start_at, metadata->>'$.partial_end_at' as end_at
            from episodes
            where (partial_start or partial_end) and metadata->>'$.source' = 'memory'),
        cut as (
            select e.run_id, e.episode_id, e.end_at as cut_at, e.last_name as here,
                   (select min(s.name) from snaps s where s.run_id = e.run_id
                        and s.memory = regexp_extract(e.last_name, {_SKRL_MEMORY_ID}, 1)
                        and s.name > e.last_name) as other, 'end' as side
            from e where e.partial_end
            union all
            select e.run_id, e.episode_id, e.start_at, e.first_name,
                   (select max(s.name) from snaps s where s.run_id = e.run_id
                        and s.memory = regexp_extract(e.first_name, {_SKRL_MEMORY_ID}, 1)
                        and s.name < e.first_name), 'start'
            from e where e.partial_start)
        select 'warning' as severity, 'episodes' as tbl, run_id, episode_id, null::bigint as step,
               case when cut_at = 'gap'
                    then 'partial_' || side || ' at a gap: an export of this memory is missing between '
                         || (case when side = 'end' then here || ' and ' || other
                                  else other || ' and ' || here end)
                         || ' (the episode goes on in the lost rows); convert the missing export with the '
                         || 'others to join it'
                    else 'partial_' || side || ' at the ' || side || ' of export ' || here || ', but export '
                         || other || ' of the same memory '
                         || (case when side = 'end' then 'follows' else 'precedes' end)
                         || ': the episode goes on there, unrolled apart; delete the run''s episodes and '
                         || 'convert the exports together (rlarrow convert ... --episodes) to join them' end
                   as message
        from cut where other is not null""")


@_register("reset_rows", ("episodes", "steps"),
           "a vector env's autoreset row counted as an episode's first step")
def _reset_rows(ctx: _Context) -> None:
    # with next-step autoreset the step after an end returns the reset observation with reward 0;
    # kept as a step (an export unrolled alone), it starts the next episode at the final
    # observation of the one before, instead of at the reset observation
    ctx.emit_sql(" union all ".join(f"""(
        with e as (
            select run_id, episode_id, env_index, metadata->>'$.autoreset' as mode,
                   lag(episode_id) over w as prev_id, lag(partial_end) over w as prev_partial_end
            from episodes where metadata->>'$.source' = 'memory'
            window w as (partition by run_id, env_index order by episode_id))
        select 'warning' as severity, 'steps' as tbl, e.run_id, e.episode_id, 0 as step,
               'the first step is the autoreset row of episode ' || e.prev_id
               || ' (reward 0, its observation that episode''s final one): next-step autoreset rows are '
               || 'no step of any episode; delete the run''s episodes and convert its exports again '
               || '(rlarrow convert ... --episodes drops them)'
               as message
        from e join {view} f on f.run_id = e.run_id and f.episode_id = e.episode_id and f.step = 0
               join {view} l on l.run_id = e.run_id and l.episode_id = e.prev_id and l.is_last
        where e.mode = 'next-step' and not e.prev_partial_end and f.reward = 0
          and l.observation is not null and f.observation = l.observation)"""
                                    for view, _ in ctx.layouts("steps")))


@_register("time_limit", ("episodes",),
           "episodes longer than the env's time limit: episodes joined across it")
def _time_limit(ctx: _Context) -> None:
    given = "null" if ctx.max_episode_steps is None else str(int(ctx.max_episode_steps))
    ctx.emit_sql(f"""
        select 'warning' as severity, 'episodes' as tbl, run_id, episode_id, null::bigint as step,
               'the episode has ' || (num_steps - 1) || ' transitions, more than max_episode_steps=' || lim
               || ': episodes joined across the time limit (a memory without truncated, such as '
               || 'skrl''s DQN''s)'
               || (case when partial_start then '; it is the first, partial episode, whose start (and so its '
                        || 'time-limit cuts) the data does not show'
                        else '; convert the memory again with --max-episode-steps ' || lim
                             || ' to cut them' end)
               as message
        from (select *, coalesce({given}, try_cast(metadata->>'$.max_episode_steps' as bigint)) as lim
              from episodes)
        where lim is not null and num_steps - 1 > lim""")


@_register("empty_imports", ("runs", "sources"), "imported sources that gave no rows")
def _empty_imports(ctx: _Context) -> None:
    if not ctx.rows("sources"):
        return
    def none_in(table: str, extra: str = "") -> str:
        if not ctx.rows(table):
            return "true"
        return f"not exists (select 1 from {table} t where t.run_id = s.run_id{extra})"

    memory = none_in("memory", " and t.snapshot_id = s.snapshot_id")
    ctx.emit_sql(f"""
        select 'warning' as severity, 'sources' as tbl, run_id, null::bigint as episode_id,
               null::bigint as step, message
        from (select s.run_id, s.path,
                     case when s.format = 'tfevents' and {none_in("scalars")} then
                              'event file ' || s.path || ' was imported as 0 scalars: the run has none (an '
                              || 'event file of histograms, images or text only, or an empty log?); '
                              || 'check the file, and delete the run if it holds nothing'
                          when s.snapshot_id is not null and {memory} then
                              'memory export ' || s.path || ' was imported as 0 rows (snapshot '
                              || s.snapshot_id || ' has no rows in memory); check the file and convert '
                              || 'it again'
                          when s.format <> 'tfevents' and s.snapshot_id is null and {none_in("steps")}
                               and {none_in("scalars")} and {none_in("memory")} then
                              s.format || ' source ' || s.path || ' was imported as 0 rows: its run has no '
                              || 'steps, scalars or memory rows; check the source, and delete the run if it '
                              || 'holds nothing'
                     end as message
              from sources s)
        where message is not null""")


_INTERLEAVE_LAGS = 16


@_register("interleaved", ("memory",),
           "one-env memory snapshots whose rows are several envs interleaved (num_envs not given)")
def _interleaved(ctx: _Context) -> None:
    from rlarrow.io.memory.stored import snapshots

    one_env = ctx.con.sql("select run_id, snapshot_id from memory group by run_id, snapshot_id "
                          f"having max(num_envs) = 1 and count(*) >= {4 * _INTERLEAVE_LAGS}").fetchall()
    for run_id, snapshot_id in one_env:
        for snap in snapshots(ctx.st, run_id=run_id, snapshot_id=snapshot_id):
            found = _interleaving(snap.tensors)
            if found is not None:
                lag, why = found
                ctx.emit("error", "memory", run_id, None, None,
                         f"snapshot {snapshot_id} ({snap.name}): read as one env, its rows look like {lag} "
                         f"envs interleaved ({why}); a csv export converted without its num_envs? convert "
                         f"it again with --num-envs {lag}, its episodes are garbage")


def _interleaving(tensors: dict[str, np.ndarray]) -> tuple[int, str] | None:
    """The number of envs a one-env memory's rows interleave, and the evidence; None if they do not.

    With next states: row t's next state is row t + k's state for most rows at one lag k > 1 and
    for few at lag 1. Without: states k rows apart are far closer (median distance under a
    quarter) than neighbours, which envs whose state moves a little each step show and
    independent or unrelated rows never do.
    """
    name = next((n for n in ("observations", "states") if n in tensors), None)
    if name is None:
        return None
    states = tensors[name].reshape(len(tensors[name]), -1).astype(np.float64)
    keep = ~np.isnan(states).all(axis=1)
    states = states[: int(np.flatnonzero(keep)[-1]) + 1] if keep.any() else states[:0]
    n = len(states)
    if n < 4 * _INTERLEAVE_LAGS:
        return None
    nxt = tensors.get(f"next_{name}")
    lags = range(1, _INTERLEAVE_LAGS + 1)
    if nxt is not None:
        nxt = nxt.reshape(len(nxt), -1)[:n].astype(np.float64)
        share = [float(np.mean(np.all(nxt[:n - k] == states[k:], axis=1))) for k in lags]
        best = int(np.argmax(share[1:])) + 2
        if share[0] < 0.5 and share[best - 1] >= 0.9:
            return best, (f"the next state of a row is the state {best} rows on in {share[best - 1]:.0%} "
                          f"of rows, the state of the next row in {share[0]:.0%}")
        return None
    dist = [float(np.median(np.linalg.norm(states[k:] - states[:n - k], axis=1))) for k in lags]
    best = int(np.argmin(dist[1:])) + 2
    if dist[0] > 0 and dist[best - 1] < 0.25 * dist[0]:
        return best, (f"rows {best} apart differ by {dist[best - 1]:.3g} (median), neighbouring rows by "
                      f"{dist[0]:.3g}")
    return None


# ------------------------------------------------------------------ entry point


def check_store(
    store: StoreLike,
    *,
    min_length: int = DEFAULT_MIN_LENGTH,
    frozen_steps: int = DEFAULT_FROZEN_STEPS,
    spike_sigma: float = DEFAULT_SPIKE_SIGMA,
    checks: Sequence[str] | None = None,
    max_findings: int = DEFAULT_MAX_FINDINGS,
    memory_limit: str | None = None,
    max_episode_steps: int | None = None,
    layout: int | None = None,
) -> Report:
    """Check ``store`` for the problems :data:`CHECKS` know (module docs: what each finds).

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        min_length: episodes of fewer steps (rows) are reported (``short_episodes``).
        frozen_steps: one observation for more than this many consecutive steps is reported.
        spike_sigma: action elements this many standard deviations from their mean are reported.
        checks: the names of the checks to run (default: all, in :data:`CHECKS` order).
        max_findings: findings kept per check; the rest are counted in :attr:`Report.counts`.
        memory_limit: DuckDB's memory limit for the checks' joins, aggregates and windows
            (``"1GB"``), past which they spill to a temporary directory (deleted afterwards);
            None: DuckDB's default (80% of RAM). The NumPy checks hold a few record batches.
        max_episode_steps: the env's time limit, for ``time_limit`` (default: the one an
            episode's metadata records, where a convert was given it).
        layout: check the observations and actions of this layout of ``steps`` only
            (:meth:`rlarrow.Store.layouts`; a store of PPO and DQN runs has two); None: every
            layout. The checks of episodes, runs and their references cover every run.

    Returns:
        The :class:`Report`: ``ok`` when no check found an error.

    Raises:
        ArgumentError: an unknown check or a threshold out of range.
        StoreError: no store at ``store``, or files DuckDB cannot read.

    Example:
        >>> import numpy as np, rlarrow, tempfile
        >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
        >>> _ = st.append("steps", {"run_id": "r", "episode_id": 0, "step": [0, 2], "env_index": 0,
        ...     "observation": np.zeros((2, 2), np.float32), "action": [1, None], "reward": [1.0, None],
        ...     "is_first": [True, False], "is_last": [False, True], "is_terminal": [False, True]})
        >>> report = check_store(st, checks=["gaps", "memory"])
        >>> [str(f) for f in report.findings], report.skipped
        (['steps run=r episode=0 step=1: step 1 is missing (the episode goes on at step 2)'], \
{'memory': 'no rows in memory'})
    """
    chosen = _arguments.names(checks, "checks", what="check")
    names = list(CHECKS) if chosen is None else list(dict.fromkeys(chosen))
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ArgumentError(f"unknown check(s) {', '.join(map(repr, unknown))}: "
                            f"choose from {', '.join(CHECKS)}")
    _arguments.integer(min_length, "min_length", minimum=1)
    _arguments.integer(frozen_steps, "frozen_steps", minimum=1)
    if not (isinstance(spike_sigma, (int, float)) and math.isfinite(spike_sigma) and spike_sigma > 0):
        raise ArgumentError(f"spike_sigma={spike_sigma!r}: pass a positive number of standard deviations")
    _arguments.integer(max_findings, "max_findings", minimum=0)
    if max_episode_steps is not None:
        _arguments.integer(max_episode_steps, "max_episode_steps", minimum=1)
    import duckdb

    from rlarrow.core.store import as_store
    from rlarrow.query.connection import connect

    st = as_store(store, readonly=True)
    if layout is not None:
        have = [info.layout for info in st.layouts("steps")] or [1]
        if int(layout) not in have:
            raise ArgumentError(f"{st.path}: steps has no layout {layout}; it has "
                                f"{', '.join(map(str, have))} (`rlarrow info {st.path}` lists them)")
    parameters = {"min_length": int(min_length), "frozen_steps": int(frozen_steps),
                  "spike_sigma": float(spike_sigma), "checks": names, "max_findings": int(max_findings),
                  "memory_limit": memory_limit, "max_episode_steps": max_episode_steps, "layout": layout}
    tally = _Tally(int(max_findings))
    skipped: dict[str, str] = {}
    con = connect(st, warn=False)
    spill = None
    try:
        if memory_limit is not None:
            spill = tempfile.mkdtemp(prefix="rlarrow-doctor-")
            con.execute(f"set memory_limit = {_quote(memory_limit)}")
            con.execute(f"set temp_directory = {_quote(spill)}")
    except duckdb.Error as exc:
        con.close()
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)
        raise ArgumentError(f"memory_limit={memory_limit!r}: {exc} (pass a size such as '2GB')") from exc
    ctx = _Context(st, con, min_length=int(min_length), frozen_steps=int(frozen_steps),
                   spike_sigma=float(spike_sigma), tally=tally,
                   max_episode_steps=None if max_episode_steps is None else int(max_episode_steps),
                   layout=None if layout is None else int(layout))
    try:
        for name in names:
            check = CHECKS[name]
            if not any(ctx.rows(t) for t in check.tables):
                skipped[name] = "no rows in " + " or ".join(check.tables)
                continue
            ctx.check = name
            tally.start(name)
            began = time.perf_counter()
            try:
                check.function(ctx)
            except duckdb.Error as exc:
                raise StoreError(f"{st.path}: check {name!r} could not read the store ({exc}); "
                                 f"`rlarrow info {st.path}` names a damaged file") from exc
            tally.counts[name]["seconds"] = round(time.perf_counter() - began, 3)
    finally:
        ctx.close()
        con.close()
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)
    order = {n: i for i, n in enumerate(names)}

    def place(f: Finding) -> tuple[Any, ...]:
        return (order[f.check], f.table, f.run_id is None, f.run_id or "", f.episode_id is None,
                f.episode_id or 0, f.step is None, f.step or 0)

    findings = sorted(tally.findings, key=place)
    return Report(os.fspath(st.path), findings, skipped, tally.counts, parameters)


# ------------------------------------------------------------------ fixing what is safe to fix

#: The ``source`` of the ``runs`` rows :func:`fix_store` adds, and ``added_by`` in the metadata of
#: every row it adds.
FIX_SOURCE = "rlarrow check --fix"

# the references check's messages for rows --fix adds (prefix, suffix)
_NO_EPISODES_ROW = "no row in episodes for this episode"
_NO_RUNS_ROW = "but no row in runs"
# delete/label commands shown per hint, and episodes per command
_COMMAND_LINES = 3
_EPISODES_PER_COMMAND = 10


@dataclass(frozen=True)
class Fixed:
    """A row :func:`fix_store` added: its table, its key, what it says.

    ``values`` holds the row's derived columns (``num_steps``, ``return``, flags; ``return`` is
    None where it is not finite or the steps have no reward).

    Example:
        >>> print(Fixed("runs", "ghost", None, "added a runs row"))
        runs run=ghost: added a runs row
    """

    table: str
    run_id: str
    episode_id: int | None
    message: str
    values: dict[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        where = [self.table, f"run={self.run_id}"]
        if self.episode_id is not None:
            where.append(f"episode={self.episode_id}")
        return f"{' '.join(where)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values.

        Example:
            >>> Fixed("runs", "ghost", None, "added a runs row").to_dict()["table"]
            'runs'
        """
        return {"table": self.table, "run_id": self.run_id, "episode_id": self.episode_id,
                "message": self.message, "values": dict(self.values)}


@dataclass(frozen=True)
class Hint:
    """What was not fixed automatically, why, and the commands that would deal with it.

    ``commands`` are ``rlarrow delete`` commands (one per run, a few episodes each; a last
    ``...`` line when there are more), ``label_commands`` the ``rlarrow label`` commands that
    mark the same episodes instead (``--set suspect=true``). Both are empty where no command
    helps (the hint's message says what to do).

    Example:
        >>> print(Hint("short_episodes", "1 episode(s) shorter than min_length", ("rlarrow delete S --run r "
        ...            "--episode 3",)))
        short_episodes: 1 episode(s) shorter than min_length
            rlarrow delete S --run r --episode 3
    """

    check: str
    message: str
    commands: tuple[str, ...] = ()
    label_commands: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"{self.check}: {self.message}", *(f"    {c}" for c in self.commands)]
        if self.label_commands:
            lines.append("  or mark them instead (filter on metadata->>'$.suspect'):")
            lines.extend(f"    {c}" for c in self.label_commands)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The hint as JSON-ready values.

        Example:
            >>> sorted(Hint("memory", "not fixed").to_dict())
            ['check', 'commands', 'label_commands', 'message']
        """
        return {"check": self.check, "message": self.message, "commands": list(self.commands),
                "label_commands": list(self.label_commands)}


@dataclass
class FixReport:
    """What :func:`fix_store` added, in one commit, and what is left for its user.

    Attributes:
        store: the store's path.
        fixed: the rows added (the first ``max_findings`` of the report's parameters; ``added``
            counts them all).
        added: rows added per table (``{}``: nothing to fix safely, the store is unchanged).
        hints: what remains that no safe fix deals with, with the commands that would.
        version_before, version_after: the store's version before and after (one more when
            rows were added: one commit).
        checked: the report the fixes were chosen from.
        remaining: the checks run again after the fix (``checked`` itself when nothing changed).

    Example:
        >>> r = FixReport("s", [], {}, [], 3, 3, Report("s", [], {}, {}, {}), Report("s", [], {}, {}, {}))
        >>> r.changed, r.summary()
        (False, 'nothing to fix safely: the store is unchanged (version 3)')
    """

    store: str
    fixed: list[Fixed]
    added: dict[str, int]
    hints: list[Hint]
    version_before: int
    version_after: int
    checked: Report
    remaining: Report

    @property
    def changed(self) -> bool:
        """Whether rows were added (a new store version)."""
        return self.version_after != self.version_before

    def summary(self) -> str:
        """What the fix did, in one line.

        Example:
            >>> FixReport("s", [], {"runs": 1, "episodes": 2}, [], 3, 4, Report("s", [], {}, {}, {}),
            ...           Report("s", [], {}, {}, {})).summary()
            'added 1 runs row and 2 episodes rows in one commit (version 3 -> 4)'
        """
        if not self.added:
            return f"nothing to fix safely: the store is unchanged (version {self.version_after})"
        rows = " and ".join(f"{n} {table} row{'' if n == 1 else 's'}" for table, n in self.added.items())
        return f"added {rows} in one commit (version {self.version_before} -> {self.version_after})"

    def to_dict(self) -> dict[str, Any]:
        """The fix as JSON-ready values: added, versions, fixed rows, hints.

        Example:
            >>> sorted(FixReport("s", [], {}, [], 3, 3, Report("s", [], {}, {}, {}),
            ...                  Report("s", [], {}, {}, {})).to_dict())
            ['added', 'fixed', 'hints', 'store', 'version_after', 'version_before']
        """
        return {"store": self.store, "added": dict(self.added), "version_before": self.version_before,
                "version_after": self.version_after, "fixed": [f.to_dict() for f in self.fixed],
                "hints": [h.to_dict() for h in self.hints]}

    def __str__(self) -> str:
        return "\n".join([*(f"fixed: {f}" for f in self.fixed), *(str(h) for h in self.hints),
                          self.summary()])


def fixable(report: Report) -> int:
    """How many of ``report``'s listed findings :func:`fix_store` fixes (rows it would add).

    Example:
        >>> fixable(Report("s", [Finding("references", "warning", "steps", "g", None, None,
        ...                              "run_id has rows in steps but no row in runs")], {}, {}, {}))
        1
    """
    return sum(1 for f in report.findings if _is_fixable(f))


def _is_fixable(f: Finding) -> bool:
    return f.check == "references" and (f.message.startswith(_NO_EPISODES_ROW)
                                        or f.message.endswith(_NO_RUNS_ROW))


def fix_store(store: StoreLike, report: Report | None = None, *, name: str | None = None) -> FixReport:
    """Fix what ``report`` found that can be fixed without guessing and without losing data.

    In one commit (:meth:`~rlarrow.Store.transaction`: readers see all of it or none, the
    store version rises by one; nothing when there is nothing to fix):

    - a ``runs`` row for each run id that has rows in ``steps``, ``episodes``, ``memory``,
      ``scalars`` or ``sources`` but none in ``runs`` (``source`` :data:`FIX_SOURCE`,
      ``metadata`` ``{"added_by": FIX_SOURCE}``);
    - an ``episodes`` row for each episode of ``steps`` without one, derived from its steps
      with DuckDB (aggregates that stream and spill): ``num_steps`` its rows, ``return`` the
      sum of its rewards, ``terminated`` the last step's ``is_terminal``, ``truncated`` its
      ``is_last`` without ``is_terminal``, ``partial_start`` no ``is_first`` on the first step,
      ``partial_end`` no ``is_last`` on the last, ``env_index`` its steps' (an episode whose
      steps have several is left alone: its row would guess), ``metadata``
      ``{"added_by": FIX_SOURCE}``.

    Both only when ``report`` ran the ``references`` check and it found something. Nothing
    is deleted or rewritten: every other finding (an ``episodes`` row that disagrees with its
    steps included) becomes a :class:`Hint` with the ``rlarrow delete`` / ``rlarrow label``
    commands that would deal with it. The checks are then run again (with ``report``'s
    parameters): :attr:`FixReport.remaining`.

    Args:
        store: a writable :class:`~rlarrow.Store` or its path.
        report: what :func:`check_store` found in it (None: check it now, every check).
        name: how the hints' commands name the store (default: its path).

    Returns:
        The :class:`FixReport`.

    Raises:
        StoreError: the store is read-only (or opened at a version), or a write failed (then
            nothing was added).

    Example:
        >>> import numpy as np, rlarrow, tempfile
        >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
        >>> _ = st.append("steps", {"run_id": "r", "episode_id": 0, "step": [0, 1, 2], "env_index": 0,
        ...     "observation": np.zeros((3, 2), np.float32), "action": [1, 0, None],
        ...     "reward": [1.0, 0.5, None], "is_first": [True, False, False],
        ...     "is_last": [False, False, True], "is_terminal": [False, False, True]})
        >>> fix = fix_store(st, check_store(st))
        >>> print(fix)  # doctest: +NORMALIZE_WHITESPACE
        fixed: runs run=r: added a runs row (source 'rlarrow check --fix'): the run has rows in steps
        fixed: episodes run=r episode=0: added an episodes row from its 3 steps (num_steps 3, return 1.5,
            terminated)
        added 1 runs row and 1 episodes row in one commit (version 1 -> 2)
        >>> fix.remaining.ok, fix.remaining.warnings
        (True, 0)
    """
    from rlarrow.core.store import as_store

    st = as_store(store, readonly=False)
    if report is None:
        report = check_store(st)
    shown = name if name is not None else os.fspath(st.path)
    limit = int(report.parameters.get("max_findings", DEFAULT_MAX_FINDINGS))
    before = st.version
    fixed: list[Fixed] = []
    added: dict[str, int] = {}
    left: list[tuple[str, int, int, int]] = []  # episodes without a row whose steps' env_index differs
    references = report.counts.get("references")
    if references is not None and int(references["warnings"]):
        if st.readonly:
            raise StoreError(f"{st.path}: cannot fix a store opened read-only (or at a version); "
                             "open it writable")
        from rlarrow.query.connection import connect

        con = connect(st, warn=False)  # (before the transaction: the views read what is committed)
        try:
            with st.transaction():
                _add_runs(st, con, fixed, added, limit)
                _add_episodes(st, con, fixed, added, left, limit)
        finally:
            con.close()
    after = st.version
    remaining = report
    if after != before:
        keys = ("min_length", "frozen_steps", "spike_sigma", "checks", "max_findings", "memory_limit")
        remaining = check_store(st, **{k: report.parameters[k] for k in keys if k in report.parameters})
    hints = _hints(remaining, shown, left)
    return FixReport(os.fspath(st.path), fixed, added, hints, before, after, report, remaining)


def _added_metadata(n: int) -> tuple[pa.Array, pa.Array]:
    """The ``metadata`` and ``metadata_types`` columns of ``n`` rows added by the fix."""
    from rlarrow.core import metadata as _metadata

    texts, types = _metadata.encode_column([{"added_by": FIX_SOURCE}])
    return pa.array(texts * n, pa.string()), pa.array(types * n, pa.string())


def _add_runs(st: Store, con: Any, fixed: list[Fixed], added: dict[str, int], limit: int) -> None:
    from datetime import UTC, datetime

    from rlarrow.core import schema as _schema

    tables = [t for t in ("steps", "episodes", "memory", "scalars", "sources") if st.row_count(t)]
    if not tables:
        return
    union = " union all ".join(f"select distinct run_id, {i} as k, {_quote(t)} as tbl from {t}"
                               for i, t in enumerate(tables))
    rows = con.sql(f"""select run_id, string_agg(tbl, ', ' order by k) as tables
                       from ({union}) anti join runs using (run_id)
                       group by run_id order by run_id""").fetchall()
    if not rows:
        return
    metadata, types = _added_metadata(len(rows))
    st.append("runs", _schema.build("runs", {
        "run_id": [r[0] for r in rows], "created_at": [datetime.now(UTC)] * len(rows), "source": FIX_SOURCE,
        "metadata": metadata, "metadata_types": types}))
    added["runs"] = len(rows)
    for run_id, where in rows[:max(limit - len(fixed), 0)]:
        fixed.append(Fixed("runs", run_id, None, f"added a runs row (source {FIX_SOURCE!r}): the run has "
                                                 f"rows in {where}", {"source": FIX_SOURCE}))


def _add_episodes(st: Store, con: Any, fixed: list[Fixed], added: dict[str, int],
                  left: list[tuple[str, int, int, int]], limit: int) -> None:
    import pyarrow.compute as pc

    from rlarrow.core import schema as _schema

    if not st.row_count("steps"):
        return
    # per episode of steps without an episodes row: one pass over the flat columns
    rel = con.sql("""
        select run_id, episode_id, env_lo, env_hi, num_steps, "return", last_terminal as terminated,
               last_flag and not last_terminal as truncated, not first_flag as partial_start,
               not last_flag as partial_end
        from (select s.run_id, s.episode_id, min(s.env_index) as env_lo, max(s.env_index) as env_hi,
                     count(*) as num_steps, sum(s.reward) as "return",
                     arg_max(s.is_terminal, s.step) as last_terminal, arg_max(s.is_last, s.step) as last_flag,
                     arg_min(s.is_first, s.step) as first_flag
              from steps s anti join (select distinct run_id, episode_id from episodes) e
                  using (run_id, episode_id)
              group by s.run_id, s.episode_id)
        order by run_id, episode_id""")
    for batch in rel.to_arrow_reader(1 << 20):
        one_env = pc.equal(batch.column("env_lo"), batch.column("env_hi"))
        several = batch.filter(pc.invert(one_env)).select(["run_id", "episode_id", "env_lo", "env_hi"])
        for row in several.to_pylist():
            left.append((row["run_id"], int(row["episode_id"]), int(row["env_lo"]), int(row["env_hi"])))
        rows = batch.filter(one_env)
        if not rows.num_rows:
            continue
        metadata, types = _added_metadata(rows.num_rows)
        columns: dict[str, Any] = {c: rows.column(c) for c in (
            "run_id", "episode_id", "num_steps", "return", "terminated", "truncated", "partial_start",
            "partial_end")}
        st.append("episodes", _schema.build("episodes", {
            **columns, "env_index": rows.column("env_lo"), "metadata": metadata, "metadata_types": types}))
        added["episodes"] = added.get("episodes", 0) + rows.num_rows
        room = max(limit - len(fixed), 0)
        for row in rows.slice(0, room).to_pylist():
            fixed.append(_episode_fixed(row))


def _episode_fixed(row: dict[str, Any]) -> Fixed:
    n, ret = int(row["num_steps"]), row["return"]
    ending = ("terminated" if row["terminated"] else "truncated" if row["truncated"]
              else "partial_end: no is_last on its last step")
    start = ", partial_start: no is_first on its first step" if row["partial_start"] else ""
    values = {"env_index": int(row["env_lo"]), "num_steps": n,
              "return": float(ret) if ret is not None and math.isfinite(ret) else None,
              **{k: bool(row[k]) for k in ("terminated", "truncated", "partial_start", "partial_end")}}
    return Fixed("episodes", row["run_id"], int(row["episode_id"]),
                 f"added an episodes row from its {_plural(n, 'step')} (num_steps {n}, return "
                 f"{'null' if ret is None else format(ret, '.6g')}, {ending}{start})", values)


# ------------------------------------------------------------------ hints: what is left to the user

# episode findings, per check: (what the episodes have, why not fixed, what the user can do)
_MARK = "delete them, or mark them"
_WHY = {
    "alignment": ("is_first / is_last / is_terminal flags that break RLDS alignment",
                  "which flag is wrong is a guess", "convert the source again, or " + _MARK),
    "duplicates": ("rows stored twice", "which copy to keep is a guess",
                   "delete them (every copy) and convert the source again, or mark them"),
    "gaps": ("missing step numbers", "the missing steps are not in the store", _MARK),
    "nonfinite": ("NaN or infinity", "replacing the values would invent data", _MARK),
    "frozen": ("one observation repeated", "a stuck sensor or a paused env is yours to judge", _MARK),
    "spikes": ("action spikes", "an outlier may be real", _MARK),
    "short_episodes": ("fewer steps than min_length", "they are recorded data", _MARK),
}
_DISAGREE = ("an episodes row that disagrees with their steps (num_steps or env_index)",
             "rewriting a recorded episodes row is not safe: the steps may be what is wrong, see duplicates "
             "and gaps", "delete them and convert them again, or mark them")
_NO_STEPS = ("an episodes row but no steps", "deleting the row loses what it records",
             "if the steps are gone for good, delete them")
_AMBIGUOUS = ("steps but no episodes row, and env_index differs between their steps",
              "an added row's env_index would be a guess", "delete them, or convert them again")
# findings no command deals with: what to do instead
_TEXT = {
    "memory": "replay-memory snapshots whose rows disagree with their buffer state: not fixed (the pointers "
              "are the source's); convert the memory export again, or leave these snapshots out",
    "monotonic steps": "steps stored out of step order: not rewritten (readers that order by step are "
                       "unaffected)",
    "monotonic scalars": "scalar tags whose wall_time goes backwards (a resumed run logged steps again): not "
                         "fixed; filter on wall_time when reading them",
    "duplicates runs": "run ids with several runs rows: not fixed (which row to keep is a guess)",
    "duplicates memory": "memory snapshots with a (memory_index, env_index) pair twice: not fixed (which row "
                         "to keep is a guess); convert the memory export again",
    "duplicates scalars": "scalar points logged twice: not fixed (harmless to plots; filter them when "
                          "reading)",
    "references runs": "run ids with no runs row (written after the fix?): run rlarrow check --fix again",
}


def _hints(report: Report, name: str, left: Sequence[tuple[str, int, int, int]]) -> list[Hint]:
    """What remains in ``report`` (and the episodes the fix left), as hints with commands."""
    episodes: dict[tuple[str, tuple[str, str, str]], list[tuple[str, int]]] = {}
    texts: dict[str, int] = {}
    for f in report.findings:
        if f.check == "references":
            if f.message.endswith(_NO_RUNS_ROW):
                texts["references runs"] = texts.get("references runs", 0) + 1
                continue
            if f.message.startswith(_NO_EPISODES_ROW):
                continue  # the fix's own list (left) says why
            why = _NO_STEPS if f.message.startswith("no steps") else _DISAGREE
        elif f.episode_id is not None and f.check in _WHY and f.table in ("steps", "episodes"):
            why = _WHY[f.check]
        else:
            key = f"{f.check} {f.table}" if f"{f.check} {f.table}" in _TEXT else f.check
            texts[key] = texts.get(key, 0) + 1
            continue
        if f.run_id is not None and f.episode_id is not None:
            episodes.setdefault((f.check, why), []).append((f.run_id, f.episode_id))
    for run_id, episode_id, _, _ in left:
        episodes.setdefault(("references", _AMBIGUOUS), []).append((run_id, episode_id))
    hints = []
    for (check, why), keys in episodes.items():
        unique = sorted(set(keys))
        label = why not in (_NO_STEPS, _AMBIGUOUS)  # label rewrites episodes rows: these have none to mark
        delete, marks = _commands(name, unique, label)
        what, reason, advice = why
        counted = report.counts.get(check, {})
        unlisted = sum(int(counted.get(k, 0)) for k in ("errors", "warnings")) - int(counted.get("listed", 0))
        among = f" (among the listed findings: {unlisted} more not listed)" if unlisted > 0 else ""
        hints.append(Hint(check, f"{_plural(len(unique), 'episode')}{among} with {what}: not fixed "
                                 f"automatically ({reason}); {advice}:", delete, marks))
    for key, n in texts.items():
        check = key.partition(" ")[0]
        text = _TEXT.get(key, "not fixed automatically")
        hints.append(Hint(check, f"{_plural(n, 'finding')}: {text}"))
    order = {n: i for i, n in enumerate(CHECKS)}
    return sorted(hints, key=lambda h: order.get(h.check, len(order)))


def _commands(name: str, episodes: Sequence[tuple[str, int]], label: bool) -> tuple[tuple[str, ...],
                                                                                     tuple[str, ...]]:
    """``rlarrow delete`` (and ``label``) commands for ``episodes``: one per run, a few lines, ``...``."""
    import shlex

    by_run: dict[str, list[int]] = {}
    for run_id, episode_id in episodes:
        by_run.setdefault(run_id, []).append(episode_id)
    chunks = [(run, ids[i:i + _EPISODES_PER_COMMAND]) for run, ids in by_run.items()
              for i in range(0, len(ids), _EPISODES_PER_COMMAND)]
    shown = chunks[:_COMMAND_LINES]
    more = len(episodes) - sum(len(ids) for _, ids in shown)
    more_runs = len({run for run, _ in chunks[_COMMAND_LINES:]})
    tail = [f"... ({_plural(more, 'more episode')} in {_plural(more_runs, 'run')})"] if more else []
    heads = [f"{shlex.quote(name)} --run {shlex.quote(run)} " + " ".join(f"--episode {e}" for e in ids)
             for run, ids in shown]
    delete = tuple([*(f"rlarrow delete {h}" for h in heads), *tail])
    marks = tuple([*(f"rlarrow label {h} --set suspect=true" for h in heads), *tail]) if label else ()
    return delete, marks
