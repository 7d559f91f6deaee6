"""Training samples from a store's files, torch-free.

The one reader behind ``rlarrow.train.torch`` and ``rlarrow.train.ray``.

A :class:`SampleSource` knows a table's row groups (:class:`Unit`: the unit of sharding and
shuffling) and turns one of them into NumPy columns of samples: rows, windows of
``sequence_length`` consecutive steps of one episode (a window never crosses an episode
boundary, and follows an episode into the next row group or another commit), or
transitions (``observation``/``next_observation``, ``done``, ``truncated``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import transitions as _transitions
from rlarrow.core.errors import ArgumentError, NotFoundError, StoreError

__all__ = ["KEYS", "TRANSITION_COLUMNS", "SampleSource", "Unit", "expression_mask", "filter_mask", "flat",
           "is_text", "nest", "open_file", "to_numpy", "units"]

# the steps columns transitions are made of (rlarrow.core.transitions defines them)
TRANSITION_COLUMNS = list(_transitions.STEP_COLUMNS)
KEYS = ["run_id", "episode_id", "step"]
_WINDOW_KEYS = [*KEYS, "is_last"]


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


def open_file(path: str, filesystem: Any = None) -> pq.ParquetFile:
    """A Parquet file of a store, on the local disk or on ``filesystem`` (a pyarrow one)."""
    return pq.ParquetFile(path, filesystem=filesystem) if filesystem is not None else pq.ParquetFile(path)


def units(files: Sequence[Any], filesystem: Any = None) -> list[Unit]:
    """The row groups of ``files``, in order, with their key statistics."""
    out: list[Unit] = []
    for f in files:
        f = os.fspath(f) if filesystem is not None else os.path.abspath(f)  # workers' cwd may differ
        meta = open_file(f, filesystem).metadata
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


def flat(prefix: str, value: Any, out: dict[str, np.ndarray]) -> None:
    """Struct columns (dicts of arrays) as ``prefix.key`` entries of ``out``."""
    if isinstance(value, dict):
        for k, v in value.items():
            flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def nest(flat_: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flat`: ``a.b`` keys as nested dicts."""
    out: dict[str, Any] = {}
    for key, value in flat_.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


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


def _shared_schema(store: Any, table: str, layouts: list[str]) -> tuple[pa.Schema | None, dict[str, str]]:
    """The columns every layout of ``layouts`` has with the same type, and why each other one is not."""
    schemas = [(name, store.schema(table, layout=int(name.partition(".")[2] or 1))) for name in layouts]
    schemas = [(name, s) for name, s in schemas if s is not None]
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


