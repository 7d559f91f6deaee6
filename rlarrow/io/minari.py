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
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import alignment
from rlarrow.core import schema as _schema
from rlarrow.core.errors import (
    CorruptFileError,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedInputError,
)
from rlarrow.core.step_columns import declare_steps, same_fields
from rlarrow.core.store import StoreLike, opened
from rlarrow.core.tensors import tensor_type, to_arrow, with_null_rows
from rlarrow.io import EpisodesReport

__all__ = ["import_minari", "is_minari_dir"]


def _data_dir(path: str | os.PathLike[str]) -> Path | None:
    p = Path(path)
    for candidate in (p / "data", p):
        meta = candidate / "metadata.json"
        if meta.is_file():
            try:
                keys = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(keys, dict) and "data_format" in keys and "total_episodes" in keys:
                return candidate
    return None


def is_minari_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Minari dataset (or its ``data`` directory)."""
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


def _part_number(path: Path) -> int:
    m = re.search(r"part-(\d+)", path.name)
    return int(m.group(1)) if m else 0


def import_minari(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
) -> EpisodesReport:
    """Import a Minari dataset into ``store`` as one run (see the module docs).

    Raises:
        UnsupportedInputError: not a Minari dataset, or a data format other than arrow/parquet.
        CorruptFileError: an episode file that cannot be read.
    """
    from rlarrow.core.progress import bar

    data = _data_dir(directory)
    if data is None:
        raise UnsupportedInputError(
            directory, "not a Minari dataset (no data/metadata.json with data_format and total_episodes)"
        )
    meta = _json(data / "metadata.json")
    fmt = meta.get("data_format")
    if fmt not in ("arrow", "parquet"):
        raise UnsupportedInputError(
            data,
            f"Minari data format {fmt!r}; rlarrow reads 'arrow' and 'parquet' "
            "(HDF5 datasets: convert them with minari first)",
        )
    run_meta = {k: _space(v) for k, v in meta.items()}
    env_specs = {
        "observation_space": run_meta.get("observation_space"),
        "action_space": run_meta.get("action_space"),
    }
    episode_dirs = sorted(
        (p for p in data.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )
    _check_dataset(data / "metadata.json", meta, len(episode_dirs), None)
    spaces = (run_meta.get("observation_space"), run_meta.get("action_space"))
    jpeg = bool(meta.get("jpeg_encoding", True))
    with opened(store, create=True) as st:
        first = _read_episode(episode_dirs[0], fmt, spaces, jpeg) if episode_dirs else None
        types: dict[str, Any] = {}
        if first is not None:  # fixed before the run is added: a mismatch leaves nothing behind
            types = declare_steps(st, {name: first[0][name].type for name in ("observation", "action")})
        run = st.add_run(
            source="minari",
            run_id=run_id,
            name=name or meta.get("dataset_id"),
            source_path=os.fspath(directory),
            source_version=f"minari {meta.get('minari_version')}",
            alignment="minari",
            num_envs=1,
            metadata=run_meta,
            env_specs=env_specs,
        )
        report = EpisodesReport(run_id=run)
        ep_rows: dict[str, list[Any]] = {
            k: [] for k in ("episode_id", "num_steps", "return", "terminated", "truncated", "metadata")
        }
        with (
            st.writer("steps") as writer,
            bar(len(episode_dirs), "import minari", "episode", progress) as pbar,
        ):
            for k, ep_dir in enumerate(episode_dirs):
                try:
                    columns, row = first if k == 0 and first is not None else \
                        _read_episode(ep_dir, fmt, spaces, jpeg)
                    for key, type_ in types.items():
                        columns[key] = _in_order(columns[key], type_)
                    steps = _schema.build("steps", {"run_id": run, **columns}, num_rows=row["num_steps"],
                                          established=st.schema("steps"))
                except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
                    raise CorruptFileError(ep_dir, f"the episode's data is damaged ({type(exc).__name__}: "
                                           f"{exc}); restore the dataset or download it again") from exc
                writer.write(steps)
                for key, value in row.items():
                    ep_rows[key].append(value)
                report.episodes += 1
                report.steps += steps.num_rows
                pbar.update(1)
            _check_dataset(data / "metadata.json", meta, report.episodes, report.steps - report.episodes)
        if ep_rows["episode_id"]:
            st.append(
                "episodes",
                {
                    "run_id": run,
                    "env_index": 0,
                    "partial_start": False,
                    "partial_end": [
                        not t and not u
                        for t, u in zip(ep_rows["terminated"], ep_rows["truncated"], strict=True)
                    ],
                    **ep_rows,
                },
            )
        return report


def _read_episode(ep_dir: Path, fmt: str, spaces: tuple[Any, Any],
                  jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """One episode folder as ``steps`` columns (all but ``run_id``), and its ``episodes`` row.

    ``spaces``: the dataset's observation and action spaces (Minari's JSON, decoded);
    ``jpeg``: whether image spaces are JPEG-encoded (the dataset's ``jpeg_encoding``).
    """
    try:
        return _episode(ep_dir, fmt, spaces, jpeg)
    except (pa.ArrowException, UnicodeDecodeError) as exc:  # what lazy reads find late
        raise CorruptFileError(ep_dir, f"the episode's data is damaged ({type(exc).__name__}: "
                               f"{exc}); restore the dataset or download it again") from exc


def _episode(ep_dir: Path, fmt: str, spaces: tuple[Any, Any],
             jpeg: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    parts = sorted(ep_dir.glob(f"part-*.{'arrow' if fmt == 'arrow' else 'parquet'}"), key=_part_number)
    if not parts:
        raise CorruptFileError(ep_dir, "episode directory without part files")
    table = _concat(parts)
    episode_id = int(ep_dir.name)
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
    ep_meta_path = ep_dir / "metadata.json"
    ep_meta = _json(ep_meta_path) if ep_meta_path.is_file() else None
    _check_episode(ep_meta_path, ep_meta, n, reward)
    infos = _infos(parts[0], table)
    columns = {
        "episode_id": episode_id,
        "step": np.arange(n + 1),
        "env_index": 0,
        "observation": _shaped(table.column("observations"), spaces[0], jpeg, parts[0], "observations"),
        "action": _with_last_null(_shaped(action, spaces[1], jpeg, parts[0], "actions"), n),
        "reward": _with_last_null(reward.cast(pa.float64()), n),
        "discount": pa.nulls(n + 1, pa.float64()),
        "is_first": rlds["is_first"],
        "is_last": rlds["is_last"],
        "is_terminal": rlds["is_terminal"],
        "metadata": [{"infos": i} for i in infos] if infos is not None else None,
    }
    row = {
        "episode_id": episode_id,
        "num_steps": n + 1,
        "return": float(np.sum(reward.slice(0, n).to_numpy(zero_copy_only=False), dtype=np.float64)),
        "terminated": bool(rlds["is_terminal"][-1]),
        "truncated": bool(rlds["is_last"][-1] and not rlds["is_terminal"][-1]),
        "metadata": ep_meta,
    }
    return columns, row


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


def _in_order(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """A struct column with its fields in ``type_``'s order (when only the order differs)."""
    if arr.type == type_ or not pa.types.is_struct(type_) or not same_fields(arr.type, type_):
        return arr
    names = [type_.field(i).name for i in range(type_.num_fields)]
    children = [_in_order(arr.field(k), type_.field(k).type) for k in names]
    return pa.StructArray.from_arrays(children, names=names, mask=arr.is_null() if arr.null_count else None)


def _with_last_null(col: pa.ChunkedArray | pa.Array, n: int) -> pa.Array:
    """The first ``n`` values, then a null (RLDS: no action or reward on the last step)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr.type, pa.ExtensionType) or pa.types.is_fixed_size_list(arr.type):
        last = np.zeros(n + 1, bool)
        last[n] = True
        return with_null_rows(arr.slice(0, n + 1), last)
    return pa.concat_arrays([arr.slice(0, n), pa.nulls(1, arr.type)])
