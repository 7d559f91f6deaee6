"""Normalisation statistics: computed while recording, merged for a selection, against a second pass.

Issue 20 asks for per-episode statistics computed while recording (no second pass) and
combined for any selection in milliseconds. The peer is what LeRobot and openpi do today:
after recording, read the frames back and compute mean/std/min/max and q01..q99 with NumPy
over everything selected (here over the same Parquet files, read with pyarrow: the fastest
form of that second pass).

1. Recording: ``rlarrow.EnvLogger`` on a dm_env with 32-float32 observations and 6-float32
   actions, episodes of 200 steps, default flush, with ``step_stats`` off, ``moments`` and
   ``sketches`` (interleaved, best of five each): the per-step overhead of each, against
   the peer's second pass per step; and the statistics builder alone on 10,000 of those
   steps (the recording figure is a difference of two noisy timings; this one is not).
2. Selection, on the recorded store: every episode, one run of four, and an episode-level
   split (every fifth episode left out: each block only partly selected, so its quantiles
   are read again from the data), with and without quantiles, against NumPy over the same
   rows.

Run: ``.venv/bin/python benchmarks/step_stats.py [--steps 400000]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_of, report  # noqa: E402

OBS, ACT, EPISODE = 32, 6, 200


class Env:
    """A dm_env of random observations, drawn an episode at a time (next to no env cost)."""

    def __init__(self, seed: int) -> None:
        import dm_env

        self.dm_env = dm_env
        self.rng = np.random.default_rng(seed)
        self.scale = self.rng.uniform(0.1, 10, OBS)
        self.offset = self.rng.normal(size=OBS) * 50
        self.t = 0

    def reset(self):  # noqa: ANN201
        self.t = 0
        # an episode's observations drawn at once: random data, as incompressible as real sensors
        draw = self.rng.normal(size=(EPISODE + 1, OBS))
        self.episode = (draw * self.scale + self.offset).astype(np.float32)
        return self.dm_env.restart(self.episode[0])

    def step(self, action):  # noqa: ANN001, ANN201, ARG002
        self.t += 1
        obs = self.episode[self.t]
        if self.t == EPISODE:
            return self.dm_env.termination(1.0, obs)
        return self.dm_env.transition(0.5, obs)

    def observation_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.Array((OBS,), np.float32, "observation")

    def action_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.Array((ACT,), np.float32, "action")

    def reward_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.Array((), np.float64, "reward")

    def discount_spec(self):  # noqa: ANN201
        from dm_env import specs

        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")

    def close(self) -> None:
        pass


def record(store, steps: int, seed: int) -> float:  # noqa: ANN001
    """Seconds to record ``steps`` steps into ``store`` (close included)."""
    import rlarrow

    actions = np.random.default_rng(seed).normal(size=(1024, ACT)).astype(np.float32)
    t0 = time.perf_counter()
    with rlarrow.EnvLogger(Env(seed), store) as env:
        ts = env.reset()
        for i in range(steps):
            ts = env.step(actions[i % 1024])
            if ts.last():
                ts = env.reset()
    return time.perf_counter() - t0


def numpy_pass(store, runs=None, keep_episode=None) -> dict:  # noqa: ANN001
    """The peer: read observation and action back, NumPy statistics over all selected rows."""
    import pyarrow.compute as pc

    import rlarrow

    flt = None if runs is None else pc.field("run_id").isin(runs)
    table = store.read("steps", columns=["run_id", "episode_id", "observation", "action"], filter=flt)
    if keep_episode is not None:
        table = table.filter(keep_episode(table))
    out = {}
    for column in ("observation", "action"):
        x = rlarrow.core.tensors.to_numpy(table.column(column)).astype(np.float64)
        x = x[~np.isnan(x).any(axis=1)]  # (the null actions at episode ends)
        qs = np.quantile(x, [0.01, 0.1, 0.5, 0.9, 0.99], axis=0)
        out[column] = (x.mean(0), x.std(0), x.min(0), x.max(0), qs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400_000, help="steps recorded per run (4 runs)")
    args = parser.parse_args()
    import rlarrow
    from rlarrow.query.dataset_stats import stats

    tmp = Path(tempfile.mkdtemp(prefix="rlarrow-bench-stats-"))
    rows = []
    try:
        per_step: dict[str, float] = {}
        record(rlarrow.Store.create(tmp / "warm-up"), 20_000, 1)
        for _ in range(5):  # interleaved, best of five: the modes share the machine's state
            for mode in ("off", "moments", "sketches"):
                path = tmp / f"rec-{mode}"
                shutil.rmtree(path, ignore_errors=True)
                st = rlarrow.Store.create(path)
                st.step_stats = mode
                took = record(st, args.steps // 2, 1) / (args.steps // 2) * 1e6
                per_step[mode] = min(per_step.get(mode, took), took)
                st.close()
        main_store = rlarrow.Store.create(tmp / "main")
        for seed in range(4):
            record(main_store, args.steps, seed)
        main_store.close()
        st = rlarrow.Store.open(tmp / "main", readonly=True)
        n = st.row_count("steps")
        peer_all = best_of(lambda: numpy_pass(st), 2)
        peer_per_step = peer_all / n * 1e6
        for mode in ("moments", "sketches"):
            rows.append({"path": f"record, step_stats={mode}: overhead per step", "rlarrow":
                         per_step[mode] - per_step["off"], "peer": peer_per_step, "unit": "us/step",
                         "ratio": (per_step[mode] - per_step["off"]) / peer_per_step,
                         "note": f"recording {per_step['off']:.2f} us/step without; peer: a NumPy pass "
                                 f"over the recorded Parquet afterwards ({n} steps)"})
        # the same work without the recorder around it: the builder alone on 10,000 recorded steps
        from rlarrow.core.step_stats import StepStatsBuilder

        sample = st.read("steps").slice(0, 10_000)
        for mode in ("moments", "sketches"):
            builder = StepStatsBuilder(sample.schema, "steps", mode=mode)

            def build(b: StepStatsBuilder = builder) -> None:
                b.add(sample)
                b.finish("block")
            took = best_of(build, 5) / sample.num_rows * 1e6
            rows.append({"path": f"stats of one commit, step_stats={mode}, alone", "rlarrow": took,
                         "peer": peer_per_step, "unit": "us/step", "ratio": took / peer_per_step,
                         "note": "StepStatsBuilder on 10,000 recorded steps (best of 5); peer: as above"})
        runs = sorted(set(st.read("runs", columns=["run_id"]).column(0).to_pylist()))
        import pyarrow.compute as pc

        def split(table):  # noqa: ANN001, ANN202
            return pc.not_equal(pc.bit_wise_and(table.column("episode_id"), 3), 0)  # 3 of 4 episodes
        train_where = "episode_id % 4 <> 0"
        cases = [
            ("all episodes", {}, {}),
            ("one run of four", {"runs": runs[:1]}, {"runs": runs[:1]}),
            ("episode-level split (3 of 4 episodes)", {"where": train_where}, {"keep_episode": split}),
        ]
        check = stats(st, where=train_where)
        peer_check = numpy_pass(st, keep_episode=split)
        np.testing.assert_allclose(check["observation"].mean, peer_check["observation"][0], rtol=1e-9)
        for label, ours_kw, peer_kw in cases:
            peer = best_of(lambda kw=peer_kw: numpy_pass(st, **kw), 2)  # noqa: B023
            for quantiles in (False, True):
                ours = best_of(lambda kw=ours_kw, q=quantiles: stats(st, quantiles=q, **kw), 3)  # noqa: B023
                rows.append({"path": f"stats: {label}" + ("" if quantiles else ", moments only"),
                             "rlarrow": ours * 1e3, "peer": peer * 1e3, "unit": "ms", "ratio": ours / peer,
                             "note": f"{n} steps, {n // EPISODE} episodes; peer: NumPy over the rows read"})
        stats_bytes = sum(p.stat().st_size for p in st.files("stats"))
        steps_bytes = sum(p.stat().st_size for p in st.files("steps"))
        rows.append({"path": "stats table size / steps table size", "rlarrow": stats_bytes / 2**20,
                     "peer": steps_bytes / 2**20, "unit": "MiB", "ratio": stats_bytes / steps_bytes,
                     "note": "on disk, Parquet"})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report("step_stats", rows)


if __name__ == "__main__":
    main()
