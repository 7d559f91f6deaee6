"""Transitions of an HDF5 file, and where its episodes end, as RLDS ``steps`` and ``episodes`` chunks.

Internal to :mod:`rlarrow.io.hdf5`: the D4RL and robomimic readers hand it rows a chunk at a
time; it gives back :class:`~rlarrow.core.sources.EpisodeChunk` s (the RLDS rows of those
transitions, and the ``episodes`` rows of the episodes that ended in them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.sources import EpisodeChunk, EpisodeRows
from rlarrow.core.tensors import to_arrow, with_null_rows

__all__ = ["StepBuilder"]


class StepBuilder:
    """Turns chunks of transitions, and where episodes end in them, into RLDS ``steps`` and ``episodes`` rows.

    A chunk gives, per row, the observation, action, reward and metadata of a transition;
    ``ends`` are the rows after which an episode ends, with its final observation (or None:
    null) and whether it is terminal. Each end adds one step after its row: the final
    observation, null action and reward. An episode may span chunks; its return is summed
    over all its rewards at its end (the same sum whatever the chunk size).
    """

    def __init__(self, run: str, types: dict[str, Any],
                 episode_meta: Callable[[int, int, bool], Any]) -> None:
        self.run, self.types = run, types
        self.episode_meta = episode_meta
        self.episode = 0
        self.step = 0  # steps of the current episode so far
        self.first_row = 0  # source row where the current episode started
        self.rewards: list[np.ndarray] = []
        self.rows = EpisodeRows()
        self.empty: tuple[np.ndarray | None, np.ndarray] = (None, np.zeros(0))
        self.schema: pa.Schema | None = None

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
    ) -> EpisodeChunk:
        """The chunk of these ``n`` rows (see the class docs): its steps and the episodes ended in it."""
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
        table = _schema.build("steps", columns, num_rows=total)
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
        return self._chunk(table)

    def _chunk(self, steps: pa.Table | None) -> EpisodeChunk:
        """``steps`` with the ``episodes`` rows closed since the last chunk."""
        rows, self.rows = self.rows, EpisodeRows()
        if steps is None:  # (no rows: the schema of the rows before, so a stream of them keeps one)
            steps = self.schema.empty_table() if self.schema is not None else \
                _schema.table("steps").arrow_schema().empty_table()
        self.schema = steps.schema
        return EpisodeChunk(steps, rows.table(self.run) if len(rows) else None)

    def finish(self, source_rows: int, final: np.ndarray | None = None) -> EpisodeChunk | None:
        """The rows after the last end: an episode the data stops in (``partial_end``).

        ``final``: the observation after its last row (D4RL's ``next_observations``), which
        completes its last transition: one more step that holds it, with null action and
        reward, not ``is_last`` (the episode did not end there, the data did).
        """
        tail = None
        if self.step:
            known = final is not None and self.empty[0] is not None
            if final is not None and known:
                tail = self._tail(final)
            self._close(self.episode, self.step + known, False, source_rows, known, partial=True)
            self.episode += 1
        self.step = 0
        self.rewards = []
        return self._chunk(tail) if tail is not None or len(self.rows) else None

    def _tail(self, final: np.ndarray) -> pa.Table:
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
        return _schema.build("steps", columns, num_rows=1)

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

