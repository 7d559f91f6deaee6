"""What ``rlarrow check --fix`` adds, read from the store; the store's write side commits it.

:func:`fix_store` reads, with DuckDB, the ``runs`` rows and ``episodes`` rows that the
``references`` check found missing (the latter derived from the episodes' steps), and hands
them as a stream of Arrow rows to :func:`rlarrow.core.store.additions.add_rows`, which
appends them in one commit: this module never writes to the store itself. It then checks the
store again and turns what is left into :class:`~rlarrow.query.doctor.Hint` values
(:mod:`rlarrow.query.doctor.hints`).

Example:
    >>> FIX_SOURCE
    'rlarrow check --fix'
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rlarrow.query.doctor.checks import DEFAULT_MAX_FINDINGS, check_store
from rlarrow.query.doctor.context import quote
from rlarrow.query.doctor.findings import Finding, Fixed, FixReport, Report, plural
from rlarrow.query.doctor.hints import NO_EPISODES_ROW, NO_RUNS_ROW, hints

if TYPE_CHECKING:
    from rlarrow.core.store import Store, StoreLike

__all__ = ["fix_store", "fixable"]

#: The ``source`` of the ``runs`` rows :func:`fix_store` adds, and ``added_by`` in the metadata of
#: every row it adds.
FIX_SOURCE = "rlarrow check --fix"


def fixable(report: Report) -> int:
    """How many of ``report``'s listed findings :func:`fix_store` fixes (rows it would add).

    Example:
        >>> fixable(Report("s", [Finding("references", "warning", "steps", "g", None, None,
        ...                              "run_id has rows in steps but no row in runs")], {}, {}, {}))
        1
    """
    return sum(1 for f in report.findings if _is_fixable(f))


def _is_fixable(f: Finding) -> bool:
    return f.check == "references" and (f.message.startswith(NO_EPISODES_ROW)
                                        or f.message.endswith(NO_RUNS_ROW))


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
        from rlarrow.core.store.additions import add_rows
        from rlarrow.query.connection import connect

        con = connect(st, warn=False)  # (before the transaction: the views read what is committed)
        try:
            added = add_rows(st, _missing_rows(st, con, fixed, left, limit), what="fix")
        finally:
            con.close()
    after = st.version
    remaining = report
    if after != before:
        keys = ("min_length", "frozen_steps", "spike_sigma", "checks", "max_findings", "memory_limit")
        remaining = check_store(st, **{k: report.parameters[k] for k in keys if k in report.parameters})
    left_over = hints(remaining, shown, left)
    return FixReport(os.fspath(st.path), fixed, added, left_over, before, after, report, remaining)


def _added_metadata(n: int) -> tuple[pa.Array, pa.Array]:
    """The ``metadata`` and ``metadata_types`` columns of ``n`` rows added by the fix."""
    from rlarrow.core import metadata as _metadata

    texts, types = _metadata.encode_column([{"added_by": FIX_SOURCE}])
    return pa.array(texts * n, pa.string()), pa.array(types * n, pa.string())


def _missing_rows(st: Store, con: Any, fixed: list[Fixed], left: list[tuple[str, int, int, int]],
                  limit: int) -> Iterator[tuple[str, pa.Table | pa.RecordBatch]]:
    """The rows the fix adds, as ``(table, rows)``: the ``runs`` rows, then ``episodes`` in batches.

    Read only: each piece is described in ``fixed`` (up to ``limit``) as it is read, and the
    episodes whose steps have several ``env_index`` are put in ``left``; the caller commits.
    """
    yield from _missing_runs(st, con, fixed, limit)
    yield from _missing_episodes(st, con, fixed, left, limit)


def _missing_runs(st: Store, con: Any, fixed: list[Fixed], limit: int) -> Iterator[tuple[str, pa.Table]]:
    from datetime import UTC, datetime

    from rlarrow.core import schema as _schema

    tables = [t for t in ("steps", "episodes", "memory", "scalars", "sources") if st.row_count(t)]
    if not tables:
        return
    union = " union all ".join(f"select distinct run_id, {i} as k, {quote(t)} as tbl from {t}"
                               for i, t in enumerate(tables))
    rows = con.sql(f"""select run_id, string_agg(tbl, ', ' order by k) as tables
                       from ({union}) anti join runs using (run_id)
                       group by run_id order by run_id""").fetchall()
    if not rows:
        return
    metadata, types = _added_metadata(len(rows))
    for run_id, where in rows[:max(limit - len(fixed), 0)]:
        fixed.append(Fixed("runs", run_id, None, f"added a runs row (source {FIX_SOURCE!r}): the run has "
                                                 f"rows in {where}", {"source": FIX_SOURCE}))
    yield "runs", _schema.build("runs", {
        "run_id": [r[0] for r in rows], "created_at": [datetime.now(UTC)] * len(rows), "source": FIX_SOURCE,
        "metadata": metadata, "metadata_types": types})


def _missing_episodes(st: Store, con: Any, fixed: list[Fixed], left: list[tuple[str, int, int, int]],
                      limit: int) -> Iterator[tuple[str, pa.Table]]:
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
        room = max(limit - len(fixed), 0)
        for row in rows.slice(0, room).to_pylist():
            fixed.append(_episode_fixed(row))
        yield "episodes", _schema.build("episodes", {
            **columns, "env_index": rows.column("env_lo"), "metadata": metadata, "metadata_types": types})


def _episode_fixed(row: dict[str, Any]) -> Fixed:
    n, ret = int(row["num_steps"]), row["return"]
    ending = ("terminated" if row["terminated"] else "truncated" if row["truncated"]
              else "partial_end: no is_last on its last step")
    start = ", partial_start: no is_first on its first step" if row["partial_start"] else ""
    values = {"env_index": int(row["env_lo"]), "num_steps": n,
              "return": float(ret) if ret is not None and math.isfinite(ret) else None,
              **{k: bool(row[k]) for k in ("terminated", "truncated", "partial_start", "partial_end")}}
    return Fixed("episodes", row["run_id"], int(row["episode_id"]),
                 f"added an episodes row from its {plural(n, 'step')} (num_steps {n}, return "
                 f"{'null' if ret is None else format(ret, '.6g')}, {ending}{start})", values)
