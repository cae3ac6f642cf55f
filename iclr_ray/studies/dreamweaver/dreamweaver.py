"""Dreamweaver (Baek et al., ICLR 2025): the Recurrent Block-Slot Unit, the block-coupled
autoregressive decoder over dVAE tokens, multi-future-frame prediction, and the DCI evaluation.
No Ray, no I/O.

Notation as in the paper: N slots of size D split into M blocks of width d = D / M; the frame's
tokens z_1..z_L from a discrete VAE with vocabulary V; the conditioning length T_c and the
prediction length T_p. One training example is a clip of T_c + T_p frames. The RBSU binds each
conditioning frame t to slots (slot attention whose update is a block-wise GRU, a block-wise MLP
and a block prototype memory) and a predictor transformer over the N * M block tokens rolls them to
the initialisation of frame t + 1. The decoder reads the block tokens of the last conditioning step
and predicts, token by token, the frame T_c + k (k drawn per sample; the start token is f^k(BOS)).

``objective="reconstruct"`` is the paper's main ablation: the same model whose target is the last
conditioning frame itself.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

OBJECTIVES = ("predict", "reconstruct")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# ----------------------------------------------------------------------------- block primitives


def linear(n_in: int, n_out: int, bias: bool = True) -> nn.Linear:
    """A Linear with Xavier-uniform weights and a zero bias (the official ``linear``): PyTorch's
    default init shrinks the prototype memory's four-layer MLP until every prototype is the same
    vector after normalisation, and every slot collapses onto it."""
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.xavier_uniform_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class BlockLinear(nn.Module):
    """M independent linear maps, one per block: y_m = x_m W_m (no mixing between blocks), plus a
    bias over the whole output; equal to a Linear with a block-diagonal weight (:meth:`dense`)."""

    def __init__(self, n_in: int, n_out: int, blocks: int, bias: bool = True):
        super().__init__()
        if n_in % blocks or n_out % blocks:
            raise ValueError(f"{n_in} -> {n_out} does not split into {blocks} blocks")
        self.blocks = blocks
        self.weight = nn.Parameter(torch.empty(blocks, n_in // blocks, n_out // blocks))
        nn.init.xavier_uniform_(self.weight)  # the official init: fans of the 3-d tensor
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = torch.einsum("...mi,mio->...mo", x.reshape(*lead, self.blocks, -1), self.weight).reshape(*lead, -1)
        return y + self.bias if self.bias is not None else y

    def dense(self) -> torch.Tensor:
        """The equivalent (n_in, n_out) block-diagonal matrix."""
        return torch.block_diag(*self.weight)


def block_diag_mask(n_out: int, n_in: int, blocks: int) -> torch.Tensor:
    return torch.block_diag(*[torch.ones(n_out // blocks, n_in // blocks)] * blocks)


class BlockGRU(nn.Module):
    """A GRU cell whose input-to-hidden and hidden-to-hidden weights are block-diagonal (per gate):
    block m of the new state reads only block m of the input and of the old state. PyTorch's GRUCell
    parameters and init, masked in the forward pass."""

    def __init__(self, n_in: int, n_hid: int, blocks: int):
        super().__init__()
        self.cell = nn.GRUCell(n_in, n_hid)
        self.register_buffer("mask_ih", block_diag_mask(n_hid, n_in, blocks).repeat(3, 1), persistent=False)
        self.register_buffer("mask_hh", block_diag_mask(n_hid, n_hid, blocks).repeat(3, 1), persistent=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        c = self.cell
        gi = F.linear(x, c.weight_ih * self.mask_ih, c.bias_ih)
        gh = F.linear(h, c.weight_hh * self.mask_hh, c.bias_hh)
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


def block_layer_norm(x: torch.Tensor, blocks: int) -> torch.Tensor:
    """LayerNorm within each block, no affine parameters."""
    lead = x.shape[:-1]
    xb = x.reshape(*lead, blocks, -1)
    return F.layer_norm(xb, xb.shape[-1:]).reshape(*lead, -1)


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: int) -> torch.Tensor:
    """Attention in each block separately (heads = blocks, identity projections): block m of the
    output is softmax(q_m k_m^T / sqrt(d)) v_m."""
    def split(t):
        return t.reshape(*t.shape[:-1], blocks, -1).transpose(-3, -2)  # (..., M, n, d)

    qb, kb, vb = split(q), split(k), split(v)
    a = torch.softmax(qb @ kb.transpose(-1, -2) / math.sqrt(qb.shape[-1]), -1)
    return (a @ vb).transpose(-3, -2).reshape(*q.shape)


class BlockPrototypeMemory(nn.Module):
    """P learnt prototypes per block, passed through an MLP shared across blocks, block-normalised;
    a slot's block m becomes the attention-weighted mix of the P prototypes of block m."""

    def __init__(self, prototypes: int, blocks: int, size: int):
        super().__init__()
        self.blocks, d = blocks, size // blocks
        self.mem = nn.Parameter(torch.empty(1, prototypes, blocks, d))
        nn.init.trunc_normal_(self.mem, std=1.0, a=-2.0, b=2.0)
        self.mlp = nn.Sequential(linear(d, 4 * d), nn.ReLU(), linear(4 * d, 4 * d), nn.ReLU(),
                                 linear(4 * d, 4 * d), nn.ReLU(), linear(4 * d, d))

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        mem = block_layer_norm(self.mlp(self.mem).flatten(2), self.blocks)  # (1, P, D)
        q = block_layer_norm(slots, self.blocks)
        mem = mem.expand(len(slots), -1, -1)
        return block_attention(q, mem, mem, self.blocks)


