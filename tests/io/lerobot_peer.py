"""Load a LeRobot dataset with lerobot's own ``LeRobotDataset`` and save every frame it gives.

Run by ``test_lerobot_export.py`` in a subprocess (lerobot 0.4.4 reads v3.0; lerobot 0.3.3,
on ``PYTHONPATH``, v2.1): ``python lerobot_peer.py DATASET OUT.npz [DELTA_TIMESTAMPS_JSON]``
(the third: ``LeRobotDataset(delta_timestamps=...)``, each item's offsets and ``*_is_pad``
masks). OUT holds each key of
``dataset[i]`` stacked over the frames (tensors as LeRobot returns them: images float CHW in
[0, 1]), ``task``, ``_version``, ``_episodes`` and ``_stats/<feature>/<stat>`` (``meta.stats``).

lerobot pins torch < 2.11, whose PyPI builds carry CUDA; it is installed ``--no-deps`` beside
torch 2.13 (CPU) with torchvision 0.22.1 (its pyav video backend), whose CUDA build cannot
register its C++ operators against a CPU torch: the dataset reader uses none of them, so their
meta registrations are skipped here.
"""

from __future__ import annotations

import sys
import types
import warnings

sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
warnings.simplefilter("ignore")  # (torchvision's deprecation and missing-extension warnings)

import json  # noqa: E402

import numpy as np  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


def main(root: str, out_path: str, deltas: str | None = None) -> None:
    ds = LeRobotDataset("rlarrow/export", root=root, video_backend="pyav",
                        delta_timestamps=json.loads(deltas) if deltas else None)
    items = [ds[i] for i in range(len(ds))]
    out = {"_version": np.array(ds.meta.info["codebase_version"]), "_episodes": np.array(ds.num_episodes)}
    for key in items[0]:
        values = [item[key] for item in items]
        out[key] = np.array(values) if key == "task" else np.stack([v.numpy() for v in values])
    for feature, stats in (ds.meta.stats or {}).items():
        for stat, value in stats.items():
            out[f"_stats/{feature}/{stat}"] = np.asarray(value)
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
