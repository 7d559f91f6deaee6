"""PyTorch datasets over a store: streaming (shuffled, windowed, sharded, resumable) and map-style.

:class:`StreamingDataset` is an ``IterableDataset`` that streams a table (``steps``,
``memory``, or ``transitions`` derived from ``steps``) from its Parquet files:

- **Projection and filter**: only ``columns`` (and the keys windows need) are read; ``filter``
  is a pyarrow expression or a SQL predicate on the flat columns (DuckDB).
- **Shuffle**: the row groups of all files are permuted per epoch (seeded), then rows are
  mixed in a buffer of ``buffer_rows`` rows filled from several row groups.
- **Sequence windows**: ``sequence_length=L`` yields windows of L consecutive steps of one
  episode (batch shape ``(B, L, ...)``); a window never crosses an episode boundary. A
  window starting in one row group may end in the next row group or in another file (a
  recorder's flushes split an episode across commits): the rows that continue the episode
  are found by key (row-group statistics pick the candidates) and read ahead.
- **Batching**: the buffer holds rows (as NumPy) and where each window starts, laid out so
  that a window is consecutive rows: its memory is about ``buffer_rows`` rows whatever the
  window length, and each batch is one gather (``np.take``), with no per-row Python work.
- **Workers**: a ``DataLoader`` worker gathers a parcel of batches at once (one take per
  column) straight into shared-memory blocks it reuses (one crossing per block, no copy in
  the main process, which splits each column into the batches' views); a block is
  rewritten only once the main process holds no batch made from it.
- **Sharding**: row groups are dealt to ``DataLoader`` workers and ``torch.distributed``
  ranks, so across all of them every sample is seen exactly once per epoch, however the
  files divide.
- **Resuming**: :meth:`StreamingDataset.state_dict` / :meth:`load_state_dict` record the
  epoch, how many batches each worker has delivered and which samples (row groups and
  ordinals: a :class:`~rlarrow.train.sampling.Ledger`); iterate through
  :class:`DataLoader` (a ``torch.utils.data.DataLoader`` that keeps count) to resume
  mid-epoch with workers, exactly where it stopped, or with another world size or worker
  count, every sample not yet seen once (load the list of every rank's states).

:class:`TableDataset` is map-style: ``len`` rows, ``ds[i]`` one row as tensors, with the row
groups it reads cached.

Example:
    >>> from rlarrow.train.torch import DataLoader, StreamingDataset  # doctest: +SKIP
    >>> ds = StreamingDataset("runs.rlarrow", "transitions", batch_size=256, seed=0)  # doctest: +SKIP
    >>> loader = DataLoader(ds, num_workers=2)  # doctest: +SKIP
    >>> for epoch in range(3):  # doctest: +SKIP
    ...     ds.set_epoch(epoch)
    ...     for batch in loader:
    ...         batch["observation"], batch["next_observation"], batch["done"]
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core import arguments as _arguments
from rlarrow.core.deps import require
from rlarrow.core.errors import ArgumentError, ArgumentTypeError

require("torch", feature="rlarrow.train.torch")  # names the extra when torch is missing
import torch  # noqa: E402

from rlarrow.train.samples import SampleSource, Unit, nest  # noqa: E402
from rlarrow.train.sampling import Sampler, SequentialSampler, ShuffleSampler  # noqa: E402
from rlarrow.train.source import Source  # noqa: E402
from rlarrow.train.table import TableDataset  # noqa: E402
from rlarrow.train.transforms import (  # noqa: E402
    DeltaSteps,
    DeltaTimestamps,
    Normalize,
    SequenceWindow,
    ToDevice,
    WindowTransform,
    check_offsets,
)
from rlarrow.train.windows import Windows  # noqa: E402

if TYPE_CHECKING:
    from rlarrow.core.remote import RemoteStore
    from rlarrow.core.store import StoreLike

__all__ = ["DataLoader", "StreamingDataset", "TableDataset"]

class StreamingDataset(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Stream batches of a store's table as dicts of tensors.

    Composed of parts, each usable alone: a **source** (:class:`~rlarrow.train.source.Source`:
    which rows of which store), a **sampler** (:mod:`rlarrow.train.sampling`: their order,
    sharding, epoch and resume point) and **transforms** (:mod:`rlarrow.train.transforms`:
    windows, ``delta_steps``/``delta_timestamps``, normalisation, device). The keyword
    arguments after them build the same parts: ``StreamingDataset(store, "steps",
    sequence_length=8, seed=1)`` is ``StreamingDataset(source=Source(store, "steps"),
    sampler=ShuffleSampler(seed=1), transforms=[SequenceWindow(8)])``, batch for batch.

    Args:
        source: a :class:`~rlarrow.train.source.Source` (or a planned
            :class:`~rlarrow.train.samples.SampleSource`); it holds ``store``, ``table``,
            ``columns``, ``filter``, ``layout`` and ``version``: give those to it, not here.
        sampler: a :class:`~rlarrow.train.sampling.Sampler` (default: a ``ShuffleSampler``,
            or ``SequentialSampler`` for ``shuffle=False``); it holds ``shuffle``, ``seed``,
            ``buffer_rows``, ``rank`` and ``world_size``.
        transforms: :class:`~rlarrow.train.transforms.SequenceWindow`, ``DeltaSteps`` or
            ``DeltaTimestamps`` (one), ``Normalize``, ``ToDevice``, and functions of a
            batch's flat NumPy columns (run in order, where the batch is gathered).
        store: a :class:`~rlarrow.Store` or its path (or a ``Source``: ``source=``).
        table: ``"steps"``, ``"memory"``, or ``"transitions"`` (from ``steps``:
            ``observation, action, reward, discount, next_observation, done, truncated``).
        columns: columns to read (default: every non-key column; for transitions, all of
            the above). Struct columns come back as nested dicts.
        filter: a ``pyarrow.compute.Expression`` or a SQL predicate string over the flat
            columns, applied to each row (to a window's first row).
        batch_size: rows (or windows) per batch.
        shuffle: permute row groups and mix rows in the buffer (seeded by ``seed`` and the
            epoch); False streams in storage order.
        buffer_rows: rows mixed at a time; larger mixes more, costs memory.
        sequence_length: windows of this many consecutive steps of one episode.
        drop_last: drop each reader's last, smaller batch.
        seed: the shuffle's seed.
        device: move batches there (in the process that iterates; with
            :class:`DataLoader` workers, the loader moves them in the main process).
        pin_memory: pin batches before moving them to a GPU.
        rank, world_size: this process's share of the data; default: ``torch.distributed``'s
            when it is initialised, else the whole (one process).
        layout: one layout of the table (:meth:`rlarrow.Store.layouts`: runs whose tensors
            differ are in different layouts); None: all of them, with the columns every
            layout has with the same type (a column of one layout only needs ``layout``).
        version: read the store as it was at this version (:attr:`rlarrow.Store.version`);
            the version read is the dataset's ``version``, to record with a training run.
        normalize: normalise columns with their statistics (:func:`rlarrow.core.stats.normalizer`):
            a mode, ``"mean_std"``, ``"min_max"`` or ``"quantile"`` (q01/q99 to [-1, 1]),
            for the observation and action columns (and their dict leaves), or a mapping
            ``{column: mode}`` for any of them (``reward`` too). ``next_observation``
            (transitions) takes the observation's statistics. Windows and leading axes
            broadcast.
        delta_steps: each frame (a step with an action) with these rows of its episode around
            it, per column (LeRobot's ``delta_timestamps``, in steps), and ``<column>_is_pad``
            masks: see :class:`~rlarrow.train.transforms.DeltaSteps`. Padding is never data
            (:mod:`rlarrow.core.padding`, ``docs/format.md`` "Training samples"): on
            ``steps``, every nullable column read comes with ``<column>_is_pad`` in rows and
            windows too, a null position holds 0, and ``transitions`` leave out the rows
            that are none (null observation or action) and keep a transition whose next
            observation is null with ``next_observation_is_pad`` true.
        delta_timestamps, fps: the same in seconds, at ``fps`` steps per second (each time a
            whole number of steps, within 1e-4 s).
        stats: the statistics ``normalize`` uses, ``{column: ColumnStats}``; default: those
            the store keeps for its steps (all episodes, at ``version``;
            :func:`rlarrow.query.dataset_stats.stats` for a selection or a mixture). They are in
            :attr:`stats`, to save with the model
            (``rlarrow.query.dataset_stats.write_stats_json(ds.stats, "stats.json")``).
            Padded positions (``*_is_pad``) are 0 after normalising, never a normalised
            number.

    Example:
        >>> ds = StreamingDataset("runs.rlarrow", normalize="mean_std")  # doctest: +SKIP
        >>> ds.stats["observation"].mean  # what was subtracted  # doctest: +SKIP
    """

    def __init__(
        self,
        store: StoreLike | RemoteStore | Source | None = None,
        table: str = "steps",
        *,
        source: Source | SampleSource | None = None,
        sampler: Sampler | None = None,
        transforms: Sequence[Any] = (),
        columns: Sequence[str] | None = None,
        filter: Any = None,  # noqa: A002 - pyarrow's name
        batch_size: int = 256,
        shuffle: bool = True,
        buffer_rows: int = 1 << 19,
        sequence_length: int = 1,
        drop_last: bool = False,
        seed: int = 0,
        device: Any = None,
        pin_memory: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        layout: int | None = None,
        version: int | None = None,
        normalize: str | Mapping[str, str] | None = None,
        stats: Mapping[str, Any] | None = None,
        delta_steps: Mapping[str, Sequence[int]] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        fps: float | None = None,
    ) -> None:
        super().__init__()
        _arguments.integer(batch_size, "batch_size", minimum=1)
        if isinstance(store, Source):  # StreamingDataset(Source(...), ...)
            if source is not None:
                raise ArgumentError("give the source once: StreamingDataset(Source(...)) or source=...")
            source = store
        where = None if isinstance(store, Source) else store
        if sampler is None:
            kind = ShuffleSampler if shuffle else SequentialSampler
            sampler = kind(seed=seed, buffer_rows=buffer_rows, rank=rank, world_size=world_size)
        elif not isinstance(sampler, Sampler):
            raise ArgumentTypeError(f"sampler: give a rlarrow.train.sampling.Sampler (SequentialSampler, "
                                    f"ShuffleSampler), not a {type(sampler).__name__}")
        else:
            _only("sampler", {"shuffle": shuffle is not True, "seed": seed != 0,
                              "buffer_rows": buffer_rows != 1 << 19, "rank": rank is not None,
                              "world_size": world_size is not None})
        self.sampler: Sampler = sampler
        transforms = [*transforms, *_legacy_transforms(sequence_length, delta_steps, delta_timestamps, fps,
                                                       normalize, stats, device, pin_memory)]
        spans = [t for t in transforms if isinstance(t, WindowTransform)]
        if len(spans) > 1:
            raise ArgumentError(f"transforms {spans} each say what a sample spans: give one")
        plan = spans[0].plan_args() if spans else {}
        if source is None:
            if where is None:
                raise ArgumentError("StreamingDataset: give a store (or its path), "
                                    "or source=Source(store, ...)")
            source = Source(where, table, columns=columns, filter=filter, layout=layout, version=version)
        else:
            _only("source", {"store": where is not None, "table": table != "steps",
                             "columns": columns is not None, "filter": filter is not None,
                             "layout": layout is not None, "version": version is not None})
        planned = source.plan(**plan) if isinstance(source, Source) else source
        if not isinstance(planned, SampleSource):
            raise ArgumentTypeError(f"source: give a rlarrow.train.source.Source, "
                                    f"not a {type(source).__name__}")
        if plan and not isinstance(source, Source):
            raise ArgumentError(f"{spans[0]} plans the reading: give source=Source(...), not a SampleSource")
        #: the reader of the row groups (:class:`~rlarrow.train.samples.SampleSource`)
        self.source = planned
        #: the store version this dataset reads: the one whose files it listed (record it with
        #: the run: ``version=`` reads exactly these rows again); None for a remote store
        self.version: int | None = self.source.version
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._ring: _Ring | None = None  # a DataLoader worker's shared-memory blocks
        self._tag_worker = False
        #: the transforms of the gathered NumPy columns (bound :class:`Normalize` among them)
        self.batch_transforms: list[Any] = []
        #: the statistics ``normalize`` applies (``{column: ColumnStats}``; None: no normalisation)
        self.stats: dict[str, Any] | None = None
        self._move = ToDevice()
        for t in transforms:
            if isinstance(t, Normalize):
                if self.stats is not None:
                    raise ArgumentError("two Normalize transforms: give one (its mode may map "
                                        "columns to modes)")
                store_ = source.store if isinstance(source, Source) else None
                t = t.bind(self.source.columns, store_, layout=getattr(source, "layout", None),
                           version=self.version)
                self.stats = t.stats
                self.batch_transforms.append(t)
            elif isinstance(t, ToDevice):
                self._move = t
            elif callable(t) and not isinstance(t, WindowTransform):
                self.batch_transforms.append(t)
            elif not isinstance(t, WindowTransform):
                raise ArgumentTypeError(f"transforms: {t!r} is not a transform (rlarrow.train.transforms), "
                                        "nor a function of a batch's NumPy columns")

    # (settings of the sampler and transforms, under their old names)
    seed = property(lambda self: self.sampler.seed, doc="The sampler's seed.")
    rank = property(lambda self: self.sampler.rank, doc="The sampler's rank (None: torch.distributed's).")
    world_size = property(lambda self: self.sampler.world_size, doc="The sampler's world size.")
    device = property(lambda self: self._move.device, doc="Where batches go (:class:`ToDevice`).")
    pin_memory = property(lambda self: self._move.pin_memory, doc="Whether batches are pinned first.")

    @property
    def shuffle(self) -> bool:
        """Whether the sampler shuffles; set it to change the sampler's kind (its state kept)."""
        return self.sampler.shuffle

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        if bool(value) != self.sampler.shuffle:
            old = self.sampler
            kind = ShuffleSampler if value else SequentialSampler
            self.sampler = kind(seed=old.seed, buffer_rows=old.buffer_rows, rank=old.rank,
                                world_size=old.world_size)
            for name in ("epoch", "resume", "delivered", "ledger", "readers", "rest", "rest_readers",
                         "rest_resumed"):
                setattr(self.sampler, name, getattr(old, name))

    @property
    def buffer_rows(self) -> int:
        """Samples mixed at a time (at least a batch)."""
        return max(self.sampler.buffer_rows, self.batch_size)

    @property
    def epoch(self) -> int:
        """The epoch the sampler orders (:meth:`set_epoch`)."""
        return self.sampler.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.sampler.epoch = value

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ring"] = None  # (each worker makes its own)
        return state

    # ---- epochs and resuming (kept by the sampler)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently (and deterministically) for ``epoch``; clears a resume point."""
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: the epoch, the batches delivered per reader, and which samples.

        Counted by the dataset itself in one process, or by :class:`DataLoader` with workers.
        Under ``torch.distributed`` each rank's state holds its own readers' samples: save
        every rank's (``torch.distributed.all_gather_object``) to resume at another world size.
        See :meth:`rlarrow.train.sampling.Sampler.state_dict`.
        """
        return {**self.sampler.state_dict(), "units": len(self.units)}

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Continue after what ``state`` (or a list: every rank's) says was delivered.

        Same data and seed: with the same readers, each continues where it stopped; with other
        readers (world size, workers), what is left is shared again and every sample not yet
        seen is delivered once (:meth:`rlarrow.train.sampling.Sampler.load_state_dict`).
        """
        for one in [state] if isinstance(state, dict) else state:
            if one.get("units", len(self.units)) != len(self.units):
                raise ArgumentError(f"the state was saved over {one['units']} row groups, this dataset reads "
                                    f"{len(self.units)}: resume on the store version it was saved at "
                                    "(version=)")
        self.sampler.load_state_dict(state)

    # ---- reading

    @property
    def units(self) -> list[Unit]:
        """The row groups read, in storage order."""
        return self.source.units

    @property
    def columns(self) -> list[str]:
        """The columns read (for transitions: the steps' columns they are made of)."""
        return self.source.columns

    def _batches(self) -> Iterator[dict[str, np.ndarray]]:
        return self.sampler.batches(self.source, self.batch_size, drop_last=self.drop_last)

    def _plans(self, rest: Any = None) -> Iterator[tuple[Windows, np.ndarray]]:
        """Each batch as the buffer it comes from and the windows it takes (:meth:`Sampler.plans`)."""
        return self.sampler.plans(self.source, self.batch_size, drop_last=self.drop_last, rest=rest)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        cell = self.__dict__.get("_epoch_cell")
        if cell is not None and torch.utils.data.get_worker_info() is not None:
            self.epoch = int(cell[0])  # (a persistent worker's copy: the epoch the loader was asked for)
        if self._ring is not None:
            # A persistent worker's new iteration: torch discarded the messages it had sent
            # ahead and not delivered (their blocks are never released, and a discarded first
            # message announced blocks): a ring the main process has not seen, with the
            # released blocks of the old one.
            self._ring = self._ring.renewed()
        index, readers = self.sampler.reader()
        skip, rest = self.sampler.resume_point(index, readers)
        self.sampler.resume.pop(index, None)
        if torch.utils.data.get_worker_info() is not None:
            self.sampler.rest = None  # (a persistent worker's next epochs are whole: used once, as counts)
        self.sampler.readers = readers
        if not self._tag_worker:  # (this process counts what it delivers)
            self.sampler.start_pass(bool(skip) or rest is not None)
        n = 0
        # Batches are gathered a parcel at a time (up to _PARCEL_BATCHES of one buffer): one
        # take per column for all of them, then split into views. Per batch that was a take,
        # a tensor and a dict per column: in a worker, 0.4 us of Python per row-group row.
        parcel: list[tuple[Windows, np.ndarray]] = []
        parcel_bytes = 0  # (kept as it grows: summing the parcel at each batch was a tenth of a worker)
        worker = self._tag_worker
        for plan in self._plans(rest):
            n += 1
            if n <= skip:
                continue
            if parcel and parcel[-1][0] is not plan[0]:  # (the plans of one buffer at a time)
                yield from self._parcel(parcel, index, n - 1, worker)
                parcel, parcel_bytes = [], 0
            parcel.append(plan)
            parcel_bytes += len(plan[1]) * plan[0].window_bytes()
            if len(parcel) >= _PARCEL_BATCHES or parcel_bytes >= _PARCEL_BYTES:
                yield from self._parcel(parcel, index, n, worker)
                parcel, parcel_bytes = [], 0
        if parcel:
            yield from self._parcel(parcel, index, n, worker)

    def _parcel(self, plans: list[tuple[Windows, np.ndarray]], index: int, last: int,
                worker: bool) -> Iterator[dict[str, Any]]:
        """Batches ``plans`` (the last of them the ``last``-th of this reader's epoch), gathered at once.

        To a DataLoader's main process (``worker``): one message. Here: each batch, as views
        of the parcel's columns.
        """
        origins = plans[0][0].origins
        sizes = [len(which) for _, which in plans]
        joined = origins[_joined(plans)] if origins is not None else np.zeros(0, np.int64)
        if worker:
            yield {**self._pack(plans, index), "_rlarrow_origins": joined, "_rlarrow_sizes": sizes,
                   "_rlarrow_totals": plans[0][0].totals, "_rlarrow_readers": self.sampler.readers}
            return
        first = last - len(plans)
        self.sampler.ledger.message(joined, sizes, plans[0][0].totals, index)
        for i, batch in enumerate(_split(self._gathered(plans), sizes, _tensor)):
            self.sampler.delivered[index] = first + i + 1
            self.sampler.ledger.delivered()
            yield self._move(batch)

    def _gathered(self, plans: list[tuple[Windows, np.ndarray]]) -> dict[str, np.ndarray]:
        """The columns of batches ``plans`` (of one buffer), one batch after the other, normalised.

        (Normalising is elementwise: the same on the parcel as on each batch.)
        """
        gathered = plans[0][0].gather(_joined(plans))
        for transform in self.batch_transforms:  # (Normalize puts FILL back at padded positions)
            gathered = transform(gathered)
        return gathered

    def _pack(self, plans: list[tuple[Windows, np.ndarray]], reader: int) -> dict[str, Any]:
        """A worker's batches for the main process: gathered at once into one shared-memory block.

        Each column of the parcel is one array there (the batches one after the other): the
        main process makes one tensor a column and splits it (see :func:`_unpack`).
        """
        buf = plans[0][0]
        sizes = [len(which) for _, which in plans]
        if torch.utils.data.get_worker_info() is None:  # num_workers=0: this is the main process
            return {"_rlarrow_batches": _split(self._gathered(plans), sizes, _tensor),
                    "_rlarrow_reader": reader}
        if self.batch_transforms or any(v.dtype == object for v in buf.base.values()):
            return _pack(self._gathered(plans), sizes, reader)
        windows = sum(sizes)
        arrays = len(buf.base) * 2 + 2 + len(buf.deltas or {})
        size = windows * buf.window_bytes() + arrays * 64 + 64
        if self._ring is None:
            self._ring = _Ring()
        slot, block = self._ring.block(size)
        memory = block.numpy()
        used = 0
        overflow = False
        # each array place() made and where it starts in the block, by id (the array is kept
        # here, so its id cannot be reused); asking for an address (.ctypes) cost 1 us a column
        placed_at: dict[int, tuple[np.ndarray, int]] = {}

        def place(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
            nonlocal used, overflow
            nbytes = math.prod(shape) * dtype.itemsize  # (np.prod of a tuple: 4 us)
            if used + nbytes > size:  # (the estimate is an upper bound: never here; if it were
                overflow = True  # wrong, the parcel goes the copying way below)
                return np.empty(shape, dtype)
            out: np.ndarray = memory[used:used + nbytes].view(dtype).reshape(shape)
            placed_at[id(out)] = (out, used)
            used += -(-nbytes // 64) * 64
            return out

        gathered = buf.gather(_joined(plans), out=place)
        columns = {}
        for k, v in gathered.items():
            hit = placed_at.get(id(v))
            if hit is None or hit[0] is not v:  # made apart (a flag): copy it in
                placed = place(v.shape, v.dtype)
                placed[...] = v
                hit = placed_at.get(id(placed), (placed, -1))  # (-1: overflow, not sent)
            columns[k] = (hit[1], v.dtype.str, v.shape)
        if overflow:  # (the block was not sent: its slot stays free)
            return _pack({k: np.array(v) for k, v in gathered.items()}, sizes, reader)
        return {"_rlarrow_columns": columns, "_rlarrow_sizes": sizes, "_rlarrow_reader": reader,
                **self._ring.sent(slot, block)}


def _joined(plans: list[tuple[Windows, np.ndarray]]) -> np.ndarray:
    """The windows of several batches of one buffer, one batch after the other."""
    return plans[0][1] if len(plans) == 1 else np.concatenate([which for _, which in plans])


def _split(columns: Mapping[str, Any], sizes: list[int], wrap: Any) -> list[dict[str, Any]]:
    """Batches of ``sizes`` rows from the columns of several (each ``wrap``-ped, then split into views)."""
    if not columns:
        return [{} for _ in sizes]
    if len(sizes) == 1:
        return [nest({k: wrap(v) for k, v in columns.items()})]
    cuts = np.cumsum(sizes[:-1]).tolist()
    parts = []
    for v in columns.values():
        t = wrap(v)
        # (a tensor's split makes its views in C: 0.6 us a batch against 2.5 for a slice each)
        parts.append(t.split(sizes) if isinstance(t, torch.Tensor) else np.split(t, cuts))  # type: ignore[no-untyped-call]
    keys = list(columns)
    return [nest(dict(zip(keys, row, strict=True))) for row in zip(*parts, strict=True)]


# Batches a DataLoader worker sends at once: each message crossing processes costs about a
# millisecond, whatever its size; and at most about this many bytes (the worker's blocks).
# 64 rather than 16: 2 workers streamed 10M steps rows at 2.3M rows/s against 2.0M.
_PARCEL_BATCHES = 64
_PARCEL_BYTES = 16 << 20
# Shared-memory blocks a worker writes its parcels into, round robin: reused once the main
# process no longer uses any batch of one (see _Lease). Fresh shared memory costs a page
# fault per 4 KB on first touch, in the worker and again in the main process: measured,
# 11.9 ms to fill a fresh 10.5 MB block against 0.9 ms to refill one, which held two
# workers to a third of one process.
_RING_BLOCKS = 6  # (more than the messages a loader asks ahead of a worker: prefetch_factor 4)


class _Ring:
    """A worker's shared-memory blocks, and which of them the main process has released.

    Each block is sent with the count of parcels sent in it; when the main process no longer
    holds any batch made from it, it writes that count into ``released`` (a small shared
    tensor sent along), and the block is written again only then. A block not released yet is never waited
    for: a fresh one is used instead (the main process may have stopped reading).
    """

    def __init__(self) -> None:
        self.blocks: list[Any] = []
        self.sent_count: list[int] = []
        self.released = torch.zeros(_RING_BLOCKS, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._released = self.released.numpy()  # (read through NumPy: a torch index is 5 us)
        self.next = 0
        self.id = os.urandom(8).hex()  # the main process maps each block once, by (id, slot)
        self.announced: set[int] = set()  # slots whose current block the main process has

    def renewed(self) -> _Ring:
        """A ring of a new id, keeping the blocks of this one the main process released."""
        ring = _Ring()
        for slot, block in enumerate(self.blocks):
            if block is not None and int(self._released[slot]) == self.sent_count[slot]:
                ring.blocks.append(block)
            else:  # (still held, or sent in a message torch discarded: left to the main process)
                ring.blocks.append(None)
            ring.sent_count.append(0)
        return ring

    def block(self, size: int) -> tuple[int, Any]:
        """A block of at least ``size`` bytes free to write, and its slot (-1: not in the ring)."""
        for _ in range(_RING_BLOCKS):
            slot = self.next
            self.next = (self.next + 1) % _RING_BLOCKS
            if slot >= len(self.blocks):
                self.blocks.append(_shared(size))
                self.sent_count.append(0)
                return slot, self.blocks[slot]
            if int(self._released[slot]) == self.sent_count[slot]:
                if self.blocks[slot] is None or self.blocks[slot].numel() < size:
                    self.blocks[slot] = _shared(size)
                    self.announced.discard(slot)
                return slot, self.blocks[slot]
        return -1, _shared(size)

    def sent(self, slot: int, block: Any) -> dict[str, Any]:
        """What the message of a block carries: the block itself, or (sent before) its slot.

        Sending a shared tensor passes its file descriptor through a socket, about a
        millisecond in each process: a block (and ``released``) crosses once.
        """
        if slot < 0:
            return {"_rlarrow_packed": block}
        self.sent_count[slot] += 1
        out = {"_rlarrow_ring": self.id, "_rlarrow_slot": slot, "_rlarrow_count": self.sent_count[slot]}
        if not self.announced:
            out["_rlarrow_released"] = self.released
        if slot not in self.announced:
            out["_rlarrow_packed"] = block
            self.announced.add(slot)
        return out


def _shared(size: int) -> Any:
    """A byte tensor in shared memory from the start (torch would copy an ordinary one there)."""
    storage = torch.UntypedStorage._new_shared(size)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _pack(columns: dict[str, np.ndarray], sizes: list[int], reader: int) -> dict[str, Any]:
    """Batches of ``sizes`` rows from ``columns``, copied into one byte tensor (one shared segment)."""
    if any(v.dtype == object for v in columns.values()):  # text: no bytes to share
        return {"_rlarrow_batches": _split(columns, sizes, _tensor),
                "_rlarrow_reader": reader}
    layout: dict[str, tuple[int, str, tuple[int, ...]]] = {}
    offset = 0
    for k, v in columns.items():
        layout[k] = (offset, v.dtype.str, v.shape)
        offset += -(-v.nbytes // 64) * 64
    buf = np.empty(offset, dtype=np.uint8)
    for k, v in columns.items():
        start = layout[k][0]
        buf[start:start + v.nbytes].view(v.dtype).reshape(v.shape)[...] = v
    return {"_rlarrow_packed": torch.from_numpy(buf), "_rlarrow_columns": layout, "_rlarrow_sizes": sizes,
            "_rlarrow_reader": reader}


class _Lease:
    """What every batch of one ring block's message holds on to.

    The block is released to its worker (to be rewritten) only when the last array or
    tensor made from it is gone.

    NumPy makes a view's ``base`` the first object that is not an array, so arrays made from
    a lease all keep the lease itself alive, whatever views of views the user takes.
    """

    def __init__(self, memory: np.ndarray) -> None:
        self.memory = memory
        self.__array_interface__ = memory.__array_interface__


def _release(released: np.ndarray, slot: int, count: int) -> None:
    released[slot] = count  # (a NumPy view of the shared counters: a torch setitem took 160 us)


def _unpack(message: dict[str, Any], held: dict[tuple[str, int], Any] | None = None) -> list[dict[str, Any]]:
    """A worker's message as batches of tensors.

    ``held`` keeps the ring blocks (and release counters) the workers sent once, by ring
    and slot: later messages name them.
    """
    if "_rlarrow_batches" in message:
        return list(message["_rlarrow_batches"])
    if "_rlarrow_slot" in message:  # a ring block: the worker rewrites it once nothing here uses it
        held = {} if held is None else held
        ring, slot = message["_rlarrow_ring"], int(message["_rlarrow_slot"])
        reader = ("reader", int(message["_rlarrow_reader"]))
        if held.get(reader) != ring:  # (a worker's new ring: its old one is no longer named)
            for key in [k for k in held if k[0] == held.get(reader)]:
                del held[key]  # (batches still alive keep their blocks through their leases)
            held[reader] = ring
        if "_rlarrow_released" in message:
            held[ring, -1] = message["_rlarrow_released"].numpy()
        if "_rlarrow_packed" in message:
            held[ring, slot] = message["_rlarrow_packed"]
        lease = _Lease(held[ring, slot].numpy())
        weakref.finalize(lease, _release, held[ring, -1], slot, message["_rlarrow_count"])
        buf = np.asarray(lease)  # (its views' base is the lease itself)
    else:
        buf = message["_rlarrow_packed"].numpy()
    columns = {}
    for k, (start, dtype, shape) in message["_rlarrow_columns"].items():
        dt = np.dtype(dtype)
        columns[k] = buf[start:start + math.prod(shape) * dt.itemsize].view(dt).reshape(shape)
    return _split(columns, message["_rlarrow_sizes"], torch.from_numpy)


def _as_is(item: Any) -> Any:
    return item


def _tensor(value: np.ndarray) -> Any:
    """A tensor sharing ``value``'s memory; text columns stay NumPy (torch has no strings)."""
    return torch.from_numpy(value) if value.dtype != object else value


class DataLoader(torch.utils.data.DataLoader[dict[str, Any]]):
    """A ``torch.utils.data.DataLoader`` for :class:`StreamingDataset` that keeps count.

    Batches are made by the dataset (``batch_size=None`` here). The loader counts what each
    worker delivered, so ``dataset.state_dict()`` resumes exactly, and moves batches to the
    dataset's ``device`` in the main process (pinned first when the dataset's or the
    loader's ``pin_memory`` is true and CUDA is there: the loader pins each batch itself,
    not torch's pin thread, which would copy the workers' whole shared blocks).

    Workers are persistent by default (``persistent_workers=True`` when ``num_workers`` > 0,
    and ``prefetch_factor=4``):
    an epoch in a fresh worker streamed at half the speed of the next ones (its memory is
    new, page by page). ``dataset.set_epoch(e)`` reaches them (torch sends a persistent
    worker nothing of the dataset again); a resume point set with ``load_state_dict``
    starts new ones. Other settings of the dataset changed after its first epoch
    (``batch_size``, ``shuffle``, ``filter``, ...) do not reach running workers: make a new
    loader for them.
    """

    def __init__(self, dataset: StreamingDataset, **kwargs: Any) -> None:
        kwargs.setdefault("batch_size", None)
        if kwargs["batch_size"] is not None:
            raise ArgumentError("StreamingDataset makes its own batches: leave batch_size to it")
        # The dataset's items are already tensors (or a worker's message about them): torch's
        # default_convert walked every message's layout, a fifth of a worker's time
        kwargs.setdefault("collate_fn", _as_is)
        # pinned here, batch by batch after unpacking, as the dataset's pin_memory does: torch's
        # pin thread copied each message's whole shared block, so the blocks were never
        # released to their workers and each message after the ring's took a fresh one
        self._pin = bool(kwargs.pop("pin_memory", False))
        kwargs.pop("pin_memory_device", None)
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("persistent_workers", True)
            # 4 messages asked ahead of each worker, not torch's 2: a worker whose next message
            # waits behind its sibling's (torch delivers in order) then still has work. Warm
            # epochs of 10M steps rows, 8 runs each: median 4.7M rows/s against 4.2M. Within
            # the ring (_RING_BLOCKS): 8 ahead overflowed it into fresh blocks, 3.3-4.2M.
            kwargs.setdefault("prefetch_factor", 4)
            cell = dataset.__dict__.get("_epoch_cell")
            if cell is None or not cell.is_shared():  # (shared memory: a forked worker sees it change;
                # a copied or unpickled dataset's cell is its own)
                dataset.__dict__["_epoch_cell"] = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        super().__init__(dataset, **kwargs)
        # workers' shared-memory blocks, by ring and slot: each crosses once and stays mapped
        # (persistent workers keep their rings from one epoch to the next)
        self._held: dict[tuple[str, int], Any] = {}

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds = self.dataset
        assert isinstance(ds, StreamingDataset)
        cell = ds.__dict__.get("_epoch_cell")
        if cell is not None:
            cell[0] = ds.epoch
        if self.persistent_workers and (ds.sampler.resume or ds.sampler.rest is not None):
            self._iterator = None  # (running workers would not skip what a resume point says: new ones)
        move = ds._move if not self._pin or ds.pin_memory else ToDevice(ds.device, pin_memory=True)
        ds.sampler.start_pass(bool(ds.sampler.resume) or ds.sampler.rest is not None)
        ds._tag_worker = True
        try:
            for message in super().__iter__():
                reader = int(message["_rlarrow_reader"])
                ds.sampler.readers = message["_rlarrow_readers"]
                ledger = ds.sampler.ledger
                ledger.message(message["_rlarrow_origins"], message["_rlarrow_sizes"],
                               message["_rlarrow_totals"], reader)
                for batch in _unpack(message, self._held):
                    ds.sampler.delivered[reader] = ds.sampler.delivered.get(reader, 0) + 1
                    ledger.delivered()
                    yield move(batch)
        finally:
            ds._tag_worker = False


def _only(part: str, others: Mapping[str, bool]) -> None:
    """``part=`` holds these settings: an error naming those given beside it."""
    both = [name for name, given in others.items() if given]
    if both:
        raise ArgumentError(f"{part}= holds {', '.join(both)}: give them to the {part} "
                            f"(rlarrow.train.{'source' if part == 'source' else 'sampling'}), not beside it")


def _legacy_transforms(sequence_length: int, delta_steps: Mapping[str, Sequence[int]] | None,
                       delta_timestamps: Mapping[str, Sequence[float]] | None, fps: float | None,
                       normalize: str | Mapping[str, str] | None, stats: Mapping[str, Any] | None,
                       device: Any, pin_memory: bool) -> list[Any]:
    """The transforms the keyword arguments of :class:`StreamingDataset` before ``transforms=`` ask for."""
    out: list[Any] = []
    _arguments.integer(sequence_length, "sequence_length", minimum=1)
    if fps is not None:
        _arguments.number(fps, "fps", minimum=0, above=True)
    for argument, deltas in (("delta_steps", delta_steps), ("delta_timestamps", delta_timestamps)):
        if deltas is not None:
            check_offsets(deltas, argument)
    if delta_timestamps is not None and delta_steps is not None:
        raise ArgumentError("give delta_steps (in steps) or delta_timestamps (in seconds, with fps), "
                            "not both")
    if (delta_steps is not None or delta_timestamps is not None) and sequence_length != 1:
        raise ArgumentError("delta_steps and sequence_length are two ways to ask for steps around a sample: "
                            "give one (sequence_length=L is delta_steps {column: range(L)} for every column)")
    if delta_timestamps is not None:
        out.append(DeltaTimestamps(delta_timestamps, fps if fps is not None else 0.0))
    elif delta_steps is not None:
        out.append(DeltaSteps(delta_steps))
    elif sequence_length != 1:
        out.append(SequenceWindow(sequence_length))
    if normalize is not None:
        out.append(Normalize(normalize, stats=stats))
    elif stats is not None:
        raise ArgumentError("stats= is what normalize= applies: give normalize='mean_std' "
                            "(or another mode) too")
    if device is not None or pin_memory:
        out.append(ToDevice(device, pin_memory))
    return out
