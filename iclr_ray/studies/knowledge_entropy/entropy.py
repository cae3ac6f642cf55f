"""Knowledge entropy and resuscitation (Kim et al., ICLR 2025), on any Hugging Face causal LM with
gated MLPs (Llama, OLMo, SmolLM2, Gemma, Qwen: ``mlp.gate_proj``, ``mlp.up_proj``,
``mlp.down_proj``).

The FFN read as a memory: FFN(x) = f(x K^T) V, whose coefficients C = f(x K^T) are, for a gated MLP,
act(gate(x)) * up(x), the input of the down projection (width m per layer). For layer l:

* C_bar_l in R^m: the mean of |C| over a probe set's tokens: per sequence first (its real
  tokens), then over sequences (the official code averages per-sequence means);
* p_l = C_bar_l / sum_i C_bar_l,i, and the layer's entropy -sum_i p_l,i log p_l,i;
* knowledge entropy H(theta) = the sum over layers (at most L log m, reached by uniform C_bar).

Resuscitation (Algorithm 1): in each layer, the neurons whose C_bar_l,i is at most the
p-quantile of C_bar_l get their up-projection rows multiplied by (mean(C_bar_l) / C_bar_l,i) * q,
which multiplies their coefficients by the same factor (C is linear in up(x)).

No Ray, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def gated_mlps(model) -> list[torch.nn.Module]:
    """Each decoder block's MLP, checked to be gated (gate_proj, up_proj, down_proj)."""
    from ...llm.model import decoder_blocks

    mlps = [b.mlp for b in decoder_blocks(model)]
    for m in mlps:
        if not all(hasattr(m, name) for name in ("gate_proj", "up_proj", "down_proj")):
            raise ValueError(f"{type(m).__name__} is not a gated MLP (gate_proj, up_proj, down_proj): "
                             "knowledge entropy here reads act(gate(x)) * up(x)")
    return mlps


@torch.no_grad()
def coefficient_means(model, ids: torch.Tensor, mask: torch.Tensor, batch: int = 8) -> np.ndarray:
    """C_bar [L, m]: per layer and neuron, the mean over sequences of the mean |C| over each
    sequence's real tokens (``mask`` 1), C being the down projection's input."""
    mlps = gated_mlps(model)
    sums = [torch.zeros(m.down_proj.in_features, dtype=torch.float64) for m in mlps]
    current: dict[str, torch.Tensor] = {}

    def hook(i):
        def pre(_module, args):
            c = args[0].abs().double()  # [B, T, m]
            w = current["mask"].to(c.device)[..., None]
            per_seq = (c * w).sum(1) / w.sum(1).clamp(min=1)  # [B, m]
            sums[i].add_(per_seq.sum(0).cpu())
        return pre

    # the decoder alone: the coefficients are all that is read, so no vocabulary-sized logits
    base = model.get_decoder() if hasattr(model, "get_decoder") else model
    device = next(model.parameters()).device
    handles = [m.down_proj.register_forward_pre_hook(hook(i)) for i, m in enumerate(mlps)]
    try:
        for lo in range(0, len(ids), batch):
            m = mask[lo:lo + batch]
            current["mask"] = m.to(torch.float64)
            base(input_ids=ids[lo:lo + batch].to(device), attention_mask=m.to(device))
    finally:
        for h in handles:
            h.remove()
    return torch.stack(sums).numpy() / len(ids)


def layer_entropies(c_bar: np.ndarray) -> np.ndarray:
    """-sum_i p_l,i log p_l,i per layer, p_l = C_bar_l / sum C_bar_l."""
    c = np.asarray(c_bar, float)
    p = c / c.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(p), 0.0)
    return terms.sum(axis=1)


def knowledge_entropy(c_bar: np.ndarray) -> float:
    """H(theta): the layers' entropies summed."""
    return float(layer_entropies(c_bar).sum())


@dataclass
class Resuscitation:
    """What Algorithm 1 did: per layer, the chosen neurons and the factor each was scaled by."""

    neurons: list[np.ndarray]
    factors: list[np.ndarray]


def resuscitation_factors(c_bar: np.ndarray, ratio: float, q: float) -> Resuscitation:
    """Per layer: neurons with C_bar_l,i <= the ``ratio``-quantile of C_bar_l, each with factor
    (mean(C_bar_l) / C_bar_l,i) * q."""
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    neurons, factors = [], []
    for row in np.asarray(c_bar, float):
        chosen = np.flatnonzero(row <= np.quantile(row, ratio))
        neurons.append(chosen)
        factors.append(row.mean() / np.maximum(row[chosen], 1e-12) * q)
    return Resuscitation(neurons, factors)


@torch.no_grad()
def resuscitate(model, plan: Resuscitation) -> None:
    """Scale the chosen up-projection rows in place (and their biases, where there are any)."""
    for mlp, idx, f in zip(gated_mlps(model), plan.neurons, plan.factors):
        up = mlp.up_proj
        scale = torch.as_tensor(f, dtype=up.weight.dtype, device=up.weight.device)
        rows = torch.as_tensor(idx, device=up.weight.device)
        up.weight[rows] *= scale[:, None]
        if up.bias is not None:
            up.bias[rows] *= scale


def random_like(plan: Resuscitation, c_bar: np.ndarray, q: float, seed: int) -> Resuscitation:
    """The negative control: as many neurons per layer as ``plan`` chose, drawn at random (without
    C_bar), each scaled as Algorithm 1 would scale that neuron, (mean(C_bar_l) / C_bar_l,j) * q:
    the rule applied to neurons it did not pick. (Before 2026-12 the random neurons took the
    chosen ones' factors, far above 1 on neurons already near the mean.)"""
    rng = np.random.default_rng(seed)
    neurons, factors = [], []
    for row, idx in zip(np.asarray(c_bar, float), plan.neurons):
        pick = np.sort(rng.choice(len(row), size=len(idx), replace=False))
        neurons.append(pick)
        factors.append(row.mean() / np.maximum(row[pick], 1e-12) * q)
    return Resuscitation(neurons, factors)
