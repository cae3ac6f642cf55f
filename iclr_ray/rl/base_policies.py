"""Base (imitation) policies that Policy Decorator refines, in torch, with no Ray and no I/O.

Every policy maps a batch of observations (B, obs_dim) — an observation may already stack the last
``obs_horizon`` frames (``rl.envs.ObsHistory``) — to an action chunk (B, pred_horizon, act_dim) in
[-1, 1] with ``act_chunk(obs, generator)``, and has ``loss(obs, chunk)`` for behaviour cloning on
demonstration chunks. The executor runs the first ``act_horizon`` actions of a chunk, then plans
again. A stochastic policy (Diffusion Policy's sampling noise, BeT with ``sample``) draws from
``generator`` when one is given, so the caller decides which noise two runs share
(``rl.envs.BaseActionObs`` seeds it from the episode: the base alone and the decorated policy see
the same draws).

* :class:`MLPPolicy`: behaviour cloning with a regression MLP (the notes' tiny-check base).
* :class:`BeTPolicy`: Behavior Transformer (Shafiullah et al. 2022): actions are clustered with
  k-means; a causal transformer over the observation frames predicts, at the last frame, a bin
  (focal loss) and the offset from that bin's centre (MSE on the true bin's offset).
* :class:`DiffusionPolicy`: Diffusion Policy (Chi et al. 2023): a 1-D temporal conv U-Net with FiLM
  conditioning on the observation and the diffusion step predicts the noise of an action chunk
  (DDPM training, squared-cosine schedule); actions are sampled with DDIM (eta = 0) in a few steps.
"""
from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _mlp(sizes: list[int], act=nn.Mish) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


