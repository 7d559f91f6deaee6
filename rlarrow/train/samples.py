"""Training samples from a store's files, torch-free.

The one reader behind ``rlarrow.train.torch`` and ``rlarrow.train.ray``.

A :class:`SampleSource` knows a table's row groups (:class:`Unit`: the unit of sharding and
shuffling) and turns one of them into NumPy columns of samples: rows, windows of
``sequence_length`` consecutive steps of one episode (a window never crosses an episode
boundary, and follows an episode into the next row group or another commit), or
transitions (``observation``/``next_observation``, ``done``, ``truncated``).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rlarrow.core import metadata as _metadata
from rlarrow.core import padding as _padding
from rlarrow.core import transitions as _transitions
from rlarrow.core.errors import ArgumentError, NotFoundError, StoreError
from rlarrow.core.store import Store, StoreReader, layout_number, open_checked
from rlarrow.train.transforms import check_deltas as _check_deltas
from rlarrow.train.transforms import delta_steps_of as delta_steps_of
from rlarrow.train.windows import Windows as Windows

__all__ = ["SampleSource", "Unit"]

# the steps columns transitions are made of (rlarrow.core.transitions defines them)
TRANSITION_COLUMNS = list(_transitions.STEP_COLUMNS)
KEYS = ["run_id", "episode_id", "step"]
_WINDOW_KEYS = [*KEYS, "is_last"]
_VIDEO_KEYS = [*KEYS, "env_index"]  # (what finds a row's frame of a video-layout field)


@dataclass(frozen=True)
class Unit:
    """One row group of one file: the unit of sharding and shuffling."""

    file: str
    group: int
    rows: int
    next_group: int | None  # the following row group of the same file, read ahead for windows
    # min/max statistics of episode_id and step (None: unknown), to find an episode's rows
    episodes: tuple[int, int] | None = None
    steps: tuple[int, int] | None = None

    def may_hold(self, episode: int, step: int) -> bool:
        """Whether the unit's statistics allow this (episode, step)."""
        return ((self.episodes is None or self.episodes[0] <= episode <= self.episodes[1])
                and (self.steps is None or self.steps[0] <= step <= self.steps[1]))


def is_remote(filesystem: Any) -> bool:
    """Whether files on ``filesystem`` are fetched over a network (anything but the local disk)."""
    return filesystem is not None and not isinstance(filesystem, pafs.LocalFileSystem)


def open_file(path: str, filesystem: Any = None, *, metadata: Any = None,
              head: bool = False) -> pq.ParquetFile:
    """A Parquet file of a store, on the local disk or on ``filesystem`` (a pyarrow one).

    Its reads check every page's CRC-32 and raise :class:`~rlarrow.core.errors.CorruptFileError`
    naming the file (:func:`~rlarrow.core.store.checked.open_checked`). ``metadata``: its
    footer, read before (not fetched again). On object storage a read fetches the column
    chunks it needs in a few concurrent requests (``pre_buffer``), and only those; ``head``:
    for reading a row group's first rows, whose first pages only are fetched then.
    """
    remote = is_remote(filesystem)
    if head and remote:
        return open_checked(path, filesystem, metadata=metadata, buffer_size=1 << 16)
    return open_checked(path, filesystem, metadata=metadata, pre_buffer=remote)


#: Footers fetched at once when a stream on object storage is planned.
FOOTER_THREADS = 16


def units(files: Sequence[Any], filesystem: Any = None, footers: dict[str, Any] | None = None) -> list[Unit]:
    """The row groups of ``files``, in order, with their key statistics.

    ``footers``: filled with each file's footer (``FileMetaData``), by path, for readers to
    open the files again without fetching it. On object storage the footers are fetched
    by :data:`FOOTER_THREADS` threads at once (each is a round trip).
    """
    paths = [os.fspath(f) if filesystem is not None else os.path.abspath(f)  # workers' cwd may differ
             for f in files]

    def footer(path: str) -> Any:
        with open_file(path, filesystem) as pf:
            return pf.metadata

    if is_remote(filesystem) and len(paths) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(FOOTER_THREADS, len(paths))) as pool:
            metas = list(pool.map(footer, paths))
    else:
        metas = [footer(f) for f in paths]
    out: list[Unit] = []
    for f, meta in zip(paths, metas, strict=True):
        if footers is not None:
            footers[f] = meta
        names = meta.schema.to_arrow_schema().names
        n = meta.num_row_groups
        for g in range(n):
            rg = meta.row_group(g)
            out.append(Unit(f, g, rg.num_rows, g + 1 if g + 1 < n else None,
                            _min_max(rg, names, "episode_id"), _min_max(rg, names, "step")))
    return out


