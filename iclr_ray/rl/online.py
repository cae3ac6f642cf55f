"""Online numpy policies (bandit algorithms) rolled out by RLlib's env runners, on the new API
stack, without torch and without a learner.

A bandit policy must see each reward before its next pull, so its statistics live in the RLModule
on the env runner. An env holds a batch of R runs and one env step advances all of them: the
observation of step t is an (R + 1) x 2 array, row 0 (t, the item), row 1 + r (the arm run r pulled
at t - 1, its reward); the module's forward updates the item's vectorised policy with those pulls,
then picks the next arm of every run. One RLlib episode is one *item*: R runs of one policy on one
problem for T steps. An env plays the items of its config in turn (env runner i of n plays every
n-th), so one Algorithm rolls out a whole experiment. The Algorithm's training step samples one
complete episode per env runner and, from each, completes the policy's statistics with the last
pulls (the terminal observation never reaches the module) and hands the item back to the caller.

The policy object comes from ``model_config["make_policy"](item)``: anything with ``select(t) ->
arms (R,)``, ``update(t, arms, rewards)`` over its R runs, ``n`` (its R x K pull counts) and
``state()``. Items with fewer runs than the env's widest use its first rows; the env marks the
other rows' arms -1.

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
        actions = np.zeros((len(obs), obs.shape[1] - 1), np.int64)  # one arm per run row
        for i, o in enumerate(obs):
            t, item = int(o[0, 0]), int(o[0, 1])
            if t == 1 or i not in self.policies:
                self.policies[i] = self.make_policy(item)
            pol = self.policies[i]
            R = len(pol.n)
            if t > 1:
                pol.update(t - 1, o[1:R + 1, 0].astype(np.int64), o[1:R + 1, 1])
            actions[i, :R] = pol.select(t)
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
    """training_step: one complete episode (item) from every env runner, kept in ``self.items``
    as dicts with the item index, the arms pulled and the rewards seen (R x T each)."""

    @classmethod
    def get_default_config(cls) -> OnlinePolicyConfig:
        return OnlinePolicyConfig()

    def setup(self, config):
        super().setup(config)
        self.items: list[dict[str, Any]] = []

    def training_step(self) -> None:
        local = self.env_runner_group.num_remote_workers() <= 0

        def sample(runner):
            return runner.sample(num_episodes=1, explore=True), runner.get_metrics()

        out = self.env_runner_group.foreach_env_runner(sample, local_env_runner=local)
        self.metrics.aggregate([o[1] for o in out], key=ENV_RUNNER_RESULTS)
        for episodes, _ in out:
            for ep in episodes:
                if not ep.is_done:
                    continue
                obs = np.asarray(ep.get_observations())  # (T + 1) x (R_env + 1) x 2, the terminal one last
                arms = np.asarray(ep.get_actions(), np.int64).T
                R = int(np.count_nonzero(obs[1, 1:, 0] >= 0))  # rows of the item's runs; the rest are padding
                self.items.append({"item": int(obs[0, 0, 1]), "arms": arms[:R], "rewards": obs[1:, 1:R + 1, 1].T})
