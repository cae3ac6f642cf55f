"""``iclr-ray plan``: the measurements it rests on (fake-tensor activations against a real run, the
layer extrapolation, DeepSpeed's model-state estimates, the shipped model shapes against their
published sizes), the cluster file it reads, and every study's plan (smoke here, paper against
clusters/gpu.yaml), including a preset that does not fit."""
import json
import math
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

from iclr_ray import cli, plan, studies  # noqa: E402
from iclr_ray.config import ConfigError  # noqa: E402

from conftest import REPO  # noqa: E402

GPU_YAML = str(REPO / "clusters" / "gpu.yaml")


def _real_saved_bytes(model, ids, chunk: int) -> float:
    """What a real (not fake) bf16 forward and loss keep for the backward pass, parameters aside."""
    from iclr_ray.llm.loss import token_loss_sum

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            kept[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, position_ids=torch.arange(ids.shape[1]).expand(ids.shape[0], -1), use_cache=False)
        token_loss_sum(out.logits, ids, chunk)
    return float(sum(kept.values()))


@pytest.mark.parametrize("attention,chunk", [("eager", 0), ("sdpa", 0), ("eager", 16)])
def test_fake_tensor_activations_equal_a_real_forward(attention, chunk):
    """The plan's activations (fake tensors, one and two layers extrapolated to four) against the
    bytes a real bf16 forward of the four-layer model keeps: equal for eager attention; for sdpa
    within 10% (the real CPU run takes the fused CPU kernel, which keeps a little less than the
    kernel the fake run takes; neither keeps a sequence x sequence matrix)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from iclr_ray.llm.model import apply_memory_settings

    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2)
    model = plan.Model("t", 0, config=config)
    measured = plan.lm_footprint(model, micro_batch=2, seq_len=40, attention=attention, loss_chunk=chunk)
    torch.manual_seed(0)
    real = LlamaForCausalLM(config).to(torch.bfloat16)
    apply_memory_settings(real, attention=attention)
    real.train()
    ids = torch.randint(0, 300, (2, 40))
    tolerance = 0.1 if attention == "sdpa" else 0.01
    assert measured.activation_bytes == pytest.approx(_real_saved_bytes(real, ids, chunk), rel=tolerance)
    # and FLOPs: about 6 N per token plus attention, for the 4 layers and the head
    n = sum(p.numel() for p in real.parameters())
    assert 0.8 * 6 * n * 80 < measured.train_flops < 2.0 * 6 * n * 80


def test_each_memory_setting_lowers_the_measured_activations():
    m = plan.lm("tiny-llama", vocab_size=512)
    plain = plan.lm_footprint(m, 4, 256, attention="eager").activation_bytes
    sdpa = plan.lm_footprint(m, 4, 256, attention="sdpa").activation_bytes
    checkpointed = plan.lm_footprint(m, 4, 256, gradient_checkpointing=True, attention="sdpa").activation_bytes
    chunked = plan.lm_footprint(m, 4, 256, gradient_checkpointing=True, attention="sdpa", loss_chunk=128)
    assert plain > sdpa > checkpointed > chunked.activation_bytes
    assert "gradient checkpointing" in chunked.how and "chunks of 128" in chunked.how


def test_model_states_follow_deepspeeds_estimators():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    m = plan.Model("m", 1_000_000_000, largest_layer=50_000_000)
    z2, how = plan.model_state_bytes(m, 2, 8)
    assert z2 == estimate_zero2_model_states_mem_needs(10**9, num_gpus_per_node=8, cpu_offload=False)[1]
    assert "DeepSpeed" in how
    z0, _ = plan.model_state_bytes(m, 0, 8)
    z1, _ = plan.model_state_bytes(m, 1, 8)
    z3, _ = plan.model_state_bytes(m, 3, 8)
    assert z0 == 20e9 and z0 > z1 > z2 > z3
    frozen, how = plan.model_state_bytes(plan.Model("m", 10**9, trainable=10**6), 2, 1)
    assert frozen == pytest.approx(2 * 10**9 + 18 * 10**6, rel=0.01) and "frozen" in how


SHIPPED = sorted(p.stem for p in plan.CONFIG_DIR.glob("*.json"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_shapes_build_to_their_published_size(name):
    shipped = json.loads((plan.CONFIG_DIR / f"{name}.json").read_text())
    hub_id = shipped["_shape_of"]
    assert name == hub_id.replace("/", "--")
    if shipped.get("_remote_code"):
        with pytest.raises(ConfigError, match="trust_remote_code"):
            plan.lm(hub_id)
        return
    built = plan.lm(hub_id).params
    assert built == pytest.approx(shipped["_published_params"], rel=0.03), (built, shipped["_published_params"])


def test_node_types_of_the_gpu_cluster_file():
    nodes = {n.name: n for n in plan.node_types(GPU_YAML)}
    assert (nodes["gpu_4x_a10g"].gpus, nodes["gpu_4x_a10g"].accelerator, nodes["gpu_4x_a10g"].gpu_gib) == (4, "A10G", 24)
    assert (nodes["gpu_8x_a100"].gpus, nodes["gpu_8x_a100"].accelerator) == (8, "A100")
    assert nodes["head"].gpus == 0 and nodes["head"].max_workers == 1
    with pytest.raises(ConfigError, match="no available_node_types"):
        plan.node_types(REPO / "clusters" / "onprem.yaml")


def test_a_stage_fits_the_node_it_names_and_says_why_not_elsewhere():
    from iclr_ray.resources import WorkerResources

    nodes = plan.node_types(GPU_YAML)
    m = plan.Model("m", 10**9)
    stage = plan.Train("s", WorkerResources(gpus_per_worker=1, accelerator_type="A100"), 8, 1, m, 10, 8, 1)
    node, why = plan.fit(stage, nodes, 20 * plan.GIB)
    assert node.name == "gpu_8x_a100" and why == "1 node per run"
    node, why = plan.fit(stage, nodes, 39 * plan.GIB)
    assert node is None and "gpu_4x_a10g: no A100" in why and "39.0 GiB > 90% of 40 GiB" in why
    stage = plan.Train("s", WorkerResources(gpus_per_worker=1, accelerator_type="H100"), 8, 1, m, 10, 8, 1)
    assert plan.fit(stage, nodes, 1.0)[0] is None


def test_sft_recipes_paper_preset_fits_its_a100s_and_not_without_its_memory_settings(capsys):
    assert cli.main(["plan", "sft_recipe", "--preset", "paper", "--cluster", GPU_YAML]) == 0
    out = capsys.readouterr().out
    assert "2.53 B parameters" in out and "fits gpu_8x_a100" in out and "GPU-hours at 40% MFU of A100" in out
    per_gpu = float(re.search(r"memory per GPU: .* = ([\d.]+) GiB", out).group(1))
    assert 10 < per_gpu < 0.9 * 40
    # the negative control: the same preset without gradient checkpointing cannot fit a 40 GB A100
    code = cli.main(["plan", "sft_recipe", "--preset", "paper", "--cluster", GPU_YAML,
                     "--set", "sft.gradient_checkpointing=false"])
    captured = capsys.readouterr()
    assert code == 2
    lines = [line for line in captured.err.splitlines() if line.startswith("iclr-ray")]
    assert len(lines) == 1 and "stage 'sft trials' fits no node type" in lines[0] and "> 90% of 40 GiB" in lines[0]


def test_plan_input_errors_exit_2_with_one_line(tmp_path, capsys):
    for args, message in ((["--cluster", str(tmp_path / "none.yaml")], "none.yaml"),
                          (["--cluster", str(REPO / "clusters" / "onprem.yaml")], "no available_node_types"),
                          (["--mfu", "1.5"], "--mfu"), (["--set", "sft.nope=1"], "unknown key")):
        assert cli.main(["plan", "sft_recipe", *args]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and not captured.out, captured.err


@pytest.mark.slow
def test_every_study_plans_its_smoke_and_paper_presets(capsys):
    """Every study has a plan; smoke prints one; paper against clusters/gpu.yaml fits (exit 0) or
    exits 2 with one line per stage that does not, each naming a stage the plan printed."""
    for study_id in studies.REGISTRY:
        study = studies.get(study_id)
        assert study.plan is not None, study_id
        assert cli.main(["plan", study_id, "--preset", "smoke"]) == 0, study_id
        assert "stage " in capsys.readouterr().out
        code = cli.main(["plan", study_id, "--preset", "paper", "--cluster", GPU_YAML])
        captured = capsys.readouterr()
        stages = re.findall(r"^stage (.+) \(Ray (?:Train|tasks)\):$", captured.out, re.M)
        assert stages, study_id
        bad = [line for line in captured.err.splitlines() if line.startswith("iclr-ray: plan: stage")]
        assert (code == 0 and not bad) or (code == 2 and bad), (study_id, captured.err)
        for line in bad:
            assert re.search(r"stage '(.+)' fits no node type", line).group(1) in stages
        assert all(math.isfinite(float(x)) for x in re.findall(r"= ([\d.]+) [GM]iB", captured.out))
