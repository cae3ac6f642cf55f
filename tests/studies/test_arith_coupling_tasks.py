"""arith_coupling's task formats and multi-level Position Coupling ids: worked examples, the
coupling invariants on random samples, the scratchpads' arithmetic, and the training offsets."""
import numpy as np
import pytest

from iclr_ray.studies.arith_coupling import tasks as T


def test_two_operand_addition_example():
    e = T.addition(57, 8)
    assert " ".join(e.tokens) == "<eos> 5 7 + 0 8 = 5 6 0 <eos>"
    assert e.positions[:, 0].tolist() == [0, 3, 2, 1, 3, 2, 1, 2, 3, 4, 0]
    assert e.tokens[e.target_start] == "5" and e.tokens[e.target_start - 1] == "="
    assert e.loss_mask().sum() == 4 and e.answer == "65"


def test_multi_operand_scratchpad_example():
    e = T.multi_addition([12, 5, 301])
    assert " ".join(e.tokens) == ("<eos> 0 0 1 2 + 0 0 0 5 + 0 3 0 1 = 0 0 0 0 > 2 1 0 0 > 7 1 0 0 > 8 1 3 0 <eos>")
    pos = [tuple(p) for p in e.positions.tolist()]
    assert pos[1:6] == [(5, 1), (4, 1), (3, 1), (2, 1), (1, 1)]  # operand 1 and its "+"
    assert pos[15:20] == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]  # "=" and the running sum 0
    assert pos[30:35] == [(1, 4), (2, 4), (3, 4), (4, 4), (5, 4)]  # ">" and the final sum 318
    assert e.tokens[e.target_start - 1] == "=" and e.answer == "318"


def test_multiplication_scratchpad_example():
    e = T.multiplication(23, 45)
    assert " ".join(e.tokens) == "<eos> 2 3 * 4 5 = 5 1 1 + 2 9 0 = 5 1 1 0 > 5 3 0 1 <eos>"
    pos = [tuple(p) for p in e.positions.tolist()]
    assert pos[1:6] == [(3, 0, 0), (2, 0, 0), (0, 0, 0), (0, 2, 0), (0, 1, 0)]
    assert pos[6:10] == [(1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 1, 4)]  # A * 5 = 115, reversed
    assert pos[10:14] == [(1, 2, 2), (2, 2, 3), (3, 2, 4), (4, 2, 5)]  # A * 4 = 92, shifted by one
    assert pos[19:24] == [(0, 2, 1), (0, 2, 2), (0, 2, 3), (0, 2, 4), (0, 2, 5)]
    assert e.answer == "1035"


def _digit_rows(e):
    """Maximal runs of digits: (start, end) index pairs."""
    runs, start = [], None
    for i, t in enumerate(e.tokens + ("<eos>",)):
        if t.isdigit() and start is None:
            start = i
        elif not t.isdigit() and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _rows_value(e, lo, hi, reverse):
    s = "".join(e.tokens[lo:hi])
    return int(s[::-1] if reverse else s)


@pytest.mark.parametrize("seed", range(20))
def test_multi_addition_coupling_invariants(seed):
    rng = np.random.default_rng(seed)
    ops = T.sample_operands(rng, (2, 8), (1, 9))
    e = T.multi_addition(ops)
    rows = _digit_rows(e)
    n = len(ops)
    assert len(rows) == 2 * n + 1  # n operands, n + 1 running sums
    P = T.sum_width(ops)
    assert all(hi - lo == P for lo, hi in rows)
    for k in range(n):
        lo, hi = rows[k]
        assert _rows_value(e, lo, hi, reverse=False) == ops[k]
        slo, shi = rows[n + k]  # the running sum operand k is added to (row 0 is the padded 0)
        assert _rows_value(e, slo, shi, reverse=True) == sum(ops[:k])
        assert _rows_value(e, *rows[n + k + 1], reverse=True) == sum(ops[:k + 1])
        # level 2: operand k and that running sum share their id (as in the official code)
        assert set(e.positions[lo:hi, 1]) == set(e.positions[slo:shi, 1]) == {k + 1}
        # level 1: same significance, same id (operands written most significant first, sums reversed)
        for r in range(n + 1):
            assert e.positions[lo:hi, 0].tolist() == e.positions[slice(*rows[n + r]), 0].tolist()[::-1]
    assert _rows_value(e, *rows[-1], reverse=True) == sum(ops) == int(e.answer)


