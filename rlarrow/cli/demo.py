"""The demo `make demo` runs: record real episodes into a store, then query it.

It plays a small vectorized environment (a 1-D corridor with a goal, pure NumPy, 4
sub-environments) with an epsilon-greedy agent whose epsilon decays, so the returns
improve, and records what an RL run leaves behind:

* ``steps`` and ``episodes`` (RLDS alignment, dict observations with a uint8 "image");
* ``scalars`` (episode returns and lengths, epsilon) as a logger would write them;
* ``memory``: the last transitions as a replay-memory snapshot.

Then it prints ``rlarrow info`` and answers questions with plain DuckDB and Polars over
the Parquet files, without rlarrow. Last, it plays the corridor into skrl replay memories
(skrl's own ``RandomMemory`` when skrl is installed, else rlarrow's drop-in) that export
themselves as legacy ``.pt``, ``.npz`` and ``.csv`` files, converts those with
``rlarrow convert --episodes``, and queries the episodes recovered from them; and it records
the corridor as a ``dm_env`` environment with ``rlarrow.EnvLogger``, read back with
``rlarrow.Reader``. Last, the runs' logged points are written as TensorBoard event files
(torch's ``SummaryWriter``), imported with ``rlarrow convert`` and queried with SQL.
Then ``rlarrow stats`` writes the normalisation statistics of the terminated episodes (in
LeRobot's ``stats.json`` shape), merged from what every commit stored.

Run it with ``python -m rlarrow.cli.demo OUTPUT_DIR`` (``make demo`` does).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlarrow.core.store import Store

__all__ = ["main"]

CORRIDOR = 8
NUM_ENVS = 4
MAX_STEPS = 40
MEMORY_SIZE = 64


class Corridor:
    """A vectorized corridor: move left/right, reward 1 at the right end, -0.01 per step."""

    def __init__(self, num_envs: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.num_envs = num_envs
        self.pos = np.zeros(num_envs, np.int64)
        self.t = np.zeros(num_envs, np.int64)

    def reset(self, i: int) -> dict[str, np.ndarray]:
        """Start a new episode in sub-environment ``i``."""
        self.pos[i] = self.rng.integers(0, CORRIDOR // 2)
        self.t[i] = 0
        return self.observe(i)

    def observe(self, i: int) -> dict[str, np.ndarray]:
        """Observation of sub-environment ``i``: its position and a one-row image."""
        image = np.zeros((1, CORRIDOR), np.uint8)
        image[0, self.pos[i]] = 255
        return {"position": np.array([self.pos[i] / (CORRIDOR - 1)], np.float32), "image": image}

    def step(self, i: int, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        """Move sub-environment ``i``; returns observation, reward, terminated, truncated."""
        self.pos[i] = int(np.clip(self.pos[i] + (1 if action == 1 else -1), 0, CORRIDOR - 1))
        self.t[i] += 1
        terminated = bool(self.pos[i] == CORRIDOR - 1)
        truncated = bool(not terminated and self.t[i] >= MAX_STEPS)
        reward = 1.0 if terminated else -0.01
        return self.observe(i), reward, terminated, truncated


def record_run(store: Store, *, seed: int, episodes: int) -> str:
    """Play ``episodes`` episodes and write them, with scalars and a memory snapshot."""
    rng = np.random.default_rng(seed)
    env = Corridor(NUM_ENVS, seed)
    run = store.add_run(
        source="rlarrow.demo",
        name=f"corridor-seed{seed}",
        num_envs=NUM_ENVS,
        alignment="rlds",
        metadata={"env": "Corridor-v0", "seed": seed, "agent": "epsilon-greedy",
                  "params": {"epsilon_decay": np.float32(0.97), "corridor": CORRIDOR}},
        env_specs={
            "observation": {"position": {"shape": (1,), "dtype": "float32"},
                            "image": {"shape": (1, CORRIDOR), "dtype": "uint8"}},
            "action": {"shape": (), "dtype": "int64", "num_values": 2},
            "reward": {"shape": (), "dtype": "float64"},
        },
    )
    steps_w = store.writer("steps", flush_rows=2000)
    ep_rows: dict[str, list[Any]] = {k: [] for k in (
        "episode_id", "env_index", "num_steps", "return", "terminated", "truncated")}
    scalars: dict[str, list[Any]] = {"tag": [], "step": [], "value": [], "scope": []}
    memory: dict[str, np.ndarray] = {"states": np.full((MEMORY_SIZE, NUM_ENVS, 1), np.nan, np.float32),
              "actions": np.full((MEMORY_SIZE, NUM_ENVS, 1), -1, np.int64),
              "rewards": np.full((MEMORY_SIZE, NUM_ENVS, 1), np.nan, np.float32),
              "terminated": np.zeros((MEMORY_SIZE, NUM_ENVS, 1), bool)}
    pointer, full = 0, False
    epsilon, global_step = 1.0, 0
    obs = [env.reset(i) for i in range(NUM_ENVS)]
    episode_of = list(range(NUM_ENVS))
    next_episode = NUM_ENVS

    def new_buffer() -> dict[str, list[Any]]:
        return {"position": [], "image": [], "action": [], "reward": [], "terminal": []}

    buffers = [new_buffer() for _ in range(NUM_ENVS)]
    done_episodes = 0
    while done_episodes < episodes:
        actions = np.where(rng.random(NUM_ENVS) < epsilon, rng.integers(0, 2, NUM_ENVS), 1)
        for i in range(NUM_ENVS):
            b = buffers[i]
            b["position"].append(obs[i]["position"])
            b["image"].append(obs[i]["image"])
            b["action"].append(int(actions[i]))
            next_obs, reward, terminated, truncated = env.step(i, int(actions[i]))
            b["reward"].append(reward)
            memory["states"][pointer, i] = obs[i]["position"]
            memory["actions"][pointer, i] = actions[i]
            memory["rewards"][pointer, i] = reward
            memory["terminated"][pointer, i] = terminated
            obs[i] = next_obs
            if terminated or truncated:
                n = len(b["action"])
                steps_w.write({
                    "run_id": run, "episode_id": episode_of[i], "step": np.arange(n + 1),
                    "env_index": i,
                    "observation": {
                        "position": np.stack([*b["position"], next_obs["position"]]),
                        "image": np.stack([*b["image"], next_obs["image"]]),
                    },
                    "action": [np.int64(a) for a in b["action"]] + [None],
                    "reward": [*b["reward"], None],
                    "discount": [1.0] * (n - 1) + [0.0 if terminated else 1.0, None],
                    "is_first": [True] + [False] * n,
                    "is_last": [False] * n + [True],
                    "is_terminal": [False] * n + [terminated],
                    "metadata": [None] * n + [{"epsilon": np.float32(epsilon)}],
                })
                ret = float(sum(b["reward"]))
                ep_rows["episode_id"].append(episode_of[i])
                ep_rows["env_index"].append(i)
                ep_rows["num_steps"].append(n + 1)
                ep_rows["return"].append(ret)
                ep_rows["terminated"].append(terminated)
                ep_rows["truncated"].append(truncated)
                for tag, value in (("train/episode_return", ret), ("train/episode_length", n),
                                   ("info/epsilon", epsilon)):
                    scalars["tag"].append(tag)
                    scalars["step"].append(global_step)
                    scalars["value"].append(float(value))
                    scalars["scope"].append(tag.split("/")[0])
                done_episodes += 1
                epsilon *= 0.97
                episode_of[i] = next_episode
                next_episode += 1
                obs[i] = env.reset(i)
                buffers[i] = new_buffer()
        pointer = (pointer + 1) % MEMORY_SIZE
        full = full or pointer == 0
        global_step += NUM_ENVS
    steps_w.close()
    n_eps = len(ep_rows["episode_id"])
    store.append("episodes", {
        "run_id": run, **ep_rows,
        "partial_start": np.zeros(n_eps, bool), "partial_end": np.zeros(n_eps, bool),
    })
    store.append("scalars", {
        "run_id": run, **scalars, "wall_time": time.time(), "encoding": "logger", "dtype": "float64",
    })
    idx = np.arange(MEMORY_SIZE * NUM_ENVS)
    store.append("memory", {
        "run_id": run, "snapshot_id": 0, "snapshot_name": f"memory-seed{seed}",
        "memory_index": idx // NUM_ENVS, "env_index": idx % NUM_ENVS,
        "memory_size": MEMORY_SIZE, "num_envs": NUM_ENVS, "is_full": full,
        "write_pointer": pointer, "env_pointer": 0,
        "filled": np.full(idx.shape, True) if full else (idx // NUM_ENVS) < pointer,
        **{name: value.reshape(MEMORY_SIZE * NUM_ENVS, *value.shape[2:])
           for name, value in memory.items()},
    })
    return run


def write_legacy_exports(directory: Path, *, seed: int = 2) -> str:
    """Fill replay memories with the corridor until each exports itself once (pt, npz, csv).

    Returns which memory class wrote them.
    """
    import torch

    try:
        from skrl.memories.torch import RandomMemory

        who = "skrl's RandomMemory"
    except ImportError:
        from rlarrow.record.replay import RandomMemory

        who = "rlarrow.record.replay.RandomMemory (skrl is not installed)"
    rng = np.random.default_rng(seed)
    for fmt in ("pt", "npz", "csv"):
        env = Corridor(NUM_ENVS, seed)
        memory = RandomMemory(memory_size=MEMORY_SIZE, num_envs=NUM_ENVS, device="cpu", export=True,
                              export_format=fmt, export_directory=str(directory))
        for name, size, dtype in (("states", 2, torch.float32), ("next_states", 2, torch.float32),
                                  ("actions", 1, torch.int64), ("rewards", 1, torch.float32),
                                  ("terminated", 1, torch.bool), ("truncated", 1, torch.bool)):
            memory.create_tensor(name, size=size, dtype=dtype)
        obs = [env.reset(i) for i in range(NUM_ENVS)]
        for _ in range(MEMORY_SIZE + 7):  # fills once (an export), then wraps a little
            actions = np.where(rng.random(NUM_ENVS) < 0.3, rng.integers(0, 2, NUM_ENVS), 1)
            rows: dict[str, list[Any]] = {k: [] for k in ("states", "next_states", "rewards", "terminated",
                                                         "truncated")}
            for i in range(NUM_ENVS):
                rows["states"].append([obs[i]["position"][0], float(env.t[i])])
                nxt, reward, terminated, truncated = env.step(i, int(actions[i]))
                rows["next_states"].append([nxt["position"][0], float(env.t[i])])
                rows["rewards"].append([reward])
                rows["terminated"].append([terminated])
                rows["truncated"].append([truncated])
                obs[i] = env.reset(i) if terminated or truncated else nxt
            memory.add_samples(
                states=torch.tensor(rows["states"], dtype=torch.float32),
                next_states=torch.tensor(rows["next_states"], dtype=torch.float32),
                actions=torch.tensor(actions, dtype=torch.int64).view(-1, 1),
                rewards=torch.tensor(rows["rewards"], dtype=torch.float32),
                terminated=torch.tensor(rows["terminated"]), truncated=torch.tensor(rows["truncated"]))
    return who


def record_with_envlogger(out: Path) -> None:
    """Stage 6: the corridor as a dm_env environment, recorded by rlarrow.EnvLogger, read back."""
    import importlib.util

    if importlib.util.find_spec("dm_env") is None:
        print("   (skipped: needs dm_env; pip install 'rlarrow[dm-env]')")
        return
    import dm_env
    from dm_env import specs

    from rlarrow.query.reader import Reader
    from rlarrow.record.dm_env import EnvLogger

    class DmCorridor(dm_env.Environment):  # type: ignore[misc]
        def __init__(self) -> None:
            self.env = Corridor(1, seed=3)

        def reset(self) -> Any:
            return dm_env.restart(self.env.reset(0)["image"])

        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated = self.env.step(0, int(action))
            if terminated:
                return dm_env.termination(reward, obs["image"])
            if truncated:
                return dm_env.truncation(reward, obs["image"])
            return dm_env.transition(reward, obs["image"])

        def observation_spec(self) -> Any:
            return specs.Array((1, CORRIDOR), np.uint8, "image")

        def action_spec(self) -> Any:
            return specs.DiscreteArray(2, name="move")

    path = out / "envlogger.rlarrow"
    if path.exists():
        shutil.rmtree(path)
    rng = np.random.default_rng(3)
    with EnvLogger(DmCorridor(), path, metadata={"agent": "mostly-right"},
                   step_fn=lambda ts, action, env: {"t": int(env.env.t[0])},
                   episode_fn=lambda ts, action, env: {"final_t": int(env.env.t[0])} if ts.last() else None,
                   flush_every_steps=200) as env:
        for _ in range(50):
            ts = env.reset()
            while not ts.last():
                ts = env.step(int(rng.random() < 0.8))
    reader = Reader(path)
    step = reader.steps[len(reader.steps) // 2]
    print(f"   recorded {len(reader.episodes)} episodes, {len(reader.steps)} steps into {path}")
    print(f"   reader.steps[{len(reader.steps) // 2}]: step_type={step.timestep.step_type.name}, "
          f"reward={step.timestep.reward}, action={step.action}, custom_data={step.custom_data}")
    print(f"   episode 0 metadata: {reader.episode_metadata()[0]}; "
          f"whole episodes as columns: {reader.episode_columns(slice(0, 5))['observation'].shape}")


def _rlarrow_cli(argv: list[str]) -> None:
    """Show and run one ``rlarrow`` command in this process (a failure stops the demo)."""
    from rlarrow.cli.commands import main as cli_main

    print("   $ rlarrow " + " ".join(argv))
    try:
        cli_main(argv)
    except SystemExit as exc:
        if exc.code:
            raise


def convert_legacy(out: Path) -> None:
    """Stage 5 of the demo: legacy memory exports -> a store, unrolled into episodes."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("   (skipped: replay memories need torch; pip install 'rlarrow[torch]')")
        return
    legacy = out / "legacy"
    if legacy.exists():
        shutil.rmtree(legacy)
    who = write_legacy_exports(legacy)
    files = sorted((legacy / "memories").iterdir())
    print(f"   {who} exported {len(files)} files: " + ", ".join(p.suffix for p in files))
    store_path = out / "legacy.rlarrow"
    if store_path.exists():
        shutil.rmtree(store_path)
    _rlarrow_cli(["convert", str(legacy / "memories"), "-o", str(store_path), "--num-envs", str(NUM_ENVS),
                  "--episodes", "--name", "legacy-corridor"])
    import duckdb

    query = f"""
        select m.snapshot_name[1:26] as export, count(*) as episodes,
               count(*) filter (where partial_start or partial_end) as partial,
               round(avg("return") filter (where terminated), 3) as mean_return_terminated
        from read_parquet('{store_path}/episodes/*.parquet') e
        join (select distinct run_id, snapshot_id, snapshot_name
              from read_parquet('{store_path}/memory/*.parquet')) m
          on m.run_id = e.run_id and m.snapshot_id = (e.metadata->>'snapshot_id')::bigint
        group by all order by export"""
    print(query.strip())
    print(duckdb.sql(query))


