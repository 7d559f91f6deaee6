"""The video layout against raw uint8 frames and against LeRobot's own loader, on the same episodes.

A LeRobot v3.0 dataset is made once into ``benchmarks/data/lerobot-video/`` by
``rlarrow.io.lerobot.export_lerobot`` (LeRobot's settings: AV1, yuv420p, a key frame every 2
frames, CRF 30): 20 episodes of 200 frames, a 96x96 RGB camera of moving, textured shapes,
an 8-float state and a 7-float action. It is imported twice: cameras decoded to uint8 (the
binary layout) and kept as video (``video="keep"``, the video layout). Then, each path in a
fresh process:

- size: the store's steps (and videos) on disk, against the same frames as raw uint8, and the
  LeRobot dataset itself;
- import: wall time of each import;
- reading every frame once in a shuffled order, batches of 32, one process (``num_workers=0``):
  rlarrow's ``StreamingDataset`` over the video layout and over the raw frames, and lerobot's
  own ``LeRobotDataset`` (pyav backend, the one this machine can run: lerobot's torchcodec
  wheels need CUDA libraries) through a ``torch.utils.data.DataLoader`` — the peer;
- the same, in episode order (``shuffle=False``): how fast a whole episode decodes.

Run: ``.venv/bin/python benchmarks/video_layout.py`` (needs PyAV and lerobot, which ``make``
installs as a test-only peer).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

EPISODES, FRAMES, SIDE = 20, 200, 96
BATCH = 32


def frames_of(e: int, rng: np.random.Generator) -> np.ndarray:
    """An episode's camera: a textured background and two discs that move across it."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    texture = (rng.random((SIDE // 8, SIDE // 8, 3)) * 80).repeat(8, 0).repeat(8, 1)
    out = np.empty((FRAMES, SIDE, SIDE, 3), np.uint8)
    for t in range(FRAMES):
        image = texture + np.stack([xx, yy, (xx + yy) / 2], -1) * 0.8
        for k, color in enumerate(((230, 40, 40), (40, 200, 230))):
            cx = SIDE / 2 + 30 * np.sin(0.05 * t * (k + 1) + e)
            cy = SIDE / 2 + 30 * np.cos(0.04 * t * (k + 2) + e)
            image[(xx - cx) ** 2 + (yy - cy) ** 2 < 90] = color
        out[t] = np.clip(image, 0, 255)
    return out


def make_dataset(root: Path) -> Path:
    import rlarrow
    from rlarrow.io.lerobot import export_lerobot

    if (root / "meta" / "info.json").is_file():
        return root
    store_path = DATA / "video-source.rlarrow"
    shutil.rmtree(store_path, ignore_errors=True)
    rng = np.random.default_rng(0)
    store = rlarrow.Store.create(store_path)
    for e in range(EPISODES):
        rows = FRAMES + 1
        camera = np.concatenate([frames_of(e, rng), np.zeros((1, SIDE, SIDE, 3), np.uint8)])
        last = np.arange(rows) == FRAMES
        store.append("steps", {
            "run_id": "bench", "episode_id": e, "step": np.arange(rows), "env_index": 0,
            "observation": {"state": rng.standard_normal((rows, 8)).astype(np.float32), "top": camera},
            "action": list(rng.standard_normal((FRAMES, 7)).astype(np.float32)) + [None],
            "reward": [0.0] * FRAMES + [None], "is_first": np.arange(rows) == 0, "is_last": last,
            "is_terminal": last,
        })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the final observations LeRobot does not keep)
        export_lerobot(store, root, fps=30, progress=False)
    shutil.rmtree(store_path, ignore_errors=True)
    return root


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child(kind: str, dataset: str, store: str, shuffle: bool) -> None:
    """One path in this process: prints {seconds, frames} as JSON."""
    import torch

    t0 = time.perf_counter()
    frames = 0
    if kind == "lerobot":
        import types

        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        warnings.simplefilter("ignore")
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        ds = LeRobotDataset("bench/video", root=dataset, video_backend="pyav")
        t0 = time.perf_counter()
        loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=shuffle, num_workers=0,
                                             generator=torch.Generator().manual_seed(0))
        for batch in loader:
            frames += len(batch["observation.top"])
    else:
        import pyarrow.compute as pc

        from rlarrow.train.torch import StreamingDataset

        # (each episode's last step has no frame: LeRobot keeps none after the last action)
        ds = StreamingDataset(store, "steps", columns=["observation"], batch_size=BATCH, shuffle=shuffle,
                              seed=0, filter=pc.field("is_last") == False)  # noqa: E712
        for batch in ds:
            frames += len(batch["observation"]["top"])
    print(json.dumps({"seconds": time.perf_counter() - t0, "frames": frames}))


