"""Demonstrations from an expert trained here (rl.expert): SAC from scratch on the slot task's dense
reward through real RLlib, its checkpoint, and the recorded episodes with their seeds; the study's
``demos.source = expert`` path."""
import numpy as np
import pytest

pytest.importorskip("ray.rllib")


def test_the_expert_env_is_dense_single_frame_and_unchunked():
    from iclr_ray.rl.expert import expert_env_config

    cfg = expert_env_config({"suite": "slot", "reward": "shifted", "obs_horizon": 2, "residual_chunk": True,
                             "base": "b", "seed": 3}, "zero")
    assert cfg == {"suite": "slot", "reward": "dense", "obs_horizon": 1, "residual_chunk": False, "base": "zero",
                   "seed": 3}


@pytest.mark.slow
def test_expert_trains_on_the_dense_reward_and_its_episodes_are_recorded(ray_cluster, tmp_path):
    import torch

    from iclr_ray.rl.envs import make_env
    from iclr_ray.rl.expert import expert_demos
    from iclr_ray.rl.sac import SACSettings, reload_actor
    from iclr_ray.studies.policy_decorator.run import make_demos

    torch.manual_seed(0)
    s = SACSettings(batch=32, learning_starts=64, buffer=2000, hidden=[32, 32], envs_per_runner=2,
                    rollout_fragment=16, utd=0.25)
    demos, curve = expert_demos({"suite": "slot", "seed": 0, "reward": "sparse"}, s, 400, 3, 5, 0.0, tmp_path / "x")
    # the demonstrations: seeds 5, 6, 7, single-frame slot observations, actions in the box
    assert demos.seeds.tolist() == [5, 6, 7] and demos.obs.shape[1] == 3 and demos.actions.shape[1] == 2
    assert len(demos.obs) == len(demos.actions) == demos.starts[-1] and np.abs(demos.actions).max() <= 1
    # the training curve is the dense return (negative distances: below 0 on an unsolved task)
    assert curve and curve[-1]["env_steps"] >= 400 and all(np.isfinite(p["return"]) for p in curve)
    # the recorded actions are the saved expert's deterministic ones (noise 0): replaying each
    # episode's observations through the reloaded checkpoint (zeros where a_base goes) gives them
    act = reload_actor(tmp_path / "x" / "checkpoint")
    for obs, actions in demos.episodes():
        got = np.asarray([act(np.concatenate([o, np.zeros(2, np.float32)])) for o in obs])
        assert np.allclose(got, actions, atol=1e-5)
    # and the same episodes come back from the env: the first observation is the seed's reset
    env = make_env({"suite": "slot", "reward": "sparse"})
    for seed, (obs, _) in zip(demos.seeds, demos.episodes()):
        assert np.allclose(env.reset(seed=int(seed))[0], obs[0])
    # the study's Ray task path stops with one clear line when no expert episode succeeded (the
    # base's behaviour cloning learns from successful episodes only): 200 env steps solve nothing
    task = {"name": "slot", "env": {"suite": "slot", "id": "SlotReach", "max_episode_steps": None, "kwargs": {},
                                    "control_mode": "pd_ee_delta_pose", "obs_horizon": 2},
            "demos": {"source": "expert", "expert_steps": 200, "episodes": 2, "noise": 0.1},
            "residual_chunk": False}
    with pytest.raises(RuntimeError, match=r"tasks.slot: none of the 2 episodes of the expert trained for 200 env "
                                           r"steps succeeded \(last mean dense return -\d+\.\d\d\); raise "
                                           r"demos.expert_steps"):
        make_demos(task, 0, str(tmp_path / "study"), s)
    assert (tmp_path / "study" / "expert" / "checkpoint").is_dir()


def test_recent_returns_average_about_the_last_episodes_over_iterations_without_any():
    from iclr_ray.rl.expert import RecentReturns

    r = RecentReturns(4)
    r.add(None, 0)
    assert np.isnan(r.mean())
    r.add(-10.0, 2)  # two episodes ended, mean -10
    r.add(float("nan"), 2)  # none ended in this iteration
    assert r.mean() == -10.0
    r.add(-4.0, 3)  # one more
    assert r.mean() == pytest.approx((-10 * 2 - 4) / 3)
    r.add(-1.0, 7)  # four more: the oldest iterations drop out once the rest cover 4 episodes
    assert r.mean() == -1.0
