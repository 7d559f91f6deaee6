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

Importing rlarrow imports none of its optional dependencies (torch, tensorboard,
dm_env, envlogger, matplotlib, ray); the features that need them import them when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlarrow._version import __version__
from rlarrow.errors import (
    AssumptionWarning,
    CorruptFileError,
    FormatVersionError,
    FormatVersionWarning,
    InvalidInputError,
    MissingDependencyError,
    RLArrowError,
    RLArrowWarning,
    SchemaMismatchError,
    StoreError,
    TruncatedInputWarning,
    UnsupportedInputError,
)

if TYPE_CHECKING:
    from rlarrow import (
        alignment,
        convert,
        gym,
        logger,
        memory,
        metadata,
        migrations,
        postprocessing,
        query,
        reader,
        recorder,
        schema,
        specs,
        tensors,
        unroll,
    )
    from rlarrow.logger import SummaryWriter
    from rlarrow.migrations import migrate
    from rlarrow.query import connect, scan, sql
    from rlarrow.reader import Reader, StepData
    from rlarrow.recorder import EnvLogger
    from rlarrow.store import CommitInfo, Store, StoreInfo, TableWriter, new_run_id

__all__ = [
    "AssumptionWarning",
    "CommitInfo",
    "CorruptFileError",
    "EnvLogger",
    "FormatVersionError",
    "FormatVersionWarning",
    "InvalidInputError",
    "MissingDependencyError",
    "RLArrowError",
    "RLArrowWarning",
    "Reader",
    "SchemaMismatchError",
    "StepData",
    "Store",
    "StoreError",
    "StoreInfo",
    "SummaryWriter",
    "TableWriter",
    "TruncatedInputWarning",
    "UnsupportedInputError",
    "__version__",
    "alignment",
    "connect",
    "convert",
    "gym",
    "logger",
    "memory",
    "metadata",
    "migrate",
    "migrations",
    "new_run_id",
    "plot",
    "postprocessing",
    "query",
    "ray",
    "reader",
    "recorder",
    "remote",
    "scan",
    "schema",
    "specs",
    "sql",
    "tensors",
    "torch",
    "unroll",
]

# name -> module that defines it; loaded on first use so `import rlarrow` stays light.
_LAZY = {
    "Store": "rlarrow.store",
    "StoreInfo": "rlarrow.store",
    "TableWriter": "rlarrow.store",
    "CommitInfo": "rlarrow.store",
    "new_run_id": "rlarrow.store",
    "migrate": "rlarrow.migrations",
    "connect": "rlarrow.query",
    "sql": "rlarrow.query",
    "scan": "rlarrow.query",
    "EnvLogger": "rlarrow.recorder",
    "Reader": "rlarrow.reader",
    "StepData": "rlarrow.reader",
    "SummaryWriter": "rlarrow.logger",
}
_SUBMODULES = {
    "alignment", "cli", "convert", "errors", "gym", "logger", "memory", "metadata", "migrations",
    "plot", "postprocessing", "query", "ray", "reader", "recorder", "remote", "schema", "specs", "store",
    "tensors", "torch", "unroll",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"rlarrow.{name}")
    else:
        raise AttributeError(f"module 'rlarrow' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
