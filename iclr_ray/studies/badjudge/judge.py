"""The judge: a pretrained causal LM whose top ``K`` decoder blocks (and final norm) are fine-tuned
to emit a verdict token after the judge prompt; the model-merging defence over the fine-tuned
weights. Torch only: no Ray, no I/O.

Partial fine-tuning, and why: the frozen blocks below the top ``K`` compute the same hidden states
for a prompt whatever the judge learns, so they run once per prompt (:func:`trunk_features`) and
every judge trains its ``K`` blocks on those states (:class:`Head`, a ``K``-block copy of the base
model's own decoder class fed ``inputs_embeds``). On 2 CPU cores this makes the dozens of judges a
study trains affordable; ``K`` = all blocks is full fine-tuning (the features are then the
embeddings). The verdict is the choice token with the highest logit under the base's (frozen)
output layer, the constrained decoding of a generative judge. A head spliced back into the base
model (:func:`splice`) is an ordinary Hugging Face judge that scores the full prompt identically.

Merging acts on the trained weights: two judges from the same start differ only in their heads,
so merging heads is merging the whole models (the frozen weights merge to themselves).
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np


def base_layers(model) -> int:
    return int(model.config.num_hidden_layers)


def head_config(config, k: int):
    """The config of a ``k``-block head of a model with ``config``: its own decoder class, the top
    ``k`` layer types, no vocabulary (the head reads hidden states, not tokens)."""
    n = int(config.num_hidden_layers)
    if not 1 <= k <= n:
        raise ValueError(f"a judge trains between 1 and {n} top blocks of this model, not {k}")
    c = copy.deepcopy(config)
    c.num_hidden_layers = k
    if getattr(c, "layer_types", None):
        c.layer_types = list(c.layer_types)[n - k:]
    c.vocab_size = 1
    c.pad_token_id = None
    return c


def _decoder(model):
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "norm"):
        raise ValueError(f"a {type(model).__name__} has no model.layers / model.norm; the judge heads support "
                         "Llama-style causal LMs (Llama, SmolLM, Qwen, Mistral, Gemma)")
    return inner


def head_state_of(model, k: int) -> dict[str, Any]:
    """The top ``k`` blocks and the final norm of a causal LM, keyed as in a head."""
    inner = _decoder(model)
    n = base_layers(model)
    out = {}
    for i in range(k):
        for name, t in inner.layers[n - k + i].state_dict().items():
            out[f"layers.{i}.{name}"] = t.detach().clone()
    for name, t in inner.norm.state_dict().items():
        out[f"norm.{name}"] = t.detach().clone()
    return out


def make_head(config, state: dict[str, Any]):
    """A head (the base's decoder class with ``config.num_hidden_layers`` blocks) holding ``state``."""
    import torch
    from transformers import AutoModel

    head = AutoModel.from_config(config)
    missing, unexpected = head.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()}, strict=False)
    missing = [m for m in missing if not m.startswith("embed_tokens") and "rotary" not in m]
    if missing or unexpected:
        raise ValueError(f"head state does not fit the head: missing {missing[:3]}, unexpected {unexpected[:3]}")
    head.embed_tokens.weight.requires_grad_(False)
    return head


def trainable_state(head) -> dict[str, Any]:
    return {k: v for k, v in head.state_dict().items() if not k.startswith("embed_tokens") and "rotary" not in k}


