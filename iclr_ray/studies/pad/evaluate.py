"""pad's measurements on loaded models: the prompts each method reads, decoding every method over a
set of queries, Best-of-N by the PRM's sequence reward, and the throughput of each decoder. No Ray,
no I/O (models and tokenizers come in loaded).

Prompts (the official code puts the preference in the PRM's prompt only):
- the base model reads the plain query (base decoding, Best-of-N's samples, PAD's base side);
- the PRM reads the personalised prompt: the preference's text, a blank line, the query;
- preference prompting is the base model on the personalised prompt.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch

from ...serve.decoding import SamplingParams, generate
from .decoding import ARGSStrategy, PADStrategy
from .prm import Pair, response_logps


def personalised(query: str, pref_text: str | None) -> str:
    return query if not pref_text else f"{pref_text}\n\n{query}"


def personalised_messages(messages: Sequence[dict], pref_text: str) -> list[dict]:
    """A chat as the PRM reads it: the preference before the content of the last user message."""
    out = [dict(m) for m in messages]
    last = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last is None:
        return [{"role": "user", "content": pref_text}, *out]
    out[last]["content"] = personalised(out[last]["content"], pref_text)
    return out


def chat_ids(tokenizer, content: str) -> list[int]:
    """The token ids of a one-turn chat ``content`` ready for the assistant's reply (the
    tokenizer's chat template; its raw text when it has none)."""
    if getattr(tokenizer, "chat_template", None) is None:
        return list(tokenizer(content).input_ids)
    out = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                        tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def response_ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def text_pair(tokenizer, query: str, pref_text: str, chosen: str, rejected: str) -> Pair:
    """A preference pair as the PRM is trained on it: the personalised prompt, the two replies."""
    return Pair(chat_ids(tokenizer, personalised(query, pref_text)), response_ids(tokenizer, chosen),
                response_ids(tokenizer, rejected))


@dataclass
class Decoded:
    texts: list[str]
    tokens: int
    """completion tokens over all queries"""
    seconds: float
    prm_calls: int = 0
    steps: int = 0

    def record(self) -> dict:
        return {"texts": self.texts, "tokens": self.tokens, "seconds": self.seconds, "prm_calls": self.prm_calls,
                "steps": self.steps}


def decode_queries(base, tokenizer, queries: Sequence[str], max_tokens: int, *, pref_text: str | None = None,
                   prm=None, prm_pref_text: str | None = None, k: int = 10, w: float = 1.0,
                   margin: float | None = None, temperature: float = 0.0, seed: int = 0,
                   one_at_a_time: bool = False, rm=None, rm_pref_text: str | None = None) -> Decoded:
    """Every query decoded in one batch (``one_at_a_time``: each alone, as a served request is):
    by the base model on the plain (or, with ``pref_text``, the personalised) prompt, or, with
    ``prm``, by PAD with the PRM on the prompt personalised by ``prm_pref_text``, or, with ``rm``
    (a sequence reward model), by ARGS with the reward model on the prompt personalised by
    ``rm_pref_text``."""
    if one_at_a_time:
        parts = [decode_queries(base, tokenizer, [q], max_tokens, pref_text=pref_text, prm=prm,
                                prm_pref_text=prm_pref_text, k=k, w=w, margin=margin, temperature=temperature,
                                seed=seed + i, rm=rm, rm_pref_text=rm_pref_text) for i, q in enumerate(queries)]
        return Decoded([t for p in parts for t in p.texts], sum(p.tokens for p in parts),
                       sum(p.seconds for p in parts), sum(p.prm_calls for p in parts), sum(p.steps for p in parts))
    prompts = [chat_ids(tokenizer, personalised(q, pref_text)) for q in queries]
    params = [SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed + i) for i in range(len(queries))]
    strategy = None
    if prm is not None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        strategy = PADStrategy(prm, [chat_ids(tokenizer, personalised(q, prm_pref_text)) for q in queries], k=k, w=w,
                               margin=margin, pad_id=pad)
    elif rm is not None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        strategy = ARGSStrategy(rm, [chat_ids(tokenizer, personalised(q, rm_pref_text)) for q in queries], k=k, w=w,
                                pad_id=pad)
    t0 = time.perf_counter()
    out = generate(base, tokenizer, prompts, params, strategy)
    seconds = time.perf_counter() - t0
    return Decoded([t for t, _, _ in out], sum(n for _, _, n in out), seconds,
                   getattr(strategy, "prm_calls", 0), strategy.steps if strategy else 0)


@torch.no_grad()
def sequence_reward(prm, base, tokenizer, queries: Sequence[str], candidates: Sequence[Sequence[str]],
                    pref_text: str) -> list[list[float]]:
    """PAD's reward summed over a whole reply, for Best-of-N: sum_t log pi_PRM(y_t | personalised
    prompt, y<t) - log pi_base(y_t | plain prompt, y<t), per query and candidate."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def logps(model, content_of) -> list[float]:
        rows = [(chat_ids(tokenizer, content_of(q)), response_ids(tokenizer, c))
                for q, cands in zip(queries, candidates) for c in cands]
        return response_logps(model, rows, pad, chunk=16).tolist()

    prm_lp = logps(prm, lambda q: personalised(q, pref_text))
    base_lp = logps(base, lambda q: q)
    flat = [a - b for a, b in zip(prm_lp, base_lp)]
    out, i = [], 0
    for cands in candidates:
        out.append(flat[i:i + len(cands)])
        i += len(cands)
    return out


@torch.no_grad()
def reply_nll(base, tokenizer, queries: Sequence[str], texts: Sequence[str]) -> list[float]:
    """The base model's negative log-likelihood per token of each reply given its plain query (the
    fluency guard: the model PAD steers, reading no preference, judges how natural the reply is);
    NaN for an empty reply."""
    from .prm import response_logps

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = [(chat_ids(tokenizer, q), response_ids(tokenizer, t)) for q, t in zip(queries, texts)]
    keep = [i for i, (_, r) in enumerate(rows) if r]
    out = [float("nan")] * len(rows)
    lp = response_logps(base, [rows[i] for i in keep], pad, chunk=16).tolist()
    for i, v in zip(keep, lp):
        out[i] = -v / len(rows[i][1])
    return out


def best_of_n(candidates: Sequence[Sequence[str]], rewards: Sequence[Sequence[float]]) -> list[str]:
    """Each query's candidate with the largest reward (the first of ties)."""
    return [c[max(range(len(r)), key=lambda j: r[j])] for c, r in zip(candidates, rewards)]


@torch.no_grad()
def reward_model_scores(model, tokenizer, query: str, replies: Sequence[str]) -> list[float]:
    """A sequence-classification reward model's score of each reply to ``query`` (its first logit):
    the exchange through the tokenizer's chat template when it has one, else query and reply on
    two lines (the GPT-2 reward models the paper evaluates with read plain text)."""
    out = []
    for reply in replies:
        if getattr(tokenizer, "chat_template", None) is not None:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": query},
                                                 {"role": "assistant", "content": reply}], tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            ids = list(tokenizer(f"{query}\n{reply}").input_ids)
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if limit:
            ids = ids[-int(limit):]
        out.append(float(model(input_ids=torch.tensor([ids], device=next(model.parameters()).device)).logits[0, 0]))
    return out
