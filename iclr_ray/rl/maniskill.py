"""ManiSkill3 on the CPU physics backend with state observations, and its motion-planning demos.

ManiSkill3 needs a Vulkan device even with no rendering (the scene build asks for one); a CPU
one (Mesa's llvmpipe from bookworm-backports, see the README) is enough. :func:`probe_vulkan`
asks SAPIEN for a render system in a subprocess, so a missing or rejected driver is a message,
not a crash of the caller.

Demonstrations come from ManiSkill's own motion-planning solutions
(``mani_skill.examples.motionplanning.panda.run``), which need mplib 0.1.1 and therefore numpy < 2.
The project keeps numpy 2 everywhere else: the planner runs in a second virtual environment
(``make planner-venv``: the same pins with numpy < 2 and pyarrow < 26, at ``.venv-planner``) as a
subprocess, and its trajectories are converted to state observations and ``pd_ee_delta_pose``
actions with ``mani_skill.trajectory.replay_trajectory`` in the main environment.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PLANNER_PYTHON_ENV = "ICLR_RAY_PLANNER_PYTHON"
"""the planner venv's python (default: .venv-planner/bin/python beside the project)"""


@functools.lru_cache(maxsize=1)
def probe_vulkan() -> str | None:
    """None when SAPIEN finds a rendering device, else the reason (one line). Once per process:
    the probe is a subprocess importing SAPIEN (seconds), and every env a runner makes asks."""
    code = "import sapien; sapien.render.RenderSystem()"
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "probing SAPIEN's Vulkan device timed out"
    if res.returncode == 0:
        return None
    last = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
    return f"no Vulkan device for ManiSkill3/SAPIEN ({last}); install Mesa's Vulkan driver from bookworm-backports"


def make_maniskill(env_id: str, control_mode: str, max_episode_steps: int | None, kwargs: dict[str, Any]):
    """One unbatched, numpy ManiSkill3 env (RLlib's env runners vectorise it themselves)."""
    from .envs import EnvError

    problem = probe_vulkan()
    if problem:
        raise EnvError(problem)
    import gymnasium as gym

    try:
        import mani_skill.envs  # noqa: F401 (registers the tasks)
        from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper
    except ImportError as exc:
        raise EnvError(f"ManiSkill3 is not installed ({exc}); pip install 'iclr-ray[rl]'") from None
    extra = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    try:
        env = gym.make(env_id, obs_mode="state", control_mode=control_mode, sim_backend="cpu", render_backend="none",
                       num_envs=1, **extra, **kwargs)
    except gym.error.Error as exc:
        raise EnvError(f"ManiSkill3 cannot make {env_id!r} ({exc})") from None
    return CPUGymWrapper(env)


def planner_python() -> Path:
    p = os.environ.get(PLANNER_PYTHON_ENV)
    return Path(p) if p else Path(__file__).resolve().parents[2] / ".venv-planner" / "bin" / "python"


def motion_planning_demos(env_id: str, episodes: int, out_dir: Path, control_mode: str = "pd_ee_delta_pose",
                          timeout: float = 1800) -> Path:
    """``episodes`` successful motion-planning demonstrations of ``env_id``, replayed to state
    observations and ``control_mode`` actions; returns the converted ``.h5``. The planner (mani-skill
    3.0.1) tries seeds 0, 1, 2, ... in order and keeps the successes; each kept episode's seed is
    in the ``.json`` beside the file."""
    from .envs import EnvError

    py = planner_python()
    if not py.is_file():
        raise EnvError(f"the motion planner's environment is missing ({py}); create it with `make planner-venv`")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"mp_n{episodes}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    plan = [str(py), "-m", "mani_skill.examples.motionplanning.panda.run", "-e", env_id, "-n", str(episodes),
            "-b", "cpu", "--only-count-success", "--traj-name", name, "--record-dir", str(out_dir)]
    _run(plan, env, timeout, "motion planning")
    raw = out_dir / env_id / "motionplanning" / f"{name}.h5"
    if not raw.is_file():
        raise EnvError(f"motion planning wrote no trajectories at {raw}")
    replay = [sys.executable, "-m", "mani_skill.trajectory.replay_trajectory", "--traj-path", str(raw), "-o", "state",
              "-c", control_mode, "-b", "physx_cpu", "--save-traj", "--record-rewards", "--reward-mode", "dense"]
    _run(replay, env, timeout, "replaying trajectories")
    converted = sorted(raw.parent.glob(f"{name}.state.{control_mode}*.h5"))
    if not converted:
        raise EnvError(f"replay_trajectory wrote no converted file next to {raw}")
    return converted[0]


def _run(cmd: list[str], env: dict[str, str], timeout: float, what: str) -> None:
    from .envs import EnvError

    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [f"exit {res.returncode}"]
        raise EnvError(f"{what} failed: {tail[0]}")
