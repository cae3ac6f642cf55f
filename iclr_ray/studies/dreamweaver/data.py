"""dreamweaver's data: Moving-Sprites-like videos, generated here (the paper's sets are synthetic too,
and its generator is not in the official repo).

Each video has ``objects`` sprites on a black background. Per object, static factors: colour (5),
shape (square, circle, triangle, cross) and size (2); dynamic factors: the direction of motion
(down, up, left, right) and the speed (2). A sprite moves in a straight line and bounces off the
walls (its direction flips), so direction is a per-frame factor. Later objects occlude earlier ones.
Kept per video: the frames (uint8), a per-pixel object index (0: background, i + 1: object i), and
each object's factors per frame.

Splits: ``train``, ``test`` (the same distribution) and ``ood``: some (colour, shape) pairs never
appear in train or test, and every ``ood`` video has one object with such a pair (the official
``-ood`` sets hold out attribute combinations this way).

A shard is a pure function of (split, seed, shard): ``run.py`` generates the shards as Ray tasks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import DataError

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 90, 240), "yellow": (235, 220, 40),
           "magenta": (220, 60, 220)}
SHAPES = ("square", "circle", "triangle", "cross")
SIZES = (0.12, 0.2)
"""half-widths as shares of the side (3 and 5 pixels at 32 x 32)"""
DIRECTIONS = ("down", "up", "left", "right")
STEP = {"down": (1, 0), "up": (-1, 0), "left": (0, -1), "right": (0, 1)}
SPEEDS = (0.04, 0.08)
"""pixels per frame as shares of the side (1.3 and 2.6 pixels at 32 x 32)"""
FACTORS = ("colour", "shape", "size", "direction", "speed")
STATIC, DYNAMIC = FACTORS[:3], FACTORS[3:]
CARDINALITY = {"colour": len(COLOURS), "shape": len(SHAPES), "size": len(SIZES), "direction": len(DIRECTIONS),
               "speed": len(SPEEDS)}
HELD_OUT = ((0, 3), (1, 2), (2, 1), (3, 0))
"""(colour, shape) pairs seen only in ``ood``: red crosses, green triangles, blue circles, yellow squares"""


@dataclass
class Videos:
    frames: np.ndarray
    """(V, F, S, S, 3) uint8"""
    masks: np.ndarray
    """(V, F, S, S) uint8: 0 background, i + 1 the visible pixels of object i"""
    factors: np.ndarray
    """(V, F, O, 5) int64: colour, shape, size, direction, speed of each object in each frame"""
    centres: np.ndarray
    """(V, F, O, 2) float32: each object's centre (row, column) in pixels"""

    def __len__(self) -> int:
        return len(self.frames)

    @staticmethod
    def concat(parts: list["Videos"]) -> "Videos":
        return Videos(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("frames", "masks", "factors",
                                                                                  "centres")))


def stencil(shape: str, half: float) -> np.ndarray:
    """The boolean footprint of a shape with half-width ``half`` pixels, centred in its box."""
    r = int(np.ceil(half))
    y, x = np.mgrid[-r:r + 1, -r:r + 1].astype(float)
    if shape == "square":
        return (np.abs(y) <= half) & (np.abs(x) <= half)
    if shape == "circle":
        return y ** 2 + x ** 2 <= (half + 0.3) ** 2
    if shape == "triangle":  # apex up, base at the bottom
        return (y <= half) & (y >= -half) & (np.abs(x) <= (y + half) / 2 + 0.5)
    if shape == "cross":
        w = max(half / 2.5, 0.8)
        return ((np.abs(y) <= w) | (np.abs(x) <= w)) & (np.abs(y) <= half) & (np.abs(x) <= half)
    raise ValueError(f"unknown shape {shape!r}")


def _combos(split: str) -> list[tuple[int, int]]:
    every = [(c, s) for c in range(len(COLOURS)) for s in range(len(SHAPES))]
    return list(HELD_OUT) if split == "ood" else [p for p in every if p not in HELD_OUT]


