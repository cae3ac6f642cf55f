"""``iclr-ray plan``: what a run will ask for and what it will cost, before it starts.

A study's ``plan(cfg)`` (in its run.py) lists its stages: each Ray Train stage (:class:`Train`:
its runs, workers, model, steps and batch) and each stage of Ray tasks (:class:`Tasks`: how many,
the memory each holds). This module turns them into numbers and checks them against a cluster
launcher YAML:

- parameters: the model built on the ``meta`` device from its config (no weights are read; the
  configs of paper-preset hub models ship in ``iclr_ray/model_configs/`` so this works offline);
- memory per GPU: DeepSpeed's own estimate of the model states at the configured ZeRO stage,
  plus the activations of one micro-batch, *measured*: the model's forward and loss run on fake
  tensors (``FakeTensorMode``: shapes only, nothing allocated) at the configured micro-batch,
  sequence length, attention kernel, gradient checkpointing and loss chunking, and every tensor
  kept for the backward pass is summed;
- compute: FLOPs counted on the same fake forward (``torch.utils.flop_counter``), times 3 for
  the backward pass (4 with gradient checkpointing), over the run's rows, and GPU-hours at a
  stated MFU of the GPU's dense bf16 peak;
- fit: each stage against each node type of the cluster file (GPUs and CPUs per worker, the
  accelerator type, GPU memory with :data:`HEADROOM` kept free, the node count it needs).
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from .config import ConfigError

GIB = 2**30
HEADROOM = 0.9
"""share of a GPU's memory a plan may fill (the rest: the CUDA context, allocator fragmentation,
NCCL buffers)"""
DEFAULT_MFU = 0.4
CONFIG_DIR = Path(__file__).parent / "model_configs"
"""``<org>--<name>.json``: the shape fields of a hub model's config.json (model_type and the
sizes), enough to build it on the meta device; never its weights"""


# ----------------------------------------------------------------------------- models


@dataclass
class Model:
    """A model a stage holds: its size, and (for a transformers model) its config to measure."""

    name: str
    params: int
    trainable: int | None = None
    """parameters the optimiser updates (None: all)"""
    config: Any = None
    """a transformers config: activations and FLOPs are then measured on fake tensors"""
    largest_layer: int = 0
    """parameters of the largest single module (ZeRO-3 gathers one at a time)"""
    source: str = ""
    """where the shape came from"""

    @property
    def trained(self) -> int:
        return self.params if self.trainable is None else self.trainable


def shipped_config(hub_id: str) -> dict | None:
    path = CONFIG_DIR / (hub_id.replace("/", "--") + ".json")
    return json.loads(path.read_text()) if path.is_file() else None


def hf_config(source: str, vocab_size: int | None = None):
    """The transformers config of ``source``: a named tiny model (sized to ``vocab_size``), a
    packaged model (llm.pretrained), a checkpoint folder, or a hub id whose shape ships here.
    ConfigError naming the source when none of these has it."""
    from transformers import AutoConfig

    from .llm.model import TINY_MODELS
    from .llm.pretrained import PACKAGED, load_config

    if source in TINY_MODELS:
        from transformers import LlamaConfig, OlmoeConfig

        spec = dict(TINY_MODELS[source])
        cls = OlmoeConfig if spec.pop("arch", "llama") == "olmoe" else LlamaConfig
        return cls(vocab_size=vocab_size or 512, tie_word_embeddings=True, **spec), f"named tiny model {source}"
    if source in PACKAGED and shipped_config(source) is None:  # converts the packaged file once: avoided below
        return load_config(source), f"packaged model {source}"
    local = Path(source).expanduser()
    if (local / "config.json").is_file():
        return AutoConfig.from_pretrained(str(local)), f"{local}/config.json"
    shipped = shipped_config(source)
    if shipped is None:
        raise ConfigError(f"plan: no config for model {source!r} here (a hub id needs its shape in "
                          f"iclr_ray/model_configs/{source.replace('/', '--')}.json)")
    if shipped.get("_remote_code"):
        raise ConfigError(f"plan: model {source!r} ({shipped.get('model_type')}) needs modelling code that is not in "
                          "transformers (trust_remote_code, which this project never sets)")
    shipped = {k: v for k, v in shipped.items() if not k.startswith("_") and k != "auto_map"}
    return AutoConfig.for_model(**shipped), f"shipped config (iclr_ray/model_configs, from {source})"


def _auto_class(config):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    if getattr(config, "is_encoder_decoder", False):
        return AutoModelForSeq2SeqLM
    if getattr(config, "num_labels_head", False) or (getattr(config, "architectures", None) or [""])[0].endswith(
            "ForSequenceClassification"):
        return AutoModelForSequenceClassification
    return AutoModelForCausalLM


def _on_meta(config):
    import torch

    with torch.device("meta"):
        return _auto_class(config).from_config(config)


def lm(source: str, vocab_size: int | None = None, trainable: Callable[[Any], int] | None = None) -> Model:
    """A transformers model by source (see :func:`hf_config`), built on the meta device.
    ``trainable(model) -> int``: the parameters the stage trains, when not all."""
    config, where = hf_config(source, vocab_size)
    net = _on_meta(config)
    return Model(source, _count(net), trainable(net) if trainable else None, config, _largest(net), where)


def module(name: str, build: Callable[[], Any], trainable: Callable[[Any], int] | None = None,
           source: str = "built here from the config") -> Model:
    """A model a study builds itself (``build()`` -> nn.Module), built on the meta device."""
    import torch

    with torch.device("meta"):
        net = build()
    return Model(name, _count(net), trainable(net) if trainable else None, None, _largest(net), source)


def _count(net) -> int:
    return sum(p.numel() for p in {id(p): p for p in net.parameters()}.values())


def _largest(net) -> int:
    return max((sum(p.numel() for p in m.parameters(recurse=False)) for m in net.modules()), default=0)


# ----------------------------------------------------------------------------- measuring


@dataclass
class Footprint:
    """One micro-batch on one worker: activations kept for the backward pass, training FLOPs."""

    activation_bytes: float
    train_flops: float
    how: str


def _measure(step: Callable[[], Any]) -> tuple[float, float]:
    """(bytes kept for backward, forward FLOPs) of ``step()``, run under fake tensors. Tensors
    sharing storage count once; parameters (held as model states) do not count."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    kept: dict[int, int] = {}

    def pack(t):
        try:
            key = t.untyped_storage()._cdata
            kept[key] = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
            kept[id(t)] = t.numel() * t.element_size()
        return t

    counter = FlopCounterMode(display=False)
    with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        params = step()
    for p in params:
        kept.pop(p.untyped_storage()._cdata, None)
    return float(sum(kept.values())), float(counter.get_total_flops())


