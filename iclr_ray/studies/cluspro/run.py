"""cluspro on Ray: one Tune trial per (world, seed); in each, one Ray Train run (the shared loop)
trains every method side by side on one stream of batches, reporting the validation AUC every
``eval_every`` steps; the trial then scores the saved model in the closed and the open world and
keeps a 2-D projection of ClusPro's attribute features with their prototypes.

``iclr-ray sweep cluspro --space tune_spaces/cluspro_small.yaml`` tunes the prototype memory
(K, momentum, contrastive weight) of ClusPro alone, ranked by the validation AUC."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ... import storage
from ...config import ConfigError
from ...llm.recipe import Recipe, TrainConfig
from ...resources import worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as D
from .config import Config

VALID_SCORE = "valid_auc"
METHODS_FILE = "methods.safetensors"  # every method's trained weights in a checkpoint (llm.weights)


def prepare(cfg: Config):
    """Checks that need no Ray: POT imports (for OT); an official data set's split files read and
    its CLIP is there to load."""
    if any(m in ("cluspro", "cluspro_hsic") for m in cfg.train.methods):
        try:
            import ot  # noqa: F401
        except ImportError:
            raise ConfigError("ClusPro's OT assignment needs POT: pip install -e '.[vision]'") from None
    if cfg.data.root:
        from ...llm.pretrained import check_available

        D.read_split(cfg.data.root, cfg.data.split)
        check_available(cfg.model.clip)
    return None


def world_data(c: dict[str, Any], world: str, seed: int) -> D.CZSLData:
    d = c["data"]
    if world == "official":
        return D.official(d["root"], d["split"])
    return D.build(d["kind"], world == "multimodal", unseen=d["unseen"], renders=d["renders"], images=d["images"],
                   seed=d["seed"] + seed, feature_dim=d["feature_dim"], noise=d["noise"])


def inputs(data: D.CZSLData, idx: np.ndarray):
    import torch

    return torch.as_tensor(D.batch_x(data, idx))


FROZEN = ".encoder.vision."
"""the state-dict keys of a frozen pretrained backbone: not saved (rebuilt from model.clip)"""


def labels(data: D.CZSLData, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of a split, their true pair's index among the split's candidates, and which
    candidates are unseen pairs."""
    idx = data.index(which)
    cands = data.pairs(which)
    pos = {(int(a), int(o)): i for i, (a, o) in enumerate(cands)}
    truth = np.array([pos[(int(a), int(o))] for a, o in zip(data.attr[idx], data.obj[idx])])
    return idx, truth, np.arange(len(cands)) >= len(data.seen)


def build_methods(c: dict[str, Any], data: D.CZSLData, seed: int):
    import torch

    from .cluspro import CZSL, Methods

    p, m = c["proto"], c["model"]
    official = data.x.dtype == object
    kind = "cnn" if data.x.ndim == 4 else "mlp"
    models = {}
    for name in c["methods"]:
        torch.manual_seed(seed)  # every method of a seed starts from the same encoder and paths
        backbone = clip_backbone(m["clip"], m["d"]) if official else None
        models[name] = CZSL(len(data.attrs), len(data.objs), data.seen, method=name, d=m["d"], kind=kind,
                            in_dim=0 if official else data.x.shape[-1], side=D.SIDE, k=p["k"], momentum=p["momentum"],
                            weight=p["weight"], hsic_weight=p["hsic"], reg=p["reg"], structure=p["structure"],
                            prim_dropout=m["prim_dropout"], dropout=m["dropout"], backbone=backbone)
    return Methods(models)


def clip_backbone(source: str, d: int):
    """CLIP's vision tower with its projection (an HF id or a folder), frozen, and a trainable map to d."""
    from transformers import CLIPVisionModelWithProjection

    from .cluspro import FrozenBackbone

    vision = CLIPVisionModelWithProjection.from_pretrained(source)
    return FrozenBackbone(vision, vision.config.projection_dim, d)


