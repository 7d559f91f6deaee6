"""Recognise RL data formats rlarrow does not import yet, to say so in one line.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

``rlarrow convert`` given a TFDS directory of ArrayRecord shards, a LeRobot dataset, a zarr store or an HDF5
file of another layout than D4RL's and robomimic's (which :mod:`rlarrow.io.hdf5` imports)
would otherwise find "no memory exports" in it.
:func:`describe_unsupported` names what the input looks like and what rlarrow does read.
Only names and small JSON files are looked at: nothing is imported or decoded, and no user
code runs.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("dataset_info.json", "features.json", "demo-train.array_record-00000-of-00001"):
    ...     _ = (d / name).write_text("{}")
    >>> describe_unsupported(d).split(";")[0].endswith("looks like an RLDS dataset of ArrayRecord shards")
    True
    >>> describe_unsupported(d / "features.json") is None
    True
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlarrow.io.codecs.hdf5_files import is_hdf5_file

__all__: list[str] = []

def __getattr__(name: str) -> str:
    if name == "SUPPORTED_INPUTS":  # (a constant of rlarrow 0.x: the registry's list now)
        return supported_inputs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def supported_inputs() -> str:
    """What ``rlarrow convert`` reads, as the message lists it: the format registry's inputs, once each.

    Example:
        >>> "Minari datasets" in supported_inputs()
        True
    """
    from rlarrow.io.registry import importers

    return ", ".join(dict.fromkeys(f.noun or f.name for f in importers()))


def _message(path: Path, what: str, short: str, hint: str = "") -> str:
    return f"{path} looks like {what}; rlarrow does not import {short} yet{hint}; supported inputs are: " \
        f"{supported_inputs()}"


def _is_rlds(path: Path) -> bool:
    """A TFDS dataset of ArrayRecord shards (tfrecord ones are imported: :mod:`rlarrow.io.rlds`)."""
    if not ((path / "dataset_info.json").is_file() and (path / "features.json").is_file()):
        return False
    names = [p.name for p in path.iterdir()]
    return not any(".tfrecord" in n for n in names) and \
        any(n.endswith(".array_record") or ".array_record-" in n for n in names)


def _is_lerobot(path: Path) -> bool:
    info = path / "meta" / "info.json"
    if not info.is_file() or not (path / "data").is_dir():
        return False
    try:
        keys = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    # v2.x and v3.x are imported (rlarrow.io.lerobot); older ones, and what has no version, are named here
    return isinstance(keys, dict) and ("codebase_version" in keys or "features" in keys) and \
        not str(keys.get("codebase_version", "")).startswith(("v2", "v3"))


def _is_zarr(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in (".zgroup", ".zarray", "zarr.json"))


def describe_unsupported(path: str | os.PathLike[str]) -> str | None:
    """A one-line message when ``path`` is an RL data format rlarrow does not import yet.

    Recognised: RLDS/TFDS directories (``dataset_info.json`` + ``features.json`` +
    ``*.tfrecord*`` shards, or a TFDS version folder one level down), LeRobot datasets
    (``meta/info.json`` + ``data/``) and zarr stores (``.zgroup``, ``.zarray`` or ``zarr.json``).

    Args:
        path: a file or directory given to ``rlarrow convert``.

    Returns:
        ``"PATH looks like an RLDS dataset; rlarrow does not import RLDS yet (...);
        supported inputs are: ..."`` (and the like), or None when ``path`` is none of these.

    Example:
        >>> describe_unsupported("/nonexistent") is None
        True
    """
    p = Path(path)
    if p.is_file():
        if is_hdf5_file(p):
            return _message(p, "an HDF5 file that h5py cannot open, or of another layout than D4RL's or "
                            "robomimic's", "it",
                            " (D4RL: observations, actions, rewards, terminals at the root; robomimic: "
                            "data/demo_<i> groups; Minari's HDF5 datasets: give their directory)")
        return None
    if not p.is_dir():
        return None
    if _is_rlds(p) or any(sub.is_dir() and _is_rlds(sub) for sub in p.iterdir()):
        return _message(p, "an RLDS dataset of ArrayRecord shards", "ArrayRecord shards",
                        " (convert them to tfrecord with `tfds convert_format`, then convert that)")
    if _is_lerobot(p):
        return _message(p, "a LeRobot dataset of an older codebase than v2.0", "them",
                        " (LeRobot's own converters upgrade them; rlarrow imports v2.x and v3.x)")
    if _is_zarr(p) or p.suffix == ".zarr":
        return _message(p, "a zarr store", "zarr")
    return None
