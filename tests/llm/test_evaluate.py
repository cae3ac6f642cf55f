"""Evaluation on a tiny model that memorised three facts in-process (plain torch, a few seconds)."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.config import DataError  # noqa: E402
from iclr_ray.llm import data, evaluate, loss, model  # noqa: E402

FACTS = [("Capital of France?", "Paris"), ("Two plus three?", "five"), ("Color of the sky?", "blue")]


@pytest.fixture(scope="module")
def trained():
    chats = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in FACTS]
    tok = model.build_tokenizer([q + " " + a for q, a in FACTS] * 10, vocab_size=300)
    net = model.build_model("tiny-llama", tok, seed=0)
    rows = [r for c in chats for r in data.pack(data.encode_all(tok, [c], 32), 32, tok.pad_token_id)]
    before = evaluate.heldout_loss(net, rows)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    batch = data.collate(rows)
    net.train()
    for _ in range(150):
        logits = net(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        total, n = loss.summed_token_loss(logits, batch["labels"])
        opt.zero_grad()
        (total / n).backward()
        opt.step()
    return net, tok, rows, before


def test_heldout_loss_falls_with_training(trained):
    net, _, rows, before = trained
    after = evaluate.heldout_loss(net, rows)
    assert after < 0.1 * before


def test_exact_match_generation_recalls_the_facts(trained):
    net, tok, _, _ = trained
    res = evaluate.exact_match(net, tok, FACTS)
    assert res["answers"] == [a for _, a in FACTS] and res["exact_match"] == 1.0
    assert evaluate.exact_match(net, tok, [("Capital of France?", "Rome")])["exact_match"] == 0.0


def test_mc_scoring_picks_the_memorised_choice(trained):
    net, tok, _, _ = trained
    items = [evaluate.MCItem(q, ["green", a, "Madrid"], 1) for q, a in FACTS]
    assert evaluate.mc_accuracy(net, tok, items)["mc_accuracy"] == 1.0
    wrong = [evaluate.MCItem(q, [a, "green"], 1) for q, a in FACTS]
    assert evaluate.mc_accuracy(net, tok, wrong)["mc_accuracy"] == 0.0


def test_choice_logprob_is_the_sum_of_token_logprobs(trained):
    net, tok, _, _ = trained
    (score, n), = evaluate.choice_logprobs(net, tok, "Capital of France?", ["Paris"])
    prompt = tok.apply_chat_template([{"role": "user", "content": "Capital of France?"}],
                                     add_generation_prompt=True, tokenize=True)["input_ids"]
    cont = tok("Paris", add_special_tokens=False).input_ids
    manual = 0.0
    with torch.no_grad():
        for i, t in enumerate(cont):
            ctx = torch.tensor([prompt + cont[:i]])
            manual += torch.log_softmax(net(input_ids=ctx, use_cache=False).logits[0, -1], -1)[t].item()
    assert n == len(cont) and score == pytest.approx(manual, abs=1e-4)


def test_batched_scoring_gives_each_prompt_its_own_answer(trained):
    """Prompts of different lengths in one padded batch: the answers and choice log-likelihoods
    are the ones each gets alone (left padding for generation, right padding for scoring)."""
    net, tok, _, _ = trained
    prompts = [q for q, _ in FACTS] + ["Two plus three? Say it in one word please, thanks.", "Sky?"]
    alone = [evaluate.generate(net, tok, q, 8) for q in prompts]
    assert evaluate.generate_batch(net, tok, prompts, 8, batch_size=4) == alone
    items = [evaluate.MCItem(q, ["green", "Paris and Madrid", "five"], 0) for q in prompts]
    batched = evaluate.batched_choice_logprobs(net, tok, items, batch_size=5)
    for item, got in zip(items, batched):
        for (a, n), (b, m) in zip(evaluate.choice_logprobs(net, tok, item.question, item.choices), got):
            assert n == m and b == pytest.approx(a, abs=1e-4)


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "choices": ["a"], "answer": 0}', "at least two strings"),
    ('{"question": "q", "choices": ["a", "b"], "answer": 2}', "within the 2 choices"),
    ('{"question": "q", "choices": ["a", "b"], "answer": "C"}', "within the 2 choices"),
    ('{"choices": ["a", "b"], "answer": 0}', '"question" string'),
    ("[1", "not valid JSON"),
])
def test_mc_jsonl_errors_name_the_line(tmp_path, line, message):
    f = tmp_path / "mc.jsonl"
    f.write_text(json.dumps({"question": "q", "choices": ["a", "b"], "answer": "B"}) + "\n" + line + "\n")
    with pytest.raises(DataError, match=f"mc.jsonl:2: .*{message}"):
        evaluate.read_mc_jsonl(f)


def test_mc_jsonl_reads_letters_and_indices(tmp_path):
    f = tmp_path / "mc.jsonl"
    f.write_text('{"question": "q", "choices": ["a", "b"], "answer": "B"}\n'
                 '{"question": "r", "choices": ["a", "b", "c"], "answer": 2}\n')
    assert [i.answer for i in evaluate.read_mc_jsonl(f)] == [1, 2]
