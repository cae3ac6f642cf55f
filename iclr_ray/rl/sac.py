"""RLlib SAC (new API stack) configured for Policy Decorator: the residual RLModule, a replay
buffer of single transitions, the paper's update-to-data ratio, and torch on one thread in every
process.

Why not RLlib's ``EpisodeReplayBuffer``: sampling one-step episodes from it and the learner
connector that turns them back into a batch cost more than the SAC update itself on a small
machine (``benchmarks/rllib_env_steps.py`` measures both paths). SAC with one-step returns
needs only (s, a, r, s', terminated) rows, so :class:`DecoratedSAC` keeps them in numpy rings
(:class:`TransitionBuffer`) and hands the learner group ready batches
(``LearnerGroup.update(batch=...)``); sampling, the learner, the loss, the target updates and the
weight sync are RLlib's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.algorithms.sac import SAC

from .settings import SACSettings

ENV_NAME = "iclr_ray_residual_env"


class TransitionBuffer:
    """A ring of the last ``capacity`` transitions (s, a, r, s', terminated) cut from the episode
    chunks RLlib's env runners return, sampled uniformly. No Ray. An episode chunk of length T
    holds T + 1 observations; only its last transition can be terminal, and a truncated one is not
    (the learner bootstraps through a time limit, the paper's rule)."""

    def __init__(self, capacity: int, seed: int = 0):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity, self.size, self.pos, self.added = capacity, 0, 0, 0
        self.rng = np.random.default_rng(seed)
        self.arrays: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return self.size

    def _alloc(self, obs_dim: int, act_dim: int) -> None:
        c = self.capacity
        self.arrays = {"obs": np.zeros((c, obs_dim), np.float32), "new_obs": np.zeros((c, obs_dim), np.float32),
                       "actions": np.zeros((c, act_dim), np.float32), "rewards": np.zeros(c, np.float32),
                       "terminateds": np.zeros(c, bool)}

    def add_transitions(self, obs, actions, rewards, next_obs, terminated) -> None:
        obs, next_obs = np.asarray(obs, np.float32), np.asarray(next_obs, np.float32)
        actions = np.asarray(actions, np.float32).reshape(len(obs), -1)
        n = len(obs)
        if n == 0:
            return
        if not self.arrays:
            self._alloc(obs.shape[1], actions.shape[1])
        if n > self.capacity:  # only the newest capacity rows survive
            obs, actions, next_obs = obs[-self.capacity:], actions[-self.capacity:], next_obs[-self.capacity:]
            rewards, terminated = np.asarray(rewards)[-self.capacity:], np.asarray(terminated)[-self.capacity:]
            self.added += n - self.capacity
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        for key, value in (("obs", obs), ("actions", actions), ("rewards", rewards), ("new_obs", next_obs),
                           ("terminateds", terminated)):
            self.arrays[key][idx] = value
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.added += n

    def add_episodes(self, episodes) -> int:
        """Adds every transition of the (single-agent) episode chunks; returns how many."""
        total = 0
        for ep in episodes:
            t = len(ep)
            if t == 0:
                continue
            o = np.asarray(ep.get_observations(), np.float32)
            term = np.zeros(t, bool)
            term[-1] = bool(ep.is_terminated)
            self.add_transitions(o[:-1], ep.get_actions(), np.asarray(ep.get_rewards(), np.float32), o[1:], term)
            total += t
        return total

    def sample(self, n: int) -> dict[str, np.ndarray]:
        """n transitions drawn uniformly with replacement, as the columns SAC's learner reads
        (``obs``, ``actions``, ``rewards``, ``new_obs``, ``terminateds``, ``n_step``, ``weights``)."""
        if self.size == 0:
            raise ValueError("sample from an empty buffer")
        idx = self.rng.integers(0, self.size, n)
        out = {k: v[idx] for k, v in self.arrays.items()}
        out["n_step"] = np.ones(n, np.float32)
        out["weights"] = np.ones(n, np.float32)
        return out


class DecoratedSAC(SAC):
    """RLlib's SAC with the training step reading ready batches from a :class:`TransitionBuffer`:
    sample every env runner once, store the transitions, then run the updates due, utd per env
    step sampled after ``num_steps_sampled_before_learning_starts``, one ``LearnerGroup.update``
    each (SAC's learner updates its targets after each), and sync the weights to the runners."""

    def setup(self, config):
        super().setup(config)
        cap = int(self.config.replay_buffer_config.get("capacity", 1_000_000))
        self.transitions = TransitionBuffer(cap, seed=int(self.config.seed or 0))
        self.updates_done = 0

    def training_step(self) -> None:
        from ray.rllib.core import DEFAULT_MODULE_ID
        from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
        from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
        from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, ENV_RUNNER_SAMPLING_TIMER, LEARNER_RESULTS,
                                             LEARNER_UPDATE_TIMER, NUM_AGENT_STEPS_SAMPLED_LIFETIME,
                                             NUM_ENV_STEPS_SAMPLED_LIFETIME, REPLAY_BUFFER_ADD_DATA_TIMER,
                                             SYNCH_WORKER_WEIGHTS_TIMER, TD_ERROR_KEY, TIMERS)

        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, runner_results = synchronous_parallel_sample(
                worker_set=self.env_runner_group, concat=True, sample_timeout_s=self.config.sample_timeout_s,
                _uses_new_env_runners=True, _return_metrics=True)
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        with self.metrics.log_time((TIMERS, REPLAY_BUFFER_ADD_DATA_TIMER)):
            self.transitions.add_episodes(episodes)
        g = int(self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0))
        start = self.config.num_steps_sampled_before_learning_starts
        batch = self.config.total_train_batch_size
        utd = self.config.training_intensity / batch
        due = int(utd * max(0, g - start)) - self.updates_done if g >= start else 0
        if due <= 0 or len(self.transitions) == 0:
            return
        timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: g,
                     NUM_AGENT_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                         (ENV_RUNNER_RESULTS, NUM_AGENT_STEPS_SAMPLED_LIFETIME), default={})}
        results = []
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            for _ in range(due):
                rows = SampleBatch(self.transitions.sample(batch))
                results += self.learner_group.update(batch=MultiAgentBatch({DEFAULT_MODULE_ID: rows}, env_steps=batch),
                                                     timesteps=timesteps)
        self.updates_done += due
        for res in results:  # per-sample TD errors are for prioritised replay, which this is not
            for module_results in res.values():
                if isinstance(module_results, dict):
                    module_results.pop(TD_ERROR_KEY, None)
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                               policies=[DEFAULT_MODULE_ID], inference_only=True)


