"""What an import of TensorBoard event files takes beyond the run: :class:`TfeventsOptions`.

Example:
    >>> TfeventsOptions(skip_corrupt=True).on_corrupt
    'skip'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TfeventsOptions"]


@dataclass(frozen=True)
class TfeventsOptions:
    """How event files are imported (see :func:`rlarrow.io.tfevents.import_tfevents`).

    Attributes:
        skip_corrupt: skip records whose checksum fails (counted) instead of stopping.
    """

    skip_corrupt: bool = False

    @property
    def on_corrupt(self) -> str:
        """``import_tfevents``'s ``on_corrupt``: ``"skip"`` or ``"raise"``."""
        return "skip" if self.skip_corrupt else "raise"
