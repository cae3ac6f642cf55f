"""Online numpy policies (bandit algorithms) rolled out by RLlib's env runners, on the new API
stack, without torch and without a learner.

A bandit policy must see each reward before its next pull, so its statistics live in the RLModule
on the env runner: the observation of step t carries (t, the arm of step t-1, its reward, the run
index), and the module's forward updates the policy with the previous pull, then picks the next
arm. One RLlib episode is one run of the bandit. The Algorithm's training step samples one complete
episode per env runner and, from each sampled episode, completes the run's statistics with its last
pull (the terminal observation never reaches the module) and hands the run back to the caller.

The policy object comes from ``model_config["make_policy"](run_index)``: anything with
``select(t) -> arms`` and ``update(t, arms, rewards)`` over one run (R = 1).

Traps of RLlib 2.60 this avoids (each found by trying): the default env-to-module pipeline ends in
``NumpyToTensor``, which refuses a module that is not torch; an empty pipeline leaves the module
without an observation space; the env runner calls ``module.to(device)``; ``Algorithm.setup``
always builds a learner group; ``get_default_rl_module_spec`` must exist or no module is built.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import COMPONENT_LEARNER
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

# observation columns
T_COL, ARM_COL, REWARD_COL, RUN_COL = range(4)


class LatestObservations(ConnectorV2):
    """Env-to-module: the latest observation of each sub-environment, stacked as numpy."""

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kwargs):
        batch[Columns.OBS] = np.stack([ep.get_observations(-1) for ep in episodes])
        return batch


class OnlinePolicyModule(RLModule):
    """Holds one online policy per sub-environment; forward = update with the last pull, select."""

    def setup(self):
        self.make_policy = self.model_config["make_policy"]
        self.policies: dict[int, Any] = {}

    def to(self, *args, **kwargs):  # the env runner moves its module to a device; nothing to move
        return self

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        actions = np.empty(len(obs), np.int64)
        for i, row in enumerate(obs):
            t, run = int(row[T_COL]), int(row[RUN_COL])
            if t == 1 or i not in self.policies:
                self.policies[i] = self.make_policy(run)
            pol = self.policies[i]
            if t > 1:
                pol.update(t - 1, np.array([int(row[ARM_COL])]), np.array([row[REWARD_COL]]))
            actions[i] = pol.select(t)[0]
        return {Columns.ACTIONS: actions}

    def get_state(self, components=None, *, not_components=None, inference_only=False, **kwargs):
        return {str(i): p.state() for i, p in self.policies.items()}

    def set_state(self, state):
        for i, s in (state or {}).items():
            self.policies[int(i)].set_state(s)


class _NoLearnerGroup:
    """Stands in for the learner group: these policies learn on the env runners, not by gradients."""

    is_remote, is_local = False, True

    def get_state(self, *args, **kwargs):
        return {COMPONENT_LEARNER: {}}

    def set_state(self, *args, **kwargs):
        pass

    def get_weights(self, *args, **kwargs):
        return {}

    def foreach_learner(self, *args, **kwargs):
        return []

    def shutdown(self):
        pass


class OnlinePolicyConfig(AlgorithmConfig):
    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or OnlinePolicyAlgorithm)
        self.batch_mode = "complete_episodes"  # one sample() = one whole run per sub-environment
        self.num_envs_per_env_runner = 1
        self.add_default_connectors_to_env_to_module_pipeline = False
        self.add_default_connectors_to_module_to_env_pipeline = False
        self._env_to_module_connector = _latest_observations
        self.min_time_s_per_iteration = 0
        self.min_sample_timesteps_per_iteration = 0

    def get_default_rl_module_spec(self):
        return RLModuleSpec(module_class=OnlinePolicyModule)

    def build_learner_group(self, *args, **kwargs):
        return _NoLearnerGroup()


def _latest_observations(env=None, spaces=None, device=None):
    return [LatestObservations()]


class OnlinePolicyAlgorithm(Algorithm):
    """training_step: one complete episode (run) from every env runner; the runs are kept in
    ``self.runs`` as dicts with the run index, the arms pulled, the rewards and the policy's
    final state (last pull included)."""

    @classmethod
    def get_default_config(cls) -> OnlinePolicyConfig:
        return OnlinePolicyConfig()

    def setup(self, config):
        super().setup(config)
        self.runs: list[dict[str, Any]] = []

    def training_step(self) -> None:
        local = self.env_runner_group.num_remote_workers() <= 0

        def sample(runner):
            episodes = runner.sample(explore=True)
            return episodes, runner.get_metrics(), runner.module.get_state()

        out = self.env_runner_group.foreach_env_runner(sample, local_env_runner=local)
        self.metrics.aggregate([o[1] for o in out], key=ENV_RUNNER_RESULTS)
        make_policy = self.config.model_config["make_policy"]
        for episodes, _, states in out:
            for i, ep in enumerate(episodes):
                arms = np.asarray(ep.get_actions(), np.int64)
                rewards = np.asarray(ep.get_rewards(), np.float64)
                run = int(ep.get_observations(0)[RUN_COL])
                pol = make_policy(run)
                pol.set_state(states[str(i)])
                pol.update(len(arms), arms[-1:], rewards[-1:])  # the pull the module never saw answered
                self.runs.append({"run": run, "arms": arms, "rewards": rewards, "policy": pol})
