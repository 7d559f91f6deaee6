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
import warnings
from collections.abc import Callable, Mapping
from numbers import Number
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlarrow.core import arguments as _arguments
from rlarrow.core import exits
from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentTypeError, InvalidInputError, RLArrowWarning, StoreError
from rlarrow.io.tfevents import scope_of

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["ArrowLogger", "LazyLogger", "SummaryWriter"]


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


_INT_DTYPES = frozenset(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
_FLOAT_DTYPES = frozenset(("float16", "bfloat16", "float32", "float64"))


def _int64(value: int) -> int | None:
    """``value`` for ``value_int``, or None beyond int64 (a uint64 above 2^63 - 1: ``value`` keeps it)."""
    return value if -(1 << 63) <= value < (1 << 63) else None


def _dtype_of(value: Any) -> tuple[float, int | None, str]:
    """``(value as float, exact integer or None, dtype name)`` of a number to log.

    Python and NumPy numbers, one-element NumPy arrays, and one-element tensors of any
    library with ``.item()`` and ``.dtype`` (torch, JAX...; never imported here).

    Raises:
        TypeError: ``value`` is not a number, or holds more than one.
    """
    if isinstance(value, (bool, np.bool_)):
        return float(value), int(value), "bool"
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ArgumentTypeError(f"an array of {value.size} values is not a scalar")
        value = value.reshape(-1)[0]
    elif not isinstance(value, (Number, np.generic)) and hasattr(value, "item") and hasattr(value, "dtype"):
        dtype = str(value.dtype).rsplit(".", 1)[-1]  # torch.float32 -> float32
        try:
            item = value.item()
        except (ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(f"a {type(value).__name__} that is not a scalar ({exc})") from None
        if isinstance(item, bool):
            return float(item), int(item), "bool"
        if isinstance(item, int):
            return float(item), _int64(item), dtype if dtype in _INT_DTYPES else "int64"
        if isinstance(item, float):
            return item, None, dtype if dtype in _FLOAT_DTYPES else "float64"
        value = item
    if isinstance(value, (bool, np.bool_)):
        return float(value), int(value), "bool"
    if isinstance(value, (int, np.integer)):
        dtype = "int64" if isinstance(value, int) else str(np.dtype(type(value)))
        return float(value), _int64(int(value)), dtype
    if isinstance(value, np.floating):
        return float(value), None, str(value.dtype)
    if not isinstance(value, Number) or isinstance(value, complex):
        raise ArgumentTypeError(f"a {type(value).__name__} is not a real number")
    return float(value), None, "float64"  # type: ignore[arg-type]


class ArrowLogger(_BaseLogger):
    """A tianshou-compatible logger writing the ``scalars`` table of a store.

    Args:
        store: a :class:`~rlarrow.Store` or its path (created when missing).
        run_id: the run to log into. A new run is created when it does not exist (default: a
            new id); an existing run is resumed (see :meth:`restore_data`).
        name, metadata: the new run's name and metadata (e.g. the hyperparameters).
        training_interval, test_interval, update_interval, info_interval, save_interval, exclude_arrays:
            as tianshou's loggers (``train_interval`` is an alias). Unlike
            tianshou's (``None``), ``save_interval`` defaults to 1: every epoch's
            ``save_data`` call records the counters :meth:`restore_data` needs.
        flush_seconds: commit buffered points at least this often (and at every checkpoint).
        tfevents_dir: also write TensorBoard event files there.

    Points are rows ``(run_id, scope, tag, step, value, value_int, wall_time)`` with
    ``encoding = 'logger'`` and the Python/NumPy dtype of the value (integers exact in
    ``value_int``). Arrays are skipped (``exclude_arrays``) or, when kept, logged when they
    hold one element. The event files (``tfevents_dir``) hold each point as a float32
    ``simple_value``, which TensorBoard, tbparse, tianshou's ``restore_logged_data`` and
    skrl read, with the exact value beside it for rlarrow's reader (see
    :mod:`rlarrow.io.tfevents`).
    """

    _SOURCE = "rlarrow.ArrowLogger"

    def __init__(
        self,
        store: StoreLike,
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
        from rlarrow.core.store import as_store
        from rlarrow.core.targets import refuse_object_storage

        if tfevents_dir is not None:  # (before the store: nothing is made when refused)
            refuse_object_storage(tfevents_dir, "TensorBoard event files (tfevents_dir, log_dir)")
        self.store = as_store(store, create=True)
        self._own = self.store is not store
        self._floor: dict[tuple[str, str], int] = {}
        if run_id is not None and self.store.has_run(run_id):
            self.run_id = run_id
            self._load_floor(run_id)
        else:
            self.run_id = self.store.add_run(source=self._SOURCE, run_id=run_id, name=name, metadata=metadata)
        self._runs = {self.run_id}
        self._schema = _schema.table("scalars").arrow_schema()
        self._rows: dict[str, list[Any]] = {f.name: [] for f in self._schema}
        self._writer: Any = self.store.writer("scalars", flush_seconds=flush_seconds)
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self._tfevents_dir = None if tfevents_dir is None else Path(tfevents_dir)
        self._mirrors: dict[str, Any] = {}
        self._tfevents: Any = None
        if self._tfevents_dir is not None:
            self._tfevents = self._mirror(self.run_id, self._tfevents_dir)
        # committed at exit (or on SIGTERM) when never finalized, as tianshou's examples leave it;
        # registered after its writer, so closed before it
        exits.track(self, self.finalize)

    def _load_floor(self, run_id: str) -> None:
        """Remember the last step of each tag ``run_id`` holds (points up to it are not written again)."""
        if not self.store.row_count("scalars"):
            return
        done = self.store.read("scalars", columns=["tag", "step"], filter=pc.field("run_id") == run_id)
        if done.num_rows:
            last = done.group_by("tag").aggregate([("step", "max")])
            for tag, step in zip(last["tag"].to_pylist(), last["step_max"].to_pylist(), strict=True):
                self._floor[(run_id, tag)] = step

    def _mirror(self, run_id: str, directory: Path) -> Any:
        from rlarrow.io.tfevents import EventFileWriter

        writer = self._mirrors[run_id] = EventFileWriter(directory, flush_every=1 << 30)
        exits.untrack(writer)  # the logger's: closed by finalize(), after its last points
        return writer

    def _sub_run(self, name: str) -> str:
        """The run ``<run_id>/<name>`` (a SummaryWriter ``add_scalars`` sub-run), created on first use.

        Its event files (with ``tfevents_dir``) go to ``tfevents_dir/<name>/``, as TensorBoard nests them.
        """
        rid = f"{self.run_id}/{name}"
        if rid not in self._runs:
            if self.store.has_run(rid):
                self._load_floor(rid)
            else:
                self.store.add_run(source=self._SOURCE, run_id=rid, name=name,
                                   metadata={"parent_run": self.run_id})
            self._runs.add(rid)
            if self._tfevents_dir is not None:
                self._mirror(rid, self._tfevents_dir / name)
        return rid

    # ---- writing

    def _add(self, tag: str, step: int, value: Any, wall_time: float, run_id: str | None = None) -> None:
        rid = self.run_id if run_id is None else run_id
        if step <= self._floor.get((rid, tag), -(1 << 63)):
            return  # logged before a restart: keep the first, never duplicate
        v, as_int, dtype = _dtype_of(value)
        rows = self._rows
        rows["run_id"].append(rid)
        rows["scope"].append(scope_of(tag))
        rows["tag"].append(tag)
        rows["step"].append(int(step))
        rows["value"].append(v)
        rows["value_int"].append(as_int)
        rows["wall_time"].append(wall_time)
        rows["encoding"].append("logger")
        rows["dtype"].append(dtype)
        rows["plugin"].append(None)
        mirror = self._mirrors.get(rid)
        if mirror is not None:
            mirror.add_scalar(tag, v, int(step), wall_time, encoding="logger", dtype=dtype, value_int=as_int)

    def write(self, step_type: str, step: int, data: Mapping[str, Any]) -> None:
        """Log ``step_type`` (e.g. ``training/env_step``) = ``step``, and each ``scope/key`` of ``data``."""
        scope = step_type.split("/", 1)[0]
        now = time.time()
        self._add(step_type, step, step, now)
        for key, value in data.items():
            if isinstance(value, np.ndarray) and value.size != 1:
                continue  # scalars only: an array is not a point of a curve
            self._add(f"{scope}/{key}", step, value, now)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self._flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Commit every buffered point to the store (and the event files, if any)."""
        if self._writer is None:
            raise StoreError(f"{self.store.path}: the logger of run {self.run_id!r} is closed; "
                             "open a new one (the same run_id resumes the run) to log more")
        if self._rows["tag"]:
            batch = pa.RecordBatch.from_pydict(self._rows, schema=self._schema)
            self._rows = {f.name: [] for f in self._schema}
            self._writer.write(batch)
        self._writer.flush()
        for mirror in self._mirrors.values():
            mirror.flush()
        self._last_flush = time.monotonic()

    def finalize(self) -> None:
        """Flush and close (the store too, when the logger opened it).

        Calling it twice is harmless; a logger never finalized is finalized when the
        interpreter exits or the process is stopped with SIGTERM (:mod:`rlarrow.core.exits`).
        """
        if self._writer is None:
            return
        exits.untrack(self)
        self.flush()
        self._writer.close()
        self._writer = None
        for mirror in self._mirrors.values():
            mirror.close()
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
        if os.path.lexists(path / "_rlarrow_store.json"):  # (a linked manifest: Store.open refuses it)
            from rlarrow.core.store import Store

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



#: ``torch.utils.tensorboard.SummaryWriter`` methods :class:`SummaryWriter` accepts and ignores (warning once)
UNSTORED_METHODS = (
    "add_audio", "add_custom_scalars", "add_custom_scalars_marginchart", "add_custom_scalars_multilinechart",
    "add_embedding", "add_figure", "add_graph", "add_histogram", "add_histogram_raw", "add_hparams",
    "add_image", "add_image_with_boxes", "add_images", "add_mesh", "add_onnx_graph", "add_pr_curve",
    "add_pr_curve_raw", "add_tensor", "add_text", "add_video",
)


class _WriterLog(ArrowLogger):
    _SOURCE = "rlarrow.SummaryWriter"


class SummaryWriter:
    """A drop-in for the scalar side of ``torch.utils.tensorboard.SummaryWriter`` (and skrl's).

    Every ``add_scalar`` is a row of the store's ``scalars`` table, in run ``run_id``
    (``encoding = 'logger'``, the exact value and its dtype kept, ``value_int`` for
    integers); with ``log_dir`` the points also go to TensorBoard event files there, which
    TensorBoard, tbparse, tianshou and skrl read (see :mod:`rlarrow.io.tfevents`).
    ``add_scalars`` writes sub-runs as torch does: the value of key ``k`` goes under tag
    ``main_tag`` into run ``<run_id>/<main_tag with / as _>_<k>`` (event files in the
    folder of that name under ``log_dir``). Points are committed every ``flush_secs``, on
    :meth:`flush` and on :meth:`close`.

    Values: Python numbers, NumPy scalars and one-element arrays, one-element tensors
    (torch is never imported here). The other ``SummaryWriter`` methods
    (:data:`UNSTORED_METHODS`: ``add_histogram``, ``add_image``, ``add_text``,
    ``add_hparams``, ...) do nothing and warn once each (:class:`~rlarrow.core.errors.RLArrowWarning`),
    so a training script runs unchanged.

    Args:
        store: a :class:`~rlarrow.Store` or its path (created when missing).
        run_id: the run (default: a new id). An existing run is resumed: a point at a step
            its tag already has (or an earlier one) is not written again.
        log_dir: also write event files here (optional).
        name, metadata: the new run's name and metadata (e.g. hyperparameters).
        flush_secs: commit buffered points at least this often, in seconds.

    Example:
        >>> import tempfile
        >>> store = tempfile.mkdtemp() + "/runs.rlarrow"
        >>> with SummaryWriter(store, run_id="ppo") as writer:
        ...     writer.add_scalar("loss", 0.25, global_step=1)
        ...     writer.add_scalars("reward", {"mean": 1.5, "max": 3}, global_step=1)
        >>> import rlarrow
        >>> rlarrow.sql(store, "SELECT run_id, tag, value FROM scalars ORDER BY run_id").to_pylist()
        ... # doctest: +NORMALIZE_WHITESPACE
        [{'run_id': 'ppo', 'tag': 'loss', 'value': 0.25},
         {'run_id': 'ppo/reward_max', 'tag': 'reward', 'value': 3.0},
         {'run_id': 'ppo/reward_mean', 'tag': 'reward', 'value': 1.5}]

        In skrl, after the trainer is built (it creates ``agent.writer``)::

            agent.writer = SummaryWriter("runs.rlarrow", run_id="ppo-cartpole", log_dir=agent.experiment_dir)
    """

    def __init__(
        self,
        store: StoreLike,
        run_id: str | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        metadata: Any = None,
        flush_secs: float = 10.0,
    ) -> None:
        _arguments.number(flush_secs, "flush_secs", minimum=0)  # (0: commit at every point)
        self._log = _WriterLog(store, run_id, name=name, metadata=metadata, flush_seconds=flush_secs,
                               tfevents_dir=log_dir)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self._warned: set[str] = set()

    @property
    def run_id(self) -> str:
        """The run the scalars go to."""
        return self._log.run_id

    @property
    def store(self) -> Any:
        """The :class:`~rlarrow.Store` written."""
        return self._log.store

    def get_logdir(self) -> str:
        """The event file directory (``log_dir``), else the store's path."""
        return self.log_dir if self.log_dir is not None else os.fspath(self._log.store.path)

    def _point(self, tag: str, value: Any, step: Any, walltime: float | None, run_id: str | None) -> None:
        if self._log._writer is None:
            raise StoreError(f"{self._log.store.path}: the SummaryWriter of run {self.run_id!r} is closed; "
                             "create a new one (the same run_id resumes the run) to log more")
        try:
            self._log._add(tag, 0 if step is None else int(step), value,
                           time.time() if walltime is None else float(walltime), run_id)
        except TypeError as exc:
            raise InvalidInputError(self._log.store.path, f"run {self.run_id!r}, tag {tag!r}: {exc}; "
                                    "add_scalar takes one number (a Python or NumPy number, or a "
                                    "one-element array or tensor)") from None

    def add_scalar(self, tag: str, scalar_value: Any = None, global_step: int | None = None,
                   walltime: float | None = None, *, value: Any = None, timestep: int | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        """Log ``scalar_value`` under ``tag`` at ``global_step`` (0 when None).

        ``value`` and ``timestep`` are skrl's keyword names for ``scalar_value`` and
        ``global_step``. ``new_style`` and ``double_precision`` are accepted for torch's
        signature: the exact value is stored whatever they say.

        Raises:
            InvalidInputError: the value is not one number.
        """
        del new_style, double_precision
        if scalar_value is None:
            scalar_value = value
        if global_step is None:
            global_step = timestep
        if scalar_value is None:
            raise InvalidInputError(self._log.store.path, f"run {self.run_id!r}, tag {tag!r}: no value given "
                                    "(pass scalar_value, or value= as skrl does)")
        self._point(tag, scalar_value, global_step, walltime, None)
        self._log._maybe_flush()

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None,
                    walltime: float | None = None) -> None:
        """Log several curves on one chart, as torch does: one sub-run per key, each under tag ``main_tag``.

        The value of key ``k`` goes into run ``<run_id>/<main_tag with / as _>_<k>``.
        """
        wall = time.time() if walltime is None else walltime
        for key, scalar_value in tag_scalar_dict.items():
            rid = self._log._sub_run(main_tag.replace("/", "_") + "_" + key)
            self._point(main_tag, scalar_value, global_step, wall, rid)
        self._log._maybe_flush()

    def flush(self) -> None:
        """Commit the buffered points to the store (and the event files)."""
        self._log.flush()

    def close(self) -> None:
        """Flush and close (the store too, when the writer opened it). Closing twice is harmless."""
        self._log.finalize()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unstored(self, method: str) -> None:
        if method not in self._warned:
            self._warned.add(method)
            warnings.warn(RLArrowWarning(
                f"SummaryWriter.{method} is not stored by rlarrow (only scalars go to the store's "
                f"'scalars' table); the call is ignored, and this warning is not repeated"), stacklevel=3)

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Other ``SummaryWriter`` methods (``add_histogram``, ``add_image``...): no-ops that warn once."""
        if name in UNSTORED_METHODS or (name.startswith("add_") and not name.startswith("add_scalar")):
            def ignored(*args: Any, **kwargs: Any) -> None:
                self._unstored(name)

            ignored.__name__ = name
            return ignored
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
