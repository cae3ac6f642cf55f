"""The evaluator: a small CNN digit classifier trained here on the real training digits (with noise
augmentation, so it reads imperfect generated digits too). Its accuracy on generated images for the
requested class is the class-conditional accuracy; its hidden features give the Fréchet distance
(FID's formula; the Inception network is not available offline). No Ray."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .data import CLASSES


class DigitClassifier(nn.Module):
    def __init__(self, side: int = 16, width: int = 16, features: int = 64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * width * (side // 4) ** 2, features), nn.SiLU())
        self.head = nn.Linear(features, CLASSES)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """(n, 1, S, S) in [0, 1] -> (n, features)."""
        return self.body(images * 2 - 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def train_classifier(model: DigitClassifier, images: np.ndarray, labels: np.ndarray, *, steps: int, batch: int,
                     lr: float, noise: float, seed: int) -> list[float]:
    """Adam on cross-entropy over random batches, each image with Gaussian noise of a random sd in
    [0, ``noise``] and a shift of up to one pixel."""
    rng = np.random.default_rng(seed)
    x_all = torch.as_tensor(images, dtype=torch.float32).unsqueeze(1)
    y_all = torch.as_tensor(labels)
    opt = torch.optim.Adam(model.parameters(), lr)
    device = next(model.parameters()).device  # batches and noise are made on the host, then moved
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.as_tensor(rng.integers(0, len(y_all), batch))
        x = x_all[idx]
        sd = torch.as_tensor(rng.uniform(0, noise, (batch, 1, 1, 1)), dtype=torch.float32)
        g = torch.Generator().manual_seed(int(rng.integers(2**31)))
        x = (x + sd * torch.randn(x.shape, generator=g)).clamp(0, 1)
        shift = [int(v) for v in rng.integers(-1, 2, 2)]
        x = torch.roll(x, shift, (2, 3))
        loss = F.cross_entropy(model(x.to(device)), y_all[idx].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    model.eval()
    return torch.stack(losses).float().cpu().tolist() if losses else []


@torch.no_grad()
def predict(model: DigitClassifier, images: torch.Tensor) -> np.ndarray:
    """Class ids of images (n, 1, S, S) in [0, 1] on any device (moved to the model's), on the host."""
    return model(images.to(next(model.parameters()).device)).argmax(1).cpu().numpy()


@torch.no_grad()
def features(model: DigitClassifier, images: torch.Tensor) -> np.ndarray:
    """The classifier's features of images (moved to the model's device), float32 on the host."""
    return model.features(images.to(next(model.parameters()).device)).float().cpu().numpy()


def accuracy(model: DigitClassifier, images: torch.Tensor, labels: np.ndarray) -> float:
    return float((predict(model, images) == np.asarray(labels)).mean())
