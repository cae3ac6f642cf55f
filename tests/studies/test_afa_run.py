"""afa end to end on the session's Ray cluster (the smoke study: the base in one Ray Train run, the
experts in parallel Ray Train runs under Tune, the merge search and the evaluator as tasks, one Tune
trial per (expert set, seed) training the aggregators, the scoring tasks, claims and figures), the
data split and the recipes without Ray, and the input errors that stop a run before Ray."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("deepspeed")

from iclr_ray import cli  # noqa: E402


def test_input_errors_exit_2_before_ray(input_error):
    assert "experts.groups" in input_error("afa", ["experts.groups=[[0,1],[1,2]]"])
    assert "experts.groups" in input_error("afa", ["experts.groups=[[0,1,2,3,4,5,6,7,8,9]]"])
    assert "experts.control" in input_error("afa", ["experts.control=1"])
    assert "aggregator.sizes" in input_error("afa", ["aggregator.sizes=[3]"])
    assert "merge.step" in input_error("afa", ["merge.step=0.3"])
    assert "data.side" in input_error("afa", ["data.side=15"])
    assert "experts.unets" in input_error("afa", ["experts.unets=[a/b,c/d,e/f]"])


def test_split_is_stratified_disjoint_and_seeded():
    from iclr_ray.studies.afa import data as D

    a, b = D.split(8, 100, 50, seed=0), D.split(8, 100, 50, seed=0)
    assert [len(a[s]) for s in ("train", "val", "test")] == [1797 - 150, 50, 100]
    assert all(np.array_equal(a[s].images, b[s].images) for s in a)
    counts = np.bincount(a["test"].labels, minlength=10)
    assert counts.min() >= 9 and counts.max() <= 11  # about 10 per class
    flat = {s: {im.tobytes() for im in a[s].images} for s in a}
    assert not (flat["test"] & flat["val"]) and len(flat["test"] & flat["train"]) <= 2  # (scikit's few duplicates)
    assert a["train"].subset([3]).labels.tolist() == [3] * int((a["train"].labels == 3).sum())


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The smoke config, its splits and two untrained experts saved by the study's own code."""
    from iclr_ray.studies.afa import data as D
    from iclr_ray.studies.afa import run as R
    from iclr_ray.studies.afa.config import PRESETS, Config

    d = tmp_path_factory.mktemp("afa_assets")
    cfg = Config.model_validate(PRESETS["smoke"])
    c = R.recipe_dict(cfg)
    parts = D.split(cfg.data.side, cfg.data.test, cfg.data.val)
    for s, v in parts.items():
        D.save(v, d / f"{s}.npz")
    paths = {s: str(d / f"{s}.npz") for s in D.SPLITS}
    experts = []
    for i in range(2):
        R.save_expert(R.build_expert(c, i), d / f"e{i}")
        experts.append(str(d / f"e{i}"))
    return cfg, c, paths, experts, d


def test_expert_learns_its_classes_without_ray(assets):
    from iclr_ray.llm.recipe import reference_losses
    from iclr_ray.studies.afa.run import ExpertRecipe, train_config

    cfg, c, paths, experts, _ = assets
    tc = train_config(cfg.experts, "t", 60, 8, 3e-3, 0, 0)
    r = ExpertRecipe(c, paths["train"], [0, 1], experts[0])
    r.setup()
    (b1, n), = r.step_batches(5, tc)
    (b2, _), = r.step_batches(5, tc)
    assert n == 8 and all(np.array_equal(b1[k].numpy(), b2[k].numpy()) for k in b1)
    assert set(b1["tokens"].flatten().tolist()) <= {0, 1, 2}  # classes 0 and 1 (+1), or the empty caption
    losses = reference_losses(ExpertRecipe(c, paths["train"], [0, 1], experts[0]), tc)
    assert all(np.isfinite(losses)) and np.mean(losses[-10:]) < np.mean(losses[:10])


