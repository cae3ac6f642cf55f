"""pad's method (no Ray): the DPO objective against a direct computation, and PAD decoding's
identities on tiny random Llamas through the serving decoder: w = 0 and k = 1 give the base
model's greedy output exactly, a PRM equal to the base changes nothing, a PRM that prefers another
top-k token wins it with a large w and never reaches outside the top k, the margin gate skips the
PRM, and a batch decodes as its rows alone."""
import math

import pytest
import torch

from iclr_ray.llm.data import IGNORE
from iclr_ray.llm.model import build_tokenizer
from iclr_ray.serve.decoding import SamplingParams, Strategy, generate
from iclr_ray.studies.pad import decoding, dpo

TEXTS = ["Answer briefly and politely.", "Tell me about the weather in the mountains today.",
         "Write a formal letter to the council.", "Keep it casual, friend!"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(TEXTS * 4, vocab_size=300)


def untied(tok, seed):
    """A random tiny Llama with its own output layer (a tied random model mostly repeats its last
    input token, with a margin nothing re-scores)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from iclr_ray.llm.model import TINY_MODELS

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                                        eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
                                        **TINY_MODELS["tiny-llama"])).eval()


@pytest.fixture(scope="module")
def models(tok):
    return untied(tok, 1), untied(tok, 2)


def ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def greedy(model, tok, prompts, n=12, strategy=None):
    """The token ids each step chose for every row (texts of random models are mostly unprintable)."""
    strategy = strategy or Strategy()
    seen, choose = [], strategy.next_tokens

    def recorded(*args):
        out = choose(*args)
        seen.append(out.tolist())
        return out

    strategy.next_tokens = recorded
    generate(model, tok, prompts, [SamplingParams(max_tokens=n, temperature=0)] * len(prompts), strategy)
    return seen


def test_sequence_logps_and_dpo_loss_match_a_direct_computation():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[IGNORE, IGNORE, 3, 4, 1], [IGNORE, 2, 2, IGNORE, IGNORE]])
    lp = torch.log_softmax(logits, -1)
    direct = [sum(lp[b, t - 1, labels[b, t]].item() for t in range(1, 5) if labels[b, t] != IGNORE) for b in range(2)]
    assert dpo.sequence_logps(logits, labels).tolist() == pytest.approx(direct, abs=1e-5)
    pc, pr, rc, rr = (torch.tensor(v) for v in ([-3.0, -1.0], [-4.0, -0.5], [-3.5, -1.2], [-3.9, -0.4]))
    loss, cr, rj = dpo.dpo_losses(pc, pr, rc, rr, beta=0.1)
    for i in range(2):
        margin = 0.1 * ((pc[i] - rc[i]) - (pr[i] - rr[i]))
        assert loss[i].item() == pytest.approx(-math.log(1 / (1 + math.exp(-margin.item()))), rel=1e-5)
    assert cr.tolist() == pytest.approx([0.05, 0.02], abs=1e-6) and rj.tolist() == pytest.approx([-0.01, -0.01], abs=1e-6)
    same, _, _ = dpo.dpo_losses(pc, pr, pc, pr, beta=0.5)  # policy = reference: log 2 whatever the pair
    assert same.tolist() == pytest.approx([math.log(2)] * 2)
    # the token rewards sum to the sequence's implicit reward
    ref = torch.randn(2, 5, 7)
    assert dpo.token_rewards(logits, ref, labels, 0.1).sum(-1).tolist() == pytest.approx(
        (0.1 * (dpo.sequence_logps(logits, labels) - dpo.sequence_logps(ref, labels))).tolist(), abs=1e-5)


def test_dpo_gradient_raises_the_chosen_margin():
    torch.manual_seed(1)
    logits = torch.randn(1, 4, 6, requires_grad=True)
    chosen = torch.tensor([[IGNORE, 1, 2, 3]])
    rejected = torch.tensor([[IGNORE, 4, 5, 0]])
    ref_c, ref_r = dpo.sequence_logps(logits.detach(), chosen), dpo.sequence_logps(logits.detach(), rejected)
    loss, _, _ = dpo.dpo_losses(dpo.sequence_logps(logits, chosen), dpo.sequence_logps(logits, rejected), ref_c, ref_r,
                                beta=1.0)
    loss.sum().backward()
    stepped = logits.detach() - 1.0 * logits.grad
    gain = (dpo.sequence_logps(stepped, chosen) - ref_c) - (dpo.sequence_logps(stepped, rejected) - ref_r)
    assert gain.item() > 0


def test_pad_scores_rescore_only_the_top_k():
    base = torch.tensor([[5.0, 4.0, 3.0, -9.0]])
    prm = torch.tensor([[0.0, 6.0, 0.0, 50.0]])  # loves token 3, which is outside the base's top 3
    top, scores, r = decoding.pad_scores(base, prm, k=3, w=10.0)
    assert top.tolist() == [[0, 1, 2]]
    lb, lp = torch.log_softmax(base[0, :3], -1), torch.log_softmax(prm[0, :3], -1)
    assert r[0].tolist() == pytest.approx((lp - lb).tolist(), abs=1e-6)
    assert int(top[0, scores[0].argmax()]) == 1  # the PRM's favourite among the k wins with a large w
    _, s0, _ = decoding.pad_scores(base, prm, k=3, w=0.0)
    assert s0[0].tolist() == [5.0, 4.0, 3.0]


def test_w0_and_k1_are_the_base_greedy_output_exactly(tok, models):
    base, prm = models
    prompts = [ids(tok, TEXTS[1]), ids(tok, TEXTS[2])]
    personal = [ids(tok, TEXTS[3] + " " + TEXTS[1]), ids(tok, TEXTS[0] + " " + TEXTS[2])]
    plain = greedy(base, tok, prompts)
    assert greedy(base, tok, prompts, strategy=decoding.PADStrategy(prm, personal, k=10, w=0.0)) == plain
    one = decoding.PADStrategy(prm, personal, k=1, w=1e4)
    assert greedy(base, tok, prompts, strategy=one) == plain and one.prm_calls > 0
    # a PRM that is the base model on the base prompt: r = 0 at every step, whatever w
    assert greedy(base, tok, prompts, strategy=decoding.PADStrategy(base, prompts, k=10, w=50.0)) == plain
    # and a different PRM with a large w does change the text
    assert greedy(base, tok, prompts, strategy=decoding.PADStrategy(prm, personal, k=10, w=50.0)) != plain


def test_a_batch_decodes_as_its_rows_alone(tok, models):
    base, prm = models
    prompts = [ids(tok, TEXTS[1]), ids(tok, TEXTS[0])]  # different lengths: left padding on both models
    personal = [ids(tok, TEXTS[3] + " " + TEXTS[1]), ids(tok, TEXTS[2])]
    both = greedy(base, tok, prompts, strategy=decoding.PADStrategy(prm, personal, k=5, w=2.0, pad_id=tok.pad_token_id))
    alone = [[step[0] for step in greedy(base, tok, [p], strategy=decoding.PADStrategy(prm, [q], k=5, w=2.0))]
             for p, q in zip(prompts, personal)]
    assert [[step[i] for step in both] for i in range(2)] == alone


def test_the_margin_gate_skips_the_prm_where_the_base_is_sure(tok, models):
    base, prm = models
    prompts, personal = [ids(tok, TEXTS[1])], [ids(tok, TEXTS[3] + " " + TEXTS[1])]
    never = decoding.PADStrategy(prm, personal, k=10, w=50.0, margin=0.0)  # every margin is >= 0: always sure
    assert greedy(base, tok, prompts, n=10, strategy=never) == greedy(base, tok, prompts, n=10)
    assert never.prm_calls == 0 and never.steps == 10  # the prompt waits in its pending tokens, never read
    always = decoding.PADStrategy(prm, personal, k=10, w=50.0, margin=math.inf)
    ungated = decoding.PADStrategy(prm, personal, k=10, w=50.0)
    assert greedy(base, tok, prompts, n=10, strategy=always) == greedy(base, tok, prompts, n=10, strategy=ungated)
    assert always.prm_calls == ungated.prm_calls == 10
    some = decoding.PADStrategy(prm, personal, k=10, w=50.0, margin=0.5)
    greedy(base, tok, prompts, n=10, strategy=some)
    assert 1 <= some.prm_calls <= 10
    with pytest.raises(ValueError, match="k must be at least 1"):
        decoding.PADStrategy(prm, personal, k=0)


# ----------------------------------------------------------------------------- ARGS


@pytest.fixture(scope="module")
def reward_model(tok, models):
    from iclr_ray.studies.pad.prm import reward_model_from

    torch.manual_seed(3)
    rm = reward_model_from(models[1]).eval()
    torch.nn.init.normal_(rm.score.weight, std=1.0)  # a head that tells candidates apart
    return rm


def full_rewards(rm, prefix: list[int], candidates: list[int]) -> list[float]:
    """R of prefix + each candidate, each sequence run whole (no cache)."""
    from iclr_ray.studies.pad.prm import sequence_rewards

    rows = torch.tensor([prefix + [c] for c in candidates])
    with torch.no_grad():
        return sequence_rewards(rm, rows, torch.ones_like(rows)).tolist()


def test_reward_model_copies_the_lm_and_reads_the_last_real_token(tok, models, reward_model):
    from iclr_ray.studies.pad.prm import sequence_rewards, trunk

    body, _ = trunk(reward_model)
    lm_body = models[1].model
    assert all(torch.equal(a, b) for a, b in zip(body.state_dict().values(), lm_body.state_dict().values()))
    row = ids(tok, TEXTS[1])
    padded = torch.tensor([row + [tok.pad_token_id] * 3, row + [0, 0, 0]])
    mask = torch.tensor([[1] * len(row) + [0] * 3] * 2)
    with torch.no_grad():
        r = sequence_rewards(reward_model, padded, mask)
    assert torch.allclose(r, torch.tensor(full_rewards(reward_model, row[:-1], [row[-1]]) * 2), atol=1e-5)


def test_args_scores_candidates_over_a_cache_as_whole_sequences_would(tok, models, reward_model):
    base, _ = models
    prompts = [ids(tok, TEXTS[1]), ids(tok, TEXTS[0])]  # different lengths: left padding
    rm_prompts = [ids(tok, TEXTS[3] + " " + TEXTS[1]), ids(tok, TEXTS[2])]
    s = decoding.ARGSStrategy(reward_model, rm_prompts, k=4, w=3.0, pad_id=tok.pad_token_id)
    chosen = greedy(base, tok, prompts, n=5, strategy=s)
    assert len(s.rewards) == 5
    # at step 3 each row's candidates were scored after its prompt and the 2 tokens chosen before
    top = torch.stack([torch.tensor(r) for r in s.rewards])  # [steps, B, k]
    with torch.no_grad():
        for row in range(2):
            prefix = rm_prompts[row] + [c[row] for c in chosen[:2]]
            cached = top[2, row].tolist()
            cands = _step_candidates(base, tok, prompts, chosen, row, 2, 4)
            assert cached == pytest.approx(full_rewards(reward_model, prefix, cands), abs=1e-4)


def _step_candidates(base, tok, prompts, chosen, row, step, k):
    """The base model's top-k next tokens for ``row`` at ``step`` (after the tokens chosen before)."""
    seq = torch.tensor([prompts[row] + [c[row] for c in chosen[:step]]])
    with torch.no_grad():
        return base(input_ids=seq).logits[0, -1].topk(k).indices.tolist()


def test_args_w0_and_k1_are_the_base_greedy_output_and_a_large_w_follows_the_reward(tok, models, reward_model):
    base, _ = models
    prompts = [ids(tok, TEXTS[1]), ids(tok, TEXTS[2])]
    rm_prompts = [ids(tok, TEXTS[3] + " " + TEXTS[1]), ids(tok, TEXTS[0] + " " + TEXTS[2])]
    plain = greedy(base, tok, prompts)
    pad = tok.pad_token_id
    assert greedy(base, tok, prompts, strategy=decoding.ARGSStrategy(reward_model, rm_prompts, k=10, w=0.0,
                                                                      pad_id=pad)) == plain
    assert greedy(base, tok, prompts, strategy=decoding.ARGSStrategy(reward_model, rm_prompts, k=1, w=1e4,
                                                                      pad_id=pad)) == plain
    led = decoding.ARGSStrategy(reward_model, rm_prompts, k=10, w=1e4, pad_id=pad)
    steps = greedy(base, tok, prompts, n=6, strategy=led)
    assert steps != plain[:6]
    for t, r in enumerate(led.rewards):  # with a huge w the choice is the reward's argmax among the top k
        for row in range(2):
            cands = _step_candidates(base, tok, prompts, steps, row, t, 10)
            assert steps[t][row] == cands[int(r[row].argmax())]
