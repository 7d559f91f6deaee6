"""envlogger (riegeli) directories in and out of a store, through envlogger's own code.

Reading and writing riegeli needs envlogger itself (the ``envlogger`` extra). Supported:
envlogger 1.2, the version whose wheel loads on glibc < 2.38 (1.3's needs 2.38). envlogger
1.2 uses ``np.unicode_``, which NumPy 2 removed: :func:`load` sets that alias (to
``np.str_``) before importing it.

* :func:`import_envlogger`: every episode (all shards), observations of any nesting, the
  per-step ``custom_data``, the episode metadata, the run metadata and the specs. Steps
  go from envlogger's dm_env order to the store's RLDS alignment (``docs/format.md``).
* :func:`export_envlogger`: a run back into a directory envlogger's ``Reader`` reads
  as it read the original: the same steps, metadata and episode metadata.

Example:
    >>> from rlarrow.io.envlogger import export_envlogger, import_envlogger  # doctest: +SKIP
    >>> report = import_envlogger("catch_logs", "runs.rlarrow")  # doctest: +SKIP
    >>> export_envlogger("runs.rlarrow", "catch_again", run_id=report.run_id)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow import alignment
from rlarrow import specs as _specs
from rlarrow._columns import flat_value
from rlarrow._deps import require
from rlarrow._episodes import Sink
from rlarrow.errors import CorruptFileError, RLArrowError, UnsupportedInputError
from rlarrow.io import EpisodesReport
from rlarrow.store import Store

__all__ = ["export_envlogger", "import_envlogger", "is_envlogger_dir", "load"]

_STEPS_PER_COMMIT = 50_000


def load() -> Any:
    """The ``envlogger`` module (NumPy 2's missing ``np.unicode_`` aliased first)."""
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_  # type: ignore[attr-defined]
    try:
        return require("envlogger", feature="reading and writing envlogger directories")
    except ImportError as exc:
        if "GLIBC" in str(exc):
            raise ImportError(
                f"{exc}; envlogger 1.3's wheel needs glibc 2.38: install envlogger 1.2 "
                "(pip install 'envlogger<1.3')"
            ) from exc
        raise


def is_envlogger_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an envlogger riegeli directory (it has ``metadata.riegeli``)."""
    return (Path(path) / "metadata.riegeli").is_file()


def import_envlogger(
    directory: str | os.PathLike[str],
    store: Store | str | os.PathLike[str],
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
) -> EpisodesReport:
    """Import an envlogger directory into ``store`` as one run (see the module docs).

    Raises:
        UnsupportedInputError: not an envlogger directory.
        CorruptFileError: envlogger's reader fails on the files (damaged or truncated).
        MissingDependencyError: envlogger is not installed.
    """
    from rlarrow._progress import bar

    directory = Path(directory)
    if not is_envlogger_dir(directory):
        raise UnsupportedInputError(directory, "not an envlogger directory (no metadata.riegeli)")
    envlogger = load()
    own = not isinstance(store, Store)
    st = Store.open(store, create=True) if not isinstance(store, Store) else store
    try:
        with envlogger.Reader(data_directory=os.fspath(directory)) as reader:
            obs_spec, action_spec = reader.observation_spec(), reader.action_spec()
            env_specs = {
                "observation_spec": _specs.to_dict(obs_spec),
                "action_spec": _specs.to_dict(action_spec),
                "reward_spec": _specs.to_dict(reader.reward_spec()),
                "discount_spec": _specs.to_dict(reader.discount_spec()),
            }
            st.declare(
                "steps",
                {"observation": _specs.tensor_type(obs_spec), "action": _specs.tensor_type(action_spec)},
            )
            version = getattr(envlogger, "__version__", None) or _dist_version("envlogger")
            run = st.add_run(
                source="envlogger",
                run_id=run_id,
                name=name,
                source_path=os.fspath(directory),
                source_version=f"envlogger {version}",
                alignment="dm_env",
                num_envs=1,
                metadata=reader.metadata(),
                env_specs=env_specs,
            )
            report = EpisodesReport(run_id=run)
            episode_meta = list(reader.episode_metadata())
            plain = not isinstance(action_spec, (dict, list, tuple))
            sink = Sink(
                st,
                run,
                own_store=False,
                action_dtype=action_spec.dtype if plain else None,
                flush_every_steps=_STEPS_PER_COMMIT,
                flush_every_seconds=None,
                background=False,
            )
            lane = sink.lanes[0]
            with bar(len(reader.episodes), "import envlogger", "episode", progress) as pbar:
                for k, episode in enumerate(reader.episodes):
                    steps = list(episode)
                    # checks the dm_env order (FIRST first, no action on it) and what FIRST carried
                    rlds = alignment.dm_env_to_rlds(
                        step_type=[int(s.timestep.step_type) for s in steps],
                        action=[s.action for s in steps],
                        reward=[s.timestep.reward for s in steps],
                        discount=[s.timestep.discount for s in steps],
                    )
                    obs = [flat_value(s.timestep.observation, obs_spec) for s in steps]
                    actions = [s.action if plain else flat_value(s.action, action_spec) for s in steps[1:]]
                    lane.obs += obs
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
                    ep.meta = episode_meta[k] if k < len(episode_meta) else None
                    ep.first_reward, ep.first_discount = rlds["first_reward"], rlds["first_discount"]
                    sink.unflushed += len(steps)
                    if sink.due():
                        sink.flush()
                    report.episodes += 1
                    report.steps += len(steps)
                    pbar.update(1)
            sink.close()
        return report
    except RLArrowError:
        raise
    except (RuntimeError, ValueError, TypeError, OSError, EOFError, IndexError, KeyError) as exc:
        # envlogger's riegeli reader reports damage as RuntimeError("INTERNAL: ..."), and the
        # records it decodes fail in their own ways (a missing step is a TypeError in it)
        raise CorruptFileError(directory, f"envlogger's reader failed on this directory "
                               f"({type(exc).__name__}: {exc}); episodes committed before the damaged "
                               "record are kept") from exc
    finally:
        if own:
            st.close()


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def export_envlogger(
    store: Store | str | os.PathLike[str], directory: str | os.PathLike[str], *, run_id: str | None = None
) -> Path:
    """Write a run as an envlogger riegeli directory (see the module docs).

    The run metadata is written as envlogger writes it: the recorded metadata, with
    ``environment_specs`` in envlogger's own encoding.

    Raises:
        StoreError: several runs and no ``run_id``.
        MissingDependencyError: envlogger is not installed.
    """
    from rlarrow.reader import Reader

    envlogger = load()
    from envlogger.backends import riegeli_backend_writer
    from envlogger.converters import spec_codec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    reader = Reader(store, run_id=run_id)
    meta = reader.metadata()
    if reader.source != "envlogger":  # an envlogger import kept envlogger's own encoding
        meta["environment_specs"] = spec_codec.encode_environment_specs(_SpecHolder(reader))
    writer = riegeli_backend_writer.RiegeliBackendWriter(data_directory=os.fspath(directory), metadata=meta)
    try:
        episode_meta = reader.episode_metadata()
        for k, episode in enumerate(reader.episodes):
            for i, step in enumerate(episode):
                writer.record_step(
                    envlogger.StepData(step.timestep, step.action, step.custom_data), is_new_episode=i == 0
                )
            if episode_meta[k] is not None:
                writer.set_episode_metadata(episode_meta[k])
    finally:
        writer.close()
    return directory


class _SpecHolder:
    """What envlogger's spec codec reads: an object with the four spec methods."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def observation_spec(self) -> Any:
        return self._reader.observation_spec()

    def action_spec(self) -> Any:
        return self._reader.action_spec()

    def reward_spec(self) -> Any:
        return self._reader.reward_spec()

    def discount_spec(self) -> Any:
        return self._reader.discount_spec()
