"""Importers and exporters, one module per format.

Each episode format reads to an :class:`rlarrow.core.sources.EpisodeSource`
(``read_<format>``) and imports through :func:`rlarrow.core.ingest.ingest`, whose
:class:`~rlarrow.core.ingest.IngestReport` every importer returns (``EpisodesReport`` is
its old name).
"""

from __future__ import annotations

from typing import Any

from rlarrow.core import submodule
from rlarrow.core.ingest import IngestReport

__all__ = ["EpisodesReport"]

#: the report of an episode import (the name rlarrow 0.x used): :class:`rlarrow.core.ingest.IngestReport`
EpisodesReport = IngestReport


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.io.<module>
    return submodule(__name__, name)
