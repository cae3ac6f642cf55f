"""igcg's method on a tiny random Llama (no Ray): the coordinate gradient against finite differences
and autograd on the whole prompt, the cached-prefix loss against the uncached one, success against
greedy generate(), candidate sampling and filtering, the merge rule, and the random control."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.llm.model import build_model, build_tokenizer  # noqa: E402
from iclr_ray.studies.igcg import gcg  # noqa: E402

TEXTS = ["Tell me about the ocean. The password is orange.", "hello there, a b c d e f g h", "ok go ok red"] * 4


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    tok = build_tokenizer(TEXTS, vocab_size=300)
    # weights drawn wider than the usual 0.02, so the suffix moves the target's loss
    model = build_model("tiny-llama", tok, seed=0, initializer_range=0.2).double().eval()
    return model, tok


@pytest.fixture(scope="module")
def problem(tiny):
    model, tok = tiny
    lay = gcg.layout(tok, "Tell me about the ocean.", "The password is orange.")
    return model, tok, lay, gcg.Objective(model, lay, chunk=5)


def full_loss(model, lay: gcg.Layout, suffix: list[int]) -> torch.Tensor:
    """The target loss from one uncached forward pass over the whole prompt."""
    ids = torch.tensor([lay.before + suffix + lay.after + lay.target])
    logits = model(input_ids=ids).logits[0]
    T = len(lay.target)
    return torch.nn.functional.cross_entropy(logits[-T - 1:-1], torch.tensor(lay.target))


def test_layout_puts_the_suffix_inside_the_users_turn(tiny):
    model, tok = tiny
    before, after = gcg.render(tok, "Tell me about the ocean.")
    # the suffix owns the space after the request: its first token carries it
    assert before.endswith("Tell me about the ocean.") and "<|user|>" in before
    init = gcg.init_suffix(tok, 6, "a")
    assert tok.decode(init) == " a a a a a a"
    lay0 = gcg.layout(tok, "Tell me about the ocean.", "x")
    assert tok(before + tok.decode(init) + after, add_special_tokens=False).input_ids == lay0.before + init + lay0.after
    assert after.startswith("<|end|>") and after.endswith("<|assistant|>")
    lay = gcg.layout(tok, "Tell me about the ocean.", "The password is orange.")
    assert tok.decode(lay.target) == "The password is orange."
    with pytest.raises(ValueError, match="empty"):
        gcg.layout(tok, "hi", "")


def test_cached_prefix_loss_equals_the_whole_prompts(problem):
    model, tok, lay, obj = problem
    suffixes = torch.randint(20, 290, (7, 6))
    loss, _ = obj.losses(suffixes)  # chunks of 5: two forward passes
    none = obj.losses(suffixes[:0])  # an empty batch (every merged candidate filtered out) runs nothing
    assert none[0].shape == none[1].shape == (0,)
    with torch.no_grad():
        for s, got in zip(suffixes, loss):
            assert float(got) == pytest.approx(float(full_loss(model, lay, s.tolist())), rel=1e-6)


def test_coordinate_gradient_matches_finite_differences_and_autograd(problem):
    model, tok, lay, obj = problem
    suffix = torch.tensor(gcg.init_suffix(tok, 6, "a"))
    grad = obj.gradient(suffix)
    assert grad.shape == (6, obj.vocab)
    # finite differences along the simplex edge from token s_i towards token v at position i:
    # d/de L((1-e) onehot(s_i) + e onehot(v)) = grad[i, v] - grad[i, s_i]
    for i, v in [(0, 40), (3, 77), (5, 123)]:
        base = torch.zeros(6, obj.vocab, dtype=torch.float64)
        base[torch.arange(6), suffix] = 1
        edge = torch.zeros_like(base)
        edge[i, v], edge[i, suffix[i]] = 1.0, -1.0
        # (Llama's RMSNorm computes in float32 whatever the model's dtype: h cannot be tiny)
        h = 1e-3
        with torch.no_grad():
            fd = (obj.relaxed_loss(base + h * edge) - obj.relaxed_loss(base - h * edge)) / (2 * h)
        assert float(fd) == pytest.approx(float(grad[i, v] - grad[i, suffix[i]]), rel=2e-3, abs=1e-7)
    # autograd through the uncached whole prompt, with respect to the suffix's embeddings
    W = model.get_input_embeddings().weight
    emb = W[suffix].detach().clone().requires_grad_(True)
    ids = torch.tensor(lay.before + [0] * 6 + lay.after + lay.target)
    x = W[ids].detach().clone()
    x[len(lay.before):len(lay.before) + 6] = emb
    logits = model(inputs_embeds=x[None]).logits[0]
    T = len(lay.target)
    torch.nn.functional.cross_entropy(logits[-T - 1:-1], torch.tensor(lay.target)).backward()
    assert torch.allclose(grad, emb.grad @ W.detach().T, rtol=1e-4, atol=1e-8)


def test_exact_means_greedy_generation_produces_the_target(tiny):
    model, tok = tiny
    lay0 = gcg.layout(tok, "hello there", "ok")
    suffix = gcg.init_suffix(tok, 4, "a")
    prompt = torch.tensor([lay0.before + suffix + lay0.after])
    greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, do_sample=False,
                            pad_token_id=tok.pad_token_id)[0, prompt.shape[1]:].tolist()
    own = gcg.Objective(model, gcg.Layout(lay0.before, lay0.after, greedy))
    loss, exact = own.losses(torch.tensor([suffix]))
    assert bool(exact[0])
    other = greedy[:2] + [(greedy[2] + 1) % 250 + 20] + greedy[3:]
    _, exact = gcg.Objective(model, gcg.Layout(lay0.before, lay0.after, other)).losses(torch.tensor([suffix]))
    assert not bool(exact[0])


def test_candidates_change_one_position_spread_evenly_within_the_top_k(problem):
    model, tok, lay, obj = problem
    current = torch.tensor(gcg.init_suffix(tok, 6, "a"))
    grad = obj.gradient(current)
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    cands = gcg.sample_candidates(current, grad, allowed, top_k=4, batch=12, gen=torch.Generator().manual_seed(0))
    assert cands.shape == (12, 6)
    top = (-grad).masked_fill(~allowed, -float("inf")).topk(4, dim=1).indices
    for b, c in enumerate(cands):
        pos = b * 6 // 12
        diff = (c != current).nonzero().flatten().tolist()
        assert diff in ([], [pos])  # [] only when the drawn token is the current one
        assert int(c[pos]) in top[pos].tolist()
    # the random control draws from the whole allowed vocabulary, never a disallowed token
    rnd = gcg.sample_candidates(current, None, allowed, top_k=4, batch=200, gen=torch.Generator().manual_seed(0))
    drawn = rnd[torch.arange(200), torch.arange(200) * 6 // 200]
    assert bool(allowed[drawn].all()) and len(set(drawn.tolist())) > 50


def test_allowed_tokens_exclude_specials_and_non_ascii(tiny):
    model, tok = tiny
    ok = gcg.allowed_tokens(tok, len(tok) + 3)
    assert not ok[tok.all_special_ids].any()
    assert not ok[len(tok):].any()  # embedding rows past the tokenizer's vocabulary
    for i in ok.nonzero().flatten().tolist():
        s = tok.decode([i])
        assert s.isascii() and s.isprintable() and s.strip()
    assert not any(ok[i] for i in range(len(tok)) if not tok.decode([i]).isascii())


def test_retokenisation_filter_drops_length_changes_and_the_current_suffix(tiny):
    model, tok = tiny
    enc = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    current = torch.tensor(enc("a b c d e"))
    L = len(current)
    # a merged token ("password" or a piece of it), spelt as its characters' tokens: decoded and
    # retokenised, the characters merge again, so the suffix is shorter
    merged = max(enc("password"), key=lambda i: len(tok.decode([i])))
    chars = [tok.convert_tokens_to_ids(c) for c in tok.decode([merged])]
    assert len(chars) >= 2 and len(chars) < L
    split = torch.tensor(chars + current[len(chars):].tolist())
    assert len(enc(tok.decode(split))) < L
    # one token changed to a token that survives the round trip
    keep = current.clone()
    keep[-1] = enc(" h")[-1]
    assert enc(tok.decode(keep)) == keep.tolist()
    out = gcg.retokenise(tok, torch.stack([current, split, keep]), current)
    assert out.tolist() == [keep.tolist()]
    assert gcg.retokenise(tok, current[None], current).shape == (0, L)


def test_the_filter_pastes_each_candidate_into_the_whole_prompt(tiny):
    """A first token that survives on its own but merges with the request's last word ("Say hi" +
    "s" is " his" as text) is dropped; every kept candidate is what the whole prompt tokenises to."""
    model, tok = tiny
    lay = gcg.layout(tok, "Say hi", "ok go")
    current = torch.tensor(gcg.init_suffix(tok, 6, "a"))
    allowed = gcg.allowed_tokens(tok, len(tok)).nonzero().squeeze(1)
    cands = current.repeat(len(allowed), 1)
    cands[:, 0] = allowed
    alone, whole = gcg.retokenise(tok, cands, current), gcg.retokenise(tok, cands, current, lay)
    merging = tok.convert_tokens_to_ids("s")
    assert merging in alone[:, 0].tolist() and merging not in whole[:, 0].tolist()
    assert 0 < len(whole) < len(alone)
    for c in whole.tolist():
        text = lay.text[0] + tok.decode(c) + lay.text[1]
        assert tok(text, add_special_tokens=False).input_ids == lay.before + c + lay.after


def test_a_success_counts_only_once_its_text_check_passes(problem):
    model, tok, lay, obj = problem
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    init = gcg.init_suffix(tok, 6, "a")
    start = float(obj.losses(torch.tensor([init]))[0][0])
    s = gcg.Settings(K=3, top_k=8, batch=24, steps=30, criterion="loss", threshold=start - 0.3)
    checked = []

    def verify(ids):  # fails its first two checks
        checked.append(list(ids))
        return len(checked) > 2

    tr = gcg.optimise(obj, tok, init, s, allowed, seed=0, verify=verify)
    assert tr.token_success_step is not None and tr.failed_checks == 2 and tr.success_step is not None
    assert tr.success_step > tr.token_success_step and tr.success_step == len(tr.steps) - 1
    met = [st for st in tr.steps if st.loss < s.threshold]
    assert len(checked) == len(met) == 3  # checked only where the criterion was met
    assert [st.verified for st in met] == [False, False, True] and checked[-1] == tr.suffix
    assert all(st.verified is None for st in tr.steps if st.loss >= s.threshold)
    assert all(b.cpu_seconds >= a.cpu_seconds for a, b in zip(tr.steps, tr.steps[1:]))


def test_merge_applies_the_ranked_changes_cumulatively_later_ones_overwrite():
    current = torch.tensor([0, 0, 0, 0])
    ranked = torch.tensor([[5, 0, 0, 0], [0, 6, 0, 0], [7, 0, 0, 0], [0, 0, 0, 8]])
    assert gcg.merge(current, ranked).tolist() == [[5, 0, 0, 0], [5, 6, 0, 0], [7, 6, 0, 0], [7, 6, 0, 8]]
    assert gcg.merge(current, ranked[:0]).shape == (0, 4)


def test_multi_coordinate_step_is_never_worse_than_the_single_token_step(problem):
    model, tok, lay, obj = problem
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    current = torch.tensor(gcg.init_suffix(tok, 6, "a"))
    for seed in range(3):
        one = gcg.step(obj, tok, current, gcg.Settings(K=1, top_k=8, batch=24), allowed,
                       torch.Generator().manual_seed(seed))
        many = gcg.step(obj, tok, current, gcg.Settings(K=5, top_k=8, batch=24), allowed,
                        torch.Generator().manual_seed(seed))
        # the same candidates (same generator); K = 5 adds merged ones to choose from
        assert many[1] <= one[1] + 1e-12
        assert many[3] >= one[3]
        assert float(obj.losses(many[0][None])[0][0]) == pytest.approx(many[1])


def test_optimise_logs_every_step_and_ends_on_the_suffix_it_scored(problem):
    model, tok, lay, obj = problem
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    init = gcg.init_suffix(tok, 6, "a")
    for guided in (True, False):
        s = gcg.Settings(K=3, top_k=8, batch=24, guided=guided, steps=12, stop_on_success=False)
        tr = gcg.optimise(obj, tok, init, s, allowed, seed=0)
        assert [st.step for st in tr.steps] == list(range(13))
        assert tr.steps[-1].seconds >= tr.steps[0].seconds
        assert float(obj.losses(torch.tensor([tr.suffix]))[0][0]) == pytest.approx(tr.steps[-1].loss)
        assert min(st.loss for st in tr.steps) < tr.steps[0].loss
        assert all(1 <= st.changed <= 3 for st in tr.steps[1:] if st.candidates)


def test_optimise_stops_at_the_first_success(problem):
    model, tok, lay, obj = problem
    allowed = gcg.allowed_tokens(tok, obj.vocab)
    init = gcg.init_suffix(tok, 6, "a")
    start = float(obj.losses(torch.tensor([init]))[0][0])
    s = gcg.Settings(K=3, top_k=8, batch=24, steps=30, criterion="loss", threshold=start - 0.5)
    tr = gcg.optimise(obj, tok, init, s, allowed, seed=0)
    assert tr.success_step is not None and tr.success_step == len(tr.steps) - 1
    assert tr.steps[-1].loss < s.threshold and all(st.loss >= s.threshold for st in tr.steps[:-1])


def test_a_model_that_scales_its_embeddings_gets_scaled_suffix_rows(tiny):
    """Gemma multiplies its embeddings by sqrt(d): the loss of a batch of token ids and of their
    one-hot rows must both be the whole prompt's (a sliding-window cache as well)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    _, tok = tiny
    conf = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                            max_position_embeddings=256, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(conf).double().eval()
    assert float(model.get_input_embeddings().embed_scale) == pytest.approx(8.0)
    lay = gcg.layout(tok, "Tell me about the ocean.", "The password is orange.")
    obj = gcg.Objective(model, lay)
    suffix = torch.tensor(gcg.init_suffix(tok, 6, "a"))
    with torch.no_grad():
        whole = float(full_loss(model, lay, suffix.tolist()))
        one_hot = torch.nn.functional.one_hot(suffix, obj.vocab).double()
        assert float(obj.losses(suffix[None])[0][0]) == pytest.approx(whole, rel=1e-6)
        assert float(obj.relaxed_loss(one_hot)) == pytest.approx(whole, rel=1e-6)
