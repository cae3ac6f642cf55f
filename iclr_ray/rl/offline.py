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
    import ray
    import torch
    from ray import train

    from .base_policies import build
    from .store import save_policy

    torch.set_num_threads(1)
    torch.manual_seed(config["seed"])
    demos = config["demos"]
    if isinstance(demos, ray.ObjectRef):  # still being recorded while this worker started
        demos = ray.get(demos)
    hp = config["hparams"]
    obs, chunks = training_arrays(demos, hp["pred_horizon"], config["obs_horizon"])
    if obs.shape[1] != hp["obs_dim"] or chunks.shape[2] != hp["act_dim"]:
        raise ValueError(f"demonstrations have obs dim {obs.shape[1]} and action dim {chunks.shape[2]}, the env "
                         f"{hp['obs_dim']} and {hp['act_dim']}")
    obs, chunks = torch.from_numpy(obs), torch.from_numpy(chunks)
    policy = build(config["kind"], **hp)
    if config["normalize_obs"]:
        policy.fit_normalizer(obs.numpy())
    if hasattr(policy, "fit_bins"):
        policy.fit_bins(chunks.numpy(), seed=config["seed"])
    model = train.torch.prepare_model(policy)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config["steps"])
    gen = torch.Generator().manual_seed(config["seed"])
    core = model.module if hasattr(model, "module") else model
    # the loss curve keeps 50 points; Train hears of 10 of them (a report waits for the
    # controller's next poll, ~0.1 s here, so 50 of them cost a 200-step smoke base ~4 s)
    every, report_every = max(1, config["steps"] // 50), max(1, config["steps"] // 10)
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
        if step == config["steps"]:
            metrics["curve"] = curve
            if train.get_context().get_world_rank() == 0:
                with tempfile.TemporaryDirectory() as d:
                    save_policy(core, d)
                    train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
            else:
                train.report(metrics)
        elif step % report_every == 0:
            train.report(metrics)


def train_base(kind: str, hparams: dict[str, Any], demos, *, obs_dim: int, act_dim: int, obs_horizon: int = 1,
               steps: int, batch: int, lr: float, seed: int, storage: Path, name: str,
               normalize_obs: bool = True, weight_decay: float = 1e-6) -> tuple[Path, list[list[float]]]:
    """Train one base policy with a one-worker TorchTrainer on the (successful) demonstrations'
    action chunks (:func:`training_arrays`); (saved policy directory, loss curve [[step, loss],
    ...] at 50 points).

    ``demos``: :class:`~iclr_ray.rl.store.Demos` or an ObjectRef to them, e.g. of the Ray task
    still recording them, so the Train run starts meanwhile. ``obs_dim`` is the env's observation
    size with ``obs_horizon`` frames stacked, ``act_dim`` its action size. ``normalize_obs``: the
    policy standardises observations with the training set's statistics (``fit_normalizer``);
    ``weight_decay``: AdamW's (the official Diffusion Policy scripts' 1e-6; their BeT script's 2e-4)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from .base_policies import pred_horizon

    full = {"obs_dim": int(obs_dim), "act_dim": int(act_dim), "pred_horizon": pred_horizon(kind, hparams), **hparams}
    trainer = TorchTrainer(_loop, train_loop_config={"kind": kind, "hparams": full, "demos": demos,
                                                     "obs_horizon": obs_horizon, "normalize_obs": normalize_obs,
                                                     "steps": steps, "batch": batch,
                                                     "lr": lr, "weight_decay": weight_decay, "seed": seed},
                           scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(storage_path=str(storage), name=name))
    result = trainer.fit()
    if result.error is not None:
        raise result.error
    return Path(result.checkpoint.path), result.metrics["curve"]
