"""Base-policy training through Ray Train: behaviour cloning of demonstration chunks with a
TorchTrainer, checkpointed as a saved policy directory (``rl.store``) and frozen afterwards."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np


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


def _loop(config: dict[str, Any]) -> None:
    import torch
    from ray import train

    from .base_policies import build
    from .store import save_policy

    torch.set_num_threads(1)
    torch.manual_seed(config["seed"])
    obs, chunks = (torch.from_numpy(np.asarray(x)) for x in (config["obs"], config["chunks"]))
    policy = build(config["kind"], **config["hparams"])
    if hasattr(policy, "fit_bins"):
        policy.fit_bins(chunks.numpy(), seed=config["seed"])
    model = train.torch.prepare_model(policy)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=1e-6)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config["steps"])
    gen = torch.Generator().manual_seed(config["seed"])
    core = model.module if hasattr(model, "module") else model
    every = max(1, config["steps"] // 50)
    curve = []
    for step in range(1, config["steps"] + 1):
        idx = torch.randint(0, len(obs), (min(config["batch"], len(obs)),), generator=gen)
        loss = core.loss(obs[idx], chunks[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % every == 0 or step == config["steps"]:
            curve.append([step, float(loss)])
            metrics = {"step": step, "loss": float(loss)}
            if step == config["steps"] and train.get_context().get_world_rank() == 0:
                metrics["curve"] = curve
                with tempfile.TemporaryDirectory() as d:
                    save_policy(core, d)
                    train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
            else:
                train.report(metrics)


def train_base(kind: str, hparams: dict[str, Any], obs: np.ndarray, chunks: np.ndarray, *, steps: int, batch: int,
               lr: float, seed: int, storage: Path, name: str) -> tuple[Path, list[list[float]]]:
    """Train one base policy with a one-worker TorchTrainer; (saved policy directory, loss curve
    [[step, loss], ...] at 50 points)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    full = {"obs_dim": int(obs.shape[1]), "act_dim": int(chunks.shape[2]), "pred_horizon": int(chunks.shape[1]),
            **hparams}
    trainer = TorchTrainer(_loop, train_loop_config={"kind": kind, "hparams": full, "obs": obs, "chunks": chunks,
                                                     "steps": steps, "batch": batch, "lr": lr, "seed": seed},
                           scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(storage_path=str(storage), name=name))
    result = trainer.fit()
    if result.error is not None:
        raise result.error
    return Path(result.checkpoint.path), result.metrics["curve"]
