"""A map-style PyTorch dataset over a store's table: ``len`` rows, ``ds[i]`` one row as tensors.

:class:`TableDataset` caches the row groups it read last; ``ds[[i, j, ...]]`` is a batch.
(:mod:`rlarrow.train.torch` exports it beside the streaming dataset.)

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
    >>> _ = st.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(3), "env_index": 0,
    ...     "reward": [1.0, 2.0, None], "is_first": [True, False, False], "is_last": [False, False, True],
    ...     "is_terminal": [False] * 3})
    >>> ds = TableDataset(st, columns=["step", "reward"])
    >>> len(ds), ds[1]["reward"].item(), ds[[0, 2]]["reward_is_pad"].tolist()
    (3, 2.0, [False, True])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.deps import require
from rlarrow.core.padding import columns as padding_columns
from rlarrow.core.padding import mask_name
from rlarrow.core.store import open_checked, table_of

require("torch", feature="rlarrow.train.torch")  # names the extra when torch is missing
import torch  # noqa: E402

from rlarrow.train.samples import flat, nest, units  # noqa: E402

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["TableDataset"]


class TableDataset(torch.utils.data.Dataset[dict[str, Any]]):
    """Map-style access to a table's rows: ``len(ds)`` rows, ``ds[i]`` a dict of tensors.

    Rows are numbered in file order. The row groups read last are kept (``cache_groups``),
    so nearby indices cost one read. ``ds[[i, j, ...]]`` returns a whole batch (one read per
    row group, no per-row work): give a ``DataLoader`` a ``BatchSampler`` as ``sampler`` and
    ``batch_size=None`` to use it. With a plain ``batch_size``, ``__getitems__`` reads the
    batch at once and hands the rows to the default collate. ``layout``: one layout of the
    table (:meth:`rlarrow.Store.layouts`); None: all of them, with the columns every layout
    has with the same type. ``version``: the store as it was at that version.

    Padding is never data (:mod:`rlarrow.core.padding`): every column the table's schema lets
    be null comes with ``<column>_is_pad``, true on its null rows, which hold 0 (``False``),
    never NaN or a value that looks valid.
    """

    def __init__(self, store: StoreLike, table: str = "steps", *, columns: Sequence[str] | None = None,
                 cache_groups: int = 4, layout: int | None = None, version: int | None = None) -> None:
        from rlarrow.core.store import as_store
        from rlarrow.train.samples import shared_schema

        st = as_store(store, readonly=True, version=version)
        files = st.files(table, layout=layout)
        st.check_footers(table, files, layout=layout)  # (pages are checked as they are read)
        self.units = units(files)
        schema, _ = shared_schema(st, table, st.layout_dirs(table, layout))
        names = schema.names if schema is not None else []
        _arguments.integer(cache_groups, "cache_groups", minimum=1)
        self.columns = names if columns is None else _arguments.names(columns, "columns", what="column name")
        self.offsets = np.concatenate([[0], np.cumsum([u.rows for u in self.units])]).astype(np.int64)
        # the columns the table's schema lets be null (a memory's named tensors are never null:
        # layouts read together keep only the tensors every one has)
        nullable = {c.name for c in _schema.table(table_of(table)).columns if c.nullable and not c.is_json}
        self._masked = [c for c in self.columns if c in nullable]
        self.cache_groups = cache_groups
        self._cache: dict[int, dict[str, np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _group(self, k: int) -> dict[str, np.ndarray]:
        got = self._cache.get(k)
        if got is None:
            unit = self.units[k]
            table = open_checked(unit.file).read_row_group(unit.group, columns=self.columns)
            got, masks = padding_columns(table, self.columns, self._masked)
            for name in self._masked:  # (a row group with no nulls in a column: a mask all false)
                got[mask_name(name)] = masks.get(mask_name(name), np.zeros(table.num_rows, bool))
            if len(self._cache) >= self.cache_groups:
                self._cache.pop(next(iter(self._cache)))
            self._cache[k] = got
        return got

    def __getitem__(self, i: int | Sequence[int]) -> dict[str, Any]:
        if isinstance(i, (int, np.integer)):
            return self._rows([int(i)], single=True)  # type: ignore[no-any-return]
        return self._rows(list(i), single=False)  # type: ignore[no-any-return]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        batch = self._rows(list(indices), single=False)
        cols: dict[str, Any] = {}
        flat("", batch, cols)
        return [nest({k.lstrip("."): v[j] for k, v in cols.items()}) for j in range(len(indices))]

    def _rows(self, indices: Sequence[int], *, single: bool) -> Any:
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if ((idx < -n) | (idx >= n)).any():
            raise IndexError(f"index out of range for {n} rows")
        idx = np.where(idx < 0, idx + n, idx)
        groups = np.searchsorted(self.offsets, idx, side="right") - 1
        parts: dict[str, list[np.ndarray]] = {}
        order = np.argsort(groups, kind="stable")
        for k in np.unique(groups).tolist():
            sel = order[groups[order] == k]
            data = self._group(k)
            local = idx[sel] - self.offsets[k]
            for name, v in data.items():
                parts.setdefault(name, []).append(v[local])
        inverse = np.empty(len(idx), dtype=np.int64)
        inverse[order] = np.arange(len(idx))
        flat = {k: np.concatenate(v)[inverse] for k, v in parts.items()}
        if single:
            return nest({k: _tensor(np.array(v[0])) if v.dtype != object else v[0] for k, v in flat.items()})
        return nest({k: _tensor(v) for k, v in flat.items()})


def _tensor(value: np.ndarray) -> Any:
    """A tensor sharing ``value``'s memory; text columns stay NumPy (torch has no strings)."""
    return torch.from_numpy(value) if value.dtype != object else value
