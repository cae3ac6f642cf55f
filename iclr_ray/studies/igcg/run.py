"""igcg on Ray: one Ray task per optimisation (target x method x seed), all submitted at once and
run in parallel; the easy-to-hard runs take the easy target's I-GCG result as an argument, so Ray
starts each as soon as the suffix it starts from exists. ``iclr-ray sweep igcg`` is a Ray Tune
sweep over the optimiser's settings, each trial a set of those tasks.

Each task loads its model from the local cache (a packaged model is converted once, in
``prepare``; a named tiny model is built once into the run's storage, a path or a URI) and returns
its per-step log and final suffix; the run writes both as artefacts (``artefacts/suffixes.jsonl``,
``artefacts/steps.jsonl``) beside the report."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import ray

from ... import storage
from ...config import ConfigError
from ...resources import task_options
from ...runtime import RunContext
from .config import TINY, Config, Target
from .data import all_texts, read_targets

ARTEFACTS = "artefacts"
RUNS = "runs"
"""each finished optimisation's result, saved as it arrives: a rerun into the same --out resumes"""


@dataclass
class Inputs:
    targets: list[Target]
    label: str
    """the model, in words"""


def prepare(cfg: Config) -> Inputs:
    """The targets (the config's, or the user's file), the model installed (a packaged one converted
    once, here) and every prompt renderable with a suffix of ``attack.suffix_len`` tokens."""
    if cfg.require_file and not cfg.targets_file:
        raise ConfigError("require_file: this preset reads the behaviours from your own file; set "
                          "targets_file=PATH (CSV with columns goal,target, or JSONL of {\"message\", \"target\"})")
    targets = read_targets(cfg.targets_file, cfg.max_targets) if cfg.targets_file else list(cfg.targets)
    if cfg.easy >= len(targets):
        raise ConfigError(f"easy={cfg.easy} but there are {len(targets)} targets")
    from . import gcg

    if cfg.model == TINY:
        from ...llm.model import build_tokenizer

        tok, label = build_tokenizer(all_texts(targets)), "random tiny Llama (smoke: no pretrained weights)"
    else:
        from ...llm import pretrained

        pretrained.check_available(cfg.model)
        tok = pretrained.load_tokenizer(cfg.model)
        label = pretrained.PACKAGED[cfg.model].note if cfg.model in pretrained.PACKAGED else cfg.model
    try:
        gcg.init_suffix(tok, cfg.attack.suffix_len, cfg.attack.init)
        for t in targets:
            gcg.layout(tok, t.message, t.target, cfg.system)
    except ValueError as exc:
        raise ConfigError(f"model {cfg.model}: {exc}") from None
    allowed = int(gcg.allowed_tokens(tok, len(tok)).sum())
    if cfg.attack.top_k > allowed:
        raise ConfigError(f"attack.top_k={cfg.attack.top_k}: model {cfg.model} has {allowed} tokens a suffix may hold")
    return Inputs(targets, label)


# -- inside the Ray tasks ---------------------------------------------------------------------------

def _settings(attack: dict[str, Any], K: int, guided: bool):
    from .gcg import Settings

    return Settings(K=K, top_k=attack["top_k"], batch=attack["batch"], guided=guided, steps=attack["steps"],
                    criterion=attack["criterion"], threshold=attack["threshold"])


def verify(model, tok, lay_text: tuple[str, str], suffix: str, target: str) -> tuple[bool, str]:
    """Whether greedy ``generate()`` with ``model`` (the run's float32 copy), on the whole prompt
    tokenised as one string (the suffix pasted as text), starts its answer with the target; and the
    answer."""
    import torch

    before, after = lay_text
    ids = tok(before + suffix + after, add_special_tokens=False, return_tensors="pt").input_ids.to(model.device)
    n = len(tok(target, add_special_tokens=False).input_ids)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n + 2, do_sample=False,
                             pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return answer.strip().startswith(target.strip()), answer


