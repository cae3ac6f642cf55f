"""alpharec's method against direct computations: the evaluator against a brute-force ranking,
LightGCN propagation against dense matrices, InfoNCE and BPR against their formulas, the sampler's
exclusions, models side by side training exactly as alone, and a new user folded into the graph."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from iclr_ray.studies.alpharec import alpharec as A  # noqa: E402


def _graph(seed=0, n_users=7, n_items=9, n=25):
    rng = np.random.default_rng(seed)
    return n_users, n_items, rng.integers(0, n_users, n), rng.integers(0, n_items, n)


def _dense_adj(n_users, n_items, users, items):
    a = np.zeros((n_users + n_items,) * 2)
    for u, i in zip(users, items):
        a[u, n_users + i] = a[n_users + i, u] = 1.0
    d = a.sum(1)
    inv = np.divide(1.0, np.sqrt(d), out=np.zeros_like(d), where=d > 0)
    return inv[:, None] * a * inv[None, :]


def test_norm_adj_is_the_symmetric_normalised_bipartite_graph():
    nu, ni, u, i = _graph()
    np.testing.assert_allclose(A.norm_adj(nu, ni, u, i).to_dense().numpy(), _dense_adj(nu, ni, u, i), atol=1e-6)


@pytest.mark.parametrize("include_0", [True, False])
def test_propagation_equals_dense_layers(include_0):
    nu, ni, u, i = _graph(1)
    adj = A.norm_adj(nu, ni, u, i)
    e0 = torch.randn(nu + ni, 4, generator=torch.Generator().manual_seed(0))
    dense = torch.tensor(_dense_adj(nu, ni, u, i), dtype=torch.float32)
    layers = [e0, dense @ e0, dense @ dense @ e0]
    want = torch.stack(layers if include_0 else layers[1:]).mean(0)
    torch.testing.assert_close(A.propagate(adj, e0, 2, include_0), want, atol=1e-5, rtol=1e-5)
    model = A.LightGCN(nu, ni, adj, layers=2, dim=4)
    model.emb.data = e0.clone()
    u_emb, i_emb = model()
    torch.testing.assert_close(torch.cat([u_emb, i_emb]), torch.stack(layers).mean(0), atol=1e-5, rtol=1e-5)
    xs = A.XSimGCL(nu, ni, adj, layers=2, dim=4)
    xs.emb.data = e0.clone()
    torch.testing.assert_close(torch.cat(xs()), torch.stack(layers[1:]).mean(0), atol=1e-5, rtol=1e-5)


def test_alpharec_maps_language_embeddings_through_one_mlp_then_the_graph():
    nu, ni, u, i = _graph(2)
    adj = A.norm_adj(nu, ni, u, i)
    item_lm, user_lm = torch.randn(ni, 12), torch.randn(nu, 12)
    m = A.AlphaRec(item_lm, user_lm, adj, layers=2, hidden_ratio=0.5, dim=5)
    assert [type(x).__name__ for x in m.mlp] == ["Linear", "LeakyReLU", "Linear"] and m.mlp[0].out_features == 6
    e0 = torch.cat([m.mlp(user_lm), m.mlp(item_lm)])
    uu, ii = m()
    torch.testing.assert_close(torch.cat([uu, ii]), A.propagate(adj, e0, 2))
    lin = A.AlphaRec(item_lm, user_lm, adj, linear=True, dim=5)
    assert len(lin.mlp) == 1 and lin.mlp[0].bias is None
    assert sum(p.numel() for p in m.parameters()) == 12 * 6 + 6 + 6 * 5 + 5  # the LM embeddings are frozen buffers


def test_the_mlp_keeps_one_weight_budget_across_lm_widths_as_the_official_multipliers_do():
    budget = 3072 * 1536  # text-embedding-3-large at the official 1/2
    for d, multiplier in [(768, 8), (1536, 2), (3072, 0.5), (4096, 9 / 32)]:  # BERT, ada-002, v3, 7B LMs
        assert A.mlp_hidden(d, 0.5, budget) == round(multiplier * d)
    assert A.mlp_hidden(576, 0.5) == 288 and A.mlp_hidden(576, 0.5, 384 * 192) == 128
    adj = A.norm_adj(*_graph(2))
    m = A.AlphaRec(torch.randn(9, 576), torch.randn(7, 576), adj, dim=5, mlp_weights=384 * 192)
    assert m.mlp[0].weight.numel() == 384 * 192


def test_info_nce_equals_the_formula():
    g = torch.Generator().manual_seed(3)
    u, items = torch.randn(4, 8, generator=g), torch.randn(30, 8, generator=g)
    pos, neg = torch.tensor([0, 5, 7, 29]), torch.randint(0, 30, (4, 6), generator=g)
    tau, want = 0.15, 0.0
    for b in range(4):
        cos = lambda j: float(torch.nn.functional.cosine_similarity(u[b], items[j], dim=0))  # noqa: E731
        num = math.exp(cos(pos[b]) / tau)
        want -= math.log(num / (num + sum(math.exp(cos(j) / tau) for j in neg[b])))
    assert float(A.info_nce(u, items, pos, neg, tau)) == pytest.approx(want, rel=1e-5)


def test_bpr_and_both_scoring_paths():
    g = torch.Generator().manual_seed(4)
    u, items = torch.randn(5, 3, generator=g), torch.randn(12, 3, generator=g)
    pos, neg = torch.randint(0, 12, (5,), generator=g), torch.randint(0, 12, (5,), generator=g)
    want = -sum(math.log(1 / (1 + math.exp(-(float(u[b] @ items[pos[b]]) - float(u[b] @ items[neg[b]])))))
                for b in range(5))
    assert float(A.bpr(u, items, pos, neg)) == pytest.approx(want, rel=1e-5)
    idx = torch.randint(0, 12, (5, 2), generator=g)  # 12 items <= 64 x 2 samples: the matmul path
    direct = torch.stack([torch.stack([u[b] @ items[j] for j in idx[b]]) for b in range(5)])
    torch.testing.assert_close(A.sampled_scores(u, items, idx), direct)
    big = torch.randn(200, 3, generator=g)  # 200 items > 64 x 2: the gather path
    direct = torch.stack([torch.stack([u[b] @ big[j] for j in idx[b]]) for b in range(5)])
    torch.testing.assert_close(A.sampled_scores(u, big, idx), direct)


def _brute(scores, targets, exclude, k):
    out = []
    for u in range(scores.shape[0]):
        t = set(np.flatnonzero(targets[u]))
        if not t:
            continue
        order = [j for j in np.argsort(-scores[u], kind="stable") if not exclude[u, j]][:k]
        hits = [1.0 if j in t else 0.0 for j in order]
        idcg = sum(1 / math.log2(r + 2) for r in range(min(len(t), k)))
        out.append((u, sum(hits) / len(t), sum(h / math.log2(r + 2) for r, h in enumerate(hits)) / idcg,
                    float(any(hits))))
    return out


def test_rank_metrics_equal_a_brute_force_ranking():
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((40, 60)).astype(np.float32)  # continuous: no ties
    targets = rng.random((40, 60)) < 0.06
    exclude = (rng.random((40, 60)) < 0.2) & ~targets
    got = A.rank_metrics(torch.tensor(scores), torch.tensor(targets), torch.tensor(exclude), 10)
    want = _brute(scores, targets, exclude, 10)
    assert list(got.users) == [w[0] for w in want]
    np.testing.assert_allclose(got.recall, [w[1] for w in want], rtol=1e-6)
    np.testing.assert_allclose(got.ndcg, [w[2] for w in want], rtol=1e-5)
    np.testing.assert_allclose(got.hr, [w[3] for w in want])
    cand = np.sort(rng.choice(60, 25, replace=False))  # ranking among candidates only (zero-shot)
    sub = A.rank_metrics(torch.tensor(scores), torch.tensor(targets), None, 10, candidates=torch.tensor(cand))
    want = _brute(scores[:, cand], targets[:, cand], np.zeros((40, 25), bool), 10)
    np.testing.assert_allclose(sub.recall, [w[1] for w in want], rtol=1e-6)
    np.testing.assert_allclose(sub.ndcg, [w[2] for w in want], rtol=1e-5)


def test_evaluate_over_chunks_of_users_equals_one_dense_ranking():
    nu, ni, u, i = _graph(10, 23, 40, 200)
    adj = A.norm_adj(nu, ni, u, i)
    rng = np.random.default_rng(10)
    tu, ti = rng.integers(0, nu, 60), rng.integers(0, ni, 60)
    targets, train = A.Interactions(nu, ni, tu, ti), A.Interactions(nu, ni, u, i)
    dense = lambda x: x.block(0, nu)  # noqa: E731
    assert dense(train | targets).sum() == len({*zip(u.tolist(), i.tolist()), *zip(tu.tolist(), ti.tolist())})
    assert sorted(train.items_of(3).tolist()) == sorted({int(b) for a, b in zip(u, i) if a == 3})
    torch.manual_seed(0)
    for model in (A.AlphaRec(torch.randn(ni, 8), torch.randn(nu, 8), adj, dim=4), A.LightGCN(nu, ni, adj, dim=4)):
        got = A.evaluate(model, targets, train, 5, chunk=7)
        want = A.rank_metrics(A.scores_of(model), dense(targets), dense(train), 5)
        np.testing.assert_array_equal(got.users, want.users)
        np.testing.assert_allclose(got.recall, want.recall, rtol=1e-6)
        np.testing.assert_allclose(got.ndcg, want.ndcg, rtol=1e-5)
        np.testing.assert_allclose(got.hr, want.hr)


def test_a_perfect_ranking_scores_one_and_random_recall_is_k_over_n():
    targets = torch.zeros(3, 50, dtype=torch.bool)
    targets[0, [1, 2]] = targets[1, 7] = targets[2, list(range(30))] = True
    r = A.rank_metrics(targets.float(), targets, None, 20)
    np.testing.assert_allclose(r.ndcg, 1.0, rtol=1e-6)
    np.testing.assert_allclose(r.recall, [1.0, 1.0, 20 / 30])
    assert A.random_recall(200, 20) == 0.1 and A.random_recall(10, 20) == 1.0


def test_sampler_draws_users_evenly_positives_from_training_and_negatives_outside_it():
    rng = np.random.default_rng(6)
    users, items = rng.integers(0, 20, 300), rng.integers(0, 40, 300)
    cand = np.arange(5, 40)
    s = A.Sampler(20, users, items, cand)
    train = {(int(a), int(b)) for a, b in zip(users, items)}
    n_users = len(np.unique(users))
    u, p = s.draw(seed=1, step=0, batch=n_users)
    assert sorted(u.tolist()) == sorted(np.unique(users).tolist())  # an epoch cycles through every user
    assert all((int(a), int(b)) in train for a, b in zip(u, p))
    neg = s.negatives(u, 50, copies=3, generator=torch.Generator().manual_seed(0))
    assert neg.shape == (3, n_users, 50)
    assert s.negatives(u, 1, copies=0, generator=torch.Generator()).shape == (0, n_users, 1)  # no model of a kind
    for c in range(3):
        for b, a in enumerate(u.tolist()):
            assert all(int(j) in cand and (a, int(j)) not in train for j in neg[c, b])
    # uniform over the allowed items: every allowed item of a user turns up
    big = s.negatives(u[:1], 4000, 1, torch.Generator().manual_seed(1))[0, 0]
    allowed = {int(j) for j in cand} - {b for a, b in train if a == int(u[0])}
    assert set(big.tolist()) == allowed
    u2, p2 = s.draw(seed=1, step=0, batch=n_users)  # a pure function of (seed, step)
    assert torch.equal(u, u2) and torch.equal(p, p2)
    assert s.steps_per_epoch(128) == 3


def _pair(seed):
    nu, ni, u, i = _graph(seed, 6, 10, 40)
    adj = A.norm_adj(nu, ni, u, i)
    torch.manual_seed(0)
    a = A.AlphaRec(torch.randn(ni, 8), torch.randn(nu, 8), adj, dim=4)
    torch.manual_seed(1)
    b = A.LightGCN(nu, ni, adj, dim=4)
    return a, b, A.Sampler(nu, u, i, np.arange(ni))


def test_models_side_by_side_train_exactly_as_each_alone():
    """Summed losses with one AdamW group per model: each model's trajectory is its own."""
    import copy

    a, b, s = _pair(7)
    hp = A.Hyper(tau=0.2)
    both = A.SideBySide([copy.deepcopy(a), copy.deepcopy(b)], [hp, hp])
    opt = torch.optim.AdamW([{"params": list(both.models[0].parameters()), "lr": 1e-2, "weight_decay": 1e-3},
                             {"params": list(both.models[1].parameters()), "lr": 5e-2, "weight_decay": 0.0}])
    alone = [(a, torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=1e-3)),
             (b, torch.optim.AdamW(b.parameters(), lr=5e-2, weight_decay=0.0))]
    for step in range(3):
        u, p = s.draw(0, step, 16)
        g = torch.Generator().manual_seed(step)
        nce, bpr = s.negatives(u, 5, 1, g), s.negatives(u, 1, 1, g)
        opt.zero_grad()
        both(u, p, nce, bpr, torch.tensor(step)).backward()
        opt.step()
        for (m, o), neg in zip(alone, (nce[0], bpr[0])):
            o.zero_grad()
            A.model_loss(m, u, p, neg, hp).backward()
            o.step()
    for (m, _), twin in zip(alone, both.models):
        for x, y in zip(m.parameters(), twin.parameters()):
            torch.testing.assert_close(x, y)


