"""Blob scenes with per-pixel class masks, generated here (the data at ``small``).

Each scene is a partition of the square into regions (nearest of a few random seed points under a
smoothly warped distance), each region one of :data:`CLASSES` classes (0: the background, always
present). A class is a colour and a texture (stripes of one orientation and frequency), and pairs of
classes share a colour and differ only in their stripes, so a segmenter has to read texture, not
colour alone. The condition map is the class mask; the image follows from it plus per-scene phase,
brightness jitter and pixel noise. A shard is a pure function of its seed. Scikit-learn's digits do
not fit a multi-class segmentation task (one stroke class per image), so the scenes are generated.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...config import DataError

CLASSES = 8
# (R, G, B) in [0, 1], stripe angle (radians), stripe period (pixels), stripe amplitude
TEXTURES = (
    ((0.15, 0.15, 0.18), 0.0, 32.0, 0.0),             # 0 background: dark, flat
    ((0.85, 0.25, 0.20), 0.0, 4.0, 0.35),             # 1 red, horizontal stripes
    ((0.85, 0.25, 0.20), np.pi / 2, 4.0, 0.35),       # 2 red, vertical stripes
    ((0.20, 0.65, 0.25), np.pi / 4, 5.0, 0.35),       # 3 green, diagonal
    ((0.20, 0.65, 0.25), 3 * np.pi / 4, 5.0, 0.35),   # 4 green, the other diagonal
    ((0.25, 0.35, 0.85), 0.0, 8.0, 0.30),             # 5 blue, wide horizontal
    ((0.80, 0.75, 0.25), np.pi / 2, 6.0, 0.30),       # 6 yellow, vertical
    ((0.70, 0.70, 0.72), 0.0, 32.0, 0.05),            # 7 grey, flat
)


@dataclass
class Scenes:
    images: np.ndarray
    """(n, S, S, 3) uint8"""
    masks: np.ndarray
    """(n, S, S) uint8 class ids"""

    def __len__(self) -> int:
        return len(self.masks)

    @staticmethod
    def concat(parts: list["Scenes"]) -> "Scenes":
        return Scenes(np.concatenate([p.images for p in parts]), np.concatenate([p.masks for p in parts]))


def scene_mask(rng: np.random.Generator, side: int, regions: tuple[int, int] = (3, 6)) -> np.ndarray:
    """One class mask: the background plus 2-5 regions of distinct random classes, each the set of
    pixels nearest its seed point under a randomly warped distance."""
    k = int(rng.integers(regions[0], regions[1] + 1))
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64) / side
    pts = rng.uniform(0, 1, (k, 2))
    scale = rng.uniform(0.6, 1.6, (k, 2))
    warp = 0.08 * np.sin(2 * np.pi * (rng.uniform(1, 3) * yy + rng.uniform(0, 1))) + \
        0.08 * np.cos(2 * np.pi * (rng.uniform(1, 3) * xx + rng.uniform(0, 1)))
    d = ((yy[None] + warp - pts[:, 0, None, None]) * scale[:, 0, None, None]) ** 2 + \
        ((xx[None] - warp - pts[:, 1, None, None]) * scale[:, 1, None, None]) ** 2
    owner = d.argmin(0)
    classes = np.concatenate([[0], rng.choice(np.arange(1, CLASSES), k - 1, replace=False)])
    return classes[owner].astype(np.uint8)


def render(mask: np.ndarray, rng: np.random.Generator, noise: float = 0.03) -> np.ndarray:
    """The image of a class mask: each class's colour (brightness jittered per scene) modulated by
    its stripes (phase drawn per scene), plus Gaussian pixel noise; uint8 (S, S, 3)."""
    side = mask.shape[0]
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float64)
    out = np.zeros((side, side, 3))
    for c in np.unique(mask):
        colour, angle, period, amp = TEXTURES[int(c)]
        phase = rng.uniform(0, 2 * np.pi)
        wave = 1 + amp * np.sin(2 * np.pi * (xx * np.cos(angle) + yy * np.sin(angle)) / period + phase)
        tone = np.asarray(colour) * rng.uniform(0.85, 1.15)
        out[mask == c] = (wave[..., None] * tone)[mask == c]
    out += rng.normal(0, noise, out.shape)
    return (np.clip(out, 0, 1) * 255).round().astype(np.uint8)


def generate(n: int, side: int = 32, seed: int = 0) -> Scenes:
    rng = np.random.default_rng(seed)
    masks = np.stack([scene_mask(rng, side) for _ in range(n)]) if n else np.zeros((0, side, side), np.uint8)
    images = np.stack([render(m, rng) for m in masks]) if n else np.zeros((0, side, side, 3), np.uint8)
    return Scenes(images, masks)


def shard_sizes(n: int, shard: int) -> list[int]:
    return [min(shard, n - i) for i in range(0, n, shard)]


def save(scenes: Scenes, path: str | Path) -> None:
    """The scenes as one .npz at ``path`` (a path or a URI), written whole (atomically)."""
    from ... import storage

    buf = io.BytesIO()
    np.savez_compressed(buf, images=scenes.images, masks=scenes.masks)
    storage.write_bytes(path, buf.getvalue())


def load(path: str | Path) -> Scenes:
    """Scenes saved by :func:`save` (a path or a URI); one clear :class:`DataError` for a file that
    is missing or is not such a file."""
    from ... import storage

    try:
        if not storage.is_file(path):
            raise FileNotFoundError(path)
        with np.load(io.BytesIO(storage.read_bytes(path))) as z:
            scenes = Scenes(z["images"], z["masks"])
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: not a scene file ({e})") from None
    if scenes.images.shape[:3] != scenes.masks.shape or scenes.images.ndim != 4:
        raise DataError(f"{path}: images {scenes.images.shape} do not match masks {scenes.masks.shape}")
    if len(scenes) and int(scenes.masks.max()) >= CLASSES:
        raise DataError(f"{path}: class id {int(scenes.masks.max())} >= {CLASSES}")
    return scenes


def to_model(images: np.ndarray):
    """uint8 (n, S, S, 3) -> float tensor (n, 3, S, S) in [-1, 1] (the diffusion model's space)."""
    import torch

    return torch.as_tensor(images).permute(0, 3, 1, 2).float() / 127.5 - 1


def one_hot(masks: np.ndarray):
    """(n, S, S) class ids -> (n, CLASSES, S, S) float one-hot: the ControlNet's condition map."""
    import torch

    return torch.nn.functional.one_hot(torch.as_tensor(masks).long(), CLASSES).permute(0, 3, 1, 2).float()


def captions(masks: np.ndarray, length: int = CLASSES):
    """Each scene's caption: the ids (1 + class) of the classes it shows, in order, padded with the
    empty token 0."""
    import torch

    out = np.zeros((len(masks), length), np.int64)
    for i, m in enumerate(masks):
        present = np.unique(m)[:length]
        out[i, :len(present)] = present + 1
    return torch.as_tensor(out)
