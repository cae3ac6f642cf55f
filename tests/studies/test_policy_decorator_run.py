"""policy_decorator end to end: the smoke preset through Ray (demos as a Ray task, the base through
Ray Train, the SAC variants as Tune trials on RLlib), its report, plots and reloadable checkpoints;
ManiSkill3 demonstrations from the motion planner; input errors (exit 2, one line, before Ray)."""
import json

import numpy as np
import pytest

from iclr_ray import cli
from iclr_ray.rl import store

pytest.importorskip("ray.rllib")


@pytest.mark.slow
def test_smoke_runs_every_variant_and_checkpoints_reload(ray_cluster, tmp_path):
    from iclr_ray.rl.rollouts import evaluate
    from iclr_ray.rl.sac import reload_actor
    from iclr_ray.studies.policy_decorator.run import env_config

    out = tmp_path / "run"
    assert cli.main(["run", "policy_decorator", "--preset", "smoke", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert [t["variant"] for t in m["trials"]] == ["decorator", "unbounded"]
    task = m["tasks"]["slot"]
    assert task["demos"]["episodes"] == 20 and task["demos"]["seeds"] == list(range(20))
    assert 0 < task["base"]["success"] <= 1 and task["base"]["loss"][-1][1] < task["base"]["loss"][0][1]
    # every evaluation keeps its episodes, on the base's seeds: the claims recompute from result.json
    assert len(task["base"]["successes"]) == 30 and task["eval_seeds"] == [1_000_000, 1_000_029]
    for t in m["trials"]:
        steps = [p["env_steps"] for p in t["curve"]]
        assert steps[0] == 0 and steps[-1] >= 800 and len(steps) >= 3
        assert all(len(p["successes"]) == len(p["jerks"]) == 30 for p in t["curve"])
        assert all(np.mean(p["successes"]) == p["success"] for p in t["curve"])
    claims = {c["id"]: c for c in result["claims"]}
    assert set(claims) == {"slot_improves", "slot_no_early_collapse", "slot_unbounded_collapses",
                           "slot_keeps_base_smoothness", "slot_smoother_than_unbounded"}
    assert all(c["n"] == 30 and c["ci"] is not None and c["holds"] in (True, False, None) for c in claims.values())
    assert {c["id"]: c["holds"] for c in result["checks"]} == {"slot_decorator_residual_bound": True,
                                                              "slot_unbounded_residual_bound": True}
    for name in ("success_curves", "success_gap", "action_jerk", "frames_slot"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 5_000
    assert (out / "demos" / "slot.npz").is_file()
    # the saved decorated policy reloads and scores its last evaluation again on the same seeds
    dec = m["trials"][0]
    from iclr_ray.studies.policy_decorator.config import PRESETS, Config

    cfg = Config.model_validate(PRESETS["smoke"])
    td = cfg.tasks[0].model_dump(mode="json")
    base_dir = task["base"]["dir"]
    ev = evaluate({**env_config(td, base_dir, 0), "reward": "sparse"}, reload_actor(dec["checkpoint"]), cfg.eval.seed,
                  cfg.eval.episodes)
    assert ev["successes"] == dec["curve"][-1]["successes"] and np.allclose(ev["jerks"], dec["curve"][-1]["jerks"])
    assert cli.main(["report", str(out)]) == 0
    assert json.loads((out / "result.json").read_text())["claims"] == result["claims"]  # recomputed the same


@pytest.mark.slow
def test_maniskill_motion_planning_demos(tmp_path):
    pytest.importorskip("mani_skill")
    from iclr_ray.rl.envs import vulkan_problem
    from iclr_ray.rl.maniskill import motion_planning_demos, planner_python
    from iclr_ray.rl.store import load_demos

    if vulkan_problem():
        pytest.skip(vulkan_problem())
    if not planner_python().is_file():
        pytest.skip(f"no motion-planner environment at {planner_python()} (make planner-venv)")
    h5 = motion_planning_demos("PickCube-v1", 2, tmp_path)
    demos = load_demos(h5)
    assert demos.seeds.tolist() == [0, 1] and demos.success.all()
    assert demos.obs.shape[1] == 42 and demos.actions.shape[1] == 7 and np.abs(demos.actions).max() <= 1
    assert len(demos.obs) == demos.starts[-1] == len(demos.actions)
    # a demo is reproducible from its stored seed: the env resets to its first observation, and its
    # recorded actions, replayed open loop through the registry's env, succeed (the states drift
    # apart by ~1e-4 over an episode: PhysX on CPU is not bit-for-bit across runs)
    from iclr_ray.rl.envs import make_env

    env = make_env({"suite": "maniskill", "id": "PickCube-v1", "reward": "sparse", "max_episode_steps": 100})
    for seed, (obs, actions) in zip(demos.seeds, demos.episodes()):
        o, _ = env.reset(seed=int(seed))
        assert np.allclose(o, obs[0], atol=1e-5)
        success = False
        for a in actions:
            o, _, term, trunc, info = env.step(a)
            success |= bool(info["success"])
            if term or trunc:
                break
        assert success
    env.close()


def test_input_errors_exit_2_before_ray(tmp_path, input_error):
    assert "demos.path" in input_error("policy_decorator", ["tasks=[{name: a, demos: {source: file}}]"])
    assert "not found" in input_error("policy_decorator",
                                      [f"tasks=[{{name: a, demos: {{source: file, path: {tmp_path / 'none.npz'}}}}}]"])
    other = store.Demos.from_episodes([(np.zeros((4, 5)), np.zeros((3, 2)))], [0], [True])  # 5-dim observations
    store.save_demos(other, tmp_path / "other.npz")
    assert "have obs/action dims 5/2, the env SlotReach 3/2" in input_error(
        "policy_decorator", [f"tasks=[{{name: a, demos: {{source: file, path: {tmp_path / 'other.npz'}}}}}]"])
    assert "names must be unique" in input_error("policy_decorator", ["variants=[{name: x}, {name: x}]"])
    assert "no planner for Adroit pen here (only the door has one); give demos.source = file or expert" in input_error(
        "policy_decorator", ["tasks=[{name: d, env: {suite: adroit, id: pen}}]"])
    assert "'tasks.0.demos.source': Input should be 'planner', 'file' or 'expert'" in input_error(
        "policy_decorator", ["tasks=[{name: d, demos: {source: human}}]"])
    assert "'tasks.0.sac.lr': Input should be greater than 0" in input_error(
        "policy_decorator", ["tasks=[{name: d, sac: {lr: 0}}]"])
    assert "'tasks.0.env.suite': Input should be" in input_error("policy_decorator",
                                                                 ["tasks=[{name: a, env: {suite: atari}}]"])


def test_a_chunked_residual_counts_sac_steps_from_env_steps():
    """With residual_chunk each SAC step is k env steps: H and learning_starts, given in env steps,
    are divided by k; utd stays per SAC step (per transition, as the official script)."""
    from iclr_ray.studies.policy_decorator.config import Config
    from iclr_ray.studies.policy_decorator.run import env_config, resolve, sac_settings

    cfg = Config()
    push = next(t for t in cfg.tasks if t.name == "push_cube")
    assert push.residual_chunk and push.base.kind == "diffusion"
    assert resolve(push, cfg.variants[0])["H"] == 5000  # env steps; the trial divides by the chunk length
    plain, chunked = sac_settings(cfg, push), sac_settings(cfg, push, 4)
    assert plain.learning_starts == 2000 and chunked.learning_starts == 500
    assert chunked.utd == plain.utd == 0.25
    assert env_config(push.model_dump(mode="json"), "b", 0)["residual_chunk"] is True


def test_a_task_s_own_sac_values_override_the_shared_section():
    """The paper preset's BeT tasks: the BeT script's learning_starts (8k env steps) and, on
    PegInsertion, its lr 3e-4; every other value, and every other task, keeps the shared ``sac``."""
    from iclr_ray.studies.policy_decorator.config import PRESETS, Config
    from iclr_ray.config import resolve as resolve_config
    from iclr_ray.studies.policy_decorator.run import resolve, sac_settings

    cfg = resolve_config(Config, PRESETS, "paper")
    by_name = {t.name: t for t in cfg.tasks}
    v = cfg.variants[0]
    peg_bet, stack = sac_settings(cfg, by_name["peg_insertion_bet"]), sac_settings(cfg, by_name["stack_cube_bet"])
    peg_dp = sac_settings(cfg, by_name["peg_insertion"], 4)
    assert (peg_bet.lr, peg_bet.learning_starts) == (3e-4, 8000)
    assert (resolve(by_name["peg_insertion_bet"], v)["alpha"], resolve(by_name["peg_insertion_bet"], v)["H"]) == (
        0.3, 8_000_000)
    assert (stack.lr, stack.learning_starts) == (1e-4, 8000)
    assert (peg_dp.lr, peg_dp.learning_starts) == (1e-4, 32_000 // 4)
    assert peg_bet.gamma == stack.gamma == peg_dp.gamma == 0.97 and peg_bet.batch == peg_dp.batch == 1024
    # the BeT script's AdamW weight decay for its bases; the Diffusion Policy's keep 1e-6
    assert {t.name: t.base.weight_decay for t in cfg.tasks} == {
        "peg_insertion": 1e-6, "turn_faucet": 1e-6, "door": 1e-6, "stack_cube_bet": 2e-4, "peg_insertion_bet": 2e-4}
    other = Config.model_validate({"tasks": [{"name": "a", "sac": {"gamma": 0.9, "utd": 1.0, "batch": 32}}]})
    s = sac_settings(other, other.tasks[0])
    assert (s.gamma, s.utd, s.batch, s.lr, s.tau) == (0.9, 1.0, 32, other.sac.lr, other.sac.tau)


@pytest.mark.slow
def test_an_expert_that_never_succeeds_stops_the_run_before_the_base_trains(ray_cluster, tmp_path):
    """demos.source = expert through the study: the expert (SAC on the dense reward, 200 env steps:
    too few to solve anything) is trained in the demonstrations' Ray task, its episodes recorded,
    and since none succeeded the run stops with the task's own message before any base trains."""
    out = tmp_path / "run"
    task = ("tasks=[{name: slot_expert, demos: {source: expert, expert_steps: 200, episodes: 2}, "
            "base: {steps: 50}, env_steps: 100}]")
    with pytest.raises(RuntimeError, match="tasks.slot_expert: none of the 2 episodes of the expert trained for 200 "
                                           "env steps succeeded"):
        cli.main(["run", "policy_decorator", "--preset", "smoke", "--set", task, "--set", "sac.learning_starts=64",
                  "--out", str(out)])
    assert (out / "demos" / "expert" / "slot_expert" / "expert" / "checkpoint").is_dir()  # the expert was saved
    assert not (out / "base").exists() and not (out / "result.json").exists()