@pytest.mark.parametrize("seed", range(20))
def test_multiplication_coupling_invariants(seed):
    rng = np.random.default_rng(100 + seed)
    a, b = T.random_number(rng, int(rng.integers(1, 7))), T.random_number(rng, int(rng.integers(1, 7)))
    e = T.multiplication(a, b)
    la, lb = len(str(a)), len(str(b))
    rows = _digit_rows(e)
    assert len(rows) == 2 + 2 * lb
    parts, sums = rows[2:2 + lb], rows[2 + lb:]
    for i, ((plo, phi), (slo, shi)) in enumerate(zip(parts, sums), start=1):
        b_i = int(str(b)[-i])
        assert _rows_value(e, plo, phi, reverse=True) == a * b_i
        assert _rows_value(e, slo, shi, reverse=True) == sum(a * int(str(b)[-j]) * 10 ** (j - 1) for j in range(1, i + 1))
        # level 2: B's digit i, its partial product and its running sum share one id
        b_index = 1 + la + 1 + (lb - i)  # B is written most significant first after "<eos> A *"
        assert e.positions[b_index, 1] == i
        assert set(e.positions[plo:phi, 1]) == set(e.positions[slo:shi, 1]) == {i}
        # level 3: the partial product's digit of significance k sits at output place k + i - 1
        assert e.positions[plo:phi, 2].tolist() == list(range(i + 1, i + 1 + la + 1))
        # level 1 of a partial product matches A's significance ids
    a_lvl1 = e.positions[1:1 + la, 0].tolist()
    assert e.positions[parts[0][0]:parts[0][0] + la, 0].tolist() == a_lvl1[::-1]
    assert _rows_value(e, *sums[-1], reverse=True) == a * b == int(e.answer)


@pytest.mark.parametrize("build", [lambda: T.multi_addition([987, 65, 4321, 0]), lambda: T.multiplication(9876, 543),
                                   lambda: T.addition(99999, 1), lambda: T.multi_addition([5, 77], scratchpad=False)])
def test_training_offsets_stay_in_range_and_keep_structure(build):
    e = build()
    rng = np.random.default_rng(0)
    cap = int(e.positions.max()) + 3
    seen = set()
    for _ in range(200):
        p = T.shifted(e.positions, cap, rng)
        assert p.min() >= 0 and p.max() <= cap
        assert ((p == 0) == (e.positions == 0)).all()  # "no position" stays 0
        shift = p - e.positions
        for level in range(e.levels):  # one offset per level per sample
            assert len(set(shift[e.positions[:, level] > 0, level])) == 1
        seen.add(tuple(shift.max(axis=0)))
    top = e.positions.max(axis=0)
    for level in range(e.levels):  # every start from 1 to the largest that fits is drawn
        assert {s[level] for s in seen} == set(range(cap - top[level] + 1))
    assert np.array_equal(T.shifted(e.positions, cap, None), e.positions)  # evaluation: no offset
    with pytest.raises(ValueError, match="exceed max_position"):
        T.shifted(e.positions, int(e.positions.max()) - 1, rng)


def test_sampling_follows_the_partially_uniform_rule():
    rng = np.random.default_rng(1)
    samples = [T.sample_operands(rng, (2, 10), (1, 10)) for _ in range(4000)]
    counts = [len(s) for s in samples]
    assert min(counts) == 2 and max(counts) == 10
    shared = np.mean([len({len(str(x)) for x in s}) == 1 for s in samples])
    assert 0.5 < shared < 0.6  # half share one length, plus independent draws that happen to agree
    assert all(len(str(x)) == 1 or str(x)[0] != "0" for s in samples for x in s)
    assert {len(str(T.random_number(rng, 7))) for _ in range(50)} == {7}


def test_baseline_formats():
    e = T.multi_addition([12, 5, 301], scratchpad=False)
    assert " ".join(e.tokens) == "<eos> 0 0 1 2 + 0 0 0 5 + 0 3 0 1 = 8 1 3 0 <eos>" and e.levels == 1
    assert e.positions[:, 0].tolist()[-6:] == [1, 2, 3, 4, 5, 0]
    m = T.multiplication(23, 45, scratchpad=False)
    assert " ".join(m.tokens) == "<eos> 2 3 * 4 5 = 5 3 0 1 <eos>"
    assert T.absolute(4)[:, 0].tolist() == [0, 1, 2, 3]
    assert e.ids()[0] == T.EOS and all(T.VOCAB[i] == t for i, t in zip(e.ids(), e.tokens))
    with pytest.raises(ValueError):
        T.multi_addition([3])
    with pytest.raises(ValueError):
        T.addition(-1, 2)
