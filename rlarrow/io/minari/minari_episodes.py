"""One Minari episode read: a folder of part files (arrow, parquet) or an HDF5 group.

:class:`PartEpisodes` and :class:`Hdf5Episodes` list a dataset's episodes and read one at a
time as ``steps`` columns (all but ``run_id``) and its ``episodes`` row: N + 1 rows in RLDS
alignment (the last holds the final observation, with null action and reward), each checked
against the episode's ``metadata.json`` (steps, reward sum). Columns get their space's shape
through :mod:`~rlarrow.io.minari.minari_spaces`; :func:`~rlarrow.io.minari.read_minari`
drives them.

Example:
    >>> from rlarrow.io.minari.minari_episodes import PartEpisodes  # doctest: +SKIP
    >>> columns, row = PartEpisodes(root, root / "data", "arrow").read(0, spaces, True)  # doctest: +SKIP

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import alignment
from rlarrow.core.confined import inside, listed
from rlarrow.core.episode_builder import outcome, returns, step_flags
from rlarrow.core.errors import CorruptFileError, InvalidInputError
from rlarrow.core.metadata import nest
from rlarrow.io.codecs.hdf5_files import guarded, leaves, plain
from rlarrow.io.minari.minari_spaces import h5_column, shaped_column

__all__: list[str] = []


def read_json(path: Path) -> Any:
    """A JSON file's value (a dataset's or an episode's ``metadata.json``).

    Raises:
        CorruptFileError: the file is not valid JSON.
    """
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


#: an episode's infos: the typed ones (a struct array, a row a step; None: none) and the others,
#: one dict a step (None: none), as :func:`split_infos` makes them
Infos = tuple["pa.Array | None", "list[Any] | None"]


def split_infos(found: list[tuple[str, Any]], rows: int) -> Infos:
    """Infos leaves ``(path, values)`` split: NumPy arrays of numbers (a row a step) typed, the rest per step.

    Paths are ``/``-joined (``"inner/ok"``); the typed ones become a struct (nested at ``/``,
    fields sorted at each level, as Minari's arrow backend keeps them), the others one dict a
    step (``metadata`` ``{"infos": ...}``), numbers in their NumPy dtypes.
    """
    from rlarrow.core.tensors import to_arrow

    typed: dict[str, Any] = {}
    rest: list[tuple[str, Any]] = []
    for path, values in sorted(found, key=lambda leaf: leaf[0].split("/")):
        if isinstance(values, np.ndarray) and values.dtype.kind in "biuf" and values.ndim \
                and len(values) == rows and 0 not in values.shape[1:]:
            typed[path] = values
        else:
            rest.append((path, values))
    struct = to_arrow(nest(typed)) if typed else None
    others = [nest({p: v[i] for p, v in rest}) for i in range(rows)] if rest else None
    return struct, others


def _infos(part: Path, table: pa.Table) -> Infos | None:
    """The ``infos`` column split into typed infos and the rest (None when the episode has none)."""
    if "infos" not in table.column_names:
        return None
    try:
        column = table.column("infos").combine_chunks()
        if not pa.types.is_struct(column.type) or _has_nulls(column):
            return None, [i for i in column.to_pylist()]  # (not one value a key a step: as it is)
        return split_infos(_arrow_leaves(column, ""), len(column))
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(part, f"the episode's infos cannot be read ({exc}): the file is "
                               "damaged") from exc


def _has_nulls(column: pa.Array) -> bool:
    if column.null_count:
        return True
    return pa.types.is_struct(column.type) and any(_has_nulls(column.field(i))
                                                    for i in range(column.type.num_fields))


def _arrow_leaves(column: pa.Array, prefix: str) -> list[tuple[str, Any]]:
    """A struct column's leaves: numbers (fixed-size lists of them too) as NumPy, others as Python values."""
    from rlarrow.core.tensors import tensor_dtype, to_numpy

    out: list[tuple[str, Any]] = []
    for i, field in enumerate(column.type):
        child = column.field(i)
        if pa.types.is_struct(child.type):
            out += _arrow_leaves(child, f"{prefix}{field.name}/")
            continue
        leaf = tensor_dtype(child.type)
        numbers = (pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)) and (
            pa.types.is_fixed_size_list(child.type) or child.type == leaf)
        out.append((f"{prefix}{field.name}", to_numpy(child) if numbers else child.to_pylist()))
    return out


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


def _part_number(name: str) -> int:
    m = re.search(r"part-(\d+)", name)
    return int(m.group(1)) if m else 0


