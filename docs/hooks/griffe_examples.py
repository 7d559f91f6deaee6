"""A griffe extension for the API reference (mkdocs.yml): rlarrow's ``Example:`` sections.

rlarrow's docstrings are Google style with a singular ``Example:`` heading, which griffe
reads as prose (so ``data["a"]["b"]`` in an example would become a Markdown link). This
reads it as griffe's ``Examples:`` section: ``>>>`` lines and their output become code.
The docstrings themselves stay as they are (``doctest`` runs them: tests/test_doctests.py).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)


class ExampleSections(griffe.Extension):
    """Rename each docstring's ``Example:`` heading to ``Examples:`` before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: D102
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
