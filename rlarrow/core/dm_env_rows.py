"""A run's steps read back in dm_env order, with its metadata and dm_env specs.

The store keeps steps in RLDS alignment (row *t*: observation *t*, the action taken at it,
the reward and discount that followed; see :mod:`rlarrow.core.alignment`). A
:class:`DmEnvRows` reads one run of a store and gives its steps the way dm_env and
envlogger give them: a :class:`StepData` per step, whose ``timestep`` carries the reward and
discount that *led to* its observation, with the action that produced it (none on an
episode's FIRST timestep), and the step's custom data. It also gives the run's metadata,
its four specs as dm_env specs, each episode's metadata, and whole episodes as Arrow or
NumPy columns.

It is what both ``rlarrow.Reader`` (:mod:`rlarrow.query.reader`, envlogger's Reader surface)
and the envlogger exporter (:func:`rlarrow.io.envlogger.export_envlogger`) read with;
:func:`dm_env_steps` gives any episode's RLDS rows in dm_env order (what
:func:`rlarrow.io.envlogger.write_envlogger` writes from any episode source).

Episode *k* and step *n* are found through an index of the run's rows (episode and step
numbers, read once), and only the row groups that hold them are read (a few are cached):
nothing is scanned from the start.

Example:
    >>> import numpy as np, tempfile
    >>> from rlarrow.core.store import Store
    >>> path = tempfile.mkdtemp() + "/runs.rlarrow"
    >>> with Store.create(path) as st:
    ...     _ = st.append("steps", {
    ...         "run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
    ...         "observation": np.arange(3, dtype=np.float32), "action": [1, 0, None],
    ...         "reward": [0.0, 1.0, None], "discount": [1.0, 0.0, None],
    ...         "is_first": [True, False, False], "is_last": [False, False, True],
    ...         "is_terminal": [False, False, True]})
    >>> rows = DmEnvRows(path)
    >>> rows.num_episodes, rows.num_steps
    (1, 3)
    >>> last = rows.episode_steps(0)[-1]
    >>> int(last.timestep.step_type), float(last.timestep.reward), int(last.action)
    (2, 1.0, 0)
"""

from __future__ import annotations

import gc
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from rlarrow.core import alignment as _alignment
from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core import specs as _specs
from rlarrow.core.errors import StoreError
from rlarrow.core.remote import open_reader
from rlarrow.core.store import Store, StoreReader, open_checked
from rlarrow.core.store.checked import READ_ERRORS
from rlarrow.core.tensors import to_numpy
from rlarrow.core.video import VideoFrames, with_frames

__all__ = ["DmEnvRows", "StepData"]

_CACHED_ROW_GROUPS = 8
_CACHED_BYTES = 256 << 20  # and at most this much decoded data (one group may be larger)


class StepData(NamedTuple):
    """One step as envlogger gives it.

    The dm_env timestep, the action that led to it (None on FIRST), and the ``step_fn``
    value recorded with it.
    """

    timestep: Any
    action: Any
    custom_data: Any = None


_INDEX_KEYS = ["run_id", "episode_id", "step"]


