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
sample is read exactly once per epoch: the epoch's row groups, in the sampler's order, are
dealt round robin, so no reader gets more than one row group more than another.

**Resuming.** A sampler's :meth:`~Sampler.state_dict` says which samples of the epoch were
delivered, whatever the readers were: the row groups delivered whole, and of each row group
delivered in part the ordinals of its samples delivered (a :class:`Ledger`; a sample is
``(row group, ordinal)``, the row group by its index among the source's, in storage order).
A state loaded with the same readers as it was saved with continues batch for batch where it
stopped (each reader skips the batches it delivered). Loaded with other readers (4 ranks
saved, 3 resume; or the states of all ranks, a list, merged), the row groups not delivered
whole are dealt again, round robin in the epoch's order, to the new readers, and each reads
only the samples the ledger does not hold: every sample not yet seen is delivered, once.

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
from rlarrow.core.errors import ArgumentError, StoreError
from rlarrow.train.windows import Windows

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from rlarrow.train.samples import SampleSource, Unit

__all__ = ["Ledger", "Sampler", "SequentialSampler", "ShuffleSampler"]


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


_ORDINAL = (1 << 32) - 1  # the ordinal's bits of an origin (``unit << 32 | ordinal``)


class Ledger:
    """Which samples of an epoch were delivered, by row group: independent of who read them.

    :attr:`done` maps each row group delivered whole to the reader that finished it;
    :attr:`partial` each row group delivered in part to the mask of its samples delivered.
    Batches are folded in a message at a time (:meth:`message`, then :meth:`delivered` per
    batch): the row groups being delivered share one flat mask, marked with one scatter per
    parcel of batches (0.12 ms for 16,384 samples of 40 row groups, where sorting them by row
    group took 0.9 ms: a DataLoader's main process streams millions of samples a second).

    Example:
        >>> import numpy as np
        >>> ledger = Ledger()
        >>> ledger.message(np.array([0 << 32 | 0, 1 << 32 | 2, 0 << 32 | 1]), [2, 1], {0: 2, 1: 3}, reader=0)
        >>> ledger.delivered()  # the first batch of the message: unit 0's sample 0, unit 1's sample 2
        >>> ledger.state()
        {'done': {}, 'partial': {0: [2, [0]], 1: [3, [2]]}}
        >>> ledger.delivered()
        >>> ledger.state()["done"]
        {0: 0}
    """

    def __init__(self) -> None:
        self._done: dict[int, int] = {}
        # row groups being delivered: their slice of one flat mask, sample count and last reader
        self._open: dict[int, tuple[int, int, int]] = {}
        self._start = np.zeros(0, dtype=np.int64)  # each row group's slice start (by index)
        self._flat = np.zeros(0, dtype=bool)
        self._used = 0
        # the message being delivered: its origins, batch sizes, totals, reader; batches delivered
        self._pending: tuple[np.ndarray, list[int], dict[int, int], int] | None = None
        self._batches = 0

    @property
    def done(self) -> dict[int, int]:
        """Row groups delivered whole, each with the reader that finished it (-1: merged states')."""
        self._settle()
        return self._done

    @property
    def partial(self) -> dict[int, np.ndarray]:
        """Row groups delivered in part: the mask of their samples delivered."""
        self._settle()
        return {u: self._flat[s:s + n] for u, (s, n, _) in self._open.items()}

    def message(self, origins: np.ndarray, sizes: list[int], totals: dict[int, int], reader: int) -> None:
        """The next batches to be delivered (``origins`` of their samples, one batch after another)."""
        self.fold()
        self._pending = (origins, list(sizes), totals, reader)

    def delivered(self) -> None:
        """The next batch of the message was delivered."""
        self._batches += 1

    def fold(self) -> None:
        """Record the batches of the message delivered so far."""
        if self._pending is None or not self._batches:
            return
        origins, sizes, totals, reader = self._pending
        cut = sum(sizes[:self._batches])
        self.add(origins[:cut], totals, reader)
        rest = sizes[self._batches:]
        self._pending = (origins[cut:], rest, totals, reader) if rest else None
        self._batches = 0

    def add(self, origins: np.ndarray, totals: dict[int, int], reader: int) -> None:
        """Samples ``origins`` delivered by ``reader`` (``totals``: each row group's sample count)."""
        if not len(origins):
            return
        for unit, total in totals.items():
            if unit in self._done:
                continue
            if unit not in self._open:
                self._place(unit, total)
            start, total_, _ = self._open[unit]
            self._open[unit] = (start, total_, reader)
        self._flat[self._start[origins >> 32] + (origins & _ORDINAL)] = True

    def _place(self, unit: int, total: int) -> None:
        """A slice of the flat mask for ``unit``'s ``total`` samples."""
        if self._used + total > len(self._flat):
            self._settle()  # (row groups done leave it first)
            if self._used + total > len(self._flat):
                grown = np.zeros(max(2 * len(self._flat), self._used + total, 1 << 16), dtype=bool)
                grown[:self._used] = self._flat[:self._used]
                self._flat = grown
        if unit >= len(self._start):
            grown_start = np.zeros(max(2 * len(self._start), unit + 1, 64), dtype=np.int64)
            grown_start[:len(self._start)] = self._start
            self._start = grown_start
        self._start[unit] = self._used
        self._open[unit] = (self._used, total, -1)
        self._used += total

    def _settle(self) -> None:
        """Row groups whose samples are all delivered move to :attr:`done`; the flat mask is compacted."""
        if not self._open:
            return
        kept = self._flat[:0]
        parts: list[np.ndarray] = []
        still: dict[int, tuple[int, int, int]] = {}
        used = 0
        for unit, (start, total, reader) in self._open.items():
            mask = self._flat[start:start + total]
            if mask.all():
                self._done[unit] = reader
                continue
            parts.append(mask)
            still[unit] = (used, total, reader)
            self._start[unit] = used
            used += total
        kept = np.concatenate(parts) if parts else kept
        self._flat = np.zeros(max(len(self._flat), 1), dtype=bool)
        self._flat[:used] = kept
        self._open, self._used = still, used

    def seen(self, unit: int, total: int) -> np.ndarray | None:
        """The mask of ``unit``'s samples delivered (None: none of them); checked against ``total``."""
        mask = self.partial.get(unit)
        if mask is not None and len(mask) != total:
            raise StoreError(f"the resume state says row group {unit} has {len(mask)} samples, it has "
                             f"{total} now: resume on the store version the state was saved with (version=)")
        return mask

    def state(self) -> dict[str, Any]:
        """The ledger as plain values: ``{"done": {unit: reader}, "partial": {unit: [total, ordinals]}}``."""
        self.fold()
        return {"done": dict(self.done),
                "partial": {u: [len(m), np.flatnonzero(m).tolist()] for u, m in self.partial.items()}}

    @classmethod
    def of(cls, states: list[dict[str, Any]]) -> Ledger:
        """The union of ledgers' states (several ranks' ledgers of one epoch)."""
        made = cls()
        for state in states:
            made._done.update({int(u): int(r) for u, r in state.get("done", {}).items()})
        for state in states:
            for u, (total, ordinals) in state.get("partial", {}).items():
                if int(u) not in made._done:
                    ords = np.asarray(ordinals, dtype=np.int64)
                    made.add(ords | (int(u) << 32), {int(u): int(total)}, -1)
        return made


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
        #: the samples delivered this epoch (:class:`Ledger`), and the readers that delivered them
        self.ledger = Ledger()
        self.readers: int | None = None
        #: a loaded state's samples delivered (None: nothing loaded), its readers and whether its
        #: epoch was already a resumed one (then only the ledger says where it stands)
        self.rest: Ledger | None = None
        self.rest_readers: int | None = None
        self.rest_resumed = False

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
        self.ledger = Ledger()
        self.readers = None
        self.rest, self.rest_readers, self.rest_resumed = None, None, False

    def resumed(self, readers: int | None = None) -> bool:
        """Whether this epoch resumes from a ledger (a state loaded for other ``readers``), not by counts."""
        if self.rest is None:
            return False
        readers = readers if readers is not None else self.readers
        return self.rest_resumed or (readers is not None and readers != self.rest_readers)

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands, whatever the readers: the epoch and the samples delivered.

        ``delivered``: batches per reader (what a resume by the same ``readers`` skips);
        ``done`` and ``partial``: the :class:`Ledger` (what a resume by other readers skips).
        """
        readers = self.readers if self.readers is not None else self.rest_readers
        return {"epoch": self.epoch, "delivered": dict(self.delivered), "seed": self.seed,
                "readers": readers, "resumed": self.resumed(readers), **self.ledger.state()}

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Continue after the samples ``state`` says were delivered (same data and seed).

        ``state``: one :meth:`state_dict`, or a list of them: every rank's, which together say
        what the epoch delivered (``torch.distributed.all_gather_object`` collects them). The
        same readers as saved continue where each stopped; other readers (another world size
        or worker count) share what is left, each sample once (:class:`Ledger`).
        """
        states = [state] if isinstance(state, dict) else list(state)
        if not states:
            raise ArgumentError("load_state_dict: give a state_dict(), or a list of every rank's")
        for one in states:
            if one.get("seed", self.seed) != self.seed:
                raise ArgumentError(f"the state was saved with seed {one['seed']}, "
                                    f"this dataset has {self.seed}")
        epochs = {int(one["epoch"]) for one in states}
        if len(epochs) > 1:
            raise ArgumentError(f"the states are of epochs {sorted(epochs)}: give the states of one epoch")
        self.set_epoch(epochs.pop())
        self.resume = {int(k): int(v) for one in states for k, v in one["delivered"].items()}
        self.delivered = dict(self.resume)
        readers = {one.get("readers") for one in states}
        self.rest_readers = readers.pop() if len(readers) == 1 else None
        self.rest_resumed = any(one.get("resumed", False) for one in states) or self.rest_readers is None
        self.rest = Ledger.of(states)
        self.ledger = Ledger.of(states)
        if self.rest_readers is None and not any("done" in one for one in states):  # (a state of 0.x)
            self.rest, self.rest_resumed = None, False

    def resume_point(self, index: int, count: int) -> tuple[int, Ledger | None]:
        """Where reader ``index`` of ``count`` starts: batches to skip, or the ledger of what to leave out."""
        if self.resumed(count):
            return 0, self.rest
        return self.resume.get(index, 0), None

    def start_pass(self, resuming: bool) -> None:
        """A pass over the epoch begins where it is counted: its ledger from the state loaded, or empty."""
        self.ledger = Ledger.of([self.rest.state()]) if resuming and self.rest is not None else Ledger()

    # ---- reading

    def reader(self) -> tuple[int, int]:
        """(index, count) of the reader the caller runs in (see :func:`reader`)."""
        return reader(self.rank, self.world_size)

    def units(self, units: list[Unit], index: int, count: int) -> list[Unit]:
        """The row groups reader ``index`` of ``count`` reads this epoch, in order."""
        order = self.unit_order(len(units))
        return [units[i] for i in order[index::count]]

    def plans(self, source: SampleSource, batch_size: int, *, drop_last: bool = False,
              reader: tuple[int, int] | None = None,
              rest: Ledger | None = None) -> Iterator[tuple[Windows, np.ndarray]]:
        """Each batch as the buffer it comes from and the samples it takes (to gather).

        A buffer stays valid until the plans of the buffer after it are asked for (two
        alternate in the same memory), so a worker may gather a parcel of them at once.
        ``rest``: the samples already delivered this epoch: only the others are read, the row
        groups not delivered whole dealt again to the readers. Each buffer's
        :attr:`~rlarrow.train.windows.Windows.origins` say where its samples come from.
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

        order = self.unit_order(len(source.units))
        if rest is not None:
            order = [u for u in order if u not in rest.done]
        mine = order[index::count_]
        # (on object storage the next row groups are fetched while these batches are taken)
        for u, got in zip(mine, source.read_ahead([source.units[u] for u in mine], files), strict=True):
            if got is None:
                continue
            got.origins = np.arange(len(got), dtype=np.int64) | (u << 32)
            got.totals = {u: len(got)}
            seen = rest.seen(u, len(got)) if rest is not None else None
            if seen is not None:
                got = got.compact(np.flatnonzero(~seen))
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
