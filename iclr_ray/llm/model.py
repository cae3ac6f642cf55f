"""Models and tokenizers for the LLM studies: a real checkpoint by local path or HF id, or a named
tiny Llama-style model built from a transformers config, with a tokenizer that needs no hub.

Either way the result is an ordinary Hugging Face model + tokenizer pair: ``save_pretrained``
writes a checkpoint that ``from_pretrained`` (and so Ray Serve, vLLM, ...) loads as is.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..config import ConfigError

# Named tiny models, sized for small CPU machines: "tiny" for tests and smoke presets, "mini" (0.8M
# parameters with a 512-token vocabulary) for sft_recipe's small preset, "small" for CPU benchmarks.
# Llama architecture unless ``arch`` says otherwise: the OLMoE ones are mixtures of experts (top-2 of
# 4 or 8 experts per layer, OLMoE's router and load-balancing loss) for the moee study.
TINY_MODELS: dict[str, dict] = {
    "tiny-llama": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=1024),
    "mini-llama": dict(hidden_size=128, intermediate_size=344, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=1024),
    "small-llama": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                        num_key_value_heads=4, max_position_embeddings=2048),
    "tiny-olmoe": dict(arch="olmoe", hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, num_experts=4, num_experts_per_tok=2, max_position_embeddings=1024),
    "mini-olmoe": dict(arch="olmoe", hidden_size=128, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=4, num_experts=8, num_experts_per_tok=2, max_position_embeddings=1024),
}

# Special tokens of the built tokenizer; the chat template below is written with them.
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLES = ("system", "user", "assistant")
ROLE_TOKENS = {role: f"<|{role}|>" for role in ROLES}
END = "<|end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, END, *ROLE_TOKENS.values()]

# Each message renders as <|role|>content<|end|>; a generation prompt is <|assistant|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(texts: Iterable[str] | None = None, vocab_size: int = 512):
    """A byte-level BPE tokenizer trained here on ``texts`` (bytes only when ``texts`` is None),
    wrapped as a transformers ``PreTrainedTokenizerFast`` with the chat template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if texts is None:
        vocab_size = len(alphabet) + len(SPECIAL_TOKENS)
        texts = []
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[END, *ROLE_TOKENS.values()], chat_template=CHAT_TEMPLATE,
        model_max_length=TINY_MODELS["small-llama"]["max_position_embeddings"],
    )


