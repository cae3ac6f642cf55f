"""ctrl_u config. Defaults are the ``small`` preset: blob scenes at 32 x 32 with per-pixel class
masks (8 classes, generated here), a small pixel-space conditional U-Net and its ControlNet
(diffusers' models from configs) pretrained together on the scenes (captions = the classes shown,
10% dropped for classifier-free guidance), a weak reward segmenter and a stronger oracle segmenter
trained on real scenes; then, from that one base, the ControlNet alone post-trained per (arm, seed):
ControlNet (no reward), ControlNet++ (reward fine-tuning) and Ctrl-U (uncertainty-weighted reward).

The ``paper`` preset keeps the official segmentation recipe (train/ctrlu_ade20k.sh): SD1.5 and the
fine-tuned ADE20K ControlNet by HF id, lr 1e-5, batch 4 x 4, grad_scale 0.1, u_scale 1, Δt 1,
timesteps [0, 400], λ_r ramped over 5,000 steps, 35k steps; DDIM 20 steps at CFG 2 to evaluate."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources
from .ctrl_u import ARMS


class Data(Section):
    side: int = Field(32, ge=8)
    """image side in pixels (a multiple of 2 ** (levels - 1))"""
    train: int = Field(4000, ge=8)
    """real scenes the generator and the oracle learn from"""
    test: int = Field(400, ge=8)
    """held-out real scenes: their masks are the conditions of the evaluation, their images FID's reference"""
    valid: int = Field(200, ge=0)
    """held-out real scenes, none of them a test scene, on which Δt is chosen among post.dt and
    post.ablation_dt (0: no choice, the claims use post.dt)"""
    reward_train: int = Field(400, ge=8)
    """the first scenes of the training set the reward segmenter sees (few: it is meant to be imperfect)"""
    shard: int = Field(1000, ge=1)
    """scenes per generation task"""
    seed: int = 0


class Model(Section):
    unet: str = "tiny"
    """'tiny' (a small U-Net from a config, pretrained here) or a folder / HF id"""
    controlnet: str = "tiny"
    """'tiny' (initialised from the U-Net's encoder, pretrained with it) or a folder / HF id"""
    channels: list[int] = [16, 32, 32]
    attention_levels: int = Field(1, ge=0)
    context_dim: int = Field(32, ge=4)
    head_dim: int = Field(8, ge=1)
    groups: int = Field(8, ge=1)
    embedding: list[int] = [16]
    """the ControlNet's condition-embedding channels (one entry: the map stays at the image's side)"""


class Segmenters(TaskResources):
    reward_width: int = Field(8, ge=2)
    reward_depth: int = Field(2, ge=1)
    reward_steps: int = Field(150, ge=1)
    oracle_width: int = Field(16, ge=4)
    """a multiple of 4 (GroupNorm(4))"""
    oracle_steps: int = Field(800, ge=1)
    oracle_noise: float = Field(0.3, ge=0)
    """the largest Gaussian noise scale the oracle is trained under (robust to generated images)"""
    batch: int = Field(32, ge=1)
    lr: float = Field(3e-3, gt=0)


class Pretrain(WorkerResources):
    steps: int = Field(1500, ge=0)
    """0: no pretraining (the base models come from model.unet / model.controlnet)"""
    batch: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup: int = Field(100, ge=0)
    caption_dropout: float = Field(0.1, ge=0, le=1)
    """the share of captions replaced by the empty one (the unconditional branch of CFG)"""
    bases: int = Field(1, ge=1)
    """replicates of everything the arms start from: base generators pretrained from their own
    seeds, each with its own reward and oracle segmenters; post-training seed i starts from base
    i mod bases. 1 (the paper's setting: one published ControlNet and one reward model) shares one
    base, so the intervals cover post-training and sampling; post.seeds bases put pretraining and
    the segmenters' training in them too"""


class PostTrain(WorkerResources):
    arms: list[str] = list(ARMS)
    seeds: int = Field(4, ge=1)
    steps: int = Field(400, ge=1)
    batch: int = Field(16, ge=1)
    lr: float = Field(1e-4, gt=0)
    """the ControlNet's rate (the official 1e-5 moves a 32 px model too little in 400 steps)"""
    warmup: int = Field(20, ge=0)
    grad_scale: float = Field(0.5, ge=0)
    """λ_r after its ramp"""
    ramp_steps: int = Field(100, ge=0)
    """steps over which λ_r ramps linearly from 0 to grad_scale"""
    u_scale: float = Field(1.0, ge=0)
    u_term: Literal["official", "scaled"] = "official"
    """how the uncertainty's mean enters the loss: added as it is (the official script: L_pre +
    λ_r reward + mean(U)), or times λ_r like the reward ("scaled", this study's form before
    2026-12-07: the penalty 1/λ_r = 2x weaker at small, 10x at the official grad_scale 0.1)"""
    dt: int = Field(1, ge=0)
    """Δt between the two copies (0: the negative control, Ctrl-U = reward fine-tuning)"""
    ablation_dt: list[int] = [100]
    """more Ctrl-U arms at these Δt, every seed (reported beside the claims, as the paper's Δt
    ablation; the claims use ``dt``)"""
    t_min: int = Field(0, ge=0)
    t_max: int = Field(400, ge=0)
    """the reward's timesteps [t_min, t_max] (the official max_timestep_rewarding)"""
    grad_clip: float = Field(1.0, ge=0)
    eval_every: int = Field(100, ge=0)
    """steps between the oracle's mIoU on samples drawn during training (0: only at the end)"""
    num_workers: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(2, ge=1)


