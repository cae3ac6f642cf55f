"""Ctrl-U's method: the uncertainty weights, the reward ramp, the reward window and the negative
control (Δt = 0 makes Ctrl-U plain reward fine-tuning), on a tiny ControlNet and reward model."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from iclr_ray.diffusion import model as M, sampling as S  # noqa: E402
from iclr_ray.studies.ctrl_u import ctrl_u as C, data as D, segment as SG  # noqa: E402


def test_weights_are_at_most_one_and_one_where_the_two_readings_agree():
    torch.manual_seed(0)
    a, b = torch.randn(3, 8, 6, 6) * 3, torch.randn(3, 8, 6, 6) * 3
    u = C.seg_uncertainty(a, b, u_scale=1.0)
    w = C.weights(u)
    assert u.shape == (3, 6, 6) and torch.all(u >= -1e-6) and torch.all(w <= 1 + 1e-6) and torch.all(w > 0)
    assert torch.allclose(C.weights(C.seg_uncertainty(a, a)), torch.ones(3, 6, 6), atol=1e-6)
    b[:, :, :3] = a[:, :, :3]  # agreement on the top half only
    w = C.weights(C.seg_uncertainty(a, b))
    assert torch.allclose(w[:, :3], torch.ones(3, 3, 6), atol=1e-6) and torch.all(w[:, 3:] < 1)
    assert torch.allclose(C.seg_uncertainty(a, b, 0.1), 0.1 * C.seg_uncertainty(a, b))
    d1, d2 = torch.rand(2, 1, 4, 4), torch.rand(2, 1, 4, 4)
    assert torch.allclose(C.abs_uncertainty(d1, d2), (d1 - d2).abs())
    assert torch.all(C.weights(C.abs_uncertainty(d1, d1)) == 1)


def test_the_reward_scale_ramps_linearly_then_holds():
    assert C.reward_scale(0, 100, 0.1) == 0.0
    assert C.reward_scale(50, 100, 0.1) == pytest.approx(0.05)
    assert C.reward_scale(100, 100, 0.1) == C.reward_scale(10_000, 100, 0.1) == pytest.approx(0.1)
    assert C.reward_scale(0, 0, 0.2) == 0.2
    assert C.in_window(torch.tensor([0, 400, 401, 999]), 0, 400).tolist() == [1, 1, 0, 0]


def setting(seed=0):
    torch.manual_seed(seed)
    unet = M.tiny_unet(8, channels=(8, 16), attention_levels=1, context_dim=8, head_dim=4, groups=4)
    net = M.Denoiser(unet, M.controlnet_from_unet(unet, D.CLASSES, (8,)), vocab=D.CLASSES + 1)
    with torch.no_grad():
        for p in net.controlnet.controlnet_down_blocks.parameters():
            p.normal_(0, 0.1)
    reward = SG.RewardSegmenter(8, 2)
    scenes = D.generate(4, side=8, seed=seed)
    batch = {"x0": D.to_model(scenes.images), "context": net.context(D.captions(scenes.masks, 3)),
             "cond": D.one_hot(scenes.masks), "target": torch.as_tensor(scenes.masks).long(),
             "t": torch.tensor([10, 150, 399, 700]), "noise": torch.randn(4, 3, 8, 8)}
    return net, reward, batch


def loss(net, reward, b, **kw):
    args = {"lam": 0.5, "dt": 1, "u_scale": 1.0, "t_min": 0, "t_max": 400, **kw}
    return C.post_train_loss(net, reward, S.ddpm(), b["x0"], b["context"], b["cond"], b["target"], b["t"],
                             b["noise"], **args)


def test_delta_t_zero_reduces_ctrl_u_to_plain_reward_fine_tuning():
    net, reward, b = setting()
    with torch.no_grad():
        plain = loss(net, reward, b, arm="reward")
        same = loss(net, reward, b, arm="ctrl_u", dt=0)
        apart = loss(net, reward, b, arm="ctrl_u", dt=50)
        pre_only = loss(net, reward, b, arm="controlnet")
    assert torch.allclose(same["loss"], plain["loss"], atol=1e-5) and torch.all(same["uncertainty"].abs() < 1e-6)
    assert torch.all(apart["uncertainty"][:3] > 0) and not torch.allclose(apart["loss"], plain["loss"])
    assert torch.allclose(pre_only["loss"], plain["pre"].sum(), atol=1e-5) and plain["loss"] > pre_only["loss"]
    # the reward acts only in its window: the sample at t = 700 carries L_pre alone
    assert plain["reward"][3] == 0 and torch.all(plain["reward"][:3] > 0)
    with pytest.raises(ValueError, match="arm"):
        loss(net, reward, b, arm="dpo")


def test_the_uncertainty_penalty_is_added_unscaled_as_the_official_script_adds_it():
    """L = L_pre + λ_r reward + mean(U) in the window (official); "scaled" multiplies mean(U) by λ_r."""
    net, reward, b = setting(2)
    with torch.no_grad():
        off = loss(net, reward, b, arm="ctrl_u", dt=50, lam=0.1)
        old = loss(net, reward, b, arm="ctrl_u", dt=50, lam=0.1, u_term="scaled")
    w = torch.tensor([1.0, 1.0, 1.0, 0.0])  # t = 700 is outside the reward's window
    assert torch.allclose(off["loss"], (off["pre"] + w * (0.1 * off["reward"] + off["uncertainty"])).sum(), atol=1e-5)
    assert torch.allclose(old["loss"], (old["pre"] + w * 0.1 * (old["reward"] + old["uncertainty"])).sum(), atol=1e-5)
    assert off["loss"] > old["loss"]
    with pytest.raises(ValueError, match="u_term"):
        loss(net, reward, b, arm="ctrl_u", u_term="half")


def test_the_reward_gradient_reaches_the_controlnet_and_never_the_frozen_reward_model():
    net, reward, b = setting(1)
    M.freeze(net.unet)
    M.freeze(reward)
    loss(net, reward, b, arm="ctrl_u", lam=1.0)["loss"].backward()
    assert all(p.grad is None for p in reward.parameters()) and all(p.grad is None for p in net.unet.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.controlnet.parameters())


def test_scenes_are_a_function_of_the_seed_and_every_class_has_a_texture():
    a, b = D.generate(5, side=16, seed=3), D.generate(5, side=16, seed=3)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.masks, b.masks)
    assert a.images.shape == (5, 16, 16, 3) and a.masks.max() < D.CLASSES and len(D.TEXTURES) == D.CLASSES
    caps = D.captions(a.masks)
    assert all(set(caps[i][caps[i] > 0].tolist()) == set((np.unique(a.masks[i]) + 1).tolist()) for i in range(5))
    conf = SG.confusion(a.masks.astype(np.int64), a.masks)
    assert SG.miou(conf) == 1.0 and SG.miou(SG.confusion((a.masks.astype(np.int64) + 1) % D.CLASSES, a.masks)) == 0.0


def test_load_rejects_a_missing_or_foreign_file(tmp_path):
    from iclr_ray.config import DataError

    with pytest.raises(DataError, match="no such file"):
        D.load(tmp_path / "none.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="not a scene file"):
        D.load(tmp_path / "other.npz")
    D.save(D.generate(2, side=8, seed=0), tmp_path / "ok.npz")
    assert len(D.load(tmp_path / "ok.npz")) == 2
