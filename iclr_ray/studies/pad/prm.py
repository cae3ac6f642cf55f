"""The personalised reward model's training as a recipe of the shared Train loop: DPO on preference
pairs whose prompt carries the preference as text (dpo.py holds the objective). No I/O; Ray only
to resolve object refs in the worker.

Each pair is (prompt, chosen, rejected) as token ids. A micro-batch holds its pairs' chosen
sequences, then their rejected ones, right-padded with an attention mask, labels on the response
tokens only. The reference model is the policy's own starting point (the same ``cfg.model``, the
same seed), so its log-probabilities are computed once and cached: given (``ref_logps``, computed
before training, as the study does in parallel Ray tasks with :func:`pair_logps`) or, without them,
once per worker at the first step. The reference is never run during training. The loss of a micro-batch is the sum of its pairs' DPO losses;
its units are pairs (the loop divides by the step's pairs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...llm.data import IGNORE
from ...llm.recipe import Recipe, TrainConfig, build_causal_lm, resolve, save_hf, step_rows


@dataclass
class Pair:
    prompt: list[int]
    chosen: list[int]
    rejected: list[int]


def collate_responses(rows: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, Any]:
    """(prompt, response) token lists right-padded into one batch: input_ids, attention_mask and
    labels [N, T] (IGNORE on the prompt and the padding)."""
    import torch

    width = max(len(a) + len(b) for a, b in rows)
    ids, mask, labels = [], [], []
    for prompt, resp in rows:
        n = len(prompt) + len(resp)
        ids.append(prompt + resp + [pad_id] * (width - n))
        mask.append([1] * n + [0] * (width - n))
        labels.append([IGNORE] * len(prompt) + resp + [IGNORE] * (width - n))
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask), "labels": torch.tensor(labels)}


def collate_pairs(pairs: Sequence[Pair], pad_id: int) -> dict[str, Any]:
    """Chosen sequences (prompt + chosen) then rejected ones, as :func:`collate_responses`, [2B, T]."""
    return collate_responses([(p.prompt, p.chosen) for p in pairs] + [(p.prompt, p.rejected) for p in pairs], pad_id)


def response_logps(model, rows: Sequence[tuple[list[int], list[int]]], pad_id: int, chunk: int = 32):
    """log pi(response | prompt) of every (prompt, response) under ``model``, [N] (float64)."""
    import torch

    from .dpo import sequence_logps

    out = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, len(rows), chunk):
            b = {k: v.to(device) for k, v in collate_responses(rows[lo:lo + chunk], pad_id).items()}
            out.append(sequence_logps(model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                                            use_cache=False).logits, b["labels"]).double().cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def pair_logps(model, pairs: Sequence[Pair], pad_id: int, chunk: int = 32):
    """log pi(y_w|x) and log pi(y_l|x) of every pair under ``model``, [N, 2] (float64)."""
    import torch

    rows = [(p.prompt, p.chosen) for p in pairs] + [(p.prompt, p.rejected) for p in pairs]
    lp = response_logps(model, rows, pad_id, chunk)
    return torch.stack([lp[:len(pairs)], lp[len(pairs):]], dim=1) if pairs else torch.zeros((0, 2), dtype=torch.float64)


def swap_labels(pairs: Sequence[Pair], ref_logps, swaps) -> tuple[list[Pair], Any]:
    """The label-shuffled control's pairs and reference log-probabilities: chosen and rejected
    exchanged where ``swaps`` is True, the reference's two columns with them (numpy [N, 2])."""
    import numpy as np

    swaps = np.asarray(swaps, dtype=bool)
    out = [Pair(p.prompt, p.rejected, p.chosen) if s else p for p, s in zip(pairs, swaps)]
    ref = np.asarray(ref_logps)
    return out, np.ascontiguousarray(np.where(swaps[:, None], ref[:, ::-1], ref))


def freeze_below(model, trainable_layers: int) -> None:
    """Leave only the top ``trainable_layers`` decoder blocks trainable (0: all of the model)."""
    if trainable_layers <= 0:
        return
    from ...llm.model import decoder_blocks

    for p in model.parameters():
        p.requires_grad = False
    for block in decoder_blocks(model)[-trainable_layers:]:
        for p in block.parameters():
            p.requires_grad = True


