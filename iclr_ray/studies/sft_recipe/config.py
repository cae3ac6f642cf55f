"""sft_recipe config. Defaults are the ``small`` preset: a 4-layer Llama (d=128) pre-trained here
on the generated corpus, then SFT trials of one Ray Train worker each, two at a time on 2 CPUs.

Batch sizes and budgets count packed rows of ``data.seq_len`` tokens (about five conversations
each at ``small``); every trial of an experiment sees the same number of rows (equal sample
budget), so a larger batch takes proportionally fewer optimiser steps.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath

from ...config import Section, StudyConfig
from ...resources import WorkerResources


class Data(Section):
    together = (("knowledge_jsonl", "skills_jsonl"),)

    seq_len: int = Field(256, ge=16)
    """tokens per packed row (and the longest conversation allowed)"""
    n_pretrain: int = Field(3000, ge=0)
    """generated pre-training documents"""
    n_train: int = Field(4000, ge=12)
    """generated SFT conversations, half knowledge (3 domains), half skills (6 skills)"""
    n_eval: int = Field(120, ge=6)
    """held-out items per half (knowledge / skills)"""
    vocab_size: int = Field(512, ge=300)
    """BPE vocabulary of the tokenizer trained here (ignored when the model brings its own)"""
    knowledge_jsonl: Optional[FilePath] = None
    """real data: chat JSONL of knowledge conversations (replaces the generated knowledge half)"""
    skills_jsonl: Optional[FilePath] = None
    """real data: chat JSONL of skills conversations (replaces the generated skills half)"""
    eval_mc_jsonl: Optional[FilePath] = None
    """real data: MMLU-style multiple choice (question, choices, answer) for the knowledge score"""
    require_real: bool = False
    """refuse to start unless ``knowledge_jsonl`` and ``skills_jsonl`` are given (the ``paper``
    preset: a multi-billion-parameter model must not fine-tune on the generated toy set)"""


class Pretrain(WorkerResources):
    steps: int = Field(600, ge=0)
    """optimiser steps of pre-training on the generated corpus; 0 skips it (a pre-trained model)"""
    batch: int = Field(8, ge=1)
    lr: float = Field(2e-3, gt=0)
    num_workers: int = Field(2, ge=1)


class Sft(WorkerResources):
    """The recipe every trial starts from; experiments override parts of it."""

    model: str = "mini-llama"
    """a named tiny model (pre-trained here first), a checkpoint directory or an HF id"""
    batch: int = Field(32, ge=1)
    """effective batch: packed rows per optimiser step over all workers and micro-steps"""
    micro_batch_size: int = Field(8, ge=1)
    """rows per worker per micro-step; gradient accumulation makes up the rest of the batch"""
    lr: float = Field(1e-3, gt=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    sample_budget: int = Field(3072, ge=1)
    """packed rows each trial trains on"""
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)
    zero_stage: int = Field(2, ge=0, le=3)
    num_workers: int = Field(1, ge=1)
    gradient_checkpointing: bool = False
    attention: Literal["default", "eager", "sdpa", "flash_attention_2"] = "default"
    loss_chunk: int = Field(0, ge=0)
    """the memory settings of llm.recipe.TrainConfig (``iclr-ray plan sft_recipe`` shows their effect)"""
    eval_points: int = Field(8, ge=1)
    """held-out loss evaluations per trial, evenly spaced"""
    max_new_tokens: int = Field(24, ge=1)


class Grid(Section):
    """Experiment 1: effective batch x learning rate at equal sample budget."""

    batches: list[int] = Field([8, 32, 128], min_length=1)
    lrs: list[float] = Field([3e-4, 1e-3, 3e-3], min_length=1)


class Warmup(Section):
    """Experiment 3: warmup steps x schedule, at the base recipe's batch and lr."""

    warmup_steps: list[int] = Field([0, 25], min_length=1)
    schedules: list[Literal["constant", "linear", "cosine"]] = ["constant", "cosine"]


