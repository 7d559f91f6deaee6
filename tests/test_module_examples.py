"""The docstring examples of the episode and spec modules run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["rlarrow.specs", "rlarrow.io.unsupported", "rlarrow._columns", "rlarrow.reader",
           "rlarrow.recorder",
           "rlarrow.gym"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    needs = {"rlarrow.reader": "dm_env", "rlarrow.recorder": "dm_env", "rlarrow.gym": "gymnasium"}
    if name in needs:
        pytest.importorskip(needs[name], reason=f"{name}'s examples need {needs[name]}")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
