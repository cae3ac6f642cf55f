"""Adaptive Feature Aggregation (AFA): ensembling frozen diffusion U-Nets with one spatial-adaptive
block-wise (SABW) aggregator per block location. No Ray, no I/O.

The experts (N ``UNet2DConditionModel``s of one architecture, each with its own caption encoder)
run in lockstep. At every aggregation location (after ``conv_in``; after every down-block layer, each
resnet(+attention) and the downsampler; after the middle block; after every up-block layer; at
``conv_out``) the N features F_i (B, C, H, W) go to that location's SABW aggregator:

    concat_i F_i -> 1x1 conv -> ResnetBlock2D(temb) -> Transformer2D(cross-attention to the caption)
    -> 1x1 conv to N maps -> softmax over the experts per location = A_i(h, w)
    aggregated feature = sum_i A_i * F_i

and the aggregated feature is what every expert continues from (its skip connection too). The last
1x1 conv starts at zero, so the ensemble starts as the uniform average of the experts' features at
every location. Only the aggregators (and their own timestep and caption embeddings) train, on the
usual eps-prediction MSE of the ensembled output.

The baselines are here too: uniform output averaging, weight merging (a weighted average of the
experts' parameters) and block-wise merging (one weight vector per block, MBW)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn


class SABW(nn.Module):
    """One spatial-adaptive block-wise aggregator for ``n`` experts' features of ``channels``
    channels: maps (B, n, H, W) that sum to one over the experts at every location.

    ``out_init_std`` = 0 zero-initialises the last convolution (the start is the uniform average).
    A zero last layer also zeroes the gradient reaching the layers before it at the first step; its
    own gradient is not zero, so from the second step on the earlier layers learn (the zero
    convolutions' argument). A small ``out_init_std`` > 0 starts near, not at, uniform and gives
    every layer a gradient at once (the option the fork offers)."""

    def __init__(self, n: int, channels: int, hidden: int, temb_dim: int, context_dim: int, head_dim: int = 8,
                 groups: int = 8, out_init_std: float = 0.0):
        from diffusers.models.resnet import ResnetBlock2D
        from diffusers.models.transformers.transformer_2d import Transformer2DModel

        super().__init__()
        self.n = n
        self.proj_in = nn.Conv2d(n * channels, hidden, 1)
        self.resnet = ResnetBlock2D(in_channels=hidden, out_channels=hidden, temb_channels=temb_dim, groups=groups)
        self.transformer = Transformer2DModel(num_attention_heads=max(1, hidden // head_dim),
                                              attention_head_dim=head_dim, in_channels=hidden,
                                              norm_num_groups=groups, cross_attention_dim=context_dim)
        self.conv_out = nn.Conv2d(hidden, n, 1)
        if out_init_std > 0:
            nn.init.normal_(self.conv_out.weight, std=out_init_std)
        else:
            nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def maps(self, feats: Sequence[torch.Tensor], temb: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        h = self.proj_in(torch.cat(list(feats), 1))
        h = self.resnet(h, temb)
        h = self.transformer(h, encoder_hidden_states=context, return_dict=False)[0]
        return self.conv_out(h).softmax(1)

    def forward(self, feats: Sequence[torch.Tensor], temb: torch.Tensor, context: torch.Tensor):
        """(aggregated feature (B, C, H, W), maps (B, n, H, W))."""
        a = self.maps(feats, temb, context)
        return sum(a[:, i:i + 1] * f for i, f in enumerate(feats)), a


def locations(unet) -> list[tuple[str, int]]:
    """The aggregation locations of a ``UNet2DConditionModel`` in forward order, with the channels of
    the feature there."""
    out = [("conv_in", unet.conv_in.out_channels)]
    for b, block in enumerate(unet.down_blocks):
        out += [(f"down{b}.layer{j}", r.out_channels) for j, r in enumerate(block.resnets)]
        if block.downsamplers:
            out.append((f"down{b}.downsample", block.resnets[-1].out_channels))
    out.append(("mid", unet.mid_block.resnets[-1].out_channels))
    for b, block in enumerate(unet.up_blocks):
        out += [(f"up{b}.layer{j}", r.out_channels) for j, r in enumerate(block.resnets)]
    out.append(("conv_out", unet.conv_out.out_channels))
    return out


def _layer(block, j: int, h: torch.Tensor, temb: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    h = block.resnets[j](h, temb)
    if getattr(block, "attentions", None) is not None:
        h = block.attentions[j](h, encoder_hidden_states=context, return_dict=False)[0]
    return h


def expert_embeddings(expert, x: torch.Tensor, t: torch.Tensor, tokens: torch.Tensor):
    """An expert's timestep embedding and its own caption context."""
    u = expert.unet
    return u.time_embedding(u.get_time_embed(sample=x, timestep=t)), expert.context(tokens)


class AFA(nn.Module):
    """N frozen experts (:class:`~iclr_ray.diffusion.model.Denoiser` without a ControlNet, each with
    its token embedding) and one :class:`SABW` per location; the aggregators' own timestep embedding
    and caption embedding (``vocab`` tokens; at paper scale the shared text encoder's states)."""

    def __init__(self, experts: Sequence[nn.Module], *, hidden: int = 32, temb_dim: int = 64, context_dim: int = 32,
                 vocab: int = 11, head_dim: int = 8, groups: int = 8, out_init_std: float = 0.0):
        from diffusers.models.embeddings import TimestepEmbedding, Timesteps

        super().__init__()
        self.experts = nn.ModuleList(experts)
        for e in self.experts:
            e.requires_grad_(False)
        n = len(experts)
        self.where = locations(experts[0].unet)
        self.aggregators = nn.ModuleList(
            SABW(n, c, hidden, temb_dim, context_dim, head_dim, groups, out_init_std) for _, c in self.where)
        self.time_proj = Timesteps(hidden, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedding = TimestepEmbedding(hidden, temb_dim)
        self.tokens = nn.Embedding(vocab, context_dim)
        self.record: dict[str, torch.Tensor] | None = None
        """set to a dict to keep each location's maps of the next forward (detached)"""

    def train(self, mode: bool = True):
        super().train(mode)
        self.experts.eval()  # frozen: no dropout, fixed norms, whatever the ensemble's mode
        return self

    def forward(self, x: torch.Tensor, t: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The ensemble's eps for (B, C, H, W) noisy inputs at timesteps t and caption token ids."""
        experts = [e.unet for e in self.experts]
        emb = [expert_embeddings(e, x, t, tokens) for e in self.experts]
        temb, ctx = [e[0] for e in emb], [e[1] for e in emb]
        a_temb = self.time_embedding(self.time_proj(t).to(x.dtype))
        a_ctx = self.tokens(tokens)
        step = iter(zip(self.where, self.aggregators))

        def mix(hs: list[torch.Tensor]) -> list[torch.Tensor]:
            (name, _), agg = next(step)
            h, a = agg(hs, a_temb, a_ctx)
            if self.record is not None:
                self.record[name] = a.detach()
            return [h] * len(hs)

        hs = mix([u.conv_in(x) for u in experts])
        skips = [hs]
        for b in range(len(experts[0].down_blocks)):
            blocks = [u.down_blocks[b] for u in experts]
            for j in range(len(blocks[0].resnets)):
                hs = mix([_layer(blk, j, h, te, c) for blk, h, te, c in zip(blocks, hs, temb, ctx)])
                skips.append(hs)
            if blocks[0].downsamplers:
                hs = mix([blk.downsamplers[0](h) for blk, h in zip(blocks, hs)])
                skips.append(hs)
        hs = mix([u.mid_block(h, te, encoder_hidden_states=c) for u, h, te, c in zip(experts, hs, temb, ctx)])
        for b in range(len(experts[0].up_blocks)):
            blocks = [u.up_blocks[b] for u in experts]
            for j in range(len(blocks[0].resnets)):
                skip = skips.pop()
                hs = mix([_layer(blk, j, torch.cat([h, s], 1), te, c)
                          for blk, h, s, te, c in zip(blocks, hs, skip, temb, ctx)])
            if blocks[0].upsamplers:
                hs = [blk.upsamplers[0](h) for blk, h in zip(blocks, hs)]
        out = [u.conv_out(u.conv_act(u.conv_norm_out(h))) if u.conv_norm_out is not None else u.conv_out(h)
               for u, h in zip(experts, hs)]
        return mix(out)[0]


def ensemble_loss(model: Callable[..., torch.Tensor], scheduler, x0: torch.Tensor, tokens: torch.Tensor,
                  t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The eps-prediction MSE per sample (B,) of any eps(x_t, t, tokens) model."""
    from ...diffusion.sampling import add_noise

    xt = add_noise(scheduler, x0, noise, t)
    return ((model(xt, t, tokens) - noise) ** 2).mean((1, 2, 3))


def output_average(experts: Sequence[nn.Module], weights: Sequence[float] | None = None):
    """Uniform (or weighted) averaging of the experts' outputs: eps = sum_i w_i eps_i(x_t, t, caption)."""
    w = [1 / len(experts)] * len(experts) if weights is None else list(weights)

    def eps(x, t, tokens):
        return sum(wi * e(x, t, e.context(tokens)) for wi, e in zip(w, experts))
    return eps


def block_of(name: str) -> str:
    """The merge block a parameter of a :class:`Denoiser` belongs to: 'in' (conv_in, the time and
    token embeddings), 'down{i}', 'mid', 'up{i}', 'out' (the last norm and conv)."""
    parts = name.split(".")
    if parts[0] == "unet":
        parts = parts[1:]
    head = parts[0]
    if head in ("down_blocks", "up_blocks"):
        return f"{head[:-7]}{parts[1]}"
    if head == "mid_block":
        return "mid"
    if head in ("conv_norm_out", "conv_out"):
        return "out"
    return "in"


def merge(states: Sequence[dict[str, torch.Tensor]], weights: Sequence[float] | dict[str, Sequence[float]]):
    """Weight merging: each parameter sum_i w_i theta_i. ``weights``: one vector for all
    parameters, or one per block (:func:`block_of`: block-wise merging, MBW)."""
    out = {}
    for k in states[0]:
        w = weights[block_of(k)] if isinstance(weights, dict) else weights
        out[k] = sum(float(wi) * s[k].float() for wi, s in zip(w, states)).to(states[0][k].dtype)
    return out


def simplex_grid(n: int, step: float) -> list[tuple[float, ...]]:
    """Weight vectors on the n-simplex whose entries are multiples of ``step``."""
    k = round(1 / step)

    def rec(left: int, parts: int):
        if parts == 1:
            yield (left,)
            return
        for i in range(left, -1, -1):
            for rest in rec(left - i, parts - 1):
                yield (i, *rest)
    return [tuple(v / k for v in p) for p in rec(k, n)]


def search_merge(loss_of: Callable[[object], float], n: int, blocks: Sequence[str], step: float = 0.25,
                 sweeps: int = 1) -> dict[str, object]:
    """The merge weights with the lowest ``loss_of`` (validation MSE): the best single vector on the
    simplex grid (weighted merging), then coordinate descent block by block from it (block-wise
    merging, autoMBW's search). Returns both, with the losses."""
    grid = simplex_grid(n, step)
    losses = [loss_of(w) for w in grid]
    best = grid[int(np.argmin(losses))]
    per_block = {b: best for b in blocks}
    best_loss = min(losses)
    for _ in range(sweeps):
        for b in blocks:
            for w in grid:
                if w == per_block[b]:
                    continue
                trial = {**per_block, b: w}
                v = loss_of(trial)
                if v < best_loss:
                    best_loss, per_block = v, trial
    return {"weighted": best, "weighted_loss": float(min(losses)), "blockwise": per_block,
            "blockwise_loss": float(best_loss), "uniform_loss": float(loss_of(tuple([1 / n] * n)))}
