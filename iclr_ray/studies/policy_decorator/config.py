"""policy_decorator config. Defaults are the ``small`` preset, three tasks:

* the slot task (a 2-D peg-in-slot stand-in with a sparse success signal and bimodal
  demonstrations): a Behavior Transformer base from 10 noisy planner demos, the decorator at alpha
  0.3 and H 10k, 30k env steps;
* ManiSkill3 PushCube-v1 on the CPU physics backend (state observations, pd_ee_delta_pose, 100
  steps): a Diffusion Policy base (U-Net channels 32/64, 8-action chunks of which 4 run, DDIM in 4
  steps) from 50 motion-planning demos, the decorator over whole 4-action chunks (as the official
  Diffusion Policy scripts) at alpha 0.2 and H 5k, 15k env steps;
* Adroit door (gymnasium-robotics, 200 steps): an MLP base on two stacked frames from 200 demos of
  our scripted planner (``rl.adroit``) with N(0, 0.1^2) action noise, the decorator at alpha 0.1
  and H 5k, 10k env steps.

Three SAC variants on each: the decorator, the unbounded residual (alpha 1, H 0) and RL from
scratch; the SAC networks are 256 x 256 at the paper's UTD 0.25 on 128 batches (``rl.settings``
holds the SAC settings and their documentation; the official scripts' values are its defaults).
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from ...config import Section, StudyConfig, overrides_of
from ...resources import WorkerResources
from ...rl.settings import SACSettings


class Env(Section):
    suite: Literal["slot", "maniskill", "adroit"] = "slot"
    id: str = "SlotReach"
    max_episode_steps: Optional[int] = Field(None, ge=1)
    kwargs: dict[str, Any] = {}
    control_mode: str = "pd_ee_delta_pose"
    """ManiSkill only"""
    obs_horizon: int = Field(1, ge=1)


class Demos(Section):
    source: Literal["planner", "file", "expert"] = "planner"
    """planner: record the task's planner (slot: its scripted expert; ManiSkill: its motion planner;
    the Adroit door: ``rl.adroit``) here; file: load ``path``; expert: train SAC from scratch on
    the env's dense reward here for ``expert_steps`` env steps (the ``sac`` section's settings,
    alpha 1, H 0) and record its deterministic policy (``rl.expert``), for tasks with neither"""
    path: Optional[str] = None
    """.npz, a ManiSkill .h5 or minari:<id>"""
    episodes: int = Field(20, ge=1)
    noise: float = Field(0.5, ge=0)
    """std of the Gaussian noise added to the planner's (or expert's) actions (the recorded,
    executed actions)"""
    expert_steps: int = Field(100_000, ge=1)
    """env steps of the expert's SAC training (source = expert)"""

    @model_validator(mode="after")
    def _path(self):
        if self.source == "file" and not self.path:
            raise ValueError("demos.source = file needs demos.path")
        return self


class Base(WorkerResources):
    kind: Literal["mlp", "bet", "diffusion"] = "mlp"
    hparams: dict[str, Any] = {"hidden": [64, 64]}
    """the policy's constructor arguments beyond obs_dim / act_dim (rl.base_policies)"""
    steps: int = Field(2000, ge=1)
    batch: int = Field(256, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-6, ge=0)
    """AdamW's (the official Diffusion Policy scripts' 1e-6; their BeT script's 2e-4)"""
    normalize_obs: bool = True
    """standardise observations with the demonstrations' mean and std (the Adroit door mixes joint
    angles with positions; docs/studies/policy_decorator.md compares); the slot and PushCube bases
    of ``small`` were measured without it"""


TaskSAC = overrides_of(SACSettings, "TaskSAC")
"""Per-task SAC values over the shared ``sac`` section (None: the shared value), as the official
scripts set some per task (lr 3e-4 for BeT on PegInsertion/TurnFaucet, gamma 0.9 for PushChair,
learning_starts 8k per env step for the BeT scripts). Step counts are env steps here."""


class Task(Section):
    name: str
    env: Env = Env()
    demos: Demos = Demos()
    base: Base = Base()
    alpha: float = Field(0.1, gt=0)
    """the decorator's residual bound for this task"""
    H: int = Field(10_000, ge=0)
    """the decorator's progressive-exploration horizon (env steps)"""
    env_steps: int = Field(30_000, ge=1)
    sac: TaskSAC = TaskSAC()
    residual_chunk: bool = False
    """the residual acts on whole action chunks: one SAC step is the base's act_horizon env steps,
    its action that many actions (what the official Diffusion Policy scripts do; their BeT scripts
    act per env step). H and learning_starts stay in env steps; utd is per SAC step"""


