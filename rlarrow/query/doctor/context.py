"""What a check of the data doctor works with, and how a check is declared.

A :class:`Check` names a function of a :class:`Context`: the store (read-only), a DuckDB
connection over :func:`~rlarrow.query.connection.connect`'s views, the thresholds, shared
temporary tables of per-episode aggregates, the layouts of a table, and its tensor columns
streamed in record batches of about 16 MiB from files pinned by a reader lease (readable
whatever compactions do meanwhile). Findings go to the :class:`Tally`, which keeps each
check's first ``max_findings`` and counts the rest. :func:`quote` writes a SQL string literal.

Example:
    >>> quote("it's")
    "'it''s'"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from rlarrow.query.doctor.findings import Finding, Severity

if TYPE_CHECKING:
    from rlarrow.core.store import ReaderLease, Store

__all__ = ["Check"]

# rows per record batch of a tensor scan: about this many bytes, within these bounds
_BATCH_BYTES = 16 << 20
_BATCH_ROWS = (256, 65_536)


@dataclass(frozen=True)
class Check:
    """A check: its name, its function, the tables it reads (skipped when all are empty), a summary.

    Example:
        >>> from rlarrow.query.doctor import CHECKS
        >>> CHECKS["gaps"].tables, CHECKS["gaps"].summary
        (('steps',), 'step numbers missing within an episode')
    """

    name: str
    function: Callable[[Context], None]
    tables: tuple[str, ...]
    summary: str


def quote(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


class Tally:
    """Findings kept per check (the first ``limit``) and counted by severity."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.findings: list[Finding] = []
        self.counts: dict[str, dict[str, Any]] = {}

    def start(self, check: str) -> None:
        """Start counting ``check``'s findings."""
        self.counts[check] = {"errors": 0, "warnings": 0, "listed": 0, "seconds": 0.0}

    def room(self, check: str) -> int:
        """How many more findings of ``check`` are kept."""
        return self.limit - int(self.counts[check]["listed"])

    def count(self, check: str, severity: str, n: int = 1) -> None:
        """Count ``n`` findings of ``check`` without keeping them."""
        self.counts[check]["errors" if severity == "error" else "warnings"] += n

    def add(self, finding: Finding) -> None:
        """Count ``finding`` and keep it while its check has room."""
        self.count(finding.check, finding.severity)
        if self.room(finding.check) > 0:
            self.findings.append(finding)
            self.counts[finding.check]["listed"] += 1


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class Context:
    """What a check works with: the store, a DuckDB connection, the parameters, the tally."""

    def __init__(self, st: Store, con: Any, *, min_length: int, frozen_steps: int, spike_sigma: float,
                 tally: Tally, max_episode_steps: int | None = None, layout: int | None = None) -> None:
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
        """Report one finding of the running check."""
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
        """How many rows ``table`` has."""
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
        """Drop the temporary tables and release the pinned files."""
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
