"""Reading an RLDS dataset: its episodes decoded, as an episode source, and imported into a store.

:func:`read_rlds` is the reader (an :class:`~rlarrow.core.sources.EpisodeSource`, one chunk
an episode, no store); :func:`import_rlds` is ``ingest(store, read_rlds(...))``;
:func:`read_episodes` gives the decoded episodes themselves (NumPy). See
:mod:`rlarrow.io.rlds` for what is read and how it is stored.

Example:
    >>> from rlarrow.io.rlds import read_rlds  # doctest: +SKIP
    >>> import polars as pl  # doctest: +SKIP
    >>> steps = pl.from_arrow(read_rlds("tensorflow_datasets/rlds_catch/1.0.0").steps())  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.alignment import last_null
from rlarrow.core.confined import inside
from rlarrow.core.errors import ArgumentError, CorruptFileError, UnsupportedInputError
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.sources import EpisodeChunk, EpisodeRows, EpisodeSource, RunInfo
from rlarrow.core.store import StoreLike
from rlarrow.core.tensors import tensor_type, to_arrow
from rlarrow.io.rlds.rlds_dataset import (
    Feature,
    class_labels,
    dataset_dir,
    example_class,
    feature_values,
    parsed_features,
    read_json,
    shard_files,
)
from rlarrow.io.rlds.rlds_decoding import decode_feature

__all__ = ["Episode", "RldsOptions", "import_rlds", "read_episodes", "read_rlds"]

#: how :func:`import_rlds` stores images: decoded to uint8 tensors, or kept as their PNG/JPEG bytes
IMAGE_MODES = ("decode", "encoded")
#: a chunk of :func:`read_rlds` holds whole episodes up to this many bytes of steps (or one larger episode)
CHUNK_BYTES = 16 << 20
#: the step fields RLDS defines; the rest of a step is its metadata
RLDS_STEP_FIELDS = ("observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal")


@dataclass(frozen=True)
class RldsOptions:
    """How an RLDS dataset is read: what :func:`read_rlds` and :func:`import_rlds` take.

    Attributes:
        splits: the splits to read (None: every one, in ``dataset_info.json``'s order).
        images: ``"decode"`` (uint8 tensors, ``tfds``'s pixels) or ``"encoded"`` (each
            image's PNG/JPEG bytes as the shard holds them, a ``binary`` field, decoded on
            demand with :func:`~rlarrow.io.rlds.decode_image`; an RLDS export writes the same
            bytes back).

    Raises:
        ArgumentError: an image mode other than :data:`IMAGE_MODES`, or splits that are not names.

    Example:
        >>> RldsOptions(splits=["train"], images="encoded")
        RldsOptions(splits=('train',), images='encoded')
    """

    #: options that apply to RLDS inputs only: set with none given, an import says to leave them out
    only_with_inputs: ClassVar[tuple[str, ...]] = ("images",)
    splits: tuple[str, ...] | None = None
    images: str = "decode"

    def __post_init__(self) -> None:
        if self.images not in IMAGE_MODES:
            raise ArgumentError(f"images={self.images!r}: one of {', '.join(IMAGE_MODES)}")
        names = _arguments.names(self.splits, "splits", what="split name")
        object.__setattr__(self, "splits", None if names is None else tuple(names))


@dataclass
class Episode:
    """One decoded RLDS episode: its steps' fields (NumPy, dicts of them) and its own fields."""

    steps: dict[str, Any]
    fields: dict[str, Any]
    num_steps: int
    split: str
    shard: str
    index: int  #: its place in its split, as tfds reads it
    number: int = 0  #: its place in the dataset (splits in dataset_info.json's order): its episode_id


def read_episodes(
    directory: str | os.PathLike[str], *, splits: list[str] | None = None, images: str = "decode"
) -> Iterator[Episode]:
    """The episodes of a TFDS RLDS dataset, decoded, one at a time, shard by shard (see the module docs).

    ``images="encoded"`` keeps each step's images as the PNG/JPEG bytes the shard holds (an
    Arrow binary array; :func:`~rlarrow.io.rlds.decode_image` decodes one as ``tfds`` does).
    :func:`read_rlds` gives the same episodes as Arrow rows.

    Raises:
        UnsupportedInputError: not a TFDS dataset of TFRecord shards, or a feature not decoded.
        CorruptFileError: a record that fails its checksum or does not match ``features.json``,
            or shards that hold other episode counts than ``dataset_info.json`` says.

    Example:
        >>> for ep in read_episodes("tensorflow_datasets/rlds_catch/1.0.0"):  # doctest: +SKIP
        ...     print(ep.split, ep.num_steps)
    """
    splits = _arguments.names(splits, "splits", what="split name")
    yield from _Dataset(directory).episodes(splits, images == "encoded")


class _Dataset:
    """A TFDS RLDS dataset opened: its folder, ``dataset_info.json``, ``features.json`` and feature tree.

    Raises (when made): what :func:`read_episodes` raises of the folder and its JSON.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        data = dataset_dir(directory)
        if data is None:
            raise UnsupportedInputError(
                directory, "not a TFDS dataset (dataset_info.json, features.json and *.tfrecord-* shards)"
            )
        self.data = data
        self.info = read_json(inside(data, "dataset_info.json"))
        self.features = read_json(inside(data, "features.json"))
        self.root = root = parsed_features(data, self.features)
        if root.kind != "dict" or "steps" not in root.children or root.children["steps"].kind != "sequence":
            raise UnsupportedInputError(
                data / "features.json", "not an RLDS dataset: no 'steps' sequence feature"
            )
        item = root.children["steps"].item
        assert item is not None
        self.steps_feature: Feature = item

    def total(self, splits: list[str] | tuple[str, ...] | None) -> int:
        """The episodes ``dataset_info.json`` counts in ``splits`` (0: no counts)."""
        return sum(
            int(x)
            for s in self.info.get("splits") or []
            if splits is None or s.get("name") in splits
            for x in s.get("shardLengths") or []
        )

    def episodes(self, splits: list[str] | tuple[str, ...] | None, encoded: bool) -> Iterator[Episode]:
        """The episodes of ``splits`` (None: all), decoded, numbered across the dataset's splits."""
        others = {k: v for k, v in self.root.children.items() if k != "steps"}
        example = example_class()
        name = str(self.info.get("name") or self.data.name)
        first_of_split = 0  # the dataset's episodes before this split (by dataset_info.json's counts)
        for split in self.info.get("splits") or []:
            split_name = str(split.get("name"))
            lengths = [int(x) for x in split.get("shardLengths") or []]
            before = first_of_split
            first_of_split += sum(lengths)
            if splits is not None and split_name not in splits:
                continue
            shards = shard_files(self.data, name, split_name)
            if lengths and len(lengths) != len(shards):
                raise CorruptFileError(
                    self.data / "dataset_info.json",
                    f"split {split_name!r} has {len(lengths)} shards; "
                    f"the directory holds {len(shards)} of it: shards are missing or extra",
                )
            read = 0  # episodes read in this split so far
            for s, shard in enumerate(shards):
                # numbered by the counts dataset_info.json declares, so that a damaged shard
                # (announced) does not renumber the episodes after it; without counts, by what is read
                index = sum(lengths[:s]) if lengths else read
                count = 0
                for payload, truncated in self._records(shard):
                    if payload is None:
                        if lengths and count != lengths[s] and not truncated:
                            raise CorruptFileError(
                                shard,
                                f"holds {count} episodes; dataset_info.json says {lengths[s]}: the "
                                "dataset is damaged or incomplete",
                            )
                        break
                    ep = _episode(example, payload, self.steps_feature, others, shard, split_name,
                                  index + count, encoded=encoded)
                    ep.number = before + index + count
                    yield ep
                    count += 1
                    read += 1
            if not lengths:  # (no counts: the next split's ids follow what was read)
                first_of_split += read

    def _records(self, shard: Path) -> Iterator[tuple[bytes | None, bool]]:
        """``(payload, False)`` for each record of ``shard``, then ``(None, truncated)`` at its end."""
        from rlarrow.io.codecs.tfrecord import HEADER_BYTES, ReadCounts, read_records

        log = ReadCounts()
        with open(inside(self.data, shard.name, what="the shard"), "rb") as fh:
            for chunk in read_records(fh, shard, log=log):
                for off, length in zip(chunk.offsets.tolist(), chunk.lengths.tolist(), strict=True):
                    yield chunk.data[off + HEADER_BYTES : off + HEADER_BYTES + length], False
        yield None, bool(log.truncated)

def _episode(
    example: Any,
    payload: bytes,
    steps_feature: Feature,
    others: dict[str, Feature],
    shard: Path,
    split: str,
    index: int,
    *,
    encoded: bool = False,
) -> Episode:
    where = f"episode {index} of its split"
    try:
        message = example.FromString(payload)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, and what upb raises on garbage
        raise CorruptFileError(
            shard, f"{where} is not a tf.train.Example ({type(exc).__name__}: {exc})"
        ) from exc
    values = {k: feature_values(v) for k, v in message.features.feature.items()}
    first = values.get("steps/is_first")
    if first is None:
        raise CorruptFileError(shard, f"{where} has no steps/is_first: not an RLDS episode")
    rows = len(first)
    steps = decode_feature(steps_feature, "steps", values, rows, shard, where, encoded)
    fields = {k: decode_feature(f, k, values, None, shard, where, encoded) for k, f in others.items()}
    return Episode(steps, fields, rows, split, shard.name, index)



def read_rlds(
    directory: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    splits: list[str] | None = None,
    images: str = "decode",
    options: RldsOptions | None = None,
) -> EpisodeSource:
    """An RLDS dataset in a TFDS directory as an episode source, without a store or TensorFlow.

    Each chunk is whole episodes, decoded when the source is iterated, up to :data:`CHUNK_BYTES`
    of steps (or one larger episode: memory holds one chunk): their ``steps`` rows in RLDS
    alignment (the last step's action, reward and discount null,
    :func:`rlarrow.core.alignment.last_null`; kept in its metadata as ``rlds_last`` where not
    all zero) and their ``episodes`` rows (each episode's fields and ``{"rlds": {split, shard,
    index}}`` as metadata). The run's metadata holds ``dataset_info``, ``features``, ``images`` and the
    ClassLabel names (``labels``): what :func:`~rlarrow.io.rlds.write_rlds` needs to write the
    dataset back as it was.

    Args:
        directory: the dataset's version folder (``dataset_info.json`` beside the shards), or the
            folder of its versions (the newest is read).
        run_id: the run id its rows carry (None: a new one).
        splits: the splits to read (default: every one).
        images: ``"decode"`` or ``"encoded"`` (:class:`RldsOptions`).
        options: the two above as one :class:`RldsOptions` (then leave them out).

    Raises:
        UnsupportedInputError: not a TFDS RLDS dataset, or a feature rlarrow does not decode.
        CorruptFileError: damaged shards, or records that do not match ``features.json`` (as the
            source is read).
        MissingDependencyError: protobuf (``pip install 'rlarrow[rlds]'``) or, for images,
            Pillow is missing.

    Example:
        >>> import tempfile, numpy as np, polars as pl
        >>> from rlarrow.core import schema
        >>> from rlarrow.core.sources import EpisodeChunk, EpisodeSource, RunInfo
        >>> from rlarrow.io.rlds import write_rlds
        >>> def chunks(run_id):  # a toy source, written as an RLDS dataset to read
        ...     yield EpisodeChunk(schema.build("steps", {
        ...         "run_id": run_id, "episode_id": 0, "step": np.arange(3), "env_index": 0,
        ...         "observation": np.arange(6, dtype=np.float32).reshape(3, 2), "action": [1, 0, None],
        ...         "reward": [0.5, 1.0, None], "is_first": [True, False, False],
        ...         "is_last": [False, False, True], "is_terminal": [False, False, True]}))
        >>> toy = EpisodeSource(RunInfo(source="toy"), {}, chunks)
        >>> path = write_rlds(toy, tempfile.mkdtemp() + "/toy/1.0.0")
        >>> steps, episodes = read_rlds(path).read()
        >>> steps.column("reward").to_pylist(), episodes.column("return").to_pylist()
        ([0.5, 1.0, None], [1.5])
        >>> pl.from_arrow(read_rlds(path).steps())["action"].to_list()
        [1, 0, None]
    """
    if options is None:
        options = RldsOptions(splits=None if splits is None else tuple(_arguments.names(splits, "splits")),
                              images=images)
    elif splits is not None or images != "decode":
        raise ArgumentError("read_rlds: give the splits and images in options=RldsOptions(...) or as "
                            "keywords, not both")
    dataset = _Dataset(directory)
    info = dataset.info
    if str(info.get("fileFormat", "tfrecord")) != "tfrecord":
        raise UnsupportedInputError(
            dataset.data,
            f"a TFDS dataset of {info.get('fileFormat')} shards; rlarrow reads "
            "tfrecord shards (tfds can convert: `tfds convert_format`)",
        )
    example_class()  # (protobuf missing: said now, before anything is read)
    encoded = options.images == "encoded"
    run = RunInfo(
        source="rlds",
        name=info.get("name") or dataset.data.name,
        source_path=os.fspath(directory),
        source_version=f"tfds dataset {info.get('version')}",
        alignment="rlds",
        num_envs=1,
        metadata={"dataset_info": info, "features": dataset.features, "images": options.images,
                  "labels": class_labels(dataset.data)},
        env_specs=_specs(dataset.root),
    )

    def chunks(run_as: str) -> Iterator[EpisodeChunk]:
        block: list[pa.Table] = []  # whole episodes, up to CHUNK_BYTES (or one larger episode)
        rows = EpisodeRows()
        size = 0
        for ep in dataset.episodes(options.splits, encoded):
            steps, row = _episode_rows(run_as, ep, dataset.steps_feature)
            nbytes = steps.get_total_buffer_size()
            if block and (size + nbytes > CHUNK_BYTES or steps.schema != block[0].schema):
                yield _chunk(block, rows, run_as)
                block, rows, size = [], EpisodeRows(), 0
            block.append(steps)
            rows.add(ep.number, **row)
            size += nbytes
        if block:
            yield _chunk(block, rows, run_as)

    return EpisodeSource(run, _declared(dataset.steps_feature, encoded), chunks, run_id=run_id,
                         episodes=dataset.total(options.splits) or None,
                         recipe=(read_rlds, (os.path.abspath(directory),), {"options": options}))


def import_rlds(
    directory: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    splits: list[str] | None = None,
    images: str = "decode",
    progress: bool | None = None,
) -> IngestReport:
    """Import an RLDS dataset (a TFDS directory) into ``store`` as one run: ``ingest(store, read_rlds(...))``.

    One commit: a damaged shard found at the last episode leaves the store as it was.

    Args:
        directory: the dataset's version folder (``dataset_info.json`` beside the shards), or the
            folder of its versions (the newest is read).
        store: the store (created if missing).
        run_id: the new run's id (None: generated).
        name: the run's name (default: the dataset's).
        splits: the splits to read (default: every one).
        images: ``"decode"`` (uint8 tensors, ``tfds``'s pixels) or ``"encoded"`` (each image's
            PNG/JPEG bytes as the shard holds them, a ``binary`` field, decoded on demand with
            :func:`~rlarrow.io.rlds.decode_image`; an RLDS export writes the same bytes back).
        progress: a progress bar (None: when stderr is a terminal).

    Raises:
        UnsupportedInputError: not a TFDS RLDS dataset, or a feature rlarrow does not decode.
        CorruptFileError: damaged shards, or records that do not match ``features.json``.
        MissingDependencyError: protobuf (``pip install 'rlarrow[rlds]'``) or, for images,
            Pillow is missing.

    Example:
        >>> import_rlds("tensorflow_datasets/rlds_catch/1.0.0", "runs.rlarrow")  # doctest: +SKIP
    """
    with read_rlds(directory, run_id=run_id, splits=splits, images=images) as source:
        return ingest(store, source, name=name, progress=progress)


def _declared(steps_feature: Feature, encoded: bool) -> dict[str, pa.DataType]:
    """The observation, action and infos types ``features.json`` fixes (none where a size is per record)."""
    out: dict[str, pa.DataType] = {}
    for key in ("observation", "action"):
        feature = steps_feature.children.get(key)
        type_ = _feature_type(feature, encoded) if feature is not None else None
        if type_ is False:
            return {}  # (the first episode's types are the run's)
        if type_ is not None:
            out[key] = type_
    infos = _infos_type(Feature("dict", children={k: f for k, f in steps_feature.children.items()
                                                  if k not in RLDS_STEP_FIELDS}))
    if infos is not None:
        out["infos"] = infos
    return out


def _is_info(feature: Feature | None) -> bool:
    """A step field's leaf that is a typed info: numbers of a fixed shape and dtype."""
    if feature is None or feature.kind != "tensor" or -1 in feature.shape:
        return False
    return (feature.dtype if feature.dtype is not None else np.dtype(np.float32)).kind in "biuf"


def _infos_type(feature: Feature) -> Any:
    """The Arrow type of a step field's typed infos, as :func:`_infos_of` gives them (None: none)."""
    if feature.kind == "dict":
        fields = [(k, t) for k, child in feature.children.items() if (t := _infos_type(child)) is not None]
        return pa.struct(fields) if fields else None
    if not _is_info(feature):
        return None
    return tensor_type(feature.dtype if feature.dtype is not None else np.dtype(np.float32), feature.shape,
                       layout="auto")


def _feature_type(feature: Feature, encoded: bool) -> Any:
    """A step field's Arrow type as :func:`_type_of` gives it; None: no tensors; False: known per record."""
    if feature.kind == "dict":
        fields = []
        for k, child in feature.children.items():
            type_ = _feature_type(child, encoded)
            if type_ is False:
                return False
            if type_ is not None:
                fields.append((k, type_))
        return pa.struct(fields) if fields else None
    if feature.kind == "image" and encoded:
        return pa.binary()
    if feature.kind in ("tensor", "image"):
        if -1 in feature.shape:
            return False
        dtype = feature.dtype if feature.dtype is not None else np.dtype(np.float32)
        return tensor_type(dtype, feature.shape, layout="auto")
    return None

def _tensors(value: Any, path: str, extra: dict[str, Any]) -> Any:
    """The numeric tensors of a (nested) step field; its other leaves (text) go to ``extra`` by path."""
    if isinstance(value, dict):
        kept = {k: t for k, v in value.items() if (t := _tensors(v, f"{path}/{k}", extra)) is not None}
        return kept or None
    if (isinstance(value, np.ndarray) and value.dtype.kind in "biuf") or isinstance(value, pa.Array):
        return value  # (a pa.Array: images kept encoded, one PNG/JPEG per step)
    extra[path] = value
    return None


def _infos_of(value: Any, feature: Feature | None, path: str, extra: dict[str, Any]) -> Any:
    """A step field's numeric tensors (the typed infos); its other leaves (text, images) go to ``extra``."""
    if isinstance(value, dict):
        children = feature.children if feature is not None and feature.kind == "dict" else {}
        kept = {k: t for k, v in value.items()
                if (t := _infos_of(v, children.get(k), f"{path}/{k}", extra)) is not None}
        return kept or None
    if _is_info(feature) and isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value
    extra[path] = value
    return None


def _split_step(steps: dict[str, Any], steps_feature: Feature | None = None
                ) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(observation tensors, action tensors, typed infos, the rest as per-step metadata) of decoded steps.

    The typed infos are the other step fields' numeric tensors (fixed shape and dtype, as
    ``features.json`` declares them), by name; their text (and images) stays per-step metadata.
    """
    extra: dict[str, Any] = {}
    obs = _tensors(steps.get("observation"), "observation", extra) if "observation" in steps else None
    action = _tensors(steps.get("action"), "action", extra) if "action" in steps else None
    children = steps_feature.children if steps_feature is not None else {}
    infos: dict[str, Any] = {}
    for k, v in steps.items():
        if k in ("reward", "discount") and isinstance(v, np.ndarray) and v.ndim > 1:
            extra[k] = v  # (vector rewards are not a column of format 1: kept per step, in their dtype)
        elif k not in RLDS_STEP_FIELDS and (typed := _infos_of(v, children.get(k), k, extra)) is not None:
            infos[k] = typed
    return obs, action, infos or None, extra


def _rows_metadata(extra: dict[str, Any], rows: int, last_values: dict[str, Any] | None) -> list[Any] | None:
    if not extra and not last_values:
        return None
    out: list[Any] = []
    for i in range(rows):
        step: dict[str, Any] = {}
        for path, values in extra.items():
            value = values[i]
            *parents, leaf = path.split("/")
            node = step
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        out.append(step or None)
    if last_values:
        out[-1] = {**(out[-1] or {}), "rlds_last": last_values}
    return out


def _type_of(values: Any) -> pa.DataType:
    if isinstance(values, dict):
        return pa.struct([(k, _type_of(v)) for k, v in values.items()])
    if isinstance(values, pa.Array):
        return values.type
    return tensor_type(values.dtype, values.shape[1:], layout="auto")


def _nonzero(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_nonzero(v) for v in value.values())
    return bool(np.any(np.asarray(value) != 0))


def _last_row(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _last_row(v) for k, v in value.items()}
    return value[-1].as_py() if isinstance(value, pa.Array) else value[-1]


def _chunk(block: list[pa.Table], rows: EpisodeRows, run: str) -> EpisodeChunk:
    """Whole episodes' steps (one schema) and their ``episodes`` rows as one chunk."""
    return EpisodeChunk(block[0] if len(block) == 1 else pa.concat_tables(block), rows.table(run))


