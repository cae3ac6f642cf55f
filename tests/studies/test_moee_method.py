"""moee's method on a randomly initialised tiny OLMoE (2 layers, 4 experts): RW's shape and values,
left padding, the z-scoring, the sum score against the paper's formula, the scoring of each task
type, and the shared training loss of a mixture of experts."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from iclr_ray.llm.model import build_model, build_tokenizer  # noqa: E402
from iclr_ray.studies.moee import evaluate as E  # noqa: E402
from iclr_ray.studies.moee import moee as M  # noqa: E402
from iclr_ray.studies.moee.data import Task  # noqa: E402

TEXTS = ["the dress fits well", "these jeans are too long for me and the fabric is thin", "love it",
         "a warm sweater for winter evenings", "the colour faded after one wash"]


@pytest.fixture(scope="module")
def moe():
    torch.set_num_threads(1)
    tok = build_tokenizer(TEXTS * 4, vocab_size=300)
    return build_model("tiny-olmoe", tok, seed=0).eval(), tok


def test_rw_is_every_layers_full_router_output_at_the_last_token(moe):
    model, tok = moe
    enc = M.encode(model, tok, TEXTS, rw="logits")
    layers, experts = model.config.num_hidden_layers, model.config.num_experts
    assert enc.rw.shape == (len(TEXTS), layers * experts) and enc.hs.shape == (len(TEXTS), model.config.hidden_size)
    # by hand: each router's weight applied to its input at the last token
    inputs = []
    hooks = [r.register_forward_pre_hook(lambda _m, a: inputs.append(a[0])) for r in M.router_modules(model)]
    ids = tok(TEXTS[1], add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[tok.bos_token_id] + ids]), output_hidden_states=True)
    for h in hooks:
        h.remove()
    by_hand = torch.cat([x[-1] @ r.weight.T for x, r in zip(inputs, M.router_modules(model))]).detach().numpy()
    np.testing.assert_allclose(enc.rw[1], by_hand, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(enc.hs[1], out.hidden_states[-1][0, -1].numpy(), rtol=1e-4, atol=1e-5)
    soft = M.encode(model, tok, TEXTS, rw="softmax").rw.reshape(len(TEXTS), layers, experts)
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(soft[1], torch.softmax(torch.tensor(by_hand).reshape(layers, experts), -1).numpy(),
                               rtol=1e-4, atol=1e-6)


def test_left_padding_gives_each_text_its_own_last_token(moe):
    model, tok = moe
    batch = M.encode(model, tok, TEXTS, prompt="prompteol")
    for i, t in enumerate(TEXTS):
        alone = M.encode(model, tok, [t], prompt="prompteol")
        np.testing.assert_allclose(batch.hs[i], alone.hs[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(batch.rw[i], alone.rw[0], rtol=1e-4, atol=1e-5)
    corpus = M.encode_corpus(model, tok, TEXTS, batch_size=2, prompt="prompteol")  # by length, order restored
    np.testing.assert_allclose(corpus.hs, batch.hs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(corpus.rw, batch.rw, rtol=1e-4, atol=1e-5)
    ids, mask, pos = M.left_padded(tok, ["a b c d e f", "a"], 64)
    assert mask[1].tolist()[-2:] == [1, 1] and mask[1, 0] == 0 and pos[1, -1] == 1 and pos[0, 0] == 0
    cut = M.left_padded(tok, ["word " * 100], 16)[0][0]
    assert len(cut) == 16 and cut[0] == tok.bos_token_id  # the end kept, after BOS


def test_untrained_router_control_reads_the_same_inputs(moe):
    model, tok = moe
    own = [r.weight.detach().clone() for r in M.router_modules(model)]
    enc = M.encode(model, tok, TEXTS, untrained=own)
    np.testing.assert_allclose(enc.rw_untrained, enc.rw, rtol=1e-5, atol=1e-6)  # own weights: the trained RW
    fresh = M.random_routers(model, seed=1)
    assert [w.shape for w in fresh] == [w.shape for w in own]
    other = M.encode(model, tok, TEXTS, untrained=fresh)
    assert not np.allclose(other.rw_untrained, other.rw)
    np.testing.assert_allclose(other.rw, enc.rw)  # the control never changes the model's own routing


def test_a_dense_model_has_no_routers():
    tok = build_tokenizer(None)
    with pytest.raises(ValueError, match="not a mixture of experts"):
        M.router_modules(build_model("tiny-llama", tok))


def test_z_scoring_per_dimension():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, [1.0, 10.0, 0.1], size=(200, 3))
    z = M.standardise(x)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(z.std(0), 1, rtol=1e-6)
    const = M.standardise(np.ones((5, 2)))
    assert np.all(const == 0)  # a constant dimension: 0 / (0 + eps)
    s = M.Standardiser.fit(x, x[:, :2])
    np.testing.assert_allclose(s.apply(x, x[:, :2])[0], z, rtol=1e-6)
    # views z-scored by statistics of other rows (the fit texts), HS also kept raw
    enc = M.Encoded(x[100:], x[100:, :2])
    views = M.Views.of(enc, standardiser=M.Standardiser.fit(x[:100], x[:100, :2]))
    np.testing.assert_allclose(views.hs, (x[100:] - x[:100].mean(0)) / (x[:100].std(0) + M.EPS))
    assert abs(views.hs.mean(0)).max() > 0.01  # not the test rows' own statistics
    np.testing.assert_allclose(views.get("hs_raw"), M.unit(x[100:]))


def test_sum_embedding_dot_is_the_papers_sum_score():
    rng = np.random.default_rng(1)
    hs_a, hs_b, rw_a, rw_b = (rng.normal(size=(50, d)) for d in (16, 16, 8, 8))
    for alpha in (0.0, 0.5, 1.0, 3.0):
        manual = np.array([hs_a[i] @ hs_b[i] / np.linalg.norm(hs_a[i]) / np.linalg.norm(hs_b[i])
                           + alpha * rw_a[i] @ rw_b[i] / np.linalg.norm(rw_a[i]) / np.linalg.norm(rw_b[i])
                           for i in range(50)])
        np.testing.assert_allclose(M.sum_score(hs_a, rw_a, hs_b, rw_b, alpha), manual, rtol=1e-10)
        ea, eb = M.sum_embedding(hs_a, rw_a, alpha), M.sum_embedding(hs_b, rw_b, alpha)
        np.testing.assert_allclose(np.sum(ea * eb, 1) * (1 + alpha), manual, rtol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(ea, axis=1), 1.0)
    with pytest.raises(ValueError):
        M.sum_embedding(hs_a, rw_a, -1.0)


def _views(n=60, seed=0, signal=1.0):
    """HS carries the class weakly, RW carries it strongly: the sum should beat HS."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3), n // 3)
    centres = rng.normal(size=(3, 12))
    hs = 0.3 * centres[labels] + rng.normal(size=(n, 12))
    rw = signal * centres[labels][:, :6] + 0.3 * rng.normal(size=(n, 6))
    return M.Views(M.standardise(hs), M.standardise(rw)), labels