def test_fold_in_is_lightgcn_for_a_user_joining_the_graph():
    layer_items = [torch.randn(10, 3) for _ in range(3)]
    degree = torch.randint(1, 5, (10,))
    e0, hist = torch.randn(3), torch.tensor([1, 4, 6])
    want = [e0]
    for layer in layer_items[:-1]:  # e_u^(l) = sum_i e_i^(l-1) / sqrt(|H| (d_i + 1))
        want.append(sum(layer[i] / math.sqrt(3 * (int(degree[i]) + 1)) for i in hist))
    torch.testing.assert_close(A.fold_in(e0, hist, layer_items, degree), torch.stack(want).mean(0))
    torch.testing.assert_close(A.fold_in(e0, torch.tensor([], dtype=torch.long), layer_items, degree), e0)


def test_served_ranks_a_training_user_as_the_trained_model_does():
    nu, ni, u, i = _graph(8, 6, 12, 40)
    adj = A.norm_adj(nu, ni, u, i)
    item_lm = torch.randn(ni, 8)
    from iclr_ray.studies.alpharec.data import user_means

    torch.manual_seed(0)
    m = A.AlphaRec(item_lm, torch.as_tensor(user_means(nu, u, i, item_lm.numpy())), adj, dim=4)
    served = A.Served(m.mlp.state_dict(), item_lm, nu, torch.as_tensor(u), torch.as_tensor(i), 2, 4, 0.5, False)
    scores = A.scores_of(m)
    for user in range(nu):
        top, s = served.top_k(served.users[user], 5)
        assert list(top) == scores[user].topk(5).indices.tolist()
        np.testing.assert_allclose(s, scores[user].topk(5).values.numpy(), rtol=1e-5)
    top, _ = served.top_k(served.new_user([0, 3]), 12, exclude=[0, 3])
    assert len(top) == 10 and not {0, 3} & set(top.tolist())


def test_noise_control_keeps_size_and_scale_not_content():
    emb = np.random.default_rng(9).standard_normal((500, 16)).astype(np.float32) * 3 + 1
    noise = A.noise_like(emb, 0)
    assert noise.shape == emb.shape
    np.testing.assert_allclose(noise.std(0), emb.std(0), rtol=0.15)
    assert abs(np.corrcoef(noise[:, 0], emb[:, 0])[0, 1]) < 0.15


def test_mean_pooled_ignores_padding():
    pytest.importorskip("transformers")
    from iclr_ray.llm.model import build_model, build_tokenizer

    tok = build_tokenizer(["Toy Story (1995)", "GoldenEye (1995)", "a much longer title for padding here"], 300)
    model = build_model("tiny-llama", tok).eval()
    texts = ["Toy Story (1995)", "a much longer title for padding here"]
    together = A.mean_pooled(model, tok, texts, batch_size=2)
    alone = np.vstack([A.mean_pooled(model, tok, [t], batch_size=1) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
