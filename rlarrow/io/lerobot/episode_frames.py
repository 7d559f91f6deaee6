"""RLDS steps made LeRobot frames: an episode's steps with an action, as ``{feature: array}``.

A frame is a step with an action (LeRobot keeps no observation after an episode's last
action). :func:`episode_frames` takes an episode's steps to its frames: ``observation.*``
from the observation (a struct's fields joined at dots), ``action``, ``next.reward``,
``next.done``, and LeRobot's bookkeeping features (:func:`frame_keys`: a LeRobot run's own,
kept by its import as the typed ``infos`` column, or as step metadata by steps 1.0, else made).

Example:
    >>> import numpy as np, pyarrow as pa
    >>> steps = pa.table({"is_last": [False, False, True], "action": [1, 0, None]})
    >>> frame_count(steps)
    2

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core.errors import InvalidInputError

__all__: list[str] = []


def _flat(values: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(values, dict):
        return {prefix: values}
    out: dict[str, Any] = {}
    for key, value in values.items():
        out.update(_flat(value, f"{prefix}.{key}"))
    return out


def _has_nulls(arr: Any) -> bool:
    """Whether any value of a column (a struct's fields too) is null."""
    if arr.null_count:
        return True
    if isinstance(arr, pa.ChunkedArray):
        return any(_has_nulls(chunk) for chunk in arr.chunks)
    if pa.types.is_struct(arr.type):
        return any(_has_nulls(arr.field(i)) for i in range(arr.type.num_fields))
    return False


def episode_frames(
    table: pa.Table, mine: bool, rate: int, *, timestamps: bool, rewards: bool
) -> dict[str, Any] | None:
    """An episode's frames (its steps, ``table``, with an action) as {feature: array}, or None if none.

    ``timestamps``: keep a LeRobot run's own ``timestamp`` (false when the fps changes);
    ``rewards``: write ``next.reward`` (NaN where a step has none).
    """
    from rlarrow.core.tensors import to_numpy

    rows = table.num_rows
    names = table.column_names
    n = frame_count(table)
    if not n:
        return None
    action = table.column("action")
    episode = int(table.column("episode_id")[0].as_py())
    out: dict[str, Any] = {"_final": False}
    for name in ("observation", "action"):
        if name in names and _has_nulls(table.column(name).slice(0, n)):
            raise InvalidInputError(
                None,
                f"episode {episode}: a step before the last has a null {name} (or a null field of it); "
                "a LeRobot frame needs every value: delete the episode or export the others",
            )
    if "observation" in names and table.column("observation").null_count < rows:
        column = table.column("observation")
        obs = to_numpy(column.slice(0, n))
        out["_final"] = n < rows and column[n].is_valid
        if isinstance(obs, dict):
            out.update(_flat(obs, "observation"))
        else:
            out["observation"] = obs  # named by _Dataset (observation, .state or .image)
    out.update(_flat(to_numpy(action.slice(0, n)), "action"))
    if rewards and "reward" in names:
        out["next.reward"] = (
            table.column("reward").slice(0, n).to_numpy(zero_copy_only=False).astype(np.float64)
        )
    done = np.zeros(n, bool)
    if n < rows:
        done[-1] = bool(table.column("is_terminal")[n].as_py())
    out["next.done"] = done
    out.update(frame_keys(table, n, mine, rate, timestamps=timestamps))
    return out


def run_info(source: str | None, meta: Any) -> tuple[dict[str, Any], dict[str, Any] | None, int | None]:
    """A run's metadata (decoded), its LeRobot ``info.json`` (None unless read from LeRobot) and fps."""
    meta = meta if isinstance(meta, dict) else {}
    info = meta.get("info") if source == "lerobot" else None
    if not (isinstance(info, dict) and isinstance(info.get("features"), dict)):
        return meta, None, None
    return meta, info, int(info["fps"]) if isinstance(info.get("fps"), int) else None


def frame_count(table: pa.Table) -> int:
    """How many of an episode's first rows are LeRobot frames (0: none).

    A frame is a step with an action: an episode that ended (``is_last``, or a null last
    action) leaves its final observation out. ``table`` needs ``is_last`` and ``action``.
    """
    rows = table.num_rows
    if rows == 0 or "action" not in table.column_names:
        return 0
    action = table.column("action")
    last = table.column("is_last").to_numpy(zero_copy_only=False)
    ended = bool(last[-1]) or not action[rows - 1].is_valid
    n = rows - 1 if ended else rows
    return 0 if n <= 0 or action.null_count >= rows else n


def frame_keys(table: pa.Table, n: int, mine: bool, rate: int, *, timestamps: bool) -> dict[str, Any]:
    """An episode's first ``n`` rows' ``timestamp``, ``frame_index`` and ``task_index``.

    For a LeRobot run (``mine``) also the other frame features its import kept: the typed
    ``infos`` column (steps 1.1), and what is in the step ``metadata`` (text features; every
    per-frame feature of a store written by rlarrow with steps 1.0). ``timestamps``: a LeRobot
    run's own (false when the fps changes them); else frame / ``rate``. ``table`` needs
    ``infos`` or ``metadata`` and ``metadata_types`` for a LeRobot run.

    Example:
        >>> steps = pa.table({"infos": pa.array([{"timestamp": 0.0}, {"timestamp": 0.5}, None],
        ...                                     pa.struct([("timestamp", pa.float32())]))})
        >>> frame_keys(steps, 2, True, 2, timestamps=True)["timestamp"]
        array([0. , 0.5], dtype=float32)
    """
    out: dict[str, Any] = {}
    if mine:
        out.update(_metadata_keys(table, n))
        out.update(_info_keys(table, n))
    if not timestamps:
        out.pop("timestamp", None)
    out.setdefault("timestamp", (np.arange(n) / rate).astype(np.float32))
    out["frame_index"] = np.arange(n, dtype=np.int64)
    out.setdefault("task_index", np.zeros(n, np.int64))
    return out


def _info_keys(table: pa.Table, n: int) -> dict[str, Any]:
    """The frame features of a LeRobot import's typed ``infos`` column (first ``n`` rows), by name."""
    from rlarrow.core.tensors import to_numpy

    if "infos" not in table.column_names:
        return {}
    column = table.column("infos").slice(0, n)
    if not pa.types.is_struct(column.type) or column.null_count:
        return {}  # (a store of other runs' infos, or frames without them: not this run's features)
    values = to_numpy(column)
    return dict(values) if isinstance(values, dict) else {}


def _metadata_keys(table: pa.Table, n: int) -> dict[str, Any]:
    """The frame features a LeRobot import kept as step metadata (first ``n`` rows), by name."""
    if "metadata" not in table.column_names or table.column("metadata").slice(0, n).null_count == n:
        return {}
    rows_meta = _metadata.decode_column(
        table.column("metadata").slice(0, n).to_pylist(),
        table.column("metadata_types").slice(0, n).to_pylist(),
    )
    keys = [key for key in (rows_meta[0] or {}) if isinstance(key, str)] if rows_meta else []
    out: dict[str, Any] = {}
    for key in keys:
        values = [r.get(key) if isinstance(r, dict) else None for r in rows_meta]
        if any(isinstance(v, str) for v in values):
            out[key] = np.asarray(values, dtype=object)
        else:
            out[key] = np.asarray(values)
    return out


def numbering(n: int, episode: int, first: int) -> dict[str, np.ndarray]:
    """An exported episode's ``episode_index`` and ``index`` (its frames' places in the dataset)."""
    return {"episode_index": np.full(n, episode, np.int64),
            "index": np.arange(first, first + n, dtype=np.int64)}