def test_aggregator_training_moves_only_the_aggregators_and_saves_them(assets):
    import torch

    from iclr_ray.llm.recipe import reference_losses
    from iclr_ray.llm.weights import save_weights
    from iclr_ray.studies.afa.run import AFARecipe, aggregator_state, load_afa, train_config

    cfg, c, paths, experts, d = assets
    tc = train_config(cfg.aggregator, "t", 3, 8, 1e-2, 0, 0)
    r = AFARecipe(c, paths["train"], experts)
    r.setup()
    model = r.build_model(tc)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r.build_model = lambda cfg: model
    assert all(np.isfinite(reference_losses(r, tc)))
    after = model.state_dict()
    moved = {k.split(".")[0] for k in before if not torch.equal(before[k], after[k])}
    assert "aggregators" in moved and "experts" not in moved
    save_weights(aggregator_state(model), str(d / "afa.safetensors"))
    back = load_afa(c, experts, str(d / "afa.safetensors"))
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in after.items())
    with pytest.raises(ValueError, match="does not fit"):
        load_afa(c, experts + experts[:1], str(d / "afa.safetensors"))


def test_evaluate_scores_a_model_and_afa_maps(assets):
    from iclr_ray.llm.weights import save_weights
    from iclr_ray.studies.afa.run import build_afa, evaluate, load_expert, train_classifier_task

    cfg, c, paths, experts, d = assets
    clf = train_classifier_task(c, paths, str(d / "clf.safetensors"), 0)
    assert 0 <= clf["accuracy_real"] <= 1 and len(clf["grid_real"]) == 10
    save_weights({k: v for k, v in build_afa(c, [load_expert(p) for p in experts], 0).state_dict().items()
                  if not k.startswith("experts.")}, str(d / "afa0.safetensors"))
    out = evaluate(c, {"kind": "afa", "experts": experts, "afa": str(d / "afa0.safetensors")}, 0, paths, clf["path"],
                   True, True)
    assert np.isfinite(out["mse"]) and len(out["mse_by_class"]) == 10 and 0 <= out["accuracy"] <= 1
    w = np.asarray(out["weights_by_class"])
    assert w.shape == (10, len(out["locations"]), 2)
    np.testing.assert_allclose(w, 0.5, atol=1e-6)  # zero-initialised: uniform
    assert len(out["grid"]) == 10 and len(out["maps"]["maps"]) == len(cfg.eval.map_timesteps)
    one = evaluate(c, {"kind": "expert", "experts": experts[:1]}, 0, paths, clf["path"], False, False)
    assert set(one) == {"mse", "mse_by_class"}


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("afa") / "run"
    assert cli.main(["run", "afa", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_trains_experts_and_aggregators_and_judges_every_claim(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    assert m["seeds"] == [0] and m["n_experts"] == 2
    assert set(m["scores"]) == {"expert0", "expert1", "uniform", "weighted_merge", "blockwise_merge", "afa"}
    for name, per in m["scores"].items():
        s = per["0"]
        assert np.isfinite(s["mse"]) and np.isfinite(s["fid"]) and 0 <= s["accuracy"] <= 1
        assert np.asarray(m["grids"][name]).shape == (10, 8, 8)
    assert abs(sum(m["merges"]["weighted"]) - 1) < 1e-9
    assert len(m["loss"]["afa_main-seed0"]) > 0 and len(m["loss"]["expert0"]) > 0
    assert {c["id"] for c in result["claims"]} == {"afa_beats_best_baseline", "afa_beats_weighted_merge",
                                                   "afa_beats_blockwise_merge", "afa_mse_below_uniform",
                                                   "afa_fd_below_best_expert", "afa_accuracy_above_best_expert"}
    assert {c["id"] for c in result["checks"]} == {"classifier_reads_real_digits", "experts_specialise",
                                                   "afa_mse_below_each_expert", "afa_routes_by_class"}
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {
        "sample_grid", "aggregation_maps", "routing_over_t", "mse_vs_experts", "scores", "aggregator_loss"}
    assert sorted(p.name for p in (smoke_run / "data").glob("*.npz")) == ["test.npz", "train.npz", "val.npz"]
