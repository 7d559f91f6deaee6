"""What the command line says about each format, and the options it builds for them.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The format registry (:mod:`rlarrow.io.registry`) holds what a format *is*; the words
``rlarrow convert --help`` and ``rlarrow export --help`` print about it, the flags that
apply to it and the option objects built from those flags live here, keyed by format
name. A format registered by a plugin, absent from these tables, still gets a help line:
its own (deprecated) :attr:`~rlarrow.io.registry.Format.convert_help` /
:attr:`~rlarrow.io.registry.Format.export_help` where it sets them, else its
:attr:`~rlarrow.io.registry.Format.summary`.

Example:
    >>> from rlarrow.io import registry
    >>> convert_help(registry.get("envlogger"))[0]
    'ENVLOGGER_DIR'
    >>> export_empty(registry.get("tfevents"))
    'no scalars in the store'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rlarrow.io.registry import Format

__all__: list[str] = []

_MEMORY = ("pt", "npz", "csv", "parquet")
_MEMORY_FLAGS = ("--run-id", "--name", "--layout", "--episodes", "--names", "--autoreset",
                 "--max-episode-steps", "--again")
_EXPORT = ("--run-id", "--overwrite")

#: ``rlarrow convert --help``: ``(INPUT, what it becomes)`` by format (one pair per group is printed).
CONVERT_HELP: dict[str, tuple[str, str]] = {
    **{name: ("*.pt *.npz *.csv *.parquet",
              "replay-memory exports: snapshots of one run (files, folders, globs)") for name in _MEMORY},
    "envlogger": ("ENVLOGGER_DIR", "an envlogger directory (metadata.riegeli): one run of episodes"),
    "minari": ("MINARI_DIR", "a Minari dataset (arrow, parquet or HDF5): one run of episodes"),
    "rlds": ("TFDS_DIR", "an RLDS dataset (dataset_info.json, features.json, *.tfrecord-*):\n"
                         "one run of episodes, every split"),
    "lerobot": ("LEROBOT_DIR", "a LeRobot v3.0 or v2.x dataset (meta/info.json, data/, videos/):\n"
                               "one run of episodes, cameras decoded"),
    "hdf5": ("FILE.hdf5", "a D4RL or robomimic HDF5 file: one run of episodes each"),
    "tfevents": ("LOGDIR", "TensorBoard event files: one run per TensorBoard run\n"
                           "(add_scalars folders become RUN_ID/<folder>)"),
}

#: ``rlarrow export --format``'s help: what each format writes (the same words are said once).
EXPORT_HELP: dict[str, str] = {
    **{name: "Memory export format" for name in _MEMORY},
    "envlogger": "envlogger (a run's episodes as an envlogger directory)",
    "minari": "minari (a run's episodes as a Minari dataset; --data-format hdf5|arrow|parquet)",
    "rlds": "rlds (a run's episodes as an RLDS dataset that tfds.builder_from_directory reads)",
    "lerobot": ("lerobot (a run's episodes as a LeRobot dataset; --codebase v3.0|v2.1, "
                "--images auto|video|png)"),
    "robomimic": "robomimic (a run's episodes as a robomimic .hdf5 file: -o FILE.hdf5, or DIR/demo.hdf5)",
    "tfevents": "tfevents (the scalars as TensorBoard event files, DIR/<run_id>/)",
}

#: What ``rlarrow export`` prints when the store held nothing to write as the format.
EXPORT_EMPTY: dict[str, str] = {**{name: "no memory snapshots in the store" for name in _MEMORY},
                                "tfevents": "no scalars in the store"}

#: The ``rlarrow convert`` flags that apply to each format's inputs.
CONVERT_FLAGS: dict[str, tuple[str, ...]] = {
    **{name: _MEMORY_FLAGS for name in ("pt", "npz", "parquet")},
    "csv": ("--num-envs", "--memory-size", "--float64", *_MEMORY_FLAGS),
    "envlogger": ("--run-id", "--name", "--skip-corrupt", "--again"),
    "minari": ("--run-id", "--name", "--again", "--allow-hdf5-links"),
    "rlds": ("--run-id", "--name", "--again", "--keep-images-encoded"),
    "lerobot": ("--run-id", "--name", "--again", "--keep-video"),
    "hdf5": ("--run-id", "--name", "--again", "--allow-hdf5-links"),
    "tfevents": ("--run-id", "--name", "--skip-corrupt", "--again"),
}

#: The ``rlarrow convert INPUT --to FORMAT`` flags of each writer: the fields of its
#: :attr:`~rlarrow.io.registry.Format.write_options` class, spelled as flags (``fps`` is ``--fps``).
WRITE_FLAGS: dict[str, tuple[str, ...]] = {
    "minari": ("--data-format", "--dataset-id"),
    "rlds": ("--episodes-per-shard",),
    "lerobot": ("--codebase", "--images", "--fps", "--task"),
}

#: The ``rlarrow export`` flags that apply to each format.
EXPORT_FLAGS: dict[str, tuple[str, ...]] = {
    "minari": (*_EXPORT, "--data-format"),
    "lerobot": (*_EXPORT, "--codebase", "--images", "--fps", "--task"),
}


def convert_help(fmt: Format) -> tuple[str, str] | None:
    """``(INPUT, what it becomes)`` for ``rlarrow convert --help``; None: the format imports nothing."""
    if fmt.import_ is None:
        return None
    if fmt.name in CONVERT_HELP:
        return CONVERT_HELP[fmt.name]
    if fmt.convert_help is not None:  # (a plugin's own words, the deprecated field)
        return fmt.convert_help
    pattern = " ".join(f"*{s}" for s in fmt.suffixes) or f"{fmt.name.upper()}_INPUT"
    return pattern, fmt.summary


def export_help(fmt: Format) -> str:
    """What ``rlarrow export --format`` says ``fmt`` writes."""
    return EXPORT_HELP.get(fmt.name) or fmt.export_help or f"{fmt.name} ({fmt.summary})"


def export_empty(fmt: Format) -> str:
    """What ``rlarrow export`` prints when the store held nothing to write as ``fmt``."""
    return EXPORT_EMPTY.get(fmt.name) or fmt.export_empty or f"nothing to export as {fmt.name} in the store"


def convert_flags(fmt: Format) -> tuple[str, ...]:
    """The ``rlarrow convert`` flags that apply to ``fmt``'s inputs."""
    return CONVERT_FLAGS.get(fmt.name) or fmt.convert_options or ("--run-id", "--name", "--again")


