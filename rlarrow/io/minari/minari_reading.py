"""Minari datasets (``arrow`` and ``parquet`` backends) into a store, without Minari.

A Minari dataset directory holds ``data/metadata.json`` and, per episode,
``data/<id>/part-<k>.<arrow|parquet>`` plus ``data/<id>/metadata.json``. An episode of N
actions has N + 1 rows on disk (the last pads action and reward with 0/False); it becomes
N + 1 RLDS steps whose last one holds the final observation with null action and reward
(``docs/format.md``). Every part of an episode is read, in order, so long episodes come back
whole; ``infos`` that are numbers (one dtype and shape a key, every step) are the typed
``infos`` column (a struct, nested dicts nested; the first episode's keys, dtypes and shapes
for the whole dataset), other infos each step's ``metadata`` (``{"infos": ...}``); the
episode's ``metadata.json`` is the episode's metadata, and the dataset's the run's (its
JSON-encoded spaces decoded).

Observations and actions keep their spaces' shapes, as ``minari.load_dataset`` gives them
(Minari writes a ``Box`` of any rank as a flat list): a ``Box(H, W)`` comes back ``(H, W)``,
JPEG-encoded images (Minari's ``jpeg_encoding``) are decoded as Minari decodes them (needs
Pillow), Dict and Tuple spaces become structs in the space's order (the dataset's
``observation_space``; Tuple fields ``"0"``, ``"1"``...). A store that already holds the
same fields in another order keeps its order (``docs/format.md``).

Example:
    >>> from rlarrow.io.minari import import_minari  # doctest: +SKIP
    >>> import_minari("~/.minari/datasets/cartpole/random-v0", "runs.rlarrow")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlarrow.core import schema as _schema
from rlarrow.core.confined import inside
from rlarrow.core.errors import CorruptFileError, InvalidInputError, UnsupportedInputError
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo
from rlarrow.core.store import StoreLike
from rlarrow.io.codecs.hdf5_files import HDF5RefusedError, open_hdf5
from rlarrow.io.minari.minari_episodes import Hdf5Episodes, PartEpisodes, read_json

__all__ = ["MinariOptions", "import_minari", "is_minari_dir", "read_minari"]


def _data_dir(path: str | os.PathLike[str]) -> tuple[Path, Path] | None:
    """The dataset's data folder and its ``metadata.json``, both where they lead inside ``path``.

    Raises:
        InvalidInputError: one of them is a symlink (or under one) that leads outside ``path``
            (:func:`rlarrow.core.confined.inside`: nothing outside is looked at).
    """
    for folder in ("data", "."):
        name = "metadata.json" if folder == "." else f"{folder}/metadata.json"
        meta = inside(path, name, what="the dataset's metadata file")
        if meta.is_file():
            try:
                keys = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(keys, dict) and "data_format" in keys and "total_episodes" in keys:
                return inside(path, folder, what="the dataset's data folder"), meta
    return None


def is_minari_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Minari dataset (or its ``data`` directory).

    Raises:
        InvalidInputError: its ``metadata.json`` (or ``data`` folder) is a symlink out of ``path``.
    """
    return _data_dir(path) is not None


