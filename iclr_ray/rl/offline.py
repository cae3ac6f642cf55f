"""Base-policy training through Ray Train: behaviour cloning of demonstration chunks on the shared
Train loop (``llm.train``), checkpointed as a saved policy directory (``rl.store``) and frozen
afterwards."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..llm.recipe import Recipe


def stack_frames(obs: np.ndarray, k: int) -> np.ndarray:
    """Each step's last k observations, oldest first, the first repeated at the start: what
    ``rl.envs.ObsHistory`` shows the policy online."""
    idx = np.maximum(np.arange(len(obs))[:, None] - np.arange(k - 1, -1, -1)[None], 0)
    return obs[idx].reshape(len(obs), -1)


def training_arrays(demos, pred_horizon: int, obs_horizon: int = 1,
                    successful_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(observations stacked ``obs_horizon`` deep, action chunks) of every step of the
    (successful) demonstration episodes."""
    from .base_policies import demo_chunks

    obs, chunks = [], []
    for (o, a), ok in zip(demos.episodes(), demos.success):
        if ok or not successful_only:
            x, y = demo_chunks(stack_frames(o, obs_horizon) if obs_horizon > 1 else o, a, pred_horizon)
            obs.append(x)
            chunks.append(y)
    if not obs:
        raise ValueError("no successful demonstration episodes to learn from")
    return np.concatenate(obs), np.concatenate(chunks)


class BCRecipe(Recipe):
    """Behaviour cloning of demonstration chunks as a recipe of the shared Ray Train loop
    (``llm.train.fit_recipe``): the loss of a batch is the policy's loss times its samples, so the
    loop's per-unit normalisation gives the policy's mean loss; a step's samples and its loss's
    noise (a Diffusion Policy's timesteps and noise) are drawn from the step number, so a resumed
    run trains on what it would have. The model is saved as a policy directory (``rl.store``)."""

    def __init__(self, kind: str, hparams: dict[str, Any], demos, obs_horizon: int, normalize_obs: bool, seed: int):
        self.kind, self.hparams, self.demos_ref = kind, hparams, demos
        self.obs_horizon, self.normalize_obs, self.seed = obs_horizon, normalize_obs, seed

    def setup(self) -> None:
        import ray
        import torch

        demos = ray.get(self.demos_ref) if isinstance(self.demos_ref, ray.ObjectRef) else self.demos_ref
        hp = self.hparams
        obs, chunks = training_arrays(demos, hp["pred_horizon"], self.obs_horizon)
        if obs.shape[1] != hp["obs_dim"] or chunks.shape[2] != hp["act_dim"]:
            raise ValueError(f"demonstrations have obs dim {obs.shape[1]} and action dim {chunks.shape[2]}, the env "
                             f"{hp['obs_dim']} and {hp['act_dim']}")
        self.obs, self.chunks = torch.from_numpy(obs), torch.from_numpy(chunks)

    def build_model(self, cfg):
        import torch

        from .base_policies import build

        torch.manual_seed(cfg.seed)
        policy = build(self.kind, **self.hparams)
        if self.normalize_obs:
            policy.fit_normalizer(self.obs.numpy())
        if hasattr(policy, "fit_bins"):
            policy.fit_bins(self.chunks.numpy(), seed=cfg.seed)
        return policy

    def step_seed(self, step: int) -> int:
        return self.seed * 1_000_003 + step

    def step_batches(self, step: int, cfg) -> list[tuple[dict[str, Any], int]]:
        import torch

        gen = torch.Generator().manual_seed(self.step_seed(step))
        n = min(cfg.micro_batch_size, len(self.obs))
        out = []
        for i in range(cfg.grad_accum * cfg.num_workers):
            idx = torch.randint(0, len(self.obs), (n,), generator=gen)
            out.append(({"obs": self.obs[idx], "chunk": self.chunks[idx],
                         "seed": torch.tensor(self.step_seed(step) * 64 + i)}, n))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        import torch

        torch.manual_seed(int(batch["seed"]))  # the loss's own noise (diffusion timesteps and noise)
        return engine.module.loss(batch["obs"], batch["chunk"]) * len(batch["obs"])

    def units(self, batch: dict[str, Any]) -> int:
        return len(batch["obs"])

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        from .store import save_policy

        if rank == 0:
            save_policy(engine.module, path / POLICY_DIR)


POLICY_DIR = "policy"


def train_base(kind: str, hparams: dict[str, Any], demos, *, obs_dim: int, act_dim: int, obs_horizon: int = 1,
               steps: int, batch: int, lr: float, seed: int, storage: str | Path, name: str,
               normalize_obs: bool = True, weight_decay: float = 1e-6,
               resources: dict[str, Any] | None = None) -> tuple[str, list[list[float]]]:
    """Train one base policy on one Ray Train worker, through the shared loop, on the (successful)
    demonstrations' action chunks (:func:`training_arrays`); (the saved policy directory's location
    in the final checkpoint, loss curve [[step, loss], ...] at about 20 points, each the mean over
    the steps since the last). ``storage``: where Ray Train keeps the run (a path or a URI every
    node reaches); the returned location is in it (``rl.store.load_policy`` reads it anywhere).

    ``demos``: :class:`~iclr_ray.rl.store.Demos` or an ObjectRef to them, e.g. of the Ray task
    still recording them, so the Train run starts meanwhile. ``obs_dim`` is the env's observation
    size with ``obs_horizon`` frames stacked, ``act_dim`` its action size. ``normalize_obs``: the
    policy standardises observations with the training set's statistics (``fit_normalizer``);
    ``weight_decay``: AdamW's (the official Diffusion Policy scripts' 1e-6; their BeT script's 2e-4);
    ``resources``: the worker's request (``resources.worker_resources`` of the caller's section;
    None: one CPU).
    AdamW keeps torch's default betas and the lr decays on a cosine without warmup or clipping.
    Rerunning into the same ``storage``/``name`` resumes from the last checkpoint."""
    from .. import storage as store
    from ..llm.train import TrainConfig, checkpoint_location, fit_recipe, read_steps
    from .base_policies import pred_horizon

    full = {"obs_dim": int(obs_dim), "act_dim": int(act_dim), "pred_horizon": pred_horizon(kind, hparams), **hparams}
    cfg = TrainConfig(model=f"bc-{kind}", micro_batch_size=batch, grad_accum=1, max_steps=steps, lr=lr,
                      betas=(0.9, 0.999), weight_decay=weight_decay, schedule="cosine", warmup_steps=0, grad_clip=0.0,
                      zero_stage=0, num_workers=1, log_every=max(1, steps // 20), seed=seed, **(resources or {}))
    result = fit_recipe(cfg, BCRecipe(kind, full, demos, obs_horizon, normalize_obs, seed), storage, name)
    curve = [[s["step"], s["loss"]] for s in read_steps(storage, name)]
    return store.join(checkpoint_location(result.checkpoint), POLICY_DIR), curve