def optimise_task(source: str, spec: dict[str, Any], target: dict[str, str], attack: dict[str, Any],
                  system: str | None, dtype: str, start: dict[str, Any] | None, check: bool) -> dict[str, Any]:
    """One optimisation: the spec's method on one target from ``start``'s suffix (an earlier run's
    result: easy-to-hard) or the default ``! ! ...``; its per-step log and final suffix."""
    import torch

    from ...llm.model import load_for_inference
    from . import gcg

    model, tok = load_for_inference(source)  # on the task's GPU when it has one
    # the text check's model: float32, a copy of its own when the optimisation runs in another dtype
    checker = None
    if check:
        checker = model.float() if dtype == "float32" else load_for_inference(source)[0].float()
    model = model.to(getattr(torch, dtype))
    lay = gcg.layout(tok, target["message"], target["target"], system)
    obj = gcg.Objective(model, lay, chunk=attack["chunk"])
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    init = start["suffix_ids"] if start is not None else gcg.init_suffix(tok, attack["suffix_len"], attack["init"])

    def as_text(ids: list[int]) -> bool:
        return verify(checker, tok, lay.text, tok.decode(ids), target["target"])[0]

    trace = gcg.optimise(obj, tok, init, _settings(attack, spec["K"], spec["method"] != "random"), allowed,
                         seed=spec["seed"], verify=as_text if check else None)
    suffix = tok.decode(trace.suffix)
    out = {**spec, "success_step": trace.success_step, "token_success_step": trace.token_success_step,
           "failed_checks": trace.failed_checks, "suffix_ids": trace.suffix, "suffix": suffix,
           "target_tokens": len(lay.target), "init_suffix": tok.decode(init),
           **{k: [getattr(s, k) for s in trace.steps]
              for k in ("loss", "exact", "changed", "candidates", "seconds", "cpu_seconds")}}
    if check:
        out["generates"], out["answer"] = verify(checker, tok, lay.text, suffix, target["target"])
    return out


# -- the run ----------------------------------------------------------------------------------------

def method_of(K: int) -> str:
    return "gcg" if K == 1 else "igcg"


def label(spec: dict[str, Any]) -> str:
    init = "+easy" if spec["init"] == "easy" else ""
    return f"t{spec['target']}/{spec['method']}{spec['K']}{init}/s{spec['seed']}"


def run_ks(cfg: Config) -> list[int]:
    """The K values run on every target: ``ks``, and attack.K which the control and easy-to-hard
    are compared with."""
    extra = {cfg.attack.K} if cfg.control or cfg.easy_to_hard else set()
    return sorted(set(cfg.ks) | extra)


