"""Typed settings of the RL pieces, importable without RLlib (study configs embed them)."""
from __future__ import annotations

from pydantic import Field

from ..config import Section


class SACSettings(Section):
    """SAC's settings for one decorated (or plain) SAC run; the defaults are the official Policy
    Decorator scripts'. Step counts are SAC steps (env steps of the env the algorithm sees: a
    chunked residual's SAC step is a whole action chunk)."""

    gamma: float = Field(0.97, gt=0, le=1)
    """discount"""
    tau: float = Field(0.01, gt=0, le=1)
    """soft target-network update rate"""
    lr: float = Field(1e-4, gt=0)
    """learning rate of the actor, the critics and the entropy coefficient"""
    batch: int = Field(1024, ge=1)
    """transitions per gradient update"""
    buffer: int = Field(1_000_000, ge=1)
    """replay capacity in transitions"""
    learning_starts: int = Field(8000, ge=0)
    """steps sampled before the first update"""
    utd: float = Field(0.25, gt=0)
    """gradient updates per step sampled (the update-to-data ratio)"""
    initial_entropy_alpha: float = Field(1.0, gt=0)
    """SAC's entropy coefficient at the start, learned from there towards the target entropy (the
    official scripts autotune it from log alpha = 0, i.e. 1.0; their fixed 0.2 applies only with
    autotuning off)"""
    grad_clip: float = Field(50.0, gt=0)
    """global gradient-norm clip of each network's update"""
    hidden: list[int] = Field([256, 256, 256], min_length=1)
    """hidden layer widths of the actor and the critics"""
    num_env_runners: int = Field(0, ge=0)
    """remote env runners (0: sample in the algorithm's own process)"""
    envs_per_runner: int = Field(1, ge=1)
    """vectorised envs per env runner"""
    rollout_fragment: int = Field(8, ge=1)
    """steps per env per sample call"""
    residual_sees_base: bool = False
    """the residual actor also sees a_base(s) (the paper's default input is the observation only)"""
