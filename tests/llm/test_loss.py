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


def test_chunked_loss_equals_the_whole_loss_and_its_gradient():
    torch.manual_seed(0)
    logits = torch.randn(3, 17, 50, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 50, (3, 17))
    labels[0, :5] = data.IGNORE
    whole, n = loss.summed_token_loss(logits, labels)
    (g_whole,) = torch.autograd.grad(whole, logits)
    for chunk in (1, 7, 16, 48, 1000):
        part, m = loss.summed_token_loss(logits, labels, chunk=chunk)
        (g_part,) = torch.autograd.grad(part, logits)
        assert m == n
        assert torch.allclose(part, whole, rtol=1e-5), chunk
        assert torch.equal(g_part, g_whole), chunk


def test_chunked_loss_keeps_no_fp32_logits_for_backward():
    """What the chunking is for: the tensors saved for the backward pass. Whole: the fp32 copy of
    every logit (and its log-softmax); chunked: only the 16-bit logits the model made."""
    logits = torch.randn(2, 65, 100, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 100, (2, 65))

    def saved_fp32(chunk: int) -> int:
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: sizes.append(t.numel() if t.dtype == torch.float32 else 0) or t, lambda t: t):
            loss.summed_token_loss(logits, labels, chunk=chunk)
        return sum(sizes)

    assert saved_fp32(0) >= 2 * 64 * 100
    assert saved_fp32(16) == 0
