"""The Fréchet distance between two feature sets (FID's formula on any feature extractor)."""
from __future__ import annotations

import numpy as np


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + Tr(S_a + S_b - 2 (S_a S_b)^(1/2)) for features (n, d) of two sets."""
    from scipy import linalg

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = linalg.sqrtm(s_a @ s_b)
    if not np.isfinite(root).all():  # near-singular product: the standard offset on the diagonals
        off = np.eye(len(s_a)) * 1e-6
        root = linalg.sqrtm((s_a + off) @ (s_b + off))
    root = np.real(root)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a + s_b - 2 * root))
