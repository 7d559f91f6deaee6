"""Writing RLDS: any episode source as a TFDS directory that ``tfds.builder_from_directory`` reads.

:func:`write_rlds` writes a source (one read from any format, or a stored run read with
:func:`rlarrow.core.run_source.read_run`); :func:`export_rlds` is ``write_rlds(read_run(store))``
with the episodes of no steps a store keeps added back. The shards are written as episodes
come (one in memory at a time), under temporary names renamed ``-of-N`` once each split's
count is known.

Example:
    >>> import tempfile
    >>> from rlarrow.io.rlds import read_rlds, write_rlds  # doctest: +SKIP
    >>> write_rlds(read_rlds("rlds/catch/1.0.0"), tempfile.mkdtemp() + "/copy")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import metadata as _metadata
from rlarrow.core.confined import file_name_part
from rlarrow.core.sources import EpisodeChunk, EpisodeSource
from rlarrow.core.store import StoreLike
from rlarrow.io.rlds.rlds_dataset import Feature, example_class, parse_features

__all__ = ["RldsWriteOptions", "export_rlds", "write_rlds"]


@dataclass(frozen=True)
class RldsWriteOptions:
    """How an RLDS dataset is written: the keywords :func:`write_rlds` takes beyond ``overwrite``.

    ``rlarrow convert INPUT --to rlds`` builds one from ``--episodes-per-shard``.

    Attributes:
        episodes_per_shard: episodes a TFRecord shard holds at most.

    Raises:
        ArgumentError: a count below 1.

    Example:
        >>> RldsWriteOptions(episodes_per_shard=10).episodes_per_shard
        10
    """

    episodes_per_shard: int = 1000

    def __post_init__(self) -> None:
        _arguments.integer(self.episodes_per_shard, "episodes_per_shard", minimum=1)


def export_rlds(
    store: StoreLike,
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
    episodes_per_shard: int = 1000,
) -> Path:
    """Write a run as an RLDS dataset in a TFDS directory that ``tfds.builder_from_directory`` reads.

    ``write_rlds(read_run(store, run_id=run_id), directory)``, with the run's episodes of no
    steps (an RLDS dataset can hold them; a stored run keeps only their ``episodes`` rows) put
    back in their places: see :func:`write_rlds` for what is written.

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``.
        MissingDependencyError: protobuf is missing (``pip install 'rlarrow[rlds]'``).

    Example:
        >>> export_rlds("runs.rlarrow", "rlds/my_dataset/1.0.0")  # doctest: +SKIP
    """
    from rlarrow.core.run_source import read_run
    from rlarrow.core.targets import check_target

    check_target(directory, overwrite=overwrite, what="an RLDS export")
    example_class()
    _arguments.integer(episodes_per_shard, "episodes_per_shard", minimum=1)
    with read_run(store, run_id=run_id) as source:
        return write_rlds(_with_empty_episodes(source, store), directory, overwrite=overwrite,
                          episodes_per_shard=episodes_per_shard)


def _with_empty_episodes(source: EpisodeSource, store: StoreLike) -> EpisodeSource:
    """``source`` (a stored run, in episode id order) with the run's episodes of no steps merged in."""
    import pyarrow.compute as pc

    from rlarrow.core.store import opened

    with opened(store) as st:
        rows = st.read("episodes", filter=(pc.field("run_id") == source.run_id)
                       & ((pc.field("num_steps") == 0) | pc.field("num_steps").is_null()))
    if not rows.num_rows:
        return source
    rows = rows.sort_by("episode_id")
    ids = rows.column("episode_id").to_pylist()

    def chunks(run_as: str) -> Iterator[EpisodeChunk]:
        from rlarrow.core import schema as _schema
        from rlarrow.core.ingest import run_rows

        empty = _schema.table("steps").arrow_schema().empty_table()
        k = 0
        for chunk in source.with_run_id(run_as):
            first = chunk.steps.column("episode_id")[0].as_py() if chunk.steps.num_rows else None
            while first is not None and k < len(ids) and ids[k] <= first:
                if ids[k] < first:
                    yield EpisodeChunk(chunk.steps.slice(0, 0), run_rows(rows.slice(k, 1), run_as))
                k += 1
            yield chunk
        for i in range(k, len(ids)):
            yield EpisodeChunk(empty, run_rows(rows.slice(i, 1), run_as))

    return EpisodeSource(source.run, source.types, chunks, run_id=source.run_id,
                         episodes=source.episodes_hint)


