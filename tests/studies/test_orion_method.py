"""orion's method without Ray: the task generators' structure, and request patching with forward
hooks held to direct computations (no patch is x2; the prefix-cached patch equals a whole patched
forward pass at every layer; patching after the last block is x1's own last step; left padding
changes nothing) on a tiny random Llama, a tiny GPT-2 and, in the slow test, real SmolLM2."""
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.studies.orion import patching, tasks  # noqa: E402


# -- tasks ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", tasks.TASKS)
def test_every_prompt_states_its_answer_in_its_context_and_pairs_tell_outcomes_apart(name):
    task = tasks.build(name, 8, seed=1)
    for p in task.grid():
        assert p.text == task.render(p.context, p.request) and p.answer.strip()
        if name != "factual":  # factual recall reads the model's own knowledge
            assert p.answer.strip() in p.text
    first = lambda text: text.split()[0]  # noqa: E731  (a word stands in for the first token)
    pairs = tasks.pairs(task, lambda c, r: True, first, 20, seed=0)
    assert pairs and len(set(pairs)) == len(pairs)
    for q in pairs:
        assert q.c1 != q.c2 and q.r1 != q.r2 and tasks.compatible(task, q.c1, q.c2)
        outs = {first(task.answer(q.c2, q.r2)), first(task.answer(q.c2, q.r1)), first(task.answer(q.c1, q.r1))}
        assert len(outs) == 3


def test_pairs_use_only_prompts_the_model_answers():
    task = tasks.build("nanoqa", 10, seed=0)
    bad = {(0, "city"), (3, "name")}
    pairs = tasks.pairs(task, lambda c, r: (c, r) not in bad, lambda t: t, 50, seed=0)
    for q in pairs:
        assert not {(q.c1, q.r1), (q.c2, q.r2), (q.c2, q.r1)} & bad


def test_typehint_answer_is_the_instance_of_the_called_functions_class():
    task = tasks.build("typehint", 6, seed=2)
    for p in task.grid():
        code = task.contexts[p.context]["code"]
        call = p.text.rsplit("\n", 1)[1]  # "func("
        func = call[:-1]
        cls = code.split(f"def {func}(x: ")[1].split(")")[0]
        assert f"{p.answer} = {cls}()" in code
        assert not p.text.rstrip("(").endswith(p.answer)


def test_nanoqa_distractor_names_a_different_city():
    task = tasks.nanoqa(6, random.Random(0), "Ignore the story: it is set in {other}.")
    for c, ctx in enumerate(task.contexts):
        text = task.prompt(c, "city").text
        assert f"it is set in {ctx['other']}." in text and ctx["other"] != ctx["city"]


def test_induction_contexts_share_keys_with_new_values():
    task = tasks.build("induction", 5, seed=0)
    assert all(set(task.requests) <= set(ctx) for ctx in task.contexts)
    assert len({tuple(ctx[k] for k in task.requests) for ctx in task.contexts}) == 5


# -- patching ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    from iclr_ray.llm.model import build_model, build_tokenizer

    texts = [p.text + p.answer for name in tasks.TASKS for p in tasks.build(name, 4, 0).grid()]
    tok = build_tokenizer(texts, vocab_size=500)
    torch.manual_seed(0)
    return build_model("mini-llama", tok, seed=0).eval(), tok


def _prompts(n=6):
    task = tasks.build("nanoqa", 4, seed=0)
    return [p.text for p in task.grid()][:n]


def test_no_patch_is_x2_and_padding_changes_nothing(tiny):
    model, tok = tiny
    texts = _prompts() + ["a much shorter prompt"]
    enc = patching.encode(tok, texts)
    assert (enc.mask[:, -1] == 1).all() and (enc.mask[-1, 0] == 0)
    logits, res = patching.clean(model, enc)
    assert res.shape == (len(texts), 4, model.config.hidden_size)
    alone, res_alone = patching.clean(model, patching.encode(tok, texts[-1:]))
    assert torch.allclose(logits[-1], alone[0], atol=1e-4) and torch.allclose(res[-1], res_alone[0], atol=1e-4)
    assert torch.allclose(patching.Patcher(model, enc)(), logits, atol=1e-4)


def test_cached_patch_equals_a_whole_patched_forward_pass_at_every_layer(tiny):
    model, tok = tiny
    enc = patching.encode(tok, _prompts())
    logits, res = patching.clean(model, enc)
    src = res.roll(1, dims=0)  # x1 of row i: row i-1
    patcher = patching.Patcher(model, enc)
    for layer in range(4):
        cached = patcher(layer, src[:, layer])
        full = patching.patched_full(model, enc, layer, src[:, layer])
        assert torch.allclose(cached, full, atol=1e-4)
        if layer < 3:  # a patch before the last block changes the output, and not into x1's
            assert not torch.allclose(cached, logits, atol=1e-3)
    # after the last block, the patched last step is x1's own
    assert torch.allclose(patcher(3, src[:, 3]), logits.roll(1, dims=0), atol=1e-4)
    assert all(patching.is_top(patcher(3, src[:, 3]), logits.roll(1, dims=0).argmax(-1).tolist()))


