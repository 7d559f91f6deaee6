"""rlarrow: every kind of data an RL run leaves behind, as one Arrow/Parquet dataset.

Replay-memory snapshots, episode trajectories and logger scalars live in one *store*:
a directory of Parquet tables (``runs``, ``episodes``, ``steps``, ``scalars``,
``memory``) under versioned schemas, readable by DuckDB, Polars, pyarrow, Spark and Ray
without rlarrow.

Example:
    >>> import numpy as np, rlarrow, tempfile, os
    >>> store = rlarrow.Store.create(os.path.join(tempfile.mkdtemp(), "runs.rlarrow"))
    >>> run = store.add_run(source="user", metadata={"env": "CartPole-v1", "seed": 0})
    >>> _ = store.append("steps", {
    ...     "run_id": run, "episode_id": 0, "step": np.arange(3), "env_index": 0,
    ...     "observation": np.random.rand(3, 4).astype(np.float32),
    ...     "action": [0, 1, None], "reward": [1.0, 1.0, None], "discount": [1.0, 0.0, None],
    ...     "is_first": [True, False, False], "is_last": [False, False, True],
    ...     "is_terminal": [False, False, True],
    ... })
    >>> store.row_count("steps")
    3

The package is in layers, each a folder that may import only those below it
(``docs/architecture.md``)::

    rlarrow.cli                       the command line, the demo
    rlarrow.train                     PyTorch and Ray loaders
    rlarrow.query | rlarrow.record    SQL, Polars, Reader | recorders, logger, replay memory
    rlarrow.io                        one module or subpackage per file format
    rlarrow.core                      schemas, tensors, metadata, errors, the store

Importing rlarrow imports none of its optional dependencies (torch, tensorboard,
dm_env, envlogger, matplotlib, ray), nor pyarrow, DuckDB or Polars: the names below are
loaded on first use, and ``from rlarrow import *`` works without any extra.
"""


from __future__ import annotations

import importlib
import warnings as _warnings
from typing import TYPE_CHECKING, Any

from rlarrow import _moved
from rlarrow._version import __version__
from rlarrow.core.errors import (
    ArgumentError,
    ArgumentTypeError,
    AssumptionWarning,
    CorruptFileError,
    FormatVersionError,
    FormatVersionWarning,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    OutputError,
    RLArrowError,
    RLArrowWarning,
    SchemaMismatchError,
    StoreError,
    TruncatedInputWarning,
    UnsupportedInputError,
    UsageError,
)

_moved.install()

if TYPE_CHECKING:
    from rlarrow import cli, core, io, query, record, train
    from rlarrow.core.migrations import migrate
    from rlarrow.core.store import CommitInfo, Store, StoreInfo, StoreLike, TableWriter, new_run_id
    from rlarrow.query import connect, scan, sql
    from rlarrow.query.reader import Reader, StepData
    from rlarrow.record.dm_env import EnvLogger  # noqa: F401 - lazy, not in __all__: needs dm-env
    from rlarrow.record.logger import SummaryWriter

# Only what imports without any optional extra: `from rlarrow import *` must work on a bare
# install (tests/test_layers.py). rlarrow.train.torch, rlarrow.record.gym and the like are
# imported by path; the names in _NEEDS_EXTRA resolve as attributes (rlarrow.EnvLogger) but
# are not in __all__.
__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "AssumptionWarning",
    "CommitInfo",
    "CorruptFileError",
    "FormatVersionError",
    "FormatVersionWarning",
    "InvalidInputError",
    "MissingDependencyError",
    "NotFoundError",
    "OutputError",
    "RLArrowError",
    "RLArrowWarning",
    "Reader",
    "SchemaMismatchError",
    "StepData",
    "Store",
    "StoreError",
    "StoreInfo",
    "StoreLike",
    "SummaryWriter",
    "TableWriter",
    "TruncatedInputWarning",
    "UnsupportedInputError",
    "UsageError",
    "__version__",
    "cli",
    "connect",
    "core",
    "io",
    "migrate",
    "new_run_id",
    "query",
    "record",
    "scan",
    "sql",
    "train",
]

# name -> module that defines it; loaded on first use so `import rlarrow` stays light.
_LAZY = {
    "Store": "rlarrow.core.store",
    "StoreInfo": "rlarrow.core.store",
    "StoreLike": "rlarrow.core.store",
    "TableWriter": "rlarrow.core.store",
    "CommitInfo": "rlarrow.core.store",
    "new_run_id": "rlarrow.core.store",
    "migrate": "rlarrow.core.migrations",
    "connect": "rlarrow.query",
    "sql": "rlarrow.query",
    "scan": "rlarrow.query",
    "EnvLogger": "rlarrow.record.dm_env",
    "Reader": "rlarrow.query.reader",
    "StepData": "rlarrow.query.reader",
    "SummaryWriter": "rlarrow.record.logger",
}
_LAYERS = {"cli", "core", "io", "query", "record", "train"}
#: lazy names whose module needs an optional extra (the extra's name)
_NEEDS_EXTRA = {"EnvLogger": "dm-env"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _LAYERS:
        value = importlib.import_module(f"rlarrow.{name}")
    elif f"rlarrow.{name}" in _moved.MOVED:
        # a moved module (rlarrow.torch, rlarrow.store, `from rlarrow import schema`): warns at
        # the caller's line and gives the module at its new path
        new = _moved.MOVED[f"rlarrow.{name}"]
        _warnings.warn(_moved.message(f"rlarrow.{name}", new), DeprecationWarning, stacklevel=2)
        value = importlib.import_module(new)
    else:
        raise AttributeError(f"module 'rlarrow' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
