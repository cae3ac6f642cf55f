"""Training on Ray Train with DeepSpeed: the worker loop and the trainer around it.

The loop is shared by every model trained here; what it trains comes from a
:class:`~iclr_ray.llm.recipe.Recipe` (llm/recipe.py: the model, each step's batches, a batch's
summed loss and how many units (label tokens, samples) it sums over, how the model is saved and
scored at the end). ``ChatRecipe`` is supervised fine-tuning and pre-training of a Hugging Face
causal LM on packed rows (:func:`fit`); a study with its own model (arith_coupling's decoder,
``rl.offline``'s behaviour cloning) passes its recipe to :func:`fit_recipe`.

Every worker builds (or loads) the same model, wraps it in a DeepSpeed engine (ZeRO stage from
the config; gloo on CPU, NCCL on GPU, chosen by Ray Train; bf16 only where the GPU has it), and
walks the same deterministic step schedule: the rows of optimiser step t are the same on every
run, so a resumed run continues with the data it would have seen. The loss of a step is
normalised by the step's loss units (label tokens, samples) across all micro-batches and workers
(loss.py).

Every ``log_every`` optimiser steps (and at every evaluation, checkpoint and the last step) the
loop reports loss, grad norm, lr, tokens/s and samples/s over the steps since the last report (and
peak memory and MFU on GPU); every ``checkpoint_every`` steps a checkpoint holds the DeepSpeed
state (all ranks) and, from rank 0, the model and tokenizer in Hugging Face format (servable as is).
"""
from __future__ import annotations

import importlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .data import PackedRow
from .loss import step_loss
from .recipe import ChatRecipe, Recipe, TrainConfig, optimizer_and_schedule, read_files

def _skip_shm_op_build() -> None:
    """DeepSpeed on CPU JIT-compiles a shared-memory comm op with g++ at every initialize, which
    takes minutes; gloo does the collectives here, so skip it. `import deepspeed.comm.torch as m`
    binds another module, hence importlib."""
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


# Dense peak tensor throughput per GPU (FLOP/s) at bf16 / fp32-with-TF32, from the vendors' data
# sheets (SXM parts where there are several). MFU is reported only for GPUs named here.
PEAK_FLOPS = {"H200": (989e12, 494e12), "H100": (989e12, 494e12), "A100": (312e12, 156e12),
              "L40S": (362e12, 183e12), "A10G": (125e12, 62.5e12), "L4": (121e12, 60e12),
              "V100": (125e12, 15.7e12)}


def peak_flops(device_name: str, bf16: bool) -> float | None:
    """The peak FLOP/s of a GPU by its name (``torch.cuda.get_device_name``), None if unknown."""
    for key, (half, single) in PEAK_FLOPS.items():
        if key in device_name.upper():
            return half if bf16 else single
    return None