def import_training_logs(out: Path, demo_store: Path) -> None:
    """Stage 7 of the demo: TensorBoard event files -> the scalars table, queried with SQL.

    The corridor runs' logged points are written as event files the way a training script
    does it (torch's ``SummaryWriter`` when torch is installed, with ``add_scalars`` making
    sub-runs; else rlarrow's ``EventFileWriter``), then imported with ``rlarrow convert``.
    """
    import importlib.util

    import duckdb

    logs = out / "tb-logs"
    if logs.exists():
        shutil.rmtree(logs)
    rows = duckdb.execute(f"""select r.name, s.tag, s.step, s.value, s.wall_time
                          from read_parquet('{demo_store}/scalars/*.parquet') s
                          join read_parquet('{demo_store}/runs/*.parquet') r using (run_id)
                          order by r.name, s.step, s.tag""").fetchall()
    if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("tensorboard") is not None:
        from torch.utils.tensorboard import SummaryWriter

        writers: dict[str, Any] = {}
        extra = 0
        for name, tag, step, value, wall in rows:
            w = writers.get(name) or writers.setdefault(name, SummaryWriter(str(logs / name)))
            w.add_scalar(tag, value, step, walltime=wall)
            if tag == "train/episode_return" and step % 50 == 0:
                w.add_scalars("return", {"raw": value, "clipped": min(value, 0.5)}, step, walltime=wall)
                extra += 2
        for w in writers.values():
            w.close()
        who = f"torch's SummaryWriter (add_scalar, and add_scalars for {extra} points in sub-runs)"
    else:
        from rlarrow.io.tfevents import EventFileWriter

        files: dict[str, EventFileWriter] = {}
        for name, tag, step, value, wall in rows:
            f = files.get(name) or files.setdefault(name, EventFileWriter(logs / name))
            f.add_scalar(tag, value, step, wall)
        for f in files.values():
            f.close()
        who = "rlarrow's EventFileWriter (torch is not installed)"
    n_files = sum(1 for p in logs.rglob("*") if "tfevents" in p.name)
    print(f"   {who} wrote {len(rows)} points into {n_files} event files under {logs}")
    store_path = out / "logs.rlarrow"
    if store_path.exists():
        shutil.rmtree(store_path)
    _rlarrow_cli(["convert", str(logs), "-o", str(store_path), "--run-id", "corridor"])
    query = f"""
        select run_id, tag, count(*) as points, max(step) as last_step,
               round(avg(value) filter (where step > max_step - 200), 3) as mean_last_200_steps
        from (select *, max(step) over (partition by run_id, tag) as max_step
              from read_parquet('{store_path}/scalars/*.parquet'))
        group by all order by run_id, tag"""
    print(query.strip())
    print(duckdb.sql(query))


