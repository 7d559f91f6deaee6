"""robomimic's layout read as an episode source: ``data/demo_<i>`` groups, one episode each.

Internal to :mod:`rlarrow.io.hdf5` (:func:`rlarrow.io.hdf5.read_hdf5` is the public reader):
:func:`robomimic_parts` checks the file's demos once, on the handle the reader opened, and
gives the run, the declared tensor types and the chunks (one demo, or a block of its rows).

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core.errors import CorruptFileError
from rlarrow.core.sources import EpisodeChunk, RunInfo
from rlarrow.core.tensors import tensor_type
from rlarrow.io.codecs.hdf5_files import chunk_rows, guarded, leaves, plain
from rlarrow.io.hdf5.hdf5_common import (
    DEMO_NAME,
    attrs_of,
    check_tensors,
    described,
    flag_column,
    infos_rows,
    infos_type,
    per_step_columns,
    read_rows,
    scalar_column,
    small_items,
    spec_of,
    typed_infos,
)
from rlarrow.io.hdf5.hdf5_steps import StepBuilder

__all__: list[str] = []

_Chunks = Callable[[str], Iterator[EpisodeChunk]]


def _rows_of(path: Path, data: Any, name: str) -> int:
    """How many rows demo ``name``'s actions have (its metadata only; None-shaped or missing: 0)."""
    with guarded(path, f"data/{name}/actions"):
        node = data[name]
        actions = node.get("actions") if hasattr(node, "keys") else None
        shape = getattr(actions, "shape", None)
        return int(shape[0]) if shape else 0


def _demos(path: Path, data: Any) -> list[tuple[int, str]]:
    with guarded(path, "the demos of data/"):
        found = [(int(m.group(1)), k) for k in data if (m := DEMO_NAME.fullmatch(k))]
    ids = [i for i, _ in found]
    if not found:
        raise CorruptFileError(path, "data/ holds no demo_<i> groups")
    if len(set(ids)) != len(ids):
        raise CorruptFileError(path, "two demos of data/ have the same number (demo_1 and demo_01?)")
    return sorted(found)


def _run_meta(f: Any, path: Path, data: Any, first: _Demo, empty: list[str]) -> dict[str, Any]:
    """The run's metadata: the file's attributes, small datasets, masks and column dtypes."""
    with guarded(path, "data/"):
        mask = {k: plain(ds[()]) for k, ds in leaves(f["mask"])} if "mask" in f else None
        others = [(k, ds) for k, ds in leaves(f) if not k.startswith(("data/", "mask/"))]
    kept, left = small_items(path, others)
    columns: dict[str, Any] = {"actions": described(first.actions)}
    if first.rewards is not None:
        columns["rewards"] = described(first.rewards)
    if first.obs is not None:
        columns["obs"] = {k: described(ds) for k, ds in first.obs.items()}
    run_meta: dict[str, Any] = {
        "layout": "robomimic",
        "attrs": attrs_of(path, f, "the file"),
        "data_attrs": attrs_of(path, data, "data/"),
        "datasets": kept,
        "columns": columns,
        "per_step": {k: described(ds) for k, ds in first.per_step},
    }
    if mask is not None:
        run_meta["mask"] = mask
    if left:
        run_meta["left_out"] = left
    if empty:
        run_meta["empty_demos"] = empty
    return run_meta


def _declared(first: _Demo, columns: dict[str, Any]) -> tuple[dict[str, pa.DataType], dict[str, Any]]:
    """The steps' tensor types and the run's specs, from the first demo."""
    declared: dict[str, pa.DataType] = {
        "action": tensor_type(np.dtype(first.actions.dtype), first.actions.shape[1:], layout="auto")
    }
    env_specs: dict[str, Any] = {"action_spec": spec_of("action", columns["actions"])}
    if "rewards" in columns:
        env_specs["reward_spec"] = spec_of("reward", {**columns["rewards"], "shape": []})
    if first.obs is not None:
        declared["observation"] = pa.struct(
            [(k, tensor_type(np.dtype(ds.dtype), ds.shape[1:], layout="auto")) for k, ds in first.obs.items()]
        )
        env_specs["observation_spec"] = {k: spec_of(k, v) for k, v in columns["obs"].items()}
    return declared, env_specs


