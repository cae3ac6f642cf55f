"""Evaluation for the LLM studies: held-out loss, multiple-choice scoring by log-likelihood
(MMLU-style JSONL) and exact-match generation on held-out prompts. Plain torch + transformers."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..config import DataError
from .data import PackedRow, collate, iter_jsonl
from .loss import summed_token_loss


@torch.no_grad()
def heldout_loss(model, rows: Sequence[PackedRow], batch_size: int = 8) -> float:
    """Mean next-token loss per label token over packed rows."""
    model.eval()
    total, tokens = 0.0, 0
    for i in range(0, len(rows), batch_size):
        b = collate(rows[i:i + batch_size])
        logits = model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits
        s, n = summed_token_loss(logits, b["labels"])
        total, tokens = total + s.item(), tokens + n
    return total / max(tokens, 1)


@dataclass
class MCItem:
    question: str
    choices: list[str]
    answer: int


def read_mc_jsonl(path: str | Path) -> list[MCItem]:
    """``{"question": str, "choices": [str, ...], "answer": index or letter}`` per line."""
    items = []
    for where, rec in iter_jsonl(path):
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
            raise DataError(f"{where}: expected an object with a \"question\" string")
        choices = rec.get("choices")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise DataError(f"{where}: \"choices\" must be a list of at least two strings")
        answer = rec.get("answer")
        if isinstance(answer, str) and len(answer) == 1 and answer.isalpha():
            answer = ord(answer.upper()) - ord("A")
        if not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer < len(choices):
            raise DataError(f"{where}: \"answer\" must be a choice index or letter within the {len(choices)} choices")
        items.append(MCItem(rec["question"], choices, answer))
    if not items:
        raise DataError(f"{path} holds no questions")
    return items


def _prompt_ids(tokenizer, question: str | Sequence[dict[str, str]]) -> list[int]:
    """A generation prompt for one user turn, or for a conversation so far (a message list)."""
    messages = [{"role": "user", "content": question}] if isinstance(question, str) else list(question)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]


@torch.no_grad()
def choice_logprobs(model, tokenizer, question: str, choices: Sequence[str]) -> list[tuple[float, int]]:
    """(sum of log p(choice tokens | prompt), number of choice tokens) for each choice."""
    model.eval()
    prompt = _prompt_ids(tokenizer, question)
    out = []
    for choice in choices:
        cont = tokenizer(choice, add_special_tokens=False).input_ids
        ids = torch.tensor([prompt + cont])
        logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, :-1].float(), dim=-1)
        targets = ids[0, 1:]
        picked = logp[torch.arange(len(targets)), targets][len(prompt) - 1:]
        out.append((picked.sum().item(), len(cont)))
    return out


def mc_accuracy(model, tokenizer, items: Sequence[MCItem]) -> dict[str, float]:
    """Accuracy when the choice with the highest log-likelihood is picked, summed and per token."""
    hits_sum = hits_norm = 0
    for item in items:
        scores = choice_logprobs(model, tokenizer, item.question, item.choices)
        hits_sum += max(range(len(scores)), key=lambda i: scores[i][0]) == item.answer
        hits_norm += max(range(len(scores)), key=lambda i: scores[i][0] / max(scores[i][1], 1)) == item.answer
    return {"mc_accuracy": hits_sum / len(items), "mc_accuracy_per_token": hits_norm / len(items)}


@torch.no_grad()
def generate(model, tokenizer, question: str | Sequence[dict[str, str]], max_new_tokens: int = 32) -> str:
    """Greedy answer to one user turn (or a conversation so far), stopped at the end-of-turn marker or EOS."""
    model.eval()
    ids = torch.tensor([_prompt_ids(tokenizer, question)])
    stop = [t for t in {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
            if t is not None and t != tokenizer.unk_token_id]
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


def exact_match(model, tokenizer, pairs: Sequence[tuple[str | Sequence[dict[str, str]], str]],
                max_new_tokens: int = 32) -> dict:
    """Share of (question, reference) pairs whose greedy answer equals the reference (stripped)."""
    answers = [generate(model, tokenizer, q, max_new_tokens) for q, _ in pairs]
    hits = [a == ref.strip() for a, (_, ref) in zip(answers, pairs)]
    return {"exact_match": sum(hits) / len(pairs), "answers": answers}
