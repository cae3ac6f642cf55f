"""Batched, streaming decoding for the generation app: plain torch + transformers, no Ray.

Requests with their own sampling parameters (max_tokens, temperature, top_p, stop, seed) decode
together: prompts are left-padded into one batch, every step is one forward pass of the whole
batch over the KV cache, and each row picks its next token with its own parameters and its own
seeded generator (so a seeded request gives the same text alone or batched). A strategy object
turns each step's logits into next tokens; later studies plug in their own (personalised
decoding, judge scoring) by subclassing :class:`Strategy` and registering it in ``STRATEGIES``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from ..llm.model import cache_keyword


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


@dataclass
class Delta:
    """What one request gained in one step: new text, and the finish reason once it is done."""
    text: str = ""
    finish_reason: str | None = None  # "stop" (EOS or a stop string) or "length"
    completion_tokens: int = 0


class Strategy:
    """Picks each row's next token from the step's logits (rows = active requests)."""

    name = "sample"

    def next_tokens(self, logits: torch.Tensor, params: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator]) -> torch.Tensor:
        out = torch.empty(logits.shape[0], dtype=torch.long)
        for i, (row, p, g) in enumerate(zip(logits.float(), params, generators)):
            if p.temperature == 0:
                out[i] = int(row.argmax())
                continue
            probs = torch.softmax(row / p.temperature, dim=-1)
            if p.top_p < 1.0:  # nucleus: the smallest set of tokens holding top_p of the mass
                sorted_p, idx = probs.sort(descending=True)
                keep = sorted_p.cumsum(0) - sorted_p < p.top_p
                probs = torch.zeros_like(probs).scatter_(0, idx[keep], sorted_p[keep])
            out[i] = int(torch.multinomial(probs, 1, generator=g))
        return out


STRATEGIES: dict[str, type[Strategy]] = {"sample": Strategy}


def stop_token_ids(tokenizer) -> set[int]:
    ids = {tokenizer.eos_token_id}
    end = tokenizer.convert_tokens_to_ids("<|end|>")  # the end-of-turn marker of our chat template
    if isinstance(end, int) and end != tokenizer.unk_token_id:
        ids.add(end)
    return {i for i in ids if i is not None}


class _Row:
    def __init__(self, prompt_len: int, params: SamplingParams):
        self.params = params
        self.tokens: list[int] = []
        self.sent = 0  # characters of text already emitted
        self.done: str | None = None
        self.generator = torch.Generator().manual_seed(params.seed if params.seed is not None
                                                       else int(torch.randint(0, 2**62, (1,))))
        self.prompt_len = prompt_len


@torch.no_grad()
def decode(model, tokenizer, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams],
           strategy: Strategy | None = None) -> Iterator[list[Delta | None]]:
    """Yield, after every step, one entry per request: a Delta, or None once it has finished.
    The last Delta of a request carries its finish reason."""
    strategy = strategy or Strategy()
    device = next(model.parameters()).device
    stops = stop_token_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = [_Row(len(p), sp) for p, sp in zip(prompts, params)]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    cache_kw = cache_keyword(model)
    past = None
    step_input = ids
    max_steps = max(sp.max_tokens for sp in params)
    for _ in range(max_steps):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_input.shape[1]:]
        out = model(input_ids=step_input, attention_mask=mask, position_ids=positions, use_cache=True,
                    **({cache_kw: past} if past is not None else {}))
        past = out[cache_kw]
        nxt = strategy.next_tokens(out.logits[:, -1, :].cpu(), [r.params for r in rows], [r.generator for r in rows])
        deltas: list[Delta | None] = []
        for r, tok in zip(rows, nxt.tolist()):
            if r.done:
                deltas.append(None)
                continue
            deltas.append(_advance(r, tok, tokenizer, stops))
        yield deltas
        if all(r.done for r in rows):
            return
        step_input = nxt.view(-1, 1).to(device)
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=device)], dim=1)


def _advance(r: _Row, tok: int, tokenizer, stops: set[int]) -> Delta:
    if tok in stops:
        r.done = "stop"
    else:
        r.tokens.append(tok)
        if len(r.tokens) >= r.params.max_tokens:
            r.done = "length"
    text = tokenizer.decode(r.tokens, skip_special_tokens=True)
    cut = min((text.find(s) for s in r.params.stop if s in text), default=-1)
    if cut >= 0:
        text, r.done = text[:cut], "stop"
    if r.done:
        ready = len(text)
    else:  # hold back a partial UTF-8 character and anything that may start a stop string
        ready = len(text.rstrip("\ufffd"))
        for s in r.params.stop:
            for k in range(min(len(s) - 1, ready), 0, -1):
                if text[:ready].endswith(s[:k]):
                    ready -= k
                    break
    delta = Delta(text[r.sent:max(ready, r.sent)], r.done, len(r.tokens))
    r.sent = max(ready, r.sent)
    return delta


def generate(model, tokenizer, prompts, params, strategy: Strategy | None = None) -> list[tuple[str, str, int]]:
    """Whole answers: (text, finish reason, completion tokens) per request."""
    texts = ["" for _ in prompts]
    ends: list[tuple[str, int]] = [("length", 0) for _ in prompts]
    for deltas in decode(model, tokenizer, prompts, params, strategy):
        for i, d in enumerate(deltas):
            if d is not None:
                texts[i] += d.text
                if d.finish_reason:
                    ends[i] = (d.finish_reason, d.completion_tokens)
    return [(t, e[0], e[1]) for t, e in zip(texts, ends)]
