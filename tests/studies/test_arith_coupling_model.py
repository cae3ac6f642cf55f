"""arith_coupling's decoder: position kinds, causality, padding, the loss mask, and exact match
against greedy decoding on a model trained here."""
import pytest
import torch

from iclr_ray.studies.arith_coupling import tasks as T
from iclr_ray.studies.arith_coupling.model import CoupledDecoder, ModelConfig, exact_match, masked_loss

torch.set_num_threads(1)


def _batch(examples, levels):
    L = max(len(e.tokens) for e in examples)
    tok = torch.full((len(examples), L), T.PAD)
    pos = torch.zeros((len(examples), L, levels), dtype=torch.long)
    mask = torch.zeros((len(examples), L), dtype=torch.bool)
    for i, e in enumerate(examples):
        n = len(e.tokens)
        tok[i, :n] = torch.tensor(e.ids())
        pos[i, :n] = torch.tensor(e.positions[:, :levels])
        mask[i, :n] = torch.tensor(e.loss_mask())
    return tok, pos, mask, tok == T.PAD


def _model(position="coupled", levels=2, seed=0):
    return CoupledDecoder(ModelConfig(vocab=len(T.VOCAB), d_model=32, layers=2, heads=4, d_ff=64, levels=levels,
                                      n_positions=20, position=position), seed=seed)


def test_position_kinds_and_tables():
    assert len(_model("coupled", 3).positions) == 3 and len(_model("absolute").positions) == 1
    assert len(_model("none").positions) == 0
    e = T.multi_addition([12, 5, 301])
    tok, pos, mask, pad = _batch([e], 2)
    m = _model()
    base = m(tok, pos, pad)
    assert base.shape == (1, len(e.tokens), len(T.VOCAB))
    assert not torch.allclose(base, m(tok, pos + (pos > 0).long(), pad))  # ids are embedded
    assert torch.allclose(_model("none")(tok, None, pad), _model("none")(tok, pos, pad))  # NoPE ignores them
    with pytest.raises(ValueError, match="coupled positions need"):
        m(tok, None, pad)
    assert torch.equal(_model(seed=3).embed.weight, _model(seed=3).embed.weight)


def test_causal_and_padding():
    m = _model()
    e = T.multi_addition([12, 5, 301])
    tok, pos, _, pad = _batch([e], 2)
    out = m(tok, pos, pad)
    tok2 = tok.clone()
    tok2[0, 20] = T.TOKEN_ID["9"] if tok[0, 20] != T.TOKEN_ID["9"] else T.TOKEN_ID["1"]
    out2 = m(tok2, pos, pad)
    assert torch.allclose(out[0, :20], out2[0, :20], atol=1e-6) and not torch.allclose(out[0, 20:], out2[0, 20:])
    short = T.multi_addition([3, 4])  # padded beside the long one: its logits must not change
    tok_b, pos_b, _, pad_b = _batch([short, e], 2)
    tok_s, pos_s, _, pad_s = _batch([short], 2)
    alone = m(tok_s, pos_s, pad_s)
    n = len(short.tokens)
    assert torch.allclose(m(tok_b, pos_b, pad_b)[0, :n], alone[0], atol=1e-5)


def test_masked_loss_counts_only_targets():
    e = T.addition(57, 8)
    tok, pos, mask, pad = _batch([e], 1)
    logits = _model(levels=1)(tok, pos, pad)
    total, n = masked_loss(logits, tok, mask)
    assert n == int(e.loss_mask().sum()) == 4  # 5, 6, 0 and the final <eos>
    logits2 = logits.clone()
    logits2[0, : e.target_start - 1] += 100.0  # positions predicting prompt tokens do not count
    assert torch.allclose(masked_loss(logits2, tok, mask)[0], total)


def test_exact_match_equals_greedy_decoding_after_training():
    torch.manual_seed(0)
    examples = [T.addition(a, b) for a, b in ((57, 8), (123, 45), (9, 9), (40, 61))]
    tok, pos, mask, pad = _batch(examples, 1)
    m = _model(levels=1)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(300):
        total, n = masked_loss(m(tok, pos, pad), tok, mask)
        opt.zero_grad()
        (total / n).backward()
        opt.step()
    m.eval()
    ok = exact_match(m, tok, pos, mask, pad)
    assert ok.all()
    for e in examples:  # greedy generation with the format's known ids reproduces every target
        seq = list(e.ids()[: e.target_start])
        for t in range(e.target_start, len(e.tokens)):
            x = torch.tensor([seq])
            p = torch.tensor(e.positions[None, :len(seq), :1])
            seq.append(int(m(x, p).argmax(-1)[0, -1]))
        assert seq == list(e.ids())
    wrong = tok.clone()
    wrong[0, examples[0].target_start] = T.TOKEN_ID["1"]  # a target the model does not predict
    assert not exact_match(m, wrong, pos, mask, pad)[0]