def scores(model, data: D.CZSLData, which: str, batch: int, pairs: np.ndarray | None = None) -> np.ndarray:
    """The model's test-time pair scores for every sample of a split (candidates: the split's
    closed-world pairs, or ``pairs``), computed on the model's device, returned to the host."""
    import torch

    device = next(model.parameters()).device
    idx = data.index(which)
    cand = torch.as_tensor(data.pairs(which) if pairs is None else pairs, device=device)
    with torch.no_grad():
        return torch.cat([model.pair_scores(torch.as_tensor(D.batch_x(data, idx[i:i + batch])).to(device), cand)
                          for i in range(0, len(idx), batch)]).cpu().numpy()


def closed_world(model, data: D.CZSLData, which: str, batch: int, bias: float | None = None) -> dict[str, Any]:
    """The closed-world metrics of split ``which`` over the whole calibration sweep (best S, U, HM
    and the AUC, as CZSL papers report them), and the split's best-HM bias; with ``bias`` (chosen
    on validation) also HMv, Sv, Uv: the split's accuracies at that bias."""
    from .cluspro import at_bias, best_bias, czsl_metrics, seen_unseen_curve

    _, truth, unseen_cand = labels(data, which)
    sc = scores(model, data, which, batch)
    biases, s, u = seen_unseen_curve(sc, truth, unseen_cand, unseen_cand[truth])
    out = {**czsl_metrics(s, u), "curve": [s.tolist(), u.tolist()], "best_bias": best_bias(biases, s, u)}
    if bias is not None:
        at = at_bias(sc, truth, unseen_cand, unseen_cand[truth], bias)
        out.update({"Sv": at["S"], "Uv": at["U"], "HMv": at["HM"], "bias": bias})
    return out


def open_world(model, data: D.CZSLData, batch: int, trials: int) -> dict[str, float]:
    """Every (attribute, object) a candidate; pairs whose feasibility falls below a threshold are
    masked, the threshold chosen on validation (AUC) among ``trials`` quantiles of the unseen
    pairs' feasibility; then the test metrics at that threshold."""
    import torch

    from .cluspro import czsl_metrics, feasibility, seen_unseen_curve

    n_a, n_o = len(data.attrs), len(data.objs)
    every = np.array([(a, o) for a in range(n_a) for o in range(n_o)], np.int64)
    seen = np.zeros((n_a, n_o), bool)
    seen[data.seen[:, 0], data.seen[:, 1]] = True
    with torch.no_grad():
        e = model.prim.detach()
        ta, to = model.text_a(e[:n_a]).cpu().numpy(), model.text_o(e[n_a:]).cpu().numpy()
    feas = feasibility(ta, to, seen).ravel()
    unseen_cand = ~seen.ravel()
    out = {}
    raw = {w: scores(model, data, w, batch, every) for w in ("valid", "test")}
    truth = {w: data.attr[data.index(w)] * n_o + data.obj[data.index(w)] for w in ("valid", "test")}

    def at(w, thr):
        masked = np.where(((feas >= thr) | ~unseen_cand)[None], raw[w], -np.inf)
        _, s, u = seen_unseen_curve(masked, truth[w], unseen_cand, unseen_cand[truth[w]])
        return czsl_metrics(s, u)

    thresholds = np.unique(np.quantile(feas[unseen_cand], np.linspace(0, 1, trials, endpoint=False)))
    best = max(thresholds, key=lambda t: at("valid", t)["AUC"])
    out.update({f"ow_{k}": v for k, v in at("test", best).items()})
    out.update({f"ow_nofeas_{k}": v for k, v in at("test", -np.inf).items()})
    out["ow_threshold"] = float(best)
    return out