def robomimic_parts(f: Any, path: Path, chunk_bytes: int
                    ) -> tuple[RunInfo, dict[str, pa.DataType], _Chunks, int]:
    """The run, declared types, chunks and demo count of the robomimic file ``f`` (open, checked)."""
    with guarded(path, "data/"):
        data = f["data"]
        demos = _demos(path, data)
        empty = [d for _, d in demos if _rows_of(path, data, d) == 0]  # a demo of no steps: no episode
        demos = [(i, d) for i, d in demos if d not in empty]
        if not demos:
            raise CorruptFileError(path, f"every demo of data/ is empty ({', '.join(empty[:5])}): no steps "
                                   "to import")
        first = _Demo(path, data, demos[0][1])
    run_meta = _run_meta(f, path, data, first, empty)
    types, env_specs = _declared(first, run_meta["columns"])
    typed, _ = typed_infos(first.per_step)
    if typed:  # (the first demo's numbers; a demo with others keeps them in its steps' metadata)
        types["infos"] = infos_type(typed)
    run = RunInfo(source="robomimic", name=path.stem, source_path=os.fspath(path), alignment="rlds",
                  num_envs=1, metadata=run_meta, env_specs=env_specs)

    def chunks(run_id: str) -> Iterator[EpisodeChunk]:
        current: dict[str, Any] = {}
        steps = StepBuilder(run_id, types, lambda start, stop, known: dict(current))
        for number, name in demos:
            demo = first if name == first.name else _Demo(path, data, name)
            demo.same_kind(first)
            current.clear()
            current.update(demo.metadata())
            yield from demo.unroll(steps, number, chunk_bytes)

    return run, types, chunks, len(demos)


