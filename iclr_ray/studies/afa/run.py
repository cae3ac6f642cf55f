"""afa on Ray: the digits split once; the evaluator (a digit classifier) trained as a Ray task; the
common base trained in one Ray Train run (the shared DeepSpeed loop); the experts fine-tuned from it
in parallel Ray Train runs (one Tune trial each: the class-specific experts and the near-identical
control pair); the weight-merging search as a Ray task; then one Tune trial per (expert set, seed),
each a Ray Train run training the SABW aggregators with the experts frozen; then Ray tasks score
every model of every seed: the held-out denoising MSE (the same (digit, t, noise) rows for all
models of a seed), and for the main expert set the generated digits (DDIM with classifier-free
guidance, the same noise for every model): the classifier's class-conditional accuracy and the
Fréchet distance in its features; and AFA's aggregation maps."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ... import storage
from ...config import ConfigError
from ...llm.recipe import Recipe, TrainConfig
from ...llm.weights import load_weights, save_weights
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as D
from .config import Config

MAIN, CONTROL = "main", "control"
AFA_FILE = "afa.safetensors"  # the aggregators in a checkpoint (llm.weights)
"""the expert sets: the class-specific experts, and the near-identical pair"""


def prepare(cfg: Config):
    """The small path trains its own pixel-space experts; published SD1.5 fine-tunes work in a VAE's
    latent space with CLIP text encoders, which this study does not build: one clear line before Ray
    starts."""
    if cfg.experts.unets:
        raise ConfigError(f"experts.unets {cfg.experts.unets[:1]}...: only tiny experts trained here run; the latent "
                          "path of SD1.5 (its VAE and CLIP text encoders) and the caption data are not built "
                          "(docs/studies/afa.md)")
    return None


def recipe_dict(cfg: Config) -> dict[str, Any]:
    return {k: getattr(cfg, k).model_dump() for k in ("data", "experts", "aggregator", "merge", "eval")}


def write_data(cfg: Config, ctx: RunContext) -> dict[str, str]:
    """The three splits saved once in the run's storage (reused on resume); their locations."""
    paths = {s: ctx.run_dir.storage("data", f"{s}.npz") for s in D.SPLITS}
    if not all(storage.is_file(p) for p in paths.values()):
        parts = D.split(cfg.data.side, cfg.data.test, cfg.data.val, cfg.data.seed)
        for s, p in paths.items():
            D.save(parts[s], p)  # each written whole
    return paths


# --------------------------------------------------------------------------------------- models

def build_expert(c: dict[str, Any], seed: int):
    """A class-conditional tiny U-Net and its caption-token embedding (seeded)."""
    import torch

    from ...diffusion.model import Denoiser, tiny_unet

    e = c["experts"]
    torch.manual_seed(seed)
    unet = tiny_unet(c["data"]["side"], e["channels"], e["attention_levels"], e["context_dim"], in_channels=1,
                     head_dim=e["head_dim"], groups=e["groups_norm"])
    return Denoiser(unet, None, vocab=D.CLASSES + 1)


def save_expert(expert, folder: str | Path) -> None:
    """The U-Net and its token embedding (``diffusion.model.save_denoiser``) at a folder or a URI."""
    from ...diffusion.model import save_denoiser

    save_denoiser(expert, folder)


def load_expert(folder: str):
    """An expert saved by :func:`save_expert` (a folder, or a URI copied once to this node)."""
    from ...diffusion.model import load_denoiser

    return load_denoiser(folder, D.CLASSES + 1)


def build_afa(c: dict[str, Any], experts: list, seed: int):
    import torch

    from .afa import AFA

    a = c["aggregator"]
    torch.manual_seed(seed)
    return AFA(experts, hidden=a["hidden"], temb_dim=a["temb_dim"], context_dim=c["experts"]["context_dim"],
               vocab=D.CLASSES + 1, head_dim=a["head_dim"], groups=a["groups"], out_init_std=a["out_init_std"])


def aggregator_state(model) -> dict[str, Any]:
    """What AFA trains: every parameter outside the frozen experts."""
    return {k: v for k, v in model.state_dict().items() if not k.startswith("experts.")}


