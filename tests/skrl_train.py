"""A real skrl 2 training run (PPO or DQN on a gymnasium 1.x vector CartPole) for the tests.

skrl's own memory exports its buffer (pt, npz and csv, by skrl's ``Memory.save``) each time it
fills; the same vector env is recorded by :class:`rlarrow.record.gym.RecordVectorEpisodes` and
measured by gymnasium's ``RecordEpisodeStatistics``, so that tests/test_skrl_workflow.py can
check what ``import_memory(..., episodes=True)`` makes of the exports against both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from skrl.agents.torch.dqn import DQN, DQN_CFG
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed

from rlarrow.record.gym import RecordVectorEpisodes

NUM_ENVS = 4
FORMATS = ("pt", "npz", "csv")


class ExportAll(RandomMemory):  # type: ignore[misc]
    """skrl's memory, exporting each fill in every format (skrl's own writer, one directory each)."""

    def save(self, directory: str = "", *, format: str = "pt") -> None:  # noqa: A002 (skrl's name)
        for fmt in FORMATS:
            super().save(os.path.join(directory, fmt), format=fmt)


class Policy(CategoricalMixin, Model):  # type: ignore[misc]
    def __init__(self, observation_space: Any, action_space: Any) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
        CategoricalMixin.__init__(self)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.net(inputs["observations"]), {}


class Critic(DeterministicMixin, Model):  # type: ignore[misc]
    def __init__(self, observation_space: Any, action_space: Any, outputs: int = 1) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
        DeterministicMixin.__init__(self)
        inputs = observation_space.shape[0]  # (4 for CartPole, 3 for Pendulum)
        self.net = torch.nn.Sequential(torch.nn.Linear(inputs, 32), torch.nn.Tanh(),
                                       torch.nn.Linear(32, outputs))

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.net(inputs["observations"]), {}


class EpisodeStats(gym.vector.VectorWrapper):  # type: ignore[misc]
    """Keeps what gymnasium's RecordEpisodeStatistics reports: (env, return, length), in order."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.finished: list[tuple[int, float, int]] = []

    def step(self, actions: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if "episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                self.finished.append((int(i), float(info["episode"]["r"][i]), int(info["episode"]["l"][i])))
        return obs, reward, terminated, truncated, info


@dataclass
class Run:
    """What a training run left: skrl's exports, the recorder's store and gymnasium's statistics."""

    algo: str
    mode: str  # "next-step" or "same-step"
    exports: dict[str, Path]  # format -> the memories directory skrl wrote
    recorder: Path
    memory_size: int
    timesteps: int
    max_episode_steps: int | None = None
    stats: list[tuple[int, float, int]] = field(default_factory=list)


def train(algo: str, mode: str, out: Path, *, timesteps: int = 1000, seed: int = 0,
          max_episode_steps: int | None = None, value_scaler: bool = False) -> Run:
    """Train skrl's ``algo`` ("ppo", "dqn") with gymnasium autoreset ``mode`` ("next-step", "same-step").

    ``max_episode_steps``: the env's time limit (gymnasium's ``TimeLimit``; CartPole's own is 500);
    ``value_scaler``: PPO scales its values with skrl's ``RunningStandardScaler`` (its examples do).
    """
    set_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small MLPs: threads cost more than they give
    try:
        return _train(algo, mode, out, timesteps, max_episode_steps, value_scaler)
    finally:
        torch.set_num_threads(threads)


def _train(algo: str, mode: str, out: Path, timesteps: int, max_episode_steps: int | None,
           value_scaler: bool = False) -> Run:
    modes = gym.vector.AutoresetMode
    autoreset = {"next-step": modes.NEXT_STEP, "same-step": modes.SAME_STEP}
    limit = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    venv = gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": autoreset[mode]}, **limit)
    stats = EpisodeStats(gym.wrappers.vector.RecordEpisodeStatistics(venv))
    recorded = RecordVectorEpisodes(stats, out / "recorded.rlarrow")
    env = wrap_env(recorded, wrapper="gymnasium")
    experiment = {"directory": str(out / "runs"), "write_interval": 0, "checkpoint_interval": 0}
    agent: Any
    scaler = {"value_preprocessor": RunningStandardScaler,
              "value_preprocessor_kwargs": {"size": 1, "device": "cpu"}} if value_scaler else {}
    if algo == "ppo":  # PPO's memory is its rollout buffer: it fills (and exports) every `rollouts` steps
        memory_size = 128
        memory = ExportAll(memory_size=memory_size, num_envs=NUM_ENVS, device="cpu", export=True,
                           export_directory=str(out / "memory"))
        agent = PPO(models={"policy": Policy(env.observation_space, env.action_space),
                            "value": Critic(env.observation_space, env.action_space)},
                    memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                    device="cpu", cfg=PPO_CFG(rollouts=memory_size, learning_epochs=2, mini_batches=2,
                                              experiment=experiment, **scaler))
    else:
        memory_size = 250
        memory = ExportAll(memory_size=memory_size, num_envs=NUM_ENVS, device="cpu", export=True,
                           export_directory=str(out / "memory"))
        agent = DQN(models={"q_network": Critic(env.observation_space, env.action_space, 2),
                            "target_q_network": Critic(env.observation_space, env.action_space, 2)},
                    memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                    device="cpu", cfg=DQN_CFG(learning_starts=100, random_timesteps=100, update_interval=4,
                                                experiment=experiment))
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True,
                                                            "disable_progressbar": True,
                                                            "close_environment_at_exit": False})
    trainer.train()
    env.close()  # the recorder commits its episodes (the running ones as partial_end)
    return Run(algo=algo, mode=mode, exports={f: out / "memory" / f / "memories" for f in FORMATS},
               recorder=out / "recorded.rlarrow", memory_size=memory_size, timesteps=timesteps,
               max_episode_steps=max_episode_steps, stats=stats.finished)


