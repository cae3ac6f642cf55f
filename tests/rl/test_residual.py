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
    # the sum is not clipped (the env clips what it executes), so the actor's gradient through Q
    # does not vanish where a_base + alpha * a_res leaves the box
    assert torch.allclose(decorate(torch.tensor([0.95, -0.5]), torch.tensor([1.0, -1.0]), 0.1), torch.tensor([1.05, -0.6]))


@pytest.mark.parametrize("alpha", [0.03, 0.3])
def test_actions_stay_within_alpha_of_the_base(alpha):
    m = module(alpha=alpha)
    obs, base = observations()
    for forward in (m.forward_exploration, m.forward_inference):
        a = forward({Columns.OBS: obs})[Columns.ACTIONS]
        assert ((a - base).abs() <= alpha + 1e-6).all()
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


def test_the_env_clips_what_it_executes():
    from iclr_ray.rl.envs import make_env

    env = make_env({"suite": "slot", "reward": "sparse"})
    env.reset(seed=0)
    start = env.unwrapped.pos.copy()
    env.step(np.array([1.3, -1.7], np.float32))  # a decorated action past the box moves as (1, -1)
    assert np.allclose(env.unwrapped.pos - start, env.unwrapped.step_size * np.array([1.0, -1.0]))


def test_the_actor_s_q_term_has_a_gradient_where_the_sum_leaves_the_box():
    """a_base = 1 everywhere and a residual of ~+1: a_base + alpha * a_res is ~1 + alpha in every
    entry. Clipped to the box, Q would see a constant action and the residual no gradient."""
    m = module(alpha=0.5)
    m.make_target_networks()
    last = [x for x in m.pi.modules() if isinstance(x, torch.nn.Linear)][-1]
    with torch.no_grad():  # mean 3 (tanh ~0.995), log std -10: a_res ~ 0.995 for every sample
        last.weight.zero_()
        last.bias.copy_(torch.tensor([3.0] * N_ACT + [-10.0] * N_ACT))
    obs, _ = observations(64)
    obs[:, -N_ACT:] = 1.0
    out = m.forward_train({Columns.OBS: obs, Columns.NEXT_OBS: obs, Columns.ACTIONS: torch.zeros(64, N_ACT)})
    out["q_curr"].sum().backward()
    assert last.bias.grad[:N_ACT].abs().sum() > 0
    expected = m.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: torch.full((64, N_ACT), 1 + 0.5 * np.tanh(3.0))})
    assert torch.allclose(out["q_curr"], expected, atol=1e-5)  # Q of the unclipped sum


def test_the_critics_see_the_observation_without_the_base_action():
    """As the official scripts: Q(s, a) of the observation and the summed action; a_base(s) reaches
    the critic through the action only."""
    m = module(alpha=0.3)
    m.make_target_networks()
    obs, _ = observations(32)
    other = obs.clone()
    other[:, -N_ACT:] = -other[:, -N_ACT:]
    a = torch.rand(32, N_ACT) * 2 - 1
    for q in (m.compute_q_values, m.forward_target):
        assert torch.equal(q({Columns.OBS: obs, Columns.ACTIONS: a}), q({Columns.OBS: other, Columns.ACTIONS: a}))
    moved = obs.clone()
    moved[:, 0] += 0.5
    assert not torch.equal(m.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: a}),
                           m.compute_q_values({Columns.OBS: moved, Columns.ACTIONS: a}))


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


EASY = {"slot_half_width": 0.15, "goal_radius": 0.15}
"""a wider slot and goal: a Diffusion Policy trained for a few hundred steps succeeds on some seeds"""


