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

The package, by concept (each module's docstring says more):

- :mod:`~rlarrow.query.doctor.findings`: what a check or a fix reports (:class:`Finding`,
  :class:`Report`, :class:`Fixed`, :class:`Hint`, :class:`FixReport`): plain values;
- :mod:`~rlarrow.query.doctor.context`: what a check works with (the store, a DuckDB
  connection over its views, tensor batches streamed from pinned files, the tally);
- the checks themselves, read-only: :mod:`~rlarrow.query.doctor.episode_checks` (flags, keys,
  references and lengths of the flat columns, in SQL), :mod:`~rlarrow.query.doctor.tensor_checks`
  (observations and actions, in NumPy), :mod:`~rlarrow.query.doctor.memory_checks` (replay
  memories, their exports and imported sources);
- :mod:`~rlarrow.query.doctor.checks`: :data:`CHECKS` in order and :func:`check_store`;
- :mod:`~rlarrow.query.doctor.fixes` and :mod:`~rlarrow.query.doctor.hints`: which rows a fix
  adds (read from the store) and what is left to the user. The commit itself is made by the
  store's write side, :func:`rlarrow.core.store.additions.add_rows`: the doctor never writes.

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

from rlarrow.query.doctor.checks import (
    CHECKS,
    check_store,
)
from rlarrow.query.doctor.checks import (
    DEFAULT_FROZEN_STEPS as DEFAULT_FROZEN_STEPS,
)
from rlarrow.query.doctor.checks import (
    DEFAULT_MAX_FINDINGS as DEFAULT_MAX_FINDINGS,
)
from rlarrow.query.doctor.checks import (
    DEFAULT_MIN_LENGTH as DEFAULT_MIN_LENGTH,
)
from rlarrow.query.doctor.checks import (
    DEFAULT_SPIKE_SIGMA as DEFAULT_SPIKE_SIGMA,
)
from rlarrow.query.doctor.context import Check
from rlarrow.query.doctor.findings import Finding, Fixed, FixReport, Hint, Report, Severity
from rlarrow.query.doctor.fixes import FIX_SOURCE as FIX_SOURCE
from rlarrow.query.doctor.fixes import fix_store, fixable

__all__ = [
    "CHECKS", "Check", "Finding", "FixReport", "Fixed", "Hint", "Report", "Severity", "check_store",
    "fix_store", "fixable",
]
