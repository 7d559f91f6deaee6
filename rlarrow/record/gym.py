"""Record gymnasium environments (single and vector) into a store.

:class:`RecordEpisodes` wraps a ``gymnasium.Env`` or a ``gymnasium.vector.VectorEnv`` and
records every episode into the store's ``steps`` and ``episodes`` tables (RLDS alignment,
one ``env_index`` per sub-environment), with the same crash-safe flushing as
:class:`rlarrow.EnvLogger`. gymnasium gives no discount, so ``discount`` is null; an episode
ends ``terminated`` or ``truncated`` as the env says. Vector envs are handled in both of
gymnasium's autoreset modes: ``NEXT_STEP`` (the step after an episode's end resets that
sub-env; its action is not recorded) and ``SAME_STEP`` (the final observation comes in
``infos["final_obs"]``).

The run's ``env_specs`` holds the two spaces and the dm_env specs derived from them
(:func:`rlarrow.core.specs.from_space`), so ``rlarrow.Reader(...).observation_spec()`` gives a
spec for gym recordings too. Dict spaces are stored as structs in the space's order (or the
store's, when it holds the same fields in another order).

Example:
    >>> import gymnasium as gym, tempfile, os, rlarrow
    >>> path = os.path.join(tempfile.mkdtemp(), "cartpole.rlarrow")
    >>> env = RecordEpisodes(gym.make("CartPole-v1"), path, metadata={"agent": "random"})
    >>> obs, info = env.reset(seed=0)
    >>> for _ in range(30):
    ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    ...     if terminated or truncated:
    ...         obs, info = env.reset()
    >>> env.close()
    >>> rlarrow.Store.open(path).row_count("steps") >= 30
    True
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow._version import __version__
from rlarrow.core.deps import require
from rlarrow.core.episodes import PACKED_BYTES, Sink, checked_row
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, UsageError
from rlarrow.core.specs import REWARD_SPEC, from_space
from rlarrow.core.step_columns import declare_steps
from rlarrow.core.store import Store
from rlarrow.core.tensors import tensor_type

gym = require("gymnasium", feature="rlarrow.record.gym")

__all__ = ["RecordEpisodes", "RecordVectorEpisodes"]


def space_type(space: Any) -> pa.DataType:
    """The tensor column type for a gymnasium space (Dict and Tuple spaces become structs)."""
    spaces = gym.spaces
    if isinstance(space, spaces.Dict):
        return pa.struct([pa.field(str(k), space_type(v)) for k, v in space.spaces.items()])
    if isinstance(space, spaces.Tuple):
        return pa.struct([pa.field(str(i), space_type(v)) for i, v in enumerate(space.spaces)])
    if isinstance(space, spaces.Discrete):
        return tensor_type(space.dtype)
    if space.shape is None:
        raise ArgumentTypeError(f"cannot store observations of {space}: it has no fixed shape")
    return tensor_type(space.dtype, space.shape, layout="auto")


def _space_dict(space: Any) -> Any:
    spaces = gym.spaces
    if isinstance(space, spaces.Dict):
        return {str(k): _space_dict(v) for k, v in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return [_space_dict(v) for v in space.spaces]
    out: dict[str, Any] = {"kind": type(space).__name__, "shape": list(space.shape or ()),
                           "dtype": np.dtype(space.dtype).name if space.dtype is not None else None}
    for attr in ("low", "high", "n", "start", "nvec"):
        value = getattr(space, attr, None)
        if value is not None:
            out[attr] = value
    return out


def _copy(value: Any, space: Any) -> Any:
    """A copy of one sub-env's value, dicts for Dict/Tuple spaces, in the space's dtype."""
    spaces = gym.spaces
    if isinstance(space, spaces.Dict):
        return {str(k): _copy(value[k], s) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return {str(i): _copy(value[i], s) for i, s in enumerate(space.spaces)}
    return np.array(value, dtype=space.dtype)


def _splitter(space: Any) -> Any:
    """A function giving a vector env's batch for ``space`` as one copy per sub-env.

    One cast-and-copy of the whole batch (``np.array``) and one split of its rows, where
    copying each sub-env's value apart (:func:`_copy` of :func:`_index`) cost the vector
    recorder most of its 11 us per env step. Rows of a plain batch are views of the copy.
    """
    spaces = gym.spaces
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        items = (list(space.spaces.items()) if isinstance(space, spaces.Dict)
                 else list(enumerate(space.spaces)))
        keys = [str(k) for k, _ in items]
        parts = [(k, _splitter(s)) for k, s in items]

        def split_nested(batch: Any) -> list[Any]:
            columns = [split(batch[k]) for k, split in parts]
            return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]

        return split_nested
    dtype = space.dtype

    def split(batch: Any) -> list[Any]:
        return list(np.array(batch, dtype=dtype))

    return split


def _packed_layout(space: Any) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """(shape, dtype) of a plain numeric space small enough to keep its rows as bytes, else None."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) or space.shape is None or space.dtype is None:
        return None
    shape, dtype = tuple(space.shape), np.dtype(space.dtype)
    if dtype.kind not in "biuf" or math.prod(shape) * dtype.itemsize > PACKED_BYTES:
        return None
    return shape, dtype


