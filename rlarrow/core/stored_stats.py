"""Statistics of a selection of a store's runs and episodes, merged from the ``stats`` table.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The store writes the ``stats`` rows of every commit of steps (:mod:`rlarrow.core.step_stats`);
:func:`combine_stored` merges them for any selection of runs and episodes: the moments from
the segments (milliseconds), the quantiles from the blocks whose every segment is selected; a
block only partly selected (an episode-level split) has its selected episodes' values read
again for the quantiles only. Steps written without statistics (a store of format 1.1, files
staged by Ray tasks) are found by counting rows per run and read once from the data, so the
answer is never missing rows.

Example:
    >>> import os, tempfile, numpy as np, rlarrow
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s.rlarrow"))
    >>> _ = store.append("steps", {"run_id": "r", "episode_id": [0, 0, 1], "step": [0, 1, 0],
    ...     "env_index": 0, "observation": np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]),
    ...     "reward": [0.0, 1.0, 2.0], "is_first": [True, False, True],
    ...     "is_last": False, "is_terminal": False})
    >>> stats = combine_stored(store)
    >>> stats["observation"].mean.tolist(), stats["reward"].count
    ([2.0, 3.0], 3)
    >>> combine_stored(store, episodes=[("r", 1)])["observation"].max.tolist()
    [4.0, 5.0]
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import schema as _schema
from rlarrow.core import stats as _stats
from rlarrow.core import step_stats as _step_stats
from rlarrow.core.errors import ArgumentError, ArgumentTypeError

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

__all__: list[str] = []




def _selected(table: pa.Table, runs: set[str] | None, episodes: pa.Table | None) -> npt.NDArray[np.bool_]:
    """Which rows of a stats (or steps) table the selection takes; block rows are left out."""
    keep = np.ones(table.num_rows, bool)
    if runs is not None:
        keep &= pc.is_in(table.column("run_id"), pa.array(sorted(runs), pa.string())).to_numpy(
            zero_copy_only=False)
    if episodes is not None:
        keys = table.select(["run_id", "episode_id"]).append_column(
            "_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
        wanted = episodes.select(["run_id", "episode_id"]).group_by(["run_id", "episode_id"]).aggregate([])
        hit = keys.join(wanted, ["run_id", "episode_id"], join_type="inner").column("_row")
        mask = np.zeros(table.num_rows, bool)
        mask[np.asarray(hit.to_numpy(), dtype=np.int64)] = True
        keep &= mask
    return keep


def layouts_of(store: StoreReader, table: str) -> list[Any]:
    """:meth:`rlarrow.Store.layouts` of a local store, or of one on object storage (``RemoteStore``)."""
    from rlarrow.core.store import Store
    from rlarrow.core.store.layouts import layout_infos

    return store.layouts(table) if isinstance(store, Store) else layout_infos(store, table)


def _steps_rows_per_run(store: StoreReader) -> dict[str, int]:
    counts: dict[str, int] = {}
    for info in layouts_of(store, "steps"):
        if info.schema is None:
            continue
        ids = store.read("steps", columns=["run_id"], layout=info.layout).column("run_id")
        for item in pc.value_counts(ids).to_pylist():
            counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
    return counts


def _uncovered_runs(store: StoreReader, stored: pa.Table) -> set[str]:
    """The runs whose steps rows the stored statistics do not all describe (or describe too many)."""
    segments = stored.filter(pc.and_(pc.is_valid(stored.column("episode_id")),
                                     pc.equal(stored.column("column"), "reward")))
    described = int(pc.sum(segments.column("rows")).as_py() or 0)
    if described == store.row_count("steps"):
        return set()
    have: dict[str, int] = {}
    for item in segments.group_by("run_id").aggregate([("rows", "sum")]).to_pylist():
        have[item["run_id"]] = item["rows_sum"]
    actual = _steps_rows_per_run(store)
    return {run for run in set(actual) | set(have) if actual.get(run, 0) != have.get(run, 0)}


def _from_data(store: StoreReader, runs: set[str] | None, episodes: pa.Table | None, columns: set[str] | None,
               quantiles: bool, layout: int | None = None) -> dict[str, _stats.ColumnStats]:
    """Statistics of the selected steps rows, read from the data (what nothing stored describes)."""
    out: dict[str, _stats.ColumnStats] = {}
    for info in layouts_of(store, "steps"):
        if info.schema is None or (layout is not None and info.layout != layout):
            continue
        leaves = [leaf for leaf in _step_stats.stat_leaves(info.schema)
                  if columns is None or leaf[0] in columns]
        if not leaves:
            continue
        needed = sorted({leaf[0].split(".", 1)[0] for leaf in leaves} | {"run_id", "episode_id"})
        flt = None if runs is None else pc.field("run_id").isin(sorted(runs))
        for batch in store.dataset("steps", layout=info.layout).to_batches(columns=needed, filter=flt):
            table = pa.Table.from_batches([batch])
            if episodes is not None:
                table = table.filter(pa.array(_selected(table, None, episodes)))
            if table.num_rows == 0:
                continue
            for leaf in leaves:
                x, valid, _ = _step_stats.leaf_values(table, leaf)
                sketched = quantiles and x.shape[1] <= _step_stats.SKETCH_MAX_ELEMENTS
                part = _stats.ColumnStats(leaf[2], sketches=sketched)
                part.update(x[valid].reshape(-1, *leaf[2]))
                if leaf[0] in out:
                    _check_shape(out[leaf[0]], part, leaf[0])
                    out[leaf[0]].merge(part)
                else:
                    out[leaf[0]] = part
    return out


def _check_shape(a: _stats.ColumnStats, b: _stats.ColumnStats, name: str) -> None:
    if a.shape != b.shape:
        raise ArgumentError(f"column {name!r} has shape {a.shape} in one steps layout and {b.shape} in "
                            "another: pick one with layout=N (Store.layouts('steps'))")


def _block_keys(table: pa.Table) -> list[str]:
    return [f"{a}\0{b}\0{c}" for a, b, c in zip(*(table.column(n).to_pylist()
                                                   for n in ("layout", "block", "run_id")), strict=True)]


def _blocks_for_quantiles(sentinel: pa.Table,
                          keep: npt.NDArray[np.bool_]) -> tuple[set[str], pa.Table | None]:
    """The blocks whose every segment is selected, and the selected episodes of the others.

    ``sentinel``: the stored rows of one column every layout has (``reward``), segments
    and blocks; ``keep``: which of its segment rows are selected. A block partly selected
    cannot give its sketch; its selected episodes are read from the data instead, and so
    is every other block holding one of those episodes (so that no value counts twice).
    """
    is_seg = np.asarray(sentinel.column("episode_id").is_valid().to_numpy(zero_copy_only=False))
    segs = sentinel.filter(pa.array(is_seg))
    seg_keep = keep[is_seg]
    blocks = sentinel.filter(pa.array(~is_seg))
    block_key = _block_keys(segs)
    episode_key = [f"{r}\0{e}" for r, e in zip(segs.column("run_id").to_pylist(),
                                                segs.column("episode_id").to_pylist(), strict=True)]
    selected_in: dict[str, int] = {}
    blocks_of: dict[str, set[str]] = {}
    for bkey, ekey, kept in zip(block_key, episode_key, seg_keep, strict=True):
        if kept:
            selected_in[bkey] = selected_in.get(bkey, 0) + 1
            blocks_of.setdefault(ekey, set()).add(bkey)
    whole: dict[str, bool] = {}
    for key, n in zip(_block_keys(blocks), blocks.column("segments").to_pylist(), strict=True):
        if key in selected_in:
            whole[key] = selected_in[key] == n
    partial = {key for key, full in whole.items() if not full}
    partial |= {key for key in selected_in if key not in whole}  # no block row: read the data
    episodes_read: set[str] = set()
    while True:  # the closure: an episode read from the data takes its other blocks with it
        grow = {ekey for ekey, bset in blocks_of.items() if ekey not in episodes_read and bset & partial}
        if not grow:
            break
        episodes_read |= grow
        for ekey in grow:
            partial |= blocks_of[ekey]
    full = {key for key, ok in whole.items() if ok and key not in partial}
    if not episodes_read:
        return full, None
    pairs = [key.split("\0") for key in sorted(episodes_read)]
    read = pa.table({"run_id": pa.array([p[0] for p in pairs], pa.string()),
                     "episode_id": pa.array([int(p[1]) for p in pairs], pa.int64())})
    return full, read


def _clashing(segments: pa.Table) -> dict[str, str]:
    """The columns whose shape differs between steps layouts, each with what it is in each."""
    try:
        _check_shapes(segments)
        return {}
    except ArgumentError:
        pass
    seen: dict[str, dict[tuple[int, ...], str]] = {}
    for column, layout, shape in zip(*(segments.column(n).to_pylist() for n in ("column", "layout", "shape")),
                                     strict=True):
        seen.setdefault(column, {}).setdefault(tuple(shape), layout)
    return {column: "; ".join(f"{shape} in {layout}" for shape, layout in shapes.items())
            for column, shapes in seen.items() if len(shapes) > 1}


def _check_shapes(segments: pa.Table) -> None:
    """One shape per column, or an error saying how to choose a layout."""
    keys = pc.binary_join_element_wise(segments.column("column"), segments.column("layout"), "\0")
    distinct = pc.unique(keys)
    firsts = pc.index_in(distinct, keys)  # each distinct key's first row
    shapes = segments.column("shape").take(firsts).to_pylist()
    seen: dict[str, tuple[tuple[int, ...], str]] = {}
    for key, shape_list in zip(distinct.to_pylist(), shapes, strict=True):
        column, layout = key.split("\0")
        shape = tuple(shape_list)
        earlier = seen.setdefault(column, (shape, layout))
        if earlier[0] != shape:
            raise ArgumentError(f"column {column!r} has shape {earlier[0]} in steps layout {earlier[1]} "
                                f"and {shape} in {layout}: pick one with layout=N (Store.layouts('steps'))")


def combine_stored(store: StoreReader, *, runs: Iterable[str] | None = None,
                   episodes: Iterable[tuple[str, int]] | pa.Table | None = None,
                   columns: Iterable[str] | None = None, quantiles: bool = True,
                   layout: int | None = None) -> dict[str, _stats.ColumnStats]:
    """The statistics of the selected steps, merged from the ``stats`` table.

    Args:
        store: the store (at the version it was opened at).
        runs: only these runs; None: all.
        episodes: only these ``(run_id, episode_id)`` pairs (or a table with those two
            columns); None: all episodes of the runs selected.
        columns: only these columns (``observation``, ``observation.state``, ``reward``...).
        quantiles: merge the sketches too (``quantile`` and the q01...q99 of
            :meth:`~rlarrow.core.stats.ColumnStats.to_dict`); False: moments, min and max
            only, in milliseconds.
        layout: only one steps layout (a store whose runs' observations differ in shape).

    Returns:
        ``{column: ColumnStats}``; a selection with no rows gives ``{}``.

    Raises:
        CorruptFileError: a stored row is damaged (it names the row and what is wrong).
        ArgumentError: a column's shape differs between layouts (pass ``layout``).
    """
    if isinstance(runs, str):
        raise ArgumentTypeError("runs takes a list of run ids, not one string")
    directories = store.layout_dirs("steps")
    sel = _Selection(store=store, runs=None if runs is None else {str(r) for r in runs},
                     episodes=_episode_table(episodes),
                     wanted=None if columns is None else {str(c) for c in columns}, layout=layout,
                     layout_flt=_layout_filter(layout, directories), directories=directories,
                     # a run's steps are all in one layout; its rows' layout is read from there, not
                     # from the stats rows (a merge may have put another store's runs in a layout of
                     # another number)
                     run_layout=({} if len(directories) == 1 else
                                 {run: info.directory for info in layouts_of(store, "steps")
                                  for run in info.run_ids}))
    # one read of every row but the sketches (only the chosen blocks' are read, in _add_quantiles)
    names = [f.name for f in _schema.table("stats").arrow_schema() if f.name != "sketches"]
    everything = sel.relayout(store.read("stats", columns=names))
    sentinel = everything.filter(pc.equal(everything.column("column"), "reward"))
    uncovered = _uncovered_runs(store, sentinel)
    if sel.layout_flt is not None:
        sentinel = sentinel.filter(sel.layout_flt)
    if sel.wanted is None and layout is None:
        sel.wanted = _without_clashes(store, everything)
    stored = everything if sel.filter() is None else everything.filter(sel.filter())
    if uncovered:
        gone = pa.array(sorted(uncovered), pa.string())
        stored = stored.filter(pc.invert(pc.is_in(stored.column("run_id"), gone)))
        sentinel = sentinel.filter(pc.invert(pc.is_in(sentinel.column("run_id"), gone)))
    segments = stored.filter(pa.array(sel.selected(stored) & _is_segment(stored)))
    _check_shapes(segments)
    result = _stats.combine_rows(segments, sketches=False, path=sel.path) if segments.num_rows else {}
    if quantiles and segments.num_rows:
        _add_quantiles(sel, result, sentinel)
    if uncovered:
        _add_uncovered(sel, result, uncovered, quantiles)
    return dict(sorted(result.items()))


class _Selection:
    """What :func:`combine_stored` was asked for, and the store's steps layouts it reads them in."""

    def __init__(self, *, store: StoreReader, runs: set[str] | None, episodes: pa.Table | None,
                 wanted: set[str] | None, layout: int | None, layout_flt: Any, directories: list[str],
                 run_layout: dict[str, str]) -> None:
        self.store, self.runs, self.episodes, self.wanted = store, runs, episodes, wanted
        self.layout, self.layout_flt = layout, layout_flt
        self.directories, self.run_layout = directories, run_layout
        self.path = f"{os.fspath(store.path)}/stats"  # (in errors: a path, or a bucket URI)

    def columns_filter(self) -> Any:
        """The stats rows of the columns asked for (None: all)."""
        return None if self.wanted is None else pc.field("column").isin(sorted(self.wanted))

    def filter(self) -> Any:
        """The stats rows of the layout and columns asked for (None: all)."""
        return _and(self.layout_flt, self.columns_filter())

    def selected(self, table: pa.Table) -> npt.NDArray[np.bool_]:
        """Which rows of ``table`` are of the runs and episodes asked for."""
        return _selected(table, self.runs, self.episodes)

    def relayout(self, table: pa.Table) -> pa.Table:
        """``table`` with each row's ``layout`` the one its run's steps are in now."""
        return _relayout(table, self.directories, self.run_layout)


def _episode_table(episodes: Iterable[tuple[str, int]] | pa.Table | None) -> pa.Table | None:
    """``(run_id, episode_id)`` pairs (or a table holding them) as a table of those two columns."""
    if episodes is None:
        return None
    if isinstance(episodes, pa.Table):
        return episodes.select(["run_id", "episode_id"]).cast(
            pa.schema([("run_id", pa.string()), ("episode_id", pa.int64())]))
    pairs = [(str(r), int(e)) for r, e in episodes]
    return pa.table({"run_id": pa.array([p[0] for p in pairs], pa.string()),
                     "episode_id": pa.array([p[1] for p in pairs], pa.int64())})


def _layout_filter(layout: int | None, directories: list[str]) -> Any:
    """The stats rows of steps layout ``layout`` (None: all layouts)."""
    if layout is None:
        return None
    name = "steps" if layout == 1 else f"steps.{layout}"
    if name not in directories:
        raise ArgumentError(f"the steps table has no layout {layout} (Store.layouts('steps'))")
    return pc.field("layout") == name


def _is_segment(table: pa.Table) -> npt.NDArray[np.bool_]:
    """Which stats rows are segment rows (an episode's), not block rows."""
    return np.asarray(table.column("episode_id").is_valid().to_numpy(zero_copy_only=False))


def _without_clashes(store: StoreReader, everything: pa.Table) -> set[str] | None:
    """Every column but those whose shape differs between layouts, with a warning; None: no clash.

    Runs whose tensors differ (a PPO and a DQN run): the statistics of all runs leave the
    clashing columns out, as the combined SQL views do; naming one (``columns=``) or a
    layout reads it.
    """
    clash = _clashing(everything.filter(everything.column("episode_id").is_valid()))
    if not clash:
        return None
    import warnings

    from rlarrow.core.errors import RLArrowWarning

    warnings.warn(f"{store.path}: the statistics of all runs leave out "
                  + ", ".join(f"{c} ({what})" for c, what in sorted(clash.items()))
                  + ", whose shape differs between steps layouts; pick one with layout=N "
                  "(`--layout N` on the command line; Store.layouts('steps') lists them)",
                  RLArrowWarning, stacklevel=4)
    return set(everything.column("column").to_pylist()) - set(clash)


def _add_quantiles(sel: _Selection, result: dict[str, _stats.ColumnStats], sentinel: pa.Table) -> None:
    """Give ``result``'s moments their sketches: the wholly selected blocks', the rest read again."""
    full, reread = _blocks_for_quantiles(sentinel, sel.selected(sentinel) & _is_segment(sentinel))
    sketched: dict[str, _stats.ColumnStats] = {}
    if full:
        block_rows = ~pc.field("episode_id").is_valid()
        blocks = sel.relayout(sel.store.read("stats", filter=_and(sel.columns_filter(), block_rows)))
        blocks = blocks.filter(pa.array([key in full for key in _block_keys(blocks)], pa.bool_()))
        sketched = _stats.combine_rows(blocks, path=sel.path)
    if reread is not None:
        reread_runs = set(reread.column("run_id").to_pylist())  # (not every run's files)
        for name, part in _from_data(sel.store, reread_runs, reread, set(result), True, sel.layout).items():
            if name in sketched:
                sketched[name].merge(part)
            else:
                sketched[name] = part
    for name, stats in result.items():
        source = sketched.get(name)
        if source is not None and source.has_quantiles:
            _stats.adopt_sketches(stats, source, f"stored statistics of column {name!r}", sel.path)


def _add_uncovered(sel: _Selection, result: dict[str, _stats.ColumnStats], uncovered: set[str],
                   quantiles: bool) -> None:
    """Merge into ``result`` the selected runs' steps no stored statistics describe, read from the data."""
    chosen_runs = uncovered if sel.runs is None else uncovered & sel.runs
    if not chosen_runs:
        return
    for name, part in _from_data(sel.store, chosen_runs, sel.episodes, sel.wanted, quantiles,
                                 sel.layout).items():
        if name in result:
            _check_shape(result[name], part, name)
            result[name].merge(part)
        else:
            result[name] = part


def _relayout(table: pa.Table, directories: list[str], run_layout: dict[str, str]) -> pa.Table:
    """``table`` with each row's ``layout`` the one its run's steps are in now."""
    at = table.schema.get_field_index("layout")
    if len(directories) == 1:
        value = pa.array(np.full(table.num_rows, directories[0], dtype=object), pa.string())
    else:
        runs = list(run_layout)
        index = pc.index_in(table.column("run_id"), pa.array(runs, pa.string()))
        mapped = pa.array([run_layout[r] for r in runs], pa.string()).take(index)
        value = pc.if_else(pc.is_null(index), table.column("layout"), mapped)
    return table.set_column(at, table.schema.field(at), value)


def _and(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a & b