def _layers_key(config) -> tuple[str, ...]:
    if getattr(config, "is_encoder_decoder", False):
        return ("num_layers", "num_decoder_layers")
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if hasattr(config, key):
            return (key,)
    raise ConfigError(f"plan: cannot find the layer count of a {type(config).__name__}")


def lm_footprint(model: Model, micro_batch: int, seq_len: int, gradient_checkpointing: bool = False,
                 attention: str = "default", loss_chunk: int = 0) -> Footprint:
    """Measure one micro-batch of causal-LM (or seq2seq) training in bf16 on fake tensors, with
    one and with two decoder layers: the stack's cost is the first plus (layers - 1) times the
    difference (the blocks are identical). With gradient checkpointing, one block's full
    activations are added: the backward pass recomputes them one block at a time."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .llm.loss import token_loss_sum
    from .llm.model import apply_memory_settings

    keys = _layers_key(model.config)
    layers = int(getattr(model.config, keys[0]))

    def one(n: int, gc: bool) -> tuple[float, float]:
        config = copy.deepcopy(model.config)
        for k in keys:
            setattr(config, k, n)
        for k in ("first_k_dense_replace",):  # a dense first layer before the MoE ones (DeepSeek)
            if hasattr(config, k):
                setattr(config, k, min(getattr(config, k), n - 1))
        with FakeTensorMode(allow_non_fake_inputs=True):
            net = _auto_class(config).from_config(config, dtype=torch.bfloat16)
            apply_memory_settings(net, gc, attention)
            net.train()
            ids = torch.zeros(micro_batch, seq_len, dtype=torch.long)

            def step():
                if getattr(config, "is_encoder_decoder", False):
                    out = net(input_ids=ids, decoder_input_ids=ids, use_cache=False)
                else:
                    out = net(input_ids=ids, position_ids=torch.arange(seq_len).expand(micro_batch, -1),
                              use_cache=False)
                token_loss_sum(out.logits, ids, loss_chunk)
                return list(net.parameters())

            return _measure(step)

    b1, f1 = one(1, gradient_checkpointing)
    b2, f2 = one(2, gradient_checkpointing)
    acts = b1 + (layers - 1) * (b2 - b1)
    flops = f1 + (layers - 1) * (f2 - f1)
    how = f"measured on fake tensors: bf16, {attention} attention"
    if gradient_checkpointing:
        p1, _ = one(1, False)
        p2, _ = one(2, False)
        acts += p2 - p1  # one block recomputed at a time
        how += ", gradient checkpointing"
    if loss_chunk:
        how += f", loss in chunks of {loss_chunk}"
    return Footprint(acts, flops * (4 if gradient_checkpointing else 3), how)


def module_footprint(build: Callable[[], tuple[Any, Callable[[Any], Any]]]) -> Footprint:
    """Measure one micro-batch of a study's own model: ``build()`` -> (module, step) where
    ``step(module)`` runs the forward pass and returns the loss; run on fake tensors, fp32 (the
    studies' own models train in fp32)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        net, step = build()
        net.train()

        def run():
            step(net)
            return list(net.parameters())

        acts, flops = _measure(run)
    return Footprint(acts, 3 * flops, "measured on fake tensors: fp32")


# ----------------------------------------------------------------------------- memory


def model_state_bytes(model: Model, zero_stage: int, gpus: int, bf16: bool = True) -> tuple[float, str]:
    """Weights, gradients and Adam states per GPU. ZeRO-2 and -3: DeepSpeed's own estimators
    (``estimate_zero{2,3}_model_states_mem_needs``, no offload); ZeRO-0/1 by the same accounting
    (16-bit weights and gradients, 4-byte fp32 gradients, master weights and two Adam moments,
    the last three sharded under ZeRO-1). Frozen parameters hold their 16-bit weights only."""
    trained, frozen = model.trained, model.params - model.trained
    width = 2 if bf16 else 4
    if zero_stage >= 2 and trained:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):  # its accelerator probe prints to stdout on import
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
        if zero_stage == 2:
            _, gpu = estimate_zero2_model_states_mem_needs(trained, num_gpus_per_node=gpus, cpu_offload=False)
        else:
            _, gpu, _ = estimate_zero3_model_states_mem_needs(trained, model.largest_layer, num_gpus_per_node=gpus,
                                                              cpu_offload=False, cpu_offload_params=False)
        how = f"ZeRO-{zero_stage} over {gpus} GPU{'s' * (gpus > 1)}, DeepSpeed's estimate"
    else:
        sharded = 16 if zero_stage == 1 else 0
        gpu = trained * (2 * width + 16 - sharded) + trained * sharded / max(gpus, 1)
        how = f"ZeRO-{zero_stage}" + (f" over {gpus} GPUs" if zero_stage == 1 else "")
    if frozen:
        gpu += frozen * (width / (gpus if zero_stage == 3 else 1))
        how += f"; {frozen / 1e9:.2f} B frozen parameters"
    return float(gpu), how


