"""pad's measurements on tiny random Llamas (no Ray): the prompts each method reads, Best-of-N's
sequence reward against a direct computation, decoding one query at a time as in a batch, and the
reference log-probabilities the study computes before training against the recipe's own."""
import pytest
import torch

from iclr_ray.llm.model import build_tokenizer
from iclr_ray.llm.recipe import TrainConfig, read_files
from iclr_ray.studies.pad import evaluate
from iclr_ray.studies.pad.prm import DPORecipe, Pair, pair_logps, swap_labels

from test_pad_method import TEXTS, untied  # noqa: E402  (tests/studies is on sys.path)

QUERIES = ["Tell me about the weather.", "Write a letter to the council today."]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(TEXTS * 4, vocab_size=300)


@pytest.fixture(scope="module")
def models(tok):
    return untied(tok, 3), untied(tok, 4)


def test_the_prm_reads_the_preference_before_the_last_user_message(tok):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "Tell me more."}]
    out = evaluate.personalised_messages(msgs, "Be brief.")
    assert out[-1]["content"] == "Be brief.\n\nTell me more." and out[0] == msgs[0]
    assert msgs[-1]["content"] == "Tell me more."  # the request's messages are left as they were
    assert evaluate.personalised_messages([{"role": "system", "content": "s"}], "Be brief.")[0] == \
        {"role": "user", "content": "Be brief."}
    plain, pers = evaluate.chat_ids(tok, "Tell me."), evaluate.chat_ids(tok, evaluate.personalised("Tell me.", "Be brief."))
    assert len(pers) > len(plain) and plain[-3:] == pers[-3:]  # the same turn ending, ready for the reply


def test_best_of_n_reward_is_the_summed_log_ratio_of_prm_and_base(tok, models):
    base, prm = models
    cands = [["the weather is fine", "mountains"], ["dear council", "letter letter"]]
    got = evaluate.sequence_reward(prm, base, tok, QUERIES, cands, "Be brief.")
    for q, cs, rs in zip(QUERIES, cands, got):
        for c, r in zip(cs, rs):
            resp = evaluate.response_ids(tok, c)
            want = 0.0
            for model, content in ((prm, evaluate.personalised(q, "Be brief.")), (base, q)):
                prompt = evaluate.chat_ids(tok, content)
                x = torch.tensor([prompt + resp])
                with torch.no_grad():
                    lp = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
                s = sum(float(lp[len(prompt) - 1 + t, tok_id]) for t, tok_id in enumerate(resp))
                want += s if model is prm else -s
            assert r == pytest.approx(want, abs=1e-4)
    assert evaluate.best_of_n(cands, [[0.1, 0.3], [2.0, 2.0]]) == ["mountains", "dear council"]


def test_one_query_at_a_time_decodes_as_the_batch(tok, models):
    base, prm = models
    batch = evaluate.decode_queries(base, tok, QUERIES, 6, prm=prm, prm_pref_text="Be brief.", k=5, w=3.0)
    alone = evaluate.decode_queries(base, tok, QUERIES, 6, prm=prm, prm_pref_text="Be brief.", k=5, w=3.0,
                                    one_at_a_time=True)
    assert alone.texts == batch.texts and alone.tokens == batch.tokens
    assert alone.prm_calls == alone.steps > 0 and batch.prm_calls == batch.steps  # no gate: a PRM call a step
    plain = evaluate.decode_queries(base, tok, QUERIES, 6)
    assert plain.prm_calls == 0 and plain.texts != batch.texts


def test_reference_log_probs_computed_before_training_equal_the_recipes_own(tok, models, tmp_path):
    base, _ = models
    base.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    pairs = [evaluate.text_pair(tok, q, "Be brief.", "the weather", "a letter to the council") for q in QUERIES]
    given = pair_logps(base, pairs, tok.pad_token_id)
    cfg = TrainConfig(model=str(tmp_path / "m"), micro_batch_size=2, num_workers=1, max_steps=1)
    files = read_files(tmp_path / "m")
    own = DPORecipe(pairs, {k: v for k, v in files.items() if not k.endswith(".safetensors")})
    own.setup()
    assert torch.allclose(own.reference_logps(cfg), given, atol=1e-5)
    pre = DPORecipe(pairs, files, ref_logps=given.numpy())
    pre.setup()
    assert torch.equal(pre.reference_logps(cfg), given)
    with pytest.raises(ValueError, match="shape"):
        DPORecipe(pairs, files, ref_logps=given[:1].numpy()).setup()
    assert isinstance(pairs[0], Pair) and pairs[0].chosen == evaluate.response_ids(tok, "the weather")


def test_reward_model_scores_are_the_classifier_logit_of_the_exchange(tok):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from iclr_ray.llm.model import TINY_MODELS

    torch.manual_seed(0)
    rm = LlamaForSequenceClassification(LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1,
                                                    **TINY_MODELS["tiny-llama"])).eval()
    got = evaluate.reward_model_scores(rm, tok, "Tell me.", ["fine weather", "a letter"])
    ids = tok.apply_chat_template([{"role": "user", "content": "Tell me."}, {"role": "assistant", "content": "a letter"}],
                                  tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    with torch.no_grad():
        want = float(rm(input_ids=torch.tensor([ids])).logits[0, 0])
    assert got[1] == pytest.approx(want) and got[0] != got[1]


def test_the_shuffled_control_swaps_pairs_and_their_reference_together(tok, models):
    import numpy as np

    base, _ = models
    pairs = [evaluate.text_pair(tok, q, "Be brief.", "the weather", "a letter to the council") for q in QUERIES]
    ref = pair_logps(base, pairs, tok.pad_token_id).numpy()
    swapped, swapped_ref = swap_labels(pairs, ref, np.array([True, False]))
    assert swapped[0].chosen == pairs[0].rejected and swapped[1] == pairs[1]
    assert np.allclose(swapped_ref, pair_logps(base, swapped, tok.pad_token_id).numpy(), atol=1e-5)