class BasePolicy(nn.Module, metaclass=abc.ABCMeta):
    kind = "base"

    def __init__(self, obs_dim: int, act_dim: int, pred_horizon: int = 1, act_horizon: int = 1, **_: Any):
        super().__init__()
        if not 1 <= act_horizon <= pred_horizon:
            raise ValueError(f"need 1 <= act_horizon <= pred_horizon, got {act_horizon} and {pred_horizon}")
        self.obs_dim, self.act_dim, self.pred_horizon, self.act_horizon = obs_dim, act_dim, pred_horizon, act_horizon
        # observations are standardised with the demonstrations' statistics (fit_normalizer) before
        # any layer sees them; saved with the weights. Identity until fitted.
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))

    def fit_normalizer(self, obs: np.ndarray, eps: float = 1e-3) -> None:
        """Per-feature mean and std (+ eps) of the training observations (N, obs_dim), for
        observations whose features live on different scales (the Adroit door's joint angles in
        rad next to positions in m)."""
        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(-1, self.obs_dim)
        self.obs_mean.copy_(x.mean(0))
        self.obs_std.copy_(x.std(0, unbiased=False) + eps)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.obs_mean) / self.obs_std

    def hparams(self) -> dict[str, Any]:
        return {"obs_dim": self.obs_dim, "act_dim": self.act_dim, "pred_horizon": self.pred_horizon,
                "act_horizon": self.act_horizon}

    @abc.abstractmethod
    def act_chunk(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, obs_dim) -> (B, pred_horizon, act_dim) in [-1, 1]; a stochastic policy draws its noise
        from ``generator`` (torch's global generator when None)."""

    @abc.abstractmethod
    def loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """The behaviour-cloning loss on demonstration chunks (B, pred_horizon, act_dim)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The first action of the chunk (B, act_dim)."""
        return self.act_chunk(obs)[:, 0]


class ZeroPolicy(BasePolicy):
    """a_base = 0: decorating it with alpha = 1 and H = 0 is plain SAC from scratch."""

    kind = "zero"

    def act_chunk(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.zeros(obs.shape[0], self.pred_horizon, self.act_dim)

    def loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """Its error on the chunks; it has no parameters, so nothing learns from it."""
        return F.mse_loss(self.act_chunk(obs), chunk)


class MLPPolicy(BasePolicy):
    kind = "mlp"

    def __init__(self, obs_dim: int, act_dim: int, pred_horizon: int = 1, act_horizon: int = 1,
                 hidden: tuple[int, ...] = (256, 256), **kw: Any):
        super().__init__(obs_dim, act_dim, pred_horizon, act_horizon)
        self.hidden = tuple(hidden)
        self.net = _mlp([obs_dim, *self.hidden, pred_horizon * act_dim])

    def hparams(self) -> dict[str, Any]:
        return super().hparams() | {"hidden": list(self.hidden)}

    def act_chunk(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.tanh(self.net(self.normalize(obs))).view(-1, self.pred_horizon, self.act_dim)

    def loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.act_chunk(obs), chunk)


def kmeans(x: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means centres of the rows of x (scipy's k-means++ initialised Lloyd iterations)."""
    from scipy.cluster.vq import kmeans2

    k = min(k, len(np.unique(x, axis=0)))
    centres, _ = kmeans2(x.astype(np.float64), k, minit="++", seed=seed)
    return centres.astype(np.float32)


def focal_loss(logits: torch.Tensor, target: torch.Tensor, gamma: float = 2.0) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1).gather(-1, target[:, None]).squeeze(-1)
    return (-((1 - logp.exp()) ** gamma) * logp).mean()


class BeTPolicy(BasePolicy):
    """Behavior Transformer. The observation holds ``obs_horizon`` frames of ``obs_dim / obs_horizon``
    features; each frame is a token of a small causal GPT. Bins are k-means centres of the demo
    actions, set with :meth:`fit_bins` before training."""

    kind = "bet"

    def __init__(self, obs_dim: int, act_dim: int, pred_horizon: int = 1, act_horizon: int = 1, obs_horizon: int = 1,
                 n_bins: int = 16, d_model: int = 64, layers: int = 2, heads: int = 4, offset_weight: float = 100.0,
                 gamma: float = 2.0, sample: bool = False, **kw: Any):
        super().__init__(obs_dim, act_dim, pred_horizon, act_horizon)
        if obs_dim % obs_horizon:
            raise ValueError(f"obs_dim {obs_dim} is not a multiple of obs_horizon {obs_horizon}")
        self.obs_horizon, self.n_bins, self.d_model, self.layers, self.heads = obs_horizon, n_bins, d_model, layers, heads
        self.offset_weight, self.gamma, self.sample = offset_weight, gamma, sample
        self.frame = obs_dim // obs_horizon
        self.embed = nn.Linear(self.frame, d_model)
        self.pos = nn.Parameter(torch.zeros(obs_horizon, d_model))
        block = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.gpt = nn.TransformerEncoder(block, layers)
        out = pred_horizon * act_dim
        self.bin_head = nn.Linear(d_model, n_bins)
        self.offset_head = nn.Linear(d_model, n_bins * out)
        self.register_buffer("centres", torch.zeros(n_bins, out))

    def hparams(self) -> dict[str, Any]:
        return super().hparams() | {"obs_horizon": self.obs_horizon, "n_bins": self.n_bins, "d_model": self.d_model,
                                    "layers": self.layers, "heads": self.heads, "offset_weight": self.offset_weight,
                                    "gamma": self.gamma, "sample": self.sample}

    def fit_bins(self, chunks: np.ndarray, seed: int = 0) -> None:
        c = kmeans(chunks.reshape(len(chunks), -1), self.n_bins, seed)
        self.centres.zero_()
        self.centres[: len(c)] = torch.from_numpy(c)
        if len(c) < self.n_bins:  # fewer distinct actions than bins: the spare bins copy the first
            self.centres[len(c):] = torch.from_numpy(c[:1])

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.embed(self.normalize(obs).view(-1, self.obs_horizon, self.frame)) + self.pos
        mask = nn.Transformer.generate_square_subsequent_mask(self.obs_horizon)
        h = self.gpt(tokens, mask=mask, is_causal=True)[:, -1]
        return self.bin_head(h), self.offset_head(h).view(-1, self.n_bins, self.centres.shape[1])

    def loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        flat = chunk.reshape(len(chunk), -1)
        target = torch.cdist(flat, self.centres).argmin(-1)
        logits, offsets = self._heads(obs)
        chosen = offsets[torch.arange(len(flat)), target]
        return focal_loss(logits, target, self.gamma) + self.offset_weight * F.mse_loss(chosen, flat - self.centres[target])

    def act_chunk(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        logits, offsets = self._heads(obs)
        if self.sample:
            b = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
        else:
            b = logits.argmax(-1)
        a = self.centres[b] + offsets[torch.arange(len(b)), b]
        return a.clamp(-1, 1).view(-1, self.pred_horizon, self.act_dim)


def squared_cosine_betas(steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """The 'squaredcos_cap_v2' schedule (Nichol & Dhariwal) Diffusion Policy trains with."""
    f = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    return torch.tensor([min(1 - f((i + 1) / steps) / f(i / steps), max_beta) for i in range(steps)], dtype=torch.float32)


class _ResBlock(nn.Module):
    """Conv1d -> GroupNorm -> Mish twice, FiLM (scale, bias) from the conditioning after the first."""

    def __init__(self, c_in: int, c_out: int, cond: int, kernel: int = 3, groups: int = 8):
        super().__init__()
        g = math.gcd(groups, c_out)
        self.conv1 = nn.Sequential(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(g, c_out), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(c_out, c_out, kernel, padding=kernel // 2), nn.GroupNorm(g, c_out), nn.Mish())
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, bias = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        return self.conv2(self.conv1(x) * scale + bias) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """A small 1-D U-Net over the action chunk's time axis (down once, up once), conditioned by
    FiLM on [sinusoidal step embedding, observation]."""

    def __init__(self, act_dim: int, cond_dim: int, channels: tuple[int, int] = (64, 128), step_dim: int = 64):
        super().__init__()
        self.step_dim = step_dim
        self.step_mlp = nn.Sequential(nn.Linear(step_dim, 4 * step_dim), nn.Mish(), nn.Linear(4 * step_dim, step_dim))
        cond = step_dim + cond_dim
        c1, c2 = channels
        self.down1, self.down2 = _ResBlock(act_dim, c1, cond), _ResBlock(c1, c2, cond)
        self.mid = _ResBlock(c2, c2, cond)
        self.up1 = _ResBlock(c2 + c1, c1, cond)
        self.out = nn.Conv1d(c1, act_dim, 1)

    def step_embedding(self, k: torch.Tensor) -> torch.Tensor:
        half = self.step_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / max(half - 1, 1))
        e = k.float()[:, None] * freqs[None]
        return torch.cat([e.sin(), e.cos()], dim=-1)

    def forward(self, x: torch.Tensor, k: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """x (B, T, act_dim) noisy chunk, k (B,) diffusion steps, obs (B, cond_dim) -> noise (B, T, act_dim)."""
        cond = torch.cat([self.step_mlp(self.step_embedding(k)), obs], dim=-1)
        h = x.transpose(1, 2)
        h1 = self.down1(h, cond)
        T = h1.shape[-1]
        h2 = self.down2(F.avg_pool1d(h1, 2, ceil_mode=True) if T > 1 else h1, cond)
        h2 = self.mid(h2, cond)
        up = F.interpolate(h2, size=T, mode="nearest")
        return self.out(self.up1(torch.cat([up, h1], dim=1), cond)).transpose(1, 2)


class DiffusionPolicy(BasePolicy):
    kind = "diffusion"

    def __init__(self, obs_dim: int, act_dim: int, pred_horizon: int = 8, act_horizon: int = 4,
                 train_steps: int = 100, ddim_steps: int = 4, channels: tuple[int, int] = (64, 128), **kw: Any):
        super().__init__(obs_dim, act_dim, pred_horizon, act_horizon)
        if not 1 <= ddim_steps <= train_steps:
            raise ValueError(f"need 1 <= ddim_steps <= train_steps, got {ddim_steps} and {train_steps}")
        self.train_steps, self.ddim_steps, self.channels = train_steps, ddim_steps, tuple(channels)
        self.eps = ConditionalUnet1D(act_dim, obs_dim, self.channels)
        betas = squared_cosine_betas(train_steps)
        self.register_buffer("alpha_bar", torch.cumprod(1 - betas, dim=0))

    def hparams(self) -> dict[str, Any]:
        return super().hparams() | {"train_steps": self.train_steps, "ddim_steps": self.ddim_steps,
                                    "channels": list(self.channels)}

    def loss(self, obs: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        k = torch.randint(0, self.train_steps, (len(chunk),))
        noise = torch.randn_like(chunk)
        ab = self.alpha_bar[k][:, None, None]
        noisy = ab.sqrt() * chunk + (1 - ab).sqrt() * noise
        return F.mse_loss(self.eps(noisy, k, self.normalize(obs)), noise)

    def ddim_timesteps(self) -> list[int]:
        stride = self.train_steps // self.ddim_steps
        return list(range(self.train_steps - 1, -1, -stride))[: self.ddim_steps]

    @torch.no_grad()
    def act_chunk(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        x = torch.randn(obs.shape[0], self.pred_horizon, self.act_dim, generator=generator)
        obs = self.normalize(obs)
        steps = self.ddim_timesteps()
        for i, k in enumerate(steps):
            ab = self.alpha_bar[k]
            ab_prev = self.alpha_bar[steps[i + 1]] if i + 1 < len(steps) else torch.tensor(1.0)
            eps = self.eps(x, torch.full((len(x),), k), obs)
            x0 = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1, 1)
            x = ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * eps
        return x.clamp(-1, 1)


KINDS: dict[str, type[BasePolicy]] = {c.kind: c for c in (ZeroPolicy, MLPPolicy, BeTPolicy, DiffusionPolicy)}


def build(kind: str, **hparams: Any) -> BasePolicy:
    if kind not in KINDS:
        raise ValueError(f"unknown base policy {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind](**hparams)


def pred_horizon(kind: str, hparams: dict[str, Any]) -> int:
    """The chunk length a policy of ``kind`` built with ``hparams`` predicts (its own default
    where ``hparams`` leave it out): the length of the action chunks its training pairs need."""
    import inspect

    if "pred_horizon" in hparams:
        return int(hparams["pred_horizon"])
    if kind not in KINDS:
        raise ValueError(f"unknown base policy {kind!r}; known: {', '.join(KINDS)}")
    return int(inspect.signature(KINDS[kind].__init__).parameters["pred_horizon"].default)


def demo_chunks(obs: np.ndarray, actions: np.ndarray, pred_horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """(obs_t, a_t .. a_{t+h-1}) pairs of one episode (obs (T, d), actions (T, n)); past the end
    the last action repeats (Diffusion Policy's padding)."""
    T = len(actions)
    idx = np.minimum(np.arange(T)[:, None] + np.arange(pred_horizon)[None], T - 1)
    return obs[:T].astype(np.float32), actions[idx].astype(np.float32)