def grid(cfg: Config, n_targets: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the specs from the default start, the easy-to-hard specs)."""
    spec = lambda t, m, K, s, init="default": {"target": t, "method": m, "K": K, "seed": s, "init": init}  # noqa: E731
    main = [spec(t, method_of(K), K, s) for s in cfg.seeds for t in range(n_targets) for K in run_ks(cfg)]
    if cfg.control:
        main += [spec(t, "random", cfg.attack.K, s) for s in cfg.seeds for t in range(n_targets)]
    e2h = [spec(t, method_of(cfg.attack.K), cfg.attack.K, s, "easy") for s in cfg.seeds for t in range(n_targets)
           if t != cfg.easy] if cfg.easy_to_hard else []
    return main, e2h


def _source(cfg: Config, root: str, targets: list[Target]) -> str:
    """The model every task loads: ``cfg.model`` as given, or the tiny model built once into
    ``root/base_model`` (``root``: the run's storage, a path or a URI)."""
    from ...llm.model import materialise

    return materialise("tiny-llama" if cfg.model == TINY else cfg.model, root, all_texts(targets), seed=cfg.seed)


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    inputs: Inputs = ctx.inputs
    targets = inputs.targets
    source = _source(cfg, ctx.run_dir.storage(), targets)
    attack = cfg.attack.model_dump()
    main, e2h = grid(cfg, len(targets))
    ctx.say("%d optimisations on %d targets (%s), %d from the easy target's suffix; budget %d steps",
            len(main) + len(e2h), len(targets), inputs.label, len(e2h), cfg.attack.steps)
    task = ray.remote(optimise_task).options(**task_options(cfg, stage="igcg: optimisation"))
    tdicts = [t.model_dump() for t in targets]
    store = ctx.run_dir.storage(RUNS)
    done = saved_runs(store)
    if done:
        ctx.say("%d optimisations already finished in %s: resuming", len(done), store)

    def submit(s: dict[str, Any], start) -> None:
        if label(s) not in done:
            refs[label(s)] = task.remote(source, s, tdicts[s["target"]], attack, cfg.system, cfg.dtype, start,
                                         cfg.verify)

    refs: dict[str, Any] = {}
    for s in main:
        submit(s, None)
    for s in e2h:  # an unfinished source waits in Ray (not here) for the easy target's run
        easy = label({**s, "target": cfg.easy, "init": "default"})
        submit(s, done.get(easy) or refs[easy])
    t0 = time.perf_counter()
    bar = ctx.progress(len(refs), "optimisations")
    pending = {ref: name for name, ref in refs.items()}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            r = ray.get(ref)
            done[pending.pop(ref)] = r
            save_run(store, r)
            ctx.log(kind="run", label=label(r), success_step=r["success_step"], final_loss=r["loss"][-1],
                    seconds=r["seconds"][-1], cpu_seconds=r["cpu_seconds"][-1], generates=r.get("generates"),
                    failed_checks=r.get("failed_checks"))
            bar.update()
    runs = [done[label(s)] for s in main + e2h]
    write_artefacts(ctx.run_dir.storage(ARTEFACTS), runs, targets)
    return {"model": inputs.label, "targets": [t.model_dump() for t in targets], "easy": cfg.easy,
            "ks": run_ks(cfg), "compared_ks": sorted(cfg.ks), "K": cfg.attack.K, "budget": cfg.attack.steps,
            "criterion": cfg.attack.criterion, "runs": runs, "wall_seconds": time.perf_counter() - t0}


def _file(name: str) -> str:
    return name.replace("/", "_").replace("+", "-") + ".json"


def save_run(store: str, r: dict[str, Any]) -> None:
    """One finished optimisation's result, written whole into the folder ``store`` (a location)."""
    storage.write_text(storage.join(store, _file(label(r))), json.dumps(r))


def saved_runs(store: str) -> dict[str, dict[str, Any]]:
    """{label: result} of the optimisations an earlier attempt of this run finished (in the
    folder ``store``, a path or a URI)."""
    out = {}
    for name in storage.list_files(store):
        if "/" not in name and name.endswith(".json") and not name.startswith("."):
            r = json.loads(storage.read_text(storage.join(store, name)))
            out[label(r)] = r
    return out


def write_artefacts(folder: str, runs: list[dict[str, Any]], targets: list[Target]) -> None:
    """The optimised suffixes (one JSON line per run) and every run's per-step log, written
    atomically into ``folder`` (a path or a URI): what a defence benchmark reads."""
    keys = ("target", "method", "K", "seed", "init", "success_step", "token_success_step", "failed_checks", "suffix",
            "suffix_ids", "generates", "answer")
    suffixes = [{**{k: r.get(k) for k in keys}, "message": targets[r["target"]].message,
                 "target_text": targets[r["target"]].target, "final_loss": r["loss"][-1]} for r in runs]
    steps = [{"run": label(r), "step": i, **{k: r[k][i] for k in ("loss", "exact", "changed", "candidates", "seconds",
                                                                  "cpu_seconds") if k in r}}
             for r in runs for i in range(len(r["loss"]))]
    storage.write_text(storage.join(folder, "suffixes.jsonl"), "".join(json.dumps(x) + "\n" for x in suffixes))
    storage.write_text(storage.join(folder, "steps.jsonl"), "".join(json.dumps(x) + "\n" for x in steps))


# -- iclr-ray sweep igcg ----------------------------------------------------------------------------

SWEEP_SCORES = ("success_rate", "steps", "seconds")
"""what each sweep trial reports (a space's metric is one of them)"""

def sweep_trial(config: dict[str, Any], *, cfg: Config, source: str, targets: list[dict[str, str]]) -> None:
    """One Tune trial: the space's ``attack.*`` values, I-GCG (GCG at K = 1) on every target and
    seed as Ray tasks; reports the success rate and the mean steps and seconds to success (a run
    that does not succeed counts its whole budget)."""
    from ray import tune
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from .config import Attack

    attack = Attack.model_validate({**cfg.attack.model_dump(),
                                    **{k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("attack.")}})
    a = attack.model_dump()
    # outside the trial's placement group (a sliver of CPU): the tasks take their own CPUs
    task = ray.remote(optimise_task).options(**task_options(cfg, stage="igcg: optimisation"),
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(None))
    specs = [{"target": t, "method": method_of(attack.K), "K": attack.K, "seed": s, "init": "default"}
             for s in cfg.seeds for t in range(len(targets))]
    runs = ray.get([task.remote(source, s, targets[s["target"]], a, cfg.system, cfg.dtype, None, False)
                    for s in specs])
    from .analysis import seconds_to_success, steps_to_success

    tune.report({"success_rate": sum(r["success_step"] is not None for r in runs) / len(runs),
                 "steps": sum(steps_to_success(r, a["steps"]) for r in runs) / len(runs),
                 "seconds": sum(seconds_to_success(r) for r in runs) / len(runs)})


def sweep(cfg: Config, space, ctx: RunContext, scheduler: str, resume: bool) -> dict[str, Any]:
    """``iclr-ray sweep igcg --space FILE``: each trial the space's optimiser settings on every
    target and seed; ranked by the space's metric (``steps``, ``seconds`` or ``success_rate``)."""
    from ray import tune

    from ...sweep.tuner import run_tuner, summarise

    if space.metric not in SWEEP_SCORES:
        raise ConfigError(f"an igcg sweep ranks by one of {', '.join(SWEEP_SCORES)}, not {space.metric!r}")
    inputs: Inputs = ctx.inputs
    source = _source(cfg, ctx.run_dir.storage(), inputs.targets)
    trainable = tune.with_parameters(sweep_trial, cfg=cfg, source=source,
                                     targets=[t.model_dump() for t in inputs.targets])
    results = run_tuner(trainable, space.tune_param_space(), storage_path=ctx.run_dir.storage("tune"), name="sweep",
                        max_concurrent_trials=space.max_concurrent_trials, num_samples=space.num_samples,
                        resume=resume)
    return summarise(results, space, list(SWEEP_SCORES))


def plan(cfg: Config) -> list:
    """One Ray task per optimisation (grid(): target x K x seed, the random control, easy-to-hard),
    all submitted at once; each holds the model in cfg.dtype and scores attack.chunk candidates a
    forward pass against a key/value cache of the prompt, then (verify) re-checks in float32."""
    from ...plan import Tasks, lm

    model = lm("tiny-llama" if cfg.model == TINY else cfg.model)
    c, a = model.config, cfg.attack
    n_targets = cfg.max_targets or len(cfg.targets)
    main, e2h = grid(cfg, n_targets)
    from_file = bool(cfg.targets_file or cfg.require_file)
    # prompt lengths: the behaviour file is not read here, so an AdvBench-like request (16 tokens) and
    # target (24); the config's own targets at about 3 characters a token; 8 tokens of template
    msg = 16 if from_file else max(len(t.message) // 3 + 1 for t in cfg.targets)
    tgt = 24 if from_file else max(len(t.target) // 3 + 1 for t in cfg.targets)
    new = a.suffix_len + 2 + tgt  # suffix, the template after it, the target: run on the prompt's cache
    seq = 8 + msg + new
    width = 4 if cfg.dtype == "float32" else 2
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = a.chunk * seq * 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * width
    logits = a.chunk * (tgt + 1) * c.vocab_size * (width + 8)  # as computed, widened to fp32, log-softmax
    mlp = a.chunk * new * c.intermediate_size * width * 3
    scoring = model.params * width + kv + logits + mlp
    # the text check's float32 copy is held beside the optimised model (the same one in float32)
    verify = model.params * 4 if cfg.verify and cfg.dtype != "float32" else 0
    per_step = 2 * model.params * new * (a.batch + max(a.K - 1, 0))  # candidates (+ merged) scored
    flops = sum(a.steps * (per_step + (6 * model.params * new if s["method"] != "random" else 0))
                for s in main + e2h)
    where = f"targets_file's rows (not read here; planned for {n_targets}: max_targets or the config's targets)" \
        if from_file else f"{n_targets} targets"
    return [Tasks("optimisation", cfg, len(main) + len(e2h), float(scoring + verify), model=model,
                  flops=float(flops),
                  note=f"{len(main)} from the default suffix + {len(e2h)} easy-to-hard, over {where}; each target "
                       f"adds {(len(main) + len(e2h)) / n_targets:.1f} tasks. Memory: the larger of scoring "
                       f"(weights in {cfg.dtype} {model.params * width / 2**30:.1f} GiB, the key/value cache of "
                       f"{a.chunk} candidates x ~{seq} tokens {kv / 2**30:.1f} GiB, target logits in {cfg.dtype} "
                       f"and fp32 {logits / 2**30:.1f} GiB, one MLP's activations {mlp / 2**30:.1f} GiB; prompt "
                       f"~{msg} request + {a.suffix_len} suffix + {tgt} target tokens, rough) plus the text check's "
                       f"float32 copy, held beside it ({verify / 2**30:.1f} GiB). FLOPs: an upper bound, every run to its "
                       f"{a.steps} steps (a run stops at success): 2 x params x {new} tokens per candidate, "
                       f"{a.batch} (+ K - 1 merged) a step, + the gradient pass (3x a forward) when guided")]
