"""Knowledge entropy's method without Ray: the coefficients the hooks read equal a direct
recomputation of act(gate(x)) * up(x); padding does not count; the entropy maths (uniform gives
L log m, one-hot 0); resuscitation changes only the chosen up-projection rows, by the stated
factor, and so scales exactly those coefficients; the random control keeps the amounts."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.studies.knowledge_entropy import entropy  # noqa: E402


@pytest.fixture()
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def _direct(model, ids, mask):
    """C_bar recomputed from the hidden states entering each block's MLP, without hooks on it."""
    out = []
    with torch.no_grad():
        hs = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        for layer, block in enumerate(model.model.layers):
            h = hs[layer]
            attn_in = block.input_layernorm(h)
            pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
            emb = model.model.rotary_emb(h, pos)
            causal = torch.full((ids.shape[1], ids.shape[1]), float("-inf")).triu(1)
            bias = causal[None, None] + torch.where(mask[:, None, None, :] > 0, 0.0, float("-inf"))
            a = block.self_attn(attn_in, attention_mask=bias, position_embeddings=emb)[0]
            x = block.post_attention_layernorm(h + a)
            c = (block.mlp.act_fn(block.mlp.gate_proj(x)) * block.mlp.up_proj(x)).abs().double()
            w = mask[..., None].double()
            out.append(((c * w).sum(1) / w.sum(1)).mean(0))
    return torch.stack(out).numpy()


def test_hooked_coefficients_equal_a_direct_recomputation(tiny):
    ids = torch.randint(0, 97, (3, 10))
    mask = torch.ones_like(ids)
    c_bar = entropy.coefficient_means(tiny, ids, mask, batch=2)
    assert c_bar.shape == (3, 48)
    np.testing.assert_allclose(c_bar, _direct(tiny, ids, mask), rtol=1e-5)


def test_padding_tokens_do_not_count(tiny):
    ids = torch.randint(1, 97, (2, 8))
    mask = torch.ones_like(ids)
    padded = torch.cat([ids, torch.zeros(2, 4, dtype=ids.dtype)], 1)
    pmask = torch.cat([mask, torch.zeros(2, 4, dtype=mask.dtype)], 1)
    np.testing.assert_allclose(entropy.coefficient_means(tiny, padded, pmask),
                               entropy.coefficient_means(tiny, ids, mask), rtol=1e-5)


def test_entropy_is_l_log_m_for_uniform_and_zero_for_one_hot():
    L, m = 4, 50
    assert entropy.knowledge_entropy(np.ones((L, m))) == pytest.approx(L * math.log(m))
    one_hot = np.zeros((L, m))
    one_hot[:, 3] = 2.0
    assert entropy.knowledge_entropy(one_hot) == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    h = entropy.layer_entropies(rng.random((L, m)))
    assert np.all(h < math.log(m)) and np.all(h > 0)


def test_resuscitation_scales_only_the_chosen_rows_by_the_stated_factor(tiny):
    ids = torch.randint(0, 97, (4, 12))
    mask = torch.ones_like(ids)
    c_bar = entropy.coefficient_means(tiny, ids, mask)
    plan = entropy.resuscitation_factors(c_bar, ratio=0.5, q=2.0)
    for row, idx, f in zip(c_bar, plan.neurons, plan.factors):
        assert len(idx) == 24  # the lower half of 48
        assert np.all(row[idx] <= np.quantile(row, 0.5))
        np.testing.assert_allclose(f, row.mean() / row[idx] * 2.0)
    before = [m.up_proj.weight.clone() for m in entropy.gated_mlps(tiny)]
    gates = [m.gate_proj.weight.clone() for m in entropy.gated_mlps(tiny)]
    entropy.resuscitate(tiny, plan)
    for mlp, w0, g0, idx, f in zip(entropy.gated_mlps(tiny), before, gates, plan.neurons, plan.factors):
        w = mlp.up_proj.weight
        other = np.setdiff1d(np.arange(48), idx)
        assert torch.equal(w[other], w0[other]) and torch.equal(mlp.gate_proj.weight, g0)
        torch.testing.assert_close(w[idx], w0[idx] * torch.as_tensor(f, dtype=w.dtype)[:, None])
    # in the first layer (whose input nothing upstream changed) the coefficients scale exactly so
    after = entropy.coefficient_means(tiny, ids, mask)
    np.testing.assert_allclose(after[0, plan.neurons[0]], c_bar[0, plan.neurons[0]] * plan.factors[0], rtol=1e-4)
    others = np.setdiff1d(np.arange(48), plan.neurons[0])
    np.testing.assert_allclose(after[0, others], c_bar[0, others], rtol=1e-5)
    # lifting the weakest neurons towards the mean raises the entropy of that layer
    assert entropy.layer_entropies(after)[0] > entropy.layer_entropies(c_bar)[0]


def test_q_of_one_lifts_the_chosen_neurons_to_the_layer_mean():
    c_bar = np.array([[1.0, 2.0, 3.0, 10.0]])
    plan = entropy.resuscitation_factors(c_bar, ratio=0.5, q=1.0)
    assert list(plan.neurons[0]) == [0, 1]
    np.testing.assert_allclose(c_bar[0, plan.neurons[0]] * plan.factors[0], [4.0, 4.0])
    with pytest.raises(ValueError, match="ratio"):
        entropy.resuscitation_factors(c_bar, ratio=0.0, q=2.0)


def test_the_random_control_applies_the_rule_to_neurons_it_did_not_pick():
    """As many random neurons per layer, each scaled by its own (mean / C_bar_j) * q: the rule, not
    the chosen neurons' (large) factors moved onto other neurons."""
    rng = np.random.default_rng(1)
    c_bar = rng.random((3, 40))
    plan = entropy.resuscitation_factors(c_bar, 0.25, 2.0)
    ctrl = entropy.random_like(plan, c_bar, 2.0, seed=0)
    for row, a, b, fb in zip(c_bar, plan.neurons, ctrl.neurons, ctrl.factors):
        assert len(a) == len(b) == len(set(b.tolist())) and not np.array_equal(a, b)
        np.testing.assert_allclose(row[b] * fb, row.mean() * 2.0)  # each lifted to q times the layer mean


def test_a_non_gated_mlp_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=30, n_positions=16))
    with pytest.raises(ValueError, match="not a gated MLP"):
        entropy.gated_mlps(gpt2)
