"""molt5_3d config. Defaults are the ``small`` preset: real QM9 molecules and DFT conformers (the
qm9pack wheel), tokenised by SELFIES and E3FP (RDKit) in Ray tasks, a small T5 (transformers'
T5 config, v1.1 shape) per fusion variant pretrained briefly by span corruption and fine-tuned
for text regression of five targets, the variants of a seed side by side in one Ray Train run,
one Tune trial per seed.

The ``paper`` preset names the released checkpoint (QizhiPei/3d-molt5-base) and the official
fine-tuning settings (batch 256, lr 3e-4, 10k warm-up steps, linear schedule, dropout 0.1) for a
GPU cluster."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from ...config import Section, StudyConfig
from ...resources import WorkerResources
from .data import TARGETS


class Data(Section):
    source: str = "packaged"
    """``packaged`` (QM9 from the qm9pack wheel), a QM9 CSV file or a folder of them"""
    molecules: int = Field(16000, ge=20)
    """molecules drawn (seeded) from the whole data set before tokenisation"""
    valid: int = Field(500, ge=5)
    test: int = Field(2000, ge=5)
    seed: int = 0
    """the draw and the split"""


class Tokens(Section):
    bits: int = Field(4096, ge=16)
    """E3FP's folded size (the paper's fp_bits)"""
    level: int = Field(3, ge=0, le=5)
    """E3FP's iterations (the paper's fp_level): level + 1 identifiers per atom"""
    chunk: int = Field(1500, ge=1)
    """molecules per Ray task"""


class Model(Section):
    """The T5 (v1.1 shape: gated GELU, untied head) built from a transformers config, or a
    checkpoint to start from (``checkpoint``: a folder or an HF id)."""

    checkpoint: Optional[str] = None
    """released weights to start from (the paper: QizhiPei/3d-molt5-base). Not supported yet:
    prepare() refuses any value with one line, since the released tokenizer and 3D table are not
    mapped onto this study's vocabulary; None: the T5 described below"""
    d_model: int = Field(64, ge=8)
    d_ff: int = Field(128, ge=8)
    layers: int = Field(2, ge=1)
    """encoder layers (and as many decoder layers)"""
    heads: int = Field(4, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    """0 at small (a few epochs of a tiny model: no overfitting to fight); the paper fine-tunes at 0.1"""


class Train(WorkerResources):
    variants: list[Literal["1d", "3d", "sum", "concat", "shuffled", "ecfp"]] = ["1d", "3d", "sum", "concat", "shuffled",
                                                                               "ecfp"]
    """1D-only (SELFIES), 3D-only (E3FP identifiers of the atoms), 1D+3D by sum and by concat, the
    negative control: 1D+3D (sum) with the identifiers of another molecule of the same size, and the
    2D control: each atom's Morgan (ECFP) identifiers through the same table and sum fusion"""
    targets: list[str] = list(TARGETS)
    seeds: int = Field(4, ge=1)
    """one Tune trial (one Ray Train run) per seed, its variants side by side"""
    pretrain_steps: int = Field(300, ge=0)
    """span-corruption steps before fine-tuning (each variant on its own view of the molecules)"""
    steps: int = Field(2400, ge=1)
    """fine-tuning steps"""
    batch: int = Field(64, ge=1)
    """examples (a molecule with one target's prompt) per step"""
    lr: float = Field(3e-3, gt=0)
    """3e-3 at small: a calibration of the 1D and sum variants (d_model 64, 2,000 steps) learnt nothing
    useful at 1e-3 within the budget; the paper fine-tunes its base model at 3e-4"""
    warmup_steps: int = Field(100, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "linear"
    weight_decay: float = Field(0.01, ge=0)
    noise_density: float = Field(0.15, gt=0, lt=1)
    mean_span: float = Field(3.0, gt=0)
    eval_every: int = Field(300, ge=0)
    """fine-tuning steps between validation MAEs (the learning curves)"""
    eval_batch: int = Field(512, ge=1)
    num_workers: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(2, ge=1)


class Evaluation(Section):
    max_new_tokens: int = Field(8, ge=2)
    ridge_alpha: float = Field(1.0, gt=0)
    """the reference regressor (ridge on E3FP identifier counts)"""


class Config(StudyConfig):
    data: Data = Data()
    tokens: Tokens = Tokens()
    model: Model = Model()
    train: Train = Train()
    eval: Evaluation = Evaluation()

    @model_validator(mode="after")
    def _consistent(self):
        unknown = [t for t in self.train.targets if t not in TARGETS]
        if unknown:
            raise ValueError(f"train.targets: unknown {unknown}; known: {list(TARGETS)}")
        if not self.train.targets or not self.train.variants:
            raise ValueError("train.targets and train.variants must each name at least one")
        if len(set(self.train.variants)) != len(self.train.variants):
            raise ValueError(f"train.variants lists one twice: {self.train.variants}")
        if self.data.valid + self.data.test >= self.data.molecules:
            raise ValueError("data.valid + data.test must leave molecules to train")
        if self.model.d_model % self.model.heads:
            raise ValueError("model.d_model must be a multiple of model.heads")
        return self


PRESETS = {
    "smoke": {
        "data": {"molecules": 700, "valid": 40, "test": 80},
        "tokens": {"chunk": 350},
        "model": {"d_model": 32, "d_ff": 64, "layers": 1, "heads": 2},
        "train": {"seeds": 1, "pretrain_steps": 4, "steps": 16, "batch": 16, "warmup_steps": 2, "eval_every": 8},
    },
    "small": {},
    "paper": {
        # the released checkpoint and the official PubChemQC fine-tuning settings. prepare() refuses
        # the checkpoint with one line (its tokenizer and 3D table are not mapped onto this study's
        # vocabulary yet); --set model.checkpoint=null with a T5-base shape (d_model 768, d_ff 2048,
        # 12 layers, 12 heads) trains from scratch instead
        "data": {"molecules": 130831, "valid": 10000, "test": 10000},
        "model": {"checkpoint": "QizhiPei/3d-molt5-base", "dropout": 0.1},
        "train": {"seeds": 3, "pretrain_steps": 0, "steps": 35000, "batch": 256, "lr": 3e-4, "warmup_steps": 10000,
                  "schedule": "linear", "eval_every": 5000, "num_workers": 4, "gpus_per_worker": 1},
    },
}