def projection(model, data: D.CZSLData, n: int, seed: int) -> dict[str, Any]:
    """A 2-D PCA of the attribute features h_a of ``n`` training samples of two attributes, with
    the prototypes of those attributes projected alike (the features-with-prototypes plot)."""
    import torch

    tr = data.index("train")
    attrs = [0, 1]
    pick = tr[np.isin(data.attr[tr], attrs)]
    pick = np.random.default_rng(seed).choice(pick, min(n, len(pick)), replace=False)
    device = next(model.parameters()).device
    with torch.no_grad():
        _, ha, _ = model.features(torch.as_tensor(D.batch_x(data, pick)).to(device))
        f = torch.nn.functional.normalize(ha, dim=-1).cpu().numpy()
    protos = model.attr_protos[attrs].cpu().numpy() if model.uses_prototypes else np.zeros((len(attrs), 0, f.shape[1]))
    mu = f.mean(0)
    _, _, vt = np.linalg.svd(f - mu, full_matrices=False)
    proj = lambda z: ((z - mu) @ vt[:2].T).tolist()  # noqa: E731
    return {"xy": proj(f), "attr": data.attr[pick].tolist(), "parity": (data.obj[pick] % 2).tolist(),
            "protos": [proj(p) if len(p) else [] for p in protos], "attr_names": [data.attrs[a] for a in attrs]}


class CZSLRecipe(Recipe):
    """Every method of one (world, seed) side by side: each step a seeded batch of training samples
    (attribute, object, seen-pair index); the summed loss of all methods."""

    def __init__(self, c: dict[str, Any], world: str, seed: int):
        self.c, self.world, self.seed = c, world, seed

    def setup(self) -> None:
        import torch

        torch.set_num_threads(1)
        self.data = world_data(self.c, self.world, self.seed)
        pos = {(int(a), int(o)): i for i, (a, o) in enumerate(self.data.seen)}
        self.train = self.data.index("train")
        self.pair_id = np.array([pos.get((int(a), int(o)), -1) for a, o in zip(self.data.attr, self.data.obj)])

    def build_model(self, cfg: TrainConfig):
        return build_methods(self.c, self.data, cfg.seed)

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        import torch

        rng = np.random.default_rng([cfg.seed, step])
        pick = self.train[rng.integers(0, len(self.train), cfg.rows_per_step())]
        b = cfg.micro_batch_size
        out = []
        for i in range(0, len(pick), b):
            p = pick[i:i + b]
            out.append(({"x": inputs(self.data, p), "attr": torch.as_tensor(self.data.attr[p]),
                         "obj": torch.as_tensor(self.data.obj[p]), "pair": torch.as_tensor(self.pair_id[p])}, len(p)))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        import torch.distributed as dist

        reduce = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            def reduce(t):  # the memory's statistics summed over workers: every rank keeps the same prototypes
                dist.all_reduce(t)
                return t
        return engine(batch["x"], batch["attr"], batch["obj"], batch["pair"], reduce)

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["x"])

    def eval_metrics(self, module) -> dict[str, float]:
        return {f"{VALID_SCORE}|{n}": closed_world(m, self.data, "valid", self.c["eval"]["batch"])["AUC"]
                for n, m in zip(module.names, module.models)}

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from ...llm.weights import save_engine_weights

        # the trained weights and the memory; a frozen pretrained backbone reloads by name
        save_engine_weights(engine, str(path / METHODS_FILE), rank, zero_stage, keep=lambda k: FROZEN not in k)