# ----------------------------------------------------------------------------- stages


@dataclass
class Train:
    """A Ray Train stage: ``runs`` runs (``concurrent`` at a time), each ``workers`` workers."""

    name: str
    resources: Any
    """a WorkerResources section (cpus_per_worker, gpus_per_worker, accelerator_type)"""
    workers: int
    runs: int
    model: Model
    steps: int
    """optimiser steps per run"""
    rows_per_step: int
    """rows (samples) per optimiser step over all workers"""
    micro_batch: int
    seq_len: int = 0
    """tokens per row (0: not a token model)"""
    zero_stage: int = 0
    concurrent: int = 1
    epochs: float | None = None
    footprint: Footprint | None = None
    """measured when None and the model has a transformers config (see :meth:`measure`)"""
    gradient_checkpointing: bool = False
    attention: str = "default"
    loss_chunk: int = 0
    note: str = ""

    @property
    def gpu(self) -> bool:
        return bool(self.resources.gpus_per_worker)

    def measure(self) -> Footprint | None:
        if self.footprint is None and self.model.config is not None and self.seq_len:
            self.footprint = lm_footprint(self.model, self.micro_batch, self.seq_len, self.gradient_checkpointing,
                                          self.attention, self.loss_chunk)
        return self.footprint

    def memory(self) -> tuple[float, list[str]]:
        states, how = model_state_bytes(self.model, self.zero_stage, self.workers, bf16=self.gpu)
        lines = [f"model states {size(states)} ({how})"]
        total = states
        fp = self.measure()
        if fp is not None:
            total += fp.activation_bytes
            lines.append(f"activations {size(fp.activation_bytes)} per micro-batch of {self.micro_batch} "
                         f"({fp.how})")
        else:
            lines.append("activations not estimated")
        return total, lines

    def flops(self) -> float | None:
        fp = self.measure()
        if fp is None:
            return None
        micro_batches = self.steps * self.rows_per_step / self.micro_batch
        return fp.train_flops * micro_batches * self.runs

    def bundle(self) -> dict[str, float]:
        b = {"CPU": float(self.resources.cpus_per_worker)}
        if self.resources.gpus_per_worker:
            b["GPU"] = float(self.resources.gpus_per_worker)
        return b

    def describe(self) -> list[str]:
        r = self.resources
        ask = f"{r.cpus_per_worker:g} CPU" + (f", {r.gpus_per_worker:g} GPU" if r.gpus_per_worker else "") + (
            f", {r.accelerator_type}" if r.accelerator_type else "")
        m = self.model
        trained = "all trained" if m.trainable is None else f"{m.trained / 1e6:,.1f} M trained"
        rows = self.steps * self.rows_per_step
        accum = max(1, self.rows_per_step // max(1, self.micro_batch * self.workers))
        lines = [f"{self.runs} Ray Train run{'s' * (self.runs > 1)}, {self.concurrent} at a time; "
                 f"{self.workers} worker{'s' * (self.workers > 1)} x ({ask})",
                 f"model {m.name}: {_params(m.params)} parameters ({trained}); shape from {m.source}",
                 f"per run: {self.steps:,} steps x {self.rows_per_step:,} rows"
                 + (f" x {self.seq_len:,} tokens = {rows * self.seq_len / 1e9:,.2f} B tokens" if self.seq_len
                    else f" = {rows:,} rows")
                 + (f" ({self.epochs:,.1f} epochs)" if self.epochs else "")
                 + f"; micro-batch {self.micro_batch}, gradient accumulation {accum}"]
        if self.note:
            lines.append(self.note)
        return lines


@dataclass
class Tasks:
    """A stage of Ray tasks: ``tasks`` of them, each holding ``memory_bytes``."""

    name: str
    resources: Any
    """a TaskResources section, or None: Ray's default of 1 CPU per task"""
    tasks: int
    memory_bytes: float
    model: Model | None = None
    flops: float | None = None
    """total FLOPs of the stage when known (GPU-hours on a GPU stage)"""
    note: str = ""

    @property
    def gpu(self) -> bool:
        return bool(self.resources is not None and self.resources.gpus_per_task)

    def bundle(self) -> dict[str, float]:
        r = self.resources
        b = {"CPU": float(r.cpus_per_task) if r is not None else 1.0}
        if self.gpu:
            b["GPU"] = float(r.gpus_per_task)
        return b

    def memory(self) -> tuple[float, list[str]]:
        return self.memory_bytes, [size(self.memory_bytes)]

    def describe(self) -> list[str]:
        b = self.bundle()
        ask = f"{b['CPU']:g} CPU" + (f", {b['GPU']:g} GPU" if "GPU" in b else "") + (
            f", {self.resources.accelerator_type}" if self.resources is not None and
            getattr(self.resources, "accelerator_type", None) else "")
        lines = [f"{self.tasks:,} Ray task{'s' * (self.tasks != 1)} x ({ask})"]
        if self.model is not None:
            lines.append(f"model {self.model.name}: {_params(self.model.params)} parameters; shape from "
                         f"{self.model.source}")
        if self.note:
            lines.append(self.note)
        return lines


Stage = Train | Tasks


def size(n: float) -> str:
    """Bytes as GiB, or MiB below a tenth of one."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}"


def weights_bytes(model: Model, bf16: bool = True) -> float:
    return float(model.params * (2 if bf16 else 4))


# ----------------------------------------------------------------------------- clusters

# What the cluster files' instance types hold: vCPUs, memory (GiB), GPU model, GPUs, GPU memory (GiB).
INSTANCES: dict[str, tuple[int, int, str | None, int, int]] = {
    "m5.2xlarge": (8, 32, None, 0, 0), "m5.4xlarge": (16, 64, None, 0, 0), "m6i.8xlarge": (32, 128, None, 0, 0),
    "g5.xlarge": (4, 16, "A10G", 1, 24), "g5.12xlarge": (48, 192, "A10G", 4, 24),
    "g5.48xlarge": (192, 768, "A10G", 8, 24), "g6.12xlarge": (48, 192, "L4", 4, 24),
    "p4d.24xlarge": (96, 1152, "A100", 8, 40), "p4de.24xlarge": (96, 1152, "A100", 8, 80),
    "p5.48xlarge": (192, 2048, "H100", 8, 80),
}


@dataclass
class NodeType:
    name: str
    cpus: float
    gpus: float
    accelerator: str | None
    gpu_gib: float
    ram_gib: float
    max_workers: int
    instance: str = ""

    def label(self) -> str:
        gpu = f"{self.gpus:g} x {self.accelerator} {self.gpu_gib:g} GiB, " if self.gpus else ""
        return f"{self.name} ({self.instance + ': ' if self.instance else ''}{gpu}{self.cpus:g} CPUs, {self.ram_gib:g} GiB)"


def node_types(path: str | Path) -> list[NodeType]:
    """The node types of a Ray cluster launcher YAML (``available_node_types``), their GPUs read
    from the instance type. ConfigError (one line) for an unreadable file or an unknown type."""
    try:
        spec = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"--cluster {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise ConfigError(f"--cluster {path}: not valid YAML") from None
    types = spec.get("available_node_types") if isinstance(spec, dict) else None
    if not isinstance(types, dict) or not types:
        raise ConfigError(f"--cluster {path}: no available_node_types (plan reads a cluster launcher YAML with node "
                          "types, such as clusters/gpu.yaml)")
    head = spec.get("head_node_type")
    out = []
    for name, t in types.items():
        res = t.get("resources") or {}
        inst = (t.get("node_config") or {}).get("InstanceType", "")
        if inst not in INSTANCES:
            raise ConfigError(f"--cluster {path}: node type {name}: instance type {inst!r} is not one plan knows "
                              f"({', '.join(INSTANCES)})")
        cpus, ram, acc, gpus, gpu_gib = INSTANCES[inst]
        out.append(NodeType(name, float(res.get("CPU", cpus)), float(res.get("GPU", gpus)), acc if gpus else None,
                            gpu_gib, ram, 1 if name == head else int(t.get("max_workers", spec.get("max_workers", 1))),
                            inst))
    return out


def fit(stage: Stage, nodes: Sequence[NodeType], per_gpu: float) -> tuple[NodeType | None, str]:
    """The first node type a stage fits, with the number of nodes one run (or all tasks at
    once) takes; else None and why not, per node type."""
    b = stage.bundle()
    acc = getattr(stage.resources, "accelerator_type", None) if stage.resources is not None else None
    why = []
    for n in nodes:
        if b.get("GPU", 0) > n.gpus:
            why.append(f"{n.name}: {n.gpus:g} GPUs")
            continue
        if acc and n.accelerator != acc:
            why.append(f"{n.name}: no {acc}")
            continue
        if b["CPU"] > n.cpus:
            why.append(f"{n.name}: {n.cpus:g} CPUs")
            continue
        if "GPU" in b and per_gpu > HEADROOM * n.gpu_gib * GIB:
            why.append(f"{n.name}: {per_gpu / GIB:.1f} GiB > {HEADROOM:.0%} of {n.gpu_gib:g} GiB")
            continue
        if "GPU" not in b and per_gpu > HEADROOM * n.ram_gib * GIB:
            why.append(f"{n.name}: {per_gpu / GIB:.1f} GiB > {HEADROOM:.0%} of its {n.ram_gib:g} GiB memory")
            continue
        per_node = min(n.gpus // b["GPU"] if "GPU" in b else math.inf, n.cpus // b["CPU"] if b["CPU"] else math.inf)
        if "GPU" not in b and per_gpu > 0:  # CPU tasks or workers side by side share the node's memory
            per_node = min(per_node, math.floor(HEADROOM * n.ram_gib * GIB / per_gpu))
        want = stage.workers if isinstance(stage, Train) else stage.tasks
        need = math.ceil(want / per_node) if per_node and per_node != math.inf else 1
        if isinstance(stage, Train) and need > n.max_workers:
            why.append(f"{n.name}: {want} workers need {need} nodes, at most {n.max_workers}")
            continue
        return n, (f"{need} node{'s' * (need > 1)} per run" if isinstance(stage, Train) else
                   f"{min(need, n.max_workers)} node{'s' * (min(need, n.max_workers) > 1)} run "
                   f"{min(want, int(per_node * n.max_workers)) if per_node != math.inf else want:,} at once")
    return None, "; ".join(why)


# ----------------------------------------------------------------------------- the plan


@dataclass
class StageReport:
    stage: Stage
    lines: list[str] = field(default_factory=list)
    fits: bool | None = None
    reason: str = ""


def report(stages: Sequence[Stage], nodes: Sequence[NodeType] | None, mfu: float = DEFAULT_MFU,
           assume: str = "A100") -> list[StageReport]:
    """Each stage's plan lines and, with ``nodes``, whether it fits one of them."""
    from .llm.train import PEAK_FLOPS

    out = []
    for s in stages:
        r = StageReport(s, list(s.describe()))
        per_gpu, mem_lines = s.memory()
        if isinstance(s, Train):
            where = "per GPU" if s.gpu else "per worker"
        else:
            where = "per task (on its GPU)" if s.gpu else "per task"
        r.lines.append(f"memory {where}: " + " + ".join(mem_lines)
                       + (f" = {size(per_gpu)}" if len(mem_lines) > 1 else ""))
        chosen = None
        if nodes is not None:
            chosen, why = fit(s, nodes, per_gpu)
            r.fits = chosen is not None
            r.reason = why
            r.lines.append(f"fits {chosen.label()}: {why}" if chosen else f"FITS NO NODE TYPE: {why}")
        flops = s.flops() if isinstance(s, Train) else s.flops
        if flops:
            if s.gpu:
                gpu = getattr(s.resources, "accelerator_type", None) or (chosen.accelerator if chosen else None) or assume
                peak = next((v[0] for k, v in PEAK_FLOPS.items() if k in gpu.upper()), None)
                hours = f" = {flops / (peak * mfu) / 3600:,.1f} GPU-hours at {mfu:.0%} MFU of {gpu} " \
                        f"({peak / 1e12:g} TFLOP/s bf16)" if peak else f" (no peak FLOP/s known for {gpu})"
            else:
                hours = " on CPUs"
            r.lines.append(f"compute: {flops:.2e} FLOP{hours}")
        out.append(r)
    return out


def render(study: str, preset: str, reports: Sequence[StageReport], cluster: str | None, mfu: float) -> str:
    head = f"plan: {study} --preset {preset}" + (f" on {cluster}" if cluster else " (no --cluster: fit not checked)")
    out = [head]
    for r in reports:
        out.append(f"\nstage {r.stage.name} ({'Ray Train' if isinstance(r.stage, Train) else 'Ray tasks'}):")
        out += [f"  {line}" for line in r.lines]
    gpu_stages = [r for r in reports if r.stage.gpu]
    out.append(f"\n{len(reports)} stage{'s' * (len(reports) != 1)}, {len(gpu_stages)} on GPUs; MFU assumed {mfu:.0%} "
               "(--mfu). Ray Train stages: model states by DeepSpeed's estimators, activations and FLOPs measured "
               "on fake tensors; task stages: memory and FLOPs as each stage's note says; a fit keeps "
               f"{1 - HEADROOM:.0%} of a GPU's memory free")
    return "\n".join(out)
