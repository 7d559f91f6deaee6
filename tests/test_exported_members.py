"""The public surface is exactly `rlarrow.__all__`, and every name in it resolves."""

from __future__ import annotations

import rlarrow
import rlarrow.errors


def test_all_names_resolve():
    for name in rlarrow.__all__:
        assert getattr(rlarrow, name) is not None, name


def test_all_matches_the_public_names():
    public = {n for n in dir(rlarrow) if not n.startswith("_")} - {"annotations", "importlib",
                                                                    "TYPE_CHECKING", "Any"}
    submodules = {"store", "errors", "cli", "io", "importing"}
    assert public - submodules == set(rlarrow.__all__) - {"__version__"}


def test_every_error_derives_from_the_base():
    for name in rlarrow.errors.__all__:
        cls = getattr(rlarrow.errors, name)
        assert issubclass(cls, (rlarrow.RLArrowError, rlarrow.RLArrowWarning)), name
        assert getattr(rlarrow, name) is cls
