"""Minari datasets written, with Minari's own writer: from any episode source or a stored run.

:func:`write_minari` writes an episode source (any format's ``read_<format>``, or a stored
run) as a Minari dataset, one Minari ``EpisodeBuffer`` per complete episode;
:func:`export_minari` is that of a run of a store. HDF5 is written in a child process.

Example:
    >>> from rlarrow.io.minari import export_minari  # doctest: +SKIP
    >>> export_minari("runs.rlarrow", "cartpole-v0", data_format="arrow")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core.errors import InvalidInputError
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.store import StoreLike
from rlarrow.io.minari.minari_spaces import for_space, gym_space

__all__ = ["MinariWriteOptions", "export_minari", "write_minari"]


#: what a Minari dataset's metadata.json says of its making, kept by an import and written back by an export
DATASET_KEYS = ("dataset_id", "env_spec", "eval_env_spec", "author", "author_email", "algorithm_name",
                "code_permalink", "description", "requirements", "ref_min_score", "ref_max_score",
                "num_episodes_average_score")


#: the backends :func:`export_minari` writes
DATA_FORMATS = ("hdf5", "arrow", "parquet")


def export_minari(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    data_format: str = "hdf5",
    dataset_id: str | None = None,
) -> Path:
    """Write a run as a Minari dataset, with Minari's own writer (``pip install minari``).

    ``directory`` becomes the dataset (``directory/data/...``: what ``MinariDataset(directory
    / "data")`` opens, or ``minari.load_dataset`` once it sits in Minari's datasets folder as
    ``<dataset_id>``). Each complete episode (its final observation stored) is written as
    Minari stores one: N + 1 observations, N actions, rewards, terminations and truncations;
    steps' ``{"infos": ...}`` metadata as the episode's infos where every step has them (or all
    but the final one, as a D4RL file's: that one's NaN, or 0 where not floats); rewards in the
    run's ``reward_spec`` dtype (float64 without one);
    an episode's ``seed`` and ``options`` (a Minari import's) as its own. The spaces are the
    run's (Minari's or gymnasium's, as recorded), else made from its specs (``Box`` from an
    array spec, ``Discrete`` from a discrete one, ``Dict``/``Tuple`` from nested specs).
    Images are stored raw (``jpeg_encoding=False``): JPEG would change their values.

    Not written, and said in one warning: episodes without a final observation (recording
    stopped mid-episode, or a D4RL file without ``next_observations``), which Minari cannot
    hold; discounts (Minari has none).

    Args:
        store: a store, or its path.
        directory: the dataset directory to write (created; it must be empty or new).
        run_id: which run; may be left out when the store holds one run with steps.
        overwrite: replace what ``directory`` holds.
        data_format: Minari's backend: ``"hdf5"`` (Minari's default), ``"arrow"`` or ``"parquet"``.
        dataset_id: the dataset's id (default: the one it was imported with, else
            ``rlarrow/<run name>-v0``).

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``; no episode to write.
        MissingDependencyError: Minari is not installed.

    Example:
        >>> export_minari("runs.rlarrow", "cartpole-v0", data_format="arrow")  # doctest: +SKIP
    """
    from rlarrow.core.run_source import read_run

    _check_write(directory, overwrite, data_format)
    with read_run(store, run_id=run_id) as source:
        return write_minari(source, directory, overwrite=overwrite, data_format=data_format,
                            dataset_id=dataset_id)


def _check_write(directory: str | os.PathLike[str], overwrite: bool, data_format: str) -> None:
    from rlarrow.core.deps import require
    from rlarrow.core.errors import ArgumentError
    from rlarrow.core.targets import check_target

    if data_format not in DATA_FORMATS:
        raise ArgumentError(f"data_format={data_format!r}: Minari writes {', '.join(DATA_FORMATS)}")
    check_target(directory, overwrite=overwrite, what="a Minari export")
    require("minari", feature="writing Minari datasets")


def write_minari(
    source: EpisodeSource,
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    data_format: str = "hdf5",
    dataset_id: str | None = None,
) -> Path:
    """Write an episode source (any format's ``read_<format>``, or a stored run) as a Minari dataset.

    What :func:`export_minari` writes of a stored run, written from ``source``: see there for
    what a Minari dataset holds and leaves out. HDF5 is written in a child process (a full
    disk can crash HDF5): the source is read again there (:attr:`EpisodeSource.recipe`).

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``; no episode
            to write; observations or actions that hold bytes (encoded images).
        MissingDependencyError: Minari is not installed.

    Example:
        >>> from rlarrow.io.rlds import read_rlds  # doctest: +SKIP
        >>> write_minari(read_rlds("~/tensorflow_datasets/bridge/1.0.0"), "bridge-v0")  # doctest: +SKIP
    """
    import warnings

    from rlarrow.core.errors import RLArrowWarning
    from rlarrow.core.targets import fresh_directory, in_child

    _check_write(directory, overwrite, data_format)
    with fresh_directory(directory, overwrite=overwrite, what="a Minari export") as tmp:
        if data_format == "hdf5":  # HDF5 can crash the process on a full disk: a child process writes
            written, left, total = in_child(directory, _write_minari, source, os.fspath(tmp), data_format,
                                            dataset_id, what="Minari (HDF5)")
        else:
            written, left, total = _write_minari(source, os.fspath(tmp), data_format, dataset_id)
        if not written:
            raise InvalidInputError(directory, f"none of the run's {total} episodes has its final "
                                    "observation, which every Minari episode needs; nothing written")
    if left:
        warnings.warn(f"{directory}: {len(left)} episode(s) without a final observation were not written "
                      f"(Minari cannot hold them): episode ids {left[:10]}{'...' if len(left) > 10 else ''}",
                      RLArrowWarning, stacklevel=2)
    return Path(directory)


def _write_minari(source: EpisodeSource, tmp: str, data_format: str,
                  dataset_id: str | None) -> tuple[int, list[int], int]:
    """Write the Minari dataset into ``tmp`` (in a child, maybe): (written, ids left out, episodes)."""
    import minari
    from minari.dataset.minari_storage import MinariStorage

    from rlarrow.core.dm_env_rows import derived_specs

    info = source.run
    run_meta = info.metadata if isinstance(info.metadata, dict) else {}
    specs = derived_specs(info.env_specs) if isinstance(info.env_specs, dict) else {}
    spaces = tuple(gym_space(specs.get(f"{k}_space") or specs.get(f"{k}_spec"), k)
                   for k in ("observation", "action"))
    kept = {k: run_meta[k] for k in DATASET_KEYS if k in run_meta and info.source == "minari"}
    for key in ("env_spec", "eval_env_spec"):  # an import decoded Minari's JSON text
        if key in kept and not isinstance(kept[key], str):
            kept[key] = json.dumps(kept[key])
    for key in ("author", "author_email"):  # Minari writes sets as lists, and takes sets
        if isinstance(kept.get(key), (list, str)):
            kept[key] = set(kept[key]) if isinstance(kept[key], list) else {kept[key]}
    kept["dataset_id"] = dataset_id or kept.get("dataset_id") or \
        f"rlarrow/{re.sub(r'[^A-Za-z0-9_]+', '_', str(info.name or source.run_id))}-v0"
    reward_spec = specs.get("reward_spec")
    written, left, total = 0, [], 0
    storage = None
    for table, row in source.by_episode():
        if storage is None:
            _refuse_bytes(table, source)
            storage = MinariStorage.new(Path(tmp) / "data", observation_space=spaces[0],
                                        action_space=spaces[1], data_format=data_format, jpeg_encoding=False)
            storage.update_metadata({**kept, "minari_version": minari.__version__})
        total += 1
        episode_id = int(table.column("episode_id")[0].as_py()) if table.num_rows or row is None \
            else int(row["episode_id"])
        meta = _episode_meta(row)
        truncated = None if row is None or row.get("truncated") is None else bool(row["truncated"])
        buffer = _episode_buffer(table, episode_id, meta, spaces, truncated, data_format,
                                 (reward_spec, run_meta.get("per_step")))
        if buffer is None:
            left.append(episode_id)
            continue
        storage.update_episodes([buffer])
        more = {key: value for key, value in (meta or {}).items()
                if key not in ("id", "total_steps", "seed", "options")} \
            if isinstance(meta, dict) and info.source == "minari" else {}
        if more:  # what Minari's collector adds (rewards_sum, ...): back as it was
            storage.update_episode_metadata([more], [episode_id])
        written += 1
    return written, left, total


def _episode_meta(row: dict[str, Any] | None) -> Any:
    """An ``episodes`` row's metadata (``episode_fn``'s value, where a recorder kept it so)."""
    if row is None:
        return None
    meta = _metadata.decode(row.get("metadata"), row.get("metadata_types"))
    if isinstance(meta, dict) and "episode_fn" in meta and "first_reward" in meta:
        meta = meta["episode_fn"]
    return meta


def _refuse_bytes(table: pa.Table, source: EpisodeSource) -> None:
    """Raise when observations or actions hold bytes (images an RLDS import kept encoded)."""
    found = [name for name in ("observation", "action") if name in table.column_names
             and _holds_bytes(table.schema.field(name).type)]
    if found:
        raise InvalidInputError(source.run.source_path or source.run_id,
                                f"run {source.run_id}: {', '.join(found)} hold bytes (images an RLDS import "
                                "kept encoded); a Minari dataset holds numbers: import the dataset with its "
                                "images decoded to export it")


def _holds_bytes(type_: pa.DataType) -> bool:
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return True
    if pa.types.is_struct(type_):
        return any(_holds_bytes(type_.field(i).type) for i in range(type_.num_fields))
    return False


def _episode_buffer(table: pa.Table, episode_id: int, meta: Any, spaces: tuple[Any, Any],
                    truncated: bool | None, data_format: str, specs: tuple[Any, Any]) -> Any:
    """An episode's steps as Minari's ``EpisodeBuffer``, or None when it has no final observation.

    ``truncated``: the episode's ``episodes`` row's flag (None: none recorded): a terminal
    episode can be truncated too, as Minari had it; without a flag, an episode that ends
    without a terminal state is a truncated one. ``specs``: the run's reward spec and the
    ``per_step`` datasets an HDF5 import recorded (which typed infos fields are infos).
    """
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rlarrow.core.tensors import to_numpy

    rows = table.num_rows
    last = table.column("is_last")[rows - 1].as_py() if rows else False
    obs_col = table.column("observation").combine_chunks()
    if not rows or not last or obs_col.null_count or rows < 1:
        return None
    n = rows - 1
    obs = for_space(to_numpy(obs_col, fill_value=0), spaces[0])
    act = for_space(_rows_of(to_numpy(table.column("action").combine_chunks().slice(0, n), fill_value=0), n),
                     spaces[1])
    terminal = bool(table.column("is_terminal")[n].as_py())
    cut = (not terminal) if truncated is None else truncated
    spec, per_step = specs
    infos = None
    texts = table.column("metadata").to_pylist() if "metadata" in table.column_names else [None] * rows
    # a D4RL file's infos are one a row (transition): its final observation has none
    final_unknown = texts[n] is None and n and all(t is not None for t in texts[:n])
    if all(t is not None for t in texts) or final_unknown:
        steps = _metadata.decode_column(texts, table.column("metadata_types").to_pylist())
        if all(isinstance(s, dict) and isinstance(s.get("infos"), dict) for s in steps[:n]):
            rows = [s["infos"] for s in steps if isinstance(s, dict) and isinstance(s.get("infos"), dict)]
            if len(rows) == n:
                rows.append(_unknown(rows[-1]))
            if len(rows) == n + 1:
                infos = _stacked(rows, data_format != "hdf5")
    typed = _typed_infos(table, n, per_step, data_format != "hdf5")  # steps 1.1; 1.0 kept them as metadata
    if typed:
        infos = _merged(infos or {}, typed)
    extra = {k: meta[k] for k in ("seed", "options") if isinstance(meta, dict) and meta.get(k) is not None}
    # ``spec``: the run's reward spec: its reward dtype (D4RL: float32), else float64
    scalar = isinstance(spec, dict) and spec.get("dtype") and not spec.get("shape")
    dtype = np.dtype(spec["dtype"]) if scalar and isinstance(spec, dict) else np.dtype(np.float64)
    return EpisodeBuffer(id=episode_id, observations=obs, actions=act,
                         rewards=table.column("reward").to_numpy(zero_copy_only=False)[:n].astype(dtype),
                         terminations=[False] * (n - 1) + [terminal] if n else [],
                         truncations=[False] * (n - 1) + [cut] if n else [],
                         infos=infos or {}, **extra)


def _typed_infos(table: pa.Table, n: int, per_step: Any, arrow: bool) -> dict[str, Any] | None:
    """The typed ``infos`` of an episode's ``n + 1`` steps as Minari's (None: none, or not every step's).

    A D4RL file's infos are one a row (transition): its final step has none, and is given
    NaN (0 for integers and bools), as :func:`_unknown` does for infos kept as metadata.
    """
    from rlarrow.core.step_columns import infos_leaves, infos_path

    typed = infos_leaves(table)
    if typed is None:
        return None
    leaves, valid = typed
    if not (valid.all() or (n and valid[:n].all())):
        return None
    per_step = per_step if isinstance(per_step, dict) else None
    paths = {field: infos_path(field, per_step) for field in leaves}
    # (an HDF5 file's other per-row datasets, robomimic's states, are not infos; a scalar a step: _stacked)
    return _metadata.nest({path.removeprefix("infos/"): list(values) if arrow and values.ndim == 1 else values
                           for field, path in paths.items() if path.startswith("infos/")
                           for values in (leaves[field],)})


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values, nested dicts merged."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _rows_of(values: Any, n: int) -> Any:
    return {k: _rows_of(v, n) for k, v in values.items()} if isinstance(values, dict) else values[:n]


def _unknown(info: Any) -> Any:
    """Infos shaped as ``info`` that say "not known": NaN where a float is, else 0 (False, "")."""
    if isinstance(info, dict):
        return {k: _unknown(v) for k, v in info.items()}
    value = np.asarray(info)
    return np.full_like(value, np.nan) if value.dtype.kind in "fc" else np.zeros_like(value)


def _stacked(infos: list[Any], arrow: bool) -> dict[str, Any]:
    """Per-step info dicts as one dict of stacked arrays (what Minari keeps), nested dicts too.

    For Minari's arrow and parquet backends (``arrow``), a scalar a step goes as a list of
    NumPy scalars: Minari 0.5.4's arrow writer stores a 1-D array as lists of one value with an
    empty shape, which its own reader then cannot load (``int(b'')``); a list it stores as a
    plain column of the scalars' type, which it reads back as the same 1-D array.
    """
    out: dict[str, Any] = {}
    for key in infos[0]:
        values = [i.get(key) if isinstance(i, dict) else None for i in infos]
        if isinstance(values[0], dict):
            out[key] = _stacked(values, arrow)
            continue
        stacked = np.asarray(values)
        out[key] = list(stacked) if arrow and stacked.ndim == 1 else stacked
    return out


@dataclass(frozen=True)
class MinariWriteOptions:
    """How a Minari dataset is written: the keywords :func:`write_minari` takes beyond ``overwrite``.

    ``rlarrow convert INPUT --to minari`` builds one from ``--data-format`` and ``--dataset-id``.

    Attributes:
        data_format: Minari's backend: ``"hdf5"`` (Minari's own default), ``"arrow"`` or ``"parquet"``.
        dataset_id: the dataset's id (default: the source's, else ``rlarrow/<run name>-v0``).

    Raises:
        ArgumentError: a backend other than :data:`DATA_FORMATS`.

    Example:
        >>> MinariWriteOptions(data_format="arrow").dataset_id is None
        True
    """

    data_format: str = "hdf5"
    dataset_id: str | None = None

    def __post_init__(self) -> None:
        from rlarrow.core.errors import ArgumentError

        if self.data_format not in DATA_FORMATS:
            raise ArgumentError(f"data_format={self.data_format!r}: Minari writes {', '.join(DATA_FORMATS)}")