def register_env() -> None:
    from ray.tune.registry import register_env as reg

    from .envs import rllib_env

    reg(ENV_NAME, rllib_env)


def sac_config(env_config: dict[str, Any], s: SACSettings, *, alpha: float, H: int, seed: int = 0):
    """The AlgorithmConfig of one decorated-SAC run (build it with ``.build_algo()``): residual
    bound ``alpha`` (res_scale), progressive-exploration horizon ``H`` in SAC steps (0: the
    residual from the start); alpha 1 and H 0 on a zero base is plain SAC."""
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from .residual import ResidualSACModule

    register_env()
    model = {"fcnet_hiddens": list(s.hidden), "fcnet_activation": "relu", "twin_q": True, "alpha": alpha, "H": H,
             "learning_starts": s.learning_starts, "num_env_runners": max(1, s.num_env_runners),
             "residual_sees_base": s.residual_sees_base}
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return (
        SACConfig(algo_class=DecoratedSAC)
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
                  # RLlib builds this (its config check asks for an episode buffer); DecoratedSAC
                  # never fills it and reads its capacity for its TransitionBuffer
                  replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": s.buffer}, n_step=1)
        # one training step per train() call: SAC's defaults repeat the step until a second has
        # passed, which made the env steps between two evaluations depend on the machine's speed
        .reporting(metrics_num_episodes_for_smoothing=20, min_time_s_per_iteration=0,
                   min_sample_timesteps_per_iteration=0)
        .debugging(seed=seed)
        .python_environment(extra_python_environs_for_worker=one_thread)
    )


def module_actor(module):
    """The decorated policy's deterministic action for one observation (a_base(s), appended to the
    observation, plus alpha * tanh(mean) of the residual), on whatever device the module sits."""
    import torch
    from ray.rllib.core.columns import Columns

    device = next(module.parameters()).device

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.as_tensor(obs, dtype=torch.float32, device=device)[None]
            out = module.forward_inference({Columns.OBS: x})
        return out[Columns.ACTIONS][0].float().cpu().numpy()

    return act


def reload_actor(checkpoint: str | Path):
    """The decorated policy from an RLlib checkpoint of a decorated-SAC run (its RLModule alone;
    ``checkpoint``: a path or a URI)."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from .. import storage

    path = storage.join(checkpoint, "learner_group", "learner", "rl_module", "default_policy")
    return module_actor(RLModule.from_checkpoint(path))
