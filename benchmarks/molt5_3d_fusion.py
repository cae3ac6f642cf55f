"""What molt5_3d's 3D fusion costs over a plain T5, on this machine's device.

The same T5 (transformers' config, v1.1 shape) three ways: ``1d`` (the token embedding alone: the
baseline), ``sum`` (plus the 3D table, the mean over the levels, the weighted sum) and ``concat``
(plus the MLP). For each: the median seconds of a training step (forward, backward, AdamW) and of a
greedy decode of ``--new-tokens`` tokens, over ``--repeats`` runs after a warm-up, and the ratios to
``1d``. On CUDA it runs in bf16 autocast (where the GPU supports it) and checks, first, that the
fused model's loss on the GPU matches the CPU's in float32 and that the padding row of the 3D table
stays zero through bf16 training steps.

Run: python benchmarks/molt5_3d_fusion.py                       # small (the study's small preset)
     python benchmarks/molt5_3d_fusion.py --d-model 768 --layers 12 --heads 12 --batch 256   # T5-base
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from iclr_ray.studies.molt5_3d import molt5 as M  # noqa: E402


def batch(n: int, seq: int, vocab: int, bits: int, level: int, target: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, seq), generator=g)
    fp = torch.randint(0, bits, (n, seq, level + 1), generator=g)
    fp[:, ::3] = -1  # a third of the tokens (prompt, branches, rings) carry no identifier
    mask = torch.ones(n, seq, dtype=torch.long)
    labels = torch.randint(3, vocab, (n, target), generator=g)
    return ids, fp, mask, labels


def model(mode: str, a, vocab: int):
    from transformers import T5ForConditionalGeneration

    torch.manual_seed(0)
    return M.MolT5(T5ForConditionalGeneration(M.t5_config(vocab, a.d_model, 2 * a.d_model, a.layers, a.heads, 0.0)),
                   mode, a.bits)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, device) -> float:
    fn()
    sync(device)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def gpu_checks(a, vocab: int, device, autocast) -> None:
    """The fused model's float32 loss on the GPU equals the CPU's; bf16 steps keep row 0 zero."""
    ids, fp, mask, labels = batch(8, a.seq, vocab, a.bits, 3, a.target, seed=1)
    cpu = model("sum", a, vocab)
    gpu = model("sum", a, vocab).to(device)
    with torch.no_grad():
        lc = cpu(ids, fp, mask, labels).item()
        lg = gpu(ids.to(device), fp.to(device), mask.to(device), labels.to(device)).item()
    print(f"check: float32 loss cpu {lc:.6f}  {device.type} {lg:.6f}  |diff| {abs(lc - lg):.2e}")
    assert abs(lc - lg) <= 1e-3 * max(1.0, abs(lc)), "GPU and CPU losses differ"
    opt = torch.optim.AdamW(gpu.parameters(), lr=1e-3, weight_decay=0.1)
    for _ in range(3):
        with autocast():
            loss = gpu(ids.to(device), fp.to(device), mask.to(device), labels.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert bool((gpu.fusion.fp.weight[0] == 0).all()), "the padding row moved"
    values = M.decode(gpu, ids, fp, mask, 4, {i: str(i % 10) for i in range(vocab)})
    assert len(values) == len(ids)
    print("check: padding row zero after 3 bf16 AdamW steps; decode on the GPU returns one value per row")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq", type=int, default=18)
    p.add_argument("--target", type=int, default=6)
    p.add_argument("--bits", type=int, default=4096)
    p.add_argument("--new-tokens", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    vocab = 200
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'one thread'}), "
          f"bf16 {bf16}; T5 d_model {a.d_model}, {a.layers}+{a.layers} layers; batch {a.batch} x {a.seq} tokens, "
          f"target {a.target}")
    if device.type == "cuda":
        gpu_checks(a, vocab, device, autocast)
    ids, fp, mask, labels = (t.to(device) for t in batch(a.batch, a.seq, vocab, a.bits, 3, a.target))
    rows = {}
    for mode in ("1d", "sum", "concat"):
        m = model(mode, a, vocab).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

        def step():
            with autocast():
                loss = m(ids, fp, mask, labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        def gen():
            with autocast():
                m.generate(ids, fp, mask, a.new_tokens)

        m.train()
        s = timed(step, a.repeats, device)
        m.eval()
        g = timed(gen, a.repeats, device)
        rows[mode] = (s, g)
    base_s, base_g = rows["1d"]
    for mode, (s, g) in rows.items():
        print(f"{mode:7s} train step {s * 1e3:9.2f} ms ({a.batch / s:10.0f} examples/s, x{s / base_s:.2f} of 1d)   "
              f"decode {g * 1e3:9.2f} ms (x{g / base_g:.2f} of 1d)")


if __name__ == "__main__":
    main()
