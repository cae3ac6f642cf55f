"""arith_coupling batches: what each method shows the model, training offsets, evaluation cells."""
import numpy as np
import pytest

from iclr_ray.studies.arith_coupling import data, tasks


def test_methods_fix_format_and_positions():
    m = {name: data.method("multi_addition", name) for name in data.METHODS}
    assert (m["coupled"].levels, m["single"].levels, m["no_scratchpad"].scratchpad) == (2, 1, False)
    assert data.method("multiplication", "coupled").levels == 3 and data.method("addition", "coupled").levels == 1
    ops = [12, 5, 301]
    b = {name: data.collate([data.example("multi_addition", mm, (), operands=ops)], mm, 40, None) for name, mm in m.items()}
    assert b["coupled"].positions.shape[-1] == 2 and b["single"].positions.shape[-1] == 1
    assert np.array_equal(b["single"].positions[..., 0], b["coupled"].positions[..., 0])  # level 1 kept
    assert b["no_scratchpad"].tokens.shape[1] < b["coupled"].tokens.shape[1]
    assert b["absolute"].positions[0, :, 0].tolist() == list(range(b["absolute"].tokens.shape[1]))
    assert not b["nope"].positions.any()
    with pytest.raises(ValueError, match="unknown method"):
        data.method("addition", "rope")


def test_training_batches_pad_and_shift():
    m = data.method("multi_addition", "coupled")
    rng = np.random.default_rng(0)
    b = data.train_batch("multi_addition", m, 64, rng, digits=(1, 4), count=(2, 4), max_position=40)
    assert b.tokens.shape[0] == 64 and b.positions.max() <= 40
    assert (b.tokens[b.pad] == tasks.PAD).all() and not b.loss_mask[b.pad].any()
    assert (b.positions[b.pad] == 0).all()
    lengths = (~b.pad).sum(axis=1)
    assert len(set(lengths.tolist())) > 3  # operand counts and lengths vary
    starts = b.positions[:, 1, 0]  # the first operand digit's level-1 id: shifted per sample
    assert len(set(starts.tolist())) > 5
    again = data.train_batch("multi_addition", m, 64, np.random.default_rng(0), (1, 4), (2, 4), 40)
    assert np.array_equal(again.tokens, b.tokens) and np.array_equal(again.positions, b.positions)


def test_eval_cells_have_exact_lengths_and_shared_numbers():
    coupled, nope = data.method("multi_addition", "coupled"), data.method("multi_addition", "nope")
    a = data.eval_cell("multi_addition", coupled, digits=6, count=5, size=20, seed=1)
    b = data.eval_cell("multi_addition", nope, digits=6, count=5, size=20, seed=1)
    assert np.array_equal(a.tokens, b.tokens)  # every method is scored on the same numbers
    rows = a.tokens[0][1:a.tokens[0].tolist().index(tasks.TOKEN_ID["="])]
    assert (rows == tasks.TOKEN_ID["+"]).sum() == 4
    assert a.positions[0, 1, 0] == tasks.sum_width([10**6 - 1] * 5) + 1  # no offset at evaluation
    mult = data.eval_cell("multiplication", data.method("multiplication", "coupled"), 7, 3, 5, seed=0)
    first = [tasks.VOCAB[t] for t in mult.tokens[0]]
    star = first.index("*")
    assert star == 8 and first[star + 4] == "="  # <eos>, 7 digits of A, "*", 3 digits of B
    assert data.longest("multi_addition", coupled, 6, 5)[0] == max(len(r) for r in (~a.pad))


def test_absolute_positions_start_at_a_random_offset_in_training():
    """The official random-start APE: in training each sequence's ids 0, 1, 2, ... move by one
    offset, so the rows past the training lengths are trained; at evaluation they start at 0."""
    m = data.method("multi_addition", "absolute")
    top = 300
    b = data.train_batch("multi_addition", m, 256, np.random.default_rng(0), (1, 4), (2, 4), top)
    ids, real = b.positions[..., 0], ~b.pad
    lengths = real.sum(axis=1)
    assert all((np.diff(ids[i, :n]) == 1).all() for i, n in enumerate(lengths))  # consecutive within a sequence
    assert ids[real].max() <= top and ids[real].max() > top - lengths.max()  # up to the table's last row
    assert (ids[real] >= lengths.max()).mean() > 0.5  # most ids lie past the longest training sequence
    assert len(set(ids[:, 0].tolist())) > 100  # a fresh start per sample
    cell = data.eval_cell("multi_addition", m, 6, 6, 4, seed=0)
    assert cell.positions[0, :, 0].tolist() == list(range(cell.tokens.shape[1]))  # no offset at evaluation
    with pytest.raises(ValueError, match="do not fit"):
        tasks.absolute(10, 5, np.random.default_rng(0))


def test_eval_cells_take_training_style_offsets_only_when_asked():
    """The check of issue 21: the same numbers, scored with random offsets within the table."""
    m = data.method("multi_addition", "coupled")
    plain = data.eval_cell("multi_addition", m, 4, 4, 50, seed=3)
    moved = data.eval_cell("multi_addition", m, 4, 4, 50, seed=3, offsets_within=18)
    assert np.array_equal(plain.tokens, moved.tokens)
    real = ~plain.pad
    shift = moved.positions - plain.positions
    assert moved.positions[real].max() <= 18 and (shift[real] >= 0).all()
    assert len(set(shift[:, 1, 0].tolist())) > 3  # a fresh offset per example
    again = data.eval_cell("multi_addition", m, 4, 4, 50, seed=3, offsets_within=18)
    assert np.array_equal(again.positions, moved.positions)  # seeded: every method and rerun sees the same


def test_numbers_past_int64_have_exactly_their_digits():
    rng = np.random.default_rng(0)
    xs = [tasks.random_number(rng, 25) for _ in range(200)]
    assert all(len(str(x)) == 25 for x in xs)
    assert len({str(x)[-1] for x in xs}) == 10 and len({str(x)[0] for x in xs}) == 9  # every digit, no leading 0
