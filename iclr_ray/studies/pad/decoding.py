"""PAD decoding (Chen et al., ICLR 2025): a frozen base model guided, token by token, by a
personalised reward model (PRM) that reads the same generation after a prompt carrying the user's
preference. No Ray, no I/O.

At every step, over the base model's top-k next tokens a with logits l_base(a), and the PRM's
next-token logits l_prm(a) on the same k tokens:

    r(a) = log_softmax_k(l_prm)(a) - log_softmax_k(l_base)(a)
    score(a) = l_base(a) + w * r(a)

and the next token is argmax score (greedy) or a draw from softmax(score / T) over the k. So w = 0
is the base model's own choice among its top k (its greedy output at T = 0), and k = 1 leaves no
choice (PAD is a no-op). Both hold exactly, and the tests check them.

The PRM is the expensive part (a second forward pass per token). :class:`PADStrategy` can skip it
where the base model is sure: when every active row's top-2 logit margin is at least ``margin``,
the base's argmax is taken without calling the PRM (the tokens are fed to the PRM's cache at its
next call). ``margin=None`` calls it at every step.

:class:`PADStrategy` plugs into the serving decoder (``serve.decoding``: batched, KV-cached,
per-request sampling parameters), so the same code decodes in a study and behind Serve.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from ...serve.decoding import SamplingParams, Strategy, cache_keyword


def pad_scores(base_logits: torch.Tensor, prm_logits: torch.Tensor, k: int,
               w: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(top-k token ids [B, k], scores [B, k], rewards r [B, k]) for a batch of next-token logits
    of the base model and the PRM ([B, V], same vocabulary)."""
    top = base_logits.float().topk(k, dim=-1)
    base_k = top.values
    prm_k = torch.gather(prm_logits.float(), -1, top.indices)
    reward = F.log_softmax(prm_k, dim=-1) - F.log_softmax(base_k, dim=-1)
    return top.indices, base_k + w * reward, reward


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """The gap between each row's largest and second largest logit, [B]."""
    top = logits.float().topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


class PADStrategy(Strategy):
    """PAD as a decoding strategy of ``serve.decoding.decode``: the base model's logits come in,
    the PRM (run here on ``prm_prompts``, one token list per row, left-padded into one batch with
    its own KV cache) re-scores their top k."""

    name = "pad"

    def __init__(self, prm, prm_prompts: Sequence[Sequence[int]], k: int = 10, w: float = 1.0,
                 margin: float | None = None, pad_id: int = 0):
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.prm, self.k, self.w, self.margin = prm, k, w, margin
        self.device = next(prm.parameters()).device
        width = max(len(p) for p in prm_prompts)
        self.pending = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prm_prompts], device=self.device)
        self.mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prm_prompts], device=self.device)
        self.past = None
        self.cache_kw = cache_keyword(prm)
        self.steps = 0
        self.prm_calls = 0
        self.rewards: list[torch.Tensor] = []
        """per step where the PRM ran: r over the top k of every row (diagnostics)"""

    @torch.no_grad()
    def _prm_logits(self) -> torch.Tensor:
        """Feed the PRM everything it has not seen (the prompts at first, then the tokens chosen
        since its last call) and return its next-token logits, [B, V]."""
        n = self.pending.shape[1]
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)[:, -n:]
        out = self.prm(input_ids=self.pending, attention_mask=self.mask, position_ids=positions, use_cache=True,
                       **({self.cache_kw: self.past} if self.past is not None else {}))
        self.past = out[self.cache_kw]
        self.pending = self.pending[:, :0]
        self.prm_calls += 1
        return out.logits[:, -1, :].float().cpu()

    def next_tokens(self, logits: torch.Tensor, params: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator]) -> torch.Tensor:
        self.steps += 1
        logits = logits.float()
        k = min(self.k, logits.shape[-1])
        if self.margin is not None and bool((top2_margin(logits) >= self.margin).all()):
            choice = logits.argmax(-1)  # the base is sure everywhere: no PRM call
            sampled = [i for i, p in enumerate(params) if p.temperature > 0]
            for i in sampled:  # a sampled row still samples, from the base's own top k
                top = logits[i].topk(k)
                j = torch.multinomial(torch.softmax(top.values / params[i].temperature, -1), 1, generator=generators[i])
                choice[i] = top.indices[j]
        else:
            ids, scores, reward = pad_scores(logits, self._prm_logits(), k, self.w)
            self.rewards.append(reward)
            choice = torch.empty(len(params), dtype=torch.long)
            for i, p in enumerate(params):
                if p.temperature == 0:
                    choice[i] = ids[i, int(scores[i].argmax())]
                else:
                    j = torch.multinomial(torch.softmax(scores[i] / p.temperature, -1), 1, generator=generators[i])
                    choice[i] = ids[i, int(j)]
        self.pending = torch.cat([self.pending, choice.view(-1, 1).to(self.device)], dim=1)
        self.mask = torch.cat([self.mask, torch.ones((len(params), 1), dtype=self.mask.dtype, device=self.device)],
                              dim=1)
        return choice


