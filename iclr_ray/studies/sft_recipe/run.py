"""sft_recipe on Ray: pre-train a tiny LM (Ray Train + DeepSpeed), then the paper's four
experiments as one Ray Tune sweep whose trials each run the SFT loop (the Train V2 pattern), and
experiment 1's grid once more under the early-termination scheduler.

Trials are specs (experiment, label, recipe overrides, data order); a spec shared by several
experiments (the base recipe is a grid point, the no-warmup constant run and the stacked run)
runs once. Each trial trains on the same packed rows at the same sample budget, reports its
steps to Tune, and ends by scoring its final checkpoint on the held-out sets.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import storage
from ...config import ConfigError, deep_merge
from ...resources import worker_resources
from ...runtime import RunContext
from ...sweep.grid import GridTrial, resumable, run_grid
from ...llm import data as llm_data
from ...llm.evaluate import MCItem, read_mc_jsonl
from ...llm.model import TINY_MODELS
from . import data as gen
from . import recipe
from .analysis import analyse
from .config import Config, Sft

# ----------------------------------------------------------------------------- inputs


def prepare(cfg: Config) -> dict[str, Any]:
    """Read and check the real-data files and the model source before Ray starts."""
    if cfg.data.require_real and cfg.data.knowledge_jsonl is None:
        raise ConfigError("data.require_real: this preset fine-tunes on real SFT data only; set data.knowledge_jsonl "
                          "and data.skills_jsonl (chat JSONL, one {\"messages\": [...]} per line; "
                          "docs/studies/sft_recipe.md) and, for an MMLU-style knowledge score, data.eval_mc_jsonl")
    for batch in {cfg.sft.batch, *cfg.grid.batches}:
        try:
            recipe.batch_split(batch, cfg.sft.micro_batch_size, cfg.sft.num_workers)
        except ValueError as exc:
            raise ConfigError(f"sft/grid: {exc}") from None
    if batch_too_big := [b for b in {cfg.sft.batch, *cfg.grid.batches} if b > cfg.sft.sample_budget]:
        raise ConfigError(f"batch {max(batch_too_big)} exceeds sft.sample_budget={cfg.sft.sample_budget}: "
                          "not one optimiser step fits the budget")
    if cfg.early.window_rows >= cfg.sft.sample_budget:
        raise ConfigError(f"early.window_rows={cfg.early.window_rows} is not below sft.sample_budget="
                          f"{cfg.sft.sample_budget}: the early window must end before training does")
    if short := [b for b in {cfg.sft.batch, *cfg.grid.batches} if b > cfg.early.window_rows]:
        raise ConfigError(f"early.window_rows={cfg.early.window_rows} is less than one step of batch {max(short)}: "
                          "every batch needs at least one whole step inside the early window")
    model = cfg.sft.model
    if storage.is_remote(model):
        if not storage.is_file(storage.join(model, "config.json")):
            raise ConfigError(f"sft.model: {model} is not a model checkpoint (no config.json there)")
    elif model not in TINY_MODELS:
        path = Path(model).expanduser()
        if (path.exists() or model.startswith((".", "/", "~"))) and not (path / "config.json").is_file():
            raise ConfigError(f"sft.model: {model} is not a model checkpoint (no config.json there)")
        if not path.exists():  # an HF id: its config must resolve (hub or local cache) before Ray starts
            from transformers import AutoConfig

            try:
                AutoConfig.from_pretrained(model)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"sft.model: {model!r} is neither a named tiny model "
                                  f"({', '.join(TINY_MODELS)}) nor a loadable checkpoint: "
                                  f"{str(exc).splitlines()[0]}") from None
    inputs: dict[str, Any] = {}
    if cfg.data.knowledge_jsonl is not None:
        inputs["knowledge"] = llm_data.read_chat_jsonl(cfg.data.knowledge_jsonl)
        inputs["skills"] = llm_data.read_chat_jsonl(cfg.data.skills_jsonl)
        for half in ("knowledge", "skills"):
            if len(inputs[half]) <= cfg.data.n_eval:
                raise ConfigError(f"data.{half}_jsonl: {len(inputs[half])} conversations, need more than "
                                  f"data.n_eval={cfg.data.n_eval} (they are the held-out split)")
    if cfg.data.eval_mc_jsonl is not None:
        inputs["mc"] = read_mc_jsonl(cfg.data.eval_mc_jsonl)
    return inputs


@dataclass
class EvalItem:
    prompt: Any  # a user turn (str) or the conversation before the answer (message list)
    answer: str


@dataclass
class World:
    """Everything the trials share: tokenizer files, packed rows and the held-out sets."""
    tokenizer_files: dict[str, bytes]
    pretrain_rows: list
    knowledge_rows: list
    skills_rows: list
    eval_rows: dict[str, list]
    eval_em: dict[str, list[EvalItem]]
    eval_mc: list[MCItem] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def scorer(self, max_new_tokens: int) -> recipe.HeldOutScorer:
        return recipe.HeldOutScorer({half: [(i.prompt, i.answer) for i in items] for half, items in self.eval_em.items()},
                                    self.eval_mc, max_new_tokens)

    def tokenizer(self):
        from ...llm.recipe import load_tokenizer

        return load_tokenizer(self.tokenizer_files)


def _held_out(convs: list, n_eval: int) -> tuple[list, list[EvalItem]]:
    """The last ``n_eval`` conversations of a real file as the held-out split."""
    train, held = convs[:-n_eval], convs[-n_eval:]
    items = []
    for c in held:
        last = max(i for i, m in enumerate(c) if m["role"] == "assistant")
        items.append(EvalItem(c[:last], c[last]["content"]))
    return train, items


def build_world(cfg: Config, inputs: dict[str, Any]) -> World:
    from ...llm.model import build_tokenizer, load_pretrained
    from ...llm.recipe import read_files

    d = cfg.data
    ds = gen.generate(cfg.seed, d.n_pretrain, d.n_train, d.n_eval)
    if "knowledge" in inputs:
        know, know_eval = _held_out(inputs["knowledge"], d.n_eval)
        skills, skills_eval = _held_out(inputs["skills"], d.n_eval)
        held_know, held_skills = [e.prompt + [{"role": "assistant", "content": e.answer}] for e in know_eval], \
            [e.prompt + [{"role": "assistant", "content": e.answer}] for e in skills_eval]
    else:
        know, skills = [i.messages() for i in ds.train_knowledge], [i.messages() for i in ds.train_skills]
        know_eval = [EvalItem(i.prompt, i.answer) for i in ds.eval_knowledge]
        skills_eval = [EvalItem(i.prompt, i.answer) for i in ds.eval_skills]
        held_know, held_skills = [i.messages() for i in ds.eval_knowledge], [i.messages() for i in ds.eval_skills]
    mc = inputs.get("mc") or [MCItem(i.prompt, i.choices, i.correct) for i in ds.eval_knowledge if i.choices]

    if cfg.sft.model in TINY_MODELS:
        texts = ds.pretrain + [m["content"] for c in know + skills for m in c]
        tok = build_tokenizer(texts, vocab_size=d.vocab_size)
    else:
        _, tok = load_pretrained(cfg.sft.model)
    seq, pad = d.seq_len, tok.pad_token_id
    pre = llm_data.pack([e for t in ds.pretrain for e in llm_data.encode_text(tok, t, seq)], seq, pad)
    know_rows = llm_data.pack(llm_data.encode_all(tok, know, seq, "knowledge"), seq, pad)
    skill_rows = llm_data.pack(llm_data.encode_all(tok, skills, seq, "skills"), seq, pad)
    eval_rows = {"knowledge": llm_data.pack(llm_data.encode_all(tok, held_know, seq, "held-out knowledge"), seq, pad),
                 "skills": llm_data.pack(llm_data.encode_all(tok, held_skills, seq, "held-out skills"), seq, pad)}
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        files = read_files(tmp)
    stats = {"pretrain_rows": len(pre), "knowledge_rows": len(know_rows), "skills_rows": len(skill_rows),
             "knowledge_conversations": len(know), "skills_conversations": len(skills),
             "packing_efficiency": llm_data.packing_efficiency(know_rows + skill_rows),
             "vocab_size": len(tok)}
    return World(files, pre, know_rows, skill_rows, eval_rows, {"knowledge": know_eval, "skills": skills_eval},
                 mc, stats)


# ----------------------------------------------------------------------------- trials

SCORES = ("score", "knowledge_mc", "knowledge_em", "skills_em")
ITEMS = ("knowledge_mc_items", "knowledge_em_items", "skills_em_items")
"""per held-out item, right or wrong (recipe.item_string): what the claims' intervals resample"""


