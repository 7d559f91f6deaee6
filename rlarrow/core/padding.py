"""Padding is never data: the one rule for samples that reach past an episode or onto a null row.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

``steps`` rows are in RLDS alignment: an episode of N actions has N + 1 rows, and its last
row holds the final observation with a null ``action``, ``reward`` and ``discount`` (a
LeRobot import's last row has a null observation too: LeRobot keeps none after the last
action). The sample readers (``rlarrow.train.torch.StreamingDataset``,
``rlarrow.train.ray.read_samples``) follow this module, so that a null never reaches a
training loop as a valid value:

* **Masks.** Every nullable ``steps`` column read (:data:`NULLABLE`: ``observation``,
  ``action``, ``reward``, ``discount``) comes with ``<column>_is_pad``, shaped as the
  sample's positions: ``(B,)`` for rows, ``(B, L)`` for windows, ``(B, len(offsets))`` for
  ``delta_steps``. It is true where the position's row is null in that column (for a dict
  column, in any of its fields; for a camera in the video layout, where the row has no
  frame) and, for ``delta_steps``, where the offset falls outside the episode.
* **Fill.** A null position holds :data:`FILL` (0, ``False``, a black frame), never NaN.
* **Frames.** With ``delta_steps`` a sample is a *frame*, a row with an action
  (:func:`frames`): LeRobot's frames are exactly those rows, so the final-observation row is
  no sample (it is still reached by offsets, with a mask false where it holds a value).
* **LeRobot's clamp** (:func:`query`). An offset is clamped into its episode's rows; where
  that row is null in the column, into the episode's frames instead (LeRobot's
  ``[episode start, episode end - 1]``). A padded position so holds the episode's edge
  value, as ``LeRobotDataset`` gives it, or :data:`FILL` where even that row is null.
* **Normalisation** (:func:`fill`): ``normalize=`` puts :data:`FILL` back at every padded
  position after normalising, so a pad never becomes a plausible number.
* **Transitions** (``rlarrow.core.transitions.REQUIRED``, ``NEXT_MASKED``): a step row whose
  observation or action is null is no transition and is left out (SQL view and NumPy alike),
  so those two come without a mask of the step row; a next row whose observation is null (an
  episode's last transition in a LeRobot import or a same-step-autoreset memory) is kept, its
  ``next_observation`` at :data:`FILL` with ``next_observation_is_pad`` true (SQL: null);
  ``reward`` and ``discount`` keep masks.

Example:
    >>> import numpy as np
    >>> import pyarrow as pa
    >>> values, nulls = columns(pa.table({"action": pa.array([1, 0, None])}), ["action"], ["action"])
    >>> values["action"].tolist(), nulls["action_is_pad"].tolist()
    ([1, 0, 0], [False, False, True])
    >>> frames(pa.table({"action": pa.array([1, 0, None])})).tolist()
    [True, True, False]
    >>> at = np.array([[1, 2, 3]])  # a chunk of 3 actions from step 1 of a 3-row episode
    >>> index, pad = query(at, np.array([[0]]), np.array([[2]]), np.array([[0]]), np.array([[1]]),
    ...                    nulls["action_is_pad"])
    >>> index.tolist(), pad.tolist()  # (row 2: the null last action; step 3: past the end)
    ([[1, 1, 1]], [[False, True, True]])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.tensors import to_numpy

__all__: list[str] = []

#: What a null (or, after normalisation, padded) position holds: 0, False, a black frame.
FILL = 0
#: The mask of column ``c`` is ``c + SUFFIX`` (LeRobot's name).
SUFFIX = "_is_pad"
#: The column whose non-null rows are LeRobot's frames (the samples of ``delta_steps``).
FRAME_COLUMN = "action"
#: The ``steps`` columns that may be null, so come with a mask (the schema's nullable tensors
#: and floats; ``metadata`` is text, never a sample column).
NULLABLE: tuple[str, ...] = tuple(c.name for c in _schema.table("steps").columns
                                  if c.nullable and not c.is_json)


def mask_name(column: str) -> str:
    """The mask of a (flat) column: ``observation.state`` -> ``observation.state_is_pad``."""
    return column + SUFFIX


def is_mask(key: str) -> bool:
    """Whether a batch key is a mask."""
    return key.endswith(SUFFIX)


def _under(key: str, name: str) -> bool:
    return key == name or key.startswith(name + ".")


def null_rows(column: pa.Array | pa.ChunkedArray) -> dict[str, np.ndarray]:
    """Which rows are null, per leaf of the column (``""`` for a plain one, ``".state"`` ...).

    A null dict row is null in each of its fields.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    null = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool) \
        if column.null_count else np.zeros(len(column), bool)
    type_ = column.type.storage_type if isinstance(column.type, pa.ExtensionType) else column.type
    if not pa.types.is_struct(type_):
        return {"": null}
    storage = column.storage if isinstance(column, pa.ExtensionArray) else column
    out: dict[str, np.ndarray] = {}
    for i, field in enumerate(type_):
        for rest, child in null_rows(storage.field(i)).items():
            out[f".{field.name}{rest}"] = null | child
    return out


