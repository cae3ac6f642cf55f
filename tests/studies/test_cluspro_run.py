"""cluspro end to end on the session's Ray cluster (the smoke study: every (world, seed) a Tune
trial, its methods side by side in a Ray Train run; claims, checks, figures), the sweep over the
prototype memory, the input errors that stop a run before Ray, and the recipe without Ray."""
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("ot")

from iclr_ray import cli  # noqa: E402


def test_input_errors_exit_2_before_ray(input_error):
    assert "train.methods" in input_error("cluspro", ["train.methods=[ce,ce]"])
    assert "data.kind" in input_error("cluspro", ["data.kind=cifar"])
    assert "proto.k" in input_error("cluspro", ["proto.k=1"])


def _recipe(methods=("ce", "cluspro")):
    from iclr_ray.studies.cluspro.config import PRESETS, Config
    from iclr_ray.studies.cluspro.run import CZSLRecipe, recipe_dict

    cfg = Config.model_validate({**PRESETS["smoke"], "train": {**PRESETS["smoke"]["train"], "methods": list(methods)}})
    r = CZSLRecipe(recipe_dict(cfg), "multimodal", 0)
    r.setup()
    return r


def test_recipe_batches_hold_seen_pairs_only_and_train_without_ray():
    from iclr_ray.llm.recipe import TrainConfig, reference_losses

    r = _recipe()
    cfg = TrainConfig(model="cluspro", micro_batch_size=16, num_workers=1, max_steps=60, lr=3e-3, grad_clip=0.0,
                      zero_stage=0, schedule="constant", seed=1)
    (batch, n), = r.step_batches(3, cfg)
    assert n == 16 and (batch["pair"] >= 0).all()  # every training sample is a seen pair
    seen = r.data.seen[batch["pair"].numpy()]
    assert (seen[:, 0] == batch["attr"].numpy()).all() and (seen[:, 1] == batch["obj"].numpy()).all()
    assert np.array_equal(r.step_batches(3, cfg)[0][0]["x"].numpy(), batch["x"].numpy())  # a pure function of the step
    losses = reference_losses(_recipe(), cfg)
    assert all(np.isfinite(losses)) and np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.5


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("cluspro") / "run"
    assert cli.main(["run", "cluspro", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_trains_every_method_and_judges_every_claim(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    assert m["worlds"] == ["multimodal", "unimodal"] and m["methods"] == ["ce", "single", "cluspro"]
    for w in m["worlds"]:
        for meth in m["methods"]:
            r = m["results"][w][meth]
            for k in ("S", "U", "HM", "AUC", "ow_AUC", "ow_HM", "HMv", "Sv", "Uv"):
                assert len(r[k]) == 1 and 0 <= r[k][0] <= 1
            assert r["HMv"][0] <= r["HM"][0] + 1e-9  # the test's own best bias bounds any other
            assert r["AUC"][0] <= r["S"][0] * r["U"][0] + 1e-9 or r["AUC"][0] <= min(r["S"][0], r["U"][0]) + 1e-9
            assert len(m["valid_curves"][w][meth][0]) == len(m["curve_steps"]) >= 2
    assert m["pairs"] == {"seen": 42, "valid_unseen": 6, "test_unseen": 12}
    ids = {c["id"] for c in result["claims"]}
    assert {"beats_ce_auc", "beats_single_auc", "beats_ce_u", "beats_ce_hm", "beats_ce_hmv",
            "gain_needs_multimodality"} <= ids
    assert [c["id"] for c in result["checks"]] == ["no_test_time_parameters"] and result["checks"][0]["holds"]
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"seen_unseen_curves", "valid_auc",
                                                                     "feature_projection"}
    assert "Paired gain over CE" in (smoke_run / "report.md").read_text()


@pytest.mark.slow
def test_sweep_over_the_prototype_memory(ray_cluster, tmp_path):
    space = Path(__file__).resolve().parents[2] / "tune_spaces" / "cluspro_smoke.yaml"
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "cluspro", "--preset", "smoke", "--space", str(space), "--out", str(out),
                     "--scheduler", "fifo"]) == 0
    m = json.loads((out / "result.json").read_text())["metrics"]
    assert m["trials"] == 2 and m["finished"] == 2
    assert sorted(r["params"]["proto.k"] for r in m["rows"]) == [2, 4]
    assert all(0 <= r["valid_auc"] <= 1 for r in m["rows"])


