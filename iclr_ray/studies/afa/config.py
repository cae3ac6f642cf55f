"""afa config. Defaults are the ``small`` preset: scikit-learn's real digits at 16 x 16; a small
class-conditional pixel-space U-Net (diffusers' ``UNet2DConditionModel`` from a config) pretrained
briefly on all digits as the common base, then fine-tuned into experts on *different* classes (the
paper's experts are fine-tunes of one SD1.5 base, which is what makes weight merging a baseline at
all) and into a pair of near-identical experts (all digits, two seeds: the control); then, per seed,
the SABW aggregators trained on all training digits with the experts frozen.

The ``paper`` preset records the setting the fork describes: SD1.5-architecture community fine-tunes
by HF id, DDIM 50 steps at CFG 7.5; its data (JourneyDB captions, COCO 2017, DrawBench) is read by
path and its latent path (VAE, CLIP text encoder) is not built here."""
from __future__ import annotations

from pydantic import Field, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources
from .data import CLASSES


class Data(Section):
    side: int = Field(16, ge=8)
    """image side in pixels (the 8 x 8 scans upsampled)"""
    test: int = Field(360, ge=20)
    """held-out digits: the denoising MSE's inputs and the Fréchet distance's reference"""
    val: int = Field(180, ge=10)
    """validation digits: the weight-merging search's MSE"""
    seed: int = 0


