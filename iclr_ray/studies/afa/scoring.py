"""Scoring one model at one seed: pure functions of the model, the evaluator and the held-out
digits (no Ray, no files; run.py's ``evaluate`` task loads them and calls these). The model may sit
on a GPU (``device``: where its weights are; an output average has no ``parameters()`` to ask):
inputs are made on the host and moved there, results come back to the host.

- :func:`denoising`: the eps-prediction MSE on held-out rows (overall and per class) and, for an
  AFA ensemble, the weight its maps give each expert per class, location and timestep bin;
- :func:`generated`: digits drawn by DDIM with classifier-free guidance, the classifier's accuracy
  for the requested class and the Fréchet distance of its features to the real held-out digits';
- :func:`afa_maps`: AFA's maps of given digits noised to given timesteps, for the figure."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import data as D
from .afa import AFA, ensemble_loss

T_BINS = 10
"""timestep bins of the routing-over-t measurement"""


def mse_rows(test: D.Digits, draws: int, seed: int) -> dict[str, Any]:
    """Every held-out digit ``draws`` times with its (t, noise), seeded: the same rows for every
    model of a seed."""
    idx = np.tile(np.arange(len(test)), draws)
    rows = D.noised_rows(test, idx, np.random.default_rng([seed, 11]))
    rows["labels"] = test.labels[idx]
    return rows


@torch.no_grad()
def denoising(model, rows: dict[str, Any], batch: int, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The held-out MSE of eps(x_t, t, tokens) overall and per class; for an :class:`AFA` model, its
    maps' mean weight on each expert (over pixels and rows) per class and location, and per class,
    timestep bin and location (None for an empty bin)."""
    from ...diffusion.sampling import ddpm

    is_afa = isinstance(model, AFA)
    sched = ddpm()
    per_row, weights = [], []
    for i in range(0, len(rows["x0"]), batch):
        if is_afa:
            model.record = {}
        part = {k: rows[k][i:i + batch].to(device) for k in ("x0", "tokens", "t", "noise")}
        per_row.append(ensemble_loss(model, sched, part["x0"], part["tokens"], part["t"], part["noise"]).float().cpu())
        if is_afa:  # (rows, locations, experts): each location's map averaged over its pixels
            weights.append(torch.stack([a.mean((2, 3)) for a in model.record.values()], 1).float().cpu())
            model.record = None
    mse = torch.cat(per_row).numpy()
    labels = rows["labels"]
    out: dict[str, Any] = {"mse": float(mse.mean()),
                           "mse_by_class": [float(mse[labels == k].mean()) for k in range(D.CLASSES)]}
    if is_afa:
        w = torch.cat(weights).numpy()
        bins = np.minimum(rows["t"].numpy() * T_BINS // 1000, T_BINS - 1)
        out["locations"] = [name for name, _ in model.where]
        out["weights_by_class"] = [w[labels == k].mean(0).tolist() for k in range(D.CLASSES)]
        out["weights_by_class_t"] = [[w[(labels == k) & (bins == b)].mean(0).tolist()
                                      if ((labels == k) & (bins == b)).any() else None for b in range(T_BINS)]
                                     for k in range(D.CLASSES)]
    return out


@torch.no_grad()
def generated(model, classifier, test: D.Digits, *, per_class: int, steps: int, guidance: float, batch: int,
              seed: int, grid: bool, device: torch.device | str = "cpu") -> dict[str, Any]:
    """``per_class`` digits of every class drawn by DDIM with CFG from noise seeded by ``seed`` (the
    same for every model), scored by the classifier: accuracy for the requested class (overall and
    per class) and the Fréchet distance of its features to the real held-out digits'; ``grid``:
    the first digit of each class for the figure."""
    from ...diffusion.fid import frechet_distance
    from ...diffusion.model import NULL
    from ...diffusion.sampling import sample, to_unit
    from .classify import features, predict

    side = test.images.shape[-1]
    want = np.repeat(np.arange(D.CLASSES), per_class)
    gen = torch.Generator().manual_seed(seed)
    images = []
    for i in range(0, len(want), batch):
        tok = D.tokens(want[i:i + batch]).to(device)
        x = sample(model, (len(tok), 1, side, side), tok, torch.full_like(tok, NULL), steps=steps,
                   guidance=guidance, generator=gen)
        images.append(to_unit(x).float().cpu())
    images = torch.cat(images)
    pred = predict(classifier, images)
    real = D.to_model(test.images) / 2 + 0.5
    out: dict[str, Any] = {
        "accuracy": float((pred == want).mean()),
        "accuracy_by_class": [float((pred[want == k] == k).mean()) for k in range(D.CLASSES)],
        "fid": frechet_distance(features(classifier, images), features(classifier, real))}
    if grid:
        out["grid"] = images[np.arange(D.CLASSES) * per_class, 0].numpy().round(3).tolist()
    return out


@torch.no_grad()
def afa_maps(model: AFA, x0: torch.Tensor, labels: np.ndarray, timesteps: list[int], seed: int) -> dict[str, Any]:
    """The aggregation maps (every location, every expert) for digits ``x0`` (model space) noised
    to each of ``timesteps`` with the same noise, captioned with their labels."""
    from ...diffusion.sampling import add_noise, ddpm

    sched = ddpm()
    device = next(model.parameters()).device
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(seed)).to(device)
    x0 = x0.to(device)
    out: dict[str, Any] = {"labels": [int(v) for v in labels], "timesteps": list(timesteps), "maps": []}
    for t in timesteps:
        tt = torch.full((len(x0),), t, device=device)
        model.record = {}
        model(add_noise(sched, x0, noise, tt), tt, D.tokens(labels).to(device))
        out["maps"].append({k: v.float().cpu().numpy().round(3).tolist() for k, v in model.record.items()})
        model.record = None
    return out
