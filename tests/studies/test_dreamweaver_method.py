"""Dreamweaver's parts: the block primitives against their dense equivalents, the RBSU's slot
attention, the decoder's start tokens, the two objectives' gradients, and the DCI computation on
cases with a known answer."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from iclr_ray.studies.dreamweaver import dreamweaver as W  # noqa: E402


def test_block_linear_equals_a_block_diagonal_linear():
    torch.manual_seed(0)
    lin = W.BlockLinear(12, 8, 4)
    x = torch.randn(5, 3, 12)
    dense = lin.dense()
    assert dense.shape == (12, 8)
    mask = W.block_diag_mask(12, 8, 4).bool()  # (in, out) blocks of 3 x 2
    assert torch.all(dense[~mask] == 0)
    assert torch.allclose(lin(x), x @ dense + lin.bias, atol=1e-6)
    x2 = x.clone()
    x2[..., 3:6] += 1.0  # only input block 1 changes: only output block 1 moves
    moved = (lin(x2) - lin(x)).abs().amax((0, 1)) > 1e-7
    assert moved.tolist() == [False, False, True, True, False, False, False, False]
    with pytest.raises(ValueError):
        W.BlockLinear(10, 8, 4)


def test_block_gru_keeps_blocks_apart_and_equals_a_masked_gru_cell():
    torch.manual_seed(0)
    gru = W.BlockGRU(16, 16, 4)
    x, h = torch.randn(6, 16), torch.randn(6, 16)
    out = gru(x, h)
    assert out.shape == (6, 16)
    ref = torch.nn.GRUCell(16, 16)
    with torch.no_grad():
        ref.weight_ih.copy_(gru.cell.weight_ih * gru.mask_ih)
        ref.weight_hh.copy_(gru.cell.weight_hh * gru.mask_hh)
        ref.bias_ih.copy_(gru.cell.bias_ih)
        ref.bias_hh.copy_(gru.cell.bias_hh)
    assert torch.allclose(out, ref(x, h), atol=1e-6)
    x2, h2 = x.clone(), h.clone()
    x2[:, 4:8] += 1.0
    h2[:, 4:8] -= 1.0
    moved = (gru(x2, h2) - out).abs().amax(0) > 1e-7
    assert moved.tolist() == [False] * 4 + [True] * 4 + [False] * 8
    out.sum().backward()  # the masked-off weights get no gradient
    assert torch.all(gru.cell.weight_hh.grad[gru.mask_hh == 0] == 0)


def test_block_attention_and_the_prototype_memory_work_per_block():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    out = W.block_attention(q, k, v, 2)
    mha = torch.cat([torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) / 2.0, -1) @ v[..., s]
                     for s in (slice(0, 4), slice(4, 8))], -1)
    assert torch.allclose(out, mha, atol=1e-6)
    mem = W.BlockPrototypeMemory(1, 2, 8)  # one prototype: every slot becomes it, block by block
    slots = torch.randn(3, 4, 8)
    proto = W.block_layer_norm(mem.mlp(mem.mem).flatten(2), 2)[0, 0]
    assert torch.allclose(mem(slots), proto.expand(3, 4, 8), atol=1e-5)
    assert torch.allclose(W.block_layer_norm(slots, 2).reshape(3, 4, 2, 4).mean(-1), torch.zeros(3, 4, 2), atol=1e-6)


def test_slot_attention_competes_over_slots_and_means_over_inputs():
    torch.manual_seed(0)
    rbsu = W.RBSU(6, 3, 8, 2, iterations=2, mlp_hidden=4, prototypes=4, predictor_heads=2)
    x = torch.randn(2, 4, 10, 6)  # B, T, L, d_in
    slots, attn = rbsu(x)
    assert slots.shape == (2, 4, 3, 8) and attn.shape == (2, 4, 10, 3)
    assert torch.allclose(attn.sum(-1), torch.ones(2, 4, 10), atol=1e-5)  # softmax over slots
    k, v = rbsu.k(rbsu.norm_inputs(x[:, 0])) / 8 ** 0.5, rbsu.v(rbsu.norm_inputs(x[:, 0]))
    s0 = rbsu.initial(2)
    _, a = rbsu.attend(s0, k, v)
    w = (a + rbsu.eps) / (a + rbsu.eps).sum(1, keepdim=True)
    assert torch.allclose(w.sum(1), torch.ones(2, 3), atol=1e-5)  # each slot's update: a weighted mean
    # the recurrence: the second frame starts from the predictor's output, so frame 0 changes frame 1
    # (without the memory, whose mix of 4 untrained prototypes barely moves)
    rbsu = W.RBSU(6, 3, 8, 2, iterations=2, mlp_hidden=4, predictor_heads=2, use_memory=False)
    x2 = x.clone()
    x2[:, 0] = torch.randn(2, 10, 6)
    assert not torch.allclose(rbsu(x2, torch.Generator().manual_seed(1))[0][:, 1],
                              rbsu(x, torch.Generator().manual_seed(1))[0][:, 1])


def test_start_tokens_apply_f_k_times():
    torch.manual_seed(0)
    dec = W.Decoder(16, 4, 8, 5, 4, 1, 2, 0.0)
    s = dec.start(torch.tensor([0, 2, 1]))
    assert torch.allclose(s[0], dec.bos[0])
    assert torch.allclose(s[2], dec.f(dec.bos)[0], atol=1e-6)
    assert torch.allclose(s[1], dec.f(dec.f(dec.bos))[0], atol=1e-6)


def _tiny(objective):
    torch.manual_seed(0)
    return W.Dreamweaver(side=16, objective=objective, slots=3, size=16, blocks=4, d_model=16, cnn=4, iterations=2,
                         mlp_hidden=8, prototypes=4, vocab=8, dvae_hidden=4, decoder_layers=1, decoder_heads=2,
                         predictor_heads=2)


@pytest.mark.parametrize("objective", ["predict", "reconstruct"])
def test_both_objectives_train_the_binder_and_the_dvae(objective):
    m = _tiny(objective)
    video = torch.rand(3, 4, 3, 16, 16)
    loss = m(video, 1.0, torch.tensor([0, 1, 0]))
    assert loss.shape == (3,) and torch.isfinite(loss).all()
    loss.sum().backward()
    assert m.rbsu.mu.grad.abs().sum() > 0 and m.encoder.mlp[0].weight.grad.abs().sum() > 0
    assert m.dvae.enc[0].weight.grad.abs().sum() > 0
    # drawing a frame from the last step's slots gives images in [0, 1]
    frames = m.imagine(m.bind(video[:, :2])[0][:, -1])
    assert frames.shape == (3, 3, 16, 16) and float(frames.min()) >= 0 and float(frames.max()) <= 1


def test_the_reconstruction_objective_ignores_the_future_frames():
    m = _tiny("reconstruct")
    video = torch.rand(2, 4, 3, 16, 16)
    other = video.clone()
    other[:, 2:] = torch.rand(2, 2, 3, 16, 16)
    torch.manual_seed(3)
    a = m(video, 1.0, torch.tensor([1, 0]))
    torch.manual_seed(3)
    b = m(other, 1.0, torch.tensor([1, 0]))
    assert torch.allclose(a, b)
    p = _tiny("predict")
    torch.manual_seed(3)
    a = p(video, 1.0, torch.tensor([1, 0]))
    torch.manual_seed(3)
    assert not torch.allclose(a, p(other, 1.0, torch.tensor([1, 0])))


def test_swap_blocks_exchanges_only_the_named_blocks():
    s = torch.arange(2 * 3 * 8, dtype=torch.float).reshape(2, 3, 8)
    out = W.swap_blocks(s, 0, 2, [1, 3], 4)
    assert torch.equal(out[:, 0, 2:4], s[:, 2, 2:4]) and torch.equal(out[:, 2, 6:8], s[:, 0, 6:8])
    assert torch.equal(out[:, 0, :2], s[:, 0, :2]) and torch.equal(out[:, 1], s[:, 1])
    per = W.swap_blocks(s, torch.tensor([0, 1]), torch.tensor([2, 0]), [0], 4)  # each sample its own pair
    assert torch.equal(per[0, 0, :2], s[0, 2, :2]) and torch.equal(per[1, 1, :2], s[1, 0, :2])
    assert torch.equal(per[0, 1], s[0, 1]) and torch.equal(per[1, 2], s[1, 2])
    order = np.array([[2, 0], [1, 2]])
    assert np.array_equal(W.matched(s.numpy(), order)[1, 0], s[1, 1].numpy())
    r = np.array([[0.6, 0.0], [0.1, 0.1], [0.3, 0.2], [0.0, 0.7]])
    assert W.swap_sets(r, 0) == ([0], [3])
    assert W.swap_sets(r, 1) == ([3], [0])


def test_dci_of_known_importance_matrices():
    perfect = np.eye(4)[:, :3] + 0.0
    d = W.dci(perfect)
    assert d["D"] == pytest.approx(1.0, abs=1e-6) and d["C"] == pytest.approx(1.0, abs=1e-6)
    flat = np.ones((4, 3))
    d = W.dci(flat)
    assert d["D"] == pytest.approx(0.0, abs=1e-6) and d["C"] == pytest.approx(0.0, abs=1e-6)
    one_block = np.zeros((4, 3))
    one_block[2] = 1.0  # one block holds every factor: complete (C = 1), not disentangled (D = 0)
    d = W.dci(one_block)
    assert d["D"] == pytest.approx(0.0, abs=1e-6) and d["C"] == pytest.approx(1.0, abs=1e-6)


def test_trees_find_the_block_that_encodes_each_factor():
    rng = np.random.default_rng(0)
    n, m, d = 400, 3, 4
    y = rng.integers(0, 3, (n, 2))
    x = rng.normal(size=(n, m * d))
    x[:, 0] += 3 * y[:, 0]  # factor 0 lives in block 0, factor 1 in block 2
    x[:, 9] += 3 * y[:, 1]
    imp, acc = W.importance_matrix(x, y, n_estimators=20)
    r = W.block_importance(imp, m)
    assert r.argmax(0).tolist() == [0, 2] and (acc > 0.75).all()
    assert W.dci(r)["D"] > 0.7 and W.dci(r)["C"] > 0.7
    _, acc0 = W.importance_matrix(rng.normal(size=(n, m * d)), y, n_estimators=20)  # no signal: chance
    assert (acc0 < 0.55).all()


def test_hungarian_matching_follows_the_masks():
    truth = np.zeros((2, 16), bool)
    truth[0, :4], truth[1, 8:12] = True, True
    pred = np.zeros((3, 16))
    pred[0, 8:12], pred[1] = 0.9, 0.1
    pred[2, :4] = 0.8
    assert W.match_slots(truth, pred).tolist() == [2, 0]
    iou = W.soft_iou(truth, pred)
    assert iou.shape == (2, 3) and iou[0, 2] == pytest.approx(0.8 * 4 / (4 + 3.2 - 3.2))


def test_cosine_anneal_ends_at_its_ends():
    assert W.cosine_anneal(0, 1.0, 0.1, 0, 10) == 1.0 and W.cosine_anneal(10, 1.0, 0.1, 0, 10) == 0.1
    assert W.cosine_anneal(5, 1.0, 0.1, 0, 10) == pytest.approx(0.55)


def test_the_prototype_memory_maps_every_untrained_slot_to_one_vector():
    """Why ``small`` turns the memory off (docs/studies/dreamweaver.md): at init its mix of
    near-identical normalised prototypes sends every slot to the same vector, so slot attention
    stops competing; without it the slots stay apart."""
    x = torch.randn(4, 2, 256, 64)

    def slot_cosine(memory):
        torch.manual_seed(0)
        rbsu = W.RBSU(64, 3, 64, 8, prototypes=32, mlp_hidden=64, use_memory=memory)
        with torch.no_grad():
            s = torch.nn.functional.normalize(rbsu(x)[0][:, -1], dim=-1)
        return float((s @ s.transpose(1, 2))[:, [0, 0, 1], [1, 2, 2]].mean())

    assert slot_cosine(True) > 0.999
    assert slot_cosine(False) < 0.95


def test_dci_reads_whole_videos_apart_from_the_imagination_tests():
    """DCI's videos exclude the swap test's (the first ones on the test split), hold enough object
    rows, and the trees' train/held-out boundary falls between videos (a video's objects on one side)."""
    from iclr_ray.studies.dreamweaver.run import dci_videos

    idx = dci_videos(100, 3, 60, 30, seed=0)
    assert len(idx) == 20 and idx.min() >= 30 and len(set(idx.tolist())) == 20
    assert (dci_videos(100, 3, 60, 30, seed=0) == idx).all() and not (dci_videos(100, 3, 60, 30, seed=1) == idx).all()
    n_train = int(round(0.75 * len(idx))) * 3
    video_of_row = np.repeat(idx, 3)
    assert not set(video_of_row[:n_train]) & set(video_of_row[n_train:])


def test_the_split_keeps_swap_and_dci_videos_apart_or_refuses():
    from iclr_ray.studies.dreamweaver.config import PRESETS, Config

    with pytest.raises(ValueError, match="disjoint videos"):
        Config.model_validate({**PRESETS["smoke"], "eval": {**PRESETS["smoke"]["eval"], "swap_videos": 39}})
