"""``rlarrow.EnvLogger``: record a ``dm_env`` environment into a store, as envlogger does.

It wraps any ``dm_env.Environment`` and behaves as envlogger's ``EnvLogger``: run metadata
(with the environment specs) is written once, ``step_fn(timestep, action, env)`` output is
kept per step, and ``episode_fn(timestep, action, env)`` is called every step with the last
non-None value kept per episode. Steps are stored in RLDS alignment (``docs/format.md``).

Unlike envlogger, what is recorded survives the process: rows are committed every
``flush_every_steps`` steps, every ``flush_every_seconds`` seconds, and (with
``flush_on_episode_end``) at each episode's end; a process killed at any moment leaves a
store that holds everything committed before. Per step the wrapper only appends to lists;
the columns are built when they are committed.

Example:
    >>> import numpy as np, dm_env, tempfile, os
    >>> from dm_env import specs
    >>> class Count(dm_env.Environment):
    ...     def reset(self):
    ...         self.t = 0
    ...         return dm_env.restart(np.zeros(2, np.float32))
    ...     def step(self, action):
    ...         self.t += 1
    ...         obs = np.full(2, self.t, np.float32)
    ...         return dm_env.termination(1.0, obs) if self.t == 3 else dm_env.transition(0.0, obs)
    ...     def observation_spec(self): return specs.Array((2,), np.float32, "obs")
    ...     def action_spec(self): return specs.DiscreteArray(2, name="action")
    >>> path = os.path.join(tempfile.mkdtemp(), "runs.rlarrow")
    >>> with EnvLogger(Count(), path, metadata={"agent": "random"}) as env:
    ...     for _ in range(2):
    ...         ts = env.reset()
    ...         while not ts.last():
    ...             ts = env.step(1)
    >>> import rlarrow
    >>> store = rlarrow.Store.open(path)
    >>> store.row_count("steps"), store.read("episodes", columns=["return"]).column(0).to_pylist()
    (8, [1.0, 1.0])
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlarrow import schema as _schema
from rlarrow import specs as _specs
from rlarrow._columns import actions as _actions
from rlarrow._columns import flat_value as _flat_obs
from rlarrow._columns import scalars as _scalars
from rlarrow._columns import stack as _stack
from rlarrow._deps import require
from rlarrow._version import __version__
from rlarrow.store import Store

dm_env = require("dm_env", feature="rlarrow.EnvLogger")

__all__ = ["EnvLogger"]

StepFn = Callable[[Any, Any, Any], Any]
_IMMUTABLE = (int, float, bool, np.int64, np.int32, np.float32, np.float64)  # stored as given
_LAST = dm_env.StepType.LAST


class _Episode:
    """The rows of one episode not yet committed (RLDS: row t = obs t + what followed it)."""

    __slots__ = ("action", "custom", "discount", "ended", "episode_id", "first_discount", "first_reward",
                 "meta", "obs", "ret", "reward", "start", "terminated")

    def __init__(self, episode_id: int) -> None:
        self.episode_id = episode_id
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


class EnvLogger(dm_env.Environment):  # type: ignore[misc,name-defined]
    """Record a ``dm_env`` environment's episodes into a store (see the module docs).

    Args:
        env: the environment to wrap.
        data_directory: the store to write into (created when missing), or a :class:`Store`.
        metadata: run metadata (any nesting, NumPy values included), stored once.
        step_fn: ``step_fn(timestep, action, env)``; its value is stored with each step.
        episode_fn: ``episode_fn(timestep, action, env)``, called every step; the episode
            keeps the last non-None value.
        run_id: the run's id (default: a new one); ``name``: a label for it.
        flush_every_steps: commit after this many steps (None: never by count).
        flush_every_seconds: commit when this many seconds passed since the last commit
            (checked at each step; None: never by time).
        flush_on_episode_end: commit at the end of every episode.
        background: build and commit the automatic flushes in a writer thread, so the
            environment loop does not wait for Parquet encoding (``close`` and an explicit
            ``flush()`` wait for it). Off by default: with small observations the thread's
            share of the interpreter costs more than the encoding it hides.

    Attributes:
        run_id: the run the steps are recorded under.
        store: the store.
    """

    def __init__(
        self,
        env: Any,
        data_directory: str | os.PathLike[str] | Store,
        metadata: Any = None,
        step_fn: StepFn | None = None,
        episode_fn: StepFn | None = None,
        *,
        run_id: str | None = None,
        name: str | None = None,
        flush_every_steps: int | None = 10_000,
        flush_every_seconds: float | None = 30.0,
        flush_on_episode_end: bool = False,
        background: bool = False,
    ) -> None:
        self._env = env
        self._own_store = not isinstance(data_directory, Store)
        self.store = (Store.open(data_directory, create=True) if not isinstance(data_directory, Store)
                      else data_directory)
        self._step_fn = step_fn
        self._episode_fn = episode_fn
        self._flush_every_steps = flush_every_steps
        self._flush_every_seconds = flush_every_seconds
        self._flush_on_episode_end = flush_on_episode_end
        self._obs_spec = env.observation_spec()
        self._action_spec = env.action_spec()
        self._obs_plain = not isinstance(self._obs_spec, (Mapping, list, tuple))
        self._action_plain = not isinstance(self._action_spec, (Mapping, list, tuple))
        self._obs_dtype = None if not self._obs_plain else np.dtype(self._obs_spec.dtype)
        self._action_dtype = None if not self._action_plain else np.dtype(self._action_spec.dtype)
        env_specs = {"observation_spec": _specs.to_dict(self._obs_spec),
                     "action_spec": _specs.to_dict(self._action_spec),
                     "reward_spec": _specs.to_dict(env.reward_spec()),
                     "discount_spec": _specs.to_dict(env.discount_spec())}
        self.store.declare("steps", {"observation": _specs.tensor_type(self._obs_spec),
                                     "action": _specs.tensor_type(self._action_spec)})
        self.run_id = self.store.add_run(source="rlarrow.EnvLogger", run_id=run_id, name=name,
                                         source_version=f"rlarrow {__version__}", alignment="dm_env",
                                         num_envs=1, metadata=metadata, env_specs=env_specs)
        self._next_episode = 0
        self._episode: _Episode | None = None
        self._finished: list[_Episode] = []
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self._pending: Any = None
        self._pool: Any = None
        if background:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlarrow-recorder")

    # ------------------------------------------------------------------ dm_env.Environment

    def reset(self) -> Any:
        """Reset the environment and start a new episode (an unfinished one is kept, partial)."""
        if self._episode is not None and not self._episode.ended:
            self._finished.append(self._episode)
        timestep = self._env.reset()
        ep = _Episode(self._next_episode)
        self._next_episode += 1
        self._episode = ep
        ep.first_reward, ep.first_discount = timestep.reward, timestep.discount
        ep.obs.append(_flat_obs(timestep.observation, self._obs_spec))
        ep.custom.append(self._step_fn(timestep, None, self._env) if self._step_fn else None)
        if self._episode_fn is not None:
            value = self._episode_fn(timestep, None, self._env)
            if value is not None:
                ep.meta = value
        self._unflushed += 1
        self._maybe_flush()
        return timestep

    def step(self, action: Any) -> Any:
        """Step the environment and record the transition."""
        ep = self._episode
        if ep is None or ep.ended:
            return self.reset()  # dm_env: a step after LAST starts a new episode
        timestep = self._env.step(action)
        # the hot path: a few appends; columns are built when committed
        if self._action_plain:
            ep.action.append(action if type(action) in _IMMUTABLE else np.array(action, self._action_dtype))
        else:
            ep.action.append(_flat_obs(action, self._action_spec))
        reward = timestep.reward
        ep.reward.append(reward)
        if reward is not None:
            ep.ret += reward
        ep.discount.append(timestep.discount)
        if self._obs_plain:
            ep.obs.append(np.array(timestep.observation, self._obs_dtype))
        else:
            ep.obs.append(_flat_obs(timestep.observation, self._obs_spec))
        if self._step_fn is not None:
            ep.custom.append(self._step_fn(timestep, action, self._env))
        else:
            ep.custom.append(None)
        if self._episode_fn is not None:
            value = self._episode_fn(timestep, action, self._env)
            if value is not None:
                ep.meta = value
        self._unflushed += 1
        if timestep.step_type == _LAST:
            ep.ended = True
            ep.terminated = timestep.discount is not None and bool(np.all(np.asarray(timestep.discount) == 0))
            self._finished.append(ep)
            if self._flush_on_episode_end:
                self.flush(wait=False)
            else:
                self._maybe_flush()
            return timestep
        if self._flush_every_steps is not None and self._unflushed >= self._flush_every_steps:
            self.flush(wait=False)
        elif self._flush_every_seconds is not None and not self._unflushed & 63:
            self._maybe_flush()  # the clock is read every 64 steps
        return timestep


    def _maybe_flush(self) -> None:
        if ((self._flush_every_steps is not None and self._unflushed >= self._flush_every_steps)
                or (self._flush_every_seconds is not None
                    and time.monotonic() - self._last_flush >= self._flush_every_seconds)):
            self.flush(wait=False)

    def observation_spec(self) -> Any:
        """The wrapped environment's observation spec."""
        return self._env.observation_spec()

    def action_spec(self) -> Any:
        """The wrapped environment's action spec."""
        return self._env.action_spec()

    def reward_spec(self) -> Any:
        """The wrapped environment's reward spec."""
        return self._env.reward_spec()

    def discount_spec(self) -> Any:
        """The wrapped environment's discount spec."""
        return self._env.discount_spec()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._env, name)

    # ------------------------------------------------------------------ committing

    def _take_rows(self, ep: _Episode, final: bool, out: dict[str, list[Any]]) -> None:
        """Move the episode's rows that are ready into ``out`` (lists per column).

        All of them if it ended (or ``final``), else all but the newest, whose action is
        not known yet.
        """
        n = len(ep.obs) if (ep.ended or final) else len(ep.obs) - 1
        if n <= 0:
            return
        acted = min(n, len(ep.action))
        out["episode_id"].append(np.full(n, ep.episode_id, np.int64))
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

    def flush(self, *, final: bool = False, wait: bool = True) -> None:
        """Commit every complete row recorded so far (and the episodes that ended).

        With ``final``, also the newest row of an unfinished episode and its ``episodes``
        row (marked ``partial_end``): what :meth:`close` does. One commit per call. The
        automatic flushes (``flush_every_*``) pass ``wait=False``: with ``background``
        the commit then runs in a writer thread while the environment steps on (one
        commit in flight at a time, in order).

        Raises:
            StoreError: an earlier background commit failed (nothing after it was committed).
        """
        episodes = list(self._finished)
        current = self._episode if self._episode is not None and not self._episode.ended else None
        cols: dict[str, list[Any]] = {k: [] for k in ("episode_id", "step", "is_last", "is_terminal",
                                                      "observation", "action", "reward", "discount",
                                                      "metadata")}
        for ep in episodes:
            self._take_rows(ep, True, cols)
        if current is not None:
            self._take_rows(current, final, cols)
        ended = [ep for ep in episodes if ep.start > 0] + ([current] if final and current is not None
                                                           and current.start > 0 else [])
        ep_rows = self._episode_rows(ended) if ended else None
        self._finished = []
        self._unflushed = 0
        self._last_flush = time.monotonic()
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
            table = _schema.build("steps", {
                "run_id": self.run_id, "episode_id": np.concatenate(cols["episode_id"]), "step": step,
                "env_index": 0, "observation": _stack(cols["observation"]),
                "action": _actions(cols["action"], self._action_spec.dtype if self._action_plain else None),
                "reward": _scalars(cols["reward"]), "discount": _scalars(cols["discount"]),
                "is_first": step == 0, "is_last": np.concatenate(cols["is_last"]),
                "is_terminal": np.concatenate(cols["is_terminal"]),
                "metadata": cols["metadata"] if any(c is not None for c in cols["metadata"]) else None,
            }, num_rows=len(step), established=self.store.schema("steps"))
            self.store.append("steps", table)
        if ep_rows is not None:
            self.store.append("episodes", ep_rows)

    def _episode_rows(self, eps: list[_Episode]) -> dict[str, Any]:
        rows: dict[str, list[Any]] = {k: [] for k in ("episode_id", "num_steps", "return", "terminated",
                                                      "truncated", "partial_end", "metadata")}
        for ep in eps:
            rows["episode_id"].append(ep.episode_id)
            rows["num_steps"].append(ep.start)
            rows["return"].append(ep.ret)
            rows["terminated"].append(ep.terminated)
            rows["truncated"].append(ep.ended and not ep.terminated)
            rows["partial_end"].append(not ep.ended)
            meta = ep.meta
            if ep.first_reward is not None or ep.first_discount is not None:
                meta = {"episode_fn": meta, "first_reward": ep.first_reward,
                        "first_discount": ep.first_discount}
            rows["metadata"].append(meta)
        return {"run_id": self.run_id, "env_index": 0, "partial_start": False, **rows}

    def close(self) -> None:
        """Commit everything (an unfinished episode as ``partial_end``) and close the store."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(final=True)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        self._episode = None
        if self._own_store:
            self.store.close()
        if hasattr(self._env, "close"):
            self._env.close()

    def __enter__(self) -> EnvLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
