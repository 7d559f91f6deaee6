"""Offline-RL and robot-learning HDF5 files: D4RL's layout and robomimic's, read as episode sources.

Two layouts are read (:func:`hdf5_layout` tells them apart; Minari's HDF5 backend is a
Minari dataset directory, read by :mod:`rlarrow.io.minari`):

* **D4RL** (``observations``, ``actions``, ``rewards``, ``terminals``, optional ``timeouts``,
  ``next_observations``, ``infos/*``, ``metadata/*`` at the root, one row per transition).
  Episodes end after each row whose ``terminals`` or ``timeouts`` is set (the files D4RL's own
  ``DatasetWriter`` makes have no ``timeouts``: there, only terminals end episodes). Each
  episode of N transitions becomes N + 1 RLDS steps: the last holds the final observation
  (``next_observations`` of the last row, or null where the file has none: never invented),
  with null action and reward, ``is_terminal`` from ``terminals``. Rows after the last end
  are an episode marked ``partial_end``; with ``next_observations`` it gets one more step, the
  observation after its last row (not ``is_last``), so its last transition is kept too.
* **robomimic** (``data/demo_<i>/{obs/*, next_obs/*, actions, rewards, dones, states}``, the
  layout robomimic, LIBERO, MimicGen, Isaac Lab and robosuite share). Each demo is an
  episode whose ``episode_id`` is its number; ``obs/*`` become a struct observation in the
  file's order, and the final step's observation is ``next_obs`` of the last row (null
  without ``next_obs``). ``is_terminal`` is the last ``dones`` value.

Everything else a row holds that is numbers (``infos/qpos``, ``states``, ``dones``,
``action_dict/*``, ...) is a field of the step's typed ``infos`` (``qpos``, ``states``, sliced
from the file in its dtype and row shape; null on an episode's final step; a robomimic demo
whose numbers differ from the first demo's keeps them as metadata); text and bytes are the
step's ``metadata`` under their path (``{"infos": {"name": b"..."}}``), in their dtype.
Attributes and small datasets of the file (``metadata/*``, ``env_args`` parsed from its JSON,
``mask/*``, root attributes) are the run's metadata, with the dtype and shape of every column
read (``columns``) so that an export can write them back as they were; a dataset too large
for metadata (D4RL's ``metadata/policy/*`` weights) is named under ``left_out``, not copied. A
demo's attributes (``num_samples``, ``model_file``, ``ep_meta``) are its episode's metadata.

The reader (:func:`read_hdf5`) opens the file once: its layout is found, its datasets checked
and its rows read on that one handle, until the source is closed. :func:`import_hdf5` is
``ingest(store, read_hdf5(...))`` (:func:`rlarrow.core.ingest.ingest`: one commit, all of the
file or nothing of it); :func:`write_robomimic` writes any episode source as robomimic's layout.

:func:`read_hdf5` has an example.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlarrow.core.errors import ArgumentError, UnsupportedInputError
from rlarrow.core.ingest import IngestReport, ingest
from rlarrow.core.sources import EpisodeSource
from rlarrow.core.store import StoreLike
from rlarrow.io.codecs.hdf5_files import CHUNK_BYTES, guarded, open_hdf5
from rlarrow.io.hdf5.d4rl import d4rl_parts
from rlarrow.io.hdf5.hdf5_common import D4RL_KEYS, DEMO_NAME
from rlarrow.io.hdf5.robomimic import robomimic_parts

__all__ = ["HDF5Options", "hdf5_layout", "import_d4rl", "import_hdf5", "import_robomimic", "read_hdf5"]


@dataclass(frozen=True)
class HDF5Options:
    """How an HDF5 file is read (:func:`read_hdf5`, :func:`import_hdf5`).

    Attributes:
        chunk_bytes: how much to read at a time, over all of a chunk's datasets.
        allow_links: follow external links and virtual datasets whose files lie in the
            input's own directory; never outside it (refused by default).
        layout: the layout the file must have (``"d4rl"``, ``"robomimic"``); None: either.

    Example:
        >>> HDF5Options(layout="d4rl").chunk_bytes == CHUNK_BYTES
        True
    """

    chunk_bytes: int = CHUNK_BYTES
    allow_links: bool = False
    layout: str | None = None


def hdf5_layout(path: str | os.PathLike[str], *, allow_links: bool = False) -> str | None:
    """``"d4rl"``, ``"robomimic"`` or None: which layout the HDF5 file ``path`` has (h5py needed).

    The answer is kept for the file as it is (the same path, inode, size and modification
    time), so asking again, as each step of ``rlarrow convert`` does, opens nothing.

    Raises:
        MissingDependencyError: h5py is not installed.
        UnsupportedInputError: not an HDF5 file.
        CorruptFileError: an HDF5 file that cannot be opened.
        HDF5RefusedError: a file that reaches outside itself or declares more than it holds
            (:func:`rlarrow.io.codecs.hdf5_files.check_contained`).
    """
    try:
        st = os.stat(path)
        key: tuple[Any, ...] | None = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size,
                                       st.st_mtime_ns, allow_links)
    except OSError:
        key = None  # (open_hdf5 names the error)
    if key is not None and key in _LAYOUTS:
        return _LAYOUTS[key]
    with open_hdf5(path, allow_links=allow_links) as f, guarded(path, "the file's top-level groups"):
        found = _layout(f)
    if key is not None:
        if len(_LAYOUTS) >= 256:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
        _LAYOUTS[key] = found
    return found


#: layouts found, by file (path, device, inode, size, modification time) and allow_links: the
#: registry asks once per step of a convert (sorting, units, sniffing); the file is opened once
_LAYOUTS: dict[tuple[Any, ...], str | None] = {}


def _layout(f: Any) -> str | None:
    if all(k in f and not hasattr(f[k], "keys") for k in D4RL_KEYS):
        return "d4rl"
    data = f.get("data")
    if data is not None and hasattr(data, "keys") and any(DEMO_NAME.fullmatch(k) for k in data):
        return "robomimic"
    return None


def read_hdf5(path: str | os.PathLike[str], *, run_id: str | None = None, chunk_bytes: int = CHUNK_BYTES,
              allow_hdf5_links: bool = False, layout: str | None = None,
              options: HDF5Options | None = None) -> EpisodeSource:
    """A D4RL or robomimic HDF5 file as an episode source, without a store (see the module docs).

    The file is opened once, here: its layout found and its datasets checked (nothing outside
    it is read: external links, virtual datasets and external storage are refused, and so is
    a dataset that declares more than the file holds, :func:`rlarrow.io.codecs.hdf5_files.check_contained`).
    Rows are read when the source is iterated, a chunk at a time (``chunk_bytes``):
    D4RL a block of rows per chunk, robomimic a demo (or a block of its rows). Close the
    source (``with``) to close the file.

    Args:
        path: the ``.hdf5`` file.
        run_id: the run id its rows carry (None: a new one).
        chunk_bytes: how much to read at a time, over all of a chunk's datasets.
        allow_hdf5_links: follow external links and virtual datasets whose files lie in the
            input's own directory; never outside it (refused by default).
        layout: the layout the file must have (``"d4rl"``, ``"robomimic"``); None: either.
        options: the three above as one :class:`HDF5Options` (then leave them out).

    Raises:
        UnsupportedInputError: not HDF5, or neither layout (the message lists what the file
            holds), or not ``layout``.
        CorruptFileError: damaged data, or datasets that disagree (row counts, shapes); damage
            in rows is raised when those rows are read.
        MissingDependencyError: h5py is not installed (``pip install 'rlarrow[hdf5]'``).
        HDF5RefusedError: an external link, virtual dataset or external storage (without
            ``allow_hdf5_links``, or leading outside the input's directory), or a dataset
            that declares more rows than the file holds.

    Example:
        >>> import os, tempfile, h5py, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "hopper.hdf5")
        >>> with h5py.File(path, "w") as f:  # D4RL's layout: 6 transitions, an episode ends after row 2
        ...     f["observations"] = np.arange(12, dtype=np.float32).reshape(6, 2)
        ...     f["actions"] = np.ones((6, 1), np.float32)
        ...     f["rewards"] = np.ones(6, np.float32)
        ...     f["terminals"] = np.array([0, 0, 1, 0, 0, 0], bool)
        ...     f["infos/qpos"] = np.zeros((6, 3))
        >>> with read_hdf5(path, run_id="r") as source:
        ...     steps, episodes = source.read()
        >>> steps.column("run_id")[0].as_py(), episodes.column("partial_end").to_pylist()
        ('r', [False, True])
    """
    if options is None:
        options = HDF5Options(chunk_bytes=chunk_bytes, allow_links=allow_hdf5_links, layout=layout)
    elif (chunk_bytes, allow_hdf5_links, layout) != (CHUNK_BYTES, False, None):
        raise ArgumentError("read_hdf5: give chunk_bytes, allow_hdf5_links and layout in "
                            "options=HDF5Options(...) or as keywords, not both")
    p = Path(path)
    with ExitStack() as stack:
        f = stack.enter_context(open_hdf5(p, allow_links=options.allow_links))
        with guarded(p, "the file's top-level groups"):
            layout = _layout(f)
            top = sorted(f)
        if layout is None:
            raise UnsupportedInputError(
                p,
                f"an HDF5 file of neither D4RL's layout (datasets {list(D4RL_KEYS)} "
                "at its root) nor robomimic's (data/demo_<i> groups); it holds "
                f"{top[:12]}: rlarrow imports those two and Minari datasets",
            )
        if options.layout is not None and layout != options.layout:
            raise UnsupportedInputError(p, f"not a {options.layout} file (its layout is {layout})")
        parts = d4rl_parts if layout == "d4rl" else robomimic_parts
        run, types, chunks, count = parts(f, p, options.chunk_bytes)
        source = EpisodeSource(run, types, chunks, run_id=run_id, episodes=count,
                               unit="row" if layout == "d4rl" else "demo", close=stack.pop_all().close,
                               recipe=(read_hdf5, (os.path.abspath(p),), {"options": options}))
    return source


def import_hdf5(
    path: str | os.PathLike[str],
    store: StoreLike,
    *,
    run_id: str | None = None,
    name: str | None = None,
    progress: bool | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    allow_hdf5_links: bool = False,
    layout: str | None = None,
) -> IngestReport:
    """Import a D4RL or robomimic HDF5 file into ``store`` as one run: ``ingest(store, read_hdf5(...))``.

    One commit: a failure anywhere (a damaged last episode too) leaves the store as it was.

    Args:
        path: the ``.hdf5`` file.
        store: the store (created if missing).
        run_id: the new run's id (None: generated).
        name: the run's name (default: the file's name).
        progress: a progress bar (None: when stderr is a terminal).
        chunk_bytes: how much to read at a time, over all of a chunk's datasets.
        allow_hdf5_links: follow external links and virtual datasets whose files lie in the
            input's own directory; never outside it.
        layout: the layout the file must have (``"d4rl"``, ``"robomimic"``); None: either.

    Raises:
        See :func:`read_hdf5`.

    Example:
        >>> import_hdf5("robomimic/lift/ph/low_dim_v15.hdf5", "runs.rlarrow")  # doctest: +SKIP
    """
    with read_hdf5(path, run_id=run_id, chunk_bytes=chunk_bytes, allow_hdf5_links=allow_hdf5_links,
                   layout=layout) as source:
        return ingest(store, source, name=name, progress=progress)


def import_d4rl(path: str | os.PathLike[str], store: StoreLike, **options: Any) -> IngestReport:
    """:func:`import_hdf5` of a file that must have D4RL's layout."""
    return import_hdf5(path, store, **{**options, "layout": "d4rl"})


def import_robomimic(path: str | os.PathLike[str], store: StoreLike, **options: Any) -> IngestReport:
    """:func:`import_hdf5` of a file that must have robomimic's layout."""
    return import_hdf5(path, store, **{**options, "layout": "robomimic"})
