"""Every module's docstring examples run as tests, found by walking the package.

No list to keep: a module added, moved or split is picked up by the walk. An example that
needs a service or an optional dependency the test machine lacks is marked
``# doctest: +SKIP`` in the docstring, with the reason beside it.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import rlarrow

#: ``python -m rlarrow`` runs the CLI when imported: it has no examples
_NOT_IMPORTED = {"__main__"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    found = [m.name for m in pkgutil.walk_packages(rlarrow.__path__, "rlarrow.")]
    return ["rlarrow", *sorted(n for n in found if n.rsplit(".", 1)[-1] not in _NOT_IMPORTED)]


MODULES = _modules()


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != "rlarrow":
            pytest.skip(f"{name} needs {e.name}: install rlarrow's extras (make test installs them all)")
        raise


def run_examples(name: str) -> doctest.TestResults:
    """Run the examples defined in module ``name`` (not those of names it imports)."""
    module = _import(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write a store write it here
    result = run_examples(name)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (see above)"


def test_the_walk_finds_every_layer_and_the_examples_in_them():
    """A walk that found nothing (a broken path, a package without __init__) would pass every test above."""
    for layer in ("core.store", "io.tfevents", "io.memory.importer", "record.logger", "query.connection",
                  "train.torch", "cli.commands"):
        assert f"rlarrow.{layer}" in MODULES
    assert "rlarrow.__main__" not in MODULES
    assert len(MODULES) >= 90
    finder = doctest.DocTestFinder()
    examples = {name: sum(len(t.examples) for t in finder.find(importlib.import_module(name), name))
                for name in ("rlarrow", "rlarrow.core.store.tables", "rlarrow.io.tfevents.proto")}
    assert all(n > 0 for n in examples.values()), examples
