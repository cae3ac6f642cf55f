"""Base policies (MLP behaviour cloning, Behavior Transformer, Diffusion Policy): shapes and
bounds, that each learns a demonstration set, save/load, demo chunks, recorded demos with their
seeds, and a few steps of training through Ray Train."""
import numpy as np
import pytest
import torch

from iclr_ray.config import DataError
from iclr_ray.rl import base_policies as bp
from iclr_ray.rl import store
from iclr_ray.rl.rollouts import action_jerk, evaluate, record_demos
from iclr_ray.rl.slot import scripted_expert

KINDS = {"mlp": {"hidden": (32, 32)}, "bet": {"n_bins": 8, "d_model": 32, "obs_horizon": 1},
         "diffusion": {"pred_horizon": 4, "act_horizon": 2, "channels": (16, 32), "train_steps": 20, "ddim_steps": 4}}


def dataset(n=256, horizon=1, seed=0):
    """A smooth map obs -> a chunk of actions for the policies to fit."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 3, generator=g) * 2 - 1
    steps = torch.arange(horizon)[None, :, None] * 0.1
    chunk = torch.tanh(torch.stack([obs[:, 0] + obs[:, 2], obs[:, 1] - obs[:, 2]], -1)[:, None] + steps)
    return obs, chunk


@pytest.mark.parametrize("kind", list(KINDS))
def test_policies_learn_their_demonstrations(kind):
    torch.manual_seed(0)
    horizon = KINDS[kind].get("pred_horizon", 1)
    p = bp.build(kind, obs_dim=3, act_dim=2, **KINDS[kind])
    obs, chunk = dataset(horizon=horizon)
    if kind == "bet":
        p.fit_bins(chunk.numpy())
    opt = torch.optim.Adam(p.parameters(), lr=3e-3)
    first = p.loss(obs, chunk).item()
    for _ in range(300):
        opt.zero_grad()
        p.loss(obs, chunk).backward()
        opt.step()
    assert p.loss(obs, chunk).item() < 0.5 * first
    with torch.no_grad():
        out = p.act_chunk(obs)
    assert out.shape == (256, horizon, 2) and out.abs().max() <= 1
    err = (out - chunk).abs().mean().item()
    assert err < 0.25, err  # the actions it plans are near the demonstrated ones


def test_bet_bins_and_offsets():
    p = bp.BeTPolicy(obs_dim=4, act_dim=2, obs_horizon=2, n_bins=3, d_model=16, heads=2)
    actions = np.array([[[0.5, 0.5]], [[-0.5, -0.5]], [[0.5, -0.5]]] * 10, dtype=np.float32)
    p.fit_bins(actions)
    assert sorted(map(tuple, p.centres.numpy().round(3))) == [(-0.5, -0.5), (0.5, -0.5), (0.5, 0.5)]
    with pytest.raises(ValueError, match="not a multiple of obs_horizon"):
        bp.BeTPolicy(obs_dim=3, act_dim=2, obs_horizon=2)
    assert bp.focal_loss(torch.tensor([[10.0, -10.0]]), torch.tensor([0])) < 1e-6


def test_diffusion_schedule_and_ddim_steps():
    p = bp.DiffusionPolicy(obs_dim=3, act_dim=2, train_steps=100, ddim_steps=4, pred_horizon=8)
    assert p.ddim_timesteps() == [99, 74, 49, 24]
    ab = p.alpha_bar
    assert (ab[1:] < ab[:-1]).all() and ab[0] > 0.99 and ab[-1] < 1e-3
    with pytest.raises(ValueError, match="act_horizon <= pred_horizon"):
        bp.DiffusionPolicy(obs_dim=3, act_dim=2, pred_horizon=2, act_horizon=4)


@pytest.mark.parametrize("kind", list(KINDS))
def test_save_and_load_give_the_same_policy(kind, tmp_path):
    torch.manual_seed(0)
    p = bp.build(kind, obs_dim=3, act_dim=2, **KINDS[kind])
    obs, _ = dataset(8)
    p.fit_normalizer(obs.numpy() * 5 + 1)  # the statistics are saved with the weights
    q = store.load_policy(store.save_policy(p, tmp_path / kind))
    assert torch.equal(q.obs_mean, p.obs_mean) and torch.equal(q.obs_std, p.obs_std)
    assert type(q) is type(p) and not any(x.requires_grad for x in q.parameters())
    if kind == "diffusion":
        a = p.act_chunk(obs, generator=torch.Generator().manual_seed(1))
        b = q.act_chunk(obs, generator=torch.Generator().manual_seed(1))
    else:
        p.eval()
        a, b = p.act_chunk(obs), q.act_chunk(obs)
    assert torch.allclose(a, b)
    with pytest.raises(DataError, match="no saved base policy"):
        store.load_policy(tmp_path / "nothing")


@pytest.mark.parametrize("kind", list(KINDS))
def test_policies_see_standardised_observations(kind):
    obs, _ = dataset(64)
    scale, shift = torch.tensor([100.0, 0.01, 2.0]), torch.tensor([5.0, -3.0, 0.0])
    p = bp.build(kind, obs_dim=3, act_dim=2, **KINDS[kind])
    p.fit_normalizer(obs.numpy())
    assert torch.allclose(p.obs_mean, obs.mean(0)) and torch.allclose(p.obs_std, obs.std(0, unbiased=False) + 1e-3)
    q = bp.build(kind, obs_dim=3, act_dim=2, **KINDS[kind])
    q.load_state_dict(p.state_dict())
    p.fit_normalizer(obs.numpy(), eps=0.0)
    q.fit_normalizer((obs * scale + shift).numpy(), eps=0.0)  # same weights, units 10^4-fold apart
    p.eval(), q.eval()
    kw = lambda: {"generator": torch.Generator().manual_seed(0)} if kind == "diffusion" else {}  # noqa: E731
    with torch.no_grad():
        a, b = p.act_chunk(obs, **kw()), q.act_chunk(obs * scale + shift, **kw())
    assert torch.allclose(a, b, atol=1e-3)  # float32 rounding, amplified by DDIM
    if kind != "zero":  # not the identity: unfitted, the same weights act otherwise on the raw obs
        r = bp.build(kind, obs_dim=3, act_dim=2, **KINDS[kind])
        r.load_state_dict({**p.state_dict(), "obs_mean": torch.zeros(3), "obs_std": torch.ones(3)})
        r.eval()
        with torch.no_grad():
            assert not torch.allclose(r.act_chunk(obs * scale + shift, **kw()), b, atol=1e-3)


def test_demo_chunks_repeat_the_last_action():
    obs, actions = np.arange(4)[:, None] * np.ones((4, 3)), np.arange(3)[:, None] * np.ones((3, 2))
    o, c = bp.demo_chunks(obs, actions, 3)
    assert o.shape == (3, 3) and c.shape == (3, 3, 2)
    assert c[:, :, 0].tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2]]


def test_pred_horizon_is_the_built_policys_chunk_length():
    for kind, hp in [("diffusion", {}), ("diffusion", {"pred_horizon": 4, "act_horizon": 2}), ("mlp", {}),
                     ("bet", {"pred_horizon": 3})]:
        assert bp.pred_horizon(kind, hp) == bp.build(kind, obs_dim=3, act_dim=2, **hp).pred_horizon
    with pytest.raises(ValueError, match="unknown base policy"):
        bp.pred_horizon("gpt", {})


def test_recorded_demos_keep_their_seeds(tmp_path):
    demos = record_demos({"suite": "slot", "reward": "sparse"}, scripted_expert, 4, seed=7, noise=0.3)
    assert demos.seeds.tolist() == [7, 8, 9, 10] and demos.success.all()
    path = store.save_demos(demos, tmp_path / "d.npz")
    back = store.load_demos(path)
    assert np.array_equal(back.obs, demos.obs) and back.seeds.tolist() == [7, 8, 9, 10]
    # replaying episode 0's actions from its seed reproduces its observations exactly
    from iclr_ray.rl.envs import make_env

    env = make_env({"suite": "slot"})
    obs0, act0 = next(back.episodes())
    o, _ = env.reset(seed=int(back.seeds[0]))
    replay = [o] + [env.step(a)[0] for a in act0[:-1]]
    assert np.allclose(replay, obs0)
    for bad, msg in ((tmp_path / "none.npz", "not found"), (tmp_path / "x.txt", "unknown demonstrations format")):
        if bad.suffix == ".txt":
            bad.write_text("x")
        with pytest.raises(DataError, match=msg):
            store.load_demos(bad)


def test_minari_demos_load_with_their_seeds(tmp_path, monkeypatch):
    """A Minari dataset written here (the format of D4RL's Adroit data sets on Minari) reads back as
    its episodes, with the reset seeds of the episode metadata and success from the infos."""
    minari = pytest.importorskip("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from iclr_ray.rl.envs import make_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = make_env({"suite": "slot", "reward": "sparse"})
    buffers, recorded = [], []
    for i, seed in enumerate((11, 12, 13)):
        o, info = env.reset(seed=seed)
        obs, actions, rewards, terms, truncs, ok = [o], [], [], [], [], [info["success"]]
        while True:
            a = scripted_expert(o) if i < 2 else np.zeros(2, np.float32)  # the last one stands still
            o, r, term, trunc, info = env.step(a)
            obs.append(o), actions.append(a), rewards.append(r), terms.append(term), truncs.append(trunc)
            ok.append(info["success"])
            if term or trunc:
                break
        recorded.append((np.asarray(obs), np.asarray(actions), any(ok)))
        buffers.append(EpisodeBuffer(id=i, seed=seed, observations=np.asarray(obs), actions=np.asarray(actions),
                                     rewards=rewards, terminations=terms, truncations=truncs,
                                     infos={"success": np.asarray(ok)}))
    minari.create_dataset_from_buffers("iclr_ray/slot/planner-v0", buffers, env=env, algorithm_name="planner")
    demos = store.load_demos("minari:iclr_ray/slot/planner-v0")
    assert demos.seeds.tolist() == [11, 12, 13]
    assert demos.success.tolist() == [r[2] for r in recorded] == [True, True, False]
    for (obs, actions), (o_rec, a_rec, _) in zip(demos.episodes(), recorded):
        assert np.allclose(obs, o_rec[:-1]) and np.allclose(actions, a_rec)  # one observation per action
    with pytest.raises(DataError, match="Minari dataset 'iclr_ray/slot/none-v0' cannot be loaded here"):
        store.load_demos("minari:iclr_ray/slot/none-v0")


def test_jerk_and_evaluation():
    assert action_jerk(np.array([[0.0], [1.0], [2.0], [3.0]])) == 0.0  # constant velocity: no jerk
    assert action_jerk(np.array([[0.0], [1.0], [0.0]])) == 2.0
    ev = evaluate({"suite": "slot", "reward": "sparse"}, scripted_expert, seed=100, episodes=5, frames=3)
    assert ev["success"] == 1.0 and ev["return"] == 1.0 and ev["frames"] and ev["frames"][0].shape == (64, 64, 3)


@pytest.mark.slow
def test_base_policy_trains_through_ray_train(ray_cluster, tmp_path):
    import ray
    import ray.train

    from iclr_ray.rl.offline import train_base, training_arrays

    demos = record_demos({"suite": "slot", "reward": "sparse"}, scripted_expert, 5, seed=0, noise=0.2)
    obs, chunks = training_arrays(demos, pred_horizon=4)
    assert chunks.shape[1:] == (4, 2) and len(obs) == len(demos.obs) == len(demos.actions)  # one chunk per step
    hparams = {"pred_horizon": 4, "act_horizon": 2, "channels": [16, 32], "train_steps": 20}
    # handed an ObjectRef, as the study hands it the Ray task still recording the demonstrations
    path, curve = train_base("diffusion", hparams, ray.put(demos), obs_dim=obs.shape[1], act_dim=2, steps=60,
                             batch=64, lr=1e-3, seed=0, storage=tmp_path, name="dp")
    policy = store.load_policy(path)
    assert isinstance(policy, bp.DiffusionPolicy) and curve[-1][0] == 60 and curve[-1][1] < curve[0][1]
    with pytest.raises(ray.train.WorkerGroupError, match="obs dim 3 .* the env 5"):  # another env's demos
        train_base("mlp", {}, demos, obs_dim=5, act_dim=2, steps=5, batch=8, lr=1e-3, seed=0, storage=tmp_path,
                   name="wrong")


def test_bc_recipe_batches_are_a_function_of_the_step_and_its_loss_is_the_policy_s_mean():
    """Behaviour cloning as a recipe of the shared Train loop: the same step gives the same rows and
    the same loss noise (a resumed run trains on what it would have), and the loop's per-unit
    normalisation of the summed loss gives back the policy's own mean loss."""
    from types import SimpleNamespace

    from iclr_ray.llm.train import TrainConfig
    from iclr_ray.rl.offline import BCRecipe

    demos = record_demos({"suite": "slot", "reward": "sparse"}, scripted_expert, 3, seed=0, noise=0.2)
    hp = {"obs_dim": 3, "act_dim": 2, **KINDS["diffusion"]}
    recipe = BCRecipe("diffusion", hp, demos, obs_horizon=1, normalize_obs=True, seed=4)
    recipe.setup()
    cfg = TrainConfig(micro_batch_size=16, grad_accum=2, num_workers=1, seed=4)
    a, b, c = recipe.step_batches(7, cfg), recipe.step_batches(7, cfg), recipe.step_batches(8, cfg)
    assert len(a) == 2 and all(x[1] == 16 and x[0]["obs"].shape == (16, 3) for x in a)
    assert all(torch.equal(x[0]["obs"], y[0]["obs"]) for x, y in zip(a, b))
    assert not torch.equal(a[0][0]["obs"], c[0][0]["obs"]) and not torch.equal(a[0][0]["obs"], a[1][0]["obs"])
    policy = recipe.build_model(cfg)
    engine = SimpleNamespace(module=policy)
    batch = a[0][0]
    first, again = recipe.loss(engine, batch), recipe.loss(engine, batch)
    assert first.item() == again.item()  # the diffusion noise is drawn from the step, not the global state
    torch.manual_seed(int(batch["seed"]))
    assert recipe.units(batch) == 16 and first.item() / 16 == pytest.approx(
        policy.loss(batch["obs"], batch["chunk"]).item(), rel=1e-6)


@pytest.mark.slow
def test_behaviour_cloning_resumes_from_its_checkpoint_to_the_same_policy(ray_cluster, tmp_path):
    """A worker killed mid-run: Ray Train restarts from the last checkpoint and the shared loop
    ends on the very policy an uninterrupted run ends on."""
    from iclr_ray.llm.train import TrainConfig, fit_recipe
    from iclr_ray.rl.offline import POLICY_DIR, BCRecipe

    demos = record_demos({"suite": "slot", "reward": "sparse"}, scripted_expert, 3, seed=0, noise=0.2)
    hp = {"obs_dim": 3, "act_dim": 2, "pred_horizon": 1, "act_horizon": 1, "hidden": [16]}
    cfg = TrainConfig(model="bc-mlp", micro_batch_size=32, max_steps=6, lr=1e-2, grad_clip=0.0, zero_stage=0,
                      num_workers=1, checkpoint_every=2, max_failures=3, seed=1)
    whole = fit_recipe(cfg, BCRecipe("mlp", hp, demos, 1, True, 1), tmp_path, "whole")
    cut = fit_recipe(cfg, BCRecipe("mlp", hp, demos, 1, True, 1), tmp_path, "cut", fail_once_at_step=3)
    assert cut.metrics["resumed_from"] == 2 and whole.metrics["resumed_from"] == 0
    a, b = (store.load_policy(r.checkpoint.path + "/" + POLICY_DIR) for r in (whole, cut))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
