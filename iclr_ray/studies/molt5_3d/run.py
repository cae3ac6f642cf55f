"""molt5_3d on Ray: QM9's conformers tokenised (SELFIES + aligned E3FP identifiers) by Ray tasks,
one chunk of molecules each; the fusion variants of one seed trained side by side through the
shared Ray Train + DeepSpeed loop (span-corruption pretraining, then text regression), one Tune
trial per seed; the validation MAE every ``eval_every`` steps from the loop, the test MAE from the
saved model; a ridge regressor on the same identifiers as the non-text reference."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import ray

from ...config import ConfigError
from ...llm.recipe import Recipe, TrainConfig, resolve
from ...resources import worker_resources
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from . import data as D
from .config import Config

IGNORE = -100


@dataclass
class Inputs:
    molecules: list[D.Molecule]


def prepare(cfg: Config) -> Inputs:
    """QM9 read and checked, and the seeded draw of ``data.molecules``, before Ray starts."""
    if cfg.model.checkpoint:
        raise ConfigError(f"model.checkpoint {cfg.model.checkpoint}: starting from released 3D-MolT5 weights needs "
                          "their own tokenizer and their 3D-token embedding table mapped onto this study's vocabulary, "
                          "which is not implemented (a T5 resized to a new vocabulary scrambles every token id); "
                          "unset model.checkpoint to train the T5 the model section describes")
    mols = D.read_qm9(cfg.data.source)
    if len(mols) <= cfg.data.valid + cfg.data.test:
        raise ConfigError(f"data: {len(mols)} molecules in {cfg.data.source}, not enough for {cfg.data.valid} valid + "
                          f"{cfg.data.test} test and a training set")
    n = min(cfg.data.molecules, len(mols))
    pick = np.sort(np.random.default_rng(cfg.data.seed).choice(len(mols), n, replace=False))
    return Inputs([mols[i] for i in pick])


# ----------------------------------------------------------------------------- tokenisation


@ray.remote(num_cpus=1)
def featurise_chunk(mols: list[D.Molecule], bits: int, level: int) -> list[dict[str, Any]]:
    """Each molecule's SELFIES tokens, aligned E3FP identifiers and targets, or why it was dropped
    (RDKit found no bond assignment for the neutral molecule)."""
    from .molt5 import featurise, mol_from_xyz, radius_of_gyration

    out = []
    for m in mols:
        try:
            f = featurise(mol_from_xyz(m.elements, m.xyz), bits, level)
        except ValueError as exc:
            out.append({"index": m.index, "error": drop_reason(str(exc))})
            continue
        props = dict(m.props, rg=radius_of_gyration(m.xyz, m.elements))
        out.append({"index": m.index, "smiles": f.smiles, "tokens": f.tokens, "fp": f.fp, "fp2d": f.fp2d,
                    "props": props})
    return out


DROP_REASONS = ("no bond assignment", "atom without bonds", "SELFIES alignment")


def drop_reason(message: str) -> str:
    """Why a molecule was left out, as one of :data:`DROP_REASONS`."""
    if message.startswith("no bond assignment") or "could not read" in message:
        return DROP_REASONS[0]
    return DROP_REASONS[1] if "no E3FP shell" in message else DROP_REASONS[2]


def featurise_all(cfg: Config, mols: list[D.Molecule], ctx: RunContext) -> tuple[list[dict], dict[str, int]]:
    c = cfg.tokens
    chunks = [mols[i:i + c.chunk] for i in range(0, len(mols), c.chunk)]
    ctx.say("tokenising %d conformers (SELFIES + E3FP, %d bits, level %d) in %d tasks ...", len(mols), c.bits, c.level,
            len(chunks))
    done = ctx.wait_all([featurise_chunk.remote(ch, c.bits, c.level) for ch in chunks], "conformer chunks")
    records, dropped = [], {}
    for r in (r for chunk in done for r in chunk):
        if "error" in r:
            dropped[r["error"]] = dropped.get(r["error"], 0) + 1
        else:
            records.append(r)
    return records, dropped


# ----------------------------------------------------------------------------- the recipe


def _pad(rows: list, value: int) -> np.ndarray:
    """Rows of unequal length (lists of ids, or (length, levels) identifier arrays) padded with
    ``value`` to the longest."""
    first = np.asarray(rows[0])
    out = np.full((len(rows), max(len(r) for r in rows), *first.shape[1:]), value, np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def packed(view: str, ids: list[list[int]], fps: list[np.ndarray], labels: list[list[int]]) -> dict[str, Any]:
    """One view of a batch as tensors: ids (padded with 0), their attention mask, identifiers
    (padded with -1) and labels (padded with -100)."""
    import torch

    ids_a = _pad(ids, 0)
    lengths = np.array([len(i) for i in ids])
    return {f"{view}_ids": torch.as_tensor(ids_a),
            f"{view}_mask": torch.as_tensor((np.arange(ids_a.shape[1])[None] < lengths[:, None]).astype(np.int64)),
            f"{view}_fp": torch.as_tensor(_pad(fps, -1)),
            f"{view}_labels": torch.as_tensor(_pad(labels, IGNORE))}


class Encoded:
    """The molecules as token ids and identifier rows in the three views the variants read
    (``full``: <bom> SELFIES <eom>; ``atoms``: <bom> <atom>... <eom>, the 3D-only input;
    ``shuffled``: the full tokens with the identifiers of the molecule ``perm`` assigns; ``ecfp``:
    the full tokens with their atoms' Morgan identifiers), and the targets as the decoder's number
    strings."""

    def __init__(self, records: list[dict], vocab: list[str], targets: list[str], decimals: dict[str, int],
                 perm: np.ndarray, level: int):
        from .molt5 import atoms_view

        self.vocab = {t: i for i, t in enumerate(vocab)}
        self.targets, self.decimals, self.level = targets, decimals, level
        v = self.vocab
        none = np.full((1, level + 1), -1, np.int64)
        self.ids, self.fp, self.fp2d, self.atom_ids, self.atom_fp, self.values = [], [], [], [], [], []
        for r in records:
            ids = [v["<bom>"]] + [v.get(t, v["<unk>"]) for t in r["tokens"]] + [v["<eom>"]]
            fp = np.concatenate([none, np.asarray(r["fp"], np.int64), none])
            self.fp2d.append(np.concatenate([none, np.asarray(r["fp2d"], np.int64), none]) if r.get("fp2d") is not None
                             else None)
            a_ids, a_fp = atoms_view(fp, v["<atom>"])
            self.ids.append(ids)
            self.fp.append(fp)
            self.atom_ids.append([v["<bom>"]] + a_ids + [v["<eom>"]])
            self.atom_fp.append(np.concatenate([none, a_fp, none]))
            self.values.append([float(r["props"][t]) for t in targets])
        self.perm = perm
        self.shuffled_fp = []  # molecule m's atom positions carry molecule perm[m]'s atom identifiers, in order
        for m, fp in enumerate(self.fp):
            other = self.fp[perm[m]]
            s = np.full_like(fp, -1)
            s[(fp >= 0).any(1)] = other[(other >= 0).any(1)]
            self.shuffled_fp.append(s)
        self.values = np.asarray(self.values, float)

    def target_ids(self, value: float, target: str) -> list[int]:
        from .molt5 import format_value

        return [self.vocab[ch] for ch in format_value(value, self.decimals[target])] + [self.vocab["</s>"]]

    def views(self, mols: np.ndarray, prompts: list[list[int]], labels: list[list[int]],
              which: Sequence[str] = ("full", "atoms", "shuffled", "ecfp")) -> dict[str, Any]:
        """A batch: for each view in ``which``, the prompt tokens then the molecule, padded; labels
        padded with -100."""
        none = np.full((1, self.level + 1), -1, np.int64)
        out = {}
        for view in which:
            ids, fps = [], []
            for m, p in zip(mols, prompts):
                if view == "atoms":
                    ids.append(p + self.atom_ids[m])
                    fps.append(np.concatenate([np.repeat(none, len(p), 0), self.atom_fp[m]]))
                else:
                    fp = {"full": self.fp, "shuffled": self.shuffled_fp, "ecfp": self.fp2d}[view][m]
                    ids.append(p + self.ids[m])
                    fps.append(np.concatenate([np.repeat(none, len(p), 0), fp]))
            out.update(packed(view, ids, fps, labels))
        return out


class MolRecipe(Recipe):
    """The variants of one seed (``train.variants``) side by side: ``pretrain_steps`` of span
    corruption over each variant's view of the training molecules, then text regression of the
    targets (one target's prompt per example, the (molecule, target) pairs in a fresh seeded order
    each epoch)."""

    def __init__(self, records, split: dict[str, np.ndarray], vocab: list[str], cfg: dict[str, Any], train_values):
        self.records_ref, self.split, self.vocab, self.c, self.train_values = records, split, vocab, cfg, train_values

    def setup(self) -> None:
        import torch

        from .molt5 import SENTINELS

        torch.set_num_threads(1)
        c = self.c
        records = resolve(self.records_ref)
        self.enc = Encoded(records, self.vocab, c["targets"], c["decimals"], np.asarray(c["perm"]), c["level"])
        self.sentinels = [self.enc.vocab[s] for s in SENTINELS]
        self.means = np.asarray(self.train_values)
        from .molt5 import VIEWS

        # the views some variant reads (every batch carries "full": its size counts the examples)
        self.needed = [v for v in ("full", "atoms", "shuffled", "ecfp") if v == "full" or
                       any(VIEWS[x] == v for x in c["variants"])]

    def build_model(self, cfg: TrainConfig):
        import torch

        from .molt5 import MolT5, Variants, variant_mode

        models = {}
        for v in self.c["variants"]:
            torch.manual_seed(cfg.seed)  # every variant of a seed starts from the same T5
            models[v] = MolT5(self.t5(), variant_mode(v), self.c["bits"])
        return Variants(models)

    def t5(self):
        from .molt5 import build_t5, t5_config

        m = self.c["model"]  # model.checkpoint is refused by prepare()
        return build_t5(t5_config(len(self.vocab), m["d_model"], m["d_ff"], m["layers"], m["heads"],
                                                    m["dropout"]))

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        n = cfg.rows_per_step()
        batch = self.pretrain_batch(step, n) if step < self.c["pretrain_steps"] else \
            self.finetune_batch(step - self.c["pretrain_steps"], n, cfg.seed)
        b = cfg.micro_batch_size
        size = len(batch["full_ids"])
        return [({k: t[i:i + b] for k, t in batch.items()}, len(batch["full_ids"][i:i + b])) for i in range(0, size, b)]

    def pretrain_batch(self, step: int, n: int) -> dict[str, Any]:
        """Span corruption: the full and shuffled views mask the same spans of the molecule's
        tokens (with their identifiers); the atoms view masks spans of its atoms and is asked for
        the masked atoms' SELFIES tokens (3D -> 1D for the masked positions)."""
        from .molt5 import corrupted, span_corrupt

        rng = np.random.default_rng([self.c["seed"], 1, step])
        train = self.split["train"]
        mols = train[rng.integers(0, len(train), n)]
        e, eos = self.enc, self.enc.vocab["</s>"]
        full_in, full_fp, shuf_fp, ecfp_fp, labels, a_in, a_fp, a_labels = [], [], [], [], [], [], [], []
        for m in mols:
            spans = span_corrupt(len(e.ids[m]), rng, self.c["noise_density"], self.c["mean_span"])
            ids, fp, target = corrupted(e.ids[m], e.fp[m], spans, self.sentinels, eos)
            _, sfp, _ = corrupted(e.ids[m], e.shuffled_fp[m], spans, self.sentinels, eos)
            if "ecfp" in self.needed:
                ecfp_fp.append(corrupted(e.ids[m], e.fp2d[m], spans, self.sentinels, eos)[1])
            full_in.append(ids), full_fp.append(fp), shuf_fp.append(sfp), labels.append(target)
            atoms = np.flatnonzero((e.atom_fp[m] >= 0).any(1))
            symbols = [e.ids[m][k] for k in np.flatnonzero((e.fp[m] >= 0).any(1))]  # the atoms' SELFIES tokens
            spans = span_corrupt(len(atoms), rng, self.c["noise_density"], self.c["mean_span"])
            spans = [(int(atoms[a]), int(atoms[b - 1]) + 1) for a, b in spans]
            ids3, fp3, _ = corrupted(e.atom_ids[m], e.atom_fp[m], spans, self.sentinels, eos)
            t3 = []
            for k, (a, b) in enumerate(spans):
                t3 += [self.sentinels[k], *symbols[a - 1:b - 1]]  # atom position p holds symbol p - 1 (<bom> first)
            a_in.append(ids3), a_fp.append(fp3), a_labels.append(t3 + [eos])
        parts = {"full": (full_in, full_fp, labels), "shuffled": (full_in, shuf_fp, labels),
                 "ecfp": (full_in, ecfp_fp, labels), "atoms": (a_in, a_fp, a_labels)}
        return {k: t for view in self.needed for k, t in packed(view, *parts[view]).items()}

    def examples(self) -> np.ndarray:
        """Every (training molecule, target) pair, as molecule * n_targets + target."""
        return (self.split["train"][:, None] * len(self.c["targets"]) + np.arange(len(self.c["targets"]))).ravel()

    def finetune_batch(self, step: int, n: int, seed: int) -> dict[str, Any]:
        from ...llm.data import epoch_order

        pairs = self.examples()
        orders: dict[int, np.ndarray] = {}  # one permutation per epoch the step touches
        chosen = []
        for i in range(step * n, (step + 1) * n):
            epoch, j = divmod(i, len(pairs))
            if epoch not in orders:
                orders[epoch] = epoch_order(len(pairs), seed, epoch)
            chosen.append(pairs[orders[epoch][j]])
        return self.regression_batch(np.asarray(chosen))

    def regression_batch(self, pairs: np.ndarray) -> dict[str, Any]:
        e, T = self.enc, len(self.c["targets"])
        mols, tgt = pairs // T, pairs % T
        names = self.c["targets"]
        prompts = [[e.vocab[f"<{names[t]}>"]] for t in tgt]
        labels = [e.target_ids(e.values[m, t], names[t]) for m, t in zip(mols, tgt)]
        return e.views(mols, prompts, labels, self.needed)

    def loss(self, engine, batch: dict[str, Any]):
        return engine(batch)

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["full_ids"])

    def predict(self, module, mols: np.ndarray) -> dict[str, np.ndarray]:
        """Each variant's decoded value for every (molecule, target): {variant: (mols, targets)};
        NaN where the decoder did not write a number."""
        from .molt5 import VIEWS, decode

        T = len(self.c["targets"])
        pairs = (mols[:, None] * T + np.arange(T)).ravel()
        inv = {i: t for t, i in self.enc.vocab.items()}
        out = {v: np.full(len(pairs), np.nan) for v in module.names}
        step = self.c["eval_batch"]
        for k in range(0, len(pairs), step):
            batch = self.regression_batch(pairs[k:k + step])
            for name, m in zip(module.names, module.models):
                view = VIEWS[name]
                values = decode(m, batch[f"{view}_ids"], batch[f"{view}_fp"], batch[f"{view}_mask"],
                                self.c["max_new_tokens"], inv)
                out[name][k:k + len(values)] = values
        return {v: p.reshape(len(mols), T) for v, p in out.items()}

    def scores(self, module, mols: np.ndarray, prefix: str) -> dict[str, float]:
        """MAE per variant and target (an unreadable answer counts as the training mean), the median
        absolute error, and the share of unreadable answers."""
        truth = self.enc.values[mols]
        out = {}
        for v, pred in self.predict(module, mols).items():
            bad = ~np.isfinite(pred)
            filled = np.where(bad, self.means[None, :], pred)
            for t, name in enumerate(self.c["targets"]):
                err = np.abs(filled[:, t] - truth[:, t])
                out[f"{prefix}_mae|{v}|{name}"] = float(err.mean())
                out[f"{prefix}_medae|{v}|{name}"] = float(np.median(err))  # what one wild answer cannot move
                out[f"{prefix}_invalid|{v}|{name}"] = float(bad[:, t].mean())
        return out

    def eval_metrics(self, module) -> dict[str, float]:
        return self.scores(module, self.split["valid"], "valid")

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from ...llm.weights import save_engine_weights
        from .molt5 import build_tokenizer

        # every variant's weights with what built them (variants.json beside), and the tokenizer the
        # vocabulary makes (HF format)
        save_engine_weights(engine, str(path / "variants.safetensors"), rank, zero_stage,
                            meta={"variants": self.c["variants"], "model": self.c["model"], "bits": self.c["bits"],
                                  "level": self.c["level"]})
        if rank == 0:
            build_tokenizer(self.vocab).save_pretrained(path / "tokenizer")

    def final_metrics(self, path: Path) -> dict[str, float]:
        from ...llm.recipe import TrainConfig as TC
        from ...llm.weights import load_weights

        model = self.build_model(TC(seed=0))
        model.load_state_dict(load_weights(str(path / "variants.safetensors")))
        model.eval()
        return self.scores(model, self.split["test"], "test")