def load_afa(c: dict[str, Any], experts: list[str], path: str):
    """An AFA ensemble: the experts at their locations, the aggregators from ``path`` (a path or a URI)."""
    model = build_afa(c, [load_expert(p) for p in experts], 0)
    saved = load_weights(path)
    own = aggregator_state(model)
    wrong = sorted(set(own) ^ set(saved)) + [k for k in own if k in saved and own[k].shape != saved[k].shape]
    if wrong:
        raise ValueError(f"{path} does not fit this ensemble of {len(experts)} experts (e.g. {wrong[0]})")
    model.load_state_dict(saved, strict=False)
    return model.eval()


def diffusion_batch(digits: D.Digits, rng: np.random.Generator, n: int, dropout: float) -> dict[str, Any]:
    """n random digits with their captions (a share ``dropout`` emptied), timesteps and noise."""
    return D.noised_rows(digits, rng.integers(0, len(digits), n), rng, dropout)


def split_batch(batch: dict[str, Any], b: int) -> list[tuple[dict[str, Any], int]]:
    n = len(batch["x0"])
    return [({k: v[i:i + b] for k, v in batch.items()}, min(b, n - i)) for i in range(0, n, b)]


class ExpertRecipe(Recipe):
    """An expert: eps-prediction MSE on the digits of ``classes`` (all: the base and the control
    experts), from the base's weights (``base``) or from scratch (the base itself)."""

    def __init__(self, c: dict[str, Any], train_path: str, classes: list[int], base: str | None):
        self.c, self.path, self.classes, self.base = c, train_path, list(classes), base

    def setup(self) -> None:
        import torch

        from ...diffusion.sampling import ddpm

        torch.set_num_threads(1)
        self.digits = D.load(self.path).subset(self.classes)
        self.scheduler = ddpm()

    def build_model(self, cfg: TrainConfig):
        return build_expert(self.c, cfg.seed) if self.base is None else load_expert(self.base).train()

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        rng = np.random.default_rng([cfg.seed, step])
        batch = diffusion_batch(self.digits, rng, cfg.rows_per_step(), self.c["experts"]["caption_dropout"])
        return split_batch(batch, cfg.micro_batch_size)

    def loss(self, engine, batch: dict[str, Any]):
        from .afa import ensemble_loss

        module = getattr(engine, "module", engine)
        return ensemble_loss(lambda x, t, tok: engine(x, t, module.context(tok)), self.scheduler, batch["x0"],
                             batch["tokens"], batch["t"], batch["noise"]).sum()

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["x0"])

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        if rank == 0:
            save_expert(engine.module, path / "expert")


class AFARecipe(Recipe):
    """The aggregators of one expert set: the ensembled output's eps-prediction MSE on all training
    digits, the experts frozen."""

    def __init__(self, c: dict[str, Any], train_path: str, experts: list[str]):
        self.c, self.path, self.experts = c, train_path, list(experts)

    def setup(self) -> None:
        import torch

        from ...diffusion.sampling import ddpm

        torch.set_num_threads(1)
        self.digits = D.load(self.path)
        self.scheduler = ddpm()

    def build_model(self, cfg: TrainConfig):
        return build_afa(self.c, [load_expert(p) for p in self.experts], cfg.seed).train()

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        rng = np.random.default_rng([cfg.seed, step])
        batch = diffusion_batch(self.digits, rng, cfg.rows_per_step(), self.c["aggregator"]["caption_dropout"])
        return split_batch(batch, cfg.micro_batch_size)

    def loss(self, engine, batch: dict[str, Any]):
        from .afa import ensemble_loss

        return ensemble_loss(engine, self.scheduler, batch["x0"], batch["tokens"], batch["t"], batch["noise"]).sum()

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["x0"])

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from ...llm.weights import save_engine_weights

        path.mkdir(parents=True, exist_ok=True)
        save_engine_weights(engine, str(path / AFA_FILE), rank, zero_stage, keep=lambda k: not k.startswith("experts."))


