"""Event files to and from a store: :func:`import_tfevents` and :func:`export_tfevents`.

The import reads with :class:`~rlarrow.io.tfevents.TfeventsReader` and writes the rows into
the store's ``scalars`` table and a ``runs`` row per TensorBoard run, in one transaction; the
export reads a store's ``scalars`` and writes them with
:func:`~rlarrow.io.tfevents.write_tfevents`, one folder per run. What the files hold, and
how they are read and written, is :mod:`.events`' business and below.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from rlarrow.io.tfevents import EventFileWriter
    >>> d = Path(tempfile.mkdtemp())
    >>> with EventFileWriter(d / "log") as w:
    ...     w.add_scalar("test/return", 200.0, step=10)
    >>> report = import_tfevents(d / "log", d / "runs.rlarrow", run_id="cartpole", progress=False)
    >>> print(report)  # doctest: +ELLIPSIS
    1 scalars from 1 event file(s), 1 run(s) in ... s
    >>> files = export_tfevents(d / "runs.rlarrow", d / "exported")
    >>> [p.relative_to(d).parent.as_posix() for p in files]
    ['exported/cartpole']
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from rlarrow.core.errors import InvalidInputError
from rlarrow.io.tfevents.events import TfeventsReader, TfeventsReport, write_tfevents

if TYPE_CHECKING:
    from rlarrow.core.store import StoreLike

__all__ = ["export_tfevents", "import_tfevents"]


def import_tfevents(source: Any, store: StoreLike, *, run_id: str | None = None, name: str | None = None,
                    on_corrupt: str = "raise", progress: bool | None = None,
                    existing_run: bool = False) -> TfeventsReport:
    """Import event files (a file, a directory of runs, a glob) into ``store``'s ``scalars``.

    Each TensorBoard run becomes a run of the store: the root run gets ``run_id`` (default:
    a new id), a sub-run ``run_id/<its path>`` (an ``add_scalars`` folder, a tianshou
    ``test/`` run...). The ``runs`` rows record ``source = 'tfevents'``, the directory, and
    the event files (``existing_run=True``: the root run's scalars go into the existing run
    ``run_id``, which gets no new row; an experiment import does this). Tags keep their
    prefixes; ``scope`` maps tianshou's ``training/``,
    ``test/``, ``update/``, ``info/`` (and ``train/``) to train/test/update/info. The import
    is one transaction (:meth:`~rlarrow.Store.transaction`): the scalars and the runs rows
    are committed together once every file has been read, or nothing is (a damaged file
    found after others were read, a run id taken, a full disk, a kill). Memory stays
    bounded: the rows are streamed to a temporary Parquet file a row group at a time.

    Args:
        source: an event file, a log directory, a glob, or a list of them.
        store: a store, or the path of one (created when missing).
        run_id: the root run's id (None: a new one).
        name: the root run's name (a sub-run's is ``name/<its path>``).
        on_corrupt: ``"raise"`` at a record whose checksum fails, or ``"skip"`` it (counted
            in the report; ``TfeventsOptions(skip_corrupt=True)``).
        progress: a progress bar over the bytes read (None: when stderr is a terminal).
        existing_run: put the root run's scalars into the existing run ``run_id``.

    Returns:
        A :class:`TfeventsReport` (scalars, skipped summaries by kind, damage found).

    Example:
        >>> import_tfevents("log/ppo", "runs.rlarrow")  # doctest: +SKIP
    """
    from rlarrow.core.progress import bar
    from rlarrow.core.store import as_store, new_run_id

    base = run_id or new_run_id()
    reader = TfeventsReader(source, on_corrupt=on_corrupt, run_prefix=base)
    st = as_store(store, create=True)
    own = st is not store
    try:
        for run_name, _files in reader.runs:
            rid = reader.run_id(run_name)
            if existing_run and rid == base:
                if not st.has_run(rid):
                    raise InvalidInputError(st.path, f"run {rid!r} does not exist (existing_run=True)")
                continue
            if st.has_run(rid):
                raise InvalidInputError(st.path, f"run {rid!r} already exists; choose another run_id")
        # one transaction: the scalars (streamed to a file as they are read, memory bounded by
        # the writer's row group) and the runs rows are committed together, or nothing is
        with st.transaction():
            with bar(reader.total_bytes, "importing tfevents", progress=progress) as pbar:
                reader.progress = pbar
                with st.writer("scalars", file_bytes=1 << 62) as w:
                    for batch in reader:
                        w.write(batch)
            for run_name, files in reader.runs:
                if existing_run and reader.run_id(run_name) == base:
                    continue
                st.add_run(source="tfevents", run_id=reader.run_id(run_name),
                           name=name if run_name == "." else (f"{name}/{run_name}" if name else run_name),
                           source_path=_utf8(files[0].parent),
                           metadata={"tensorboard_run": run_name, "files": [_utf8(f).name for f in files]})
    finally:
        if own:
            st.close()
    return reader.report


def _utf8(path: Path) -> Path:
    """``path``, checked to be text the ``runs`` row can hold (a name not in UTF-8 is not)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(path, "this path is not valid UTF-8, so the runs row cannot record it; "
                                      "rename it with UTF-8 characters only and import again") from None
    return path


def export_tfevents(store: StoreLike, directory: str | os.PathLike[str], *, run_id: str | None = None,
                    overwrite: bool = False) -> list[Path]:
    """Write a store's ``scalars`` as event files: ``directory/<run_id>/events.out.tfevents...``.

    Sub-runs (``run/sub``) nest under their run's folder, as TensorBoard shows them.
    ``directory`` must be empty or new: an export never mixes with what is there (TensorBoard
    would show both); ``overwrite`` replaces its content, once every file is written (a
    failure leaves the old content).

    Returns:
        The files written.

    Raises:
        InvalidInputError: ``directory`` holds something and ``overwrite`` is false.

    Example:
        >>> export_tfevents("runs.rlarrow", "tb/", run_id="cartpole")  # doctest: +SKIP
    """
    from rlarrow.core.store import as_store
    from rlarrow.core.targets import fresh_directory, refuse_object_storage

    refuse_object_storage(directory, "a tfevents export")  # (Path() would make s3://b the local s3:/b)
    root = Path(directory)
    st = as_store(store, readonly=True)
    own = st is not store
    try:
        flt = None if run_id is None else (pc.field("run_id") == run_id) | pc.starts_with(
            pc.field("run_id"), run_id + "/")
        ds = st.dataset("scalars")
        with fresh_directory(root, overwrite=overwrite, what="a tfevents export", skip_empty=True) as tmp:
            if st.row_count("scalars") == 0:
                return []
            written = write_tfevents(ds.to_batches(filter=flt), tmp)
        return [root / p.relative_to(tmp) for p in written]
    finally:
        if own:
            st.close()
