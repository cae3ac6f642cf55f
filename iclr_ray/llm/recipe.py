"""What a training run trains, apart from where it runs: the run's config (:class:`TrainConfig`),
the :class:`Recipe` a study fills in (its model, each step's batches, a batch's summed loss and its
units, how the model is saved and scored) with :class:`ChatRecipe` for Hugging Face causal LMs on
packed rows, the deterministic step schedule (:func:`step_rows`), the optimiser and lr schedule
(:func:`optimizer_and_schedule`), and :func:`reference_losses`, the same recipe trained by a plain
torch loop in one process.

``llm.train`` runs a recipe on Ray Train with DeepSpeed; the parity test holds that loop to
:func:`reference_losses` step by step. Nothing here imports Ray at module level (:func:`resolve`
turns a recipe's object refs into values in the worker).
"""
from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
from pydantic import Field

from ..resources import WorkerResources
from .data import IGNORE, PackedRow, PackedRows, collate, epoch_order
from .loss import label_tokens, step_loss, token_loss_sum

SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


class TrainConfig(WorkerResources):
    model: str = "tiny-llama"
    """a named tiny model (llm.model.TINY_MODELS), a checkpoint directory or an HF id"""
    micro_batch_size: int = Field(4, ge=1)
    """packed rows per worker per micro-step"""
    grad_accum: int = Field(1, ge=1)
    max_steps: int = Field(50, ge=1)
    lr: float = Field(1e-3, gt=0)
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = Field(0.0, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0, lt=1)
    """cosine only: the floor the schedule decays to, as a share of lr (0: decays to 0)"""
    grad_clip: float = Field(1.0, ge=0)
    """0 disables clipping"""
    zero_stage: int = Field(2, ge=0, le=3)
    num_workers: int = Field(2, ge=1)
    gradient_checkpointing: bool = False
    """recompute each decoder block's activations in the backward pass instead of keeping them
    (about a third more compute, activations of one block instead of all)"""
    attention: Literal["default", "eager", "sdpa", "flash_attention_2"] = "default"
    """the attention kernel (transformers' ``attn_implementation``); default: the model's own.
    eager keeps every attention matrix (heads x sequence^2 per layer) for the backward pass, sdpa
    and flash_attention_2 do not"""
    loss_chunk: int = Field(0, ge=0)
    """token positions per chunk of the fp32 cross-entropy (llm.loss.summed_token_loss); 0: the
    whole micro-batch at once"""
    eval_every: int = Field(0, ge=0)
    """optimiser steps between held-out evaluations (the eval sets' loss, the recipe's eval_metrics)
    and at the last step; 0: never"""
    checkpoint_every: int = Field(0, ge=0)
    """optimiser steps between checkpoints; 0: only the final one"""
    keep_checkpoints: int = Field(2, ge=0)
    """checkpoints kept on disk, the newest (0: every one, for a study that reads a run's
    intermediate models, such as knowledge_entropy's pretraining)"""
    log_every: int = Field(1, ge=1)
    """optimiser steps per Ray Train report (the loss and rates are averaged over them); each
    report waits for Ray Train's controller, so small models report every few steps"""
    max_failures: int = Field(1, ge=0)
    """worker failures Ray Train recovers from (restarting from the latest checkpoint)"""
    seed: int = 0

    def rows_per_step(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.num_workers


def step_indices(n: int, step: int, cfg: TrainConfig, seed: int, order: Sequence[int] | None = None) -> np.ndarray:
    """The rows (indices into ``n``) of optimiser step ``step``'s global batch: consecutive rows
    of the data order. The order is ``order`` when given (a study's own curriculum, e.g. phased
    training), cycled; else each epoch is a fresh seeded permutation of the ``n`` rows."""
    per_step = cfg.rows_per_step()
    at = np.arange(step * per_step, (step + 1) * per_step)
    if order is not None:
        return np.asarray(order, dtype=np.int64)[at % len(order)]
    epochs, within = np.divmod(at, n)
    out = np.empty(per_step, dtype=np.int64)
    for epoch in np.unique(epochs):  # one permutation per epoch the step touches, not per row
        pick = epochs == epoch
        out[pick] = epoch_order(n, seed, int(epoch))[within[pick]]
    return out


def step_rows(rows, step: int, cfg: TrainConfig, seed: int, order: Sequence[int] | None = None):
    """The global batch of optimiser step ``step`` (:func:`step_indices`): rows of a
    :class:`PackedRows` as PackedRows, of any other sequence as a list."""
    idx = step_indices(len(rows), step, cfg, seed, order)
    return rows[idx] if isinstance(rows, PackedRows) else [rows[int(i)] for i in idx]


def load_tokenizer(files: dict[str, bytes]):
    """A tokenizer from the bytes of its saved files (``read_files``), through a temporary
    directory that is removed once it has loaded."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="tok") as d:
        for name, data in files.items():
            Path(d, name).write_bytes(data)
        return AutoTokenizer.from_pretrained(d)


def read_files(directory: str | Path) -> dict[str, bytes]:
    """A saved tokenizer as bytes, to ship to workers on any node through the task arguments."""
    return {p.name: p.read_bytes() for p in Path(directory).iterdir() if p.is_file()}


def resolve(value):
    """A recipe's input inside the worker: an object ref's value, anything else as it is (a recipe
    run in this process by :func:`reference_losses` holds plain values)."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


class Recipe(ABC):
    """What a run trains and on what: the parts of the loop a study fills in. The loop (DeepSpeed
    engine, step schedule, loss normalisation, metrics, checkpoints, resume, Ray Train reports) is
    the same for every recipe. A recipe is pickled to every worker, so it holds object refs and
    small values; ``setup`` (in the worker) resolves them."""

    def setup(self) -> None:
        """Runs once in each worker before anything else."""

    @abstractmethod
    def build_model(self, cfg: TrainConfig):
        """The model, with the same weights on every rank (seeded by ``cfg.seed``)."""

    @abstractmethod
    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        """Every micro-batch of optimiser step ``step`` over all workers, as (a dict of CPU
        tensors, the real tokens or samples it holds, for the throughput figures); the same on
        every rank and a pure function of the step, so a resumed run sees the data it would have
        seen."""

    @abstractmethod
    def loss(self, engine, batch: dict[str, Any]):
        """The loss of one (device) batch summed over its :meth:`units` (a scalar tensor)."""

    def rank_batches(self, step: int, cfg: TrainConfig, rank: int, world: int
                     ) -> tuple[list[tuple[dict[str, Any], int]], int, int]:
        """This rank's micro-batches of step ``step`` (every ``world``-th of :meth:`step_batches`,
        from the ``rank``-th), and the whole step's loss units and rows, which every rank divides
        by. This default collates every rank's micro-batches to count them; a recipe that can count
        without collating (:class:`ChatRecipe`: arrays) collates only its own."""
        batches = self.step_batches(step, cfg)
        return batches[rank::world], sum(self.units(b) for b, _ in batches), sum(len(next(iter(b.values())))
                                                                                 for b, _ in batches)

    def units(self, batch: dict[str, Any]) -> int:
        """How many units the loss of ``batch`` sums over: its label tokens (``labels``, IGNORE
        where a token carries no loss) unless the recipe says otherwise (samples, say). Known
        before the forward pass, so every micro-batch's loss is divided by the whole step's."""
        return label_tokens(batch["labels"])

    def eval_batches(self, cfg: TrainConfig) -> dict[str, list[dict[str, Any]]]:
        """Named held-out sets as lists of CPU batches (their loss is reported every ``eval_every``)."""
        return {}

    def eval_metrics(self, module) -> dict[str, float]:
        """Rank 0, every ``eval_every`` steps and at the last: numbers computed from the model as it
        is (``module`` in eval mode, no gradients; whole on rank 0 for ZeRO stages 0-2), added to
        the step's report, such as a recommender's ranking metrics per epoch."""
        return {}

    def param_groups(self, model, cfg: TrainConfig) -> list[dict[str, Any]] | None:
        """AdamW parameter groups with their own ``lr`` / ``weight_decay`` (every parameter in one);
        None: one group at ``cfg.lr`` and ``cfg.weight_decay``."""
        return None

    def has_eval_metrics(self) -> bool:
        return type(self).eval_metrics is not Recipe.eval_metrics

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        """The model in its servable format under ``path`` (DeepSpeed's own state is saved beside it)."""

    def final_metrics(self, path: Path) -> dict[str, float]:
        """Rank 0, last step: numbers computed from the saved model at ``path``, added to the report."""
        return {}

    def seq_len(self) -> int:
        return 0


def router_aux_coef(model) -> float:
    """The weight of a mixture-of-experts model's load-balancing loss (OLMoE, Mixtral, Qwen-MoE
    configs: ``router_aux_loss_coef``); 0 for a dense model."""
    from .model import num_experts

    config = getattr(model, "config", None)
    return float(getattr(config, "router_aux_loss_coef", 0.0) or 0.0) if num_experts(config) else 0.0


def build_causal_lm(cfg: TrainConfig, tokenizer):
    """The causal LM a run starts from: ``cfg.model`` as a named tiny model sized to ``tokenizer``
    (seeded by ``cfg.seed``), a packaged model's name (llm.pretrained), a checkpoint folder (a path,
    or a URI in the run's storage, copied once to this node), or an HF id."""
    from transformers import AutoModelForCausalLM

    from .. import storage

    from .model import TINY_MODELS, build_model, load_pretrained
    from .pretrained import PACKAGED

    if cfg.model in TINY_MODELS:
        return build_model(cfg.model, tokenizer, seed=cfg.seed)
    if cfg.model in PACKAGED:
        return load_pretrained(cfg.model)[0]
    return AutoModelForCausalLM.from_pretrained(storage.readable(cfg.model))


class ChatRecipe(Recipe):
    """Causal-LM training of a Hugging Face model on packed rows (SFT and pre-training)."""

    def __init__(self, rows, tokenizer_files: dict[str, bytes], order=None, eval_rows=None,
                 final_eval: Callable[[Any, Any], dict[str, float]] | None = None):
        self.rows_ref, self.tokenizer_files, self.order_ref, self.eval_ref = rows, tokenizer_files, order, eval_rows
        self.final_eval = final_eval

    def setup(self) -> None:
        self.rows: PackedRows | list[PackedRow] = resolve(self.rows_ref)
        self.order = resolve(self.order_ref)
        self.eval_rows: dict[str, PackedRows | list[PackedRow]] = resolve(self.eval_ref) or {}
        self.tokenizer = load_tokenizer(self.tokenizer_files)

    def build_model(self, cfg: TrainConfig):
        self.loss_chunk = cfg.loss_chunk
        return build_causal_lm(cfg, self.tokenizer)

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        return self.rank_batches(step, cfg, 0, 1)[0]

    def rank_batches(self, step: int, cfg: TrainConfig, rank: int, world: int
                     ) -> tuple[list[tuple[dict[str, Any], int]], int, int]:
        rows_now = step_rows(self.rows, step, cfg, cfg.seed, self.order)
        b = cfg.micro_batch_size
        mine = [rows_now[i:i + b] for i in range(0, len(rows_now), b)][rank::world]
        units = rows_now.label_tokens() if isinstance(rows_now, PackedRows) else \
            sum(label_tokens(collate(rows_now[i:i + b])["labels"]) for i in range(0, len(rows_now), b))
        return [(collate(m), int(sum(r.n_real for r in m))) for m in mine], units, len(rows_now)

    def loss(self, engine, batch: dict[str, Any]):
        coef = router_aux_coef(getattr(engine, "module", engine))
        out = engine(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False,
                     **({"output_router_logits": True} if coef else {}))
        loss = token_loss_sum(out.logits, batch["labels"], getattr(self, "loss_chunk", 0))
        if coef:  # a mixture of experts: its load-balancing loss, per token as the model's own loss adds it
            n = (batch["labels"][:, 1:] != IGNORE).sum()  # a tensor: no wait for the device here
            loss = loss + coef * out.aux_loss * n
        return loss

    def eval_batches(self, cfg: TrainConfig) -> dict[str, list[dict[str, Any]]]:
        b = cfg.micro_batch_size
        return {name: [collate(rows[i:i + b]) for i in range(0, len(rows), b)] for name, rows in self.eval_rows.items()}

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        save_hf(engine, self.tokenizer, path / "model", rank, zero_stage)

    def final_metrics(self, path: Path) -> dict[str, float]:
        if self.final_eval is None:
            return {}
        from transformers import AutoModelForCausalLM

        from .model import inference_device

        # scored here, where torch and transformers are loaded already, on the very model the
        # checkpoint holds (any ZeRO stage: read back from its HF files), on this worker's GPU
        # where it has one
        model = AutoModelForCausalLM.from_pretrained(path / "model").to(inference_device())
        return self.final_eval(model, self.tokenizer)

    def seq_len(self) -> int:
        return len(self.rows[0].input_ids) if self.rows else 0


def optimizer_and_schedule(model, cfg: TrainConfig, groups: list[dict[str, Any]] | None = None):
    """AdamW over the model's trainable parameters and its learning-rate schedule (transformers'
    schedulers: warm-up, then constant, linear to 0, or cosine to ``min_lr_ratio`` x lr).

    ``groups``: AdamW parameter groups with their own ``lr`` / ``weight_decay`` (a recipe training
    several models side by side, each at its own rate: :meth:`Recipe.param_groups`); the schedule
    scales every group's rate alike."""
    import torch
    from transformers import get_scheduler

    if groups:
        trainable = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in groups]
    else:
        trainable = [p for p in model.parameters() if p.requires_grad]  # a recipe may freeze some
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    name, extra = SCHEDULES[cfg.schedule], {}
    if cfg.schedule == "cosine" and cfg.min_lr_ratio > 0:
        name, extra = "cosine_with_min_lr", {"min_lr_rate": cfg.min_lr_ratio}
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.max_steps,
                              scheduler_specific_kwargs=extra)
    return optimizer, scheduler


