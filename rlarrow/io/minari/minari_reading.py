"""Minari datasets (``arrow`` and ``parquet`` backends) into a store, without Minari.

A Minari dataset directory holds ``data/metadata.json`` and, per episode,
``data/<id>/part-<k>.<arrow|parquet>`` plus ``data/<id>/metadata.json``. An episode of N
actions has N + 1 rows on disk (the last pads action and reward with 0/False); it becomes
N + 1 RLDS steps whose last one holds the final observation with null action and reward
(``docs/format.md``). Every part of an episode is read, in order, so long episodes come back
whole; ``infos`` columns are kept as each step's metadata, the episode's ``metadata.json`` as
the episode's, and the dataset's as the run's (its JSON-encoded spaces decoded).

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
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import alignment
from rlarrow.core import metadata as _metadata
from rlarrow.core import schema as _schema
from rlarrow.core.confined import inside, listed
from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedInputError,
)
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.metadata import nest
from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo
from rlarrow.core.store import StoreLike
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.io.codecs.hdf5_files import HDF5RefusedError, guarded, leaves, open_hdf5, plain

__all__ = ["DATASET_KEYS", "DATA_FORMATS", "export_minari", "import_minari", "is_minari_dir", "read_minari",
           "write_minari"]


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


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"not valid JSON ({exc})") from exc


def _read_part(path: Path) -> pa.Table:
    """One part file of an episode, checked through (offsets, UTF-8, column names)."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        else:
            with pa.memory_map(os.fspath(path)) as source:
                try:
                    table = pa.ipc.open_file(source).read_all()
                except pa.ArrowInvalid:
                    source.seek(0)
                    table = pa.ipc.open_stream(source).read_all()
        # arrow reads lazily: damage to offsets, validity or strings shows only here
        table.validate(full=True)
        _ = table.column_names
        return table
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as exc:
        # invalid, not implemented, type errors, garbled names: all damage
        raise CorruptFileError(path, f"not a readable Minari episode file ({type(exc).__name__}: {exc}); "
                               "the file is damaged: restore the dataset or download it again") from exc


def _concat(parts: list[Path]) -> pa.Table:
    """An episode's part files as one table (parts that disagree on columns are damage)."""
    tables = [_read_part(p) for p in parts]
    try:
        return pa.concat_tables(tables).combine_chunks()
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptFileError(parts[0], f"the parts of this episode do not fit together ({exc}): the "
                               "dataset is damaged; restore it or download it again") from exc


def _infos(part: Path, table: pa.Table) -> list[Any] | None:
    """The ``infos`` column as Python values (None when the episode has none)."""
    if "infos" not in table.column_names:
        return None
    try:
        infos: list[Any] = table.column("infos").to_pylist()
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(part, f"the episode's infos cannot be read ({exc}): the file is "
                               "damaged") from exc
    return infos


def _check_episode(path: Path, meta: Any, n: int, reward: pa.ChunkedArray | pa.Array) -> None:
    """Compare an episode with what its ``metadata.json`` says (Minari writes its steps and reward sum)."""
    if not isinstance(meta, dict):
        return
    total = meta.get("total_steps")
    if isinstance(total, int) and total != n:
        raise CorruptFileError(path, f"says the episode has {total} steps, its data has {n}: the dataset is "
                               "damaged; restore it or download it again")
    said = meta.get("rewards_sum")
    if isinstance(said, (int, float)) and not isinstance(said, bool) and n:
        try:
            got = float(np.sum(reward.slice(0, n).to_numpy(zero_copy_only=False), dtype=np.float64))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise CorruptFileError(path.parent, f"the episode's rewards cannot be read ({exc})") from exc
        if not np.isclose(got, said, rtol=1e-9, atol=1e-9, equal_nan=True):
            raise CorruptFileError(path, f"says the episode's rewards sum to {said}, its data sums to {got}: "
                                   "the dataset is damaged; restore it or download it again")


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


