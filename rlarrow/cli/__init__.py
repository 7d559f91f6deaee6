"""The ``rlarrow`` command line (:mod:`~rlarrow.cli.commands`) and the demo (:mod:`~rlarrow.cli.demo`).

The top layer: it may import every other layer; nothing imports it.
"""

from rlarrow.cli.commands import main

__all__ = ["main"]
