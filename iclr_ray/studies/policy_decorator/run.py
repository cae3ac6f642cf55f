"""policy_decorator on Ray. Per task: record demonstrations (a Ray task), train the base policy
through Ray Train and freeze it, evaluate it alone; then one Ray Tune trial per (task, variant)
runs RLlib SAC with the residual RLModule, evaluates the decorated policy on the same held-out
seeds every ``eval.every`` env steps, and saves an RLlib checkpoint that reloads for evaluation.
Every evaluation keeps its episodes' successes and jerks (the claims' paired units). Whatever the
tasks and trials write (demonstrations, the base policies, the checkpoints) goes to the run's
storage, a path or a URI: each is handed on as a location."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ... import storage
from ...config import ConfigError, DataError, apply_overrides
from ...resources import worker_resources
from ...rl.settings import SACSettings
from ...runtime import RunContext
from ...sweep.grid import resumable, run_grid
from .config import Config, Task, Variant


def env_config(task: dict[str, Any], base_dir: str | None, seed: int) -> dict[str, Any]:
    e = task["env"]
    return {"suite": e["suite"], "id": e["id"], "max_episode_steps": e["max_episode_steps"], "kwargs": e["kwargs"],
            "control_mode": e["control_mode"], "obs_horizon": e["obs_horizon"], "base": base_dir,
            "residual_chunk": task["residual_chunk"], "reward": "shifted", "seed": seed}


def prepare(cfg: Config) -> dict[str, Any]:
    """Checks before Ray starts: demonstration files exist and read; every env can be made."""
    from ...rl.envs import EnvError, make_env
    from ...rl.store import load_demos

    out: dict[str, Any] = {}
    dims: dict[str, tuple[int, int]] = {}
    for t in cfg.tasks:
        td = t.model_dump(mode="json")
        if t.demos.source == "file":
            out[t.name] = load_demos(t.demos.path)  # DataError (exit 2) when missing or malformed
        elif t.demos.source == "planner":
            check_planner(td)
        try:
            env = make_env(env_config(td, None, 0))
        except EnvError as exc:
            raise ConfigError(f"tasks.{t.name}: {exc}") from None
        dims[t.name] = (int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape)))
        env.close()
        if t.name in out:
            d = out[t.name]
            got = (d.obs.shape[1] * t.env.obs_horizon, d.actions.shape[1])
            if got != dims[t.name]:
                raise DataError(f"tasks.{t.name}: the demonstrations in {t.demos.path} have obs/action dims "
                                f"{got[0] // t.env.obs_horizon}/{got[1]}, the env {t.env.id} "
                                f"{dims[t.name][0] // t.env.obs_horizon}/{dims[t.name][1]}")
    return {"demos": out, "dims": dims}


def check_planner(task: dict[str, Any]) -> None:
    """The task's planner can run here (before Ray starts)."""
    suite = task["env"]["suite"]
    if suite == "maniskill":
        from ...rl.maniskill import planner_python

        if not planner_python().is_file():
            raise ConfigError(f"tasks.{task['name']}: ManiSkill's motion planner needs its environment at "
                              f"{planner_python()} (make planner-venv)")
    elif suite == "adroit":
        if task["env"]["id"] not in ("door", "AdroitHandDoor-v1"):
            raise ConfigError(f"tasks.{task['name']}: no planner for Adroit {task['env']['id']} here (only the door "
                              f"has one); give demos.source = file or expert")
    elif suite != "slot":
        raise ConfigError(f"tasks.{task['name']}: no planner for the {suite} suite here; give demos.source = file "
                          f"or expert")


