"""The LLM backbone's model, tokenizer and chat-data layers (CPU, no Ray)."""
import json

import numpy as np

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.config import ConfigError, DataError  # noqa: E402
from iclr_ray.llm import data, loss, model  # noqa: E402

CHATS = [
    [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "5"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And Italy?"},
     {"role": "assistant", "content": "Rome."}],
    [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi there, friend"}],
]


@pytest.fixture(scope="module")
def tok():
    texts = [m["content"] for chat in CHATS for m in chat] * 20
    return model.build_tokenizer(texts, vocab_size=300)


@pytest.fixture(scope="module")
def tiny(tok):
    return model.build_model("tiny-llama", tok, seed=0).eval()


def test_tokenizer_is_a_real_hf_tokenizer_that_round_trips(tok, tmp_path):
    text = "Capital of France? héllo ✓"
    assert tok.decode(tok(text).input_ids) == text
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    back = AutoTokenizer.from_pretrained(tmp_path)
    assert back(text).input_ids == tok(text).input_ids
    assert back.apply_chat_template(CHATS[1], tokenize=False) == tok.apply_chat_template(CHATS[1], tokenize=False)
    assert len(model.build_tokenizer(None)) == 256 + len(model.SPECIAL_TOKENS)  # bytes only


def test_checkpoint_reloads_with_from_pretrained(tiny, tok, tmp_path):
    tiny.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m2, t2 = model.load_pretrained(tmp_path)
    ids = torch.tensor([tok.apply_chat_template(CHATS[0], tokenize=True)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(tiny(ids).logits, m2.eval()(ids).logits, atol=1e-6)


def test_bad_model_sources_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="not a model checkpoint"):
        model.load_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="unknown tiny model"):
        model.build_model("huge-llama", model.build_tokenizer(None))


def test_loss_only_on_assistant_tokens_and_ids_match_the_template(tok):
    for chat in CHATS:
        enc = data.encode_chat(tok, chat)
        assert enc.input_ids == tok.apply_chat_template(chat, tokenize=True)["input_ids"]
        learned = tok.decode([t for t, lab in zip(enc.input_ids, enc.labels) if lab != data.IGNORE])
        expected = "".join(m["content"] + model.END for m in chat if m["role"] == "assistant")
        assert learned == expected


def test_packing_never_attends_across_samples(tok, tiny):
    """Logits of each sample inside a packed row equal its logits run alone."""
    samples = data.encode_all(tok, CHATS, max_tokens=64)
    rows = data.pack(samples, max_tokens=sum(map(len, samples)) + 5, pad_id=tok.pad_token_id)
    assert len(rows) == 1 and rows[0].n_real == sum(map(len, samples))
    batch = data.collate(rows)
    with torch.no_grad():
        packed = tiny(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        start = 0
        for s in samples:
            alone = tiny(input_ids=torch.tensor([s.input_ids])).logits[0]
            assert torch.allclose(packed[start:start + len(s)], alone, atol=1e-5)
            start += len(s)


def test_packing_fills_rows_in_order_and_reports_efficiency(tok):
    samples = data.encode_all(tok, CHATS * 4, max_tokens=64)
    rows = data.pack(samples, max_tokens=64, pad_id=tok.pad_token_id)
    assert all(len(r.input_ids) == 64 for r in rows)
    flat = [t for r in rows for t in r.input_ids[: r.n_real]]
    assert flat == [t for s in samples for t in s.input_ids]  # order kept, nothing lost
    eff = data.packing_efficiency(rows)
    assert eff == sum(r.n_real for r in rows) / (64 * len(rows)) and 0.5 < eff <= 1.0
    for r in rows:  # padding carries no loss
        assert all(lab == data.IGNORE for lab in r.labels[r.n_real:])


def test_epoch_order_is_deterministic_and_changes_per_epoch():
    a, b = data.epoch_order(50, seed=1, epoch=0), data.epoch_order(50, seed=1, epoch=0)
    assert (a == b).all() and sorted(a) == list(range(50))
    assert not (a == data.epoch_order(50, seed=1, epoch=1)).all()


def test_overlong_samples_are_refused(tok):
    n0 = len(data.encode_chat(tok, CHATS[0]))
    with pytest.raises(DataError, match=f"conversation 2 has .* tokens, over the budget of {n0}"):
        data.encode_all(tok, CHATS[:2], max_tokens=n0)


@pytest.mark.parametrize("line, message", [
    ("{not json", ":2: not valid JSON"),
    ('{"msgs": []}', ':2: expected an object with a non-empty "messages" list'),
    ('{"messages": [{"role": "bot", "content": "x"}]}', ":2: message 0 has role 'bot'"),
    ('{"messages": [{"role": "user", "content": 3}]}', ":2: message 0 content must be a string"),
    ('{"messages": [{"role": "user", "content": "x"}]}', ":2: no assistant message"),
    ('{"messages": [{"role": "user"}]}', ':2: message 0 must be {"role": ..., "content": ...}'),
])
def test_malformed_jsonl_names_the_line(tmp_path, line, message):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"messages": CHATS[0]}) + "\n" + line + "\n")
    with pytest.raises(DataError, match=message.replace("{", r"\{").replace("}", r"\}").replace("...", r"\.\.\.")):
        data.read_chat_jsonl(f)