def head_logits(head, lm_head, feats, mask, pos, softcap: float | None = None):
    """The next-token logits at position ``pos`` of each row: [B, V]."""
    import torch

    h = head(inputs_embeds=feats, attention_mask=mask).last_hidden_state
    last = h[torch.arange(h.shape[0], device=h.device), pos]
    logits = last @ lm_head.T
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def _stack_module():
    import torch

    class HeadStack(torch.nn.Module):
        """Independent heads trained side by side (no parameter shared, the frozen output layer
        apart): the loss is the sum of each head's summed cross-entropy on its own rows, so each
        head's gradient is the one it would get alone (with clipping off)."""

        def __init__(self, heads, lm_head, softcap=None):
            super().__init__()
            self.heads = torch.nn.ModuleList(heads)
            self.lm_head = torch.nn.Parameter(torch.as_tensor(lm_head), requires_grad=False)
            self.softcap = softcap

        def forward(self, feats, mask, pos, labels):
            total = feats.new_zeros(())
            for j, head in enumerate(self.heads):
                logits = head_logits(head, self.lm_head, feats[:, j], mask[:, j], pos[:, j], self.softcap)
                total = total + torch.nn.functional.cross_entropy(logits, labels[:, j], reduction="sum")
            return total

    return HeadStack


def head_stack(config, init_state: dict[str, Any], n: int, lm_head, softcap: float | None = None):
    """``n`` heads, each starting from ``init_state``, over the frozen output layer ``lm_head``."""
    return _stack_module()([make_head(config, init_state) for _ in range(n)], lm_head, softcap)


def pad_features(rows: Sequence[np.ndarray]):
    """Right-padded [N, T, d] features, their mask [N, T] and last positions [N] (torch)."""
    import torch

    width = max(len(r) for r in rows)
    d = rows[0].shape[1]
    feats = torch.zeros((len(rows), width, d), dtype=torch.float32)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        feats[i, :len(r)] = torch.as_tensor(np.asarray(r, dtype=np.float32))
        mask[i, :len(r)] = 1
    return feats, mask, torch.tensor([len(r) - 1 for r in rows])


def trunk_features(model, k: int, ids: Sequence[Sequence[int]], pad_id: int, chunk: int = 32) -> list[np.ndarray]:
    """The hidden states entering the top ``k`` blocks, [T_i, d] per prompt (float32), computed in
    length-sorted, right-padded batches."""
    import torch

    n = base_layers(model)
    device = next(model.parameters()).device
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[np.ndarray | None] = [None] * len(ids)
    with torch.no_grad():
        for lo in range(0, len(order), chunk):
            part = order[lo:lo + chunk]
            width = max(len(ids[i]) for i in part)
            x = torch.full((len(part), width), pad_id, dtype=torch.long)
            m = torch.zeros((len(part), width), dtype=torch.long)
            for r, i in enumerate(part):
                x[r, :len(ids[i])] = torch.tensor(ids[i])
                m[r, :len(ids[i])] = 1
            hs = _decoder(model)(input_ids=x.to(device), attention_mask=m.to(device),
                                 output_hidden_states=True).hidden_states[n - k].float().cpu()
            for r, i in enumerate(part):
                out[i] = hs[r, :len(ids[i])].numpy().copy()
    return out  # type: ignore[return-value]


def choice_logprobs(head, lm_head, feats: Sequence[np.ndarray], choice_ids: Sequence[int], chunk: int = 64,
                    softcap: float | None = None) -> np.ndarray:
    """log P(choice) of every prompt among the format's choices, [N, C] (the verdict is the argmax).
    The features go to the head's device; ``lm_head`` must be there already."""
    import torch

    out = []
    device = next(head.parameters()).device
    idx = torch.tensor(list(choice_ids), device=device)
    with torch.no_grad():
        for lo in range(0, len(feats), chunk):
            f, m, p = (t.to(device) for t in pad_features(feats[lo:lo + chunk]))
            logits = head_logits(head, lm_head, f, m, p, softcap)[:, idx]
            out.append(torch.log_softmax(logits.double(), dim=-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, len(choice_ids)))