def write_rlds(
    source: EpisodeSource,
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    episodes_per_shard: int = 1000,
) -> Path:
    """Write an episode source as an RLDS dataset in a TFDS directory (``tfds.builder_from_directory``).

    ``directory`` gets ``dataset_info.json``, ``features.json`` and the TFRecord shards
    ``<name>-<split>.tfrecord-<i>-of-<n>``, one ``tf.train.Example`` per episode, as ``tfds``
    writes them (no TensorFlow needed). A source read from RLDS (:func:`~rlarrow.io.rlds.read_rlds`,
    or a run imported from it) keeps its features, splits, episode and step fields, ClassLabel
    names and the ``is_last`` values it kept aside (``rlds_last``); its JPEG images are written
    as PNG, losslessly (JPEG again would change pixels), unless they were kept encoded. Other
    sources get a ``train`` split and features made from their first episode's steps: tensors,
    float64 reward and discount (float64 values stored as raw bytes, exactly, where TFDS's float
    lists would round them to float32; a source without discounts gets dm_env's: 1, 0 into a
    terminal state), the three flags.

    Args:
        source: what a format's ``read_<format>`` or :func:`~rlarrow.core.run_source.read_run` gave.
        directory: the dataset's version folder to write (new or empty).
        overwrite: replace what ``directory`` holds.
        episodes_per_shard: episodes a shard holds at most.

    Raises:
        InvalidInputError: ``directory`` holds something and not ``overwrite``; a split or label
            name that cannot name a file.
        MissingDependencyError: protobuf is missing (``pip install 'rlarrow[rlds]'``).

    Example:
        >>> from rlarrow.io.minari import read_minari  # doctest: +SKIP
        >>> write_rlds(read_minari("cartpole/random-v0"), "rlds/cartpole/1.0.0")  # doctest: +SKIP
    """
    from rlarrow.core.targets import check_target, fresh_directory

    check_target(directory, overwrite=overwrite, what="an RLDS export")
    example = example_class()
    _arguments.integer(episodes_per_shard, "episodes_per_shard", minimum=1)
    meta = source.run.metadata if isinstance(source.run.metadata, dict) else {}
    mine = source.run.source == "rlds" and isinstance(meta.get("features"), dict)
    info = dict(meta.get("dataset_info") or {}) if mine else {}
    name = re.sub(r"[^a-z0-9_]+", "_", str(info.get("name") or source.run.name or "rlarrow").lower())
    name = name or "rlds"
    labels: dict[str, Any] = meta["labels"] if mine and isinstance(meta.get("labels"), dict) else {}
    for key in labels:
        file_name_part(str(key), what="the ClassLabel feature", fix=_RENAME)
    with fresh_directory(directory, overwrite=overwrite, what="an RLDS export") as tmp:
        first, episodes = _first_with_steps(source.by_episode())
        features = _features(meta, mine, first)
        root = parse_features(features)
        with _Shards(Path(tmp), name, episodes_per_shard) as shards:
            for table, row in episodes:
                em = _episode_meta(row)
                split = (em.get("rlds") or {}).get("split") if mine and isinstance(em, dict) else None
                shards.write(str(split or "train"), _serialize(example, root, table, em, mine))
        kept = {k: v for k, v in info.items() if k not in ("splits", "fileFormat", "name")}
        out_info = {
            **kept,
            "fileFormat": "tfrecord",
            "name": name,
            "splits": shards.splits,
            "version": str(info.get("version") or "1.0.0"),
        }
        (tmp / "dataset_info.json").write_text(json.dumps(out_info, indent=1))
        (tmp / "features.json").write_text(json.dumps(features, indent=1))
        for key, names in labels.items():  # ClassLabel names
            (tmp / f"{key}.labels.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    return Path(directory)


_Episodes = Iterator[tuple[pa.Table, dict[str, Any] | None]]


def _first_with_steps(episodes: _Episodes) -> tuple[pa.Table | None, _Episodes]:
    """(the first episode's steps that has any, or None; all the episodes again, in their order).

    Episodes of no steps before it are held (they are rows, no steps).
    """
    held: list[tuple[pa.Table, dict[str, Any] | None]] = []
    for table, row in episodes:
        held.append((table, row))
        if table.num_rows:
            break

    def again() -> _Episodes:
        yield from held
        yield from episodes

    first = held[-1][0] if held and held[-1][0].num_rows else None
    return first, again()


def _features(meta: dict[str, Any], mine: bool, first: pa.Table | None) -> Any:
    """features.json: a source read from RLDS keeps its own; others get one made from their first steps."""
    if not mine:
        return _features_of(first, _typed_infos(first) if first is not None else None)
    if meta.get("images") == "encoded":  # the shards' own bytes, written back as they are: JPEG stays
        return meta["features"]
    return _png_images(meta["features"])


class _Shards:
    """The shard files of each split, written as episodes come, renamed ``-of-N`` when closed."""

    def __init__(self, tmp: Path, name: str, per_shard: int) -> None:
        self.tmp, self.name, self.per_shard = tmp, name, per_shard
        self.open: dict[str, tuple[IO[bytes], int]] = {}  # split: (its current shard, episodes in it)
        self.written: dict[str, list[tuple[Path, int, int]]] = {}  # split: [(file, episodes, bytes)]
        self.splits: list[dict[str, Any]] = []

    def __enter__(self) -> _Shards:
        return self

    def write(self, split: str, record: bytes) -> None:
        """Append one serialized episode to ``split``'s current shard (a new one when it is full)."""
        from rlarrow.io.codecs.tfrecord import frame_records

        if split not in self.written:  # (the shards' names: from the source, which a hostile dataset filled)
            file_name_part(split, what="the split", fix=_RENAME)
            self.written[split] = []
        fh, count = self.open.get(split) or (None, 0)
        if fh is None or count >= self.per_shard:
            if fh is not None:
                fh.close()
            path = self.tmp / f"{self.name}-{split}.tfrecord-{len(self.written[split]):05d}"
            fh, count = open(path, "wb"), 0  # noqa: SIM115 - closed when full or by __exit__
            self.written[split].append((path, 0, 0))
        framed = frame_records([record])
        fh.write(framed)
        path, episodes, size = self.written[split][-1]
        self.written[split][-1] = (path, episodes + 1, size + len(framed))
        self.open[split] = (fh, count + 1)

    def __exit__(self, *exc: object) -> None:
        for fh, _ in self.open.values():
            fh.close()
        if exc[0] is not None:
            return
        for split, files in self.written.items():
            for path, _, _ in files:
                path.rename(f"{path}-of-{len(files):05d}")
            self.splits.append({
                "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
                "name": split,
                "numBytes": str(sum(size for _, _, size in files)),
                "shardLengths": [str(count) for _, count, _ in files],
            })


def _episode_meta(row: dict[str, Any] | None) -> Any:
    """An ``episodes`` row's metadata: an RLDS episode's fields and ``rlds`` place (others' go unwritten)."""
    return None if row is None else _metadata.decode(row.get("metadata"), row.get("metadata_types"))


_RENAME = ("an RLDS export names its files after it; rlarrow has no command to rename it in a store: "
           "rename it in the dataset and import that again")

_TENSOR_CLASS = "tensorflow_datasets.core.features.tensor_feature.Tensor"


def _tensor_json(dtype: np.dtype[Any], shape: tuple[int, ...]) -> dict[str, Any]:
    encoding = "bytes" if dtype == np.float64 else "none"  # float_list would round them to float32
    return {
        "pythonClassName": _TENSOR_CLASS,
        "tensor": {
            "shape": {"dimensions": [str(d) for d in shape]} if shape else {},
            "dtype": dtype.name,
            "encoding": encoding,
        },
    }


def _feature_json(values: Any) -> dict[str, Any]:
    """A (nested) dict of tensors, or a tensor, as TFDS features (a FeaturesDict of Tensors)."""
    if isinstance(values, dict):
        return {
            "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "featuresDict": {"features": {k: _feature_json(v) for k, v in values.items()}},
        }
    return _tensor_json(values.dtype, values.shape[1:])


def _features_of(table: pa.Table | None, infos: dict[str, Any] | None = None) -> dict[str, Any]:
    """features.json for a run that was not imported from RLDS: from its first episode's columns.

    ``infos`` (its typed infos, as :func:`_typed_infos` gives them) become step fields of their own.
    """
    from rlarrow.core.tensors import to_numpy

    steps: dict[str, Any] = {}
    if table is not None:
        for key in ("observation", "action"):
            if key in table.column_names:
                steps[key] = _feature_json(to_numpy(table.column(key).combine_chunks(), fill_value=0))
    for key in ("reward", "discount"):
        steps[key] = _tensor_json(np.dtype(np.float64), ())
    for key in ("is_first", "is_last", "is_terminal"):
        steps[key] = _tensor_json(np.dtype(bool), ())
    for key, values in (infos or {}).items():
        steps[key] = _feature_json(values)
    return {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                "steps": {
                    "pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                    "sequence": {
                        "feature": {
                            "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                            "featuresDict": {"features": steps},
                        },
                        "length": "-1",
                    },
                }
            }
        },
    }


