"""Per-token loss normalisation: the step gradient does not depend on how the batch is split."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.llm import data, loss, model  # noqa: E402

CHATS = [
    [{"role": "user", "content": "a" * n}, {"role": "assistant", "content": "b" * (3 * n)}] for n in (1, 2, 9, 17)
]


def grads_of_step(net, batch_rows, micro: int, per_token: bool) -> torch.Tensor:
    net.zero_grad()
    micro_batches = [data.collate(batch_rows[i:i + micro]) for i in range(0, len(batch_rows), micro)]
    step_tokens = sum(loss.label_tokens(b["labels"]) for b in micro_batches)
    for b in micro_batches:
        logits = net(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits
        total, n = loss.summed_token_loss(logits, b["labels"])
        # per-token: one division for the whole step; naive: mean per micro-batch, averaged
        (loss.step_loss(total, step_tokens) if per_token else total / n / len(micro_batches)).backward()
    return torch.cat([p.grad.flatten() for p in net.parameters()])


def test_grad_norm_is_invariant_to_the_accumulation_split():
    tok = model.build_tokenizer(None)
    net = model.build_model("tiny-llama", tok, seed=0)
    rows = data.pack(data.encode_all(tok, CHATS, 128), max_tokens=128, pad_id=tok.pad_token_id)
    rows = rows + data.pack(data.encode_all(tok, CHATS[:1], 128), 128, tok.pad_token_id)
    assert len(rows) >= 2
    whole = grads_of_step(net, rows, micro=len(rows), per_token=True)
    split = grads_of_step(net, rows, micro=1, per_token=True)
    assert torch.allclose(whole, split, rtol=1e-4, atol=1e-7)
    assert torch.linalg.norm(whole) == pytest.approx(torch.linalg.norm(split).item(), rel=1e-5)
    # the naive per-micro-batch mean changes with the split when micro-batches hold different token counts
    naive = grads_of_step(net, rows, micro=1, per_token=False)
    assert not torch.allclose(whole, naive, rtol=1e-3)


def test_summed_loss_counts_only_label_tokens():
    logits = torch.zeros(1, 4, 10)
    labels = torch.tensor([[data.IGNORE, 3, data.IGNORE, 5]])
    total, n = loss.summed_token_loss(logits, labels)
    assert n == 2 == loss.label_tokens(labels)
    assert total.item() == pytest.approx(2 * torch.log(torch.tensor(10.0)).item())
    assert loss.step_loss(total, 4, world_size=2).item() == pytest.approx(total.item() * 2 / 4)