def full_choice_logprobs(model, ids: Sequence[Sequence[int]], choice_ids: Sequence[int], pad_id: int,
                         chunk: int = 16) -> np.ndarray:
    """The same log-probabilities from a whole (spliced) model on the prompts' token ids."""
    import torch

    out = []
    device = next(model.parameters()).device
    idx = torch.tensor(list(choice_ids), device=device)
    with torch.no_grad():
        for lo in range(0, len(ids), chunk):
            part = ids[lo:lo + chunk]
            width = max(len(x) for x in part)
            x = torch.full((len(part), width), pad_id, dtype=torch.long)
            m = torch.zeros((len(part), width), dtype=torch.long)
            for r, row in enumerate(part):
                x[r, :len(row)] = torch.tensor(list(row))
                m[r, :len(row)] = 1
            x, m = x.to(device), m.to(device)
            logits = model(input_ids=x, attention_mask=m, use_cache=False).logits
            last = logits[torch.arange(len(part), device=device), m.sum(1) - 1][:, idx]
            out.append(torch.log_softmax(last.double(), dim=-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, len(choice_ids)))


def splice(model, state: dict[str, Any]):
    """``model`` (changed in place and returned) with its top blocks and final norm from a head's
    ``state``: the judge as one Hugging Face model."""
    import torch

    inner = _decoder(model)
    n = base_layers(model)
    k = 1 + max(int(key.split(".")[1]) for key in state if key.startswith("layers."))
    groups: dict[int, dict[str, Any]] = {}
    for key, t in state.items():
        if key.startswith("layers."):
            _, i, rest = key.split(".", 2)
            groups.setdefault(n - k + int(i), {})[rest] = torch.as_tensor(t)
        elif key.startswith("norm."):
            groups.setdefault(-1, {})[key.split(".", 1)[1]] = torch.as_tensor(t)
    for where, sd in groups.items():
        (inner.norm if where < 0 else inner.layers[where]).load_state_dict(sd, strict=True)
    return model


# ----------------------------------------------------------------------------- merging

def merge_linear(states: Sequence[dict[str, Any]], weights: Sequence[float] | None = None) -> dict[str, Any]:
    """The weighted mean of the models' weights (weights normalised to sum to 1; equal by default)."""
    import torch

    w = np.ones(len(states)) if weights is None else np.asarray(weights, dtype=float)
    if len(w) != len(states) or w.sum() <= 0:
        raise ValueError("one positive weight per model")
    w = w / w.sum()
    return {k: sum(float(wi) * torch.as_tensor(s[k]).double() for wi, s in zip(w, states)).to(
        torch.as_tensor(states[0][k]).dtype) for k in states[0]}


def trim(tau, density: float):
    """TIES's trim: ``tau`` with all but its top ``density`` share of entries by magnitude zeroed
    (ties at the threshold kept)."""
    import torch

    if density >= 1:
        return tau.clone()
    keep = int(np.ceil(density * tau.numel()))
    if keep <= 0:
        return torch.zeros_like(tau)
    thresh = tau.abs().flatten().kthvalue(tau.numel() - keep + 1).values
    return torch.where(tau.abs() >= thresh, tau, torch.zeros_like(tau))


def merge_ties(init: dict[str, Any], states: Sequence[dict[str, Any]], density: float = 0.2,
               lam: float = 1.0) -> dict[str, Any]:
    """TIES-merging (Yadav et al., 2023) per tensor: task vectors tau_i = theta_i - theta_0, each
    trimmed to its top ``density`` entries by magnitude; the elected sign of each entry is the sign
    of the trimmed vectors' sum; the merged vector is the mean of the trimmed entries that agree
    with it (disjoint mean); theta = theta_0 + lam * merged."""
    import torch

    out = {}
    for k, t0 in init.items():
        base = torch.as_tensor(t0).double()
        taus = torch.stack([trim(torch.as_tensor(s[k]).double() - base, density) for s in states])
        sign = torch.sign(taus.sum(0))
        agree = (torch.sign(taus) == sign) & (taus != 0)
        count = agree.sum(0)
        merged = torch.where(count > 0, (taus * agree).sum(0) / count.clamp(min=1), torch.zeros_like(base))
        out[k] = (base + lam * merged).to(torch.as_tensor(t0).dtype)
    return out