def _png_images(spec: Any) -> Any:
    """features.json with every JPEG image feature made PNG (the pixels, written losslessly)."""
    if isinstance(spec, dict):
        out = {k: _png_images(v) for k, v in spec.items()}
        if "image" in out and isinstance(out["image"], dict) and out["image"].get("encodingFormat") == "jpeg":
            out["image"] = {**out["image"], "encodingFormat": "png"}
        return out
    if isinstance(spec, list):
        return [_png_images(v) for v in spec]
    return spec


def _serialize(example: Any, root: Feature, table: pa.Table, ep_meta: Any, mine: bool) -> bytes:
    """One episode's steps (and fields) as a serialized ``tf.train.Example``."""
    from rlarrow.core.tensors import to_numpy

    n = table.num_rows
    steps_feature = root.children["steps"].item
    assert steps_feature is not None
    metas = (_metadata.decode_column(table.column("metadata").to_pylist(),
                                     table.column("metadata_types").to_pylist())
             if "metadata" in table.column_names and "metadata_types" in table.column_names else [None] * n)
    last = (metas[-1] or {}).get("rlds_last", {}) if n and isinstance(metas[-1], dict) else {}
    typed = _typed_infos(table)
    values: dict[str, Any] = {}
    for key, feature in steps_feature.children.items():
        if key in ("observation", "action"):
            column = (
                to_numpy(table.column(key).combine_chunks(), fill_value=0)
                if key in table.column_names
                else None
            )
            if key == "action" and column is not None and n and "action" in last:
                column = _with_last(column, last["action"])
            values[key] = _merge(column, _field_of(metas, key), feature)
        elif key in ("reward", "discount"):
            stored = table.column(key).combine_chunks()
            floats = np.nan_to_num(np.asarray(stored.to_numpy(zero_copy_only=False), np.float64), nan=0.0)
            if key == "discount" and not mine and stored.null_count == n:
                # a run that recorded no discount (gym, Minari, ...): dm_env's, 1 but into a terminal state
                floats = np.ones(n)
                if n >= 2 and bool(table.column("is_terminal")[n - 1].as_py()):
                    floats[n - 2] = 0.0
            if n and key in last:
                floats[-1] = last[key]
            values[key] = floats
        elif key in ("is_first", "is_last", "is_terminal"):
            values[key] = np.asarray(table.column(key).to_numpy(zero_copy_only=False), bool)
        else:  # a step field of its own: typed infos (steps 1.1), else step metadata (text, steps 1.0)
            values[key] = _merge((typed or {}).get(key), _field_of(metas, key), feature)
    message = example()
    _fill(message, steps_feature, "steps", values, n)
    fields = {k: v for k, v in (ep_meta or {}).items() if k != "rlds"} if mine else {}
    for key, feature in root.children.items():
        if key != "steps":
            _fill(message, feature, key, fields.get(key), None)
    return bytes(message.SerializeToString())