def flops_per_token(n_params: int, layers: int, hidden: int, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the matmuls with the weights (forward + backward) plus
    the attention scores and values, 12 x layers x hidden x context (PaLM's MFU convention)."""
    return 6.0 * n_params + 12.0 * layers * hidden * seq_len


DEVICE_CHECK_ENV = "ICLR_RAY_DEVICE_CHECK"
"""set (to 1) to check, before the first step, that a recipe's train step and evaluation keep every
tensor on the model's device: a copy of the model on ``meta`` in bfloat16, every op checked as
CUDA checks it (iclr_ray.devicecheck). The test session sets it, so every study's smoke run checks
its recipe as a GPU would run it."""


def to_device(batch: dict[str, Any], device, bf16: bool) -> dict[str, Any]:
    """A CPU batch on the worker's device; floating-point tensors in bfloat16 when the engine
    trains in it (DeepSpeed's bf16 casts the module, not its inputs)."""
    import torch

    return {k: v.to(device, dtype=torch.bfloat16 if bf16 and v.is_floating_point() else None)
            for k, v in batch.items()}


class _Shadow:
    """What a recipe's ``loss`` reads of a DeepSpeed engine (a call, ``.module``), over a bare model."""

    def __init__(self, module):
        self.module = module

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def device_check(recipe: Recipe, model, cfg: TrainConfig, rank: int, world: int,
                 eval_sets: dict[str, list[dict[str, Any]]]) -> None:
    """One micro-batch of the recipe's loss (and its backward pass), its held-out loss and its
    eval_metrics on a bfloat16 copy of ``model`` on ``meta`` (see :data:`DEVICE_CHECK_ENV`).
    DeviceMismatch names the op where a tensor was left on the CPU."""
    import copy

    import torch

    from ..devicecheck import on_device

    meta = torch.device("meta")
    recipe = copy.deepcopy(recipe)  # what the check moves to meta (a scheduler's tables, say) stays the run's
    shadow = copy.deepcopy(model).to(device=meta, dtype=torch.bfloat16)
    engine = _Shadow(shadow)
    mine, _, _ = recipe.rank_batches(0, cfg, rank, world)
    if mine:
        batch = to_device(mine[0][0], meta, True)

        def step():
            total = recipe.loss(engine, batch)
            total.float().sum().backward()

        on_device(step)
    shadow.eval()
    with torch.no_grad():
        for batches in eval_sets.values():
            if batches:
                held_out = to_device(batches[0], meta, True)
                on_device(lambda: recipe.loss(engine, held_out))
        if rank == 0 and recipe.has_eval_metrics():
            on_device(lambda: recipe.eval_metrics(shadow))


def deepspeed_config(cfg: TrainConfig, bf16: bool) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "zero_allow_untested_optimizer": True,
    }


def train_worker(config: dict[str, Any]) -> None:
    """The Ray Train loop of one worker (``TorchTrainer(train_loop_per_worker=train_worker)``)."""
    import deepspeed
    import ray
    import ray.train
    import torch
    import torch.distributed as dist

    cfg = TrainConfig.model_validate(config["train"])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    recipe: Recipe = config["recipe"]
    recipe.setup()
    eval_sets = recipe.eval_batches(cfg) if cfg.eval_every else {}
    scores_in_loop = bool(cfg.eval_every) and (bool(eval_sets) or recipe.has_eval_metrics())
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()

    model = recipe.build_model(cfg)
    if cfg.gradient_checkpointing or cfg.attention != "default":
        from .model import apply_memory_settings

        apply_memory_settings(model, cfg.gradient_checkpointing, cfg.attention)
    peak = peak_flops(torch.cuda.get_device_name(device), bf16) if device.type == "cuda" else None
    mc = getattr(model, "config", None)
    token_flops = flops_per_token(sum(p.numel() for p in model.parameters()), getattr(mc, "num_hidden_layers", 0),
                                  getattr(mc, "hidden_size", 0), recipe.seq_len())
    if os.environ.get(DEVICE_CHECK_ENV):
        device_check(recipe, model, cfg, rank, world, eval_sets)
    optimizer, scheduler = optimizer_and_schedule(model, cfg, recipe.param_groups(model, cfg))
    _skip_shm_op_build()
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=deepspeed_config(cfg, bf16), dist_init_required=False)

    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            _, client_state = engine.load_checkpoint(str(Path(d) / "deepspeed"))
        start = int(client_state["step"])
    fail_at = config.get("fail_once_at_step")  # fault injection for the recovery test

    window = _Window()
    for step in range(start, cfg.max_steps):
        if fail_at is not None and step == fail_at and checkpoint is None and rank == world - 1:
            # a real worker death: Ray Train restarts the group from the latest checkpoint. A moment
            # first, so the controller has taken the last report: a death within milliseconds of a
            # report loses its checkpoint on a loaded machine, and the restart dies at this step again
            time.sleep(2.0)
            os._exit(1)
        t0 = time.perf_counter()
        # this rank's micro-batches, and the step's loss units and rows over every rank
        mine, step_units, step_samples = recipe.rank_batches(step, cfg, rank, world)
        loss_sum = torch.zeros((), dtype=torch.float64)
        real_tokens = 0
        own_norm = None
        for cpu_batch, n_real in mine:
            batch = to_device(cpu_batch, device, bf16)
            total = recipe.loss(engine, batch)
            engine.backward(step_loss(total, step_units, world), scale_wrt_gas=False)
            if cfg.zero_stage == 0 and engine.is_gradient_accumulation_boundary():
                own_norm = grad_norm(engine.module)  # the step's averaged gradients, before clipping
            engine.step()
            loss_sum += total.detach().double().cpu()
            real_tokens += n_real
        window.add(loss_sum.item(), real_tokens, step_units, step_samples, time.perf_counter() - t0)
        last = step + 1 == cfg.max_steps
        evaluate = scores_in_loop and (last or (step + 1) % cfg.eval_every == 0)
        save = last or bool(cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0)
        if not (last or evaluate or save or (step + 1) % cfg.log_every == 0):
            continue
        # the same steps on every rank, so the collectives below match
        stats = torch.tensor([window.loss, float(window.real_tokens)], dtype=torch.float64)
        dist.all_reduce(stats)
        metrics = {
            "step": step + 1,
            "loss": stats[0].item() / max(window.units, 1),
            "grad_norm": _global_grad_norm(engine, own_norm),
            "lr": scheduler.get_last_lr()[0],
            "tokens_per_s": stats[1].item() / window.seconds,
            "samples_per_s": window.samples / window.seconds,
            "samples": (step + 1) * window.samples // window.steps,
            "steps": window.steps,
            "seconds": window.seconds,
            "progress": (step + 1) / cfg.max_steps,
            "resumed_from": start,
        }
        window = _Window()
        if evaluate and eval_sets:
            metrics.update(_eval_losses(engine, recipe, eval_sets, rank, world, device, bf16))
        if evaluate and rank == 0:  # what rank 0 reports is what the run records
            engine.eval()
            with torch.no_grad():
                metrics.update(recipe.eval_metrics(engine.module))
            engine.train()
        if device.type == "cuda":
            metrics["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
            if peak:  # model FLOPs utilisation over all workers
                metrics["mfu"] = metrics["tokens_per_s"] * token_flops / (peak * world)
        if save:
            with tempfile.TemporaryDirectory() as d:
                engine.save_checkpoint(str(Path(d) / "deepspeed"), tag=f"step{step + 1}",
                                       client_state={"step": step + 1})
                recipe.save(engine, Path(d), rank, cfg.zero_stage)
                if last and rank == 0:
                    metrics.update(recipe.final_metrics(Path(d)))
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)


