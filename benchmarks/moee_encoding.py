"""moee's encoding: batched with left padding against one text at a time.

Every task's texts are encoded by ``moee.encode_corpus``: sorted by length, in batches of
``--batch`` (left padded, so each text's last token sits in the last column; position ids count
from the first real token), HS and RW (and the untrained routers' RW) read in one forward pass. The
baseline encodes the same texts one forward pass each (``batch=1``: no padding at all); a third line
batches them in the given order (more padding). Same model (a randomly initialised ``mini-olmoe``,
4 layers x 8 experts, or ``--model`` a checkpoint), same real review texts and ``title`` prompt; one
torch thread. Prints texts per second each way (median of ``--repeats`` after a warm-up) and the
ratios, and checks that all three give the same embeddings.

Run: python benchmarks/moee_encoding.py [--texts 256 --batch 64 --model mini-olmoe]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr_ray.llm.model import TINY_MODELS, build_model, build_tokenizer, load_pretrained  # noqa: E402
from iclr_ray.studies.moee import moee  # noqa: E402
from iclr_ray.studies.moee.data import load_reviews  # noqa: E402


def encode_all(model, tok, texts, batch: int, untrained, by_length: bool = True) -> moee.Encoded:
    if by_length:
        return moee.encode_corpus(model, tok, texts, batch, prompt="title", untrained=untrained)
    parts = [moee.encode(model, tok, texts[i:i + batch], prompt="title", untrained=untrained)
             for i in range(0, len(texts), batch)]
    return moee.Encoded(np.vstack([p.hs for p in parts]), np.vstack([p.rw for p in parts]),
                        np.vstack([p.rw_untrained for p in parts]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mini-olmoe", help="a named tiny MoE or a checkpoint folder")
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    texts = list(load_reviews().text[:args.texts])
    if args.model in TINY_MODELS:
        tok = build_tokenizer(texts, vocab_size=2048)
        model = build_model(args.model, tok, seed=0).eval()
    else:
        model, tok = load_pretrained(args.model)
        model.eval()
    untrained = moee.random_routers(model, seed=1)

    def timed(batch: int, by_length: bool = True) -> tuple[float, moee.Encoded]:
        encode_all(model, tok, texts[:batch], batch, untrained, by_length)  # warm-up
        seconds = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            enc = encode_all(model, tok, texts, batch, untrained, by_length)
            seconds.append(time.perf_counter() - t)
        return len(texts) / statistics.median(seconds), enc

    batched, a = timed(args.batch)
    unsorted, c = timed(args.batch, by_length=False)
    single, b = timed(1)
    for name in ("hs", "rw", "rw_untrained"):
        gap = max(float(np.max(np.abs(getattr(x, name) - getattr(b, name)))) for x in (a, c))
        assert gap < 1e-3, f"{name} differs between batched and single encoding by {gap}"
    print(f"model {args.model}, {len(texts)} review texts, one torch thread")
    print(f"batched by length ({args.batch} per pass, left padded): {batched:8.1f} texts/s")
    print(f"batched in the given order:                   {unsorted:8.1f} texts/s")
    print(f"one text per pass:                            {single:8.1f} texts/s")
    print(f"ratios: by length / one at a time {batched / single:.2f}x, by length / given order "
          f"{batched / unsorted:.2f}x (same embeddings within 1e-3)")


if __name__ == "__main__":
    main()