def _min_max(rg: Any, names: list[str], name: str) -> tuple[int, int] | None:
    if name not in names:
        return None
    stats = rg.column(names.index(name)).statistics
    if stats is None or not stats.has_min_max:
        return None
    return int(stats.min), int(stats.max)


def to_numpy(col: pa.ChunkedArray | pa.Array) -> Any:
    """A column as NumPy (tensors with their shape); nulls in an integer or bool column: 0."""
    from rlarrow.core.tensors import to_numpy as _to_numpy

    try:
        return _to_numpy(col)
    except ValueError:  # nulls in an integer or bool column (the last step's action): 0
        return _to_numpy(col, fill_value=0)


#: Struct columns (dicts of arrays) as ``prefix.key`` entries of ``out``.
flat = _padding.flat


def nest(flat_: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flat`: ``a.b`` keys as nested dicts."""
    if not any("." in key for key in flat_):  # (no dict columns: the common batch)
        return dict(flat_)
    return _metadata.nest(flat_, sep=".")


def is_text(type_: pa.DataType) -> bool:
    """A string column."""
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))


def expression_mask(table: pa.Table, expression: Any) -> np.ndarray:
    """Which rows of ``table`` a pyarrow expression keeps (null counts as false)."""
    marked = table.append_column("__row", pa.array(np.arange(table.num_rows)))
    kept = marked.filter(expression).column("__row").to_numpy()
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[kept] = True
    return mask


def filter_mask(table: pa.Table, filter: Any) -> np.ndarray:  # noqa: A002 - pyarrow's name
    """Rows kept by ``filter``: a pyarrow expression or a SQL predicate over the flat columns."""
    if isinstance(filter, str):
        import duckdb

        flat_cols = table.select([f.name for f in table.schema if not pa.types.is_nested(f.type)
                                  and not isinstance(f.type, pa.ExtensionType)])
        con = duckdb.connect()
        try:
            con.register("t", flat_cols)
            mask = con.sql(f"select coalesce(({filter}), false) as keep from t").fetchnumpy()["keep"]
        finally:
            con.close()
        return np.asarray(mask, dtype=bool)
    return expression_mask(table, filter)


def shared_schema(store: StoreReader, table: str,
                   layouts: list[str]) -> tuple[pa.Schema | None, dict[str, str]]:
    """The columns every layout of ``layouts`` has with the same type, and why each other one is not."""
    found = [(name, store.schema(table, layout=layout_number(name))) for name in layouts]
    schemas = [(name, s) for name, s in found if s is not None]
    if len(schemas) <= 1:
        return (schemas[0][1] if schemas else None), {}
    first = schemas[0][1]
    lacking: dict[str, str] = {}
    for name, s in schemas:
        for f in [*first, *s]:
            if f.name in lacking:
                continue
            if f.name not in s.names or f.name not in first.names:
                where = name if f.name not in s.names else schemas[0][0]
                lacking[f.name] = f"{f.name}: not in {where}/"
            elif s.field(f.name).type != first.field(f.name).type:
                lacking[f.name] = f"{f.name}: other types in {schemas[0][0]}/ and {name}/"
    return pa.schema([f for f in first if f.name not in lacking]), lacking


def _key_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A table's run (as codes), episode and step, as NumPy."""
    runs = table.column("run_id").combine_chunks()
    codes = (runs.dictionary_encode() if not pa.types.is_dictionary(runs.type) else runs).indices
    return (np.asarray(codes.to_numpy(zero_copy_only=False)), table.column("episode_id").to_numpy(),
            table.column("step").to_numpy())


def _follows(run: np.ndarray, ep: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Whether row i + 1 continues row i (same run and episode, the next step); False at the end."""
    out = np.zeros(len(ep), dtype=bool)
    if len(ep) > 1:
        out[:-1] = (ep[1:] == ep[:-1]) & (step[1:] == step[:-1] + 1) & (run[1:] == run[:-1])
    return out


def _laid_out(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Per-row values of a table in the layout's order."""
    return values if order is None else values[order]


def _rows_of(pf: pq.ParquetFile, group: int, columns: list[str], start: int, count: int) -> pa.Table:
    """Rows ``start .. start + count - 1`` of a row group (fewer where it ends).

    Only the pages up to them are decoded: a window's continuation is a few rows of a large
    row group (measured: 9 ms for the first rows of a 40 MB row group, 104 ms for all of it).
    """
    got: list[pa.RecordBatch] = []
    have = 0
    for batch in pf.iter_batches(batch_size=max(1024, min(start + count, 1 << 16)), row_groups=[group],
                                 columns=columns, use_threads=False):
        if start >= batch.num_rows:
            start -= batch.num_rows
            continue
        batch = batch.slice(start, count - have)
        start = 0
        got.append(batch)
        have += batch.num_rows
        if have >= count:
            break
    return pa.Table.from_batches(got) if got else pf.schema_arrow.empty_table().select(columns)


def _under(key: str, name: str) -> bool:
    """Whether flat column ``key`` is ``name`` or one of its dict leaves."""
    return key == name or key.startswith(name + ".")


class SampleSource:
    """What one sample stream reads: its row groups, columns, filter and windows.

    Use :meth:`from_store`; :meth:`read` turns one :class:`Unit` into NumPy columns (flat
    names, ``observation.position`` for struct fields). A source pickles (a few hundred
    bytes per row group), so it travels to DataLoader workers and Ray tasks.
    """

    def __init__(self, units_: list[Unit], columns: list[str], *, filter: Any = None,  # noqa: A002
                 sequence_length: int = 1, transitions: bool = False, filesystem: Any = None,
                 deltas: dict[str, np.ndarray] | None = None, videos: list[str] | None = None,
                 masked: Sequence[str] = (), needs: Sequence[str] = ()) -> None:
        #: the store's ``videos`` files (video-layout cameras, decoded per batch), when read
        self.video_files = list(videos or [])
        self._refs: Any = None  # (a VideoRefs, made where the source reads: not pickled)
        self._video_columns: dict[str, tuple[int, ...]] | None = None  # (the first unit's)
        self.units = units_
        self.columns = columns
        self.filter = filter
        self.sequence_length = sequence_length
        self.transitions = transitions
        #: step offsets per column (flat names): each sample is a row, and these rows of its
        #: episode around it (``delta_steps``)
        self.deltas = deltas
        self.needs_keys = sequence_length > 1 or deltas is not None
        #: columns (or dict leaves) whose samples come with a ``<name>_is_pad`` mask
        #: (:mod:`rlarrow.core.padding`), and columns read only to apply its rule
        self.masked = list(masked)
        self.needs = [c for c in needs if c not in columns]
        self.filesystem = filesystem
        #: row groups read ahead by threads while the caller works on the current one
        #: (:meth:`read_ahead`); 2 on object storage, 0 (none) on the local disk
        self.prefetch = 2 if is_remote(filesystem) else 0
        self._footers: dict[str, Any] = {}  # each file's footer, fetched once (by units(), or open())
        self.lease: Any = None  # a ReaderLease pinning the units' files, when from a local store
        self.version: int | None = None  # the store version of those files (from_store, a local store)
        self._keys: dict[tuple[str, int], pa.Table] = {}  # key columns looked at for the unit being read

    @classmethod
    def from_store(cls, store: StoreReader, table: str = "steps", *, columns: Sequence[str] | None = None,
                   filter: Any = None, sequence_length: int = 1,  # noqa: A002
                   layout: int | None = None,
                   delta_steps: Mapping[str, Sequence[int]] | None = None) -> SampleSource:
        """Plan the samples of ``table`` (``"transitions"``: windows of 2 steps as transitions).

        ``store`` is a :class:`~rlarrow.Store`, or any other
        :class:`~rlarrow.core.store.StoreReader` (:class:`rlarrow.core.remote.RemoteStore`).
        ``layout``: one layout of the table (:meth:`~rlarrow.Store.layouts`); None: all of
        them, whose samples then have the columns every layout has with the same type.

        Raises:
            KeyError: a column the table (or one of the layouts read together) does not have.
            ValueError: windows asked of a table without episodes.
        """
        transitions = table == "transitions"
        source = "steps" if transitions else table
        listed = _list_local(store, source, layout) if isinstance(store, Store) \
            else _list_other(store, source, layout)
        footers: dict[str, Any] = {}
        found = units(listed.files, store.filesystem, footers)
        if transitions:
            if sequence_length != 1:
                raise ArgumentError("transitions are windows of 2 steps already; use table='steps' "
                                    "with sequence_length for longer windows")
            sequence_length = 2
            columns = _transition_columns(columns)
        names = listed.schema.names if listed.schema is not None else []
        chosen = _chosen_columns(store, source, columns, listed)
        if sequence_length > 1 and source != "steps":
            raise ArgumentError("sequence windows need episodes: table='steps' (or 'transitions')")
        deltas = None
        if delta_steps is not None:
            deltas = _check_deltas(delta_steps, table, sequence_length, names, chosen, store.path)
            chosen += [d.split(".")[0] for d in deltas if d.split(".")[0] not in chosen]
        videos: list[str] = []
        if source == "steps" and "observation" in chosen:
            videos = _video_files(store, listed)
        masked: list[str] = []
        needs: list[str] = []
        if source == "steps":  # padding is never data (rlarrow.core.padding)
            masked, needs = _padding_columns(chosen, names, deltas, transitions)
        made = cls(found, chosen, filter=filter, sequence_length=sequence_length,
                   transitions=transitions, filesystem=store.filesystem, deltas=deltas, videos=videos,
                   masked=masked, needs=needs)
        made._footers = footers
        made.lease = listed.lease  # the links live as long as the source (and copies in workers read them)
        #: the store version whose files these are (None: not a local store)
        made.version = listed.version
        return made

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_keys"] = {}
        state["_footers"] = {}  # (a few KB a file: a worker fetches each footer it needs once)
        state["_refs"] = None
        state["_video_columns"] = None
        return state

    def _videos(self, table: pa.Table, base: dict[str, np.ndarray]) -> dict[str, tuple[Any, tuple[int, ...]]]:
        """Add the frame references of the video-layout fields of ``table``'s runs to ``base``."""
        if not self.video_files or "observation" not in self.columns or not table.num_rows:
            return {}
        from rlarrow.core.video import VideoFrames, VideoRefs

        if self._refs is None:
            self._refs = VideoRefs(VideoFrames(self.video_files))
        frames = self._refs.frames
        runs = table.column("run_id").to_numpy(zero_copy_only=False)
        found: dict[str, tuple[Any, tuple[int, ...]]] = {}
        shapes: dict[str, dict[tuple[int, ...], str]] = {}
        for run in dict.fromkeys(runs.tolist()):
            for column in frames.columns(run):
                shapes.setdefault(column, {}).setdefault(frames.shape(run, column), run)
                found.setdefault(column, (self._refs, frames.shape(run, column)))
        seen = {c: s for c, (_, s) in found.items()}
        if self._video_columns is None:
            self._video_columns = seen
        if seen != self._video_columns or any(len(v) > 1 for v in shapes.values()):
            raise StoreError(
                "runs read together keep other cameras in the video layout (fields and frame shapes: "
                f"{self._video_columns} and {seen}); their frames cannot be one batch: read the runs "
                "apart (filter=pyarrow.compute.field('run_id') == ...)")
        for column in found:
            base[column] = self._refs.refs(column, runs, table.column("episode_id").to_numpy(),
                                           table.column("env_index").to_numpy(),
                                           table.column("step").to_numpy())
            # a row without a frame is null there
            _padding.mark_frames(base, column, base[column], self.masked)
        return found

    def _base(self, table: pa.Table) -> dict[str, np.ndarray]:
        """The columns of ``table`` as flat NumPy, and the null rows of the masked ones.

        (Under ``<name>_is_pad``; their nulls at :data:`rlarrow.core.padding.FILL`.)
        """
        base, nulls = _padding.columns(table, self.columns, self.masked)
        base.update(nulls)
        return base

    def open(self, path: str, *, head: bool = False) -> pq.ParquetFile:
        """One of the source's files, on its filesystem (its footer fetched once per process).

        ``head``: to read a row group's first rows (see :func:`open_file`).
        """
        pf = open_file(path, self.filesystem, metadata=self._footers.get(path), head=head)
        self._footers.setdefault(path, pf.metadata)
        return pf

    def read_ahead(self, units_: Sequence[Unit],
                   files: dict[str, pq.ParquetFile]) -> Iterator[Windows | None]:
        """:meth:`read_windows` of each of ``units_``, in order, the next ones read meanwhile.

        With :attr:`prefetch` > 0 (a store on object storage), ``prefetch`` threads read the
        row groups that come next while the caller works on the one handed out, so a training
        step does not wait on the network. At most ``prefetch`` row groups are read and not
        yet handed out: the memory beyond the sampler's buffer is that many row groups (with
        the rows their windows continue into). What comes out, in which order, is what
        reading them one by one gives (each thread reads with its own files and lookups).
        """
        if self.prefetch <= 0 or len(units_) <= 1:
            for unit in units_:
                yield self.read_windows(unit, files)
            return
        from concurrent.futures import Future, ThreadPoolExecutor

        local = threading.local()
        opened: list[dict[str, pq.ParquetFile]] = []

        def read(unit: Unit) -> Windows | None:
            reader = getattr(local, "reader", None)
            if reader is None:  # (a copy per thread: the lookups of read_windows are its own)
                reader = local.reader = copy.copy(self)  # (through __getstate__: footers put back)
                reader._footers = self._footers
                local.files = {}
                opened.append(local.files)
            got: Windows | None = reader.read_windows(unit, local.files)
            return got

        pool = ThreadPoolExecutor(self.prefetch, thread_name_prefix="rlarrow-read-ahead")
        pending: collections.deque[Future[Windows | None]] = collections.deque()
        todo = iter(units_)
        try:
            for unit in todo:
                pending.append(pool.submit(read, unit))
                if len(pending) >= self.prefetch:
                    break
            while pending:
                got = pending.popleft().result()
                for unit in todo:  # (one more in flight, before this one is worked on)
                    pending.append(pool.submit(read, unit))
                    break
                yield got
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            for handles in opened:
                for pf in handles.values():
                    pf.close()

    def read(self, unit: Unit, files: dict[str, pq.ParquetFile]) -> dict[str, np.ndarray] | None:
        """The samples of one row group as NumPy columns (None: the filter kept none).

        Windows come out whole, ``(windows, L, ...)``: :meth:`read_windows` keeps them as
        rows and starts instead, in memory that does not grow with L.
        """
        got = self.read_windows(unit, files)
        return None if got is None else got.gather()

    def read_windows(self, unit: Unit, files: dict[str, pq.ParquetFile]) -> Windows | None:
        """The samples of one row group as :class:`Windows` (None: the filter kept none).

        ``files`` caches the open file between calls (one at a time: a reader keeps what it
        read, which would add up).
        """
        pf = files.get(unit.file)
        if pf is None:
            for old in files.values():
                old.close()
            files.clear()
            pf = files[unit.file] = self.open(unit.file)
        cols = list(dict.fromkeys((_WINDOW_KEYS if self.needs_keys else []) + self.columns
                                  + self.needs
                                  + (_VIDEO_KEYS if self.video_files else [])))
        flt_cols: list[str] = []
        if self.filter is not None:  # filters see the flat columns: never read tensors for them
            flt_cols = [f.name for f in pf.schema_arrow if f.name not in cols
                        and not pa.types.is_nested(f.type) and not isinstance(f.type, pa.ExtensionType)]
        table = pf.read_row_group(unit.group, columns=cols + flt_cols)
        own = table.num_rows
        L = self.sequence_length
        self._keys.clear()  # key columns of row groups searched for this unit's continuations
        keep = np.ones(own, dtype=bool)
        if self.filter is not None and own:
            keep &= filter_mask(table, self.filter)
        if L == 1 and self.deltas is None:
            if not keep.any():
                return None
            if not keep.all():
                table = table.filter(pa.array(keep))
            base = self._base(table)
            return Windows(base, np.arange(table.num_rows, dtype=np.int64), 1, self.transitions,
                           videos=self._videos(table, base))
        if self.deltas is not None and own:  # samples are LeRobot's frames: rows with an action
            keep &= _padding.frames(table)
        if not own or not keep.any():
            return None
        if self.deltas is not None:
            offsets = np.concatenate(list(self.deltas.values()))
            before, after = max(0, -int(offsets.min())), max(0, int(offsets.max()))
        else:
            before, after = 0, L - 1
        table, order, position, follows = self._layout(table, pf, unit.file, cols + flt_cols, before, after)
        chain = np.concatenate([[0], np.cumsum(~follows[:-1])])  # chain[p]: breaks before layout row p
        size = len(chain)
        bounds = None
        if self.deltas is not None:  # every frame is a sample; its episode's rows around it
            first = np.flatnonzero(np.concatenate([[True], follows[:-1] == 0]))
            lo = first[chain]
            hi = np.concatenate([first[1:] - 1, [size - 1]])[chain]
            samples = position[keep]
            # each sample's episode's first and last frame (LeRobot's clamp, where a row is null)
            frame = _laid_out(_padding.frames(table), order)
            at = np.arange(size)
            before_ = np.maximum.accumulate(np.where(frame, at, -1))
            after_ = np.minimum.accumulate(np.where(frame, at, size)[::-1])[::-1]
            lo, hi = lo[samples], hi[samples]
            bounds = (lo, hi, after_[lo], before_[hi])
        else:  # windows of L rows inside one episode
            whole_at = np.zeros(size, dtype=bool)
            if size >= L:
                whole_at[: size - L + 1] = chain[L - 1:] == chain[: size - L + 1]
            if self.transitions:  # a step row with an observation and an action (the next one: masked)
                whole_at[: size - 1] &= _laid_out(_transitions.valid_rows(table), order)[:-1]
            keep &= whole_at[position]
            if not keep.any():
                return None
            samples = position[keep]
        base = self._base(table)
        videos = self._videos(table, base)
        if order is not None:
            base = {k: np.take(v, order, axis=0) for k, v in base.items()}
        if bounds is not None:
            return Windows(base, samples, 1, deltas=self.deltas, bounds=bounds, videos=videos)
        return Windows(base, samples, L, self.transitions, videos=videos)

    def _layout(self, table: pa.Table, pf: pq.ParquetFile, path: str, cols: list[str], before: int,
                after: int) -> tuple[pa.Table, np.ndarray | None, np.ndarray, np.ndarray]:
        """Lay a row group's rows out so that each episode's rows are consecutive.

        Rows follow each other when they are the same run and episode at consecutive steps.
        Where an episode's rows stop in this row group without its last step (``is_last``),
        up to ``after`` rows that continue it are looked up (the next row group of the file,
        or any row group whose statistics allow it: a recorder's later commit, or another
        env's rows in between) and placed right after them; where they start after its
        first step, up to ``before`` rows that precede them are placed right before. Rows
        stored out of order (environments interleaved) are sorted by run, episode and step
        first.

        Returns the table (this row group's rows, then the rows looked up), the order of its
        rows in the layout (None: as they are), each own row's position in the layout, and
        for each layout row whether the next one continues it.
        """
        n = table.num_rows
        last = np.asarray(pa.compute.fill_null(table.column("is_last"), False))
        run, ep, step = _key_arrays(table)
        follows = _follows(run, ep, step)
        ends = np.flatnonzero(~follows)
        order: np.ndarray | None = None
        if not (last[ends[:-1]].all() if len(ends) > 1 else True):  # episodes interleaved or out of order
            order = np.lexsort((step, ep, run))
            run, ep, step, last = run[order], ep[order], step[order], last[order]
            follows = _follows(run, ep, step)
            ends = np.flatnonzero(~follows)
        runs = table.column("run_id")

        def looked_up(rows: pa.Table | None) -> pa.Table | None:
            if rows is None or rows.num_rows == 0:
                return None
            return rows if rows.schema == table.schema else rows.select(table.column_names).cast(table.schema)

        # (layout row next to which they go, +1: after it / -1: before it, rows)
        extra: list[tuple[int, int, pa.Table]] = []
        if after:
            for e in ends[~last[ends]]:  # an episode that goes on elsewhere
                row = int(order[e]) if order is not None else int(e)
                head = looked_up(self._continuation(str(runs[row].as_py()), int(ep[e]), int(step[e]) + 1,
                                                    pf, path, cols, path if row == n - 1 else None, after))
                if head is not None:
                    extra.append((int(e), 1, head))
        if before:
            firsts = np.concatenate([[0], ends[:-1] + 1])
            for f in firsts[step[firsts] > 0]:  # an episode that began elsewhere
                row = int(order[f]) if order is not None else int(f)
                since = max(0, int(step[f]) - before)
                tail = looked_up(self._continuation(str(runs[row].as_py()), int(ep[f]), since, pf, path, cols,
                                                    None, int(step[f]) - since))
                if tail is not None:
                    extra.append((int(f), -1, tail))
        layout = order
        if extra:
            extra.sort(key=lambda x: (x[0], x[1]))
            total = n
            pieces: list[np.ndarray] = []
            lo = 0
            for at, side, rows in extra:
                cut = at + 1 if side > 0 else at
                pieces.append(order[lo:cut] if order is not None else np.arange(lo, cut))
                pieces.append(np.arange(total, total + rows.num_rows))
                total += rows.num_rows
                lo = cut
            pieces.append(order[lo:] if order is not None else np.arange(lo, n))
            layout = np.concatenate(pieces)
            if order is None and len(extra) == 1 and extra[0][:2] == (n - 1, 1):
                layout = None  # the one continuation follows the last row: the rows as they are
            table = pa.concat_tables([table, *(rows for _, _, rows in extra)])
        # each own row's place in the layout
        position = np.arange(n, dtype=np.int64)
        if layout is not None:
            position = np.empty(n, dtype=np.int64)
            mine = layout < n
            position[layout[mine]] = np.flatnonzero(mine)
        if extra:  # the layout's keys, rows looked up included
            run, ep, step = _key_arrays(table)
            if layout is not None:
                run, ep, step = run[layout], ep[layout], step[layout]
            follows = _follows(run, ep, step)
        return table, layout, position, follows

    def _continuation(self, run: str, episode: int, step: int, pf: pq.ParquetFile, path: str,
                      cols: list[str], prefer: str | None, need: int) -> pa.Table | None:
        """Up to ``need`` rows of (run, episode) from ``step`` on, chained over row groups."""
        got: list[pa.Table] = []
        while need > 0:
            found = self._locate(run, episode, step, pf, path, cols, prefer, need)
            if found is None:
                break
            head, unit = found
            s = head.column("step").to_numpy()
            e = head.column("episode_id").to_numpy()
            r = head.column("run_id").cast(pa.string()).to_pylist()
            run_on = (e == episode) & (s == step + np.arange(len(s))) & np.array([x == run for x in r])
            k = int(np.argmin(run_on)) if not run_on.all() else len(s)
            got.append(head.slice(0, k))
            need -= k
            step += k
            if k == 0 or head.column("is_last")[k - 1].as_py():
                break
            # the episode goes on elsewhere: after this row group, or in a later commit
            prefer = unit.file if k == head.num_rows else None
        return pa.concat_tables(got) if got else None

    def _locate(self, run: str, episode: int, step: int, pf: pq.ParquetFile, path: str,
                cols: list[str], prefer: str | None, count: int) -> tuple[pa.Table, Unit] | None:
        """Up to ``count`` rows of a row group from (run, episode, step) on, and that row group.

        ``pf`` is open on ``path``; ``prefer``: the file to look in first (a row group
        ran out: most often the next one of the same file continues it).
        """
        candidates = [u for u in self.units if u.may_hold(episode, step)]
        if prefer is not None:
            candidates.sort(key=lambda u: u.file != prefer)
        for unit in candidates:
            keys = self._keys.get((unit.file, unit.group))
            if keys is None:
                with self._opened(unit.file, pf, path) as opened:
                    keys = opened.read_row_group(unit.group, columns=KEYS)
                self._keys[(unit.file, unit.group)] = keys
            hit = np.flatnonzero((keys.column("episode_id").to_numpy() == episode)
                                 & (keys.column("step").to_numpy() == step))
            runs = keys.column("run_id")
            same_run = [int(i) for i in hit if runs[int(i)].as_py() == run]
            if same_run:
                # (a few rows of a row group: on object storage, its first pages only, not
                # the whole row group a pre-buffered read fetches)
                with self._opened(unit.file, pf, path, head=True) as opened:
                    return _rows_of(opened, unit.group, cols, same_run[0], count), unit
        return None

    @contextlib.contextmanager
    def _opened(self, file: str, pf: pq.ParquetFile, path: str, *,
                head: bool = False) -> Iterator[pq.ParquetFile]:
        """``file`` to read from: ``pf`` (open on ``path``) lent as it is, or opened and closed.

        ``head``: to read a row group's first rows (on object storage, opened to fetch its
        first pages only).
        """
        if file == path and not (head and is_remote(self.filesystem)):
            yield pf
            return
        with self.open(file, head=head) as other:
            yield other


def _has_videos(store: StoreReader) -> bool:
    """Whether a (remote) store lists ``videos`` files (one of format 1.3 or before has none)."""
    try:
        return bool(store.files("videos"))
    except (KeyError, LookupError, StoreError):
        return False


@dataclass(frozen=True)
class _Listed:
    """What :meth:`SampleSource.from_store` plans from: one view of a table's files, and their columns."""

    files: list[Any]
    schema: pa.Schema | None  # the columns the files are read with together
    lacking: dict[str, str]  # why each column some layouts lack (or type otherwise) is left out
    videos: list[Any]  # the ``videos`` files of the same view (a local store's steps)
    lease: Any = None  # a ReaderLease pinning them (a local store)
    version: int | None = None  # the store version they are (a local store)


def _list_local(store: Store, source: str, layout: int | None) -> _Listed:
    """A local store's files of ``source``, pinned, with its videos' files from the same manifest."""
    # a local store's files are pinned for the process's life: an epoch (in DataLoader
    # workers, in Ray tasks holding copies of this source) reads them whatever compacts
    # the store meanwhile
    lease = store.process_lease()
    # (the steps and their videos from one manifest: the view of one store version,
    # which ``version`` names afterwards)
    tables = [source]
    if source == "steps" and "videos" in store.tables():
        tables.append("videos")
    view: dict[str, list[Any]] = dict(lease.pin_view(store, tables))
    layouts = store.layout_dirs(source, layout)  # (the view pin_view took)
    files = [f for f in view[source] if os.path.basename(os.path.dirname(f)) in layouts]
    store.check_footers(source, files)  # (pages are checked as they are read)
    schema, lacking = shared_schema(store, source, layouts)
    return _Listed(files, schema, lacking, list(view.get("videos", [])), lease, int(store.version))


def _list_other(store: StoreReader, source: str, layout: int | None) -> _Listed:
    """Another store's files of ``source`` (a RemoteStore: nothing to pin), of one layout."""
    numbers = [layout_number(d) for d in store.layout_dirs(source)]
    if layout is None and len(numbers) > 1:
        raise StoreError(f"{store.path}: {source!r} has layouts {numbers} here, whose files differ: "
                         "read one with layout=N")
    return _Listed(list(store.files(source, layout=layout)), store.schema(source, layout=layout), {}, [])


def _transition_columns(columns: Sequence[str] | None) -> list[str]:
    """The steps columns read for transitions of ``columns`` (default: all of them)."""
    wanted = list(columns or TRANSITION_COLUMNS)
    wanted = [c for c in wanted if c not in _transitions.DERIVED]
    return list(dict.fromkeys([*wanted, *_transitions.NEXT_SOURCES]))


def _chosen_columns(store: StoreReader, source: str, columns: Sequence[str] | None,
                    listed: _Listed) -> list[str]:
    """The columns asked for, each checked to be in every layout read (default: non-key, non-text)."""
    schema, lacking = listed.schema, listed.lacking
    names = schema.names if schema is not None else []
    chosen = list(columns) if columns is not None else [
        f.name for f in (schema or []) if f.name not in KEYS and not is_text(f.type)]
    missing = [c for c in chosen if schema is not None and c not in names]
    apart = [c for c in missing if c in lacking]
    if apart:
        raise NotFoundError(f"{store.path}: column(s) {apart} of {source!r} are not in every layout read "
                            "together (" + "; ".join(lacking[c] for c in apart) + "): read one layout "
                            "with layout=N (Store.layouts lists them)")
    if missing:
        raise NotFoundError(f"{store.path}: table {source!r} has no column(s) {missing}; it has {names}")
    return chosen


def _video_files(store: StoreReader, listed: _Listed) -> list[str]:
    """The ``videos`` files whose frames the steps' observations are read with (a local store)."""
    if isinstance(store, Store):
        return list(listed.videos)
    if _has_videos(store):
        raise StoreError(f"{store.path}: its cameras in the video layout are decoded from a local store "
                         "only; pull it first (rlarrow.core.remote.pull)")
    return []


def _padding_columns(chosen: list[str], names: list[str], deltas: dict[str, np.ndarray] | None,
                     transitions: bool) -> tuple[list[str], list[str]]:
    """The steps columns read with an ``_is_pad`` mask, and those read only for the rule.

    Padding is never data (:mod:`rlarrow.core.padding`).
    """
    if deltas is not None:
        masked = [*deltas, *(c for c in chosen if c in _padding.NULLABLE
                             and not any(_under(d, c) or _under(c, d) for d in deltas))]
        return masked, [c for c in [_padding.FRAME_COLUMN] if c in names]
    # (transitions: a REQUIRED column is never null on a step row, but may be on the
    # next row: its mask is read for the next row's copy, next_observation_is_pad)
    required = _transitions.REQUIRED if transitions else ()
    nexts = _transitions.NEXT_MASKED if transitions else ()
    masked = [c for c in chosen if c in _padding.NULLABLE and (c not in required or c in nexts)]
    return masked, [c for c in required if c in names]