def curves_and_questions(out: Path, store_path: Path) -> Path | None:
    """Stage 8 of the demo: RL questions with rlarrow's SQL macros, and learning curves."""
    import importlib.util

    import rlarrow

    query = """
        select e.run_id, count(*) as episodes, round(avg(e.discounted_return), 3) as mean_discounted_return,
               round(avg(e."return") filter (where e.episode_id >= 100), 3) as mean_return_after_100,
               any_value(t.step) as first_step_return_at_least_0_9
        from episode_returns(0.99) e
        join steps_to_threshold('train/episode_return', 0.9) t using (run_id)
        group by all order by e.run_id"""
    print(f"   rlarrow.sql({str(store_path)!r}, ...):")
    print(query.strip())
    print(rlarrow.connect(store_path).sql(query))
    if importlib.util.find_spec("matplotlib") is None:
        print("   (plot skipped: needs matplotlib; pip install 'rlarrow[plot]')")
        return None
    from rlarrow.query.plot import plot_episodes, plot_scalars

    curves = out / "curves.png"
    plot_scalars(store_path, ["train/episode_return", "info/epsilon"], smooth=10, output=curves)
    plot_episodes(store_path, smooth=10, output=out / "returns.png")
    print(f"   $ rlarrow plot {store_path} --tag train/episode_return --tag info/epsilon --smooth 10 "
          f"-o {curves}")
    print(f"   wrote {curves} and {out / 'returns.png'}")
    return curves


