"""molt5_3d end to end on the session's Ray cluster (the smoke study: conformers tokenised in Ray
tasks, the variants side by side in a Ray Train run inside a Tune trial, claims, figures), the
input errors that stop a run before Ray, and the recipe's views and objectives without Ray."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("rdkit")
pytest.importorskip("e3fp")

from iclr_ray import cli  # noqa: E402


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    assert "does not exist" in input_error("molt5_3d", [f"data.source={tmp_path}/missing.csv"])
    (tmp_path / "bad.csv").write_text("Index,SMILES\n1,C\n")
    assert "bad.csv:1: missing column" in input_error("molt5_3d", [f"data.source={tmp_path}/bad.csv"])
    # the released 3D-MolT5 (here a tiny T5 saved as the hub holds one) is refused, not scrambled
    from transformers import T5Config, T5ForConditionalGeneration

    T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=1, num_heads=2,
                                        d_kv=8)).save_pretrained(tmp_path / "t5")
    assert "not implemented" in input_error("molt5_3d", [f"model.checkpoint={tmp_path}/t5"])
    assert "not implemented" in input_error("molt5_3d", ["model.checkpoint=QizhiPei/3d-molt5-base"])
    assert "train.targets: unknown ['mu']" in input_error("molt5_3d", ["train.targets=[homo,mu]"])
    assert "train.variants" in input_error("molt5_3d", ["train.variants=[1d,2d]"])


def _records(n=40, seed=0):
    """Real QM9 molecules featurised as the Ray tasks do (skips without the packaged data set)."""
    from iclr_ray.config import ConfigError
    from iclr_ray.studies.molt5_3d import data as D
    from iclr_ray.studies.molt5_3d.molt5 import featurise, mol_from_xyz, radius_of_gyration

    try:
        mols = D.read_qm9("packaged", limit=3000)
    except ConfigError as exc:
        pytest.skip(str(exc))
    out = []
    for i in np.random.default_rng(seed).permutation(len(mols)):
        m = mols[i]
        try:
            f = featurise(mol_from_xyz(m.elements, m.xyz))
        except ValueError:
            continue
        out.append({"index": m.index, "smiles": f.smiles, "tokens": f.tokens, "fp": f.fp, "fp2d": f.fp2d,
                    "props": dict(m.props, rg=radius_of_gyration(m.xyz, m.elements))})
        if len(out) == n:
            return out
    return out


def _recipe(records, variants=("1d", "3d", "sum", "shuffled"), pretrain=2):
    from iclr_ray.studies.molt5_3d import run as R
    from iclr_ray.studies.molt5_3d.molt5 import shuffled_assignment, vocabulary

    targets = ["homo", "rg", "atoms"]
    vocab = vocabulary(sorted({t for r in records for t in r["tokens"]}), targets)
    n_atoms = [int((np.asarray(r["fp"]) >= 0).any(1).sum()) for r in records]
    perm = shuffled_assignment(n_atoms, np.random.default_rng(0))
    split = {"train": np.arange(0, 30), "valid": np.arange(30, 35), "test": np.arange(35, 40)}
    c = {"targets": targets, "decimals": {t: R.DECIMALS[t] for t in targets}, "perm": perm.tolist(), "level": 3,
         "bits": 4096, "variants": list(variants), "model": {"checkpoint": None, "d_model": 16, "d_ff": 32, "layers": 1,
                                                              "heads": 2, "dropout": 0.0},
         "pretrain_steps": pretrain, "noise_density": 0.15, "mean_span": 3.0, "eval_batch": 7, "max_new_tokens": 6,
         "seed": 0}
    means = [float(np.mean([r["props"][t] for r in records[:30]])) for t in targets]
    recipe = R.MolRecipe(records, split, vocab, c, means)
    recipe.setup()
    return recipe


def test_views_keep_identifiers_on_atoms_and_the_control_moves_them():
    recipe = _recipe(_records())
    e = recipe.enc
    for m in range(len(e.ids)):
        atoms_full = (e.fp[m] >= 0).any(1)
        assert len(e.ids[m]) == len(e.fp[m]) and not atoms_full[0] and not atoms_full[-1]  # <bom>, <eom>
        assert (e.atom_fp[m][1:-1] == e.fp[m][atoms_full]).all()  # the 3D-only view: the atoms only
        assert set(e.atom_ids[m][1:-1]) <= {e.vocab["<atom>"]}
        p = e.perm[m]
        assert ((e.shuffled_fp[m] >= 0).any(1) == atoms_full).all()  # same positions ...
        assert (e.shuffled_fp[m][atoms_full] == e.fp[p][(e.fp[p] >= 0).any(1)]).all()  # ... another molecule's ids
    moved = [m for m in range(len(e.ids)) if e.perm[m] != m]
    assert moved and any((e.shuffled_fp[m] != e.fp[m]).any() for m in moved)


def test_the_2d_control_reads_morgan_identifiers_on_the_same_tokens():
    recipe = _recipe(_records(), variants=("1d", "sum", "ecfp"))
    e = recipe.enc
    for m in range(len(e.ids)):
        assert (((e.fp2d[m] >= 0).any(1)) == ((e.fp[m] >= 0).any(1))).all()
    assert any((e.fp2d[m] != e.fp[m]).any() for m in range(len(e.ids)))
    from iclr_ray.llm.recipe import TrainConfig

    (pre, _), = recipe.step_batches(0, TrainConfig(micro_batch_size=4, num_workers=1, seed=0))[:1]
    assert torch_equal(pre["full_ids"], pre["ecfp_ids"]) and not torch_equal(pre["full_fp"], pre["ecfp_fp"])
    assert ((pre["full_fp"] >= 0) == (pre["ecfp_fp"] >= 0)).all()  # the same spans masked


def test_finetune_batches_carry_the_target_text_and_pretraining_masks_spans():
    recipe = _recipe(_records())
    from iclr_ray.llm.recipe import TrainConfig

    cfg = TrainConfig(micro_batch_size=4, num_workers=1, seed=0)
    (pre, n), = recipe.step_batches(0, cfg)[:1]
    sentinel = recipe.sentinels[0]
    assert n == 4 and (pre["full_ids"] == sentinel).any(1).all() and (pre["full_labels"][:, 0] == sentinel).all()
    assert (pre["atoms_labels"][:, 0] == sentinel).all()
    assert torch_equal(pre["full_ids"], pre["shuffled_ids"]) and not torch_equal(pre["full_fp"], pre["atoms_fp"][:, :1])
    (ft, _), = recipe.step_batches(2, cfg)[:1]
    inv = {i: t for t, i in recipe.enc.vocab.items()}
    for row, lab in zip(ft["full_ids"], ft["full_labels"]):
        prompt = inv[int(row[0])]
        text = "".join(inv[int(t)] for t in lab if int(t) not in (-100, 1))
        assert prompt in ("<homo>", "<rg>", "<atoms>") and float(text) == float(text)
        if prompt == "<atoms>":
            assert "." not in text
    assert recipe.step_batches(2, cfg)[0][0]["full_ids"].tolist() == ft["full_ids"].tolist()  # a pure function


def torch_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


def test_side_by_side_variants_train_without_ray_and_score_every_target():
    from iclr_ray.llm.recipe import TrainConfig, reference_losses

    recipe = _recipe(_records())
    cfg = TrainConfig(micro_batch_size=8, num_workers=1, max_steps=12, lr=3e-3, schedule="constant", grad_clip=0.0,
                      seed=0)
    losses = reference_losses(recipe, cfg)
    assert np.mean(losses[-3:]) < np.mean(losses[2:5])  # fine-tuning loss falls (steps 2.. are regression)
    model = recipe.build_model(cfg).eval()
    out = recipe.eval_metrics(model)
    assert set(out) == {f"valid_{k}|{v}|{t}" for k in ("mae", "medae", "invalid")
                        for v in ("1d", "3d", "sum", "shuffled") for t in ("homo", "rg", "atoms")}
    assert all(v >= 0 for v in out.values())


def test_every_variant_of_a_seed_starts_from_the_same_t5():
    from iclr_ray.llm.recipe import TrainConfig

    recipe = _recipe(_records(), variants=("1d", "sum"))
    m = recipe.build_model(TrainConfig(seed=4))
    a, b = (dict(x.t5.named_parameters()) for x in m.models)
    assert all(torch_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("molt5_3d") / "run"
    assert cli.main(["run", "molt5_3d", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_trains_every_variant_and_judges_every_claim(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    assert m["variants"] == ["1d", "3d", "sum", "concat", "shuffled", "ecfp"] and m["n_molecules"] > 500
    assert set(m["unshuffled"]) == {"total", "train", "valid", "test"}
    assert set(m["dropped"]) <= {"no bond assignment", "atom without bonds"}  # never a misalignment
    for v in m["variants"]:
        for t in m["targets"]:
            assert len(m["test_mae"][v][t]) == 1 and m["test_mae"][v][t][0] > 0
            assert 0 <= m["test_medae"][v][t][0] <= m["test_mae"][v][t][0] * 10
            assert len(m["valid_curves"][v][t][0]) == len(m["curve_steps"]) >= 2
    assert set(m["reference"]) == {"ridge_e3fp", "train_mean"}
    assert {c["id"] for c in result["claims"]} == {"beats_1d", "geometry_gain_larger", "real_3d_beats_shuffled",
                                                   "e3fp_beats_ecfp"}
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"mae_by_variant", "learning_curves"}
    assert "Relative MAE reduction against 1D-only" in (smoke_run / "report.md").read_text()