def diffusion_base(tmp_path, act_horizon):
    """A small Diffusion Policy cloned from the slot planner's demos (a stochastic base whose
    successes depend on its sampling noise)."""
    from iclr_ray.rl import base_policies, store
    from iclr_ray.rl.offline import training_arrays
    from iclr_ray.rl.rollouts import record_demos
    from iclr_ray.rl.slot import scripted_expert

    demos = record_demos({"suite": "slot", "reward": "sparse", "kwargs": EASY}, scripted_expert, 20, 0, 0.3)
    obs, chunks = (torch.from_numpy(x) for x in training_arrays(demos, 4))
    torch.manual_seed(0)
    p = base_policies.build("diffusion", obs_dim=3, act_dim=2, pred_horizon=4, act_horizon=act_horizon,
                            channels=(8, 16), train_steps=20, ddim_steps=4)
    opt = torch.optim.Adam(p.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        idx = torch.randint(0, len(obs), (64,), generator=g)
        opt.zero_grad()
        p.loss(obs[idx], chunks[idx]).backward()
        opt.step()
    return p, store.save_policy(p, tmp_path / "dp")


@pytest.fixture
def one_thread():
    """torch on one thread, as in the study's trials (two threads on two busy cores crawl)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("chunk", [False, True])
def test_a_zero_residual_evaluates_as_the_base_episode_by_episode(tmp_path, chunk, one_thread):
    """The base alone and the decorated policy with a zero residual, evaluated one after the other
    on the same seeds, take the same actions and succeed on the same episodes: the Diffusion
    Policy's sampling noise is seeded per episode, not drawn from torch's global generator (which
    moves between the two evaluations, so the pairs were different draws before)."""
    from iclr_ray.rl.envs import make_env
    from iclr_ray.rl.rollouts import evaluate
    from iclr_ray.rl.sac import module_actor

    policy, path = diffusion_base(tmp_path, act_horizon=2)
    cfg = {"suite": "slot", "base": str(path), "reward": "sparse", "kwargs": EASY, "residual_chunk": chunk}
    n = 4 if chunk else 2
    base = evaluate(cfg, lambda o: o[-n:], 100, 20)
    m = module_for(n, alpha=0.3)
    last = [x for x in m.pi.modules() if isinstance(x, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()  # tanh(0) = 0: a = a_base exactly
    decorated = evaluate(cfg, module_actor(m), 100, 20)
    assert decorated["successes"] == base["successes"] and decorated["jerks"] == base["jerks"]
    assert 0 < sum(base["successes"]) < 20  # some episodes succeed, some fail
    # the noise decides episodes: the same base drawing from torch's global generator (the old
    # unpaired path) succeeds on other episodes of the same seeds
    env = make_env({**cfg, "base": None, "residual_chunk": False})
    unpaired = []
    for i in range(20):
        obs, _ = env.reset(seed=100 + i)
        ok = False
        while True:
            with torch.no_grad():
                chunk_ = policy.act_chunk(torch.as_tensor(obs)[None])[0, :2].numpy()
            for a in chunk_:
                obs, _, term, trunc, info = env.step(a)
                ok |= info["success"]
                if term or trunc:
                    break
            if term or trunc:
                break
        unpaired.append(int(ok))
    assert unpaired != base["successes"]


def module_for(n_act, alpha):
    space = gym.spaces.Box(-2, 2, shape=(3 + n_act,), dtype=np.float32)
    act = gym.spaces.Box(-1, 1, shape=(n_act,), dtype=np.float32)
    cfg = {"fcnet_hiddens": [16, 16], "fcnet_activation": "relu", "twin_q": True, "alpha": alpha, "H": 0,
           "learning_starts": 0, "num_env_runners": 1, "residual_sees_base": False}
    return RLModuleSpec(module_class=ResidualSACModule, observation_space=space, action_space=act,
                        model_config=cfg).build()


def test_the_residual_acts_on_the_device_its_module_sits_on():
    """Exploration (the uniform warm-up, progressive masking), inference and the evaluation actor
    with the module on ``meta`` standing in for a GPU (iclr_ray.devicecheck): every draw is made on
    the module's device, and the actor moves its observation there and its action back."""
    from iclr_ray.devicecheck import on_device
    from iclr_ray.rl.sac import module_actor

    for warm in (10**9, 0):
        m = module(alpha=0.5, H=10, learning_starts=warm).to("meta")
        obs = observations(8)[0].to("meta")
        out = on_device(lambda: m.forward_exploration({Columns.OBS: obs}), host_values=True)
        assert out[RESIDUAL].device.type == "meta"
    assert on_device(lambda: m.forward_inference({Columns.OBS: obs}), host_values=True) is not None
    action = on_device(lambda: module_actor(m)(np.zeros(N_OBS + N_ACT, np.float32)), host_values=True)
    assert action.shape == (N_ACT,)
