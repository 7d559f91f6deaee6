"""D4RL's layout read as an episode source: root datasets, one row per transition.

Internal to :mod:`rlarrow.io.hdf5` (:func:`rlarrow.io.hdf5.read_hdf5` is the public reader):
:func:`d4rl_parts` checks the file's datasets once, on the handle the reader opened, and
gives the run, the declared tensor types and the chunks (a block of rows each, about
``chunk_bytes`` across its datasets).

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
from rlarrow.io.codecs.hdf5_files import chunk_rows, guarded, leaves
from rlarrow.io.hdf5.hdf5_common import (
    D4RL_KEYS,
    Typed,
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
    take_rows,
    typed_infos,
)
from rlarrow.io.hdf5.hdf5_steps import StepBuilder

__all__: list[str] = []

_Chunks = Callable[[str], Iterator[EpisodeChunk]]


def _datasets(f: Any, path: Path) -> tuple[dict[str, Any], list[tuple[str, Any]], list[tuple[str, Any]], int]:
    """The main datasets (checked to agree), the per-row others, the rest, and the row count."""
    with guarded(path, "the file's datasets"):
        found = leaves(f)
        main = {k: f[k] for k in D4RL_KEYS}
        for key in ("timeouts", "next_observations"):
            if key in f:
                main[key] = f[key]
        obs, next_obs = main["observations"], main.get("next_observations")
        n = int(obs.shape[0]) if obs.shape else 0
        for key, ds in main.items():
            if not ds.shape or ds.shape[0] != n:
                raise CorruptFileError(
                    path, f"{key} has {ds.shape[0] if ds.shape else 0} rows; observations has {n}"
                )
        if next_obs is not None and next_obs.shape[1:] != obs.shape[1:]:
            raise CorruptFileError(
                path, f"next_observations rows have shape {next_obs.shape[1:]}, observations {obs.shape[1:]}"
            )
        per_step = [
            (k, ds)
            for k, ds in found
            if k not in main and not k.startswith("metadata/") and ds.shape and ds.shape[0] == n
        ]
        other = [(k, ds) for k, ds in found if k not in main and (k, ds) not in per_step]
        check_tensors(path, [("observations", obs), ("actions", main["actions"])])
        if next_obs is not None and np.dtype(next_obs.dtype) != np.dtype(obs.dtype):
            raise CorruptFileError(path, f"next_observations holds {next_obs.dtype} values, observations "
                                   f"{obs.dtype}: the final observations would not be what the file holds")
    return main, per_step, other, n


def d4rl_parts(f: Any, path: Path, chunk_bytes: int) -> tuple[RunInfo, dict[str, pa.DataType], _Chunks, int]:
    """The run, declared types, chunks and row count of the D4RL file ``f`` (open, checked)."""
    main, per_step, other, n = _datasets(f, path)
    kept, left = small_items(path, other)
    columns = {k: described(ds) for k, ds in main.items()}
    run_meta: dict[str, Any] = {
        "layout": "d4rl",
        "attrs": attrs_of(path, f, "the file"),
        "metadata": kept.get("metadata", {}),
        "datasets": {k: v for k, v in kept.items() if k != "metadata"},
        "columns": columns,
        "per_step": {k: described(ds) for k, ds in per_step},
    }
    if left:
        run_meta["left_out"] = left
    obs, act = main["observations"], main["actions"]
    types = {"observation": tensor_type(np.dtype(obs.dtype), obs.shape[1:], layout="auto"),
             "action": tensor_type(np.dtype(act.dtype), act.shape[1:], layout="auto")}
    typed, per_step = typed_infos(per_step)
    if typed:
        types["infos"] = infos_type(typed)
    env_specs = {
        "observation_spec": spec_of("observation", columns["observations"]),
        "action_spec": spec_of("action", columns["actions"]),
        "reward_spec": spec_of("reward", {**columns["rewards"], "shape": []}),
    }
    run = RunInfo(source="d4rl", name=path.stem, source_path=os.fspath(path), alignment="rlds", num_envs=1,
                  metadata=run_meta, env_specs=env_specs)
    read = list(main.values()) + [ds for _, ds in per_step] + [ds for _, _, ds in typed]
    rows = chunk_rows(read, chunk_bytes)

    def chunks(run_id: str) -> Iterator[EpisodeChunk]:
        steps = StepBuilder(run_id, types, _episode_meta(main))
        return _chunks(path, main, (typed, per_step), n, rows, steps)

    return run, types, chunks, n


def _episode_meta(main: dict[str, Any]) -> Callable[[int, int, bool], dict[str, Any]]:
    final_from = "next_observations" if "next_observations" in main else "unknown"

    def episode_meta(start: int, stop: int, final_known: bool) -> dict[str, Any]:
        return {"source_rows": [start, stop], "final_observation": final_from if final_known else "unknown"}

    return episode_meta


def _chunks(path: Path, main: dict[str, Any], others: tuple[Typed, list[tuple[str, Any]]],
            n: int, rows: int, steps: StepBuilder) -> Iterator[EpisodeChunk]:
    """Blocks of ``rows`` transitions as chunks, then the episode the data stops in (if any).

    ``others``: the per-row datasets that are typed infos, and those kept as metadata.
    """
    typed, per_step = others
    timeouts, next_obs = main.get("timeouts"), main.get("next_observations")
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        o = read_rows(path, main["observations"], "observations", start, stop)
        a = read_rows(path, main["actions"], "actions", start, stop)
        k = stop - start
        r = scalar_column(read_rows(path, main["rewards"], "rewards", start, stop), k, path, "rewards")
        t = flag_column(read_rows(path, main["terminals"], "terminals", start, stop), k, path, "terminals")
        done = t.copy()
        if timeouts is not None:
            done |= flag_column(read_rows(path, timeouts, "timeouts", start, stop), k, path, "timeouts")
        ends = np.flatnonzero(done)
        finals: list[Any] = [None] * len(ends)
        if next_obs is not None and len(ends):
            finals = list(take_rows(path, next_obs, "next_observations", ends + start))
        extra = per_step_columns(path, per_step, start, stop)
        infos = infos_rows(path, typed, steps.types["infos"], start, stop) if typed else None
        chunk = steps.add(o, a, r, extra, start, ends, t[ends], finals, infos=infos)
        chunk.count = stop - start
        yield chunk
    tail = None  # the observation after the last row, which an episode the data stops in needs too
    if next_obs is not None and n and steps.step:
        tail = take_rows(path, next_obs, "next_observations", np.asarray([n - 1]))[0]
    last = steps.finish(n, tail)
    if last is not None:
        last.count = 0
        yield last
