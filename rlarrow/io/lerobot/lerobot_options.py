"""What an import of a LeRobot dataset takes beyond the run: :class:`LeRobotOptions`.

Example:
    >>> LeRobotOptions(video="keep").video
    'keep'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlarrow.core.errors import ArgumentError

__all__ = ["LeRobotOptions"]


@dataclass(frozen=True)
class LeRobotOptions:
    """How a LeRobot dataset is imported (see :func:`rlarrow.io.lerobot.import_lerobot`).

    Attributes:
        video: ``"decode"`` the cameras to uint8 frames, or ``"keep"`` them as video (the
            store's video layout: each episode's segment copied, not decoded).

    Raises:
        ArgumentError: another video mode.
    """

    #: options that apply to LeRobot inputs only: set with none given, an import says to leave them out
    only_with_inputs: ClassVar[tuple[str, ...]] = ("video",)
    video: str = "decode"

    def __post_init__(self) -> None:
        from rlarrow.io.lerobot.reading import VIDEO_MODES

        if self.video not in VIDEO_MODES:
            raise ArgumentError(f"video={self.video!r}: one of {', '.join(VIDEO_MODES)}")