def train_config(cfg: Config, seed: int) -> TrainConfig:
    t = cfg.train
    return TrainConfig(model="cluspro", micro_batch_size=-(-t.batch // t.num_workers), grad_accum=1,
                       max_steps=t.steps, lr=t.lr, betas=(0.9, 0.999), weight_decay=t.weight_decay,
                       schedule="constant", warmup_steps=0, grad_clip=0.0, zero_stage=0, num_workers=t.num_workers,
                       eval_every=t.eval_every, log_every=max(1, min(50, t.steps // 10)), checkpoint_every=0,
                       keep_checkpoints=1, max_failures=1, seed=seed, **worker_resources(t))


@resumable
def world_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, c: dict[str, Any]) -> dict[str, Any]:
    """One (world, seed): every method through the shared loop, then the closed- and open-world
    test metrics of each, the validation curves and ClusPro's feature projection."""
    import torch

    from ...llm.train import checkpoint_location, fit_recipe, read_steps
    from ...llm.weights import load_weights

    torch.set_num_threads(1)
    spec = config["spec"]
    proto = {k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("proto.")}
    if proto:  # a sweep trial: its values (checked by the sweep before Ray started) over the config's
        c = {**c, "proto": {**c["proto"], **proto}}
    world, seed = spec["world"], int(spec["seed"])
    tc = train_config(cfg, seed)
    if "train.lr" in config:
        tc = tc.model_copy(update={"lr": float(config["train.lr"])})
    result = fit_recipe(tc, CZSLRecipe(c, world, seed), trial_dir, "train")
    data = world_data(c, world, seed)
    model = build_methods(c, data, seed)
    state = load_weights(storage.join(checkpoint_location(result.checkpoint), METHODS_FILE))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(FROZEN not in k for k in missing):
        raise RuntimeError(f"{METHODS_FILE} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()
    batch, out = c["eval"]["batch"], {}
    for name, m in zip(model.names, model.models):
        valid = closed_world(m, data, "valid", batch)
        out[name] = {"closed": closed_world(m, data, "test", batch, bias=valid["best_bias"]), "valid": valid,
                     "open": open_world(m, data, batch, c["eval"]["threshold_trials"])}
    show = next((n for n in ("cluspro", "cluspro_hsic", "kmeans", "single") if n in model.names), None)
    proj = {"method": show, **projection(model.models[model.names.index(show)], data,
                                         c["eval"]["projection_samples"], seed)} if show else None
    steps = read_steps(trial_dir, "train")
    curves = [{k: v for k, v in s.items() if k.startswith(VALID_SCORE) or k == "step"}
              for s in steps if any(k.startswith(VALID_SCORE) for k in s)]
    scores_ = {VALID_SCORE: float(np.mean([out[n]["valid"]["AUC"] for n in model.names]))}
    params = {n: int(sum(p.numel() for p in m.parameters())) for n, m in zip(model.names, model.models)}
    return {"scores": scores_, "methods": out, "params": params, "curves": curves, "projection": proj,
            "sizes": {s: int((data.split == s).sum()) for s in ("train", "valid", "test")},
            "pairs": {"seen": len(data.seen), "valid_unseen": len(data.valid_unseen),
                      "test_unseen": len(data.test_unseen)}, "primitives": [len(data.attrs), len(data.objs)]}


def recipe_dict(cfg: Config) -> dict[str, Any]:
    return {"data": cfg.data.model_dump(), "model": cfg.model.model_dump(), "proto": cfg.proto.model_dump(),
            "eval": cfg.eval.model_dump(), "methods": list(cfg.train.methods)}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    worlds, methods = list(cfg.data.worlds), list(cfg.train.methods)
    specs = [{"label": f"{w}-seed{s}", "world": w, "seed": cfg.seed + s}
             for s in range(cfg.train.seeds) for w in worlds]
    ctx.say("training %d methods x %d worlds x %d seeds (%d steps of %d %s samples) ...", len(methods), len(worlds),
            cfg.train.seeds, cfg.train.steps, cfg.train.batch, cfg.data.kind)
    trials = run_grid(world_trial, specs, storage=ctx.run_dir.storage("tune"), name="worlds",
                      max_concurrent_trials=cfg.train.max_concurrent_trials, cfg=cfg, c=recipe_dict(cfg))
    failed = [t.spec["label"] for t in trials if t.final is None]
    if failed:
        raise RuntimeError(f"trials failed: {', '.join(failed)}: {[t.error for t in trials if t.final is None]}")
    keys = ("S", "U", "HM", "AUC")
    res: dict[str, Any] = {w: {m: {} for m in methods} for w in worlds}
    curves: dict[str, Any] = {w: {m: [] for m in methods} for w in worlds}
    projections, sizes = {}, {}
    for w in worlds:
        finals = [t.final for t in trials if t.spec["world"] == w]
        for m in methods:
            r = res[w][m]
            for k in ("HMv", "Sv", "Uv"):  # at the bias chosen on validation (the protocol's calibration)
                r[k] = [f["methods"][m]["closed"][k] for f in finals]
            for k in keys:
                r[k] = [f["methods"][m]["closed"][k] for f in finals]
                r[f"ow_{k}"] = [f["methods"][m]["open"][f"ow_{k}"] for f in finals]
                r[f"ow_nofeas_{k}"] = [f["methods"][m]["open"][f"ow_nofeas_{k}"] for f in finals]
                r[f"valid_{k}"] = [f["methods"][m]["valid"][k] for f in finals]
            r["curve"] = finals[0]["methods"][m]["closed"]["curve"]
            curves[w][m] = [[c[f"{VALID_SCORE}|{m}"] for c in f["curves"]] for f in finals]
            ctx.log(stage="method", world=w, method=m, **{f"test_{k}": float(np.mean(r[k])) for k in keys})
        projections[w] = finals[0]["projection"]
        sizes = {"samples": finals[0]["sizes"], "pairs": finals[0]["pairs"], "primitives": finals[0]["primitives"]}
    first = next(t.final for t in trials)
    return {"worlds": worlds, "methods": methods, "seeds": sorted({s["seed"] for s in specs}),
            "kind": cfg.data.root or cfg.data.kind, "results": res, "valid_curves": curves,
            "curve_steps": [c["step"] for c in first["curves"]],
            "projection": projections, **sizes, "k": cfg.proto.k, "params": first["params"]}


def sweep(cfg: Config, space, ctx: RunContext, scheduler: str, resume: bool) -> dict[str, Any]:
    """``iclr-ray sweep cluspro --space FILE``: ClusPro alone on the first world and seed, one trial
    per point of the space, ranked by the validation AUC."""
    from ray import tune

    from ...sweep.tuner import run_tuner, summarise

    if space.metric != VALID_SCORE:
        raise ConfigError(f"a cluspro sweep ranks by {VALID_SCORE}, not {space.metric!r}")
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"methods": ["cluspro"]})})
    c = recipe_dict(cfg)
    params = {"spec": {"label": "sweep", "world": cfg.data.worlds[0], "seed": cfg.seed}, **space.tune_param_space()}
    trainable = tune.with_parameters(world_trial, cfg=cfg, c=c)
    results = run_tuner(trainable, params, storage_path=ctx.run_dir.storage("tune"), name="sweep",
                        max_concurrent_trials=space.max_concurrent_trials, num_samples=space.num_samples,
                        resume=resume)
    return summarise(results, space, [])


