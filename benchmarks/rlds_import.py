"""RLDS/TFDS: rlarrow's TensorFlow-free import against TensorFlow Datasets' own reader, same files.

A dataset in Open X-Embodiment's shape is written once into ``benchmarks/data/`` by a real
``tfds`` builder (``tfds.rlds.rlds_base.build_info`` features): 200 episodes of 100 steps, each
step a 64x64x3 PNG camera, a 64x64x3 JPEG wrist camera, an 8-float state and a language
instruction, a 7-float action; 8 shards. Then, each in a fresh process, with its peak RSS:

- rlarrow: ``rlarrow.io.rlds.import_rlds`` into a new store (decoding every image, checking
  every CRC, writing Parquet, episodes and statistics);
- peer: ``tfds.builder_from_directory(...).as_dataset()`` iterated with ``tfds.as_numpy``,
  every step of every episode materialised (images decoded), and nothing written.

It needs TensorFlow and tensorflow-datasets for the data and the peer (``rlarrow`` itself does
not): run it with a Python that has both and rlarrow installed, e.g.
``pip install tensorflow-cpu tensorflow-datasets`` into a separate environment, then
``python benchmarks/rlds_import.py``. ``run_all.py`` skips it where ``tensorflow_datasets`` is
missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))
EPISODES, STEPS = 200, 100


def make(root: Path) -> Path:
    """The dataset, written by a tfds builder once; its version folder."""
    done = root / "robot_bench" / "1.0.0"
    if (done / "dataset_info.json").is_file():
        return done
    import tensorflow_datasets as tfds

    config = tfds.rlds.rlds_base.DatasetConfig(
        name="robot_bench",
        observation_info=tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(64, 64, 3), encoding_format="png"),
                "wrist": tfds.features.Image(shape=(64, 64, 3), encoding_format="jpeg"),
                "state": tfds.features.Tensor(shape=(8,), dtype=np.float32),
                "language_instruction": tfds.features.Text(),
            }
        ),
        action_info=tfds.features.Tensor(shape=(7,), dtype=np.float32),
        reward_info=np.float32,
        discount_info=np.float32,
        episode_metadata_info={"file_path": tfds.features.Text()},
    )

    def episodes():
        rng = np.random.default_rng(0)
        yy, xx = np.mgrid[0:64, 0:64]
        for e in range(EPISODES):
            steps = []
            for t in range(STEPS):
                scene = np.stack([(xx + 2 * t + e) % 256, (yy * 3 + t) % 256, (xx * yy + e) % 256], -1)
                image = (scene + rng.integers(0, 6, scene.shape)).astype(np.uint8)
                steps.append(
                    {
                        "observation": {
                            "image": image,
                            "wrist": image[::-1],
                            "state": rng.standard_normal(8).astype(np.float32),
                            "language_instruction": "put the block in the bowl",
                        },
                        "action": rng.uniform(-1, 1, 7).astype(np.float32),
                        "reward": np.float32(t == STEPS - 1),
                        "discount": np.float32(1),
                        "is_first": t == 0,
                        "is_last": t == STEPS - 1,
                        "is_terminal": t == STEPS - 1,
                    }
                )
            yield f"ep{e}", {"steps": steps, "file_path": f"/data/{e}.npy"}

    class RobotBench(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.rlds.rlds_base.build_info(config, self)

        def _split_generators(self, dl_manager):
            return {"train": episodes()}

        def _generate_examples(self):  # (unused)
            raise NotImplementedError

    RobotBench(data_dir=str(root)).download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=8)
    )
    return done


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(kind: str, path: str) -> None:
    t0 = time.perf_counter()
    steps = 0
    if kind == "rlarrow":
        from rlarrow.io.rlds import import_rlds

        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            report = import_rlds(path, Path(tmp) / "s", progress=False)
            steps = report.steps
    else:
        import tensorflow_datasets as tfds

        builder = tfds.builder_from_directory(path)
        for episode in tfds.as_numpy(builder.as_dataset(split="train")):
            for step in episode["steps"]:
                steps += 1
                assert step["observation"]["image"].shape == (64, 64, 3)
    print(json.dumps({"seconds": time.perf_counter() - t0, "steps": steps, "peak_mb": _peak_mb()}))


def run(kind: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from _report import report

    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    DATA.mkdir(exist_ok=True)
    path = make(DATA / "rlds")
    size = sum(p.stat().st_size for p in path.iterdir()) / 1e6
    ours, peer = run("rlarrow", path), run("tfds", path)
    assert ours["steps"] == peer["steps"] == EPISODES * STEPS, (ours, peer)
    note = (
        f"{EPISODES} episodes x {STEPS} steps, PNG + JPEG 64x64x3 cameras, state, language; {size:.0f} MB "
        "in 8 shards; rlarrow decodes, checks and writes a store, tfds only reads"
    )
    report(
        "rlds_import",
        [
            {
                "path": "import vs tfds read: steps/s",
                "rlarrow": ours["steps"] / ours["seconds"],
                "peer": peer["steps"] / peer["seconds"],
                "unit": "steps/s",
                "ratio": peer["seconds"] / ours["seconds"],
                "note": note,
            },
            {
                "path": "import vs tfds read: peak RSS",
                "rlarrow": ours["peak_mb"],
                "peer": peer["peak_mb"],
                "unit": "MB",
                "ratio": ours["peak_mb"] / peer["peak_mb"],
                "note": "each in a fresh process",
            },
        ],
    )
    shutil.rmtree(DATA / "tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
