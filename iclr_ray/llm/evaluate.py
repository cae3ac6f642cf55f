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


def choice_logprobs(model, tokenizer, question: str, choices: Sequence[str]) -> list[tuple[float, int]]:
    """(sum of log p(choice tokens | prompt), number of choice tokens) for each choice."""
    return batched_choice_logprobs(model, tokenizer, [MCItem(question, list(choices), 0)])[0]


@torch.no_grad()
def batched_choice_logprobs(model, tokenizer, items: Sequence[MCItem],
                            batch_size: int = 32) -> list[list[tuple[float, int]]]:
    """:func:`choice_logprobs` of every item, the (prompt + choice) sequences right-padded into
    batches: causal attention keeps the padding out of every real position's logits. The batches go
    to the model's device; the sums come back to the host."""
    model.eval()
    device = next(model.parameters()).device
    seqs: list[tuple[list[int], int, int]] = []  # ids, prompt length, choice length
    for item in items:
        prompt = _prompt_ids(tokenizer, item.question)
        for choice in item.choices:
            cont = tokenizer(choice, add_special_tokens=False).input_ids
            seqs.append((prompt + cont, len(prompt), len(cont)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    flat: list[tuple[float, int]] = []
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        width = max(len(ids) for ids, _, _ in chunk)
        ids = torch.tensor([s + [pad] * (width - len(s)) for s, _, _ in chunk], device=device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s, _, _ in chunk], device=device)
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float(), dim=-1)
        sums = []
        for row, (s, n_prompt, n_cont) in enumerate(chunk):
            targets = torch.tensor(s[n_prompt:], device=device)
            sums.append(logp[row, torch.arange(n_prompt - 1, len(s) - 1, device=device), targets].sum())
        flat += [(v, n_cont) for v, (_, _, n_cont) in zip(torch.stack(sums).cpu().tolist(), chunk)]
    out, k = [], 0
    for item in items:
        out.append(flat[k:k + len(item.choices)])
        k += len(item.choices)
    return out


def mc_accuracy(model, tokenizer, items: Sequence[MCItem], batch_size: int = 32) -> dict[str, float]:
    """Accuracy when the choice with the highest log-likelihood is picked, summed and per token."""
    hits_sum = hits_norm = 0
    for item, scores in zip(items, batched_choice_logprobs(model, tokenizer, items, batch_size)):
        hits_sum += max(range(len(scores)), key=lambda i: scores[i][0]) == item.answer
        hits_norm += max(range(len(scores)), key=lambda i: scores[i][0] / max(scores[i][1], 1)) == item.answer
    return {"mc_accuracy": hits_sum / len(items), "mc_accuracy_per_token": hits_norm / len(items)}


def _stop_ids(tokenizer) -> list[int]:
    return [t for t in {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
            if t is not None and t != tokenizer.unk_token_id]


def generate(model, tokenizer, question: str | Sequence[dict[str, str]], max_new_tokens: int = 32) -> str:
    """Greedy answer to one user turn (or a conversation so far), stopped at the end-of-turn marker or EOS."""
    return generate_batch(model, tokenizer, [question], max_new_tokens)[0]


@torch.no_grad()
def generate_batch(model, tokenizer, questions: Sequence[str | Sequence[dict[str, str]]], max_new_tokens: int = 32,
                   batch_size: int = 32) -> list[str]:
    """:func:`generate` for many prompts at once: left-padded batches through ``model.generate``
    (the attention mask gives each row its own positions), so each answer is the one it would get
    alone. The prompts go to the model's device; the answers' ids come back to the host."""
    model.eval()
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    answers: list[str] = []
    for i in range(0, len(questions), batch_size):
        prompts = [_prompt_ids(tokenizer, q) for q in questions[i:i + batch_size]]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=_stop_ids(tokenizer), pad_token_id=pad).cpu()
        answers += [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in out]
    return answers


def exact_match(model, tokenizer, pairs: Sequence[tuple[str | Sequence[dict[str, str]], str]],
                max_new_tokens: int = 32, batch_size: int = 32) -> dict:
    """Share of (question, reference) pairs whose greedy answer equals the reference (stripped)."""
    answers = generate_batch(model, tokenizer, [q for q, _ in pairs], max_new_tokens, batch_size)
    hits = [a == ref.strip() for a, (_, ref) in zip(answers, pairs)]
    return {"exact_match": sum(hits) / len(pairs), "answers": answers}
