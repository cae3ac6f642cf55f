"""dreamweaver config. Defaults are the ``small`` preset: Moving-Sprites-like videos at 32 x 32 with
2 sprites (colour, shape, size static; direction, speed dynamic), generated here; a small
Dreamweaver (3 slots x 8 blocks x 64, 32 prototypes, a dVAE with 128 codes, a 2-layer decoder)
trained with the predictive objective and, from the same initial weights, with the reconstruction
objective (the paper's main ablation), one Ray Train run per (objective, seed) in a Tune trial.

The ``paper`` preset keeps the official recipe (train.sh): 64 x 64, 5 slots x 8 blocks x 768,
64 prototypes, vocabulary 4096, 8 decoder layers, cond 2 / pred 2, batch 24, 90 epochs, learning
rates 1e-4 (encoder), 2e-4 (dVAE, decoder), gradient clip 0.1, warm-up 15%."""
from __future__ import annotations

from pydantic import Field, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources
from .dreamweaver import OBJECTIVES


class Data(Section):
    side: int = Field(32, ge=16)
    """frame side in pixels (a multiple of 4: the dVAE's 4 x 4 cells)"""
    objects: int = Field(2, ge=2, le=4)
    frames: int = Field(6, ge=4)
    """frames per video; a training clip is cond + pred consecutive frames from a random start"""
    train: int = Field(3000, ge=8)
    test: int = Field(1300, ge=8)
    """test videos: the imagination test's first ``eval.swap_videos``, DCI's among the others (1,300
    at small: 1,000 for DCI's 2,000 object rows at 2 objects, and the swap test's 300)"""
    ood: int = Field(500, ge=0)
    shard: int = Field(500, ge=1)
    """videos per generation task"""
    seed: int = 0


class Model(Section):
    slots: int = Field(3, ge=2)
    size: int = Field(64, ge=4)
    """slot size D (M blocks of D / M)"""
    blocks: int = Field(8, ge=1)
    prototypes: int = Field(32, ge=1)
    iterations: int = Field(3, ge=1)
    mlp_hidden: int = Field(64, ge=1)
    d_model: int = Field(64, ge=8)
    cnn: int = Field(16, ge=4)
    """CNN encoder channels"""
    cnn_stride: int = Field(2, ge=1, le=2)
    """the first convolution's stride (the official 1 at 64 x 64: 4,096 inputs per frame)"""
    vocab: int = Field(128, ge=2)
    dvae_hidden: int = Field(32, ge=4)
    decoder_layers: int = Field(2, ge=1)
    decoder_heads: int = Field(4, ge=1)
    predictor_heads: int = Field(4, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)
    bi_attn: bool = True
    memory: bool = False
    """the block prototype memory after every slot-attention iteration (the official default, on in
    ``paper``). Off at ``small`` (the official ``skip_prototype_memory``): at init the memory's mix
    of near-identical prototypes maps every slot to the same vector, and within the CPU budget the
    slots never separated (docs/studies/dreamweaver.md has the measurement)"""
    cond: int = Field(2, ge=2)
    """conditioning frames T_c (the predictor is trained through frame 2's initialisation)"""
    pred: int = Field(2, ge=1)
    """future frames T_p the decoder predicts (k drawn per sample)"""


class Train(WorkerResources):
    objectives: list[str] = list(OBJECTIVES)
    seeds: int = Field(5, ge=1)
    """one Tune trial per (objective, seed); 5 at small (a t interval over 3 seeds, 2 degrees of
    freedom, left most claims inconclusive by its width alone)"""
    baseline: bool = True
    """also train, per seed, the monolithic-slot baseline the paper compares against: the predictive
    objective with one block per slot (``model.blocks`` = 1, a STEVE-like slot of the same size,
    the same budget and seed). DCI cuts its slots into ``model.blocks`` equal chunks, so the block
    model is compared block by block with a representation that has no block structure"""
    steps: int = Field(3000, ge=1)
    batch: int = Field(24, ge=1)
    lr_enc: float = Field(1e-4, gt=0)
    lr_dvae: float = Field(3e-4, gt=0)
    lr_dec: float = Field(3e-4, gt=0)
    warmup: float = Field(0.05, ge=0, lt=1)
    """share of the steps the learning rate warms up and tau anneals over"""
    tau_start: float = Field(1.0, gt=0)
    tau_final: float = Field(0.1, gt=0)
    grad_clip: float = Field(0.5, ge=0)
    num_workers: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(2, ge=1)


