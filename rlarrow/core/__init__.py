"""The bottom layer: the data model and the store, importing nothing else of rlarrow.

* :mod:`~rlarrow.core.schema`, :mod:`~rlarrow.core.tensors`, :mod:`~rlarrow.core.metadata`:
  the versioned table schemas, tensor columns, typed metadata;
* :mod:`~rlarrow.core.store`: the store (manifest and journal, commits, compaction, reading);
* :mod:`~rlarrow.core.episodes`, :mod:`~rlarrow.core.step_columns`,
  :mod:`~rlarrow.core.alignment`, :mod:`~rlarrow.core.specs`,
  :mod:`~rlarrow.core.dm_env_rows`: episode and step building blocks shared by recorders,
  importers, exporters and the Reader;
* :mod:`~rlarrow.core.transitions`: the one definition of the ``transitions`` view, from
  which SQL, torch and Ray derive theirs;
* :mod:`~rlarrow.core.remote`, :mod:`~rlarrow.core.migrations`: a store on object storage,
  format migrations;
* :mod:`~rlarrow.core.errors`, :mod:`~rlarrow.core.type_names`, :mod:`~rlarrow.core.deps`,
  :mod:`~rlarrow.core.progress`.
* :mod:`~rlarrow.core.stats`, :mod:`~rlarrow.core.step_stats`: column statistics (moments,
  sketches, their Arrow form, one merge) and the ``stats`` rows the store writes with steps.

Format codecs live in :mod:`rlarrow.io.codecs`, the training normaliser in
:mod:`rlarrow.train.normalize`. Inside ``core/`` the model sits below the store and the store
below what builds on it: an import contract (``docs/architecture.md``, "Core has floors").

See ``docs/architecture.md`` for what each layer may import.
"""

import importlib
from typing import Any

__all__: list[str] = []


def submodule(package: str, name: str) -> Any:
    """``package.name``, imported on first attribute access (``rlarrow.record.replay``).

    A layer package's ``__getattr__`` calls it, so that a submodule need not be imported by
    path before it is used as an attribute, as with any flat package.
    """
    if name.startswith("_"):
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{package}.{name}":
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        raise


def __getattr__(name: str) -> Any:
    return submodule(__name__, name)
