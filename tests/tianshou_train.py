"""A real tianshou 2 trainer (DQN on CartPole) logging through ArrowLogger, then resuming.

Run by tests/record/test_logger.py in a subprocess: python tests/tianshou_train.py STORE; and by
tests/core/test_exits.py as one run a process that never finalizes its logger:
python tests/tianshou_train.py STORE --no-finalize|--resume-no-finalize EPOCHS
"""

from __future__ import annotations

import sys

import gymnasium as gym
import torch
from tianshou.algorithm import DQN
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OffPolicyTrainerParams
from tianshou.utils.net.common import Net

from rlarrow.record.logger import ArrowLogger


def train(store: str, max_epochs: int, resume: bool, finalize: bool = True) -> None:
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    train_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    test_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    net = Net(state_shape=env.observation_space.shape, action_shape=env.action_space.n, hidden_sizes=[16])
    policy = DiscreteQLearningPolicy(model=net, action_space=env.action_space, eps_training=0.1)
    algo = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=10)
    train_c = Collector[CollectStats](algo, train_envs, VectorReplayBuffer(2000, 2), exploration_noise=True)
    test_c = Collector[CollectStats](algo, test_envs, exploration_noise=True)
    train_c.reset()
    test_c.reset()
    train_c.collect(n_step=64, random=True)
    logger = ArrowLogger(store, run_id="dqn", training_interval=1, update_interval=1)
    algo.run_training(OffPolicyTrainerParams(
        training_collector=train_c, test_collector=test_c, max_epochs=max_epochs, epoch_num_steps=100,
        collection_step_num_env_steps=20, test_step_num_episodes=2, batch_size=32,
        update_step_num_gradient_steps_per_sample=0.1, logger=logger, resume_from_log=resume,
        show_progress=False, verbose=False))
    if finalize:
        logger.finalize()


if __name__ == "__main__":
    if len(sys.argv) > 2:  # one run in this process, never finalized, as tianshou's README leaves it
        train(sys.argv[1], int(sys.argv[3]), sys.argv[2] == "--resume-no-finalize", finalize=False)
    else:
        train(sys.argv[1], 2, False)
        train(sys.argv[1], 3, True)