def transformer_encoder(d: int, heads: int, layers: int, dropout: float = 0.0) -> nn.TransformerEncoder:
    """Pre-LN transformer encoder with a final LayerNorm (the official predictor and block coupler)."""
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)


# ----------------------------------------------------------------------------- RBSU


class RBSU(nn.Module):
    """The Recurrent Block-Slot Unit. Slots start from a learnt Gaussian at the first frame; per
    frame, ``iterations`` rounds of slot attention (softmax over slots, a weighted mean over the
    inputs) with a block-wise GRU update, a block-wise MLP residual and the prototype memory; then
    the predictor over the N * M block tokens (``bi_attn``) or the N slots gives the next frame's
    initial slots. Returns every frame's bound slots and attention."""

    def __init__(self, d_in: int, slots: int, size: int, blocks: int, *, iterations: int = 3, mlp_hidden: int = 192,
                 prototypes: int = 64, bi_attn: bool = True, predictor_layers: int = 1, predictor_heads: int = 4,
                 use_memory: bool = True, eps: float = 1e-8):
        super().__init__()
        self.n, self.size, self.blocks, self.iterations = slots, size, blocks, iterations
        self.eps, self.bi_attn = eps, bi_attn
        self.mu = nn.Parameter(torch.empty(1, 1, size))
        self.log_sigma = nn.Parameter(torch.empty(1, 1, size))
        nn.init.xavier_uniform_(self.mu)
        nn.init.xavier_uniform_(self.log_sigma)
        self.norm_inputs, self.norm_slots = nn.LayerNorm(d_in), nn.LayerNorm(size)
        self.q = linear(size, size, bias=False)
        self.k = linear(d_in, size, bias=False)
        self.v = linear(d_in, size, bias=False)
        self.gru = BlockGRU(size, size, blocks)
        self.mlp = nn.Sequential(BlockLinear(size, mlp_hidden, blocks), nn.ReLU(),
                                 BlockLinear(mlp_hidden, size, blocks))
        self.memory = BlockPrototypeMemory(prototypes, blocks, size) if use_memory else None
        self.predictor = transformer_encoder(size // blocks if bi_attn else size, predictor_heads, predictor_layers)

    def initial(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Slot initialisations (B, N, D); with ``generator``, its noise drawn on the generator's
        device (the same draws whatever device the model is on)."""
        where = self.mu.device if generator is None else generator.device
        noise = torch.randn(batch, self.n, self.size, generator=generator, device=where)
        return self.mu + self.log_sigma.exp() * noise.to(self.mu.device, self.mu.dtype)

    def attend(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One slot-attention round: (new slots, attention (B, L, N) normalised over slots)."""
        q = self.q(self.norm_slots(slots))
        attn = torch.softmax(k @ q.transpose(1, 2), -1)  # (B, L, N): slots compete for each input
        w = attn + self.eps
        w = w / w.sum(1, keepdim=True)  # a weighted mean over the inputs
        updates = w.transpose(1, 2) @ v
        b, n, _ = slots.shape
        new = self.gru(updates.reshape(b * n, -1), slots.reshape(b * n, -1)).reshape(b, n, -1)
        new = new + self.mlp(block_layer_norm(new, self.blocks))
        if self.memory is not None:
            new = self.memory(new)
        return new, attn

    def predict_next(self, slots: torch.Tensor) -> torch.Tensor:
        b, n, _ = slots.shape
        if self.bi_attn:
            return self.predictor(slots.reshape(b, n * self.blocks, -1)).reshape(b, n, -1)
        return self.predictor(slots)

    def forward(self, inputs: torch.Tensor, generator: torch.Generator | None = None):
        """inputs (B, T, L, d_in) -> bound slots (B, T, N, D), attention (B, T, L, N)."""
        b, t_len = inputs.shape[:2]
        x = self.norm_inputs(inputs)
        k, v = self.k(x) / math.sqrt(self.size), self.v(x)
        slots = self.initial(b, generator)
        out, attns = [], []
        for t in range(t_len):
            for _ in range(self.iterations):
                slots, attn = self.attend(slots, k[:, t], v[:, t])
            out.append(slots)
            attns.append(attn)
            if t < t_len - 1:
                slots = self.predict_next(slots)
        return torch.stack(out, 1), torch.stack(attns, 1)


# ----------------------------------------------------------------------------- encoder, dVAE, decoder


class CNNEncoder(nn.Module):
    """Frames to input tokens: 5x5 convolutions (the first with stride ``stride``), a Cartesian
    position embedding (a 1x1 conv of (x, y, 1 - x, 1 - y)), LayerNorm and an MLP."""

    def __init__(self, channels: int, d: int, stride: int):
        super().__init__()
        c = channels
        self.conv = nn.Sequential(nn.Conv2d(3, c, 5, stride, 2), nn.ReLU(), nn.Conv2d(c, c, 5, 1, 2), nn.ReLU(),
                                  nn.Conv2d(c, c, 5, 1, 2), nn.ReLU(), nn.Conv2d(c, d, 5, 1, 2))
        self.pos = nn.Conv2d(4, d, 1)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        s = h.shape[-1]
        c = (torch.arange(s, dtype=h.dtype, device=h.device) + 0.5) / s
        yy, xx = torch.meshgrid(c, c, indexing="ij")
        h = h + self.pos(torch.stack([xx, yy, 1 - xx, 1 - yy])[None])
        h = self.norm(h.flatten(2).transpose(1, 2))
        return self.mlp(h)


class DVAE(nn.Module):
    """The discrete VAE tokeniser: a 4x4 stride-4 conv and 1x1 convs to V logits per cell; the
    decoder maps (relaxed) one-hot tokens back through two PixelShuffle(2) stages."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab = vocab
        h = hidden
        self.enc = nn.Sequential(nn.Conv2d(3, h, 4, 4), nn.ReLU(), nn.Conv2d(h, h, 1), nn.ReLU(), nn.Conv2d(h, h, 1),
                                 nn.ReLU(), nn.Conv2d(h, vocab, 1))
        self.dec = nn.Sequential(nn.Conv2d(vocab, h, 1), nn.ReLU(), nn.Conv2d(h, h, 3, 1, 1), nn.ReLU(),
                                 nn.Conv2d(h, 4 * h, 1), nn.PixelShuffle(2), nn.Conv2d(h, h, 3, 1, 1), nn.ReLU(),
                                 nn.Conv2d(h, 4 * h, 1), nn.PixelShuffle(2), nn.Conv2d(h, 3, 1))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.enc(x), 1)


def cosine_anneal(step: int, start: float, final: float, start_step: int, final_step: int) -> float:
    """``start`` before ``start_step``, ``final`` from ``final_step``, a half cosine between (the tau schedule)."""
    if step < start_step:
        return start
    if step >= final_step:
        return final
    p = (step - start_step) / (final_step - start_step)
    return 0.5 * (start - final) * math.cos(math.pi * p) + 0.5 * (start + final)


class Decoder(nn.Module):
    """Block coupling and the autoregressive token decoder. Each slot's block m maps to a d_model
    token (a BlockLinear), plus a learnt block-position vector; a one-layer transformer runs over
    the M block tokens within each slot; the N * M tokens are the memory of a causal transformer
    decoder over the dVAE tokens whose start token is f^k(BOS) for the frame k steps ahead."""

    def __init__(self, size: int, blocks: int, d: int, vocab: int, tokens: int, layers: int, heads: int,
                 dropout: float):
        super().__init__()
        self.blocks, self.d, self.tokens = blocks, d, tokens
        self.slot_proj = BlockLinear(size, blocks * d, blocks)
        self.block_pos = nn.Parameter(torch.zeros(1, 1, blocks, d))
        self.coupler = transformer_encoder(d, heads, 1)
        self.dict = nn.Embedding(vocab, d)
        self.bos = nn.Parameter(torch.empty(1, 1, d))
        nn.init.xavier_uniform_(self.bos)
        self.f = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.pos = nn.Parameter(torch.empty(1, tokens, d))
        nn.init.trunc_normal_(self.pos, std=1.0, a=-2.0, b=2.0)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerDecoderLayer(d, heads, 4 * d, dropout, batch_first=True, norm_first=True)
        self.tf = nn.TransformerDecoder(layer, layers, norm=nn.LayerNorm(d))
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("causal", torch.triu(torch.full((tokens, tokens), float("-inf")), 1), persistent=False)

    def memory(self, slots: torch.Tensor) -> torch.Tensor:
        """(B, N, D) slots -> (B, N * M, d) block tokens."""
        b, n, _ = slots.shape
        t = self.slot_proj(slots).reshape(b * n, self.blocks, self.d) + self.block_pos[0]
        return self.coupler(t).reshape(b, n * self.blocks, self.d)

    def start(self, k: torch.Tensor) -> torch.Tensor:
        """BOS_k = f^k(BOS) per sample, (B, 1, d); k = 0 is the plain BOS."""
        starts = [self.bos]
        for _ in range(int(k.max()) if len(k) else 0):
            starts.append(self.f(starts[-1]))
        return torch.cat(starts, 0)[k]  # (B, 1, d)

    def logits(self, memory: torch.Tensor, k: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits of every token: input [BOS_k, emb(z_1 .. z_{L-1})] with positions."""
        x = torch.cat([self.start(k), self.dict(tokens[:, :-1])], 1)
        x = self.drop(x + self.pos[:, :x.shape[1]])
        n = x.shape[1]
        return self.head(self.tf(x, memory, tgt_mask=self.causal[:n, :n]))

    @torch.no_grad()
    def generate(self, memory: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Greedy decoding of every token of the frame k steps ahead, (B, L) token ids."""
        out = torch.zeros(len(memory), 0, dtype=torch.long, device=memory.device)
        for i in range(self.tokens):
            x = torch.cat([self.start(k), self.dict(out)], 1) + self.pos[:, :i + 1]
            h = self.tf(x, memory, tgt_mask=self.causal[:i + 1, :i + 1])
            out = torch.cat([out, self.head(h[:, -1]).argmax(-1, keepdim=True)], 1)
        return out


class Dreamweaver(nn.Module):
    """The whole model: dVAE tokeniser, CNN encoder, RBSU and the block-coupled decoder.

    ``forward(video, tau, k)`` takes a clip (B, T_c + T_p, 3, S, S) in [0, 1] and returns the
    per-sample loss (B,): the decoder's token cross-entropy summed over the frame's tokens plus the
    dVAE's squared error summed over pixels and averaged over frames. The decoder's targets are hard
    Gumbel samples of the dVAE, detached, and its inputs are detached: the dVAE learns from the
    reconstruction error alone, encoder, RBSU and decoder from the cross-entropy."""

    def __init__(self, *, side: int = 32, objective: Literal["predict", "reconstruct"] = "predict", slots: int = 3,
                 size: int = 64, blocks: int = 8, d_model: int = 64, cnn: int = 16, iterations: int = 3,
                 mlp_hidden: int = 64, prototypes: int = 32, vocab: int = 128, dvae_hidden: int = 32,
                 decoder_layers: int = 2, decoder_heads: int = 4, dropout: float = 0.1, cond: int = 2, pred: int = 2,
                 bi_attn: bool = True, predictor_heads: int = 4, cnn_stride: int = 2, memory: bool = True):
        super().__init__()
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}")
        self.objective, self.cond, self.pred, self.blocks = objective, cond, pred, blocks
        self.grid = side // 4
        self.dvae = DVAE(vocab, dvae_hidden)
        self.encoder = CNNEncoder(cnn, d_model, cnn_stride)
        self.rbsu = RBSU(d_model, slots, size, blocks, iterations=iterations, mlp_hidden=mlp_hidden,
                         prototypes=prototypes, bi_attn=bi_attn, predictor_heads=predictor_heads, use_memory=memory)
        self.decoder = Decoder(size, blocks, d_model, vocab, self.grid ** 2, decoder_layers, decoder_heads, dropout)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def bind(self, frames: torch.Tensor, generator: torch.Generator | None = None):
        """Conditioning frames (B, T_c, 3, S, S) in [0, 1] -> slots (B, T_c, N, D), attention (B, T_c, L, N)."""
        b, t = frames.shape[:2]
        x = self.encoder(self.normalise(frames.flatten(0, 1)))
        return self.rbsu(x.reshape(b, t, *x.shape[1:]), generator)

    def forward(self, video: torch.Tensor, tau: float, k: torch.Tensor) -> torch.Tensor:
        b = len(video)
        if self.objective == "predict":
            frame = video[torch.arange(b), self.cond + k]
        else:  # the reconstruction ablation: the last conditioning frame itself
            frame, k = video[:, self.cond - 1], torch.zeros_like(k)
        x = self.normalise(frame)
        logits = self.dvae.logits(x)  # (B, V, g, g): the target frame only (the official dVAE sees every frame)
        mse = ((x - self.dvae.dec(F.gumbel_softmax(logits, tau=tau, hard=False, dim=1))) ** 2).flatten(1).sum(1)
        target = F.gumbel_softmax(logits.detach(), tau=tau, hard=True, dim=1).argmax(1).flatten(1)
        slots, _ = self.bind(video[:, :self.cond])
        memory = self.decoder.memory(slots[:, -1])
        ce = F.cross_entropy(self.decoder.logits(memory, k, target).transpose(1, 2), target, reduction="none").sum(1)
        return ce + mse

    def target_offset(self) -> int:
        """The frame the decoder draws, relative to the first conditioning frame, at k = 0."""
        return self.cond if self.objective == "predict" else self.cond - 1

    @torch.no_grad()
    def imagine(self, slots: torch.Tensor, k: int = 0) -> torch.Tensor:
        """Frames (B, 3, S, S) in [0, 1] drawn greedily from last-step slots (B, N, D) (moved to the
        model's device; the frames stay there)."""
        slots = slots.to(self.mean.device)
        memory = self.decoder.memory(slots)
        tokens = self.decoder.generate(memory, torch.full((len(slots),), k, dtype=torch.long, device=slots.device))
        one_hot = F.one_hot(tokens, self.dvae.vocab).float().transpose(1, 2).reshape(len(slots), -1, self.grid,
                                                                                     self.grid)
        return (self.dvae.dec(one_hot) * self.std + self.mean).clamp(0, 1)


def swap_blocks(slots: torch.Tensor, i: int | torch.Tensor, j: int | torch.Tensor, blocks: list[int],
                m: int) -> torch.Tensor:
    """Slots (B, N, D) with blocks ``blocks`` of slot i and slot j exchanged (per sample i, j)."""
    b, n, size = slots.shape
    out = slots.clone().reshape(b, n, m, size // m)
    ar = torch.arange(b, device=slots.device)
    i = torch.as_tensor(i, device=slots.device).expand(b)
    j = torch.as_tensor(j, device=slots.device).expand(b)
    for blk in blocks:
        a, c = out[ar, i, blk].clone(), out[ar, j, blk].clone()
        out[ar, i, blk], out[ar, j, blk] = c, a
    return out.reshape(b, n, size)


# ----------------------------------------------------------------------------- DCI


def soft_iou(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Soft IoU of binary masks (O, P) with soft masks (N, P): I / (|t| + |p| - I), (O, N)."""
    t, p = truth.astype(float), pred.astype(float)
    inter = t @ p.T
    return inter / np.maximum(t.sum(1)[:, None] + p.sum(1)[None] - inter, 1e-12)


def match_slots(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """For each object, the slot the Hungarian method gives it on soft IoU (O,)."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-soft_iou(truth, pred))
    out = np.empty(len(truth), np.int64)
    out[rows] = cols
    return out


def importance_matrix(x: np.ndarray, y: np.ndarray, train_frac: float = 0.75, seed: int = 0,
                      n_train: int | None = None, **gbt) -> tuple[np.ndarray, np.ndarray]:
    """Gradient-boosted trees (scikit-learn's defaults, as the official script) per factor on
    slot vectors x (n, D) with discrete factors y (n, G): the (D, G) importance matrix (each column
    the classifier's impurity importances) and each factor's held-out accuracy (G,). The first
    ``n_train`` rows (default: ``train_frac`` of them) train, the rest are held out."""
    from sklearn.ensemble import GradientBoostingClassifier

    n_train = int(round(train_frac * len(x))) if n_train is None else int(n_train)
    imp, acc = np.zeros((x.shape[1], y.shape[1])), np.zeros(y.shape[1])
    for g in range(y.shape[1]):
        clf = GradientBoostingClassifier(random_state=seed, **gbt).fit(x[:n_train], y[:n_train, g])
        imp[:, g] = np.abs(clf.feature_importances_)
        acc[g] = clf.score(x[n_train:], y[n_train:, g])
    return imp, acc


def block_importance(imp: np.ndarray, blocks: int) -> np.ndarray:
    """(D, G) -> (M, G): importances summed within each block of d = D / M contiguous dimensions."""
    return imp.reshape(blocks, -1, imp.shape[1]).sum(1)


def _entropy(p: np.ndarray, base: int, axis: int) -> np.ndarray:
    from scipy.stats import entropy

    return entropy(p + 1e-11, base=base, axis=axis)


def dci(r: np.ndarray) -> dict[str, object]:
    """Disentanglement and completeness of a (M blocks, G factors) importance matrix: per block
    1 - H(factors | block) (base G), weighted by the block's share of importance; per factor
    1 - H(blocks | factor) (base M), averaged over factors (unweighted, as the official script)."""
    m, g = r.shape
    per_block = 1.0 - _entropy(r, g, 1) if g > 1 else np.ones(m)
    per_factor = 1.0 - _entropy(r, m, 0)
    rho = r.sum(1) / max(r.sum(), 1e-12)
    return {"D": float((rho * per_block).sum()), "C": float(per_factor.mean()),
            "per_block": per_block.tolist(), "per_factor": per_factor.tolist()}


# ----------------------------------------------------------------------------- probing a model


def to_input(frames: np.ndarray) -> torch.Tensor:
    """uint8 frames (..., S, S, 3) -> float (..., 3, S, S) in [0, 1]."""
    x = torch.as_tensor(frames).float() / 255.0
    return x.movedim(-1, -3)


@torch.no_grad()
def probe(model: Dreamweaver, clips: np.ndarray, masks: np.ndarray, objects: int, seed: int = 0,
          batch: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """The slots of the last conditioning step of each clip (B, T_c, S, S, 3) matched to its objects:
    the slot attention of that step, upsampled to the frame, against each object's visible mask in
    that frame (``masks`` (B, S, S), 0 background, i + 1 object i) by soft IoU and the Hungarian
    method. Returns every slot (B, N, D) and each object's slot (B, O); :func:`matched` gathers
    the objects' slots."""
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same slot noise on any device
    side = clips.shape[-2]
    device = model.mean.device
    out_s, out_o = [], []
    for i in range(0, len(clips), batch):
        slots, attn = model.bind(to_input(clips[i:i + batch]).to(device), g)
        slots, attn = slots[:, -1].float().cpu().numpy(), attn[:, -1].float().cpu().numpy()  # (b, N, D), (b, L, N)
        cells = int(round(math.sqrt(attn.shape[1])))
        rep = side // cells
        soft = attn.reshape(len(attn), cells, cells, -1).repeat(rep, 1).repeat(rep, 2)  # (b, S, S, N)
        for j in range(len(slots)):
            truth = np.stack([(masks[i + j] == o + 1).ravel() for o in range(objects)])
            order = match_slots(truth, soft[j].reshape(-1, soft.shape[-1]).T)
            out_s.append(slots[j])
            out_o.append(order)
    return np.stack(out_s), np.stack(out_o)


def matched(slots: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each object's slot, (B, O, D), from every slot (B, N, D) and the assignment (B, O)."""
    return np.take_along_axis(slots, order[..., None], 1)


def crops(frames: np.ndarray, centres: np.ndarray, width: int) -> np.ndarray:
    """Windows of ``width`` pixels centred at ``centres`` (n, 2) of frames (n, S, S, 3), zero padded,
    flattened to (n, width * width * 3) floats in [0, 1]."""
    r = width // 2
    pad = np.pad(frames, ((0, 0), (r, r), (r, r), (0, 0)))
    c = np.rint(centres).astype(int)
    return np.stack([pad[i, c[i, 0]:c[i, 0] + width, c[i, 1]:c[i, 1] + width] for i in range(len(frames))]
                    ).reshape(len(frames), -1).astype(np.float32) / 255.0


def swap_sets(r: np.ndarray, g: int) -> tuple[list[int], list[int]]:
    """For factor g of an (M, G) block-importance matrix: the fewest most important blocks holding
    at least half of its importance, and as many of the least important blocks (the control)."""
    order = np.argsort(-r[:, g], kind="stable")
    share = np.cumsum(r[order, g]) / max(r[:, g].sum(), 1e-12)
    n = int(np.searchsorted(share, 0.5) + 1)
    n = min(n, len(order) // 2) or 1
    return sorted(order[:n].tolist()), sorted(order[::-1][:n].tolist())
