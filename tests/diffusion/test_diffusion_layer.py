"""The shared diffusion layer: noising and its inverse, DDIM's determinism, classifier-free
guidance at scale 1, the ControlNet's zero start, loading saved parts, and the Fréchet distance."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from iclr_ray.diffusion import fid, model as M, sampling as S  # noqa: E402


def tiny(seed=0, cond=4, vocab=5):
    torch.manual_seed(seed)
    unet = M.tiny_unet(8, channels=(8, 16), attention_levels=1, context_dim=8, head_dim=4, groups=4)
    return M.Denoiser(unet, M.controlnet_from_unet(unet, cond, (8,)), vocab=vocab).eval()


def test_noise_then_one_step_estimate_with_the_true_noise_recovers_x0():
    sched = S.ddpm()
    x0 = torch.rand(6, 3, 8, 8) * 2 - 1
    noise = torch.randn_like(x0)
    t = torch.tensor([0, 10, 200, 500, 900, 999])
    xt = S.add_noise(sched, x0, noise, t)
    assert torch.allclose(S.predict_x0(sched, xt, noise, t), x0, atol=1e-3)
    a = S.alpha_bar(sched, t).flatten()
    assert a[0] > 0.99 and a[-1] < 1e-4 and torch.all(a[1:] < a[:-1])  # pixel space: x_T is noise
    assert not torch.allclose(S.predict_x0(sched, xt, torch.zeros_like(noise), t[:, None, None, None].flatten()), x0)


def test_the_pixel_schedule_leaves_no_image_at_the_last_step_and_sds_does():
    """SD's latent schedule ends at ᾱ_T ≈ 0.0047: a pixel image keeps sqrt(ᾱ_T) ≈ 0.07 of itself at
    t = T (the issue's finding); DDPM's linear schedule ends near 4e-5."""
    last = torch.tensor([999])
    sd, px = S.alpha_bar(S.ddpm("latent"), last).item(), S.alpha_bar(S.ddpm(), last).item()
    assert sd == pytest.approx(0.0047, abs=2e-4) and px == pytest.approx(4.0e-5, rel=0.1)
    assert S.ddim().config.beta_schedule == "linear" and S.ddim("latent").config.beta_schedule == "scaled_linear"
    with pytest.raises(ValueError, match="space"):
        S.ddpm("video")


def test_ddim_is_deterministic_for_a_generator_and_differs_across_seeds():
    net = tiny()
    ctx = net.context(torch.tensor([[1, 2], [3, 0]]))
    null = net.context(torch.zeros(2, 2, dtype=torch.long))
    cond = torch.rand(2, 4, 8, 8)

    def draw(seed):
        return S.sample(net, (2, 3, 8, 8), ctx, null, steps=4, guidance=2.0,
                        generator=torch.Generator().manual_seed(seed), cond=cond)

    a, b, c = draw(1), draw(1), draw(2)
    assert torch.equal(a, b) and not torch.allclose(a, c) and torch.isfinite(a).all()


@pytest.mark.parametrize("eta", [0.0, 1.0])
def test_ddim_samples_on_the_models_device(eta):
    """The whole denoiser on ``meta`` (the stand-in for a GPU), every op checked as CUDA checks it
    (iclr_ray/devicecheck.py): a tensor the sampler made on the CPU next to it raises; the noise is
    still the generator's CPU draw, moved."""
    net = tiny().to("meta")
    tokens = torch.tensor([[1, 2], [3, 0]], device="meta")
    ctx, null = net.context(tokens), net.context(torch.zeros_like(tokens))
    from iclr_ray.devicecheck import on_device

    x = on_device(lambda: S.sample(net, (2, 3, 8, 8), ctx, null, steps=2, guidance=2.0, eta=eta,
                                   generator=torch.Generator().manual_seed(1),
                                   cond=torch.rand(2, 4, 8, 8, device="meta")))
    assert x.device.type == "meta" and x.shape == (2, 3, 8, 8)


def test_guidance_at_scale_one_is_the_conditional_prediction_and_mixes_branches_otherwise():
    net = tiny()
    with torch.no_grad():  # nonzero ControlNet output convolutions, so the condition matters
        for p in net.controlnet.controlnet_down_blocks.parameters():
            p.normal_(0, 0.1)
    x, t = torch.randn(2, 3, 8, 8), torch.tensor([100, 700])
    ctx = net.context(torch.tensor([[1, 2], [3, 4]]))
    null = net.context(torch.zeros(2, 2, dtype=torch.long))
    cond = torch.rand(2, 4, 8, 8)
    with torch.no_grad():
        e_c, e_u = net(x, t, ctx, cond), net(x, t, null, cond)
        assert torch.allclose(S.guided(net, x, t, ctx, null, 1.0, cond=cond), e_c, atol=1e-5)
        assert torch.allclose(S.guided(net, x, t, ctx, null, 3.0, cond=cond), e_u + 3 * (e_c - e_u), atol=1e-4)
        assert not torch.allclose(e_c, e_u)


def test_a_fresh_controlnet_adds_nothing_until_trained():
    net = tiny()
    x, t, ctx = torch.randn(2, 3, 8, 8), torch.tensor([5, 500]), net.context(torch.tensor([[1], [2]]))
    with torch.no_grad():
        assert torch.allclose(net(x, t, ctx, torch.rand(2, 4, 8, 8)), net(x, t, ctx, None), atol=1e-6)
    M.freeze(net.unet)
    net(x, t, ctx, torch.rand(2, 4, 8, 8)).pow(2).mean().backward()
    assert all(p.grad is None for p in net.unet.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.controlnet.parameters())


def test_saved_unet_and_controlnet_load_back_by_path(tmp_path):
    net = tiny(seed=3)
    net.unet.save_pretrained(tmp_path / "sd" / "unet")
    net.controlnet.save_pretrained(tmp_path / "cn")
    back = M.Denoiser(M.load_unet(str(tmp_path / "sd")), M.load_controlnet(str(tmp_path / "cn")), vocab=5).eval()
    back.tokens.load_state_dict(net.tokens.state_dict())
    x, t, cond = torch.randn(1, 3, 8, 8), torch.tensor([300]), torch.rand(1, 4, 8, 8)
    ctx = net.context(torch.tensor([[2]]))
    with torch.no_grad():
        assert torch.allclose(back(x, t, ctx, cond), net(x, t, ctx, cond), atol=1e-6)
    with pytest.raises(OSError):
        M.load_unet(str(tmp_path / "nowhere"))


def test_frechet_distance_is_zero_for_one_set_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2000, 4))
    assert fid.frechet_distance(a, a) == pytest.approx(0, abs=1e-6)
    near = fid.frechet_distance(a, rng.normal(size=(2000, 4)))
    far = fid.frechet_distance(a, rng.normal(size=(2000, 4)) + 1.0)
    assert near < 0.1 and far == pytest.approx(4.0, rel=0.1)


def test_ddim_samples_in_the_models_dtype():
    """A bfloat16 denoiser (DeepSpeed's bf16 on a GPU) on ``meta``: the noise, the condition and
    every scheduler step stay in its dtype (a float32 tensor into its convolutions raises)."""
    from iclr_ray.devicecheck import on_device

    net = tiny().to(device="meta", dtype=torch.bfloat16)
    tokens = torch.tensor([[1, 2], [3, 0]], device="meta")
    ctx, null = net.context(tokens), net.context(torch.zeros_like(tokens))
    x = on_device(lambda: S.sample(net, (2, 3, 8, 8), ctx, null, steps=2, guidance=2.0,
                                   generator=torch.Generator().manual_seed(1),
                                   cond=torch.rand(2, 4, 8, 8, device="meta", dtype=torch.bfloat16)))
    assert x.dtype == torch.bfloat16 and x.device.type == "meta"
