"""Optional dependencies, imported only when a feature needs them.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rlarrow.core.errors import MissingDependencyError

__all__: list[str] = []

# module name -> (extra that provides it, what it is for)
OPTIONAL: dict[str, tuple[str, str]] = {
    "torch": ("torch", "PyTorch datasets and tensors"),
    "tensorboard": ("tensorboard", "reading back with TensorBoard"),
    "dm_env": ("dm-env", "recording dm_env environments"),
    "envlogger": ("envlogger", "reading and writing envlogger directories"),
    "matplotlib": ("plot", "plots"),
    "gymnasium": ("gym", "recording gymnasium environments"),
    "ray": ("ray", "Ray Data over a store"),
    "datasketches": ("stats", "quantile sketches"),
    "h5py": ("hdf5", "reading HDF5 files"),
    "google.protobuf": ("rlds", "reading RLDS/TFDS records"),
    "av": ("video", "decoding video (LeRobot cameras)"),
}


def has_module(module: str) -> bool:
    """Whether an optional dependency can be imported (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, *, feature: str | None = None) -> ModuleType:
    """Import an optional dependency or raise an error naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name != top and not exc.name.startswith(top + "."):
            raise  # the module exists but one of *its* dependencies is missing
        extra, purpose = OPTIONAL.get(top, (top, top))
        what = feature or purpose
        raise MissingDependencyError(
            f"{what} needs the optional dependency {top!r}, which is not installed; "
            f"install it with: pip install 'rlarrow[{extra}]'",
            name=top,
        ) from exc