def run_child(*args: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "SVT_LOG": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from _report import report

    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=4)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], args.child[3] == "1")
        return
    import rlarrow
    from rlarrow.io.lerobot import import_lerobot

    DATA.mkdir(exist_ok=True)
    dataset = make_dataset(DATA / "lerobot-video")
    stores = {}
    seconds = {}
    for mode in ("keep", "decode"):
        path = DATA / f"video-{mode}.rlarrow"
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        import_lerobot(dataset, path, video=mode, progress=False)
        seconds[mode] = time.perf_counter() - t0
        stores[mode] = path
    total = EPISODES * FRAMES
    raw = total * SIDE * SIDE * 3
    kept = _bytes(stores["keep"] / "steps") + _bytes(stores["keep"] / "videos")
    decoded = _bytes(stores["decode"] / "steps")
    videos = _bytes(dataset / "videos")
    read = {(kind, shuffle): run_child(kind, str(dataset), str(stores.get(mode, "")), "1" if shuffle else "0")
            for kind, mode in (("video", "keep"), ("raw", "decode"), ("lerobot", "keep"))
            for shuffle in (True, False)}

    def fps(kind: str, shuffle: bool) -> float:
        r = read[(kind, shuffle)]
        assert r["frames"] == total, r
        return r["frames"] / r["seconds"]

    note = (f"{EPISODES} episodes of {FRAMES} frames, {SIDE}x{SIDE} RGB, AV1 CRF 30 (LeRobot's settings); "
            f"raw frames {raw / 1e6:.1f} MB, the LeRobot dataset's mp4s {videos / 1e6:.2f} MB")
    rows = [
        {"path": "store size: video layout vs raw uint8", "rlarrow": kept / 1e6, "peer": decoded / 1e6,
         "unit": "MB", "ratio": kept / decoded,
         "note": note + "; peer: the same frames decoded into the store (binary layout, zstd)"},
        {"path": "import: keep video vs decode", "rlarrow": seconds["keep"], "peer": seconds["decode"],
         "unit": "s", "ratio": seconds["keep"] / seconds["decode"],
         "note": "keep copies each episode's packets; decode decodes every frame"},
        {"path": "shuffled frames: video layout vs LeRobot", "rlarrow": fps("video", True),
         "peer": fps("lerobot", True), "unit": "frames/s", "ratio": fps("video", True) / fps("lerobot", True),
         "note": "StreamingDataset (batches of 32, one process) vs LeRobotDataset (pyav) in a DataLoader"},
        {"path": "shuffled frames: video layout vs raw uint8", "rlarrow": fps("video", True),
         "peer": fps("raw", True), "unit": "frames/s", "ratio": fps("video", True) / fps("raw", True),
         "note": "both StreamingDataset: decoding costs this against reading the frames stored raw"},
        {"path": "episode order: video layout vs LeRobot", "rlarrow": fps("video", False),
         "peer": fps("lerobot", False), "unit": "frames/s",
         "ratio": fps("video", False) / fps("lerobot", False), "note": "shuffle off"},
        {"path": "episode order: video layout vs raw uint8", "rlarrow": fps("video", False),
         "peer": fps("raw", False), "unit": "frames/s", "ratio": fps("video", False) / fps("raw", False),
         "note": "shuffle off"},
    ]
    report("video_layout", rows)
    print(json.dumps({"rlarrow": rlarrow.__version__}))


if __name__ == "__main__":
    main()
