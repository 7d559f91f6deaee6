"""The features of a LeRobot dataset being written: kind, dtype and per-frame shape.

A feature is numeric, string, image (PNG in the frames) or video; :func:`numeric_feature`
fixes a numeric one's dtype (a LeRobot run's own, else its values'), :func:`is_frame` says
which values are camera frames.

Example:
    >>> import numpy as np
    >>> numeric_feature("index", np.arange(3), None).spec
    {'dtype': 'int64', 'shape': [1], 'names': None}

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlarrow.core.errors import InvalidInputError

__all__: list[str] = []


@dataclass
class Feature:
    """A LeRobot feature: ``kind`` is numeric, string, image (PNG in the frames) or video."""

    kind: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # the per-frame shape; () for scalars (LeRobot's [1])
    spec: dict[str, Any] = field(default_factory=dict)  # info.json's entry

    def check(self, values: np.ndarray, name: str, episode: int) -> np.ndarray:
        """``values`` of this feature checked to have its shape, in its dtype."""
        if self.kind == "string":
            return values
        if values.shape[1:] != self.shape:
            raise InvalidInputError(
                None,
                f"episode {episode}: {name} has shape {values.shape[1:]}, the first episode's "
                f"{self.shape}: a LeRobot dataset's features have one shape; export the runs apart",
            )
        return values.astype(self.dtype, copy=False)


def numeric_feature(name: str, values: np.ndarray, info: dict[str, Any] | None) -> Feature:
    """A numeric feature: the LeRobot run's own dtype (``info``), else the values'."""
    original = dict(((info or {}).get("features") or {}).get(name) or {})
    dtype = (
        np.dtype(original["dtype"])
        if original.get("dtype") not in (None, "image", "video")
        else values.dtype
    )
    if dtype.kind not in "biuf":
        raise InvalidInputError(
            None, f"{name}: values of dtype {values.dtype} have no LeRobot feature type"
        )
    spec = {"dtype": dtype.name, "shape": list(values.shape[1:]) or [1], "names": original.get("names")}
    return Feature("numeric", dtype, tuple(values.shape[1:]), spec)


def is_frame(values: np.ndarray) -> bool:
    """Whether ``values`` are camera frames: uint8 ``(N, H, W, C)`` of 1 or 3 channels."""
    return values.dtype == np.uint8 and values.ndim == 4 and values.shape[-1] in (1, 3)