def test_each_task_type_scores_and_alpha_zero_is_hs():
    views, labels = _views()
    rng = np.random.default_rng(2)
    pairs = rng.integers(0, 60, (200, 2))
    grades = (labels[pairs[:, 0]] == labels[pairs[:, 1]]).astype(float)
    tasks = [Task("sts", "s", [""] * 60, pairs=pairs, target=grades),
             Task("pair_classification", "p", [""] * 60, pairs=pairs, target=grades),
             Task("classification", "c", [""] * 60, labels=labels, train=np.arange(0, 60, 2), test=np.arange(1, 60, 2)),
             Task("clustering", "k", [""] * 60, labels=labels, subsets=[np.arange(60), np.arange(0, 60, 2)]),
             Task("reranking", "r", [""] * 60, queries=np.arange(0, 60, 3),
                  candidates=np.stack([np.roll(np.arange(60), -i)[[1, 2, 20, 40]] for i in range(0, 60, 3)]),
                  relevant=np.tile([True, True, False, False], (20, 1)))]
    for task in tasks:
        hs = E.task_score(task.kind, E.score_units(task, views, "hs"), task.target)
        sum_ = E.task_score(task.kind, E.score_units(task, views, "sum", 1.0), task.target)
        zero = E.score_units(task, views, "sum", 0.0)
        np.testing.assert_array_equal(zero, E.score_units(task, views, "hs"))
        assert sum_ > hs, task.kind  # RW holds the classes here, HS barely
    # pair classification's sum is each similarity measure summed over the two parts
    units = E.score_units(tasks[1], views, "sum", 2.0)
    hs_u, rw_u = (E.pair_scores(views, pairs, v, 1.0) for v in ("hs", "rw"))
    np.testing.assert_allclose(units, hs_u + 2.0 * rw_u)