class Evaluation(TaskResources):
    dci_points: int = Field(2000, ge=40)
    """object-slot pairs the gradient-boosted trees see (75% train, 25% test), as the official script"""
    swap_videos: int = Field(300, ge=4)
    """test videos in the imagination (block swap) test"""
    strips: int = Field(6, ge=1)
    """videos in the rollout strips"""


class Config(StudyConfig):
    data: Data = Data()
    model: Model = Model()
    train: Train = Train()
    eval: Evaluation = Evaluation()

    @model_validator(mode="after")
    def _consistent(self):
        m, d = self.model, self.data
        if not self.train.objectives or len(set(self.train.objectives)) != len(self.train.objectives) or \
                any(o not in OBJECTIVES for o in self.train.objectives):
            raise ValueError(f"train.objectives: each of {list(OBJECTIVES)} at most once, got {self.train.objectives}")
        if m.size % m.blocks:
            raise ValueError(f"model.size {m.size} must split into model.blocks {m.blocks}")
        if (m.size // m.blocks) % m.predictor_heads and m.bi_attn:
            raise ValueError(f"the block width {m.size // m.blocks} must split into model.predictor_heads")
        if self.train.baseline and m.bi_attn and m.size % m.predictor_heads:
            raise ValueError(f"the monolithic baseline's block is the whole slot ({m.size}): it must split into "
                             "model.predictor_heads (or train.baseline: false)")
        if m.d_model % m.decoder_heads:
            raise ValueError(f"model.d_model {m.d_model} must split into model.decoder_heads {m.decoder_heads}")
        if d.side % 4 or d.side % (4 * m.cnn_stride):
            raise ValueError(f"data.side {d.side} must be a multiple of 4 (and of 4 x cnn_stride)")
        if m.cond + m.pred > d.frames:
            raise ValueError(f"a clip of cond + pred = {m.cond + m.pred} frames needs data.frames >= that")
        if m.slots < d.objects:
            raise ValueError(f"model.slots {m.slots} < data.objects {d.objects}: every object needs a slot")
        e = self.eval
        if e.swap_videos >= d.test or (d.test - e.swap_videos) * d.objects < e.dci_points:
            raise ValueError(f"data.test {d.test}: the imagination test's eval.swap_videos {e.swap_videos} and DCI's "
                             f"eval.dci_points {e.dci_points} (at {d.objects} objects a video) need disjoint videos")
        return self


PRESETS = {
    "smoke": {
        "data": {"train": 64, "test": 40, "ood": 20, "shard": 32, "side": 16},
        "model": {"size": 16, "blocks": 4, "prototypes": 4, "iterations": 2, "mlp_hidden": 8, "d_model": 16, "cnn": 4,
                  "vocab": 8, "dvae_hidden": 4, "decoder_layers": 1, "decoder_heads": 2, "predictor_heads": 2},
        "train": {"seeds": 1, "steps": 6, "batch": 4},
        "eval": {"dci_points": 60, "swap_videos": 8, "strips": 2},
    },
    "small": {},
    "paper": {
        # train.sh: moving-sprites2 at 64 px; the set's size is not in the repo (40k steps per the run name x 24)
        "data": {"side": 64, "objects": 3, "frames": 8, "train": 10000, "test": 2000, "ood": 2000},
        "model": {"slots": 5, "size": 768, "blocks": 8, "prototypes": 64, "iterations": 3, "mlp_hidden": 192,
                  "d_model": 192, "cnn": 64, "cnn_stride": 1, "vocab": 4096, "dvae_hidden": 64, "decoder_layers": 8,
                  "decoder_heads": 4, "predictor_heads": 4, "dropout": 0.1, "cond": 2, "pred": 2, "memory": True},
        "train": {"seeds": 3, "steps": 37500, "batch": 24, "lr_enc": 1e-4, "lr_dvae": 2e-4, "lr_dec": 2e-4,
                  "warmup": 0.15, "grad_clip": 0.1, "gpus_per_worker": 1},
        "eval": {"gpus_per_task": 1},
    },
}
