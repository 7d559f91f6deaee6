"""envlogger directories written with envlogger's own writer: from any episode source or a stored run.

:func:`write_envlogger` writes an episode source (any format's ``read_<format>``, or a stored
run) as an envlogger riegeli directory, in dm_env order; :func:`export_envlogger` is that of
a run of a store.

Example:
    >>> from rlarrow.io.envlogger import write_envlogger  # doctest: +SKIP
    >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
    >>> write_envlogger(read_minari("cartpole-v0"), "cartpole_logs")  # doctest: +SKIP
"""


from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core import metadata as _metadata
from rlarrow.core import specs as _specs
from rlarrow.core.errors import (
    CorruptFileError,
)
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.store import StoreLike
from rlarrow.io.envlogger.envlogger_reading import load
from rlarrow.io.envlogger.riegeli_counts import riegeli_record_count

__all__ = ["export_envlogger", "write_envlogger"]


def export_envlogger(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a run as an envlogger riegeli directory: :func:`write_envlogger` of the stored run.

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

    Example:
        >>> export_envlogger("runs.rlarrow", "catch_again", run_id="a")  # doctest: +SKIP
    """
    from rlarrow.core.run_source import read_run
    from rlarrow.core.targets import check_target

    check_target(directory, overwrite=overwrite, what="an envlogger export")
    load()
    with read_run(store, run_id=run_id) as source:
        return write_envlogger(source, directory, overwrite=overwrite)


def write_envlogger(source: EpisodeSource, directory: str | os.PathLike[str], *,
                    overwrite: bool = False) -> Path:
    """Write an episode source (any format's ``read_<format>``, or a stored run) as an envlogger directory.

    Each episode is written in dm_env order (:func:`rlarrow.core.dm_env_rows.dm_env_steps`)
    through envlogger's own Riegeli writer, so envlogger's ``Reader`` reads it as it read an
    envlogger original: the same steps, each step's metadata as its ``custom_data``, each
    episode's metadata (where the source has some), and the run metadata with
    ``environment_specs``: envlogger's own encoding where the source is an envlogger
    directory (or a run imported from one), else the source's dm_env specs, or specs made
    from its gymnasium spaces (a float64 reward spec; dm_env's default discount spec).
    Rewards and discounts are written in the dtype of the reward and discount specs (RLDS
    rows hold them as float64), so a float32 reward comes back float32. A source without
    discounts (Minari, gymnasium) gets dm_env's: 0.0 on a terminal LAST step, 1.0 on every
    other step after FIRST (a truncated episode ends with 1.0), so envlogger's reader tells
    terminated from truncated episodes as the source did. Episodes with no steps are left
    out (envlogger has no such episode).

    The directory is written whole or not at all: into a fresh directory that takes
    ``directory``'s place once every episode is written (a failure leaves what was there).

    Args:
        source: the episodes to write.
        directory: the envlogger directory to write (created; it must be empty or new).
        overwrite: replace what ``directory`` holds (``--overwrite`` in the CLI); without
            it, a directory that holds anything is refused.

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``.
        OutputError: envlogger's writer did not write every record (a full disk).
        MissingDependencyError: envlogger is not installed.

    Example:
        >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
        >>> with read_minari("cartpole-v0") as source:  # doctest: +SKIP
        ...     write_envlogger(source, "cartpole_logs")
    """
    from rlarrow.core.dm_env_rows import derived_specs, dm_env_steps, episode_fn_value, run_metadata
    from rlarrow.core.targets import check_target, fresh_directory

    check_target(directory, overwrite=overwrite, what="an envlogger export")
    steps = with_metadata = 0
    envlogger = load()
    import dm_env
    from envlogger.backends import riegeli_backend_writer
    from envlogger.converters import spec_codec

    info = source.run
    env_specs = derived_specs(info.env_specs) if isinstance(info.env_specs, dict) else {}
    holder = _SpecHolder(env_specs)
    meta = run_metadata(info.metadata, env_specs)
    if info.source != "envlogger":  # an envlogger directory (or its import) keeps envlogger's own encoding
        meta["environment_specs"] = spec_codec.encode_environment_specs(holder)
    as_reward = _scalar_caster(_specs.from_dict(env_specs.get("reward_spec")))
    as_discount = _scalar_caster(holder.discount_spec())  # (dm_env's default where the source has none)
    with fresh_directory(directory, overwrite=overwrite, what="an envlogger export") as tmp:
        writer = riegeli_backend_writer.RiegeliBackendWriter(data_directory=os.fspath(tmp), metadata=meta)
        try:
            for table, row in source.by_episode():
                if not table.num_rows:
                    continue
                terminal = table.column("is_terminal").to_numpy(zero_copy_only=False)
                for i, step in enumerate(dm_env_steps(table, env_specs=env_specs, dm_env=dm_env)):
                    timestep, discount = step.timestep, step.timestep.discount
                    if discount is None and i > 0:  # a source without discounts (Minari, gymnasium):
                        discount = 0.0 if terminal[i] else 1.0  # dm_env's, so termination is kept
                    if timestep.reward is not None or discount is not None:
                        timestep = timestep._replace(reward=as_reward(timestep.reward),
                                                     discount=as_discount(discount))
                    writer.record_step(
                        envlogger.StepData(timestep, step.action, step.custom_data), is_new_episode=i == 0
                    )
                    steps += 1
                episode_meta = None if row is None else \
                    episode_fn_value(_metadata.decode(row.get("metadata"), row.get("metadata_types")))
                if episode_meta is not None:
                    writer.set_episode_metadata(episode_meta)
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
    """What envlogger's spec codec reads: an object with the four spec methods (of a run's spec dicts)."""

    def __init__(self, env_specs: dict[str, Any]) -> None:
        self._env_specs = env_specs

    def _spec(self, key: str) -> Any:
        return _specs.from_dict(self._env_specs.get(key))

    def observation_spec(self) -> Any:
        return self._spec("observation_spec")

    def action_spec(self) -> Any:
        return self._spec("action_spec")

    def reward_spec(self) -> Any:
        spec = self._spec("reward_spec")
        return spec if spec is not None else _dm_env_default("reward_spec")

    def discount_spec(self) -> Any:  # gymnasium sources have none: dm_env's default
        spec = self._spec("discount_spec")
        return spec if spec is not None else _dm_env_default("discount_spec")


def _dm_env_default(name: str) -> Any:
    """dm_env's default reward or discount spec (what ``dm_env.Environment`` declares)."""
    import dm_env

    return getattr(dm_env.Environment, name)(None)