# ----------------------------------------------------------------------------- trials


def train_config(cfg: Config, seed: int) -> TrainConfig:
    t = cfg.train
    total = t.pretrain_steps + t.steps
    return TrainConfig(model="molt5_3d", micro_batch_size=-(-t.batch // t.num_workers), grad_accum=1,
                       max_steps=total, lr=t.lr, betas=(0.9, 0.999), weight_decay=t.weight_decay, schedule=t.schedule,
                       warmup_steps=t.warmup_steps, grad_clip=0.0, zero_stage=0, num_workers=t.num_workers,
                       eval_every=t.eval_every, log_every=max(1, min(50, total // 20)), checkpoint_every=0,
                       keep_checkpoints=1, max_failures=1, seed=seed, **worker_resources(t))


@resumable
def seed_trial(config: dict[str, Any], trial_dir: Path | str, *, cfg: Config, records_ref, split: dict[str, np.ndarray],
               vocab: list[str], recipe_cfg: dict[str, Any], train_values: list[float]) -> dict[str, Any]:
    """One seed: every variant through the shared loop; the validation curves and the test MAEs."""
    from ...llm.train import fit_recipe, read_steps

    seed = int(config["spec"]["seed"])
    recipe = MolRecipe(records_ref, split, vocab, {**recipe_cfg, "seed": seed}, train_values)
    result = fit_recipe(train_config(cfg, seed), recipe, trial_dir, "train")
    steps = read_steps(trial_dir, "train")
    curves = [{k: v for k, v in s.items() if k.startswith("valid_") or k in ("step", "loss")}
              for s in steps if any(k.startswith("valid_mae|") for k in s)]
    losses = [{"step": s["step"], "loss": float(s["loss"])} for s in steps]
    test = {k: float(v) for k, v in result.metrics.items() if k.startswith("test_")}
    return {"scores": {"seed": seed}, "curves": curves, "losses": losses, "test": test}


@ray.remote(num_cpus=1)
def ridge_reference(records: list[dict], split: dict[str, np.ndarray], targets: list[str], bits: int,
                    alpha: float) -> dict[str, dict[str, float]]:
    """The non-text reference: ridge regression on each molecule's E3FP identifier counts (every atom,
    every level), and the training mean as the floor; test MAE per target."""
    from scipy import sparse
    from sklearn.linear_model import Ridge

    rows, cols = [], []
    for i, r in enumerate(records):
        ids = np.asarray(r["fp"]).ravel()
        ids = ids[ids >= 0]
        rows += [i] * len(ids)
        cols += ids.tolist()
    x = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(records), bits))
    y = np.asarray([[r["props"][t] for t in targets] for r in records], float)
    tr, te = split["train"], split["test"]
    pred = Ridge(alpha=alpha).fit(x[tr], y[tr]).predict(x[te])
    out = {"ridge_e3fp": {}, "train_mean": {}}
    for k, t in enumerate(targets):
        out["ridge_e3fp"][t] = float(np.abs(pred[:, k] - y[te, k]).mean())
        out["train_mean"][t] = float(np.abs(y[tr, k].mean() - y[te, k]).mean())
    return out


DECIMALS = {"homo": 2, "lumo": 2, "gap": 2, "rg": 2, "atoms": 0}
"""the text form of each target: eV and Angstrom to 0.01, the atom count whole"""


def split_without_fixed_points(perm: np.ndarray, split: dict[str, np.ndarray]
                               ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The split with the shuffled control's fixed points (``perm[m] == m``: molecules it could
    not shuffle) removed from validation and test, and how many there are in all and per part
    (those in training stay: counted)."""
    fixed = np.asarray(perm) == np.arange(len(perm))
    out = {k: (np.asarray(v) if k == "train" else np.asarray(v)[~fixed[np.asarray(v)]]) for k, v in split.items()}
    return out, {"total": int(fixed.sum()), **{k: int(fixed[np.asarray(v)].sum()) for k, v in split.items()}}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    from .molt5 import shuffled_assignment, vocabulary

    mols = ctx.inputs.molecules
    records, dropped = featurise_all(cfg, mols, ctx)
    ctx.say("tokenised %d molecules; dropped %d (%s)", len(records), sum(dropped.values()),
            ", ".join(f"{k}: {v}" for k, v in dropped.items()) or "none")
    if len(records) <= cfg.data.valid + cfg.data.test:
        raise RuntimeError(f"only {len(records)} molecules tokenised, too few for the split")
    tr, va, te = D.split_indices(len(records), cfg.data.valid, cfg.data.test, cfg.data.seed)
    targets = list(cfg.train.targets)
    vocab = vocabulary(sorted({t for r in records for t in r["tokens"]}), targets)
    n_atoms = [int((np.asarray(r["fp"]) >= 0).any(1).sum()) for r in records]
    perm = shuffled_assignment(n_atoms, np.random.default_rng(cfg.data.seed + 11))
    # a molecule alone in its atom-count group keeps its own conformer in the shuffled control:
    # counted, and left out of validation and test for every variant (they stay paired)
    kept, unshuffled = split_without_fixed_points(perm, {"train": tr, "valid": va, "test": te})
    split = kept
    tr, va, te = kept["train"], kept["valid"], kept["test"]
    if unshuffled["total"]:
        ctx.say("shuffled control: %d molecules alone in their atom count keep their own conformer (%d of them "
                "left out of validation and test)", unshuffled["total"], unshuffled["valid"] + unshuffled["test"])
    train_values = [float(np.mean([records[i]["props"][t] for i in tr])) for t in targets]
    recipe_cfg = {"targets": targets, "decimals": {t: DECIMALS[t] for t in targets}, "perm": perm.tolist(),
                  "level": cfg.tokens.level, "bits": cfg.tokens.bits, "variants": list(cfg.train.variants),
                  "model": cfg.model.model_dump(), "pretrain_steps": cfg.train.pretrain_steps,
                  "noise_density": cfg.train.noise_density, "mean_span": cfg.train.mean_span,
                  "eval_batch": cfg.train.eval_batch, "max_new_tokens": cfg.eval.max_new_tokens}
    records_ref = ray.put(records)
    ridge = ridge_reference.remote(records_ref, split, targets, cfg.tokens.bits, cfg.eval.ridge_alpha)
    specs = [{"label": f"seed{s}", "seed": cfg.seed + s} for s in range(cfg.train.seeds)]
    ctx.say("training %d variants x %d seeds (%d + %d steps of %d examples) ...", len(cfg.train.variants),
            cfg.train.seeds, cfg.train.pretrain_steps, cfg.train.steps, cfg.train.batch)
    trials = run_grid(seed_trial, specs, storage=ctx.run_dir.storage("tune"), name="seeds",
                      max_concurrent_trials=cfg.train.max_concurrent_trials, cfg=cfg, records_ref=records_ref,
                      split=split, vocab=vocab, recipe_cfg=recipe_cfg, train_values=train_values)
    failed = [t.spec["label"] for t in trials if t.final is None]
    if failed:
        raise RuntimeError(f"trials failed: {', '.join(failed)}: {[t.error for t in trials if t.final is None]}")
    variants, finals = list(cfg.train.variants), [t.final for t in trials]
    test = {v: {t: [f["test"][f"test_mae|{v}|{t}"] for f in finals] for t in targets} for v in variants}
    invalid = {v: {t: [f["test"][f"test_invalid|{v}|{t}"] for f in finals] for t in targets} for v in variants}
    median = {v: {t: [f["test"][f"test_medae|{v}|{t}"] for f in finals] for t in targets} for v in variants}
    curves = {v: {t: [[c[f"valid_mae|{v}|{t}"] for c in f["curves"]] for f in finals] for t in targets}
              for v in variants}
    curve_steps = [c["step"] for c in finals[0]["curves"]]
    for v in variants:
        ctx.log(stage="variant", variant=v, **{f"test_mae_{t}": float(np.mean(test[v][t])) for t in targets})
    return {"n_molecules": len(records), "dropped": dropped, "split": {k: int(len(x)) for k, x in split.items()},
            "unshuffled": unshuffled,
            "targets": targets, "variants": variants, "seeds": [s["seed"] for s in specs],
            "vocab_size": len(vocab), "mean_tokens": float(np.mean([len(r["tokens"]) for r in records])),
            "test_mae": test, "test_medae": median, "test_invalid": invalid, "valid_curves": curves,
            "curve_steps": curve_steps,
            "pretrain_steps": cfg.train.pretrain_steps, "losses": [f["losses"] for f in finals],
            "reference": ray.get(ridge)}


# ----------------------------------------------------------------------------- plan


RELEASED_T5 = {"QizhiPei/3d-molt5-base": {"d_model": 768, "d_ff": 2048, "layers": 12, "heads": 12}}
"""the T5 shape of a released checkpoint: 3D-MolT5 builds its model from google/t5-v1_1-base's
config (the official 3d_molt5/configs/default.yaml, model.name) and resizes the vocabulary"""
ENC_LEN, DEC_LEN = 32, 8
"""padded lengths a batch is measured at: QM9's SELFIES run to ~25 tokens (9 heavy atoms with
branch and ring tokens) + <bom>, <eom> and the prompt; a target is a number of at most 6 characters
and </s> (span corruption's targets are shorter)"""
TASK_BASE_BYTES = 300 * 2**20
"""a Ray worker with RDKit, E3FP, selfies (or scikit-learn) imported"""


def _variants(cfg: Config, vocab_size: int):
    """The Variants module of one seed, as MolRecipe.build_model makes it, on meta or fake
    tensors: Fusion initialises its 3D table from its token table's std (a value), so it is built
    on a real 2-row stand-in and handed the T5's table afterwards."""
    import torch
    from torch import nn
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from .molt5 import Fusion, MolT5, Variants, build_t5, t5_config, variant_mode

    m = cfg.model
    shape = RELEASED_T5[m.checkpoint] if m.checkpoint else \
        {"d_model": m.d_model, "d_ff": m.d_ff, "layers": m.layers, "heads": m.heads}
    models = {}
    for v in cfg.train.variants:
        t5 = build_t5(t5_config(vocab_size, dropout=m.dropout, **shape))
        with unset_fake_temporarily(), torch.device("cpu"):
            fusion = Fusion(nn.Embedding(2, shape["d_model"]), variant_mode(v), cfg.tokens.bits)
        fusion.token = t5.get_input_embeddings()
        one = MolT5.__new__(MolT5)
        nn.Module.__init__(one)
        one.t5, one.fusion = t5, fusion
        models[v] = one
    return Variants(models)


def plan(cfg: Config) -> list:
    """The conformers tokenised (one Ray task per chunk), the ridge reference (one task), and one
    Tune trial per seed training every variant side by side (ZeRO-0, fp32 measured at the
    per-worker micro-batch, ENC_LEN x DEC_LEN tokens)."""
    import math

    from ...plan import Tasks, Train, module, module_footprint
    from .molt5 import VIEWS, vocabulary

    d, t = cfg.data, cfg.train
    V = len(vocabulary([], list(t.targets)))
    micro = -(-t.batch // t.num_workers)

    def build():
        import torch

        net = _variants(cfg, V)
        L = cfg.tokens.level + 1
        batch = {}
        for view in {VIEWS[v] for v in t.variants}:
            batch.update({f"{view}_ids": torch.zeros(micro, ENC_LEN, dtype=torch.long),
                          f"{view}_fp": torch.zeros(micro, ENC_LEN, L, dtype=torch.long),
                          f"{view}_mask": torch.ones(micro, ENC_LEN, dtype=torch.long),
                          f"{view}_labels": torch.zeros(micro, DEC_LEN, dtype=torch.long)})
        return net, lambda n: n(batch)

    source = f"the T5 of {cfg.model.checkpoint} (T5-v1.1-base shape, RELEASED_T5), vocabulary resized" \
        if cfg.model.checkpoint else "the model section's T5 (t5_config)"
    model = module(f"{len(t.variants)} variants", lambda: _variants(cfg, V),
                   source=f"{source}, x {len(t.variants)} variants with their 3D tables; vocabulary {V} (selfies' "
                          "robust alphabet and the specials: tokens seen only in the data not counted)")
    chunks = math.ceil(d.molecules / cfg.tokens.chunk)
    return [
        Tasks("tokenisation", None, chunks, TASK_BASE_BYTES + 8 * 2**10 * cfg.tokens.chunk,
              note=f"{d.molecules:,} conformers in chunks of {cfg.tokens.chunk:,} (SELFIES + E3FP); memory: the "
                   "imports and ~8 KiB a molecule (coordinates, tokens, identifiers)"),
        Tasks("ridge reference", None, 1, TASK_BASE_BYTES + 8 * 2**10 * d.molecules,
              note="ridge on E3FP identifier counts; memory: the records and the sparse count matrix built from "
                   "Python lists (~8 KiB a molecule)"),
        Train("seeds", t, t.num_workers, t.seeds, model, t.pretrain_steps + t.steps, micro * t.num_workers, micro,
              footprint=module_footprint(build), concurrent=t.max_concurrent_trials,
              note=f"{t.pretrain_steps:,} span-corruption + {t.steps:,} fine-tuning steps, the validation MAE "
                   f"(greedy decoding) every {t.eval_every:,}, not counted"
                   + ("; prepare() refuses model.checkpoint at present (docs/studies/molt5_3d.md)"
                      if cfg.model.checkpoint else "")),
    ]