class DPORecipe(Recipe):
    """DPO of a causal LM against its own starting point (``cfg.model``: a named tiny model, a
    packaged model, a checkpoint folder or an HF id), ``pairs`` (a list of :class:`Pair`, or an
    object ref to one) in a deterministic per-epoch order; ``ref_logps`` ([N, 2] or a ref to it):
    the reference's log-probabilities, when computed beforehand."""

    def __init__(self, pairs, tokenizer_files: dict[str, bytes], beta: float = 0.1, ref_logps=None,
                 trainable_layers: int = 0):
        self.pairs_ref, self.tokenizer_files, self.beta = pairs, tokenizer_files, beta
        self.ref_ref, self.trainable_layers = ref_logps, trainable_layers
        self._ref_logps = None

    def setup(self) -> None:
        from ...llm.recipe import load_tokenizer

        self.pairs: list[Pair] = resolve(self.pairs_ref)
        self.tokenizer = load_tokenizer(self.tokenizer_files)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        given = resolve(self.ref_ref)
        if given is not None:
            import torch

            self._ref_logps = torch.as_tensor(given, dtype=torch.float64)
            if tuple(self._ref_logps.shape) != (len(self.pairs), 2):
                raise ValueError(f"ref_logps has shape {tuple(self._ref_logps.shape)}; the pairs need "
                                 f"({len(self.pairs)}, 2)")

    def build_model(self, cfg: TrainConfig):
        model = build_causal_lm(cfg, self.tokenizer)
        freeze_below(model, self.trainable_layers)
        return model

    def _micro_batches(self, step: int, cfg: TrainConfig) -> list[list[int]]:
        """The pair indices of each micro-batch of ``step`` (a seeded permutation per epoch)."""
        idx = step_rows(list(range(len(self.pairs))), step, cfg, cfg.seed)
        return [idx[i:i + cfg.micro_batch_size] for i in range(0, len(idx), cfg.micro_batch_size)]

    def reference_logps(self, cfg: TrainConfig):
        """log pi_ref of every pair's chosen and rejected response, [N, 2], computed once."""
        if self._ref_logps is None:
            self._ref_logps = pair_logps(build_causal_lm(cfg, self.tokenizer).eval(), self.pairs, self.pad_id)
        return self._ref_logps

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        ref = self.reference_logps(cfg)
        out = []
        for idx in self._micro_batches(step, cfg):
            b = collate_pairs([self.pairs[i] for i in idx], self.pad_id)
            b["ref_chosen"], b["ref_rejected"] = ref[idx, 0].float(), ref[idx, 1].float()
            out.append((b, int(b["attention_mask"].sum())))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        from .dpo import dpo_losses, sequence_logps

        logits = engine(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
        lp = sequence_logps(logits, batch["labels"])
        n = len(batch["ref_chosen"])
        losses, _, _ = dpo_losses(lp[:n], lp[n:], batch["ref_chosen"], batch["ref_rejected"], self.beta)
        return losses.sum()

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["ref_chosen"])

    def save(self, engine, path, rank: int, zero_stage: int) -> None:
        save_hf(engine, self.tokenizer, path / "model", rank, zero_stage)

    def seq_len(self) -> int:
        return max((len(p.prompt) + max(len(p.chosen), len(p.rejected)) for p in self.pairs), default=0)


# ----------------------------------------------------------------------------- ARGS's reward model


def reward_model_from(lm):
    """A sequence reward model built on a causal LM: the same transformer (its weights copied) with a
    scalar head on the last real token's hidden state (transformers' ``...ForSequenceClassification``
    of the LM's own architecture, one label). ARGS (Khanov et al., 2024), the method PAD builds on,
    guides decoding with such a model's score of every candidate continuation."""
    from transformers import AutoModelForSequenceClassification

    cfg = lm.config.__class__.from_dict(lm.config.to_dict())
    cfg.num_labels = 1
    if cfg.pad_token_id is None:
        cfg.pad_token_id = cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else 0
    rm = AutoModelForSequenceClassification.from_config(cfg)
    prefix = rm.base_model_prefix
    getattr(rm, prefix).load_state_dict(getattr(lm, prefix).state_dict())
    import torch

    with torch.no_grad():  # it starts indifferent: every reply scores 0, the Bradley-Terry loss log 2
        for p in rm.score.parameters():
            p.zero_()
    return rm


def trunk(rm):
    """The reward model's transformer (hidden states out) and its scalar head."""
    return getattr(rm, rm.base_model_prefix), rm.score


def sequence_rewards(rm, input_ids, attention_mask):
    """The reward of every right-padded row, read at its last real token, [N] (float32)."""
    import torch

    body, head = trunk(rm)
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    last = attention_mask.sum(1) - 1
    return head(hidden[torch.arange(len(last), device=hidden.device), last]).squeeze(-1).float()


def bradley_terry_losses(r_chosen, r_rejected):
    """-log sigmoid(r(x, y_w) - r(x, y_l)) per pair: the reward model's preference loss."""
    import torch.nn.functional as F

    return -F.logsigmoid(r_chosen - r_rejected)


class RewardModelRecipe(DPORecipe):
    """ARGS's reward model, trained on the PRM's own pairs (the same personalised prompts, chosen and
    rejected replies, order and steps) by the Bradley-Terry loss, from the same starting point plus
    a fresh scalar head (zero at the start: the loss starts at log 2). No reference model."""

    def __init__(self, pairs, tokenizer_files: dict[str, bytes], trainable_layers: int = 0):
        super().__init__(pairs, tokenizer_files, trainable_layers=trainable_layers)

    def build_model(self, cfg: TrainConfig):
        rm = reward_model_from(build_causal_lm(cfg, self.tokenizer))
        freeze_below(rm, self.trainable_layers)
        if self.trainable_layers > 0:
            for p in rm.score.parameters():
                p.requires_grad = True
        return rm

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        out = []
        for idx in self._micro_batches(step, cfg):
            b = collate_pairs([self.pairs[i] for i in idx], self.pad_id)  # chosen rows, then rejected ones
            out.append(({"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]},
                        int(b["attention_mask"].sum())))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        r = sequence_rewards(engine.module if hasattr(engine, "module") else engine, batch["input_ids"],
                             batch["attention_mask"])
        n = len(r) // 2
        return bradley_terry_losses(r[:n], r[n:]).sum()

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["input_ids"]) // 2


def reward_accuracy(rm, pairs: Sequence[Pair], pad_id: int, chunk: int = 16) -> float:
    """The share of pairs whose chosen reply the reward model scores above the rejected one."""
    import torch

    device = next(rm.parameters()).device
    right = 0
    with torch.no_grad():
        for lo in range(0, len(pairs), chunk):
            part = pairs[lo:lo + chunk]
            b = collate_pairs(part, pad_id)
            r = sequence_rewards(rm, b["input_ids"].to(device), b["attention_mask"].to(device))
            right += int((r[:len(part)] > r[len(part):]).sum())
    return right / max(1, len(pairs))
