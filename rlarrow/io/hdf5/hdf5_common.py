"""What the D4RL and robomimic readers share: checked reads of rows, flags and small datasets.

Internal to :mod:`rlarrow.io.hdf5` (its names are the package's, not a public API).

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core.errors import CorruptFileError
from rlarrow.core.metadata import nest
from rlarrow.core.tensors import tensor_type, to_arrow
from rlarrow.io.codecs.hdf5_files import guarded, plain

__all__: list[str] = []

#: the datasets a D4RL file must have at its root
D4RL_KEYS = ("observations", "actions", "rewards", "terminals")
#: a dataset of at most this many elements that is not per row is kept in the run's metadata
SMALL_ELEMENTS = 4096

DEMO_NAME = re.compile(r"demo_(\d+)")

#: per-row datasets that are typed infos: (field path, dataset path, dataset)
Typed = list[tuple[str, str, Any]]


def described(ds: Any) -> dict[str, Any]:
    """A dataset's row dtype and shape, as the run's metadata records them."""
    return {"dtype": np.dtype(ds.dtype).str, "shape": [int(d) for d in ds.shape[1:]]}


def small_items(path: Path, items: list[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Datasets that are not per row: small ones as values (nested by path), large ones named."""
    kept: dict[str, Any] = {}
    left: dict[str, str] = {}
    for key, ds in items:
        with guarded(path, f"dataset {key!r}"):
            size = int(np.prod(ds.shape, dtype=np.int64)) if ds.shape is not None else 0
            if size > SMALL_ELEMENTS:
                left[key] = f"{ds.dtype} {tuple(ds.shape)}"
                continue
            value = plain(ds[()])
        node = kept
        *parents, last = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return kept, left


def attrs_of(path: Path, node: Any, what: str) -> dict[str, Any]:
    """A node's attributes as plain values; JSON text (robomimic's ``env_args``, ``ep_meta``) parsed."""
    out: dict[str, Any] = {}
    with guarded(path, f"the attributes of {what}"):
        for key, value in node.attrs.items():
            value = plain(value)
            if isinstance(value, str) and value[:1] in "{[":
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            out[key] = value
    return out



def check_tensors(path: Path, items: list[tuple[str, Any]]) -> None:
    """Observations and actions must be numbers (or bools), at least one per row."""
    for key, ds in items:
        if np.dtype(ds.dtype).kind not in "biuf":
            raise CorruptFileError(path, f"{key} holds {ds.dtype} values; observations and actions must be "
                                   "numbers")
        if ds.shape is not None and 0 in tuple(ds.shape[1:]):
            raise CorruptFileError(path, f"{key} has rows of shape {tuple(ds.shape[1:])}, which hold no "
                                   "values: there is nothing to import")


def spec_of(name: str, info: dict[str, Any]) -> dict[str, Any]:
    """An array spec (dm_env's) of a column described by :func:`described`."""
    return {"kind": "Array", "name": name, "shape": info["shape"], "dtype": np.dtype(info["dtype"]).name}


def read_rows(path: Path, ds: Any, key: str, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of dataset ``key``, h5py's errors named."""
    with guarded(path, f"rows {start}..{stop} of {key!r}"):
        return np.asarray(ds[start:stop])


def take_rows(path: Path, ds: Any, key: str, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` (increasing) of a dataset."""
    with guarded(path, f"rows of {key!r}"):
        return np.asarray(ds[rows.tolist()])


def flag_column(values: np.ndarray, rows: int, path: Path, key: str) -> np.ndarray:
    """``terminals``/``timeouts``/``dones``: one value per row (``(N,)`` or ``(N, 1)``), as bools."""
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (rows,):
        raise CorruptFileError(
            path, f"{key} has shape {values.shape}; one value per row ({rows},) was expected"
        )
    if values.dtype.kind not in "biuf":
        raise CorruptFileError(path, f"{key} holds {values.dtype} values; flags (bool or 0/1) were expected")
    if values.dtype.kind == "f" and np.isnan(values).any():
        raise CorruptFileError(path, f"{key} holds NaN where a flag (0 or 1) was expected")
    return np.asarray(values != 0, bool)


def scalar_column(values: np.ndarray, rows: int, path: Path, key: str) -> np.ndarray:
    """A column of one number a row (an ``(N, 1)`` dataset flattened), checked for its row count."""
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (rows,) or values.dtype.kind not in "biuf":
        raise CorruptFileError(
            path,
            f"{key} has shape {values.shape} and dtype {values.dtype}; one number per "
            f"row ({rows},) was expected",
        )
    return values.astype(np.float64)



def per_step_columns(
    path: Path, items: list[tuple[str, Any]], start: int, stop: int
) -> tuple[pa.Array, pa.Array] | None:
    """Rows ``start:stop`` of the per-step datasets as the steps' metadata and its types (None: none)."""
    if not items:
        return None
    return _metadata.encode_rows({key: read_rows(path, ds, key, start, stop) for key, ds in items})


def typed_infos(per_step: list[tuple[str, Any]]) -> tuple[Typed, list[tuple[str, Any]]]:
    """The per-row datasets of numbers as typed infos ``(field path, dataset path, dataset)``; the others.

    A field is the path under ``infos/`` (``infos/qpos`` is ``qpos``), or the dataset's path for
    other per-row datasets; ``infos/*`` come first, and a dataset whose field another took (or
    that would nest inside one) stays in the steps' metadata, as text and bytes do.
    """
    typed: Typed = []
    rest: list[tuple[str, Any]] = []
    taken: set[str] = set()
    for key, ds in sorted(per_step, key=lambda item: not item[0].startswith("infos/")):  # (stable)
        field = key[len("infos/"):] if key.startswith("infos/") else key
        parts = field.split("/")
        clash = any("/".join(parts[:i]) in taken for i in range(1, len(parts) + 1)) or \
            any(t.startswith(f"{field}/") for t in taken)
        if np.dtype(ds.dtype).kind in "biuf" and 0 not in tuple(ds.shape[1:]) and not clash:
            typed.append((field, key, ds))
            taken.add(field)
        else:
            rest.append((key, ds))
    rest.sort(key=lambda item: [k for k, _ in per_step].index(item[0]))
    return typed, rest


def infos_type(typed: Typed) -> pa.DataType:
    """The ``infos`` struct of the typed datasets, nested at ``/``: tensors of their dtypes, row shapes."""
    def struct(node: dict[str, Any]) -> pa.DataType:
        return pa.struct([pa.field(k, struct(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return struct(nest({field: tensor_type(np.dtype(ds.dtype), ds.shape[1:], layout="auto")
                        for field, _, ds in typed}))


def infos_rows(path: Path, typed: Typed, type_: pa.DataType, start: int, stop: int) -> pa.Array:
    """Rows ``start:stop`` of the typed datasets as a struct array, sliced from the file (no per-row loop)."""
    return to_arrow(nest({field: read_rows(path, ds, key, start, stop) for field, key, ds in typed}), type_)