def _part_number(name: str) -> int:
    m = re.search(r"part-(\d+)", name)
    return int(m.group(1)) if m else 0


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
    meta = _json(meta_path)
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
            source: _PartEpisodes | _Hdf5Episodes = _Hdf5Episodes(
                stack.enter_context(open_hdf5(h5, allow_links=allow_hdf5_links)), h5)
        else:
            source = _PartEpisodes(Path(directory), data, fmt)
        _check_dataset(meta_path, meta, len(source), None)
    except BaseException:
        stack.close()
        raise

    def chunks(run: str) -> Iterator[EpisodeChunk]:
        episodes = steps = 0
        for k in range(len(source)):
            try:
                columns, row = source.read(k, spaces, jpeg)
                built = _schema.build("steps", {"run_id": run, **columns}, num_rows=row["num_steps"])
            except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
                raise CorruptFileError(source.where(k), f"the episode's data is damaged "
                                       f"({type(exc).__name__}: {exc}); restore the dataset or download "
                                       "it again") from exc
            rows = EpisodeRows()
            rows.add(row["episode_id"], num_steps=row["num_steps"], total=row["return"],
                     terminated=row["terminated"], truncated=row["truncated"],
                     partial_end=not row["terminated"] and not row["truncated"], metadata=row["metadata"])
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

    Raises:
        UnsupportedInputError: not a Minari dataset, or a data format other than arrow/parquet/hdf5.
        CorruptFileError: an episode file that cannot be read.
        HDF5RefusedError: ``main_data.hdf5`` reaches outside itself or declares more than it holds.
    """
    with read_minari(directory, run_id=run_id, allow_hdf5_links=allow_hdf5_links) as source:
        return ingest(store, source, name=name, progress=progress)


_HDF5_FILE = "main_data.hdf5"


class _PartEpisodes:
    """The episodes of an arrow or parquet dataset: one folder of part files each.

    Every folder and file is confined to the dataset's directory ``root``
    (:func:`rlarrow.core.confined.listed`): an episode folder, part file or ``metadata.json``
    that is a symlink out of it is refused before anything it names is looked at.
    """

    def __init__(self, root: Path, data: Path, fmt: str) -> None:
        self.root, self.fmt = root, fmt
        found = listed(root, data.relative_to(os.path.realpath(root)), "[0-9]*", what="the episode folder")
        self.dirs = sorted(((int(name), p) for name, p in found
                            if name.isascii() and name.isdigit() and p.is_dir()), key=lambda e: e[0])

    def __len__(self) -> int:
        return len(self.dirs)

    def where(self, k: int) -> Path:
        return self.dirs[k][1]

    def read(self, k: int, spaces: tuple[Any, Any], jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        episode_id, ep_dir = self.dirs[k]
        return _read_episode(self.root, ep_dir, episode_id, self.fmt, spaces, jpeg)


class _Hdf5Episodes:
    """The episodes of an HDF5 dataset: groups ``episode_<id>`` of ``main_data.hdf5``, read one at a time.

    Minari keeps each space's shape (a ``Box`` is an ``(N, *shape)`` dataset), Dict and
    Tuple spaces as groups (Tuple members ``_index_<i>``), JPEG-encoded images as rows of
    encoded bytes, infos as a group of per-step datasets, and the episode's metadata
    (``id``, ``seed``, ``total_steps``, ``options/...``) as the group's attributes.
    """

    def __init__(self, handle: Any, path: Path) -> None:
        self.handle, self.path, self.data = handle, path, path.parent
        with guarded(path, "the list of episodes"):
            found = [(int(m.group(1)), n) for n in handle if (m := re.fullmatch(r"episode_(\d+)", n))]
        self.names = [n for _, n in sorted(found)]

    def __len__(self) -> int:
        return len(self.names)

    def where(self, k: int) -> str:
        return f"{self.path} ({self.names[k]})"

    def read(self, k: int, spaces: tuple[Any, Any], jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        where = self.where(k)
        with guarded(self.path, f"episode group {self.names[k]!r}"):
            group = self.handle[self.names[k]]
            missing = [c for c in ("observations", "actions", "rewards", "terminations", "truncations")
                       if c not in group]
            if missing:
                raise CorruptFileError(where, f"an episode without Minari's dataset(s) {missing}")
            reward = np.asarray(group["rewards"][()])
            term, trunc = np.asarray(group["terminations"][()]), np.asarray(group["truncations"][()])
            n = len(reward)
            if reward.ndim != 1 or term.shape != (n,) or trunc.shape != (n,):
                raise CorruptFileError(where, f"rewards {reward.shape}, terminations {term.shape} and "
                                       f"truncations {trunc.shape} are not one value per step each")
            obs = _h5_column(group["observations"], spaces[0], jpeg, where, "observations", n + 1)
            action = _h5_column(group["actions"], spaces[1], jpeg, where, "actions", n)
            # (an empty infos group, which Minari's collector writes without record_infos: none, as
            # the arrow backend has none)
            has_infos = "infos" in group and len(group["infos"])
            infos = _h5_infos(group["infos"], where, n + 1) if has_infos else None
            ep_meta = nest({key: plain(v) for key, v in group.attrs.items()})  # options/a: unflattened
        if isinstance(ep_meta.get("seed"), float) and float(ep_meta["seed"]).is_integer():
            ep_meta["seed"] = int(ep_meta["seed"])  # as minari's reader gives it
        try:
            rlds = alignment.minari_to_rlds(action=[0] * n, reward=[0] * n, termination=term.tolist(),
                                            truncation=trunc.tolist(), num_observations=n + 1)
        except ValueError as exc:
            raise InvalidInputError(where, f"{exc}") from exc
        reward_arr = pa.array(reward.astype(np.float64))
        _check_episode(Path(where), ep_meta, n, reward_arr)
        return _assembled(int(self.names[k].split("_")[1]), n, obs, _append_null(action),
                          pa.concat_arrays([reward_arr, pa.nulls(1, pa.float64())]), rlds, infos, ep_meta,
                          float(np.sum(reward, dtype=np.float64)), bool(n) and bool(trunc[-1]))


def _assembled(episode_id: int, n: int, observation: Any, action: Any, reward: Any, rlds: dict[str, Any],
               infos: list[Any] | None, ep_meta: Any, total: float,
               truncated: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """An episode's ``steps`` columns and ``episodes`` row, from its N + 1 rows in RLDS alignment.

    ``truncated``: Minari's truncation flag at the last step, kept as it is: an episode can be
    both terminated and truncated there (the ``episodes`` row then says both).
    """
    columns = {
        "episode_id": episode_id,
        "step": np.arange(n + 1),
        "env_index": 0,
        "observation": observation,
        "action": action,
        "reward": reward,
        "discount": pa.nulls(n + 1, pa.float64()),
        "is_first": rlds["is_first"],
        "is_last": rlds["is_last"],
        "is_terminal": rlds["is_terminal"],
        "metadata": [{"infos": i} for i in infos] if infos is not None else None,
    }
    row = {
        "episode_id": episode_id,
        "num_steps": n + 1,
        "return": total,
        "terminated": bool(rlds["is_terminal"][-1]),
        "truncated": truncated,
        "metadata": ep_meta,
    }
    return columns, row


def _append_null(arr: pa.Array) -> pa.Array:
    """A column with a null row after its rows (RLDS: no action on the last step)."""
    if not len(arr):
        return pa.nulls(1, arr.type)
    out = pa.concat_arrays([arr, arr.slice(0, 1)])
    last = np.zeros(len(out), bool)
    last[-1] = True
    return with_null_rows(out, last)


def _h5_infos(group: Any, where: str, rows: int) -> list[Any]:
    """An infos group (datasets, nested groups) as one dict per step (numbers as NumPy scalars/arrays)."""
    found = leaves(group)
    columns = []
    for path, ds in found:
        raw = np.asarray(ds[()])
        # numbers keep their dtype (np.float32 stays np.float32 in the step's metadata types)
        values = list(raw) if raw.dtype.kind in "biuf" and raw.ndim else plain(raw)
        if not isinstance(values, list) or len(values) != rows:
            count = len(values) if isinstance(values, list) else 1
            raise CorruptFileError(where, f"infos/{path} holds {count} values for {rows} steps")
        columns.append(values)
    paths = [p for p, _ in found]
    return [nest({p: values[i] for p, values in zip(paths, columns, strict=True)}) for i in range(rows)]


def _is_image(space: dict[str, Any]) -> bool:
    """Minari's test for a space it stores as JPEG: a uint8 Box of 2 or 3 dims, at least 32x32, 0..255."""
    shape: list[Any] = list(space.get("shape") or [])
    low, high = np.asarray(space.get("low", 0)), np.asarray(space.get("high", 0))
    return (space.get("type") == "Box" and len(shape) in (2, 3) and shape[0] >= 32 and shape[1] >= 32
            and space.get("dtype") == "uint8" and bool(np.all(low == 0)) and bool(np.all(high == 255)))


