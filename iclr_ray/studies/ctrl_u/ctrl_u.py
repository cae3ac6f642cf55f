"""Ctrl-U's method (Zhang et al., ICLR 2025) and the reward fine-tuning it refines (ControlNet++).
No Ray, no I/O.

Post-training from a trained ControlNet, each batch: t ~ U[0, T), noise eps; the image noised to
x_t, its one-step estimate x̂0(t) decoded and read by a frozen reward model (a segmenter) and
compared with the condition c by a per-pixel loss ℓ (cross-entropy for segmentation), only where
t <= t_max (the official ``max_timestep_rewarding``). Ctrl-U duplicates the batch at t and t + Δt
with the *same* noise, reads both estimates (ĉ1, ĉ2), and takes their disagreement as a per-pixel
uncertainty U (segmentation: KL(softmax ĉ2 || softmax ĉ1) summed over classes, times u_scale;
depth and edges: |ĉ1 - ĉ2|); the reward loss on copy 1 is weighted by exp(-U) and U's mean is added
so U cannot grow without bound:

    L = L_pre + λ_r(step) mean(ℓ(ĉ1, c) exp(-U)) + mean(U)          (t <= t_max)

as the official segmentation script adds them (``grad_scale`` on the reward only; u_scale folded
into U), with λ_r ramped linearly to ``grad_scale``. ``u_term="scaled"`` multiplies mean(U) by λ_r
too (this study's earlier form: the penalty 1/λ_r weaker against the reward). With
Δt = 0 the two copies agree, U = 0 and L is plain reward fine-tuning's loss (one copy's L_pre and
ℓ): the negative control. ``ARMS``: ``controlnet`` (L_pre alone, the baseline's continued
training), ``reward`` (ControlNet++: no uncertainty), ``ctrl_u``."""
from __future__ import annotations

from typing import Callable

import torch
from torch.nn import functional as F

from ...diffusion.sampling import add_noise, predict_x0, to_unit
from .segment import IGNORE

ARMS = ("controlnet", "reward", "ctrl_u")
U_TERMS = ("official", "scaled")
"""how mean(U) enters the loss: as it is (the official script) or times λ_r (the earlier form)"""


def reward_scale(step: int, ramp_steps: int, grad_scale: float) -> float:
    """λ_r(step): linear from 0 at step 0 to ``grad_scale`` at ``ramp_steps``, then constant (0
    ramp steps: ``grad_scale`` from the start)."""
    if ramp_steps <= 0:
        return grad_scale
    return grad_scale * min(1.0, step / ramp_steps)


def seg_uncertainty(logits1: torch.Tensor, logits2: torch.Tensor, u_scale: float = 1.0) -> torch.Tensor:
    """Per-pixel U = u_scale Σ_c p2 (log p2 - log p1), p_i = softmax(ĉ_i) over classes (dim 1):
    PyTorch's KLDivLoss(log_softmax(ĉ1), softmax(ĉ2)) summed over classes. (B, C, H, W) -> (B, H, W), >= 0."""
    lp1, lp2 = F.log_softmax(logits1, 1), F.log_softmax(logits2, 1)
    return u_scale * (lp2.exp() * (lp2 - lp1)).sum(1)


def abs_uncertainty(pred1: torch.Tensor, pred2: torch.Tensor, u_scale: float = 1.0) -> torch.Tensor:
    """Per-pixel U = u_scale |ĉ1 - ĉ2| (depth maps each divided by their max first; edges as they are)."""
    return u_scale * (pred1 - pred2).abs()


def weights(u: torch.Tensor) -> torch.Tensor:
    """The reward loss's per-pixel weight exp(-U): at most 1 for U >= 0, exactly 1 where U = 0."""
    return torch.exp(-u)


def in_window(t: torch.Tensor, t_min: int, t_max: int) -> torch.Tensor:
    """1.0 for samples whose t lies in [t_min, t_max] (the reward's timesteps), else 0.0."""
    return ((t >= t_min) & (t <= t_max)).float()


def seg_reward_terms(logits1: torch.Tensor, target: torch.Tensor, logits2: torch.Tensor | None,
                     u_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample: the reward loss mean_pixels(CE(ĉ1, c) exp(-U)) and mean_pixels(U); without a
    second reading (plain reward fine-tuning) U = 0."""
    ce = F.cross_entropy(logits1, target.long(), ignore_index=IGNORE, reduction="none")
    if logits2 is None:
        return ce.mean((1, 2)), torch.zeros(len(ce), device=ce.device)
    u = seg_uncertainty(logits1, logits2, u_scale)
    return (ce * weights(u)).mean((1, 2)), u.mean((1, 2))


def post_train_loss(eps_fn: Callable[..., torch.Tensor], reward_fn: Callable[[torch.Tensor], torch.Tensor],
                    scheduler, x0: torch.Tensor, context: torch.Tensor, cond: torch.Tensor, target: torch.Tensor,
                    t: torch.Tensor, noise: torch.Tensor, *, arm: str, lam: float, dt: int, u_scale: float,
                    t_min: int, t_max: int, u_term: str = "official") -> dict[str, torch.Tensor]:
    """One batch's loss summed over its samples, and its parts (per-sample means, detached).

    ``eps_fn(x_t, t, context, cond)`` is the denoiser, ``reward_fn(images in [0, 1])`` the frozen
    reward model's logits; ``target`` the condition as class ids. ``arm``: one of :data:`ARMS`."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: not one of {ARMS}")
    if u_term not in U_TERMS:
        raise ValueError(f"u_term {u_term!r}: not one of {U_TERMS}")
    b = len(x0)
    if arm == "ctrl_u":
        t2 = (t + dt).clamp(max=scheduler.config.num_train_timesteps - 1)
        tt = torch.cat([t, t2])
        xt = add_noise(scheduler, torch.cat([x0, x0]), torch.cat([noise, noise]), tt)
        eps = eps_fn(xt, tt, torch.cat([context, context]), torch.cat([cond, cond]))
        pre = ((eps - torch.cat([noise, noise])) ** 2).mean((1, 2, 3))
        pre = (pre[:b] + pre[b:]) / 2  # the duplicated batch's MSE, per original sample
    else:
        tt = t
        xt = add_noise(scheduler, x0, noise, t)
        eps = eps_fn(xt, t, context, cond)
        pre = ((eps - noise) ** 2).mean((1, 2, 3))
    zero = torch.zeros(b, device=x0.device)
    rew, unc = zero, zero
    window = in_window(t, t_min, t_max)
    if arm != "controlnet" and lam > 0 and bool(window.any()):
        logits = reward_fn(to_unit(predict_x0(scheduler, xt, eps, tt)))
        rew, unc = seg_reward_terms(logits[:b], target, logits[b:] if arm == "ctrl_u" else None, u_scale)
    total = pre + window * (lam * rew + (lam if u_term == "scaled" else 1.0) * unc)
    return {"loss": total.sum(), "pre": pre.detach(), "reward": (rew * window).detach(),
            "uncertainty": (unc * window).detach()}
