"""RLlib SAC (new API stack) configured for Policy Decorator: the residual RLModule, the episode
replay buffer, the paper's update-to-data ratio, and torch on one thread in every process."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENV_NAME = "iclr_ray_residual_env"


@dataclass
class SACSettings:
    alpha: float = 0.1
    """residual bound (res_scale)"""
    H: int = 0
    """progressive exploration horizon in env steps (0: the residual from the start)"""
    gamma: float = 0.97
    tau: float = 0.01
    lr: float = 1e-4
    batch: int = 1024
    buffer: int = 1_000_000
    learning_starts: int = 8000
    utd: float = 0.25
    """gradient updates per env step"""
    initial_entropy_alpha: float = 0.2
    grad_clip: float = 50.0
    hidden: list[int] = field(default_factory=lambda: [256, 256, 256])
    num_env_runners: int = 0
    envs_per_runner: int = 1
    rollout_fragment: int = 8
    residual_sees_base: bool = False
    seed: int = 0


def register_env() -> None:
    from ray.tune.registry import register_env as reg

    from .envs import rllib_env

    reg(ENV_NAME, rllib_env)


def sac_config(env_config: dict[str, Any], s: SACSettings):
    """The AlgorithmConfig of one decorated-SAC run (build it with ``.build_algo()``)."""
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from .residual import ResidualSACModule

    register_env()
    model = {"fcnet_hiddens": list(s.hidden), "fcnet_activation": "relu", "twin_q": True, "alpha": s.alpha, "H": s.H,
             "learning_starts": s.learning_starts, "num_env_runners": max(1, s.num_env_runners),
             "residual_sees_base": s.residual_sees_base}
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return (
        SACConfig()
        .environment(ENV_NAME, env_config=env_config, normalize_actions=False, clip_actions=False)
        .framework("torch", torch_compile_learner=False)
        .env_runners(num_env_runners=s.num_env_runners, num_envs_per_env_runner=s.envs_per_runner,
                     rollout_fragment_length=s.rollout_fragment, num_cpus_per_env_runner=1,
                     env_to_module_connector=None)
        .learners(num_learners=0)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ResidualSACModule, model_config=model))
        .training(gamma=s.gamma, tau=s.tau, actor_lr=s.lr, critic_lr=s.lr, alpha_lr=s.lr, train_batch_size_per_learner=s.batch,
                  initial_alpha=s.initial_entropy_alpha, grad_clip=s.grad_clip, grad_clip_by="global_norm",
                  num_steps_sampled_before_learning_starts=s.learning_starts, training_intensity=s.utd * s.batch,
                  replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": s.buffer}, n_step=1)
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=s.seed)
        .python_environment(extra_python_environs_for_worker=one_thread)
    )