class Variant(Section):
    name: str
    alpha: Optional[float] = Field(None, gt=0)
    """None: the task's alpha"""
    H: Optional[int] = Field(None, ge=0)
    """None: the task's H"""
    base: bool = True
    """False: decorate a zero base (alpha 1, H 0 make it plain SAC from scratch)"""


class Eval(Section):
    every: int = Field(3000, ge=1)
    """env steps between evaluations"""
    episodes: int = Field(100, ge=2)
    """episodes per evaluation, on the same seeds for the base and every variant at every point
    (the claims' unit: their intervals resample these episodes)"""
    seed: int = 1_000_000
    """evaluation episodes use seeds seed, seed + 1, ... (training never resets with these)"""
    last: int = Field(3, ge=1)
    """evaluations at the end of training whose mean the final success (improves, smoother) takes"""


DEFAULT_VARIANTS = [Variant(name="decorator"), Variant(name="unbounded", alpha=1.0, H=0),
                    Variant(name="rl_scratch", alpha=1.0, H=0, base=False)]


class Config(StudyConfig):
    tasks: list[Task] = Field([# a mediocre MLP base (~0.3) and the alpha and H that the sweep in
                               # docs/studies/policy_decorator.md ("Finding the gain") chose for it
                               Task(name="slot", base=Base(normalize_obs=False), alpha=0.5, H=3000),
                               Task(name="push_cube", env=Env(suite="maniskill", id="PushCube-v1", max_episode_steps=100),
                                    demos=Demos(episodes=50),
                                    base=Base(kind="diffusion", hparams={"channels": [32, 64]}, steps=2000,
                                              normalize_obs=False),
                                    residual_chunk=True, alpha=0.2, H=5000, env_steps=15_000),
                               Task(name="door", env=Env(suite="adroit", id="door", obs_horizon=2),
                                    demos=Demos(episodes=200, noise=0.1),
                                    base=Base(steps=6000, hparams={"hidden": [256, 256, 256]}),
                                    alpha=0.1, H=5000, env_steps=10_000)], min_length=1)
    variants: list[Variant] = Field(DEFAULT_VARIANTS, min_length=1)
    """decorator is the paper's method; unbounded is its ablation (alpha large, H = 0); rl_scratch
    is SAC with no base policy"""
    sac: SACSettings = SACSettings(lr=3e-4, batch=128, buffer=100_000, learning_starts=2000, hidden=[256, 256],
                                   envs_per_runner=4, rollout_fragment=16)
    """SAC for every task (each task's ``sac`` overrides some); step counts in env steps, the chunked
    residual's converted to its SAC steps. The defaults are the official scripts' where this names
    none (gamma, tau, utd, the initial entropy coefficient, the gradient clip)"""
    eval: Eval = Eval()
    max_concurrent_trials: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _unique(self):
        for what, names in (("tasks", [t.name for t in self.tasks]), ("variants", [v.name for v in self.variants])):
            if len(set(names)) != len(names):
                raise ValueError(f"{what} names must be unique, got {names}")
        return self


