"""The source of a training stream: which rows of which store table, at which version.

A :class:`Source` names the selection (store, table, runs, filter, columns, layout,
version) and plans it (:meth:`Source.plan`) into a
:class:`~rlarrow.train.samples.SampleSource`, the reader of its row groups, with what each
sample spans (a window transform of :mod:`rlarrow.train.transforms`). Give it to
:class:`rlarrow.train.torch.StreamingDataset` as ``source=``, or read it alone.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
    >>> for run in ("a", "b"):
    ...     _ = st.append("steps", {"run_id": run, "episode_id": 0, "step": np.arange(3), "env_index": 0,
    ...         "reward": [1.0, 2.0, 3.0], "is_first": [True, False, False], "is_last": [False, False, True],
    ...         "is_terminal": [False] * 3})
    >>> source = Source(st, runs=["b"], filter="reward > 1", columns=["run_id", "reward"])
    >>> planned = source.plan()
    >>> [planned.read(u, {}) for u in planned.units][-1]["reward"].tolist()
    [2.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlarrow.core import arguments as _arguments

if TYPE_CHECKING:
    from rlarrow.core.remote import RemoteStore
    from rlarrow.core.store import StoreLike, StoreReader
    from rlarrow.train.samples import SampleSource

__all__ = ["Source"]


class Source:
    """Rows of a store's table to train on.

    Args:
        store: a :class:`~rlarrow.Store`, its path, a URI of a store pushed to object storage
            (``s3://bucket/runs.rlarrow``: read as a :class:`~rlarrow.core.remote.RemoteStore`),
            or a ``RemoteStore``.
        table: ``"steps"``, ``"memory"``, or ``"transitions"`` (from ``steps``).
        columns: columns to read (default: every non-key column; for transitions, all of them).
        filter: a ``pyarrow.compute.Expression`` or a SQL predicate string over the flat
            columns, applied to each row (to a window's first row).
        runs: only these runs (``run_id``), with ``filter``.
        layout: one layout of the table (:meth:`rlarrow.Store.layouts`); None: all of them.
        version: read the store as it was at this version (:attr:`rlarrow.Store.version`).
    """

    def __init__(self, store: StoreLike | RemoteStore, table: str = "steps", *,
                 columns: Sequence[str] | None = None, filter: Any = None,  # noqa: A002 - pyarrow's name
                 runs: Sequence[str] | None = None, layout: int | None = None,
                 version: int | None = None) -> None:
        from rlarrow.core.remote import open_reader

        self.table = table
        self.columns = _arguments.names(columns, "columns", what="column name")
        self.runs = _arguments.names(runs, "runs", what="run id")
        self.filter = _with_runs(filter, self.runs)
        self.layout = layout
        #: the store, opened (read-only, at ``version``)
        self.store: StoreReader = open_reader(store, version=version)  # (a URI: a RemoteStore)
        self.version = version

    def __repr__(self) -> str:
        return f"Source({getattr(self.store, 'path', self.store)!r}, {self.table!r})"

    def plan(self, *, sequence_length: int = 1,
             delta_steps: Mapping[str, Sequence[int]] | None = None) -> SampleSource:
        """The reader of this selection's row groups, each sample spanning what is asked.

        ``sequence_length``/``delta_steps``: see :class:`~rlarrow.train.transforms.SequenceWindow`
        and :class:`~rlarrow.train.transforms.DeltaSteps` (whose ``plan_args()`` these are).
        """
        from rlarrow.train.samples import SampleSource

        return SampleSource.from_store(self.store, self.table, columns=self.columns, filter=self.filter,
                                       sequence_length=sequence_length, layout=self.layout,
                                       delta_steps=delta_steps)


def _with_runs(filter: Any, runs: list[str] | None) -> Any:  # noqa: A002 - pyarrow's name
    """``filter`` and ``run_id`` one of ``runs``: SQL with SQL, else a pyarrow expression."""
    if runs is None:
        return filter
    if isinstance(filter, str):
        listed = ", ".join("'" + r.replace("'", "''") + "'" for r in runs)
        return f"({filter}) and run_id in ({listed})"
    import pyarrow.compute as pc

    chosen = pc.field("run_id").isin(runs)
    return chosen if filter is None else filter & chosen
