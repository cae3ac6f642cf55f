"""MoEE (Li & Zhou, ICLR 2025): a mixture-of-experts LM's routing weights as a sentence embedding,
beside its last hidden state. torch and numpy only: no Ray, no I/O.

For a sentence wrapped in a prompt and encoded with left padding:

- HS: the last layer's hidden state at the last token;
- RW: at the last token, every MoE layer's router output over *all* experts, concatenated
  (dimension = MoE layers x experts): raw router logits (as the paper's OLMoE) or their softmax
  (as its DeepSeekMoE);
- both z-scored per dimension (eps 1e-8) with statistics read from texts no test unit reads
  (:class:`Standardiser`); HS is also scored raw, as the official code scores it;
- MoEE (concat): cosine on [HS; RW];
- MoEE (sum): cos(HS_q, HS_d) + alpha * cos(RW_q, RW_d).

The sum is itself the dot product of one vector, [HS/|HS|; sqrt(alpha) RW/|RW|]
(:func:`sum_embedding`), so every similarity-based task (and a served endpoint) can use it as an
embedding; scaled by 1/sqrt(1 + alpha) it has unit norm and its cosine is the sum over (1 + alpha).

The untrained-router control (:func:`random_routers`) reads the same router inputs as the trained
routers and maps them through freshly initialised router weights instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

PROMPTS = {
    "none": "{text}",
    "prompteol": 'This sentence : "{text}" means in one word:"',
    "title": "{text}\nTitle:",
}
"""the paper's prompt templates (its repo's ``none`` and PromptEOL), and ``title``: the cue of the
review corpus's own one-line summary, for LMs pre-trained here on reviews followed by their titles
(PromptEOL's mechanism, the last token about to summarise the text, in a form such an LM has seen)"""

EPS = 1e-8
VIEWS = ("hs", "rw", "concat", "sum")
"""the four embeddings the paper compares"""


def wrap(text: str, prompt: str) -> str:
    return PROMPTS[prompt].format(text=text)


@dataclass
class Encoded:
    """One batch's raw (not yet standardised) embeddings: rows are the texts."""
    hs: np.ndarray
    """(n, hidden) last layer, last token"""
    rw: np.ndarray
    """(n, layers x experts) router outputs at the last token, layer-major"""
    rw_untrained: np.ndarray | None = None
    """(n, layers x experts) the same router inputs through untrained routers (the control)"""


def router_modules(model) -> list:
    """The router of every MoE layer, in layer order: the module (one per decoder block) whose
    ``weight`` maps the hidden size to the number of experts (OLMoE, Mixtral, Qwen-MoE ``gate``).
    ValueError for a model without experts."""
    from ...llm.model import decoder_blocks, num_experts

    config = model.config
    experts = num_experts(config)
    if not experts:
        raise ValueError(f"{type(model).__name__} is not a mixture of experts (no num_experts in its config)")
    out = []
    for block in decoder_blocks(model):
        found = [m for name, m in block.named_modules()
                 if name.endswith("gate") and tuple(getattr(getattr(m, "weight", None), "shape", ())) ==
                 (experts, config.hidden_size)]
        out.extend(found[:1])  # a layer without experts (a dense first layer) has none
    if not out:
        raise ValueError(f"no router found in {type(model).__name__}")
    return out


def random_routers(model, seed: int) -> list:
    """Untrained router weights, one (experts, hidden) matrix per MoE layer, drawn as the model's
    own initialiser draws them (normal, std = config.initializer_range)."""
    import torch

    std = float(getattr(model.config, "initializer_range", 0.02))
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(r.weight.shape, generator=g) * std for r in router_modules(model)]


def rw_kind(setting: str, model) -> str:
    """RW's form for one model under ``setting``: auto is the softmax for DeepSeekMoE (as the
    paper's DeepSeek file returns its scores), raw router logits otherwise (its OLMoE file)."""
    if setting != "auto":
        return setting
    return "softmax" if "deepseek" in str(getattr(model.config, "model_type", "")).lower() else "logits"


