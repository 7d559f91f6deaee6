"""Edits without rewriting the data: delete runs or episodes, label them, merge stores.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Each edit is one journaled step (``pending`` with one part per table, as a transaction's
commit), so readers see all of it or none of it, and one store version: the version before
it still reads the data as it was (``version=``, Delta time travel) until ``rlarrow vacuum``.

What is written:

- :meth:`EditingStore.rewrite_rows` (what the catalog's ``delete`` and ``label`` name:
  :mod:`~rlarrow.core.store.catalog` says which rows) drops every file whose rows are all
  deleted (nothing rewritten: a run recorded or imported apart from others is a set of
  files of its own) and rewrites only the files that hold deleted rows beside kept ones,
  streaming them batch by batch; a relabel rewrites only the small ``runs``/``episodes``
  files that hold the rows: ``steps`` and ``memory``, the data, are not touched.
- :meth:`EditingStore.merge` adds another store's files by reference (a hard link on the
  same filesystem: no byte copied; a copy, once, elsewhere), in one transaction.

Why copy-on-write of the files concerned and not Delta Lake deletion vectors: every engine
that reads the tables then sees the deletion (``deltalake``'s pyarrow datasets, which Ray
Data reads through, refuse tables with deletion vectors, and DuckDB or Polars reading the
files rlarrow pins would not apply them), at the cost of rewriting the files that mix
deleted and kept rows.

Example:
    >>> import rlarrow, tempfile, os
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "s"))
    >>> for run in ("a", "b"):
    ...     _ = store.append("scalars", {"run_id": run, "scope": "train", "tag": "loss",
    ...                                  "step": [0, 1], "value": [1.0, 0.5]})
    >>> before = store.version
    >>> store.delete(runs=["a"])
    {'scalars': 2}
    >>> store.row_count("scalars"), rlarrow.Store.open(store.path, version=before).row_count("scalars")
    (2, 4)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rlarrow.core import schema as _schema
from rlarrow.core.errors import ArgumentTypeError, StoreError
from rlarrow.core.store.commits import CommittingStore
from rlarrow.core.store.files import (
    batch_rows,
    fsync_file,
    new_file_name,
    open_parquet,
    temp_name,
    write_row_groups,
)
from rlarrow.core.store.layouts import file_run_ids, table_of
from rlarrow.core.store.manifest import check_inside, write_error

__all__: list[str] = []

_BATCH_ROWS = 65536


class RowSelection(Protocol):
    """The rows an edit rewrites (the catalog's :class:`~rlarrow.core.store.catalog.Selection` is one).

    The engine knows only the key columns: which files may hold selected rows is judged by
    their ``run_id`` statistics (:meth:`run_ids`), and which rows are selected by their keys.
    """

    def run_ids(self) -> set[str]:
        """Every ``run_id`` a selected row may have (files holding none are not read)."""

    def applies(self, columns: Sequence[str]) -> bool:
        """Whether a table of these columns can hold selected rows."""

    def mask(self, keys: pa.Table) -> np.ndarray:
        """Which rows of ``keys`` (``run_id``, and ``episode_id`` where the table has it) are selected."""


class EditingStore(CommittingStore):
    """Deleting, labelling and merging, each one atomic commit (see :class:`rlarrow.Store`)."""

    def rewrite_rows(self, selection: RowSelection,
                     relabel: tuple[str, dict[str, Any]] | None = None) -> dict[str, int]:
        """Drop the selected rows, or merge ``relabel``'s metadata into them: one journaled step.

        The engine's edit, that the catalog's ``delete`` and ``label`` name
        (:class:`~rlarrow.core.store.catalog.Catalog`): under the lock, every file holding
        selected rows is dropped (all its rows selected, deleting) or rewritten beside the
        others, and the manifest and Delta logs change in one step (readers see all of it or
        none; the version before still reads the rows).

        Args:
            selection: which rows (:class:`RowSelection`).
            relabel: ``(table, metadata)``: merge ``metadata`` into the ``metadata`` of the
                selected rows of ``table`` only; None: delete the selected rows of every table.

        Returns:
            Rows dropped or changed per table directory (empty: nothing matched, no new version).

        Raises:
            StoreError: inside a transaction, the store is read-only, or a write failed.
        """
        operation = "DELETE" if relabel is None else "UPDATE"
        if self._tx is not None:
            raise StoreError("edits are commits of their own: run them outside a transaction()")
        counts: dict[str, int] = {}
        written: list[tuple[Path, Path]] = []  # (temporary, final)
        with self._locked(), self._delta_operation(operation, True):
            manifest = self._recover(self._read_manifest())
            parts = []
            try:
                for name, entry in manifest["tables"].items():
                    table = table_of(name)
                    if relabel is not None and table != relabel[0]:
                        continue
                    columns = _schema.table(table).arrow_schema().names
                    if not entry["files"] or not selection.applies(columns):
                        continue
                    part = self._edit_table(name, entry, selection, relabel, counts, written)
                    if part is not None:
                        parts.append(part)
            except BaseException:
                for tmp, _ in written:
                    tmp.unlink(missing_ok=True)
                raise
            if not parts:
                return {}
            self._journaled_step(manifest, parts, written)
        return counts

    def _edit_table(self, name: str, entry: dict[str, Any], selection: RowSelection,
                    relabel: tuple[str, dict[str, Any]] | None, counts: dict[str, int],
                    written: list[tuple[Path, Path]]) -> dict[str, Any] | None:
        directory = self.path / name
        columns = _schema.table(table_of(name)).arrow_schema().names
        keys = ["run_id", "episode_id"] if "episode_id" in columns else ["run_id"]
        old: list[str] = []
        new_entries: list[dict[str, Any]] = []
        runs = selection.run_ids()
        for f in entry["files"]:
            path = check_inside(directory, f["name"])
            try:
                # a file's run ids come from its row-group statistics: the files of other runs
                # are skipped without reading a value
                if not runs & file_run_ids(path):
                    continue
                mask = selection.mask(pq.read_table(path, columns=keys))
            except (pa.ArrowInvalid, OSError) as exc:
                from rlarrow.core.errors import CorruptFileError

                raise CorruptFileError(path, f"cannot be read to edit it ({exc}); run `rlarrow repair "
                                       f"{self.path}` first") from exc
            hits = int(mask.sum())
            if not hits:
                continue
            counts[name] = counts.get(name, 0) + hits
            old.append(f["name"])
            if relabel is None and hits == len(mask):
                continue  # every row deleted: the file just leaves the table
            final = new_file_name()
            tmp = directory / temp_name(final)
            written.append((tmp, directory / final))
            try:
                rows = self._rewrite_file(path, tmp, mask, relabel)
                new_entries.append({"name": final, "rows": rows, "bytes": tmp.stat().st_size})
            except (OSError, pa.ArrowException) as exc:  # a full disk, a file size limit, ...
                raise _edit_error(self.path, tmp, exc) from exc
        if not old:
            return None
        return {"op": "label" if relabel else "delete", "table": name, "old": old,
                "new": [e["name"] for e in new_entries], "new_entries": new_entries}

    @staticmethod
    def _rewrite_file(path: Path, tmp: Path, mask: np.ndarray,
                      relabel: tuple[str, dict[str, Any]] | None) -> int:
        """Stream ``path`` into ``tmp``: without the masked rows, or with their metadata merged."""
        from rlarrow.core import metadata as _metadata

        pf = pq.ParquetFile(path)
        writer = None
        rows = offset = 0
        try:
            table = (pf.schema_arrow.metadata or {}).get(b"rlarrow.table", b"").decode()
            for batch in pf.iter_batches(batch_size=min(_BATCH_ROWS, batch_rows(table))):
                part = pa.Table.from_batches([batch])
                here = mask[offset:offset + part.num_rows]
                offset += part.num_rows
                if relabel is None:
                    part = part.filter(pa.array(~here))
                elif here.any():
                    part = _relabelled(part, here, relabel[1], _metadata)
                if writer is None:
                    writer = open_parquet(tmp, pf.schema_arrow, part)
                rows += part.num_rows
                write_row_groups(writer, part.cast(pf.schema_arrow), 64 << 20, tmp)
            if writer is None:
                writer = open_parquet(tmp, pf.schema_arrow, pf.schema_arrow.empty_table())
        finally:
            if writer is not None:
                writer.close()
        fsync_file(tmp)
        return rows

    def merge(self, other: EditingStore | str | os.PathLike[str]) -> dict[str, int]:
        """Add every run of another store (a :class:`~rlarrow.Store` or its path): one commit.

        The other store's files are added by reference: hard-linked into this store where
        both are on one filesystem (no byte copied; files never change, so the two stores
        share them safely), copied once otherwise. Each file goes to the layout of its
        types (a new layout when this store has none). Readers see all of it or none.

        Returns:
            Rows added per table.

        Raises:
            StoreError: a run of the other store is in this one already (delete it first, or
                merge the other way), or the stores' table versions differ (``rlarrow migrate``).
        """
        # (type(self): the Store class, which this layer may not import: it is built on it)
        given: object = other  # (checked: a caller without a type checker may pass anything)
        if not isinstance(given, (EditingStore, str, os.PathLike)):
            raise ArgumentTypeError(f"other: give a Store or a store's path, not {type(given).__name__} "
                                    f"{given!r:.60}")
        src: EditingStore = other if isinstance(other, EditingStore) else type(self)(  # type: ignore[call-arg]
            other, readonly=True)
        if os.path.realpath(src.path) == os.path.realpath(self.path):
            raise StoreError(f"{self.path}: cannot merge a store into itself")
        mine = self.manifest()
        theirs = src.manifest()
        for name, entry in theirs["tables"].items():
            if entry["files"] and name in mine["tables"] and \
                    entry.get("schema_version") != mine["tables"][name].get("schema_version"):
                ours = mine["tables"][name].get("schema_version")
                raise StoreError(f"{src.path}: table {name!r} is of schema {entry.get('schema_version')}, "
                                 f"this store's of {ours}; run rlarrow migrate on the older one first")
        clash = sorted(_run_ids(src) & _run_ids(self))
        if clash:
            raise StoreError(f"{self.path}: runs {clash[:5]} are in both stores; delete them from one first "
                             "(rlarrow delete STORE --run RUN) or merge the other way")
        counts: dict[str, int] = {}
        # (the operation outside: the transaction commits as its block ends, inside it)
        with self._delta_operation("MERGE", True), self.transaction():
            for table in _schema.TABLE_NAMES:
                numbers: list[int | None] = [info.layout for info in src.layouts(table)]
                for layout in numbers or [None]:
                    files = src.files(table, refresh=False, layout=layout)
                    if not files:
                        continue
                    # (no `with`: leaving a staging deletes its hidden files, which this
                    # transaction holds until it commits; a failure deletes them with it)
                    staging = self.stage(table, tag="merge")
                    staged = []
                    try:
                        for f in files:
                            staged.append(_staged_reference(staging, f, table))
                    except BaseException:
                        for s in staged:
                            Path(s.path).unlink(missing_ok=True)
                        raise
                    self.commit_staged(staged)
                    counts[table] = counts.get(table, 0) + sum(s.rows for s in staged)
        return counts


def _edit_error(store: Path, tmp: Path, exc: OSError | pa.ArrowException) -> StoreError:
    """The StoreError of an edit whose rewrite of a file failed: the store is unchanged."""
    if isinstance(exc, OSError):
        cause = write_error(tmp, exc)
        return StoreError(f"{store}: the edit was not committed, the store is unchanged. {cause}")
    return StoreError(f"{store}: the edit was not committed, the store is unchanged: rewriting {tmp} "
                      f"failed ({exc}). Every earlier commit is intact")


def _relabelled(part: pa.Table, here: np.ndarray, changes: dict[str, Any], metadata: Any) -> pa.Table:
    texts = part.column("metadata").to_pylist()
    types = part.column("metadata_types").to_pylist()
    values = metadata.decode_column(texts, types)
    for i in np.flatnonzero(here):
        current = values[i]
        value = dict(current) if isinstance(current, dict) else (
            {} if current is None else {"value": current})
        for key, new in changes.items():
            if new is None:
                value.pop(key, None)
            else:
                value[key] = new
        values[i] = value
    new_texts, new_types = metadata.encode_column(values)
    part = part.set_column(part.schema.get_field_index("metadata"), part.schema.field("metadata"),
                           pa.array(new_texts, part.schema.field("metadata").type))
    return part.set_column(part.schema.get_field_index("metadata_types"), part.schema.field("metadata_types"),
                           pa.array(new_types, part.schema.field("metadata_types").type))


def _run_ids(store: EditingStore) -> set[str]:
    """Every run with rows in the store (from the files' statistics, cached per store object)."""
    found: set[str] = set()
    for name in store.manifest(refresh=False)["tables"]:
        found |= store._runs_in(name)
    return found


def _staged_reference(staging: Any, source: Path, table: str) -> Any:
    """A file of another store as a staged file of this one: hard-linked, or copied once."""
    from rlarrow.core.store.staging import StagedFile

    final = new_file_name()
    tmp = Path(staging.directory) / temp_name(final, staging.owner)
    try:
        os.link(source, tmp)
    except OSError:  # another filesystem (or no hard links): one copy
        try:
            shutil.copyfile(source, tmp)
            fsync_file(tmp)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise write_error(tmp, exc) from exc
    pf = pq.ParquetFile(tmp)
    return StagedFile(table=table, path=os.fspath(tmp), name=final, rows=pf.metadata.num_rows,
                      schema=pf.schema_arrow.remove_metadata(), runs=tuple(sorted(file_run_ids(tmp))))
