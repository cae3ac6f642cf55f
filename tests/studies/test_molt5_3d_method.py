"""molt5_3d's method: E3FP identifiers aligned with SELFIES atom tokens on real QM9-style conformers,
the fusion's padding row and weights, span corruption, the shuffled assignment."""
import numpy as np
import pytest

pytest.importorskip("rdkit")
pytest.importorskip("e3fp")
pytest.importorskip("selfies")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.studies.molt5_3d import molt5 as M  # noqa: E402


def _conformer(smiles: str, seed: int = 0):
    """Elements and coordinates of an ETKDG conformer (hydrogens included), as QM9 gives them."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    xyz = mol.GetConformer().GetPositions()
    return [a.GetSymbol() for a in mol.GetAtoms()], xyz


MOLECULES = ["CC(C)(O)C#N", "O=C1NC=CC1=O", "C1CC1O", "C/C=C/C(=O)N", "OC1=CC=CN1C=O", "N#CC1CC2OC12", "C"]


@pytest.mark.parametrize("smiles", MOLECULES)
def test_identifier_rows_are_the_selfies_atom_tokens(smiles):
    import selfies as sf
    from rdkit import Chem

    elements, xyz = _conformer(smiles)
    f = M.featurise(M.mol_from_xyz(elements, xyz))
    assert f.tokens == list(sf.split_selfies(sf.encoder(f.smiles)))
    assert f.fp.shape == (len(f.tokens), M.LEVEL + 1)
    has = (f.fp >= 0).any(1)
    assert ((f.fp >= 0).all(1) == has).all()  # an atom has every level, a non-atom none
    assert has.sum() == Chem.MolFromSmiles(smiles).GetNumAtoms()  # one row per heavy atom
    assert f.fp.min() >= -1 and f.fp.max() <= M.BITS - 1
    for tok, row in zip(f.tokens, f.fp):  # branch / ring tokens (and their index symbols) carry none
        if "Branch" in tok or "Ring" in tok:
            assert (row == -1).all()
    # the perceived molecule is the input's (stereo aside: the conformer assigns it)
    flat = lambda s: Chem.MolToSmiles(Chem.MolFromSmiles(s), isomericSmiles=False)  # noqa: E731
    assert flat(f.smiles) == flat(smiles)


def test_identifiers_are_deterministic_for_a_conformer_and_see_geometry():
    elements, xyz = _conformer("CCCCO", seed=1)
    a = M.featurise(M.mol_from_xyz(elements, xyz))
    b = M.featurise(M.mol_from_xyz(elements, xyz.copy()))
    assert (a.fp == b.fp).all() and a.tokens == b.tokens
    # another conformer of the same molecule: same tokens, level-0 identifiers (atom invariants) equal,
    # higher levels differ somewhere (E3FP's shells are 3D)
    other = None
    for seed in range(2, 30):
        e2, x2 = _conformer("CCCCO", seed=seed)
        c = M.featurise(M.mol_from_xyz(e2, x2))
        if (c.fp[:, 1:] != a.fp[:, 1:]).any():
            other = c
            break
    assert other is not None and other.tokens == a.tokens
    assert (other.fp[:, 0] == a.fp[:, 0]).all()
    # the 2D control's Morgan identifiers: on the same atom tokens, and blind to the conformer
    assert (((a.fp2d >= 0).all(1)) == ((a.fp >= 0).all(1))).all() and (other.fp2d == a.fp2d).all()


def test_morgan_identifiers_see_topology_only():
    """Topologically equivalent atoms share every level's identifier (the two methyls of propan-2-ol);
    atoms that differ at radius 1 differ from level 1 on, not at level 0 when their invariants agree."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles("CC(C)O")
    ids = M.morgan_levels(mol, level=3)
    assert set(ids) == {0, 1, 2, 3} and all(len(v) == 4 for v in ids.values())
    assert ids[0] == ids[2] and ids[0] != ids[1]
    chain = M.morgan_levels(Chem.MolFromSmiles("CCCC"), level=3)
    assert chain[0][0] == chain[3][0] and chain[1][0] == chain[2][0] and chain[0] == chain[3]
    assert all(0 <= x < M.BITS for v in ids.values() for x in v)