def reference_losses(recipe: Recipe, cfg: TrainConfig, steps: int | None = None) -> list[float]:
    """The loss of every optimiser step of ``recipe`` trained by a plain torch loop in this process:
    no Ray, no DeepSpeed, one worker; the same model, batches, loss normalisation, AdamW, clipping
    and schedule as :func:`train_worker`. The parity test holds the Ray Train + DeepSpeed loop to
    this curve, and a study can use it to try a setting without starting Ray."""
    import torch

    recipe.setup()
    model = recipe.build_model(cfg)
    model.train()
    optimizer, scheduler = optimizer_and_schedule(model, cfg, recipe.param_groups(model, cfg))
    out = []
    for step in range(cfg.max_steps if steps is None else steps):
        batches = recipe.step_batches(step, cfg)
        units = sum(recipe.units(b) for b, _ in batches)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for batch, _ in batches:
            loss = recipe.loss(model, batch)
            step_loss(loss, units).backward()
            total += loss.item()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        scheduler.step()
        out.append(total / max(units, 1))
    return out


def save_hf(engine, tokenizer, path: Path, rank: int, zero_stage: int) -> None:
    """The model in Hugging Face format (safetensors) from rank 0; every rank calls it (ZeRO-3
    gathers the 16-bit weights from every rank's partition: :func:`llm.weights.gathered_state`)."""
    from .weights import gathered_state

    state = gathered_state(engine, zero_stage) if zero_stage == 3 else None
    if rank == 0:
        engine.module.save_pretrained(path, state_dict=state)
        tokenizer.save_pretrained(path)