def test_blocks_are_found_for_gpt2_and_unknown_models_say_so():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=50, n_positions=64))
    assert len(patching.blocks(gpt2)) == 3
    with pytest.raises(ValueError, match="decoder blocks"):
        patching.blocks(torch.nn.Linear(2, 2))


def test_gpt2_cached_patch_equals_the_whole_pass():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=60, n_positions=64)).eval()
    ids = torch.randint(0, 60, (3, 9))
    enc = patching.Encoded(ids, torch.ones_like(ids), torch.arange(9).expand(3, -1))
    _, res = patching.clean(model, enc)
    src = res.roll(1, dims=0)
    for layer in range(3):
        assert torch.allclose(patching.Patcher(model, enc)(layer, src[:, layer]),
                              patching.patched_full(model, enc, layer, src[:, layer]), atol=1e-4)


def test_scoring_helpers():
    assert patching.soft_match(" Paris", "Paris") and patching.soft_match("Par", " Paris")
    assert not patching.soft_match("", "Paris") and not patching.soft_match(" Rome", " Paris")
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 3.0 - 1e-6]])
    assert patching.is_top(logits, [1, 2]) == [True, True] and patching.is_top(logits, [2, 1]) == [False, False]
    assert patching.probs_at(logits, [1, 0])[0] == pytest.approx(torch.softmax(logits[0], -1)[1].item())
    assert patching.logit_diff(logits, [1, 0], [2, 1]) == pytest.approx([1.0, 3.0])
    r = torch.randn(4, 16) * torch.arange(1, 5)[:, None]
    noise = patching.matched_noise(r, torch.Generator().manual_seed(0))
    assert torch.allclose(noise.norm(dim=-1), r.norm(dim=-1)) and not torch.allclose(noise, r)


@pytest.mark.slow
def test_real_smollm2_patching_identities():
    """The same identities on the real packaged SmolLM2 (the cache the other tests convert into)."""
    from iclr_ray.config import ConfigError
    from iclr_ray.llm import pretrained

    try:
        pretrained.check_available("smollm2-135m-instruct")
    except ConfigError as exc:
        pytest.skip(str(exc))
    torch.set_num_threads(1)
    model, tok = pretrained.load("smollm2-135m-instruct")
    model.eval()
    enc = patching.encode(tok, _prompts(4))
    logits, res = patching.clean(model, enc)
    patcher = patching.Patcher(model, enc)
    assert torch.allclose(patcher(), logits, atol=1e-3)
    src = res.roll(1, dims=0)
    for layer in (0, 14, 29):
        assert torch.allclose(patcher(layer, src[:, layer]), patching.patched_full(model, enc, layer, src[:, layer]),
                              atol=1e-3)
    assert patching.is_top(patcher(29, src[:, 29]), logits.roll(1, dims=0).argmax(-1).tolist(), tol=1e-3) == [True] * 4


def test_claims_count_exact_token_hits_and_the_loose_match_is_a_variant(tiny):
    """A top token that is a shorter prefix of the answer's first token (a one-letter token against
    a word) is a hit only under the official loose comparison."""
    _, tok = tiny
    words = {i: tok.decode([i]) for i in range(len(tok))}
    short, long_ = next((a, b) for a, wa in words.items() for b, wb in words.items()
                        if a != b and len(wa.strip()) >= 1 and wb.strip().lower().startswith(wa.strip().lower())
                        and len(wb.strip()) > len(wa.strip()))
    logits = torch.zeros(2, len(tok))
    logits[0, short] = logits[1, long_] = 1.0
    assert patching.hits(tok, logits, [long_, long_]) == [False, True]
    assert patching.hits(tok, logits, [long_, long_], soft=True) == [True, True]


def test_the_same_request_control_draws_a_third_context_with_a_different_answer():
    task = tasks.build("nanoqa", 6, seed=0)
    chosen = tasks.pairs(task, lambda c, r: True, lambda text: text.split()[0], 20, 0)
    c3 = tasks.same_request_contexts(task, chosen, lambda c, r: True, lambda text: text.split()[0], 0)
    assert len(c3) == len(chosen) and any(c is not None for c in c3)
    for p, c in zip(chosen, c3):
        if c is not None:
            assert c not in (p.c1, p.c2)
            assert task.answer(c, p.r2).split()[0] != task.answer(p.c2, p.r2).split()[0]
    assert c3 == tasks.same_request_contexts(task, chosen, lambda c, r: True, lambda text: text.split()[0], 0)
    assert 0 < tasks.chance_rate(task, chosen[0].r1, lambda text: text.split()[0]) <= 1
