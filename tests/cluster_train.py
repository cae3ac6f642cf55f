"""A driver for the node-loss test: ``python tests/cluster_train.py STORAGE NAME`` trains the tiny
Llama of tests/llm/test_train.py with the shared Ray Train loop on the cluster at ``RAY_ADDRESS``
(two workers, a checkpoint every ``CHECKPOINT_EVERY`` steps into ``STORAGE``, a path or a URI) and
prints the last report's metrics as one JSON line."""
from __future__ import annotations

import json
import sys

STEPS = 120
CHECKPOINT_EVERY = 10
CHATS = [[{"role": "user", "content": f"add {a} and {b}"}, {"role": "assistant", "content": str(a + b)}]
         for a in range(20) for b in range(10)]


def main(storage: str, name: str) -> None:
    import ray

    from iclr_ray.llm import data, model, train

    ray.init(configure_logging=False, log_to_driver=False)
    tok = model.build_tokenizer([m["content"] for c in CHATS for m in c], vocab_size=300)
    rows = data.pack(data.encode_all(tok, CHATS, 64), 64, tok.pad_token_id)
    cfg = train.TrainConfig(max_steps=STEPS, zero_stage=2, checkpoint_every=CHECKPOINT_EVERY, log_every=10,
                            max_failures=3)
    result = train.fit(cfg, rows, tok, storage, name)
    print(json.dumps(dict(result.metrics) if result.error is None else {"error": str(result.error)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