def test_bits_fold_the_identifiers():
    elements, xyz = _conformer("CC(C)(O)C#N")
    f = M.featurise(M.mol_from_xyz(elements, xyz), bits=64, level=2)
    assert f.fp.shape[1] == 3 and f.fp.max() < 64


def test_atom_token_mask_skips_branch_ring_and_their_index_symbols():
    tokens = ["[C]", "[C]", "[Branch1]", "[C]", "[C]", "[=Branch1]", "[C]", "[=O]", "[C]", "[-/Ring1]", "[C]",
              "[Ring2]", "[C]", "[C]", "[N]"]
    mask = M.atom_token_mask(tokens)
    # Branch1 and Ring1 read one index symbol, Ring2 two
    assert mask.tolist() == [True, True, False, False, True, False, False, True, True, False, False, False, False,
                             False, True]


def test_unbonded_geometry_is_refused():
    with pytest.raises(ValueError, match="no bond assignment"):
        M.mol_from_xyz(["C", "C"], np.array([[0.0, 0, 0], [0.3, 0, 0]]))  # atoms 0.3 A apart


def _fusion(mode, d=8, bits=32):
    torch.manual_seed(0)
    return M.Fusion(torch.nn.Embedding(20, d), mode, bits)


def test_padding_row_is_zero_and_gets_no_update():
    f = _fusion("sum")
    assert (f.fp.weight[0] == 0).all()
    opt = torch.optim.AdamW(f.parameters(), lr=0.1, weight_decay=0.1)
    ids = torch.tensor([[3, 4, 5]])
    fp = torch.tensor([[[-1, -1], [5, 7], [-1, -1]]])
    for _ in range(3):
        f(ids, fp).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    assert (f.fp.weight[0] == 0).all()
    assert (f.fp.weight[6] != 0).any()


def test_sum_weights_and_modes():
    ids = torch.tensor([[3, 4]])
    fp = torch.tensor([[[-1, -1, -1], [2, 5, 9]]])
    e1 = lambda f: f.token(ids)  # noqa: E731
    e3 = lambda f: f.fp(torch.tensor([3, 6, 10])).mean(0)  # noqa: E731
    f = _fusion("sum")
    out = f(ids, fp)
    assert torch.allclose(out[0, 0], 0.5 * e1(f)[0, 0])  # no identifier: 0.5 E_1D, as the official code
    assert torch.allclose(out[0, 1], 0.5 * e1(f)[0, 1] + 0.5 * e3(f))
    f = _fusion("3d")
    assert torch.allclose(f(ids, fp)[0, 1], e3(f)) and torch.allclose(f(ids, fp)[0, 0], e1(f)[0, 0])
    f = _fusion("1d")
    assert torch.allclose(f(ids, fp), e1(f))
    f = _fusion("concat")
    out = f(ids, fp)
    assert torch.allclose(out[0, 1], f.mlp(torch.cat([e1(f)[0, 1], e3(f)])))
    assert torch.allclose(out[0, 0], e1(f)[0, 0])
    with pytest.raises(ValueError):
        M.Fusion(torch.nn.Embedding(4, 4), "mean")


