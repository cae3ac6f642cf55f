"""The residual RLModule: the action bound, the progressive-exploration schedule, the critic on
summed actions, the actor's input, and one SAC update through real RLlib on the slot env with a
checkpoint that reloads the decorated policy."""
import numpy as np
import pytest
import torch

pytest.importorskip("ray.rllib")
import gymnasium as gym  # noqa: E402
from ray.rllib.algorithms.sac.sac_learner import QF_PREDS  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # noqa: E402

from iclr_ray.rl.residual import RESIDUAL, ResidualSACModule, decorate, use_probability  # noqa: E402

N_ACT, N_OBS = 2, 3


def module(alpha=0.1, H=0, learning_starts=0, sees_base=False, runners=1):
    space = gym.spaces.Box(-2, 2, shape=(N_OBS + N_ACT,), dtype=np.float32)
    act = gym.spaces.Box(-1, 1, shape=(N_ACT,), dtype=np.float32)
    cfg = {"fcnet_hiddens": [16, 16], "fcnet_activation": "relu", "twin_q": True, "alpha": alpha, "H": H,
           "learning_starts": learning_starts, "num_env_runners": runners, "residual_sees_base": sees_base}
    torch.manual_seed(0)
    return RLModuleSpec(module_class=ResidualSACModule, observation_space=space, action_space=act,
                        model_config=cfg).build()


def observations(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, N_OBS, generator=g) * 2 - 1
    base = torch.rand(n, N_ACT, generator=g) * 2 - 1
    return torch.cat([obs, base], dim=1), base


def test_schedule():
    assert use_probability(0, 100) == 0.0 and use_probability(50, 100) == 0.5
    assert use_probability(100, 100) == use_probability(10**6, 100) == 1.0
    assert use_probability(0, 0) == 1.0  # H = 0: the residual from the first step
    assert torch.equal(decorate(torch.tensor([0.95, -0.5]), torch.tensor([1.0, -1.0]), 0.1), torch.tensor([1.0, -0.6]))


@pytest.mark.parametrize("alpha", [0.03, 0.3])
def test_actions_stay_within_alpha_of_the_base(alpha):
    m = module(alpha=alpha)
    obs, base = observations()
    for forward in (m.forward_exploration, m.forward_inference):
        a = forward({Columns.OBS: obs})[Columns.ACTIONS]
        assert ((a - base).abs() <= alpha + 1e-6).all() and (a.abs() <= 1).all()
    a = m.forward_exploration({Columns.OBS: obs})[Columns.ACTIONS]
    assert (a - base).abs().max() > 0.5 * alpha  # the residual is used (H = 0)


def test_an_untrained_residual_acts_as_its_base():
    m = module(alpha=0.3)
    obs, base = observations()
    out = m.forward_inference({Columns.OBS: obs})
    assert out[RESIDUAL].abs().max() < 0.05  # last layer at gain 0.01: tanh(mean) ~ 0
    assert (out[Columns.ACTIONS] - base).abs().max() < 0.3 * 0.05
    q = m.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: base})
    assert q.abs().max() < 0.05  # the critics start small too


def test_progressive_exploration_masks_the_residual():
    m = module(alpha=0.5, H=10_000, runners=2)
    obs, base = observations(512)
    out = m.forward_exploration({Columns.OBS: obs})  # g = 0: never
    assert torch.equal(out[Columns.ACTIONS], base) and (out[RESIDUAL] == 0).all()
    m.sampled = 2500  # x 2 runners = global step 5000: half the actions
    used = (m.forward_exploration({Columns.OBS: obs})[RESIDUAL] != 0).any(-1).float().mean()
    assert 0.4 < used < 0.6
    m.sampled = 5000
    assert (m.forward_exploration({Columns.OBS: obs})[RESIDUAL] != 0).any(-1).all()
    # inference (evaluation) always decorates
    assert not torch.equal(m.forward_inference({Columns.OBS: obs})[Columns.ACTIONS], base)


