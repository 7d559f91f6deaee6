"""Episode buffers and their commits, shared by the recorders (dm_env and gymnasium).

A recorder appends each step's values to an :class:`Episode`'s lists (its hot path) and
hands finished episodes to a :class:`Sink`, which turns the rows that are complete into one
``steps`` table per commit (RLDS alignment), with the ended episodes' ``episodes`` rows.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlarrow import schema as _schema
from rlarrow._columns import actions as _actions
from rlarrow._columns import scalars as _scalars
from rlarrow._columns import stack as _stack
from rlarrow.store import Store

__all__ = ["Episode", "Sink"]


class Episode:
    """The rows of one episode not yet committed (RLDS: row t = obs t + what followed it)."""

    __slots__ = (
        "action",
        "custom",
        "discount",
        "ended",
        "env_index",
        "episode_id",
        "first_discount",
        "first_reward",
        "meta",
        "obs",
        "ret",
        "reward",
        "start",
        "terminated",
    )

    def __init__(self, episode_id: int, env_index: int = 0) -> None:
        self.episode_id = episode_id
        self.env_index = env_index
        self.obs: list[Any] = []
        self.action: list[Any] = []
        self.reward: list[Any] = []
        self.discount: list[Any] = []
        self.custom: list[Any] = []
        self.start = 0  # step index of obs[0] (rows before it are committed)
        self.ret = 0.0
        self.meta: Any = None
        self.ended = False
        self.terminated = False
        self.first_reward: Any = None
        self.first_discount: Any = None


class Sink:
    """Commits episodes' complete rows to a store, under a flush policy.

    Args:
        store: the store; ``own_store``: close it on :meth:`close`.
        run_id: the run the rows belong to.
        action_dtype: the dtype of plain (non-nested) actions, None for nested ones.
        flush_every_steps, flush_every_seconds, background: see :class:`rlarrow.EnvLogger`.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        own_store: bool,
        action_dtype: Any,
        flush_every_steps: int | None,
        flush_every_seconds: float | None,
        background: bool,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.own_store = own_store
        self.action_dtype = action_dtype
        self.flush_every_steps = flush_every_steps
        self.flush_every_seconds = flush_every_seconds
        self.next_episode = 0
        self.finished: list[Episode] = []
        self.unflushed = 0
        self.last_flush = time.monotonic()
        self._pending: Any = None
        self._pool: Any = None
        if background:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlarrow-recorder")

    def new_episode(self, env_index: int = 0) -> Episode:
        """A new, empty episode with the run's next episode id."""
        ep = Episode(self.next_episode, env_index)
        self.next_episode += 1
        return ep

    def due(self) -> bool:
        """Whether the flush policy asks for a commit now."""
        return (self.flush_every_steps is not None and self.unflushed >= self.flush_every_steps) or (
            self.flush_every_seconds is not None
            and time.monotonic() - self.last_flush >= self.flush_every_seconds
        )

    def _take_rows(self, ep: Episode, final: bool, out: dict[str, list[Any]]) -> None:
        """Move the episode's rows that are ready into ``out`` (lists per column).

        All of them if it ended (or ``final``), else all but the newest, whose action is
        not known yet.
        """
        n = len(ep.obs) if (ep.ended or final) else len(ep.obs) - 1
        if n <= 0:
            return
        acted = min(n, len(ep.action))
        out["episode_id"].append(np.full(n, ep.episode_id, np.int64))
        out["env_index"].append(np.full(n, ep.env_index, np.int32))
        out["step"].append(np.arange(ep.start, ep.start + n, dtype=np.int64))
        last = np.zeros(n, bool)
        last[-1] = ep.ended
        out["is_last"].append(last)
        out["is_terminal"].append(last & ep.terminated)
        out["observation"].extend(ep.obs[:n])
        out["action"].extend(ep.action[:acted])
        out["action"].extend([None] * (n - acted))
        out["reward"].extend(ep.reward[:acted])
        out["reward"].extend([None] * (n - acted))
        out["discount"].extend(ep.discount[:acted])
        out["discount"].extend([None] * (n - acted))
        out["metadata"].extend(ep.custom[:n])
        del ep.obs[:n], ep.action[:acted], ep.reward[:acted], ep.discount[:acted], ep.custom[:n]
        ep.start += n

    def flush(self, open_episodes: list[Episode], *, final: bool = False, wait: bool = True) -> None:
        """Commit every complete row recorded so far (and the episodes that ended).

        With ``final``, also the newest row of an unfinished episode and its ``episodes``
        row (marked ``partial_end``): what :meth:`close` does. One commit per call. The
        automatic flushes (``flush_every_*``) pass ``wait=False``: with ``background``
        the commit then runs in a writer thread while the environment steps on (one
        commit in flight at a time, in order).

        Raises:
            StoreError: an earlier background commit failed (nothing after it was committed).
        """
        episodes = list(self.finished)
        current_eps = [ep for ep in open_episodes if not ep.ended]
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "episode_id",
                "env_index",
                "step",
                "is_last",
                "is_terminal",
                "observation",
                "action",
                "reward",
                "discount",
                "metadata",
            )
        }
        for ep in episodes:
            self._take_rows(ep, True, cols)
        for ep in current_eps:
            self._take_rows(ep, final, cols)
        ended = [ep for ep in episodes if ep.start > 0] + (
            [ep for ep in current_eps if ep.start > 0] if final else []
        )
        ep_rows = self._episode_rows(ended) if ended else None
        self.finished = []
        self.unflushed = 0
        self.last_flush = time.monotonic()
        self._wait()  # one commit in flight at most: order kept, memory bounded
        if self._pool is not None and not wait:
            self._pending = self._pool.submit(self._commit, cols, ep_rows)
        else:
            self._commit(cols, ep_rows)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # re-raises a failed background commit

    def _commit(self, cols: dict[str, list[Any]], ep_rows: dict[str, Any] | None) -> None:
        if cols["observation"]:
            step = np.concatenate(cols["step"])
            table = _schema.build(
                "steps",
                {
                    "run_id": self.run_id,
                    "episode_id": np.concatenate(cols["episode_id"]),
                    "step": step,
                    "env_index": np.concatenate(cols["env_index"]),
                    "observation": _stack(cols["observation"]),
                    "action": _actions(cols["action"], self.action_dtype),
                    "reward": _scalars(cols["reward"]),
                    "discount": _scalars(cols["discount"]),
                    "is_first": step == 0,
                    "is_last": np.concatenate(cols["is_last"]),
                    "is_terminal": np.concatenate(cols["is_terminal"]),
                    "metadata": cols["metadata"] if any(c is not None for c in cols["metadata"]) else None,
                },
                num_rows=len(step),
                established=self.store.schema("steps"),
            )
            self.store.append("steps", table)
        if ep_rows is not None:
            self.store.append("episodes", ep_rows)

    def _episode_rows(self, eps: list[Episode]) -> dict[str, Any]:
        rows: dict[str, list[Any]] = {
            k: []
            for k in (
                "episode_id",
                "env_index",
                "num_steps",
                "return",
                "terminated",
                "truncated",
                "partial_end",
                "metadata",
            )
        }
        for ep in eps:
            rows["episode_id"].append(ep.episode_id)
            rows["env_index"].append(ep.env_index)
            rows["num_steps"].append(ep.start)
            rows["return"].append(ep.ret)
            rows["terminated"].append(ep.terminated)
            rows["truncated"].append(ep.ended and not ep.terminated)
            rows["partial_end"].append(not ep.ended)
            meta = ep.meta
            if ep.first_reward is not None or ep.first_discount is not None:
                meta = {
                    "episode_fn": meta,
                    "first_reward": ep.first_reward,
                    "first_discount": ep.first_discount,
                }
            rows["metadata"].append(meta)
        return {"run_id": self.run_id, "partial_start": False, **rows}

    def close(self, open_episodes: list[Episode]) -> None:
        """Commit everything (open episodes as ``partial_end``), stop the writer thread, close."""
        try:
            self.flush(open_episodes, final=True)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self.own_store:
                self.store.close()
