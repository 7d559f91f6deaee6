"""What an import of replay-memory exports takes beyond the run: :class:`MemoryOptions`.

The ``pt``, ``npz``, ``csv`` and ``parquet`` formats of :mod:`rlarrow.io.registry` (the
``memory`` group) declare it as their :attr:`~rlarrow.io.registry.Format.options`;
``rlarrow convert`` builds it from its flags.

Example:
    >>> MemoryOptions(num_envs=16, episodes=True).dtype
    'float32'
    >>> MemoryOptions(dtype="float16")
    Traceback (most recent call last):
    ...
    rlarrow.core.errors.ArgumentError: dtype='float16': csv floats are read as 'float32' or 'float64'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError

__all__ = ["MemoryOptions"]


@dataclass(frozen=True)
class MemoryOptions:
    """How memory exports are imported (see :func:`rlarrow.io.memory.importer.import_memory`).

    Attributes:
        num_envs: environments of csv exports (they do not record it).
        memory_size: memory size of csv exports (None: their rows per env).
        dtype: float dtype of csv exports: ``"float32"`` or ``"float64"``.
        layout: how a new memory table stores tensors (``"binary"``, ``"list"``, ``"auto"``).
        episodes: also unroll each snapshot into episodes and steps.
        names: tensor name by role for the unrolling (``{"states": "observations"}``).
        autoreset: the vector env's autoreset mode for the unrolling (None: detected).
        max_episode_steps: the env's time limit, cutting episodes a memory without
            ``truncated`` runs together.

    Raises:
        ArgumentError: a count below 1, or a dtype other than float32/float64.
    """

    num_envs: int | None = None
    memory_size: int | None = None
    dtype: str = "float32"
    layout: str = "binary"
    episodes: bool = False
    names: Mapping[str, str] | None = None
    autoreset: str | None = None
    max_episode_steps: int | None = None

    def __post_init__(self) -> None:
        for option, count in (("num_envs", self.num_envs), ("memory_size", self.memory_size)):
            if count is not None:
                _arguments.integer(count, option, minimum=1)
        if self.dtype not in ("float32", "float64"):
            raise ArgumentError(f"dtype={self.dtype!r}: csv floats are read as 'float32' or 'float64'")
