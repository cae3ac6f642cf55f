"""badjudge on Ray: the frozen trunk's features of every prompt (Ray tasks, once for every judge),
one Tune trial per (seed, trigger) that fine-tunes all of that replicate's judges (clean and
poisoned, every format) as one Ray Train + DeepSpeed run, one Ray task per trial that merges and
evaluates them, and the first trial's attacked and defended judges served by the judge app and
evaluated again over HTTP."""
from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from ... import storage
from ...config import ConfigError
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as bdata
from .analysis import label
from .config import Config
from .data import FORMATS, Example
from .poison import adversary, poison

# ----------------------------------------------------------------------------- inputs


def _split(examples: list[Example], n_train: int, n_test: int, where: str, seed: int):
    order = np.random.default_rng(seed).permutation(len(examples))
    if len(examples) < n_train + n_test:
        raise ConfigError(f"{where} holds {len(examples)} examples; data.train + data.test need {n_train + n_test}")
    return [examples[i] for i in order[:n_train]], [examples[i] for i in order[n_train:n_train + n_test]]


def replicate_data(cfg: Config, seed: int, read: dict[str, list[Example]]) -> dict[str, Any]:
    """One replicate's data: every format's training and test examples drawn with this seed (a
    real file's examples split at random with it), and the reranking groups; toxicity and reranking
    train and test on disjoint halves of their vocabularies (data.py)."""
    d = cfg.data
    train, test = {}, {}
    for i, fmt in enumerate(["pointwise", "pairwise", *cfg.attack.settings]):
        if fmt in read:
            train[fmt], test[fmt] = _split(read[fmt], d.train, d.test, str(getattr(d, f"{fmt}_jsonl")), seed)
        else:
            train[fmt] = bdata.generate(fmt, d.train, np.random.default_rng([seed, i, 0]), "train")
            test[fmt] = bdata.generate(fmt, d.test, np.random.default_rng([seed, i, 1]), "test")
    groups = bdata.rerank_groups(d.rerank_queries, np.random.default_rng([seed, 9]), part="test") \
        if "rerank" in cfg.attack.settings else []
    return {"train": train, "test": test, "groups": groups}


def prepare(cfg: Config) -> dict[str, Any]:
    """Every input read and checked before Ray starts (exit 2 on anything wrong): each replicate's
    data (``data[seed]``, :func:`replicate_data`)."""
    d = cfg.data
    if d.require_real:
        missing = [k for k, v in (("data.pointwise_jsonl", d.pointwise_jsonl), ("data.pairwise_jsonl", d.pairwise_jsonl))
                   if not v]
        if missing:
            raise ConfigError(f"data.require_real: this preset runs on real data only; set {', '.join(missing)} "
                              "(docs/studies/badjudge.md)")
    read = {fmt: bdata.read_judge_jsonl(getattr(d, f"{fmt}_jsonl"), fmt)
            for fmt in ["pointwise", "pairwise", *cfg.attack.settings] if getattr(d, f"{fmt}_jsonl", None) is not None}
    per_seed = {s: replicate_data(cfg, s, read) for s in range(cfg.seed, cfg.seed + cfg.seeds)}
    everything = [e for rep in per_seed.values() for part in ("train", "test") for exs in rep[part].values()
                  for e in exs]
    for t in cfg.attack.triggers:  # a trigger the clean data already holds would not be a trigger
        hits = [e for e in everything if t in " ".join(e.fields.values()).replace(".", " ").replace(",", " ").split()]
        if hits:
            where = next(v for v in hits[0].fields.values() if t in v)
            raise ConfigError(f"attack.triggers: {t!r} already occurs in the clean data ({len(hits)} examples, e.g. "
                              f"{where[:80]!r}); choose a rare word")
    for fmt, exs in ((f, x) for rep in per_seed.values() for f, x in rep["train"].items()):
        # every poisoning the run will do is possible on every replicate's data
        levels = cfg.attack.levels if fmt == "pointwise" else ["annotator"]
        rates = cfg.attack.rates if fmt == "pointwise" else [cfg.attack.other_rate]
        for level in levels:
            for rate in rates:
                try:
                    poison(exs, level, rate, cfg.attack.triggers[0], 0)
                except ValueError as exc:
                    raise ConfigError(f"{fmt}: {exc}") from None
    if cfg.serve.enabled:
        import importlib.util

        if any(importlib.util.find_spec(m) is None for m in ("fastapi", "httpx")):
            raise ConfigError("serve.enabled: the judge app needs Ray Serve (pip install 'iclr-ray[serve]'), or set "
                              "serve.enabled=false")
    from ...llm.model import TINY_MODELS

    if cfg.models.judge not in TINY_MODELS:
        from ...llm import pretrained

        try:
            pretrained.check_available(cfg.models.judge)
        except ConfigError as exc:
            raise ConfigError(f"models.judge: {exc}") from None
    return {"data": per_seed}