def left_padded(tokenizer, texts: Sequence[str], max_tokens: int):
    """input_ids, attention_mask and position_ids of ``texts``, left padded: each text's last token
    in the last column, positions counted from its first real token. A text over ``max_tokens``
    keeps its end (where the prompt ends and the embedding is read), after the BOS token."""
    import torch

    ids = [tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    ids = [bos + x[-(max_tokens - len(bos)):] for x in ids]
    width = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return input_ids, mask, positions


def encode(model, tokenizer, texts: Sequence[str], *, prompt: str = "none", rw: Literal["logits", "softmax"] = "logits",
           max_tokens: int = 128, untrained: Sequence | None = None) -> Encoded:
    """HS and RW (and, given :func:`random_routers`, the untrained routers' RW) of one batch."""
    import torch

    routers = router_modules(model)
    captured: list = []
    hooks = []
    if untrained is not None:
        hooks = [r.register_forward_pre_hook(lambda _m, args: captured.append(args[0])) for r in routers]
    device = next(model.parameters()).device
    input_ids, mask, positions = (t.to(device) for t in left_padded(tokenizer, [wrap(t, prompt) for t in texts],
                                                                     max_tokens))
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
                        output_hidden_states=True, output_router_logits=True)
    finally:
        for h in hooks:
            h.remove()
    n, width = input_ids.shape
    logits = out.router_logits
    if logits is None or len(logits) != len(routers):
        raise ValueError(f"{type(model).__name__} returned {0 if logits is None else len(logits)} router outputs "
                         f"for {len(routers)} routers")
    per_layer = [r.reshape(n, width, -1)[:, -1].float() for r in logits]
    if rw == "softmax":
        per_layer = [torch.softmax(r, dim=-1) for r in per_layer]
    hs = out.hidden_states[-1][:, -1].float()
    rw_untrained = None
    if untrained is not None:
        last = [x.reshape(n, width, -1)[:, -1].float() for x in captured]
        rand = [x @ w.T.float().to(device) for x, w in zip(last, untrained)]
        if rw == "softmax":
            rand = [torch.softmax(r, dim=-1) for r in rand]
        rw_untrained = torch.cat(rand, dim=1).cpu().numpy()
    return Encoded(hs.cpu().numpy(), torch.cat(per_layer, dim=1).cpu().numpy(), rw_untrained)


def encode_corpus(model, tokenizer, texts: Sequence[str], batch_size: int = 64, **kw) -> Encoded:
    """:func:`encode` over a whole corpus in batches of texts of similar length (sorted by length,
    so little of each batch is padding), rows returned in the given order."""
    lengths = [len(tokenizer(wrap(t, kw.get("prompt", "none")), add_special_tokens=False).input_ids) for t in texts]
    order = np.argsort(lengths, kind="stable")
    parts = [encode(model, tokenizer, [texts[i] for i in order[j:j + batch_size]], **kw)
             for j in range(0, len(texts), batch_size)]
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    untrained = None if parts[0].rw_untrained is None else np.vstack([q.rw_untrained for q in parts])[back]
    return Encoded(np.vstack([q.hs for q in parts])[back], np.vstack([q.rw for q in parts])[back], untrained)


