"""knowledge_entropy config. Defaults are the ``small`` preset: a 4-layer SwiGLU Llama (d=128,
m=344) pre-trained here on the real review corpus (three pretraining seeds, ten checkpoints each),
continual runs with injected fictional facts from its early, middle and last checkpoints, the
resuscitated last checkpoint and its two controls, a (p, q) grid, and the knowledge entropy of
SmolLM2-135M-Instruct and Gemma-3-270m on the same review probe set.

Steps and batches count packed rows of ``data.seq_len`` tokens.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources


class Data(Section):
    seq_len: int = Field(128, ge=16)
    """tokens per packed row (and per probe sequence of the entropy)"""
    vocab_size: int = Field(1024, ge=300)
    """BPE vocabulary trained on the pretraining documents (ignored for a real model's tokenizer)"""
    pretrain_docs: int = Field(16000, ge=1)
    """review documents for pretraining; the next ``probe_docs`` are the entropy's probe set and the
    rest the continual runs' corpus"""
    probe_docs: int = Field(256, ge=2)
    """documents of the fixed probe set C_bar is averaged over (the paper: 2,048)"""
    probe_from: Literal["pretraining", "held_out"] = "pretraining"
    """where the probe set comes from without ``probe_jsonl``: ``pretraining``, a seeded sample of
    the pretraining documents (the paper averages C_bar over documents of its own pretraining data,
    Dolma); ``held_out``, the reviews after the pretraining ones, which pretraining never saw"""
    probe_jsonl: Optional[FilePath] = None
    """real data: documents of the checkpoints' own pretraining corpus (a JSONL of {"text": ...}; for
    OLMo, Dolma documents) that the probe set is drawn from (its first ``probe_docs``)"""
    min_words: int = Field(20, ge=1)
    """reviews shorter than this are left out"""
    corpus_jsonl: Optional[FilePath] = None
    """real data: a JSONL of {"text": ...} documents replacing the reviews (the paper continues on
    PubMed); the first ``probe_docs`` are the probe set, the rest the continual corpus"""
    facts_jsonl: Optional[FilePath] = None
    """real data: fictional facts in data.py's JSONL format (paraphrase, once and unseen splits)"""
    official_facts: list[FilePath] = Field([], max_length=2)
    """real data: the official fictional-knowledge files, [paraphrase file, once file]
    (``fictional_knowledge_paraphrased_paraphrase70.json``, ``..._once60.json`` of the official
    repository, Chang et al. 2024's format); replaces ``facts_jsonl``"""
    official_unseen: int = Field(20, ge=1)
    """the last N facts of the official once file are held out as the unseen control (the official
    set has no never-injected facts; they are needed to measure acquisition against)"""
    probe_kind: Literal["memorization", "semantic", "composition"] = "memorization"
    """which of the official probes the claims read (its mem_, gen_ and hard_gen_ inputs and targets)"""
    facts_per_split: int = Field(24, ge=2)
    """generated facts per split (paraphrase, once, unseen); each has two probes"""
    require_real: bool = False
    """refuse to start unless ``corpus_jsonl``, ``probe_jsonl``, the facts (``facts_jsonl`` or
    ``official_facts``) and ``checkpoints`` are given (the ``paper`` preset)"""

    @model_validator(mode="after")
    def _facts(self):
        if self.official_facts and len(self.official_facts) != 2:
            raise ValueError("data.official_facts: give two files, [paraphrase file, once file]")
        if self.official_facts and self.facts_jsonl is not None:
            raise ValueError("data.official_facts and data.facts_jsonl: give one of them")
        return self


class Pretrain(WorkerResources):
    model: str = "mini-llama"
    """a named tiny model (llm.model.TINY_MODELS): Llama blocks, whose MLP is SwiGLU"""
    seeds: int = Field(3, ge=1)
    """pretraining runs (each with its own continual runs): the unit the claims' intervals are over"""
    steps: int = Field(600, ge=2)
    batch: int = Field(16, ge=1)
    """packed rows per optimiser step"""
    checkpoints: int = Field(10, ge=2)
    """checkpoints saved at even steps over the run (the last is the final model)"""
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(30, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, lt=1)
    """cosine decay to this share of lr (OLMo's schedule ends at 0.1 x peak)"""
    weight_decay: float = Field(0.1, ge=0)
    num_workers: int = Field(1, ge=1)


class Continual(WorkerResources):
    """Continual training with injected facts (the paper's Section 4 protocol, scaled down):
    ``rounds`` rounds of ``round_steps`` steps, the facts in the last step of each round (paraphrase
    facts every round, once facts in the first), then ``after_steps`` steps without them."""

    starts: list[float] = Field([0.1, 0.5, 1.0], min_length=2)
    """start checkpoints as fractions of pretraining (the nearest saved one; the last is "late")"""
    rounds: int = Field(5, ge=1)
    round_steps: int = Field(10, ge=1)
    after_steps: int = Field(50, ge=0)
    batch: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(5, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, lt=1)
    """the paper's alpha_f"""
    weight_decay: float = Field(0.1, ge=0)
    num_workers: int = Field(1, ge=1)

    def steps(self) -> int:
        return self.rounds * self.round_steps + self.after_steps


class Resuscitation(Section):
    ratio: float = Field(0.5, gt=0, le=1)
    """p: the share of neurons per layer, by lowest C_bar, that are scaled (the paper: 0.5)"""
    q: float = Field(2.0, gt=0)
    """the amplifying factor (the paper: 2)"""
    grid_ratios: list[float] = Field([0.25, 0.5, 0.75], min_length=1)
    grid_qs: list[float] = Field([1.0, 2.0, 3.0], min_length=1)
    """the Tune grid over (p, q), from the last checkpoint of the first seed"""

    @model_validator(mode="after")
    def _ranges(self):
        if not all(0 < r <= 1 for r in self.grid_ratios):
            raise ValueError(f"grid_ratios must lie in (0, 1], got {self.grid_ratios}")
        if not all(q > 0 for q in self.grid_qs):
            raise ValueError(f"grid_qs must be positive, got {self.grid_qs}")
        return self


class Config(StudyConfig, TaskResources):  # its task resources: the entropy tasks' and the start models'
    data: Data = Data()
    pretrain: Pretrain = Pretrain()
    continual: Continual = Continual()
    resuscitation: Resuscitation = Resuscitation()
    checkpoints: list[str] = []
    """real intermediate checkpoints in pretraining order, as HF id or folder, with ``@revision``
    (``allenai/OLMo-1B-hf@step20000-tokens84B``): no pretraining here, they are the curve and the
    start points (one seed)"""
    models: list[str] = ["smollm2-135m-instruct", "gemma3-270m"]
    """final pretrained models whose knowledge entropy is measured on the probe set, to place them
    beside the curve (packaged names, folders or HF ids; [] for none)"""
    model_probe_docs: int = Field(64, ge=1)
    """probe documents for those models (their forward pass is the cost)"""
    max_concurrent_trials: int = Field(2, ge=1)


PRESETS = {
    "smoke": {
        "data": {"pretrain_docs": 300, "probe_docs": 16, "vocab_size": 400, "seq_len": 64, "facts_per_split": 4},
        "pretrain": {"model": "tiny-llama", "seeds": 1, "steps": 12, "batch": 4, "checkpoints": 3, "warmup_steps": 2},
        "continual": {"rounds": 2, "round_steps": 2, "after_steps": 2, "batch": 4, "warmup_steps": 1,
                      "starts": [0.33, 1.0]},
        "resuscitation": {"grid_ratios": [0.5], "grid_qs": [2.0]},
        "models": [],
        "model_probe_docs": 4,
    },
    "small": {},
    "paper": {
        # OLMo-1B intermediate checkpoints by HF id and revision (unverified revision names: see
        # docs/studies/knowledge_entropy.md), PubMed-style continual text and the fictional
        # knowledge set as files, the paper's continual-training config
        "data": {"require_real": True, "seq_len": 1024, "probe_docs": 2048},
        "checkpoints": ["allenai/OLMo-1B-hf@step20000-tokens84B", "allenai/OLMo-1B-hf@step330000-tokens1384B",
                        "allenai/OLMo-1B-hf@step738020-tokens3095B"],
        "continual": {"starts": [0.0, 0.5, 1.0], "rounds": 10, "round_steps": 160, "after_steps": 400,
                      "batch": 128, "lr": 4e-4, "warmup_steps": 80, "num_workers": 8, "gpus_per_worker": 1},
        "pretrain": {"gpus_per_worker": 1},  # read only where checkpoints is emptied: pre-trained here
        "models": [],
        "max_concurrent_trials": 1,
        "gpus_per_task": 1,
    },
}
