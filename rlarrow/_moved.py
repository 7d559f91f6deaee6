"""Module paths of rlarrow 0.1 (one flat package), kept working as deprecated aliases.

``import rlarrow.store`` (or ``rlarrow.torch``, ``from rlarrow.reader import Reader``, ...)
still works: it gives the module at its new path, the same object, and warns once with a
:class:`DeprecationWarning` naming that path. ``docs/architecture.md`` lists where each
module went and why.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

__all__ = ["MOVED", "install", "message"]

#: old module -> new module
MOVED: dict[str, str] = {
    "rlarrow.io._crc32c": "rlarrow.io.codecs.crc32c",
    "rlarrow.io.tfevents._crc32c": "rlarrow.io.codecs.crc32c",
    "rlarrow.io.tfevents.framing": "rlarrow.io.codecs.tfrecord",
    "rlarrow.io.pt": "rlarrow.io.memory.pt",
    "rlarrow.io.npz": "rlarrow.io.memory.npz",
    "rlarrow.io.csv": "rlarrow.io.memory.csv",
    "rlarrow.convert": "rlarrow.io.memory.importer",
    "rlarrow.unroll": "rlarrow.io.memory.unroll",
    "rlarrow.postprocessing": "rlarrow.io.postprocessing",
    "rlarrow.importing": "rlarrow.io.importing",
    "rlarrow._manifest": "rlarrow.core.store.manifest",
    "rlarrow.store": "rlarrow.core.store",
    "rlarrow.migrations": "rlarrow.core.migrations",
    "rlarrow.remote": "rlarrow.core.remote",
    "rlarrow.errors": "rlarrow.core.errors",
    "rlarrow.schema": "rlarrow.core.schema",
    "rlarrow.tensors": "rlarrow.core.tensors",
    "rlarrow.metadata": "rlarrow.core.metadata",
    "rlarrow._deps": "rlarrow.core.deps",
    "rlarrow._progress": "rlarrow.core.progress",
    "rlarrow._columns": "rlarrow.core.step_columns",
    "rlarrow._episodes": "rlarrow.core.episodes",
    "rlarrow.alignment": "rlarrow.core.alignment",
    "rlarrow.specs": "rlarrow.core.specs",
    "rlarrow.recorder": "rlarrow.record.dm_env",
    "rlarrow.gym": "rlarrow.record.gym",
    "rlarrow.logger": "rlarrow.record.logger",
    "rlarrow.memory": "rlarrow.record.replay",
    "rlarrow.reader": "rlarrow.query.reader",
    "rlarrow.plot": "rlarrow.query.plot",
    "rlarrow._export": "rlarrow.query.output",
    "rlarrow.torch": "rlarrow.train.torch",
    "rlarrow.ray": "rlarrow.train.ray",
    "rlarrow._samples": "rlarrow.train.samples",
    "rlarrow.demo": "rlarrow.cli.demo",
    "rlarrow.core.tfrecord": "rlarrow.io.codecs.tfrecord",
    "rlarrow.core.crc32c": "rlarrow.io.codecs.crc32c",
    "rlarrow.core.hdf5_files": "rlarrow.io.codecs.hdf5_files",
}


def message(old: str, new: str) -> str:
    """The deprecation message for a moved module."""
    return f"{old} has moved to {new}; import it from there (the old path will be removed in rlarrow 1.0)"


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new one (the same object, executed once)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(message(spec.name, self.new), DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__  # the import system sets the alias's spec on it next
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The module is the new one, already executed: give it its own spec back."""
        if self._spec is not None:
            module.__spec__ = self._spec

    def get_code(self, fullname: str) -> types.CodeType | None:
        """``python -m OLD.PATH`` runs the new module's code (runpy asks for it)."""
        warnings.warn(message(fullname, self.new), DeprecationWarning, stacklevel=2)
        spec = importlib.util.find_spec(self.new)
        loader = None if spec is None else spec.loader
        get_code = getattr(loader, "get_code", None)
        return None if get_code is None else get_code(self.new)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Let the old module paths import (once per process)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