def standardise(x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Each dimension z-scored over the rows (the encoded corpus)."""
    x = np.asarray(x, np.float64)
    return (x - x.mean(0)) / (x.std(0) + eps)


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (a zero row stays zero)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


def sum_embedding(hs: np.ndarray, rw: np.ndarray, alpha: float) -> np.ndarray:
    """[HS/|HS|; sqrt(alpha) RW/|RW|] / sqrt(1 + alpha): its dot products are
    (cos(HS) + alpha cos(RW)) / (1 + alpha), MoEE (sum) up to a constant factor."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    return np.hstack([unit(hs), math.sqrt(alpha) * unit(rw)]) / math.sqrt(1.0 + alpha)


def sum_score(hs_a, rw_a, hs_b, rw_b, alpha: float) -> np.ndarray:
    """MoEE (sum) of row-aligned pairs, as the paper writes it: cos(HS) + alpha cos(RW)."""
    return cosine(hs_a, hs_b) + alpha * cosine(rw_a, rw_b)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of row-aligned pairs."""
    return np.sum(unit(a) * unit(b), axis=1)


@dataclass
class Views:
    """The standardised parts of one corpus (and HS as it comes); :meth:`get` gives each view's
    unit-norm embedding."""
    hs: np.ndarray
    rw: np.ndarray
    hs_raw: np.ndarray | None = None
    """HS before z-scoring: the official code scores HS raw (only RW and MoEE are standardised)"""

    @classmethod
    def of(cls, enc: Encoded, untrained: bool = False, standardiser: "Standardiser | None" = None) -> "Views":
        """z-scored by ``standardiser`` (statistics read from texts outside the test units), or,
        without one, over the rows of ``enc`` themselves."""
        rw = enc.rw_untrained if untrained else enc.rw
        if rw is None:
            raise ValueError("this encoding has no untrained-router RW")
        if standardiser is None:
            return cls(standardise(enc.hs), standardise(rw), np.asarray(enc.hs, np.float64))
        hs, rw = standardiser.apply(np.asarray(enc.hs, np.float64), np.asarray(rw, np.float64))
        return cls(hs, rw, np.asarray(enc.hs, np.float64))

    def get(self, view: str, alpha: float = 1.0) -> np.ndarray:
        if view == "hs":
            return unit(self.hs)
        if view == "hs_raw":
            if self.hs_raw is None:
                raise ValueError("these views have no raw HS")
            return unit(self.hs_raw)
        if view == "rw":
            return unit(self.rw)
        if view == "concat":  # z-scoring commutes with concatenation: z([HS; RW]) = [z(HS); z(RW)]
            return unit(np.hstack([self.hs, self.rw]))
        if view == "sum":
            return sum_embedding(self.hs, self.rw, alpha)
        raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}, hs_raw")


STANDARDISE_FILE = "moee_standardise.npz"
"""a served MoE checkpoint's standardisation statistics, written beside its config.json by the study"""


@dataclass
class Standardiser:
    """Per-dimension means and standard deviations of HS and RW over a corpus, so that texts
    embedded one request at a time are z-scored as the study z-scores a whole corpus."""
    hs_mean: np.ndarray
    hs_std: np.ndarray
    rw_mean: np.ndarray
    rw_std: np.ndarray

    @classmethod
    def fit(cls, hs: np.ndarray, rw: np.ndarray) -> "Standardiser":
        hs, rw = np.asarray(hs, np.float64), np.asarray(rw, np.float64)
        return cls(hs.mean(0), hs.std(0), rw.mean(0), rw.std(0))

    def apply(self, hs: np.ndarray, rw: np.ndarray, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
        return (hs - self.hs_mean) / (self.hs_std + eps), (rw - self.rw_mean) / (self.rw_std + eps)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"hs_mean": self.hs_mean, "hs_std": self.hs_std, "rw_mean": self.rw_mean, "rw_std": self.rw_std}


def served_embeddings(model, tokenizer, items: Sequence[tuple[str, str]], *, prompt: str = "none",
                      rw: Literal["logits", "softmax"] = "logits", alpha: float = 1.0,
                      standardiser: Standardiser | None = None, max_tokens: int = 512) -> list[list[float]]:
    """One vector per (text, representation): ``hs`` or ``rw`` (unit norm), or ``moee``, the MoEE
    (sum) vector of :func:`sum_embedding` (unit norm; dot products are (cos HS + alpha cos RW) /
    (1 + alpha)). z-scored by ``standardiser`` when given, else raw."""
    enc = encode(model, tokenizer, [t for t, _ in items], prompt=prompt, rw=rw, max_tokens=max_tokens)
    hs, r = (enc.hs, enc.rw) if standardiser is None else standardiser.apply(enc.hs, enc.rw)
    vectors = {"hs": unit(hs), "rw": unit(r), "moee": sum_embedding(hs, r, alpha)}
    return [vectors[kind][i].tolist() for i, (_, kind) in enumerate(items)]
