"""Causal-LM loss normalised per token across gradient accumulation (and data-parallel workers).

Averaging each micro-batch's mean loss weights a token in a short micro-batch more than one in a
long micro-batch, so the gradient (and its norm) depends on how a batch is split. Summing the
token losses of the whole optimiser step and dividing by the step's label-token count once makes
the step's gradient the same however the batch is split into micro-batches or workers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .data import IGNORE


def summed_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of next-token cross-entropies over label tokens, and how many there were."""
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    shift_labels = labels[:, 1:].reshape(-1)
    loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE, reduction="sum")
    return loss, int((shift_labels != IGNORE).sum())


def label_tokens(labels: torch.Tensor) -> int:
    """Label tokens a batch contributes to the loss (after the next-token shift)."""
    return int((labels[:, 1:] != IGNORE).sum())


def step_loss(loss_sum: torch.Tensor, step_tokens: int, world_size: int = 1) -> torch.Tensor:
    """A micro-batch's share of the step loss: its summed loss over the step's total label tokens
    (all micro-batches, all workers). ``world_size`` undoes the gradient averaging of DDP/ZeRO;
    an engine that also divides by the accumulation steps (DeepSpeed's ``backward``) must be told
    not to (``scale_wrt_gas=False``)."""
    return loss_sum * world_size / max(step_tokens, 1)
