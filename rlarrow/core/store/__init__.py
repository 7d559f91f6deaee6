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
from rlarrow.core.store.catalog import Catalog, new_run_id
from rlarrow.core.store.checked import (
    damaged_file as damaged_file,
)
from rlarrow.core.store.checked import (
    open_checked,
)
from rlarrow.core.store.checked import (
    verify_pages as verify_pages,
)
from rlarrow.core.store.compaction import Maintenance
from rlarrow.core.store.files import (
    AUTO_COMPACT_FILES as AUTO_COMPACT_FILES,
)
from rlarrow.core.store.files import (
    FILE_BYTES as FILE_BYTES,
)
from rlarrow.core.store.files import (
    LOCK_NAME as LOCK_NAME,
)
from rlarrow.core.store.files import (
    ROW_GROUP_BYTES as ROW_GROUP_BYTES,
)
from rlarrow.core.store.files import (
    CommitInfo,
)
from rlarrow.core.store.journal import (
    apply_pending as apply_pending,
)
from rlarrow.core.store.journal import (
    pending_parts as pending_parts,
)
from rlarrow.core.store.journal import (
    roll_forward as roll_forward,
)
from rlarrow.core.store.layouts import (
    LayoutInfo,
)
from rlarrow.core.store.layouts import (
    layout_directory as layout_directory,
)
from rlarrow.core.store.layouts import (
    layout_number as layout_number,
)
from rlarrow.core.store.layouts import (
    table_of as table_of,
)
from rlarrow.core.store.layouts import (
    union_layouts as union_layouts,
)
from rlarrow.core.store.layouts import (
    validate_rows as validate_rows,
)
from rlarrow.core.store.lease import ReaderLease
from rlarrow.core.store.manifest import (
    MANIFEST_NAME as MANIFEST_NAME,
)
from rlarrow.core.store.manifest import (
    check_inside as check_inside,
)
from rlarrow.core.store.manifest import (
    check_manifest_versions as check_manifest_versions,
)
from rlarrow.core.store.manifest import (
    decode_schema as decode_schema,
)
from rlarrow.core.store.manifest import (
    encode_schema as encode_schema,
)
from rlarrow.core.store.manifest import (
    fsync_dir as fsync_dir,
)
from rlarrow.core.store.manifest import (
    parse_manifest as parse_manifest,
)
from rlarrow.core.store.manifest import (
    write_error as write_error,
)
from rlarrow.core.store.protocol import StoreReader
from rlarrow.core.store.repair import FileProblem, RepairReport, StoreInfo, TableInfo
from rlarrow.core.store.staging import StagedFile, Staging
from rlarrow.core.store.writer import TableWriter

#: the store's documented API: what users call (``docs/api/``); the helpers imported above but
#: not listed here (``fsync_dir``, ``roll_forward``, ``parse_manifest``, ``layout_number``, ...)
#: are the internal API rlarrow's other layers use (``docs/architecture.md``), importable from
#: here as before, and no part of the public surface
__all__ = ["Catalog", "CommitInfo", "FileProblem", "LayoutInfo", "Maintenance", "ReaderLease",
           "RepairReport", "StagedFile", "Staging", "Store", "StoreInfo", "StoreLike", "StoreReader",
           "TableInfo", "TableWriter", "as_store", "new_run_id", "open_checked", "opened"]

#: Sizes that stay settable here, as before the package was split: setting
#: ``rlarrow.core.store.ROW_GROUP_BYTES`` sets it where it is read (:mod:`~rlarrow.core.store.files`).
_TUNABLE = frozenset({"ROW_GROUP_BYTES", "FILE_BYTES", "AUTO_COMPACT_FILES"})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _TUNABLE:
            setattr(_files, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
