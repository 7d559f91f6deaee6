"""Importers and exporters, one module per format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlarrow.core import submodule

__all__ = ["EpisodesReport"]


@dataclass
class EpisodesReport:
    """What an episode importer (envlogger, Minari) wrote: one run, its episodes and steps."""

    run_id: str
    episodes: int = 0
    steps: int = 0

    def __str__(self) -> str:
        return f"imported run {self.run_id}: {self.episodes} episodes, {self.steps} steps (RLDS rows)"


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.io.<module>
    return submodule(__name__, name)