class _Demo:
    """One ``data/demo_<i>`` group: its datasets checked for agreeing row counts, read in chunks."""

    def __init__(self, path: Path, data: Any, name: str) -> None:
        self.path, self.name, self.where = path, name, f"data/{name}"
        with guarded(path, self.where):
            self.group = group = data[name]
            if "actions" not in group or hasattr(group["actions"], "keys"):
                raise CorruptFileError(path, f"{self.where} has no actions dataset")
            self.actions = group["actions"]
            self.rows = rows = int(self.actions.shape[0]) if self.actions.shape else 0
            if rows == 0:
                raise CorruptFileError(path, f"{self.where} has no rows")
            self.obs = self._group("obs")
            self.next_obs = self._group("next_obs")
            if self.obs is not None and self.next_obs is not None:
                for key, ds in self.next_obs.items():
                    want = self.obs.get(key)
                    if want is not None and (ds.shape[1:] != want.shape[1:] or ds.dtype != want.dtype):
                        raise CorruptFileError(path, f"{self.where}/next_obs/{key} holds {ds.dtype} rows of "
                                               f"shape {ds.shape[1:]}; obs/{key} {want.dtype} of shape "
                                               f"{want.shape[1:]}: the final observation would not be "
                                               "the file's")
            self.rewards = group["rewards"] if "rewards" in group else None
            self.dones = group["dones"] if "dones" in group else None
            rest = [
                (k, ds)
                for k, ds in leaves(group)
                if not k.startswith(("obs/", "next_obs/")) and k not in ("actions", "rewards")
            ]
            self.per_step = [(k, ds) for k, ds in rest if ds.shape and ds.shape[0] == rows]
            self.small = [(k, ds) for k, ds in rest if (k, ds) not in self.per_step]
            checked = [
                *((self.obs or {}).items()),
                *((self.next_obs or {}).items()),
                *([("rewards", self.rewards)] if self.rewards is not None else []),
            ]
            for key, ds in checked:
                if not ds.shape or ds.shape[0] != rows:
                    raise CorruptFileError(
                        path,
                        f"{self.where}/{key} has {ds.shape[0] if ds.shape else 0} rows; actions has {rows}",
                    )
            check_tensors(path, [(f"{self.where}/actions", self.actions),
                                  *((f"{self.where}/obs/{k}", ds) for k, ds in (self.obs or {}).items())])

    def _group(self, name: str) -> dict[str, Any] | None:
        if name not in self.group:
            return None
        node = self.group[name]
        if not hasattr(node, "keys"):
            raise CorruptFileError(
                self.path, f"{self.where}/{name} is a dataset; robomimic keeps observations in a group"
            )
        return {k: ds for k, ds in leaves(node)} or None  # (an empty group: no observations)

    def same_kind(self, first: _Demo) -> None:
        """Refuse a demo whose observations or actions differ from the first demo's (keys, dtypes, shapes)."""

        def kind(demo: _Demo) -> dict[str, tuple[str, tuple[int, ...]]]:
            items = [("actions", demo.actions), *((f"obs/{k}", ds) for k, ds in (demo.obs or {}).items())]
            return {k: (str(ds.dtype), tuple(ds.shape[1:])) for k, ds in items}

        mine, theirs = kind(self), kind(first)
        if mine != theirs:
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise CorruptFileError(
                self.path,
                f"{self.where} and {first.where} differ in {diff} (dtype, row shape): "
                f"{[mine.get(k) for k in diff]} against {[theirs.get(k) for k in diff]}; rlarrow imports a "
                "file whose demos observe and act alike (split the file, or convert the demos to one dtype)",
            )

    def metadata(self) -> dict[str, Any]:
        kept, left = small_items(self.path, self.small)
        out = {"demo": self.name, **attrs_of(self.path, self.group, self.where)}
        if kept:
            out["datasets"] = kept
        if left:
            out["left_out"] = left
        return out

    def unroll(self, steps: StepBuilder, number: int, chunk_bytes: int) -> Iterator[EpisodeChunk]:
        """The demo's rows as chunks of about ``chunk_bytes``; the last closes its episode (``count`` 1)."""
        path, where, rows = self.path, self.where, self.rows
        final: Any = None
        if self.next_obs is not None and self.obs is not None and list(self.next_obs) == list(self.obs):
            final = {
                k: read_rows(path, ds, f"{where}/next_obs/{k}", rows - 1, rows)[0]
                for k, ds in self.next_obs.items()
            }
        last_done = False
        if self.dones is not None:
            last_done = bool(
                flag_column(read_rows(path, self.dones, f"{where}/dones", rows - 1, rows), 1, path,
                            f"{where}/dones")[
                    0
                ]
            )
        chunk = chunk_rows(
            [
                self.actions,
                *(self.obs or {}).values(),
                *([self.rewards] if self.rewards is not None else []),
                *(ds for _, ds in self.per_step),
            ],
            chunk_bytes,
        )
        typed, per_step = typed_infos(self.per_step)
        want = steps.types.get("infos")
        if want is None or infos_type(typed) != want:  # (not the run's infos: all as metadata)
            typed, per_step = [], self.per_step
        for start in range(0, rows, chunk):
            stop = min(rows, start + chunk)
            infos = infos_rows(path, typed, want, start, stop) if typed else \
                None if want is None else pa.nulls(stop - start, want)
            obs = (
                {k: read_rows(path, ds, f"{where}/obs/{k}", start, stop) for k, ds in self.obs.items()}
                if self.obs is not None
                else None
            )
            reward = (
                scalar_column(
                    read_rows(path, self.rewards, f"{where}/rewards", start, stop),
                    stop - start,
                    path,
                    f"{where}/rewards",
                )
                if self.rewards is not None
                else None
            )
            ends = np.array([stop - start - 1]) if stop == rows else np.empty(0, np.int64)
            made = steps.add(
                obs,
                read_rows(path, self.actions, f"{where}/actions", start, stop),
                reward,
                per_step_columns(path, per_step, start, stop),
                start,
                ends,
                np.array([last_done])[: len(ends)],
                [final] * len(ends),
                episode_ids=[number],
                infos=infos,
            )
            made.count = int(stop == rows)
            yield made
