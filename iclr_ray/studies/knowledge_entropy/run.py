"""knowledge_entropy on Ray: pretraining runs (Ray Tune trials, each a Ray Train + DeepSpeed run
keeping every checkpoint), the knowledge entropy of every checkpoint and of the real pretrained
models (one Ray task each), then the continual runs as one Tune grid: from each start checkpoint,
from the resuscitated last checkpoint and its controls, and over the (p, q) grid. Each continual
trial prepares its start model (entropy before and after resuscitation, the probes' loss before
training; in a Ray task where it needs a GPU), then trains it through the shared loop with the
facts injected, the probes' loss reported every round, and ends with the entropy of the trained
model. The shared data is world.py's, the models and what is measured on them models.py's."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import ray

from ... import storage
from ...config import ConfigError
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as facts_data
from .config import Config
from .models import EntropyScore, entropy_record, load_start, on_device, start_model
from .world import World, build_world, checkpoint_step, probe_tensors, read_corpus_jsonl, seed_data, split_revision

# ----------------------------------------------------------------------------- inputs


def prepare(cfg: Config) -> dict[str, Any]:
    """Every input read and checked before Ray starts (exit 2 on anything wrong)."""
    d = cfg.data
    if d.require_real:
        missing = [k for k, v in (("data.corpus_jsonl", d.corpus_jsonl), ("data.probe_jsonl", d.probe_jsonl),
                                  ("data.facts_jsonl or data.official_facts", d.facts_jsonl or d.official_facts),
                                  ("checkpoints", cfg.checkpoints)) if not v]
        if missing:
            raise ConfigError(f"data.require_real: this preset runs on real checkpoints and data only; set "
                              f"{', '.join(missing)} (docs/studies/knowledge_entropy.md)")
    inputs: dict[str, Any] = {}
    if d.corpus_jsonl is not None:
        inputs["corpus"] = read_corpus_jsonl(d.corpus_jsonl)
        need, have = d.probe_docs + 1, len(inputs["corpus"])
    else:
        from ...corpora import reviews

        need, have = d.pretrain_docs + d.probe_docs + 1, len(reviews(min_words=d.min_words))
    if have < need:
        raise ConfigError(f"the corpus has {have} documents: too few for data.pretrain_docs={d.pretrain_docs} and "
                          f"data.probe_docs={d.probe_docs} with documents left for the continual runs")
    if d.probe_jsonl is not None:
        inputs["probe"] = read_corpus_jsonl(d.probe_jsonl)
        if len(inputs["probe"]) < d.probe_docs:
            raise ConfigError(f"data.probe_jsonl holds {len(inputs['probe'])} documents, fewer than "
                              f"data.probe_docs={d.probe_docs}")
    if d.facts_jsonl is not None:
        inputs["facts"] = facts_data.read_facts_jsonl(d.facts_jsonl)
    if d.official_facts:
        inputs["facts"] = facts_data.read_official_facts(*d.official_facts, unseen=d.official_unseen,
                                                         probe_kind=d.probe_kind)
    for source in cfg.checkpoints:
        path, _ = split_revision(source)
        if storage.is_remote(path):
            if not storage.is_file(storage.join(path, "config.json")):
                raise ConfigError(f"checkpoints: {source} is not a model checkpoint (no config.json there)")
            continue
        local = Path(path).expanduser()
        if (local.exists() or path.startswith((".", "/", "~"))) and not (local / "config.json").is_file():
            raise ConfigError(f"checkpoints: {source} is not a model checkpoint (no config.json there)")
    if cfg.models:
        from ...llm import pretrained

        for name in cfg.models:
            pretrained.check_available(name)
    if not cfg.checkpoints:
        from ...llm.model import TINY_MODELS

        if cfg.pretrain.model not in TINY_MODELS:
            raise ConfigError(f"pretrain.model: {cfg.pretrain.model!r} is not a named tiny model "
                              f"({', '.join(TINY_MODELS)}); real checkpoints go in `checkpoints`")
        if cfg.pretrain.steps < cfg.pretrain.checkpoints:
            raise ConfigError(f"pretrain.steps={cfg.pretrain.steps} is fewer than pretrain.checkpoints="
                              f"{cfg.pretrain.checkpoints}")
    return inputs


# ----------------------------------------------------------------------------- Ray tasks


def checkpoint_entropy(source: str, world: World, seed: int, model_name: str) -> dict[str, Any]:
    """Knowledge entropy of one pretraining checkpoint on the probe set."""
    model = on_device(load_start(source, world, seed, model_name))
    return entropy_record(model, world.probe_ids, world.probe_mask)


def model_entropy(name: str, texts: list[str], seq_len: int) -> dict[str, Any]:
    """Knowledge entropy of a real pretrained model on the probe documents, in its own tokens."""
    import torch

    from ...llm import pretrained

    torch.set_num_threads(1)
    model, tok = pretrained.load(name)
    ids, mask = probe_tensors(tok, texts, seq_len)
    out = entropy_record(on_device(model), ids, mask)
    out["name"] = name
    out["label"] = pretrained.PACKAGED[name].note if name in pretrained.PACKAGED else name
    out["params"] = int(sum(p.numel() for p in model.parameters()))
    return out


# ----------------------------------------------------------------------------- trials


def _train_config(section, model: str, seed: int, steps: int, **extra):
    from ...llm.recipe import TrainConfig

    return TrainConfig(model=model, micro_batch_size=section.batch // section.num_workers, grad_accum=1,
                       max_steps=steps, lr=section.lr, weight_decay=section.weight_decay, schedule="cosine",
                       warmup_steps=section.warmup_steps, min_lr_ratio=section.min_lr_ratio, zero_stage=2,
                       num_workers=section.num_workers, seed=seed, max_failures=1, **worker_resources(section),
                       **extra)


@resumable
def pretrain_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, world_box: list) -> dict[str, Any]:
    """One pretraining run: the named tiny model trained on the review rows through the shared
    loop, a checkpoint every steps/checkpoints steps, all kept (their model folders as locations:
    paths, or URIs in the run's storage). (``world_box`` holds the World's object ref, so it is
    stored once for every trial and task.)"""
    from ...llm.train import checkpoints, fit, read_steps

    world: World = ray.get(world_box[0])
    p, seed = cfg.pretrain, config["spec"]["seed"]
    every = max(1, p.steps // p.checkpoints)
    tcfg = _train_config(p, p.model, seed, p.steps, checkpoint_every=every, keep_checkpoints=0,
                         log_every=max(1, every // 4))
    result = fit(tcfg, world.pretrain_rows, world.tokenizer(), trial_dir, "train")
    kept = [[step, storage.join(location, "model")] for step, location in checkpoints(result)]
    curve = [{"step": s["step"], "loss": s["loss"]} for s in read_steps(trial_dir, "train")]
    return {"scores": {"loss": result.metrics["loss"]}, "checkpoints": kept, "curve": curve}


@resumable
def continual_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, world_box: list) -> dict[str, Any]:
    """One continual run (spec: seed, start checkpoint, arm, p, q): the start prepared in a Ray
    task, then trained with the facts injected; the probes' losses at every evaluation. The start
    model is kept in ``trial_dir/start_model`` (a location: the Train workers read it from there)."""
    import time

    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from ...llm.train import fit, read_steps

    t0 = time.perf_counter()
    world: World = ray.get(world_box[0])
    spec = config["spec"]
    tok = world.tokenizer()
    sd = seed_data(world, cfg, spec["seed"], tok)
    start_dir = storage.join(trial_dir, "start_model")
    t1 = time.perf_counter()

    if cfg.gpus_per_task:  # a Ray task with a GPU, outside the trial's placement group (a sliver of CPU)
        opts = task_options(cfg, stage="knowledge_entropy: start model") | {
            "num_cpus": 0.5, "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=None)}
        start = ray.get(ray.remote(start_model).options(**opts).remote(spec, world_box[0], sd["eval_rows"], start_dir))
    else:  # on CPU, here: a task would start a fresh worker process (imports) for seconds of work
        start = start_model(spec, world, sd["eval_rows"], start_dir)
    t2 = time.perf_counter()
    c = cfg.continual
    tcfg = _train_config(c, start_dir, spec["seed"], c.steps(), eval_every=c.round_steps,
                         log_every=c.round_steps)
    result = fit(tcfg, sd["rows"], tok, trial_dir, "train", order=sd["order"], eval_rows=sd["eval_rows"],
                 final_eval=EntropyScore(world.probe_ids, world.probe_mask))
    steps = read_steps(trial_dir, "train")
    curve = [{"step": s["step"], "loss": s["loss"], **{k: s[f"eval_loss_{k}"] for k in facts_data.SPLITS}}
             for s in steps if "eval_loss_paraphrase" in s]
    train_s = sum(s["seconds"] for s in steps)
    seconds = {"data": t1 - t0, "start_model": t2 - t1, "fit": time.perf_counter() - t2, "training_steps": train_s}
    return {"scores": {"h_final": result.metrics["h_final"]}, **start, "h_final": result.metrics["h_final"],
            "curve": curve, "inject_at": sd["inject_at"], "fact_rows": sd["fact_rows"], "counts": sd["counts"],
            "seconds": seconds}


def continual_specs(cfg: Config, starts: dict[int, list[tuple[int, str]]]) -> list[dict[str, Any]]:
    """Every continual run, each once: per seed, plain runs from each start checkpoint; from the
    last one, resuscitation (p, q), the random-neuron control (p, q) and q = 1; for the first seed,
    the (p, q) grid."""
    r = cfg.resuscitation
    specs: dict[str, dict[str, Any]] = {}

    def add(seed: int, ckpt: tuple[int, str], fraction: float, arm: str, ratio: float | None = None,
            q: float | None = None, role: str = "main") -> None:
        label = f"s{seed}_step{ckpt[0]}_{arm}" + (f"_p{ratio:g}_q{q:g}" if arm != "plain" else "")
        spec = specs.setdefault(label, {"label": label, "seed": seed, "step": ckpt[0], "source": ckpt[1],
                                        "fraction": fraction, "arm": arm, "ratio": ratio, "q": q, "roles": []})
        if role not in spec["roles"]:
            spec["roles"].append(role)

    for seed, kept in starts.items():
        chosen = pick_starts(kept, cfg.continual.starts)
        for f, ckpt in zip(cfg.continual.starts, chosen):
            add(seed, ckpt, f, "plain")
        late = chosen[-1]
        add(seed, late, 1.0, "resus", r.ratio, r.q)
        add(seed, late, 1.0, "random", r.ratio, r.q)
        add(seed, late, 1.0, "resus", r.ratio, 1.0, role="q1")
        if seed == min(starts):
            for p in r.grid_ratios:
                for q in r.grid_qs:
                    add(seed, late, 1.0, "resus", p, q, role="grid")
    return list(specs.values())


def pick_starts(kept: list[tuple[int, str]], fractions: list[float]) -> list[tuple[int, str]]:
    """The saved checkpoint nearest each fraction of the run (by step); the last fraction is the
    final checkpoint when it is 1."""
    steps = np.array([s for s, _ in kept], float)
    last = steps.max()
    return [kept[int(np.argmin(np.abs(steps - f * last)))] for f in fractions]


# ----------------------------------------------------------------------------- the run


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    world = build_world(cfg, ctx.inputs)
    ctx.log(stage="data", **world.stats)
    ctx.say("data: %s", world.stats)
    root = ctx.run_dir.storage()
    world_ref = ray.put(world)
    seeds = list(range(cfg.seed, cfg.seed + cfg.pretrain.seeds)) if not cfg.checkpoints else [cfg.seed]

    # 1. pretraining (or the real checkpoints)
    pretrain_curves: dict[int, list] = {}
    if cfg.checkpoints:
        kept = {cfg.seed: [(checkpoint_step(s, i), s) for i, s in enumerate(cfg.checkpoints)]}
        init = False
    else:
        ctx.say("pretraining: %d runs of %d steps (%s), %d checkpoints each ...", len(seeds), cfg.pretrain.steps,
                cfg.pretrain.model, cfg.pretrain.checkpoints)
        specs = [{"label": f"seed{s}", "seed": s} for s in seeds]
        trials = run_grid(pretrain_trial, specs, storage=storage.join(root, "tune"), name="pretrain",
                          max_concurrent_trials=cfg.max_concurrent_trials, cfg=cfg, world_box=[world_ref])
        kept = {t.spec["seed"]: [(int(s), p) for s, p in t.final["checkpoints"]] for t in trials}
        pretrain_curves = {t.spec["seed"]: t.final["curve"] for t in trials}
        init = True

    # 2. knowledge entropy of every checkpoint, and of the real models
    opts = task_options(cfg, stage="knowledge_entropy: entropy")
    entropy_task = ray.remote(checkpoint_entropy).options(**opts)
    refs = {(seed, step): entropy_task.remote(src, world_ref, seed, cfg.pretrain.model)
            for seed, ks in kept.items() for step, src in ks}
    if init:
        refs.update({(seed, 0): entropy_task.remote("init", world_ref, seed, cfg.pretrain.model) for seed in kept})
    texts = world.probe_texts[:cfg.model_probe_docs]
    model_refs = [ray.remote(model_entropy).options(**opts).remote(name, texts, world.seq_len) for name in cfg.models]
    ctx.say("knowledge entropy: %d checkpoints, %d pretrained models ...", len(refs), len(model_refs))
    values = ctx.wait_all(list(refs.values()) + model_refs, "entropy per checkpoint")
    by_key = dict(zip(refs, values[:len(refs)]))
    curves = []
    for seed in kept:
        points = [{"step": step, **rec} for (s, step), rec in sorted(by_key.items()) if s == seed]
        curves.append({"seed": seed, "points": points, "pretrain_loss": pretrain_curves.get(seed, [])})
        ctx.log(kind="entropy_curve", seed=seed, steps=[p["step"] for p in points], h=[p["h"] for p in points])
        ctx.say("seed %d: H %s", seed, " ".join(f"{p['h']:.3f}" for p in points))
    models = values[len(refs):]
    for m in models:
        ctx.log(kind="model_entropy", name=m["name"], h=m["h"], h_max=m["h_max"])
        ctx.say("%s: H %.3f of at most %.3f (%d layers x %d)", m["name"], m["h"], m["h_max"], m["n_layers"], m["width"])

    # 3. continual runs: start checkpoints, resuscitation and its controls, the (p, q) grid
    specs = continual_specs(cfg, {s: [(st, src) for st, src in ks] for s, ks in kept.items()})
    ctx.say("continual training: %d runs of %d steps (%d at a time) ...", len(specs), cfg.continual.steps(),
            cfg.max_concurrent_trials)
    trials = run_grid(continual_trial, specs, storage=storage.join(root, "tune"), name="continual",
                      max_concurrent_trials=cfg.max_concurrent_trials, cfg=cfg, world_box=[world_ref])
    runs = []
    for t in trials:
        rec = {k: t.spec[k] for k in ("label", "seed", "step", "fraction", "arm", "ratio", "q", "roles")}
        rec.update({k: t.final[k] for k in ("h_start", "h_resuscitated", "h_final", "eval0", "curve", "inject_at",
                                            "counts", "neurons_scaled", "mean_factor", "seconds") if k in t.final})
        runs.append(rec)
        ctx.log(kind="continual", label=rec["label"], h_start=rec["h_start"], h_final=rec["h_final"])
    schedule = {"rounds": cfg.continual.rounds, "round_steps": cfg.continual.round_steps,
                "steps": cfg.continual.steps(), "inject_at": facts_data.injection_steps(cfg.continual.rounds,
                                                                                        cfg.continual.round_steps)}
    return {"data": world.stats, "seeds": seeds, "curves": curves, "models": models, "runs": runs,
            "schedule": schedule, "pretrained_here": init}


# ----------------------------------------------------------------------------- plan


def _kept_steps(p) -> list[int]:
    """The steps a pretraining run saves (llm.train's rule for checkpoint_every: every
    steps // checkpoints steps, and the last)."""
    every = max(1, p.steps // p.checkpoints)
    return sorted(set(range(every, p.steps + 1, every)) | {p.steps})


def _probe_bytes(model, seq_len: int, batch: int = 8) -> float:
    """Working set of coefficient_means on one batch of 8 probes, no grad, fp32: about six
    hidden-width tensors and, in the MLP, the gate, up and product (fp32) and the hook's |C| and
    its masked copy (fp64)."""
    c = model.config
    return float(batch * seq_len * (6 * 4 * c.hidden_size + (3 * 4 + 3 * 8) * c.intermediate_size))


def plan(cfg: Config) -> list:
    """Pretraining (unless real checkpoints are given), the knowledge entropy of every checkpoint
    and real model (one Ray task each), then the continual grid (pretrain and continual trials
    through the shared loop, ZeRO-2, one micro-batch per worker per step)."""
    from ...plan import Tasks, Train, lm, weights_bytes

    d, p, c = cfg.data, cfg.pretrain, cfg.continual
    stages: list = []
    if cfg.checkpoints:
        kept = {cfg.seed: [(checkpoint_step(s, i), s) for i, s in enumerate(cfg.checkpoints)]}
        model = lm(split_revision(cfg.checkpoints[0])[0])
    else:
        kept = {s: [(step, f"seed{s}/step{step}") for step in _kept_steps(p)]
                for s in range(cfg.seed, cfg.seed + p.seeds)}
        model = lm(p.model, vocab_size=d.vocab_size)
        micro = p.batch // p.num_workers
        stages.append(Train("pretrain", p, p.num_workers, p.seeds, model, p.steps, micro * p.num_workers, micro,
                            d.seq_len, zero_stage=2, concurrent=cfg.max_concurrent_trials,
                            note=f"one Tune trial per seed, {len(_kept_steps(p))} checkpoints kept each"))
    n_ckpt = sum(len(k) for k in kept.values()) + (0 if cfg.checkpoints else len(kept))  # + step 0 per seed
    real = [lm(name) for name in cfg.models]
    mem = max(weights_bytes(m, bf16=False) + _probe_bytes(m, d.seq_len) for m in [model, *real])
    flops = 2 * model.params * d.probe_docs * d.seq_len * n_ckpt + sum(
        2 * m.params * cfg.model_probe_docs * d.seq_len for m in real)
    stages.append(Tasks("entropy", cfg, n_ckpt + len(real), mem, model=model, flops=flops,
                        note=f"{n_ckpt} checkpoints x {d.probe_docs} probes + {len(real)} real models x "
                             f"{cfg.model_probe_docs} probes of {d.seq_len} tokens, forward only; memory: the "
                             "largest model's fp32 weights (from_pretrained's default) + one batch of 8 probes' "
                             "activations and the fp64 coefficient sums (_probe_bytes)"))
    specs = continual_specs(cfg, kept)
    micro = c.batch // c.num_workers
    stages.append(Train("continual", c, c.num_workers, len(specs), model, c.steps(), micro * c.num_workers, micro,
                        d.seq_len, zero_stage=2, concurrent=cfg.max_concurrent_trials,
                        note=f"{len(specs)} trials (start checkpoints, resuscitation and controls, the (p, q) grid); "
                             f"each first prepares its start model"
                             + (f" in a Ray task with {cfg.gpus_per_task:g} GPU (fp32 weights, "
                                f"{weights_bytes(model, bf16=False) / 2**30:.1f} GiB)" if cfg.gpus_per_task else
                                " in the trial's process")))
    return stages
