"""AFA's method without Ray: the SABW maps are a softmax over the experts, the zero-initialised
aggregators start as the uniform average, threading one expert (or identical copies) through the
aggregated forward gives back that expert's own prediction whatever the maps (the negative control:
identical experts leave nothing to gain), the experts stay frozen while the aggregators train, and
the merging baselines' weights and search."""
import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from iclr_ray.diffusion.model import Denoiser, tiny_unet  # noqa: E402
from iclr_ray.studies.afa import afa as M  # noqa: E402


def _expert(seed):
    torch.manual_seed(seed)
    return Denoiser(tiny_unet(8, (8, 16), 1, 16, in_channels=1, groups=4), None, vocab=11).eval()


def _afa(experts, std=0.0, seed=0):
    torch.manual_seed(seed)
    return M.AFA(experts, hidden=8, temb_dim=16, context_dim=16, vocab=11, groups=4, out_init_std=std)


def _inputs(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 1, 8, 8, generator=g), torch.tensor([1, 300, 700, 999])[:n],
            torch.tensor([[1], [4], [0], [10]])[:n])


def test_maps_are_a_softmax_over_the_experts_at_every_location():
    x, t, tok = _inputs()
    m = _afa([_expert(0), _expert(1), _expert(2)], std=0.5)
    m.record = {}
    with torch.no_grad():
        m(x, t, tok)
    assert list(m.record) == [name for name, _ in M.locations(m.experts[0].unet)]
    for name, a in m.record.items():
        assert a.shape[:2] == (4, 3) and (a >= 0).all()
        torch.testing.assert_close(a.sum(1), torch.ones_like(a[:, 0]))
        assert a.std() > 1e-3, name  # a random last layer: the maps are not uniform


def test_zero_initialised_aggregator_is_the_uniform_average():
    agg = M.SABW(3, 8, 8, 16, 16, groups=4)
    feats = [torch.randn(2, 8, 4, 4) for _ in range(3)]
    out, a = agg(feats, torch.randn(2, 16), torch.randn(2, 1, 16))
    torch.testing.assert_close(a, torch.full_like(a, 1 / 3))
    torch.testing.assert_close(out, sum(feats) / 3)


def test_one_expert_or_identical_experts_give_back_the_expert():
    x, t, tok = _inputs()
    e = _expert(0)
    with torch.no_grad():
        own = e(x, t, e.context(tok))
        torch.testing.assert_close(_afa([e])(x, t, tok), own)
        # identical copies under random, non-uniform maps: any convex mix of equal features is that feature
        twins = _afa([e, copy.deepcopy(e), copy.deepcopy(e)], std=1.0)
        torch.testing.assert_close(twins(x, t, tok), own, atol=1e-5, rtol=1e-5)
        different = _afa([e, _expert(1)])(x, t, tok)
    assert (different - own).abs().max() > 1e-3


def test_experts_stay_frozen_and_the_zero_layer_unblocks_after_one_step():
    from iclr_ray.diffusion.sampling import ddpm

    x, t, tok = _inputs()
    m = _afa([_expert(0), _expert(1)]).train()
    assert not m.experts.training
    frozen = {k: v.clone() for k, v in m.experts.state_dict().items()}
    trainable = [p for p in m.parameters() if p.requires_grad]
    assert trainable and not any(p.requires_grad for p in m.experts.parameters())
    opt = torch.optim.Adam(trainable, 1e-2)
    sched = ddpm()
    agg = m.aggregators[3]
    for step in range(2):
        opt.zero_grad()
        M.ensemble_loss(m, sched, x, tok, t, torch.randn_like(x)).mean().backward()
        early = agg.proj_in.weight.grad
        if step == 0:  # zero last layer: only it gets a gradient at the first step
            assert agg.conv_out.weight.grad.abs().sum() > 0
            assert early is None or early.abs().sum() == 0
        else:
            assert early.abs().sum() > 0
        opt.step()
    assert all(p.grad is None for p in m.experts.parameters())
    assert all(torch.equal(v, m.experts.state_dict()[k]) for k, v in frozen.items())
    # a small random last layer gives every layer a gradient at once
    m2 = _afa([_expert(0), _expert(1)], std=0.01).train()
    M.ensemble_loss(m2, sched, x, tok, t, torch.randn_like(x)).mean().backward()
    assert m2.aggregators[3].proj_in.weight.grad.abs().sum() > 0


def test_output_average_and_weight_merging():
    x, t, tok = _inputs()
    a, b = _expert(0), _expert(1)
    with torch.no_grad():
        avg = M.output_average([a, b])(x, t, tok)
        torch.testing.assert_close(avg, (a(x, t, a.context(tok)) + b(x, t, b.context(tok))) / 2)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(v, sa[k]) for k, v in M.merge([sa, sb], (1.0, 0.0)).items())
    blocks = {M.block_of(k) for k in sa}
    assert blocks == {"in", "down0", "down1", "mid", "up0", "up1", "out"}
    mixed = M.merge([sa, sb], {blk: (1.0, 0.0) if blk.startswith("down") else (0.0, 1.0) for blk in blocks})
    for k, v in mixed.items():
        assert torch.equal(v, sa[k] if M.block_of(k).startswith("down") else sb[k])
    half = M.merge([sa, sb], (0.5, 0.5))
    k = "unet.conv_in.weight"
    torch.testing.assert_close(half[k], (sa[k] + sb[k]) / 2)


def test_simplex_grid_and_merge_search_find_the_known_minimum():
    g = M.simplex_grid(3, 0.25)
    assert len(g) == math.comb(4 + 2, 2) and all(abs(sum(w) - 1) < 1e-12 for w in g)
    target = {"a": (0.0, 0.25, 0.75), "b": (1.0, 0.0, 0.0)}

    def loss(w):
        w = w if isinstance(w, dict) else {blk: w for blk in target}
        return float(sum(np.sum((np.asarray(w[blk]) - target[blk]) ** 2) for blk in target))

    out = M.search_merge(loss, 3, ["a", "b"], step=0.25, sweeps=1)
    assert out["blockwise"] == target and out["blockwise_loss"] == 0.0
    assert out["weighted_loss"] >= out["blockwise_loss"] and out["uniform_loss"] > out["weighted_loss"]