def train_config(section, name: str, steps: int, batch: int, lr: float, warmup: int, seed: int) -> TrainConfig:
    return TrainConfig(model=name, micro_batch_size=batch, grad_accum=1, max_steps=steps, lr=lr, betas=(0.9, 0.999),
                       weight_decay=0.0, schedule="constant", warmup_steps=warmup, grad_clip=1.0, zero_stage=0,
                       num_workers=1, eval_every=0, log_every=max(1, min(25, steps // 20)),
                       checkpoint_every=max(1, steps // 2), keep_checkpoints=1, max_failures=1, seed=seed,
                       **worker_resources(section))


def loss_curve(location: str | Path, name: str) -> list[list[float]]:
    from ...llm.train import read_steps

    return [[int(s["step"]), float(s["loss"])] for s in read_steps(location, name)]


@resumable
def expert_trial(config: dict[str, Any], trial_dir: Path | str, *, c: dict[str, Any], cfg: Config, base: str,
                 paths: dict[str, str]) -> dict[str, Any]:
    """One expert fine-tuned from the base on its classes."""
    from ...llm.train import checkpoint_location, fit_recipe

    spec = config["spec"]
    e = cfg.experts
    tc = train_config(e, f"afa-expert-{spec['name']}", e.steps, e.batch, e.lr, e.warmup, int(spec["seed"]))
    result = fit_recipe(tc, ExpertRecipe(c, paths["train"], spec["classes"], base), trial_dir, "expert")
    loss = loss_curve(trial_dir, "expert")
    return {"scores": {"loss": loss[-1][1] if loss else float("nan")},
            "path": storage.join(checkpoint_location(result.checkpoint), "expert"), "loss": loss}


@resumable
def afa_trial(config: dict[str, Any], trial_dir: Path | str, *, c: dict[str, Any], cfg: Config,
              paths: dict[str, str]) -> dict[str, Any]:
    """The aggregators of one expert set at one seed."""
    from ...llm.train import checkpoint_location, fit_recipe

    spec = config["spec"]
    a = cfg.aggregator
    tc = train_config(a, f"afa-{spec['label']}", a.steps, a.batch, a.lr, a.warmup, int(spec["seed"]))
    result = fit_recipe(tc, AFARecipe(c, paths["train"], spec["experts"]), trial_dir, "afa")
    loss = loss_curve(trial_dir, "afa")
    return {"scores": {"loss": loss[-1][1] if loss else float("nan")},
            "path": storage.join(checkpoint_location(result.checkpoint), AFA_FILE), "loss": loss}


# ------------------------------------------------------------------------------- Ray task bodies

def train_classifier_task(c: dict[str, Any], paths: dict[str, str], out: str, seed: int) -> dict[str, Any]:
    """The evaluator trained on the real training digits and saved at ``out`` (a path or a URI, written
    whole); its accuracy on the held-out
    real digits, the Fréchet distance between two halves of them (the floor at this size), and the
    real digits of the sample grid."""
    import torch

    from ...diffusion.fid import frechet_distance
    from ...llm.model import inference_device
    from .classify import DigitClassifier, accuracy, features, train_classifier

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    e = c["eval"]
    train, test = D.load(paths["train"]), D.load(paths["test"])
    model = DigitClassifier(c["data"]["side"], e["classifier_width"]).to(inference_device())
    losses = train_classifier(model, train.images, train.labels, steps=e["classifier_steps"], batch=64, lr=3e-3,
                              noise=e["classifier_noise"], seed=seed)
    save_weights(model.state_dict(), out)
    x = D.to_model(test.images) / 2 + 0.5
    f = features(model, x)
    half = len(f) // 2
    return {"path": out, "final_loss": float(np.mean(losses[-10:])), "accuracy_real": accuracy(model, x, test.labels),
            "fid_real_halves": frechet_distance(f[:half], f[half:]),
            "grid_real": test.images[test.first_of_each_class()].tolist()}


def load_classifier(c: dict[str, Any], path: str):
    from .classify import DigitClassifier

    model = DigitClassifier(c["data"]["side"], c["eval"]["classifier_width"])
    model.load_state_dict(load_weights(path))
    return model.eval()


def val_rows(digits: D.Digits, n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([seed, 7])
    idx = rng.permutation(len(digits))[:n] if n <= len(digits) else rng.integers(0, len(digits), n)
    return D.noised_rows(digits, idx, rng)


def merge_search_task(c: dict[str, Any], experts: list[str], paths: dict[str, str]) -> dict[str, Any]:
    """Weighted merging and block-wise merging (MBW): the merge weights with the lowest MSE on the
    validation digits (:func:`afa.search_merge`)."""
    import torch

    from ...diffusion.sampling import ddpm
    from ...llm.model import inference_device
    from .afa import block_of, ensemble_loss, merge, search_merge

    torch.set_num_threads(1)
    device = inference_device()
    models = [load_expert(p).to(device) for p in experts]
    states = [m.state_dict() for m in models]
    skeleton = load_expert(experts[0]).to(device)
    rows = {k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in val_rows(D.load(paths["val"]), c["merge"]["rows"], 0).items()}
    sched = ddpm()
    blocks = sorted({block_of(k) for k in states[0]})

    @torch.no_grad()
    def loss_of(weights) -> float:
        skeleton.load_state_dict(merge(states, weights))
        return float(ensemble_loss(lambda x, t, tok: skeleton(x, t, skeleton.context(tok)), sched, rows["x0"],
                                   rows["tokens"], rows["t"], rows["noise"]).mean())

    m = c["merge"]
    out = search_merge(loss_of, len(states), blocks, step=m["step"], sweeps=m["sweeps"])
    out["weighted"] = list(out["weighted"])
    out["blockwise"] = {b: list(w) for b, w in out["blockwise"].items()}
    return out


def build_method(c: dict[str, Any], method: dict[str, Any], device="cpu"):
    """eps(x_t, t, tokens) of one evaluated model on ``device``: an expert alone, the uniform output
    average, a weight merge, or an AFA ensemble (returned as the model itself: its maps can be
    recorded)."""
    from .afa import merge, output_average

    kind = method["kind"]
    if kind == "expert":
        return output_average([load_expert(method["experts"][0]).to(device)])
    if kind == "uniform":
        return output_average([load_expert(p).to(device) for p in method["experts"]])
    if kind == "merge":
        models = [load_expert(p) for p in method["experts"]]
        w = method["weights"]
        merged = load_expert(method["experts"][0])
        merged.load_state_dict(merge([m.state_dict() for m in models], w))
        return output_average([merged.to(device)])
    if kind == "afa":
        return load_afa(c, method["experts"], method["afa"]).to(device)
    raise ValueError(f"unknown method kind {kind!r}")


def evaluate(c: dict[str, Any], method: dict[str, Any], seed: int, paths: dict[str, str], classifier: str,
             generate: bool, grid: bool) -> dict[str, Any]:
    """One model at one seed (:mod:`.scoring`): the held-out denoising MSE, and AFA's maps; with
    ``generate``, its generated digits scored by the classifier (``grid``: the figure's digits, and
    AFA's maps of two held-out digits over timesteps)."""
    import torch

    from ...llm.model import inference_device
    from . import scoring
    from .afa import AFA

    torch.set_num_threads(1)
    device = inference_device()  # the task's GPU where Ray gave it one
    e = c["eval"]
    test = D.load(paths["test"])
    model = build_method(c, method, device)
    out = scoring.denoising(model, scoring.mse_rows(test, e["draws"], seed), e["batch"], device)
    if not generate:
        return out
    out.update(scoring.generated(model, load_classifier(c, classifier).to(device), test, per_class=e["per_class"],
                                 steps=e["steps"], guidance=e["guidance"], batch=e["batch"], seed=seed, grid=grid,
                                 device=device))
    if grid and isinstance(model, AFA):
        shown = test.first_of_each_class()
        shown = [shown[0], shown[-1]]  # a digit of the first expert's classes and one of the last's
        out["maps"] = scoring.afa_maps(model, D.to_model(test.images[shown]), test.labels[shown],
                                       e["map_timesteps"], seed)
    return out


# ------------------------------------------------------------------------------------------- run

def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    import ray

    from ...llm.train import checkpoint_location, fit_recipe

    c = recipe_dict(cfg)
    paths = write_data(cfg, ctx)
    e, a = cfg.experts, cfg.aggregator
    eval_opts = task_options(cfg.eval, stage="afa: evaluation")
    clf_ref = ray.remote(train_classifier_task).options(**eval_opts).remote(
        c, paths, ctx.run_dir.storage("classifier.safetensors"), cfg.seed)

    ctx.say("training the common base on all digits (%d steps of %d) ...", e.base_steps, e.batch)
    result = fit_recipe(train_config(e, "afa-base", e.base_steps, e.batch, e.lr, e.warmup, cfg.seed),
                        ExpertRecipe(c, paths["train"], list(range(D.CLASSES)), None), ctx.run_dir.storage(), "base")
    base = storage.join(checkpoint_location(result.checkpoint), "expert")
    base_loss = loss_curve(ctx.run_dir.storage(), "base")

    specs = [{"label": f"expert{i}", "name": f"expert{i}", "set": MAIN, "classes": g, "seed": cfg.seed + 1 + i}
             for i, g in enumerate(e.groups)]
    specs += [{"label": f"control{i}", "name": f"control{i}", "set": CONTROL, "classes": list(range(D.CLASSES)),
               "seed": cfg.seed + 101 + i} for i in range(e.control)]
    ctx.say("fine-tuning %d experts from the base (%d steps each, %d at a time) ...", len(specs), e.steps,
            e.max_concurrent_trials)
    trials = run_grid(expert_trial, specs, storage=ctx.run_dir.storage("tune"), name="experts",
                      max_concurrent_trials=e.max_concurrent_trials, c=c, cfg=cfg, base=base, paths=paths)
    experts = {t.spec["name"]: t.final["path"] for t in trials}
    expert_loss = {t.spec["name"]: t.final["loss"] for t in trials}
    main = [experts[f"expert{i}"] for i in range(len(e.groups))]
    control = [experts[f"control{i}"] for i in range(e.control)]
    merge_opts = task_options(cfg.merge, stage="afa: merge search")
    merge_ref = ray.remote(merge_search_task).options(**merge_opts).remote(c, main, paths)

    sets = {MAIN: main, **{f"first{k}": main[:k] for k in a.sizes}, **({CONTROL: control} if control else {})}
    seeds = [cfg.seed + s for s in range(a.seeds)]
    afa_specs = [{"label": f"{name}-seed{s}", "set": name, "experts": ex, "seed": s}
                 for s in seeds for name, ex in sets.items()]
    ctx.say("training the aggregators: %d expert sets x %d seeds (%d steps of %d) ...", len(sets), len(seeds), a.steps,
            a.batch)
    afa = run_grid(afa_trial, afa_specs, storage=ctx.run_dir.storage("tune"), name="aggregators",
                   max_concurrent_trials=a.max_concurrent_trials, c=c, cfg=cfg, paths=paths)
    clf = ray.get(clf_ref)
    merges = ray.get(merge_ref)
    ctx.log(stage="merge", **{k: v for k, v in merges.items() if k.endswith("loss")})

    methods: dict[str, tuple[dict[str, Any], bool]] = {}  # name -> (method, generate)
    for i, p in enumerate(main):
        methods[f"expert{i}"] = ({"kind": "expert", "experts": [p]}, True)
    methods["uniform"] = ({"kind": "uniform", "experts": main}, True)
    methods["weighted_merge"] = ({"kind": "merge", "experts": main, "weights": merges["weighted"]}, True)
    methods["blockwise_merge"] = ({"kind": "merge", "experts": main, "weights": merges["blockwise"]}, True)
    for k in a.sizes:
        methods[f"uniform_first{k}"] = ({"kind": "uniform", "experts": main[:k]}, False)
    for i, p in enumerate(control):
        methods[f"control{i}"] = ({"kind": "expert", "experts": [p]}, False)
    if control:
        methods["control_uniform"] = ({"kind": "uniform", "experts": control}, False)
    task = ray.remote(evaluate).options(**eval_opts)
    jobs = []
    for t in afa:
        name = "afa" if t.spec["set"] == MAIN else f"afa_{t.spec['set']}"
        spec = {"kind": "afa", "experts": t.spec["experts"], "afa": t.final["path"]}
        jobs.append(((name, t.spec["seed"]), task.remote(c, spec, t.spec["seed"], paths, clf["path"],
                                                         t.spec["set"] == MAIN, t.spec["seed"] == seeds[0])))
    for name, (spec, gen) in methods.items():
        jobs += [((name, s), task.remote(c, spec, s, paths, clf["path"], gen, s == seeds[0])) for s in seeds]
    got = ctx.wait_all([r for _, r in jobs], f"scoring {len(jobs)} (model, seed) pairs")
    scores: dict[str, dict[str, Any]] = {}
    grids: dict[str, Any] = {}
    maps = None
    for (name, s), v in zip([j for j, _ in jobs], got):
        if "grid" in v:
            grids[name] = v.pop("grid")
        if "maps" in v:
            maps = v.pop("maps")
        scores.setdefault(name, {})[str(s)] = v
    for name, per in scores.items():
        keys = [k for k in ("mse", "fid", "accuracy") if k in next(iter(per.values()))]
        ctx.log(stage="eval", model=name, **{k: float(np.mean([p[k] for p in per.values()])) for k in keys})
    return {"groups": e.groups, "seeds": seeds, "scores": scores, "merges": merges, "sizes": list(a.sizes),
            "n_experts": len(main), "control": e.control,
            "classifier": {k: v for k, v in clf.items() if k not in ("path", "grid_real")},
            "grids": {"real": clf["grid_real"], **grids}, "maps": maps,
            "loss": {"base": base_loss, **expert_loss,
                     **{f"afa_{t.spec['set']}-seed{t.spec['seed']}": t.final["loss"] for t in afa}},
            "side": cfg.data.side, "per_class": cfg.eval.per_class,
            "split": {s: len(D.load(p)) for s, p in paths.items()}}


N_DIGITS = 1797
"""scikit-learn's digits (corpora.digits): the splits' sizes without reading them"""


def _expert(c: dict[str, Any]):
    """An expert as run() would hold it: the tiny U-Net, or (hub ids: the paper) an SD1.5 U-Net from
    diffusers' config class (its defaults are SD1.5's but for the 768-wide CLIP context)."""
    if not c["experts"]["unets"]:
        return build_expert(c, 0)
    from diffusers import UNet2DConditionModel

    from ...diffusion.model import Denoiser

    return Denoiser(UNet2DConditionModel(cross_attention_dim=c["experts"]["context_dim"]), None, vocab=D.CLASSES + 1)


def _sd15_frozen():
    """SD's VAE and the CLIP ViT-L/14 text encoder (sized as released): held, frozen, at paper scale."""
    from diffusers import AutoencoderKL
    from torch import nn
    from transformers import CLIPTextConfig, CLIPTextModel

    return nn.ModuleDict({
        "vae": AutoencoderKL(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                             up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2),
        "text": CLIPTextModel(CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                                             num_hidden_layers=12, projection_dim=768))})


def _build(c: dict[str, Any], micro: int, n: int = 0):
    """``module_footprint``'s build: one micro-batch of eps-prediction MSE of an expert (n = 0) or
    of AFA over n frozen experts (the latents of SD1.5 at paper scale)."""
    import torch

    from ...diffusion.sampling import ddpm
    from .afa import ensemble_loss

    sched = ddpm()

    def build():
        net = build_afa(c, [_expert(c) for _ in range(n)], 0) if n else _expert(c)
        ch, side = (net.experts[0] if n else net).unet.config.in_channels, c["data"]["side"]
        model = net if n else (lambda x, t, tok: net(x, t, net.context(tok)))
        return net, lambda _: ensemble_loss(model, sched, torch.randn(micro, ch, side, side),
                                            torch.zeros(micro, 1, dtype=torch.long), torch.randint(0, 1000, (micro,)),
                                            torch.randn(micro, ch, side, side)).sum()
    return build


def plan(cfg: Config) -> list:
    """The classifier task, the common base and the experts (tiny experts only: the paper's are
    published fine-tunes), the merge search, one Ray Train run per (expert set, seed) training the
    aggregators, then the scoring tasks. The paper preset (refused by prepare: the latent path is
    not built) is planned as SD1.5's."""
    import torch

    from ...plan import Footprint, Tasks, Train, module, module_footprint
    from .afa import block_of, simplex_grid

    c, d, e, a, m, ev = recipe_dict(cfg), cfg.data, cfg.experts, cfg.aggregator, cfg.merge, cfg.eval
    n, train = len(e.groups), N_DIGITS - d.test - d.val
    expert = module("SD1.5 U-Net (diffusers' config class)" if e.unets else "tiny U-Net", lambda: _expert(c))
    extra = module("VAE + CLIP text", _sd15_frozen).params if e.unets else 0
    afa = module(f"AFA over {n} experts" + (" (+ SD1.5 VAE, CLIP text, frozen)" if e.unets else ""),
                 lambda: build_afa(c, [_expert(c) for _ in range(n)], 0), trainable=lambda net: sum(
                     p.numel() for k, p in net.named_parameters() if not k.startswith("experts.")))
    afa.params += extra
    f_x = module_footprint(_build(c, 1)).train_flops / 3  # one expert's forward, per row
    sets = [n] + list(a.sizes) + ([e.control] if e.control else [])  # run()'s expert sets
    big = max(sets)
    raw = module_footprint(_build(c, a.batch, big))
    afa_f = raw.train_flops / 3 / a.batch / big  # AFA's forward per row and expert
    fp = Footprint(raw.activation_bytes, raw.train_flops * sum(sets) / len(sets) / big,
                   raw.how + f"; {big} experts, FLOPs scaled to each set's count")
    stages = [Tasks("classifier", ev, 1, 2 * N_DIGITS * d.side ** 2 * 4 + 64 * 4 * ev.classifier_width * d.side ** 2,
                    note="the digits (float32) twice and a training batch of 64's maps; on the task's CPUs")]
    if not e.unets:
        ftc = train_config(e, "", e.steps, e.batch, e.lr, e.warmup, 0)
        efp = module_footprint(_build(c, ftc.micro_batch_size))
        stages += [Train("base", e, 1, 1, expert, e.base_steps, ftc.rows_per_step(), ftc.micro_batch_size,
                         footprint=efp, epochs=e.base_steps * ftc.rows_per_step() / train),
                   Train("experts", e, 1, n + e.control, expert, e.steps, ftc.rows_per_step(), ftc.micro_batch_size,
                         concurrent=e.max_concurrent_trials, footprint=efp,
                         note=f"{n} experts on their classes {e.groups} + {e.control} control experts on all")]
    with torch.device("meta"):
        blocks = {block_of(k) for k in _expert(c).state_dict()}
    g = len(simplex_grid(n, m.step))
    evals = g + m.sweeps * len(blocks) * (g - 1) + 1  # search_merge's loss_of calls
    stages.append(Tasks("merge", m, 1, (n + 2) * expert.params * 4, model=expert, flops=evals * m.rows * f_x,
                        note=f"{evals:,} validation losses over {m.rows} rows (simplex grid at {m.step:g}, "
                             f"{m.sweeps} sweep(s) over {len(blocks)} blocks): fp32 weights of the {n} experts, "
                             "the merged state and its model; on the task's CPUs (the body never moves to a GPU)"))
    atc = train_config(a, "", a.steps, a.batch, a.lr, a.warmup, 0)
    stages.append(Train("aggregators", a, 1, len(sets) * a.seeds, afa, a.steps, atc.rows_per_step(),
                        atc.micro_batch_size, concurrent=a.max_concurrent_trials, footprint=fp,
                        epochs=None if e.unets else a.steps * atc.rows_per_step() / train,
                        note=f"expert sets of {sets} experts x {a.seeds} seeds, experts frozen"
                             + ("; the experts are the published fine-tunes (no base or expert training)"
                                if e.unets else "")))
    rows, images = d.test * ev.draws, D.CLASSES * ev.per_class * ev.steps * (2 if ev.guidance != 1 else 1)
    gen = (2 * n + 2) * f_x + n * afa_f  # per row of: the experts, uniform, the two merges, AFA (they generate)
    score = (sum(a.sizes) + 2 * e.control) * f_x + sum(sets[1:]) * afa_f  # the rest: scored only
    tasks = (len(sets) + n + 3 + len(a.sizes) + e.control + (1 if e.control else 0)) * a.seeds
    stages.append(Tasks("eval", ev, tasks, 4 * max((n + 2) * expert.params, afa.params - extra),
                        model=afa, flops=a.seeds * (gen * (rows + images) + score * rows),
                        note=f"{n + 4} models per seed generate {D.CLASSES * ev.per_class} images (DDIM {ev.steps} "
                             f"steps, CFG {ev.guidance:g}) and all score {rows} rows: the largest fp32 weights held "
                             f"(a merge's: {n} experts, the merged state and its model, or AFA's); on the task's "
                             "CPUs (the body never moves to a GPU)"))
    return stages
