"""pad on Ray: the base model's samples of the training queries (Ray tasks), preference pairs from
them, the reference log-probabilities of every pair (Ray tasks, once for every PRM), the
personalised reward models as one Tune grid of Ray Train + DeepSpeed runs (per seed: the PRM and
its label-shuffled control; or a PRM given as it is), then decoding as Ray tasks: one for base
decoding, preference prompting and Best-of-N's samples, one per PRM (PAD at the claims' weight,
Best-of-N's ranking, and base, PAD and gated PAD timed in the same process), one for the first
PRM's weight sweep; and one per evaluation reward model where a preference has no rule."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from ... import storage
from ...config import ConfigError
from ...llm.model import load_for_inference as load
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as pdata
from .config import Config

# ----------------------------------------------------------------------------- inputs


def prepare(cfg: Config) -> dict[str, Any]:
    """Every input read and checked before Ray starts (exit 2 on anything wrong)."""
    d = cfg.data
    if d.require_real:
        need = [("data.prompts_jsonl", d.prompts_jsonl)]
        if cfg.models.prm is None:  # a PRM to train needs real pairs
            need.append(("data.pairs_jsonl", d.pairs_jsonl))
        missing = [k for k, v in need if not v]
        if missing:
            raise ConfigError(f"data.require_real: this preset runs on real data only; set "
                              f"{', '.join(missing)} (docs/studies/pad.md)")
    inputs: dict[str, Any] = {}
    if d.prompts_jsonl is not None:  # the file's first rows are the evaluation queries, the next the dev ones
        rows = pdata.read_prompts(d.prompts_jsonl)
        inputs["eval_queries"], inputs["dev_queries"] = rows[:d.eval_queries], rows[d.eval_queries:][:d.dev_queries]
    else:
        held = pdata.queries(d.eval_queries + d.dev_queries, held_out=True, seed=cfg.seed)
        dev = set(np.random.default_rng([cfg.seed, 5]).choice(len(held), d.dev_queries, replace=False).tolist())
        inputs["eval_queries"] = [q for i, q in enumerate(held) if i not in dev]
        inputs["dev_queries"] = [q for i, q in enumerate(held) if i in dev]
    if cfg.decode.w is None and not inputs["dev_queries"]:
        raise ConfigError("decode.w: no dev queries to choose it on (data.prompts_jsonl holds no rows after the "
                          "evaluation ones); give decode.w or more rows")
    if cfg.models.prm is not None:
        pass  # a given PRM: nothing to train on
    elif d.pairs_jsonl is not None:
        inputs["pairs"] = pdata.read_pairs(d.pairs_jsonl)
    else:
        inputs["train_queries"] = pdata.queries(d.train_queries, held_out=False, seed=cfg.seed)
    from ...llm.model import TINY_MODELS

    sources = [("models.base", cfg.models.base), ("models.prm_init", cfg.models.prm_init), ("models.prm", cfg.models.prm),
               *((f"decode.reward_models.{k}", v) for k, v in cfg.decode.reward_models.items())]
    for key, source in sources:
        if source is not None and source not in TINY_MODELS:
            from ...llm import pretrained

            try:
                pretrained.check_available(source)
            except ConfigError as exc:
                raise ConfigError(f"{key}: {exc}") from None
    if cfg.models.prm_init in TINY_MODELS and cfg.models.prm_init != cfg.models.base:
        raise ConfigError("models.prm_init: a tiny model only as the base itself (PAD needs one vocabulary)")
    return inputs


def base_source(cfg: Config, root: str, texts: list[str]) -> str:
    """Where every task loads the base model from (a named tiny model is built once into the run
    directory; ``root`` and the location returned are paths or URIs)."""
    from ...llm.model import materialise

    return materialise(cfg.models.base, root, texts, cfg.seed)


def tokenizer_files(source: str) -> dict[str, bytes]:
    """The tokenizer of ``source`` (a packaged name, a folder or an HF id) as the bytes of its files."""
    import tempfile

    from ...llm.pretrained import load_tokenizer
    from ...llm.recipe import read_files

    tok = load_tokenizer(source)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        return read_files(d)


# ----------------------------------------------------------------------------- Ray tasks


def sample_task(source: str, queries: list[str], n: int, max_tokens: int, temperature: float, top_p: float,
                seed: int) -> list[list[str]]:
    """``n`` samples of the base model for each query (plain prompt), as texts."""
    from ...serve.decoding import SamplingParams, generate
    from .evaluate import chat_ids

    model, tok = load(source)
    jobs = [(i, j) for i in range(len(queries)) for j in range(n)]
    out: list[list[str]] = [[] for _ in queries]
    for lo in range(0, len(jobs), 32):
        part = jobs[lo:lo + 32]
        texts = generate(model, tok, [chat_ids(tok, queries[i]) for i, _ in part],
                         [SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                         seed=seed * 1_000_003 + i * 101 + j) for i, j in part])
        for (i, _), (text, _, _) in zip(part, texts):
            out[i].append(text)
    return out


def reference_task(source: str, pairs: list, pad_id: int) -> np.ndarray:
    """The reference model's log-probabilities of a chunk of pairs, [n, 2]."""
    from .prm import pair_logps

    model, _ = load(source)
    return pair_logps(model, pairs, pad_id).numpy()


