"""SQL over a store with DuckDB, lazy frames with Polars, and episodes as arrays.

:func:`connect` opens a DuckDB connection with one view per table over the store's
committed Parquet files (``runs``, ``episodes``, ``steps``, ``scalars``, ``memory``), the
derived view ``transitions``, and macros for common RL measures:

==========================================  ====================================================
``transitions``                             one row per step that has a next step in its
                                            episode: ``observation, action, reward, discount,
                                            next_observation, done`` (the next step is
                                            terminal), ``truncated`` (last but not terminal)
``episode_returns(gamma)``                  per episode: ``steps`` (actions), ``return``,
                                            ``discounted_return``, ``terminated``
``discounted_return(rewards, gamma)``       a list of rewards (in step order) discounted
``success_rate(flag)``                      aggregate: the fraction of true values
``smoothed(n)``                             ``scalars`` with ``moving_average``: the mean of
                                            the last ``n`` points of each run and tag
``ema(weight)``                             ``scalars`` with ``ema``: TensorBoard's debiased
                                            exponential smoothing (weight 0.6 ... 0.999)
``steps_to_threshold(tag, threshold)``      per run: the first step at which ``tag`` reached
                                            ``threshold`` (null if never): ``value >= threshold``;
                                            with ``direction := 'below'``, ``value <= threshold``
                                            (a loss)
``steps_decoded``, ``memory_decoded``,      the views with binary-layout tensors (BLOBs in
``transitions_decoded``                     ``steps``...) decoded to arrays of their dtype and
                                            shape; ``tensor_<dtype>_<d0>x<d1>(blob)`` (e.g.
                                            ``tensor_uint8_84x84``) decodes one value
==========================================  ====================================================

The views read the files directly, so DuckDB pushes filters and column selections down to
Parquet: a query on one run reads only the row groups whose statistics can hold it.
:func:`export` streams a query's result into a Parquet, csv or JSON-lines file batch by batch
(``rlarrow sql --format csv|json|parquet`` does the same), so results of any size fit in memory.
Metadata columns are JSON: ``metadata->>'key'`` reaches any key.

This module is the front of the query layer's SQL: :func:`sql` is here, and each other name
is importable from here but lives with its concept: :func:`connect` and the views in
:mod:`rlarrow.query.views`, the macros and tensor decoders in
:mod:`rlarrow.query.sql_functions`, :func:`export` in :mod:`rlarrow.query.relations`,
:func:`scan` and :func:`iter_episodes` in :mod:`rlarrow.query.frames`, and the blame of a
DuckDB failure on a damaged file in :mod:`rlarrow.query.duckdb_errors`.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
    >>> with rlarrow.Store.create(path) as st:
    ...     _ = st.append("scalars", {"run_id": "a", "scope": "train", "tag": "return",
    ...                               "step": np.arange(5), "value": [0.0, 1, 2, 3, 4]})
    >>> sql(path, "select * from steps_to_threshold('return', 2.5)").to_pylist()
    [{'run_id': 'a', 'step': 3}]
    >>> con = connect(path)
    >>> con.sql("select step, moving_average from smoothed(2) order by step").fetchall()[:3]
    [(0, 0.0), (1, 0.5), (2, 1.5)]
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    InvalidInputError,
    RLArrowWarning,
)
from rlarrow.core.store import Store, StoreReader
from rlarrow.query import views as _views
from rlarrow.query.duckdb_errors import damaged as _damaged
from rlarrow.query.duckdb_errors import locate as _locate
from rlarrow.query.duckdb_errors import locate_remote as _locate_remote
from rlarrow.query.frames import iter_episodes, scan
from rlarrow.query.relations import export, export_relation
from rlarrow.query.views import connect, layout_notes
from rlarrow.query.views import layout_notes_by_table as _layout_notes

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["connect", "export", "export_relation", "iter_episodes", "layout_notes", "scan", "sql"]


#: :func:`connect` with the files of the tables in ``verify`` checked whole first (``rlarrow sql``).
_connect = _views.connect_checked


def readonly_store(store: StoreLike | StoreReader, version: int | None = None) -> StoreReader:
    """``store`` opened read-only (at ``version``): what every query reads.

    A local store, or one on object storage (a URI: :func:`rlarrow.core.remote.open_reader`).
    """
    from rlarrow.core.remote import open_reader

    return open_reader(store, version=version)


#: The views and macros that read a table under another name.
_READS = {"transitions": ("steps",), "episode_returns": ("steps",), "smoothed": ("scalars",),
          "steps_to_threshold": ("scalars",), "ema": ("scalars",), "video_frame": ("videos",)}


def tables_read(query: str) -> list[str]:
    """The tables ``query`` may read: each table, view or macro named in it (a word of its text).

    An over-estimate (a name in a string or a comment counts too), never an under-estimate
    of what the views read: :func:`sql` checks these tables' files whole before DuckDB reads
    them (a ``read_parquet`` of the user's own reads no store file through the views).
    """
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    names: set[str] = set()
    for word in words:
        base = re.sub(r"(_\d+)?(_decoded)?$", "", word)
        names.update(_READS.get(base, (base,)))
    return [t for t in _schema.TABLE_NAMES if t in names]


def sql(store: StoreLike | StoreReader, query: str, *, params: Sequence[Any] | None = None,
        output: str = "arrow", version: int | None = None) -> Any:
    """Run ``query`` over ``store`` (see :func:`connect`) and return its result.

    Args:
        store: a :class:`~rlarrow.Store` or its path; or a store pushed to object storage,
            its URI (``s3://bucket/runs.rlarrow``) or a :class:`~rlarrow.core.remote.RemoteStore`.
        query: DuckDB SQL over the store's views and macros.
        params: values for ``?`` / ``$1`` placeholders in ``query``.
        output: ``"arrow"`` (a ``pyarrow.Table``, the default), ``"polars"`` (a Polars
            DataFrame) or ``"pandas"`` (a pandas DataFrame; pandas must be installed). The
            conversions keep dtypes, nulls and NaN; tensor columns arrive as lists (of
            lists) in every form. For DuckDB's lazy relation, with ``.pl()``/``.df()``,
            query :func:`connect`'s connection instead.
        version: read the store as it was at this version (:attr:`rlarrow.Store.version`;
            ``rlarrow history STORE`` lists them); None: as it is now.

    Example:
        >>> sql("runs.rlarrow", "select * from episode_returns(0.99) limit 5")  # doctest: +SKIP
        >>> sql("runs.rlarrow", "select * from episodes", output="polars")  # doctest: +SKIP
    """
    if output not in ("arrow", "polars", "pandas"):
        raise ArgumentError(f"output={output!r}: use 'arrow', 'polars' or 'pandas'")
    _arguments.text(query, "query", what="a SQL query (a string)")
    if params is not None and (isinstance(params, (str, bytes))
                               or not isinstance(params, (Sequence, Mapping))):
        raise ArgumentTypeError(f"params: give a list of values for the query's ? placeholders (or a mapping "
                                f"for $name ones), not {type(params).__name__} {params!r:.60}")
    import duckdb

    st = readonly_store(store, version)  # (opened once: a bucket's manifest is read once)
    con = _connect(st, ema_window=None, database=":memory:", version=None, layout=None, warn=False,
                   verify=tables_read(query))
    # the notes of the combined views this query reads (a query of scalars needs none)
    for name, note in _layout_notes(st).items():
        views = ("steps", "transitions", "episode_returns") if name == "steps" else (name,)
        if any(re.search(rf"\b{view}(_decoded)?\b", query, re.IGNORECASE) for view in views):
            warnings.warn(note, RLArrowWarning, stacklevel=2)
    try:
        rel = con.sql(query, params=params) if params else con.sql(query)
        table: pa.Table = pa.table({}) if rel is None else rel.to_arrow_table()
    except duckdb.Error as exc:
        if not isinstance(st, Store):  # (a bucket's files: pyarrow checked the pages DuckDB read)
            _locate_remote(st, tables_read(query), exc)
            raise
        err = _damaged(st, exc)
        if err is exc:
            raise
        if not isinstance(err, InvalidInputError):  # name the file DuckDB did not
            _locate(st, [f for t in tables_read(query) for f in st.files(t)], exc)
        raise err from exc
    finally:
        con.close()
    if output == "polars":
        import polars as pl

        return pl.from_arrow(table)
    if output == "pandas":
        return table.to_pandas()
    return table