def generate(n: int, *, side: int = 32, frames: int = 6, objects: int = 2, split: str = "train",
             seed: int = 0) -> Videos:
    """``n`` videos of ``split`` (train, test: the seen (colour, shape) pairs; ood: object 0 has a
    held-out pair, the others seen ones), a pure function of the arguments."""
    if split not in ("train", "test", "ood"):
        raise ValueError(f"unknown split {split!r}")
    rng = np.random.default_rng([seed, ("train", "test", "ood").index(split)])
    seen, held = _combos("train"), _combos("ood")
    palette = np.array(list(COLOURS.values()), np.uint8)
    stencils = {(s, z): stencil(SHAPES[s], SIZES[z] * side) for s in range(len(SHAPES)) for z in range(len(SIZES))}
    out_f = np.zeros((n, frames, side, side, 3), np.uint8)
    out_m = np.zeros((n, frames, side, side), np.uint8)
    fac = np.zeros((n, frames, objects, len(FACTORS)), np.int64)
    cen = np.zeros((n, frames, objects, 2), np.float32)
    for v in range(n):
        for o in range(objects):
            pool = held if (split == "ood" and o == 0) else seen
            c, s = pool[rng.integers(len(pool))]
            z, d, sp = rng.integers(len(SIZES)), rng.integers(len(DIRECTIONS)), rng.integers(len(SPEEDS))
            half = SIZES[z] * side
            pos = rng.uniform(half, side - 1 - half, size=2)
            speed = SPEEDS[sp] * side
            for f in range(frames):
                fac[v, f, o] = (c, s, z, d, sp)
                cen[v, f, o] = pos
                nxt = pos + speed * np.array(STEP[DIRECTIONS[d]])
                if np.any(nxt < half) or np.any(nxt > side - 1 - half):  # bounce: the direction flips
                    d = {0: 1, 1: 0, 2: 3, 3: 2}[int(d)]
                    nxt = pos + speed * np.array(STEP[DIRECTIONS[d]])
                pos = np.clip(nxt, half, side - 1 - half)
        for f in range(frames):
            for o in range(objects):  # later objects drawn over earlier ones
                st = stencils[(int(fac[v, f, o, 1]), int(fac[v, f, o, 2]))]
                r = st.shape[0] // 2
                cy, cx = np.rint(cen[v, f, o]).astype(int)
                y0, x0 = cy - r, cx - r
                ys, xs = np.nonzero(st)
                ys, xs = ys + y0, xs + x0
                keep = (ys >= 0) & (ys < side) & (xs >= 0) & (xs < side)
                out_f[v, f, ys[keep], xs[keep]] = palette[fac[v, f, o, 0]]
                out_m[v, f, ys[keep], xs[keep]] = o + 1
    return Videos(out_f, out_m, fac, cen)


def shard_sizes(n: int, shard: int) -> list[int]:
    return [min(shard, n - i) for i in range(0, n, shard)]


def save(videos: Videos, path) -> None:
    """One .npz per split at ``path`` (a path or a URI), written whole (atomically)."""
    import io

    from ... import storage

    buf = io.BytesIO()
    np.savez(buf, frames=videos.frames, masks=videos.masks, factors=videos.factors, centres=videos.centres)
    storage.write_bytes(path, buf.getvalue())


def load(path) -> Videos:
    """Videos saved by :func:`save` (``path``: a path or a URI)."""
    import io

    from ... import storage

    try:
        with np.load(io.BytesIO(storage.read_bytes(path))) as z:
            return Videos(z["frames"], z["masks"], z["factors"], z["centres"])
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"{path}: not a dreamweaver video file ({e})") from None


def clip(videos: Videos, idx: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Frames [start, start + length) of each video ``idx`` as (B, length, S, S, 3) uint8."""
    t = starts[:, None] + np.arange(length)[None]
    return videos.frames[idx[:, None], t]