def _byte_splitter(layout: tuple[tuple[int, ...], np.dtype[Any]], n: int, where: str) -> Any:
    """A function giving a vector env's batch as each sub-env's row of bytes (see :class:`Lane`).

    One cast of the batch, one ``tobytes`` and a slice per sub-env; a commit joins a lane's
    rows and reads them as one array. With row views stacked at commit, building the
    observation column took 0.35-0.58 us per env step for CartPole's 4 floats (stacking
    10,000 small views is 180 ns a row); joined bytes, 0.03.
    """
    shape, dtype = layout
    full = (n, *shape)
    width = math.prod(shape) * dtype.itemsize
    cuts = [slice(i * width, (i + 1) * width) for i in range(n)]

    def split(batch: Any) -> list[bytes]:
        arr = np.asarray(batch, dtype=dtype)
        if arr.shape != full:  # (bytes of another shape would shift every row after them)
            raise ArgumentError(f"{where} returned observations of shape {arr.shape}; its observation "
                                f"space says {full} ({n} sub-envs). Fix the environment or its space")
        raw = arr.tobytes()
        return [raw[c] for c in cuts]

    return split


def _index(batch: Any, i: int) -> Any:
    """Sub-env ``i``'s value in a vector env's batch (dicts and tuples of arrays)."""
    if isinstance(batch, Mapping):
        return {k: _index(v, i) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_index(v, i) for v in batch)
    return batch[i]


