"""Transitions of an HDF5 file, and where its episodes end, as RLDS ``steps`` and ``episodes`` chunks.

Internal to :mod:`rlarrow.io.hdf5`: the D4RL and robomimic readers hand it rows a chunk at a
time; it gives back :class:`~rlarrow.core.sources.EpisodeChunk` s (the RLDS rows of those
transitions, and the ``episodes`` rows of the episodes that ended in them), laid out by the one
episode builder (:mod:`rlarrow.core.episode_builder`: a final step after each end, the last-step
nulls through :func:`rlarrow.core.alignment.last_null`, returns, how each episode ended).

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.episode_builder import Transitions, outcome, returns
from rlarrow.core.sources import EpisodeChunk, EpisodeRows
from rlarrow.core.tensors import to_arrow, with_null_rows

__all__: list[str] = []


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
        infos: pa.Array | None = None,
    ) -> EpisodeChunk:
        """The chunk of these ``n`` rows (see the class docs): its steps and the episodes ended in it.

        ``infos``: the rows' typed infos (a struct array, one row each), null on the final steps.
        """
        n = len(action)
        self.empty = (obs[:0] if isinstance(obs, np.ndarray) else None, action[:0])  # what a tail step needs
        ends = np.asarray(ends, np.int64)
        rows = Transitions(n, ends)  # (the builder's layout: a final step after each end)
        src, fin, total, is_final, starts = rows.src, rows.fin, rows.total, rows.is_final, rows.starts
        flags = rows.flags(first_step=self.step, terminal=terminal)
        step = flags["step"]
        ids = np.asarray(
            [self.episode + k for k in range(len(ends) + 1)] if episode_ids is None else episode_ids
        )
        columns: dict[str, Any] = {
            "run_id": self.run,
            "episode_id": ids[flags["episode"]],
            "step": step,
            "env_index": 0,
            "observation": self._spread(obs, rows, final, "observation"),
            "action": self._spread(action, rows, None, "action"),
            "reward": rows.last_null(pa.array(rows.spread(reward.astype(np.float64, copy=False))))
            if reward is not None
            else pa.nulls(total, pa.float64()),
            "is_first": flags["is_first"],
            "is_last": flags["is_last"],
            "is_terminal": flags["is_terminal"],
        }
        if obs is None:  # (a demo without observations, as robosuite's own recorder writes: null)
            del columns["observation"]
        if meta is not None or infos is not None:  # each row's, and null on the final steps
            where = np.zeros(total, np.int64)
            where[src] = np.arange(n)
            rows_of = pa.array(where, mask=is_final)
            if meta is not None:
                columns["metadata"], columns["metadata_types"] = meta[0].take(rows_of), meta[1].take(rows_of)
            if infos is not None:
                columns["infos"] = infos.take(rows_of)
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
        columns: dict[str, Any] = {
            "run_id": self.run,
            "episode_id": self.episode,
            "step": self.step,
            "env_index": 0,
            "observation": self._spread(obs, Transitions(0, [-1]), [final], "observation"),
            "action": self._spread(action, Transitions(0, [-1]), None, "action"),
            "reward": pa.nulls(1, pa.float64()),
            "is_first": False,
            "is_last": False,
            "is_terminal": False,
        }
        if "infos" in self.types:  # (the file has no row for it: null, as on every final step)
            columns["infos"] = pa.nulls(1, self.types["infos"])
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
        self.rows.add(episode, num_steps=num_steps, total=float(returns(rewards, [0])[0]) if known else None,
                      **outcome(ended=not partial, terminated=terminal),
                      metadata=self.episode_meta(self.first_row, stop, final_known))
        self.first_row = stop

    def _spread(self, values: Any, rows: Transitions, final: list[Any | None] | None, column: str
                ) -> pa.Array | None:
        """Rows of ``values`` in the column's declared type, a final step after each end.

        ``final``: each end's final observation (None: null), or None for an action: null
        there by the last-step rule (:func:`rlarrow.core.alignment.last_null`).
        """
        if values is None:
            return None
        type_ = self.types.get(column)
        unknown = rows.fin[[f is None for f in final]] if final is not None else rows.fin[:0]
        mask = np.zeros(rows.total, bool)
        mask[unknown] = True
        if isinstance(values, dict):
            children = [rows.spread(child, None if final is None else
                                    [None if f is None else f[key] for f in final])
                        for key, child in values.items()]
            arrays = [
                to_arrow(c, type_.field(k).type if type_ is not None else None)
                for k, c in zip(values, children, strict=True)
            ]
            out = pa.StructArray.from_arrays(arrays, names=list(values),
                                             mask=pa.array(mask) if mask.any() else None)
        else:
            out = to_arrow(rows.spread(values, final), type_)
            out = with_null_rows(out, mask) if mask.any() else out
        return rows.last_null(out) if final is None else out
