"""GCG and I-GCG's automatic multi-coordinate update: a suffix of L tokens optimised so that a causal
LM, given a chat prompt that ends with the suffix, answers with a fixed target string.

The notation follows the papers (Zou et al. 2023 for GCG; Jia et al., ICLR 2025 for I-GCG):

- the prompt is ``before · s · after`` (the chat template and the user's message, the suffix
  ``s = s_1..s_L``, the template up to the reply) and the target ``y = y_1..y_T``;
- the loss ``L(s) = -1/T sum_k log p(y_k | before, s, after, y_<k)`` (mean token cross-entropy);
- GCG's coordinate gradient: the gradient of L with respect to the one-hot rows ``e_{s_i}``,
  an ``L x V`` matrix; the candidates for position i are the ``top_k`` tokens of ``-grad_i``
  (non-ASCII and special tokens masked);
- a step samples B single-token candidates (position ``i_b = floor(b L / B)``, spread evenly over
  the suffix, token drawn uniformly from that position's top-k), drops those that are not what the
  whole prompt is as text (``before`` + the suffix's text + ``after``, tokenised as one string,
  must give back exactly ``before · s · after``: :func:`retokenise`), scores the rest in batches
  and keeps the best;
- I-GCG (K > 1) takes the K best single-token candidates, builds the K merged suffixes
  cumulatively (merged_j = the current suffix with candidates 1..j's changes applied, a later one
  overwriting the same position), scores them and keeps the best, so a step changes between 1 and
  K tokens; K = 1 is GCG;
- the negative control draws the candidates' tokens uniformly from the allowed vocabulary
  (``guided=False``): the same update, the same number of candidates, no gradient.

Success is the target's exact greedy generation: every target token is the argmax of the logits
at its position given the target's earlier tokens (which is what greedy decoding produces when
it has produced those earlier tokens), read from the same forward pass as the loss; given a
``verify`` (the run's text check: the whole prompt as one string, greedy ``generate()`` in float32),
a run succeeds only at a step whose suffix also passes it, and goes on optimising otherwise.

The suffix owns the space between the request and itself (the official prompt is ``f"{goal}
{control}"``): the text before it ends with the request, and the suffix's first token carries the
space (``" ! ! ..."``), so the prompt's tokens and its text agree.

Plain torch on a Hugging Face causal LM: no Ray, no I/O. The prompt's ``before`` part is run once
and its key/value cache reused by every forward pass.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from ...llm.model import cache_keyword

MARK = "\x00SUFFIX\x00"
"""where the suffix goes in the rendered chat prompt (split out before tokenisation)"""


@dataclass(frozen=True)
class Layout:
    """A prompt's token ids around the suffix, and the target's; the texts around the suffix."""

    before: list[int]
    after: list[int]
    target: list[int]
    text: tuple[str, str] = ("", "")
    """(text before the suffix, text after it): what :func:`retokenise` pastes a suffix between"""


def render(tok, message: str, system: str | None = None) -> tuple[str, str]:
    """(text before the suffix, text after it) of the chat prompt whose user turn is ``message``
    followed by the suffix (whose text starts with its own space); a tokenizer without a chat
    template gets ``message suffix\\n``."""
    content = f"{message}{MARK}"
    if getattr(tok, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = f"{content}\n"
    before, sep, after = text.partition(MARK)
    if not sep:
        raise ValueError("the chat template dropped the user's message")
    return before, after


def layout(tok, message: str, target: str, system: str | None = None) -> Layout:
    before, after = render(tok, message, system)
    ids = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731 (the template holds its specials)
    lay = Layout(ids(before), ids(after), ids(target), (before, after))
    if not lay.target:
        raise ValueError("the target is empty")
    return lay


def allowed_tokens(tok, vocab: int) -> torch.Tensor:
    """[vocab] bool: tokens a suffix may hold, those that decode to non-empty printable ASCII and
    are not special (the official code's ``allow_non_ascii=False``); rows of the embedding past
    the tokenizer's vocabulary are not allowed."""
    ok = torch.zeros(vocab, dtype=torch.bool)
    special = set(tok.all_special_ids)
    for i in range(min(vocab, len(tok))):
        if i in special:
            continue
        s = tok.decode([i])
        ok[i] = bool(s) and s.isascii() and s.isprintable() and bool(s.strip())
    return ok


def init_suffix(tok, length: int, text: str = "!") -> list[int]:
    """The usual start, ``" ! ! ! ..."``: ``length`` copies of ``text``'s token, each after a space
    (the first one's space separates the suffix from the request), cut to ``length`` tokens."""
    ids = tok(" " + " ".join([text] * length), add_special_tokens=False).input_ids[:length]
    if len(ids) != length:
        raise ValueError(f"cannot build a {length}-token suffix from {text!r}")
    return ids


def retokenise(tok, candidates: torch.Tensor, current: torch.Tensor, lay: Layout | None = None) -> torch.Tensor:
    """The candidates that are what they say as text, minus any equal to the current suffix; [B', L].

    With ``lay``: the whole prompt, ``before`` + the candidate's decoded text + ``after`` tokenised
    as one string, must be exactly ``lay.before + candidate + lay.after`` (a token that merges with
    its neighbours, or with the request or the template around it, drops the candidate). Without:
    the candidate's text alone must tokenise back to the same L tokens."""
    L = candidates.shape[1]
    cur = current.tolist()
    kept = []
    for ids, text in zip(candidates.tolist(), tok.batch_decode(candidates)):
        if ids == cur:
            continue
        if lay is None:
            ok = tok(text, add_special_tokens=False).input_ids == ids
        else:
            ok = tok(lay.text[0] + text + lay.text[1], add_special_tokens=False).input_ids == lay.before + ids + lay.after
        if ok:
            kept.append(ids)
    return torch.tensor(kept, dtype=torch.long).reshape(len(kept), L)


def sample_candidates(current: torch.Tensor, grad: torch.Tensor | None, allowed: torch.Tensor, top_k: int,
                      batch: int, gen: torch.Generator) -> torch.Tensor:
    """B single-token changes of ``current`` [L]: position ``floor(b L / B)``, token uniform over
    that position's ``top_k`` of ``-grad`` (guided) or over the allowed vocabulary (``grad`` None:
    the random control); [B, L]."""
    L = current.shape[0]
    pos = (torch.arange(batch) * L // batch).long()
    if grad is None:
        pool = allowed.nonzero().squeeze(1)
        values = pool[torch.randint(len(pool), (batch,), generator=gen)]
    else:
        top = (-grad.float()).masked_fill(~allowed, -float("inf")).topk(top_k, dim=1).indices  # [L, k]
        values = top[pos, torch.randint(top_k, (batch,), generator=gen)]
    cands = current.repeat(batch, 1)
    cands[torch.arange(batch), pos] = values
    return cands


def merge(current: torch.Tensor, ranked: torch.Tensor) -> torch.Tensor:
    """I-GCG's merged suffixes: row j is ``current`` with the changes of ``ranked[0..j]`` applied in
    order (a later candidate overwrites a position an earlier one changed); [K, L]."""
    out, m = [], current.clone()
    for c in ranked:
        diff = c != current
        m = m.clone()
        m[diff] = c[diff]
        out.append(m)
    return torch.stack(out) if out else current[None][:0]


def _wide(x: torch.Tensor) -> torch.Tensor:
    """Logits in at least float32 for the loss (float16/bfloat16 ones are widened)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class Objective:
    """The target loss of a suffix for one prompt, batched, and its coordinate gradient.

    ``before`` runs once; each forward pass starts from a copy of its key/value cache, repeated over
    the batch of candidates (the cache object itself, so a sliding-window layer keeps its place)."""

    def __init__(self, model, lay: Layout, chunk: int = 64):
        self.model, self.chunk, self.target, self.layout = model, chunk, torch.tensor(lay.target), lay
        self._cache_kw = cache_keyword(model)
        self.embed = model.get_input_embeddings()
        self.W = self.embed.weight
        dev = self.W.device
        self.target = self.target.to(dev)
        # a model may scale its embeddings (Gemma: by sqrt(d)); a relaxed one-hot row must be too
        self.scale = getattr(self.embed, "embed_scale", 1.0)
        with torch.no_grad():
            self.after_emb = self.embed(torch.tensor(lay.after, device=dev))
            self.target_emb = self.embed(self.target)
            if not torch.allclose(self.target_emb, self.W[self.target] * self.scale):
                raise ValueError(f"{type(self.embed).__name__} is not a (scaled) lookup of its weight")
            if lay.before:
                out = model(input_ids=torch.tensor([lay.before], device=dev), use_cache=True)
                self.prefix = out[self._cache_kw]
            else:
                self.prefix = None

    @property
    def vocab(self) -> int:
        return self.W.shape[0]

    def _logits(self, suffix_emb: torch.Tensor) -> torch.Tensor:
        """[B, T, V] logits at the positions that predict the target's tokens."""
        B, T = suffix_emb.shape[0], self.target.shape[0]
        x = torch.cat([suffix_emb, self.after_emb.expand(B, -1, -1), self.target_emb.expand(B, -1, -1)], dim=1)
        cache = None
        if self.prefix is not None:  # a copy (a forward pass appends to it), one row per candidate
            cache = copy.deepcopy(self.prefix)
            cache.batch_repeat_interleave(B)
        out = self.model(inputs_embeds=x, use_cache=cache is not None, logits_to_keep=T + 1, **{self._cache_kw: cache})
        return out.logits[:, :T]

    def losses(self, suffixes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss [B], exact [B] bool) of a batch of suffixes [B, L], in chunks of ``chunk``."""
        if len(suffixes) == 0:  # (splitting an empty batch still yields one empty chunk)
            return torch.zeros(0), torch.zeros(0, dtype=torch.bool)
        losses, exact = [], []
        with torch.no_grad():
            for part in suffixes.to(self.W.device).split(self.chunk):
                lg = _wide(self._logits(self.embed(part)))
                tgt = self.target.expand(len(part), -1)
                losses.append(F.cross_entropy(lg.transpose(1, 2), tgt, reduction="none").mean(1).cpu())
                exact.append((lg.argmax(-1) == tgt).all(1).cpu())
        return torch.cat(losses), torch.cat(exact)

    def relaxed_loss(self, one_hot: torch.Tensor) -> torch.Tensor:
        """L of a relaxed suffix: rows of ``one_hot`` [L, V] weight the embedding rows (a one-hot
        row is a token, embedded as the model embeds it); a scalar with a graph back to ``one_hot``."""
        lg = _wide(self._logits((one_hot @ self.W * self.scale)[None]))
        return F.cross_entropy(lg[0], self.target)

    def gradient(self, suffix: torch.Tensor) -> torch.Tensor:
        """dL/d(one-hot suffix): [L, V]."""
        one_hot = torch.zeros(suffix.shape[0], self.vocab, dtype=self.W.dtype, device=self.W.device)
        one_hot[torch.arange(suffix.shape[0]), suffix.to(self.W.device)] = 1
        one_hot.requires_grad_(True)
        # only the one-hot rows' gradient: no weight gradients are computed or stored
        (grad,) = torch.autograd.grad(self.relaxed_loss(one_hot), one_hot)
        return grad.cpu()


@dataclass(frozen=True)
class Settings:
    K: int = 7
    """merged candidates per step (I-GCG); 1 is GCG"""
    top_k: int = 256
    batch: int = 256
    """single-token candidates per step (B)"""
    guided: bool = True
    """False: the random control (candidates drawn from the whole allowed vocabulary)"""
    steps: int = 500
    criterion: str = "exact"
    """"exact": the target is the greedy generation; "loss": the loss is below ``threshold``"""
    threshold: float = 0.5
    stop_on_success: bool = True


@dataclass
class Step:
    step: int
    loss: float
    exact: bool
    changed: int
    """tokens this step changed (0 at step 0 and when no candidate survived the filter)"""
    candidates: int
    """candidates scored (after the filter; merged ones included)"""
    seconds: float
    """since the optimisation started (wall clock)"""
    cpu_seconds: float = 0.0
    """CPU time this process spent since the optimisation started (``time.process_time``: what the
    step costs, whatever else shares the machine)"""
    verified: bool | None = None
    """the text check's answer where this step's suffix met the criterion (None: not checked)"""


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    suffix: list[int] = field(default_factory=list)
    """the suffix at the end (the one that succeeded, when one did)"""
    success_step: int | None = None
    """the first step whose suffix met the criterion and (given a ``verify``) passed the text check"""
    token_success_step: int | None = None
    """the first step whose suffix met the criterion on its token ids, verified or not"""
    failed_checks: int = 0
    """steps that met the criterion on token ids but failed the text check"""


def succeeded(s: Settings, loss: float, exact: bool) -> bool:
    return exact if s.criterion == "exact" else loss < s.threshold


def step(obj: Objective, tok, current: torch.Tensor, s: Settings, allowed: torch.Tensor,
         gen: torch.Generator) -> tuple[torch.Tensor, float, bool, int] | None:
    """One GCG / I-GCG step: (next suffix, its loss, its exactness, candidates scored), or None when
    no candidate survived the retokenisation filter."""
    grad = obj.gradient(current) if s.guided else None
    cands = retokenise(tok, sample_candidates(current, grad, allowed, s.top_k, s.batch, gen), current, obj.layout)
    if len(cands) == 0:
        return None
    loss, exact = obj.losses(cands)
    order = loss.argsort()
    if s.K == 1:
        return cands[order[0]], float(loss[order[0]]), bool(exact[order[0]]), len(cands)
    merged = merge(current, cands[order[:s.K]])
    # merged[0] is the best single candidate, already scored; the others pass the same filter
    rest = retokenise(tok, merged[1:], current, obj.layout)
    rest_loss, rest_exact = obj.losses(rest)
    pool = torch.cat([merged[:1], rest])
    mloss, mexact = torch.cat([loss[order[:1]], rest_loss]), torch.cat([exact[order[:1]], rest_exact])
    best = int(mloss.argmin())
    return pool[best], float(mloss[best]), bool(mexact[best]), len(cands) + len(rest)


def optimise(obj: Objective, tok, init: list[int], s: Settings, allowed: torch.Tensor, seed: int,
             on_step: Callable[[Step], None] | None = None,
             verify: Callable[[list[int]], bool] | None = None) -> Trace:
    """Run ``s.steps`` steps from ``init`` (stopping at the first success when ``stop_on_success``);
    step 0 is the initial suffix. ``verify(suffix ids)``: the text check a step's suffix must also
    pass to count as a success (run only on steps that meet the criterion; its time is counted)."""
    gen = torch.Generator().manual_seed(seed)
    current = torch.tensor(init, dtype=torch.long)
    t0, c0 = time.perf_counter(), time.process_time()
    loss, exact = obj.losses(current[None])
    trace = Trace()

    def record(i: int, loss: float, exact: bool, changed: int, n: int) -> bool:
        verified = None
        met = trace.success_step is None and succeeded(s, loss, exact)
        if met:
            trace.token_success_step = i if trace.token_success_step is None else trace.token_success_step
            verified = True if verify is None else bool(verify(current.tolist()))
            trace.failed_checks += not verified
        st = Step(i, loss, exact, changed, n, time.perf_counter() - t0, time.process_time() - c0,
                  None if verify is None or not met else verified)
        trace.steps.append(st)
        if on_step:
            on_step(st)
        if met and verified:
            trace.success_step = i
            return s.stop_on_success
        return False

    done = record(0, float(loss[0]), bool(exact[0]), 0, 1)
    for i in range(1, s.steps + 1):
        if done:
            break
        out = step(obj, tok, current, s, allowed, gen)
        if out is None:
            done = record(i, trace.steps[-1].loss, trace.steps[-1].exact, 0, 0)
            continue
        nxt, loss_i, exact_i, n = out
        changed = int((nxt != current).sum())
        current = nxt
        done = record(i, loss_i, exact_i, changed, n)
    trace.suffix = current.tolist()
    return trace
