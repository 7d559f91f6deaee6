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
  epoch and how many batches each worker has delivered; iterate through
  :class:`DataLoader` (a ``torch.utils.data.DataLoader`` that keeps count) to resume
  mid-epoch with workers, exactly where it stopped.

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
import pyarrow.parquet as pq

from rlarrow.core import arguments as _arguments
from rlarrow.core.deps import require
from rlarrow.core.errors import ArgumentError, ArgumentTypeError
from rlarrow.core.padding import fill

require("torch", feature="rlarrow.train.torch")  # names the extra when torch is missing
import torch  # noqa: E402

from rlarrow.train.samples import (  # noqa: E402
    SampleSource,
    Unit,
    Windows,
    delta_steps_of,
    nest,
)
from rlarrow.train.table import TableDataset  # noqa: E402

if TYPE_CHECKING:
    from rlarrow.core.remote import RemoteStore
    from rlarrow.core.store import StoreLike, StoreReader

__all__ = ["DataLoader", "StreamingDataset", "TableDataset"]

def _shard(rank: int | None = None, world: int | None = None) -> tuple[int, int]:
    """(index, count) of this reader among all DataLoader workers of all ranks."""
    if rank is None or world is None:
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    info = torch.utils.data.get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * workers + worker, world * workers


class StreamingDataset(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Stream batches of a store's table as dicts of tensors.

    Args:
        store: a :class:`~rlarrow.Store` or its path.
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
        delta_steps: each frame (a step with an action: LeRobot's frames; an episode's
            final-observation row is none) is a sample with these rows of its episode around
            it, per column (LeRobot's ``delta_timestamps``, in steps): ``{"observation": [-1, 0],
            "action": range(16)}`` gives ``observation`` as ``(B, 2, ...)`` (the step before
            and the step) and ``action`` as ``(B, 16, ...)`` (an action chunk), and for each
            a mask ``observation_is_pad`` ``(B, 2)``: true where the offset falls outside the
            episode or on a row null in the column (the last step's action), whose value
            there is the episode's first (or last) one, as LeRobot pads. A dict column's
            leaves (``"observation.state"``) may be named alone (the mask is then
            ``batch["observation"]["state_is_pad"]``); other columns come at the step itself.
            Padding is never data (:mod:`rlarrow.core.padding`, ``docs/format.md``
            "Training samples"): on ``steps``, every nullable column read (``observation``,
            ``action``, ``reward``, ``discount``) comes with ``<column>_is_pad`` in rows and
            windows too, a null position holds 0, and ``transitions`` leave out the rows
            that are none (null observation or action) and keep a transition whose next
            observation is null (an episode's last in a LeRobot import or a same-step
            autoreset memory) with ``next_observation_is_pad`` true.
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
        store: StoreLike | RemoteStore,
        table: str = "steps",
        *,
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
        from rlarrow.core.store import Store, as_store

        super().__init__()
        _arguments.integer(batch_size, "batch_size", minimum=1)
        _arguments.integer(buffer_rows, "buffer_rows", minimum=1)
        _arguments.integer(sequence_length, "sequence_length", minimum=1)
        columns = _arguments.names(columns, "columns", what="column name")
        if world_size is not None:
            _arguments.integer(world_size, "world_size", minimum=1)
        if rank is not None:
            _arguments.integer(rank, "rank", minimum=0)
        if fps is not None:
            _arguments.number(fps, "fps", minimum=0, above=True)
        for arg, deltas in (("delta_steps", delta_steps), ("delta_timestamps", delta_timestamps)):
            if deltas is not None and (not isinstance(deltas, Mapping) or any(
                    isinstance(v, (str, bytes)) or not isinstance(v, Sequence) for v in deltas.values())):
                raise ArgumentTypeError(f"{arg}: give a mapping of column names to lists of offsets, e.g. "
                                        f"{{'action': [0, 1, 2]}}, not {deltas!r:.80}")
        if (rank is None) != (world_size is None) or (
                rank is not None and world_size is not None and not 0 <= rank < world_size):
            raise ArgumentError(f"rank {rank} of world_size {world_size}: give both, 0 <= rank < world_size")
        self.rank, self.world_size = rank, world_size
        st: StoreReader
        if isinstance(store, (Store, str, os.PathLike)):
            st = as_store(store, readonly=True, version=version)
        else:  # a RemoteStore (or another StoreReader): read as it is
            st = store
        if delta_timestamps is not None:
            if delta_steps is not None:
                raise ArgumentError("give delta_steps (in steps) or delta_timestamps (in seconds, with fps), "
                                    "not both")
            delta_steps = delta_steps_of(delta_timestamps, fps if fps is not None else 0.0)
        self.source = SampleSource.from_store(st, table, columns=columns, filter=filter,
                                              sequence_length=sequence_length, layout=layout,
                                              delta_steps=delta_steps)
        #: the store version this dataset reads: the one whose files it listed (record it with
        #: the run: ``version=`` reads exactly these rows again); None for a remote store
        self.version: int | None = self.source.version if isinstance(st, Store) else None
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.buffer_rows = max(buffer_rows, batch_size)
        self.drop_last = drop_last
        self.seed = seed
        self.device = device
        self.pin_memory = pin_memory
        self.epoch = 0
        self._resume: dict[int, int] = {}
        self._delivered: dict[int, int] = {}
        self._tag_worker = False
        self._ring: _Ring | None = None  # a DataLoader worker's shared-memory blocks
        #: the statistics ``normalize`` applies (``{column: ColumnStats}``; None: no normalisation)
        self.stats: dict[str, Any] | None = None
        self._normalize: Any = None
        if normalize is not None:
            self._normalize = self._normalizer(st, normalize, stats, layout)
        elif stats is not None:
            raise ArgumentError("stats= is what normalize= applies: give normalize='mean_std' "
                                "(or another mode) too")

    def _normalizer(self, st: StoreReader, normalize: str | Mapping[str, str],
                    given: Mapping[str, Any] | None, layout: int | None) -> Any:
        from rlarrow.core.stats import ColumnStats
        from rlarrow.core.store import Store
        from rlarrow.train.normalize import normalizer

        if given is None:
            if not isinstance(st, Store):
                raise ArgumentError("normalize= on a remote store needs stats= (computed where the store is: "
                                    "rlarrow.query.dataset_stats.stats(path))")
            from rlarrow.query.dataset_stats import stats as store_stats

            wants_quantiles = normalize == "quantile" or (
                isinstance(normalize, Mapping) and "quantile" in normalize.values())
            given = store_stats(st, quantiles=wants_quantiles, layout=layout, version=self.version)
        for name, value in given.items():
            if not isinstance(value, ColumnStats):
                raise ArgumentTypeError(f"stats[{name!r}] is a {type(value).__name__}, not a ColumnStats")

        def leaves(column: str) -> list[str]:  # a column's statistics: itself, or its dict leaves
            return [n for n in given if n == column or n.startswith(column + ".")]

        # (transitions read the steps' columns; their next_observation is an observation too)
        read = {c.split(".")[0] for c in self.source.columns}
        modes: dict[str, Any] = {}
        if isinstance(normalize, Mapping):
            for column, mode in normalize.items():
                found = leaves(column)
                if not found:
                    raise ArgumentError(f"normalize: no statistics of {column!r} (the store has statistics "
                                        f"of {sorted(given)}; wider columns such as images have none stored)")
                modes.update(dict.fromkeys(found, mode))
        else:
            for column in ("observation", "action"):
                if column in read:
                    found = leaves(column)
                    if not found:
                        raise ArgumentError(
                            f"normalize={normalize!r}: the statistics given have nothing of {column!r} "
                            f"(they hold {sorted(given)}); name the columns to normalise instead: "
                            f"normalize={{'action': {normalize!r}}}")
                    modes.update(dict.fromkeys(found, normalize))
            if not modes:
                raise ArgumentError(f"normalize={normalize!r}: none of the columns read "
                                    f"({self.source.columns}) has statistics (the store has statistics of "
                                    f"{sorted(given)})")
        for name, mode in modes.items():
            if mode == "quantile" and not given[name].has_quantiles:
                raise ArgumentError(f"normalize: {name!r} has no quantiles (its statistics were kept "
                                    "without sketches: store.step_stats = 'moments', or datasketches "
                                    "missing: pip install 'rlarrow[stats]'); use 'mean_std' or 'min_max'")
        self.stats = {c: given[c] for c in modes}
        chosen = dict(self.stats)
        for name in list(chosen):  # transitions: the next observation takes the observation's
            if name == "observation" or name.startswith("observation."):
                chosen["next_" + name] = chosen[name]
                modes["next_" + name] = modes[name]
        return normalizer(chosen, modes)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ring"] = None  # (each worker makes its own)
        return state

    # ---- epochs and resuming

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently (and deterministically) for ``epoch``; clears a resume point."""
        self.epoch = epoch
        self._resume = {}
        self._delivered = {}

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: the epoch and the batches delivered per reader.

        Counted by the dataset itself in one process, or by :class:`DataLoader` with workers.
        """
        return {"epoch": self.epoch, "delivered": dict(self._delivered), "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the batches ``state`` counts (same data, seed and workers)."""
        if state.get("seed", self.seed) != self.seed:
            raise ArgumentError(f"the state was saved with seed {state['seed']}, "
                                f"this dataset has {self.seed}")
        self.epoch = int(state["epoch"])
        self._resume = {int(k): int(v) for k, v in state["delivered"].items()}
        self._delivered = dict(self._resume)

    # ---- reading

    def _my_units(self) -> tuple[int, list[Unit]]:
        index, count = _shard(self.rank, self.world_size)
        order = list(range(len(self.units)))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.units)).tolist()
        return index, [self.units[i] for i in order[index::count]]

    @property
    def units(self) -> list[Unit]:
        """The row groups read, in storage order."""
        return self.source.units

    @property
    def columns(self) -> list[str]:
        """The columns read (for transitions: the steps' columns they are made of)."""
        return self.source.columns

    def _batches(self) -> Iterator[dict[str, np.ndarray]]:
        for buf, which in self._plans():
            yield buf.gather(which)

    def _plans(self) -> Iterator[tuple[Windows, np.ndarray]]:
        """Each batch as the buffer it comes from and the windows it takes (gathered by the caller).

        A buffer stays valid until the plans of the buffer after it are asked for (two
        alternate in the same memory), so a worker may gather a parcel of them at once.
        """
        index, mine = self._my_units()
        rng = np.random.default_rng([self.seed, self.epoch, index])
        files: dict[str, pq.ParquetFile] = {}
        # the buffer holds rows and window starts (Windows), never whole windows: its memory
        # is about buffer_rows rows whatever sequence_length is, and a batch is one gather
        pending: list[Windows] = []
        count = 0
        bs = self.batch_size
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
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            full = (n // bs) * bs
            for s in range(0, full, bs):
                yield buf, order[s:s + bs]
            count = n - full
            if count:
                rest = order[full:]
                if final and not self.drop_last:
                    yield buf, rest
                    count = 0
                elif not final:
                    pending = [buf.compact(rest)]  # the few windows left, with only their rows
                else:
                    count = 0

        for unit in mine:
            got = self.source.read_windows(unit, files)
            if got is None:
                continue
            pending.append(got)
            count += len(got)
            if count >= self.buffer_rows:
                yield from drain(final=False)
        yield from drain(final=True)

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
        index, _ = _shard(self.rank, self.world_size)
        skip = self._resume.get(index, 0)
        self._resume.pop(index, None)
        n = 0
        # Batches are gathered a parcel at a time (up to _PARCEL_BATCHES of one buffer): one
        # take per column for all of them, then split into views. Per batch that was a take,
        # a tensor and a dict per column: in a worker, 0.4 us of Python per row-group row.
        parcel: list[tuple[Windows, np.ndarray]] = []
        parcel_bytes = 0  # (kept as it grows: summing the parcel at each batch was a tenth of a worker)
        worker = self._tag_worker
        for plan in self._plans():
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
        if worker:
            yield self._pack(plans, index)
            return
        sizes = [len(which) for _, which in plans]
        first = last - len(plans)
        for i, batch in enumerate(_split(self._gathered(plans), sizes, _tensor)):
            self._delivered[index] = first + i + 1
            yield _to_device(batch, self.device, self.pin_memory)

    def _gathered(self, plans: list[tuple[Windows, np.ndarray]]) -> dict[str, np.ndarray]:
        """The columns of batches ``plans`` (of one buffer), one batch after the other, normalised.

        (Normalising is elementwise: the same on the parcel as on each batch.)
        """
        gathered = plans[0][0].gather(_joined(plans))
        if self._normalize is None:
            return gathered
        normalised: dict[str, np.ndarray] = self._normalize(gathered)
        fill(normalised)  # padding is never data: a padded position is FILL again, not (0 - mean) / std
        return normalised

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
        if self._normalize is not None or any(v.dtype == object for v in buf.base.values()):
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


def _to_device(batch: Any, device: Any, pin: bool) -> Any:
    if device is None and not pin:
        return batch
    if isinstance(batch, dict):
        return {k: _to_device(v, device, pin) for k, v in batch.items()}
    if isinstance(batch, torch.Tensor):
        if pin and torch.cuda.is_available():
            batch = batch.pin_memory()
        return batch.to(device, non_blocking=pin) if device is not None else batch
    return batch


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
        if self.persistent_workers and ds._resume:
            self._iterator = None  # (running workers would not skip what a resume point says: new ones)
        ds._tag_worker = True
        try:
            for message in super().__iter__():
                reader = int(message["_rlarrow_reader"])
                for batch in _unpack(message, self._held):
                    ds._delivered[reader] = ds._delivered.get(reader, 0) + 1
                    yield _to_device(batch, ds.device, ds.pin_memory or self._pin)
        finally:
            ds._tag_worker = False
