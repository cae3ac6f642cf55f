"""arith_coupling config. Defaults are the ``small`` preset: a 2-layer, 128-wide decoder per method
and seed (d_ff 256: the paper's d_ff = 2 d_model), three training seeds each:

* two-operand addition (the predecessor paper's task) on 1-10 digit operands, 2000 steps of 128,
  evaluated to 30 digits (3x): coupled vs absolute positions vs NoPE;
* multi-operand addition on <= 4 digits x <= 4 operands, 1000 steps of 64, evaluated to 12 x 12
  (3x): coupled vs no scratchpad vs NoPE.

Multiplication (the paper's second task) is in the ``paper`` preset; at CPU budgets no method
learned it (docs/studies/arith_coupling.md), so ``small`` spends its time on addition."""
from __future__ import annotations

from typing import Optional

from pydantic import DirectoryPath, Field, model_validator

from ...config import Section, StudyConfig
from ...resources import WorkerResources
from .data import MethodName, TaskName


class Task(Section):
    """One task and its grid. For multiplication "digits" is the length of A and "count" the
    length of B; for two-operand addition count is ignored."""

    name: TaskName
    train_digits: tuple[int, int] = (1, 4)
    train_count: tuple[int, int] = (2, 4)
    eval_digits: list[int] = Field([1, 2, 4, 6, 8, 10, 12], min_length=1)
    eval_count: list[int] = Field([2, 4, 6, 8, 10, 12], min_length=1)
    max_position: int = Field(40, ge=2)
    """largest position id (tables of max_position + 1 rows); training offsets keep ids within it"""
    eval_samples: int = Field(100, ge=1)
    """examples per grid cell (the same numbers for every method)"""
    lr: Optional[float] = Field(None, gt=0)
    """this task's learning rate (default: train.lr)"""
    steps: Optional[int] = Field(None, ge=1)
    """this task's optimiser steps (default: train.steps)"""
    batch: Optional[int] = Field(None, ge=1)
    """this task's examples per step (default: train.batch)"""
    methods: Optional[list[MethodName]] = Field(None, min_length=1)
    """the methods trained on this task (default: the study's ``methods``)"""

    @model_validator(mode="after")
    def _ranges(self):
        for key in ("train_digits", "train_count"):
            lo, hi = getattr(self, key)
            if not 1 <= lo <= hi:
                raise ValueError(f"{key} must be (lo, hi) with 1 <= lo <= hi, got ({lo}, {hi})")
        if self.name == "multi_addition" and (self.train_count[0] < 2 or min(self.eval_count) < 2):
            raise ValueError("multi-operand addition needs at least 2 operands")
        return self


