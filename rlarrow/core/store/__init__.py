"""The store: a directory of Parquet tables any engine can read without rlarrow.

Layout (``docs/format.md`` is the full description)::

    STORE/
      _rlarrow_store.json     manifest: format version, tables, files, row counts
      _rlarrow_segments/      a long file list's earlier entries, in immutable pieces
      .rlarrow.lock           lock taken while the manifest changes
      runs/part-*.parquet
      episodes/part-*.parquet
      steps/part-*.parquet
      scalars/part-*.parquet
      memory/part-*.parquet
      memory.2/part-*.parquet   a further layout of a table: runs with other tensors

A table with tensor columns has one layout (a concrete schema, one directory) per set of
tensor types its runs hold; a run's rows of a table are in one layout (:meth:`Store.layouts`).

Commits are atomic: a file is written under a hidden temporary name, synced, renamed
to ``part-*.parquet`` and only then listed in the manifest, which is itself replaced
atomically. A process killed at any moment leaves every earlier commit readable; an
unfinished temporary file is removed by the next writer. Many small writes do not make
many small files: :class:`TableWriter` buffers rows into row groups, and
:meth:`Store.compact` (run automatically past a threshold) merges small files.

The package's modules, each owning one part (lowest first):

* :mod:`~rlarrow.core.store.manifest`: the manifest file, checked on read, written whole;
  how schemas are kept in it.
* :mod:`~rlarrow.core.store.layouts`: layout naming and combining, row validation.
* :mod:`~rlarrow.core.store.files`: Parquet writing, temporary names, fsync, sizes;
  :class:`CommitInfo`.
* :mod:`~rlarrow.core.store.staging`: files written by other processes (Ray tasks),
  committed by :meth:`Store.commit_staged`.
* :mod:`~rlarrow.core.store.writer`: :class:`TableWriter`.
* :mod:`~rlarrow.core.store.lease`: :class:`ReaderLease`.
* :mod:`~rlarrow.core.store.base`, :mod:`~rlarrow.core.store.journal`,
  :mod:`~rlarrow.core.store.tables`, :mod:`~rlarrow.core.store.repair`,
  :mod:`~rlarrow.core.store.compaction`, :mod:`~rlarrow.core.store.commits`,
  :mod:`~rlarrow.core.store.edits`: the layers :class:`Store` is made of (state and lock;
  recovery and versions; listing, reading and layouts; checks and repair; compaction,
  :class:`Maintenance` and vacuum; commits; edits), one class each, each on the one
  before; ``_store`` adds the constructors.
* :mod:`~rlarrow.core.store.protocol`: :class:`StoreReader`, what readers use of a store,
  local or remote (:class:`Store` and ``RemoteStore`` both satisfy it).
* :mod:`~rlarrow.core.store.catalog`: :class:`Catalog` (``Store.catalog``), the RL catalog
  on top of the engine: runs, episodes and their labels.
* :mod:`~rlarrow.core.store.delta`: each table's Delta Lake log (written after every
  settling manifest write; read for ``version=``).

Code outside this package uses the names exported here (``tests/core/store/test_store_api.py``
checks that no private name of the package is used elsewhere in rlarrow).

Example:
    >>> import numpy as np, rlarrow, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.rlarrow")
    >>> with rlarrow.Store.create(path) as store:
    ...     run = store.add_run(source="user", metadata={"seed": 1})
    ...     _ = store.append("scalars", {"run_id": run, "scope": "train", "tag": "loss",
    ...                                  "step": np.arange(3), "value": [1.0, 0.5, 0.25]})
    ...     store.row_count("scalars")
    3
"""

from __future__ import annotations

import sys
import types
from typing import Any

from rlarrow.core.store import files as _files
from rlarrow.core.store._store import Store, StoreLike, as_store, opened
from rlarrow.core.store.catalog import Catalog
from rlarrow.core.store.checked import damaged_file, open_checked, verify_pages
from rlarrow.core.store.commits import new_run_id
from rlarrow.core.store.compaction import Maintenance
from rlarrow.core.store.files import (
    AUTO_COMPACT_FILES,
    FILE_BYTES,
    LOCK_NAME,
    ROW_GROUP_BYTES,
    CommitInfo,
)
from rlarrow.core.store.journal import apply_pending, pending_parts, roll_forward
from rlarrow.core.store.layouts import (
    LayoutInfo,
    layout_directory,
    layout_number,
    table_of,
    union_layouts,
    validate_rows,
)
from rlarrow.core.store.lease import ReaderLease
from rlarrow.core.store.manifest import (
    MANIFEST_NAME,
    check_inside,
    check_manifest_versions,
    decode_schema,
    encode_schema,
    fsync_dir,
    parse_manifest,
    write_error,
)
from rlarrow.core.store.protocol import StoreReader
from rlarrow.core.store.repair import FileProblem, RepairReport, StoreInfo, TableInfo
from rlarrow.core.store.staging import StagedFile, Staging
from rlarrow.core.store.writer import TableWriter

__all__ = ["AUTO_COMPACT_FILES", "CommitInfo", "FILE_BYTES", "FileProblem", "LOCK_NAME", "LayoutInfo",
           "MANIFEST_NAME", "Maintenance", "ROW_GROUP_BYTES", "ReaderLease", "RepairReport", "StagedFile",
           "Staging", "Store", "StoreInfo", "StoreLike", "TableInfo", "TableWriter", "apply_pending",
           "as_store", "check_inside", "check_manifest_versions", "damaged_file", "decode_schema",
           "encode_schema", "fsync_dir", "layout_directory", "layout_number", "new_run_id", "open_checked",
           "opened", "parse_manifest", "pending_parts", "roll_forward", "table_of", "union_layouts",
           "validate_rows", "verify_pages", "write_error",
           "StoreReader", "Catalog"]

#: Sizes that stay settable here, as before the package was split: setting
#: ``rlarrow.core.store.ROW_GROUP_BYTES`` sets it where it is read (:mod:`~rlarrow.core.store.files`).
_TUNABLE = frozenset({"ROW_GROUP_BYTES", "FILE_BYTES", "AUTO_COMPACT_FILES"})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _TUNABLE:
            setattr(_files, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
