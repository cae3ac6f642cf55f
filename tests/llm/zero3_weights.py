"""Run by tests/llm/test_weights.py in its own process (one gloo rank; DeepSpeed's ZeRO-3 on the
CPU): a tiny tied-embedding Llama partitioned by ZeRO-3, saved through llm.weights, read back.
Prints one JSON line: the parameter count rank 0's own state dict holds under ZeRO-3 (what a
naive ``torch.save(engine.module.state_dict())`` would write) and whether the saved weights equal
the model's before partitioning."""
import json
import sys

import deepspeed
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from iclr_ray.llm.train import _skip_shm_op_build
from iclr_ray.llm.weights import load_weights, save_engine_weights

torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True))
before = {k: v.detach().clone() for k, v in model.state_dict().items()}
_skip_shm_op_build()
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                  config={"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
                                          "zero_allow_untested_optimizer": True, "steps_per_print": 10**9},
                                  dist_init_required=False)
naive = sum(v.numel() for v in engine.module.state_dict().values())
save_engine_weights(engine, sys.argv[1], rank=0, zero_stage=3, meta={"note": "zero3"})
back = load_weights(sys.argv[1])
print(json.dumps({"naive_numel": naive, "full_numel": sum(v.numel() for v in before.values()),
                  "same_keys": sorted(back) == sorted(before),
                  "equal": all(torch.equal(back[k].float(), before[k].float()) for k in before if k in back),
                  "tied": back["lm_head.weight"] is back["model.embed_tokens.weight"]}))
dist.destroy_process_group()