class PartEpisodes:
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
        """Where episode ``k`` is, for messages (its folder; its group in the HDF5 file)."""
        return self.dirs[k][1]

    def read(self, k: int, spaces: tuple[Any, Any], jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Episode ``k`` as ``steps`` columns (all but ``run_id``) and its ``episodes`` row."""
        episode_id, ep_dir = self.dirs[k]
        return _read_episode(self.root, ep_dir, episode_id, self.fmt, spaces, jpeg)


class Hdf5Episodes:
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
        """Where episode ``k`` is, for messages (its folder; its group in the HDF5 file)."""
        return f"{self.path} ({self.names[k]})"

    def read(self, k: int, spaces: tuple[Any, Any], jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Episode ``k`` as ``steps`` columns (all but ``run_id``) and its ``episodes`` row."""
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
            obs = h5_column(group["observations"], spaces[0], jpeg, where, "observations", n + 1)
            action = h5_column(group["actions"], spaces[1], jpeg, where, "actions", n)
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
        return _assembled(int(self.names[k].split("_")[1]), n, obs, alignment.last_null(action, n),
                          alignment.last_null(reward_arr, n), rlds, infos, ep_meta, reward,
                          bool(n) and bool(trunc[-1]))


def _assembled(episode_id: int, n: int, observation: Any, action: Any, reward: Any, rlds: dict[str, Any],
               infos: Infos | None, ep_meta: Any, rewards: Any,
               truncated: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """An episode's ``steps`` columns and ``episodes`` row, from its N + 1 rows in RLDS alignment.

    Built by the one episode builder (:mod:`rlarrow.core.episode_builder`): the flags from how
    :func:`~rlarrow.core.alignment.minari_to_rlds` says the episode ends, the return from
    ``rewards`` (its N rewards as stored). ``action`` and ``reward`` have their last step null
    already (:func:`~rlarrow.core.alignment.last_null`). ``truncated``: Minari's truncation
    flag at the last step, kept as it is: an episode can be both terminated and truncated
    there (the ``episodes`` row then says both).
    """
    ended, terminal = bool(rlds["is_last"][-1]), bool(rlds["is_terminal"][-1])
    flags = step_flags([n + 1], is_last=ended, is_terminal=terminal)
    columns = {
        "episode_id": episode_id,
        "step": flags["step"],
        "env_index": 0,
        "observation": observation,
        "action": action,
        "reward": reward,
        "discount": pa.nulls(n + 1, pa.float64()),
        "is_first": flags["is_first"],
        "is_last": flags["is_last"],
        "is_terminal": flags["is_terminal"],
        "metadata": [{"infos": i} for i in infos[1]] if infos is not None and infos[1] is not None else None,
    }
    if infos is not None and infos[0] is not None:  # numbers: the typed infos column (steps 1.1)
        columns["infos"] = infos[0]
    row = {
        "episode_id": episode_id,
        "num_steps": n + 1,
        "return": float(returns(rewards, [0])[0]),
        **outcome(ended=ended, terminated=terminal, truncated=truncated),
        "metadata": ep_meta,
    }
    return columns, row


def _h5_infos(group: Any, where: str, rows: int) -> Infos:
    """An infos group (datasets, nested groups): numbers typed, the rest one dict a step (split_infos)."""
    found: list[tuple[str, Any]] = []
    for path, ds in leaves(group):
        raw = np.asarray(ds[()])
        # numbers keep their dtype (np.float32 stays np.float32)
        values = raw if raw.dtype.kind in "biuf" and raw.ndim else plain(raw)
        if not isinstance(values, (list, np.ndarray)) or len(values) != rows:
            count = len(values) if isinstance(values, (list, np.ndarray)) else 1
            raise CorruptFileError(where, f"infos/{path} holds {count} values for {rows} steps")
        found.append((path, values))
    return split_infos(found, rows)


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
    ep_meta = read_json(ep_meta_path) if ep_meta_path.is_file() else None
    _check_episode(ep_meta_path, ep_meta, n, reward)
    infos = _infos(parts[0], table)
    return _assembled(
        episode_id, n, shaped_column(table.column("observations"), spaces[0], jpeg, parts[0], "observations"),
        alignment.last_null(shaped_column(action, spaces[1], jpeg, parts[0], "actions"), n),
        alignment.last_null(reward.cast(pa.float64()), n), rlds, infos, ep_meta,
        reward.slice(0, n).to_numpy(zero_copy_only=False), bool(n) and bool(trunc[-1]))
