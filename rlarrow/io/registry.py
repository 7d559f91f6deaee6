"""Every format rlarrow reads or writes, declared once: what ``rlarrow convert`` and ``rlarrow export`` use.

Each format is one :class:`Format`: its name, how to recognise it (:attr:`Format.detect`),
how to import it into a store and export a store to it (thin callables over the format's
own module, imported only when called), the file suffixes and marker files that identify
it, and the class of its own options (:attr:`Format.options`). What the command line says
about it (flags, help lines) is in :mod:`rlarrow.cli.formats`. :data:`FORMATS`
holds them, in the order detection tries them:

* ``pt``, ``npz``, ``csv``, ``parquet``: replay-memory exports (:mod:`rlarrow.io.memory`),
  one snapshot per file; the files given together are imported as one run (their
  :attr:`Format.group` is ``"memory"``). They also take any input no other format claims,
  so that its error says what is wrong with it (:attr:`Format.expand`);
* ``envlogger``: an envlogger riegeli directory (:mod:`rlarrow.io.envlogger`);
* ``minari``: a Minari dataset (:mod:`rlarrow.io.minari`); exported with Minari's own writer;
* ``rlds``: an RLDS dataset in a TFDS directory (:mod:`rlarrow.io.rlds`), read without TensorFlow;
* ``lerobot``: a LeRobot v3.0 or v2.x dataset (:mod:`rlarrow.io.lerobot`); exports write v3.0 or v2.1;
* ``hdf5``: a D4RL or robomimic HDF5 file (:mod:`rlarrow.io.hdf5`), import only; each file is
  a run of its own (:attr:`Format.single`);
* ``robomimic``: a run written as a robomimic HDF5 file (:mod:`rlarrow.io.hdf5`), export only
  (robomimic files are imported by ``hdf5``);
* ``tfevents``: TensorBoard event files (:mod:`rlarrow.io.tfevents`); a log directory is
  imported whole (:attr:`Format.whole`).

:func:`rlarrow.io.importing.import_paths` sorts its inputs with :func:`detect` and calls
:attr:`Format.import_`; ``rlarrow export --format`` offers :func:`exporters` and calls
:attr:`Format.export`. Adding a format is one module under ``rlarrow/io/`` (its
``read_*``/``iter_*``/``write_*`` and ``import_*``/``export_*``) and one :func:`register`
call, or one entry in :data:`FORMATS` (``docs/architecture.md`` walks through it).

Importing this module imports none of the formats (no torch, dm_env or envlogger): each
callable imports its module when called. The format modules never import this one.

Example:
    >>> import pathlib, tempfile
    >>> from rlarrow.io import registry
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "metadata.riegeli").write_bytes(b"")
    >>> registry.detect(d).name
    'envlogger'
    >>> [f.name for f in registry.exporters()]
    ['pt', 'npz', 'csv', 'parquet', 'envlogger', 'minari', 'rlds', 'lerobot', 'robomimic', 'tfevents']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from rlarrow.core.errors import ArgumentError, NotFoundError
from rlarrow.io.import_options import ImportOptions as ImportOptions
from rlarrow.io.import_options import ImportRun

if TYPE_CHECKING:
    from rlarrow.core.sources import EpisodeSource
    from rlarrow.core.store import Store, StoreLike

__all__ = [
    "FORMATS", "Format", "ImportRun", "Imported", "by_suffix", "detect", "exporters", "get", "importers",
    "readers", "register", "unregister", "writers",
]



@dataclass
class Imported:
    """What one import made: the run, what ``rlarrow convert`` prints about it.

    Attributes:
        run_id: the run the data went into.
        lines: the lines ``rlarrow convert`` prints when this import is a run of its own.
        summary: a few words for an experiment's line (``"3 memory snapshot(s)"``).
        assumptions: what the import assumed (said in ``lines`` already).
        snapshot_ids: memory snapshot id made from each source file, where there is one.
    """

    run_id: str
    lines: list[str] = field(default_factory=list)
    summary: str = ""
    assumptions: list[str] = field(default_factory=list)
    snapshot_ids: dict[Path, int] = field(default_factory=dict)


class ImportFunction(Protocol):
    """``import_(sources, store, run) -> Imported``: a format's import into an open store.

    ``run`` is an :class:`ImportRun`: the run to import into, and the format's own options
    (an instance of its :attr:`Format.options`, or None for their defaults).

    ``sources`` are the paths of one unit: the directory of a ``directory`` format, the
    directory or file given of a :attr:`Format.whole` format, else the files of the unit.
    It runs inside the caller's transaction: it must not commit on its own terms.
    """

    def __call__(self, sources: Sequence[Path], store: Store, run: ImportRun, /) -> Imported:
        """Import ``sources`` into ``store``."""


class ExportFunction(Protocol):
    """``export(store, directory, *, run_id=None, overwrite=False) -> [paths written]``."""

    def __call__(self, store: StoreLike, directory: str | os.PathLike[str], *,
                 run_id: str | None = None, overwrite: bool = False) -> list[Path]:
        """Write ``store`` (or its run ``run_id``) into ``directory``; the paths written."""


@dataclass(frozen=True)
class Format:
    """One format: how rlarrow recognises it, imports it and exports to it.

    Attributes:
        name: its name: ``rlarrow export --format NAME``, and the ``format`` of the
            ``sources`` rows it makes.
        summary: what it is, in one line.
        detect: whether a path is of this format, by its name and marker files (cheap: it
            runs on every file below a folder given to ``rlarrow convert``).
        kind: ``"file"``: each file is a source (a folder given is searched for them);
            ``"directory"``: a directory is one dataset, imported as one run (never looked
            into for other formats).
        import_: the import into a store (see :class:`ImportFunction`); None: export only.
        export: the export of a store (see :class:`ExportFunction`); None: import only.
        suffixes: the file suffixes that name it (``(".pt",)``), lower case.
        markers: the files whose presence marks it (``("metadata.riegeli",)``).
        group: formats of one group given together are imported together, as one run (the
            memory exports); default: the format's name.
        whole: a ``"file"`` format whose folder given (a TensorBoard log directory) is
            imported whole, as one unit, rather than file by file.
        single: a ``"file"`` format whose every file is a dataset of its own (an HDF5 file):
            one run each, never pooled with the other files given.
        sniff: by content, whether a file given by name that no format's :attr:`detect`
            takes is of this format (a memory export without its suffix).
        expand: set on the format that takes the inputs no other format claims (files of
            no known name, folders without other formats' files, globs): the files they
            name, raising :class:`FileNotFoundError` when none (its message says why).
        noun: what messages call its inputs, plural (``"envlogger directories"``).
        convert_options, export_options, convert_help, export_help, export_empty: deprecated
            (rlarrow 0.2): the command line's words about a format live in
            :mod:`rlarrow.cli.formats`, keyed by name; a plugin format may still set these
            (its flags, ``(INPUT, what it becomes)``, its export help line and what an empty
            export prints), else the CLI says its :attr:`summary`. rlarrow's own formats
            leave them empty.
        options: the class of the format's own options (a small frozen dataclass whose
            defaults are the format's defaults), or ``"module:Class"`` to import it only when
            used; None: it takes none. An import gets an instance in :attr:`ImportRun.options`.
        read: ``read(path, run) -> EpisodeSource``: the format read without a store
            (episode formats; :mod:`rlarrow.core.sources`); None: no reader of its own.
        write: ``write(source, path, *, overwrite=False, **options) -> [paths written]``:
            an episode source written as this format (what ``rlarrow convert --to`` calls).
        write_options: the class of the writer's own options (a small frozen dataclass whose
            fields are the keywords :attr:`write` takes beyond ``overwrite``, defaults the
            writer's), or ``"module:Class"``; None: the writer takes none. ``rlarrow convert
            --to`` builds one from its flags (:mod:`rlarrow.cli.formats`).
    """

    name: str
    summary: str
    detect: Callable[[Path], bool]
    kind: Literal["file", "directory"] = "file"
    import_: ImportFunction | None = None
    export: ExportFunction | None = None
    suffixes: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    group: str = ""
    whole: bool = False
    single: bool = False
    sniff: Callable[[Path], bool] | None = None
    expand: Callable[[Sequence[str | os.PathLike[str]]], list[Path]] | None = None
    noun: str = ""
    convert_options: tuple[str, ...] = ()
    export_options: tuple[str, ...] = ()
    convert_help: tuple[str, str] | None = None
    export_help: str = ""
    export_empty: str = ""
    read: Callable[[Path, ImportRun], EpisodeSource] | None = None
    write: Callable[..., list[Path]] | None = None
    options: type | str | None = None
    write_options: type | str | None = None

    def __post_init__(self) -> None:
        if not self.group:
            object.__setattr__(self, "group", self.name)
        if self.kind not in ("file", "directory"):
            raise ArgumentError(f"format {self.name!r}: kind must be 'file' or 'directory', "
                                f"not {self.kind!r}")

    def options_type(self) -> type | None:
        """The class of :attr:`options` (a ``"module:Class"`` imported now); None: it takes none.

        Example:
            >>> get("lerobot").options_type().__name__
            'LeRobotOptions'
        """
        return _class(self.options)

    def write_options_type(self) -> type | None:
        """The class of :attr:`write_options` (a ``"module:Class"`` imported now); None: it takes none.

        Example:
            >>> get("rlds").write_options_type().__name__
            'RldsWriteOptions'
        """
        return _class(self.write_options)


def _class(spec: type | str | None) -> type | None:
    """``spec``, a ``"module:Class"`` imported now."""
    if not isinstance(spec, str):
        return spec
    import importlib

    module, _, name = spec.partition(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


# --------------------------------------------------------------------------- detection helpers


def by_suffix(*suffixes: str) -> Callable[[Path], bool]:
    """A :attr:`Format.detect` that takes regular files with one of ``suffixes`` (any case).

    Example:
        >>> by_suffix(".toy")(Path("/nonexistent/a.toy"))
        False
    """
    wanted = tuple(s.lower() for s in suffixes)

    def detect(path: Path) -> bool:
        return path.suffix.lower() in wanted and path.is_file()

    return detect


def _is_envlogger(path: Path) -> bool:
    from rlarrow.io.envlogger import is_envlogger_dir

    return is_envlogger_dir(path)


def _is_minari(path: Path) -> bool:
    from rlarrow.io.minari import is_minari_dir

    return path.is_dir() and is_minari_dir(path)


def _hdf5_dataset(path: Path) -> bool:
    """An HDF5 file (by signature) of D4RL's or robomimic's layout; not a damaged one (h5py needed)."""
    from rlarrow.core.errors import RLArrowError
    from rlarrow.io.codecs.hdf5_files import HDF5RefusedError, is_hdf5_file
    from rlarrow.io.hdf5 import hdf5_layout

    if not is_hdf5_file(path):
        return False
    try:
        return hdf5_layout(path) is not None
    except HDF5RefusedError:  # nothing of it looked at: its import refuses it, saying why
        return True
    except RLArrowError:  # damaged: given by name, the unsupported-input message says so
        return False


def _is_hdf5(path: Path) -> bool:
    """An HDF5 file of D4RL's or robomimic's layout (other HDF5 files, a Keras checkpoint, are no dataset).

    Without h5py the layout cannot be looked at: an ``.hdf5`` file is taken, and its import
    says to install h5py.
    """
    from rlarrow.core.deps import has_module
    from rlarrow.io.codecs.hdf5_files import HDF5_SUFFIXES

    if path.suffix.lower() not in HDF5_SUFFIXES or not path.is_file():
        return False
    if not has_module("h5py"):
        return path.suffix.lower() == ".hdf5"
    return _hdf5_dataset(path)


def _sniff_hdf5(path: Path) -> bool:
    """A file given by name without an HDF5 suffix: by its signature and layout."""
    from rlarrow.core.deps import has_module

    return has_module("h5py") and _hdf5_dataset(path)


def _is_event_file(path: Path) -> bool:
    if "tfevents" not in path.name:  # (no import for the common case)
        return False
    from rlarrow.io.tfevents import is_event_file

    return is_event_file(path)


def _memory_sniff(name: str) -> Callable[[Path], bool]:
    def sniff(path: Path) -> bool:
        from rlarrow.core.errors import RLArrowError
        from rlarrow.io.memory.importer import detect_format

        try:
            return detect_format(path) == name
        except (RLArrowError, OSError):
            return False

    return sniff


def _expand_memory(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    from rlarrow.io.memory.importer import expand_inputs

    return expand_inputs(inputs)


# --------------------------------------------------------------------------- imports and exports


def _import_memory(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.memory.importer import import_memory
    from rlarrow.io.memory.memory_options import MemoryOptions

    o = run.options_or(MemoryOptions)
    extra = {} if o.autoreset is None else {"autoreset": o.autoreset}
    report = import_memory(list(sources), store, run_id=run.run_id, name=run.name,
                           num_envs=o.num_envs, memory_size=o.memory_size, dtype=o.dtype,
                           episodes=o.episodes, names=o.names, layout=o.layout,
                           progress=run.progress, max_episode_steps=o.max_episode_steps, **extra)
    return Imported(report.run_id, lines=[str(report)], summary=f"{len(report.files)} memory snapshot(s)",
                    assumptions=list(report.assumptions),
                    snapshot_ids={p: report.first_snapshot + i for i, p in enumerate(report.files)})


def _export_memory(fmt: str) -> ExportFunction:
    def export(store: StoreLike, directory: str | os.PathLike[str], *,
               run_id: str | None = None, overwrite: bool = False) -> list[Path]:
        from rlarrow.io.memory.importer import export_memory

        return export_memory(store, directory, fmt, run_id=run_id, overwrite=overwrite)

    return export


def _import_tfevents(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.core.store import new_run_id
    from rlarrow.io.tfevents import import_tfevents
    from rlarrow.io.tfevents.tfevents_options import TfeventsOptions

    run_id = run.run_id or new_run_id()
    report = import_tfevents(sources[0] if len(sources) == 1 else list(sources), store, run_id=run_id,
                             name=run.name, on_corrupt=run.options_or(TfeventsOptions).on_corrupt,
                             progress=run.progress, existing_run=run.existing_run)
    return Imported(run_id, lines=[f"imported {report}", *(f"  run {r}" for r in report.runs)],
                    summary=str(report))


def _export_tfevents(store: StoreLike, directory: str | os.PathLike[str], *,
                     run_id: str | None = None, overwrite: bool = False) -> list[Path]:
    from rlarrow.io.tfevents import export_tfevents

    return export_tfevents(store, directory, run_id=run_id, overwrite=overwrite)


def _import_envlogger(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.envlogger import EnvloggerOptions, import_envlogger

    (directory,) = sources
    report = import_envlogger(directory, store, run_id=run.run_id, name=run.name, progress=run.progress,
                              skip_corrupt=run.options_or(EnvloggerOptions).skip_corrupt)
    return Imported(report.run_id, lines=[str(report)], summary=str(report))


def _export_envlogger(store: StoreLike, directory: str | os.PathLike[str], *,
                      run_id: str | None = None, overwrite: bool = False) -> list[Path]:
    from rlarrow.io.envlogger import export_envlogger

    return [export_envlogger(store, directory, run_id=run_id, overwrite=overwrite)]


def _write_envlogger(source: EpisodeSource, directory: str | os.PathLike[str], *,
                     overwrite: bool = False) -> list[Path]:
    from rlarrow.io.envlogger import write_envlogger

    return [write_envlogger(source, directory, overwrite=overwrite)]


def _import_minari(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.minari import MinariOptions, import_minari

    (directory,) = sources
    report = import_minari(directory, store, run_id=run.run_id, name=run.name, progress=run.progress,
                           allow_hdf5_links=run.options_or(MinariOptions).allow_hdf5_links)
    return Imported(report.run_id, lines=[str(report)], summary=str(report))


def _export_minari(store: StoreLike, directory: str | os.PathLike[str], *, run_id: str | None = None,
                   overwrite: bool = False, data_format: str | None = None) -> list[Path]:
    from rlarrow.io.minari import export_minari

    fmt = data_format or "hdf5"
    return [export_minari(store, directory, run_id=run_id, overwrite=overwrite, data_format=fmt)]


def _read_envlogger(path: Path, run: ImportRun) -> EpisodeSource:
    from rlarrow.io.envlogger import EnvloggerOptions, read_envlogger

    return read_envlogger(path, run_id=run.run_id, skip_corrupt=run.options_or(EnvloggerOptions).skip_corrupt)


def _read_hdf5(path: Path, run: ImportRun) -> EpisodeSource:
    from rlarrow.io.hdf5 import HDF5Options, read_hdf5

    return read_hdf5(path, run_id=run.run_id, options=run.options_or(HDF5Options))


def _write_robomimic(source: EpisodeSource, directory: str | os.PathLike[str], *,
                     overwrite: bool = False) -> list[Path]:
    from rlarrow.io.hdf5 import write_robomimic

    return [write_robomimic(source, _robomimic_target(directory), overwrite=overwrite)]


def _robomimic_target(directory: str | os.PathLike[str]) -> Path:
    """``-o FILE.hdf5`` as given, ``-o DIR`` as ``DIR/demo.hdf5``."""
    from rlarrow.core.targets import refuse_object_storage

    refuse_object_storage(directory, "a robomimic file")  # (before Path() makes s3://b the local s3:/b)
    target = Path(directory)
    return target if target.suffix.lower() in (".hdf5", ".h5") else target / "demo.hdf5"


def _read_rlds(path: Path, run: ImportRun) -> EpisodeSource:
    from rlarrow.io.rlds import RldsOptions, read_rlds

    return read_rlds(path, run_id=run.run_id, options=run.options_or(RldsOptions))


def _write_rlds(source: EpisodeSource, directory: str | os.PathLike[str], *,
                overwrite: bool = False, episodes_per_shard: int = 1000) -> list[Path]:
    from rlarrow.io.rlds import write_rlds

    return [write_rlds(source, directory, overwrite=overwrite, episodes_per_shard=episodes_per_shard)]


def _read_minari(path: Path, run: ImportRun) -> EpisodeSource:
    from rlarrow.io.minari import MinariOptions, read_minari

    links = run.options_or(MinariOptions).allow_hdf5_links
    return read_minari(path, run_id=run.run_id, allow_hdf5_links=links)


def _write_minari(source: EpisodeSource, directory: str | os.PathLike[str], *, overwrite: bool = False,
                  data_format: str | None = None, dataset_id: str | None = None) -> list[Path]:
    from rlarrow.io.minari import write_minari

    return [write_minari(source, directory, overwrite=overwrite, data_format=data_format or "hdf5",
                         dataset_id=dataset_id)]


def _export_robomimic(store: StoreLike, directory: str | os.PathLike[str], *, run_id: str | None = None,
                      overwrite: bool = False) -> list[Path]:
    from rlarrow.io.hdf5 import export_robomimic

    return [export_robomimic(store, _robomimic_target(directory), run_id=run_id, overwrite=overwrite)]


def _never(path: Path) -> bool:
    return False


def _is_rlds(path: Path) -> bool:
    from rlarrow.io.rlds import is_rlds_dir

    return path.is_dir() and is_rlds_dir(path)


def _import_rlds(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.rlds import RldsOptions, import_rlds

    (directory,) = sources
    o = run.options_or(RldsOptions)
    report = import_rlds(directory, store, run_id=run.run_id, name=run.name, images=o.images,
                         splits=None if o.splits is None else list(o.splits), progress=run.progress)
    return Imported(report.run_id, lines=[str(report)], summary=str(report))


def _export_rlds(store: StoreLike, directory: str | os.PathLike[str], *, run_id: str | None = None,
                 overwrite: bool = False) -> list[Path]:
    from rlarrow.io.rlds import export_rlds

    return [export_rlds(store, directory, run_id=run_id, overwrite=overwrite)]


def _export_lerobot(store: StoreLike, directory: str | os.PathLike[str], *, run_id: str | None = None,
                    overwrite: bool = False, codebase: str | None = None, images: str | None = None,
                    fps: int | None = None, task: str | None = None) -> list[Path]:
    from rlarrow.io.lerobot import export_lerobot

    return [export_lerobot(store, directory, run_id=run_id, overwrite=overwrite, codebase=codebase or "v3.0",
                           images=images or "auto", fps=fps, task=task)]


def _read_lerobot(path: Path, run: ImportRun) -> EpisodeSource:
    from rlarrow.io.lerobot import read_lerobot
    from rlarrow.io.lerobot.lerobot_options import LeRobotOptions

    return read_lerobot(path, run_id=run.run_id, video=run.options_or(LeRobotOptions).video)


def _write_lerobot(source: EpisodeSource, directory: str | os.PathLike[str], *, overwrite: bool = False,
                   codebase: str | None = None, images: str | None = None, fps: int | None = None,
                   task: str | None = None) -> list[Path]:
    from rlarrow.io.lerobot import write_lerobot

    return [write_lerobot(source, directory, overwrite=overwrite, codebase=codebase or "v3.0",
                          images=images or "auto", fps=fps, task=task)]


def _is_lerobot(path: Path) -> bool:
    from rlarrow.io.lerobot import is_lerobot_dir

    return path.is_dir() and is_lerobot_dir(path)


def _import_lerobot(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.lerobot import import_lerobot
    from rlarrow.io.lerobot.lerobot_options import LeRobotOptions

    (directory,) = sources
    report = import_lerobot(directory, store, run_id=run.run_id, name=run.name,
                            video=run.options_or(LeRobotOptions).video, progress=run.progress)
    return Imported(report.run_id, lines=[str(report)], summary=str(report))


def _import_hdf5(sources: Sequence[Path], store: Store, run: ImportRun) -> Imported:
    from rlarrow.io.hdf5 import HDF5Options, import_hdf5

    (path,) = sources
    o = run.options_or(HDF5Options)
    report = import_hdf5(path, store, run_id=run.run_id, name=run.name, progress=run.progress,
                         chunk_bytes=o.chunk_bytes, allow_hdf5_links=o.allow_links, layout=o.layout)
    return Imported(report.run_id, lines=[str(report)], summary=str(report))


# --------------------------------------------------------------------------- the formats

_MEMORY_NOUN = "memory exports (.pt .npz .csv .parquet)"
_MEMORY_SUMMARIES = {
    "pt": "a skrl/rofunc replay memory saved by torch.save (.pt)",
    "npz": "a skrl/rofunc replay memory saved by numpy.savez (.npz)",
    "csv": "a skrl/rofunc replay memory as a csv file, one column per tensor element (.csv)",
    "parquet": "one replay-memory snapshot as an rlarrow memory file (.parquet)",
}


def _memory(name: str) -> Format:
    return Format(
        name=name, summary=_MEMORY_SUMMARIES[name], detect=by_suffix(f".{name}"), kind="file",
        import_=_import_memory, export=_export_memory(name), suffixes=(f".{name}",), group="memory",
        sniff=_memory_sniff(name), expand=_expand_memory, noun=_MEMORY_NOUN,
        options="rlarrow.io.memory.memory_options:MemoryOptions",
    )


#: The formats by name, in the order :func:`detect` tries them (see the module docs).
FORMATS: dict[str, Format] = {f.name: f for f in (
    *(_memory(name) for name in ("pt", "npz", "csv", "parquet")),
    Format(
        name="envlogger", options="rlarrow.io.envlogger:EnvloggerOptions",
        summary="an envlogger (riegeli) directory of dm_env episodes",
        detect=_is_envlogger, kind="directory", import_=_import_envlogger, export=_export_envlogger,
        read=_read_envlogger, write=_write_envlogger,
        suffixes=(".riegeli",), markers=("metadata.riegeli",), noun="envlogger directories",
    ),
    Format(
        name="minari", options="rlarrow.io.minari:MinariOptions",
        summary="a Minari dataset (arrow, parquet or HDF5 backend) of gymnasium episodes",
        detect=_is_minari, kind="directory", import_=_import_minari, export=_export_minari,
        read=_read_minari, write=_write_minari,
        write_options="rlarrow.io.minari.minari_writing:MinariWriteOptions",
        suffixes=(".arrow", ".parquet"), markers=("data/metadata.json",), noun="Minari datasets",
    ),
    Format(
        name="rlds", options="rlarrow.io.rlds:RldsOptions",
        summary="an RLDS dataset in a TFDS directory (tfrecord shards), read without TensorFlow",
        detect=_is_rlds, kind="directory", import_=_import_rlds, export=_export_rlds,
        read=_read_rlds, write=_write_rlds, write_options="rlarrow.io.rlds:RldsWriteOptions",
        markers=("dataset_info.json", "features.json"),
        noun="RLDS/TFDS datasets",
    ),
    Format(
        name="lerobot", options="rlarrow.io.lerobot.lerobot_options:LeRobotOptions",
        summary="a LeRobot v3.0 or v2.x dataset (Parquet frames, mp4 cameras, meta/)",
        detect=_is_lerobot, kind="directory", import_=_import_lerobot, export=_export_lerobot,
        read=_read_lerobot, write=_write_lerobot, markers=("meta/info.json",),
        write_options="rlarrow.io.lerobot.writing:LeRobotOptions",
        noun="LeRobot datasets",
    ),
    Format(
        name="hdf5", options="rlarrow.io.hdf5:HDF5Options",
        summary="an HDF5 file of D4RL's or robomimic's layout (offline-RL, robot demos)",
        detect=_is_hdf5, kind="file", import_=_import_hdf5, suffixes=(".hdf5", ".h5", ".he5", ".hdf"),
        read=_read_hdf5,
        single=True, sniff=_sniff_hdf5, noun="HDF5 files (D4RL, robomimic)",
    ),
    Format(
        name="robomimic", summary="a run's episodes as a robomimic HDF5 file (data/demo_<i>), export only",
        detect=_never, kind="file", export=_export_robomimic, suffixes=(".hdf5",), write=_write_robomimic,
    ),
    Format(
        name="tfevents", options="rlarrow.io.tfevents.tfevents_options:TfeventsOptions",
        summary="TensorBoard event files of logged scalars",
        detect=_is_event_file, kind="file", import_=_import_tfevents, export=_export_tfevents,
        markers=("*tfevents*",), whole=True, noun="TensorBoard event files or log directories",
    ),
)}


# --------------------------------------------------------------------------- lookups


def get(name: str) -> Format:
    """The format called ``name``.

    Raises:
        NotFoundError: no such format (a :class:`KeyError`; the message lists the known ones).

    Example:
        >>> get("tfevents").kind
        'file'
    """
    try:
        return FORMATS[name]
    except KeyError:
        raise NotFoundError(f"unknown format {name!r}; known: {', '.join(FORMATS)}") from None


def detect(path: str | os.PathLike[str], *, content: bool = True) -> Format | None:
    """The format of ``path``: a ``directory`` format for a directory, a ``file`` format for a file.

    Formats are tried in :data:`FORMATS` order, by :attr:`Format.detect`; then, for a file
    that none takes and with ``content``, by :attr:`Format.sniff` (its first bytes).

    Returns:
        The format, or None (nothing takes it, or it does not exist). A folder of event
        files or memory exports is no format of its own: :func:`rlarrow.io.importing.import_paths`
        looks into it.

    Example:
        >>> detect("/nonexistent") is None
        True
    """
    p = Path(path)
    if p.is_dir():
        return next((f for f in FORMATS.values() if f.kind == "directory" and f.detect(p)), None)
    if not p.is_file():
        return None
    files = [f for f in FORMATS.values() if f.kind == "file"]
    found = next((f for f in files if f.detect(p)), None)
    if found is None and content:
        found = next((f for f in files if f.sniff is not None and f.sniff(p)), None)
    return found


def importers() -> list[Format]:
    """The formats ``rlarrow convert`` imports, in :data:`FORMATS` order.

    Example:
        >>> "minari" in [f.name for f in importers()]
        True
    """
    return [f for f in FORMATS.values() if f.import_ is not None]


def exporters() -> list[Format]:
    """The formats ``rlarrow export --format`` writes, in :data:`FORMATS` order.

    Example:
        >>> "robomimic" in [f.name for f in exporters()]
        True
    """
    return [f for f in FORMATS.values() if f.export is not None]


def readers() -> list[Format]:
    """The formats read without a store (:attr:`Format.read`): ``rlarrow convert --to``'s inputs.

    Example:
        >>> "minari" in [f.name for f in readers()]
        True
    """
    return [f for f in FORMATS.values() if f.read is not None]


def writers() -> list[Format]:
    """The formats an episode source is written as (:attr:`Format.write`): ``rlarrow convert --to``'s targets.

    Example:
        >>> "minari" in [f.name for f in writers()]
        True
    """
    return [f for f in FORMATS.values() if f.write is not None]


def fallback() -> Format | None:
    """The format that takes the inputs no other format claims (the one with :attr:`Format.expand`)."""
    return next((f for f in FORMATS.values() if f.expand is not None and f.import_ is not None), None)


def register(fmt: Format, *, before: str | None = None, replace: bool = False) -> Format:
    """Add ``fmt`` to :data:`FORMATS`: ``rlarrow convert`` and ``rlarrow export`` take it from then on.

    A plugin or a test registers its format; rlarrow's own formats are entries of
    :data:`FORMATS`. Detection tries formats in order: ``before`` puts ``fmt`` ahead of the
    format of that name (for a format whose :attr:`Format.detect` would otherwise lose to
    another's), else it goes last. The ``rlarrow export --format`` choices are fixed when
    :mod:`rlarrow.cli.commands` is imported: register exporters before that.

    Args:
        fmt: the format.
        before: the name of the format to try after it.
        replace: replace a format of the same name (else that is an error).

    Returns:
        ``fmt``.

    Raises:
        ArgumentError: a format of that name is registered and not ``replace`` (a :class:`ValueError`).
        NotFoundError: no format ``before`` (a :class:`KeyError`).

    Example:
        >>> toy = register(Format(name="toy", summary="a toy format", detect=by_suffix(".toy")))
        >>> detect("/nonexistent.toy") is None, get("toy") is toy
        (True, True)
        >>> unregister("toy") is toy
        True
    """
    if fmt.name in FORMATS and not replace:
        raise ArgumentError(f"a format {fmt.name!r} is registered already (pass replace=True to replace it)")
    if before is not None:
        get(before)
    items = [(n, f) for n, f in FORMATS.items() if n != fmt.name]
    at = len(items) if before is None else next(i for i, (n, _) in enumerate(items) if n == before)
    items.insert(at, (fmt.name, fmt))
    FORMATS.clear()
    FORMATS.update(items)
    return fmt


def unregister(name: str) -> Format:
    """Remove the format ``name`` from :data:`FORMATS` and return it (see :func:`register`).

    Raises:
        NotFoundError: no such format (a :class:`KeyError`).
    """
    get(name)
    return FORMATS.pop(name)
