"""The segmenters: a deliberately weak reward model (a shallow CNN with a small receptive field,
trained briefly) that post-training optimises against, and a stronger oracle (a small U-Net,
trained longer with noise augmentation) that judges controllability (mIoU) and gives the features
of the Fréchet distance. Both read images in [0, 1]; both are trained here on real scenes. No Ray."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .data import CLASSES

IGNORE = 255


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU())


class RewardSegmenter(nn.Module):
    """``depth`` 3x3 convolutions of ``width`` channels and a 1x1 classifier: a receptive field of
    2 depth + 1 pixels, too small to read the widest stripes whole."""

    def __init__(self, width: int = 16, depth: int = 3):
        super().__init__()
        self.body = nn.Sequential(*[_block(3 if i == 0 else width, width) for i in range(depth)])
        self.head = nn.Conv2d(width, CLASSES, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(images * 2 - 1))


class OracleSegmenter(nn.Module):
    """A two-level U-Net: (width, 2 width) channels, one skip; :meth:`features` is the pooled
    mean and spread of its last hidden map (the Fréchet distance's features)."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.enc = nn.Sequential(_block(3, width), _block(width, width))
        self.down = nn.Sequential(nn.MaxPool2d(2), _block(width, 2 * width), _block(2 * width, 2 * width),
                                  nn.MaxPool2d(2), _block(2 * width, 2 * width), _block(2 * width, 2 * width))
        self.up = nn.Upsample(scale_factor=4, mode="bilinear", align_corners=False)
        self.dec = nn.Sequential(_block(3 * width, width), _block(width, width))
        self.head = nn.Conv2d(width, CLASSES, 1)

    def hidden(self, images: torch.Tensor) -> torch.Tensor:
        e = self.enc(images * 2 - 1)
        return self.dec(torch.cat([e, self.up(self.down(e))], 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(images))

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        h = self.hidden(images)
        return torch.cat([h.mean((2, 3)), h.std((2, 3))], 1)


def train_segmenter(model: nn.Module, images: np.ndarray, masks: np.ndarray, *, steps: int, batch: int, lr: float,
                    seed: int, noise: float = 0.0) -> list[float]:
    """AdamW on per-pixel cross-entropy over seeded batches of (uint8 images, class masks); with
    ``noise``, Gaussian noise of a random scale up to it on each image (robust to generated
    images). Returns the loss per step."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    device = next(model.parameters()).device  # batches and noise are made on the host, then moved
    losses = []
    for _ in range(steps):
        i = rng.integers(0, len(images), batch)
        x = torch.as_tensor(images[i]).permute(0, 3, 1, 2).float() / 255
        if noise:
            x = (x + torch.randn_like(x) * torch.rand(len(x), 1, 1, 1) * noise).clamp(0, 1)
        loss = F.cross_entropy(model(x.to(device)), torch.as_tensor(masks[i]).long().to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).float().cpu().tolist() if losses else []


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, batch: int = 256) -> np.ndarray:
    """Class ids (n, S, S) of images (n, 3, S, S) in [0, 1] (on any device and in any dtype: each
    chunk goes to the model's, the ids come back to the host)."""
    model.eval()
    p = next(model.parameters())
    with torch.no_grad():
        return np.concatenate([model(images[i:i + batch].to(p.device, p.dtype)).argmax(1).cpu().numpy()
                               for i in range(0, len(images), batch)])


def features(model: nn.Module, images: torch.Tensor, batch: int = 256) -> np.ndarray:
    """The oracle's pooled features (n, 2 * width) of images (n, 3, S, S) in [0, 1], chunk by chunk
    on the model's device, returned to the host in float32 (the Fréchet distance's input)."""
    model.eval()
    p = next(model.parameters())
    return np.concatenate([model.features(images[i:i + batch].to(p.device, p.dtype)).float().cpu().numpy()
                           for i in range(0, len(images), batch)])


def confusion(pred: np.ndarray, target: np.ndarray, classes: int = CLASSES) -> np.ndarray:
    """(classes, classes) pixel counts: rows the true class, columns the predicted."""
    keep = target != IGNORE
    return np.bincount(classes * target[keep].astype(np.int64) + pred[keep], minlength=classes ** 2).reshape(
        classes, classes)


def miou(conf: np.ndarray) -> float:
    """Mean IoU over the classes that occur (in the truth or the prediction), from a confusion matrix."""
    inter = np.diag(conf).astype(float)
    union = conf.sum(0) + conf.sum(1) - inter
    seen = union > 0
    return float((inter[seen] / union[seen]).mean()) if seen.any() else float("nan")