def _with_last(column: Any, value: Any) -> Any:
    if isinstance(column, dict):
        return {k: _with_last(v, value[k]) for k, v in column.items()}
    column = np.array(column)
    column[-1] = value
    return column


def _field_of(metas: list[Any], key: str) -> list[Any]:
    """Each step's metadata field ``key`` (None where a step has none)."""
    return [m.get(key) if isinstance(m, dict) else None for m in metas]


def _merge(column: Any, from_meta: list[Any], feature: Feature) -> Any:
    """A step field's values: its tensors, with the fields kept in step metadata (text) put back, nested."""
    if feature.kind != "dict":
        return column if column is not None else from_meta
    out = dict(column) if isinstance(column, dict) else {}
    for key, child in feature.children.items():
        out[key] = _merge(out.get(key), _field_of(from_meta, key), child)
    return out


#: the step fields RLDS defines: a typed info of one of these names is written under ``infos/<name>``
_RLDS_FIELDS = ("observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal")


def _typed_infos(table: pa.Table) -> dict[str, Any] | None:
    """The steps' typed ``infos`` (steps 1.1) as nested NumPy arrays, by the step field each is written as.

    A field is written under its own name (``qpos``, LeRobot's ``frame_index``), nested fields as
    nested features; one named as an RLDS field (``reward``) goes under ``infos/``. A step with
    null infos (the final step after a D4RL or LeRobot episode's last row) gets zeros: RLDS has no
    null, as for the last step's action. None: no typed infos (steps 1.0 keep them in metadata).
    """
    from rlarrow.core.metadata import nest
    from rlarrow.core.step_columns import infos_leaves

    typed = infos_leaves(table)
    if typed is None or not typed[0]:
        return None
    leaves, valid = typed
    out: dict[str, Any] = {}
    for path, values in leaves.items():
        values = np.array(values)
        values[~valid] = 0  # (NaN in the null rows' float leaves: a NaN of a step's own is kept)
        out[("infos/" if path.split("/")[0] in _RLDS_FIELDS else "") + path] = values
    nested: dict[str, Any] = nest(out)
    return nested


