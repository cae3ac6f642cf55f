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


def _chunk_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, reduction="sum")


def summed_token_loss(logits: torch.Tensor, labels: torch.Tensor, chunk: int = 0) -> tuple[torch.Tensor, int]:
    """Sum of next-token cross-entropies over label tokens (:func:`token_loss_sum`), and how many
    there were."""
    return token_loss_sum(logits, labels, chunk), label_tokens(labels)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """Sum of next-token cross-entropies over label tokens.

    The cross-entropy is taken in fp32. With ``chunk`` > 0 it is taken ``chunk`` positions at a
    time, each chunk recomputed in the backward pass (activation checkpointing), so the fp32 copy
    of the logits, its log-softmax and their gradients exist for one chunk at a time instead of for
    the whole micro-batch (micro-batch x sequence x vocabulary x 4 bytes, several times over: the
    largest activation of a long-sequence, large-vocabulary model). The loss and its gradient are
    the same either way."""
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1)
    if chunk <= 0 or shift_logits.shape[0] <= chunk:
        loss = _chunk_loss(shift_logits, shift_labels)
    else:
        from torch.utils.checkpoint import checkpoint

        loss = sum(checkpoint(_chunk_loss, shift_logits[i:i + chunk], shift_labels[i:i + chunk], use_reentrant=False)
                   for i in range(0, shift_logits.shape[0], chunk))
    return loss


def label_tokens(labels: torch.Tensor) -> int:
    """Label tokens a batch contributes to the loss (after the next-token shift)."""
    return int((labels[:, 1:] != IGNORE).sum())


def step_loss(loss_sum: torch.Tensor, step_tokens: int, world_size: int = 1) -> torch.Tensor:
    """A micro-batch's share of the step loss: its summed loss over the step's total label tokens
    (all micro-batches, all workers). ``world_size`` undoes the gradient averaging of DDP/ZeRO;
    an engine that also divides by the accumulation steps (DeepSpeed's ``backward``) must be told
    not to (``scale_wrt_gas=False``)."""
    return loss_sum * world_size / max(step_tokens, 1)
