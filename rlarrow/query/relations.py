"""A query's result streamed into a file: Parquet, csv or JSON lines, batch by batch.

:func:`export` runs a query over a store's views and writes its result as it streams
(``rlarrow sql --format csv|json|parquet -o FILE``), whole or not at all;
:func:`export_relation` does the same for a DuckDB relation made over the views. Tensor
columns are written with their types (:mod:`rlarrow.query.output`).

Example:
    >>> sorted(_SUFFIX_FORMATS)[:3]
    ['.csv', '.json', '.jsonl']
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa

from rlarrow.core.errors import (
    ArgumentError,
)
from rlarrow.core.store import Store, as_store
from rlarrow.query.duckdb_errors import damaged
from rlarrow.query.views import connect

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike, StoreReader

__all__ = ["export", "export_relation"]


_SUFFIX_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json",
                   ".jsonl": "json", ".ndjson": "json"}


def export(
    store: StoreLike,
    query: str,
    path: str | os.PathLike[str] | IO[bytes],
    *,
    format: str | None = None,  # noqa: A002
    params: Sequence[Any] | None = None,
    tensor_types: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> int:
    r"""Write the result of ``query`` over ``store`` to a Parquet, csv or JSON-lines file, streamed.

    The result is never held whole: DuckDB hands over record batches, written one by one
    (Parquet row groups of about 64 MiB), so any result fits in the memory of a few batches.
    A file path is written atomically (a failed export leaves nothing at ``path``).

    Args:
        store: a :class:`~rlarrow.Store` or its path.
        query: DuckDB SQL over the views and macros of :func:`connect`.
        path: the file to write, or a binary stream (``sys.stdout.buffer``).
        format: ``"parquet"``, ``"csv"`` or ``"json"`` (one object per line); default: from
            ``path``'s suffix (``.parquet``, ``.csv``, ``.json``, ``.jsonl``, ``.ndjson``).
        params: values for ``?`` / ``$1`` placeholders in ``query``.
        tensor_types: result columns holding binary-layout tensors under another name than
            the stored one, as ``{"obs": "steps.observation"}`` or ``{"obs": tensor_type}``.
        overwrite: replace an existing file.

    Parquet holds exactly :func:`sql`'s Arrow result (tensors as DuckDB returns them: lists,
    and binary-layout tensors as their bytes). csv and JSON lines hold text: tensors and lists
    as nested lists ``[[1.0, 2.0], [3.0, 4.0]]``, dict observations as JSON objects,
    binary-layout tensors decoded to their dtype and shape (recognised by the column's name:
    ``observation``, ``action``, ``next_observation``, the memory tensors' names, or the names
    in ``tensor_types``, whose byte width must match; other blobs are hex text, as are blobs of
    a name that two stored tensors of the same width share: name the one meant in
    ``tensor_types``). Floats are the shortest text that reads back
    as the same value (``0.1``, ``1.0``, a float32 as ``0.1`` too). NaN and infinities are
    ``NaN``, ``Infinity`` and ``-Infinity``: bare in csv (Python's ``float`` and ``json.loads``
    read them), as strings ``"NaN"`` ... in JSON lines, which must stay strict JSON. csv nulls
    are empty cells, JSON nulls ``null``.

    Returns:
        The number of rows written.

    Raises:
        ValueError: an unknown format, a statement that returns no rows, or a bad
            ``tensor_types`` entry.
        FileExistsError: ``path`` exists and not ``overwrite``.
        StoreError: DuckDB could not read the store's files.

    Example:
        >>> import numpy as np, rlarrow, tempfile, pathlib
        >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
        >>> with rlarrow.Store.create(path) as st:
        ...     _ = st.append("steps", {"run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...         "observation": np.array([[0.5, 1], [2, 3], [4, 5]], np.float32),
        ...         "action": [1, 0, None], "reward": [1.0, float("nan"), None],
        ...         "discount": [1.0, 0.0, None], "is_first": [True, False, False],
        ...         "is_last": [False, False, True], "is_terminal": [False, False, True]})
        >>> out = tempfile.mkdtemp() + "/t.jsonl"
        >>> export(path, "select step, observation, next_observation, reward from transitions "
        ...              "order by step", out)
        2
        >>> print(pathlib.Path(out).read_text(), end="")
        {"step": 0, "observation": [0.5, 1.0], "next_observation": [2.0, 3.0], "reward": 1.0}
        {"step": 1, "observation": [2.0, 3.0], "next_observation": [4.0, 5.0], "reward": "NaN"}
    """
    from rlarrow.query import output as _export

    fmt = format
    if fmt is None:
        suffix = Path(os.fspath(path)).suffix.lower() if isinstance(path, (str, os.PathLike)) else ""
        fmt = _SUFFIX_FORMATS.get(suffix)
        if fmt is None:
            raise ArgumentError(f"cannot tell the format of {path!r}: pass format='parquet', 'csv' or 'json'")
    if fmt not in _export.FORMATS:
        raise ArgumentError(f"format={fmt!r}: use 'parquet', 'csv' or 'json'")
    st = as_store(store, readonly=True)
    hints = _export.resolve_tensor_types(st, tensor_types)
    con = connect(st)
    try:
        rel = _relation(st, con, query, params)
        if rel is None:
            raise ArgumentError(f"{query!r} is a statement that returns no rows; export a query (select ...)")
        return export_relation(st, rel, path, fmt, hints=hints, overwrite=overwrite)
    finally:
        con.close()


def _relation(st: Store, con: Any, query: str, params: Sequence[Any] | None) -> Any:
    import duckdb

    try:
        return con.sql(query, params=params) if params else con.sql(query)
    except duckdb.Error as exc:
        err = damaged(st, exc)
        if err is exc:
            raise
        raise err from exc


def export_relation(st: StoreReader, rel: Any, path: str | os.PathLike[str] | IO[bytes], fmt: str, *,
                    hints: Mapping[str, list[pa.DataType]] | None = None, overwrite: bool = False) -> int:
    """Stream a DuckDB relation over ``st``'s views into ``path`` (see :func:`export`)."""
    import duckdb

    from rlarrow.io.memory.snapshot import atomic_output
    from rlarrow.query import output as _export

    hints = _export.tensor_hints(st) if hints is None else hints
    try:
        reader = rel.to_arrow_reader(_export.batch_rows(st))
        if not isinstance(path, (str, os.PathLike)):
            return _export.write_stream(reader, path, fmt, hints)
        if os.path.exists(path) and not os.path.isfile(path):  # a pipe or a device: written as it is
            with open(path, "wb") as fh:
                return _export.write_stream(reader, fh, fmt, hints)
        with atomic_output(path, overwrite=overwrite) as tmp:
            return _export.write_stream(reader, tmp, fmt, hints)
    except duckdb.Error as exc:
        if not isinstance(st, Store):  # (a bucket's files: the caller names a damaged one)
            raise
        err = damaged(st, exc)
        if err is exc:
            raise
        raise err from exc