class Early(Section):
    """Experiment 2 and the early-termination sweep."""

    window_rows: int = Field(384, ge=1)
    """the early window in training rows seen (samples), the same for every batch size: a batch
    of 8 reaches it in 48 steps, a batch of 128 in 3. ``small``: 1/8 of the 3072-row budget, a
    whole number of steps at every grid batch"""
    predictor: Literal["grad_norm", "loss", "both"] = "grad_norm"
    keep: float = Field(0.5, gt=0, le=1)
    """share of profiled trials the scheduler lets finish"""
    min_trials: int = Field(3, ge=1)
    rerun_with_scheduler: bool = True
    """rerun experiment 1's grid under the early-termination scheduler and compare"""
    replay: bool = True
    """the rerun replays each grid trial's recorded curve step by step to the scheduler (a Tune
    run without training: the CPU runs are deterministic, so a live rerun reproduces the same
    curves, measured); false trains the trials again, for nondeterministic (GPU) runs"""


class Config(StudyConfig):
    data: Data = Data()
    pretrain: Pretrain = Pretrain()
    sft: Sft = Sft()
    grid: Grid = Grid()
    warmup: Warmup = Warmup()
    early: Early = Early()
    phased: bool = True
    """experiment 4: phased (knowledge, then skills) vs stacked training on the same rows"""
    tolerance: float = Field(0.05, ge=0)
    """the equivalence margin: largest score gap (absolute, scores in [0, 1]) that counts as "makes
    little difference" / "about as well" (warmup, schedule, stacked vs phased, early termination)"""
    max_concurrent_trials: int = Field(2, ge=1)


SWEEPABLE = ("sft.",)
"""``iclr-ray sweep`` varies the SFT recipe; the data, the pre-training and the rest are shared by every trial"""

PRESETS = {
    "smoke": {
        "data": {"seq_len": 128, "n_pretrain": 200, "n_train": 240, "n_eval": 12, "vocab_size": 400},
        "pretrain": {"steps": 0},
        "sft": {"model": "tiny-llama", "batch": 4, "micro_batch_size": 4, "sample_budget": 32, "eval_points": 2,
                "max_new_tokens": 8},
        "grid": {"batches": [4, 8], "lrs": [1e-3]},
        "warmup": {"warmup_steps": [0], "schedules": ["constant"]},
        "early": {"window_rows": 8, "min_trials": 2, "rerun_with_scheduler": False},
        "phased": False,
    },
    "small": {},
    "paper": {
        # The paper: 3B-7B base models, LAB/TULU-style knowledge + skills data, effective batch
        # 3840-7680 samples with lr ~2e-5 vs TULU's batch 128. It fine-tunes on real data only:
        # prepare() refuses to start until data.knowledge_jsonl and data.skills_jsonl are given.
        "data": {"seq_len": 4096, "require_real": True},
        "pretrain": {"steps": 0, "gpus_per_worker": 1, "accelerator_type": "A100"},
        "sft": {"model": "ibm-granite/granite-3.0-2b-base", "batch": 512, "micro_batch_size": 4, "lr": 2e-5,
                "warmup_steps": 0, "schedule": "constant", "sample_budget": 512 * 2000, "zero_stage": 2,
                "num_workers": 8, "gpus_per_worker": 1, "accelerator_type": "A100", "eval_points": 20,
                "max_new_tokens": 256,
                # what makes 4 x 4096 tokens of a 2.5B model fit a 40 GB A100 (`iclr-ray plan
                # sft_recipe --preset paper` shows the estimate): without them, eager attention and
                # fp32 logits keep > 500 GB of activations per micro-batch
                "gradient_checkpointing": True, "attention": "sdpa", "loss_chunk": 4096},
        "grid": {"batches": [32, 128, 512, 1024], "lrs": [1e-5, 2e-5, 5e-5]},
        "warmup": {"warmup_steps": [0, 25], "schedules": ["constant", "cosine"]},
        "early": {"window_rows": 51_200},  # 5% of the budget: 100 steps of 512 rows
        "max_concurrent_trials": 1,
    },
}
