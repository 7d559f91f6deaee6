"""Training loggers with tianshou's ``BaseLogger`` interface that write the ``scalars`` table.

:class:`ArrowLogger` plugs into a tianshou 2 trainer (``TrainerParams(logger=...)``) in place
of its ``TensorboardLogger``: the same tags (``training/...``, ``test/...``, ``update/...``,
``info/...``, ``save/...``), the same interval logic, and the same static
``restore_logged_data``, but every point goes into a store (flushed every ``flush_seconds``
and at each checkpoint, so a killed run keeps what was flushed), and nothing is sampled
(TensorBoard's reader keeps a 10,000-point reservoir per tag). Pass ``tfevents_dir`` to
write TensorBoard event files as well. :class:`LazyLogger` writes nothing.

Resuming: ``restore_data()`` returns ``(epoch, env_step, gradient_step)`` of the last
checkpoint logged, and a point for a tag at a step the store already holds (logged before
the restart) is not written again, so a resumed run has no duplicated points.

Example:
    >>> import tempfile
    >>> store = tempfile.mkdtemp() + "/log.rlarrow"
    >>> logger = ArrowLogger(store, run_id="ppo-1", training_interval=1)
    >>> logger.log_training_data({"returns_stat": {"mean": 10.5}, "n_collected_steps": 100}, step=100)
    >>> logger.finalize()
    >>> data = ArrowLogger.restore_logged_data(store)
    >>> data["training"]["returns_stat"]["mean"], data["training"]["returns_stat"]["mean"].steps
    (LoggedSeries([10.5]), array([100]))
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Mapping
from numbers import Number
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow import schema as _schema
from rlarrow.errors import InvalidInputError
from rlarrow.io.tfevents import scope_of

__all__ = ["ArrowLogger", "DataScope", "LazyLogger", "LoggedSeries"]


class DataScope(enum.StrEnum):
    """The scopes of a training log; the values are tianshou's tag prefixes.

    ``scope`` is the name the ``scalars`` table's ``scope`` column uses.

    >>> f"{DataScope.TRAIN}/env_step", DataScope.TRAIN.scope, DataScope("update").scope
    ('training/env_step', 'train', 'update')
    """

    TRAINING = "training"
    TEST = "test"
    UPDATE = "update"
    INFO = "info"
    TRAIN = "training"  # an alias: the same member as TRAINING

    @property
    def scope(self) -> str:
        """The ``scalars.scope`` name of this scope (``train`` for ``training``)."""
        return "train" if self is DataScope.TRAINING else self.value


class LoggedSeries(np.ndarray):
    """The values of one tag: a NumPy array, as tianshou returns them.

    ``steps`` and ``wall_times`` are arrays alongside, one entry per value.
    """

    steps: np.ndarray
    wall_times: np.ndarray

    def __new__(cls, values: Any, steps: Any = None, wall_times: Any = None) -> LoggedSeries:
        """Wrap ``values`` (float64) with their ``steps`` and ``wall_times``."""
        obj = np.asarray(values, dtype=np.float64).view(cls)
        obj.steps = np.asarray(steps if steps is not None else np.arange(len(obj)), dtype=np.int64)
        obj.wall_times = np.asarray(wall_times if wall_times is not None else np.full(len(obj), np.nan),
                                    dtype=np.float64)
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        if obj is None:
            return
        self.steps = getattr(obj, "steps", None)  # type: ignore[assignment]
        self.wall_times = getattr(obj, "wall_times", None)  # type: ignore[assignment]


def _is_loggable(value: Any) -> bool:
    return isinstance(value, (Number, np.number, np.ndarray)) and not isinstance(value, complex)


class _BaseLogger:
    """tianshou 2's ``BaseLogger`` logic: intervals per scope, flattening, the log_* calls."""

    def __init__(
        self,
        training_interval: int = 1000,
        test_interval: int = 1,
        update_interval: int = 1000,
        info_interval: int = 1,
        save_interval: int | None = 1,
        exclude_arrays: bool = True,
        *,
        train_interval: int | None = None,
    ) -> None:
        self.training_interval = training_interval if train_interval is None else train_interval
        self.test_interval = test_interval
        self.update_interval = update_interval
        self.info_interval = info_interval
        self.save_interval = save_interval
        self.exclude_arrays = exclude_arrays
        self.last_log_training_step = -1
        self.last_log_test_step = -1
        self.last_log_update_step = -1
        self.last_log_info_step = -1
        self.last_save_step = -1

    @property
    def train_interval(self) -> int:
        """An alias of ``training_interval``."""
        return self.training_interval

    def write(self, step_type: str, step: int, data: Mapping[str, Any]) -> None:
        """Write one call's points (subclasses)."""
        raise NotImplementedError

    def prepare_dict_for_logging(self, input_dict: Mapping[str, Any], parent_key: str = "",
                                 delimiter: str = "/", exclude_arrays: bool | None = None) -> dict[str, Any]:
        """Flatten nested dicts into ``a/b/c`` keys, keeping numbers (and arrays unless excluded).

        >>> LazyLogger().prepare_dict_for_logging({"loss": {"actor": 1.0, "skip": None}, "n": 3})
        {'loss/actor': 1.0, 'n': 3}
        """
        exclude = self.exclude_arrays if exclude_arrays is None else exclude_arrays
        out: dict[str, Any] = {}

        def visit(d: Mapping[str, Any], prefix: str) -> None:
            for key, value in d.items():
                if exclude and isinstance(value, np.ndarray):
                    continue
                name = f"{prefix}{delimiter}{key}".lstrip(delimiter) if prefix else str(key)
                if isinstance(value, Mapping):
                    visit(value, name)
                elif _is_loggable(value):
                    out[name] = value

        visit(input_dict, parent_key)
        return out

    def _log(self, scope: DataScope, counter: str, last: str, interval: int, log_data: Mapping[str, Any],
             step: int) -> None:
        if step - getattr(self, last) >= interval:
            self.write(f"{scope}/{counter}", step, self.prepare_dict_for_logging(log_data))
            setattr(self, last, step)

    def log_training_data(self, log_data: Mapping[str, Any], step: int) -> None:
        """Log the collector's training statistics at env step ``step`` (every ``training_interval``)."""
        self._log(DataScope.TRAINING, "env_step", "last_log_training_step", self.training_interval,
                  log_data, step)

    log_train_data = log_training_data

    def log_test_data(self, log_data: Mapping[str, Any], step: int) -> None:
        """Log evaluation statistics at env step ``step`` (every ``test_interval``)."""
        self._log(DataScope.TEST, "env_step", "last_log_test_step", self.test_interval, log_data, step)

    def log_update_data(self, log_data: Mapping[str, Any], step: int) -> None:
        """Log policy-update statistics at gradient step ``step`` (every ``update_interval``)."""
        self._log(DataScope.UPDATE, "update_step", "last_log_update_step", self.update_interval,
                  log_data, step)

    def log_info_data(self, log_data: Mapping[str, Any], step: int) -> None:
        """Log end-of-epoch information at epoch ``step`` (every ``info_interval``)."""
        self._log(DataScope.INFO, "epoch", "last_log_info_step", self.info_interval, log_data, step)


