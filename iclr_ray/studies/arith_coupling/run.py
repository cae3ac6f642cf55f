"""arith_coupling on Ray: every (task, method, seed) is one Ray Tune trial of a grid, and each trial
trains its model with the shared Ray Train + DeepSpeed loop (``llm.train.fit_recipe`` with the
:class:`CouplingRecipe` below: fresh examples and fresh position offsets every step, drawn from
the step number, so a resumed run sees the data it would have seen). Rank 0 scores the final
checkpoint on the task's whole evaluation grid inside the Train worker. ``eval_only`` loads the
models a finished run saved (each trial's ``model_dir``: its final checkpoint's location, a path or
a URI in the run's storage) and scores them on this config's grids, one Ray task per model."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ... import storage
from ...config import ConfigError, DataError
from ...llm.recipe import Recipe, TrainConfig
from ...resources import worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data
from .config import Config, Task, variants

MODEL_FILE, MODEL_CONFIG = "model.safetensors", "model.json"  # the weights and their metadata (llm.weights)


def prepare(cfg: Config) -> dict[str, Any]:
    """Checks before Ray starts: every evaluation cell's ids fit the position tables; for
    eval_only, the earlier run's saved models exist."""
    for t in cfg.tasks:
        m = data.method(t.name, "coupled")
        for d in t.eval_digits:
            for c in t.eval_count:
                _, top = data.longest(t.name, m, d, c)
                if top > t.max_position:
                    raise ConfigError(f"tasks.{t.name}: the {d}x{c} cell needs position ids up to {top}, "
                                      f"above max_position = {t.max_position}")
        _check_train_fits(t)
    if cfg.eval_only is None:
        return {}
    path = Path(cfg.eval_only) / "result.json"
    try:
        prev = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"eval_only: {path} cannot be read as a finished run ({exc})") from None
    if prev.get("study") != "arith_coupling":
        raise DataError(f"eval_only: {path} is a {prev.get('study')!r} run, not arith_coupling")
    saved = [r for r in prev["metrics"]["trials"] if storage.is_file(storage.join(r["model_dir"], MODEL_FILE))]
    if not saved:
        raise DataError(f"eval_only: no saved models found for the trials of {path}")
    tasks_now = {t.name: t.model_dump(mode="json") for t in cfg.tasks}
    if not any(r["task"] in tasks_now for r in saved):
        raise ConfigError(f"eval_only: the run at {cfg.eval_only} trained none of the tasks {sorted(tasks_now)}")
    for r in saved:
        if r["task"] not in tasks_now or data.method(r["task"], r["method"]).position == "none":
            continue
        have = json.loads(storage.read_text(storage.join(r["model_dir"], MODEL_CONFIG)))["model"]["n_positions"]
        need = needed_rows(tasks_now[r["task"]], r["method"])
        if need > have:
            raise ConfigError(f"eval_only: the {r['task']} grid needs {need} positions, more than the "
                              f"{r['method']} model's table of {have}")
    return {"saved": saved}


def _check_train_fits(t: Task) -> None:
    m = data.method(t.name, "coupled")
    _, top = data.longest(t.name, m, t.train_digits[1], t.train_count[1])
    if top > t.max_position:
        raise ConfigError(f"tasks.{t.name}: training examples need position ids up to {top}, "
                          f"above max_position = {t.max_position}")


def needed_rows(task: dict[str, Any], method: str) -> int:
    """Position-table rows the task's training range and evaluation grid use: the largest coupled
    id + 1, or the longest sequence for absolute positions."""
    m = data.method(task["name"], method)
    cells = [(d, c) for d in task["eval_digits"] + [task["train_digits"][1]]
             for c in task["eval_count"] + [task["train_count"][1]]]
    sizes = [data.longest(task["name"], m, d, c) for d, c in cells]
    return max(n for n, _ in sizes) if m.position == "absolute" else max(top for _, top in sizes) + 1


def table_sizes(task: dict[str, Any], method: str) -> int:
    """Rows of the model's position table: max_position + 1 for coupled ids, the longest sequence
    of training or evaluation for absolute ones; training offsets (random starts for absolute ids)
    reach every row."""
    m = data.method(task["name"], method)
    return needed_rows(task, method) if m.position == "absolute" else task["max_position"] + 1


def model_config(cfg_model: dict[str, Any], task: dict[str, Any], method: str) -> dict[str, Any]:
    from . import tasks

    m = data.method(task["name"], method)
    return {"vocab": len(tasks.VOCAB), **cfg_model, "levels": m.levels, "n_positions": table_sizes(task, method),
            "position": m.position}