# ----------------------------------------------------------------------------- iclr-ray plan

_MIT_STATES = (115, 245, 1262)
"""attributes, objects and seen (training) pairs of MIT-States' compositional-split-natural, the
official world plan assumes (it reads no data)"""


def plan(cfg: Config) -> list:
    """The (world, seed) trials: one Ray Train run each, every method side by side; measured on a
    micro-batch of the first world's inputs."""
    import torch
    import torch.nn.functional as F

    from ...plan import Footprint, Train, module, module_footprint
    from .cluspro import CZSL, TEMPERATURE, FrozenBackbone, Methods

    t, m, p, d = cfg.train, cfg.model, cfg.proto, cfg.data
    specs = [(w, s) for s in range(t.seeds) for w in d.worlds]  # run()'s grid
    official = d.worlds[0] == "official"
    if official:
        n_a, n_o, n_seen = _MIT_STATES
        shape = (3, D.CLIP_SIZE, D.CLIP_SIZE)
    else:
        n_a, n_o = len(D.ATTRIBUTES), 10
        n_seen = len(D.choose_unseen(n_a, n_o, d.unseen, np.random.default_rng(d.seed))[0])
        shape = (1, D.SIDE, D.SIDE) if d.kind == "digits" else (d.feature_dim,)
    micro = -(-t.batch // t.num_workers)
    dtype = torch.bfloat16 if t.gpus_per_worker else torch.float32  # DeepSpeed casts the parameters on a GPU

    def vision():
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

        return CLIPVisionModelWithProjection(CLIPVisionConfig(  # ViT-L/14's sizes (openai/clip-vit-large-patch14)
            hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16, patch_size=14,
            image_size=224, projection_dim=768))

    def build():
        return Methods({name: CZSL(n_a, n_o, np.zeros((n_seen, 2), np.int64), method=name, d=m.d, kind=(
            "mlp" if d.kind == "features" else "cnn"), in_dim=d.feature_dim, side=D.SIDE, k=p.k,
            backbone=FrozenBackbone(vision(), 768, m.d) if official else None) for name in t.methods})

    def in_dtype(make):
        was = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # built in the dtype (a fake module cannot be converted)
        try:
            return make()
        finally:
            torch.set_default_dtype(was)

    def step(net):  # Methods' loss without the prototype assignment (OT on the CPU, no gradient)
        x, y = torch.zeros(micro, *shape, dtype=dtype), torch.zeros(micro, dtype=torch.long)
        total = 0
        for c in net.models:
            v, ha, ho = c.features(x)
            comp, la, lo, za, zo = c.logits(v, ha, ho, c.train_pairs, heads=True)
            total = total + F.cross_entropy(comp, y) + F.cross_entropy(la, y) + F.cross_entropy(lo, y)
            if c.uses_prototypes:
                z = [za, zo]
                g = [F.normalize(c.head_a.frozen(c.attr_protos.flatten(0, 1)), dim=-1),
                     F.normalize(c.head_o.frozen(c.obj_protos.flatten(0, 1)), dim=-1)]
                total = total + c.weight * (F.cross_entropy(z[0] @ torch.cat(g).T / TEMPERATURE, y)
                                            + F.cross_entropy(z[1] @ torch.cat(g[::-1]).T / TEMPERATURE, y))
        return total

    fp = module_footprint(lambda: (in_dtype(build), step))
    how = fp.how.replace("fp32", str(dtype)[6:])
    flops = fp.train_flops
    if official:  # the frozen CLIP runs forward only (no backward): counted once, not three times
        frozen = module_footprint(lambda: (in_dtype(vision), lambda v: v(pixel_values=torch.zeros(
            micro, *shape, dtype=dtype)).image_embeds.sum()))
        flops -= len(t.methods) * frozen.train_flops * 2 / 3
        how += "; each method's frozen CLIP forward counted once"
    model = module(f"{len(t.methods)} methods ({', '.join(t.methods)})", build, source="cluspro.py" + (
        f", CLIP from transformers' CLIPVisionConfig at ViT-L/14's sizes (model.clip: {m.clip}), MIT-States' primitives"
        if official else ""),
        trainable=(lambda net: sum(q.numel() for k, q in net.named_parameters() if FROZEN not in k)) if official else None)
    return [Train("worlds", t, t.num_workers, len(specs), model, t.steps, t.batch, micro,
                  concurrent=t.max_concurrent_trials, footprint=Footprint(fp.activation_bytes, flops, how),
                  note=f"{len(d.worlds)} world(s) x {t.seeds} seed(s); {n_a} attributes x {n_o} objects, {n_seen} seen "
                       f"pairs; not counted: the OT assignment and memory update (no gradient, on the CPU), the "
                       f"validation AUC every {t.eval_every} steps, and the trial's own scoring of every method after "
                       f"training, on its 0.01-CPU process with one thread"
                       + (f" ({len(t.methods)} fp32 CLIP copies, every valid and test image twice)" if official else ""))]
