"""The ``rlarrow`` command line (:mod:`~rlarrow.cli.commands`) and the demo (:mod:`~rlarrow.cli.demo`).

The top layer: it may import every other layer; nothing imports it.
"""

from typing import Any

from rlarrow.cli.commands import main
from rlarrow.core import submodule

__all__ = ["main"]


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.cli.<module>
    return submodule(__name__, name)
