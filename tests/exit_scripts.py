"""Training scripts that never close what they record, for tests/core/test_exits.py.

Run as ``python tests/exit_scripts.py SCENARIO STORE``. Each writes through rlarrow the way
a user's script does and exits without ``close()``/``finalize()``; what it gave rlarrow is
printed as one JSON line (``{"made": ...}``) so the test can compare it with the store.
The ``forever`` scenarios record until they are stopped by a signal, printing each episode
as it ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def say(**what: Any) -> None:
    print(json.dumps(what), flush=True)


def walk_env(length: int = 7) -> Any:
    """A dm_env environment whose episodes last ``length`` steps, rewards 0.5 a step."""
    import dm_env
    from dm_env import specs

    class Walk(dm_env.Environment):  # type: ignore[misc]
        def __init__(self) -> None:
            self.t = 0

        def reset(self) -> Any:
            self.t = 0
            return dm_env.restart(np.zeros(3, np.float32))

        def step(self, action: Any) -> Any:
            self.t += 1
            obs = np.full(3, self.t, np.float32)
            if self.t == length:
                return dm_env.termination(0.5, obs)
            return dm_env.transition(0.5, obs)

        def observation_spec(self) -> Any:
            return specs.Array((3,), np.float32, "obs")

        def action_spec(self) -> Any:
            return specs.DiscreteArray(2, name="action")

    return Walk()


def play(env: Any, episodes: int = 1) -> None:
    """Run ``episodes`` whole episodes of a dm_env environment (an EnvLogger), action 1 each step."""
    for _ in range(episodes):
        ts = env.reset()
        while not ts.last():
            ts = env.step(1)


def envlogger(store: str) -> None:
    """EnvLogger, ten episodes, never closed (envlogger's own keeps all ten)."""
    from rlarrow import EnvLogger

    play(EnvLogger(walk_env(), store, run_id="walk"), 10)
    say(made={"episodes": 10, "steps": 10 * 8})


def envlogger_forever(store: str) -> None:
    """EnvLogger until a signal stops the process: each finished episode is printed."""
    from rlarrow import EnvLogger

    env = EnvLogger(walk_env(), store, run_id="walk", flush_every_steps=None, flush_every_seconds=None)
    episode = 0
    while True:
        play(env)
        say(finished=episode)
        episode += 1


def catch_all(store: str) -> None:
    """Three episodes recorded, then a loop that swallows every exception (as pytest and notebooks do)."""
    import time

    from rlarrow import EnvLogger

    play(EnvLogger(walk_env(), store, run_id="walk"), 3)
    say(ready=True)
    while True:
        try:
            time.sleep(0.01)
        except BaseException:  # noqa: BLE001, S110 - what a test runner or a REPL does
            pass


def forked(store: str) -> None:
    """EnvLogger in a multiprocessing child started by fork, never closed (the child ends by os._exit)."""
    import multiprocessing

    from rlarrow import EnvLogger

    def child() -> None:
        play(EnvLogger(walk_env(), store, run_id="child"), 4)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    say(made=process.exitcode)


def own_handler(store: str) -> None:
    """A program with its own SIGTERM handler: rlarrow leaves it in place."""
    import signal

    from rlarrow import EnvLogger

    def handler(signum: int, frame: object) -> None:
        say(handled=signum)
        sys.exit(3)

    signal.signal(signal.SIGTERM, handler)
    env = EnvLogger(walk_env(), store, run_id="walk")
    say(kept=signal.getsignal(signal.SIGTERM) is handler)
    play(env)


def vector(store: str) -> None:
    """RecordVectorEpisodes over gymnasium's CartPole with its own episode statistics, never closed."""
    import gymnasium as gym

    from rlarrow.record.gym import RecordVectorEpisodes

    venv = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    stats = gym.wrappers.vector.RecordEpisodeStatistics(venv)
    env = RecordVectorEpisodes(stats, store, run_id="cartpole")
    finished = []
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(600):
        _, _, _, _, info = env.step(rng.integers(0, 2, 4))
        if "episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                finished.append([int(i), float(info["episode"]["r"][i]), int(info["episode"]["l"][i])])
    say(made=finished)


def table_writer(store: str) -> None:
    """Store.writer, never closed."""
    import rlarrow

    st = rlarrow.Store.create(store)
    w = st.writer("scalars", flush_seconds=3600)
    for step in range(250):
        w.write({"run_id": "r", "scope": "train", "tag": "train/loss", "step": [step], "value": [step / 2]})
    say(made=250)


def memory(store: str) -> None:
    """rlarrow's RandomMemory exporting parquet: 2.5 fills, never closed (the last half exported at exit)."""
    import torch

    from rlarrow.record.replay import RandomMemory

    mem = RandomMemory(memory_size=100, num_envs=2, device="cpu", export=True, export_format="parquet",
                       export_directory=store)
    for name, size, dtype in [("states", 3, None), ("actions", 1, None), ("rewards", 1, None),
                              ("terminated", 1, torch.bool), ("truncated", 1, torch.bool)]:
        mem.create_tensor(name, size, dtype)
    for t in range(250):  # episodes of 10 steps, the step number as the state (same-step autoreset)
        mem.add_samples(states=torch.full((2, 3), float(t)), actions=torch.zeros(2, 1),
                        rewards=torch.ones(2, 1), terminated=torch.full((2, 1), t % 10 == 9),
                        truncated=torch.zeros(2, 1, dtype=torch.bool))
    say(made=250)


def skrl_writer(store: str) -> None:
    """skrl 2's DQN with the README's writer swap (``agent.writer = SummaryWriter(...)``), never closed."""
    import gymnasium as gym
    from skrl.agents.torch.dqn import DQN, DQN_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed
    from skrl.utils.model_instantiators.torch import deterministic_model

    from rlarrow.record.logger import SummaryWriter

    made: list[list[Any]] = []

    class Counted(SummaryWriter):
        def add_scalar(self, tag: str, value: Any = None, timestep: Any = None, **kw: Any) -> None:  # type: ignore[override]
            made.append([tag, int(timestep)])
            super().add_scalar(tag, value=value, timestep=timestep, **kw)

    set_seed(0)
    env = wrap_env(gym.make("CartPole-v1"))
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [16], "activations": "relu"}]
    models = {role: deterministic_model(observation_space=env.observation_space,
                                        action_space=env.action_space, device=env.device, network=net,
                                        output="ACTIONS")
              for role in ("q_network", "target_q_network")}
    cfg = DQN_CFG(batch_size=16, learning_starts=50, random_timesteps=50)
    cfg.experiment.directory = str(Path(store).parent / "skrl")
    cfg.experiment.write_interval = 25
    cfg.experiment.checkpoint_interval = 0
    agent = DQN(models=models, memory=RandomMemory(memory_size=1000, device=env.device), cfg=cfg,
                observation_space=env.observation_space, action_space=env.action_space, device=env.device)
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 300, "headless": True,
                                                            "disable_progressbar": True})
    # the trainer has called agent.init(), which created agent.writer: the README swaps it
    agent.writer = Counted(store, run_id="dqn", log_dir=Path(store).parent / "mirror")
    trainer.train()
    say(made=made)


SCENARIOS = {"envlogger": envlogger, "envlogger-forever": envlogger_forever, "own-handler": own_handler,
             "catch-all": catch_all, "forked": forked,
             "vector": vector, "table-writer": table_writer, "memory": memory, "skrl-writer": skrl_writer}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](sys.argv[2])