def test_average_precision_by_hand():
    assert E.average_precision(np.array([0.9, 0.8, 0.1]), np.array([True, False, True])) == pytest.approx(
        (1 / 1 + 2 / 3) / 2)
    assert E.average_precision(np.array([0.1, 0.9]), np.array([True, False])) == 0.5
    assert math.isnan(E.average_precision(np.array([0.1]), np.array([False])))


def test_moe_training_loss_adds_the_load_balancing_loss(moe):
    from iclr_ray.llm.loss import summed_token_loss
    from iclr_ray.llm.recipe import router_aux_coef

    model, tok = moe
    assert router_aux_coef(model) == model.config.router_aux_loss_coef > 0
    assert router_aux_coef(build_model("tiny-llama", build_tokenizer(None))) == 0.0
    ids = torch.tensor([tok(TEXTS[1]).input_ids])
    out = model(input_ids=ids, labels=ids, output_router_logits=True)  # transformers' own: mean CE + coef * aux
    total, n = summed_token_loss(out.logits, ids)
    assert (total / n + router_aux_coef(model) * out.aux_loss).item() == pytest.approx(out.loss.item(), rel=1e-5)


def test_rw_form_follows_the_papers_model_files():
    from types import SimpleNamespace

    def of(model_type):
        return SimpleNamespace(config=SimpleNamespace(model_type=model_type))

    assert M.rw_kind("auto", of("deepseek_v2")) == "softmax" and M.rw_kind("auto", of("olmoe")) == "logits"
    assert M.rw_kind("softmax", of("olmoe")) == "softmax"


def test_a_qwen_moe_saved_in_its_released_layout_loads_and_gives_rw(tmp_path, moe):
    """The paper preset's Qwen1.5-MoE, tiny, saved as the hub holds it (config.json + safetensors):
    one router per layer found (its shared expert's 1-wide gate is not one), RW of layers x experts."""
    from transformers import AutoModelForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM

    from iclr_ray.llm.model import needs_remote_code

    _, tok = moe
    config = Qwen2MoeConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                            shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, num_experts=6, num_experts_per_tok=2)
    torch.manual_seed(0)
    Qwen2MoeForCausalLM(config).save_pretrained(tmp_path / "qwen-moe")
    assert needs_remote_code(str(tmp_path / "qwen-moe")) is None
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "qwen-moe").eval()
    assert len(M.router_modules(model)) == 2
    enc = M.encode(model, tok, TEXTS, rw="logits")
    assert enc.rw.shape == (len(TEXTS), 2 * 6) and np.isfinite(enc.rw).all()


def test_deepseek_moe_counts_its_routed_experts_and_needs_remote_code(tmp_path):
    import json

    from transformers import DeepseekV3Config

    from iclr_ray.llm.model import needs_remote_code, num_experts

    assert num_experts(DeepseekV3Config(n_routed_experts=64)) == 64
    assert needs_remote_code("deepseek-ai/deepseek-moe-16b-base") == "deepseek"  # the shape shipped here
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek", "auto_map": {}}))
    assert needs_remote_code(str(tmp_path)) == "deepseek"