def _official_folder(root: Path, clip_dir: Path):
    """A tiny data set in the official CZSL layout (real PNG files, the split files, a torch-saved
    metadata list) and a tiny CLIP vision tower saved as a checkpoint folder."""
    import torch
    from PIL import Image
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    rng = np.random.default_rng(0)
    attrs, objs = ["wet", "dry", "old"], ["cat", "dog"]
    pairs = {"train": [("wet", "cat"), ("dry", "dog"), ("old", "cat"), ("wet", "dog")],
             "val": [("wet", "cat"), ("dry", "cat")], "test": [("dry", "dog"), ("old", "dog")]}
    (root / "compositional-split-natural").mkdir(parents=True)
    (root / "images").mkdir()
    for s, ps in pairs.items():
        (root / "compositional-split-natural" / f"{s}_pairs.txt").write_text("".join(f"{a} {o}\n" for a, o in ps))
    meta = []
    for s, ps in pairs.items():
        for a, o in ps:
            for k in range(4):
                name = f"{a}_{o}_{s}_{k}.png"
                Image.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(root / "images" / name)
                meta.append({"image": name, "attr": a, "obj": o, "set": s})
    meta.append({"image": "x.png", "attr": "old", "obj": "dog", "set": "train"})  # not a training pair: dropped
    torch.save(meta, root / "metadata_compositional-split-natural.t7")
    cfg = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=224, patch_size=56, projection_dim=8)
    CLIPVisionModelWithProjection(cfg).save_pretrained(clip_dir)
    return attrs, objs


def test_the_official_layout_trains_on_a_frozen_clip(tmp_path):
    import torch

    from iclr_ray.llm.recipe import TrainConfig, reference_losses
    from iclr_ray.studies.cluspro import data as D
    from iclr_ray.studies.cluspro.config import PRESETS, Config
    from iclr_ray.studies.cluspro.run import CZSLRecipe, closed_world, recipe_dict

    attrs, objs = _official_folder(tmp_path / "ds", tmp_path / "clip")
    d = D.official(tmp_path / "ds")
    assert d.attrs == sorted(attrs) and d.objs == sorted(objs) and len(d.x) == 32
    assert len(d.seen) == 4 and len(d.valid_unseen) == 1 and len(d.test_unseen) == 1  # (dry, cat); (old, dog)
    x = D.batch_x(d, np.arange(3))
    assert x.shape == (3, 3, 224, 224) and abs(float(x.mean())) < 2
    cfg = Config.model_validate({**PRESETS["smoke"], "data": {"worlds": ["official"], "root": str(tmp_path / "ds")},
                                 "model": {"d": 16, "clip": str(tmp_path / "clip")},
                                 "train": {"methods": ["ce", "cluspro"], "seeds": 1, "steps": 3, "batch": 8}})
    r = CZSLRecipe(recipe_dict(cfg), "official", 0)
    tc = TrainConfig(model="cluspro", micro_batch_size=8, num_workers=1, max_steps=3, lr=1e-3, grad_clip=0.0,
                     zero_stage=0, schedule="constant", seed=0)
    r.setup()
    model = r.build_model(tc)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert all(np.isfinite(reference_losses(r, tc)))  # trains its own copy; the frozen tower is loaded alike
    frozen = [p for n, p in model.named_parameters() if ".vision." in n]
    assert frozen and not any(p.requires_grad for p in frozen)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    batch = r.step_batches(0, tc)[0][0]
    model(batch["x"], batch["attr"], batch["obj"], batch["pair"]).backward()
    opt.step()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items() if ".vision." in k)  # CLIP stays frozen
    assert not torch.equal(after["models.0.encoder.proj.weight"], before["models.0.encoder.proj.weight"])
    model.eval()
    m = closed_world(model.models[1], d, "test", 16)
    assert 0 <= m["AUC"] <= 1 and 0 <= m["HM"] <= 1


def test_official_layout_errors_are_one_line(tmp_path, input_error):
    _official_folder(tmp_path / "ds", tmp_path / "clip")
    base = ["data.worlds=[official]", f"data.root={tmp_path / 'ds'}", f"model.clip={tmp_path / 'clip'}"]
    (tmp_path / "ds" / "compositional-split-natural" / "val_pairs.txt").write_text("wet cat\nbroken\n")
    assert "val_pairs.txt:2: expected 'attribute object'" in input_error("cluspro", base)
    (tmp_path / "ds" / "metadata_compositional-split-natural.t7").unlink()
    assert "metadata_compositional-split-natural.t7: missing" in input_error("cluspro", base)
    assert "data.root: the official world" in input_error("cluspro", ["data.worlds=[official]"])
    assert "data.root: the official world" in input_error("cluspro", [], preset="paper")
