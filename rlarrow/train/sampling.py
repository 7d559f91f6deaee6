"""Samplers: the order a stream reads its row groups and mixes its samples, and where it stands.

A sampler is a strategy object (as lance's samplers or torchdata's nodes): given a planned
:class:`~rlarrow.train.samples.SampleSource` it deals the row groups to this reader (a
``DataLoader`` worker of a ``torch.distributed`` rank), reads them into a buffer of
``buffer_rows`` samples (:class:`~rlarrow.train.windows.Windows`) and picks each batch's
samples from it. It keeps the epoch and, for resuming, the batches each reader delivered
(:meth:`Sampler.state_dict`). Torch-free: it runs alone on NumPy, and behind
:class:`rlarrow.train.torch.StreamingDataset` (``sampler=``).

- :class:`SequentialSampler`: storage order, every epoch the same;
- :class:`ShuffleSampler`: row groups permuted per epoch and samples mixed in the buffer,
  seeded by ``seed``, the epoch and the reader.

Across all readers (``rank`` of ``world_size``, times the ``DataLoader`` workers) every
sample is read exactly once per epoch.

Example:
    >>> import numpy as np, rlarrow, tempfile
    >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
    >>> _ = st.append("steps", {"run_id": "r", "episode_id": 0, "step": np.arange(5), "env_index": 0,
    ...     "reward": np.arange(5.0), "is_first": [True] + [False] * 4, "is_last": [False] * 4 + [True],
    ...     "is_terminal": [False] * 5})
    >>> from rlarrow.train.samples import SampleSource
    >>> source = SampleSource.from_store(st, columns=["reward"])
    >>> [b["reward"].tolist() for b in SequentialSampler().batches(source, batch_size=2)]
    [[0.0, 1.0], [2.0, 3.0], [4.0]]
    >>> shuffled = ShuffleSampler(seed=1)
    >>> sorted(x for b in shuffled.batches(source, batch_size=2) for x in b["reward"].tolist())
    [0.0, 1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError
from rlarrow.train.windows import Windows

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from rlarrow.train.samples import SampleSource, Unit

__all__ = ["Sampler", "SequentialSampler", "ShuffleSampler"]


def reader(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(index, count) of this reader among all ``DataLoader`` workers of all ranks.

    ``rank``/``world_size`` None: ``torch.distributed``'s when it is initialised, else one
    process. (Torch is asked only when it is imported: without it there are no workers.)
    """
    torch = sys.modules.get("torch")
    if rank is None or world_size is None:
        rank, world_size = 0, 1
        if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    info = torch.utils.data.get_worker_info() if torch is not None else None
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * workers + worker, world_size * workers