def _h5_column(node: Any, space: Any, jpeg: bool, where: str, name: str, rows: int) -> pa.Array:
    """A dataset (or group, for Dict and Tuple spaces) of an HDF5 episode as a column of ``rows`` rows."""
    kind = space.get("type") if isinstance(space, dict) else None
    if kind in ("Dict", "Tuple"):
        if not hasattr(node, "keys"):
            raise CorruptFileError(where, f"{name} is a dataset; the dataset's {kind} space needs a group")
        subspaces: Any = space.get("subspaces") or ({} if kind == "Dict" else [])
        items = list(subspaces.items()) if kind == "Dict" else \
            [(str(i), s) for i, s in enumerate(subspaces)]
        keys = [k if kind == "Dict" else f"_index_{k}" for k, _ in items]
        if sorted(node) != sorted(keys):
            raise CorruptFileError(where, f"{name} holds {sorted(node)}; the dataset's {kind} space has "
                                   f"{keys}: the dataset is damaged or was written by another tool")
        children = [_h5_column(node[key], sub, jpeg, where, f"{name}.{k}", rows)
                    for key, (k, sub) in zip(keys, items, strict=True)]
        return pa.StructArray.from_arrays(children, names=[k for k, _ in items])
    if hasattr(node, "keys"):
        raise CorruptFileError(where, f"{name} is a group; its space ({kind}) needs a dataset")
    if len(node) != rows:
        raise CorruptFileError(where, f"{name} has {len(node)} rows; the episode needs {rows}")
    if kind == "Text":
        return pa.array([plain(v) for v in node[()].tolist()], pa.string())
    if jpeg and isinstance(space, dict) and _is_image(space):
        shape = tuple(int(d) for d in space["shape"])
        encoded = pa.array([np.asarray(row, np.uint8).tobytes() for row in node[()]], pa.binary())
        values = _decode_jpeg(encoded, shape, np.dtype(np.uint8), Path(where), name)
    else:
        values = np.asarray(node[()])
        if values.dtype.kind not in "biuf":
            raise CorruptFileError(where, f"{name} holds {values.dtype} values, not numbers")
        if isinstance(space, dict) and kind in _FLAT_SPACES + ("Discrete",):
            want = tuple(int(d) for d in space.get("shape") or ()) if kind != "Discrete" else ()
            if kind in ("MultiBinary", "MultiDiscrete") and not want:
                want = values.shape[1:]
            if values.shape[1:] != want:
                raise CorruptFileError(where, f"{name} has rows of shape {values.shape[1:]}; the dataset's "
                                       f"{kind} space has shape {want}: the dataset is damaged")
    return to_arrow(values, tensor_type(values.dtype, values.shape[1:], layout="auto"))