def trial_specs(cfg: Config) -> list[dict[str, Any]]:
    """Every trial the experiments need, each once, with the experiments it belongs to."""
    specs: dict[str, dict[str, Any]] = {}

    def add(experiment: str, overrides: dict[str, Any], order: str = "stacked") -> None:
        full = {"batch": cfg.sft.batch, "lr": cfg.sft.lr, "schedule": cfg.sft.schedule,
                "warmup_steps": cfg.sft.warmup_steps, **overrides}
        label = (f"b{full['batch']}_lr{full['lr']:g}_{full['schedule']}_w{full['warmup_steps']}_{order}")
        spec = specs.setdefault(label, {"label": label, "sft": full, "order": order, "experiments": []})
        if experiment not in spec["experiments"]:
            spec["experiments"].append(experiment)

    for b in cfg.grid.batches:
        for lr in cfg.grid.lrs:
            add("grid", {"batch": b, "lr": lr})
    for w in cfg.warmup.warmup_steps:
        for s in cfg.warmup.schedules:
            add("warmup", {"warmup_steps": w, "schedule": s})
    if cfg.phased:
        add("phased", {}, "stacked")
        add("phased", {}, "phased")
    return list(specs.values())


def _train_config(sft: Sft, model: str, seed: int):
    from ...llm.train import TrainConfig

    micro, accum = recipe.batch_split(sft.batch, sft.micro_batch_size, sft.num_workers)
    steps = recipe.steps_for_budget(sft.sample_budget, sft.batch)
    return TrainConfig(model=model, micro_batch_size=micro, grad_accum=accum, max_steps=steps, lr=sft.lr,
                       betas=sft.betas, weight_decay=sft.weight_decay, schedule=sft.schedule,
                       warmup_steps=sft.warmup_steps, grad_clip=sft.grad_clip, zero_stage=sft.zero_stage,
                       num_workers=sft.num_workers, eval_every=max(1, steps // sft.eval_points),
                       gradient_checkpointing=sft.gradient_checkpointing, attention=sft.attention,
                       loss_chunk=sft.loss_chunk,
                       max_failures=1, seed=seed, **worker_resources(sft))


@resumable
def sft_trial(config: dict[str, Any], trial_dir: Path | str, *, base: dict[str, Any], model: str, seed: int, world: World,
              window_rows: int) -> dict[str, Any]:
    """One Tune trial: SFT with the spec's recipe through Ray Train (every step of the early window
    and ~40 later ones reported to Tune; all of them in steps.jsonl), then the held-out scores of
    the final checkpoint, with the per-item outcomes. ``config`` is either ``{"spec": spec}`` (the
    study's experiments) or flat ``sft.<key>`` values (``iclr-ray sweep``)."""
    from ...llm.train import fit
    from ...sweep.tuner import thinned_tune_report

    spec = config.get("spec") or {"label": "sweep", "order": "stacked",
                                  "sft": {k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("sft.")}}
    sft = Sft.model_validate(deep_merge(base, spec["sft"]))
    tcfg = _train_config(sft, model, seed)
    rows = world.knowledge_rows + world.skills_rows
    order = None
    if spec["order"] == "phased":
        order = recipe.phased_order(len(world.knowledge_rows), len(world.skills_rows), sft.sample_budget, seed)
    # every step up to twice the early window reaches Tune (the scheduler reads it); the rest thinned
    dense_until = min(1.0, 2 * window_rows / (tcfg.max_steps * tcfg.rows_per_step()))
    result = fit(tcfg, rows, world.tokenizer(), trial_dir, "train", order=order, eval_rows=world.eval_rows,
                 callbacks=[thinned_tune_report(tcfg.max_steps, dense_until=dense_until)],
                 final_eval=world.scorer(sft.max_new_tokens))
    scores = {k: result.metrics[k] for k in SCORES + ITEMS if k in result.metrics}
    return {"scores": {**scores, "progress": 1.0, "samples": tcfg.max_steps * tcfg.rows_per_step()}}


def replay_trial(config: dict[str, Any], *, recorded: dict[str, dict[str, Any]], window_rows: int) -> None:
    """A trial of the early-termination rerun that replays the grid trial with the same spec:
    its recorded per-step loss and grad norm up to the end of the early window, as the live trial
    reported them to Tune, then (if the scheduler let it go on) its final scores with the full
    budget. A stopped replay ends at the window, so the rows it "spent" are the ones a live rerun
    would have trained before the scheduler stopped it."""
    from ray import tune

    rec = recorded[config["spec"]["label"]]
    for i, point in enumerate(rec["curve"], 1):
        tune.report({"step": i, "loss": point["loss"], "grad_norm": point["grad_norm"],
                     "progress": point["progress"], "samples": point["samples"]})
        if point["samples"] >= window_rows:
            break
    if rec["finished"]:
        tune.report({k: rec[k] for k in SCORES + ITEMS if rec.get(k) is not None}
                    | {"progress": 1.0, "samples": rec["samples"]})


# ----------------------------------------------------------------------------- the run


def pretrain(cfg: Config, world: World, location: str) -> str:
    """Pre-train the named tiny model on the generated corpus (its Train run kept at ``location``,
    a path or a URI); returns the location of its HF checkpoint."""
    from ...llm.train import TrainConfig, checkpoint_location, fit

    p = cfg.pretrain
    micro, accum = recipe.batch_split(p.batch, p.batch, p.num_workers)
    tcfg = TrainConfig(model=cfg.sft.model, micro_batch_size=micro, grad_accum=accum, max_steps=p.steps, lr=p.lr,
                       schedule="cosine", warmup_steps=max(1, p.steps // 20), zero_stage=2,
                       num_workers=p.num_workers, seed=cfg.seed, **worker_resources(p))
    result = fit(tcfg, world.pretrain_rows, world.tokenizer(), location, "pretrain")
    return storage.join(checkpoint_location(result.checkpoint), "model")


def base_model(cfg: Config, world: World, root: str, ctx: RunContext) -> str:
    """The model every trial starts from: ``sft.model`` itself, or for a named tiny model, that
    model pre-trained here (its location in the run's storage is kept in ``pretrained_model.txt``,
    which a resumed run or sweep reads back)."""
    model = cfg.sft.model
    if not (cfg.pretrain.steps and model in TINY_MODELS):
        return model
    marker = storage.join(root, "pretrained_model.txt")
    if storage.is_file(marker):
        return storage.read_text(marker).strip()
    ctx.say("pre-training %s for %d steps on %d Ray Train workers ...", model, cfg.pretrain.steps,
            cfg.pretrain.num_workers)
    model = pretrain(cfg, world, storage.join(root, "pretrain"))
    storage.write_text(marker, model)
    ctx.log(stage="pretrain", model=model)
    return model


def early_stopper(cfg: Config):
    from ...sweep.scheduler import EarlyDynamicsStopper

    e = cfg.early
    return EarlyDynamicsStopper(window_rows=e.window_rows, keep=e.keep, predictor=e.predictor, min_trials=e.min_trials)


def _collect(trials: list[GridTrial]) -> list[dict[str, Any]]:
    """Per trial: its spec fields, final scores and the per-step curve from steps.jsonl."""
    from ...llm.train import read_steps

    out = []
    for t in trials:
        spec = t.spec
        steps = read_steps(t.path, "train") if t.path else []
        m = t.metrics
        out.append({"label": spec["label"], "experiments": spec.get("experiments", []), "order": spec["order"],
                    **spec["sft"], "error": t.error,
                    "score": m.get("score"), "knowledge_mc": m.get("knowledge_mc"),
                    "knowledge_em": m.get("knowledge_em"), "skills_em": m.get("skills_em"),
                    **{k: m.get(k) for k in ITEMS},
                    "finished": m.get("score") is not None,
                    "samples": max((s["samples"] for s in steps), default=m.get("samples", 0)),
                    "curve": [{k: s[k] for k in ("samples", "progress", "loss", "grad_norm", "lr", "eval_loss",
                                                  "eval_loss_knowledge", "eval_loss_skills") if k in s}
                              for s in steps]})
    return out


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    world = build_world(cfg, ctx.inputs)
    ctx.log(stage="data", **world.stats)
    ctx.say("data: %s", world.stats)
    root = ctx.run_dir.storage()
    model = base_model(cfg, world, root, ctx)
    common = {"base": cfg.sft.model_dump(mode="json"), "model": model, "seed": cfg.seed, "world": world,
              "window_rows": cfg.early.window_rows}
    specs = trial_specs(cfg)
    ctx.say("sweep: %d SFT trials, %d at a time ...", len(specs), cfg.max_concurrent_trials)
    trials = _collect(run_grid(sft_trial, specs, storage=storage.join(root, "tune"), name="recipe",
                               max_concurrent_trials=cfg.max_concurrent_trials, allow_unfinished=True, **common))
    metrics: dict[str, Any] = {"data": world.stats, "pretrained_model": model, "trials": trials}

    grid = [s for s in specs if "grid" in s["experiments"]]
    if cfg.early.rerun_with_scheduler and len(grid) >= 2:
        ctx.say("early-termination sweep: the %d grid trials again under the scheduler (%s) ...", len(grid),
                "replayed" if cfg.early.replay else "trained again")
        if cfg.early.replay:
            rerun, params = replay_trial, {"recorded": {t["label"]: t for t in trials},
                                           "window_rows": cfg.early.window_rows}
        else:
            rerun, params = sft_trial, common
        early = run_grid(rerun, grid, storage=storage.join(root, "tune"), name="early_stop",
                         max_concurrent_trials=cfg.max_concurrent_trials, scheduler=early_stopper(cfg),
                         allow_unfinished=True, **params)
        metrics["early_stop_trials"] = _collect(early)
        metrics["early_stop_mode"] = "replay" if cfg.early.replay else "live"
    metrics.update(analyse(cfg, metrics))
    return metrics


def sweep(cfg: Config, space, ctx: RunContext, scheduler: str, resume: bool) -> dict[str, Any]:
    """``iclr-ray sweep sft_recipe --space FILE``: the space's ``sft.*`` values per trial, each trial
    the SFT loop on the shared data and pre-trained model; ranked by the space's metric."""
    from ray import tune

    from ...sweep.tuner import run_tuner

    world = build_world(cfg, ctx.inputs)
    root = ctx.run_dir.storage()
    model = base_model(cfg, world, root, ctx)
    trainable = tune.with_parameters(sft_trial, base=cfg.sft.model_dump(mode="json"), model=model, seed=cfg.seed,
                                     world=world, window_rows=cfg.early.window_rows)
    results = run_tuner(trainable, space.tune_param_space(), storage_path=storage.join(root, "tune"), name="sweep",
                        max_concurrent_trials=space.max_concurrent_trials, num_samples=space.num_samples,
                        scheduler=early_stopper(cfg) if scheduler == "early" else None, resume=resume)
    rows = []
    for r in results:
        m = dict(r.metrics or {})
        rows.append({"params": {k: (r.config or {}).get(k) for k in space.params}, space.metric: m.get(space.metric),
                     "finished": m.get("score") is not None, "samples": m.get("samples"), "progress": m.get("progress"),
                     "error": None if r.error is None else str(r.error).splitlines()[0]})
    ranked = sorted((r for r in rows if r[space.metric] is not None), key=lambda r: r[space.metric],
                    reverse=space.mode == "max")
    if len(space.params) == 2 and ranked:
        from . import plots

        fig = plots.sweep_heatmap(rows, list(space.params), space.metric)
        if fig is not None:
            ctx.save_plots({"sweep_heatmap": fig})
    return {"trials": len(rows), "finished": sum(r["finished"] for r in rows), "rows": rows,
            "best": ranked[0] if ranked else None, "metric": space.metric, "mode": space.mode,
            "pretrained_model": model}


def plan(cfg: Config) -> list:
    """Pre-training (when asked for) and the SFT trials: every trial trains on the same sample
    budget, so each holds the same memory and costs the same FLOPs whatever its batch."""
    from ...plan import Train, lm

    model = lm(cfg.sft.model, vocab_size=cfg.data.vocab_size)
    stages = []
    p = cfg.pretrain
    if p.steps and cfg.sft.model in TINY_MODELS:
        stages.append(Train("pretrain", p, p.num_workers, 1, model, p.steps, p.batch,
                            max(1, p.batch // p.num_workers), cfg.data.seq_len, zero_stage=2))
    s = cfg.sft
    micro, _ = recipe.batch_split(s.batch, s.micro_batch_size, s.num_workers)
    runs = len(trial_specs(cfg))
    if cfg.early.rerun_with_scheduler and not cfg.early.replay:
        runs += len(cfg.grid.batches) * len(cfg.grid.lrs)
    stages.append(Train("sft trials", s, s.num_workers, runs, model, recipe.steps_for_budget(s.sample_budget, s.batch),
                        s.batch, micro, cfg.data.seq_len, s.zero_stage, concurrent=cfg.max_concurrent_trials,
                        gradient_checkpointing=s.gradient_checkpointing, attention=s.attention,
                        loss_chunk=s.loss_chunk,
                        note=f"the {runs} trials (grid, warmup, phased) train on {s.sample_budget:,} rows each; "
                             f"steps shown at the base batch {s.batch}"))
    return stages