PRESETS = {
    "smoke": {
        # an MLP base from 20 demos in 2k BC steps: a base that succeeds sometimes, so the curves have
        # a base to keep or lose (docs/studies/policy_decorator.md: what it scores)
        "tasks": [{"name": "slot", "demos": {"episodes": 20}, "base": {"steps": 2000, "normalize_obs": False},
                   "env_steps": 800, "H": 300, "alpha": 0.3}],
        "variants": [{"name": "decorator"}, {"name": "unbounded", "alpha": 1.0, "H": 0}],
        "sac": {"batch": 64, "learning_starts": 200, "hidden": [64, 64], "buffer": 5000, "utd": 0.1},
        "eval": {"every": 400, "episodes": 30, "last": 2},
    },
    # fresh evaluation seeds: the sweep that chose slot's alpha and H was judged on seeds 1e6 onwards
    "small": {"eval": {"seed": 2_000_000}},
    "paper": {
        # the official scripts' SAC (repo defaults) and the README's per-task (alpha, H, steps) for
        # Diffusion Policy on state observations; the -v2 ManiSkill2 tasks map to ManiSkill3 ids.
        # Those scripts count steps of the chunked env (4 env steps each): their H, total steps,
        # learning_starts (8k) and eval interval (50k) are 4x as many env steps here
        "tasks": [
            {"name": "peg_insertion", "env": {"suite": "maniskill", "id": "PegInsertionSide-v1", "obs_horizon": 2},
             "demos": {"source": "file", "path": "demos/PegInsertionSide-v1.state.pd_ee_delta_pose.h5"},
             "base": {"kind": "diffusion", "hparams": {"pred_horizon": 16, "act_horizon": 4, "ddim_steps": 4},
                      "steps": 100_000, "batch": 1024, "lr": 1e-4, "gpus_per_worker": 1},
             "residual_chunk": True, "alpha": 0.1, "H": 120_000, "env_steps": 16_000_000},
            {"name": "turn_faucet", "env": {"suite": "maniskill", "id": "TurnFaucet-v1", "obs_horizon": 2},
             "demos": {"source": "file", "path": "demos/TurnFaucet-v1.state.pd_ee_delta_pose.h5"},
             "base": {"kind": "diffusion", "hparams": {"pred_horizon": 16, "act_horizon": 4, "ddim_steps": 4},
                      "steps": 100_000, "batch": 1024, "lr": 1e-4, "gpus_per_worker": 1},
             "residual_chunk": True, "alpha": 0.1, "H": 400_000, "env_steps": 8_000_000},
            {"name": "door", "env": {"suite": "adroit", "id": "door"},
             "demos": {"source": "file", "path": "minari:D4RL/door/expert-v2"},
             "base": {"kind": "diffusion", "hparams": {"pred_horizon": 16, "act_horizon": 4, "ddim_steps": 4},
                      "steps": 100_000, "batch": 1024, "lr": 1e-4, "gpus_per_worker": 1},
             "residual_chunk": True, "alpha": 0.1, "H": 400_000, "env_steps": 4_000_000},
            # BeT bases (the official offline BeT script's defaults: context window 20, 8 clusters,
            # 4 layers, 4 heads, width 128, batch 2048, lr 1e-4, weight decay 2e-4) and the README's
            # BeT rows for StackCube and PegInsertion; BeT's residual acts per env step, so H, the
            # steps and learning_starts (8k) are the script's own; its SAC lr is 3e-4 on PegInsertion
            {"name": "stack_cube_bet", "env": {"suite": "maniskill", "id": "StackCube-v1", "obs_horizon": 20},
             "demos": {"source": "file", "path": "demos/StackCube-v1.state.pd_ee_delta_pose.h5"},
             "base": {"kind": "bet", "hparams": {"obs_horizon": 20, "n_bins": 8, "layers": 4, "heads": 4,
                                                 "d_model": 128},
                      "steps": 200_000, "batch": 2048, "lr": 1e-4, "weight_decay": 2e-4, "gpus_per_worker": 1},
             "sac": {"learning_starts": 8000},
             "alpha": 0.03, "H": 1_000_000, "env_steps": 3_000_000},
            {"name": "peg_insertion_bet", "env": {"suite": "maniskill", "id": "PegInsertionSide-v1", "obs_horizon": 20},
             "demos": {"source": "file", "path": "demos/PegInsertionSide-v1.state.pd_ee_delta_pose.h5"},
             "base": {"kind": "bet", "hparams": {"obs_horizon": 20, "n_bins": 8, "layers": 4, "heads": 4,
                                                 "d_model": 128},
                      "steps": 200_000, "batch": 2048, "lr": 1e-4, "weight_decay": 2e-4, "gpus_per_worker": 1},
             "sac": {"learning_starts": 8000, "lr": 3e-4},
             "alpha": 0.3, "H": 8_000_000, "env_steps": 10_000_000},
        ],
        "sac": {"gamma": 0.97, "tau": 0.01, "lr": 1e-4, "batch": 1024, "buffer": 1_000_000, "learning_starts": 32_000,
                "utd": 0.25, "hidden": [256, 256, 256], "num_env_runners": 16, "envs_per_runner": 1,
                "rollout_fragment": 4},
        # the scripts evaluate 50 episodes; the claims' paired intervals rest on the episodes, so 100
        "eval": {"every": 200_000, "episodes": 100},
    },
}
