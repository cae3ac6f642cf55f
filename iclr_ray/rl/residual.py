"""Policy Decorator's residual policy on RLlib's new API stack: a SAC RLModule whose actor is the
residual of a frozen base policy.

The final action is a = a_base(s) + alpha * a_res with a_res = tanh(Gaussian) in [-1, 1]^n (SAC's
squashed Gaussian), so alpha bounds how far the residual moves the base action. Progressive
exploration: while sampling, each action uses the residual with probability min(g / H, 1) at
global env step g (H = 0: always) and is the base action alone otherwise; before
``learning_starts`` env steps the residual is uniform in [-1, 1]^n (still masked). The sum is not
clipped here, as in the official scripts: the env clips the action it executes to its box
(``rl.envs.ScaleActions``), and the critic, the actor's Q term and the target all see the unclipped
sum, so the actor's gradient through Q does not vanish where a_base +- alpha leaves the box. The
critic sees the summed action: Q(s, a) is trained on the stored (summed) action, and the actor's
and the target's actions are a_base(s) + alpha * a_res(s) and a_base(s') + alpha * a_res(s').

Where a_base comes from: the env wrapper ``rl.envs.BaseActionObs`` runs the frozen base policy on
the env runner (with its observation history and action chunks, stochastic or not) and appends
a_base to the observation, so the observation's last n entries are a_base(s). The replay buffer
therefore holds (s, a_base(s)), a, (s', a_base(s')), as the paper stores them, and the learner
never runs the base. The critics (and their targets) see the observation without a_base, as the
official scripts' critics see only the observation next to the summed action; the actor sees it
without a_base too unless ``model_config["residual_sees_base"]`` (the paper's default: obs only).
"Without a_base" is the observation with zeros in a_base's place: a layer's weights on inputs that
are always zero get no gradient and add nothing, so the network is one on the observation alone.

At initialisation the last layers of the residual actor and of the critics are orthogonal with
gain 0.01 and zero bias (as the official scripts initialise theirs), so the untrained residual's
deterministic action is ~0: before any update the decorated policy acts as its base.

Env runners count their own sampled steps; ``model_config["num_env_runners"]`` scales that count
to the global step g (every runner samples at the same rate).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.algorithms.sac.sac_learner import ACTION_DIST_INPUTS_NEXT, QF_PREDS, QF_TWIN_PREDS

RESIDUAL = "residual"
"""extra model output: the residual a_res actually used (0 where the mask was off)"""
USE_RESIDUAL = "use_residual"


def use_probability(g: float, H: float) -> float:
    """Progressive exploration: the chance that env step g uses the residual."""
    return 1.0 if H <= 0 else min(max(g, 0.0) / H, 1.0)


def decorate(a_base: torch.Tensor, a_res: torch.Tensor, alpha: float) -> torch.Tensor:
    """The final action a_base + alpha * a_res (unclipped: the env clips what it executes)."""
    return a_base + alpha * a_res


class ResidualSACModule(DefaultSACTorchRLModule):
    """model_config: alpha, H, learning_starts, num_env_runners, residual_sees_base, and SAC's own
    keys (fcnet_hiddens, twin_q, ...)."""

    def setup(self):
        super().setup()
        mc = self.model_config
        self.alpha = float(mc["alpha"])
        self.H = float(mc.get("H", 0))
        self.learning_starts = int(mc.get("learning_starts", 0))
        self.runners = max(1, int(mc.get("num_env_runners", 1)))
        self.sees_base = bool(mc.get("residual_sees_base", False))
        self.n_act = int(self.action_space.shape[0])
        self.sampled = 0  # env steps this module has sampled (on an env runner)
        # a residual of ~0 and small Q values to start from (an env runner's inference-only module
        # has no critics)
        heads = [h for h in (self.pi, getattr(self, "qf", None), getattr(self, "qf_twin", None)) if h is not None]
        for head in heads:
            last = [m for m in head.modules() if isinstance(m, nn.Linear)][-1]
            nn.init.orthogonal_(last.weight, gain=0.01)
            nn.init.zeros_(last.bias)

    # -- the decorated policy ------------------------------------------------------------------
    def base_action(self, obs: torch.Tensor) -> torch.Tensor:
        """a_base(s): the observation's last n entries (put there by BaseActionObs)."""
        return obs[..., -self.n_act:]

    def without_base(self, obs: torch.Tensor) -> torch.Tensor:
        """The observation with zeros in a_base's place."""
        return torch.cat([obs[..., : -self.n_act], torch.zeros_like(obs[..., -self.n_act:])], dim=-1)

    def _residual_logits(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.sees_base:
            obs = self.without_base(obs)
        return self.pi(self.pi_encoder({Columns.OBS: obs})[ENCODER_OUT])

    def _qf_forward_train_helper(self, batch: dict[str, Any], encoder, head, squeeze: bool = True):
        """Every Q forward (critics, twin, targets): the observation without a_base, and the action."""
        return super()._qf_forward_train_helper({**batch, Columns.OBS: self.without_base(batch[Columns.OBS])},
                                                encoder, head, squeeze=squeeze)

    def _forward_inference(self, batch: dict) -> dict[str, Any]:
        """Evaluation: the deterministic residual tanh(mean), always applied."""
        obs = batch[Columns.OBS]
        logits = self._residual_logits(obs)
        a_res = torch.tanh(logits.chunk(2, dim=-1)[0])
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.ACTIONS: decorate(self.base_action(obs), a_res, self.alpha),
                RESIDUAL: a_res}

    def _forward_exploration(self, batch: dict, **kwargs) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        n = obs.shape[0]
        logits = self._residual_logits(obs)
        g = self.sampled * self.runners  # the global env step, estimated from this runner's count
        if g < self.learning_starts:
            a_res = torch.rand(logits.shape[0], logits.shape[-1] // 2, device=logits.device) * 2.0 - 1.0
        else:
            a_res = self.get_exploration_action_dist_cls().from_logits(logits).sample()
        p = use_probability(g, self.H)
        use = (torch.rand(n, device=logits.device) < p).float()
        self.sampled += n
        a_res = a_res * use[:, None]
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.ACTIONS: decorate(self.base_action(obs), a_res, self.alpha),
                RESIDUAL: a_res, USE_RESIDUAL: use}

    # -- SAC's train forward with the critic on summed actions ---------------------------------
    def _forward_train_continuous(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        out: dict[str, Any] = {}
        executed = {Columns.OBS: obs, Columns.ACTIONS: batch[Columns.ACTIONS]}
        out[QF_PREDS] = self._qf_forward_train_helper(executed, self.qf_encoder, self.qf)
        if self.twin_q:
            out[QF_TWIN_PREDS] = self._qf_forward_train_helper(executed, self.qf_twin_encoder, self.qf_twin)

        logits, logits_next = self._residual_logits(obs), self._residual_logits(next_obs)
        out[Columns.ACTION_DIST_INPUTS], out[ACTION_DIST_INPUTS_NEXT] = logits, logits_next
        dist_cls = self.get_train_action_dist_cls()
        res, out["logp_resampled"] = dist_cls.from_logits(logits).rsample_and_logp()
        res_next, logp_next = dist_cls.from_logits(logits_next).sample_and_logp()
        out["logp_next_resampled"] = logp_next.detach()

        # Q of the actor's decorated (unclipped) action: gradients reach the residual, not the critics
        critics = [*self.qf.parameters(), *self.qf_encoder.parameters()]
        if self.twin_q:
            critics += [*self.qf_twin.parameters(), *self.qf_twin_encoder.parameters()]
        for p in critics:
            p.requires_grad_(False)
        out["q_curr"] = self.compute_q_values({Columns.OBS: obs,
                                               Columns.ACTIONS: decorate(self.base_action(obs), res, self.alpha)})
        for p in critics:
            p.requires_grad_(True)
        a_next = decorate(self.base_action(next_obs), res_next.detach(), self.alpha)
        out["q_target_next"] = self.forward_target({Columns.OBS: next_obs, Columns.ACTIONS: a_next}).detach()
        return out
