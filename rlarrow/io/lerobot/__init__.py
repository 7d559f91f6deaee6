"""LeRobot datasets: read (codebases v3.0 and v2.x) and written (v3.0, or v2.1), without LeRobot.

:mod:`rlarrow.io.lerobot.reading` imports a LeRobot dataset into a store;
:mod:`rlarrow.io.lerobot.writing` writes a run of a store as a LeRobot dataset that
``lerobot``'s own ``LeRobotDataset`` loads.

Example:
    >>> from rlarrow.io.lerobot import export_lerobot, import_lerobot  # doctest: +SKIP
    >>> import_lerobot("~/.cache/huggingface/lerobot/lerobot/pusht", "runs.rlarrow")  # doctest: +SKIP
    >>> export_lerobot("runs.rlarrow", "pusht_v21", codebase="v2.1")  # doctest: +SKIP
"""

from __future__ import annotations

from rlarrow.io.lerobot.reading import FRAME_KEYS, import_lerobot, is_lerobot_dir, read_lerobot
from rlarrow.io.lerobot.writing import CODEBASES, IMAGE_MODES, export_lerobot

__all__ = ["CODEBASES", "FRAME_KEYS", "IMAGE_MODES", "export_lerobot", "import_lerobot", "is_lerobot_dir",
           "read_lerobot"]