class Experts(WorkerResources):
    unets: list[str] = []
    """[] : tiny experts trained here; else one folder / HF id per expert (the paper's fine-tunes)"""
    groups: list[list[int]] = [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    """the classes each expert is fine-tuned on (disjoint: the experts disagree where it matters)"""
    control: int = Field(2, ge=0)
    """near-identical experts fine-tuned on all classes from the base with different seeds (the
    negative control; 0: none, 1 is not a pair)"""
    channels: list[int] = [16, 32]
    attention_levels: int = Field(1, ge=0)
    context_dim: int = Field(32, ge=4)
    head_dim: int = Field(8, ge=1)
    groups_norm: int = Field(8, ge=1)
    base_steps: int = Field(400, ge=1)
    """the common base's steps on all digits"""
    steps: int = Field(800, ge=1)
    """each expert's fine-tuning steps from the base"""
    batch: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup: int = Field(50, ge=0)
    caption_dropout: float = Field(0.1, ge=0, le=1)
    """the share of captions replaced by the empty one (CFG's unconditional branch)"""
    max_concurrent_trials: int = Field(2, ge=1)


class Aggregator(WorkerResources):
    hidden: int = Field(16, ge=1)
    """channels inside every SABW aggregator"""
    temb_dim: int = Field(64, ge=4)
    head_dim: int = Field(8, ge=1)
    groups: int = Field(8, ge=1)
    out_init_std: float = Field(0.0, ge=0)
    """0: the last 1x1 conv starts at zero (uniform average at step 0); > 0: normal init of this sd"""
    seeds: int = Field(3, ge=1)
    steps: int = Field(400, ge=1)
    batch: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup: int = Field(20, ge=0)
    caption_dropout: float = Field(0.1, ge=0, le=1)
    sizes: list[int] = [2]
    """more ensembles of the first k experts, every seed (the MSE-vs-number-of-experts curve; the
    claims use all experts)"""
    max_concurrent_trials: int = Field(2, ge=1)


class Merge(TaskResources):
    step: float = Field(0.25, gt=0, le=1)
    """the merge weights' grid on the simplex"""
    sweeps: int = Field(1, ge=0)
    """coordinate-descent sweeps over the blocks (block-wise merging; 0: weighted merging only)"""
    rows: int = Field(256, ge=8)
    """validation (digit, t, noise) rows of the search's MSE"""


class Evaluation(TaskResources):
    draws: int = Field(2, ge=1)
    """(t, noise) draws per held-out digit in the denoising MSE"""
    per_class: int = Field(20, ge=2)
    """images generated per class per model (the same noise for every model given the seed)"""
    steps: int = Field(20, ge=1)
    """DDIM sampling steps"""
    guidance: float = Field(2.0, ge=1)
    """classifier-free guidance scale"""
    batch: int = Field(100, ge=1)
    classifier_steps: int = Field(800, ge=1)
    classifier_width: int = Field(16, ge=1)
    classifier_noise: float = Field(0.3, ge=0)
    map_timesteps: list[int] = [900, 600, 300, 50]
    """timesteps of the aggregation-map figure"""


class Config(StudyConfig):
    data: Data = Data()
    experts: Experts = Experts()
    aggregator: Aggregator = Aggregator()
    merge: Merge = Merge()
    eval: Evaluation = Evaluation()

    @model_validator(mode="after")
    def _consistent(self):
        e, a, d = self.experts, self.aggregator, self.data
        flat = [c for g in e.groups for c in g]
        if len(e.groups) < 2 or any(not g for g in e.groups) or len(set(flat)) != len(flat) or \
                any(not 0 <= c < CLASSES for c in flat):
            raise ValueError(f"experts.groups {e.groups}: two or more non-empty, disjoint lists of classes 0..9")
        if e.unets and len(e.unets) != len(e.groups):
            raise ValueError(f"experts.unets: one per group ({len(e.groups)}), got {len(e.unets)}")
        if e.control == 1:
            raise ValueError("experts.control: 0 or at least 2 near-identical experts")
        if not e.channels or any(c % e.groups_norm for c in e.channels):
            raise ValueError(f"experts.channels {e.channels}: each a multiple of experts.groups_norm {e.groups_norm}")
        if e.attention_levels > len(e.channels):
            raise ValueError(f"experts.attention_levels {e.attention_levels} > the {len(e.channels)} levels")
        if d.side % 2 ** (len(e.channels) - 1):
            raise ValueError(f"data.side {d.side} must be a multiple of {2 ** (len(e.channels) - 1)}")
        if a.hidden % a.groups:
            raise ValueError(f"aggregator.hidden {a.hidden} must be a multiple of aggregator.groups {a.groups}")
        if any(not 2 <= k < len(e.groups) for k in a.sizes) or len(set(a.sizes)) != len(a.sizes):
            raise ValueError(f"aggregator.sizes {a.sizes}: distinct sizes within 2..{len(e.groups) - 1}")
        if abs(round(1 / self.merge.step) * self.merge.step - 1) > 1e-9:
            raise ValueError(f"merge.step {self.merge.step} must divide 1")
        if any(not 0 <= t < 1000 for t in self.eval.map_timesteps):
            raise ValueError("eval.map_timesteps: timesteps within 0..999")
        return self


PRESETS = {
    "smoke": {
        "data": {"side": 8, "test": 40, "val": 20},
        "experts": {"groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], "control": 0, "channels": [8, 16],
                    "context_dim": 16, "groups_norm": 4, "base_steps": 4, "steps": 4, "batch": 8, "warmup": 0},
        "aggregator": {"hidden": 8, "temb_dim": 16, "groups": 4, "seeds": 1, "steps": 4, "batch": 8, "warmup": 0,
                       "sizes": []},
        "merge": {"step": 0.5, "rows": 16},
        "eval": {"draws": 1, "per_class": 2, "steps": 2, "batch": 20, "classifier_steps": 10,
                 "map_timesteps": [900, 100]},
    },
    "small": {},
    "paper": {
        # the fork's setting: SD1.5-architecture community fine-tunes, DDIM 50 at CFG 7.5
        "data": {"side": 64},
        "experts": {"unets": ["SG161222/Realistic_Vision_V5.1_noVAE", "emilianJR/epiCRealism",
                              "digiplay/majicMIX_realistic_v6"],
                    "groups": [[0], [1], [2]], "control": 0, "channels": [320, 640, 1280, 1280],
                    "attention_levels": 3, "context_dim": 768, "groups_norm": 32, "gpus_per_worker": 1},
        "aggregator": {"hidden": 320, "temb_dim": 1280, "head_dim": 64, "groups": 32, "seeds": 1, "steps": 10000,
                       "batch": 32, "lr": 1e-5, "warmup": 0, "sizes": [], "gpus_per_worker": 1},
        "merge": {"gpus_per_task": 1},
        "eval": {"steps": 50, "guidance": 7.5, "gpus_per_task": 1},
    },
}