def _space(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _check_dataset(path: Path, meta: dict[str, Any], episodes: int, steps: int | None) -> None:
    """Compare the episodes found (and their steps, when known) with the dataset's ``metadata.json``."""
    said = meta.get("total_episodes")
    if isinstance(said, int) and said != episodes:
        raise CorruptFileError(path, f"says the dataset has {said} episodes, its data folder has {episodes}: "
                               "episodes are missing or the file is damaged; restore the dataset or "
                               "download it again")
    total = meta.get("total_steps")
    if steps is not None and isinstance(total, int) and total != steps:
        raise CorruptFileError(path, f"says the dataset has {total} steps, its episodes have {steps}: "
                               "restore the dataset or download it again")


def read_minari(directory: str | os.PathLike[str], *, run_id: str | None = None,
                allow_hdf5_links: bool = False) -> EpisodeSource:
    """A Minari dataset as an episode source, without a store and without Minari (see the module docs).

    Each chunk is one episode (read when the source is iterated); the dataset's totals are
    checked against its ``metadata.json`` once the last episode is read.

    ``allow_hdf5_links``: Minari's HDF5 backend: follow external links and virtual datasets
    of ``main_data.hdf5`` whose files lie in its own directory (refused by default, as is
    anything that leads outside it: :func:`rlarrow.io.codecs.hdf5_files.check_contained`).

    Raises:
        UnsupportedInputError: not a Minari dataset, or a data format other than arrow/parquet/hdf5.
        CorruptFileError: an episode file that cannot be read.
        HDF5RefusedError: ``main_data.hdf5`` reaches outside itself or declares more than it holds.

    Example:
        >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
        >>> steps, episodes = read_minari("~/.minari/datasets/cartpole/random-v0").read()  # doctest: +SKIP
    """
    found = _data_dir(directory)
    if found is None:
        raise UnsupportedInputError(
            directory, "not a Minari dataset (no data/metadata.json with data_format and total_episodes)"
        )
    data, meta_path = found
    meta = read_json(meta_path)
    fmt = meta.get("data_format")
    if fmt not in ("arrow", "parquet", "hdf5"):
        raise UnsupportedInputError(
            data, f"Minari data format {fmt!r}; rlarrow reads Minari's 'arrow', 'parquet' and 'hdf5' "
            "backends")
    run_meta = {k: _space(v) for k, v in meta.items()}
    env_specs = {
        "observation_space": run_meta.get("observation_space"),
        "action_space": run_meta.get("action_space"),
    }
    spaces = (run_meta.get("observation_space"), run_meta.get("action_space"))
    jpeg = bool(meta.get("jpeg_encoding", True))
    stack = ExitStack()
    try:
        if fmt == "hdf5":
            h5_name = data.relative_to(os.path.realpath(directory)) / _HDF5_FILE
            try:  # (judged by the links' text: nothing outside the dataset is looked at)
                h5 = inside(directory, h5_name, what="the dataset's HDF5 file")
            except InvalidInputError as exc:
                raise HDF5RefusedError(exc.path, str(exc).removeprefix(f"{exc.path}: ")) from exc
            if not h5.is_file():
                raise CorruptFileError(h5, "missing: the dataset's metadata.json says its data is HDF5, "
                                       "and this file holds it; restore the dataset or download it again")
            source: PartEpisodes | Hdf5Episodes = Hdf5Episodes(
                stack.enter_context(open_hdf5(h5, allow_links=allow_hdf5_links)), h5)
        else:
            source = PartEpisodes(Path(directory), data, fmt)
        _check_dataset(meta_path, meta, len(source), None)
    except BaseException:
        stack.close()
        raise

    def chunks(run: str) -> Iterator[EpisodeChunk]:
        episodes = steps = 0
        one_type = _OneInfosType()
        for k in range(len(source)):
            try:
                columns, row = source.read(k, spaces, jpeg)
                columns = one_type(columns, row["num_steps"])
                built = _schema.build("steps", {"run_id": run, **columns}, num_rows=row["num_steps"])
            except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
                raise CorruptFileError(source.where(k), f"the episode's data is damaged "
                                       f"({type(exc).__name__}: {exc}); restore the dataset or download "
                                       "it again") from exc
            rows = EpisodeRows()
            rows.add(row["episode_id"], num_steps=row["num_steps"], total=row["return"],
                     terminated=row["terminated"], truncated=row["truncated"],
                     partial_end=row["partial_end"], metadata=row["metadata"])
            episodes += 1
            steps += built.num_rows
            if k == len(source) - 1:  # the totals, before the last episode is taken
                _check_dataset(meta_path, meta, episodes, steps - episodes)
            yield EpisodeChunk(built, rows.table(run))

    info = RunInfo(source="minari", name=meta.get("dataset_id"), source_path=os.fspath(directory),
                   source_version=f"minari {meta.get('minari_version')}", alignment="minari", num_envs=1,
                   metadata=run_meta, env_specs=env_specs)
    return EpisodeSource(info, {}, chunks, run_id=run_id, episodes=len(source), close=stack.close,
                         recipe=(read_minari, (os.path.abspath(directory),),
                                 {"allow_hdf5_links": allow_hdf5_links}))


class _OneInfosType:
    """The typed ``infos`` of a dataset in one type: the first episode's.

    An episode whose numbers differ (other keys, dtypes or shapes) keeps them in its steps'
    ``metadata`` (``{"infos": ...}``, as rlarrow 1.0 did), with null typed infos; so does one
    of a dataset whose first episode has none. The steps of every episode have one schema.
    """

    def __init__(self) -> None:
        self.decided = False
        self.type: pa.DataType | None = None

    def __call__(self, columns: dict[str, Any], rows: int) -> dict[str, Any]:
        typed = columns.get("infos")
        if not self.decided:
            self.decided, self.type = True, None if typed is None else typed.type
        columns = dict(columns)
        if typed is not None and typed.type != self.type:
            columns["metadata"] = _with_infos(columns.get("metadata"), columns.pop("infos"), rows)
        if self.type is not None and "infos" not in columns:
            columns["infos"] = pa.nulls(rows, self.type)
        return columns


def _with_infos(metadata: list[Any] | None, typed: pa.Array, rows: int) -> list[Any]:
    """Per-step metadata with the typed infos put back in ``{"infos": ...}`` (numbers in their dtypes)."""
    from rlarrow.core.tensors import to_numpy

    values = to_numpy(typed)

    def row(tree: dict[str, Any], i: int) -> dict[str, Any]:
        return {k: row(v, i) if isinstance(v, dict) else v[i] for k, v in tree.items()}

    out = []
    for i in range(rows):
        meta = dict(metadata[i]) if metadata is not None and isinstance(metadata[i], dict) else {}
        meta["infos"] = {**(meta.get("infos") or {}), **row(values, i)}
        out.append(meta)
    return out


def import_minari(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
    allow_hdf5_links: bool = False,
) -> IngestReport:
    """Import a Minari dataset into ``store`` as one run: ``ingest(store, read_minari(...))``.

    Args:
        directory: the dataset's directory (``data/metadata.json`` in it).
        store: a store, or the path of one (created when missing).
        run_id: the new run's id (None: generated).
        name: the run's name (default: the dataset's id).
        progress: a progress bar (None: when stderr is a terminal).
        allow_hdf5_links: Minari's HDF5 backend: follow external links and virtual datasets
            whose files lie in the dataset's own directory (see :func:`read_minari`).

    Raises:
        UnsupportedInputError: not a Minari dataset, or a data format other than arrow/parquet/hdf5.
        CorruptFileError: an episode file that cannot be read.
        HDF5RefusedError: ``main_data.hdf5`` reaches outside itself or declares more than it holds.
    """
    with read_minari(directory, run_id=run_id, allow_hdf5_links=allow_hdf5_links) as source:
        return ingest(store, source, name=name, progress=progress)


_HDF5_FILE = "main_data.hdf5"


@dataclass(frozen=True)
class MinariOptions:
    """How a Minari dataset is read or imported (:func:`read_minari`, :func:`import_minari`).

    Attributes:
        allow_hdf5_links: HDF5 backend: follow external links and virtual datasets whose
            files lie in the dataset's own directory (refused by default; never outside it).

    Example:
        >>> MinariOptions().allow_hdf5_links
        False
    """

    allow_hdf5_links: bool = False
