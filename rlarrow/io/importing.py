"""Import whatever a training run left behind, all or nothing, once.

:func:`import_paths` is what ``rlarrow convert`` runs. It sorts its inputs into units, each
of which becomes one run of the store:

- an **experiment directory**, as skrl writes one (``runs/EXP/`` holding event files, a
  ``memories/`` folder of exports and ``checkpoints/``): its scalars, memory snapshots and
  (with ``episodes=True``) their episodes go into ONE run named after the directory;
  checkpoints are not data and are listed in the run's metadata as not imported;
- a folder of experiments (``runs/``, searched recursively): one run per experiment;
- an envlogger directory, a Minari dataset: one run each;
- event files or a TensorBoard log directory: one run per TensorBoard run (as
  :func:`rlarrow.io.tfevents.import_tfevents` does);
- memory exports (files, folders, globs) not inside an experiment: one run together.

Formats are recognised and imported through :mod:`rlarrow.io.registry`: a format
registered there is taken here with no change to this module.

Every source is hashed (SHA-256) first, in one pass that also checks a ``.pt``/``.npz``
export's zip CRC-32s (:func:`rlarrow.io.memory.snapshot.digest_export`). A ``.pt`` export is
mapped for that pass and kept mapped: its import takes the tensors as views of the bytes that
were hashed and checked, without opening the file again (an ``.npz``'s import maps it once
more). A source the store's ``sources`` table already
holds was imported before: it is skipped with a message naming its run, unless
``again=True``. Everything is written in one :meth:`rlarrow.Store.transaction`: a failure
anywhere (a damaged file, a full disk, Ctrl-C, a kill) leaves the store as it was.

Example:
    >>> import rlarrow.io.importing as imp
    >>> report = imp.import_paths(["runs/"], "project.rlarrow", episodes=True)  # doctest: +SKIP
    >>> print(report)  # doctest: +SKIP
    run 3f2a...  PPO_cartpole (experiment): 1 event file, 3 memory snapshot(s), 212 episodes
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlarrow.core.errors import ArgumentError, InvalidInputError, UnsupportedInputError
from rlarrow.core.store import Store, StoreLike, as_store, new_run_id
from rlarrow.io import registry
from rlarrow.io.memory.importer import collapse_assumptions
from rlarrow.io.memory.snapshot import crc_record, digest_export, take_kept
from rlarrow.io.registry import Format, ImportOptions, ImportRun

__all__ = ["ImportReport", "import_paths", "is_experiment_dir"]

#: Folders of an experiment directory that hold no data rlarrow imports.
NOT_DATA = ("checkpoints",)
#: What an experiment directory holds: event files, and memory exports in ``memories/``.
_EVENTS = "tfevents"
_MEMORY = "memory"  # (a registry group: pt, npz, csv, parquet)


def content_hash(path: str | os.PathLike[str]) -> tuple[str, int]:
    """SHA-256 (hex) and size of a file; of a directory, over its sorted files.

    A directory's hash covers each regular file's relative path, size and SHA-256 (hidden
    files skipped), so renaming the directory keeps it and changing any file changes it.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.bin"); _ = Path(p).write_bytes(b"abc")
        >>> content_hash(p)
        ('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 3)
    """
    p = Path(path)
    if p.is_file():  # (in a crc_record, a zip archive's CRC-32s are checked in the same pass)
        return digest_export(p)
    outer = hashlib.sha256()
    total = 0
    for f in sorted(_files_below(p)):
        digest, size = content_hash(f)
        outer.update(f"{f.relative_to(p).as_posix()}\0{size}\0{digest}\n".encode())
        total += size
    return outer.hexdigest(), total


def _files_below(directory: Path) -> list[Path]:
    """The regular files below ``directory``, hidden ones left out, in walk order.

    A symlink is neither followed nor looked through (``os.walk`` stats what each link points
    to, which may be outside the input: issue 36).
    """
    found: list[Path] = []
    pending = [os.fspath(directory)]
    while pending:
        try:
            with os.scandir(pending.pop(0)) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
    return found


def _file_format(f: Path) -> Format | None:
    """The ``file`` format of a file found below a folder: by its name (no content is read)."""
    fmt = registry.detect(f, content=False)
    return fmt if fmt is not None and fmt.kind == "file" else None


def _memory_files(directory: Path) -> list[Path]:
    return sorted(f for f in _files_below(directory) if (fmt := _file_format(f)) and fmt.group == _MEMORY)


def _is_event_file(f: Path) -> bool:
    return registry.get(_EVENTS).detect(f)


def _dataset(p: Path) -> Format | None:
    """The ``directory`` format (envlogger, Minari...) ``p`` is a dataset of, if any."""
    fmt = registry.detect(p)
    return fmt if fmt is not None and fmt.kind == "directory" else None


def is_experiment_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an experiment directory as skrl writes one.

    That is a directory with a ``memories/`` folder of exports, or one with event files
    directly inside and a ``checkpoints/`` or ``memories/`` folder beside them.
    """
    p = Path(path)
    if not p.is_dir() or _dataset(p) is not None:
        return False
    memories = p / "memories"
    if memories.is_dir() and _memory_files(memories):
        return True
    has_events = any(_is_event_file(c) for c in p.iterdir())
    return has_events and any((p / d).is_dir() for d in (*NOT_DATA, "memories"))


@dataclass
class _Unit:
    """What becomes one run: an experiment, or inputs of one format (group)."""

    fmt: Format | None  # None: an experiment directory
    path: Path | None  # the directory or file given (files pooled from several inputs: None)
    files: list[Path] = field(default_factory=list)  # a file format's files (experiment: event files)
    memories: list[Path] = field(default_factory=list)  # an experiment's memory exports
    ignored: list[Path] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "experiment" if self.fmt is None else self.fmt.group

    @property
    def pooled(self) -> bool:
        """Files of one format from any inputs, each imported on its own into the run (memory exports)."""
        return self.fmt is not None and self.fmt.kind == "file" and not self.fmt.whole and not self.fmt.single

    @property
    def label(self) -> str:
        if self.path is not None:
            return os.fspath(self.path)
        noun = "memory export" if self.kind == _MEMORY else f"{self.kind} file"
        return f"{len(self.files)} {noun}(s)"

    def sources(self) -> list[tuple[Path, str]]:
        """The hashed sources: (path, format)."""
        if self.fmt is not None and self.fmt.kind == "directory":
            assert self.path is not None
            return [(self.path, self.fmt.name)]
        if self.fmt is None:
            return ([(e, _EVENTS) for e in self.files]
                    + [(m, _source_format(m, _MEMORY)) for m in self.memories])
        return [(f, _source_format(f, self.fmt.group)) for f in self.files]


def _source_format(path: Path, group: str) -> str:
    """A source's ``format`` (its name, else its content, says it); else its suffix, else ``group``."""
    fmt = registry.detect(path)
    return fmt.name if fmt is not None else (path.suffix.lower().lstrip(".") or group)


def _experiment(p: Path) -> _Unit:
    events = sorted(f for f in _files_below(p) if _is_event_file(f) and not _under(f, p, "memories"))
    memories = _memory_files(p / "memories") if (p / "memories").is_dir() else []
    ignored = [f for f in _files_below(p) if any(_under(f, p, d) for d in NOT_DATA)]
    return _Unit(None, p, files=events, memories=memories, ignored=ignored)


def _under(f: Path, root: Path, folder: str) -> bool:
    return f.relative_to(root).parts[:1] == (folder,)


def find_units(directory: str | os.PathLike[str]) -> list[Any]:
    """The experiments, envlogger directories and Minari datasets anywhere below ``directory``.

    The search does not descend into what it found. Returns ``[]`` when there is none (the
    caller then takes the directory as a TensorBoard log or a folder of memory exports).
    """
    root = Path(directory)
    units: list[_Unit] = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if here != root and (fmt := _dataset(here)) is not None:
            units.append(_Unit(fmt, here))
        elif is_experiment_dir(here):
            units.append(_experiment(here))
        else:
            continue
        dirnames[:] = []
    return units


@dataclass
class _Plan:
    """The units found so far, and the files of pooled formats still to make units of."""

    fallback: Format | None
    units: list[_Unit] = field(default_factory=list)
    pooled: dict[str, list[Path]] = field(default_factory=dict)  # group -> files given (file or folder)
    rest: list[str | os.PathLike[str]] = field(default_factory=list)  # the fallback's: files, folders, globs

    def falls_back(self, fmt: Format) -> bool:
        """Whether ``fmt``'s files go to the fallback format (memory exports), expanded by it."""
        return self.fallback is not None and fmt.group == self.fallback.group

    def pool(self, fmt: Format, files: list[Path]) -> None:
        """Files of a pooled format: one unit of each group, made last."""
        if self.falls_back(fmt):
            self.rest.extend(files)
        else:
            have = self.pooled.setdefault(fmt.group, [])
            have.extend(f for f in dict.fromkeys(files) if f not in have)


def _plan(inputs: Sequence[str | os.PathLike[str]]) -> list[_Unit]:
    """The inputs as units, in order; files of a pooled format (memory exports) make one unit last."""
    plan = _Plan(registry.fallback())
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            _plan_directory(plan, item, p)
        elif p.is_file() and (fmt := registry.detect(p)) is not None and fmt.kind == "file":
            if fmt.whole or fmt.single:
                plan.units.append(_Unit(fmt, p, files=[p]))
            elif plan.falls_back(fmt):
                plan.rest.append(item)
            else:
                plan.pool(fmt, [p])
        elif p.is_file() and _named_unsupported(p):  # (an HDF5 file of another layout, ...)
            raise _unsupported([item], FileNotFoundError("no format takes it"))
        else:
            plan.rest.append(item)
    return _pooled_units(plan)


def _plan_directory(plan: _Plan, item: str | os.PathLike[str], p: Path) -> None:
    """A directory given: a dataset, an experiment, a folder of them, or a folder of files."""
    if (fmt := _dataset(p)) is not None:
        plan.units.append(_Unit(fmt, p))
    elif _named_unsupported(p):  # (a LeRobot v2.x dataset, ...: its files are no memory exports)
        raise _unsupported([item], FileNotFoundError("no format takes it"))
    elif is_experiment_dir(p):
        plan.units.append(_experiment(p))
    elif found := find_units(p):
        inside = [u.path for u in found if u.path is not None]
        loose = [f for f in _files_below(p)
                 if _file_format(f) is not None and not any(f.is_relative_to(d) for d in inside)]
        if loose:
            raise InvalidInputError(p, f"holds {len(found)} experiment(s) or dataset(s) and also "
                                    f"{len(loose)} event file(s) or memory export(s) outside them "
                                    f"(e.g. {loose[0]}); convert those on their own")
        plan.units += found
    else:
        _plan_folder_of_files(plan, item, p)


def _plan_folder_of_files(plan: _Plan, item: str | os.PathLike[str], p: Path) -> None:
    """A folder of loose files: a log directory imported whole, else its files by format."""
    by_format: dict[str, list[Path]] = {}
    for f in sorted(_files_below(p)):
        if (ff := _file_format(f)) is not None:
            by_format.setdefault(ff.name, []).append(f)
    whole = next((registry.get(n) for n in registry.FORMATS if n in by_format and registry.get(n).whole),
                 None)
    if whole is not None:  # a log directory: imported whole (what else it holds is not)
        plan.units.append(_Unit(whole, p, files=[f for f in _files_below(p) if whole.detect(f)]))
        return
    others = [registry.get(n) for n in by_format if not plan.falls_back(registry.get(n))]
    for ff in others:
        if ff.single:  # each file a dataset of its own
            plan.units += [_Unit(ff, f, files=[f]) for f in by_format[ff.name]]
        else:
            plan.pool(ff, by_format[ff.name])
    if not others or len(others) < len(by_format):
        plan.rest.append(item)  # the fallback's own search of the folder


def _pooled_units(plan: _Plan) -> list[_Unit]:
    """The plan's units, then one unit per pooled group, then the fallback's files (memory exports)."""
    units = list(plan.units)
    for group, files in plan.pooled.items():
        units.append(_Unit(next(f for f in registry.FORMATS.values() if f.group == group), None, files=files))
    if plan.rest:
        fallback = plan.fallback
        if fallback is None or fallback.expand is None:
            raise _unsupported(plan.rest, FileNotFoundError("no format takes it"))
        try:
            files = fallback.expand(plan.rest)
        except FileNotFoundError as exc:
            raise _unsupported(plan.rest, exc) from None
        units.append(_Unit(fallback, None, files=files))
    return units


def _named_unsupported(path: Path) -> bool:
    """Whether a file no format takes is one :mod:`rlarrow.io.unsupported` names (not "no memory export")."""
    from rlarrow.io.unsupported import describe_unsupported

    return describe_unsupported(path) is not None


def _unsupported(inputs: Sequence[str | os.PathLike[str]], exc: FileNotFoundError) -> Exception:
    """The clearest error for an input no importer takes."""
    from rlarrow.io.unsupported import describe_unsupported

    for item in inputs:
        if Path(item).exists():
            text = describe_unsupported(item)
            if text:  # (the error names the path itself)
                return UnsupportedInputError(item, text.removeprefix(os.fspath(item)).lstrip(": "))
    globs = any(c in os.fspath(i) for i in inputs for c in "*?[")
    if not globs and not all(Path(i).exists() for i in inputs):
        missing = next(i for i in inputs if not Path(i).exists())
        return InvalidInputError(missing, "no such file or directory")
    nouns = list(dict.fromkeys(f.noun or f.summary for f in registry.importers()))
    return UnsupportedInputError(
        ", ".join(os.fspath(i) for i in inputs),
        f"{exc.args[0] if exc.args else exc}; import_paths takes {', '.join(nouns)} and "
        "experiment directories (runs/EXP with memories/ and event files)")


@dataclass
class ImportReport:
    """What :func:`import_paths` did: one line per run made, and per source skipped."""

    store: Path
    runs: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    hashed_bytes: int = 0

    def __str__(self) -> str:
        out = list(self.lines) + [f"skipped {s}" for s in self.skipped]
        out += [f"assumed: {a}" for a in collapse_assumptions(self.assumptions)]
        if not self.runs:
            out.append(f"nothing new to import into {self.store}")
        return "\n".join(out)


def import_paths(
    inputs: Sequence[str | os.PathLike[str]],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    again: bool = False,
    progress: bool | None = None,
    options: Mapping[str, Any] | None = None,
    **legacy: Any,
) -> ImportReport:
    """Import ``inputs`` into ``store``, one run per unit (see the module docs), all or nothing.

    Args:
        inputs: files, directories and globs (what ``rlarrow convert`` takes).
        store: a store, or the path of one (created when missing).
        run_id: the run's id; with one unit only.
        name: the run's name (an experiment's is its directory's name by default).
        again: import sources the store already holds (by content) once more, as new runs.
        progress: progress bars (None: when stderr is a terminal).
        options: each format's own options, by format name or group (``"memory"`` for the
            memory exports): an instance of the format's
            :attr:`~rlarrow.io.registry.Format.options` class, e.g. ``{"memory":
            MemoryOptions(episodes=True), "lerobot": LeRobotOptions(video="keep")}``. A format
            not named takes its defaults.
        legacy: the keyword arguments of rlarrow 0.2, still taken (deprecated), each turned
            into the options of the formats it applies to (as
            :meth:`~rlarrow.io.registry.ImportOptions.format_options` does), under what
            ``options`` names: ``episodes``, ``names``, ``autoreset``, ``max_episode_steps``,
            ``num_envs``, ``memory_size``, ``dtype``, ``layout`` (memory exports,
            :class:`~rlarrow.io.memory.memory_options.MemoryOptions`), ``skip_corrupt`` (event
            files, envlogger), ``images`` (RLDS), ``video`` (LeRobot), ``hdf5_links`` (HDF5
            files, Minari).

    Raises:
        InvalidInputError, UnsupportedInputError, CorruptFileError, StoreError: what stopped
            the import; nothing of it was committed.
        ArgumentError: no inputs, an option out of range or of another format, an unknown
            keyword argument (a bare path is one input).

    Example:
        >>> from rlarrow.io.memory.memory_options import MemoryOptions
        >>> import_paths(["runs/"], "project.rlarrow",
        ...              options={"memory": MemoryOptions(episodes=True)})  # doctest: +SKIP
    """
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not inputs:
        raise ArgumentError("inputs: give the files, directories or globs to import")
    chosen = _format_options(options, legacy)
    units = _plan(inputs)
    _check_options_apply(chosen, units, inputs)
    if run_id is not None and len(units) > 1:
        raise InvalidInputError(", ".join(os.fspath(i) for i in inputs),
                                f"make {len(units)} runs ({', '.join(u.label for u in units[:3])}...); "
                                "run_id names one run: convert them one at a time")
    # a store this convert creates is removed again if it fails: no empty store is left behind
    made = None if isinstance(store, Store) or os.path.lexists(store) else _missing_dirs(Path(store))
    try:
        st = as_store(store, create=True)
    except BaseException:
        _remove_new_store(made)
        raise
    own = st is not store
    report = ImportReport(store=st.path)
    call = ImportRun(run_id=run_id, name=name, progress=progress)
    try:
        known = _known_sources(st)
        # a memory export's checksums are checked in the pass that hashes it, and not read again
        with crc_record():
            hashes = _hash_sources(units, progress)
            report.hashed_bytes = sum(size for _, size in hashes.values())
            now = datetime.now(UTC)
            seen_now: dict[str, str] = {}
            with st.transaction():
                for u in units:
                    todo = _new_sources(u, hashes, known, seen_now, again, report)
                    for p, _ in u.sources():
                        if todo is None or p not in todo:
                            take_kept(p)  # (skipped: the map its hash kept is let go)
                    if todo is None:
                        continue
                    rid = _import_unit(st, u, todo, call, chosen, report=report, hashes=hashes, now=now)
                    report.runs.append(rid)
                    for p in todo:
                        seen_now[hashes[p][0]] = rid
    except BaseException:
        if own:
            st.close()
            own = False
        _remove_new_store(made)
        raise
    finally:
        if own:
            st.close()
    return report


def _format_options(options: Mapping[str, Any] | None, legacy: Mapping[str, Any]) -> dict[str, Any]:
    """The options of each format (group) given, checked: ``options``' over those the old arguments make."""
    chosen: dict[str, Any] = {}
    if legacy:
        known = [f.name for f in fields(ImportOptions) if f.name not in ("run_id", "name", "existing_run",
                                                                           "progress")]
        unknown = sorted(set(legacy) - set(known))
        if unknown:
            raise ArgumentError(f"import_paths() got an unknown keyword argument {unknown[0]!r}; it takes "
                                f"options={{format: options}} and the keywords {', '.join(known)}")
        bag = ImportOptions(**legacy)
        for fmt in registry.importers():
            if fmt.group not in chosen and fmt.options_type() is not None:
                chosen[fmt.group] = bag.format_options(fmt)
    for key, value in (options or {}).items():
        target = next((f for f in registry.importers() if key in (f.name, f.group)), None)
        if target is None:
            raise ArgumentError(f"options[{key!r}]: no format or group of that name imports; known: "
                                f"{', '.join(dict.fromkeys(f.group for f in registry.importers()))}")
        cls = target.options_type()
        if cls is None or not isinstance(value, cls):
            takes = "no options" if cls is None else f"a {cls.__name__}"
            raise ArgumentError(f"options[{key!r}]={value!r}: the {key} format takes {takes}")
        chosen[key] = value
    return chosen


def _check_options_apply(chosen: Mapping[str, Any], units: Sequence[_Unit],
                         inputs: Sequence[str | os.PathLike[str]]) -> None:
    """A dataset's option (an options class's ``only_with_inputs`` fields) set where no input is one."""
    given = {n for u in units if u.fmt is not None for n in (u.fmt.name, u.fmt.group)}
    for key, value in chosen.items():
        if key in given:
            continue
        default = type(value)()
        for option in getattr(value, "only_with_inputs", ()):
            if getattr(value, option) != getattr(default, option):
                raise InvalidInputError(", ".join(os.fspath(i) for i in inputs),
                                        f"{option}={getattr(value, option)!r} applies to {key} datasets, and "
                                        "none of the inputs is one: leave it out")


def _hash_sources(units: Sequence[_Unit], progress: bool | None) -> dict[Path, tuple[str, int]]:
    """Each unit's sources' SHA-256 and size; a ``.pt``/``.npz`` export's CRC-32s checked in the same pass."""
    from rlarrow.core.progress import bar

    hashes: dict[Path, tuple[str, int]] = {}
    total = sum(_size(p) for u in units for p, _ in u.sources())
    with bar(total, "hashing", "B", progress) as pbar:
        for u in units:
            for p, _ in u.sources():
                hashes[p] = content_hash(p)
                pbar.update(hashes[p][1])
    return hashes


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist, deepest first."""
    return [p for p in (path, *path.parents) if not os.path.lexists(p)][:len(path.parts)]


def _remove_new_store(made: list[Path] | None) -> None:
    """Remove the store a failed convert created (``made``: it and the folders made for it)."""
    if not made:
        return
    import shutil

    shutil.rmtree(made[0], ignore_errors=True)
    for p in made[1:]:
        try:
            p.rmdir()
        except OSError:
            break


def _size(p: Path) -> int:
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in _files_below(p))


def _known_sources(st: Store) -> dict[str, tuple[str, str, str]]:
    if st.row_count("sources") == 0:
        return {}
    t = st.read("sources", columns=["sha256", "run_id", "path", "imported_at"])
    out: dict[str, tuple[str, str, str]] = {}
    for sha, rid, path, at in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True):
        out.setdefault(sha, (rid, path, at.strftime("%Y-%m-%d %H:%M UTC")))
    return out


def _new_sources(u: _Unit, hashes: dict[Path, tuple[str, int]], known: dict[str, tuple[str, str, str]],
                 seen_now: dict[str, str], again: bool, report: ImportReport) -> list[Path] | None:
    """The unit's sources to import; None to skip the unit (said in the report)."""
    sources = [p for p, _ in u.sources()]
    if again or not sources:
        return sources

    def before(p: Path) -> str | None:
        sha = hashes[p][0]
        if sha in known:
            rid, path, at = known[sha]
            return f"run {rid} (from {path}, {at})"
        if sha in seen_now:
            return f"run {seen_now[sha]} (earlier in this convert)"
        return None

    seen = {p: before(p) for p in sources}
    if u.pooled:  # snapshots: each file on its own
        for p, where in seen.items():
            if where:
                report.skipped.append(f"{p}: imported before into {where}; again=True imports it again")
        todo = [p for p, where in seen.items() if not where]
        return todo or None
    old = [p for p, where in seen.items() if where]
    if not old:
        return sources
    if len(old) == len(sources):
        report.skipped.append(f"{u.label}: imported before into {seen[old[0]]}; again=True imports it again")
        return None
    raise InvalidInputError(u.label, f"{len(old)} of its {len(sources)} files were imported before (e.g. "
                            f"{old[0]} into {seen[old[0]]}) and the others not: the source changed since. "
                            "Import it as a new run with again=True, or convert the new files on their own")


def _import_unit(st: Store, u: _Unit, todo: list[Path], call: ImportRun, chosen: Mapping[str, Any], *,
                 report: ImportReport, hashes: dict[Path, tuple[str, int]], now: datetime) -> str:
    snapshot_of: dict[Path, int] = {}
    if u.fmt is not None:  # one format: its own import, through the registry
        assert u.fmt.import_ is not None
        if u.pooled:
            sources = todo
        else:
            assert u.path is not None
            sources = [u.path]
        imported = u.fmt.import_(sources, st, _call_for(call, u.fmt, chosen))
        rid = imported.run_id
        snapshot_of = imported.snapshot_ids
        report.lines += imported.lines
    else:  # experiment: one run of all of it
        assert u.path is not None
        rid = call.run_id or new_run_id()
        events = [p for p in todo if p in u.files]
        memories = [p for p in todo if p in u.memories]
        rel = [os.fspath(p.relative_to(u.path)) for p in events + memories]
        st.add_run(source="experiment", run_id=rid, name=call.name or u.path.name,
                   source_path=u.path.resolve(),
                   metadata={"experiment": u.path.name, "files": rel,
                             "not_imported": [os.fspath(p.relative_to(u.path)) for p in u.ignored]})
        into_run = replace(call, run_id=rid, name=None)
        parts = []
        if events:
            tf = _import_group(_EVENTS, [u.path], st, replace(into_run, existing_run=True), chosen)
            parts.append(tf.summary)
        if memories:
            # (the memory import collects its files' assumptions into its report itself)
            mem = _import_group(_MEMORY, memories, st, into_run, chosen)
            report.assumptions += mem.assumptions
            snapshot_of = mem.snapshot_ids
            parts.append(mem.summary)
        what = "; ".join(parts) or "no data files"
        report.lines.append(f"run {rid}  {call.name or u.path.name} (experiment {u.path}): {what}"
                            + (f"; {len(u.ignored)} checkpoint file(s) not imported" if u.ignored else ""))
    rows = [(rid, snapshot_of.get(p), fmt, os.fspath(p.resolve()), *hashes[p])
            for p, fmt in u.sources() if p in todo]
    if rows:
        st.append("sources", {
            "run_id": [r[0] for r in rows], "snapshot_id": [r[1] for r in rows],
            "format": [r[2] for r in rows], "path": [r[3] for r in rows],
            "sha256": [r[4] for r in rows], "bytes": [r[5] for r in rows],
            "imported_at": [now] * len(rows)})
    return rid


def _import_group(group: str, sources: Sequence[Path], st: Store, call: ImportRun,
                  chosen: Mapping[str, Any]) -> registry.Imported:
    """``sources`` imported by the format (group) ``group`` that imports, as the registry has it."""
    fmt = next((f for f in registry.importers() if f.group == group), None)
    if fmt is None or fmt.import_ is None:
        raise InvalidInputError(None, f"no importer of {group} is registered")
    return fmt.import_(sources, st, _call_for(call, fmt, chosen))


def _call_for(call: ImportRun, fmt: Format, chosen: Mapping[str, Any]) -> ImportRun:
    """``call`` with ``fmt``'s own options: those chosen for its name, else for its group (else None)."""
    return replace(call, options=chosen.get(fmt.name, chosen.get(fmt.group)))