def test_uniform_residual_before_learning_starts():
    m = module(alpha=1.0, learning_starts=10**9)
    obs, base = observations(4096)
    res = m.forward_exploration({Columns.OBS: obs})[RESIDUAL]
    assert abs(res.mean()) < 0.05 and 0.3 < res.var() < 0.37  # U[-1, 1]: variance 1/3


def test_actor_ignores_the_base_action_unless_asked():
    obs, _ = observations(8)
    other = obs.clone()
    other[:, -N_ACT:] = -other[:, -N_ACT:]
    blind = module(sees_base=False)
    assert torch.equal(blind._residual_logits(obs), blind._residual_logits(other))
    seeing = module(sees_base=True)
    assert not torch.equal(seeing._residual_logits(obs), seeing._residual_logits(other))


def test_critic_and_target_see_the_summed_action():
    m = module(alpha=1e-6)  # the residual barely moves the action: Q(s, a) must be Q(s, a_base(s))
    m.make_target_networks()  # the learner's job in a real run
    obs, base = observations(64)
    nxt, base_next = observations(64, seed=1)
    executed = torch.rand(64, N_ACT) * 2 - 1
    out = m.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: nxt, Columns.ACTIONS: executed})
    q_base = m.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: base})
    assert torch.allclose(out["q_curr"], q_base, atol=1e-4)
    assert torch.allclose(out["q_target_next"], m.forward_target({Columns.OBS: nxt, Columns.ACTIONS: base_next}),
                          atol=1e-4)
    q_exec = m._qf_forward_train_helper({Columns.OBS: obs, Columns.ACTIONS: executed}, m.qf_encoder, m.qf)
    assert torch.allclose(out[QF_PREDS], q_exec)  # the critic loss uses the executed (stored) action
    out["q_curr"].sum().backward()
    assert all(p.grad is None for p in m.qf.parameters())  # the actor's Q term does not train the critic
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.pi.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 3])
def test_one_sac_update_on_the_slot_env_and_checkpoint_reload(ray_cluster, tmp_path, chunk):
    """chunk 3: a base that executes 3 actions per plan and a residual over whole chunks (6-dim
    actions, 3 + 6-dim observations)."""
    from iclr_ray.rl import base_policies, store
    from iclr_ray.rl.sac import SACSettings, module_actor, reload_actor, sac_config

    torch.manual_seed(0)
    base = store.save_policy(base_policies.build("mlp", obs_dim=3, act_dim=2, hidden=(16,), pred_horizon=chunk,
                                                 act_horizon=chunk), tmp_path / "base")
    env_cfg = {"suite": "slot", "base": str(base), "reward": "shifted", "seed": 0, "residual_chunk": chunk > 1}
    s = SACSettings(batch=32, learning_starts=64, buffer=2000, hidden=[32, 32], envs_per_runner=2,
                    rollout_fragment=16)
    algo = sac_config(env_cfg, s, alpha=0.2, H=0).build_algo()
    try:
        before = {k: v.clone() for k, v in algo.get_module().pi.state_dict().items()}
        results = [algo.train() for _ in range(3)]
        learned = results[-1]["learners"]["default_policy"]
        assert np.isfinite(learned["policy_loss"]) and np.isfinite(learned["qf_loss"])
        after = algo.get_module().pi.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before)  # the residual actor was updated
        g = results[-1]["num_env_steps_sampled_lifetime"]
        assert g >= 96 and len(algo.transitions) == g  # every sampled transition is in the buffer
        assert algo.updates_done == int(s.utd * (g - s.learning_starts)) > 0  # utd per step after learning starts
        assert learned["num_module_steps_trained_lifetime"] == algo.updates_done * s.batch
        algo.save_to_path(str(tmp_path / "ckpt"))
        assert algo.get_module().action_space.shape == (2 * chunk,)
        obs = np.random.default_rng(0).uniform(-1, 1, size=(20, 3 + 2 * chunk)).astype(np.float32)
        now, reloaded = module_actor(algo.get_module()), reload_actor(tmp_path / "ckpt")
        assert np.allclose([now(o) for o in obs], [reloaded(o) for o in obs])
    finally:
        algo.stop()
