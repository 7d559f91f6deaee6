"""Offline-RL and robot-learning HDF5 files: D4RL's layout and robomimic's, into a store, in chunks.

Two layouts are read (:func:`hdf5_layout` tells them apart; Minari's HDF5 backend is a
Minari dataset directory, read by :mod:`rlarrow.io.minari`):

* **D4RL** (``observations``, ``actions``, ``rewards``, ``terminals``, optional ``timeouts``,
  ``next_observations``, ``infos/*``, ``metadata/*`` at the root, one row per transition).
  Episodes end after each row whose ``terminals`` or ``timeouts`` is set (the files D4RL's own
  ``DatasetWriter`` makes have no ``timeouts``: there, only terminals end episodes). Each
  episode of N transitions becomes N + 1 RLDS steps: the last holds the final observation
  (``next_observations`` of the last row, or null where the file has none: never invented),
  with null action and reward, ``is_terminal`` from ``terminals``. Rows after the last end
  are an episode marked ``partial_end``; with ``next_observations`` it gets one more step, the
  observation after its last row (not ``is_last``), so its last transition is kept too.
* **robomimic** (``data/demo_<i>/{obs/*, next_obs/*, actions, rewards, dones, states}``, the
  layout robomimic, LIBERO, MimicGen, Isaac Lab and robosuite share). Each demo is an
  episode whose ``episode_id`` is its number; ``obs/*`` become a struct observation in the
  file's order, and the final step's observation is ``next_obs`` of the last row (null
  without ``next_obs``). ``is_terminal`` is the last ``dones`` value.

Everything else a row holds (``infos/*``, ``states``, ``dones``, ``action_dict/*``, ...) is
the step's ``metadata`` under its path (``{"infos": {"qpos": array}}``), each value in its
dtype. Attributes and small datasets of the file (``metadata/*``, ``env_args`` parsed from
its JSON, ``mask/*``, root attributes) are the run's metadata, with the dtype and shape of
every column read (``columns``) so that an export can write them back as they were; a
dataset too large for metadata (D4RL's ``metadata/policy/*`` weights) is named under
``left_out``, not copied. A demo's attributes (``num_samples``, ``model_file``, ``ep_meta``)
are its episode's metadata.

Files are read a chunk of rows at a time (:data:`rlarrow.io.codecs.hdf5_files.CHUNK_BYTES` across a
chunk's datasets), so a file larger than memory imports in bounded memory
(``benchmarks/hdf5_import.py``).

Example:
    >>> from rlarrow.io.hdf5 import import_hdf5  # doctest: +SKIP
    >>> import_hdf5("hopper-medium-v2.hdf5", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core.episodes import EpisodeRows
from rlarrow.core.errors import CorruptFileError, UnsupportedInputError
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.store import StoreLike, opened
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.io import EpisodesReport
from rlarrow.io.codecs.hdf5_files import (
    CHUNK_BYTES,
    chunk_rows,
    guarded,
    is_hdf5_file,
    leaves,
    open_hdf5,
    plain,
)

__all__ = [
    "D4RL_KEYS",
    "SMALL_ELEMENTS",
    "export_robomimic",
    "hdf5_layout",
    "import_d4rl",
    "import_hdf5",
    "import_robomimic",
]

#: the datasets a D4RL file must have at its root
D4RL_KEYS = ("observations", "actions", "rewards", "terminals")
#: a dataset of at most this many elements that is not per row is kept in the run's metadata
SMALL_ELEMENTS = 4096

_DEMO = re.compile(r"demo_(\d+)")


def hdf5_layout(path: str | os.PathLike[str], *, allow_links: bool = False) -> str | None:
    """``"d4rl"``, ``"robomimic"`` or None: which layout the HDF5 file ``path`` has (h5py needed).

    Raises:
        MissingDependencyError: h5py is not installed.
        UnsupportedInputError: not an HDF5 file.
        CorruptFileError: an HDF5 file that cannot be opened.
        HDF5RefusedError: a file that reaches outside itself or declares more than it holds
            (:func:`rlarrow.io.codecs.hdf5_files.check_contained`).
    """
    with open_hdf5(path, allow_links=allow_links) as f, guarded(path, "the file's top-level groups"):
        return _layout(f)


def _layout(f: Any) -> str | None:
    if all(k in f and not hasattr(f[k], "keys") for k in D4RL_KEYS):
        return "d4rl"
    data = f.get("data")
    if data is not None and hasattr(data, "keys") and any(_DEMO.fullmatch(k) for k in data):
        return "robomimic"
    return None


def import_hdf5(
    path: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    allow_hdf5_links: bool = False,
) -> EpisodesReport:
    """Import a D4RL or robomimic HDF5 file into ``store`` as one run (see the module docs).

    Nothing outside the file is read: external links, virtual datasets and external storage
    are refused, and so is a dataset that declares more than the file holds
    (:func:`rlarrow.io.codecs.hdf5_files.check_contained`), before anything is read.

    Args:
        path: the ``.hdf5`` file.
        store: the store (created if missing).
        run_id: the new run's id (None: generated).
        name: the run's name (default: the file's name).
        progress: a progress bar (None: when stderr is a terminal).
        chunk_bytes: how much to read at a time, over all of a chunk's datasets.
        allow_hdf5_links: follow external links and virtual datasets whose files lie in the
            input's own directory (``rlarrow convert --allow-hdf5-links``); never outside it.

    Raises:
        UnsupportedInputError: not HDF5, or neither layout (the message lists what the file holds).
        CorruptFileError: damaged data, or datasets that disagree (row counts, shapes).
        MissingDependencyError: h5py is not installed (``pip install 'rlarrow[hdf5]'``).
        HDF5RefusedError: an external link, virtual dataset or external storage (without
            ``allow_hdf5_links``, or leading outside the input's directory), or a dataset that
            declares more rows than the file holds.

    Example:
        >>> import_hdf5("robomimic/lift/ph/low_dim_v15.hdf5", "runs.rlarrow")  # doctest: +SKIP
    """
    with open_hdf5(path, allow_links=allow_hdf5_links) as f:
        with guarded(path, "the file's top-level groups"):
            layout = _layout(f)
            top = sorted(f)
        if layout is None:
            raise UnsupportedInputError(
                path,
                f"an HDF5 file of neither D4RL's layout (datasets {list(D4RL_KEYS)} "
                "at its root) nor robomimic's (data/demo_<i> groups); it holds "
                f"{top[:12]}: rlarrow imports those two and Minari datasets",
            )
        reader = _d4rl if layout == "d4rl" else _robomimic
        with opened(store, create=True) as st, st.transaction():  # all of the file or nothing of it
            return reader(f, Path(path), st, run_id, name, progress, chunk_bytes)


def import_d4rl(path: str | os.PathLike[str], store: StoreLike, **options: Any) -> EpisodesReport:
    """:func:`import_hdf5` of a file that must have D4RL's layout."""
    _must_be(path, "d4rl", options.get("allow_hdf5_links", False))
    return import_hdf5(path, store, **options)


def import_robomimic(path: str | os.PathLike[str], store: StoreLike, **options: Any) -> EpisodesReport:
    """:func:`import_hdf5` of a file that must have robomimic's layout."""
    _must_be(path, "robomimic", options.get("allow_hdf5_links", False))
    return import_hdf5(path, store, **options)


def _must_be(path: str | os.PathLike[str], layout: str, allow_links: bool) -> None:
    if not is_hdf5_file(path):
        raise UnsupportedInputError(path, "not an HDF5 file (no HDF5 signature)")
    found = hdf5_layout(path, allow_links=allow_links)
    if found != layout:
        raise UnsupportedInputError(
            path, f"not a {layout} file (its layout is {found or 'neither D4RL nor robomimic'})"
        )


# --------------------------------------------------------------------------- shared


def _described(ds: Any) -> dict[str, Any]:
    return {"dtype": np.dtype(ds.dtype).str, "shape": [int(d) for d in ds.shape[1:]]}


def _small(path: Path, items: list[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
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


def _attrs(path: Path, node: Any, what: str) -> dict[str, Any]:
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


def _add_run(st: Any, source: str, path: Path, run_id: str | None, name: str | None,
             run_meta: dict[str, Any], env_specs: dict[str, Any]) -> str:
    """The file's ``runs`` row: one run, RLDS alignment, one env."""
    run: str = st.add_run(source=source, run_id=run_id, name=name or path.stem, source_path=os.fspath(path),
                          alignment="rlds", num_envs=1, metadata=run_meta, env_specs=env_specs)
    return run


def _check_tensors(path: Path, items: list[tuple[str, Any]]) -> None:
    """Observations and actions must be numbers (or bools), at least one per row."""
    for key, ds in items:
        if np.dtype(ds.dtype).kind not in "biuf":
            raise CorruptFileError(path, f"{key} holds {ds.dtype} values; observations and actions must be "
                                   "numbers")
        if ds.shape is not None and 0 in tuple(ds.shape[1:]):
            raise CorruptFileError(path, f"{key} has rows of shape {tuple(ds.shape[1:])}, which hold no "
                                   "values: there is nothing to import")


def _spec(name: str, info: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Array", "name": name, "shape": info["shape"], "dtype": np.dtype(info["dtype"]).name}


def _read(path: Path, ds: Any, key: str, start: int, stop: int) -> np.ndarray:
    with guarded(path, f"rows {start}..{stop} of {key!r}"):
        return np.asarray(ds[start:stop])


def _take(path: Path, ds: Any, key: str, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` (increasing) of a dataset."""
    with guarded(path, f"rows of {key!r}"):
        return np.asarray(ds[rows.tolist()])


def _flags(values: np.ndarray, rows: int, path: Path, key: str) -> np.ndarray:
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


def _scalars(values: np.ndarray, rows: int, path: Path, key: str) -> np.ndarray:
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (rows,) or values.dtype.kind not in "biuf":
        raise CorruptFileError(
            path,
            f"{key} has shape {values.shape} and dtype {values.dtype}; one number per "
            f"row ({rows},) was expected",
        )
    return values.astype(np.float64)


class _Steps:
    """Turns chunks of transitions, and where episodes end in them, into RLDS ``steps`` and ``episodes`` rows.

    A chunk gives, per row, the observation, action, reward and metadata of a transition;
    ``ends`` are the rows after which an episode ends, with its final observation (or None:
    null) and whether it is terminal. Each end adds one step after its row: the final
    observation, null action and reward. An episode may span chunks; its return is summed
    over all its rewards at its end (the same sum whatever the chunk size).
    """

    def __init__(
        self,
        st: Any,
        run: str,
        writer: Any,
        types: dict[str, Any],
        report: EpisodesReport,
        episode_meta: Callable[[int, int, bool], Any],
    ) -> None:
        self.st, self.run, self.writer, self.types, self.report = st, run, writer, types, report
        self.episode_meta = episode_meta
        self.episode = 0
        self.step = 0  # steps of the current episode so far
        self.first_row = 0  # source row where the current episode started
        self.rewards: list[np.ndarray] = []
        self.rows = EpisodeRows()
        self.empty: tuple[np.ndarray | None, np.ndarray] = (None, np.zeros(0))

    def add(
        self,
        obs: Any,
        action: np.ndarray,
        reward: np.ndarray | None,
        meta: tuple[pa.Array, pa.Array] | None,
        source_row: int,
        ends: np.ndarray,
        terminal: np.ndarray,
        final: list[Any | None],
        episode_ids: list[int] | None = None,
    ) -> None:
        n = len(action)
        self.empty = (obs[:0] if isinstance(obs, np.ndarray) else None, action[:0])  # what a tail step needs
        ends = np.asarray(ends, np.int64)
        before = np.searchsorted(ends, np.arange(n), side="left")  # ends strictly before each row
        src = np.arange(n) + before
        fin = ends + np.arange(len(ends)) + 1
        total = n + len(ends)
        is_final = np.zeros(total, bool)
        is_final[fin] = True
        # the episode of each output row, and its step within the episode
        episode_of = np.empty(total, np.int64)
        episode_of[src] = before
        episode_of[fin] = np.arange(len(ends))
        starts = np.concatenate([[0], ends + 1])  # first row of each episode in the chunk
        step = np.empty(total, np.int64)
        step[src] = np.arange(n) - starts[before] + np.where(before == 0, self.step, 0)
        step[fin] = step[src[ends]] + 1 if len(ends) else step[fin]
        ids = np.asarray(
            [self.episode + k for k in range(len(ends) + 1)] if episode_ids is None else episode_ids
        )
        columns: dict[str, Any] = {
            "run_id": self.run,
            "episode_id": ids[episode_of],
            "step": step,
            "env_index": 0,
            "observation": self._spread(obs, src, fin, final, total, "observation"),
            "action": self._spread(action, src, fin, [None] * len(ends), total, "action"),
            "reward": pa.array(self._floats(reward, src, total), mask=is_final)
            if reward is not None
            else pa.nulls(total, pa.float64()),
            "is_first": step == 0,
            "is_last": is_final,
            "is_terminal": self._terminal(terminal, fin, total),
        }
        if obs is None:  # (a demo without observations, as robosuite's own recorder writes: null)
            del columns["observation"]
        if meta is not None:  # each row's, and null on the final steps
            where = np.zeros(total, np.int64)
            where[src] = np.arange(n)
            rows_of = pa.array(where, mask=is_final)
            columns["metadata"], columns["metadata_types"] = meta[0].take(rows_of), meta[1].take(rows_of)
        table = _schema.build("steps", columns, num_rows=total, established=self.st.schema("steps"))
        self.writer.write(table)
        self.report.steps += total
        # episodes that ended here
        kept = reward if reward is not None else np.full(n, np.nan)
        for k, end in enumerate(ends.tolist()):
            self.rewards.append(kept[starts[k] : end + 1])
            self._close(
                int(ids[k]),
                int(step[fin[k]]) + 1,
                bool(terminal[k]),
                source_row + end + 1,
                final[k] is not None,
                partial=False,
                known=reward is not None,
            )
        self.rewards.append(kept[starts[-1] :])
        self.step = int(step[src[-1]]) + 1 if n and (not len(ends) or ends[-1] < n - 1) else 0
        if episode_ids is None:
            self.episode += len(ends)

    def finish(self, source_rows: int, final: np.ndarray | None = None) -> None:
        """The rows after the last end: an episode the data stops in (``partial_end``).

        ``final``: the observation after its last row (D4RL's ``next_observations``), which
        completes its last transition: one more step that holds it, with null action and
        reward, not ``is_last`` (the episode did not end there, the data did).
        """
        if self.step:
            known = final is not None and self.empty[0] is not None
            if final is not None and known:
                self._tail(final)
            self._close(self.episode, self.step + known, False, source_rows, known, partial=True)
            self.episode += 1
        self.step = 0
        self.rewards = []
        self.rows.append_to(self.st, self.run)

    def _tail(self, final: np.ndarray) -> None:
        """One step after the last row of an episode the data stops in: its next observation."""
        obs, action = self.empty
        fin = np.zeros(1, np.int64)
        src = np.zeros(0, np.int64)
        columns: dict[str, Any] = {
            "run_id": self.run,
            "episode_id": self.episode,
            "step": self.step,
            "env_index": 0,
            "observation": self._spread(obs, src, fin, [final], 1, "observation"),
            "action": self._spread(action, src, fin, [None], 1, "action"),
            "reward": pa.nulls(1, pa.float64()),
            "is_first": False,
            "is_last": False,
            "is_terminal": False,
        }
        self.writer.write(_schema.build("steps", columns, num_rows=1, established=self.st.schema("steps")))
        self.report.steps += 1

    def _close(
        self,
        episode: int,
        num_steps: int,
        terminal: bool,
        stop: int,
        final_known: bool,
        partial: bool,
        known: bool = True,
    ) -> None:
        rewards = np.concatenate(self.rewards) if self.rewards else np.empty(0)
        self.rewards = []
        self.rows.add(episode, num_steps=num_steps,
                      total=float(np.sum(rewards, dtype=np.float64)) if known else None,
                      terminated=terminal, truncated=not terminal and not partial, partial_end=partial,
                      metadata=self.episode_meta(self.first_row, stop, final_known))
        self.first_row = stop
        self.report.episodes += 1

    def _floats(self, values: np.ndarray, src: np.ndarray, total: int) -> np.ndarray:
        out = np.zeros(total, np.float64)
        out[src] = values
        return out

    def _terminal(self, terminal: np.ndarray, fin: np.ndarray, total: int) -> np.ndarray:
        out = np.zeros(total, bool)
        out[fin] = terminal
        return out

    def _spread(
        self, values: Any, src: np.ndarray, fin: np.ndarray, final: list[Any | None], total: int, column: str
    ) -> pa.Array | None:
        """Rows at ``src``, the final observations (or nulls) at ``fin``, in the column's declared type."""
        if values is None:
            return None
        type_ = self.types.get(column)
        if isinstance(values, dict):
            children = []
            for key, child in values.items():
                sub = [None if f is None else f[key] for f in final]
                children.append(self._dense(child, src, fin, sub, total))
            arrays = [
                to_arrow(c, type_.field(k).type if type_ is not None else None)
                for k, c in zip(values, children, strict=True)
            ]
            mask = np.zeros(total, bool)
            mask[fin[[f is None for f in final]]] = True
            return pa.StructArray.from_arrays(
                arrays, names=list(values), mask=pa.array(mask) if mask.any() else None
            )
        dense = self._dense(values, src, fin, final, total)
        out = to_arrow(dense, type_)
        mask = np.zeros(total, bool)
        mask[fin[[f is None for f in final]]] = True
        return with_null_rows(out, mask) if mask.any() else out

    @staticmethod
    def _dense(
        values: np.ndarray, src: np.ndarray, fin: np.ndarray, final: list[Any | None], total: int
    ) -> np.ndarray:
        out = np.zeros((total, *values.shape[1:]), values.dtype)
        out[src] = values
        for j, f in zip(fin.tolist(), final, strict=True):
            if f is not None:
                out[j] = f
        return out


def _per_step(
    path: Path, items: list[tuple[str, Any]], start: int, stop: int
) -> tuple[pa.Array, pa.Array] | None:
    if not items:
        return None
    return _metadata.encode_rows({key: _read(path, ds, key, start, stop) for key, ds in items})


# --------------------------------------------------------------------------- D4RL


def _d4rl(
    f: Any, path: Path, st: Any, run_id: str | None, name: str | None, progress: bool | None, chunk_bytes: int
) -> EpisodesReport:
    from rlarrow.core.progress import bar

    with guarded(path, "the file's datasets"):
        found = leaves(f)
        obs, act, rew, term = (f[k] for k in D4RL_KEYS)
        timeouts = f["timeouts"] if "timeouts" in f else None
        next_obs = f["next_observations"] if "next_observations" in f else None
        n = int(obs.shape[0]) if obs.shape else 0
        main = {"observations": obs, "actions": act, "rewards": rew, "terminals": term}
        if timeouts is not None:
            main["timeouts"] = timeouts
        if next_obs is not None:
            main["next_observations"] = next_obs
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
        _check_tensors(path, [("observations", obs), ("actions", act)])
        if next_obs is not None and np.dtype(next_obs.dtype) != np.dtype(obs.dtype):
            raise CorruptFileError(path, f"next_observations holds {next_obs.dtype} values, observations "
                                   f"{obs.dtype}: the final observations would not be what the file holds")
    kept, left = _small(path, other)
    columns = {k: _described(ds) for k, ds in main.items()}
    run_meta = {
        "layout": "d4rl",
        "attrs": _attrs(path, f, "the file"),
        "metadata": kept.get("metadata", {}),
        "datasets": {k: v for k, v in kept.items() if k != "metadata"},
        "columns": columns,
        "per_step": {k: _described(ds) for k, ds in per_step},
    }
    if left:
        run_meta["left_out"] = left
    obs_type = tensor_type(np.dtype(obs.dtype), obs.shape[1:], layout="auto")
    act_type = tensor_type(np.dtype(act.dtype), act.shape[1:], layout="auto")
    types = declare_steps(st, {"observation": obs_type, "action": act_type})
    env_specs = {
        "observation_spec": _spec("observation", columns["observations"]),
        "action_spec": _spec("action", columns["actions"]),
        "reward_spec": _spec("reward", {**columns["rewards"], "shape": []}),
    }
    run = _add_run(st, "d4rl", path, run_id, name, run_meta, env_specs)
    report = EpisodesReport(run_id=run)
    final_from = "next_observations" if next_obs is not None else "unknown"

    def episode_meta(start: int, stop: int, final_known: bool) -> dict[str, Any]:
        return {"source_rows": [start, stop], "final_observation": final_from if final_known else "unknown"}

    rows = chunk_rows([ds for ds in main.values()] + [ds for _, ds in per_step], chunk_bytes)
    with st.writer("steps") as writer, bar(n, "import d4rl", "row", progress) as pbar:
        steps = _Steps(st, run, writer, types, report, episode_meta)
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            o = _read(path, obs, "observations", start, stop)
            a = _read(path, act, "actions", start, stop)
            r = _scalars(_read(path, rew, "rewards", start, stop), stop - start, path, "rewards")
            t = _flags(_read(path, term, "terminals", start, stop), stop - start, path, "terminals")
            done = t.copy()
            if timeouts is not None:
                done |= _flags(_read(path, timeouts, "timeouts", start, stop), stop - start, path, "timeouts")
            ends = np.flatnonzero(done)
            finals: list[Any] = [None] * len(ends)
            if next_obs is not None and len(ends):
                finals = list(_take(path, next_obs, "next_observations", ends + start))
            steps.add(o, a, r, _per_step(path, per_step, start, stop), start, ends, t[ends], finals)
            pbar.update(stop - start)
        tail = None  # the observation after the last row, which an episode the data stops in needs too
        if next_obs is not None and n and steps.step:
            tail = _take(path, next_obs, "next_observations", np.asarray([n - 1]))[0]
        steps.finish(n, tail)
    return report


# --------------------------------------------------------------------------- robomimic


def _rows_of(path: Path, data: Any, name: str) -> int:
    """How many rows demo ``name``'s actions have (its metadata only; None-shaped or missing: 0)."""
    with guarded(path, f"data/{name}/actions"):
        node = data[name]
        actions = node.get("actions") if hasattr(node, "keys") else None
        shape = getattr(actions, "shape", None)
        return int(shape[0]) if shape else 0


def _demos(path: Path, data: Any) -> list[tuple[int, str]]:
    with guarded(path, "the demos of data/"):
        found = [(int(m.group(1)), k) for k in data if (m := _DEMO.fullmatch(k))]
    ids = [i for i, _ in found]
    if not found:
        raise CorruptFileError(path, "data/ holds no demo_<i> groups")
    if len(set(ids)) != len(ids):
        raise CorruptFileError(path, "two demos of data/ have the same number (demo_1 and demo_01?)")
    return sorted(found)


def _robomimic(
    f: Any, path: Path, st: Any, run_id: str | None, name: str | None, progress: bool | None, chunk_bytes: int
) -> EpisodesReport:
    from rlarrow.core.progress import bar

    with guarded(path, "data/"):
        data = f["data"]
        demos = _demos(path, data)
        empty = [d for _, d in demos if _rows_of(path, data, d) == 0]  # a demo of no steps: no episode
        demos = [(i, d) for i, d in demos if d not in empty]
        if not demos:
            raise CorruptFileError(path, f"every demo of data/ is empty ({', '.join(empty[:5])}): no steps "
                                   "to import")
        first_name = demos[0][1]
        first = _Demo(path, data, first_name)
        mask = {k: plain(ds[()]) for k, ds in leaves(f["mask"])} if "mask" in f else None
        others = [(k, ds) for k, ds in leaves(f) if not k.startswith(("data/", "mask/"))]
    kept, left = _small(path, others)
    columns: dict[str, Any] = {"actions": _described(first.actions)}
    if first.rewards is not None:
        columns["rewards"] = _described(first.rewards)
    if first.obs is not None:
        columns["obs"] = {k: _described(ds) for k, ds in first.obs.items()}
    run_meta: dict[str, Any] = {
        "layout": "robomimic",
        "attrs": _attrs(path, f, "the file"),
        "data_attrs": _attrs(path, data, "data/"),
        "datasets": kept,
        "columns": columns,
        "per_step": {k: _described(ds) for k, ds in first.per_step},
    }
    if mask is not None:
        run_meta["mask"] = mask
    if left:
        run_meta["left_out"] = left
    if empty:
        run_meta["empty_demos"] = empty
    declared: dict[str, Any] = {
        "action": tensor_type(np.dtype(first.actions.dtype), first.actions.shape[1:], layout="auto")
    }
    env_specs: dict[str, Any] = {"action_spec": _spec("action", columns["actions"])}
    if "rewards" in columns:
        env_specs["reward_spec"] = _spec("reward", {**columns["rewards"], "shape": []})
    if first.obs is not None:
        declared["observation"] = pa.struct(
            [(k, tensor_type(np.dtype(ds.dtype), ds.shape[1:], layout="auto")) for k, ds in first.obs.items()]
        )
        env_specs["observation_spec"] = {k: _spec(k, v) for k, v in columns["obs"].items()}
    types = declare_steps(st, declared)
    run = _add_run(st, "robomimic", path, run_id, name, run_meta, env_specs)
    report = EpisodesReport(run_id=run)
    current: dict[str, Any] = {}
    with st.writer("steps") as writer, bar(len(demos), "import robomimic", "demo", progress) as pbar:
        steps = _Steps(st, run, writer, types, report, lambda start, stop, known: dict(current))
        for number, demo_name in demos:
            demo = first if demo_name == first_name else _Demo(path, data, demo_name)
            demo.same_kind(first)
            current.clear()
            current.update(demo.metadata())
            demo.unroll(steps, number, chunk_bytes)
            pbar.update(1)
        steps.finish(0)
    return report


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
            _check_tensors(path, [(f"{self.where}/actions", self.actions),
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
        kept, left = _small(self.path, self.small)
        out = {"demo": self.name, **_attrs(self.path, self.group, self.where)}
        if kept:
            out["datasets"] = kept
        if left:
            out["left_out"] = left
        return out

    def unroll(self, steps: _Steps, number: int, chunk_bytes: int) -> None:
        path, where, rows = self.path, self.where, self.rows
        final: Any = None
        if self.next_obs is not None and self.obs is not None and list(self.next_obs) == list(self.obs):
            final = {
                k: _read(path, ds, f"{where}/next_obs/{k}", rows - 1, rows)[0]
                for k, ds in self.next_obs.items()
            }
        last_done = False
        if self.dones is not None:
            last_done = bool(
                _flags(_read(path, self.dones, f"{where}/dones", rows - 1, rows), 1, path, f"{where}/dones")[
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
        for start in range(0, rows, chunk):
            stop = min(rows, start + chunk)
            obs = (
                {k: _read(path, ds, f"{where}/obs/{k}", start, stop) for k, ds in self.obs.items()}
                if self.obs is not None
                else None
            )
            reward = (
                _scalars(
                    _read(path, self.rewards, f"{where}/rewards", start, stop),
                    stop - start,
                    path,
                    f"{where}/rewards",
                )
                if self.rewards is not None
                else None
            )
            ends = np.array([stop - start - 1]) if stop == rows else np.empty(0, np.int64)
            steps.add(
                obs,
                _read(path, self.actions, f"{where}/actions", start, stop),
                reward,
                _per_step(path, self.per_step, start, stop),
                start,
                ends,
                np.array([last_done])[: len(ends)],
                [final] * len(ends),
                episode_ids=[number],
            )


# --------------------------------------------------------------------------- robomimic export


def export_robomimic(
    store: StoreLike,
    path: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a run as a robomimic HDF5 file (``data/demo_<episode_id>/...``), one demo per episode.

    Each demo holds ``obs/<key>`` (a struct observation's fields; a plain one as ``obs/flat``,
    the key robomimic's D4RL conversion uses), ``next_obs/<key>`` where the episode's final
    observation is stored, ``actions``, ``rewards``, ``dones`` and every per-step metadata
    dataset (``states``, ...) in the dtypes the run recorded (``columns`` and ``per_step`` of
    an HDF5 import; else as stored), ``num_samples``, and the demo's attributes; ``data``
    holds ``total`` and ``env_args`` (the run's, else ``{"env_name": <run name>, "type": 2,
    "env_kwargs": {}}``: a gym env), ``mask/*`` the run's filter keys. A robomimic file
    imported and exported comes back with the same datasets, values, dtypes and attributes.
    ``dones`` not recorded per step are 1 on the last step of an episode that ended terminal.
    The file is written under a temporary name and renamed when complete.

    Raises:
        InvalidInputError: ``path`` exists and not ``overwrite``, or is a directory.
        MissingDependencyError: h5py is not installed.
        OutputError: the file could not be written (a full disk); nothing is left at ``path``.

    Example:
        >>> export_robomimic("runs.rlarrow", "demos.hdf5")  # doctest: +SKIP
    """
    from rlarrow.core.deps import require
    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.errors import InvalidInputError
    from rlarrow.core.targets import atomic_file, in_child

    require("h5py", feature="writing robomimic HDF5 files")
    target = Path(path)
    if target.is_dir():
        raise InvalidInputError(target, "a directory: give the robomimic .hdf5 file to write")
    if target.exists() and not overwrite:
        raise InvalidInputError(target, "exists: pass overwrite=True (--overwrite) to replace it")
    with DmEnvRows(store, run_id=run_id) as reader:
        reader.refuse_bytes("a robomimic file")
        source = (os.path.abspath(reader.store.path), reader.store.version, reader.run_id)
    # (-o DIR: DIR/demo.hdf5, DIR made when missing and removed again on failure). HDF5 can
    # crash the process on a full disk: it writes in a child process, which reads the same version
    with atomic_file(target, overwrite=True) as tmp:
        in_child(target, _robomimic_file, *source, os.fspath(tmp), what="robomimic (HDF5)")
    return target


def _robomimic_file(store: str, version: int, run_id: str, tmp: str) -> None:
    """Write run ``run_id`` of ``store`` at ``version`` as a robomimic file at ``tmp`` (in a child)."""
    import h5py

    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.targets import write_failure

    with DmEnvRows(store, run_id=run_id, version=version) as reader, open(tmp, "w+b") as raw:
        sink = _WriteOnce(raw)
        try:
            with h5py.File(sink, "w") as f:
                _write_robomimic(reader, f)
        except (OSError, RuntimeError) as exc:  # HDF5 says a failed write in its own words
            raise write_failure(sink.error or exc, tmp) from exc
        if sink.error is not None:
            raise sink.error


class _WriteOnce(io.RawIOBase):
    """The file HDF5 writes through (h5py's file-object driver), keeping its first failed write.

    HDF5 crashes the process (a segmentation fault in ``H5Fclose``) when it closes a file
    whose writes failed, as on a full disk. Here a failed write is kept in ``error`` and
    the ones after it are taken without writing, so HDF5 closes cleanly and the export
    then raises ``error`` (and its temporary file is removed).
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return int(self.raw.readinto(buffer))

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if self.error is None:
            try:
                self.raw.write(data)
            except OSError as exc:
                self.error = exc
        return size

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return int(self.raw.truncate(size))
            except OSError as exc:
                self.error = exc
        return size if size is not None else self.tell()

    def flush(self) -> None:
        if self.error is None:
            try:
                self.raw.flush()
            except OSError as exc:
                self.error = exc


def _write_robomimic(reader: Any, f: Any) -> None:
    run = reader.run
    meta = _metadata.decode(run.get("metadata"), run.get("metadata_types"))
    meta = meta if isinstance(meta, dict) else {}
    mine = run.get("source") == "robomimic"
    columns = meta.get("columns", {}) if mine else {}
    if run.get("source") == "d4rl":  # D4RL's dtypes; robomimic's shapes (rewards (N,), not (N, 1))
        columns = {k: {"dtype": v["dtype"]} for k, v in (meta.get("columns") or {}).items()}
    per_step = meta.get("per_step", {}) if mine else {}
    for key, value in (meta.get("attrs") or {}).items() if mine else ():
        f.attrs[key] = _attr(value)
    data = f.create_group("data")
    ep_meta = reader.episode_metadata()
    total = 0
    for k in range(reader.num_episodes):
        table = reader.episode_table(k)
        rows = table.num_rows
        actions = table.column("action").combine_chunks()
        ended = rows and (table.column("is_last")[rows - 1].as_py() or not actions[rows - 1].is_valid)
        n = rows - 1 if ended else rows  # transitions: rows with an action
        g = data.create_group(f"demo_{int(reader.episode_ids[k])}")
        obs = _numpy(table.column("observation").combine_chunks())
        final_known = n < rows and table.column("observation")[n].is_valid
        # robomimic's obs keys are flat: a nested field (LeRobot's images.top) is joined at dots
        obs_fields = dict(_flat_items(obs)) if isinstance(obs, dict) else {"flat": obs}
        obs_fields = {k.replace("/", "."): v for k, v in obs_fields.items()}
        for key, values in obs_fields.items():
            g.create_dataset(f"obs/{key}", data=values[:n])
            if final_known:
                g.create_dataset(f"next_obs/{key}", data=values[1:n + 1])
        g.create_dataset("actions", data=_as(_numpy(actions.slice(0, n)), columns.get("actions")))
        rewards = table.column("reward").combine_chunks().slice(0, n)
        if rewards.null_count < n or not n:
            values = rewards.to_numpy(zero_copy_only=False)
            g.create_dataset("rewards", data=_as(values, columns.get("rewards")))
        step_meta = _metadata.decode_column(table.column("metadata").to_pylist()[:n],
                                            table.column("metadata_types").to_pylist()[:n])
        leaves = _step_leaves(step_meta)
        if "dones" not in leaves:
            dones = np.zeros(n, np.int64)
            if n and n < rows:
                dones[-1] = int(bool(table.column("is_terminal")[n].as_py()))
            leaves["dones"] = dones
        for key, values in leaves.items():
            g.create_dataset(key, data=_as(values, per_step.get(key)))
        g.attrs["num_samples"] = n
        demo = ep_meta[k] if isinstance(ep_meta[k], dict) else {}
        for key, value in demo.items():
            if key in ("demo", "datasets", "left_out", "num_samples") or not mine:
                continue
            g.attrs[key] = _attr(value)
        for key, value in _flat_items(demo.get("datasets") or {} if mine else {}):
            g.create_dataset(key, data=np.asarray(value))
        total += n
    data.attrs["total"] = total
    data_attrs = dict(meta.get("data_attrs") or {}) if mine else {}
    data_attrs.setdefault("env_args", {"env_name": str(run.get("name") or run.get("run_id")), "type": 2,
                                       "env_kwargs": {}})
    for key, value in data_attrs.items():
        if key != "total":
            data.attrs[key] = _attr(value)
    for key, value in _flat_items(meta.get("datasets") or {} if mine else {}):  # the file's small datasets
        f.create_dataset(key, data=np.asarray(value))
    for key, names in _flat_items(meta.get("mask") or {} if mine else {}):
        f.create_dataset(f"mask/{key}", data=np.array([str(x).encode() for x in names], dtype="S"))


def _numpy(arr: pa.Array) -> Any:
    from rlarrow.core.tensors import to_numpy

    return to_numpy(arr, fill_value=0)


def _as(values: Any, described: Any) -> Any:
    """``values`` in the dtype and row shape an import recorded (``{"dtype", "shape"}``), when it did."""
    if not isinstance(described, dict) or "dtype" not in described:
        return values
    out = np.asarray(values).astype(np.dtype(described["dtype"]), copy=False)
    return out.reshape(len(out), *described.get("shape", out.shape[1:]))


def _attr(value: Any) -> Any:
    """A metadata value as an HDF5 attribute: dicts (and lists of them) as JSON text, robomimic-style."""
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
        return json.dumps(value)
    return value


def _flat_items(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _flat_items(value, f"{prefix}{key}/")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _step_leaves(steps: list[Any]) -> dict[str, np.ndarray]:
    """Per-step metadata dicts as one stacked array per leaf path, where every step has that leaf."""
    if not steps or not all(isinstance(s, dict) for s in steps):
        return {}
    paths = [p for p, _ in _flat_items(steps[0])]
    out = {}
    for path in paths:
        values = []
        for s in steps:
            node: Any = s
            for part in path.split("/"):
                node = node.get(part) if isinstance(node, dict) else None
            values.append(node)
        if all(v is not None for v in values):
            array = np.asarray(values)
            if array.dtype.kind in "UO":  # text (a language instruction): UTF-8 bytes, as h5py stores it
                array = np.asarray([str(v).encode("utf-8") for v in values], dtype=bytes)
            out[path] = array
    return out