def build_model(name: str, tokenizer, seed: int = 0, **overrides):
    """A randomly initialised named tiny model sized to ``tokenizer``'s vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, OlmoeConfig, OlmoeForCausalLM

    if name not in TINY_MODELS:
        raise ConfigError(f"unknown tiny model {name!r}; named models: {', '.join(TINY_MODELS)}")
    spec = {**TINY_MODELS[name], **overrides}
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM),
                             "olmoe": (OlmoeConfig, OlmoeForCausalLM)}[spec.pop("arch", "llama")]
    config = config_cls(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True, **spec,
    )
    torch.manual_seed(seed)
    return model_cls(config)


def load_pretrained(source: str | Path, dtype=None):
    """Model and tokenizer from a local checkpoint directory, a Hugging Face id or the name of a
    packaged model (llm.pretrained.PACKAGED: converted once into the local cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .. import storage
    from .pretrained import PACKAGED, ensure_converted

    if str(source) in PACKAGED:
        source = ensure_converted(str(source))
    elif storage.is_remote(source):  # a checkpoint in the run's storage (s3://...): copied once to this node
        if not storage.is_file(storage.join(source, "config.json")):
            raise ConfigError(f"{source} is not a model checkpoint (no config.json there)")
        source = storage.local_copy(source)

    path = Path(source).expanduser()
    looks_local = path.exists() or str(source).startswith((".", "/", "~"))
    if looks_local and not (path / "config.json").is_file():
        raise ConfigError(f"{source} is not a model checkpoint (no config.json there)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path) if looks_local else str(source))
        model = AutoModelForCausalLM.from_pretrained(str(path) if looks_local else str(source), dtype=dtype)
    except OSError as exc:  # hub id not found, no network, missing weights
        raise ConfigError(f"cannot load model {source!r}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def apply_memory_settings(model, gradient_checkpointing: bool = False, attention: str = "default") -> None:
    """A training run's memory settings on a Hugging Face model: its attention kernel (``eager``,
    ``sdpa``, ``flash_attention_2``; ``default`` leaves the model's own) and activation
    checkpointing of its decoder blocks (non-reentrant, so frozen inputs need no grad hooks).
    ConfigError, one line, when the model offers neither."""
    if attention != "default":
        setter = getattr(model, "set_attn_implementation", None)
        if setter is None:
            raise ConfigError(f"attention={attention}: {type(model).__name__} is not a transformers model with a "
                              "choice of attention kernel; leave attention at default")
        try:
            setter(attention)
        except (ValueError, ImportError) as exc:  # flash_attention_2 without the package, an unsupported model
            raise ConfigError(f"attention={attention}: {str(exc).splitlines()[0]}") from None
    if gradient_checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ConfigError(f"gradient_checkpointing: {type(model).__name__} does not support it; set it false")
        model.train()  # checkpointing acts in training mode only (from_pretrained returns a model in eval mode)
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:  # transformers >= 5.2x: the new name of gradient_checkpointing_enable
            enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def cache_keyword(model) -> str:
    """The keyword a model's forward takes (and its output returns) the key/value cache by:
    transformers renamed ``past_key_values`` to ``cache`` during 5.x."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def num_experts(config) -> int:
    """Experts per MoE layer of a model config (OLMoE, Qwen-MoE: ``num_experts``; Mixtral:
    ``num_local_experts``; DeepSeek-MoE/V2/V3: ``n_routed_experts``, its shared experts aside);
    0 for a dense model."""
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    return 0


def needs_remote_code(source: str) -> str | None:
    """The ``model_type`` of a checkpoint whose modelling code is not in transformers (its
    config.json names an ``auto_map`` into its own files: ``trust_remote_code``, which this project
    never sets), else None. Reads config.json only: a folder's or a URI's, or for a hub id the shape
    this repository ships (iclr_ray/model_configs); a hub id without one is not checked here."""
    import json

    from transformers import CONFIG_MAPPING

    from .. import storage

    if storage.is_remote(source):
        raw = storage.read_bytes(storage.join(source, "config.json"))
        config = json.loads(raw) if raw else None
    elif (Path(source).expanduser() / "config.json").is_file():
        config = json.loads((Path(source).expanduser() / "config.json").read_text())
    else:
        from ..plan import shipped_config

        config = shipped_config(source)
    if not config:
        return None
    kind = str(config.get("model_type", ""))
    return kind if kind not in CONFIG_MAPPING or config.get("_remote_code") else None


def decoder_blocks(model):
    """The decoder blocks (a ``torch.nn.ModuleList``) of a Hugging Face causal LM: Llama, Gemma,
    Qwen, Mistral, OLMo (``model.layers``); GPT-2 (``transformer.h``); GPT-NeoX/Pythia
    (``gpt_neox.layers``). ValueError for a model with none of these."""
    import torch

    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if isinstance(obj, torch.nn.ModuleList):
            return obj
    raise ValueError(f"cannot find the decoder blocks of a {type(model).__name__}")


def materialise(name: str, root: str | Path, texts: Iterable[str], seed: int = 0) -> str:
    """Where every task of a run loads model ``name`` from: a packaged name, a folder or an HF id
    as given; a named tiny model is built once (seeded, its tokenizer trained on ``texts``) into
    ``root/base_model``, so every task and trial reads the same weights. ``root`` is a location (a
    path, or a URI such as ``s3://...`` in the run's storage: the folder is uploaded there, its
    ``config.json`` last, and :func:`load_pretrained` reads it back through a node-local copy)."""
    from .. import storage

    if name not in TINY_MODELS:
        return name
    if storage.is_remote(root):
        out = storage.join(root, "base_model")
        if not storage.is_file(storage.join(out, "config.json")):
            tok = build_tokenizer(texts)
            model = build_model(name, tok, seed=seed)
            with storage.folder_for(out, last="config.json") as tmp:  # config.json marks it complete
                model.save_pretrained(tmp)
                tok.save_pretrained(tmp)
        return out
    root = storage.local_path(root)
    out = root / "base_model"
    if not (out / "config.json").is_file():
        tok = build_tokenizer(texts)
        model = build_model(name, tok, seed=seed)
        tmp = root / "base_model.tmp"
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.rename(out)
    return str(out)


def inference_device():
    """The device a task's model belongs on: the task's GPU when Ray gave it one (Ray sets
    ``CUDA_VISIBLE_DEVICES`` to the task's GPUs, none for a task that asked for none), else the CPU."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_for_inference(source: str | Path, device=None):
    """``load_pretrained`` in eval mode on ``device`` (default :func:`inference_device`; bfloat16 on
    a GPU that has it, the checkpoint's own dtype on the CPU), with torch on one thread (a Ray task
    holds one CPU). Callers move their inputs to ``next(model.parameters()).device``."""
    import torch

    torch.set_num_threads(1)
    model, tok = load_pretrained(source)
    device = inference_device() if device is None else torch.device(device)
    if device.type != "cpu":  # a GPU (or meta, the device check's stand-in for one)
        half = torch.float16 if device.type == "cuda" and not torch.cuda.is_bf16_supported() else torch.bfloat16
        model = model.to(device=device, dtype=half)
    return model.eval(), tok
