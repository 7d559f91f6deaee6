"""The Store class: opening, creating and closing a store, on top of its layers.

:class:`Store` is one class made of layers, each in its own module and each adding one
concern to the one below: :mod:`~rlarrow.core.store.base` (state, manifest, lock),
:mod:`~rlarrow.core.store.journal` (recovery, consistent views),
:mod:`~rlarrow.core.store.tables` (listing, reading, layouts),
:mod:`~rlarrow.core.store.repair` (checks, repair, info),
:mod:`~rlarrow.core.store.compaction` (compaction, maintenance, vacuum),
:mod:`~rlarrow.core.store.commits` (appends, writers, transactions, staged files) and
:mod:`~rlarrow.core.store.edits` (delete, label, merge). This
module adds the constructors, leases, the RL catalog on top (:attr:`Store.catalog`,
:mod:`~rlarrow.core.store.catalog`), and the helpers that take a store or its path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, Unpack

import pyarrow as pa

from rlarrow.core import arguments as _arguments
from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentError, ArgumentTypeError, StoreError
from rlarrow.core.store.catalog import Catalog, RunFields
from rlarrow.core.store.edits import EditingStore
from rlarrow.core.store.entries import MANIFEST_FIX, is_directory, open_lock, refuse_link
from rlarrow.core.store.files import AUTO_COMPACT_FILES, unwritable
from rlarrow.core.store.lease import PROCESS_LEASES, ReaderLease
from rlarrow.core.store.manifest import MANIFEST_NAME, empty_manifest, write_error
from rlarrow.core.store.repair import StoreInfo

__all__ = ["Store", "StoreLike", "as_store", "opened"]


class Store(EditingStore):
    """A directory of Parquet tables (runs, episodes, steps, scalars, memory).

    Create one with :meth:`Store.create`, open one with :meth:`Store.open`. A store is a
    context manager; leaving it closes open writers (committing what they buffered).

    Args:
        path: the store directory.
        readonly: True: never write (no recovery, no lock file), for shared or read-only
            media. False: open for writing (a StoreError when the store cannot be
            written). None (the default): for writing when the store can be written,
            read-only otherwise (read-only media, no permission), where a write then
            raises a StoreError saying why.
        auto_compact: compact a table after a commit once it has more than this many
            small files (None: only when :meth:`compact` is called).
        check_versions: False: open a store whose format or table versions this rlarrow
            would refuse (what ``rlarrow migrate`` does, to upgrade it).
        recover: False: open for writing without first finishing or undoing interrupted
            commits (what ``rlarrow repair``'s dry run does, to report them as they are).
        version: read the store as it was at this version (:attr:`version`,
            :meth:`history`), read-only; None: as it is now. Files a later compaction or
            edit replaced are kept for this until ``rlarrow vacuum`` deletes them.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        auto_compact: int | None = AUTO_COMPACT_FILES,
        check_versions: bool = True,
        recover: bool = True,
        version: int | None = None,
        _check_versions: bool | None = None,
        _recover: bool | None = None,
    ) -> None:
        # (``_check_versions``/``_recover``: the names these had before they were public)
        if not isinstance(path, (str, os.PathLike)):
            raise ArgumentTypeError(f"path: give the store's directory (a str or a path), not "
                                    f"{type(path).__name__} {path!r:.60}")
        if not os.fspath(path):
            raise ArgumentError("path: an empty path: give the store's directory")
        refusal = _arguments.object_storage_refusal(path, "a store", kind="open")
        if refusal is not None:  # (Path() would make s3://b/x the local s3:/b/x)
            raise StoreError(refusal)
        if version is not None:
            version = _arguments.integer(version, "version", minimum=0)
        check_versions = check_versions if _check_versions is None else _check_versions
        recover = recover if _recover is None else _recover
        self.path = Path(path)
        self.readonly = bool(readonly)
        self._readonly_reason = "it was opened read-only (readonly=True)"
        self.auto_compact = auto_compact
        self._writers = []
        self._tx = None
        self._lock_depth = 0
        self._lock_fd = None
        manifest_path = self.path / MANIFEST_NAME
        refuse_link(manifest_path, "the store's manifest", MANIFEST_FIX)  # (never looked at through a link)
        if not manifest_path.is_file():
            if not self.path.exists():
                raise StoreError(f"{self.path}: no such store; create it with "
                                 f"rlarrow.Store.create({os.fspath(path)!r})")
            # a store that lost its manifest (table folders and logs looked at, never through a link)
            if any(is_directory(d) and is_directory(d / "_delta_log") for d in self.path.iterdir()):
                raise StoreError(f"{self.path}: its manifest ({MANIFEST_NAME}) is missing; its tables' Delta "
                                 f"logs are there: rebuild it with `rlarrow repair {self.path} --apply`")
            raise StoreError(f"{self.path}: not an rlarrow store (no {MANIFEST_NAME}); create "
                             "one with rlarrow.Store.create(path)")
        self._manifest = self._read_manifest()
        self._check_table_dirs(self._manifest)
        if check_versions:
            self._check_versions(self._manifest)
        if version is not None:
            from rlarrow.core.store.delta import manifest_at

            self.readonly = True
            self._readonly_reason = f"it was opened at version {version} (version=...), which is read-only"
            current = self._snapshot()
            self._manifest = current if version == current.get("version", 0) else manifest_at(
                self.path, current, version)
            self._pinned_version = version
            return
        if readonly is None:
            reason = unwritable(self.path)
            if reason is not None:
                self.readonly, self._readonly_reason = True, reason
        if self.readonly:
            self._manifest = self._snapshot()
        else:
            with self._locked():
                manifest = self._read_manifest()
                self._manifest = self._recover(manifest) if recover else manifest

    # ---------------------------------------------------------------- creation / opening

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        exist_ok: bool = False,
        auto_compact: int | None = AUTO_COMPACT_FILES,
    ) -> Store:
        """Create a new, empty store at ``path`` (its parent directories too).

        Args:
            path: the directory to create; it must not exist or be empty.
            exist_ok: open the store instead of failing when one is already there.
            auto_compact: see :class:`Store`.

        Raises:
            StoreError: ``path`` holds a store (and not ``exist_ok``) or other files, or is
                a URI (``s3://...``): a store on object storage is not writable yet (write it
                locally, then ``rlarrow push``); nothing is created then.
        """
        refusal = _arguments.object_storage_refusal(path, "a store")
        if refusal is not None:
            raise StoreError(refusal)
        p = Path(path)
        if os.path.lexists(p / MANIFEST_NAME):
            if exist_ok:
                return cls(p, auto_compact=auto_compact)
            raise StoreError(f"{p}: a store already exists here; open it with "
                             "rlarrow.Store.open(path) or pass exist_ok=True")
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise StoreError(f"{p}: exists and is not an empty directory; choose a new path")
        try:
            p.mkdir(parents=True, exist_ok=True)
            for name in _schema.TABLE_NAMES:
                (p / name).mkdir(exist_ok=True)
            os.close(open_lock(p))
        except OSError as exc:
            raise write_error(p, exc) from exc
        cls._write_manifest_at(p, empty_manifest())
        return cls(p, readonly=False, auto_compact=auto_compact)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        create: bool = False,
        auto_compact: int | None = AUTO_COMPACT_FILES,
        version: int | None = None,
    ) -> Store:
        """Open an existing store (or create it with ``create=True``).

        ``version``: the store as it was then, read-only (see :class:`Store`).

        By default a store that cannot be written (read-only media, no permission) opens
        read-only, so ``Store.open(path).read(...)`` works there; see :class:`Store`.

        Raises:
            StoreError: no store at ``path``, or ``path`` is a URI (``s3://...``): read a
                pushed store there with :class:`rlarrow.core.remote.RemoteStore`.
            FormatVersionError: written by an older major format (run ``rlarrow migrate``)
                or a newer one (upgrade rlarrow).
        """
        if create and not os.path.lexists(Path(path) / MANIFEST_NAME):
            return cls.create(path, auto_compact=auto_compact)
        return cls(path, readonly=readonly, auto_compact=auto_compact, version=version)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close open writers, committing what they buffered."""
        writers, self._writers = self._writers, []
        errors = []
        for writer in writers:
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - close every writer, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        m = self._manifest
        counts = ", ".join(f"{n}={t['rows']}" for n, t in m["tables"].items() if t["rows"])
        return f"Store({os.fspath(self.path)!r}, format {m['format_version']}, {counts or 'empty'})"

    @property
    def catalog(self) -> Catalog:
        """The store's RL catalog: runs, episodes and their labels (:mod:`~rlarrow.core.store.catalog`).

        Example:
            >>> import rlarrow, tempfile, os
            >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
            >>> store.catalog.has_run(store.catalog.add_run(source="user"))
            True
        """
        return Catalog(self)

    # the catalog's verbs, kept on the store (each is the catalog's: see there)

    def add_run(self, **fields: Unpack[RunFields]) -> str:
        """Add a row to ``runs`` and return its ``run_id`` (:meth:`Catalog.add_run`).

        Raises:
            StoreError: a run with this id already exists.
        """
        return self.catalog.add_run(**fields)

    def has_run(self, run_id: str) -> bool:
        """Whether the ``runs`` table holds a row for ``run_id`` (:meth:`Catalog.has_run`).

        Example:
            >>> import rlarrow, tempfile
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
            >>> run = st.add_run(source="user")
            >>> st.has_run(run), st.has_run("no-such-run")
            (True, False)
        """
        return self.catalog.has_run(run_id)

    def runs(self) -> pa.Table:
        """The ``runs`` table."""
        return self.catalog.runs()

    def info(self) -> StoreInfo:
        """Tables, row counts, runs, schema versions, size on disk, and missing or damaged files.

        The engine's summary (:meth:`RepairStore.info
        <rlarrow.core.store.repair.RepairStore.info>`: it reads only the files' footers)
        with the catalog's runs (:meth:`Catalog.run_summaries`).

        Example:
            >>> import rlarrow, tempfile
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
            >>> run = st.add_run(source="user", name="first")
            >>> info = st.info()
            >>> [r["name"] for r in info.runs], info.tables["runs"].rows, info.problems
            (['first'], 1, [])
        """
        info = super().info()
        info.runs.extend(self.catalog.run_summaries(info.problems))
        return info

    def label(self, metadata: Mapping[str, Any], *, runs: Sequence[str] | None = None,
              episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Set metadata keys of runs or episodes: one commit (:meth:`Catalog.label`, which says how).

        Raises:
            ArgumentError: nothing selected, or metadata that is not a mapping.
            NotFoundError: no run or episode matched.
        """
        return self.catalog.label(metadata, runs=runs, episodes=episodes)

    def delete(self, *, runs: Sequence[str] | None = None,
               episodes: Iterable[Any] | None = None) -> dict[str, int]:
        """Delete runs, or episodes (``(run_id, episode_id)`` pairs), from every table: one commit.

        See :meth:`Catalog.delete`. Returns rows deleted per table directory.

        Example:
            >>> import rlarrow, tempfile
            >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
            >>> _ = st.append("scalars", {"run_id": ["a", "b"], "scope": "train", "tag": "loss",
            ...                           "step": 0, "value": [1.0, 2.0]})
            >>> st.delete(runs="a"), st.row_count("scalars")
            ({'scalars': 1}, 1)
        """
        return self.catalog.delete(runs=runs, episodes=episodes)

    def lease(self) -> ReaderLease:
        """A :class:`ReaderLease`: pinned files stay readable while it is held."""
        return ReaderLease(self.path)

    def process_lease(self) -> ReaderLease:
        """The lease this process holds on the store until it ends.

        For readers whose results outlive any object that could hold a lease (a Polars
        LazyFrame and the frames derived from it, a lazy Ray dataset): their files stay
        readable for the process's life, so a file a compaction replaced is freed only when
        the process ends (its links are removed then, or by the next writer after a kill).
        """
        key = os.path.realpath(self.path)
        lease = PROCESS_LEASES.get(key)
        if lease is None:
            lease = PROCESS_LEASES[key] = ReaderLease(self.path)
        return lease


#: What every function that takes a store accepts: an open :class:`Store` or its path.
StoreLike = Store | str | os.PathLike[str]


def as_store(store: StoreLike, *, readonly: bool | None = None, create: bool = False,
             version: int | None = None) -> Store:
    """The :class:`Store` itself, or the store at a path opened with ``readonly``/``create``.

    The caller owns a store opened here; :func:`opened` closes it for you. ``version``:
    the store as it was at that version (read-only), also when a :class:`Store` is given.

    Example:
        >>> import rlarrow, tempfile
        >>> st = rlarrow.Store.create(tempfile.mkdtemp() + "/s")
        >>> as_store(st) is st, as_store(st.path, readonly=True).readonly
        (True, True)
    """
    if isinstance(store, Store):
        if version is None or version == store.__dict__.get("_pinned_version"):
            return store
        return Store.open(store.path, version=version)
    return Store.open(store, readonly=readonly, create=create, version=version)


@contextlib.contextmanager
def opened(store: StoreLike, *, readonly: bool | None = None, create: bool = False,
           version: int | None = None) -> Iterator[Store]:
    """The store given (left open), or the one at a path, opened here and closed on exit.

    Example:
        >>> import rlarrow, tempfile
        >>> path = tempfile.mkdtemp() + "/s"
        >>> with opened(path, create=True) as st:
        ...     st.row_count("steps")
        0
    """
    if isinstance(store, Store) and (version is None or version == store.__dict__.get("_pinned_version")):
        yield store
        return
    st = as_store(store, readonly=readonly, create=create, version=version)
    try:
        yield st
    finally:
        st.close()
