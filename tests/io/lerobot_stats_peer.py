"""LeRobot's own statistics of some frames: ``python lerobot_stats_peer.py IN.npz OUT.npz``.

Run by ``test_lerobot_stats.py`` in a subprocess (see ``lerobot_peer.py`` for why). IN holds
``<episode>/<feature>`` arrays (camera frames uint8 ``(n, H, W, C)``, written here as PNG files,
since lerobot 0.4.4's ``compute_episode_stats`` reads images from paths) and ``_images`` (the
camera features' names). OUT holds ``episode/<e>/<feature>/<stat>`` (``compute_episode_stats``
of each episode), ``aggregate/<feature>/<stat>`` (``aggregate_stats`` of those) and
``union/<feature>/<stat>`` (``compute_episode_stats`` of every frame as one episode).
"""

from __future__ import annotations

import sys
import tempfile
import types
import warnings
from pathlib import Path

sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402
from lerobot.datasets.compute_stats import aggregate_stats, compute_episode_stats  # noqa: E402
from PIL import Image  # noqa: E402


def main(in_path: str, out_path: str) -> None:
    data = dict(np.load(in_path))
    images = set(data.pop("_images").tolist())
    episodes = sorted({int(k.split("/")[0]) for k in data})
    names = sorted({k.split("/", 1)[1] for k in data})
    features = {n: {"dtype": "image" if n in images else str(data[f"0/{n}"].dtype)} for n in names}
    root = Path(tempfile.mkdtemp())

    def as_given(e: int, name: str) -> object:
        values = data[f"{e}/{name}"]
        if name not in images:
            return values
        paths = []
        for i, frame in enumerate(values):
            path = root / f"{name}-{e}-{i}.png"
            Image.fromarray(frame.squeeze(-1) if frame.shape[-1] == 1 else frame).save(path)
            paths.append(str(path))
        return paths

    out: dict[str, np.ndarray] = {}
    per_episode = []
    for e in episodes:
        stats = compute_episode_stats({n: as_given(e, n) for n in names}, features)
        per_episode.append(stats)
        out.update({f"episode/{e}/{n}/{k}": v for n, s in stats.items() for k, v in s.items()})
    for n, s in aggregate_stats(per_episode).items():
        out.update({f"aggregate/{n}/{k}": np.asarray(v) for k, v in s.items()})
    union = {}
    for n in names:
        parts = [as_given(e, n) for e in episodes]
        union[n] = sum(parts, []) if n in images else np.concatenate(parts)  # type: ignore[arg-type]
    for n, s in compute_episode_stats(union, features).items():
        out.update({f"union/{n}/{k}": np.asarray(v) for k, v in s.items()})
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
