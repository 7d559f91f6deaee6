"""Query layer: SQL (DuckDB), Polars and episode reading over a store.

* :mod:`~rlarrow.query.connection`: :func:`connect`, :func:`sql`, :func:`scan`,
  :func:`export`, :func:`iter_episodes` (views of every table, ``transitions`` included);
* :mod:`~rlarrow.query.reader`: :class:`~rlarrow.query.reader.Reader`, episodes by index
  and steps in dm_env order;
* :mod:`~rlarrow.query.output`: streamed exports to Parquet, csv and JSON lines;
* :mod:`~rlarrow.query.plot`: learning curves.

May import :mod:`rlarrow.core` and :mod:`rlarrow.io`; see ``docs/architecture.md``.
"""

from typing import Any

from rlarrow.core import submodule
from rlarrow.query.connection import connect, export, export_relation, iter_episodes, scan, sql

__all__ = ["connect", "export", "export_relation", "iter_episodes", "scan", "sql"]


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.query.<module>
    return submodule(__name__, name)
