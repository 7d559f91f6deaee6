"""What one import is given (:class:`ImportRun`), and the deprecated bag of every format's options.

An import through the format registry (:attr:`rlarrow.io.registry.Format.import_`) gets an
:class:`ImportRun`: the run it goes into, and an instance of its format's own options class
(:attr:`rlarrow.io.registry.Format.options`). :class:`ImportOptions`, the union of every
format's options that rlarrow 0.2 passed instead, still works where it is built.
Both names are importable from :mod:`rlarrow.io.registry` as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rlarrow.core.errors import ArgumentError

__all__ = ["ImportOptions", "ImportRun"]

_O = TypeVar("_O")


class _Format(Protocol):
    """What :class:`ImportOptions` asks of a format (a :class:`rlarrow.io.registry.Format`)."""

    def options_type(self) -> type | None:
        """The class of the format's own options; None: it takes none."""


@dataclass(frozen=True)
class ImportRun:
    """What one import is given: the run it goes into, and its format's own options.

    Attributes:
        run_id: the run to import into (None: a new id).
        name: the new run's name.
        existing_run: ``run_id`` names a run made already (an experiment's): add to it, make no
            new ``runs`` row.
        progress: progress bars (None: when stderr is a terminal).
        options: an instance of the format's :attr:`Format.options` class (None: its defaults).

    Example:
        >>> from rlarrow.io.tfevents.tfevents_options import TfeventsOptions
        >>> ImportRun(name="ppo", options=TfeventsOptions(skip_corrupt=True)).options.skip_corrupt
        True
    """

    run_id: str | None = None
    name: str | None = None
    existing_run: bool = False
    progress: bool | None = None
    options: Any = None

    def options_or(self, cls: type[_O]) -> _O:
        """:attr:`options` if it is a ``cls``, its defaults when None.

        Raises:
            ArgumentError: the options are of another class (another format's).
        """
        if self.options is None:
            return cls()
        if not isinstance(self.options, cls):
            raise ArgumentError(f"options={self.options!r}: this format takes {cls.__name__}, "
                                f"not {type(self.options).__name__}")
        return self.options


@dataclass(frozen=True)
class ImportOptions:
    """Every format's options in one bag: the deprecated way to pass them (rlarrow 0.2).

    Each format now declares its own options class (:attr:`Format.options`: ``MemoryOptions``,
    ``TfeventsOptions``, ``EnvloggerOptions``, ``MinariOptions``, ``HDF5Options``,
    ``RldsOptions``, ``LeRobotOptions``) and takes an :class:`ImportRun`; this bag still works
    where it is built: :meth:`run` gives the :class:`ImportRun` for a format (its fields
    translated to that format's options), and ``import_paths``' keyword arguments of the
    same names build the per-format options the same way.

    Attributes:
        run_id: the run to import into (None: a new id).
        name: the new run's name.
        existing_run: ``run_id`` names a run made already (an experiment's): add to it, make no
            new ``runs`` row.
        episodes: memory exports: also unroll each snapshot into episodes and steps.
        names: memory exports: tensor name by role for the unrolling.
        autoreset: memory exports: the vector env's autoreset mode (None: detected).
        max_episode_steps: memory exports: the env's time limit, cutting episodes a memory
            without ``truncated`` runs together.
        skip_corrupt: import what is whole of damaged files, and say what was skipped.
        num_envs: csv exports: environments.
        memory_size: csv exports: memory size.
        dtype: csv exports: float dtype.
        layout: how a new memory table stores tensors.
        images: RLDS datasets: decode images (``"decode"``) or keep their bytes (``"encoded"``).
        video: LeRobot datasets: decode cameras (``"decode"``) or keep them as video (``"keep"``).
        progress: progress bars (None: when stderr is a terminal).
        hdf5_links: HDF5 files (D4RL, robomimic, Minari's HDF5 backend): follow external links
            and virtual datasets whose files lie in the input's own directory.

    Example:
        >>> from rlarrow.io.registry import get
        >>> ImportOptions(run_id="r1", skip_corrupt=True).run(get("envlogger")).options
        EnvloggerOptions(skip_corrupt=True)
    """

    run_id: str | None = None
    name: str | None = None
    existing_run: bool = False
    episodes: bool = False
    names: Mapping[str, str] | None = None
    autoreset: str | None = None
    max_episode_steps: int | None = None
    skip_corrupt: bool = False
    num_envs: int | None = None
    memory_size: int | None = None
    dtype: str = "float32"
    layout: str = "binary"
    images: str = "decode"
    video: str = "decode"
    progress: bool | None = None
    hdf5_links: bool = False

    def format_options(self, fmt: _Format) -> Any:
        """The options of ``fmt``'s own class these fields make (None: it takes none)."""
        cls = fmt.options_type()
        if cls is None:
            return None
        fields = _LEGACY_FIELDS.get(cls.__name__, {})
        return cls(**{new: getattr(self, old) for new, old in fields.items()})

    def run(self, fmt: _Format) -> ImportRun:
        """The :class:`ImportRun` for an import of ``fmt``: the run's fields, and its options."""
        return ImportRun(run_id=self.run_id, name=self.name, existing_run=self.existing_run,
                         progress=self.progress, options=self.format_options(fmt))


#: ImportOptions' fields by option class: {its field: ImportOptions' field}.
_LEGACY_FIELDS: dict[str, dict[str, str]] = {
    "MemoryOptions": {f: f for f in ("num_envs", "memory_size", "dtype", "layout", "episodes", "names",
                                      "autoreset", "max_episode_steps")},
    "TfeventsOptions": {"skip_corrupt": "skip_corrupt"},
    "EnvloggerOptions": {"skip_corrupt": "skip_corrupt"},
    "MinariOptions": {"allow_hdf5_links": "hdf5_links"},
    "HDF5Options": {"allow_links": "hdf5_links"},
    "RldsOptions": {"images": "images"},
    "LeRobotOptions": {"video": "video"},
}
