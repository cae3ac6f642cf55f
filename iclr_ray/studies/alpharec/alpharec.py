"""AlphaRec and its ID-based baselines (torch; no Ray, no I/O), in the paper's notation.

- AlphaRec (Sheng et al., 2025): the frozen language embedding of an item's title, e_i, and of a
  user, e_u = the mean of the user's training items' e_i, go through one 2-layer MLP
  (Linear(d, r d), LeakyReLU, Linear(r d, 64)); LightGCN propagation (L layers over the
  symmetric-normalised user-item graph, the mean of layers 0..L); InfoNCE with cosine similarity,
  temperature tau and N sampled negatives; ranking by cosine. ``linear=True`` is the paper's
  linear-mapping variant (one bias-free Linear(d, 64)).
- MF-BPR, LightGCN-BPR (He et al., 2020) and XSimGCL (Yu et al., 2023: LightGCN with uniform noise
  added at every layer and an InfoNCE between a layer's view and the final one).
- The full-ranking evaluator: Recall@K, NDCG@K and HR@K per user, vectorised in torch, the user's
  known interactions masked.
- ``fold_in``: a new user (a history of catalogue items and free-text titles) added to the
  trained graph, as the recommendation endpoint serves zero-shot users.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

INFO_NCE_KINDS = ("alpharec", "linear")
"""the model kinds built on language representations and trained with InfoNCE (the rest: BPR)"""
BUNDLE = "alpharec_bundle.pt"
"""what ``iclr-ray serve recommend`` loads: one trained AlphaRec with its catalogue and graph"""


# ----------------------------------------------------------------------------- the graph


def norm_adj(n_users: int, n_items: int, users: np.ndarray, items: np.ndarray) -> torch.Tensor:
    """The symmetric-normalised adjacency D^-1/2 A D^-1/2 of the bipartite user-item graph, users as
    nodes 0..n_users-1 and items after them, as a coalesced sparse tensor (duplicate edges counted
    once)."""
    pairs = np.unique(np.stack([np.asarray(users, np.int64), np.asarray(items, np.int64)]), axis=1)
    u, i = pairs[0], pairs[1] + n_users
    rows, cols = np.concatenate([u, i]), np.concatenate([i, u])
    n = n_users + n_items
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    inv = np.zeros(n)
    inv[deg > 0] = deg[deg > 0] ** -0.5
    vals = inv[rows] * inv[cols]
    return torch.sparse_coo_tensor(torch.from_numpy(np.stack([rows, cols])), torch.tensor(vals, dtype=torch.float32),
                                   (n, n), check_invariants=True).coalesce()


def propagate(adj: torch.Tensor, e0: torch.Tensor, layers: int, include_0: bool = True) -> torch.Tensor:
    """LightGCN: the mean of E^(l) = A E^(l-1) over l = 0..L (over 1..L without layer 0)."""
    out, e = ([e0] if include_0 else []), e0
    for _ in range(layers):
        e = adj @ e
        out.append(e)
    return torch.stack(out).mean(0)


# ----------------------------------------------------------------------------- the models


def mlp_hidden(d: int, hidden_ratio: float, mlp_weights: int | None = None) -> int:
    """The MLP's hidden width for a d-wide LM: ``mlp_weights / d`` when a weight budget is given (the
    official multipliers 8, 2, 1/2 and 9/32 for 768-, 1536-, 3072- and 4096-d LMs all keep the first
    layer at 3072 x 1536 weights, so every LM gets about the same parameter count), else
    ``hidden_ratio * d``."""
    h = mlp_weights / d if mlp_weights else hidden_ratio * d
    return max(1, int(round(h)))


class AlphaRec(nn.Module):
    """Language representations -> MLP (or the linear map) -> LightGCN; scored by cosine."""

    def __init__(self, item_lm: torch.Tensor, user_lm: torch.Tensor, adj: torch.Tensor, layers: int = 2,
                 hidden_ratio: float = 0.5, dim: int = 64, linear: bool = False, mlp_weights: int | None = None):
        super().__init__()
        d = item_lm.shape[1]
        self.register_buffer("item_lm", item_lm.float(), persistent=False)
        self.register_buffer("user_lm", user_lm.float(), persistent=False)
        self.register_buffer("adj", adj, persistent=False)  # a buffer: it moves with the model to a GPU
        self.layers, self.n_users = layers, user_lm.shape[0]
        if linear:
            self.mlp = nn.Sequential(nn.Linear(d, dim, bias=False))
        else:
            hidden = mlp_hidden(d, hidden_ratio, mlp_weights)
            self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.LeakyReLU(), nn.Linear(hidden, dim))

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        e0 = torch.cat([self.mlp(self.user_lm), self.mlp(self.item_lm)])
        out = propagate(self.adj, e0, self.layers)
        return out[:self.n_users], out[self.n_users:]


class MF(nn.Module):
    """Matrix factorisation: free user and item embeddings, scored by the dot product."""

    def __init__(self, n_users: int, n_items: int, dim: int = 64, init_std: float = 0.1):
        super().__init__()
        self.n_users = n_users
        self.emb = nn.Parameter(torch.randn(n_users + n_items, dim) * init_std)

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.emb[:self.n_users], self.emb[self.n_users:]


class LightGCN(MF):
    def __init__(self, n_users: int, n_items: int, adj: torch.Tensor, layers: int = 2, dim: int = 64,
                 init_std: float = 0.1):
        super().__init__(n_users, n_items, dim, init_std)
        self.register_buffer("adj", adj, persistent=False)
        self.layers = layers

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = propagate(self.adj, self.emb, self.layers)
        return out[:self.n_users], out[self.n_users:]


class XSimGCL(MF):
    """LightGCN whose every layer adds sign(E) * eps * (uniform noise of unit norm); the layers 1..L
    averaged (XSimGCL drops layer 0); the contrastive view is layer ``cl_layer``."""

    def __init__(self, n_users: int, n_items: int, adj: torch.Tensor, layers: int = 2, dim: int = 64,
                 eps: float = 0.2, cl_layer: int = 1, init_std: float = 0.1):
        super().__init__(n_users, n_items, dim, init_std)
        self.register_buffer("adj", adj, persistent=False)
        self.layers, self.eps, self.cl_layer = layers, eps, cl_layer

    def views(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        e, out, view = self.emb, [], None
        for layer in range(1, self.layers + 1):
            e = self.adj @ e
            noise = torch.rand(e.shape, generator=generator, dtype=e.dtype).to(e.device)
            e = e + torch.sign(e) * F.normalize(noise, dim=-1) * self.eps
            out.append(e)
            if layer == self.cl_layer:
                view = e
        return torch.stack(out).mean(0), view

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:  # evaluation: no noise
        out = propagate(self.adj, self.emb, self.layers, include_0=False)
        return out[:self.n_users], out[self.n_users:]


# ----------------------------------------------------------------------------- sampling


class Sampler:
    """The official sampler's draws as a pure function of (seed, step): each sample picks a user
    (every user equally often: an epoch's samples cycle through the users in a seeded order), one of
    that user's training items as the positive, and ``n_neg`` negatives uniform over the catalogue
    ``candidates`` less the user's training items (exactly, by the sorted-exclusion mapping)."""

    def __init__(self, n_users: int, users: np.ndarray, items: np.ndarray, candidates: np.ndarray):
        order = np.lexsort((items, users))
        users, items = np.asarray(users)[order], np.asarray(items)[order]
        self.users = np.unique(users)
        self.candidates = torch.as_tensor(np.sort(candidates), dtype=torch.long)
        pos = {int(c): k for k, c in enumerate(self.candidates.tolist())}
        counts = np.bincount(users, minlength=n_users)
        offset = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.count, self.offset = torch.as_tensor(counts), torch.as_tensor(offset)
        self.items = torch.as_tensor(items)
        # each user's training items as positions in the candidate list, sorted, padded far right
        width = max(1, int(counts.max()))
        excl = torch.full((n_users, width), len(self.candidates) + width + 1, dtype=torch.long)
        for u in self.users:
            rows = sorted(pos[int(i)] for i in items[offset[u]:offset[u] + counts[u]] if int(i) in pos)
            excl[u, :len(rows)] = torch.tensor(rows, dtype=torch.long)
        self.shifted = excl - torch.arange(width)  # x_k - k: the free slots before the k-th excluded one
        self.free = len(self.candidates) - (excl <= len(self.candidates)).sum(1)

    def draw(self, seed: int, step: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s users and positives, shared by every model trained on this stream."""
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
        s = torch.arange(step * batch, (step + 1) * batch)
        epoch, j = s // len(self.items), s % len(self.items)
        users = torch.empty(batch, dtype=torch.long)
        all_users = torch.as_tensor(self.users)
        for e in epoch.unique().tolist():
            perm = torch.randperm(len(all_users), generator=torch.Generator().manual_seed(int(seed) * 7919 + e))
            m = epoch == e
            users[m] = all_users[perm[j[m] % len(all_users)]]
        pick = (torch.rand(batch, generator=g) * self.count[users]).long()
        return users, self.items[self.offset[users] + pick]

    def negatives(self, users: torch.Tensor, n_neg: int, copies: int, generator: torch.Generator) -> torch.Tensor:
        """(copies, batch, n_neg) negatives: for each of ``copies`` models its own, uniform over the
        candidates less each user's training items."""
        b = len(users)
        if copies == 0:
            return torch.empty(0, b, n_neg, dtype=torch.long)
        r = (torch.rand(copies, b, n_neg, generator=generator) * self.free[users][None, :, None]).long()
        shifted = self.shifted[users].unsqueeze(0).expand(copies, -1, -1).reshape(copies * b, -1)
        slot = r.reshape(copies * b, n_neg)
        slot = slot + torch.searchsorted(shifted.contiguous(), slot, right=True)
        return self.candidates[slot].reshape(copies, b, n_neg)

    def steps_per_epoch(self, batch: int) -> int:
        """Optimiser steps per epoch: one sample per training interaction, as the official loader."""
        return max(1, -(-len(self.items) // batch))


# ----------------------------------------------------------------------------- losses


def sampled_scores(u: torch.Tensor, items: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """s[b, j] = u[b] . items[idx[b, j]]: through the full score matrix when the catalogue is small
    beside the samples (one matmul: up to 64 items per sample, about where the two cost the same on
    a CPU, benchmarks/alpharec_ranking.py), else by gathering the sampled rows; the same numbers."""
    if items.shape[0] <= 64 * idx.shape[1]:
        return (u @ items.T).gather(1, idx)
    return torch.einsum("bd,bjd->bj", u, items[idx])


def info_nce(u: torch.Tensor, items: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, tau: float) -> torch.Tensor:
    """AlphaRec's loss summed over the batch: -log exp(cos(u, i+)/tau) / (exp(cos(u, i+)/tau) +
    sum_j exp(cos(u, i-_j)/tau))."""
    u, items = F.normalize(u, dim=-1), F.normalize(items, dim=-1)
    logits = sampled_scores(u, items, torch.cat([pos[:, None], neg], 1)) / tau
    return -(logits[:, 0] - torch.logsumexp(logits, 1)).sum()


def bpr(u: torch.Tensor, items: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """BPR summed over the batch, one negative per positive: -log sigmoid(u.i+ - u.i-)."""
    s = sampled_scores(u, items, torch.stack([pos, neg], 1))
    return -F.logsigmoid(s[:, 0] - s[:, 1]).sum()


def l2_reg(*embs: torch.Tensor) -> torch.Tensor:
    """The baselines' embedding regulariser: (1/2) ||e||^2 of the batch's layer-0 rows, summed."""
    return sum(0.5 * e.pow(2).sum() for e in embs)


def view_nce(a: torch.Tensor, b: torch.Tensor, tau: float) -> torch.Tensor:
    """XSimGCL's contrastive loss summed over the rows: row k of ``a`` against every row of ``b``."""
    a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    logits = a @ b.T / tau
    return -(logits.diagonal() - torch.logsumexp(logits, 1)).sum()


# ----------------------------------------------------------------------------- evaluation


@dataclass
class Ranking:
    """Per evaluated user (rows): Recall@K, NDCG@K, HR@K."""

    users: np.ndarray
    recall: np.ndarray
    ndcg: np.ndarray
    hr: np.ndarray

    def means(self) -> dict[str, float]:
        return {"recall": float(self.recall.mean()), "ndcg": float(self.ndcg.mean()), "hr": float(self.hr.mean())}


def rank_metrics(scores: torch.Tensor, targets: torch.Tensor, exclude: torch.Tensor | None, k: int,
                 candidates: torch.Tensor | None = None) -> Ranking:
    """Full-ranking metrics at ``k`` of the users that have a target: the top-k of each user's
    ``scores`` over ``candidates`` (every item when None), the ``exclude`` entries (the user's
    training interactions) never ranked.

    Recall = hits / |targets|; NDCG = sum_r hit_r / log2(r + 2) over the ranks r < k, divided by
    the ideal for min(|targets|, k) hits; HR = 1 when any target is in the top k."""
    scores = scores.float().clone()
    targets = targets.to(scores.device)
    exclude = exclude.to(scores.device) if exclude is not None else None
    if candidates is not None:
        candidates = candidates.to(scores.device)
        scores, targets = scores[:, candidates], targets[:, candidates]
        exclude = exclude[:, candidates] if exclude is not None else None
    if exclude is not None:
        scores[exclude] = -torch.inf
    n_t = targets.sum(1)
    rows = torch.nonzero(n_t > 0).squeeze(1)
    scores, targets, n_t = scores[rows], targets[rows], n_t[rows].float()
    k = min(k, scores.shape[1])
    top = scores.topk(k, dim=1).indices
    hits = targets.gather(1, top).float()
    disc = 1.0 / torch.log2(torch.arange(k, dtype=torch.float32, device=scores.device) + 2.0)
    idcg = torch.cumsum(disc, 0)[(n_t.clamp(max=k) - 1).long()]
    return Ranking(rows.cpu().numpy(), (hits.sum(1) / n_t).cpu().numpy(), ((hits * disc).sum(1) / idcg).cpu().numpy(),
                   (hits.sum(1) > 0).float().cpu().numpy())


class Interactions:
    """Each user's items (CSR: sorted item ids per user), turned into dense boolean blocks for a
    chunk of users at a time, so the evaluator never holds a users x items matrix of a large
    catalogue."""

    def __init__(self, n_users: int, n_items: int, users: np.ndarray, items: np.ndarray):
        pairs = np.unique(np.stack([np.asarray(users, np.int64), np.asarray(items, np.int64)]), axis=1)
        self.n_users, self.n_items = n_users, n_items
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(pairs[0], minlength=n_users))])
        self.users, self.items = pairs[0], pairs[1]

    def items_of(self, user: int) -> np.ndarray:
        return self.items[self.indptr[user]:self.indptr[user + 1]]

    def block(self, start: int, stop: int) -> torch.Tensor:
        """Users start..stop-1 as a dense (stop - start, n_items) boolean block."""
        m = torch.zeros(stop - start, self.n_items, dtype=torch.bool)
        lo, hi = self.indptr[start], self.indptr[stop]
        m[torch.as_tensor(self.users[lo:hi] - start), torch.as_tensor(self.items[lo:hi])] = True
        return m

    def __or__(self, other: "Interactions") -> "Interactions":
        return Interactions(self.n_users, self.n_items, np.concatenate([self.users, other.users]),
                            np.concatenate([self.items, other.items]))


def evaluate(model: nn.Module, targets: Interactions, exclude: Interactions | None, k: int,
             candidates: torch.Tensor | None = None, chunk: int = 2048) -> Ranking:
    """:func:`rank_metrics` of a model's ranking (cosine for AlphaRec, the dot product for the ID
    models) for every user with a target, computed over chunks of users."""
    with torch.no_grad():
        u, i = model()
        if isinstance(model, AlphaRec):
            u, i = F.normalize(u, dim=-1), F.normalize(i, dim=-1)
        return rank_by_dot(u, i, targets, exclude, k, candidates, chunk)


def rank_by_dot(u: torch.Tensor, i: torch.Tensor, targets: Interactions, exclude: Interactions | None, k: int,
                candidates: torch.Tensor | None = None, chunk: int = 2048) -> Ranking:
    """:func:`rank_metrics` of the scores u @ i.T, a chunk of users at a time (no users x items
    matrix of a large catalogue is ever held whole)."""
    parts = []
    for start in range(0, targets.n_users, chunk):
        stop = min(start + chunk, targets.n_users)
        r = rank_metrics(u[start:stop] @ i.T, targets.block(start, stop),
                         None if exclude is None else exclude.block(start, stop), k, candidates)
        parts.append(Ranking(r.users + start, r.recall, r.ndcg, r.hr))
    return Ranking(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("users", "recall", "ndcg", "hr")))


def cosine_scores(u: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    return F.normalize(u, dim=-1) @ F.normalize(items, dim=-1).T


def scores_of(model: nn.Module) -> torch.Tensor:
    """Every user's score of every item: cosine for AlphaRec (it trains and ranks normalised),
    the dot product for the ID baselines."""
    with torch.no_grad():
        u, i = model()
    return cosine_scores(u, i) if isinstance(model, AlphaRec) else u @ i.T


def title_mean_ranking(train: tuple[np.ndarray, np.ndarray], item_emb: np.ndarray, targets: Interactions, k: int,
                       candidates: torch.Tensor, chunk: int = 2048) -> Ranking:
    """The training-free zero-shot baseline: each user is the mean of their training items' title
    embeddings, and ranks ``candidates`` by cosine with each item's title embedding (no parameter
    is fitted). It ranks for the same users the models are scored on; a user with no training item
    has a zero vector (every score 0: a fixed arbitrary order, as untrained as it gets)."""
    items = F.normalize(torch.as_tensor(np.asarray(item_emb, np.float32)), dim=-1)
    users, its = torch.as_tensor(np.asarray(train[0], np.int64)), torch.as_tensor(np.asarray(train[1], np.int64))
    sums = torch.zeros(targets.n_users, items.shape[1]).index_add_(0, users, items[its])
    return rank_by_dot(F.normalize(sums, dim=-1), items, targets, None, k, candidates, chunk)


def random_recall(n_candidates: int, k: int) -> float:
    """The expected Recall@k of a uniformly random ranking of ``n_candidates`` items: k / n."""
    return min(k, n_candidates) / n_candidates


# ----------------------------------------------------------------------------- serving a new user


def item_layers(adj: torch.Tensor, e0: torch.Tensor, layers: int) -> list[torch.Tensor]:
    """E^(0..L) of the trained graph (users first, then items)."""
    out = [e0]
    for _ in range(layers):
        out.append(adj @ out[-1])
    return out


def fold_in(user_e0: torch.Tensor, history: torch.Tensor, layer_items: list[torch.Tensor],
            item_degree: torch.Tensor) -> torch.Tensor:
    """A new user's LightGCN embedding when the user joins the trained graph with edges to the
    catalogue items ``history``: e_u^(0) = the MLP of the mean language embedding (given), and
    e_u^(l) = sum_{i in history} e_i^(l-1) / sqrt(|history| (d_i + 1)) (the items' degree counting
    the new edge, their own embeddings left as trained); the mean over l = 0..L. No catalogue
    item (only free-text titles): e_u^(0) alone."""
    out = [user_e0]
    if len(history):
        w = 1.0 / torch.sqrt(len(history) * (item_degree[history].float() + 1.0))
        for layer in layer_items[:-1]:
            out.append((w[:, None] * layer[history]).sum(0))
    return torch.stack(out).mean(0)




# ----------------------------------------------------------------------------- seeds side by side


@dataclass
class Hyper:
    """What the losses need (the study's config.Model, flattened)."""
    tau: float = 0.15
    reg: float = 1e-4
    cl_weight: float = 0.2
    cl_tau: float = 0.2


def model_loss(model: nn.Module, users: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, hp: Hyper,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """One model's loss summed over the batch: InfoNCE (AlphaRec), BPR with the embedding L2
    (MF, LightGCN), BPR + L2 + lambda x the two views' InfoNCE over the batch's users and items
    (XSimGCL; the per-row means scaled to the batch, as its sum)."""
    if isinstance(model, AlphaRec):
        u, i = model()
        return info_nce(u[users], i, pos, neg, hp.tau)
    n1 = neg[:, 0]
    if isinstance(model, XSimGCL):
        out, view = model.views(generator)
        u, i = out[:model.n_users], out[model.n_users:]
    else:
        u, i = model()
    loss = bpr(u[users], i, pos, n1)
    e0 = model.emb
    loss = loss + hp.reg * l2_reg(e0[users], e0[model.n_users + pos], e0[model.n_users + n1])
    if isinstance(model, XSimGCL):
        uu, ii = users.unique(), pos.unique()
        cl = (view_nce(u[uu], view[uu], hp.cl_tau) / len(uu)
              + view_nce(i[ii], view[model.n_users + ii], hp.cl_tau) / len(ii))
        loss = loss + hp.cl_weight * cl * len(users)
    return loss


def uses_info_nce(model: nn.Module) -> bool:
    return isinstance(model, AlphaRec)


class SideBySide(nn.Module):
    """Independent models trained side by side (seeds of one model, or several models at one
    budget): the loss is the sum of each model's loss on the shared users and positives and its own
    negatives, so each model's gradient is its own (no clipping couples them; Adam is per
    parameter). ``neg_nce`` holds the InfoNCE models' negatives in model order, ``neg_bpr`` the BPR
    models'."""

    def __init__(self, models: list[nn.Module], hps: list[Hyper]):
        super().__init__()
        self.models = nn.ModuleList(models)
        self.hps = hps
        self.slot, counts = [], {True: 0, False: 0}
        for m in models:
            self.slot.append(counts[uses_info_nce(m)])
            counts[uses_info_nce(m)] += 1
        self.counts = counts

    def forward(self, users: torch.Tensor, pos: torch.Tensor, neg_nce: torch.Tensor, neg_bpr: torch.Tensor,
                seed: torch.Tensor) -> torch.Tensor:
        total = 0.0
        for j, m in enumerate(self.models):
            neg = neg_nce[self.slot[j]] if uses_info_nce(m) else neg_bpr[self.slot[j]]
            g = torch.Generator().manual_seed(int(seed) * 31 + j) if isinstance(m, XSimGCL) else None
            total = total + model_loss(m, users, pos, neg, self.hps[j], g)
        return total


def mean_pooled(model, tokenizer, texts: list[str], batch_size: int = 64, max_tokens: int = 48) -> np.ndarray:
    """A causal LM's last hidden states averaged over each text's tokens (right padding masked)."""
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out = []
    with torch.no_grad():
        for k in range(0, len(texts), batch_size):
            enc = tokenizer(texts[k:k + batch_size], return_tensors="pt", padding=True, truncation=True,
                            max_length=max_tokens)
            ids, mask = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
            h = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1].float()
            m = mask.unsqueeze(-1).float()
            out.append(((h * m).sum(1) / m.sum(1).clamp(min=1)).cpu().numpy())
    return np.vstack(out).astype(np.float32)


def noise_like(emb: np.ndarray, seed: int) -> np.ndarray:
    """The negative control's item embeddings: Gaussian noise with each dimension's mean and
    standard deviation of ``emb`` (the same size and scale, no content)."""
    rng = np.random.default_rng(seed)
    return (emb.mean(0) + rng.standard_normal(emb.shape) * emb.std(0)).astype(np.float32)


class Served:
    """A trained AlphaRec ready to rank the catalogue for any user: a known user (the trained graph's
    embedding) or a new one from a history of catalogue items and free-text titles (:func:`fold_in`)."""

    def __init__(self, mlp_state: dict[str, torch.Tensor], item_lm: torch.Tensor, n_users: int,
                 train_users: torch.Tensor, train_items: torch.Tensor, layers: int, dim: int, hidden_ratio: float,
                 linear: bool, mlp_weights: int | None = None):
        n_items = item_lm.shape[0]
        adj = norm_adj(n_users, n_items, train_users.numpy(), train_items.numpy())
        users_lm = torch.zeros(n_users, item_lm.shape[1])
        users_lm.index_add_(0, train_users, item_lm[train_items].float())
        users_lm /= torch.bincount(train_users, minlength=n_users).clamp(min=1)[:, None]
        self.model = AlphaRec(item_lm, users_lm, adj, layers, hidden_ratio, dim, linear, mlp_weights)
        self.model.mlp.load_state_dict(mlp_state)
        self.model.eval()
        self.n_users = n_users
        with torch.no_grad():
            e0 = torch.cat([self.model.mlp(users_lm), self.model.mlp(self.model.item_lm)])
            every = item_layers(adj, e0, layers)
            self.layers = [e[n_users:] for e in every]
            final = torch.stack(every).mean(0)
        self.users, self.items = final[:n_users], final[n_users:]
        self.item_degree = torch.bincount(train_items, minlength=n_items)
        self.item_lm = self.model.item_lm
        self.train = Interactions(n_users, n_items, train_users.numpy(), train_items.numpy())

    def new_user(self, history: list[int], free_text: torch.Tensor | None = None) -> torch.Tensor:
        """A new user's embedding: the mean language embedding of the history's catalogue items and
        free-text titles through the MLP, then joined to the graph through the catalogue items."""
        h = torch.as_tensor(sorted(set(history)), dtype=torch.long)
        parts = [self.item_lm[h]] + ([free_text.float()] if free_text is not None and len(free_text) else [])
        lm = torch.cat(parts).mean(0)
        with torch.no_grad():
            return fold_in(self.model.mlp(lm), h, self.layers, self.item_degree)

    def top_k(self, user: torch.Tensor, k: int, exclude: list[int] | torch.Tensor = ()) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` items of highest cosine with ``user``, ``exclude`` left out; (items, scores)."""
        s = cosine_scores(user[None], self.items)[0]
        if len(exclude):
            s[torch.as_tensor(exclude, dtype=torch.long)] = -torch.inf
        k = min(k, int(torch.isfinite(s).sum()))
        top = s.topk(k)
        return top.indices.numpy(), top.values.numpy()
