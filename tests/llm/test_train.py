"""The Ray Train + DeepSpeed loop on the session's local Ray cluster: real DeepSpeed engines
(ZeRO-2 and ZeRO-3 over gloo), a real worker death and recovery, HF checkpoints."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from iclr_ray.llm import data, model, recipe, train  # noqa: E402

pytestmark = pytest.mark.slow

CHATS = [[{"role": "user", "content": f"add {a} and {b}"}, {"role": "assistant", "content": str(a + b)}]
         for a in range(20) for b in range(10)]


@pytest.fixture(scope="module")
def corpus():
    tok = model.build_tokenizer([m["content"] for c in CHATS for m in c], vocab_size=300)
    rows = data.pack(data.encode_all(tok, CHATS, 64), 64, tok.pad_token_id)
    return tok, rows


def test_zero3_recovers_from_a_killed_worker_on_the_zero2_loss_curve(ray_cluster, corpus, tmp_path):
    tok, rows = corpus
    ref = train.fit(train.TrainConfig(max_steps=4, zero_stage=2, checkpoint_every=2), rows, tok, tmp_path, "ref")
    assert ref.error is None and ref.metrics["step"] == 4 and ref.metrics["resumed_from"] == 0
    for key in ("loss", "grad_norm", "lr", "tokens_per_s", "samples_per_s"):
        assert ref.metrics[key] >= 0

    # one real death; the budget of 3 absorbs Ray Train counting the dead rank's peers' gloo
    # errors as further failures, which it does on some timings
    cfg = train.TrainConfig(max_steps=4, zero_stage=3, checkpoint_every=2, max_failures=3)
    killed = train.fit(cfg, rows, tok, tmp_path, "z3", fail_once_at_step=3)
    assert killed.error is None and killed.metrics["step"] == 4
    assert killed.metrics["resumed_from"] == 2  # restarted from the step-2 checkpoint, not from scratch
    # same data order, same optimiser state: the recovered ZeRO-3 run lands on the ZeRO-2 loss
    assert killed.metrics["loss"] == pytest.approx(ref.metrics["loss"], rel=1e-5)

    # the curve: the worker died in step 4 and training resumed from the step-2 checkpoint; a step
    # logged twice (before the death and replayed after it) logged the same loss both times
    lines = [json.loads(x) for x in (tmp_path / "z3" / train.STEPS_FILE).read_text().splitlines()]
    assert sorted({r["step"] for r in lines}) == [1, 2, 3, 4]
    assert any(r["resumed_from"] == 2 for r in lines)
    by_step: dict = {}
    for r in lines:
        by_step.setdefault(r["step"], []).append(r["loss"])
    for losses in by_step.values():
        assert losses == pytest.approx([losses[0]] * len(losses), rel=1e-6)
    ref_curve = [r["loss"] for r in train.read_steps(tmp_path, "ref")]
    assert [r["loss"] for r in train.read_steps(tmp_path, "z3")] == pytest.approx(ref_curve, rel=1e-5)

    # reporting every 3 steps: a report at 3 and the last step, each the token-weighted mean loss
    # (and the rates) of the steps since the one before
    win = train.fit(train.TrainConfig(max_steps=4, zero_stage=2, log_every=3), rows, tok, tmp_path, "win")
    recs = train.read_steps(tmp_path, "win")
    assert [(r["step"], r["steps"]) for r in recs] == [(3, 3), (4, 1)] and win.metrics["step"] == 4
    from iclr_ray.llm.loss import label_tokens

    wcfg = train.TrainConfig(max_steps=4)
    n = [label_tokens(data.collate(recipe.step_rows(rows, k, wcfg, 0))["labels"]) for k in range(4)]
    ref_steps = train.read_steps(tmp_path, "ref")
    assert recs[0]["loss"] == pytest.approx(sum(n[k] * ref_steps[k]["loss"] for k in range(3)) / sum(n[:3]), rel=1e-5)
    assert recs[1]["loss"] == pytest.approx(ref_steps[3]["loss"], rel=1e-5)
    assert recs[0]["samples_per_s"] == pytest.approx(3 * wcfg.rows_per_step() / recs[0]["seconds"])

    more = train.fit(cfg.model_copy(update={"max_steps": 6}), rows, tok, tmp_path, "z3")
    assert more.metrics["resumed_from"] == 4 and more.metrics["step"] == 6
    assert [r["step"] for r in train.read_steps(tmp_path, "z3")] == [1, 2, 3, 4, 5, 6]

    with more.checkpoint.as_directory() as d:
        net, tok2 = model.load_pretrained(f"{d}/model")
        batch = data.collate(rows[:2])
        with torch.no_grad():
            logits = net(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        assert torch.isfinite(logits).all() and tok2.chat_template == tok.chat_template


def test_grad_norm_is_the_same_at_every_zero_stage_and_every_accumulation_split(ray_cluster, corpus, tmp_path):
    """The step's gradient norm, reported at ZeRO 0 (where DeepSpeed keeps none and the loop takes
    its own) and 1-3 (DeepSpeed's), for 1 x 4 and 4 x 1 micro-batches: never 0, always the same."""
    tok, rows = corpus
    got = {}
    for stage, (micro, accum) in zip(range(4), [(4, 1), (1, 4), (4, 1), (1, 4)]):
        cfg = train.TrainConfig(max_steps=1, micro_batch_size=micro, grad_accum=accum, zero_stage=stage)
        got[stage] = train.fit(cfg, rows, tok, tmp_path, f"z{stage}").metrics
    assert all(m["grad_norm"] > 0 for m in got.values())
    for stage in (1, 2, 3):
        assert got[stage]["grad_norm"] == pytest.approx(got[0]["grad_norm"], rel=1e-4)
        assert got[stage]["loss"] == pytest.approx(got[0]["loss"], rel=1e-5)


def test_held_out_loss_during_training_matches_the_checkpoint_under_zero3(ray_cluster, corpus, tmp_path):
    from iclr_ray.llm.evaluate import heldout_loss

    tok, rows = corpus
    held = {"a": rows[:5], "b": rows[5:6]}  # odd batch counts: one rank is short a batch
    order = list(range(len(rows)))[::-1]
    cfg = train.TrainConfig(max_steps=2, micro_batch_size=2, zero_stage=3, eval_every=1)
    # final_eval runs on rank 0 over the final checkpoint's HF model (a lambda: Ray pickles it by value)
    res = train.fit(cfg, rows, tok, tmp_path, "ev", order=order, eval_rows=held,
                    final_eval=lambda net, tk: {"final_a": heldout_loss(net, held["a"]), "vocab": len(tk)})
    assert res.error is None
    steps = train.read_steps(tmp_path, "ev")
    assert all({"eval_loss", "eval_loss_a", "eval_loss_b"} <= set(s) for s in steps)
    assert steps[-1]["samples"] == 8 and steps[-1]["progress"] == 1.0
    with res.checkpoint.as_directory() as d:
        net, _ = model.load_pretrained(f"{d}/model")
    assert steps[-1]["eval_loss_a"] == pytest.approx(heldout_loss(net, held["a"]), rel=1e-4)
    assert steps[-1]["eval_loss"] == pytest.approx(heldout_loss(net, held["a"] + held["b"]), rel=1e-4)
    assert res.metrics["final_a"] == steps[-1]["final_a"] == pytest.approx(heldout_loss(net, held["a"]), rel=1e-6)
    assert res.metrics["vocab"] == len(tok) and "final_a" not in steps[0]


def test_step_rows_follows_a_given_order_and_cycles_it(corpus):
    _, rows = corpus
    cfg = train.TrainConfig(micro_batch_size=2, grad_accum=1, num_workers=2)
    order = [3, 1, 4, 1, 5]
    import numpy as np

    for step, want in ((0, [3, 1, 4, 1]), (1, [5, 3, 1, 4])):
        got = recipe.step_rows(rows, step, cfg, 0, order)
        assert np.array_equal(got.input_ids, rows[want].input_ids) and np.array_equal(got.n_real, rows[want].n_real)
    assert recipe.step_rows(list(range(10)), 1, cfg, 0, order) == [5, 3, 1, 4]  # any sequence: a list


def test_mfu_inputs():
    assert train.peak_flops("NVIDIA H100 80GB HBM3", bf16=True) == 989e12
    assert train.peak_flops("NVIDIA A100-SXM4-40GB", bf16=False) == 156e12
    assert train.peak_flops("Some Future GPU", bf16=True) is None
    # a 7B model at 4k context: ~6N dominates, attention adds 12*L*d*T
    assert train.flops_per_token(7_000_000_000, 32, 4096, 4096) == pytest.approx(6 * 7e9 + 12 * 32 * 4096 * 4096)


def test_load_tokenizer_round_trips_the_saved_files_and_removes_its_directory(corpus, tmp_path, monkeypatch):
    tok, _ = corpus
    tok.save_pretrained(tmp_path / "tok")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(train.tempfile, "tempdir", str(scratch))
    loaded = recipe.load_tokenizer(recipe.read_files(tmp_path / "tok"))
    text = "add 12 and 7"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"] and len(loaded) == len(tok)
    assert list(scratch.iterdir()) == []  # the temporary copy is gone
