"""DDPM noising and DDIM sampling through diffusers' schedulers, with classifier-free guidance.

Two noise schedules, 1000 steps and epsilon prediction each: ``pixel`` (the default: DDPM's linear
betas from 1e-4 to 0.02, Ho et al. 2020, ᾱ_T ≈ 4e-5, so x_T is noise for images in [-1, 1]) for
the models that denoise pixels, which is every model this project trains; and ``latent`` (SD's
scaled-linear betas from 0.00085 to 0.012, ᾱ_T ≈ 0.0047), made for SD's VAE latents, where it
leaves a pixel image visible at the last step. DDIM as SD's pipelines set it (steps_offset 1, no
final alpha of one, no clipping).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

SD_SCHEDULE: dict[str, Any] = {"num_train_timesteps": 1000, "beta_schedule": "scaled_linear",
                               "beta_start": 0.00085, "beta_end": 0.012, "prediction_type": "epsilon"}
PIXEL_SCHEDULE: dict[str, Any] = {"num_train_timesteps": 1000, "beta_schedule": "linear",
                                  "beta_start": 0.0001, "beta_end": 0.02, "prediction_type": "epsilon"}
SCHEDULES = {"pixel": PIXEL_SCHEDULE, "latent": SD_SCHEDULE}


def _schedule(space: str) -> dict[str, Any]:
    if space not in SCHEDULES:
        raise ValueError(f"space {space!r}: one of {sorted(SCHEDULES)}")
    return SCHEDULES[space]


def ddpm(space: str = "pixel", **overrides):
    from diffusers import DDPMScheduler

    return DDPMScheduler(**{**_schedule(space), "clip_sample": False, **overrides})


def ddim(space: str = "pixel", **overrides):
    from diffusers import DDIMScheduler

    return DDIMScheduler(**{**_schedule(space), "clip_sample": False, "set_alpha_to_one": False, "steps_offset": 1,
                            **overrides})


def alpha_bar(scheduler, t: torch.Tensor) -> torch.Tensor:
    """ᾱ_t per sample, shaped (B, 1, 1, 1)."""
    return scheduler.alphas_cumprod.to(t.device)[t.long()].float().view(-1, 1, 1, 1)


def add_noise(scheduler, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x_t = sqrt(ᾱ_t) x0 + sqrt(1 - ᾱ_t) eps (the scheduler's own ``add_noise``)."""
    return scheduler.add_noise(x0, noise, t.long())


def predict_x0(scheduler, x_t: torch.Tensor, eps: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The one-step estimate x̂0 = (x_t - sqrt(1 - ᾱ_t) epŝ) / sqrt(ᾱ_t) (the scheduler's
    ``pred_original_sample``), for every sample at its own t."""
    a = alpha_bar(scheduler, t)
    return (x_t - (1 - a).sqrt() * eps) / a.sqrt()


def guided(eps_fn: Callable[..., torch.Tensor], x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
           null_context: torch.Tensor, guidance: float, **kw) -> torch.Tensor:
    """Classifier-free guidance: eps_u + w (eps_c - eps_u), both branches in one batch; at w = 1
    only the conditional branch runs (it equals the conditional prediction)."""
    if guidance == 1.0:
        return eps_fn(x, t, context, **kw)
    doubled = {k: torch.cat([v, v]) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    e = eps_fn(torch.cat([x, x]), torch.cat([t, t]), torch.cat([context, null_context]), **doubled)
    e_c, e_u = e.chunk(2)
    return e_u + guidance * (e_c - e_u)


@torch.no_grad()
def sample(eps_fn: Callable[..., torch.Tensor], shape: tuple[int, ...], context: torch.Tensor,
           null_context: torch.Tensor, *, steps: int = 20, guidance: float = 1.0,
           generator: torch.Generator | None = None, eta: float = 0.0, **kw) -> torch.Tensor:
    """DDIM sampling from N(0, I) noise drawn by ``generator`` (deterministic at eta = 0), with
    classifier-free guidance; ``kw`` (a condition map) goes to every call of ``eps_fn``. Runs on
    ``context``'s device and in the model's dtype (``context``'s, or the model's when ``context``
    holds token ids); the noise is drawn on the CPU by
    ``generator`` and moved there, so a seed gives the same images on any device."""
    device = context.device
    if context.is_floating_point():
        dtype = context.dtype
    else:  # token ids the model embeds itself: the model's own dtype
        dtype = next(eps_fn.parameters()).dtype if hasattr(eps_fn, "parameters") else torch.float32
    sched = ddim()
    sched.set_timesteps(steps)
    x = torch.randn(shape, generator=generator).to(device=device, dtype=dtype)
    for t in sched.timesteps:
        tt = t.expand(shape[0]).to(device)
        eps = guided(eps_fn, x, tt, context, null_context, guidance, **kw)
        # the scheduler's tables are float32: its step comes back in the model's dtype (a bfloat16 model on a GPU)
        x = sched.step(eps, t, x, eta=eta, generator=generator).prev_sample.to(dtype)
    return x


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """Model space [-1, 1] -> image space [0, 1], clamped."""
    return (x / 2 + 0.5).clamp(0, 1)