class SampleSource:
    """What one sample stream reads: its row groups, columns, filter and windows.

    Use :meth:`from_store`; :meth:`read` turns one :class:`Unit` into NumPy columns (flat
    names, ``observation.position`` for struct fields). A source pickles (a few hundred
    bytes per row group), so it travels to DataLoader workers and Ray tasks.
    """

    def __init__(self, units_: list[Unit], columns: list[str], *, filter: Any = None,  # noqa: A002
                 sequence_length: int = 1, transitions: bool = False, filesystem: Any = None) -> None:
        self.units = units_
        self.columns = columns
        self.filter = filter
        self.sequence_length = sequence_length
        self.transitions = transitions
        self.needs_keys = sequence_length > 1
        self.filesystem = filesystem
        self.lease: Any = None  # a ReaderLease pinning the units' files, when from a local store
        self._keys: dict[tuple[str, int], pa.Table] = {}  # key columns looked at for the unit being read

    @classmethod
    def from_store(cls, store: Any, table: str = "steps", *, columns: Sequence[str] | None = None,
                   filter: Any = None, sequence_length: int = 1,  # noqa: A002
                   layout: int | None = None) -> SampleSource:
        """Plan the samples of ``table`` (``"transitions"``: windows of 2 steps as transitions).

        ``store`` is a :class:`~rlarrow.Store`, or anything with ``files``, ``schema``,
        ``path`` and ``filesystem`` (:class:`rlarrow.core.remote.RemoteStore`). ``layout``: one
        layout of the table (:meth:`~rlarrow.Store.layouts`); None: all of them, whose
        samples then have the columns every layout has with the same type.

        Raises:
            KeyError: a column the table (or one of the layouts read together) does not have.
            ValueError: windows asked of a table without episodes.
        """
        transitions = table == "transitions"
        source = "steps" if transitions else table
        fs = getattr(store, "filesystem", None)
        # a local store's files are pinned for the process's life: an epoch (in DataLoader
        # workers, in Ray tasks holding copies of this source) reads them whatever compacts
        # the store meanwhile
        lease = store.process_lease() if hasattr(store, "process_lease") else None
        if hasattr(store, "layout_dirs"):  # a Store: its layouts
            files = (lease.pin_view(store, [source])[source] if lease is not None
                     else store.files(source, refresh=False))
            layouts = store.layout_dirs(source, layout)  # (the view pin_view took)
            files = [f for f in files if os.path.basename(os.path.dirname(f)) in layouts]
            schema, lacking = _shared_schema(store, source, layouts)
        else:
            numbers = store.layouts(source) if hasattr(store, "layouts") else [1]  # a RemoteStore
            if layout is None and len(numbers) > 1:
                raise StoreError(f"{store.path}: {source!r} has layouts {numbers} here, whose files differ: "
                                 "read one with layout=N")
            one = {} if layout is None else {"layout": layout}
            files = store.files(source, **one)  # (not a local store: nothing to pin)
            schema, lacking = store.schema(source, **one), {}
        found = units(files, fs)
        if transitions:
            if sequence_length != 1:
                raise ArgumentError("transitions are windows of 2 steps already; use table='steps' "
                                    "with sequence_length for longer windows")
            sequence_length = 2
            wanted = list(columns or TRANSITION_COLUMNS)
            wanted = [c for c in wanted if c not in _transitions.DERIVED]
            columns = list(dict.fromkeys([*wanted, *_transitions.NEXT_SOURCES]))
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
        if sequence_length > 1 and source != "steps":
            raise ArgumentError("sequence windows need episodes: table='steps' (or 'transitions')")
        made = cls(found, chosen, filter=filter, sequence_length=sequence_length,
                   transitions=transitions, filesystem=fs)
        made.lease = lease  # the links live as long as the source (and copies in workers read them)
        return made

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_keys"] = {}
        return state

    def open(self, path: str) -> pq.ParquetFile:
        """One of the source's files, on its filesystem."""
        return open_file(path, self.filesystem)

    def read(self, unit: Unit, files: dict[str, pq.ParquetFile]) -> dict[str, np.ndarray] | None:
        """The samples of one row group (None: the filter kept none).

        ``files`` caches the open file between calls (one at a time: a reader keeps what it
        read, which would add up).
        """
        pf = files.get(unit.file)
        if pf is None:
            for old in files.values():
                old.close()
            files.clear()
            pf = files[unit.file] = self.open(unit.file)
        cols = list(dict.fromkeys((_WINDOW_KEYS if self.needs_keys else []) + self.columns))
        flt_cols: list[str] = []
        if self.filter is not None:  # filters see the flat columns: never read tensors for them
            flt_cols = [f.name for f in pf.schema_arrow if f.name not in cols
                        and not pa.types.is_nested(f.type) and not isinstance(f.type, pa.ExtensionType)]
        table = pf.read_row_group(unit.group, columns=cols + flt_cols)
        own = table.num_rows
        L = self.sequence_length
        self._keys.clear()  # key columns of row groups searched for this unit's continuations
        keep = np.ones(own, dtype=bool)
        windows = None
        if L > 1 and own:
            table, windows = self._windows(table, pf, unit.file, cols + flt_cols)
            keep &= windows[:, -1] >= 0
        if self.filter is not None:
            keep &= filter_mask(table.slice(0, own), self.filter)
        if not keep.any():
            return None
        starts = np.flatnonzero(keep)
        out: dict[str, np.ndarray] = {}
        for name in self.columns:
            col = table.column(name)
            if windows is None:
                whole_table = len(starts) == own == table.num_rows
                flat(name, to_numpy(col if whole_table else col.take(pa.array(starts))), out)
            else:
                whole: dict[str, np.ndarray] = {}
                flat(name, to_numpy(col), whole)
                idx = windows[starts]
                for k, v in whole.items():
                    out[k] = v[idx]
        return _transitions.from_windows(out) if self.transitions else out

    def _windows(self, table: pa.Table, pf: pq.ParquetFile, path: str,
                 cols: list[str]) -> tuple[pa.Table, np.ndarray]:
        """Each row's window: (rows, L) indices into the returned table, -1 where it runs out.

        Rows follow each other in a window when they are the same run and episode at
        consecutive steps. Where an episode's rows stop in this row group without its last
        step (``is_last``), the rows that continue it are looked up (the next row group of
        the file, or any row group whose statistics allow it: a recorder's later commit, or
        another env's rows in between) and appended to the table.
        """
        L = self.sequence_length
        n = table.num_rows
        ep = table.column("episode_id").to_numpy()
        step = table.column("step").to_numpy()
        run = table.column("run_id")
        follows = np.zeros(n, dtype=bool)  # row i + 1 continues row i
        if n > 1:
            follows[:-1] = ((ep[1:] == ep[:-1]) & (step[1:] == step[:-1] + 1)
                            & np.asarray(pa.compute.equal(run.slice(1), run.slice(0, n - 1))))
        nxt = np.where(follows, np.arange(1, n + 1), -1)
        last = np.asarray(pa.compute.fill_null(table.column("is_last"), False))
        parts = [table]
        total = n
        for e in np.flatnonzero(~follows & ~last):  # an episode that goes on elsewhere
            head = self._continuation(str(run[int(e)].as_py()), int(ep[e]), int(step[e]) + 1,
                                      pf, path, cols, path if e == n - 1 else None)
            if head is None:
                continue
            if head.schema != table.schema:
                head = head.select(table.column_names).cast(table.schema)
            m = head.num_rows
            chain = np.arange(total + 1, total + m + 1)
            chain[-1] = -1
            nxt[e] = total
            nxt = np.concatenate([nxt, chain])
            parts.append(head)
            total += m
        if len(parts) > 1:
            table = pa.concat_tables(parts)
        follow = np.append(nxt, -1)  # follow[-1] == -1: a run-out window stays run out
        idx = np.empty((n, L), dtype=np.int64)
        idx[:, 0] = np.arange(n)
        for j in range(1, L):
            idx[:, j] = follow[idx[:, j - 1]]
        return table, idx

    def _continuation(self, run: str, episode: int, step: int, pf: pq.ParquetFile, path: str,
                      cols: list[str], prefer: str | None) -> pa.Table | None:
        """Up to L - 1 rows of (run, episode) from ``step`` on, chained over row groups."""
        need = self.sequence_length - 1
        got: list[pa.Table] = []
        while need > 0:
            found = self._locate(run, episode, step, pf, path, cols, prefer)
            if found is None:
                break
            head, unit = found
            head = head.slice(0, need)
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
                cols: list[str], prefer: str | None) -> tuple[pa.Table, Unit] | None:
        """The rows of a row group from (run, episode, step) on, and that row group.

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
                with self._opened(unit.file, pf, path) as opened:
                    return opened.read_row_group(unit.group, columns=cols).slice(same_run[0]), unit
        return None

    @contextlib.contextmanager
    def _opened(self, file: str, pf: pq.ParquetFile, path: str) -> Iterator[pq.ParquetFile]:
        """``file`` to read from: ``pf`` (open on ``path``) lent as it is, or opened and closed."""
        if file == path:
            yield pf
            return
        with self.open(file) as other:
            yield other
