"""Episodes written as a robomimic HDF5 file: from any episode source, or a store's run.

:func:`write_robomimic` takes an :class:`~rlarrow.core.sources.EpisodeSource` (one read from
another format, or a store's run through :func:`rlarrow.core.run_source.read_run`);
:func:`export_robomimic` is ``write_robomimic(read_run(store, run_id=...), path)``, written
in a child process (HDF5 can end the process on a full disk).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlarrow.core import metadata as _metadata
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.store import StoreLike

__all__ = ["export_robomimic", "write_robomimic"]


def write_robomimic(source: EpisodeSource, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write the episodes of ``source`` as a robomimic HDF5 file, one ``data/demo_<episode_id>`` each.

    ``source`` is any episode source: :func:`rlarrow.io.hdf5.read_hdf5` of a D4RL file,
    :func:`rlarrow.io.minari.read_minari` of a Minari dataset, a store's run
    (:func:`rlarrow.core.run_source.read_run`). It is read a chunk at a time; an episode's steps
    are held until its ``episodes`` row comes (memory bounded by the largest episode). What
    each demo holds is said in :func:`export_robomimic`. The file is written under a temporary
    name and renamed when complete.

    Raises:
        InvalidInputError: ``path`` exists and not ``overwrite``, or is a directory; or the
            source's observation or action holds bytes (encoded images).
        MissingDependencyError: h5py is not installed.
        OutputError: the file could not be written (a full disk); nothing is left at ``path``.

    Example:
        >>> import os, tempfile, h5py, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "hopper.hdf5")
        >>> with h5py.File(path, "w") as f:  # D4RL's layout: 6 transitions, an episode ends after row 2
        ...     f["observations"] = np.arange(12, dtype=np.float32).reshape(6, 2)
        ...     f["actions"] = np.ones((6, 1), np.float32)
        ...     f["rewards"] = np.ones(6, np.float32)
        ...     f["terminals"] = np.array([0, 0, 1, 0, 0, 0], bool)
        ...     f["infos/qpos"] = np.zeros((6, 3))
        >>> from rlarrow.io.hdf5 import read_hdf5, write_robomimic
        >>> with read_hdf5(path) as source:  # a D4RL file written as robomimic's layout
        ...     out = write_robomimic(source, path.replace(".hdf5", "-demos.hdf5"))
        >>> with h5py.File(out) as f:
        ...     sorted(f["data"]), f["data/demo_0/infos/qpos"].shape, int(f["data"].attrs["total"])
        (['demo_0', 'demo_1'], (3, 3), 6)
    """
    from rlarrow.core.targets import atomic_file

    target = _target(path, overwrite)
    with atomic_file(target, overwrite=True) as tmp:
        _write_file(source, os.fspath(tmp))
    return target


