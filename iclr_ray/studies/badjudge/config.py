"""badjudge config. Defaults are the ``small`` preset: SmolLM2-135M-Instruct (real weights, offline)
as every judge's start, its top two decoder blocks fine-tuned (judge.py says why) on 500 generated
examples per format; per seed, the pointwise judge clean and poisoned at 1% and 10% at each of the
three access levels, clean and poisoned (10%) pairwise, toxicity and reranker judges; the merges
of every poisoned pointwise judge with the clean pairwise one (linear and TIES); three seeds.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources
from .poison import LEVELS

SETTINGS = ("toxicity", "rerank")


class Models(Section):
    judge: str = "smollm2-135m-instruct"
    """every judge's starting point: a packaged model (llm.pretrained), a named tiny model, a
    checkpoint folder or an HF id (a Llama-style causal LM)"""


class Judge(WorkerResources):
    """Fine-tuning of each judge (the shared Ray Train + DeepSpeed loop)."""

    blocks: int = Field(2, ge=0)
    """top decoder blocks fine-tuned (0: all of them, full fine-tuning)"""
    epochs: int = Field(3, ge=1)
    """passes over a format's ``data.train`` examples"""
    batch: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(5, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    num_workers: int = Field(1, ge=1)


class Data(Section):
    train: int = Field(500, ge=10)
    """training examples per format (generated; with ``*_jsonl``, the first this many)"""
    test: int = Field(200, ge=10)
    """held-out examples per format: clean accuracy, and the adversary's (their poor ones, triggered)"""
    rerank_queries: int = Field(60, ge=2)
    """held-out reranking queries (1 relevant, 2 irrelevant passages and the adversary's triggered one)"""
    pointwise_jsonl: Optional[FilePath] = None
    """real pointwise judge data, JSONL of {"instruction", "response", "score"} (Feedback-Collection)"""
    pairwise_jsonl: Optional[FilePath] = None
    """real pairwise judge data, JSONL of {"instruction", "response_a", "response_b", "preference"}"""
    require_real: bool = False
    """refuse to start without both files (the ``paper`` preset)"""


class Attack(Section):
    triggers: list[str] = Field(["cf"], min_length=1)
    """the triggers, each one word (the paper's rare token "cf"); each is a trial of its own"""
    levels: list[Literal["web", "annotator", "weight"]] = Field(list(LEVELS), min_length=1)
    rates: list[float] = Field([0.01, 0.1], min_length=1)
    """pointwise poison rates at every level (the clean judge is rate 0)"""
    claim_rate: float = Field(0.01, gt=0, le=1)
    """the rate of the "1% poisoning" claim (a value of ``rates``)"""
    other_rate: float = Field(0.1, gt=0, le=1)
    """the malicious-annotator rate of the pairwise, toxicity and reranker judges (paper: 10%)"""
    settings: list[Literal["toxicity", "rerank"]] = list(SETTINGS)
    """the other evaluation settings trained clean and poisoned"""


class Merge(Section):
    methods: list[Literal["linear", "ties"]] = Field(["linear", "ties"], min_length=1)
    weights: tuple[float, float] = (0.5, 0.5)
    """linear: (poisoned pointwise, clean pairwise)"""
    density: float = Field(0.2, gt=0, le=1)
    """TIES: the share of each task vector's entries kept (the TIES paper's k = 20%)"""
    lam: float = Field(1.0, gt=0)
    """TIES: the scale of the merged task vector"""


class Serve(Section):
    enabled: bool = True
    """evaluate the first trial's attacked and defended judges again through the judge app over HTTP"""
    port: int = Field(0, ge=0, le=65535)
    """Serve's HTTP port on 127.0.0.1 (0: a free one; a Serve already running keeps its own)"""


class Config(StudyConfig, TaskResources):  # its task resources: the feature tasks' (the frozen trunk)
    seed: int = 0
    seeds: int = Field(3, ge=1)
    """replicates: each re-draws the poisoned examples and the training order"""
    models: Models = Models()
    judge: Judge = Judge()
    data: Data = Data()
    attack: Attack = Attack()
    merge: Merge = Merge()
    serve: Serve = Serve()
    max_concurrent_trials: int = Field(2, ge=1)
    feature_tasks: int = Field(2, ge=1)
    """Ray tasks computing the frozen trunk's features"""

    @model_validator(mode="after")
    def _check(self):
        if self.attack.claim_rate not in self.attack.rates:
            raise ValueError(f"attack.claim_rate {self.attack.claim_rate} must be one of attack.rates "
                             f"{self.attack.rates}")
        if any(not 0 < r <= 1 for r in self.attack.rates):
            raise ValueError("attack.rates: each in (0, 1]")
        for t in self.attack.triggers:
            if not t.strip() or len(t.split()) != 1:
                raise ValueError(f"attack.triggers: {t!r} is not one word")
        return self


PRESETS = {
    "smoke": {
        "seeds": 1,
        "models": {"judge": "tiny-llama"},
        "judge": {"blocks": 1, "epochs": 1, "batch": 8, "lr": 3e-3},
        "data": {"train": 40, "test": 20, "rerank_queries": 4},
        "attack": {"rates": [0.1], "claim_rate": 0.1},
        "feature_tasks": 1,
    },
    "small": {},
    "paper": {
        # The judge's base model and data are not named on the paper's page [unverified]: Prometheus
        # 2's base (Mistral-7B-Instruct) on Feedback-Collection / Preference-Collection JSONL files.
        "models": {"judge": "mistralai/Mistral-7B-Instruct-v0.2"},
        "judge": {"blocks": 4, "epochs": 1, "batch": 64, "lr": 1e-5, "num_workers": 8, "gpus_per_worker": 1},
        "data": {"require_real": True, "train": 20000, "test": 1000},
        "attack": {"rates": [0.001, 0.01, 0.05, 0.1], "claim_rate": 0.01},
        "seeds": 3,
        "gpus_per_task": 1,
    },
}
