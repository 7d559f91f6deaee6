"""What a training stream does to its samples: windows around each step, normalisation, device.

Three kinds, each usable alone and given to
:class:`rlarrow.train.torch.StreamingDataset` as ``transforms=[...]``:

- **what each sample spans** (one per stream; the reader lays the rows out for it):
  :class:`SequenceWindow` (``L`` consecutive steps of one episode), :class:`DeltaSteps`
  (given rows of the episode around each frame, LeRobot's padding and ``*_is_pad`` masks)
  and :class:`DeltaTimestamps` (the same in seconds at ``fps``, LeRobot's
  ``delta_timestamps``);
- **batch transforms** on NumPy columns (flat names, ``observation.state``), run where the
  batch is gathered (in a ``DataLoader`` worker): :class:`Normalize`, or any callable
  ``dict[str, ndarray] -> dict[str, ndarray]``;
- **tensor transforms** run in the process that trains: :class:`ToDevice`.

Example:
    >>> DeltaTimestamps({"observation": [-0.1, 0.0], "action": [0.0, 0.1]}, fps=10).delta_steps
    {'observation': [-1, 0], 'action': [0, 1]}
    >>> SequenceWindow(8).plan_args()
    {'sequence_length': 8}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlarrow.core import arguments as _arguments
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, NotFoundError
from rlarrow.core.padding import fill

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

__all__ = ["DeltaSteps", "DeltaTimestamps", "Normalize", "SequenceWindow", "ToDevice", "WindowTransform"]


def check_deltas(delta_steps: Mapping[str, Sequence[int]], table: str, sequence_length: int,
                 names: list[str], chosen: list[str], where: Any) -> dict[str, np.ndarray]:
    """``delta_steps`` checked against a table: int64 offsets, by column (or dict leaf) of ``steps``."""
    if table != "steps":
        raise ArgumentError("delta_steps reads rows of episodes around each step: table='steps', "
                            f"not {table!r}")
    if sequence_length != 1:
        raise ArgumentError("delta_steps and sequence_length are two ways to ask for steps around a sample: "
                            "give one (sequence_length=L is delta_steps {column: range(L)} for every column)")
    if not isinstance(delta_steps, Mapping) or not delta_steps:
        raise ArgumentTypeError("delta_steps is a mapping {column: [step offsets]}, e.g. "
                                "{'observation': [-1, 0], 'action': range(16)}")
    out: dict[str, np.ndarray] = {}
    for name, offsets in delta_steps.items():
        head = name.split(".")[0]
        if head not in names:
            raise NotFoundError(f"{where}: delta_steps names {name!r}, but 'steps' has no column {head!r}; "
                                f"it has {names}")
        got = np.asarray(list(offsets))
        if got.ndim != 1 or not len(got) or not np.issubdtype(got.dtype, np.integer):
            raise ArgumentTypeError(f"delta_steps[{name!r}] must be a non-empty list of whole step offsets "
                                    f"(e.g. [-1, 0]), not {offsets!r}")
        out[name] = got.astype(np.int64)
    nested = [(a, b) for a in out for b in out if a != b and b.startswith(a + ".")]
    if nested:
        raise ArgumentError(f"delta_steps names {nested[0][0]!r} and its leaf {nested[0][1]!r}: give one")
    return out


def delta_steps_of(delta_timestamps: Mapping[str, Sequence[float]], fps: float,
                   tolerance_s: float = 1e-4) -> dict[str, list[int]]:
    """LeRobot's ``delta_timestamps`` (seconds) as step offsets at ``fps`` steps per second.

    Each time must fall on a step, within ``tolerance_s`` (LeRobot's default too).

    Example:
        >>> delta_steps_of({"observation": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}, fps=10)
        {'observation': [-1, 0], 'action': [0, 1, 2]}
    """
    if not fps or fps <= 0:
        raise ArgumentError(f"delta_timestamps needs the steps' rate: fps > 0, not {fps!r}")
    out: dict[str, list[int]] = {}
    for name, times in delta_timestamps.items():
        steps = []
        for t in times:
            k = round(float(t) * fps)
            if abs(k / fps - float(t)) > tolerance_s:
                raise ArgumentError(f"delta_timestamps[{name!r}]: {t} s is not a whole number of steps at "
                                    f"{fps} fps (the nearest is {k / fps} s); use multiples of 1/fps")
            steps.append(k)
        out[name] = steps
    return out


def check_offsets(deltas: Any, argument: str) -> None:
    """A mapping of column names to lists of offsets, or an error naming ``argument``."""
    if not isinstance(deltas, Mapping) or any(
            isinstance(v, (str, bytes)) or not isinstance(v, Sequence) for v in deltas.values()):
        raise ArgumentTypeError(f"{argument}: give a mapping of column names to lists of offsets, e.g. "
                                f"{{'action': [0, 1, 2]}}, not {deltas!r:.80}")


class WindowTransform:
    """What each sample spans (a stream has one): the reader's arguments for it, :meth:`plan_args`."""

    def plan_args(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`rlarrow.train.samples.SampleSource.from_store` for this span."""
        raise NotImplementedError  # pragma: no cover - each kind says


class SequenceWindow(WindowTransform):
    """Windows of ``length`` consecutive steps of one episode: batches ``(B, length, ...)``.

    A window never crosses an episode boundary and follows an episode into the next row
    group or commit (the ``sequence_length=`` of :class:`~rlarrow.train.torch.StreamingDataset`).

    Example:
        >>> SequenceWindow(4).length
        4
        >>> SequenceWindow(0)
        Traceback (most recent call last):
        ...
        rlarrow.core.errors.ArgumentError: sequence_length=0: give an integer of at least 1
    """

    def __init__(self, length: int) -> None:
        self.length = _arguments.integer(length, "sequence_length", minimum=1)

    def plan_args(self) -> dict[str, Any]:
        """``{"sequence_length": length}``."""
        return {"sequence_length": self.length}

    def __repr__(self) -> str:
        return f"SequenceWindow({self.length})"


class DeltaSteps(WindowTransform):
    """Each frame with these rows of its episode around it, per column (LeRobot's padding).

    Each frame (a step with an action: LeRobot's frames; an episode's final-observation row
    is none) is a sample. ``{"observation": [-1, 0], "action": range(16)}`` gives
    ``observation`` as ``(B, 2, ...)`` (the step before and the step) and ``action`` as
    ``(B, 16, ...)`` (an action chunk), and for each a mask ``observation_is_pad``
    ``(B, 2)``: true where the offset falls outside the episode or on a row null in the
    column (the last step's action), whose value there is the episode's first (or last)
    one, as LeRobot pads. A dict column's leaves (``"observation.state"``) may be named
    alone (the mask is then ``batch["observation"]["state_is_pad"]``); other columns come
    at the step itself. The offsets are checked against the table when the stream is planned.

    Example:
        >>> DeltaSteps({"action": range(3)}).plan_args()
        {'delta_steps': {'action': [0, 1, 2]}}
    """

    def __init__(self, delta_steps: Mapping[str, Sequence[int]]) -> None:
        check_offsets(delta_steps, "delta_steps")
        self.delta_steps = {name: list(offsets) for name, offsets in delta_steps.items()}

    def plan_args(self) -> dict[str, Any]:
        """``{"delta_steps": {column: offsets}}``."""
        return {"delta_steps": self.delta_steps}

    def __repr__(self) -> str:
        return f"DeltaSteps({self.delta_steps!r})"


class DeltaTimestamps(DeltaSteps):
    """:class:`DeltaSteps` in seconds at ``fps`` steps per second (LeRobot's ``delta_timestamps``).

    Each time must be a whole number of steps, within 1e-4 s.

    Example:
        >>> DeltaTimestamps({"action": [0.0, 0.05]}, fps=20).plan_args()
        {'delta_steps': {'action': [0, 1]}}
    """

    def __init__(self, delta_timestamps: Mapping[str, Sequence[float]], fps: float) -> None:
        check_offsets(delta_timestamps, "delta_timestamps")
        if not isinstance(fps, (int, float)) or isinstance(fps, bool):
            _arguments.number(fps, "fps", minimum=0, above=True)  # (the rate itself: delta_steps_of)
        self.delta_timestamps = delta_timestamps
        self.fps = fps
        super().__init__(delta_steps_of(delta_timestamps, fps))


class Normalize:
    """A batch transform: columns normalised with their statistics, padding kept at 0.

    ``mode``: ``"mean_std"``, ``"min_max"`` or ``"quantile"`` for the observation and action
    columns read (and their dict leaves), or ``{column: mode}`` for any of them.
    ``stats``: ``{column: ColumnStats}``; None: the store's step statistics, found when a
    stream binds the transform to its store (:meth:`bind`). ``next_observation``
    (transitions) takes the observation's statistics. A padded position (``*_is_pad``) is 0
    after normalising, never a normalised number.

    Example:
        >>> import numpy as np
        >>> from rlarrow.core.stats import ColumnStats
        >>> stats = {"action": ColumnStats.from_array(np.array([[0.0], [4.0]]))}
        >>> norm = Normalize("min_max", stats=stats).bind(["action"])
        >>> out = norm({"action": np.array([[2.0], [4.0]]), "action_is_pad": np.array([True, False])})
        >>> out["action"].round(6).tolist()
        [[0.0], [1.0]]
    """

    def __init__(self, mode: str | Mapping[str, str] = "mean_std", *,
                 stats: Mapping[str, Any] | None = None) -> None:
        self.mode = mode
        self.given = stats
        #: the statistics applied, ``{column: ColumnStats}`` (once bound)
        self.stats: dict[str, Any] | None = None
        self._normalise: Any = None

    def bind(self, columns: Sequence[str], store: StoreReader | None = None, *, layout: int | None = None,
             version: int | None = None) -> Normalize:
        """A copy bound to a stream reading ``columns`` (flat names) of ``store``: statistics and modes.

        ``store`` (a :class:`~rlarrow.Store`) gives the statistics when none were given
        (those of its steps at ``version``, of ``layout``).
        """
        from rlarrow.core.stats import ColumnStats
        from rlarrow.core.store import Store
        from rlarrow.train.normalize import normalizer

        normalize, given = self.mode, self.given
        if given is None:
            from rlarrow.query.dataset_stats import stats as store_stats

            if store is None:
                raise ArgumentError("normalize= needs stats= here (no store to take them from): "
                                    "rlarrow.query.dataset_stats.stats(store)")

            wants_quantiles = normalize == "quantile" or (
                isinstance(normalize, Mapping) and "quantile" in normalize.values())
            # (a store on object storage was opened at its version: its stored statistics, merged)
            given = store_stats(store, quantiles=wants_quantiles, layout=layout,
                                version=version if isinstance(store, Store) else None)
        for name, value in given.items():
            if not isinstance(value, ColumnStats):
                raise ArgumentTypeError(f"stats[{name!r}] is a {type(value).__name__}, not a ColumnStats")
        modes = _modes(normalize, given, list(columns))
        bound = Normalize(normalize, stats=self.given)
        bound.stats = {c: given[c] for c in modes}
        chosen = dict(bound.stats)
        for name in list(chosen):  # transitions: the next observation takes the observation's
            if name == "observation" or name.startswith("observation."):
                chosen["next_" + name] = chosen[name]
                modes["next_" + name] = modes[name]
        bound._normalise = normalizer(chosen, modes)
        return bound

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``batch`` (flat NumPy columns) normalised; bound to its columns first if need be."""
        if self._normalise is None:
            return self.bind(sorted({k.split(".")[0] for k in batch}))(batch)
        normalised: dict[str, np.ndarray] = self._normalise(batch)
        fill(normalised)  # padding is never data: a padded position is FILL again, not (0 - mean) / std
        return normalised

    def __repr__(self) -> str:
        return f"Normalize({self.mode!r})"


def _modes(normalize: str | Mapping[str, str], given: Mapping[str, Any],
           columns: list[str]) -> dict[str, Any]:
    """Each statistics entry normalised and its mode (entries: a column or its dict leaves)."""
    def leaves(column: str) -> list[str]:  # a column's statistics: itself, or its dict leaves
        return [n for n in given if n == column or n.startswith(column + ".")]

    # (transitions read the steps' columns; their next_observation is an observation too)
    read = {c.split(".")[0] for c in columns}
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
                                f"({columns}) has statistics (the store has statistics of "
                                f"{sorted(given)})")
    for name, mode in modes.items():
        if mode == "quantile" and not given[name].has_quantiles:
            raise ArgumentError(f"normalize: {name!r} has no quantiles (its statistics were kept "
                                "without sketches: store.step_stats = 'moments', or datasketches "
                                "missing: pip install 'rlarrow[stats]'); use 'mean_std' or 'min_max'")
    return modes


class ToDevice:
    """A tensor transform: a batch (nested dicts of tensors) moved to ``device``, pinned first if asked.

    ``pin_memory`` pins only where CUDA is there. With :class:`rlarrow.train.torch.DataLoader`
    workers it runs in the main process.

    Example:
        >>> ToDevice("cuda:0", pin_memory=True)
        ToDevice('cuda:0', pin_memory=True)
        >>> ToDevice()({"x": [1, 2]})  # (no device: the batch as it is)
        {'x': [1, 2]}
    """

    def __init__(self, device: Any = None, pin_memory: bool = False) -> None:
        self.device = device
        self.pin_memory = bool(pin_memory)

    def __call__(self, batch: Any) -> Any:
        """``batch`` on the device (tensors; other values as they are)."""
        if self.device is None and not self.pin_memory:
            return batch
        import torch

        return _moved(batch, torch, self.device, self.pin_memory)

    def __repr__(self) -> str:
        return f"ToDevice({self.device!r}, pin_memory={self.pin_memory})"


def _moved(batch: Any, torch: Any, device: Any, pin: bool) -> Any:
    if isinstance(batch, dict):
        return {k: _moved(v, torch, device, pin) for k, v in batch.items()}
    if isinstance(batch, torch.Tensor):
        if pin and torch.cuda.is_available():
            batch = batch.pin_memory()
        return batch.to(device, non_blocking=pin) if device is not None else batch
    return batch