def test_jsonl_reads_and_refuses_empty_or_missing(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps({"messages": c}) + "\n\n" for c in CHATS))
    assert data.read_chat_jsonl(f) == CHATS
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(DataError, match="holds no conversations"):
        data.read_chat_jsonl(tmp_path / "e.jsonl")
    with pytest.raises(DataError, match="cannot read"):
        data.read_chat_jsonl(tmp_path / "none.jsonl")


def test_memory_settings_change_what_a_training_step_keeps_and_not_its_gradients():
    """Gradient checkpointing and sdpa on a real transformers model: the same loss gradient, and
    far fewer tensors kept for the backward pass (the checkpointed blocks keep only their inputs)."""
    import torch

    from iclr_ray.llm.model import apply_memory_settings, build_model, build_tokenizer

    tok = build_tokenizer()
    ids = torch.randint(0, len(tok), (2, 48))

    def step(gc: bool, attention: str):
        net = build_model("tiny-llama", tok, seed=0, attn_implementation="eager")
        apply_memory_settings(net, gradient_checkpointing=gc, attention=attention)
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
            out = net(input_ids=ids, use_cache=False).logits
        out.float().pow(2).mean().backward()
        return sum(kept), torch.cat([p.grad.flatten() for p in net.parameters()])

    kept_plain, g_plain = step(False, "eager")
    kept_gc, g_gc = step(True, "sdpa")
    assert torch.allclose(g_plain, g_gc, atol=1e-5)
    assert kept_gc < kept_plain / 2


def test_memory_settings_refuse_a_model_without_them():
    import torch

    from iclr_ray.config import ConfigError
    from iclr_ray.llm.model import apply_memory_settings

    with pytest.raises(ConfigError, match="gradient_checkpointing"):
        apply_memory_settings(torch.nn.Linear(2, 2), gradient_checkpointing=True)
    with pytest.raises(ConfigError, match="attention=sdpa"):
        apply_memory_settings(torch.nn.Linear(2, 2), attention="sdpa")


def test_each_rank_collates_only_its_own_micro_batches_and_counts_the_whole_step():
    """ChatRecipe.rank_batches over the ranks: together exactly the step's micro-batches, each
    collated once, and the same step totals (loss units, rows) as collating them all."""
    import pickle

    from iclr_ray.llm.recipe import ChatRecipe, TrainConfig, step_rows

    tok = model.build_tokenizer()
    rows = data.pack(data.encode_all(tok, CHATS * 6, 64), 64, tok.pad_token_id)
    assert isinstance(rows, data.PackedRows) and rows.input_ids.dtype == np.int32
    rows = pickle.loads(pickle.dumps(rows))  # as the workers get them: arrays, not lists of ints
    recipe = ChatRecipe(rows, {})
    recipe.rows, recipe.order = rows, None
    cfg = TrainConfig(micro_batch_size=2, grad_accum=2, num_workers=3)
    every = recipe.step_batches(5, cfg)
    assert len(every) == 6
    total_units = sum(loss.label_tokens(b["labels"]) for b, _ in every)
    seen = []
    for rank in range(3):
        mine, units, n = recipe.rank_batches(5, cfg, rank, 3)
        assert (units, n) == (total_units, 12) and len(mine) == 2
        seen += [(rank, k) for k, _ in enumerate(mine)]
        for k, (b, real) in enumerate(mine):
            want, want_real = every[rank + 3 * k]
            assert all(torch.equal(b[key], want[key]) for key in want) and real == want_real
    step = step_rows(rows, 5, cfg, cfg.seed)
    assert isinstance(step, data.PackedRows) and len(step) == 12
    assert step.label_tokens() == total_units