def _fill(message: Any, feature: Feature, key: str, value: Any, rows: int | None) -> None:
    """Put ``value`` (for ``rows`` steps, or one value) into the Example under ``key``, as TFDS encodes it."""
    if feature.kind == "dict":
        for k, child in feature.children.items():
            _fill(
                message, child, f"{key}/{k}", (value or {}).get(k) if isinstance(value, dict) else None, rows
            )
        return
    entry = message.features.feature[key]
    n = 1 if rows is None else rows
    items = value if rows is not None else [value]
    if feature.kind == "text":
        entry.bytes_list.value.extend([(v if isinstance(v, str) else "").encode("utf-8") for v in items])
        return
    if feature.kind == "image":
        from PIL import Image

        if (isinstance(items, np.ndarray) and items.dtype == object) or (
            isinstance(items, list) and all(isinstance(v, bytes) for v in items)
        ):  # kept encoded: the bytes as they were read
            entry.bytes_list.value.extend([bytes(v) for v in items])
            return
        for image in np.asarray(items).reshape(n, *np.shape(items)[1:]):
            buffer = io.BytesIO()
            Image.fromarray(image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image).save(
                buffer, "PNG"
            )
            entry.bytes_list.value.append(buffer.getvalue())
        return
    dtype = feature.dtype if feature.dtype is not None else np.dtype(np.float32)
    array = np.asarray(
        value if value is not None else np.zeros((n, *feature.shape) if rows else feature.shape), dtype
    )
    if feature.encoding in ("bytes", "zlib"):
        rows_of = array.reshape(n, -1) if rows is not None else array.reshape(1, -1)
        for row in rows_of:
            raw = row.astype(dtype.newbyteorder("<")).tobytes()
            entry.bytes_list.value.append(zlib.compress(raw) if feature.encoding == "zlib" else raw)
    elif dtype.kind == "f":
        entry.float_list.value.extend(array.reshape(-1).astype(np.float32).tolist())
    elif dtype.kind in "biu":
        entry.int64_list.value.extend(array.reshape(-1).astype(np.int64).tolist())
    else:
        entry.bytes_list.value.extend([bytes(v) for v in array.reshape(-1)])