def make_demos(task: dict[str, Any], seed: int, out_dir: str, sac=None):
    """Record the task's demonstrations (runs as a Ray task with two returns: the demonstrations and
    a dict with the expert's training curve, if any). ``demos.source`` planner: slot's scripted
    expert or the Adroit door's scripted planner with action noise, or ManiSkill's motion-planning
    solutions replayed to state observations; expert: SAC trained here on the dense reward with
    ``sac`` (:class:`~iclr_ray.rl.settings.SACSettings`), then recorded with action noise.
    ``out_dir``: where the expert's or the planner's files are kept (a path or a URI)."""
    from ...rl.store import load_demos

    d = task["demos"]
    if d["source"] == "expert":
        from ...rl.expert import expert_demos

        demos, curve = expert_demos(env_config(task, None, seed), sac, d["expert_steps"], d["episodes"], seed,
                                    d["noise"], storage.join(out_dir, "expert"))
        if not demos.success.any():  # behaviour cloning learns from successful episodes only
            raise RuntimeError(f"tasks.{task['name']}: none of the {d['episodes']} episodes of the expert trained for "
                               f"{d['expert_steps']} env steps succeeded (last mean dense return "
                               f"{curve[-1]['return'] if curve else float('nan'):.2f}); raise demos.expert_steps")
        return demos, {"expert_curve": curve}
    if task["env"]["suite"] in ("slot", "adroit"):
        from ...rl.rollouts import record_demos

        if task["env"]["suite"] == "slot":
            from ...rl.slot import scripted_expert as planner
        else:
            from ...rl.adroit import DoorPlanner

            planner = DoorPlanner()
        # the planner sees single frames: record without the frame stack (training_arrays stacks)
        return record_demos({**env_config(task, None, seed), "obs_horizon": 1}, planner, d["episodes"], seed,
                            d["noise"]), {}
    from ...rl.maniskill import motion_planning_demos

    with storage.folder_for(out_dir) as folder:
        demos = load_demos(motion_planning_demos(task["env"]["id"], d["episodes"], folder, task["env"]["control_mode"]))
    return demos, {}


