"""The personalised reward model's training objective: DPO (Rafailov et al. 2023) read at the token
level, as PAD trains its PRM. No Ray, no I/O.

A policy pi_theta is trained against a frozen reference pi_ref on pairs (x, y_w, y_l) whose prompt
x carries the user's preference as text. With log pi(y|x) the sum of the response's token
log-probabilities,

    L = -log sigmoid(beta * [(log pi_theta(y_w|x) - log pi_ref(y_w|x)) - (log pi_theta(y_l|x) - log pi_ref(y_l|x))])

and the trained policy defines a token-level reward beta * log pi_theta(a|s) / pi_ref(a|s) that
depends on the preference in s: one model for every preference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...llm.data import IGNORE


def token_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label_t | tokens < t) at every position with a label (0 where the label is IGNORE),
    [B, T-1]: the next-token shift of causal LMs."""
    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    mask = shift_labels != IGNORE
    picked = torch.gather(F.log_softmax(shift_logits, dim=-1), 2, shift_labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked * mask


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log pi(y|x) per row: the sum over the response's (labelled) tokens, [B]."""
    return token_logps(logits, labels).sum(-1)


def dpo_losses(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
               ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per pair: the DPO loss and the implicit rewards beta * (log pi - log pi_ref) of the chosen and
    the rejected response (the sequence log-probabilities from :func:`sequence_logps`)."""
    chosen = beta * (policy_chosen - ref_chosen)
    rejected = beta * (policy_rejected - ref_rejected)
    return -F.logsigmoid(chosen - rejected), chosen.detach(), rejected.detach()


def token_rewards(policy_logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor,
                  beta: float) -> torch.Tensor:
    """beta * log pi_theta(a_t|s_t) / pi_ref(a_t|s_t) at every labelled position, [B, T-1]."""
    return beta * (token_logps(policy_logits, labels) - token_logps(ref_logits, labels))
