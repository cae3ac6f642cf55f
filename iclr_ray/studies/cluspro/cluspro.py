"""ClusPro (Qu, Wei, Shu, Wang, ICLR 2025): clustering-based prototypes for compositional
zero-shot learning. Plain torch (and POT for the optimal transport): no Ray, no I/O.

The base is a Troika-style three-path classifier. An image encoder (trained here: a small CNN for
images, an MLP for feature vectors) stands in for CLIP ViT-L/14 with adapters. Its feature ``v``
is the composition path's image feature. The attribute and object paths take ``h_a =
D_a(v)``, ``h_o = D_o(v)`` ("disentanglers": Linear + BatchNorm + ReLU + dropout), then a second
such layer ``G_a(h_a)``, ``G_o(h_o)``. The text side stands in for CLIP's text encoder with soft
prompts: a learnt embedding per primitive (dropout 0.3, as the official ``attr_dropout``), mapped
by an MLP per path (the composition's MLP reads the attribute and object embeddings together).
Logits are cosines times a learnt scale (CLIP's, initialised at 1/0.07). Training uses
cross-entropy on the three paths, with the composition path over the seen pairs. Inference scores
a pair as its composition logit plus p(attribute) * p(object), as the official ``logit_infer``.

ClusPro adds a memory of K unit-norm prototypes per attribute and per object, in the ``h`` space:
- Every training batch, within each primitive, its samples are assigned to its K prototypes by
  entropic optimal transport. The marginals are uniform: each prototype takes 1/K of the
  primitive's samples. The solver is POT's generalised conditional gradient with the official
  structure-aware term (``structure`` x the feature self-similarity on the coupling); with
  ``structure`` = 0 it is POT's Sinkhorn.
- The assignment is hard (the coupling's row argmax).
- Each prototype is updated by EMA: ``p <- m p + (1 - m) normalize(mean of its samples)``, then
  renormalised.
- The prototype contrastive loss: ``G(h)`` against ``G`` of every prototype (attributes' and
  objects'), cosine / 0.07, cross-entropy to the sample's own prototype; weight 0.1.
- HSIC decorrelation of the attribute and object features is an option (off by default).

Baselines: ``ce`` (no prototypes); ``single`` (K = 1: one centroid per primitive, the same
contrastive loss); ``kmeans`` (K prototypes, each sample assigned to its nearest prototype, no
balance constraint, the same EMA: online k-means).

Where the two official repositories differ from the paper, or look wrong, this file says so:
- The released ``loss_calu`` computes HSIC but never adds it to the loss. Here ``hsic`` weights it
  (0 = as released).
- The object prototypes' update masks with the attribute labels and the attribute features
  (``q[attr_idx==k]``, ``batch_attr``). That is a bug; here each path uses its own labels and
  features.
- The EMA update there uses a Gumbel-softmax (tau 0.5, hard) of the raw coupling. The coupling's
  entries are about 1/(B K), so that draw is close to uniform. The labels there use the argmax.
  Here both use the argmax.
- There the renormalisation after the EMA rebinds a local name and never reaches the buffer. Here
  the prototypes stay unit norm.
- The official OT runs over the whole batch against primitive k's prototypes, then keeps the
  samples of k. Here it runs over the samples of k alone ("within-primitive", as the paper says).
- The official memory also keeps a FIFO queue of 5 features per prototype that no loss reads;
  it is left out.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

METHODS = ("ce", "single", "kmeans", "cluspro", "cluspro_hsic")
"""``cluspro_hsic``: ClusPro with the HSIC term added (the paper's decorrelation ablation)"""
TEMPERATURE = 0.07
"""the prototype contrastive loss's temperature (the official nce_loss)"""


# ----------------------------------------------------------------------------- optimal transport


def ot_assign(feats: torch.Tensor, protos: torch.Tensor, reg: float = 0.1, structure: float = 2.0,
              iters: int = 100) -> torch.Tensor:
    """The entropic OT coupling (n, K) of ``n`` unit-norm features to ``K`` unit-norm prototypes.
    Its row sums are 1/n (every sample is assigned once) and its column sums 1/K (the prototypes
    share the samples equally). Cost: minus the cosine similarity. ``reg``: the entropic weight.
    ``structure`` > 0 adds the official structure-aware term: minus ``structure`` x sum_ij
    S_ij <(P*Q)_i, (P*Q)_j>, with S the features' self-similarity (zero diagonal) and P the
    similarities. It pulls similar samples to the same prototype. It is solved by POT's
    generalised conditional gradient (10 outer steps, each a Sinkhorn of ``iters``)."""
    import warnings

    import ot

    f = feats.detach().to(torch.float64)
    p = protos.detach().to(torch.float64)
    n, k = len(f), len(p)
    sim = f @ p.T
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    b = torch.full((k,), 1.0 / k, dtype=torch.float64)
    warnings.filterwarnings("ignore", message="Sinkhorn did not converge", module="ot")
    if structure <= 0 or n < 2:
        return ot.sinkhorn(a, b, -sim, reg, numItermax=iters)
    s = f @ f.T
    s.fill_diagonal_(0.0)

    def obj(q):
        t = sim * q
        return -structure * (s * (t @ t.T)).sum()

    def grad(q):
        return -structure * 2.0 * (s @ (sim * q)) * sim

    return ot.optim.gcg(a, b, -sim, reg, 1.0, obj, grad, numItermax=10, numInnerItermax=iters, stopThr=1e-6,
                        stopThr2=1e-6)


def hard_assign(feats: torch.Tensor, protos: torch.Tensor, mode: str, reg: float = 0.1,
                structure: float = 2.0) -> torch.Tensor:
    """Each feature's prototype index: ``ot`` (the OT coupling's row argmax) or ``nearest`` (the
    most similar prototype: the k-means step)."""
    if len(protos) == 1:
        return torch.zeros(len(feats), dtype=torch.long)
    if mode == "nearest":
        return (feats.detach() @ protos.detach().T).argmax(1)
    return ot_assign(feats, protos, reg, structure).argmax(1).to(torch.long)


def ema_update(protos: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor, momentum: float) -> torch.Tensor:
    """``p <- normalize(m p + (1 - m) normalize(sum of its samples))`` for every prototype with
    samples (``counts`` > 0); the others stay. Every row of the result has unit norm."""
    new = protos.clone()
    has = counts > 0
    if has.any():
        mean = F.normalize(sums[has], dim=-1)
        new[has] = F.normalize(momentum * protos[has] + (1 - momentum) * mean, dim=-1)
    return new


def hsic(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Normalised HSIC (Gaussian kernels, median-distance bandwidth) between the rows of ``x`` and
    ``y`` (both unit-normalised first): 0 for independent features, 1 for identical ones (the
    official ``hsic_normalized``)."""

    def centred_kernel(z):
        z = F.normalize(z, dim=-1)
        d = torch.cdist(z, z).pow(2)
        off = d[~torch.eye(len(z), dtype=torch.bool, device=z.device)]
        med = off.detach().median().clamp_min(1e-2) if len(off) else torch.tensor(1.0)
        kz = torch.exp(-d / (2 * med * med))
        h = torch.eye(len(z), device=z.device) - 1.0 / len(z)
        return kz @ h

    kx, ky = centred_kernel(x), centred_kernel(y)
    pxy = (kx * ky.T).mean()
    return pxy / torch.sqrt((kx * kx.T).mean() * (ky * ky.T).mean()).clamp_min(1e-12)


# ----------------------------------------------------------------------------- the model


class Disentangler(nn.Module):
    """Linear + BatchNorm + ReLU + dropout (the official disentangler, dropout 0.5)."""

    def __init__(self, d: int, dropout: float = 0.5):
        super().__init__()
        self.fc, self.bn, self.p = nn.Linear(d, d), nn.BatchNorm1d(d), dropout

    def forward(self, x):
        return F.dropout(F.relu(self.bn(self.fc(x))), self.p, self.training)

    def frozen(self, x):
        """The head as at test time whatever the mode: BatchNorm on its running statistics (left
        as they are) and no dropout. The prototypes go through it: in training mode they would
        update the statistics every image is normalised with at test time, and put dropout noise
        on the contrastive targets, in the prototype methods only (a confound of every comparison
        with ce). Gradients still reach the linear layer and BatchNorm's affine weights."""
        bn = self.bn
        return F.relu(F.batch_norm(self.fc(x), bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0,
                                   bn.eps))


def encoder(kind: str, d: int, in_dim: int, side: int) -> nn.Module:
    """The image encoder standing in for CLIP + adapters: ``cnn`` (two conv-pool stages on a
    ``side`` x ``side`` grey image) or ``mlp`` (for feature vectors of ``in_dim``)."""
    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * (side // 4) ** 2, d))
    return nn.Sequential(nn.Linear(in_dim, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))


class FrozenBackbone(nn.Module):
    """A frozen pretrained image model (CLIP's vision tower with its projection, ``image_embeds``)
    and a trainable linear map to ``d``: the paper's frozen CLIP, without its visual adapters."""

    def __init__(self, vision: nn.Module, out_dim: int, d: int):
        super().__init__()
        self.vision = vision.eval().requires_grad_(False)
        self.proj = nn.Linear(out_dim, d)

    def train(self, mode: bool = True):
        super().train(mode)
        self.vision.eval()  # frozen: no dropout, no statistics updated
        return self

    def forward(self, x):
        with torch.no_grad():
            f = self.vision(pixel_values=x).image_embeds
        return self.proj(f)


def _mlp(d_in: int, d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d))


class CZSL(nn.Module):
    """The three-path compositional classifier with an optional prototype memory (see the module
    docstring). ``method`` is one of :data:`METHODS`; ``backbone``: a prebuilt encoder to ``d``
    (:class:`FrozenBackbone`) instead of ``kind``'s."""

    def __init__(self, n_attrs: int, n_objs: int, train_pairs: np.ndarray, *, method: str = "ce", d: int = 128,
                 kind: str = "cnn", in_dim: int = 0, side: int = 16, k: int = 3, momentum: float = 0.99,
                 weight: float = 0.1, hsic_weight: float = 0.0, reg: float = 0.1, structure: float = 2.0,
                 prim_dropout: float = 0.3, dropout: float = 0.5, backbone: nn.Module | None = None):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; known: {METHODS}")
        self.method, self.n_attrs, self.n_objs = method, n_attrs, n_objs
        self.k = 1 if method == "single" else k
        self.momentum, self.weight, self.reg, self.structure = momentum, weight, reg, structure
        self.hsic_weight = hsic_weight if method == "cluspro_hsic" else 0.0
        self.encoder = backbone if backbone is not None else encoder(kind, d, in_dim, side)
        self.dis_a, self.dis_o = Disentangler(d, dropout), Disentangler(d, dropout)
        self.head_a, self.head_o = Disentangler(d, dropout), Disentangler(d, dropout)
        self.prim = nn.Parameter(torch.randn(n_attrs + n_objs, d) * 0.02)
        self.prim_dropout = nn.Dropout(prim_dropout)
        self.text_c, self.text_a, self.text_o = _mlp(2 * d, d), _mlp(d, d), _mlp(d, d)
        self.logit_scale = nn.Parameter(torch.tensor([math.log(1 / 0.07)]))  # 1-d: DeepSpeed broadcasts no 0-d tensor
        self.register_buffer("train_pairs", torch.as_tensor(np.asarray(train_pairs), dtype=torch.long))
        if self.uses_prototypes:
            self.register_buffer("attr_protos", F.normalize(torch.randn(n_attrs, self.k, d), dim=-1))
            self.register_buffer("obj_protos", F.normalize(torch.randn(n_objs, self.k, d), dim=-1))

    @property
    def uses_prototypes(self) -> bool:
        return self.method != "ce"

    # -- the inference path: what every method runs at test time
    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        v = self.encoder(x)
        return v, self.dis_a(v), self.dis_o(v)

    def text(self, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit text features of ``pairs`` (composition), every attribute and every object."""
        e = self.prim_dropout(self.prim)
        ea, eo = e[:self.n_attrs], e[self.n_attrs:]
        comp = self.text_c(torch.cat([ea[pairs[:, 0]], eo[pairs[:, 1]]], -1))
        return F.normalize(comp, dim=-1), F.normalize(self.text_a(ea), dim=-1), F.normalize(self.text_o(eo), dim=-1)

    def logits(self, v, ha, ho, pairs, heads: bool = False):
        """Composition, attribute and object logits; ``heads``: also the unit head outputs of the
        attribute and object paths (the prototype loss reads the same ones, one pass through each
        head a step: a second would update BatchNorm's statistics twice and draw new dropout)."""
        scale = self.logit_scale.clamp(max=math.log(100.0)).exp()
        tc, ta, to = self.text(pairs)
        img = [F.normalize(v, dim=-1), F.normalize(self.head_a(ha), dim=-1), F.normalize(self.head_o(ho), dim=-1)]
        out = scale * img[0] @ tc.T, scale * img[1] @ ta.T, scale * img[2] @ to.T
        return (*out, img[1], img[2]) if heads else out

    @torch.no_grad()
    def pair_scores(self, x: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Test-time scores of every candidate pair: composition logit + p(attr) p(obj). Prototypes
        take no part (they shape training only)."""
        v, ha, ho = self.features(x)
        comp, la, lo = self.logits(v, ha, ho, pairs)
        pa, po = la.softmax(-1), lo.softmax(-1)
        return comp + pa[:, pairs[:, 0]] * po[:, pairs[:, 1]]

    # -- training
    def loss(self, x: torch.Tensor, attrs: torch.Tensor, objs: torch.Tensor, pair_ids: torch.Tensor,
             reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """The summed training loss of a batch: the three cross-entropies (composition over the seen
        pairs, ``pair_ids`` indexing them), and for the prototype methods the assignment, the EMA
        update of the memory and ``weight`` x the prototype contrastive loss (plus HSIC).
        ``reduce`` sums the memory's per-prototype statistics over workers (None: one worker)."""
        v, ha, ho = self.features(x)
        comp, la, lo, za, zo = self.logits(v, ha, ho, self.train_pairs, heads=True)
        loss = F.cross_entropy(comp, pair_ids, reduction="sum") + F.cross_entropy(la, attrs, reduction="sum") \
            + F.cross_entropy(lo, objs, reduction="sum")
        if not self.uses_prototypes or not self.training:
            return loss
        ya = self.assign_and_update("attr_protos", ha, attrs, reduce)
        yo = self.assign_and_update("obj_protos", ho, objs, reduce)
        pa, po = self.attr_protos.flatten(0, 1), self.obj_protos.flatten(0, 1)
        ga, go = F.normalize(self.head_a.frozen(pa), dim=-1), F.normalize(self.head_o.frozen(po), dim=-1)
        # each path against every prototype, its own primitive type's first (so its label indexes them)
        con = F.cross_entropy(za @ torch.cat([ga, go]).T / TEMPERATURE, ya, reduction="sum") + \
            F.cross_entropy(zo @ torch.cat([go, ga]).T / TEMPERATURE, yo, reduction="sum")
        loss = loss + self.weight * con
        if self.hsic_weight > 0 and len(x) > 1:
            sel_a, sel_o = ga[ya], go[yo]  # each sample's own prototype, as the official mixes them in
            h = hsic(za, 0.5 * zo + 0.5 * sel_o) + 0.5 * hsic(zo, 0.5 * sel_a + 0.5 * za)
            loss = loss + self.hsic_weight * h * len(x)
        return loss

    @torch.no_grad()
    def assign_and_update(self, name: str, h: torch.Tensor, labels: torch.Tensor,
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """Within each primitive of the batch: its samples' prototypes (OT, or nearest for
        ``kmeans``), then the EMA update. Returns each sample's global prototype index
        (primitive * K + j)."""
        protos = getattr(self, name)
        n_prim, k, d = protos.shape
        f = F.normalize(h.detach(), dim=-1)
        out = torch.zeros(len(h), dtype=torch.long, device=h.device)
        sums = torch.zeros(n_prim * k, d, device=h.device, dtype=f.dtype)
        mode = "nearest" if self.method == "kmeans" else "ot"
        for prim in labels.unique().tolist():
            idx = (labels == prim).nonzero().squeeze(1)
            j = hard_assign(f[idx].cpu(), protos[prim].cpu(), mode, self.reg, self.structure).to(h.device)
            out[idx] = prim * k + j
        sums.index_add_(0, out, f)
        counts = torch.bincount(out, minlength=n_prim * k).to(f.dtype)
        if reduce is not None:
            sums, counts = reduce(sums), reduce(counts)
        new = ema_update(protos.flatten(0, 1), sums, counts, self.momentum)
        protos.copy_(new.view(n_prim, k, d))
        return out


class Methods(nn.Module):
    """The methods of one seed trained side by side on one stream of batches: the loss is the sum
    of each method's loss, so each method's gradient is its own."""

    def __init__(self, models: dict[str, CZSL]):
        super().__init__()
        self.names = list(models)
        self.models = nn.ModuleList(models.values())

    def forward(self, x, attrs, objs, pair_ids, reduce=None) -> torch.Tensor:
        return sum(m.loss(x, attrs, objs, pair_ids, reduce) for m in self.models)


# ----------------------------------------------------------------------------- evaluation


def seen_unseen_curve(scores: np.ndarray, truth: np.ndarray, unseen_cand: np.ndarray,
                      unseen_sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The calibration sweep: a bias added to every unseen candidate pair's score, over every value
    where some sample's prediction changes. Returns (biases, seen accuracy, unseen accuracy), by
    increasing bias (seen accuracy falls, unseen accuracy rises).

    ``scores`` (n, P): candidate pair scores (-inf where a pair is not a candidate); ``truth`` (n,):
    the index of each sample's true pair among the candidates; ``unseen_cand`` (P,): the candidates
    that are not seen pairs; ``unseen_sample`` (n,): samples whose true pair is unseen."""
    # A sample predicts its best seen candidate until the bias passes its flip point (best seen
    # score minus best unseen score), then its best unseen one: every accuracy on the sweep comes
    # from the two predictions and the sorted flips, with no argmax per bias.
    seen_scores = np.where(unseen_cand[None], -np.inf, scores)
    unseen_scores = np.where(unseen_cand[None], scores, -np.inf)
    seen_pred, unseen_pred = seen_scores.argmax(1), unseen_scores.argmax(1)
    rows = np.arange(len(scores))
    flip = seen_scores[rows, seen_pred] - unseen_scores[rows, unseen_pred]
    flips = np.unique(flip)
    flips = flips[np.isfinite(flips)]
    biases = np.concatenate([[-np.inf], flips + 1e-9 * np.maximum(1.0, np.abs(flips)), [np.inf]])
    order = np.argsort(flip, kind="stable")
    moved = np.searchsorted(flip[order], biases, side="left")  # samples whose flip lies below the bias
    moved[0], moved[-1] = 0, len(flip)  # -inf: only seen candidates; +inf: only unseen ones
    right_seen, right_unseen = seen_pred == truth, unseen_pred == truth
    change = (right_unseen.astype(np.int64) - right_seen)[order]
    accs = []
    for group in (~unseen_sample, unseen_sample):
        if not group.any():
            accs.append(np.zeros(len(biases)))
            continue
        cum = np.concatenate([[0], np.cumsum(change * group[order])])
        accs.append((right_seen[group].sum() + cum[moved]) / group.sum())
    return biases, accs[0], accs[1]


def harmonic(seen_acc, unseen_acc) -> np.ndarray:
    """The harmonic mean of seen and unseen accuracy (0 where both are 0), elementwise."""
    s, u = np.asarray(seen_acc, float), np.asarray(unseen_acc, float)
    return np.where(s + u > 0, 2 * s * u / np.maximum(s + u, 1e-12), 0.0)


def best_bias(biases: np.ndarray, seen_acc: np.ndarray, unseen_acc: np.ndarray) -> float:
    """The calibration bias of a sweep with the best harmonic mean (the first of ties): chosen on
    the validation split, then applied to the test split."""
    return float(np.asarray(biases, float)[int(np.argmax(harmonic(seen_acc, unseen_acc)))])


def at_bias(scores: np.ndarray, truth: np.ndarray, unseen_cand: np.ndarray, unseen_sample: np.ndarray,
            bias: float) -> dict[str, float]:
    """Seen and unseen accuracy and their harmonic mean with ``bias`` added to every unseen
    candidate's score (the arguments as :func:`seen_unseen_curve`'s)."""
    if np.isinf(bias):  # only one kind of candidate can win
        pred = np.where(unseen_cand[None] == (bias > 0), scores, -np.inf).argmax(1)
    else:
        pred = np.where(unseen_cand[None], scores + bias, scores).argmax(1)
    right = pred == truth
    s = float(right[~unseen_sample].mean()) if (~unseen_sample).any() else 0.0
    u = float(right[unseen_sample].mean()) if unseen_sample.any() else 0.0
    return {"S": s, "U": u, "HM": float(harmonic(s, u))}


def czsl_metrics(seen_acc: Sequence[float], unseen_acc: Sequence[float]) -> dict[str, float]:
    """Best seen S, best unseen U, best harmonic mean HM over the sweep, and the AUC of the
    seen-unseen curve (trapezoids, by increasing unseen accuracy)."""
    s, u = np.asarray(seen_acc, float), np.asarray(unseen_acc, float)
    hm = harmonic(s, u)
    order = np.argsort(u, kind="stable")
    us, ss = u[order], s[order]
    auc = float(np.sum((us[1:] - us[:-1]) * (ss[1:] + ss[:-1]) / 2))
    return {"S": float(s.max()), "U": float(u.max()), "HM": float(hm.max()), "AUC": auc}


def feasibility(attr_emb: np.ndarray, obj_emb: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Open-world feasibility of every (attribute, object), as CompCos: the mean of the object's
    best cosine with the objects seen with this attribute, and the attribute's best cosine with
    the attributes seen with this object (from the model's primitive embeddings). Seen pairs get
    1. ``seen`` (A, O): the seen-pair mask."""
    a = attr_emb / np.linalg.norm(attr_emb, axis=1, keepdims=True)
    o = obj_emb / np.linalg.norm(obj_emb, axis=1, keepdims=True)
    so, sa = o @ o.T, a @ a.T
    n_a, n_o = seen.shape
    out = np.ones((n_a, n_o))
    for i in range(n_a):
        for j in range(n_o):
            if seen[i, j]:
                continue
            objs = np.flatnonzero(seen[i])
            attrs = np.flatnonzero(seen[:, j])
            fo = so[j, objs].max() if len(objs) else -1.0
            fa = sa[i, attrs].max() if len(attrs) else -1.0
            out[i, j] = (fo + fa) / 2
    return out