class _Rows:
    """The steps table's rows by global position, read a row group at a time (cached)."""

    def __init__(self, files: Sequence[str | os.PathLike[str]], filesystem: Any = None) -> None:
        self.groups: list[tuple[str | os.PathLike[str], int]] = []
        self.filesystem = filesystem  # (None: the local disk; a store on object storage: its own)
        starts = [0]
        for f in files:
            meta = open_checked(f, filesystem).metadata
            for i in range(meta.num_row_groups):
                self.groups.append((f, i))
                starts.append(starts[-1] + meta.row_group(i).num_rows)
        self.starts = np.asarray(starts, np.int64)
        self.cache: OrderedDict[int, pa.Table] = OrderedDict()
        self.pinned = 0  # while a slice is assembled, keep all of its row groups

    def _read(self, g: int, columns: Sequence[str] | None = None) -> pa.Table:
        path, i = self.groups[g]
        with open_checked(path, self.filesystem) as pf:  # pages checked against their CRC-32s
            return pf.read_row_group(i, columns=columns)

    def _remember(self, g: int, table: pa.Table) -> None:
        self.cache[g] = table
        self._trim()

    def _trim(self) -> None:
        """Forget the least recently used row groups beyond the count and byte budgets."""
        held = sum(t.nbytes for t in self.cache.values())
        while len(self.cache) > max(1, self.pinned) and \
                (len(self.cache) > _CACHED_ROW_GROUPS or held > _CACHED_BYTES):
            held -= self.cache.popitem(last=False)[1].nbytes

    def group(self, g: int) -> pa.Table:
        table = self.cache.get(g)
        if table is None:
            table = self._read(g)
            self._remember(g, table)
        else:
            self.cache.move_to_end(g)
        return table

    def take(self, positions: np.ndarray, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at ``positions`` (global), in that order (``columns`` only, when given)."""
        if len(positions) and positions[-1] - positions[0] == len(positions) - 1 and \
                (len(positions) < 2 or bool((np.diff(positions) == 1).all())):
            return self.slice(int(positions[0]), int(positions[-1]) + 1, columns)
        table = self._take(positions)
        return table if columns is None else table.select(columns)

    def _take(self, positions: np.ndarray) -> pa.Table:
        if not len(positions):
            return self.group(0).slice(0, 0)
        gidx = np.searchsorted(self.starts, positions, side="right") - 1
        if len(positions) and (gidx == gidx[0]).all():
            return self.group(int(gidx[0])).take(positions - self.starts[gidx[0]])
        parts = []
        order = []
        for g in np.unique(gidx):
            sel = np.flatnonzero(gidx == g)
            parts.append(self.group(int(g)).take(positions[sel] - self.starts[g]))
            order.append(sel)
        table = pa.concat_tables(parts)
        inverse = np.empty(len(positions), np.int64)
        inverse[np.concatenate(order)] = np.arange(len(positions))
        return table.take(inverse)


    def slice(self, lo: int, hi: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows ``lo`` to ``hi - 1`` (global), read from the row groups that hold them.

        With ``columns``, a row group the slice covers whole and that is not cached is read
        for those columns only, and not cached (a bulk read: nothing else of it is wanted);
        one it covers in part is read whole and cached, for the neighbours' next reads.
        """
        first = int(np.searchsorted(self.starts, lo, side="right") - 1)
        last = min(int(np.searchsorted(self.starts, hi, side="left") - 1), len(self.groups) - 1)
        whole = {g for g in range(first, last + 1) if columns is not None and g not in self.cache
                 and lo <= self.starts[g] and self.starts[g + 1] <= hi}
        missing = [g for g in range(first, last + 1) if g not in self.cache]
        self.pinned = last - first + 1
        read: dict[int, pa.Table] = {}

        def load(g: int) -> pa.Table:
            return self._read(g, columns if g in whole else None)

        if missing:
            if len(missing) > 1:  # decoded in parallel (Parquet decoding releases the GIL)
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(min(len(missing), os.cpu_count() or 1)) as pool:
                    tables = list(pool.map(load, missing))
            else:
                tables = [load(missing[0])]
            for g, table in zip(missing, tables, strict=True):
                if g in whole:
                    read[g] = table
                else:
                    self._remember(g, table)
        parts = []
        for g in range(first, last + 1):
            a, b = max(lo, int(self.starts[g])), min(hi, int(self.starts[g + 1]))
            table = read[g] if g in read else self.group(g)
            if columns is not None:
                table = table.select(columns)
            parts.append(table.slice(a - int(self.starts[g]), b - a))
        self.pinned = 0
        self._trim()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _index(store: StoreReader, files: list[Any]) -> pa.Table:
    """The run, episode and step of every ``steps`` row of ``files``, their pages checked."""
    if isinstance(store, Store):
        try:
            return store.dataset("steps", files=files).to_table(columns=_INDEX_KEYS)
        except READ_ERRORS as exc:  # a page failed its CRC-32: name the file
            raise store.damage("steps", exc, files=files) from exc
    parts = [open_checked(f, store.filesystem).read(columns=_INDEX_KEYS) for f in files]
    if not parts:
        schema = _schema.table("steps").arrow_schema()
        return pa.schema([schema.field(k) for k in _INDEX_KEYS]).empty_table()
    return pa.concat_tables(parts)


class DmEnvRows:
    """One run of a store, read in dm_env order (see the module docs).

    Args:
        data_directory: a store (or its path).
        run_id: which run; may be left out when the store holds one run with steps.

    Raises:
        StoreError: no steps, or several runs and no ``run_id``.

    Example:
        >>> rows = DmEnvRows("runs.rlarrow", run_id="a")  # doctest: +SKIP
        >>> for k in range(rows.num_episodes):  # doctest: +SKIP
        ...     steps = rows.episode_steps(k)
    """

    def __init__(self, data_directory: str | os.PathLike[str] | Store, *, run_id: str | None = None,
                 version: int | None = None) -> None:
        import pyarrow.compute as pc

        # a local store, or one pushed to object storage (a URI or a RemoteStore)
        self.store: StoreReader = open_reader(data_directory, version=version)
        files = list(self.store.files("steps"))
        index = _index(self.store, files)
        runs = pc.unique(index.column("run_id")).to_pylist()
        if run_id is None:
            if not runs:
                raise StoreError(f"{self.store.path}: no run has steps (episodes) to read")
            if len(runs) != 1:
                raise StoreError(f"{self.store.path}: {len(runs)} runs have steps ({', '.join(runs[:5])}"
                                 f"{', ...' if len(runs) > 5 else ''}); pass run_id=...")
            run_id = runs[0]
        elif run_id not in runs:
            raise StoreError(f"{self.store.path}: run {run_id!r} has no steps")
        self.run_id: str = run_id
        mine = np.flatnonzero(pc.equal(index.column("run_id"), run_id).to_numpy(zero_copy_only=False))
        episode = index.column("episode_id").to_numpy()[mine]
        step = index.column("step").to_numpy()[mine]
        order = np.lexsort((step, episode))
        self._positions = mine[order]  # global row of the run's n-th step (episode, step order)
        episode = episode[order]
        bounds = np.flatnonzero(np.diff(episode)) + 1
        self._episode_ids = episode[np.concatenate([[0], bounds])] if len(episode) else episode
        self._offsets = np.concatenate([[0], bounds, [len(episode)]]).astype(np.int64)
        self._lengths = np.diff(self._offsets)
        self._rows = _Rows(files, self.store.filesystem)
        run = self.store.read("runs", filter=pc.field("run_id") == run_id).to_pylist()
        self._run = run[0] if run else {}
        self._env_specs = derived_specs(
            _metadata.decode(self._run.get("env_specs"), self._run.get("env_specs_types")) or {})
        #: the run's ``source`` (``"envlogger"`` for an envlogger import; None if unknown)
        self.source: str | None = self._run.get("source")
        self._dm_env: Any = None
        self._frames: VideoFrames | None | bool = False  # (False: not looked for yet)

    # ------------------------------------------------------------------ counts

    @property
    def num_episodes(self) -> int:
        """How many episodes the run has steps of."""
        return len(self._lengths)

    @property
    def num_steps(self) -> int:
        """How many steps (rows) the run has, all episodes together."""
        return int(self._offsets[-1])

    def episode_length(self, k: int) -> int:
        """How many steps episode ``k`` (the k-th in episode_id order, from 0) has."""
        return int(self._lengths[k])

    @property
    def episode_ids(self) -> np.ndarray:
        """The ``episode_id`` of the k-th episode, for every k (int64, increasing)."""
        return np.asarray(self._episode_ids)

    @property
    def env_specs(self) -> dict[str, Any]:
        """The run's ``env_specs``, with dm_env specs derived from its gymnasium spaces where it has none."""
        return dict(self._env_specs) if isinstance(self._env_specs, dict) else {}

    def refuse_bytes(self, what: str) -> None:
        """Raise when the run's observation or action holds bytes (images an RLDS import kept encoded).

        ``what`` names the export in the message (``"a Minari dataset"``).

        Raises:
            InvalidInputError: naming the fields and how to export them (decoded images).
        """
        from rlarrow.core.errors import InvalidInputError

        found = []
        schema = self.store.schema("steps")
        for name in ("observation", "action"):
            if schema is not None and name in schema.names:
                found += [p for p in _byte_leaves(schema.field(name).type, name)]
        if found:
            raise InvalidInputError(
                self.store.path,
                f"run {self.run_id}: {', '.join(found)} hold bytes (images an RLDS import kept "
                f"encoded); {what} holds numbers: import the dataset with its images decoded to export it",
            )

    @property
    def run(self) -> dict[str, Any]:
        """The run's ``runs`` row (``metadata`` and ``env_specs`` as stored: JSON text)."""
        return dict(self._run)

    # ------------------------------------------------------------------ metadata and specs

    def metadata(self) -> dict[str, Any]:
        """The run's metadata, with ``environment_specs`` as envlogger adds it."""
        meta = _metadata.decode(self._run.get("metadata"), self._run.get("metadata_types"))
        return run_metadata(meta, self._env_specs)

    def episode_metadata(self) -> list[Any]:
        """Each episode's metadata (``episode_fn``'s last non-None value), in episode order."""
        import pyarrow.compute as pc

        table = self.store.read("episodes", columns=["episode_id", "metadata", "metadata_types"],
                                filter=pc.field("run_id") == self.run_id)
        by_id = dict(zip(table.column("episode_id").to_pylist(),
                         _metadata.decode_column(table.column("metadata").to_pylist(),
                                                 table.column("metadata_types").to_pylist()), strict=True))
        out = []
        for eid in self._episode_ids.tolist():
            out.append(episode_fn_value(by_id.get(eid)))
        return out

    def _spec(self, key: str) -> Any:
        return _specs.from_dict(self._env_specs.get(key))

    def observation_spec(self) -> Any:
        """The recorded environment's observation spec (a dm_env spec).

        For gym recordings and Minari imports, the spec of the gymnasium space (see
        :func:`rlarrow.core.specs.from_space`): a ``Box`` is a ``BoundedArray`` of its shape and
        dtype, a ``Discrete`` a ``DiscreteArray``, Dict and Tuple spaces dicts and lists.
        """
        return self._spec("observation_spec")

    def action_spec(self) -> Any:
        """The recorded environment's action spec."""
        return self._spec("action_spec")

    def reward_spec(self) -> Any:
        """The recorded environment's reward spec."""
        return self._spec("reward_spec")

    def discount_spec(self) -> Any:
        """The recorded environment's discount spec."""
        return self._spec("discount_spec")

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Release cached data."""
        self._rows.cache.clear()

    def __enter__(self) -> DmEnvRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ columns

    def episode_table(self, k: int | slice, columns: Sequence[str] | None = None) -> pa.Table:
        """Episode ``k`` (or a slice of episodes) as the ``steps`` rows, RLDS-aligned.

        ``columns`` picks columns: many episodes are then read for those columns only. Cameras
        in the video layout are decoded into the observation (:mod:`rlarrow.core.video`).
        """
        ks = range(*k.indices(len(self._lengths))) if isinstance(k, slice) else range(k, k + 1)
        if not ks:
            pos = np.empty(0, np.int64)
        elif ks.step == 1:  # consecutive episodes are consecutive in the index
            pos = self._positions[self._offsets[ks.start]:self._offsets[ks.stop]]
        else:
            pos = np.concatenate([self._positions[self._offsets[i]:self._offsets[i + 1]] for i in ks])
        frames = self._video_frames()
        if frames is None or (columns is not None and "observation" not in columns):
            return self._rows.take(pos, None if columns is None else list(columns))
        keys = ["run_id", "episode_id", "env_index", "step"]
        stored = self.store.schema("steps")
        wanted = None if columns is None else [  # (a camera-only observation has no stored column)
            c for c in dict.fromkeys([*columns, *keys]) if stored is None or c in stored.names]
        table = with_frames(self._rows.take(pos, wanted), frames)
        return table if columns is None else table.select(list(columns))

    def _video_frames(self) -> VideoFrames | None:
        if self._frames is False:
            if not isinstance(self.store, Store) and self.store.row_count("videos"):
                raise StoreError(f"{self.store.path}: its cameras are in the video layout, which is not read "
                                 "from object storage yet; read a local copy of the store")
            found = VideoFrames.of(self.store)
            self._frames = found if found is not None and found.columns(self.run_id) else None
        return self._frames  # type: ignore[return-value]

    def episode_columns(self, k: int | slice, columns: Sequence[str] = ("observation", "action", "reward",
                                                                       "discount", "is_first", "is_last",
                                                                       "is_terminal")) -> dict[str, Any]:
        """Episode ``k`` (or several) as NumPy columns, RLDS-aligned (no per-step objects).

        Tensor columns come back ``(steps, *shape)`` (dicts of those for dict observations);
        null actions, rewards and discounts on last steps are NaN (floats) or 0.
        """
        table = self.episode_table(k, columns)
        out: dict[str, Any] = {}
        for name in columns:
            col = table.column(name)
            if name in ("observation", "action"):
                out[name] = to_numpy(col, fill_value=None if _is_float(col.type) else 0)
            else:
                out[name] = col.to_numpy(zero_copy_only=False)
        return out

    # ------------------------------------------------------------------ steps in dm_env order

    def episode_steps(self, k: int) -> list[StepData]:
        """Episode ``k``'s steps in dm_env order, as :class:`StepData` (needs dm_env)."""
        return self.step_range(int(self._offsets[k]), int(self._offsets[k + 1]))

    def step_range(self, lo: int, hi: int) -> list[StepData]:
        """Steps ``lo`` to ``hi - 1`` (in episode, step order) as :class:`StepData`, in bulk.

        :func:`dm_env_steps` of the rows that hold them (and the row before ``lo``, whose
        action led to it). Needs dm_env.
        """
        if self._dm_env is None:
            from rlarrow.core.deps import require

            self._dm_env = require("dm_env", feature="Reader steps (dm_env timesteps)")
        dm_env = self._dm_env
        if hi <= lo:
            return []
        offsets = self._offsets
        k_lo = int(np.searchsorted(offsets, lo, side="right") - 1)
        start = lo - 1 if lo > offsets[k_lo] else lo  # the row before: its action led here
        table = with_frames(self._rows.take(self._positions[start:hi]), self._video_frames())
        index = np.arange(start, hi)
        k = np.searchsorted(offsets, index, side="right") - 1
        return dm_env_steps(table, index - offsets[k], self._env_specs, skip=lo - start, dm_env=dm_env)


def dm_env_steps(table: pa.Table, within: np.ndarray | None = None, env_specs: Any = None, *, skip: int = 0,
                 dm_env: Any = None) -> list[StepData]:
    """``steps`` rows in RLDS alignment as :class:`StepData` in dm_env order (needs dm_env).

    The shift of :func:`rlarrow.core.alignment.rlds_to_dm_env`, over many rows at once: a
    timestep takes the reward, discount and action of the row before it (none where it
    starts an episode); it is FIRST at an episode's first step, LAST at its last step
    (``is_last``), MID otherwise. An episode whose first rows are not there (it does not
    start at ``is_first``) starts with a MID timestep. Each step's ``custom_data`` is its
    decoded ``metadata``, with its typed ``infos`` under ``"infos"``. What
    :meth:`DmEnvRows.step_range` and the envlogger writer give.

    Args:
        table: the rows of one or more episodes, each in step order.
        within: each row's step within its episode (0 where one starts); None: the rows
            are one whole episode.
        env_specs: the run's specs as dicts (:func:`derived_specs`): tuple observations
            come back as tuples, dicts as dicts.
        skip: leave out the first ``skip`` steps (rows read only for the action they hold).
        dm_env: the ``dm_env`` module (None: imported here).

    Example:
        >>> import numpy as np
        >>> from rlarrow.core import schema
        >>> rows = schema.build("steps", {
        ...     "run_id": "a", "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...     "observation": np.arange(3, dtype=np.float32), "action": [1, 0, None],
        ...     "reward": [0.0, 1.0, None], "discount": [1.0, 0.0, None],
        ...     "is_first": [True, False, False], "is_last": [False, False, True],
        ...     "is_terminal": [False, False, True]})
        >>> steps = dm_env_steps(rows)
        >>> [int(s.timestep.step_type) for s in steps], steps[0].action, [int(s.action) for s in steps[1:]]
        ([0, 1, 2], None, [1, 0])
    """
    if dm_env is None:
        from rlarrow.core.deps import require

        dm_env = require("dm_env", feature="dm_env timesteps")
    n = table.num_rows
    t = np.arange(n) if within is None else np.asarray(within)
    specs = env_specs if isinstance(env_specs, dict) else {}
    obs = _rows_of(table.column("observation"), specs.get("observation_spec"))
    act = _rows_of(table.column("action"), specs.get("action_spec"))
    reward, discount = _scalar_rows(table.column("reward")), _scalar_rows(table.column("discount"))
    is_first = table.column("is_first").to_numpy(zero_copy_only=False)
    is_last = table.column("is_last").to_numpy(zero_copy_only=False)
    meta_col = table.column("metadata")
    if meta_col.null_count == n:
        custom: list[Any] = [None] * n
    else:
        custom = _metadata.decode_column(meta_col.to_pylist(), table.column("metadata_types").to_pylist())
    custom = _with_typed_infos(table, custom)
    types = np.array([dm_env.StepType(_alignment.FIRST), dm_env.StepType(_alignment.MID),
                      dm_env.StepType(_alignment.LAST)], dtype=object)
    kind = types[np.where(is_first & (t == 0), 0, np.where(is_last, 2, 1))].tolist()
    # dm_env order: a step carries the reward, discount and action of the row before it,
    # nothing where it starts an episode (no step before it led there)
    reward, discount, act = [None, *reward[:-1]], [None, *discount[:-1]], [None, *act[:-1]]
    for i in np.flatnonzero(t == 0).tolist():
        reward[i] = discount[i] = act[i] = None
    # the named tuples are made by tuple.__new__ through map: no Python frame per step
    make = tuple.__new__
    timesteps = map(make, repeat(dm_env.TimeStep),
                    zip(kind[skip:], reward[skip:], discount[skip:], obs[skip:], strict=True))
    with _gc_paused():
        return list(map(make, repeat(StepData), zip(timesteps, act[skip:], custom[skip:], strict=True)))


def _with_typed_infos(table: pa.Table, custom: list[Any]) -> list[Any]:
    """Each step's custom data with its typed ``infos`` (steps 1.1) under ``"infos"``, as 1.0 kept them."""
    from rlarrow.core.step_columns import infos_leaves

    typed = infos_leaves(table)
    if typed is None or not typed[1].any():
        return custom
    leaves, valid = typed
    out = list(custom)
    for i in np.flatnonzero(valid).tolist():
        infos = _metadata.nest({path: values[i] for path, values in leaves.items()})
        meta = out[i]
        if meta is None or isinstance(meta, dict):
            meta = dict(meta or {})
            meta["infos"] = {**(meta.get("infos") or {}), **infos}
            out[i] = meta
    return out


def run_metadata(meta: Any, env_specs: Any) -> dict[str, Any]:
    """A run's decoded metadata as envlogger gives it: a dict, with ``environment_specs`` added.

    A run's metadata that is not a dict is kept under ``"metadata"``; ``environment_specs``
    is ``env_specs`` unless the metadata has its own (an envlogger import keeps envlogger's).

    Example:
        >>> run_metadata({"who": "me"}, {"observation_spec": None})
        {'who': 'me', 'environment_specs': {'observation_spec': None}}
    """
    out = dict(meta) if isinstance(meta, dict) else ({} if meta is None else {"metadata": meta})
    out.setdefault("environment_specs", env_specs)
    return out


def episode_fn_value(meta: Any) -> Any:
    """An episode's decoded ``episodes`` metadata as envlogger gives it: ``episode_fn``'s value.

    A recording that kept a FIRST timestep's reward or discount (not None) stored them beside
    ``episode_fn``'s value; envlogger's episode metadata is that value alone.

    Example:
        >>> episode_fn_value({"episode_fn": {"t": 4}, "first_reward": 1.0})
        {'t': 4}
        >>> episode_fn_value({"t": 4})
        {'t': 4}
    """
    if isinstance(meta, dict) and "episode_fn" in meta and "first_reward" in meta:
        return meta["episode_fn"]
    return meta


def _byte_leaves(type_: pa.DataType, path: str) -> list[str]:
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in _byte_leaves(f.type, f"{path}.{f.name}")]
    return [path] if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) else []