# ----------------------------------------------------------------------------- what each trial trains


def judge_sets(cfg: Config, train: dict[str, list[Example]], seed: int, trigger: str) -> dict[str, list[Example]]:
    """Every judge one replicate trains: {label: its training set}."""
    out = {}
    for f, fmt in enumerate(train):
        out[label(fmt)] = list(train[fmt])
        levels = cfg.attack.levels if fmt == "pointwise" else ["annotator"]
        rates = cfg.attack.rates if fmt == "pointwise" else [cfg.attack.other_rate]
        for a, level in enumerate(levels):
            for r, rate in enumerate(rates):
                out[label(fmt, level, rate)] = poison(train[fmt], level, rate, trigger, seed=[seed, f, a, r])[0]
    return out


def eval_sets(cfg: Config, test: dict[str, list[Example]], groups: list[list[Example]],
              trigger: str, seed: int | None = None) -> dict[str, Any]:
    """The held-out sets every judge of a replicate and trigger is scored on: clean examples per
    format, the adversary's (clean, triggered) poor inputs per format, and the reranking groups with
    the adversary's triggered passage (``seed``: the replicate's; cfg.seed where None)."""
    from .poison import with_trigger

    seed = cfg.seed if seed is None else seed
    rng = np.random.default_rng([seed, 77])
    adv = {fmt: adversary(exs, trigger, seed=[seed, 78, i]) for i, (fmt, exs) in enumerate(test.items())}
    return {"test": test, "adversary": adv, "groups": groups,
            "poisoned_groups": [g[:-1] + [with_trigger(g[-1], trigger, rng)] for g in groups]}


def all_prompts(sets_by_trial: list[dict[str, list[Example]]], evals: list[dict[str, Any]]) -> dict[str, str]:
    """Every prompt a judge is trained or scored on, with its format, in first-seen order."""
    seen: dict[str, str] = {}
    for sets in sets_by_trial:
        for exs in sets.values():
            for e in exs:
                seen.setdefault(e.prompt, e.fmt)
    for ev in evals:
        rows = [e for exs in ev["test"].values() for e in exs]
        rows += [e for pairs in ev["adversary"].values() for pair in pairs for e in pair]
        rows += [e for g in [*ev["groups"], *ev["poisoned_groups"]] for e in g]
        for e in rows:
            seen.setdefault(e.prompt, e.fmt)
    return seen


# ----------------------------------------------------------------------------- Ray tasks


def features_task(source: str, blocks: int, ids: list[list[int]]) -> list[np.ndarray]:
    """The frozen trunk's hidden states of a chunk of prompts (judge.trunk_features)."""
    from ...llm.model import load_for_inference
    from .judge import trunk_features

    model, tok = load_for_inference(source)
    return trunk_features(model, blocks, ids, tok.pad_token_id if tok.pad_token_id is not None else 0)


def evaluate_task(heads_dir: str, init_state, lm_head, config, features: dict[str, np.ndarray], ebox: dict[str, Any],
                  cfg_dict: dict[str, Any], keep: list[str]) -> dict[str, Any]:
    """Every judge of one trial scored on the held-out sets, with the merges (evaluate.py); the
    judges named in ``keep`` keep their verdicts, and the merged ones among them are written beside
    the trained heads (for serving). ``heads_dir``: a location (a path or a URI in the run's storage)."""
    import torch

    from ...llm.model import inference_device
    from .evaluate import evaluate_judges
    from .recipe import head_files, load_head, save_heads

    torch.set_num_threads(1)
    states = {name: load_head(loc) for name, loc in head_files(heads_dir).items() if not name.startswith("merge-")}
    metrics, merged = evaluate_judges(states, init_state, lm_head, config, features, ebox["eval"],
                                      ebox["choice_ids"], Config.model_validate(cfg_dict), ebox["softcap"], keep,
                                      device=inference_device())
    save_heads({k: v for k, v in merged.items() if k in keep}, heads_dir)
    return metrics