def _torch_batch(b: data.Batch) -> dict[str, Any]:
    import torch

    from ...llm.data import IGNORE

    tokens = torch.from_numpy(b.tokens)
    labels = torch.where(torch.from_numpy(b.loss_mask), tokens, torch.full_like(tokens, IGNORE))
    return {"tokens": tokens, "positions": torch.from_numpy(b.positions), "pad": torch.from_numpy(b.pad),
            "labels": labels}


def grid_accuracy(model, task: dict[str, Any], method: str, seed: int, batch: int = 100,
                  offsets: bool = False) -> dict[str, float]:
    """Exact-match accuracy (every target token right under teacher forcing, which is greedy
    decoding's exact match) of each evaluation cell, keyed ``"<digits>x<count>"``. ``offsets``:
    score with training-style random offsets within the model's table instead of none. Each batch
    goes to the model's device."""
    import torch

    from .model import exact_match

    m = data.method(task["name"], method)
    within = model.config.n_positions - 1 if offsets and m.position != "none" else None
    model.eval()
    device = next(model.parameters()).device
    out = {}
    for d in task["eval_digits"]:
        for c in task["eval_count"]:
            cell = data.eval_cell(task["name"], m, d, c, task["eval_samples"], seed, offsets_within=within)
            hits = 0
            for lo in range(0, len(cell.tokens), batch):
                part = (cell.tokens, cell.positions, cell.loss_mask, cell.pad)
                hits += int(exact_match(model, *(torch.from_numpy(a[lo:lo + batch]).to(device) for a in part)).sum())
            out[f"{d}x{c}"] = hits / len(cell.tokens)
    return out


def load_model(directory: str | Path):
    """The model saved in ``directory``: a checkpoint's local folder, or its location (a path or a
    URI) in the run's storage."""
    from ...llm.weights import load_weights
    from .model import CoupledDecoder, ModelConfig

    try:
        conf = json.loads(storage.read_text(storage.join(directory, MODEL_CONFIG)))
        model = CoupledDecoder(ModelConfig(**conf["model"]))
        model.load_state_dict(load_weights(storage.join(directory, MODEL_FILE)))
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        raise DataError(f"cannot load an arith_coupling model from {directory}: {exc}") from None
    return model, conf


class CouplingRecipe(Recipe):
    """A coupled decoder trained from scratch on the task's training distribution."""

    def __init__(self, task: dict[str, Any], method: str, model: dict[str, Any], eval_seed: int,
                 eval_offsets: bool = False):
        self.task, self.method, self.model_cfg, self.eval_seed = task, method, model, eval_seed
        self.eval_offsets = eval_offsets
        self.m = data.method(task["name"], method)

    def build_model(self, cfg: TrainConfig):
        import torch

        from .model import CoupledDecoder, ModelConfig

        torch.manual_seed(cfg.seed)
        return CoupledDecoder(ModelConfig(**self.model_cfg), seed=cfg.seed)

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        rng = np.random.default_rng([cfg.seed, step])
        t = self.task
        top = self.model_cfg["n_positions"] - 1  # training offsets reach the table's last row
        out = []
        for _ in range(cfg.grad_accum * cfg.num_workers):
            b = data.train_batch(t["name"], self.m, cfg.micro_batch_size, rng, tuple(t["train_digits"]),
                                 tuple(t["train_count"]), top)
            out.append((_torch_batch(b), int((~b.pad).sum())))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        from ...llm.loss import summed_token_loss

        return summed_token_loss(engine(batch["tokens"], batch["positions"], batch["pad"]), batch["labels"])[0]

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from ...llm.weights import save_engine_weights

        path.mkdir(parents=True, exist_ok=True)
        save_engine_weights(engine, str(path / MODEL_FILE), rank, zero_stage,  # MODEL_CONFIG beside it
                            meta={"model": self.model_cfg, "task": self.task, "method": self.method})

    def final_metrics(self, path: Path) -> dict[str, float]:
        from ...llm.model import inference_device

        model = load_model(path)[0].to(inference_device())  # this worker's GPU where it has one
        return {f"acc_{k}": v for k, v in grid_accuracy(model, self.task, self.method, self.eval_seed,
                                                                  offsets=self.eval_offsets).items()}


