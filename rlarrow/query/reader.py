"""``rlarrow.Reader``: a recorded run read back with envlogger's Reader surface.

``Reader(data_directory)`` opens a store (one run of it) and offers what envlogger's
``Reader`` offers: ``episodes`` and ``steps`` as sequences (``len``, indexing, slicing,
iteration; each iterator independent of the others), every step a :class:`StepData` with
``timestep`` (a ``dm_env.TimeStep`` in dm_env order), ``action`` and ``custom_data``;
``metadata()``, ``episode_metadata()`` and the four specs.

Episode *k* and step *n* are found through an index of the run's rows (episode and step
numbers, read once), and only the row groups that hold them are read (a few are cached):
nothing is scanned from the start. :meth:`Reader.episode_columns` gives whole episodes as
NumPy/Arrow columns, without building a Python object per step. The reading itself is
:class:`rlarrow.core.dm_env_rows.DmEnvRows`'s (the envlogger exporter reads with it too);
this module adds envlogger's sequences of episodes and steps.

Example:
    >>> import numpy as np, dm_env, tempfile, os
    >>> from dm_env import specs
    >>> from rlarrow.record.dm_env import EnvLogger
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
    >>> with EnvLogger(Count(), path, step_fn=lambda ts, a, env: {"t": env.t}) as env:
    ...     for _ in range(2):
    ...         ts = env.reset()
    ...         while not ts.last():
    ...             ts = env.step(1)
    >>> with Reader(path) as reader:
    ...     print(len(reader.episodes), len(reader.steps))
    ...     last = reader.episodes[1][-1]
    ...     print(last.timestep.last(), last.timestep.reward, last.action, last.custom_data)
    2 8
    True 1.0 1 {'t': 3}
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import overload

from rlarrow.core.dm_env_rows import DmEnvRows, StepData

__all__ = ["Reader", "StepData"]

_ITER_CHUNK = 65536  # steps built at a time when iterating


class _Episode(Sequence[StepData]):
    """One episode's steps (dm_env order), built from its rows when first used."""

    def __init__(self, reader: Reader, k: int) -> None:
        self._reader = reader
        self._k = k
        self._steps: list[StepData] | None = None

    def _all(self) -> list[StepData]:
        if self._steps is None:
            self._steps = self._reader.episode_steps(self._k)
        return self._steps

    def __len__(self) -> int:
        return self._reader.episode_length(self._k)

    @overload
    def __getitem__(self, i: int) -> StepData: ...
    @overload
    def __getitem__(self, i: slice) -> list[StepData]: ...
    def __getitem__(self, i: int | slice) -> StepData | list[StepData]:
        return self._all()[i]

    def __iter__(self) -> Iterator[StepData]:
        return iter(self._all())


class _Episodes(Sequence[_Episode]):
    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def __len__(self) -> int:
        return self._reader.num_episodes

    @overload
    def __getitem__(self, k: int) -> _Episode: ...
    @overload
    def __getitem__(self, k: slice) -> list[_Episode]: ...
    def __getitem__(self, k: int | slice) -> _Episode | list[_Episode]:
        if isinstance(k, slice):
            return [_Episode(self._reader, i) for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"episode {k} out of range ({len(self)} episodes)")
        return _Episode(self._reader, k)

    def __iter__(self) -> Iterator[_Episode]:
        return (_Episode(self._reader, k) for k in range(len(self)))


class _Steps(Sequence[StepData]):
    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def __len__(self) -> int:
        return self._reader.num_steps

    @overload
    def __getitem__(self, n: int) -> StepData: ...
    @overload
    def __getitem__(self, n: slice) -> list[StepData]: ...
    def __getitem__(self, n: int | slice) -> StepData | list[StepData]:
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(len(self)))]
        if n < 0:
            n += len(self)
        if not 0 <= n < len(self):
            raise IndexError(f"step {n} out of range ({len(self)} steps)")
        return self._reader.step_range(n, n + 1)[0]

    def __iter__(self) -> Iterator[StepData]:
        total = len(self)
        for lo in range(0, total, _ITER_CHUNK):
            yield from self._reader.step_range(lo, min(total, lo + _ITER_CHUNK))


class Reader(DmEnvRows):
    """Read a recorded run as envlogger's Reader does (see the module docs).

    Besides envlogger's surface (``episodes``, ``steps``, ``metadata()``,
    ``episode_metadata()``, the four specs), it has what
    :class:`~rlarrow.core.dm_env_rows.DmEnvRows` has: ``episode_columns``,
    ``episode_table``, ``run_id``, ``source``, ``store``.

    Args:
        data_directory: a store (or its path).
        run_id: which run; may be left out when the store holds one run with steps.
        version: the store as it was at that version (:attr:`rlarrow.Store.version`).

    Raises:
        StoreError: no steps, or several runs and no ``run_id``.

    Example:
        >>> with Reader("runs.rlarrow") as reader:  # doctest: +SKIP
        ...     first = reader.episodes[0][0].timestep
    """

    @property
    def episodes(self) -> _Episodes:
        """The run's episodes, each a sequence of :class:`StepData`."""
        return _Episodes(self)

    @property
    def steps(self) -> _Steps:
        """All the run's steps, episode after episode."""
        return _Steps(self)

    def __enter__(self) -> Reader:
        return self

    def __repr__(self) -> str:
        return (f"Reader({os.fspath(self.store.path)!r}, run_id={self.run_id!r}, "
                f"episodes={self.num_episodes})")
