"""envlogger directories read: :func:`read_envlogger` (an episode source) and :func:`import_envlogger`.

What is read and checked, and why envlogger 1.2: the package's docs (:mod:`rlarrow.io.envlogger`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core import alignment
from rlarrow.core import schema as _schema
from rlarrow.core import specs as _specs
from rlarrow.core.deps import require
from rlarrow.core.episodes import Sink
from rlarrow.core.errors import (
    CorruptFileError,
    MissingDependencyError,
    RLArrowError,
    RLArrowWarning,
    UnsupportedInputError,
)
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.sources import EpisodeChunk, EpisodeSource, RunInfo
from rlarrow.core.step_columns import flat_value
from rlarrow.core.store import StoreLike
from rlarrow.io.envlogger.riegeli_counts import dist_version as _dist_version
from rlarrow.io.envlogger.riegeli_counts import riegeli_record_count

__all__ = ["EnvloggerOptions", "EnvloggerReport", "import_envlogger", "is_envlogger_dir", "load",
           "read_envlogger"]

_STEPS_PER_CHUNK = 50_000
#: a chunk of no steps (one that only counts progress)
_NO_STEPS = _schema.table("steps").arrow_schema().empty_table()


def load() -> Any:
    """The ``envlogger`` module (NumPy 2's missing ``np.unicode_`` aliased first)."""
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_  # type: ignore[attr-defined]
    try:
        return require("envlogger", feature="reading and writing envlogger directories")
    except ImportError as exc:
        if "GLIBC" in str(exc):
            raise MissingDependencyError(
                f"{exc}; envlogger 1.3's wheel needs glibc 2.38: install envlogger 1.2 "
                "(pip install 'envlogger<1.3')", name="envlogger"
            ) from exc
        raise


def is_envlogger_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an envlogger riegeli directory (it has ``metadata.riegeli``)."""
    return (Path(path) / "metadata.riegeli").is_file()


#: what :func:`import_envlogger` wrote, and what it left out as damaged (``skip_corrupt=True``):
#: the one import report, :class:`rlarrow.core.ingest.IngestReport`
EnvloggerReport = IngestReport


def import_envlogger(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
    skip_corrupt: bool = False,
) -> EnvloggerReport:
    """Import an envlogger directory into ``store`` as one run (see the module docs).

    envlogger's reader stops quietly at the first damaged record of an index file, and
    returns no metadata for an episode whose record it cannot read. So what it returns is
    checked, shard by shard, against the files: every step the step files hold must be in
    an episode of the episode index, the episodes must follow one another without gaps,
    each must begin with its only FIRST step, and every episode-metadata record must have
    been read. A directory that fails a check is damaged (or was left by a logger killed
    before ``close()``).

    Args:
        directory: the envlogger directory (holding ``metadata.riegeli``).
        store: a store, or the path of one (created when missing).
        run_id: the new run's id (default: a new one).
        name: the run's name.
        progress: a progress bar over the episodes (None: when stderr is a terminal).
        skip_corrupt: import the episodes that are whole and leave out the rest, with a
            :class:`~rlarrow.core.errors.RLArrowWarning` and the list in the report, instead of
            raising. Episode ids stay envlogger's episode indices, so a skipped episode
            leaves a gap.

    Returns:
        An :class:`~rlarrow.core.ingest.IngestReport` (``EnvloggerReport``), whose
        ``skipped``, ``skipped_episodes``, ``skipped_steps`` and ``damaged_files`` list what
        ``skip_corrupt`` left out.

    Raises:
        UnsupportedInputError: not an envlogger directory.
        CorruptFileError: the files are damaged or cut short (without ``skip_corrupt``),
            or nothing of them can be read (the run metadata, or a single shard that
            envlogger cannot open). Checks that need no step data run before anything is
            written; a damaged step found later stops the import, and what was committed
            before it (every ``50,000`` steps) is kept.
        MissingDependencyError: envlogger is not installed.
    """
    with read_envlogger(directory, run_id=run_id, skip_corrupt=skip_corrupt) as source:
        report = ingest(store, source, name=name, progress=progress)
        found: _Findings = source.findings  # type: ignore[attr-defined]
    report.skipped += found.skipped
    report.skipped_episodes = found.skipped_episodes
    report.damaged_files += found.damaged_files
    report.skipped_steps = found.total_steps - report.steps
    if report.skipped:
        warnings.warn(RLArrowWarning(
            f"{directory}: imported what is whole ({report.episodes} episodes, {report.steps} steps) and "
            f"skipped {report.skipped_episodes} damaged episodes, {report.skipped_steps} steps "
            f"({len(report.damaged_files)} damaged file(s)): "
            + "; ".join(report.skipped[:5]) + (" ..." if len(report.skipped) > 5 else "")
            + " (the report lists them all)"), stacklevel=2)
    return report


@dataclass
class _Findings:
    """What a read of an envlogger directory left out as damaged (``skip_corrupt``), and its steps."""

    skipped: list[str] = field(default_factory=list)
    skipped_episodes: int = 0
    damaged_files: list[str] = field(default_factory=list)
    total_steps: int = 0


def read_envlogger(directory: str | os.PathLike[str], *, run_id: str | None = None,
                   skip_corrupt: bool = False) -> EpisodeSource:
    """An envlogger directory as an episode source, without a store (see :func:`import_envlogger`).

    The directory is checked against envlogger's reader before anything is returned; the
    steps are read as the source is iterated, in chunks of up to 50,000 steps (whole
    episodes, RLDS-aligned). With ``skip_corrupt``, ``source.findings`` lists what was
    left out once the source has been read.

    Args:
        directory: the envlogger directory (holding ``metadata.riegeli``).
        run_id: the run id its rows carry (None: a new one).
        skip_corrupt: leave out the damaged episodes (listed in ``source.findings``) instead
            of raising at the first damaged record.

    Example:
        >>> import polars as pl  # doctest: +SKIP
        >>> steps = pl.from_arrow(read_envlogger("catch_logs").steps())  # doctest: +SKIP
    """
    directory = Path(directory)
    if not is_envlogger_dir(directory):
        raise UnsupportedInputError(directory, "not an envlogger directory (no metadata.riegeli)")
    envlogger = load()
    stack = contextlib.ExitStack()
    try:
        with _as_damage(directory):
            shards = _shard_dirs(directory)
            views = _views(directory, shards, stack)
            meta_dir = directory if len(views) == 1 else _metadata_view(directory, stack)
            reader = stack.enter_context(_open(envlogger, meta_dir, directory))
            plans: list[_ShardPlan] = []
            for shard, view in views:
                plans.append(_plan(envlogger, reader if view == meta_dir else None, shard, view, directory,
                                   base=sum(p.num_episodes for p in plans)))
            found = [line for plan in plans for line in plan.problems]
            if found and not skip_corrupt:
                raise CorruptFileError(directory, _damage_message(found))
            # envlogger decodes dicts from protobuf maps, in an order that changes from process
            # to process: dict specs are sorted (or take the store's order, declare_steps)
            obs_spec = _specs.sorted_spec(reader.observation_spec())
            action_spec = _specs.sorted_spec(reader.action_spec())
            env_specs = {
                "observation_spec": _specs.to_dict(obs_spec),
                "action_spec": _specs.to_dict(action_spec),
                "reward_spec": _specs.to_dict(_specs.sorted_spec(reader.reward_spec())),
                "discount_spec": _specs.to_dict(_specs.sorted_spec(reader.discount_spec())),
            }
            version = getattr(envlogger, "__version__", None) or _dist_version("envlogger")
            run_meta = reader.metadata()
    except BaseException:
        stack.close()
        raise
    findings = _Findings(total_steps=sum(p.total_steps for p in plans))
    for plan in plans:
        findings.skipped += plan.problems
        findings.skipped_episodes += plan.skipped_episodes
        findings.damaged_files += [f for f in plan.damaged_files if f not in findings.damaged_files]
    types = {"observation": _specs.tensor_type(obs_spec), "action": _specs.tensor_type(action_spec)}
    plain = not isinstance(action_spec, (dict, list, tuple))

    def chunks(run: str) -> Iterator[EpisodeChunk]:
        out: list[dict[str, Any]] = []
        sink = Sink(None, run, own_store=False, action_dtype=action_spec.dtype if plain else None,
                    flush_every_steps=_STEPS_PER_CHUNK, flush_every_seconds=None, background=False,
                    types=types, emit=out.append)
        add = _Adder(sink, obs_spec, action_spec if not plain else None)
        with _as_damage(directory):
            for plan, (_shard, view) in zip(plans, views, strict=True):
                if not plan.episodes:
                    continue
                shard_reader = reader if view == meta_dir else stack.enter_context(
                    _open(envlogger, view, directory))
                for done in _read_shard(shard_reader, plan, add, findings, run, skip_corrupt=skip_corrupt):
                    yield from _chunks_of(out, done)
            sink.close()
        yield from _chunks_of(out, 0)

    info = RunInfo(source="envlogger", source_path=os.fspath(directory), alignment="dm_env", num_envs=1,
                   source_version=f"envlogger {version}", metadata=run_meta, env_specs=env_specs)
    source = EpisodeSource(info, types, chunks, run_id=run_id, episodes=sum(len(p.episodes) for p in plans),
                           close=stack.close, recipe=(read_envlogger, (os.path.abspath(directory),),
                                                      {"skip_corrupt": skip_corrupt}))
    source.findings = findings  # type: ignore[attr-defined]
    return source


def _chunks_of(out: list[dict[str, Any]], done: int) -> Iterator[EpisodeChunk]:
    """The sink's commits so far as chunks, the last counting ``done`` episodes read (progress)."""
    if not out and done:
        yield EpisodeChunk(_NO_STEPS, None, count=done)
    while out:
        data = out.pop(0)
        episodes = data.get("episodes")
        yield EpisodeChunk(data.get("steps", _NO_STEPS),
                           None if episodes is None else _schema.build("episodes", episodes),
                           count=0 if out else done)


@contextlib.contextmanager
def _as_damage(directory: Path) -> Iterator[None]:
    """Envlogger's reader's failures as :class:`CorruptFileError` naming the directory."""
    try:
        yield
    except RLArrowError:
        raise
    except (RuntimeError, ValueError, TypeError, OSError, EOFError, IndexError, KeyError) as exc:
        # envlogger's riegeli reader reports damage as RuntimeError("INTERNAL: ..."), and the
        # records it decodes fail in their own ways (a missing step is a TypeError in it)
        raise CorruptFileError(directory, f"envlogger's reader failed on this directory "
                               f"({type(exc).__name__}: {exc}); nothing of it was imported") from exc


# ------------------------------------------------------------ checking what envlogger returns


class _NotWhole(Exception):
    """An episode that cannot be imported whole (the message says why)."""


@dataclass
class _EpisodePlan:
    """One episode of a shard as envlogger's index gives it."""

    local: int  # envlogger's index of it within its shard (its reader)
    episode_id: int  # its index in the whole directory
    num_steps: int
    metadata: Any


@dataclass
class _ShardPlan:
    """What of one shard is imported, and what is not whole (the structural checks' findings)."""

    directory: Path  # the envlogger directory
    where: str  # ", shard <name>" when the directory has several, else ""
    num_episodes: int = 0  # in envlogger's episode index
    episodes: list[_EpisodePlan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped_episodes: int = 0
    damaged_files: list[str] = field(default_factory=list)  # relative to the directory
    shard: str = ""  # the shard folder's name
    total_steps: int = 0  # steps the shard's files hold (or envlogger finds, if more)
    last_must_end: bool = False  # step offsets are missing: the last episode is whole only if it ends
    metadata_lost: bool = False  # metadata records were not read: an episode without any is not whole


def _plan(envlogger: Any, reader: Any, shard: Path | None, view: Path, directory: Path, *,
          base: int) -> _ShardPlan:
    """Check a shard's episode index and counts against its files (no step is decoded).

    ``reader`` reads the shard (None: open one over ``view``); ``base`` is the directory-wide
    index of the shard's first episode.
    """
    many = shard is not None and view != directory
    plan = _ShardPlan(directory, where=f", shard {shard.name}" if many and shard is not None else "",
                      shard=shard.name if shard is not None else "")
    with contextlib.ExitStack() as stack:
        if reader is None:
            try:
                reader = stack.enter_context(_open(envlogger, view, directory))
            except CorruptFileError as exc:
                name = shard.name if shard else view.name
                plan.problems.append(f"shard {name}: envlogger cannot open it ({exc})")
                plan.damaged_files.append(f"{name}/")
                if shard is not None:  # what it held, as far as its files tell: lost, and counted
                    plan.num_episodes = plan.skipped_episodes = \
                        _records_or_none(shard / "episode_metadata.riegeli", plan) or 0
                    plan.total_steps = _records_or_none(shard / "steps.riegeli", plan) or 0
                return plan
        n_steps, n_episodes = len(reader.steps), len(reader.episodes)
        plan.num_episodes = n_episodes
        if shard is None:
            return plan
        step_records = _records_or_none(shard / "steps.riegeli", plan)
        meta_records = _records_or_none(shard / "episode_metadata.riegeli", plan)
        plan.total_steps = max(n_steps, step_records or 0)
        if meta_records is not None and meta_records > n_episodes:
            # episodes the index lost (one metadata record each): skipped, and the ids of the
            # shards after this one stay what they are in the whole directory
            lost = meta_records - n_episodes
            plan.num_episodes = meta_records
            plan.skipped_episodes += lost
            plan.problems.append(f"{lost} episode(s){plan.where} (ids {base + n_episodes} to "
                                 f"{base + meta_records - 1}): episode_metadata.riegeli holds "
                                 f"{meta_records} episodes, the episode index reaches {n_episodes}")
            _damaged(plan, shard, "episode_index.riegeli")
        if step_records is None or step_records > n_steps:
            missing = "an unknown number of" if step_records is None else str(step_records - n_steps)
            plan.problems.append(f"{missing} steps{plan.where}: steps.riegeli holds steps that "
                                 "step_offsets.riegeli does not reach (damaged, or a logger killed before "
                                 "close())")
            plan.last_must_end = True
            _damaged(plan, shard, "step_offsets.riegeli" if step_records is not None else "steps.riegeli")
        elif step_records < n_steps:
            plan.problems.append(f"shard{plan.where or ' ' + shard.name}: step_offsets.riegeli lists "
                                 f"{n_steps} steps, steps.riegeli holds {step_records}")
            _damaged(plan, shard, "steps.riegeli")
        metadata = list(reader.episode_metadata())
        read = sum(m is not None for m in metadata)
        if meta_records is None or read < min(meta_records, n_episodes):  # (the index's lost: counted above)
            plan.metadata_lost = True
            plan.problems.append(f"episode metadata{plan.where}: episode_metadata.riegeli holds "
                                 f"{'some' if meta_records is None else meta_records} records, envlogger "
                                 f"read {read} (an episode without metadata is not imported)")
            _damaged(plan, shard, "episode_metadata.riegeli")
        expected = 0
        for k in range(n_episodes):
            try:
                start, length = _span(reader, k)
            except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
                start, length = -1, 0
                reason = f"envlogger cannot place it ({exc})"
            else:
                reason = ""
            if not reason and start != expected:
                reason = (f"the episode index puts it at step {start}, after the previous episode ends at "
                          f"{expected}")
            if not reason and not 0 < length <= n_steps - start:
                reason = (f"the episode index gives it {length} steps from step {start}, and the step "
                          f"offsets reach {n_steps} steps")
            if reason:
                plan.problems.append(f"episode {base + k}{plan.where}: {reason}")
                plan.skipped_episodes += 1
                _damaged(plan, shard, "episode_index.riegeli")
                expected = max(expected, start + max(length, 0))
                continue
            if plan.metadata_lost and metadata[k] is None:
                plan.problems.append(f"episode {base + k} ({length} steps{plan.where}): its metadata was "
                                     "not read")
                plan.skipped_episodes += 1
            else:
                plan.episodes.append(_EpisodePlan(k, base + k, length, metadata[k]))
            expected = start + length
        if expected < n_steps:
            plan.problems.append(f"{n_steps - expected} steps{plan.where} (from step {expected}): in no "
                                 "episode of the episode index (episode_index.riegeli damaged)")
            _damaged(plan, shard, "episode_index.riegeli")
    return plan


def _damaged(plan: _ShardPlan, shard: Path, name: str) -> None:
    """Note ``shard/name`` as a damaged file of the plan (once)."""
    where = os.path.relpath(shard / name, plan.directory)
    if where not in plan.damaged_files:
        plan.damaged_files.append(where)


def _episode(reader: Any, ep: _EpisodePlan, plan: _ShardPlan, *,
             last: bool) -> tuple[list[Any], dict[str, Any]]:
    """The steps of one episode and their RLDS columns, or :class:`_NotWhole`."""
    try:
        steps = list(reader.episodes[ep.local])
        if len(steps) != ep.num_steps:
            raise _NotWhole(f"envlogger returned {len(steps)} of its {ep.num_steps} steps")
        # checks the dm_env order (FIRST first and only there, no action on it)
        rlds = alignment.dm_env_to_rlds(
            step_type=[int(s.timestep.step_type) for s in steps],
            action=[s.action for s in steps],
            reward=[s.timestep.reward for s in steps],
            discount=[s.timestep.discount for s in steps],
        )
    except _NotWhole:
        raise
    except ValueError as exc:
        raise _NotWhole(f"its steps do not form one episode ({exc}): the episode index is damaged") from None
    except (RuntimeError, TypeError, IndexError, KeyError, AttributeError, EOFError, OSError) as exc:
        raise _NotWhole(f"envlogger cannot read its steps ({type(exc).__name__}: {exc})") from None
    if last and plan.last_must_end and not rlds["is_last"][-1]:
        raise _NotWhole("it has no LAST step and steps after it are missing, so it may be cut short")
    return steps, rlds


def _read_shard(reader: Any, plan: _ShardPlan, add: _Adder, findings: _Findings, run: str, *,
                skip_corrupt: bool) -> Iterator[int]:
    """Add the planned episodes of one shard that are whole; the others raise, or are skipped.

    Yields after each episode read (1), or skipped (0): the sink may have chunks to hand on.
    """
    for k, ep_plan in enumerate(plan.episodes):
        try:
            steps, rlds = _episode(reader, ep_plan, plan, last=k == len(plan.episodes) - 1)
        except _NotWhole as exc:
            line = f"episode {ep_plan.episode_id} ({ep_plan.num_steps} steps{plan.where}): {exc}"
            if not skip_corrupt:
                raise CorruptFileError(plan.directory, _damage_message([line], run=run)) from None
            findings.skipped.append(line)
            findings.skipped_episodes += 1
            where = f"{plan.shard}/steps.riegeli" if plan.shard else "steps.riegeli"
            if where not in findings.damaged_files:
                findings.damaged_files.append(where)
            # a riegeli reader stays failed after a damaged chunk: go on with a fresh one
            reader = reader.copy()
            yield 1
            continue
        add(steps, rlds, ep_plan)
        yield 1


class _Adder:
    """Adds whole episodes (envlogger's dm_env order) to a sink's lane in RLDS alignment."""

    def __init__(self, sink: Sink, obs_spec: Any, nested_action_spec: Any) -> None:
        self.sink, self.lane = sink, sink.lanes[0]
        self.obs_spec, self.action_spec = obs_spec, nested_action_spec

    def __call__(self, steps: list[Any], rlds: dict[str, Any], plan: _EpisodePlan) -> None:
        sink, lane = self.sink, self.lane
        obs = [flat_value(s.timestep.observation, self.obs_spec) for s in steps]
        if self.action_spec is None:
            actions = [s.action for s in steps[1:]]
        else:
            actions = [flat_value(s.action, self.action_spec) for s in steps[1:]]
        lane.obs += obs
        sink.next_episode = plan.episode_id  # envlogger's episode index: a skipped one leaves a gap
        ep = sink.new_episode()
        lane.begin(ep, lane.rows - len(obs))
        lane.action += actions
        lane.reward += [s.timestep.reward for s in steps[1:]]
        lane.discount += [s.timestep.discount for s in steps[1:]]
        lane.custom += [s.custom_data for s in steps]
        if rlds["is_last"][-1]:
            lane.end(bool(rlds["is_terminal"][-1]))
        else:
            lane.cut()
        ep.meta = plan.metadata
        ep.first_reward, ep.first_discount = rlds["first_reward"], rlds["first_discount"]
        sink.unflushed += len(steps)
        if sink.due():
            sink.flush()


def _span(reader: Any, k: int) -> tuple[int, int]:
    """(first step, number of steps) of episode ``k`` as envlogger's index gives them.

    envlogger's public ``Reader`` gives an episode's steps but not where it starts; its
    backend's ``_get_nth_episode_info`` (what ``Reader.episodes`` itself uses) does.
    """
    info = reader._backend._get_nth_episode_info(k)
    return int(info.start), int(info.num_steps)


def _records_or_none(path: Path, plan: _ShardPlan) -> int | None:
    """How many records a riegeli file holds, or None (and a problem noted) if it cannot be told."""
    if not path.is_file():
        return 0
    try:
        return riegeli_record_count(path)
    except CorruptFileError as exc:
        plan.problems.append(str(exc))
        return None


def _damage_message(found: list[str], *, run: str | None = None) -> str:
    """Why a directory is refused, and what to do about it."""
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    if run is None:
        return (f"damaged or cut short: what envlogger reads disagrees with the files ({shown}). Nothing "
                "was imported; import again with skip_corrupt=True to "
                "import the episodes that are whole, or restore the directory from a copy")
    return (f"damaged: {shown}. Nothing was imported (run {run} is not in the store); import again with "
            "skip_corrupt=True to import every episode that is whole")


# ------------------------------------------------------------ shards


def _shard_dirs(directory: Path) -> list[Path]:
    """The shard folders envlogger reads, in its order (those holding step_offsets.riegeli)."""
    return sorted((p for p in directory.iterdir() if p.is_dir() and (p / "step_offsets.riegeli").is_file()),
                  key=lambda p: os.fsencode(p.name))


def _views(directory: Path, shards: list[Path],
           stack: contextlib.ExitStack) -> list[tuple[Path | None, Path]]:
    """(shard, directory envlogger opens for it): the directory itself when it has one shard.

    With several, each shard is read on its own (a temporary directory of links to it and
    to ``metadata.riegeli``), so that what envlogger returns can be checked shard by shard.
    """
    if len(shards) <= 1:
        return [(shards[0] if shards else None, directory)]
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlarrow-envlogger-")))
    out: list[tuple[Path | None, Path]] = []
    for i, shard in enumerate(shards):
        view = root / str(i)
        view.mkdir()
        (view / "metadata.riegeli").symlink_to((directory / "metadata.riegeli").resolve())
        (view / shard.name).symlink_to(shard.resolve(), target_is_directory=True)
        out.append((shard, view))
    return out


def _metadata_view(directory: Path, stack: contextlib.ExitStack) -> Path:
    """A directory with only ``metadata.riegeli`` (the run metadata and specs, no shard)."""
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlarrow-envlogger-")))
    (root / "metadata.riegeli").symlink_to((directory / "metadata.riegeli").resolve())
    return root


@contextlib.contextmanager
def _open(envlogger: Any, view: Path, directory: Path) -> Iterator[Any]:
    """An envlogger Reader over ``view``; its failures as :class:`CorruptFileError` on ``directory``."""
    try:
        reader = envlogger.Reader(data_directory=os.fspath(view))
    except (RuntimeError, ValueError, TypeError, OSError, EOFError, IndexError, KeyError) as exc:
        raise CorruptFileError(directory, f"envlogger cannot open it ({type(exc).__name__}: {exc}); the "
                               "directory is damaged") from exc
    try:
        yield reader
    finally:
        reader.close()


@dataclass(frozen=True)
class EnvloggerOptions:
    """How an envlogger directory is read or imported (:func:`read_envlogger`, :func:`import_envlogger`).

    Attributes:
        skip_corrupt: import the episodes that are whole and list the damaged ones skipped,
            instead of stopping at the first damaged record.

    Example:
        >>> EnvloggerOptions(skip_corrupt=True).skip_corrupt
        True
    """

    skip_corrupt: bool = False