def train_config(cfg: Config, task: dict[str, Any], seed: int, lr: float | None = None) -> TrainConfig:
    """``lr``: a swept learning rate; otherwise the task's, or train's (steps and batch: the
    task's, or train's)."""
    t = cfg.train
    steps = task.get("steps") or t.steps
    per_worker = max(1, (task.get("batch") or t.batch) // t.num_workers)
    return TrainConfig(model="arith_coupling", micro_batch_size=per_worker, grad_accum=1, max_steps=steps,
                       lr=lr or task.get("lr") or t.lr, weight_decay=t.weight_decay, schedule="cosine",
                       min_lr_ratio=t.min_lr_ratio,
                       warmup_steps=int(t.warmup * steps), zero_stage=0, num_workers=t.num_workers, seed=seed,
                       betas=(0.9, 0.95), grad_clip=1.0,
                       # about 100 reports a run, at most every 10 steps: a report waits for Ray Train's
                       # controller, which costs more than a small model's step
                       log_every=max(1, min(10, steps // 100)), **worker_resources(t))


@resumable
def trial(config: dict[str, Any], trial_dir: Path | str, *, cfg_dump: dict[str, Any]) -> dict[str, Any]:
    """One Tune trial: train (task, method, seed) through Ray Train; the grid accuracies as scores."""
    from ...llm.train import checkpoint_location, fit_recipe, read_steps
    from ...sweep.tuner import thinned_tune_report

    cfg = Config.model_validate(cfg_dump)
    spec = config["spec"]
    task = spec["task"]
    tcfg = train_config(cfg, task, spec["seed"], spec["lr"])
    recipe = CouplingRecipe(task, spec["method"], model_config(spec["model"], task, spec["method"]),
                            eval_seed=cfg.seed + 1000, eval_offsets=cfg.eval_offsets)
    result = fit_recipe(tcfg, recipe, trial_dir, "train", callbacks=[thinned_tune_report(tcfg.max_steps)])
    steps = read_steps(trial_dir, "train")
    scores = {k: v for k, v in result.metrics.items() if k.startswith("acc_")} | {"loss": steps[-1]["loss"]}
    return {"scores": scores, "model_dir": checkpoint_location(result.checkpoint),
            "curve": [[s["step"], s["loss"], s["grad_norm"]] for s in steps[:: max(1, len(steps) // 100)]],
            "train_seconds": sum(s["seconds"] for s in steps)}


def specs(cfg: Config) -> list[dict[str, Any]]:
    """The Tune grid: task x method x sweep variant x seed (a method that is another one on a
    task, ``data.distinct``, is not trained twice)."""
    return [{"task": t.model_dump(mode="json"), "method": m, "seed": cfg.seed + s, "variant": v["name"],
             "model": v["model"], "lr": v["lr"], "label": "/".join(x for x in (t.name, m, v["name"], f"seed{s}") if x)}
            for t in cfg.tasks for m in (t.methods or cfg.methods) if data.distinct(t.name, m)
            for v in variants(cfg) for s in range(cfg.seeds)]


def evaluate_saved(ctx: RunContext, cfg: Config, saved: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """eval_only: score every saved model on this config's grid of its task, one Ray task each."""
    import ray

    offsets = cfg.eval_offsets

    @ray.remote(num_cpus=1)
    def score(model_dir: str, task: dict[str, Any], method: str, seed: int) -> dict[str, float]:
        import torch

        torch.set_num_threads(1)
        model, _ = load_model(model_dir)
        return grid_accuracy(model, task, method, seed, offsets=offsets)

    tasks_now = {t.name: t.model_dump(mode="json") for t in cfg.tasks}
    todo = [r for r in saved if r["task"] in tasks_now]
    refs = [score.remote(r["model_dir"], {**tasks_now[r["task"]], "max_position": r["max_position"]}, r["method"],
                         cfg.seed + 1000) for r in todo]
    outs = ctx.wait_all(refs, f"eval_only: {len(refs)} saved models on the new grids")
    return [{**r, "grid": grid, "eval_only": True} for r, grid in zip(todo, outs)]


def train_all(ctx: RunContext, cfg: Config) -> list[dict[str, Any]]:
    todo = specs(cfg)
    ctx.say("%d trials (task x method x sweep variant x seed), %d at a time ...", len(todo), cfg.max_concurrent_trials)
    # rerunning an interrupted run into the same --out resumes its grid: finished trials keep their result
    trials = []
    for t in run_grid(trial, todo, storage=ctx.run_dir.storage("tune"), name="grid",
                      max_concurrent_trials=cfg.max_concurrent_trials, cfg_dump=cfg.model_dump(mode="json")):
        spec, final = t.spec, t.final
        rec = {"task": spec["task"]["name"], "method": spec["method"], "variant": spec["variant"],
               "seed": spec["seed"], "grid": {k[len("acc_"):]: v for k, v in final["scores"].items()
                                             if k.startswith("acc_")},
               "loss": final["scores"]["loss"], "max_position": spec["task"]["max_position"],
               **{k: final[k] for k in ("model_dir", "curve", "train_seconds")}}
        ctx.log(**{k: v for k, v in rec.items() if k != "curve"})
        trials.append(rec)
    return trials


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    if cfg.eval_only is not None:
        trials = evaluate_saved(ctx, cfg, ctx.inputs["saved"])
    else:
        trials = train_all(ctx, cfg)
    return {"trials": trials, "tasks": [t.model_dump(mode="json") for t in cfg.tasks], "threshold": cfg.threshold,
            "eval_only": str(cfg.eval_only) if cfg.eval_only else None, "eval_offsets": cfg.eval_offsets}


# ----------------------------------------------------------------------------- iclr-ray plan


def plan(cfg: Config) -> list:
    """One stage per task of the Tune grid (its trials share ``max_concurrent_trials``), each
    measured on its largest sweep variant and its longest training sequence; ``eval_only``: the
    scoring tasks instead."""
    import torch

    from ...llm.loss import token_loss_sum
    from ...plan import Footprint, Tasks, Train, module, module_footprint, weights_bytes
    from .model import CoupledDecoder, ModelConfig

    todo, t = specs(cfg), cfg.train
    big = max(variants(cfg), key=lambda v: v["model"]["d_model"] ** 2 * v["model"]["layers"])
    dtype = torch.bfloat16 if t.gpus_per_worker else torch.float32  # the loop's DeepSpeed runs bf16 on a GPU
    stages = []
    for task in cfg.tasks:
        d = task.model_dump(mode="json")
        runs = [s for s in todo if s["task"]["name"] == task.name]
        methods = sorted({s["method"] for s in runs})
        # the longest training example (a batch is padded to its longest) and the method that makes it
        method = max(methods, key=lambda m: data.longest(task.name, data.method(task.name, m), task.train_digits[1],
                                                         task.train_count[1])[0])
        seq = data.longest(task.name, data.method(task.name, method), task.train_digits[1], task.train_count[1])[0]
        conf = ModelConfig(**model_config(big["model"], d, method))
        tc = train_config(cfg, d, 0)

        def measured(conf=conf, b=tc.micro_batch_size, seq=seq):
            def step(net):
                ids = torch.zeros(b, seq, dtype=torch.long)
                logits = net(ids, torch.zeros(b, seq, conf.levels, dtype=torch.long), torch.zeros(b, seq, dtype=torch.bool))
                return token_loss_sum(logits, ids)

            was = torch.get_default_dtype()
            torch.set_default_dtype(dtype)  # built in the dtype (a fake module cannot be converted)
            try:
                return CoupledDecoder(conf), step
            finally:
                torch.set_default_dtype(was)

        model = module(f"CoupledDecoder ({method}, d {conf.d_model}, {conf.layers} layers)",
                       lambda conf=conf: CoupledDecoder(conf), source="model.py from the config")
        if cfg.eval_only is not None:
            cells = [(g, c) for g in task.eval_digits for c in task.eval_count]
            top = max(data.longest(task.name, data.method(task.name, method), g, c)[0] for g, c in cells)
            stages.append(Tasks(f"eval_only: {task.name}", None, len(runs), weights_bytes(model, bf16=False) * 2
                                + 4 * 100 * top * (12 * conf.d_model + conf.heads * top),
                                note=f"one task per saved model (this config's {len(runs)} trials assumed: the count "
                                     f"is in the earlier run's result.json), {len(cells) * task.eval_samples:,} examples "
                                     f"in batches of 100, up to {top} tokens; memory: fp32 weights and the loaded "
                                     f"state + one layer's activations and attention of a batch, roughly"))
            continue
        fp = module_footprint(measured)
        stages.append(Train(f"grid: {task.name}", t, t.num_workers, len(runs), model, tc.max_steps,
                            tc.micro_batch_size * t.num_workers, tc.micro_batch_size, concurrent=cfg.max_concurrent_trials,
                            footprint=Footprint(fp.activation_bytes, fp.train_flops, fp.how.replace("fp32", str(dtype)[6:])),
                            note=f"{len(runs)} trials: methods {', '.join(methods)} x {len(variants(cfg))} variant(s) x "
                                 f"{cfg.seeds} seed(s); measured on {method} (the longest training example: {seq} "
                                 f"tokens, {task.train_digits[1]} digits x {task.train_count[1]} operands), every "
                                 f"trial counted at that size; rank 0 then scores the "
                                 f"{len(task.eval_digits) * len(task.eval_count)}-cell grid, {task.eval_samples} "
                                 f"examples a cell (not counted)"))
    return stages
