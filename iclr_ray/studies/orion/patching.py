"""Request patching (Variengien & Winsor, ORION) with plain forward hooks on a Hugging Face causal LM.

For a pair x1 = (C1, R1), x2 = (C2, R2) and a layer L:

1. run x1 and cache the residual stream at its **last token** after decoder block L;
2. run x2 with its last-token residual after block L overwritten by x1's;
3. read the next-token distribution: R2(C2) means the patch did nothing, R1(C2) that the request
   came from x1 and the retrieval from x2's context, R1(C1) that the answer itself was carried.

Only the last position differs between the clean and the patched run of x2, and a causal model's
earlier positions never see it, so :class:`Patcher` runs x2's prefix once (its key/value cache)
and each patched run is one token through the model: the same logits as a whole patched forward
pass (the tests hold the two together), a sequence-length times cheaper. No Ray, no I/O.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ...llm.model import cache_keyword
from ...llm.model import decoder_blocks as blocks


def _hidden(output):
    return output[0] if isinstance(output, tuple) else output


def _with_last(output, residual: torch.Tensor):
    """``output`` of a block with its last position's hidden state replaced by ``residual``."""
    h = _hidden(output).clone()
    h[:, -1, :] = residual.to(device=h.device, dtype=h.dtype)
    return (h, *output[1:]) if isinstance(output, tuple) else h


@dataclass
class Encoded:
    """Left-padded prompts: every prompt's last token sits at position -1."""

    ids: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def to(self, device) -> "Encoded":
        return Encoded(self.ids.to(device), self.mask.to(device), self.positions.to(device))

    def rows(self, idx) -> "Encoded":
        ids, mask = self.ids[idx], self.mask[idx]
        keep = mask.any(0).nonzero()[0, 0] if mask.any() else 0  # drop columns that are padding in every row
        return Encoded(ids[:, keep:], mask[:, keep:], self.positions[idx][:, keep:])


def encode(tokenizer, texts: list[str]) -> Encoded:
    """``texts`` tokenised and left-padded, with position ids that start at 0 on each prompt's first
    real token (a padded prompt must see the positions it would see alone)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    mask = enc["attention_mask"]
    return Encoded(enc["input_ids"], mask, (mask.cumsum(-1) - 1).clamp(min=0))


def _forward(model, ids, mask, positions, **kw):
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, **kw)


@torch.no_grad()
def clean(model, enc: Encoded) -> tuple[torch.Tensor, torch.Tensor]:
    """(last-token logits [B, V], last-token residual after every block [B, n_blocks, d])."""
    seen: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: seen.append(_hidden(out)[:, -1, :].float().cpu()))
             for b in blocks(model)]
    enc = enc.to(model.device)
    try:
        logits = _forward(model, enc.ids, enc.mask, enc.positions, logits_to_keep=1).logits[:, -1, :].float().cpu()
    finally:
        for h in hooks:
            h.remove()
    return logits, torch.stack(seen, dim=1)


@torch.no_grad()
def patched_full(model, enc: Encoded, layer: int, residual: torch.Tensor) -> torch.Tensor:
    """Last-token logits of whole forward passes with the last-token residual after block
    ``layer`` set to ``residual`` [B, d] (the direct computation :class:`Patcher` must equal)."""
    hook = blocks(model)[layer].register_forward_hook(lambda _m, _i, out: _with_last(out, residual))
    enc = enc.to(model.device)
    try:
        return _forward(model, enc.ids, enc.mask, enc.positions, logits_to_keep=1).logits[:, -1, :].float().cpu()
    finally:
        hook.remove()


class Patcher:
    """Patched last-token logits of one batch of prompts x2, the prefix run once."""

    @torch.no_grad()
    def __init__(self, model, enc: Encoded):
        enc = enc.to(model.device)
        self.model, self.enc, self.cache_arg = model, enc, cache_keyword(model)
        out = _forward(model, enc.ids[:, :-1], enc.mask[:, :-1], enc.positions[:, :-1], use_cache=True,
                       logits_to_keep=1)
        self.cache = getattr(out, self.cache_arg)

    @torch.no_grad()
    def __call__(self, layer: int | None = None, residual: torch.Tensor | None = None) -> torch.Tensor:
        """Last-token logits [B, V]; with ``layer``, the residual after that block overwritten."""
        hook = None
        if layer is not None:
            hook = blocks(self.model)[layer].register_forward_hook(lambda _m, _i, out: _with_last(out, residual))
        try:
            e = self.enc
            out = _forward(self.model, e.ids[:, -1:], e.mask, e.positions[:, -1:], use_cache=True,
                           **{self.cache_arg: copy.deepcopy(self.cache)})
            return out.logits[:, -1, :].float().cpu()
        finally:
            if hook is not None:
                hook.remove()


# -- scoring --------------------------------------------------------------------------------------

def first_token(tokenizer, answer: str) -> int:
    """The id of the first token of ``answer`` as it continues a prompt (no special tokens)."""
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"answer {answer!r} has no tokens")
    return int(ids[0])


def soft_match(predicted: str, expected: str) -> bool:
    """The official IIA's loose comparison of a decoded token with the expected first token: case
    and spaces ignored, one a prefix of the other; an empty string matches nothing here."""
    a, b = predicted.lower().replace(" ", ""), expected.lower().replace(" ", "")
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def hits(tokenizer, logits: torch.Tensor, expected: list[int], soft: bool = False) -> list[bool]:
    """Whether each row's top-1 token is the expected token id (what the claims read); ``soft``:
    or a soft match of the two decoded tokens (the official IIA's loose comparison, a reported
    variant: a one-letter top token matches every answer with that initial)."""
    top = logits.argmax(-1).tolist()
    if not soft:
        return [t == e for t, e in zip(top, expected)]
    return [t == e or soft_match(tokenizer.decode([t]), tokenizer.decode([e])) for t, e in zip(top, expected)]


def is_top(logits: torch.Tensor, ids: list[int], tol: float = 1e-4) -> list[bool]:
    """Whether each row's token in ``ids`` is its top-1 token, up to ``tol`` in logit (a near tie
    computed in two batches of different shape may swap by float rounding)."""
    rows = torch.arange(len(ids))
    return (logits[rows, torch.tensor(ids)] >= logits.max(-1).values - tol).tolist()


def probs_at(logits: torch.Tensor, ids: list[int]) -> list[float]:
    """Each row's softmax probability of its token in ``ids``."""
    p = torch.softmax(logits, -1)
    return p[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def logit_diff(logits: torch.Tensor, good: list[int], bad: list[int]) -> list[float]:
    """logit(good) - logit(bad) per row."""
    rows = torch.arange(len(good))
    return (logits[rows, torch.tensor(good)] - logits[rows, torch.tensor(bad)]).tolist()


def matched_noise(residual: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random residual per row with the norm of the row it replaces (a negative control)."""
    noise = torch.randn(residual.shape, generator=generator)
    return noise / noise.norm(dim=-1, keepdim=True) * residual.norm(dim=-1, keepdim=True)