class ARGSStrategy(Strategy):
    """ARGS (Khanov et al., ICLR 2024), the reward-guided decoding PAD builds on, as a baseline: over
    the base model's top k next tokens a, score(a) = l_base(a) + w * R([x_p, y<t, a]) with R a
    sequence reward model reading the personalised prompt x_p and the reply so far plus a; greedy
    (or sampled from softmax(score / T)) over the k. The reward model keeps a KV cache of its prompt
    and the chosen tokens; the k candidates of a step are scored in one forward pass over a copy of
    that cache repeated k times per row, so a step costs the reward model k new tokens, not k whole
    sequences. w = 0 and k = 1 give the base model's greedy output exactly."""

    name = "args"

    def __init__(self, rm, rm_prompts: Sequence[Sequence[int]], k: int = 10, w: float = 1.0, pad_id: int = 0):
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        from .prm import trunk

        self.rm, self.k, self.w = rm, k, w
        self.body, self.head = trunk(rm)
        self.device = next(rm.parameters()).device
        width = max(len(p) for p in rm_prompts)
        self.pending = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in rm_prompts], device=self.device)
        self.mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rm_prompts], device=self.device)
        self.past = None
        self.steps = 0
        self.rewards: list[torch.Tensor] = []
        """per step: R of every row's top-k candidates (diagnostics)"""

    def _positions(self, n: int) -> torch.Tensor:
        return (self.mask.cumsum(-1) - 1).clamp(min=0)[:, -n:]

    @torch.no_grad()
    def candidate_rewards(self, candidates: torch.Tensor) -> torch.Tensor:
        """R of each row's prompt and tokens so far followed by each of its candidates [B, k] -> [B, k]:
        the pending tokens go into the cache first, then the candidates against k copies of it."""
        import copy

        out = self.body(input_ids=self.pending, attention_mask=self.mask, position_ids=self._positions(
            self.pending.shape[1]), use_cache=True, **({"past_key_values": self.past} if self.past is not None else {}))
        self.past = out.past_key_values
        self.pending = self.pending[:, :0]
        b, k = candidates.shape
        branch = copy.deepcopy(self.past)
        branch.batch_repeat_interleave(k)
        mask = torch.cat([self.mask, torch.ones((b, 1), dtype=self.mask.dtype, device=self.device)], 1)
        pos = (mask.cumsum(-1) - 1)[:, -1:]
        h = self.body(input_ids=candidates.reshape(b * k, 1).to(self.device),
                      attention_mask=mask.repeat_interleave(k, 0), position_ids=pos.repeat_interleave(k, 0),
                      past_key_values=branch, use_cache=True).last_hidden_state[:, -1]
        return self.head(h).reshape(b, k).float().cpu()

    def next_tokens(self, logits: torch.Tensor, params: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator]) -> torch.Tensor:
        self.steps += 1
        top = logits.float().topk(min(self.k, logits.shape[-1]), dim=-1)
        reward = self.candidate_rewards(top.indices)
        self.rewards.append(reward)
        scores = top.values + self.w * reward
        choice = torch.empty(len(params), dtype=torch.long)
        for i, p in enumerate(params):
            if p.temperature == 0:
                choice[i] = top.indices[i, int(scores[i].argmax())]
            else:
                j = torch.multinomial(torch.softmax(scores[i] / p.temperature, -1), 1, generator=generators[i])
                choice[i] = top.indices[i, int(j)]
        self.pending = torch.cat([self.pending, choice.view(-1, 1).to(self.device)], dim=1)
        self.mask = torch.cat([self.mask, torch.ones((len(params), 1), dtype=self.mask.dtype, device=self.device)],
                              dim=1)
        return choice