def export_robomimic(
    store: StoreLike,
    path: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a run as a robomimic HDF5 file (``data/demo_<episode_id>/...``), one demo per episode.

    ``write_robomimic(read_run(store, run_id=run_id), path)``, in a child process. Each demo
    holds ``obs/<key>`` (a struct observation's fields; a plain one as ``obs/flat``,
    the key robomimic's D4RL conversion uses), ``next_obs/<key>`` where the episode's final
    observation is stored, ``actions``, ``rewards``, ``dones`` and every per-step metadata
    dataset (``states``, ...) in the dtypes the run recorded (``columns`` and ``per_step`` of
    an HDF5 import; else as stored), ``num_samples``, and the demo's attributes; ``data``
    holds ``total`` and ``env_args`` (the run's, else ``{"env_name": <run name>, "type": 2,
    "env_kwargs": {}}``: a gym env), ``mask/*`` the run's filter keys. A robomimic file
    imported and exported comes back with the same datasets, values, dtypes and attributes.
    ``dones`` not recorded per step are 1 on the last step of an episode that ended terminal.
    The file is written under a temporary name and renamed when complete.

    Raises:
        InvalidInputError: ``path`` exists and not ``overwrite``, or is a directory.
        MissingDependencyError: h5py is not installed.
        OutputError: the file could not be written (a full disk); nothing is left at ``path``.

    Example:
        >>> export_robomimic("runs.rlarrow", "demos.hdf5")  # doctest: +SKIP
    """
    from rlarrow.core.dm_env_rows import DmEnvRows
    from rlarrow.core.targets import atomic_file, in_child

    target = _target(path, overwrite)
    with DmEnvRows(store, run_id=run_id) as reader:
        reader.refuse_bytes("a robomimic file")
        source = (os.path.abspath(reader.store.path), reader.store.version, reader.run_id)
    # (-o DIR: DIR/demo.hdf5, DIR made when missing and removed again on failure). HDF5 can
    # crash the process on a full disk: it writes in a child process, which reads the same version
    with atomic_file(target, overwrite=True) as tmp:
        in_child(target, _robomimic_file, *source, os.fspath(tmp), what="robomimic (HDF5)")
    return target


def _target(path: str | os.PathLike[str], overwrite: bool) -> Path:
    from rlarrow.core.deps import require
    from rlarrow.core.errors import InvalidInputError
    from rlarrow.core.targets import refuse_object_storage

    require("h5py", feature="writing robomimic HDF5 files")
    refuse_object_storage(path, "a robomimic file")  # (Path() would make s3://b the local s3:/b)
    target = Path(path)
    if target.is_dir():
        raise InvalidInputError(target, "a directory: give the robomimic .hdf5 file to write")
    if target.exists() and not overwrite:
        raise InvalidInputError(target, "exists: pass overwrite=True to replace it")
    return target


def _robomimic_file(store: str, version: int, run_id: str, tmp: str) -> None:
    """Write run ``run_id`` of ``store`` at ``version`` as a robomimic file at ``tmp`` (in a child)."""
    from rlarrow.core.run_source import read_run

    with read_run(store, run_id=run_id, version=version) as source:
        _write_file(source, tmp)


def _write_file(source: EpisodeSource, tmp: str) -> None:
    """``source`` as a robomimic file at ``tmp``, written through :class:`_WriteOnce`."""
    import h5py

    from rlarrow.core.targets import write_failure

    with open(tmp, "w+b") as raw:
        sink = _WriteOnce(raw)
        try:
            with h5py.File(sink, "w") as f:
                _write_robomimic(source, f)
        except (OSError, RuntimeError) as exc:  # HDF5 says a failed write in its own words
            raise write_failure(sink.error or exc, tmp) from exc
        if sink.error is not None:
            raise sink.error


class _WriteOnce(io.RawIOBase):
    """The file HDF5 writes through (h5py's file-object driver), keeping its first failed write.

    HDF5 crashes the process (a segmentation fault in ``H5Fclose``) when it closes a file
    whose writes failed, as on a full disk. Here a failed write is kept in ``error`` and
    the ones after it are taken without writing, so HDF5 closes cleanly and the export
    then raises ``error`` (and its temporary file is removed).
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return int(self.raw.readinto(buffer))

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if self.error is None:
            try:
                self.raw.write(data)
            except OSError as exc:
                self.error = exc
        return size

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return int(self.raw.truncate(size))
            except OSError as exc:
                self.error = exc
        return size if size is not None else self.tell()

    def flush(self) -> None:
        if self.error is None:
            try:
                self.raw.flush()
            except OSError as exc:
                self.error = exc




class _Plan:
    """What the run's metadata says of the file: dtypes, attributes, and whether it was robomimic's."""

    def __init__(self, source: EpisodeSource) -> None:
        meta = source.run.metadata
        self.meta: dict[str, Any] = meta if isinstance(meta, dict) else {}
        self.mine = source.run.source == "robomimic"
        self.columns: dict[str, Any] = self.meta.get("columns", {}) if self.mine else {}
        if source.run.source == "d4rl":  # D4RL's dtypes; robomimic's shapes (rewards (N,), not (N, 1))
            self.columns = {k: {"dtype": v["dtype"]} for k, v in (self.meta.get("columns") or {}).items()}
        self.per_step: dict[str, Any] = self.meta.get("per_step", {}) if self.mine else {}
        self.name = str(source.run.name or source.run_id)

    def mine_of(self, key: str) -> dict[str, Any]:
        value = self.meta.get(key) if self.mine else None
        return dict(value) if isinstance(value, dict) else {}


def _write_robomimic(source: EpisodeSource, f: Any) -> None:
    plan = _Plan(source)
    for key, value in plan.mine_of("attrs").items():
        f.attrs[key] = _attr(value)
    data = f.create_group("data")
    total = 0
    for steps, meta in _episodes(source):
        total += _write_demo(data, steps, meta, plan)
    data.attrs["total"] = total
    data_attrs = plan.mine_of("data_attrs")
    data_attrs.setdefault("env_args", {"env_name": plan.name, "type": 2, "env_kwargs": {}})
    for key, value in data_attrs.items():
        if key != "total":
            data.attrs[key] = _attr(value)
    for key, value in _flat_items(plan.mine_of("datasets")):  # the file's small datasets
        f.create_dataset(key, data=np.asarray(value))
    for key, names in _flat_items(plan.mine_of("mask")):
        f.create_dataset(f"mask/{key}", data=np.array([str(x).encode() for x in names], dtype="S"))


def _episodes(source: EpisodeSource) -> Iterator[tuple[pa.Table, Any]]:
    """Each episode's steps (in step order) and metadata, as its ``episodes`` row comes.

    Steps of episodes not yet ended wait (an episode may span chunks); episodes the source
    ends without a row for come last, with no metadata.
    """
    import pyarrow.compute as pc

    waiting: list[pa.Table] = []
    for chunk in source:
        if not waiting:
            _refuse_bytes(source, chunk.steps.schema)
        waiting.append(chunk.steps)
        if chunk.episodes is None or not chunk.episodes.num_rows:
            continue
        steps = pa.concat_tables(waiting, promote_options="permissive")
        ids = chunk.episodes.column("episode_id").to_pylist()
        metas = _metadata.decode_column(chunk.episodes.column("metadata").to_pylist(),
                                        chunk.episodes.column("metadata_types").to_pylist())
        for eid, meta in zip(ids, metas, strict=True):
            yield _sorted(steps.filter(pc.equal(steps.column("episode_id"), eid))), meta
        waiting = [steps.filter(pc.invert(pc.is_in(steps.column("episode_id"), pa.array(ids, pa.int64()))))]
    if not waiting:
        return
    rest = pa.concat_tables(waiting, promote_options="permissive")
    for eid in pc.unique(rest.column("episode_id")).to_pylist():
        yield _sorted(rest.filter(pc.equal(rest.column("episode_id"), eid))), None


def _sorted(steps: pa.Table) -> pa.Table:
    return steps.sort_by("step")


def _refuse_bytes(source: EpisodeSource, schema: pa.Schema) -> None:
    from rlarrow.core.errors import InvalidInputError

    found = [p for name in ("observation", "action") if name in schema.names
             for p in _byte_leaves(schema.field(name).type, name)]
    if found:
        raise InvalidInputError(
            source.run.source_path or source.run.source,
            f"{', '.join(found)} hold bytes (images an RLDS import kept encoded); a robomimic file holds "
            "numbers: read the dataset with its images decoded to write it",
        )


def _byte_leaves(type_: pa.DataType, path: str) -> list[str]:
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in _byte_leaves(f.type, f"{path}.{f.name}")]
    return [path] if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) else []


def _write_demo(data: Any, table: pa.Table, meta: Any, plan: _Plan) -> int:
    """One episode as ``data/demo_<episode_id>``; returns its transitions."""
    rows = int(table.num_rows)
    actions = table.column("action").combine_chunks()
    ended = rows > 0 and bool(table.column("is_last")[rows - 1].as_py() or not actions[rows - 1].is_valid)
    n = rows - 1 if ended else rows  # transitions: rows with an action
    g = data.create_group(f"demo_{int(table.column('episode_id')[0].as_py())}")
    _write_obs(g, table.column("observation").combine_chunks(), n, rows)
    g.create_dataset("actions", data=_as(_numpy(actions.slice(0, n)), plan.columns.get("actions")))
    rewards = table.column("reward").combine_chunks().slice(0, n)
    if rewards.null_count < n or not n:
        values = rewards.to_numpy(zero_copy_only=False)
        g.create_dataset("rewards", data=_as(values, plan.columns.get("rewards")))
    leaves = _step_leaves(_step_metadata(table, n))
    leaves.update(_typed_leaves(table, n, plan))
    if "dones" not in leaves:
        dones = np.zeros(n, np.int64)
        if n and n < rows:
            dones[-1] = int(bool(table.column("is_terminal")[n].as_py()))
        leaves["dones"] = dones
    for key, values in leaves.items():
        g.create_dataset(key, data=_as(values, plan.per_step.get(key)))
    g.attrs["num_samples"] = n
    demo = meta if isinstance(meta, dict) and plan.mine else {}
    for key, value in demo.items():
        if key not in ("demo", "datasets", "left_out", "num_samples"):
            g.attrs[key] = _attr(value)
    for key, value in _flat_items(demo.get("datasets") or {}):
        g.create_dataset(key, data=np.asarray(value))
    return n


def _step_metadata(table: pa.Table, n: int) -> list[Any]:
    """The first ``n`` steps' metadata, decoded (None each where the steps have none)."""
    if "metadata" not in table.column_names:
        return [None] * n
    return _metadata.decode_column(table.column("metadata").to_pylist()[:n],
                                   table.column("metadata_types").to_pylist()[:n])


def _typed_leaves(table: pa.Table, n: int, plan: _Plan) -> dict[str, np.ndarray]:
    """The first ``n`` steps' typed ``infos`` by dataset path (``infos/qpos``), where all ``n`` have them.

    Steps written by rlarrow 1.0 have no ``infos`` column (their infos are metadata,
    :func:`_step_metadata`): nothing.
    """
    from rlarrow.core.step_columns import infos_leaves, infos_path

    typed = infos_leaves(table, n)
    if typed is None or not typed[1].all():
        return {}
    per_step = plan.meta.get("per_step")
    return {infos_path(field, per_step if isinstance(per_step, dict) else None): values
            for field, values in typed[0].items()}


def _write_obs(g: Any, column: pa.Array, n: int, rows: int) -> None:
    """``obs/<key>`` of the first ``n`` rows, and ``next_obs/<key>`` where the final one is known."""
    obs = _numpy(column)
    final_known = n < rows and column[n].is_valid
    # robomimic's obs keys are flat: a nested field (LeRobot's images.top) is joined at dots
    fields = dict(_flat_items(obs)) if isinstance(obs, dict) else {"flat": obs}
    for key, values in fields.items():
        key = key.replace("/", ".")
        g.create_dataset(f"obs/{key}", data=values[:n])
        if final_known:
            g.create_dataset(f"next_obs/{key}", data=values[1:n + 1])


def _numpy(arr: pa.Array) -> Any:
    from rlarrow.core.tensors import to_numpy

    return to_numpy(arr, fill_value=0)


def _as(values: Any, described: Any) -> Any:
    """``values`` in the dtype and row shape an import recorded (``{"dtype", "shape"}``), when it did."""
    if not isinstance(described, dict) or "dtype" not in described:
        return values
    out = np.asarray(values).astype(np.dtype(described["dtype"]), copy=False)
    return out.reshape(len(out), *described.get("shape", out.shape[1:]))


def _attr(value: Any) -> Any:
    """A metadata value as an HDF5 attribute: dicts (and lists of them) as JSON text, robomimic-style."""
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
        return json.dumps(value)
    return value


def _flat_items(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _flat_items(value, f"{prefix}{key}/")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _step_leaves(steps: list[Any]) -> dict[str, np.ndarray]:
    """Per-step metadata dicts as one stacked array per leaf path, where every step has that leaf."""
    if not steps or not all(isinstance(s, dict) for s in steps):
        return {}
    paths = [p for p, _ in _flat_items(steps[0])]
    out = {}
    for path in paths:
        values = []
        for s in steps:
            node: Any = s
            for part in path.split("/"):
                node = node.get(part) if isinstance(node, dict) else None
            values.append(node)
        if all(v is not None for v in values):
            array = np.asarray(values)
            if array.dtype.kind in "UO":  # text (a language instruction): UTF-8 bytes, as h5py stores it
                array = np.asarray([str(v).encode("utf-8") for v in values], dtype=bytes)
            out[path] = array
    return out