def base_task(source: str, queries: list[str], prefs: dict[str, str],
              dec: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    """Base decoding (plain prompt) and preference prompting (the base on each personalised
    prompt); and, as a second return the PRM tasks wait on, Best-of-N's candidates (samples of the
    plain prompt)."""
    from .evaluate import decode_queries, reply_nll

    model, tok = load(source)
    out = {"base": decode_queries(model, tok, queries, dec["max_tokens"]).record(),
           "prompting": {name: decode_queries(model, tok, queries, dec["max_tokens"], pref_text=text).record()
                         for name, text in prefs.items()}}
    out["base"]["nll"] = reply_nll(model, tok, queries, out["base"]["texts"])
    for rec in out["prompting"].values():
        rec["nll"] = reply_nll(model, tok, queries, rec["texts"])
    cands: list[list[str]] = [[] for _ in queries]
    for j in range(dec["best_of_n"]):
        r = decode_queries(model, tok, queries, dec["max_tokens"], temperature=dec["bon_temperature"],
                           seed=1000 * (j + 1))
        for i, t in enumerate(r.texts):
            cands[i].append(t)
    return out, cands


def _load_pair(source: str, prm_source: str):
    base, tok = load(source)
    prm, prm_tok = load(prm_source)
    if len(prm_tok) != len(tok) or prm.get_input_embeddings().weight.shape[0] != base.get_input_embeddings().weight.shape[0]:
        raise ValueError(f"the PRM {prm_source} and the base {source} have different vocabularies; PAD here needs "
                         "one tokenizer (the re-tokenisation path is not implemented)")
    return base, prm, tok


def load_reward_model(source: str):
    """ARGS's reward model (a sequence-classification folder, a path or a URI) in eval mode on the
    task's device, as :func:`load` places a causal LM."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from ...llm.model import inference_device

    torch.set_num_threads(1)
    rm = AutoModelForSequenceClassification.from_pretrained(storage.readable(source))
    device = inference_device()
    if device.type != "cpu":
        rm = rm.to(device=device, dtype=torch.bfloat16)
    return rm.eval()


def base_prompt(dec: dict[str, Any], pref_text: str) -> str | None:
    """The preference text PAD's base model reads before the query (``decode.base_reads``): the
    PRM's own under the official setup, none for the plain query."""
    return pref_text if dec["base_reads"] == "preference" else None


def prm_task(source: str, prm_source: str, queries: list[str], prefs: dict[str, str], dec: dict[str, Any],
             candidates: list[list[str]] | None, timed: list[str], rm_source: str | None = None) -> dict[str, Any]:
    """What one PRM decides: PAD at w for every preference in ``prefs`` (all queries in one batch)
    with the base model's per-token NLL of its replies (the fluency guard), the PRM decoded on its
    own (greedy on the personalised prompt: the baseline PAD at w = 1 nearly is, restricted to the
    base's top k), Best-of-N's picks by this PRM's sequence reward (with ``candidates``), and for
    the preferences in ``timed`` base, PAD and gated PAD decoding each query alone (a served
    request), timed in this process; and with ``rm_source`` (the same seed's reward model), ARGS at
    ``args_w`` on the preferences in ``timed``."""
    from .evaluate import best_of_n, decode_queries, reply_nll, sequence_reward

    base, prm, tok = _load_pair(source, prm_source)
    m, k, w = dec["max_tokens"], dec["k"], dec["w"]
    out: dict[str, Any] = {"pad": {}, "pad_variant": {}, "prm_direct": {}, "bon": {}, "gated": {}, "pad_single": {},
                           "args": {}}
    rm = load_reward_model(rm_source) if rm_source else None
    if timed:
        out["base_single"] = decode_queries(base, tok, queries, m, one_at_a_time=True).record()
    for name, text in prefs.items():
        out["pad"][name] = decode_queries(base, tok, queries, m, pref_text=base_prompt(dec, text), prm=prm,
                                          prm_pref_text=text, k=k, w=w).record()
        out["pad"][name]["nll"] = reply_nll(base, tok, queries, out["pad"][name]["texts"])
        if name in timed:  # the trained preferences of a real PRM
            out["prm_direct"][name] = decode_queries(prm, tok, queries, m, pref_text=text).record()
            out["prm_direct"][name]["nll"] = reply_nll(base, tok, queries, out["prm_direct"][name]["texts"])
            other = {**dec, "base_reads": "plain" if dec["base_reads"] == "preference" else "preference"}
            out["pad_variant"][name] = decode_queries(base, tok, queries, m, pref_text=base_prompt(other, text),
                                                      prm=prm, prm_pref_text=text, k=k, w=w).record()
            out["pad_variant"][name]["nll"] = reply_nll(base, tok, queries, out["pad_variant"][name]["texts"])
        if rm is not None and name in timed:
            out["args"][name] = decode_queries(base, tok, queries, m, pref_text=base_prompt(dec, text), rm=rm,
                                               rm_pref_text=text, k=k, w=dec["args_w"]).record()
            out["args"][name]["nll"] = reply_nll(base, tok, queries, out["args"][name]["texts"])
        if candidates is not None:
            rewards = sequence_reward(prm, base, tok, queries, candidates, text)
            out["bon"][name] = {"texts": best_of_n(candidates, rewards), "rewards": rewards}
        if name in timed:
            for key, margin in (("pad_single", None), ("gated", dec["margin"])):
                out[key][name] = decode_queries(base, tok, queries, m, pref_text=base_prompt(dec, text), prm=prm,
                                                prm_pref_text=text, k=k, w=w, margin=margin,
                                                one_at_a_time=True).record()
    return out


def sweep_task(source: str, prm_source: str, queries: list[str], prefs: dict[str, str],
               dec: dict[str, Any], rm_source: str | None = None) -> dict[str, Any]:
    """The weight sweep on ``queries`` (the dev queries): per preference, the base's greedy replies
    on the prompt PAD's base reads (the w = 0 and k = 1 identities' reference), and PAD at every
    weight of ``w_grid``, with k = 1 for the first: {"base": {preference: replies}, "sweep":
    {preference: {str(w) or "k1": replies}}}; with ``rm_source``, ARGS at every weight too
    ("args_sweep", the same shape)."""
    from .evaluate import decode_queries

    base, prm, tok = _load_pair(source, prm_source)
    m = dec["max_tokens"]
    out: dict[str, dict[str, list[str]]] = {}
    greedy: dict[str, list[str]] = {}
    plain = decode_queries(base, tok, queries, m).texts if dec["base_reads"] == "plain" else None
    for i, (name, text) in enumerate(prefs.items()):
        bp = base_prompt(dec, text)
        greedy[name] = plain if plain is not None else decode_queries(base, tok, queries, m, pref_text=bp).texts
        out[name] = {str(float(x)): decode_queries(base, tok, queries, m, pref_text=bp, prm=prm, prm_pref_text=text,
                                                   k=dec["k"], w=x).texts for x in dec["w_grid"]}
        if i == 0:
            out[name]["k1"] = decode_queries(base, tok, queries, m, pref_text=bp, prm=prm, prm_pref_text=text, k=1,
                                             w=max(dec["w_grid"])).texts
    res: dict[str, Any] = {"base": greedy, "sweep": out}
    if rm_source:
        rm = load_reward_model(rm_source)
        res["args_sweep"] = {name: {str(float(x)): decode_queries(base, tok, queries, m, pref_text=base_prompt(dec, text),
                                                                  rm=rm, rm_pref_text=text, k=dec["k"], w=x).texts
                                    for x in dec["w_grid"]} for name, text in prefs.items()}
    return res


def choose_w(sweep: dict[str, dict[str, list[str]]], grid: list[float], score) -> float:
    """The weight of ``grid`` with the best mean alignment over the preferences (``score(texts,
    preference)``: per-reply scores) on the sweep's queries; ties go to the smaller weight."""
    means = []
    for w in grid:
        per = [np.nanmean(score(texts[str(float(w))], name)) for name, texts in sweep.items()]
        means.append(float(np.nanmean(per)) if np.isfinite(per).any() else -np.inf)
    return float(grid[int(np.argmax(means))])


# ----------------------------------------------------------------------------- PRM trials


def train_config(cfg: Config, model: str, seed: int, n_pairs: int):
    from ...llm.recipe import TrainConfig

    p = cfg.prm
    steps = max(1, -(-n_pairs * p.epochs // p.batch))
    return TrainConfig(model=model, micro_batch_size=max(1, p.batch // p.num_workers), grad_accum=1, max_steps=steps,
                       lr=p.lr, weight_decay=p.weight_decay, schedule="cosine", warmup_steps=min(p.warmup_steps, steps - 1),
                       zero_stage=2, num_workers=p.num_workers, seed=seed, max_failures=1,
                       log_every=max(1, steps // 20), **worker_resources(p))


@resumable
def prm_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, box: list) -> dict[str, Any]:
    """One PRM: DPO from ``prm_init`` on the pairs (``shuffled``: the label-shuffled control),
    through the shared Ray Train loop; ``model`` is the location (a path or a URI) of its final
    Hugging Face folder. ``box`` holds the object refs of the pairs, the reference
    log-probabilities, the swap mask and the tokenizer files (stored once for every trial)."""
    from ...llm.train import checkpoints, fit_recipe, read_steps
    from .prm import DPORecipe, RewardModelRecipe, swap_labels

    spec = config["spec"]
    pairs_ref, ref_ref, swaps_ref, files, source = box
    pairs, ref = ray.get(pairs_ref), ray.get(ref_ref)
    if spec["kind"] == "shuffled":
        pairs, ref = swap_labels(pairs, ref, ray.get(swaps_ref))
    t0 = time.perf_counter()
    if spec["kind"] == "rm":  # ARGS's sequence reward model: Bradley-Terry on the same pairs
        recipe = RewardModelRecipe(ray.put(pairs), files, trainable_layers=cfg.prm.trainable_layers)
    else:
        recipe = DPORecipe(ray.put(pairs), files, beta=cfg.prm.beta, ref_logps=ray.put(np.ascontiguousarray(ref)),
                           trainable_layers=cfg.prm.trainable_layers)
    tcfg = train_config(cfg, source, spec["seed"], len(pairs))
    result = fit_recipe(tcfg, recipe, trial_dir, "train")
    last = checkpoints(result)[-1][1]
    # the finished PRM is read as a Hugging Face model only; DeepSpeed's optimizer state (4x the
    # model) was there to resume training, which the trial's final record now replaces
    storage.delete(storage.join(last, "deepspeed"))
    model = storage.join(last, "model")
    curve = [{"step": s["step"], "loss": s["loss"]} for s in read_steps(trial_dir, "train")]
    out = {"scores": {"loss": result.metrics["loss"]}, "model": model, "curve": curve, "steps": tcfg.max_steps,
           "seconds": time.perf_counter() - t0}
    if spec["kind"] == "rm":  # how often it ranks a training pair's chosen reply first
        from ...llm.recipe import load_tokenizer
        from .prm import reward_accuracy

        tok = load_tokenizer(files)
        out["accuracy"] = reward_accuracy(load_reward_model(model), pairs,
                                          tok.pad_token_id if tok.pad_token_id is not None else 0)
    return out


# ----------------------------------------------------------------------------- the run


def build_pairs(cfg: Config, ctx: RunContext, source: str) -> list[pdata.TextPair]:
    if "pairs" in ctx.inputs:
        return ctx.inputs["pairs"]
    d = cfg.data
    queries = ctx.inputs["train_queries"]
    chunks = [queries[i::2] for i in range(2)]
    ctx.say("sampling: %d training queries x %d samples of %d tokens ...", len(queries), d.samples_per_query,
            d.sample_tokens)
    task = ray.remote(sample_task).options(**task_options(cfg, stage="pad: sampling"))
    refs = [task.remote(source, c, d.samples_per_query, d.sample_tokens, d.sample_temperature, d.sample_top_p,
                        cfg.seed + i) for i, c in enumerate(chunks) if c]
    got = ctx.wait_all(refs, "sample chunks")
    samples = [(q, s) for c, g in zip(chunks, got) for q, s in zip(c, g)]
    return pdata.build_pairs(samples, cfg.decode.preferences, d.min_gap)


def train_prms(cfg: Config, ctx: RunContext, source: str) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """Pairs, their reference log-probabilities and the PRMs (with their shuffled controls):
    (the pairs' summary, each PRM's training record, each PRM as {label, seed, kind, model})."""
    from ...llm.recipe import load_tokenizer
    from .evaluate import text_pair

    prm_init = source if cfg.models.prm_init in (None, cfg.models.base) else cfg.models.prm_init
    files = tokenizer_files(prm_init)
    tok = load_tokenizer(files)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0

    # 1. preference pairs
    text_pairs = build_pairs(cfg, ctx, source)
    if not text_pairs:
        raise ConfigError("no preference pairs: every sample tied under every rule (raise data.samples_per_query "
                          "or data.sample_tokens, or lower data.min_gap)")
    counts = {name: sum(p.preference == name for p in text_pairs) for name in sorted({p.preference for p in text_pairs})}
    ctx.log(stage="pairs", n=len(text_pairs), **counts)
    ctx.say("pairs: %d (%s)", len(text_pairs), ", ".join(f"{k} {v}" for k, v in counts.items()))
    pairs = [text_pair(tok, p.query, cfg.preference_text(p.preference), p.chosen, p.rejected) for p in text_pairs]

    # 2. the reference's log-probabilities, once for every PRM
    chunks = [pairs[i::2] for i in range(2)]
    task = ray.remote(reference_task).options(**task_options(cfg, stage="pad: reference log-probabilities"))
    got = ctx.wait_all([task.remote(prm_init, c, pad_id) for c in chunks if c], "reference log-probs")
    ref = np.zeros((len(pairs), 2))
    for i, g in enumerate(got):
        ref[i::2] = g
    swaps = pdata.label_swaps(len(pairs), cfg.seed + 7)

    # 3. the PRMs (and their label-shuffled controls)
    seeds = list(range(cfg.seed, cfg.seed + cfg.prm.seeds))
    kinds = ["real", "shuffled"] if cfg.prm.shuffled_control else ["real"]
    if cfg.decode.args:
        kinds.append("rm")
    specs = [{"label": f"seed{s}-{k}", "seed": s, "kind": k} for s in seeds for k in kinds]
    ctx.say("PRM training: %d runs (PRMs%s%s) of %d steps from %s ...", len(specs),
            ", label-shuffled controls" if cfg.prm.shuffled_control else "",
            ", ARGS's reward models" if cfg.decode.args else "",
            train_config(cfg, prm_init, 0, len(pairs)).max_steps, prm_init)
    box = [ray.put(pairs), ray.put(ref), ray.put(swaps), files, prm_init]
    trials = run_grid(prm_trial, specs, storage=ctx.run_dir.storage("tune"), name="prm",
                      max_concurrent_trials=cfg.max_concurrent_trials, cfg=cfg, box=box)
    training = [{**{k: t.spec[k] for k in ("label", "seed", "kind")}, "curve": t.final["curve"],
                 "steps": t.final["steps"], "seconds": t.final["seconds"], "model": t.final["model"],
                 **({"accuracy": t.final["accuracy"]} if "accuracy" in t.final else {})} for t in trials]
    for t in training:
        ctx.log(kind="prm", label=t["label"], loss=t["curve"][-1]["loss"] if t["curve"] else None)
    summary = {"n": len(pairs), "by_preference": counts, "examples": [vars(p) for p in text_pairs[:6]]}
    prms = [{k: t[k] for k in ("label", "seed", "kind", "model")} for t in training]
    return summary, training, prms


def reward_model_jobs(base: dict[str, Any], per_prm: list[dict[str, Any]], names: list[str],
                      rms: dict[str, str]) -> dict[str, list[list[str]]]:
    """For each preference part with a reward model: per query, every distinct reply any decoder
    gave to a preference that contains it."""
    out: dict[str, list[set[str]]] = {}
    for part in rms:
        per_query = [set() for _ in base["base"]["texts"]]
        lists = [base["base"]["texts"]]
        for name in names:
            if part not in name.split("+"):
                continue
            lists.append(base["prompting"][name]["texts"])
            for r in per_prm:
                for key in ("pad", "pad_variant", "prm_direct", "gated", "pad_single", "bon"):
                    if name in r.get(key, {}):
                        lists.append(r[key][name]["texts"])
        for texts in lists:
            for i, t in enumerate(texts):
                per_query[i].add(t)
        out[part] = per_query
    return {part: [sorted(s) for s in q] for part, q in out.items()}


def reward_model_task(source: str, queries: list[str], replies: list[list[str]]) -> dict[str, dict[str, float]]:
    """A reward model's score of every (query, reply): {query index: {reply: score}}."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ...llm.model import inference_device  # looked up at call time: the device check replaces it
    from .evaluate import reward_model_scores

    torch.set_num_threads(1)
    source = storage.readable(source)  # a reward model in object storage: copied once to this node
    tok = AutoTokenizer.from_pretrained(source)
    model = AutoModelForSequenceClassification.from_pretrained(source).to(inference_device()).eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return {str(i): dict(zip(rs, reward_model_scores(model, tok, q, rs))) for i, (q, rs) in enumerate(zip(queries, replies))}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    root = ctx.run_dir.storage()
    queries = ctx.inputs["eval_queries"]
    texts = list(ctx.inputs.get("train_queries", [])) + queries + [p.text for p in pdata.SINGLES.values()]
    source = base_source(cfg, root, texts)
    if cfg.models.prm is not None:
        ctx.say("PRM: %s as given (no training)", cfg.models.prm)
        summary, training = {"n": 0, "by_preference": {}, "examples": []}, []
        prms = [{"label": "given", "seed": cfg.seed, "kind": "real", "model": cfg.models.prm}]
    else:
        summary, training, prms = train_prms(cfg, ctx, source)
    rm_of = {p["seed"]: p["model"] for p in prms if p["kind"] == "rm"}  # ARGS's reward model per seed
    prms = [p for p in prms if p["kind"] != "rm"]

    # 4. decoding
    names = [*cfg.decode.preferences, *cfg.decode.unseen]
    prefs = {name: cfg.preference_text(name) for name in names}
    dec = cfg.decode.model_dump()
    opts = task_options(cfg, stage="pad: decoding")
    trained = {name: prefs[name] for name in cfg.decode.preferences}
    dev_queries = ctx.inputs.get("dev_queries") or queries
    first = next(i for i, p in enumerate(prms) if p["kind"] == "real")
    # the first real PRM's weight sweep on the dev queries; w chosen there when not fixed
    sweep_ref = ray.remote(sweep_task).options(**opts).remote(source, prms[first]["model"], dev_queries, trained, dec,
                                                              rm_of.get(prms[first]["seed"]))
    how = args_how = "fixed"
    if cfg.decode.w is None or (rm_of and cfg.decode.args_w is None):
        ctx.say("weight sweep on %d dev queries: w in %s (PAD%s) ...", len(dev_queries), cfg.decode.w_grid,
                " and ARGS" if rm_of else "")
        from .analysis import rule_scores

        dev = ctx.wait_all([sweep_ref], "weight sweep")[0]
        if cfg.decode.w is None:
            dec["w"], how = choose_w(dev["sweep"], cfg.decode.w_grid, rule_scores), "dev"
            ctx.say("w = %g (PAD's best mean alignment on the dev queries)", dec["w"])
        if rm_of and cfg.decode.args_w is None:
            dec["args_w"], args_how = choose_w(dev["args_sweep"], cfg.decode.w_grid, rule_scores), "dev"
            ctx.say("ARGS's w = %g (its best mean alignment on the dev queries)", dec["args_w"])
    base_ref, cands_ref = ray.remote(base_task).options(num_returns=2, **opts).remote(source, queries, prefs, dec)
    # the real PRMs: every preference, Best-of-N, the timed decoders on the trained preferences; the
    # shuffled controls: PAD on the trained preferences (all their claim reads)
    prm_remote = ray.remote(prm_task).options(**opts)
    prm_refs = [prm_remote.remote(source, p["model"], queries, prefs, dec, cands_ref, list(trained),
                                  rm_of.get(p["seed"]))
                if p["kind"] == "real" else prm_remote.remote(source, p["model"], queries, trained, dec, None, [])
                for p in prms]
    ctx.say("decoding: %d held-out queries x %d preferences, base + %d PRMs at w = %g ...", len(queries),
            len(prefs), len(prm_refs), dec["w"])
    got = ctx.wait_all([base_ref, *prm_refs, sweep_ref], "decoding tasks")
    base, per_prm, dev = got[0], got[1:-1], got[-1]
    decoded = [{**{k: p[k] for k in ("label", "seed", "kind")}, **r} for p, r in zip(prms, per_prm)]

    # 5. the reward models' scores, where a preference has one and no rule
    rms = {k: v for k, v in cfg.decode.reward_models.items() if k not in pdata.RULES}
    rm_scores: dict[str, Any] = {}
    if rms:
        jobs = reward_model_jobs(base, decoded, names, rms)
        rm_remote = ray.remote(reward_model_task).options(**opts)
        refs = {part: rm_remote.remote(rms[part], queries, jobs[part]) for part in rms}
        rm_scores = dict(zip(refs, ctx.wait_all(list(refs.values()), "reward-model scoring")))
    return {"queries": queries, "preferences": {"trained": cfg.decode.preferences, "unseen": cfg.decode.unseen,
                                                "texts": prefs},
            "pairs": summary, "seeds": sorted({p["seed"] for p in prms}), "training": training, "base": base,
            "prms": decoded, "rm_scores": rm_scores,
            "dev": {"queries": dev_queries, "on": "dev" if ctx.inputs.get("dev_queries") else "eval", **dev},
            "settings": {"k": cfg.decode.k, "w": dec["w"], "w_chosen": how, "base_reads": cfg.decode.base_reads,
                         "args_w": dec["args_w"] if rm_of else None, "args_w_chosen": args_how if rm_of else None,
                         "margin": cfg.decode.margin,
                         "w_grid": cfg.decode.w_grid, "best_of_n": cfg.decode.best_of_n,
                         "max_tokens": cfg.decode.max_tokens}}



def _bytes_per_weight(model, gpu: bool) -> int:
    """What ``load()`` holds: bfloat16 on a task's GPU; on the CPU the checkpoint's own dtype,
    float32 when it names none."""
    import torch

    return 2 if gpu or getattr(model.config, "dtype", None) in (torch.bfloat16, torch.float16) else 4


def _decoding_flops(cfg: Config, base, prm, kinds: list[str], tokens: int) -> float:
    """2 x params a token over every decode of the decoding tasks (prompt and reply tokens)."""
    dc = cfg.decode
    names = [*dc.preferences, *dc.unseen]
    dec_b, dec_pad = 2.0 * base.params * tokens, 2.0 * (base.params + prm.params) * tokens
    flops = (1 + len(names) + dc.best_of_n) * dec_b  # base, preference prompting, Best-of-N's samples
    dev = (cfg.data.dev_queries or cfg.data.eval_queries) / cfg.data.eval_queries  # the sweep's queries
    flops += dev * ((len(dc.w_grid) * len(dc.preferences) + 1) * dec_pad + dec_b)  # the sweep (+ k = 1, the base)
    dec_prm = 2.0 * prm.params * tokens
    for kind in kinds:  # real: PAD and Best-of-N's ranking per preference, the timed decoders, the other base
        # prompt's PAD, the PRM alone
        flops += (dec_b + len(names) * (1 + dc.best_of_n) * dec_pad + 3 * len(dc.preferences) * dec_pad
                  + len(dc.preferences) * dec_prm if kind == "real" else len(dc.preferences) * dec_pad)
    if dc.args and cfg.models.prm is None:  # ARGS: the reward model reads the prefix once and k candidates a step
        dec_args = 2.0 * (base.params + (1 + dc.k) * prm.params) * tokens
        flops += (kinds.count("real") + dev * len(dc.w_grid)) * len(dc.preferences) * dec_args
    return flops


def _reward_model_stage(cfg: Config):
    """One task per preference that a reward model (not a rule) scores; None when there is none."""
    from ...config import ConfigError
    from ...plan import Tasks, lm
    from .data import RULES

    rms = {k: v for k, v in cfg.decode.reward_models.items() if k not in RULES}
    if not rms:
        return None
    sized, missing = [], []
    for src in rms.values():
        try:
            sized.append(lm(src))
        except ConfigError:
            missing.append(src)
    return Tasks("reward-model scoring", cfg, len(rms), float(max((m.params * 4 for m in sized), default=0)),
                 model=max(sized, key=lambda m: m.params) if sized else None,
                 note=f"one a preference: {', '.join(rms.values())}; each loaded in fp32 on the task's device, "
                      f"one reply a forward pass; memory: the largest's fp32 weights; not counted "
                      f"(config not shipped): {', '.join(missing) or 'none'}")


def plan(cfg: Config) -> list:
    """Sampling and reference log-probabilities (Ray tasks) and the PRM trials (Ray Train, DPO) when
    no PRM is given; then decoding (base, one task per PRM, the weight sweep) and the reward models.
    Every task loads its models with load_for_inference: on the task's GPU when it has one."""
    from ...config import ConfigError
    from ...llm.model import decoder_blocks
    from ...plan import Tasks, Train, lm

    d, p, dc = cfg.data, cfg.prm, cfg.decode
    base = lm(cfg.models.base)
    names = [*dc.preferences, *dc.unseen]
    # prompt tokens: ~32 of chat template, the preference's text and the query at ~3 characters a token
    # (the generated queries as prepare() draws them; 300 characters for a prompts file, not read here)
    gen = d.prompts_jsonl is None and not d.require_real
    query = max(map(len, pdata.queries(d.train_queries, False, cfg.seed) + pdata.queries(d.eval_queries, True, cfg.seed))) \
        if gen else 300
    prompt = 32 + (max(len(cfg.preference_text(n)) for n in names) + 2 + query) // 3
    kv = lambda m: 2 * m.config.num_hidden_layers * getattr(m.config, "num_key_value_heads", 1) * (  # noqa: E731
        getattr(m.config, "head_dim", None) or m.config.hidden_size // m.config.num_attention_heads)
    # weights and a batch's key/value cache in the checkpoint's dtype, and the prefill's logits (every
    # prompt position: the decoder keeps no fewer)
    held = lambda m, rows, toks, prompt=0: (m.params + rows * toks * kv(m)  # noqa: E731
                                            + rows * prompt * m.config.vocab_size) * _bytes_per_weight(m, gpu)
    gpu = bool(cfg.gpus_per_task)
    stages, note = [], ("models on the task's GPU in bfloat16" if gpu else
                        "models on the CPU in their checkpoint's dtype")
    if cfg.models.prm is None:
        init = base if cfg.models.prm_init in (None, cfg.models.base) else lm(cfg.models.prm_init)
        n_pairs = d.train_queries * len(dc.preferences)  # at most one pair per query and preference
        seq = prompt + d.sample_tokens
        if d.pairs_jsonl is None:
            stages.append(Tasks("sampling", cfg, min(2, d.train_queries), held(base, 32, seq), model=base,
                                flops=2.0 * base.params * d.train_queries * d.samples_per_query * seq,
                                note=f"{d.train_queries} queries x {d.samples_per_query} samples of {d.sample_tokens} "
                                     f"tokens in 2 chunks, 32 a batch; {note}"))
        v = init.config.vocab_size
        stages.append(Tasks("reference log-probs", cfg, 2, held(init, 32, seq) + 32 * seq * v * 8, model=init,
                            flops=2.0 * init.params * 2 * n_pairs * seq,
                            note=f"up to {n_pairs} pairs x 2 responses of ~{seq} tokens, 32 rows a forward pass "
                                 f"(+ their fp32 logits and log-softmax); {note}"))
        top = p.trainable_layers
        train = lm(init.name, trainable=(lambda net: sum(q.numel() for b in decoder_blocks(net)[-top:]
                                                         for q in b.parameters())) if top else None)
        kinds = [k for _ in range(p.seeds) for k in (["real", "shuffled"] if p.shuffled_control else ["real"])]
        rms = p.seeds if dc.args else 0  # ARGS's reward models: one Train run per seed, the same pairs and steps
        stages.append(Train("prm", p, p.num_workers, len(kinds) + rms, train,
                            train_config(cfg, init.name, 0, n_pairs).max_steps,
                            2 * p.batch, 2 * max(1, p.batch // p.num_workers), seq, zero_stage=2,
                            concurrent=cfg.max_concurrent_trials, epochs=p.epochs,
                            note=f"DPO: a pair is 2 rows (chosen, rejected); {n_pairs} pairs at most "
                                 f"(train_queries x preferences; the sampled pairs decide), ~{seq} tokens a row"
                                 + (f"; {rms} of the runs ARGS's reward models (Bradley-Terry, the same rows)"
                                    if rms else "")))
        prm = init
    else:
        try:
            prm = lm(cfg.models.prm)
        except ConfigError:  # its config is not shipped: PAD needs the base's vocabulary, so its shape stands in
            prm = base
        kinds = ["real"]
    rows, toks = d.eval_queries, prompt + dc.max_tokens
    stages.append(Tasks("decoding", cfg, 2 + len(kinds), float(held(base, rows, toks, prompt) + held(prm, rows, toks, prompt)),
                        model=base, flops=_decoding_flops(cfg, base, prm, kinds, rows * toks),
                        note=f"base + {len(kinds)} PRM task(s) (ARGS beside PAD where it runs) + the weight sweep; {rows} queries x {len(names)} "
                             f"preferences, {dc.max_tokens} tokens after ~{prompt} of prompt; memory: base and PRM "
                             f"({cfg.models.prm or 'trained here'}, counted as {prm.params / 1e9:.2f} B"
                             f"{': its config is not shipped, the base shape stands in' if cfg.models.prm and prm is base else ''}) "
                             f"with their key/value caches and prefill logits; {note}; FLOPs: 2 x params a token"))
    rm = _reward_model_stage(cfg)
    return stages + ([rm] if rm is not None else [])