def derived_specs(env_specs: Any) -> Any:
    """``env_specs`` with dm_env specs derived from gymnasium spaces where it has none.

    Gym recordings made before they stored specs, and Minari imports, describe their
    spaces (``observation_space``, ``action_space``): :func:`rlarrow.core.specs.from_space`
    turns those into the specs the Reader gives (a float64 scalar reward spec with them).
    """
    if not isinstance(env_specs, dict):
        return env_specs
    out = dict(env_specs)
    derived = False
    for kind in ("observation", "action"):
        if out.get(f"{kind}_spec") is None and out.get(f"{kind}_space") is not None:
            out[f"{kind}_spec"] = _specs.from_space(out[f"{kind}_space"])
            derived = True
    if derived and out.get("reward_spec") is None:
        out["reward_spec"] = dict(_specs.REWARD_SPEC)
    return out


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a block makes many acyclic objects.

    Tens of thousands of new tuples trigger collections that walk every live object, again
    and again; the steps made here hold no cycles, so those walks find nothing. The
    collector's state is restored afterwards (left off if it was off).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _is_float(type_: pa.DataType) -> bool:
    while pa.types.is_fixed_size_list(type_):
        type_ = type_.value_type
    return bool(pa.types.is_floating(type_))


def _scalar_rows(col: pa.ChunkedArray) -> list[Any]:
    """A float column as NumPy scalars per row (as dm_env gives them), None where null."""
    values = list(col.to_numpy(zero_copy_only=False))
    if col.null_count:
        for i in np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False)).tolist():
            values[i] = None
    return values