class Model(Section):
    d_model: int = Field(128, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    d_ff: int = Field(256, ge=8)
    """the paper's 2 x d_model"""

    @model_validator(mode="after")
    def _heads(self):
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of heads {self.heads}")
        return self


class Training(WorkerResources):
    steps: int = Field(1000, ge=1)
    batch: int = Field(64, ge=1)
    """examples per optimiser step (all workers together)"""
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup: float = Field(0.01, ge=0, lt=1)
    """share of the steps spent warming up (the paper: 1%)"""
    min_lr_ratio: float = Field(0.1, ge=0, lt=1)
    """the cosine schedule's floor as a share of lr (the official code: 0.1)"""
    num_workers: int = Field(1, ge=1)


class Sweep(Section):
    """Tune grid axes crossed with tasks x methods x seeds, as the official scripts sweep layers,
    heads and the learning rate. An empty list keeps the value of ``model`` / ``train``; d_ff
    follows d_model at model's ratio. The report compares each method at its best setting."""

    layers: list[int] = []
    heads: list[int] = []
    d_model: list[int] = []
    lr: list[float] = []

    @model_validator(mode="after")
    def _positive(self):
        for key in ("layers", "heads", "d_model", "lr"):
            if any(v <= 0 for v in getattr(self, key)):
                raise ValueError(f"sweep.{key} values must be positive, got {getattr(self, key)}")
        return self


class Config(StudyConfig):
    tasks: list[Task] = [
        # the official scripts' ratio of max_position to the longest evaluated ids (~1.2 for both)
        Task(name="addition", train_digits=(1, 10), train_count=(2, 2), eval_digits=[1, 5, 10, 15, 20, 25, 30],
             eval_count=[2], max_position=35, steps=2000, batch=128, methods=["coupled", "absolute", "nope"]),
        Task(name="multi_addition", max_position=18, methods=["coupled", "no_scratchpad", "nope"]),
    ]
    methods: list[MethodName] = ["coupled", "single", "no_scratchpad", "absolute", "nope"]
    """coupled is the paper's method; the others are its baselines at the same size"""
    seeds: int = Field(3, ge=1)
    """training seeds per (task, method): the unit of every claim's interval"""
    model: Model = Model()
    train: Training = Training()
    sweep: Sweep = Sweep()
    threshold: float = Field(0.9, gt=0, le=1)
    """exact-match accuracy a grid cell needs to count as solved (extrapolation factors)"""
    max_concurrent_trials: int = Field(2, ge=1)
    eval_offsets: bool = False
    """score with training-style random position offsets (a check; the official evaluation, and
    the default, uses none)"""
    eval_only: Optional[DirectoryPath] = None
    """a finished arith_coupling run: re-evaluate its saved models on this config's grids, no training"""

    @model_validator(mode="after")
    def _sizes(self):
        for v in variants(self):
            if v["model"]["d_model"] % v["model"]["heads"]:
                raise ValueError(f"sweep: d_model {v['model']['d_model']} is not a multiple of heads "
                                 f"{v['model']['heads']}")
        return self


def variants(cfg: Config) -> list[dict]:
    """The model sizes and learning rates of the sweep: [{"name", "model", "lr"}]; one unnamed
    variant (lr None: the task's or train's) when nothing is swept."""
    base = cfg.model.model_dump()
    sw = cfg.sweep
    out = []
    for layers in sw.layers or [base["layers"]]:
        for heads in sw.heads or [base["heads"]]:
            for d in sw.d_model or [base["d_model"]]:
                for lr in sw.lr or [None]:
                    model = {**base, "layers": layers, "heads": heads, "d_model": d,
                             "d_ff": max(8, round(base["d_ff"] * d / base["d_model"]))}
                    parts = [f"L{layers}" if sw.layers else "", f"H{heads}" if sw.heads else "",
                             f"d{d}" if sw.d_model else "", f"lr{lr:g}" if sw.lr else ""]
                    out.append({"name": " ".join(p for p in parts if p), "model": model, "lr": lr})
    return out


PRESETS = {
    "smoke": {
        "tasks": [{"name": "multi_addition", "train_digits": [1, 2], "train_count": [2, 3], "eval_digits": [1, 2, 4],
                   "eval_count": [2, 3, 6], "max_position": 12, "eval_samples": 10}],
        "methods": ["coupled", "nope"],
        "seeds": 1,
        "model": {"d_model": 32, "layers": 1, "heads": 2, "d_ff": 64},
        "train": {"steps": 30, "batch": 32, "lr": 3e-3},
    },
    "small": {},
    "paper": {
        # the official scripts: multi-operand addition (6 layers, 8 heads, d 1024, lr 3e-5, batch 400,
        # 50k steps; digits and operands 1-10 / 2-10 with max position 40) and multiplication
        # (max position 70, lr 5e-5, batch 250); evaluated up to 30 x 30
        "tasks": [{"name": "multi_addition", "train_digits": [1, 10], "train_count": [2, 10],
                   "eval_digits": [1, 5, 10, 15, 20, 25, 30], "eval_count": [2, 5, 10, 15, 20, 25, 30],
                   "max_position": 40, "eval_samples": 1000},
                  {"name": "multiplication", "train_digits": [1, 10], "train_count": [1, 10],
                   "eval_digits": [1, 5, 10, 15, 20], "eval_count": [1, 5, 10, 15, 20], "max_position": 70,
                   "eval_samples": 1000, "lr": 5e-5}],
        "seeds": 3,
        "model": {"d_model": 1024, "layers": 6, "heads": 8, "d_ff": 2048},
        "train": {"steps": 50_000, "batch": 400, "lr": 3e-5, "num_workers": 1, "gpus_per_worker": 1},
    },
}