def test_the_1d_model_never_reads_the_identifiers():
    from transformers import T5ForConditionalGeneration

    torch.manual_seed(0)
    m = M.MolT5(T5ForConditionalGeneration(M.t5_config(30, 16, 32, 1, 2, 0.0)), "1d", bits=32)
    ids = torch.randint(3, 30, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    labels = torch.randint(3, 30, (2, 3))
    fp_a, fp_b = torch.randint(-1, 32, (2, 5, 4)), torch.randint(-1, 32, (2, 5, 4))
    assert torch.equal(m(ids, fp_a, mask, labels), m(ids, fp_b, mask, labels))
    m = M.MolT5(T5ForConditionalGeneration(M.t5_config(30, 16, 32, 1, 2, 0.0)), "sum", bits=32)
    assert not torch.equal(m(ids, fp_a, mask, labels), m(ids, fp_b, mask, labels))


@pytest.mark.parametrize("n", [1, 2, 5, 13, 40])
def test_span_corruption_masks_about_15_percent_in_separate_spans(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        spans = M.span_corrupt(n, rng)
        assert spans and all(0 <= a < b <= n for a, b in spans)
        assert all(b1 < a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # disjoint, never touching
        masked = sum(b - a for a, b in spans)
        assert masked == max(1, min(round(n * 0.15), n - 1 if n > 1 else 1))


def test_corrupted_input_and_target_rebuild_the_sequence():
    ids = list(range(10, 22))
    fp = np.arange(12 * 2).reshape(12, 2)
    spans = [(2, 4), (7, 8)]
    inp, inp_fp, target = M.corrupted(ids, fp, spans, [100, 101], eos=1)
    assert inp == [10, 11, 100, 14, 15, 16, 101, 18, 19, 20, 21]
    assert target == [100, 12, 13, 101, 17, 1]
    assert (inp_fp[2] == -1).all() and (inp_fp[3] == fp[4]).all()


def test_shuffled_assignment_stays_within_a_size_and_moves_every_molecule():
    groups = [3, 3, 5, 5, 5, 7, 9, 9]
    perm = M.shuffled_assignment(groups, np.random.default_rng(0))
    assert sorted(perm.tolist()) == list(range(8))
    assert all(groups[p] == groups[i] for i, p in enumerate(perm))
    assert all(p != i for i, p in enumerate(perm) if groups.count(groups[i]) > 1)
    assert perm[5] == 5  # alone in its size


def test_the_shuffled_controls_fixed_points_leave_validation_and_test():
    from iclr_ray.studies.molt5_3d.run import split_without_fixed_points

    groups = [3, 3, 5, 5, 5, 7, 9, 9, 11]  # molecules 5 and 8 are alone in their size
    perm = M.shuffled_assignment(groups, np.random.default_rng(0))
    split = {"train": np.array([0, 1, 8]), "valid": np.array([2, 5]), "test": np.array([3, 4, 6, 7])}
    kept, count = split_without_fixed_points(perm, split)
    assert count == {"total": 2, "train": 1, "valid": 1, "test": 0}
    assert kept["train"].tolist() == [0, 1, 8] and kept["valid"].tolist() == [2] and kept["test"].tolist() == [3, 4, 6, 7]


def test_numbers_round_trip_through_text():
    assert M.format_value(-6.8312, 2) == "-6.83" and M.parse_value("-6.83") == -6.83
    assert np.isnan(M.parse_value("6.-3"))
    vocab = M.vocabulary(["[C]", "[NH3+1]"], ["homo"])
    tok = M.build_tokenizer(vocab)
    ids = tok("<homo> <bom>[C][NH3+1]<eom>", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<homo>", "<bom>", "[C]", "[NH3+1]", "<eom>"]
    assert vocab[:3] == ["<pad>", "</s>", "<unk>"] and len(set(vocab)) == len(vocab)


def test_the_t5_has_an_untied_output_head_as_v1_1():
    """transformers 5 ties T5's head to its embedding whatever the config says; build_t5 unties it."""
    t5 = M.build_t5(M.t5_config(30, 16, 32, 1, 2, 0.0))
    assert t5.lm_head.weight is not t5.shared.weight
    assert torch.equal(t5.lm_head.weight, t5.shared.weight)
    names = {n for n, _ in t5.named_parameters()}
    assert {"lm_head.weight", "shared.weight"} <= names