def sac_settings(cfg: Config, task: Task, k: int = 1) -> SACSettings:
    """SAC's settings for one of the task's runs: the ``sac`` section with the task's own ``sac``
    values over it; ``k``: env steps per SAC step (a chunked residual's chunk length), so
    learning_starts, given in env steps, becomes SAC steps, and utd is per SAC step (per
    transition, as the official scripts count it)."""
    s = apply_overrides(cfg.sac, task.sac)
    return s.model_copy(update={"learning_starts": s.learning_starts // k})


def resolve(task: Task, v: Variant) -> dict[str, Any]:
    return {"name": v.name, "alpha": task.alpha if v.alpha is None else v.alpha, "H": task.H if v.H is None else v.H,
            "base": v.base}


EVAL_KEYS = ("success", "return", "jerk", "length", "successes", "jerks")
"""what an evaluation keeps in the metrics: the means and each episode's success and jerk (the
claims' units, paired across the base and the variants by their seeds)"""


def scalars(point: dict[str, Any]) -> dict[str, Any]:
    """An evaluation point without its per-episode lists (what Tune shows and stores)."""
    return {k: v for k, v in point.items() if not isinstance(v, list)}


def tracked(act, n: int):
    """(act, largest): ``act`` that also records the largest |a - a_base(s)| over the actions it
    gave (a_base(s): the observation's last n entries), and a function that returns it."""
    worst = [0.0]

    def wrapped(obs):
        a = act(obs)
        worst[0] = max(worst[0], float(np.abs(np.asarray(a, np.float64) - np.asarray(obs[-n:], np.float64)).max()))
        return a

    return wrapped, lambda: worst[0]


@resumable
def trial(config: dict[str, Any], out_dir: Path | str, *, cfg_dump: dict[str, Any]) -> dict[str, Any]:
    """One Tune trial: decorated SAC for the task's env steps, evaluated every eval.every steps."""
    import torch
    from ray import tune

    from ...rl.envs import chunk_length
    from ...rl.rollouts import evaluate
    from ...rl.sac import module_actor, sac_config

    torch.set_num_threads(1)
    cfg = Config.model_validate(cfg_dump)
    spec = config["spec"]
    task = next(t for t in cfg.tasks if t.name == spec["task"])
    v = spec["variant"]
    env_cfg = env_config(task.model_dump(mode="json"), spec["base_dir"], cfg.seed)
    k = chunk_length(env_cfg)  # env steps per SAC step
    algo = sac_config(env_cfg, sac_settings(cfg, task, k), alpha=v["alpha"], H=v["H"] // k, seed=cfg.seed).build_algo()
    eval_cfg = {**env_cfg, "reward": "sparse"}
    curve, next_eval, sampled = [], 0, 0
    try:
        while True:
            if sampled >= next_eval or sampled >= task.env_steps:
                act, residual_max = tracked(module_actor(algo.get_module()), algo.get_module().n_act)
                ev = evaluate(eval_cfg, act, cfg.eval.seed, cfg.eval.episodes)
                point = {"env_steps": sampled, **{k: ev[k] for k in EVAL_KEYS}, "residual_max": residual_max()}
                curve.append(point)
                tune.report(scalars(point))
                next_eval += cfg.eval.every
            if sampled >= task.env_steps:
                break
            r = algo.train()
            # RLlib counts SAC steps; with a chunked residual each is k env steps (fewer only
            # where an episode ended inside a chunk)
            sampled = k * int(r.get("num_env_steps_sampled_lifetime", sampled // k))
        ckpt = storage.join(out_dir, "checkpoint")
        algo.save_to_path(ckpt)
    finally:
        algo.stop()
    return {"scores": scalars(curve[-1]), "curve": curve, "checkpoint": ckpt}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    import ray

    from ...results import encode_image
    from ...rl import store
    from ...rl.base_policies import ZeroPolicy
    from ...rl.envs import chunk_length
    from ...rl.offline import train_base
    from ...rl.rollouts import evaluate

    inputs = ctx.inputs
    root = ctx.run_dir.storage()
    tasks_out: dict[str, Any] = {}
    specs = []
    # every task's planner (or expert) demonstrations are recorded at once, each a Ray task; a base
    # policy's Train run is handed the ObjectRef, so its workers start while they are recorded
    record = ray.remote(num_cpus=1, num_returns=2)(make_demos)
    demo_refs, info_refs = {}, {}
    for t in cfg.tasks:
        if t.name in inputs["demos"]:
            demo_refs[t.name] = inputs["demos"][t.name]
        else:
            sac = sac_settings(cfg, t) if t.demos.source == "expert" else None
            demo_refs[t.name], info_refs[t.name] = record.remote(t.model_dump(mode="json"), cfg.seed,
                                                                 storage.join(root, "demos", t.demos.source, t.name),
                                                                 sac)
    recording = [f"{t.name} ({t.demos.episodes}{', expert first' if t.demos.source == 'expert' else ''})"
                 for t in cfg.tasks if t.name not in inputs["demos"]]
    if recording:
        ctx.say("recording demonstrations, one Ray task per task: %s ...", ", ".join(recording))
    for t in cfg.tasks:
        td = t.model_dump(mode="json")
        obs_dim, act_dim = inputs["dims"][t.name]
        kind = t.base.kind
        if t.name in info_refs and t.demos.source == "expert":
            # an expert takes minutes: wait for it here, so that one that never succeeded stops the
            # run with its own message rather than inside the base's Train run
            ray.get(info_refs[t.name])
        ctx.say("%s: training the %s base through Ray Train (%d steps, once its demonstrations are in) ...", t.name,
                kind, t.base.steps)
        base_dir, base_curve = train_base(kind, t.base.hparams, demo_refs[t.name], obs_dim=obs_dim, act_dim=act_dim,
                                          obs_horizon=t.env.obs_horizon, steps=t.base.steps, batch=t.base.batch,
                                          lr=t.base.lr, seed=cfg.seed, storage=storage.join(root, "base"), name=t.name,
                                          normalize_obs=t.base.normalize_obs, weight_decay=t.base.weight_decay,
                                          resources=worker_resources(t.base))
        demos = demo_refs[t.name] if isinstance(demo_refs[t.name], store.Demos) else ray.get(demo_refs[t.name])
        store.save_demos(demos, storage.join(root, "demos", f"{t.name}.npz"))
        ctx.say("%s: %d demonstrations, %d successful", t.name, len(demos.seeds), int(demos.success.sum()))
        zero_dir = store.save_policy(ZeroPolicy(obs_dim=obs_dim, act_dim=act_dim),
                                     storage.join(root, "base", f"{t.name}_zero"))
        ev_cfg = {**env_config(td, base_dir, cfg.seed), "reward": "sparse"}
        n = act_dim * chunk_length(ev_cfg)  # the env's action: a whole chunk with residual_chunk
        base_eval = evaluate(ev_cfg, lambda o: o[-n:], cfg.eval.seed, cfg.eval.episodes, frames=2)
        ctx.log(task=t.name, what="base", success=base_eval["success"], jerk=base_eval["jerk"],
                successes=base_eval["successes"])
        ctx.say("%s: base %s success %.2f on %d held-out seeds", t.name, kind, base_eval["success"], cfg.eval.episodes)
        frames = base_eval["frames"]
        shown = np.linspace(0, len(frames) - 1, min(FRAMES, len(frames))).round().astype(int) if frames else []
        tasks_out[t.name] = {"demos": {"episodes": len(demos.seeds), "successful": int(demos.success.sum()),
                                       "seeds": demos.seeds.tolist()},
                             "base": {"kind": kind, "dir": base_dir, "loss": base_curve,
                                      **{k: base_eval[k] for k in EVAL_KEYS}},
                             "eval_seeds": [cfg.eval.seed, cfg.eval.seed + cfg.eval.episodes - 1],
                             "frames": [encode_image(frames[i]) for i in shown],
                             "env_steps": t.env_steps}
        if t.name in info_refs:
            tasks_out[t.name]["demos"].update(ray.get(info_refs[t.name]))
        for v in cfg.variants:
            rv = resolve(t, v)
            specs.append({"task": t.name, "variant": rv, "base_dir": base_dir if v.base else zero_dir,
                          "label": f"{t.name}/{v.name}"})
    ctx.say("%d SAC trials (task x variant), %d at a time ...", len(specs), cfg.max_concurrent_trials)
    trials = []
    for g in run_grid(trial, specs, storage=storage.join(root, "tune"), name="sac",
                      max_concurrent_trials=cfg.max_concurrent_trials,
                      cfg_dump=cfg.model_dump(mode="json")):
        v = g.spec["variant"]
        rec = {"task": g.spec["task"], "variant": v["name"], "alpha": v["alpha"], "H": v["H"], "base": v["base"],
               "curve": g.final["curve"], "checkpoint": g.final["checkpoint"]}
        ctx.log(**{k: val for k, val in rec.items() if k != "curve"}, final_success=g.final["scores"]["success"])
        trials.append(rec)
    return {"tasks": tasks_out, "trials": trials}


FRAMES = 12
"""frames of the base's first evaluation episode kept for the figure"""


# ----------------------------------------------------------------------------- plan


ENV_DIMS = {("slot", "SlotReach"): (3, 2), ("adroit", "door"): (39, 28), ("adroit", "AdroitHandDoor-v1"): (39, 28),
            ("maniskill", "PushCube-v1"): (35, 7), ("maniskill", "PegInsertionSide-v1"): (43, 7),
            ("maniskill", "TurnFaucet-v1"): (33, 7), ("maniskill", "StackCube-v1"): (48, 7)}
"""(observation, action) sizes of one frame, read off the envs' sources (rl.slot; gymnasium-robotics'
door; ManiSkill3's state: the Panda's qpos and qvel, 18, plus the task's _get_obs_extra, and
pd_ee_delta_pose's 6 + 1 gripper): prepare() reads them from the env itself, plan() makes none"""
UNKNOWN_DIMS = (64, 8)
TRIAL_BASE_BYTES = 1.5 * 2**30
"""a SAC trial's process before its buffer: Ray, RLlib and torch imported, the RLModule"""


def _hp(kind: str, hparams: dict[str, Any], name: str) -> int:
    """A base policy hyperparameter: the given value or the policy class's default."""
    import inspect

    from ...rl.base_policies import KINDS

    return int(hparams.get(name, inspect.signature(KINDS[kind].__init__).parameters[name].default))


def plan(cfg: Config) -> list:
    """Per task: its demonstrations recorded (a Ray task, where not read from a file), its base
    trained (a Ray Train run on one worker); then one Tune trial per (task, variant) running RLlib
    SAC. The base is measured on fake tensors at its batch; SAC's cost from its MLPs' sizes."""
    from ...plan import Tasks, Train, module, module_footprint
    from ...resources import TaskResources
    from ...rl.base_policies import build, pred_horizon

    stages, trials, sac_flops, buffer = [], 0, 0.0, 0.0
    record = [t for t in cfg.tasks if t.demos.source != "file"]
    if record:
        stages.append(Tasks("demonstrations", None, len(record), TRIAL_BASE_BYTES,
                            note=f"{', '.join(f'{t.name} ({t.demos.episodes}, {t.demos.source})' for t in record)}; "
                                 "memory: a worker with the env, torch (and an expert's SAC) imported (~1.5 GiB)"))
    for t in cfg.tasks:
        raw, act = ENV_DIMS.get((t.env.suite, t.env.id), UNKNOWN_DIMS)
        obs = raw * t.env.obs_horizon
        full = {"obs_dim": obs, "act_dim": act, "pred_horizon": pred_horizon(t.base.kind, t.base.hparams),
                **t.base.hparams}
        B = t.base.batch

        def one(kind=t.base.kind, full=full, B=B):
            import warnings

            import torch

            with warnings.catch_warnings():  # BeT's TransformerEncoder on nested tensors (norm_first)
                warnings.simplefilter("ignore", UserWarning)
                policy = build(kind, **full)
            return policy, lambda m: m.loss(torch.randn(B, full["obs_dim"]),
                                            torch.randn(B, full["pred_horizon"], full["act_dim"]))

        dims = "" if (t.env.suite, t.env.id) in ENV_DIMS else f"; obs/action sizes of {t.env.id} assumed {raw}/{act}"
        stages.append(Train(f"base {t.name}", t.base, 1, 1, module(f"{t.base.kind} base", lambda o=one: o()[0]),
                            t.base.steps, B, B, footprint=module_footprint(one),
                            note=f"behaviour cloning on {obs}-d observations ({t.env.obs_horizon} frames), chunks of "
                                 f"{full['pred_horizon']} x {act}; then evaluated alone in the driver{dims}"))
        k = _hp(t.base.kind, t.base.hparams, "act_horizon") if t.residual_chunk else 1
        for v in cfg.variants:
            kv = k if v.base else 1  # RL from scratch decorates a zero base of act_horizon 1
            s = sac_settings(cfg, t, kv)
            o, a = obs + kv * act, kv * act  # the env's observation carries the base's action
            h = list(s.hidden)
            mlp = lambda i, out: sum(x * y + y for x, y in zip([i, *h], [*h, out]))  # noqa: E731
            updates = t.env_steps / kv * s.utd
            sac_flops += 8.0 * s.batch * updates * (mlp(o, 2 * a) + 2 * mlp(o + a, 1))  # fwd + bwd + targets
            buffer = max(buffer, s.buffer * (4.0 * (2 * o + a + 1) + 1))
            trials += 1
    runners = max(1, cfg.sac.num_env_runners)
    stages.append(Tasks("sac", TaskResources(cpus_per_task=runners), trials, TRIAL_BASE_BYTES + buffer, flops=sac_flops,
                        note=f"{trials} Tune trials (task x variant), {cfg.max_concurrent_trials} at a time; each the "
                             f"SAC learner in the trial's process (CPU) and {cfg.sac.num_env_runners} env runner(s) of "
                             f"1 CPU (shown as one {runners}-CPU ask; Ray places the runners separately, their envs' "
                             "memory not counted); memory: the replay buffer (float32 s, s', a, r) at its capacity + "
                             "the process; FLOPs: 8 x batch x (actor + 2 critics) per update, updates = SAC steps x utd"))
    return stages
