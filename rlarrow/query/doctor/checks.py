"""The data doctor's entry point: :data:`CHECKS` in the order they run, and :func:`check_store`.

:func:`check_store` validates its arguments, opens the store read-only and a DuckDB
connection over its views (with a memory limit and a spill directory when asked), runs each
chosen check whose tables have rows, and returns the :class:`~rlarrow.query.doctor.Report`
of their findings, ordered check by check.

Example:
    >>> list(CHECKS)[:4], CHECKS["gaps"].tables
    (['alignment', 'duplicates', 'references', 'gaps'], ('steps',))
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError, StoreError
from rlarrow.query.doctor.context import Check, Context, Tally, quote
from rlarrow.query.doctor.episode_checks import EPISODE_CHECKS
from rlarrow.query.doctor.findings import Finding, Report
from rlarrow.query.doctor.memory_checks import MEMORY_CHECKS
from rlarrow.query.doctor.tensor_checks import TENSOR_CHECKS

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["CHECKS", "check_store"]

#: Episodes of fewer steps (rows) than this are reported (2: the 1-step episodes, no action).
DEFAULT_MIN_LENGTH = 2
#: One observation repeated for more than this many consecutive steps is reported.
DEFAULT_FROZEN_STEPS = 50
#: An action element this many standard deviations from its mean is reported.
DEFAULT_SPIKE_SIGMA = 10.0
#: Findings kept per check (the rest are counted).
DEFAULT_MAX_FINDINGS = 1000

_ORDER = ("alignment", "duplicates", "references", "gaps", "monotonic", "nonfinite", "frozen", "spikes",
          "short_episodes", "memory", "null_observations", "export_cuts", "reset_rows", "time_limit",
          "empty_imports", "interleaved")

#: The checks by name, in the order :func:`check_store` runs them.
CHECKS: dict[str, Check] = {c.name: c for c in sorted((*EPISODE_CHECKS, *TENSOR_CHECKS, *MEMORY_CHECKS),
                                                      key=lambda c: _ORDER.index(c.name))}


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
    tally = Tally(int(max_findings))
    skipped: dict[str, str] = {}
    con = connect(st, warn=False)
    spill = None
    try:
        if memory_limit is not None:
            spill = tempfile.mkdtemp(prefix="rlarrow-doctor-")
            con.execute(f"set memory_limit = {quote(memory_limit)}")
            con.execute(f"set temp_directory = {quote(spill)}")
    except duckdb.Error as exc:
        con.close()
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)
        raise ArgumentError(f"memory_limit={memory_limit!r}: {exc} (pass a size such as '2GB')") from exc
    ctx = Context(st, con, min_length=int(min_length), frozen_steps=int(frozen_steps),
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