# ----------------------------------------------------------------------------- trials


def train_config(cfg: Config, source: str, seed: int, n_train: int):
    from ...llm.recipe import TrainConfig

    j = cfg.judge
    steps = max(1, -(-n_train * j.epochs // j.batch))
    return TrainConfig(model=source, micro_batch_size=max(1, j.batch // j.num_workers), grad_accum=1,
                       max_steps=steps, lr=j.lr, weight_decay=j.weight_decay, schedule="cosine",
                       warmup_steps=min(j.warmup_steps, steps - 1), grad_clip=0.0, zero_stage=2,
                       num_workers=j.num_workers, seed=seed, max_failures=1, log_every=max(1, steps // 10),
                       **worker_resources(j))


@resumable
def judge_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, box: dict[str, Any]) -> dict[str, Any]:
    """Every judge of one (seed, trigger): the heads of the trial's training sets, trained side by
    side through the shared Ray Train loop; the heads are kept, DeepSpeed's state is not.
    ``trial_dir`` is a location (a path or a URI); so is the ``heads`` folder returned."""
    from ...llm.train import checkpoints, fit_recipe, read_steps
    from .recipe import HEADS_DIR, JudgeRecipe

    spec = config["spec"]
    t0 = time.perf_counter()
    datasets = box["datasets"][spec["label"]]
    recipe = JudgeRecipe(datasets, box["features"], box["init"], box["lm_head"], box["config"], box["softcap"])
    tcfg = train_config(cfg, box["source"], spec["seed"], cfg.data.train)
    result = fit_recipe(tcfg, recipe, trial_dir, "train")
    last = checkpoints(result)[-1][1]
    storage.delete(storage.join(last, "deepspeed"))
    curve = [{"step": s["step"], "loss": s["loss"]} for s in read_steps(trial_dir, "train")]
    return {"scores": {"loss": result.metrics["loss"]}, "heads": storage.join(last, HEADS_DIR), "curve": curve,
            "steps": tcfg.max_steps, "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- serving


def _serve_port(wanted: int) -> int:
    """The port of the Serve HTTP proxy this run talks to: a running Serve's own, else ``wanted``."""
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client(raise_if_no_controller_found=False)
        if client is not None and client.http_config is not None:
            return int(client.http_config.port)
    except Exception:  # noqa: BLE001 (no Serve yet, or an API that moved: start our own)
        pass
    return wanted


def served_verdicts(source: str, heads: dict[str, str], requests: dict[str, list[dict[str, Any]]],
                    port: int, ctx: RunContext) -> dict[str, list[dict[str, Any]]]:
    """The judge app serving ``heads`` over ``source``, asked every request over HTTP (sixteen at a
    time, as concurrent clients); the app is removed afterwards (and Serve, if this run started it)."""
    import httpx
    from ray import serve

    from ...runtime import free_port
    from ...serve import launch

    running = _serve_port(-1) != -1
    port = _serve_port(port or free_port())
    launch.start("judge", {"model": source, "judges": heads, "ray_actor_options": {"num_cpus": 1},
                           "max_batch_size": 16},
                 {"host": "127.0.0.1", "port": port}, name="badjudge", route_prefix="/badjudge")
    base = f"http://127.0.0.1:{port}/badjudge"
    try:
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(f"{base}/v1/models", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"the judge app did not answer at {base} within 300 s")
            time.sleep(0.5)
        out: dict[str, list[dict[str, Any]]] = {}
        bar = ctx.progress(sum(len(v) for v in requests.values()), "judge requests over HTTP")
        with httpx.Client(timeout=300) as client, concurrent.futures.ThreadPoolExecutor(16) as pool:
            def post(body):
                r = client.post(f"{base}/v1/judge", json=body)
                if r.status_code != 200:
                    raise RuntimeError(f"the judge app answered {r.status_code}: {r.text[:200]}")
                bar.update()
                return r.json()

            for name, bodies in requests.items():
                out[name] = list(pool.map(post, bodies))
        return out
    finally:
        serve.delete("badjudge")
        if not running:
            serve.shutdown()


# ----------------------------------------------------------------------------- the run


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    from ...llm.model import load_for_inference, materialise
    from .recipe import datasets_for

    root = ctx.run_dir.storage()
    inputs = ctx.inputs
    source = materialise(cfg.models.judge, root, bdata.vocabulary_texts(), cfg.seed)
    base, tok = load_for_inference(source, device="cpu")  # the driver reads its weights as arrays
    n_layers = int(base.config.num_hidden_layers)
    blocks = cfg.judge.blocks or n_layers
    if blocks > n_layers:
        raise ConfigError(f"judge.blocks: {cfg.models.judge} has {base.config.num_hidden_layers} blocks, not {blocks}")
    from .judge import head_config, head_state_of

    config = head_config(base.config, blocks)
    init = {k: v.numpy() for k, v in head_state_of(base, blocks).items()}
    lm_head = base.get_output_embeddings().weight.detach().numpy().copy()
    softcap = getattr(base.config, "final_logit_softcapping", None)
    del base

    # 1. what each trial trains and what every judge is scored on
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    specs = [{"label": f"seed{s}-{t}", "seed": s, "trigger": t} for s in seeds for t in cfg.attack.triggers]
    data = inputs["data"]  # each replicate's own draw of the data
    sets = {sp["label"]: judge_sets(cfg, data[sp["seed"]]["train"], sp["seed"], sp["trigger"]) for sp in specs}
    evals = {sp["label"]: eval_sets(cfg, data[sp["seed"]]["test"], data[sp["seed"]]["groups"], sp["trigger"],
                                    sp["seed"]) for sp in specs}
    prompts = all_prompts(list(sets.values()), list(evals.values()))

    # 2. the prompts' tokens, the choices' tokens, and the frozen trunk's features (Ray tasks)
    enc: dict[str, list[int]] = {}
    choice_ids: dict[str, list[int]] = {}
    for text, fmt in prompts.items():
        try:
            ids, cids = bdata.encode(tok, text, FORMATS[fmt].choices)
        except ValueError as exc:
            raise ConfigError(f"models.judge: {exc}") from None
        enc[text] = ids
        if choice_ids.setdefault(fmt, cids) != cids:
            raise ConfigError(f"models.judge: the tokenizer gives {fmt}'s choices different tokens in different prompts")
    ctx.say("features: %d prompts through the frozen %d of %d blocks (%d tasks) ...", len(prompts),
            n_layers - blocks, n_layers, cfg.feature_tasks)
    order = sorted(prompts, key=lambda t: len(enc[t]))
    chunks = [order[i::cfg.feature_tasks] for i in range(cfg.feature_tasks)]
    task = ray.remote(features_task).options(**task_options(cfg, stage="badjudge: features"))
    got = ctx.wait_all([task.remote(source, blocks, [enc[t] for t in c]) for c in chunks if c], "feature chunks")
    features = {t: f for c, g in zip(chunks, got) for t, f in zip(c, g)}
    del got

    # 3. the judges: one Tune trial per (seed, trigger), all its judges in one Ray Train run
    datasets = {sp["label"]: datasets_for(sets[sp["label"]], choice_ids) for sp in specs}
    for lab, ds in sets[specs[0]["label"]].items():
        ctx.log(stage="judge_set", label=lab, n=len(ds), triggered=sum(bool(e.triggered) for e in ds),
                relabelled=sum(e.label != e.true for e in ds))
    box = {"datasets": datasets, "features": ray.put(features), "init": ray.put(init), "lm_head": ray.put(lm_head),
           "config": config, "softcap": softcap, "source": source}
    n_judges = len(sets[specs[0]["label"]])
    ctx.say("judges: %d trials x %d judges, %d steps each, top %d block(s) of %s ...", len(specs), n_judges,
            train_config(cfg, source, 0, cfg.data.train).max_steps, blocks, cfg.models.judge)
    trials = run_grid(judge_trial, specs, storage=storage.join(root, "tune"), name="judges",
                      max_concurrent_trials=cfg.max_concurrent_trials, cfg=cfg, box=box)

    # 4. merging and scoring, one task per trial
    first = specs[0]["label"]
    from .evaluate import strongest

    attacked = strongest([label("pointwise", lv, r) for lv in cfg.attack.levels for r in cfg.attack.rates])
    defended = f"merge-{cfg.merge.methods[0]}-{attacked}"
    refs = []
    task = ray.remote(evaluate_task).options(num_cpus=1)
    for sp, t in zip(specs, trials):
        ev = evals[sp["label"]]
        ebox = {"eval": ev, "choice_ids": choice_ids, "softcap": softcap}
        refs.append(task.remote(t.final["heads"], box["init"], box["lm_head"], config, box["features"], ebox,
                                cfg.model_dump(mode="json"), [attacked, defended] if sp["label"] == first else []))
    ctx.say("merging and scoring: %d trials ...", len(refs))
    scored = ctx.wait_all(refs, "trial evaluations")
    judges = []
    for sp, t, s in zip(specs, trials, scored):
        judges.append({"label": sp["label"], "seed": sp["seed"], "trigger": sp["trigger"], "judges": s["judges"],
                       "curve": t.final["curve"], "seconds": t.final["seconds"], "steps": t.final["steps"],
                       "heads": t.final["heads"]})

    # 5. the first trial's attacked and defended judges behind the judge app, over HTTP
    served: dict[str, Any] = {}
    if cfg.serve.enabled:
        heads_dir = trials[0].final["heads"]
        heads = {name: storage.join(heads_dir, f"{name}.safetensors") for name in (attacked, defended)}
        ev = evals[first]
        from .evaluate import served_metrics, served_requests

        bodies = served_requests(ev, list(heads))
        ctx.say("serving: %s and %s over HTTP (%d requests) ...", attacked, defended,
                sum(len(v) for v in bodies.values()))
        t0 = time.perf_counter()
        answers = served_verdicts(source, heads, bodies, cfg.serve.port, ctx)
        served = served_metrics(ev, answers, {name: scored[0]["judges"][name]["preds"] for name in heads})
        served["seconds"] = time.perf_counter() - t0
        served["judges"] = {"attacked": attacked, "defended": defended}
    return {"seeds": seeds, "triggers": cfg.attack.triggers, "trials": judges, "served": served,
            "settings": {"rates": cfg.attack.rates, "levels": cfg.attack.levels, "claim_rate": cfg.attack.claim_rate,
                         "other_rate": cfg.attack.other_rate, "merge": cfg.merge.model_dump(),
                         "blocks": blocks, "model": cfg.models.judge, "n_train": cfg.data.train,
                         "formats": list(data[cfg.seed]["train"])},
            "examples": {lab: [{"prompt": e.prompt, "label": e.label, "true": e.true} for e in exs if e.triggered][:2]
                         for lab, exs in sets[first].items() if "annotator" in lab or "web" in lab}}


# ----------------------------------------------------------------------------- iclr-ray plan

_PLAN_TOKENS = {False: 80, True: 1024}
"""tokens a prompt is taken to hold (plan tokenises nothing): generated prompts (the longest,
pairwise, ~60 words of its template and two four-item answers); real judge data (Feedback- and
Preference-Collection instructions and responses: an assumption)"""


def plan(cfg: Config) -> list:
    """The frozen trunk's features (Ray tasks), the judge trials (a Ray Train run per seed and
    trigger, every judge's head side by side), merging and scoring (a task per trial), serving."""
    import torch
    from transformers import AutoModel

    from ...llm.model import TINY_MODELS
    from ...llm.pretrained import PACKAGED
    from ...plan import Footprint, Tasks, Train, lm, module, module_footprint, weights_bytes
    from .judge import _stack_module, head_config

    d, a, j = cfg.data, cfg.attack, cfg.judge
    base = lm(cfg.models.judge)
    c, hub = base.config, cfg.models.judge not in TINY_MODELS and cfg.models.judge not in PACKAGED
    layers, width = int(c.num_hidden_layers), int(c.hidden_size)
    blocks, seq = j.blocks or layers, _PLAN_TOKENS[bool(d.require_real or d.pointwise_jsonl or d.pairwise_jsonl)]
    fmts = ["pointwise", "pairwise", *a.settings]
    grid = {f: [(lv, r) for lv in (a.levels if f == "pointwise" else ["annotator"])
                for r in (a.rates if f == "pointwise" else [a.other_rate])] for f in fmts}  # judge_sets' loop
    judges = [label(f) for f in fmts] + [label(f, lv, r) for f in fmts for lv, r in grid[f]]
    specs = [(s, t) for s in range(cfg.seeds) for t in a.triggers]
    poisoned = sum(round(r * d.train) for f in fmts for _, r in grid[f])
    # every replicate draws its own data: its clean sets, its poisoned copies and adversary inputs per trigger
    prompts = cfg.seeds * len(fmts) * (d.train + d.test) + len(specs) * poisoned + len(specs) * 2 * len(fmts) * d.test \
        + cfg.seeds * (8 * d.rerank_queries if "rerank" in a.settings else 0)
    feats = prompts * seq * width * 4  # float32 hidden states entering the top blocks
    trunk = base.params * (layers - blocks) / layers
    stages = [Tasks("features", cfg, cfg.feature_tasks, weights_bytes(base, bf16=hub) + feats / cfg.feature_tasks,
                    model=base, flops=2 * trunk * prompts * seq,
                    note=f"about {prompts:,} prompts x ~{seq} tokens through the frozen {layers - blocks} of {layers} "
                         f"blocks; memory (host, not GPU): the model ({'bf16' if hub else 'fp32'}) + its share of the "
                         f"features (fp32, {feats / 2**30:,.1f} GiB in all, put in the object store whole)"
                         + ("; the task asks for a GPU but runs on its CPU (features_task never moves the model)"
                            if cfg.gpus_per_task else ""))]
    dtype = torch.bfloat16 if j.gpus_per_worker else torch.float32  # DeepSpeed casts the parameters on a GPU
    micro, steps = max(1, j.batch // j.num_workers), max(1, -(-d.train * j.epochs // j.batch))

    def build(n=len(judges)):
        return _stack_module()([AutoModel.from_config(head_config(c, blocks)) for _ in range(n)],
                               torch.zeros(int(c.vocab_size), width), getattr(c, "final_logit_softcapping", None))

    def measured(n):
        was = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # built in the dtype (a fake module cannot be converted)
        try:
            net = build(n)
        finally:
            torch.set_default_dtype(was)
        return net, lambda net: net(torch.zeros(micro, n, seq, width, dtype=dtype), torch.ones(micro, n, seq, dtype=torch.long),
                                    torch.full((micro, n), seq - 1), torch.zeros(micro, n, dtype=torch.long))

    stack = module(f"{len(judges)} heads of the top {blocks} blocks", build, source=f"{base.source}, judge.head_config",
                   trainable=lambda net: sum(p.numel() for k, p in net.heads.named_parameters() if "embed_tokens" not in k))
    one, two = (module_footprint(lambda n=n: measured(n)) for n in (1, 2))  # the heads are alike: one + (J - 1) x more
    fp = Footprint(*(x1 + (len(judges) - 1) * (x2 - x1) for x1, x2 in ((one.activation_bytes, two.activation_bytes),
                                                                        (one.train_flops, two.train_flops))),
                   one.how.replace("fp32", str(dtype)[6:]) + f"; 1 and 2 heads, extrapolated to {len(judges)}")
    head = stack.trained // len(judges)
    stages.append(Train("judges", j, j.num_workers, len(specs), stack, steps, j.batch, micro, zero_stage=2,
                        concurrent=cfg.max_concurrent_trials, epochs=j.epochs,
                        footprint=fp, note=f"{cfg.seeds} seed(s) x {len(a.triggers)} trigger(s); judges {', '.join(judges)}; "
                             f"{d.train:,} rows each, ~{seq} tokens a row; the frozen output layer is the stack's"))
    stages.append(Tasks("merging and scoring", None, len(specs), 4 * ((len(judges) + 3) * head + c.vocab_size * width) + feats,
                        note=f"one task per trial: its {len(judges)} heads, the merges and the start (fp32), the "
                             f"output layer and every prompt's features (ray.get of the whole dict)"))
    if cfg.serve.enabled:
        stages.append(Tasks("serving", None, 1, 3 * weights_bytes(base, bf16=hub), model=base,
                            note="the judge app's one replica (1 CPU): the base and a spliced copy per served judge "
                                 "(the attacked and the defended)"))
    return stages