class _Recorder:
    """What :class:`RecordEpisodes` and :class:`RecordVectorEpisodes` share.

    Args:
        env: a ``gymnasium.Env`` (``RecordEpisodes``) or ``gymnasium.vector.VectorEnv``
            (``RecordVectorEpisodes``).
        data_directory: the store (created when missing), or a :class:`~rlarrow.Store`.
        metadata: run metadata, stored once.
        keep_infos: store each step's ``info`` (of its sub-env) as the step's metadata.
        run_id, name, flush_every_steps, flush_every_seconds, flush_on_episode_end, background:
            as for :class:`rlarrow.EnvLogger`.

    Attributes:
        run_id: the run the episodes are recorded under.
        store: the store.
    """

    env: Any

    def _setup(
        self,
        env: Any,
        data_directory: str | os.PathLike[str] | Store,
        metadata: Any = None,
        *,
        keep_infos: bool = False,
        run_id: str | None = None,
        name: str | None = None,
        flush_every_steps: int | None = 10_000,
        flush_every_seconds: float | None = 30.0,
        flush_on_episode_end: bool = False,
        background: bool = False,
    ) -> None:
        self.is_vector = isinstance(env, gym.vector.VectorEnv)
        if self.is_vector:
            self._n = int(env.num_envs)
            self._obs_space, self._act_space = env.single_observation_space, env.single_action_space
            mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
            self._autoreset = getattr(mode, "name", str(mode))
            if self._autoreset not in ("NEXT_STEP", "SAME_STEP"):
                raise ArgumentError(f"autoreset mode {self._autoreset}: rlarrow records NEXT_STEP and "
                                    "SAME_STEP vector envs")
        else:
            self._n = 1
            self._obs_space, self._act_space = env.observation_space, env.action_space
            self._autoreset = "NONE"
        own = not isinstance(data_directory, Store)
        self.store = Store.open(data_directory, create=True) if not isinstance(data_directory, Store) \
            else data_directory
        # Dict spaces keep their order (or the store's, when it holds the same fields in another)
        types = declare_steps(self.store, {"observation": space_type(self._obs_space),
                                           "action": space_type(self._act_space)})
        spec = getattr(getattr(env, "spec", None), "id", None)
        obs_space, act_space = _space_dict(self._obs_space), _space_dict(self._act_space)
        self.run_id = self.store.add_run(
            source="rlarrow.gym", run_id=run_id, name=name or spec,
            source_version=f"rlarrow {__version__}",
            alignment="rlds", num_envs=self._n, metadata=metadata,
            env_specs={"env_id": spec, "observation_space": obs_space, "action_space": act_space,
                       # the same as dm_env specs, so that rlarrow.Reader gives them (docs/format.md)
                       "observation_spec": from_space(obs_space), "action_spec": from_space(act_space),
                       "reward_spec": REWARD_SPEC})
        plain = not isinstance(self._act_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self._sink = Sink(self.store, self.run_id, own_store=own, action_dtype=self._act_space.dtype if plain
                          else None, flush_every_steps=flush_every_steps,
                          flush_every_seconds=flush_every_seconds, background=background, num_envs=self._n,
                          types=types)
        self._lanes = self._sink.lanes
        self._split_obs, self._split_act = _splitter(self._obs_space), _splitter(self._act_space)
        act_space = self._act_space
        # a copy of one action: for a plain space a call, without _copy's isinstance tests per step
        self._copy_act = (functools.partial(np.array, dtype=act_space.dtype) if plain
                          else functools.partial(_copy, space=act_space))
        self._where = f"{type(env).__name__}.step"
        # plain observations of a few hundred bytes at most are kept as bytes (one join at commit)
        self._obs_packed = _packed_layout(self._obs_space)
        if self._obs_packed is not None:
            for lane in self._lanes:
                lane.packed = self._obs_packed
            self._split_obs = _byte_splitter(self._obs_packed, self._n, self._where)
        if self._sink.action_dtype is not None and tuple(self._act_space.shape or ()) == ():
            # scalar actions (Discrete): Python numbers, which the commit casts back to the
            # space's dtype (np.asarray of a list of NumPy scalars is twice as slow)
            act_dtype = self._sink.action_dtype
            self._split_act = lambda batch: np.asarray(batch, dtype=act_dtype).tolist()
        self._keep_infos = keep_infos
        self._single_plain = not self.is_vector and not keep_infos  # step() records its rows inline
        self._flush_on_episode_end = flush_on_episode_end
        self._needs_reset = [False] * self._n
        self._ended = False  # an episode ended in this step()
        self._open = False  # every lane has an episode open or a reset due (from reset() to a final flush)
        self._closed = False

    # ------------------------------------------------------------------ recording

    def _start(self, i: int, obs: Any, info: Any) -> None:
        # the copy is what can fail: before anything is appended, so the columns stay aligned
        self._start_copied(i, self._obs_row(obs), self._info(info) if self._keep_infos else None)

    def _obs_row(self, obs: Any) -> Any:
        """A copy of one (sub-)env's observation as its lane keeps it (bytes when packed)."""
        packed = self._obs_packed
        if packed is None:
            return _copy(obs, self._obs_space)
        if type(obs) is np.ndarray and obs.dtype is packed[1] and obs.shape == packed[0]:
            return obs.tobytes()  # (the common case: no cast, no check to make)
        return checked_row(obs, *packed, self._where).tobytes()

    def _info(self, info: Any) -> Any:
        return {k: v for k, v in info.items() if not k.startswith("_")} if isinstance(info, Mapping) else info

    def _sub_info(self, infos: Any, i: int) -> Any:
        if not self._keep_infos or not isinstance(infos, Mapping):
            return None
        out = {}
        for k, v in infos.items():
            if k.startswith("_") or k in ("final_obs", "final_info"):
                continue
            mask = infos.get(f"_{k}")
            if mask is None or bool(mask[i]):
                out[k] = v[i] if isinstance(v, np.ndarray) else v
        return out

    def _transition(self, i: int, action: Any, obs: Any, reward: Any, terminated: bool, truncated: bool,
                    info: Any) -> None:
        self._add_row(i, self._copy_act(action), self._obs_row(obs), float(reward), terminated, truncated,
                      info)

    def _add_row(self, i: int, action: Any, obs: Any, reward: float, terminated: bool, truncated: bool,
                 info: Any) -> None:
        """Add a transition whose values are copies already."""
        lane = self._lanes[i]
        if lane.current is None:
            raise UsageError("step() after an episode ended: call reset() first")
        lane.obs.append(obs)
        lane.action.append(action)
        lane.reward.append(reward)
        lane.discount.append(None)
        if self._keep_infos:
            lane.custom.append(info)
        self._sink.unflushed += 1
        if terminated or truncated:
            lane.end(bool(terminated))
            self._ended = True

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset (all sub-envs) and start new episodes; unfinished ones are kept as partial."""
        obs, info = self.env.reset(seed=seed, options=options)
        if self.is_vector:
            for i in range(self._n):
                self._start(i, _index(obs, i), self._sub_info(info, i))
        else:
            self._start(0, obs, info)
        self._open = True
        return obs, info

    def step(self, action: Any) -> Any:
        """Step the env and record the transition(s)."""
        self._ended = False
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._single_plain and not (terminated or truncated):  # the common step, inline
            lane = self._lanes[0]
            eps = lane.episodes
            if not eps or eps[-1].finished:
                raise UsageError("step() after an episode ended: call reset() first")
            # the copies are what can fail: before anything is appended, so the columns stay aligned
            act, row, r = self._copy_act(action), self._obs_row(obs), float(reward)
            lane.obs.append(row)
            lane.action.append(act)
            lane.reward.append(r)
            lane.discount.append(None)
            self._sink.unflushed += 1
        elif not self.is_vector:
            self._transition(0, action, obs, reward, terminated, truncated,
                             self._info(info) if self._keep_infos else None)
        else:
            self._vector_step(action, obs, reward, terminated, truncated, info)
        if self._sink.due() or (self._flush_on_episode_end and self._ended):
            self.flush(wait=False)
        return obs, reward, terminated, truncated, info

    def _vector_step(self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any,
                     info: Any) -> None:
        """Record one step of every sub-env.

        The batch is copied and split once, then each sub-env's row is a few list appends
        (an episode's end, or start, takes the slow path).
        """
        lanes, n = self._lanes, self._n
        obs_rows, act_rows = self._split_obs(obs), self._split_act(action)
        rewards = np.asarray(reward, np.float64).reshape(n).tolist()
        ends = np.logical_or(terminated, truncated).reshape(n).tolist()
        needs = self._needs_reset
        same_step = self._autoreset == "SAME_STEP"
        plain = self._open and not self._keep_infos
        common = 0
        for i, ended in enumerate(ends):
            if needs[i]:  # NEXT_STEP: this step reset sub-env i, its action unused
                self._start_copied(i, obs_rows[i], self._sub_info(info, i))
                continue
            if plain and not ended:  # the common step
                lane = lanes[i]
                lane.obs.append(obs_rows[i])
                lane.action.append(act_rows[i])
                lane.reward.append(rewards[i])
                lane.discount.append(None)
                common += 1
                continue
            row = self._obs_row(_index(info["final_obs"], i)) if ended and same_step else obs_rows[i]
            self._add_row(i, act_rows[i], row, rewards[i], bool(terminated[i]), bool(truncated[i]),
                          self._sub_info(info, i))
            if ended:
                if same_step:
                    self._start_copied(i, obs_rows[i], None)
                else:
                    needs[i] = True
        self._sink.unflushed += common

    def _start_copied(self, i: int, obs: Any, info: Any) -> None:
        """Start sub-env ``i``'s next episode at ``obs`` (a copy already)."""
        lane = self._lanes[i]
        lane.obs.append(obs)
        lane.begin(self._sink.new_episode(i))  # cuts an unfinished episode (partial_end)
        if self._keep_infos:
            lane.custom.append(info)
        self._needs_reset[i] = False

    def flush(self, *, final: bool = False, wait: bool = True) -> None:
        """Commit the complete rows recorded so far (see :meth:`rlarrow.EnvLogger.flush`)."""
        if final:
            self._open = False  # the open episodes are cut: a step() now needs a reset() first
        self._sink.flush(final=final, wait=wait)

    def close(self) -> None:
        """Commit everything (unfinished episodes as ``partial_end``), close the store and the env."""
        if self._closed:
            return
        self._closed = True
        self._open = False  # a step() after close() is refused, as after a final flush
        self._sink.close()
        self.env.close()


class RecordEpisodes(_Recorder, gym.Wrapper):  # type: ignore[misc,name-defined]
    """Record a ``gymnasium.Env``'s episodes into a store.

    See the module docs, and :class:`_Recorder` for the arguments. For vector envs use
    :class:`RecordVectorEpisodes`.
    """

    def __init__(self, env: Any, data_directory: str | os.PathLike[str] | Store, metadata: Any = None,
                 **options: Any) -> None:
        if isinstance(env, gym.vector.VectorEnv):
            raise ArgumentTypeError("a vector env: wrap it with rlarrow.record.gym.RecordVectorEpisodes")
        gym.Wrapper.__init__(self, env)
        self._setup(env, data_directory, metadata, **options)


class RecordVectorEpisodes(_Recorder, gym.vector.VectorWrapper):  # type: ignore[misc,name-defined]
    """Record a ``gymnasium.vector.VectorEnv``'s episodes, one ``env_index`` per sub-env.

    See :class:`_Recorder` for the arguments.
    """

    def __init__(self, env: Any, data_directory: str | os.PathLike[str] | Store, metadata: Any = None,
                 **options: Any) -> None:
        gym.vector.VectorWrapper.__init__(self, env)
        self._setup(env, data_directory, metadata, **options)
