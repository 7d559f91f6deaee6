"""The public surface is exactly `rlarrow.__all__`, and every name in it resolves."""

from __future__ import annotations

import rlarrow
import rlarrow.core.errors


def test_all_names_resolve():
    for name in rlarrow.__all__:
        assert getattr(rlarrow, name) is not None, name


def test_all_matches_the_public_names():
    public = {n for n in dir(rlarrow) if not n.startswith("_")} - {"annotations", "importlib",
                                                                    "TYPE_CHECKING", "Any"}
    # modules imported by their old paths (deprecated aliases) show up as attributes too
    aliases = {old.split(".")[1] for old in rlarrow._moved.MOVED if old.count(".") == 1}
    assert public - aliases - set(rlarrow._NEEDS_EXTRA) == set(rlarrow.__all__) - {"__version__"}


def test_every_error_derives_from_the_base():
    for name in rlarrow.core.errors.__all__:
        cls = getattr(rlarrow.core.errors, name)
        assert issubclass(cls, (rlarrow.RLArrowError, rlarrow.RLArrowWarning)), name
        assert getattr(rlarrow, name) is cls