class LazyLogger(_BaseLogger):
    """A logger that writes nothing (tianshou's placeholder)."""

    def write(self, step_type: str, step: int, data: Mapping[str, Any]) -> None:
        """Write nothing."""

    def finalize(self) -> None:
        """Nothing to close."""

    def save_data(self, epoch: int, env_step: int, gradient_step: int,
                  save_checkpoint_fn: Callable[[int, int, int], str] | None = None) -> None:
        """Save nothing."""

    def restore_data(self) -> tuple[int, int, int]:
        """Nothing to restore: ``(0, 0, 0)``."""
        return 0, 0, 0

    @staticmethod
    def restore_logged_data(log_path: str) -> dict[str, Any]:
        """Nothing was logged: ``{}``."""
        return {}


def _dtype_of(value: Any) -> tuple[float, int | None, str]:
    if isinstance(value, (bool, np.bool_)):
        return float(value), int(value), "bool"
    if isinstance(value, np.ndarray):
        value = value.item()
    if isinstance(value, (int, np.integer)):
        dtype = "int64" if isinstance(value, int) else str(np.dtype(type(value)))
        return float(value), int(value), dtype
    if isinstance(value, np.floating):
        return float(value), None, str(value.dtype)
    return float(value), None, "float64"


class ArrowLogger(_BaseLogger):
    """A tianshou-compatible logger writing the ``scalars`` table of a store.

    Args:
        store: a :class:`~rlarrow.Store` or its path (created when missing).
        run_id: the run to log into. A new run is created when it does not exist (default: a
            new id); an existing run is resumed (see :meth:`restore_data`).
        name, metadata: the new run's name and metadata (e.g. the hyperparameters).
        training_interval, test_interval, update_interval, info_interval, save_interval,
            exclude_arrays: as tianshou's loggers (``train_interval`` is an alias). Unlike
            tianshou's (``None``), ``save_interval`` defaults to 1: every epoch's
            ``save_data`` call records the counters :meth:`restore_data` needs.
        flush_seconds: commit buffered points at least this often (and at every checkpoint).
        tfevents_dir: also write TensorBoard event files there.

    Points are rows ``(run_id, scope, tag, step, value, value_int, wall_time)`` with
    ``encoding = 'logger'`` and the Python/NumPy dtype of the value (integers exact in
    ``value_int``). Arrays are skipped (``exclude_arrays``) or, when kept, logged when they
    hold one element.
    """

    def __init__(
        self,
        store: Any,
        run_id: str | None = None,
        *,
        name: str | None = None,
        metadata: Any = None,
        training_interval: int = 1000,
        test_interval: int = 1,
        update_interval: int = 1000,
        info_interval: int = 1,
        save_interval: int | None = 1,
        exclude_arrays: bool = True,
        train_interval: int | None = None,
        flush_seconds: float = 10.0,
        tfevents_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(training_interval, test_interval, update_interval, info_interval, save_interval,
                         exclude_arrays, train_interval=train_interval)
        from rlarrow.store import Store

        self._own = not isinstance(store, Store)
        self.store = Store.open(store, create=True) if self._own else store
        self._floor: dict[str, int] = {}
        if run_id is not None and self.store._run_exists(run_id):
            self.run_id = run_id
            if self.store.row_count("scalars"):
                done = self.store.read("scalars", columns=["tag", "step"],
                                       filter=pc.field("run_id") == run_id)
                if done.num_rows:
                    last = done.group_by("tag").aggregate([("step", "max")])
                    self._floor = dict(zip(last["tag"].to_pylist(), last["step_max"].to_pylist(),
                                           strict=True))
        else:
            self.run_id = self.store.add_run(source="rlarrow.ArrowLogger", run_id=run_id, name=name,
                                             metadata=metadata)
        self._schema = _schema.table("scalars").arrow_schema()
        self._rows: dict[str, list[Any]] = {f.name: [] for f in self._schema}
        self._writer: Any = self.store.writer("scalars", flush_seconds=flush_seconds)
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self._tfevents: Any = None
        if tfevents_dir is not None:
            from rlarrow.io.tfevents import EventFileWriter

            self._tfevents = EventFileWriter(tfevents_dir, flush_every=1 << 30)

    # ---- writing

    def _add(self, tag: str, step: int, value: Any, wall_time: float) -> None:
        if step <= self._floor.get(tag, -(1 << 63)):
            return  # logged before a restart: keep the first, never duplicate
        v, as_int, dtype = _dtype_of(value)
        rows = self._rows
        rows["run_id"].append(self.run_id)
        rows["scope"].append(scope_of(tag))
        rows["tag"].append(tag)
        rows["step"].append(int(step))
        rows["value"].append(v)
        rows["value_int"].append(as_int)
        rows["wall_time"].append(wall_time)
        rows["encoding"].append("logger")
        rows["dtype"].append(dtype)
        rows["plugin"].append(None)
        if self._tfevents is not None:
            self._tfevents.add_scalar(tag, as_int if as_int is not None and dtype != "bool" else v, step,
                                      wall_time, encoding="logger", dtype=dtype)

    def write(self, step_type: str, step: int, data: Mapping[str, Any]) -> None:
        """Log ``step_type`` (e.g. ``training/env_step``) = ``step``, and each ``scope/key`` of ``data``."""
        scope = step_type.split("/", 1)[0]
        now = time.time()
        self._add(step_type, step, step, now)
        for key, value in data.items():
            if isinstance(value, np.ndarray) and value.size != 1:
                continue  # scalars only: an array is not a point of a curve
            self._add(f"{scope}/{key}", step, value, now)
        if time.monotonic() - self._last_flush >= self._flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Commit every buffered point to the store (and the event file, if any)."""
        if self._rows["tag"]:
            batch = pa.RecordBatch.from_pydict(self._rows, schema=self._schema)
            self._rows = {f.name: [] for f in self._schema}
            self._writer.write(batch)
        self._writer.flush()
        if self._tfevents is not None:
            self._tfevents.flush()
        self._last_flush = time.monotonic()

    def finalize(self) -> None:
        """Flush and close (the store too, when the logger opened it)."""
        if self._writer is None:
            return
        self.flush()
        self._writer.close()
        self._writer = None
        if self._tfevents is not None:
            self._tfevents.close()
        if self._own:
            self.store.close()

    close = finalize

    def __enter__(self) -> ArrowLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finalize()

    # ---- checkpoints

    def save_data(self, epoch: int, env_step: int, gradient_step: int,
                  save_checkpoint_fn: Callable[[int, int, int], str] | None = None) -> None:
        """Record a checkpoint's counters every ``save_interval`` epochs, and flush.

        The points are ``save/epoch``, ``save/env_step`` and ``save/gradient_step`` (each at
        its own counter as step); ``save_checkpoint_fn`` is called first.
        """
        if self.save_interval is None or epoch - self.last_save_step < self.save_interval:
            return
        self.last_save_step = epoch
        if save_checkpoint_fn is not None:
            save_checkpoint_fn(epoch, env_step, gradient_step)
        now = time.time()
        self._add("save/epoch", epoch, epoch, now)
        self._add("save/env_step", env_step, env_step, now)
        self._add("save/gradient_step", gradient_step, gradient_step, now)
        self.flush()

    def restore_data(self) -> tuple[int, int, int]:
        """``(epoch, env_step, gradient_step)`` of the last checkpoint in the store.

        (0, 0, 0) if there is none. The interval counters restart from there.
        """
        self.flush()
        last: dict[str, int] = {}
        if self.store.row_count("scalars"):
            t = self.store.read("scalars", columns=["tag", "step"],
                                filter=(pc.field("run_id") == self.run_id)
                                & pc.field("tag").isin(["save/epoch", "save/env_step", "save/gradient_step"]))
            if t.num_rows:
                agg = t.group_by("tag").aggregate([("step", "max")])
                last = dict(zip(agg["tag"].to_pylist(), agg["step_max"].to_pylist(), strict=True))
        epoch = last.get("save/epoch", 0)
        env_step = last.get("save/env_step", 0)
        gradient_step = last.get("save/gradient_step", 0)
        if "save/epoch" in last:
            self.last_save_step = self.last_log_test_step = epoch
        if "save/gradient_step" in last:
            self.last_log_update_step = gradient_step
        if "save/env_step" in last:
            self.last_log_training_step = env_step
        return epoch, env_step, gradient_step

    @staticmethod
    def restore_logged_data(log_path: str | os.PathLike[str], run_id: str | None = None) -> dict[str, Any]:
        """Every logged point of a run, as tianshou's nested dict (``{"training": {"env_step": ...}}``).

        ``log_path`` is a store (``run_id`` picks the run when it holds several) or a
        TensorBoard log directory (read with rlarrow's reader; sub-runs are left out). Each
        leaf is a :class:`LoggedSeries`: the values, in step order, with ``.steps`` and
        ``.wall_times``. Nothing is sampled.
        """
        path = Path(log_path)
        if (path / "_rlarrow_store.json").is_file():
            from rlarrow.store import Store

            with Store.open(path) as st:
                flt = None
                if run_id is None:
                    ids = pc.unique(st.read("scalars", columns=["run_id"]).column("run_id")).to_pylist() \
                        if st.row_count("scalars") else []
                    if len(ids) > 1:
                        raise InvalidInputError(path, f"holds {len(ids)} logged runs "
                                                f"({', '.join(ids[:5])}...); "
                                                "pass run_id= to choose one")
                else:
                    flt = pc.field("run_id") == run_id
                table = st.read("scalars", columns=["tag", "step", "value", "wall_time"], filter=flt) \
                    if st.row_count("scalars") else None
        else:
            from rlarrow.io.tfevents import read_tfevents

            table = read_tfevents(path)
            table = table.filter(pc.equal(table["run_id"], "."))
        out: dict[str, Any] = {}
        if table is None or not table.num_rows:
            return out
        table = table.sort_by([("tag", "ascending"), ("step", "ascending")])
        tags = table["tag"].to_numpy(zero_copy_only=False)
        cut = np.flatnonzero(tags[1:] != tags[:-1]) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [len(tags)]])
        values = table["value"].to_numpy()
        steps = table["step"].to_numpy()
        walls = table["wall_time"].to_numpy(zero_copy_only=False)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            node = out
            *parents, leaf = str(tags[s]).split("/")
            for key in parents:
                nxt = node.setdefault(key, {})
                if not isinstance(nxt, dict):  # a tag that is also a prefix of others
                    nxt = node[key] = {"": nxt}
                node = nxt
            node[leaf] = LoggedSeries(values[s:e], steps[s:e], walls[s:e])
        return out