def grad_norm(module) -> float:
    """The L2 norm of all of a module's gradients (as DeepSpeed's global grad norm: before clipping)."""
    import torch

    grads = [p.grad.detach().float() for p in module.parameters() if p.grad is not None]
    return float(torch.sqrt(sum((g * g).sum() for g in grads))) if grads else 0.0


def _global_grad_norm(engine, own: float | None) -> float:
    """DeepSpeed's global gradient norm of the step; ZeRO stage 0 keeps none (its optimizer wrapper
    computes it), so the loop's own, taken at the step's accumulation boundary."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        if own is None:
            raise RuntimeError("no gradient norm for this step: DeepSpeed kept none and the loop took none")
        return own
    return float(norm)


class _Window:
    """Sums over the optimiser steps since the last report (this rank's loss and real tokens; the
    step's loss units and samples, which every rank sees whole)."""

    def __init__(self):
        self.loss = 0.0
        self.real_tokens = self.units = self.samples = self.steps = 0
        self.seconds = 0.0

    def add(self, loss: float, real_tokens: int, units: int, samples: int, seconds: float) -> None:
        self.loss += loss
        self.real_tokens += real_tokens
        self.units += units
        self.samples += samples
        self.steps += 1
        self.seconds += seconds


def _eval_losses(engine, recipe: Recipe, eval_sets: dict[str, list[dict[str, Any]]], rank: int, world: int,
                 device, bf16: bool = False) -> dict[str, float]:
    """Held-out loss per unit (label token) of each named set and of all together, over all workers.
    Every rank runs the same number of forward passes (ZeRO-3 gathers parameters collectively):
    a rank short of a batch repeats its first one and does not count it."""
    import torch
    import torch.distributed as dist

    engine.eval()
    out: dict[str, float] = {}
    totals = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for name, batches in eval_sets.items():
            mine = batches[rank::world]
            sums = torch.zeros(2, dtype=torch.float64)
            for k in range(-(-len(batches) // world)):
                b = to_device(mine[k] if k < len(mine) else batches[0], device, bf16)
                total = recipe.loss(engine, b)
                if k < len(mine):
                    sums += torch.tensor([total.item(), float(recipe.units(b))], dtype=torch.float64)
            dist.all_reduce(sums)
            out[f"eval_loss_{name}"] = sums[0].item() / max(sums[1].item(), 1.0)
            totals += sums
    engine.train()
    out["eval_loss"] = totals[0].item() / max(totals[1].item(), 1.0)
    return out


STEPS_FILE = "steps.jsonl"
STEPS_FLUSH_S = 10.0


def _step_logger(location: str):
    """A Ray Train callback (it runs in the controller, on whichever node) keeping rank 0's metrics
    of every report in ``location`` (``steps.jsonl`` in the run's storage: a path or a URI) as
    JSON lines, so a study gets the whole curve, not just the last step. A local file gets each
    line as it comes; an object store has no append, so there the file is rewritten whole at most
    every ``STEPS_FLUSH_S`` seconds, at every checkpoint and after a failure (a trial stopped by a
    scheduler between two writes loses those last lines). A restarted controller keeps what is there."""
    import json

    from ray.train import UserCallback

    from .. import storage

    remote = storage.is_remote(location)

    class StepLogger(UserCallback):
        def __init__(self):
            self.lines: list[str] | None = None
            self.flushed = 0.0

        def _flush(self) -> None:
            storage.write_text(location, "".join(self.lines or []))
            self.flushed = time.monotonic()

        def after_report(self, run_context, metrics, checkpoint):
            line = json.dumps(metrics[0]) + "\n" if metrics and metrics[0] else None
            if not remote:
                if line:
                    with open(storage.local_path(location), "a") as f:
                        f.write(line)
                return
            if self.lines is None:
                old = storage.read_text(location) if storage.is_file(location) else ""
                self.lines = [x + "\n" for x in old.splitlines() if x.strip()]
            if line:
                self.lines.append(line)
            if checkpoint is not None or time.monotonic() - self.flushed >= STEPS_FLUSH_S:
                self._flush()

        def after_exception(self, run_context, worker_exceptions):
            if remote and self.lines is not None:
                self._flush()

    return StepLogger()


def read_steps(storage_path: str | Path, name: str) -> list[dict[str, Any]]:
    """The reported metrics of a run, one per reported step (every ``log_every`` steps; ``steps``
    and ``seconds`` say how many steps a record covers and how long they took); a step replayed
    after a restart keeps its last record. ``storage_path``: a path or a URI."""
    import json

    from .. import storage

    location = storage.join(storage_path, name, STEPS_FILE)
    steps: dict[int, dict[str, Any]] = {}
    if storage.is_file(location):
        for line in storage.read_text(location).splitlines():
            rec = json.loads(line)
            steps[int(rec["step"])] = rec
    return [steps[k] for k in sorted(steps)]


def fit(cfg: TrainConfig, rows: list[PackedRow], tokenizer, storage_path: str | Path, name: str,
        fail_once_at_step: int | None = None, order: Sequence[int] | None = None,
        eval_rows: dict[str, list[PackedRow]] | None = None, callbacks: Sequence[Any] = (),
        final_eval: Callable[[Any, Any], dict[str, float]] | None = None):
    """Train a Hugging Face causal LM on packed rows (:class:`ChatRecipe`); returns Ray Train's Result.

    ``order``: the row order to train in (see :func:`step_rows`); ``eval_rows``: named held-out
    sets whose loss is reported every ``cfg.eval_every`` steps; ``final_eval(model, tokenizer)``: a
    picklable scorer that rank 0 runs on the final checkpoint's Hugging Face model, its numbers
    added to the last step's metrics (so a Tune trial's own process need not load transformers'
    model code and the model again to score). The rest as :func:`fit_recipe`."""
    import ray

    with tempfile.TemporaryDirectory() as d:
        tokenizer.save_pretrained(d)
        files = read_files(d)
    recipe = ChatRecipe(ray.put(rows), files, order=ray.put(np.asarray(order, np.int64)) if order is not None else None,
                        eval_rows=ray.put(eval_rows) if eval_rows else None, final_eval=final_eval)
    return fit_recipe(cfg, recipe, storage_path, name, fail_once_at_step=fail_once_at_step, callbacks=callbacks)


def checkpoint_location(checkpoint) -> str:
    """Where a Ray Train checkpoint lives, as one string: a local path or a URI (``s3://...``) in
    the run's storage; :func:`iclr_ray.storage.local_copy` turns it into a folder to read."""
    from .. import storage

    return storage.uri_of(checkpoint.filesystem, checkpoint.path)


def checkpoints(result) -> list[tuple[int, str]]:
    """(step, location) of every checkpoint a finished run kept (``cfg.keep_checkpoints``), by step."""
    out = [(int(m["step"]), checkpoint_location(c)) for c, m in (result.best_checkpoints or [])]
    return sorted(out)


def fit_recipe(cfg: TrainConfig, recipe: Recipe, storage_path: str | Path, name: str,
               fail_once_at_step: int | None = None, callbacks: Sequence[Any] = ()):
    """Run the loop on ``cfg.num_workers`` Ray Train workers; returns Ray Train's Result.

    ``storage_path`` is a local path or a URI (``s3://...``) every node reaches: Ray Train keeps the
    checkpoints there. Rerunning with the same ``storage_path``/``name`` resumes from the latest
    checkpoint. Every step's metrics land in ``storage_path/name/steps.jsonl`` (see
    :func:`read_steps`). Each worker asks for what ``cfg`` says (``gpus_per_worker``,
    ``cpus_per_worker``, ``accelerator_type``: resources.py); a request no node can meet fails at once.
    ``callbacks``: more Ray Train callbacks (a Tune trial passes ``TuneReportCallback``);
    ``fail_once_at_step`` kills the last worker's process at that step of a fresh start (a test of
    the recovery path)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    from ray.train import ControllerError

    from .. import storage
    from ..resources import Unplaceable, check_placeable, placement_retries, scaling_config, worker_bundle

    in_trial = _in_tune_trial()
    bundle = worker_bundle(cfg, in_trial)
    check_placeable({f"Ray Train run {name!r}": bundle})
    location = storage.normalise(storage_path)
    if not storage.is_remote(location):
        storage.local_path(location).mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"train": cfg.model_dump(mode="json"), "recipe": recipe,
                           "fail_once_at_step": fail_once_at_step},
        scaling_config=scaling_config(cfg, cfg.num_workers, in_trial),
        run_config=RunConfig(name=name, storage_path=location,
                             failure_config=FailureConfig(max_failures=cfg.max_failures,
                                                          controller_failure_limit=placement_retries(cfg)),
                             checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints or None),
                             callbacks=[_step_logger(storage.join(location, name, STEPS_FILE)), *callbacks]),
    )
    try:
        return trainer.fit()
    except ControllerError as exc:
        if type(exc.controller_failure).__name__ != "WorkerGroupStartupTimeoutError":
            raise
        raise Unplaceable(f"Ray Train run {name!r} waited {cfg.placement_timeout_s:g} s for {cfg.num_workers} "
                          f"workers of {_show(bundle)} and could not place them ({_free()}); other runs hold "
                          "the rest, or no node has it: lower the request, raise placement_timeout_s, or "
                          "run fewer trials at once") from None


def _show(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in bundle.items()) + "}"


def _free() -> str:
    """What the cluster has free now, in a few words (for the error line only)."""
    import ray

    free = ray.available_resources()
    return "free now: " + ", ".join(f"{free.get(k, 0):g} {k}" for k in ("CPU", "GPU"))


def _in_tune_trial() -> bool:
    try:
        from ray.tune.trainable.trainable_fn_utils import _in_tune_session
    except ImportError:
        return False
    return _in_tune_session()