class GaussianPolicy(GaussianMixin, Model):  # type: ignore[misc]
    """A continuous policy (Pendulum's one torque): skrl's Gaussian mixin over a small MLP."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
        GaussianMixin.__init__(self, clip_actions=True)
        inputs, outputs = observation_space.shape[0], action_space.shape[0]
        self.net = torch.nn.Sequential(torch.nn.Linear(inputs, 32), torch.nn.Tanh(),
                                       torch.nn.Linear(32, outputs))
        self.log_std = torch.nn.Parameter(torch.zeros(outputs))

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.net(inputs["observations"]), {"log_std": self.log_std}


def train_experiment(algo: str, runs: Path, name: str, *, timesteps: int, num_envs: int = 2,
                     seed: int = 0) -> Path:
    """An skrl experiment directory ``runs/name`` (event files, ``memories/`` of npz exports).

    ``"ppo"``: PPO on Pendulum-v1 (continuous float32 actions, episodes of 50 steps), its rollout
    buffer of ``timesteps // 2`` exported twice; ``"dqn"``: DQN on CartPole-v1 (discrete int64
    actions), its replay memory of ``timesteps`` exported once, when full.
    """
    set_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        directory = runs / name
        experiment = {"directory": str(runs), "experiment_name": name, "write_interval": 16,
                      "checkpoint_interval": 0}
        agent: Any
        if algo == "ppo":
            venv = gym.make_vec("Pendulum-v1", num_envs=num_envs, vectorization_mode="sync",
                                max_episode_steps=50)
            env = wrap_env(venv, wrapper="gymnasium")
            memory = RandomMemory(memory_size=timesteps // 2, num_envs=num_envs, device="cpu", export=True,
                                  export_format="npz", export_directory=str(directory))
            agent = PPO(models={"policy": GaussianPolicy(env.observation_space, env.action_space),
                                "value": Critic(env.observation_space, env.action_space)},
                        memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                        device="cpu", cfg=PPO_CFG(rollouts=timesteps // 2, learning_epochs=1, mini_batches=1,
                                                  experiment=experiment))
        else:
            venv = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
            env = wrap_env(venv, wrapper="gymnasium")
            memory = RandomMemory(memory_size=timesteps, num_envs=num_envs, device="cpu", export=True,
                                  export_format="npz", export_directory=str(directory))
            agent = DQN(models={"q_network": Critic(env.observation_space, env.action_space, 2),
                                "target_q_network": Critic(env.observation_space, env.action_space, 2)},
                        memory=memory, observation_space=env.observation_space, action_space=env.action_space,
                        device="cpu", cfg=DQN_CFG(learning_starts=timesteps // 2,
                                                  random_timesteps=timesteps // 2, update_interval=8,
                                                  experiment=experiment))
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, "headless": True,
                                                                "disable_progressbar": True,
                                                                "close_environment_at_exit": False})
        trainer.train()
        env.close()
        return directory
    finally:
        torch.set_num_threads(threads)
