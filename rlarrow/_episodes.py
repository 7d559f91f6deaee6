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

__all__ = ["Arena", "Episode", "Sink"]

#: an arena holds at most this many bytes before it grows past the flush size
_ARENA_BYTES = 256 << 20


class Arena:
    """Preallocated rows for one plain (non-nested) observation array.

    A recorder copies each step's observation into the next free row (no allocation per
    step) and keeps the row's index in its episode's ``obs`` list; a commit takes the rows
    as one array, a view when they are consecutive (they are, for one environment), so
    nothing is stacked. After a commit the rows still needed (at most one per open
    episode) move to the front.

    Args:
        shape, dtype: one observation's shape and dtype (the spec's).
        rows: rows to allocate at first (more are added when needed).
        where: what to name in errors (the environment).
    """

    __slots__ = ("buf", "n", "rows", "shape", "where")

    def __init__(self, shape: tuple[int, ...], dtype: Any, rows: int, where: str = "the environment") -> None:
        self.shape = tuple(shape)
        self.where = where
        row_bytes = max(1, int(np.prod(self.shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        self.buf = np.empty((max(2, min(rows, _ARENA_BYTES // row_bytes)), *self.shape), dtype)
        self.rows = len(self.buf)  # allocated
        self.n = 0  # used

    def put(self, value: Any) -> int:
        """Copy one observation into the next row; return the row's index."""
        i = self.n
        if i == self.rows:
            grown = np.empty((2 * i, *self.shape), self.buf.dtype)
            grown[:i] = self.buf
            self.buf, self.rows = grown, 2 * i
        if type(value) is not np.ndarray or value.shape != self.shape:
            value = np.asarray(value)
            if value.shape != self.shape:  # assigning would broadcast it silently
                raise ValueError(f"{self.where} returned an observation of shape {value.shape}; its "
                                 f"observation spec says {self.shape}. Fix the environment or its spec")
        self.buf[i] = value
        self.n = i + 1
        return i

    def take(self, rows: list[int]) -> np.ndarray:
        """The observations at these rows, in order: a view when they are consecutive."""
        first, count = rows[0], len(rows)
        index = np.asarray(rows, np.intp)
        if rows[-1] - first == count - 1 and (count < 3 or bool(np.all(np.diff(index) == 1))):
            return self.buf[first:first + count]
        return self.buf[index]

    def restart(self, open_episodes: list[Episode], *, reuse: bool) -> None:
        """Move the rows open episodes still hold to the front (of a new buffer unless ``reuse``).

        ``reuse`` only when nothing refers to the committed rows any more (the commit is done).
        """
        left = [i for ep in open_episodes for i in ep.obs]
        buf = self.buf if reuse else np.empty_like(self.buf)  # same row count
        if left:
            buf[:len(left)] = self.buf[left]  # fancy indexing copies first: overlap is safe
            j = 0
            for ep in open_episodes:
                ep.obs = list(range(j, j + len(ep.obs)))
                j += len(ep.obs)
        self.buf, self.n = buf, len(left)


class _Rows:
    """The rows one commit takes from its episodes, column by column."""

    __slots__ = ("action", "discount", "episodes", "has_metadata", "metadata", "observation", "pads",
                 "reward", "rows")

    def __init__(self) -> None:
        self.rows = 0
        #: per episode: (episode_id, env_index, first step, rows, ended, terminal)
        self.episodes: list[tuple[int, int, int, int, bool, bool]] = []
        self.observation: Any = []  # a list; with an arena, its rows' indices, then the array
        self.action: list[Any] = []
        self.reward: list[Any] = []
        self.discount: list[Any] = []
        self.metadata: list[Any] = []
        self.has_metadata = False
        self.pads: list[int] = []  # rows with no action yet (the newest of an unfinished episode)


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
        #: where the recorder keeps plain observations (``Episode.obs`` then holds row indices)
        self.arena: Arena | None = None
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

    def _take_rows(self, ep: Episode, final: bool, out: _Rows) -> None:
        """Move the episode's rows that are ready into ``out``; add their rewards to its return.

        All of them if it ended (or ``final``), else all but the newest, whose action is
        not known yet (an ended episode's last row, and with ``final`` an unfinished
        one's newest, has a null action, reward and discount).
        """
        obs = ep.obs
        n = len(obs) if (ep.ended or final) else len(obs) - 1
        if n <= 0:
            return
        acted = min(n, len(ep.action))
        rows = out.rows
        custom = bool(ep.custom)  # a recorder with nothing to store per step leaves it empty
        out.episodes.append((ep.episode_id, ep.env_index, ep.start, n, ep.ended, ep.ended and ep.terminated))
        rewards = ep.reward[:acted]
        try:
            ep.ret = sum(rewards, ep.ret)
        except TypeError:  # a None reward (not dm_env's contract, but kept as a null)
            ep.ret = sum((r for r in rewards if r is not None), ep.ret)
        out.reward += rewards
        if n == len(obs):  # everything: no copies, and the episode is done with its rows
            out.observation += obs
            out.action += ep.action
            out.discount += ep.discount
            if custom:
                out.metadata += ep.custom
            ep.obs, ep.action, ep.reward, ep.discount, ep.custom = [], [], [], [], []
        else:
            out.observation += obs[:n]
            out.action += ep.action[:acted]
            out.discount += ep.discount[:acted]
            if custom:
                out.metadata += ep.custom[:n]
            del obs[:n], ep.action[:acted], ep.reward[:acted], ep.discount[:acted], ep.custom[:n]
        if custom:
            out.has_metadata = True
        else:
            out.metadata += [None] * n
        if acted < n:
            pad = [None] * (n - acted)
            out.pads += range(rows + acted, rows + n)
            out.action += pad
            out.reward += pad
            out.discount += pad
        out.rows = rows + n
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
        rows = _Rows()
        for ep in episodes:
            self._take_rows(ep, True, rows)
        for ep in current_eps:
            self._take_rows(ep, final, rows)
        ended = [ep for ep in episodes if ep.start > 0] + (
            [ep for ep in current_eps if ep.start > 0] if final else []
        )
        ep_rows = self._episode_rows(ended) if ended else None
        self.finished = []
        self.unflushed = 0
        self.last_flush = time.monotonic()
        self._wait()  # one commit in flight at most: order kept, memory bounded
        arena = self.arena
        if arena is not None and rows.rows:
            rows.observation = arena.take(rows.observation)  # row indices -> the array
        if self._pool is not None and not wait:
            self._pending = self._pool.submit(self._commit, rows, ep_rows)
            if arena is not None:
                arena.restart(current_eps, reuse=False)  # the commit in flight reads the old rows
        else:
            try:
                self._commit(rows, ep_rows)
            finally:
                if arena is not None:
                    arena.restart(current_eps, reuse=True)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # re-raises a failed background commit

    def _commit(self, rows: _Rows, ep_rows: dict[str, Any] | None) -> None:
        data: dict[str, Any] = {}
        if rows.rows:
            ids, envs, starts, lengths, ended, terminal = (
                np.array(c) for c in zip(*rows.episodes, strict=True))
            lengths = lengths.astype(np.int64)
            firsts = np.cumsum(lengths) - lengths  # each episode's first row in the commit
            step = np.arange(rows.rows, dtype=np.int64) + np.repeat(starts.astype(np.int64) - firsts, lengths)
            is_last = np.zeros(rows.rows, bool)
            is_last[firsts + lengths - 1] = ended
            is_terminal = np.zeros(rows.rows, bool)
            is_terminal[firsts + lengths - 1] = terminal
            pads = np.zeros(rows.rows, bool)
            pads[rows.pads] = True
            table = _schema.build(
                "steps",
                {
                    "run_id": self.run_id,
                    "episode_id": np.repeat(ids.astype(np.int64), lengths),
                    "step": step,
                    "env_index": np.repeat(envs.astype(np.int32), lengths),
                    "observation": (rows.observation if isinstance(rows.observation, np.ndarray)
                                    else _stack(rows.observation)),
                    "action": _actions(rows.action, self.action_dtype, pads),
                    "reward": _scalars(rows.reward),
                    "discount": _scalars(rows.discount),
                    "is_first": step == 0,
                    "is_last": is_last,
                    "is_terminal": is_terminal,
                    "metadata": rows.metadata if rows.has_metadata else None,
                },
                num_rows=rows.rows,
                established=self.store.schema("steps"),
            )
            data["steps"] = table
        if ep_rows is not None:
            data["episodes"] = ep_rows
        self.store.append_together(data)  # one commit: one manifest write for both tables

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
