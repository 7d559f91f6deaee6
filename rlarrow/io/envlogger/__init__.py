"""envlogger (riegeli) directories in and out of a store, through envlogger's own code.

Reading and writing riegeli needs envlogger itself (the ``envlogger`` extra). Supported:
envlogger 1.2, the version whose wheel loads on glibc < 2.38 (1.3's needs 2.38). envlogger
1.2 uses ``np.unicode_``, which NumPy 2 removed: :func:`load` sets that alias (to
``np.str_``) before importing it.

* :func:`import_envlogger`: every episode (all shards), observations of any nesting, the
  per-step ``custom_data``, the episode metadata, the run metadata and the specs. Steps
  go from envlogger's dm_env order to the store's RLDS alignment (``docs/format.md``).
  envlogger's reader skips damaged index records and unreadable episode metadata without a
  word, so what it returns is cross-checked against the files (:func:`riegeli_record_count`
  counts their records from the chunk headers): damage is a
  :class:`~rlarrow.core.errors.CorruptFileError`, or with ``skip_corrupt=True`` the episodes
  that are whole are imported and the rest listed (a warning, and the report).
* :func:`write_envlogger`: any episode source (any format's ``read_<format>``, or a
  stored run) written with envlogger's own writer, in dm_env order;
  :func:`export_envlogger` is that of a stored run: a directory envlogger's ``Reader`` reads
  as it read the original: the same steps, metadata and episode metadata, rewards and
  discounts in their specs' dtypes. A directory that holds anything is refused unless
  ``overwrite=True`` (``--overwrite``), which replaces it whole.

Dict observations and actions are stored with their fields sorted by name (at every
depth): envlogger returns dicts in an order that changes from process to process. A store
that already holds the same fields in another order keeps its order (``docs/format.md``).

Example:
    >>> from rlarrow.io.envlogger import export_envlogger, import_envlogger  # doctest: +SKIP
    >>> report = import_envlogger("catch_logs", "runs.rlarrow")  # doctest: +SKIP
    >>> export_envlogger("runs.rlarrow", "catch_again", run_id=report.run_id)  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.envlogger.envlogger_reading import (
    EnvloggerOptions,
    EnvloggerReport,
    import_envlogger,
    is_envlogger_dir,
    load,
    read_envlogger,
)
from rlarrow.io.envlogger.envlogger_writing import export_envlogger, write_envlogger
from rlarrow.io.envlogger.riegeli_counts import riegeli_record_count as riegeli_record_count

__all__ = [
    "EnvloggerOptions", "EnvloggerReport", "export_envlogger", "import_envlogger", "is_envlogger_dir", "load",
    "read_envlogger", "write_envlogger",
]
