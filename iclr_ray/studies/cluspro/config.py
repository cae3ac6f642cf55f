"""cluspro config. Defaults are the ``small`` preset: scikit-learn's real handwritten digits as
objects, six image transformations as attributes (multimodal: each looks different on even and
odd digits; and the unimodal control), 30% of the 60 pairs held out; a small CNN encoder with the
three-path classifier; CE, single-centroid, k-means and ClusPro prototypes side by side in one Ray
Train run per (world, seed), one Tune trial each.

The ``paper`` preset keeps the official MIT-States settings (Adam 1e-4, batch 64, 10 epochs,
K = 5, momentum 0.99, contrastive weight 0.1) for a GPU cluster; see docs/studies/cluspro.md for
what runs at paper scale."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, ValidationInfo, model_validator

from ...config import Section, StudyConfig
from ...resources import WorkerResources
from .cluspro import METHODS

SWEEPABLE = ("proto.", "train.lr")
"""what ``iclr-ray sweep cluspro`` may vary: the prototype memory (K, momentum, contrastive weight
...) and the learning rate"""


class Data(Section):
    kind: Literal["digits", "features"] = "digits"
    """``digits``: real handwritten digits with attribute transformations; ``features``: the same
    design drawn in feature space (fast)"""
    worlds: list[Literal["multimodal", "unimodal", "official"]] = ["multimodal", "unimodal"]
    """the multimodal world and the unimodal control; ``official``: the data set at ``root``"""
    root: Optional[str] = None
    """an official CZSL data set folder (MIT-States, UT-Zappos, C-GQA as the official download
    scripts lay them out: images/, <split>/*_pairs.txt, metadata_<split>.t7); its images go through
    the frozen CLIP of ``model.clip``"""
    split: str = "compositional-split-natural"
    unseen: float = Field(0.3, gt=0, lt=0.6)
    """share of the pairs held out (a third for validation, two thirds for test)"""
    renders: int = Field(3, ge=1, le=6)
    """attributes each training digit is rendered with"""
    images: int = Field(1797, ge=100, le=1797)
    """digits drawn from scikit-learn's 1,797"""
    feature_dim: int = Field(32, ge=4)
    noise: float = Field(2.5, ge=0)
    """``features`` only: the sd of the noise around u[a, mode] + v[o] (unit-variance prototypes)"""
    seed: int = 0
    """the pairs, the image split and the renderings (the same in both worlds)"""


class Model(Section):
    clip: str = "openai/clip-vit-large-patch14"
    """the frozen image encoder for ``data.root`` (an HF id or a local folder)"""
    d: int = Field(128, ge=8)
    """feature width of every path"""
    prim_dropout: float = Field(0.3, ge=0, lt=1)
    """dropout on the primitive embeddings (the official attr_dropout)"""
    dropout: float = Field(0.5, ge=0, lt=1)
    """the disentanglers' dropout (the official layer's default)"""


class Proto(Section):
    k: int = Field(3, ge=2)
    """prototypes per attribute and per object (``single`` always has 1)"""
    momentum: float = Field(0.99, ge=0, lt=1)
    weight: float = Field(0.1, ge=0)
    """the prototype contrastive loss's weight"""
    hsic: float = Field(0.1, ge=0)
    """the HSIC decorrelation weight of ``cluspro_hsic`` (the released code computes it, weight 0)"""
    reg: float = Field(0.1, gt=0)
    """the entropic weight of the OT assignment"""
    structure: float = Field(2.0, ge=0)
    """the structure-aware term's weight (0: plain Sinkhorn)"""


class Train(WorkerResources):
    methods: list[Literal[METHODS]] = ["ce", "single", "kmeans", "cluspro", "cluspro_hsic"]  # type: ignore[valid-type]
    """CE only, the single-centroid prototype loss, k-means prototypes, ClusPro (the released
    code's: HSIC weight 0) and ClusPro with the paper's HSIC decorrelation (``cluspro_hsic``, ~60%
    of a trial's time on its own); the claims read both ClusPro arms"""
    seeds: int = Field(8, ge=1)
    """one Tune trial per (world, seed); a seed also draws the held-out pairs and the image split"""
    steps: int = Field(1000, ge=1)
    batch: int = Field(64, ge=2)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-5, ge=0)
    eval_every: int = Field(250, ge=0)
    """steps between validation AUCs (the learning curves)"""
    num_workers: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(2, ge=1)


class Evaluation(Section):
    threshold_trials: int = Field(50, ge=2)
    """open world: feasibility thresholds tried on validation (the official threshold_trials)"""
    batch: int = Field(1024, ge=1)
    projection_samples: int = Field(600, ge=10)
    """training samples in the 2-D feature projection plot"""


class Config(StudyConfig):
    data: Data = Data()
    model: Model = Model()
    proto: Proto = Proto()
    train: Train = Train()
    eval: Evaluation = Evaluation()

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo):
        if not self.train.methods or len(set(self.train.methods)) != len(self.train.methods):
            raise ValueError(f"train.methods must name each method once: {self.train.methods}")
        if not self.data.worlds or len(set(self.data.worlds)) != len(self.data.worlds):
            raise ValueError(f"data.worlds must name each world once: {self.data.worlds}")
        planning = bool((info.context or {}).get("planning"))  # iclr-ray plan reads no data
        if ("official" in self.data.worlds) != bool(self.data.root) and not (planning and not self.data.root):
            raise ValueError("data.root: the official world reads a CZSL data set by path (--set data.root=DIR with "
                             "data.worlds=[official]); the digits worlds read none")
        return self


PRESETS = {
    "smoke": {
        "data": {"kind": "features", "images": 400, "renders": 2},
        "model": {"d": 32},
        "proto": {"structure": 0.0},
        "train": {"methods": ["ce", "single", "cluspro"], "seeds": 1, "steps": 30, "batch": 32, "eval_every": 15},
        "eval": {"threshold_trials": 5, "projection_samples": 100},
    },
    "small": {},
    "paper": {
        # the official MIT-States config (Adam 1e-4, batch 64, 10 epochs of its 30k training images,
        # K = 5) on the frozen CLIP ViT-L/14; needs --set data.root=DIR (the MIT-States folder)
        "data": {"worlds": ["official"]},
        "proto": {"k": 5, "momentum": 0.99, "weight": 0.1},
        "model": {"d": 768},
        "train": {"seeds": 3, "steps": 4700, "batch": 64, "lr": 1e-4, "eval_every": 470, "num_workers": 1,
                  "gpus_per_worker": 1},
        "eval": {"batch": 64},
    },
}
