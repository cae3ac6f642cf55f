"""The decoder-only transformer of the Position Coupling papers, in plain torch (no Ray, no I/O).

It follows the official model (a decoder-only variant of T5), as the paper configures it:

* token embedding plus, for coupled positions, one learned table per position level (ids 0..
  n_positions; id 0 is a learned row too), all summed before the first layer; ``absolute``
  uses one table over 0, 1, 2, ...; ``none`` (NoPE) adds nothing;
* causal self-attention without the 1/sqrt(d_kv) factor (T5 folds it into the query
  initialisation), no biases, no relative bias;
* RMSNorm (eps 1e-6) in the "pre_post" arrangement: each sublayer sees a normalised input, and the
  residual sum after it is normalised again; a final RMSNorm after the last layer;
* gated-GELU feed-forward (wo(gelu(wi_0 x) * wi_1 x)), no biases, dropout 0;
* the output head tied to the token embedding, its input scaled by d_model^-0.5.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

PositionKind = Literal["coupled", "absolute", "none"]


@dataclass(frozen=True)
class ModelConfig:
    vocab: int
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    d_ff: int = 256
    levels: int = 2
    """position levels embedded (coupled); 1 for absolute"""
    n_positions: int = 41
    """rows per position table (ids 0 .. n_positions - 1)"""
    position: PositionKind = "coupled"

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Block(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.heads, self.d_kv = c.heads, c.d_model // c.heads
        self.q = nn.Linear(c.d_model, c.d_model, bias=False)
        self.k = nn.Linear(c.d_model, c.d_model, bias=False)
        self.v = nn.Linear(c.d_model, c.d_model, bias=False)
        self.o = nn.Linear(c.d_model, c.d_model, bias=False)
        self.wi_0 = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.wi_1 = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.wo = nn.Linear(c.d_ff, c.d_model, bias=False)
        self.pre_attn, self.post_attn = RMSNorm(c.d_model), RMSNorm(c.d_model)
        self.pre_ff, self.post_ff = RMSNorm(c.d_model), RMSNorm(c.d_model)

    def attention(self, x: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = (f(x).view(B, T, self.heads, self.d_kv).transpose(1, 2) for f in (self.q, self.k, self.v))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if pad is not None:  # keys that are padding are never attended to
            mask = mask & ~pad[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
        return self.o(out.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
        x = self.post_attn(x + self.attention(self.pre_attn(x), pad))
        h = self.pre_ff(x)
        return self.post_ff(x + self.wo(F.gelu(self.wi_0(h), approximate="tanh") * self.wi_1(h)))


class CoupledDecoder(nn.Module):
    def __init__(self, c: ModelConfig, seed: int = 0):
        super().__init__()
        self.config = c
        if c.d_model % c.heads:
            raise ValueError(f"d_model {c.d_model} is not a multiple of heads {c.heads}")
        gen = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(c.vocab, c.d_model)
        n_tables = c.levels if c.position == "coupled" else (1 if c.position == "absolute" else 0)
        self.positions = nn.ModuleList(nn.Embedding(c.n_positions, c.d_model) for _ in range(n_tables))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.final_norm = RMSNorm(c.d_model)
        self._init(gen)

    def _init(self, gen: torch.Generator) -> None:
        """T5's initialisation: N(0, 1) embeddings; the query carries the attention scale."""
        c = self.config
        d_kv = c.d_model // c.heads
        for emb in [self.embed, *self.positions]:
            nn.init.normal_(emb.weight, 0.0, 1.0, generator=gen)
        for b in self.blocks:
            nn.init.normal_(b.q.weight, 0.0, (c.d_model * d_kv) ** -0.5, generator=gen)
            for lin in (b.k, b.v):
                nn.init.normal_(lin.weight, 0.0, c.d_model**-0.5, generator=gen)
            nn.init.normal_(b.o.weight, 0.0, c.d_model**-0.5, generator=gen)
            for lin in (b.wi_0, b.wi_1):
                nn.init.normal_(lin.weight, 0.0, c.d_model**-0.5, generator=gen)
            nn.init.normal_(b.wo.weight, 0.0, c.d_ff**-0.5, generator=gen)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                pad: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids (B, T); ``positions`` (B, T, levels) for coupled ids."""
        c = self.config
        x = self.embed(tokens)
        if c.position == "coupled":
            if positions is None or positions.shape[-1] < c.levels:
                raise ValueError(f"coupled positions need (B, T, {c.levels}) ids")
            for level, table in enumerate(self.positions):
                x = x + table(positions[..., level])
        elif c.position == "absolute":
            x = x + self.positions[0](torch.arange(tokens.shape[1], device=tokens.device))[None]
        for b in self.blocks:
            x = b(x, pad)
        return F.linear(self.final_norm(x) * c.d_model**-0.5, self.embed.weight)


def masked_loss(logits: torch.Tensor, tokens: torch.Tensor, loss_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over target tokens (loss_mask[t] marks token t as predicted
    from position t - 1) and their count."""
    pred, gold, m = logits[:, :-1], tokens[:, 1:], loss_mask[:, 1:]
    ce = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), gold.reshape(-1), reduction="none").view_as(gold)
    return (ce * m).sum(), int(m.sum())


@torch.no_grad()
def exact_match(model: CoupledDecoder, tokens: torch.Tensor, positions: torch.Tensor | None,
                loss_mask: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
    """Per sequence: whether every target token is the argmax under teacher forcing (the
    official evaluation's instance-wise accuracy)."""
    pred = model(tokens, positions, pad).argmax(-1)[:, :-1]
    ok = (pred == tokens[:, 1:]) | ~loss_mask[:, 1:]
    return ok.all(dim=1)
