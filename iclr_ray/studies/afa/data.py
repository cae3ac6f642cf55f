"""The data at ``small``: scikit-learn's handwritten digits (1,797 real 8 x 8 scans, installed with
scikit-learn), upsampled bilinearly to ``side`` pixels, split once into train / validation / test,
stratified by class. A caption is one token: the digit's class + 1 (0 is the empty caption, CFG's
unconditional branch). No Ray."""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...config import DataError

CLASSES = 10
SPLITS = ("train", "val", "test")


@dataclass
class Digits:
    images: np.ndarray
    """(n, S, S) float32 in [0, 1]"""
    labels: np.ndarray
    """(n,) int64 classes"""

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, classes) -> "Digits":
        keep = np.isin(self.labels, list(classes))
        return Digits(self.images[keep], self.labels[keep])

    def first_of_each_class(self) -> list[int]:
        """The index of each present class's first digit, by class."""
        return [int(np.flatnonzero(self.labels == k)[0]) for k in range(CLASSES) if (self.labels == k).any()]


def split(side: int, test: int, val: int, seed: int = 0) -> dict[str, Digits]:
    """The three splits: ``test`` and ``val`` digits drawn per class in proportion (stratified,
    seeded), the rest for training."""
    from ...corpora import digits

    images, labels = digits(side)
    if test + val >= len(labels):
        raise DataError(f"data.test {test} + data.val {val} leave no training digits of {len(labels)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    # stratified: interleave the classes so any prefix holds them in proportion
    ranks = np.empty(len(labels))
    for c in range(CLASSES):
        idx = order[labels[order] == c]
        ranks[idx] = (np.arange(len(idx)) + rng.random()) / len(idx)
    order = np.argsort(ranks, kind="stable")
    parts = {"test": order[:test], "val": order[test:test + val], "train": order[test + val:]}
    return {k: Digits(images[v], labels[v]) for k, v in parts.items()}


def save(digits: Digits, location: str | Path) -> None:
    """The digits as one .npz at ``location`` (a path or a URI), written whole (atomically)."""
    from ... import storage

    buf = io.BytesIO()
    np.savez_compressed(buf, images=digits.images, labels=digits.labels)
    storage.write_bytes(location, buf.getvalue())


def load(location: str | Path) -> Digits:
    """Digits saved by :func:`save` at ``location`` (a path or a URI)."""
    from ... import storage

    if not storage.is_file(location):
        raise DataError(f"digits file {location} is missing")
    with np.load(io.BytesIO(storage.read_bytes(location))) as z:
        return Digits(z["images"], z["labels"])


def to_model(images: np.ndarray):
    """(n, S, S) in [0, 1] -> a (n, 1, S, S) tensor in [-1, 1]."""
    import torch

    return torch.as_tensor(np.asarray(images, np.float32)).unsqueeze(1) * 2 - 1


def tokens(labels: np.ndarray):
    """Captions: (n, 1) token ids, class + 1."""
    import torch

    return torch.as_tensor(np.asarray(labels, np.int64) + 1).view(-1, 1)


def noised_rows(digits: Digits, idx: np.ndarray, rng: np.random.Generator, dropout: float | None = None):
    """Diffusion rows for the digits ``idx``: x0 in model space, captions (with ``dropout``, a share
    of them emptied, drawn first), then t ~ U{0..999} and Gaussian noise, in that order from ``rng``."""
    import torch

    from ...diffusion.model import NULL

    n, side = len(idx), digits.images.shape[-1]
    caption = tokens(digits.labels[idx])
    if dropout is not None:
        caption[torch.as_tensor(rng.random(n) < dropout)] = NULL
    return {"x0": to_model(digits.images[idx]), "tokens": caption, "t": torch.as_tensor(rng.integers(0, 1000, n)),
            "noise": torch.as_tensor(rng.standard_normal((n, 1, side, side)), dtype=torch.float32)}
