"""ClusPro's method without Ray: the balanced OT assignment, the EMA memory, the prototype losses,
the inference path (no prototype on it) and the CZSL metrics on hand-worked cases."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ot")

import torch.nn.functional as F  # noqa: E402

from iclr_ray.studies.cluspro import cluspro as C  # noqa: E402


def _crowd(n=30, d=8, seed=0):
    """Features crowded around e0; prototype 0 near e0, prototypes 1 and 2 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    f = F.normalize(torch.eye(d)[0] + 0.3 * torch.randn(n, d, generator=g), dim=1)
    p = F.normalize(torch.stack([torch.eye(d)[0] + 0.1 * torch.randn(d, generator=g), torch.eye(d)[1],
                                 torch.eye(d)[2]]), dim=1)
    return f, p


@pytest.mark.parametrize("structure", [0.0, 2.0])
def test_ot_assignment_is_balanced_across_prototypes(structure):
    f, p = _crowd()
    coupling = C.ot_assign(f, p, structure=structure)
    assert torch.allclose(coupling.sum(0), torch.full((3,), 1 / 3, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(coupling.sum(1), torch.full((30,), 1 / 30, dtype=torch.float64), atol=1e-4)
    counts = np.bincount(C.hard_assign(f, p, "ot", structure=structure).numpy(), minlength=3)
    assert counts.min() >= 7 and counts.max() <= 13, counts  # about 10 each
    # the k-means step sends the whole crowd to the nearest prototype: OT is what balances
    assert np.bincount(C.hard_assign(f, p, "nearest").numpy(), minlength=3).tolist() == [30, 0, 0]


def test_one_prototype_takes_every_sample():
    f, p = _crowd()
    assert (C.hard_assign(f, p[:1], "ot") == 0).all()


def test_ema_keeps_unit_norm_and_leaves_empty_prototypes_alone():
    g = torch.Generator().manual_seed(1)
    protos = F.normalize(torch.randn(5, 6, generator=g), dim=1)
    sums = torch.randn(5, 6, generator=g) * 7
    counts = torch.tensor([3.0, 0.0, 1.0, 0.0, 9.0])
    new = C.ema_update(protos, sums, counts, 0.9)
    assert torch.allclose(new.norm(dim=1), torch.ones(5), atol=1e-6)
    assert torch.equal(new[[1, 3]], protos[[1, 3]])
    expect = F.normalize(0.9 * protos[0] + 0.1 * F.normalize(sums[0], dim=0), dim=0)
    assert torch.allclose(new[0], expect, atol=1e-6)
    assert not torch.allclose(new[0], protos[0])


def _model(method, k=3, seed=0, d=16, dropout=0.0):
    """A small model; no dropout unless asked (so two models' losses compare exactly)."""
    torch.manual_seed(seed)
    seen = np.array([(a, o) for a in range(3) for o in range(4) if (a + o) % 3], np.int64)
    return C.CZSL(3, 4, seen, method=method, d=d, kind="mlp", in_dim=5, k=k, dropout=dropout,
                  prim_dropout=dropout), seen


def _batch(seen, n=24, seed=0):
    rng = np.random.default_rng(seed)
    pid = rng.integers(0, len(seen), n)
    x = torch.as_tensor(rng.normal(size=(n, 5)), dtype=torch.float32)
    return x, torch.as_tensor(seen[pid, 0]), torch.as_tensor(seen[pid, 1]), torch.as_tensor(pid)


def test_memory_updates_keep_unit_norm_and_each_path_uses_its_own_labels():
    model, seen = _model("cluspro", dropout=0.5)
    model.train()
    x, attrs, objs, pid = _batch(seen)
    before_a, before_o = model.attr_protos.clone(), model.obj_protos.clone()
    for _ in range(5):
        model.loss(x, attrs, objs, pid).backward()
    for name in ("attr_protos", "obj_protos"):
        assert torch.allclose(getattr(model, name).norm(dim=-1), torch.ones(getattr(model, name).shape[:2]), atol=1e-5)
    # only the primitives in the batch move (the official code masked objects with attribute labels)
    moved_a = (model.attr_protos != before_a).any(-1).any(-1)
    moved_o = (model.obj_protos != before_o).any(-1).any(-1)
    assert moved_a.tolist() == [a in set(attrs.tolist()) for a in range(3)]
    assert moved_o.tolist() == [o in set(objs.tolist()) for o in range(4)]
    labels = model.assign_and_update("obj_protos", model.features(x)[2], objs)
    assert ((labels // 3) == objs).all()


def test_the_prototype_loss_has_a_gradient_and_ce_has_no_memory():
    ce, seen = _model("ce")
    assert not hasattr(ce, "attr_protos") and ce.k == 3
    single, _ = _model("single")
    assert single.attr_protos.shape == (3, 1, 16)
    cl, _ = _model("cluspro")
    x, attrs, objs, pid = _batch(seen)
    ce.train(), cl.train()
    l_ce, l_cl = ce.loss(x, attrs, objs, pid), cl.loss(x, attrs, objs, pid)
    assert l_cl > l_ce  # same weights (same seed), plus 0.1 x the contrastive term
    l_cl.backward()
    assert cl.head_a.fc.weight.grad.abs().sum() > 0


def test_the_prototypes_leave_the_heads_statistics_and_dropout_alone():
    """One training loss of a prototype method updates each head's BatchNorm statistics once (the
    images), as ce's does, and the prototypes' path is deterministic (no dropout); the heads'
    ordinary training-mode path (the negative control) moves the statistics and draws dropout."""
    cl, seen = _model("cluspro", dropout=0.5)
    ce, _ = _model("ce", dropout=0.5)
    cl.train(), ce.train()
    batch = _batch(seen)
    cl.loss(*batch), ce.loss(*batch)
    for head in ("head_a", "head_o"):
        a, b = getattr(cl, head).bn, getattr(ce, head).bn
        assert int(a.num_batches_tracked) == int(b.num_batches_tracked) == 1  # the images, once
    protos = cl.attr_protos.flatten(0, 1)
    stats = cl.head_a.bn.running_mean.clone()
    assert torch.equal(cl.head_a.frozen(protos), cl.head_a.frozen(protos))
    assert torch.equal(cl.head_a.bn.running_mean, stats)
    assert not torch.equal(cl.head_a(protos), cl.head_a(protos))  # training mode: dropout differs
    assert not torch.equal(cl.head_a.bn.running_mean, stats)


def test_prototypes_cost_nothing_at_test_time():
    """ClusPro's inference path is CE's: the same parameters, and scores untouched by the memory."""
    cl, seen = _model("cluspro")
    ce, _ = _model("ce")
    assert sum(p.numel() for p in cl.parameters()) == sum(p.numel() for p in ce.parameters())
    cl.load_state_dict({k: v for k, v in ce.state_dict().items()}, strict=False)
    cl.eval(), ce.eval()
    x, *_ = _batch(seen)
    pairs = torch.as_tensor(np.array([(a, o) for a in range(3) for o in range(4)]))
    before = cl.pair_scores(x, pairs)
    assert torch.equal(before, ce.pair_scores(x, pairs))
    cl.attr_protos.copy_(F.normalize(torch.randn_like(cl.attr_protos), dim=-1))
    assert torch.equal(cl.pair_scores(x, pairs), before)


def test_methods_side_by_side_sum_their_losses():
    a, seen = _model("ce")
    b, _ = _model("single")
    m = C.Methods({"ce": a, "single": b})
    m.train()
    batch = _batch(seen)
    # the same batch: the sum is each model's own loss (each memory updated once either way)
    a2, _ = _model("ce")
    b2, _ = _model("single")
    a2.train(), b2.train()
    assert torch.allclose(m(*batch), a2.loss(*batch) + b2.loss(*batch), atol=1e-4)


def test_hsic_is_one_for_identical_features_and_small_for_independent_ones():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=g)
    assert math.isclose(float(C.hsic(x, x)), 1.0, rel_tol=1e-5)
    assert float(C.hsic(x, torch.randn(200, 8, generator=g))) < 0.1


def test_curve_and_metrics_on_a_hand_worked_case():
    # candidates: pairs 0, 1 seen; pair 2 unseen. Samples 0-1 seen (truth 0, 1), 2-3 unseen (truth 2).
    scores = np.array([[3.0, 1.0, 2.0],   # seen, right; turns to 2 once bias > 1
                       [0.0, 1.0, 4.0],   # seen, wrong (pair 2 wins) until bias < -3
                       [1.0, 0.0, 0.5],   # unseen: right once bias > 0.5
                       [0.0, 2.0, 1.0]])  # unseen: right once bias > 1
    truth = np.array([0, 1, 2, 2])
    unseen_cand = np.array([False, False, True])
    unseen_sample = np.array([False, False, True, True])
    biases, s, u = C.seen_unseen_curve(scores, truth, unseen_cand, unseen_sample)
    # bias -inf / (-3, 0.5] / (0.5, 1] / (1, inf): seen 1, 0.5, 0.5, 0 ; unseen 0, 0, 0.5, 1
    assert s.tolist() == [1.0, 0.5, 0.5, 0.0, 0.0] and u.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]
    m = C.czsl_metrics(s, u)
    assert m["S"] == 1.0 and m["U"] == 1.0
    assert m["HM"] == pytest.approx(0.5)  # 2 * 0.5 * 0.5 / 1
    # trapezoids over u: 0 -> 0.5 at s 0.5 (0.25), 0.5 -> 1 from s 0.5 to 0 (0.125)
    assert m["AUC"] == pytest.approx(0.375)


def test_feasibility_on_a_hand_worked_case():
    attr = np.array([[1.0, 0.0], [0.0, 1.0]])
    obj = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    seen = np.array([[True, False, False], [False, False, True]])
    f = C.feasibility(attr, obj, seen)
    assert f[0, 0] == 1.0 and f[1, 2] == 1.0
    # (a0, o1): o1's best cosine with a0's objects {o0} is 0.6; a0's with o1's attributes {} is -1
    assert f[0, 1] == pytest.approx((0.6 - 1.0) / 2)
    # (a1, o0): o0 vs a1's objects {o2}: 0; a1 vs o0's attributes {a0}: 0
    assert f[1, 0] == pytest.approx(0.0)


def test_the_calibration_bias_chosen_on_one_split_is_applied_to_another():
    """The best-HM bias of a sweep, and accuracies at a given bias: a bias that favours unseen
    candidates moves predictions to them; -inf and +inf leave only seen or only unseen candidates."""
    scores = np.array([[2.0, 1.0], [2.0, 1.5], [0.0, 1.0]])  # candidate 1 is unseen
    truth, unseen_cand = np.array([0, 1, 1]), np.array([False, True])
    unseen_sample = unseen_cand[truth]
    biases, s, u = C.seen_unseen_curve(scores, truth, unseen_cand, unseen_sample)
    b = C.best_bias(biases, s, u)
    assert 0.5 < b < 1.0  # flips sample 1 (gap 0.5) but not sample 0 (gap 1.0)
    assert C.at_bias(scores, truth, unseen_cand, unseen_sample, b) == {"S": 1.0, "U": 1.0, "HM": 1.0}
    assert C.at_bias(scores, truth, unseen_cand, unseen_sample, -np.inf)["U"] == 0.0
    assert C.at_bias(scores, truth, unseen_cand, unseen_sample, np.inf)["S"] == 0.0
    assert C.at_bias(scores, truth, unseen_cand, unseen_sample, 0.0) == {"S": 1.0, "U": 0.5, "HM": 2 / 3}