def _rows_of(col: pa.ChunkedArray, spec: Any) -> list[Any]:
    """Per-row values of a tensor column: arrays (scalars for shape ()), dicts or tuples as the spec."""
    if col.null_count == len(col):
        return [None] * len(col)
    fill = 0 if not _is_float(col.type) else None
    # chunk by chunk: each row a view into its chunk's buffer, no copy of the whole column
    rows = [row for chunk in col.chunks for row in _split(to_numpy(chunk, fill_value=fill), spec, len(chunk))]
    nulls = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
    if nulls is not None:
        rows = [None if nulls[i] else r for i, r in enumerate(rows)]
    return rows


def _split(values: Any, spec: Any, n: int) -> list[Any]:
    """Per-row values: array views (NumPy scalars for shape ()), dicts, or tuples as the spec says."""
    if isinstance(values, dict):
        if isinstance(spec, list):  # tuple observations were stored as {"0": ..., "1": ...}
            items = [_split(values[str(j)], sub, n) for j, sub in enumerate(spec)]
            return [tuple(item[i] for item in items) for i in range(n)]
        parts = {k: _split(v, spec.get(k) if isinstance(spec, dict) else None, n) for k, v in values.items()}
        return [{k: parts[k][i] for k in parts} for i in range(n)]
    return list(values)
