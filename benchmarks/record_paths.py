"""Recording dict observations and vector envs, and reading a default recording in bulk.

Issue 21 asks for three figures, each measured here beside its peer in the same process:

- **dict observations**: per-step overhead (wrapped minus bare env, close included) of
  ``rlarrow.EnvLogger`` on a dm_env whose observation is a 3-key dict (two 3-float and one
  16-float leaf), against ``envlogger.EnvLogger`` on the same env (goal <= 5 us/step). The
  default store keeps moments and quantile sketches of every step (``stats``); a second row
  gives the overhead with ``store.step_stats = "moments"``.
- **vector recorder**: overhead per env step of ``RecordVectorEpisodes`` on a
  ``SyncVectorEnv`` of 8 CartPoles with random actions (both autoreset modes), against
  Minari's ``DataCollector`` on one CartPole (it records single envs), its dataset written
  (goal <= 5 us per env step).
- **scaling with episodes**: per-step overhead of recording Catch (about 10 steps an
  episode) for 1,000, 10,000 and 100,000 episodes (issue 21's scaling table: nothing may
  grow faster than linearly, so the per-step figure must stay flat); the peer is rlarrow at
  1,000 episodes.
- **episode_columns**: a 1M-step Catch recording made with default settings (flushes every
  10,000 steps, auto-compaction), read whole with ``Reader.episode_columns``, against
  pyarrow reading the same files' columns and converting them to NumPy (the floor of plain
  Arrow); best and median of 15, the first touch of fresh memory swings single reads on this
  VM (goal >= 10M steps/s).

Each side is timed next to the others, several times, and the best kept: the bare env's own
jitter on this VM is as large as some overheads measured.

Run: ``.venv/bin/python benchmarks/record_paths.py [--steps 300000] [--read-steps 1000000]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


class DictEnv:
    """A dm_env with a 3-key dict observation (position, velocity, 16 sensors); 100-step episodes."""

    def __init__(self) -> None:
        import dm_env

        self.dm_env = dm_env
        rng = np.random.default_rng(0)
        self.obs = [{"position": rng.standard_normal(3).astype(np.float32),
                     "velocity": rng.standard_normal(3).astype(np.float32),
                     "sensors": rng.standard_normal(16).astype(np.float32)} for _ in range(64)]
        self.t = 0

    def reset(self):  # noqa: ANN201
        self.t = 0
        return self.dm_env.restart(self.obs[0])

    def step(self, action):  # noqa: ANN001, ANN201
        self.t += 1
        obs = self.obs[self.t % 64]
        if self.t == 100:
            return self.dm_env.termination(1.0, obs)
        return self.dm_env.transition(0.5, obs)

    def observation_spec(self):  # noqa: ANN201
        from dm_env import specs

        return {"position": specs.Array((3,), np.float32, "position"),
                "velocity": specs.Array((3,), np.float32, "velocity"),
                "sensors": specs.Array((16,), np.float32, "sensors")}

    def action_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.DiscreteArray(3, name="action")

    def reward_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.Array((), np.float64, "reward")

    def discount_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")

    def close(self) -> None:
        pass


def drive(env, steps: int) -> None:  # noqa: ANN001
    ts = env.reset()
    for i in range(steps):
        ts = env.reset() if ts.last() else env.step(i % 3)


def timed(fn) -> float:  # noqa: ANN001
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def dict_rows(n: int, tmp: Path) -> list[dict]:
    import envlogger

    import rlarrow

    def ours(mode: str) -> None:
        shutil.rmtree(tmp / "ours", ignore_errors=True)
        store = rlarrow.Store.create(tmp / "ours")
        store.step_stats = mode
        with rlarrow.EnvLogger(DictEnv(), store) as env:
            drive(env, n)
        store.close()

    def theirs() -> None:
        shutil.rmtree(tmp / "theirs", ignore_errors=True)
        (tmp / "theirs").mkdir()
        with envlogger.EnvLogger(DictEnv(), data_directory=str(tmp / "theirs")) as env:
            drive(env, n // 10)  # 10x slower: a tenth of the steps

    runs = [(timed(lambda: drive(DictEnv(), n)), timed(lambda: ours("sketches")),
             timed(lambda: ours("moments")),
             timed(lambda: drive(DictEnv(), n // 10)), timed(theirs)) for _ in range(5)]
    bare, sketches, moments, bare_tenth, peer = (min(c) for c in zip(*runs, strict=True))
    o_peer = (peer - bare_tenth) / (n // 10) * 1e6
    rows = []
    for label, t in (("default (moments and sketches)", sketches), ('step_stats = "moments"', moments)):
        o = (t - bare) / n * 1e6
        rows.append({"path": f"record overhead per step, 3-key dict observation, {label}", "rlarrow": o,
                     "peer": o_peer, "unit": "us/step", "ratio": o / o_peer,
                     "note": f"target <= 5 us/step; bare env {bare / n * 1e6:.2f} us/step; peer: envlogger "
                             f"on {n // 10:,} steps"})
    return rows


def vector_rows(n: int, tmp: Path) -> list[dict]:
    import gymnasium as gym

    from rlarrow.record.gym import RecordVectorEpisodes

    envs = 8
    actions = np.random.default_rng(0).integers(0, 2, (n // envs, envs))

    def make(mode: str):  # noqa: ANN202
        return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * envs,
                                        autoreset_mode=getattr(gym.vector.AutoresetMode, mode))

    def run_vec(env) -> None:  # noqa: ANN001
        env.reset(seed=list(range(envs)))
        for a in actions:
            env.step(a)
        env.close()

    def ours(mode: str) -> None:
        shutil.rmtree(tmp / "vec", ignore_errors=True)
        run_vec(RecordVectorEpisodes(make(mode), tmp / "vec"))

    single = actions.reshape(-1)[:n // 10]  # Minari is 30x slower: a tenth of the steps

    def run_single(env) -> None:  # noqa: ANN001
        env.reset(seed=0)
        for a in single:
            _, _, term, trunc, _ = env.step(int(a))
            if term or trunc:
                env.reset()

    try:
        import minari
    except ImportError:
        minari = None

    def theirs() -> None:
        os.environ["MINARI_DATASETS_PATH"] = str(tmp / "minari")
        shutil.rmtree(tmp / "minari", ignore_errors=True)
        import warnings

        env = minari.DataCollector(gym.make("CartPole-v1"))
        run_single(env)
        with warnings.catch_warnings():  # its advice to name an author and a description
            warnings.simplefilter("ignore", UserWarning)
            env.create_dataset(dataset_id="bench/cartpole/random-v0", algorithm_name="random")
        env.close()

    rows = []
    for mode in ("NEXT_STEP", "SAME_STEP"):
        runs = [(timed(lambda: run_vec(make(mode))), timed(lambda: ours(mode)),  # noqa: B023
                 timed(lambda: run_single(gym.make("CartPole-v1"))),
                 timed(theirs) if minari is not None else float("nan")) for _ in range(3)]
        bare, t_ours, bare_single, t_peer = (min(c) for c in zip(*runs, strict=True))
        steps = actions.size
        o_ours = (t_ours - bare) / steps * 1e6
        o_peer = (t_peer - bare_single) / len(single) * 1e6
        rows.append({"path": f"vector recorder overhead per env step, 8 CartPoles, {mode}", "rlarrow": o_ours,
                     "peer": o_peer, "unit": "us/env step", "ratio": o_ours / o_peer,
                     "note": f"target <= 5 us per env step; bare vector env {bare / steps * 1e6:.2f} us "
                             f"per env step; peer: minari.DataCollector on one CartPole, "
                             f"{len(single):,} steps, dataset written"})
    return rows


def scaling_rows(tmp: Path, counts: tuple[int, ...] = (1_000, 10_000, 100_000)) -> list[dict]:
    from envlogger.testing import catch_env

    import rlarrow

    def episodes(env, count: int) -> int:  # noqa: ANN001
        steps = 0
        for _ in range(count):
            ts = env.reset()
            while not ts.last():
                ts = env.step(steps % 3)
                steps += 1
        return steps

    def record(count: int) -> float:
        shutil.rmtree(tmp / "scale", ignore_errors=True)  # (not timed)
        t = time.perf_counter()
        with rlarrow.EnvLogger(catch_env.Catch(seed=1), tmp / "scale") as env:
            episodes(env, count)
        return time.perf_counter() - t

    rows, first = [], None
    for count in counts:
        steps = episodes(catch_env.Catch(seed=1), count)
        bare, ours = (min(c) for c in zip(*[(timed(lambda: episodes(catch_env.Catch(seed=1), count)),  # noqa: B023
                                              record(count))
                                             for _ in range(3 if count < 100_000 else 2)], strict=True))
        o = (ours - bare) / steps * 1e6
        first = o if first is None else first
        rows.append({"path": f"record overhead per step, Catch, {count:,} episodes ({steps:,} steps)",
                     "rlarrow": o, "peer": first, "unit": "us/step", "ratio": o / first,
                     "note": f"peer: rlarrow at {counts[0]:,} episodes; flat is linear total cost"})
    return rows


def read_rows(n: int, tmp: Path) -> list[dict]:
    import pyarrow.parquet as pq
    from envlogger.testing import catch_env

    import rlarrow
    from rlarrow.core.tensors import to_numpy

    path = tmp / "catch"
    with rlarrow.EnvLogger(catch_env.Catch(seed=1), path) as env:  # default settings
        drive(env, n)
    store = rlarrow.Store.open(path, readonly=True)
    files = [os.fspath(f) for f in store.files("steps")]
    store.close()
    reader = rlarrow.Reader(path)
    columns = ["observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal"]

    def ours() -> None:
        reader.close()  # drop its cached row groups: decode from the files each time
        reader.episode_columns(slice(None))

    def theirs() -> None:
        table = pq.ParquetDataset(files).read(columns=columns, use_threads=True)
        for name in columns:
            col = table.column(name)
            if name in ("observation", "action"):
                to_numpy(col.combine_chunks(), fill_value=0)
            else:
                col.to_numpy()

    pairs = sorted((timed(ours), timed(theirs)) for _ in range(15))
    t_ours = sorted(p[0] for p in pairs)
    t_peer = sorted(p[1] for p in pairs)
    reader.close()
    return [{"path": f"episode_columns of a {n:,}-step Catch recording, default settings",
             "rlarrow": n / t_ours[0],
             "peer": n / t_peer[0], "unit": "steps/s", "ratio": t_peer[0] / t_ours[0],
             "note": f"target >= 10M steps/s; best of 15, median {n / t_ours[7] / 1e6:.1f}M (peer "
                     f"{n / t_peer[7] / 1e6:.1f}M); {len(files)} files; peer: pyarrow reads the same "
                     "columns and converts them to NumPy"}]


def main() -> None:
    sys.path.insert(0, os.fspath(HERE))
    from _report import report

    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_  # envlogger 1.2 on NumPy 2
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300_000, help="steps recorded per timing")
    parser.add_argument("--read-steps", type=int, default=1_000_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="record-paths-"))
    try:
        rows = (dict_rows(args.steps, tmp) + vector_rows(args.steps, tmp) + scaling_rows(tmp)
                + read_rows(args.read_steps, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report("record_paths", rows)


if __name__ == "__main__":
    main()