class Sampler:
    """The base strategy: deal row groups to readers, buffer, batch; keep the epoch and resume point.

    Args:
        seed: seeds the shuffle (and is checked when a state is loaded).
        buffer_rows: samples read before batches are taken from them (at least a batch);
            larger mixes more and costs memory.
        rank, world_size: this process's share of the data; default: ``torch.distributed``'s
            when it is initialised, else the whole (one process).

    A sampler keeps one stream's state (epoch, batches delivered): give each dataset its own.
    """

    #: whether row groups and samples are permuted (:class:`ShuffleSampler`)
    shuffle = False

    def __init__(self, *, seed: int = 0, buffer_rows: int = 1 << 19, rank: int | None = None,
                 world_size: int | None = None) -> None:
        _arguments.integer(buffer_rows, "buffer_rows", minimum=1)
        if world_size is not None:
            _arguments.integer(world_size, "world_size", minimum=1)
        if rank is not None:
            _arguments.integer(rank, "rank", minimum=0)
        if (rank is None) != (world_size is None) or (
                rank is not None and world_size is not None and not 0 <= rank < world_size):
            raise ArgumentError(f"rank {rank} of world_size {world_size}: give both, 0 <= rank < world_size")
        self.seed = seed
        self.buffer_rows = buffer_rows
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        #: batches delivered per reader this epoch, and where a loaded state resumes them
        self.delivered: dict[int, int] = {}
        self.resume: dict[int, int] = {}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(seed={self.seed}, buffer_rows={self.buffer_rows}, rank={self.rank}, "
                f"world_size={self.world_size})")

    # ---- the strategy

    def unit_order(self, count: int) -> list[int]:
        """The order of ``count`` row groups this epoch (before they are dealt to readers)."""
        return list(range(count))

    def mix(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """The order of ``count`` samples of a buffer."""
        return np.arange(count)

    # ---- epochs and resuming

    def set_epoch(self, epoch: int) -> None:
        """Order the next epoch as ``epoch`` (deterministically); clears a resume point."""
        self.epoch = epoch
        self.resume = {}
        self.delivered = {}

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: the epoch and the batches delivered per reader."""
        return {"epoch": self.epoch, "delivered": dict(self.delivered), "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the batches ``state`` counts (same data, seed and readers)."""
        if state.get("seed", self.seed) != self.seed:
            raise ArgumentError(f"the state was saved with seed {state['seed']}, "
                                f"this dataset has {self.seed}")
        self.epoch = int(state["epoch"])
        self.resume = {int(k): int(v) for k, v in state["delivered"].items()}
        self.delivered = dict(self.resume)

    # ---- reading

    def reader(self) -> tuple[int, int]:
        """(index, count) of the reader the caller runs in (see :func:`reader`)."""
        return reader(self.rank, self.world_size)

    def units(self, units: list[Unit], index: int, count: int) -> list[Unit]:
        """The row groups reader ``index`` of ``count`` reads this epoch, in order."""
        order = self.unit_order(len(units))
        return [units[i] for i in order[index::count]]

    def plans(self, source: SampleSource, batch_size: int, *, drop_last: bool = False,
              reader: tuple[int, int] | None = None) -> Iterator[tuple[Windows, np.ndarray]]:
        """Each batch as the buffer it comes from and the samples it takes (to gather).

        A buffer stays valid until the plans of the buffer after it are asked for (two
        alternate in the same memory), so a worker may gather a parcel of them at once.
        """
        index, count_ = reader if reader is not None else self.reader()
        rng = np.random.default_rng([self.seed, self.epoch, index])
        files: dict[str, pq.ParquetFile] = {}
        buffer_rows = max(self.buffer_rows, batch_size)
        # the buffer holds rows and window starts (Windows), never whole windows: its memory
        # is about buffer_rows rows whatever sequence_length is, and a batch is one gather
        pending: list[Windows] = []
        count = 0
        bs = batch_size
        # the buffer's memory, refilled at each drain (two, alternating: see above)
        scratches: list[dict[str, np.ndarray]] = [{}, {}]
        drains = 0

        def drain(final: bool) -> Iterator[tuple[Windows, np.ndarray]]:
            nonlocal pending, count, drains
            if not pending:
                return
            buf = Windows.concat(pending, scratches[drains % 2])
            drains += 1
            pending = []
            n = len(buf)
            order = self.mix(n, rng)
            full = (n // bs) * bs
            for s in range(0, full, bs):
                yield buf, order[s:s + bs]
            count = n - full
            if count:
                rest = order[full:]
                if final and not drop_last:
                    yield buf, rest
                    count = 0
                elif not final:
                    pending = [buf.compact(rest)]  # the few windows left, with only their rows
                else:
                    count = 0

        for unit in self.units(source.units, index, count_):
            got = source.read_windows(unit, files)
            if got is None:
                continue
            pending.append(got)
            count += len(got)
            if count >= buffer_rows:
                yield from drain(final=False)
        yield from drain(final=True)

    def batches(self, source: SampleSource, batch_size: int, *, drop_last: bool = False,
                reader: tuple[int, int] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The batches of ``source`` the reader reads this epoch, as flat NumPy columns."""
        for buf, which in self.plans(source, batch_size, drop_last=drop_last, reader=reader):
            yield buf.gather(which)


class SequentialSampler(Sampler):
    """Storage order: row groups as the files hold them, samples as read; each epoch the same.

    Example:
        >>> SequentialSampler(rank=0, world_size=2).units(list("abcde"), 0, 2)
        ['a', 'c', 'e']
    """


class ShuffleSampler(Sampler):
    """Row groups permuted per epoch, samples mixed in a buffer of ``buffer_rows``; seeded.

    The permutation depends on ``seed`` and the epoch (:meth:`set_epoch`), the mixing also
    on the reader: the same seed and epoch give the same batches.

    Example:
        >>> s = ShuffleSampler(seed=0)
        >>> s.unit_order(5) == ShuffleSampler(seed=0).unit_order(5)
        True
        >>> s.set_epoch(1)
        >>> sorted(s.unit_order(5))
        [0, 1, 2, 3, 4]
    """

    shuffle = True

    def unit_order(self, count: int) -> list[int]:
        """A permutation of the row groups, by seed and epoch."""
        order: list[int] = np.random.default_rng([self.seed, self.epoch]).permutation(count).tolist()
        return order

    def mix(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """A permutation of the buffer's samples (``rng``: seeded by seed, epoch and reader)."""
        return rng.permutation(count)