def main(argv: list[str] | None = None) -> int:
    """Build the demo store in OUTPUT_DIR (default ``demo-output``) and query it."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "demo-output")
    store_path = out / "demo.rlarrow"
    if store_path.exists():
        shutil.rmtree(store_path)
    out.mkdir(parents=True, exist_ok=True)

    print(f"== 1. recording episodes of a 4-env corridor into {store_path}")
    with Store.create(store_path) as store:
        for seed in (0, 1):
            run = record_run(store, seed=seed, episodes=120)
            print(f"   run {run}: {store.row_count('steps')} steps so far")

    print("\n== 2. rlarrow info")
    from rlarrow.cli.commands import main as cli_main

    try:
        cli_main(["info", str(store_path)])
    except SystemExit as exc:  # click exits after a command
        if exc.code:
            raise

    print("\n== 3. plain DuckDB over the Parquet files (no rlarrow involved)")
    import duckdb

    simple = f"""
        select r.name as run, count(*) as episodes,
               round(avg(e."return") filter (where e.episode_id < 20), 3) as mean_return_first_20,
               round(avg(e."return") filter (where e.episode_id >= (select max(episode_id) - 19
                   from read_parquet('{store_path}/episodes/*.parquet') x where x.run_id = e.run_id)),
                   3) as mean_return_last_20
        from read_parquet('{store_path}/episodes/*.parquet') e
        join read_parquet('{store_path}/runs/*.parquet') r using (run_id)
        group by r.name order by r.name"""
    print(simple.strip())
    print(duckdb.sql(simple))

    frames = duckdb.execute(
        f"select observation.image[1] as row, count(*) as n "
        f"from read_parquet('{store_path}/steps/*.parquet') where is_last and is_terminal "
        f"group by all").fetchall()
    print(f"final frames of terminated episodes (uint8 image column): {len(frames)} distinct, "
          f"{sum(n for _, n in frames)} episodes")

    print("\n== 4. Polars, lazily, over the scalars table")
    import polars as pl

    curve = (
        pl.scan_parquet(f"{store_path}/scalars/*.parquet")
        .filter(pl.col("tag") == "train/episode_return")
        .sort("run_id", "step")
        .with_columns(pl.col("value").rolling_mean(20).over("run_id").alias("smoothed"))
        .group_by("run_id").agg(pl.col("smoothed").last().round(3).alias("last_smoothed_return"))
        .sort("run_id")
        .collect()
    )
    print(curve)

    print("\n== 5. legacy replay-memory exports -> Parquet, episodes recovered")
    convert_legacy(out)

    print("\n== 6. a dm_env environment recorded with rlarrow.EnvLogger, read with rlarrow.Reader")
    record_with_envlogger(out)

    print("\n== 7. training logs: TensorBoard event files -> the scalars table, asked with SQL")
    import_training_logs(out, store_path)

    print("\n== 8. RL questions with rlarrow's SQL macros, and learning curves")
    curves = curves_and_questions(out, store_path)

    print("\n== 9. normalisation statistics, stored with every commit: no pass over the data")
    _rlarrow_cli(["stats", str(store_path), "--where", "terminated", "-o", str(out / "stats.json")])
    from rlarrow.query.dataset_stats import stats

    for name, column in stats(store_path, where="terminated", quantiles=False).items():
        mean = np.round(column.mean, 3).tolist()
        print(f"   {name}: shape {column.shape}, {column.count} values, mean {mean}")

    print(f"\nDone. The store is {store_path}: one folder of Parquet files per table.")
    if curves is not None:
        print(f"Learning curves: {curves}")
    print(f"Look at it with:  .venv/bin/rlarrow info {store_path}")
    print("or any engine:    .venv/bin/python -c \"import duckdb; "
          f"print(duckdb.sql(\\\"select * from '{store_path}/steps/*.parquet' limit 5\\\"))\"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
