"""A stored run back into an envlogger directory, with envlogger's own writer."""


from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.errors import (
    CorruptFileError,
)
from rlarrow.core.store import StoreLike
from rlarrow.io.envlogger.envlogger_reading import load
from rlarrow.io.envlogger.riegeli_counts import riegeli_record_count

__all__ = ["export_envlogger"]


def export_envlogger(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a run as an envlogger riegeli directory (see the module docs).

    The run metadata is written as envlogger writes it: the recorded metadata, with
    ``environment_specs`` in envlogger's own encoding. Rewards and discounts are written
    in the dtype of the run's reward and discount specs (the store keeps them as float64),
    so a float32 reward comes back float32.

    The directory is written whole or not at all: into a fresh directory that takes
    ``directory``'s place once every episode is written (a failure leaves what was there).

    Args:
        store: a store, or its path.
        directory: the envlogger directory to write (created; it must be empty or new).
        run_id: which run; may be left out when the store holds one run with steps.
        overwrite: replace what ``directory`` holds (``--overwrite`` in the CLI); without
            it, a directory that holds anything is refused (an envlogger reader would see
            the old episodes and the new ones).

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``.
        StoreError: several runs and no ``run_id``.
        MissingDependencyError: envlogger is not installed.
    """
    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.targets import check_target, fresh_directory

    check_target(directory, overwrite=overwrite, what="an envlogger export")
    steps = with_metadata = 0
    envlogger = load()
    from envlogger.backends import riegeli_backend_writer
    from envlogger.converters import spec_codec

    reader = DmEnvRows(store, run_id=run_id)
    meta = reader.metadata()
    if reader.source != "envlogger":  # an envlogger import kept envlogger's own encoding
        meta["environment_specs"] = spec_codec.encode_environment_specs(_SpecHolder(reader))
    as_reward, as_discount = _scalar_caster(reader.reward_spec()), _scalar_caster(reader.discount_spec())
    with fresh_directory(directory, overwrite=overwrite, what="an envlogger export") as tmp:
        writer = riegeli_backend_writer.RiegeliBackendWriter(data_directory=os.fspath(tmp), metadata=meta)
        try:
            episode_meta = reader.episode_metadata()
            for k in range(reader.num_episodes):
                for i, step in enumerate(reader.episode_steps(k)):
                    timestep = step.timestep
                    if timestep.reward is not None or timestep.discount is not None:
                        timestep = timestep._replace(reward=as_reward(timestep.reward),
                                                     discount=as_discount(timestep.discount))
                    writer.record_step(
                        envlogger.StepData(timestep, step.action, step.custom_data), is_new_episode=i == 0
                    )
                    steps += 1
                if episode_meta[k] is not None:
                    writer.set_episode_metadata(episode_meta[k])
                    with_metadata += 1
        finally:
            writer.close()
        _check_written(directory, tmp, steps, with_metadata)
    return Path(directory)


def _check_written(directory: str | os.PathLike[str], tmp: Path, steps: int, with_metadata: int) -> None:
    """Raise an OutputError unless ``tmp`` holds every record the export gave the Riegeli writer.

    envlogger's writer logs a failed write (a full disk) and carries on, leaving files cut
    short or empty: each file is walked chunk by chunk, and the step and episode-metadata
    records counted.
    """
    from rlarrow.core.targets import incomplete

    found = {"steps.riegeli": 0, "episode_metadata.riegeli": 0}
    files = sorted(tmp.rglob("*.riegeli"))
    names = {f.name for f in files}
    for name in ("metadata.riegeli", "steps.riegeli", "step_offsets.riegeli", "episode_index.riegeli",
                 "episode_metadata.riegeli"):
        if name not in names:
            raise incomplete(directory, f"{name} was not written")
    for f in files:
        try:
            records = riegeli_record_count(f)
        except CorruptFileError as exc:
            raise incomplete(directory, f"{f.relative_to(tmp)} is cut short ({exc})") from exc
        if f.name in found:
            found[f.name] += records
    for name, wanted in (("steps.riegeli", steps), ("episode_metadata.riegeli", with_metadata)):
        if found[name] != wanted:
            raise incomplete(directory, f"{name} holds {found[name]} of the {wanted} records written")


def _scalar_caster(spec: Any) -> Any:
    """A function giving a stored reward or discount (float64) in ``spec``'s dtype (None stays None)."""
    dtype = getattr(spec, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "biuf" or tuple(getattr(spec, "shape", ())) != ():
        return lambda value: value
    make = np.dtype(dtype).type

    def cast(value: Any) -> Any:
        return None if value is None else make(value)

    return cast


class _SpecHolder:
    """What envlogger's spec codec reads: an object with the four spec methods."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def observation_spec(self) -> Any:
        return self._reader.observation_spec()

    def action_spec(self) -> Any:
        return self._reader.action_spec()

    def reward_spec(self) -> Any:
        spec = self._reader.reward_spec()
        return spec if spec is not None else _dm_env_default("reward_spec")

    def discount_spec(self) -> Any:  # gymnasium sources have none: dm_env's default
        spec = self._reader.discount_spec()
        return spec if spec is not None else _dm_env_default("discount_spec")


def _dm_env_default(name: str) -> Any:
    """dm_env's default reward or discount spec (what ``dm_env.Environment`` declares)."""
    import dm_env

    return getattr(dm_env.Environment, name)(None)