class Evaluation(TaskResources):
    images: int = Field(200, ge=8)
    """generated images per model (conditions: the first test masks; the same noise for every arm of a seed)"""
    valid_images: int = Field(100, ge=4)
    """images per Ctrl-U arm and seed drawn for the first validation masks, to choose Δt"""
    curve_images: int = Field(32, ge=4)
    """images drawn at each eval_every during post-training"""
    steps: int = Field(20, ge=1)
    """DDIM sampling steps"""
    guidance: float = Field(2.0, ge=1)
    """classifier-free guidance scale"""
    batch: int = Field(64, ge=1)
    grid: int = Field(6, ge=1)
    """conditions in the sample-grid figure"""


class Config(StudyConfig):
    data: Data = Data()
    model: Model = Model()
    segmenters: Segmenters = Segmenters()
    pretrain: Pretrain = Pretrain()
    post: PostTrain = PostTrain()
    eval: Evaluation = Evaluation()

    @model_validator(mode="after")
    def _consistent(self):
        m, d, p = self.model, self.data, self.post
        if not p.arms or len(set(p.arms)) != len(p.arms) or any(a not in ARMS for a in p.arms):
            raise ValueError(f"post.arms: each of {list(ARMS)} at most once, got {p.arms}")
        if not m.channels or any(c % m.groups for c in m.channels):
            raise ValueError(f"model.channels {m.channels}: each a multiple of model.groups {m.groups}")
        if m.attention_levels > len(m.channels):
            raise ValueError(f"model.attention_levels {m.attention_levels} > the {len(m.channels)} levels")
        if d.side % 2 ** (len(m.channels) - 1):
            raise ValueError(f"data.side {d.side} must be a multiple of {2 ** (len(m.channels) - 1)}")
        if self.pretrain.bases > p.seeds:
            raise ValueError(f"pretrain.bases {self.pretrain.bases} > post.seeds {p.seeds}: a base no seed uses")
        if d.reward_train > d.train:
            raise ValueError(f"data.reward_train {d.reward_train} > data.train {d.train}")
        if self.segmenters.oracle_width % 4 or self.segmenters.reward_width % 4:
            raise ValueError("segmenters.oracle_width and reward_width must be multiples of 4")
        if any(v < 0 or v == p.dt for v in p.ablation_dt) or len(set(p.ablation_dt)) != len(p.ablation_dt) or \
                (p.ablation_dt and "ctrl_u" not in p.arms):
            raise ValueError(f"post.ablation_dt {p.ablation_dt}: distinct Δt >= 0 other than post.dt {p.dt}, with "
                             "the ctrl_u arm")
        if p.t_min > p.t_max or p.t_max > 999:
            raise ValueError(f"post.t_min {p.t_min} .. post.t_max {p.t_max}: an interval within 0..999")
        if self.eval.images > d.test or self.eval.curve_images > d.test:
            raise ValueError(f"eval.images and eval.curve_images must be at most data.test {d.test}")
        if d.valid and self.eval.valid_images > d.valid:
            raise ValueError(f"eval.valid_images {self.eval.valid_images} must be at most data.valid {d.valid}")
        if self.pretrain.steps == 0 and (m.unet == "tiny" or m.controlnet == "tiny"):
            raise ValueError("pretrain.steps = 0 needs model.unet and model.controlnet as folders or HF ids")
        return self


PRESETS = {
    "smoke": {
        "data": {"side": 16, "train": 96, "test": 24, "valid": 8, "reward_train": 48, "shard": 48},
        "model": {"channels": [8, 16], "context_dim": 16, "groups": 4, "embedding": [8]},
        "segmenters": {"reward_width": 4, "reward_steps": 10, "oracle_width": 8, "oracle_steps": 10, "batch": 8},
        "pretrain": {"steps": 6, "batch": 4, "warmup": 0, "bases": 2},  # two seeds, each from its own base
        "post": {"seeds": 2, "steps": 4, "ablation_dt": [50], "batch": 4, "warmup": 0, "ramp_steps": 2,
                 "eval_every": 2},
        "eval": {"images": 12, "valid_images": 8, "curve_images": 4, "steps": 3, "batch": 12, "grid": 3},
    },
    "small": {},
    "paper": {
        # train/ctrlu_ade20k.sh: SD1.5 at 512 px, the ADE20K-fine-tuned ControlNet, UperNet-R50 reward
        "data": {"side": 512},
        "model": {"unet": "runwayml/stable-diffusion-v1-5", "controlnet": "lllyasviel/control_v11p_sd15_seg",
                  "channels": [320, 640, 1280, 1280], "attention_levels": 3, "context_dim": 768, "head_dim": 8,
                  "groups": 32, "embedding": [16, 32, 96, 256]},
        "segmenters": {"gpus_per_task": 1},
        "pretrain": {"steps": 0, "gpus_per_worker": 1},
        "post": {"seeds": 1, "steps": 35000, "batch": 16, "lr": 1e-5, "warmup": 2000, "grad_scale": 0.1,
                 "ramp_steps": 5000, "u_scale": 1.0, "dt": 1, "t_min": 0, "t_max": 400, "ablation_dt": [],
                 "gpus_per_worker": 1},
        "eval": {"steps": 20, "guidance": 2.0, "gpus_per_task": 1},
    },
}
