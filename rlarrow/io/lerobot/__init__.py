"""LeRobot datasets: read (codebases v3.0 and v2.x) and written (v3.0, or v2.1), without LeRobot.

:mod:`rlarrow.io.lerobot.reading` reads a LeRobot dataset as an episode source
(``read_lerobot``) and imports it into a store (``import_lerobot``);
:mod:`rlarrow.io.lerobot.writing` writes any episode source (``write_lerobot``) or a run of a
store (``export_lerobot``) as a LeRobot dataset that ``lerobot``'s own ``LeRobotDataset`` loads.

Example:
    >>> from rlarrow.io.lerobot import export_lerobot, import_lerobot  # doctest: +SKIP
    >>> import_lerobot("~/.cache/huggingface/lerobot/lerobot/pusht", "runs.rlarrow")  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_v21", codebase="v2.1")  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.lerobot.reading import FRAME_KEYS as FRAME_KEYS
from rlarrow.io.lerobot.reading import import_lerobot, is_lerobot_dir, read_lerobot
from rlarrow.io.lerobot.writing import CODEBASES as CODEBASES
from rlarrow.io.lerobot.writing import IMAGE_MODES as IMAGE_MODES
from rlarrow.io.lerobot.writing import LeRobotOptions, export_lerobot, write_lerobot

__all__ = [
    "LeRobotOptions", "export_lerobot", "import_lerobot", "is_lerobot_dir", "read_lerobot", "write_lerobot",
]