def export_flags(fmt: Format) -> tuple[str, ...]:
    """The ``rlarrow export`` flags that apply to ``fmt``."""
    return EXPORT_FLAGS.get(fmt.name) or fmt.export_options or _EXPORT


def convert_options(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Each format's own options, built from ``rlarrow convert``'s flag values (by parameter name).

    Example:
        >>> convert_options({"keep_video": True})["lerobot"]
        LeRobotOptions(video='keep')
    """
    from rlarrow.io.envlogger import EnvloggerOptions
    from rlarrow.io.hdf5 import HDF5Options
    from rlarrow.io.lerobot.lerobot_options import LeRobotOptions
    from rlarrow.io.memory.memory_options import MemoryOptions
    from rlarrow.io.minari import MinariOptions
    from rlarrow.io.rlds import RldsOptions
    from rlarrow.io.tfevents.tfevents_options import TfeventsOptions

    autoreset = flags.get("autoreset") or "auto"
    mode = None if autoreset == "auto" else autoreset
    links = bool(flags.get("allow_hdf5_links"))
    corrupt = bool(flags.get("skip_corrupt"))
    return {
        "memory": MemoryOptions(num_envs=flags.get("num_envs"), memory_size=flags.get("memory_size"),
                                dtype="float64" if flags.get("float64") else "float32",
                                layout=flags.get("layout") or "binary", episodes=bool(flags.get("episodes")),
                                names=flags.get("names"), autoreset=mode,
                                max_episode_steps=flags.get("max_episode_steps")),
        "tfevents": TfeventsOptions(skip_corrupt=corrupt),
        "envlogger": EnvloggerOptions(skip_corrupt=corrupt),
        "minari": MinariOptions(allow_hdf5_links=links),
        "hdf5": HDF5Options(allow_links=links),
        "rlds": RldsOptions(images="encoded" if flags.get("keep_images_encoded") else "decode"),
        "lerobot": LeRobotOptions(video="keep" if flags.get("keep_video") else "decode"),
    }


def write_flags(fmt: Format) -> tuple[str, ...]:
    """The ``rlarrow convert --to`` flags that apply to ``fmt``'s writer (a plugin's: its options' fields).

    Example:
        >>> from rlarrow.io import registry
        >>> write_flags(registry.get("rlds"))
        ('--episodes-per-shard',)
    """
    if fmt.name in WRITE_FLAGS:
        return WRITE_FLAGS[fmt.name]
    cls = fmt.write_options_type()
    return () if cls is None else tuple("--" + f.name.replace("_", "-") for f in dataclasses.fields(cls))


def write_options(fmt: Format, flags: Mapping[str, Any]) -> Any:
    """``fmt``'s writer options (its :attr:`~rlarrow.io.registry.Format.write_options`), built from flags.

    ``flags`` are ``rlarrow convert``'s values by parameter name (None: not given); those of
    :func:`write_flags` are taken, the rest left to the caller. None: the writer takes no options.

    Example:
        >>> from rlarrow.io import registry
        >>> write_options(registry.get("lerobot"), {"fps": 10, "codebase": None, "again": False})
        LeRobotOptions(codebase='v3.0', images='auto', fps=10, task=None)
    """
    cls = fmt.write_options_type()
    if cls is None:
        return None
    taken = {flag[2:].replace("-", "_") for flag in write_flags(fmt)}
    return cls(**{k: v for k, v in flags.items() if k in taken and v is not None})
