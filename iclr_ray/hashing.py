"""Counter-based hashing shared by the studies (numpy only, no Ray, no I/O).

splitmix64's finaliser is a bijection on 64-bit words that scrambles every bit; hashing a key
with a seed through it gives the same word on every machine, in every process and in any batch
order, which is what lets two parties (coord_sketch), many Ray tasks (mab_cs) or an embedding
applied to one vector at a time (sparse_embed) agree without exchanging anything but the seed.
"""
from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def hash_u64(keys: np.ndarray, seed: int, salt: int = 0) -> np.ndarray:
    """A seeded 64-bit hash of integer keys; the same (key, seed, salt) gives the same word anywhere."""
    k = np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        s = mix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
                  + np.array([salt + 1], dtype=np.uint64) * GOLDEN)
        return mix64(mix64(k ^ s) + GOLDEN)


def uniform_hash(keys: np.ndarray, seed: int, salt: int = 0) -> np.ndarray:
    """h: key -> U(0, 1), open interval, 53 bits."""
    return ((hash_u64(keys, seed, salt) >> _S11).astype(np.float64) + 0.5) * 2.0**-53


def to_unit(words: np.ndarray) -> np.ndarray:
    """U[0, 1) numbers from 64-bit words (their top 53 bits)."""
    return (words >> _S11).astype(np.float64) * 2.0**-53