def flat(prefix: str, value: Any, out: dict[str, np.ndarray]) -> None:
    """Struct columns (dicts of arrays) as ``prefix.key`` entries of ``out``."""
    if isinstance(value, dict):
        for k, v in value.items():
            flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def columns(table: pa.Table, names: Sequence[str], masked: Iterable[str]
            ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Columns ``names`` of ``table`` as flat NumPy columns, and the null rows of each of ``masked``.

    ``masked`` names columns or dict leaves (``observation.state``); each has its null
    positions at :data:`FILL` and its null rows under :func:`mask_name` (a dict: null in any
    field). The other columns are read as before (null floats NaN, other nulls 0).
    """
    masked = list(masked)
    values: dict[str, np.ndarray] = {}
    nulls: dict[str, np.ndarray] = {}
    for name in names:
        col = table.column(name)
        groups = [g for g in masked if _under(g, name) or _under(name, g)]
        if groups:
            flat(name, to_numpy(col, fill_value=FILL), values)
            leaves = {name + rest: null for rest, null in null_rows(col).items()}
            for g in groups:
                under = [null for leaf, null in leaves.items() if _under(leaf, g)]
                if not under:
                    continue
                key = mask_name(g)
                found = np.logical_or.reduce(under) if len(under) > 1 else under[0]
                nulls[key] = nulls[key] | found if key in nulls else found
            continue
        try:
            got = to_numpy(col)
        except ValueError:  # (nulls in an integer or bool column: 0)
            got = to_numpy(col, fill_value=FILL)
        flat(name, got, values)
    return values, nulls


def mark_frames(base: dict[str, np.ndarray], key: str, refs: np.ndarray, masked: Iterable[str]) -> None:
    """A camera in the video layout (``refs``: -1 where a row has no frame) into the masks over it."""
    for group in masked:
        if _under(key, group):
            mask = mask_name(group)
            base[mask] = base[mask] | (refs < 0) if mask in base else refs < 0


def frames(table: pa.Table) -> np.ndarray:
    """The rows that are LeRobot frames: those with an action (every row without the column)."""
    if FRAME_COLUMN not in table.column_names:
        return np.ones(table.num_rows, bool)
    return ~next(iter(null_rows(table.column(FRAME_COLUMN)).values()))


def query(at: np.ndarray, lo: np.ndarray, hi: np.ndarray, first: np.ndarray, last: np.ndarray,
          null: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``delta_steps`` read, and where they are padding (LeRobot's clamp).

    ``at``: the rows asked for (sample row + offset); ``lo``/``hi``: each sample's episode's
    first and last row, ``first``/``last`` its first and last frame (broadcast against
    ``at``); ``null``: a column's null rows. A row in the episode that is not null is read
    as it is; another is padding, read at its clamp into the episode or, where that row is
    null, into the episode's frames (the row then holds :data:`FILL` if null too).
    """
    inside = np.clip(at, lo, hi)
    bad = null.take(inside)
    index = np.where(bad, np.clip(at, first, last), inside)
    return index, bad | (inside != at)


def fill(batch: MutableMapping[str, Any], masks: Mapping[str, np.ndarray] | None = None) -> None:
    """Put :data:`FILL` at every padded position of ``batch`` (flat keys), in place.

    Each mask ``<name>_is_pad`` covers ``name`` and its dict leaves (``name.x``), over the
    leading axes it has. ``normalize=`` calls it after normalising.

    Example:
        >>> import numpy as np
        >>> b = {"action": np.array([[0.3, -1.2], [0.5, 0.7]]),
        ...      "action_is_pad": np.array([[False, True], [False, False]])}
        >>> fill(b)
        >>> b["action"].tolist()
        [[0.3, 0.0], [0.5, 0.7]]
    """
    masks = masks if masks is not None else {k: v for k, v in batch.items() if is_mask(k)}
    for key, mask in masks.items():
        name = key[: -len(SUFFIX)]
        mask = np.asarray(mask)
        if not mask.any():
            continue
        for k in list(batch):
            if _under(k, name) and not is_mask(k):
                value = batch[k]
                if not value.flags.writeable:
                    value = batch[k] = value.copy()
                value[mask] = FILL
