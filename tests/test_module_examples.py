"""The docstring examples of the episode and spec modules run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["rlarrow.core.specs", "rlarrow.io.unsupported", "rlarrow.core.step_columns",
           "rlarrow.query.reader",
           "rlarrow.record.dm_env",
           "rlarrow.record.gym"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    needs = {"rlarrow.query.reader": "dm_env", "rlarrow.record.dm_env": "dm_env",
             "rlarrow.record.gym": "gymnasium"}
    if name in needs:
        pytest.importorskip(needs[name], reason=f"{name}'s examples need {needs[name]}")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