def _episode_rows(run: str, ep: Episode, steps_feature: Feature | None = None
                  ) -> tuple[pa.Table, dict[str, Any]]:
    """One decoded episode's ``steps`` rows (RLDS alignment) and its ``episodes`` row (EpisodeRows.add's)."""
    n = ep.num_steps
    obs, action, infos, extra = _split_step(ep.steps, steps_feature)
    is_last = np.asarray(ep.steps.get("is_last", np.zeros(n, bool)), bool)
    is_terminal = np.asarray(ep.steps.get("is_terminal", np.zeros(n, bool)), bool)
    ended = bool(n and is_last[-1])
    reward = ep.steps.get("reward")
    discount = ep.steps.get("discount")
    last_values: dict[str, Any] = {}
    if ended:  # RLDS: undefined on the last step; kept in its metadata where not all zero
        for key, value in (("action", action), ("reward", reward), ("discount", discount)):
            if value is not None and _nonzero(_last_row(value)):
                last_values[key] = _last_row(value)
    columns: dict[str, Any] = {
        "run_id": run,
        "episode_id": ep.number,
        "step": np.arange(n),
        "env_index": 0,
        "is_first": np.asarray(ep.steps.get("is_first", np.arange(n) == 0), bool),
        "is_last": is_last,
        "is_terminal": is_terminal,
        "metadata": _rows_metadata(extra, n, last_values or None),
    }
    for key, value in (("observation", obs), ("action", action), ("infos", infos)):
        if value is not None:  # (infos: defined on every step, the last one's too)
            arr = to_arrow(value, _type_of(value))
            columns[key] = last_null(arr, n - 1) if key == "action" and ended else arr
    for key, value in (("reward", reward), ("discount", discount)):
        if value is not None and np.ndim(value) == 1:
            floats = pa.array(np.asarray(value, np.float64))
            columns[key] = last_null(floats, n - 1) if ended else floats
    steps = _schema.build("steps", columns, num_rows=n)
    rewards = np.asarray(reward, np.float64) if reward is not None and np.ndim(reward) == 1 else None
    return steps, {
        "num_steps": n,
        "total": float(np.sum(rewards[:-1] if ended else rewards)) if rewards is not None else None,
        "terminated": bool(n and is_terminal[-1]),
        "truncated": bool(ended and not is_terminal[-1]),
        "partial_end": not ended,
        "metadata": {**ep.fields, "rlds": {"split": ep.split, "shard": ep.shard, "index": ep.index}},
    }


def _specs(root: Feature) -> dict[str, Any]:
    """``runs.env_specs`` from the steps' features: Array specs of observation, action, reward, discount."""
    steps = root.children.get("steps")
    item = steps.item if steps is not None else None
    if item is None:
        return {}

    def spec(f: Feature, name: str) -> Any:
        if f.kind == "dict":
            return {k: spec(c, k) for k, c in f.children.items() if c.kind in ("tensor", "image", "dict")}
        return {
            "kind": "Array",
            "name": name,
            "shape": list(f.shape),
            "dtype": np.dtype(f.dtype or np.uint8).name,
        }

    out = {}
    for key in ("observation", "action", "reward", "discount"):
        f = item.children.get(key)
        if f is not None and f.kind in ("tensor", "image", "dict"):
            out[f"{key}_spec"] = spec(f, key)
    return out

