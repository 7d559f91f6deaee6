"""``rlarrow.EnvLogger``: record a ``dm_env`` environment into a store, as envlogger does.

It wraps any ``dm_env.Environment`` and behaves as envlogger's ``EnvLogger``: run metadata
(with the environment specs) is written once, ``step_fn(timestep, action, env)`` output is
kept per step, and ``episode_fn(timestep, action, env)`` is called every step with the last
non-None value kept per episode. Steps are stored in RLDS alignment (``docs/format.md``).

Unlike envlogger, what is recorded survives the process: rows are committed every
``flush_every_steps`` steps, every ``flush_every_seconds`` seconds, and (with
``flush_on_episode_end``) at each episode's end; a process killed at any moment leaves a
store that holds everything committed before. Per step the wrapper only appends to lists;
the columns, and the statistics committed with them, are built when they are committed, in
a writer thread by default (``background``).

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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlarrow._version import __version__
from rlarrow.core import specs as _specs
from rlarrow.core.deps import require
from rlarrow.core.episodes import PACKED_BYTES, Arena, Episode, Packer, Sink, checked_row
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.step_columns import flat_value as _flat_obs
from rlarrow.core.store import Store

dm_env = require("dm_env", feature="rlarrow.EnvLogger")

__all__ = ["EnvLogger"]

StepFn = Callable[[Any, Any, Any], Any]
_IMMUTABLE = (int, float, bool, np.int64, np.int32, np.float32, np.float64)  # stored as given
_LAST = dm_env.StepType.LAST


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
        background: commit the automatic flushes in a writer thread; ``close`` and an
            explicit ``flush()`` wait for it, and a failed commit is raised by the next
            flush. Off by default: most of a commit (the step statistics, building the
            columns) is Python work that holds the interpreter's lock, and a thread that
            needs the lock back after each piece of native work waits for the loop to give
            it up (every 5 ms), so on Catch a 10,000-step commit in the thread took 450-590
            ms instead of 60-90 and slowed the loop by more than the commit itself
            (``benchmarks/RESULTS.md``). It can pay off when the environment's step
            releases the lock for long stretches; measure before turning it on.

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
        # dict specs keep their order (or the store's, when it holds the same fields in another)
        types = declare_steps(self.store, {"observation": _specs.tensor_type(self._obs_spec),
                                           "action": _specs.tensor_type(self._action_spec)})
        self.run_id = self.store.add_run(source="rlarrow.EnvLogger", run_id=run_id, name=name,
                                         source_version=f"rlarrow {__version__}", alignment="dm_env",
                                         num_envs=1, metadata=metadata, env_specs=env_specs)
        self._sink = Sink(self.store, self.run_id, own_store=self._own_store, action_dtype=self._action_dtype,
                          flush_every_steps=flush_every_steps, flush_every_seconds=flush_every_seconds,
                          background=background, types=types)
        self._lane = lane = self._sink.lanes[0]
        self._where = f"{type(env).__name__}.step"
        self._packed: tuple[tuple[int, ...], Any] | None = None
        self._pack: Packer | None = None
        if self._obs_dtype is not None:  # a plain array: copied as bytes when small, else into an arena
            shape = tuple(self._obs_spec.shape)
            if int(np.prod(shape, dtype=np.int64)) * self._obs_dtype.itemsize <= PACKED_BYTES:
                lane.packed = self._packed = (shape, self._obs_dtype)
            else:
                rows = (flush_every_steps or 1024) + 2  # a commit takes all but the newest row
                lane.arena = Arena(shape, self._obs_dtype, rows, where=self._where)
        else:  # dicts (or tuples) of arrays: each step's leaves packed into bytes
            self._pack = Packer.of(self._obs_spec, where=self._where)
            if self._pack is not None:
                lane.packed = ((), self._pack.dtype)
        self._arena = lane.arena
        # (the packer's own function when it has one: a call less per step)
        self._pack_fn: Any = None if self._pack is None else (
            self._pack.fast if self._pack.fast is not None else self._pack)
        self._callbacks = step_fn is not None or episode_fn is not None  # (one test per step, not two)
        self._episode: Episode | None = None
        self._check_at = self._next_check()  # step() asks the flush policy when ``unflushed`` reaches it
        self._closed = False

    # ------------------------------------------------------------------ dm_env.Environment

    def reset(self) -> Any:
        """Reset the environment and start a new episode (an unfinished one is kept, partial)."""
        sink, lane, env = self._sink, self._lane, self._env
        timestep = env.reset()
        # what can fail first (the callbacks, a wrong observation shape), then the appends:
        # a failed step leaves the lane's columns aligned
        custom = self._step_fn(timestep, None, env) if self._step_fn is not None else None
        meta = self._episode_fn(timestep, None, env) if self._episode_fn is not None else None
        obs, packed = timestep.observation, self._packed
        if (packed is not None and type(obs) is np.ndarray and obs.dtype is packed[1]
                and obs.shape == packed[0]):
            lane.obs.append(obs.tobytes())  # (as step() does; the checked cast for any other form)
        else:
            self._add_obs(obs)
        ep = sink.new_episode()
        lane.begin(ep)  # cuts an unfinished episode (partial_end)
        self._episode = ep
        ep.first_reward, ep.first_discount, ep.meta = timestep.reward, timestep.discount, meta
        if self._step_fn is not None:  # without one, ``custom`` stays empty (all None)
            lane.custom.append(custom)
        sink.unflushed += 1
        if sink.unflushed >= self._check_at:
            self._maybe_flush()
        return timestep

    def step(self, action: Any) -> Any:
        """Step the environment and record the transition."""
        ep = self._episode
        if ep is None or ep.finished:
            return self.reset()  # dm_env: a step after LAST starts a new episode
        env = self._env
        timestep = env.step(action)
        # the hot path. What can fail comes first (the callbacks, the action's conversion, a
        # wrong observation shape), then a few appends to the lane's lists, which cannot
        value = action
        if type(action) not in _IMMUTABLE:
            value = (np.array(action, self._action_dtype) if self._action_plain
                     else _flat_obs(action, self._action_spec))
        lane = self._lane
        if self._callbacks:
            if self._step_fn is not None:
                custom = self._step_fn(timestep, action, env)
            if self._episode_fn is not None:
                meta = self._episode_fn(timestep, action, env)
                if meta is not None:
                    ep.meta = meta
        obs = timestep.observation
        packed = self._packed
        if packed is not None:  # (most envs: a small array, kept as its bytes)
            if type(obs) is np.ndarray and obs.dtype is packed[1] and obs.shape == packed[0]:
                lane.obs.append(obs.tobytes())  # a copy: envs may reuse their buffers
            else:
                self._add_obs(obs)
        elif self._pack_fn is not None:
            lane.obs.append(self._pack_fn(obs))
        else:
            arena = self._arena
            if (arena is not None and type(obs) is np.ndarray and obs.shape == arena.shape
                    and arena.n < arena.rows):
                arena.buf[arena.n] = obs  # Arena.put's fast path, inline
                arena.n += 1
            else:
                self._add_obs(obs)
        lane.action.append(value)
        lane.reward.append(timestep.reward)
        lane.discount.append(timestep.discount)
        if self._step_fn is not None:
            lane.custom.append(custom)
        sink = self._sink
        unflushed = sink.unflushed = sink.unflushed + 1
        if timestep.step_type == _LAST:
            discount = timestep.discount
            lane.end(discount is not None and (
                discount == 0 if type(discount) is float else bool(np.all(np.asarray(discount) == 0))))
            if self._flush_on_episode_end:
                self.flush(wait=False)
                return timestep
        if unflushed >= self._check_at:
            self._maybe_flush()
        return timestep

    def _add_obs(self, obs: Any) -> None:
        """Copy an observation into the lane (the slow path: any form, checked and cast)."""
        if self._pack is not None:
            self._lane.obs.append(self._pack(obs))
        elif self._packed is not None:
            self._lane.obs.append(checked_row(obs, *self._packed, self._where).tobytes())
        elif self._arena is not None:
            self._arena.put(obs)
        else:
            self._lane.obs.append(_flat_obs(obs, self._obs_spec))

    def _maybe_flush(self) -> None:
        if self._sink.due():
            self.flush(wait=False)
        else:
            self._check_at = self._next_check()

    def _next_check(self) -> int:
        """When step() next asks the flush policy: in 64 steps (the clock), or at the step count."""
        sink = self._sink
        at = sink.unflushed + 64
        every = sink.flush_every_steps
        return at if every is None or every <= sink.unflushed else min(at, every)

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

    def flush(self, *, final: bool = False, wait: bool = True) -> None:
        """Commit every complete row recorded so far (and the episodes that ended).

        With ``final``, also the newest row of an unfinished episode and its ``episodes``
        row (marked ``partial_end``): what :meth:`close` does. One commit per call. The
        automatic flushes (``flush_every_*``) pass ``wait=False``: with ``background``
        the commit then runs in a writer thread while the environment steps on (one
        commit in flight at a time, in order).
        """
        self._sink.flush(final=final, wait=wait)
        self._check_at = self._next_check()

    def close(self) -> None:
        """Commit everything (an unfinished episode as ``partial_end``) and close the store."""
        if self._closed:
            return
        self._closed = True
        self._sink.close()
        self._episode = None
        if hasattr(self._env, "close"):
            self._env.close()

    def __enter__(self) -> EnvLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
