"""orion on Ray: per model and task, one Ray task runs every prompt clean (the model's answers, the
filter, x1's last-token residuals at every layer), then one Ray task per band of layers patches
them into x2 (request patching and its two negative controls); per model, one more task runs the
oversight experiment at the layer the nanoQA sweep selected. Every task loads its model from the
local cache (a packaged model is converted once, in ``prepare``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from ...resources import task_options
from ...runtime import RunContext
from . import analysis, tasks
from .config import TINY, Config

PATCH_KEYS = ("r2c2", "r1c2", "r1c1", "p_r1c2", "logit_diff", "unrelated_r1c2", "unrelated_r2c2", "noise_r1c2",
              "noise_r2c2", "x1_top1", "same_r2c2", "same_r2c3")
"""what a layer band records per layer and pair"""
UNRELATED = "The weather was mild all week, and the farmers of the valley began to plant their fields"
"""the unrelated prompt of the first negative control (its last-token residual is patched in)"""


@dataclass
class Inputs:
    layers: dict[str, int]
    """blocks per model"""
    labels: dict[str, str]


def prepare(cfg: Config) -> Inputs:
    """Every model installed (a packaged one converted once, here), its layer count read; a fixed
    oversight layer within every model. Anything wrong exits 2 before Ray starts."""
    from ...config import ConfigError

    layers, labels = {}, {}
    for name in cfg.models:
        if name == TINY:
            from ...llm.model import TINY_MODELS

            layers[name], labels[name] = TINY_MODELS["mini-llama"]["num_hidden_layers"], "random tiny Llama (smoke)"
            continue
        from ...llm import pretrained

        pretrained.check_available(name)
        conf = pretrained.load_config(name)
        n = getattr(conf, "num_hidden_layers", None) or getattr(conf, "n_layer", None)
        if not n:
            raise ConfigError(f"cannot read the number of layers of model {name!r}")
        layers[name] = int(n)
        labels[name] = pretrained.PACKAGED[name].note if name in pretrained.PACKAGED else name
    if cfg.oversight.layer is not None:
        short = [m for m, n in layers.items() if cfg.oversight.layer >= n]
        if short:
            raise ConfigError(f"oversight.layer {cfg.oversight.layer}: {short[0]} has {layers[short[0]]} layers")
    return Inputs(layers, labels)


# -- inside the Ray tasks ---------------------------------------------------------------------------

def all_task_texts(cfg: dict[str, Any]) -> list[str]:
    """Every prompt and answer the run uses (the tiny model's tokenizer is fitted to them)."""
    out = [UNRELATED]
    for name in cfg["tasks"]:
        t = build_task(name, cfg)
        out += [p.text + p.answer for p in t.grid()]
    t = oversight_task(cfg)
    out += [p.text + p.answer for p in t.grid()]
    return out


def load_model(name: str, cfg: dict[str, Any]):
    """(model, tokenizer) in eval mode on the task's device (its GPU where Ray gave it one), one
    torch thread (Ray gives each task one CPU)."""
    import torch

    from ...llm.model import inference_device

    torch.set_num_threads(1)
    if name == TINY:
        from ...llm.model import build_model, build_tokenizer

        tok = build_tokenizer(all_task_texts(cfg), vocab_size=600)
        model = build_model("mini-llama", tok, seed=cfg["seed"])
    else:
        from ...llm import pretrained

        model, tok = pretrained.load(name, dtype=getattr(torch, cfg["dtype"]))
    return model.to(inference_device()).eval(), tok


def build_task(name: str, cfg: dict[str, Any]) -> tasks.Task:
    n = cfg["contexts"] if name != "induction" else max(2, cfg["contexts"] // 2)
    return tasks.build(name, n, cfg["seed"])


def oversight_task(cfg: dict[str, Any], distractor: bool = True) -> tasks.Task:
    import random

    o = cfg["oversight"]
    # one more story than asked: the last is the trusted input (never distracted, never scored)
    return tasks.nanoqa(o["stories"] + 1, random.Random(f"oversight:{cfg['seed']}"),
                        o["distractor"] if distractor else None)


def _batches(n: int, size: int):
    return [list(range(i, min(n, i + size))) for i in range(0, n, size)]


def _clean_all(model, tok, texts: list[str], batch: int):
    """(logits [N, V], residuals [N, L, d]) of every text, in batches."""
    import torch

    from . import patching

    enc = patching.encode(tok, texts)
    logits, res = [], []
    for idx in _batches(len(texts), batch):
        lg, r = patching.clean(model, enc.rows(idx))
        logits.append(lg)
        res.append(r)
    return torch.cat(logits), torch.cat(res)


def clean_cell(model_name: str, task_name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Every prompt of the task clean: accuracy (exact first-token ids; the soft match beside it),
    the filtered pairs, x1's residuals at every layer, the same-request control's x4 = (C3, R2)
    residuals, the clean probabilities the patched ones are normalised by and each pair's
    random-guess rate of R1(C2)."""
    from . import patching

    model, tok = load_model(model_name, cfg)
    task = build_task(task_name, cfg)
    grid = task.grid()
    logits, res = _clean_all(model, tok, [p.text for p in grid], cfg["batch"])
    first = [patching.first_token(tok, p.answer) for p in grid]
    correct = patching.hits(tok, logits, first)
    index = {(p.context, p.request): i for i, p in enumerate(grid)}
    usable = (lambda c, r: correct[index[(c, r)]]) if cfg["filter_correct"] else (lambda c, r: True)

    def first_of(text):
        return patching.first_token(tok, text)

    pairs = tasks.pairs(task, usable, first_of, cfg["pairs"], cfg["seed"])
    c3 = tasks.same_request_contexts(task, pairs, usable, first_of, cfg["seed"])
    x1 = [index[(p.c1, p.r1)] for p in pairs]
    x2 = [index[(p.c2, p.r2)] for p in pairs]
    x3 = [index[(p.c2, p.r1)] for p in pairs]
    x4 = [index[(c, p.r2)] if c is not None else i for c, p, i in zip(c3, pairs, x2)]  # none: x2 itself, unscored
    p_clean = patching.probs_at(logits[x3], [first[i] for i in x3]) if pairs else []
    _, unrelated = patching.clean(model, patching.encode(tok, [UNRELATED]))
    empty = np.zeros((0,) + tuple(res.shape[1:]), np.float32)
    return {"model": model_name, "task": task_name, "prompts": len(grid), "accuracy": float(np.mean(correct)),
            "accuracy_soft": float(np.mean(patching.hits(tok, logits, first, soft=True))),
            "pairs": [[p.c1, p.r1, p.c2, p.r2] for p in pairs], "c3": c3,
            "chance": [tasks.chance_rate(task, p.r1, first_of) for p in pairs],
            "x2_texts": [grid[i].text for i in x2],
            "targets": {"r2c2": [first[i] for i in x2], "r1c2": [first[i] for i in x3], "r1c1": [first[i] for i in x1],
                        "r2c3": [first[i] for i in x4],
                        "x1_top1": logits[x1].argmax(-1).tolist() if pairs else []},
            "p_clean": p_clean, "residual_x1": res[x1].numpy() if pairs else empty,
            "residual_x4": res[x4].numpy() if pairs else empty,
            "residual_unrelated": unrelated[0].numpy(), "example": grid[x2[0]].text if pairs else grid[0].text}


def patch_band(model_name: str, clean: dict[str, Any], layers: list[int], cfg: dict[str, Any]) -> dict[str, Any]:
    """Request patching of every pair at every layer of the band (exact first-token hits; the soft
    match as ``*_soft``), the same-request control (x4 = (C3, R2)'s residual: R2(C2) expected,
    R2(C3) if the patch moved the answer), and two off-distribution checks: the unrelated prompt's
    residual, and noise of the patched residual's norm."""
    import torch

    from . import patching

    model, tok = load_model(model_name, cfg)
    t = clean["targets"]
    n = len(clean["pairs"])
    out = {k: [[] for _ in layers] for k in (*PATCH_KEYS, "r2c2_soft", "r1c2_soft", "r1c1_soft")}
    if n == 0:
        return {"layers": layers, **out}
    enc = patching.encode(tok, clean["x2_texts"])
    x1 = torch.from_numpy(clean["residual_x1"])
    x4 = torch.from_numpy(clean["residual_x4"])
    unrelated = torch.from_numpy(clean["residual_unrelated"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    for idx in _batches(n, cfg["batch"]):
        patcher = patching.Patcher(model, enc.rows(idx))
        sel = {k: [v[i] for i in idx] for k, v in t.items()}
        for j, layer in enumerate(layers):
            lg = patcher(layer, x1[idx, layer])
            for key in ("r2c2", "r1c2", "r1c1"):
                out[key][j] += [int(h) for h in patching.hits(tok, lg, sel[key])]
                out[f"{key}_soft"][j] += [int(h) for h in patching.hits(tok, lg, sel[key], soft=True)]
            out["x1_top1"][j] += [int(h) for h in patching.is_top(lg, sel["x1_top1"])]
            out["p_r1c2"][j] += patching.probs_at(lg, sel["r1c2"])
            out["logit_diff"][j] += patching.logit_diff(lg, sel["r1c2"], sel["r2c2"])
            for ctrl, residual in (("unrelated", unrelated[layer].expand(len(idx), -1)),
                                   ("noise", patching.matched_noise(x1[idx, layer], gen))):
                lg = patcher(layer, residual)
                out[f"{ctrl}_r1c2"][j] += [int(h) for h in patching.hits(tok, lg, sel["r1c2"])]
                out[f"{ctrl}_r2c2"][j] += [int(h) for h in patching.hits(tok, lg, sel["r2c2"])]
            lg = patcher(layer, x4[idx, layer])
            out["same_r2c2"][j] += [int(h) for h in patching.hits(tok, lg, sel["r2c2"])]
            out["same_r2c3"][j] += [int(h) for h in patching.hits(tok, lg, sel["r2c3"])]
    return {"layers": layers, **out}


def oversight(model_name: str, layer: int, n_layers: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Distracted stories answered plainly and with the trusted story's last-token residual
    patched in at ``layer`` (L*, what the claim reads) and, for the figure, at every layer; the
    distractor-free stories as the reference."""
    from . import patching

    model, tok = load_model(model_name, cfg)
    dis, plain = oversight_task(cfg), oversight_task(cfg, distractor=False)
    n = len(dis.contexts) - 1
    trusted = plain.prompt(n, "city")
    _, res = patching.clean(model, patching.encode(tok, [trusted.text]))
    texts = [dis.prompt(c, "city").text for c in range(n)]
    truth = [patching.first_token(tok, dis.answer(c, "city")) for c in range(n)]
    other = [patching.first_token(tok, " " + dis.contexts[c]["other"]) for c in range(n)]
    enc = patching.encode(tok, texts)
    out: dict[str, Any] = {"layer": layer, "plain": [], "patched": [], "plain_distractor": [],
                           "patched_distractor": [], "plain_soft": [], "patched_soft": [],
                           "by_layer": [[] for _ in range(n_layers)]}
    lg_ref, _ = _clean_all(model, tok, [plain.prompt(c, "city").text for c in range(n)], cfg["batch"])
    out["no_distractor"] = [int(h) for h in patching.hits(tok, lg_ref, truth)]
    for idx in _batches(n, cfg["batch"]):
        patcher = patching.Patcher(model, enc.rows(idx))
        sel_t, sel_o = [truth[i] for i in idx], [other[i] for i in idx]
        lg_plain = patcher()
        out["plain"] += [int(h) for h in patching.hits(tok, lg_plain, sel_t)]
        out["plain_soft"] += [int(h) for h in patching.hits(tok, lg_plain, sel_t, soft=True)]
        out["plain_distractor"] += [int(h) for h in patching.hits(tok, lg_plain, sel_o)]
        for at in range(n_layers):
            lg = patcher(at, res[0, at].expand(len(idx), -1))
            right = [int(h) for h in patching.hits(tok, lg, sel_t)]
            out["by_layer"][at] += right
            if at == layer:
                out["patched"] += right
                out["patched_soft"] += [int(h) for h in patching.hits(tok, lg, sel_t, soft=True)]
                out["patched_distractor"] += [int(h) for h in patching.hits(tok, lg, sel_o)]
    out["example"] = texts[0]
    return out


# -- the run ----------------------------------------------------------------------------------------

def bands(n_layers: int, k: int) -> list[list[int]]:
    """The layers 0..n-1 in ``k`` contiguous bands (fewer when there are fewer layers)."""
    return [b.tolist() for b in np.array_split(np.arange(n_layers), min(k, n_layers)) if len(b)]


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    inputs: Inputs = ctx.inputs
    c = cfg.model_dump()
    opts = task_options(cfg, stage="orion: patching")
    clean_task, band_task = ray.remote(clean_cell).options(**opts), ray.remote(patch_band).options(**opts)
    cleans = {(m, t): clean_task.remote(m, t, c) for m in cfg.models for t in cfg.tasks}
    band_refs = {}
    for (m, t), ref in cleans.items():
        band_refs[(m, t)] = [band_task.remote(m, ref, layers, c)
                             for layers in bands(inputs.layers[m], cfg.layer_bands)]
    total = len(cleans) + sum(len(v) for v in band_refs.values())
    ctx.say("request patching: %d models x %d tasks, %d Ray tasks (clean runs, then %d layer bands each)",
            len(cfg.models), len(cfg.tasks), total, cfg.layer_bands)
    flat = list(cleans.values()) + [r for v in band_refs.values() for r in v]
    ctx.wait_all(flat, "clean runs and patched layer bands")
    cells = []
    for (m, t), ref in cleans.items():
        clean = ray.get(ref)
        cell = {k: clean[k] for k in ("model", "task", "prompts", "accuracy", "accuracy_soft", "pairs", "c3",
                                      "chance", "p_clean", "example")}
        cell["per_layer"] = analysis.merge_bands(ray.get(band_refs[(m, t)]))
        cell["selected_layer"] = analysis.select_layer(cell)
        cells.append(cell)
        ctx.log(kind="cell", model=m, task=t, accuracy=cell["accuracy"], pairs=len(cell["pairs"]),
                selected_layer=cell["selected_layer"])
        ctx.say("%s / %s: clean accuracy %.2f, %d pairs, selected layer %s", m, t, cell["accuracy"],
                len(cell["pairs"]), cell["selected_layer"])
    over_refs = {}
    for m in cfg.models:
        layer = cfg.oversight.layer
        if layer is None:
            nano = [x for x in cells if x["model"] == m and x["task"] == "nanoqa" and x["selected_layer"] is not None]
            layer = nano[0]["selected_layer"] if nano else inputs.layers[m] // 2
        over_refs[m] = ray.remote(oversight).options(**opts).remote(m, layer, inputs.layers[m], c)
    over = dict(zip(over_refs, ctx.wait_all(list(over_refs.values()), "oversight: distracted stories")))
    for m, o in over.items():
        ctx.log(kind="oversight", model=m, layer=o["layer"], plain=float(np.mean(o["plain"])),
                patched=float(np.mean(o["patched"])))
    return {"models": {m: {"layers": inputs.layers[m], "label": inputs.labels[m], "pretrained": m != TINY}
                       for m in cfg.models},
            "cells": cells, "oversight": over}


def plan(cfg: Config) -> list:
    """Per model and task a clean run, then its layer bands; per model an oversight task. Every
    task holds one model (in cfg.dtype) and runs prompts of the task builders' lengths in batches
    of cfg.batch, no gradients; a stage's memory is its largest model's, its FLOPs all models'."""
    from ...plan import Tasks, lm

    c = cfg.model_dump()
    width = 4 if cfg.dtype == "float32" else 2
    texts = {t: [p.text for p in build_task(t, c).grid()] for t in cfg.tasks}
    over = max(len(p.text) for p in oversight_task(c).grid())
    # the longest prompt in tokens, at about 3 characters a token
    S = max(max(len(x) for v in texts.values() for x in v), over) // 3 + 1
    clean, band, oversee, mem, sizes = 0.0, 0.0, 0.0, {}, []
    for name in cfg.models:
        m = lm("mini-llama", vocab_size=600) if name == TINY else lm(name)
        mc, P = m.config, m.params
        L = int(getattr(mc, "num_hidden_layers", None) or mc.n_layer)
        d = int(getattr(mc, "hidden_size", None) or mc.n_embd)
        heads = int(getattr(mc, "num_attention_heads", None) or mc.n_head)
        inner = int(getattr(mc, "intermediate_size", None) or getattr(mc, "n_inner", None) or 4 * d)
        kv_dim = d * int(getattr(mc, "num_key_value_heads", None) or heads) // heads
        kv = cfg.batch * S * 2 * L * kv_dim * width  # a batch's key/value cache
        # weights, the prefix cache and the copy each patched run appends to, one layer's MLP and
        # attention scores (an upper bound: eager attention)
        mem[name] = P * width + 2 * kv + cfg.batch * S * (2 * inner + heads * S) * width
        nb = len(bands(L, cfg.layer_bands))
        for t, tx in texts.items():
            tokens = sum(len(x) // 3 + 1 for x in tx)
            clean += 2 * P * tokens
            band += 2 * P * (nb * cfg.pairs * tokens / len(tx) + 3 * cfg.pairs * L)
        oversee += 2 * P * (2 * (cfg.oversight.stories + 1) * (over // 3 + 1) + cfg.oversight.stories * (L + 1))
        sizes.append((name, m, L, nb))
    big = max(sizes, key=lambda s: s[1].params)
    per_model = ", ".join(f"{n} {m.params / 1e6:,.0f} M ({L} layers, {nb} bands, {mem[n] / 2**30:.1f} GiB)"
                          for n, m, L, nb in sizes)
    how = (f"memory: the largest model's (weights in {cfg.dtype}, a batch of {cfg.batch} prompts of ~{S} tokens: its "
           f"key/value cache twice, one layer's MLP and attention scores); per model: {per_model}. "
           f"FLOPs: 2 x params x tokens (prompts at ~3 characters a token)")
    n_cells = len(cfg.models) * len(cfg.tasks)
    n_bands = sum(nb for *_, nb in sizes) * len(cfg.tasks)
    return [Tasks("clean runs", cfg, n_cells, float(max(mem.values())), model=big[1], flops=clean,
                  note=f"{len(cfg.models)} models x {len(cfg.tasks)} tasks, "
                       f"{sum(map(len, texts.values())):,} prompts a model; {how}"),
            Tasks("patched layer bands", cfg, n_bands, float(max(mem.values())), model=big[1], flops=band,
                  note=f"each model-task's layers in up to {cfg.layer_bands} bands; up to {cfg.pairs} pairs, each "
                       f"x2's prefix once a band and 3 one-token patched runs a layer; memory and FLOPs as in clean runs"),
            Tasks("oversight", cfg, len(cfg.models), float(max(mem.values())), model=big[1], flops=oversee,
                  note=f"one a model: {cfg.oversight.stories} distracted stories, plain and patched at every layer")]