def _read_episode(root: Path, ep_dir: Path, episode_id: int, fmt: str, spaces: tuple[Any, Any],
                  jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """One episode folder as ``steps`` columns (all but ``run_id``), and its ``episodes`` row.

    ``root``: the dataset's directory, which its files must not lead out of; ``ep_dir``: the
    folder (where it leads, inside ``root``); ``spaces``: the dataset's observation and action
    spaces (Minari's JSON, decoded); ``jpeg``: whether image spaces are JPEG-encoded (the
    dataset's ``jpeg_encoding``).
    """
    try:
        return _episode(root, ep_dir, episode_id, fmt, spaces, jpeg)
    except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
        raise CorruptFileError(ep_dir, f"the episode's data is damaged ({type(exc).__name__}: "
                               f"{exc}); restore the dataset or download it again") from exc


def _episode(root: Path, ep_dir: Path, episode_id: int, fmt: str, spaces: tuple[Any, Any],
             jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = ep_dir.relative_to(os.path.realpath(root))
    suffix = "arrow" if fmt == "arrow" else "parquet"
    found = listed(root, folder, f"part-*.{suffix}", what="the episode file")
    parts = [p for _, p in sorted(found, key=lambda e: _part_number(e[0])) if p.is_file()]
    if not parts:
        raise CorruptFileError(ep_dir, "episode directory without part files")
    table = _concat(parts)
    n = table.num_rows - 1  # N actions, N + 1 observations
    if n < 0:
        raise CorruptFileError(parts[0], "an episode without rows")
    missing = [c for c in ("observations", "actions", "rewards", "terminations", "truncations")
               if c not in table.column_names]
    if missing:
        raise CorruptFileError(parts[0], f"an episode without Minari's column(s) {missing}")
    action, reward = table.column("actions"), table.column("rewards")
    term = table.column("terminations").slice(0, n).to_pylist()
    trunc = table.column("truncations").slice(0, n).to_pylist()
    try:
        rlds = alignment.minari_to_rlds(action=[0] * n, reward=[0] * n, termination=term,
                                        truncation=trunc, num_observations=n + 1)
    except ValueError as exc:
        raise InvalidInputError(parts[0], f"episode {episode_id}: {exc}") from exc
    ep_meta_path = inside(root, folder / "metadata.json", what="the episode's metadata file")
    ep_meta = _json(ep_meta_path) if ep_meta_path.is_file() else None
    _check_episode(ep_meta_path, ep_meta, n, reward)
    infos = _infos(parts[0], table)
    return _assembled(
        episode_id, n, _shaped(table.column("observations"), spaces[0], jpeg, parts[0], "observations"),
        alignment.last_null(_shaped(action, spaces[1], jpeg, parts[0], "actions"), n),
        alignment.last_null(reward.cast(pa.float64()), n), rlds, infos, ep_meta,
        float(np.sum(reward.slice(0, n).to_numpy(zero_copy_only=False), dtype=np.float64)),
        bool(n) and bool(trunc[-1]))


_FLAT_SPACES = ("Box", "MultiDiscrete", "MultiBinary")


def _shaped(col: pa.ChunkedArray | pa.Array, space: Any, jpeg: bool, path: Path, name: str) -> pa.Array:
    """A Minari column in its space's shape and order (what ``minari.load_dataset`` gives).

    Minari writes a ``Box`` (any rank), ``MultiDiscrete`` or ``MultiBinary`` value as a flat
    list, an image space as JPEG bytes when the dataset says ``jpeg_encoding``, Dict and
    Tuple values as structs (fields in the order of the values it was given). A column
    whose space is not described is kept as it is.
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not isinstance(space, dict):
        return arr
    kind = space.get("type")
    if kind in ("Dict", "Tuple"):
        subspaces: Any = space.get("subspaces") or ({} if kind == "Dict" else [])
        items = list(subspaces.items()) if kind == "Dict" else [(str(i), s) for i, s in enumerate(subspaces)]
        held = sorted(arr.type.field(i).name for i in range(arr.type.num_fields)) \
            if pa.types.is_struct(arr.type) else None
        if held != sorted(k for k, _ in items):
            raise CorruptFileError(path, f"the {name} column is {arr.type}, the dataset's {kind} space has "
                                   f"the fields {[k for k, _ in items]}: the dataset is damaged or was "
                                   "written by another tool")
        children = [_shaped(arr.field(k), sub, jpeg, path, f"{name}.{k}") for k, sub in items]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, names=[k for k, _ in items], mask=mask)
    if kind not in _FLAT_SPACES:
        return arr
    shape = tuple(int(d) for d in space.get("shape") or ())
    if kind == "MultiBinary" and not shape:
        n = space.get("n")
        shape = (int(n),) if isinstance(n, int) else tuple(int(d) for d in n or ())
    if kind == "MultiDiscrete" and not shape:
        shape = tuple(np.shape(space.get("nvec") or ()))
    dtype = np.dtype(space.get("dtype") or ("int8" if kind == "MultiBinary" else "float32"))
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        if not jpeg:
            raise CorruptFileError(path, f"the {name} column holds bytes, but the dataset says it is not "
                                   "JPEG-encoded (jpeg_encoding false): the dataset is damaged")
        values = _decode_jpeg(arr, shape, dtype, path, name)
    else:
        size = int(np.prod(shape, dtype=np.int64))
        try:
            nested = pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type)
            flat = arr.flatten() if nested else arr
            values = np.asarray(flat.to_numpy(zero_copy_only=False))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise CorruptFileError(path, f"the {name} column ({arr.type}) cannot be read as numbers ({exc}): "
                                   "the dataset is damaged") from exc
        if values.size != len(arr) * size:
            raise CorruptFileError(path, f"the {name} column holds {values.size} values for {len(arr)} "
                                   f"steps; its {kind} space has shape {shape} ({size} values a step): the "
                                   "dataset is damaged")
        values = values.astype(dtype, copy=False).reshape(len(arr), *shape)
    out = to_arrow(values, tensor_type(dtype, shape, layout="auto"))
    if arr.null_count:
        out = with_null_rows(out, arr.is_null().to_numpy(zero_copy_only=False))
    return out


def _decode_jpeg(arr: pa.Array, shape: tuple[int, ...], dtype: np.dtype[Any], path: Path, name: str) -> Any:
    """JPEG-encoded images as one ``(rows, *shape)`` array, decoded as Minari decodes them."""
    import io

    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingDependencyError(
            f"{path}: the {name} are JPEG-encoded images; decoding them needs Pillow, which is not "
            "installed: pip install pillow", name="PIL") from exc
    out = np.empty((len(arr), *shape), dtype)
    for i, data in enumerate(arr.to_pylist()):
        if data is None:
            out[i] = 0
            continue
        try:
            image = np.array(Image.open(io.BytesIO(data)))
        except (OSError, ValueError, SyntaxError) as exc:
            raise CorruptFileError(path, f"row {i} of the {name} column is not a readable JPEG image "
                                   f"({exc}): the dataset is damaged") from exc
        if image.shape != shape:
            raise CorruptFileError(path, f"row {i} of the {name} column is an image of shape "
                                   f"{image.shape}; the dataset's space says {shape}: the dataset is damaged")
        out[i] = image
    return out


# --------------------------------------------------------------------------- export

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
    spaces = tuple(_gym_space(specs.get(f"{k}_space") or specs.get(f"{k}_spec"), k)
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
        buffer = _episode_buffer(table, episode_id, meta, spaces, truncated, data_format, reward_spec)
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
                    truncated: bool | None, data_format: str, spec: Any) -> Any:
    """An episode's steps as Minari's ``EpisodeBuffer``, or None when it has no final observation.

    ``truncated``: the episode's ``episodes`` row's flag (None: none recorded): a terminal
    episode can be truncated too, as Minari had it; without a flag, an episode that ends
    without a terminal state is a truncated one.
    """
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from rlarrow.core.tensors import to_numpy

    rows = table.num_rows
    last = table.column("is_last")[rows - 1].as_py() if rows else False
    obs_col = table.column("observation").combine_chunks()
    if not rows or not last or obs_col.null_count or rows < 1:
        return None
    n = rows - 1
    obs = _for_space(to_numpy(obs_col, fill_value=0), spaces[0])
    act = _for_space(_rows_of(to_numpy(table.column("action").combine_chunks().slice(0, n), fill_value=0), n),
                     spaces[1])
    terminal = bool(table.column("is_terminal")[n].as_py())
    cut = (not terminal) if truncated is None else truncated
    infos = None
    texts = table.column("metadata").to_pylist()
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
    extra = {k: meta[k] for k in ("seed", "options") if isinstance(meta, dict) and meta.get(k) is not None}
    # ``spec``: the run's reward spec: its reward dtype (D4RL: float32), else float64
    scalar = isinstance(spec, dict) and spec.get("dtype") and not spec.get("shape")
    dtype = np.dtype(spec["dtype"]) if scalar and isinstance(spec, dict) else np.dtype(np.float64)
    return EpisodeBuffer(id=episode_id, observations=obs, actions=act,
                         rewards=table.column("reward").to_numpy(zero_copy_only=False)[:n].astype(dtype),
                         terminations=[False] * (n - 1) + [terminal] if n else [],
                         truncations=[False] * (n - 1) + [cut] if n else [],
                         infos=infos or {}, **extra)


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


def _for_space(values: Any, space: Any) -> Any:
    """NumPy columns in the structure a space wants: dicts for Dict, tuples for Tuple (fields "0", "1")."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: _for_space(values[k], sub) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_for_space(values[str(i)], sub) for i, sub in enumerate(space.spaces))
    return values


def _gym_space(desc: Any, what: str) -> Any:
    """A gymnasium space from what a run records: Minari's JSON, the gym recorder's description, or a spec."""
    from gymnasium import spaces

    if isinstance(desc, list):
        return spaces.Tuple([_gym_space(d, what) for d in desc])
    if not isinstance(desc, dict):
        raise InvalidInputError(None, f"the run records no {what} space or spec: a Minari dataset needs one")
    kind = desc.get("type", desc.get("kind"))
    if kind is None:  # the gym recorder's Dict space, or a dict of specs
        return spaces.Dict({str(k): _gym_space(v, what) for k, v in desc.items()})
    if "type" in desc:  # Minari's own JSON
        from minari.serialization import deserialize_space

        return deserialize_space(json.dumps(desc))
    if kind in ("Dict",):
        return spaces.Dict({str(k): _gym_space(v, what) for k, v in (desc.get("subspaces") or {}).items()})
    if kind in ("Tuple",):
        return spaces.Tuple([_gym_space(v, what) for v in desc.get("subspaces") or []])
    shape = tuple(int(d) for d in desc.get("shape") or ())
    dtype = np.dtype(desc.get("dtype") or "float32")
    if kind == "Discrete":
        return spaces.Discrete(int(desc["n"]), start=int(desc.get("start") or 0))
    if kind == "DiscreteArray":
        return spaces.Discrete(int(desc["num_values"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(desc["nvec"], dtype=dtype)
    if kind == "MultiBinary":
        return spaces.MultiBinary(desc.get("n") or list(shape))
    if kind in ("Box", "BoundedArray", "Array", "Spec"):
        low = desc.get("low", desc.get("minimum"))
        high = desc.get("high", desc.get("maximum"))
        if dtype.kind == "f":
            lo, hi = -np.inf, np.inf
        elif dtype.kind == "b":
            lo, hi = 0, 1
        else:
            info = np.iinfo(dtype.name)
            lo, hi = info.min, info.max
        low = np.broadcast_to(np.asarray(lo if low is None else low, dtype), shape)
        high = np.broadcast_to(np.asarray(hi if high is None else high, dtype), shape)
        return spaces.Box(low, high, shape, dtype)
    raise InvalidInputError(None, f"the run's {what} is a {kind}, which rlarrow cannot give Minari as a "
                            "space")
