"""cluspro's data: compositional (attribute, object) data sets with held-out pairs.

``digits``: scikit-learn's 1,797 real handwritten digits (8 x 8, upsampled to 16 x 16) are the
objects; attributes are image transformations applied to them. In the ``multimodal`` world an
attribute looks different on even and odd digits (``turned`` rotates even digits and flips odd
ones upside down): one attribute, two visual modes, the case ClusPro's several prototypes per
primitive are for. In the ``unimodal`` world, the control, each attribute applies its first
transformation to every digit. Each rendering adds a random one-pixel shift, an intensity scale
and pixel noise.

``features``: the same design directly in feature space, for speed: x = u[a, mode(a, o)] + v[o] +
noise, Gaussian prototypes u and v.

Splits follow the generalised CZSL protocol. The digits are split into train / valid / test images.
About ``unseen`` of the pairs are held out: a third of them are the validation's unseen pairs, two
thirds the test's. The training set renders seen pairs only. Validation renders seen and
valid-unseen pairs, test seen and test-unseen pairs. Every (attribute, digit parity) and every
digit keeps at least two seen pairs, so every mode of every attribute is seen in training.

``paper``: the official splits of MIT-States / UT-Zappos / C-GQA by path (``read_split``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ...config import DataError

SIDE = 16


# ----------------------------------------------------------------------------- transformations


def _shift(img, dy, dx):
    from scipy import ndimage

    return ndimage.shift(img, (dy, dx), order=0, mode="constant")


def _rotate(img, deg):
    from scipy import ndimage

    return np.clip(ndimage.rotate(img, deg, reshape=False, order=1, mode="constant"), 0, 1)


def _dilate(img):
    from scipy import ndimage

    return ndimage.grey_dilation(img, size=(2, 2))


def _blur(img):
    from scipy import ndimage

    g = ndimage.gaussian_filter(img, 1.2)
    return g / max(g.max(), 1e-6)


def _shrink(img):
    from scipy import ndimage

    small = np.clip(ndimage.zoom(img, 0.6, order=1), 0, 1)
    out = np.zeros_like(img)
    o = (SIDE - small.shape[0]) // 2
    out[o:o + small.shape[0], o:o + small.shape[1]] = small
    return out


def _frame(img):
    out = img.copy()
    out[0, :] = out[-1, :] = out[:, 0] = out[:, -1] = 1.0
    return out


def _stripes(img):
    return img * (0.25 + 0.75 * (np.arange(SIDE)[:, None] % 2 == 0))


def _checker_background(img):
    board = ((np.arange(SIDE)[:, None] // 2 + np.arange(SIDE)[None] // 2) % 2).astype(float)
    return np.maximum(img, 0.45 * board * (img < 0.2))


ATTRIBUTES: dict[str, tuple[Callable, Callable]] = {
    "turned": (lambda x: _rotate(x, 35), np.flipud),
    "heavy": (_dilate, _blur),
    "negative": (lambda x: 1.0 - x, _frame),
    "moved": (lambda x: _shift(x, 3, 3), _shrink),
    "striped": (_stripes, _checker_background),
    "mirrored": (np.fliplr, lambda x: _rotate(x, -35)),
}
"""each attribute's transformation on even digits (mode 0) and on odd digits (mode 1) in the
multimodal world; the unimodal world applies mode 0 to every digit"""


def mode_of(attr: int, obj: int, multimodal: bool) -> int:
    """Which of the attribute's looks an object gets: its parity in the multimodal world, else 0."""
    return obj % 2 if multimodal else 0


# ----------------------------------------------------------------------------- the data set


@dataclass
class CZSLData:
    attrs: list[str]
    objs: list[str]
    x: np.ndarray
    """(n, 1, 16, 16) images or (n, d) features, float32"""
    attr: np.ndarray
    obj: np.ndarray
    split: np.ndarray
    """'train', 'valid' or 'test' per sample"""
    seen: np.ndarray
    """(S, 2) the seen (training) pairs"""
    valid_unseen: np.ndarray
    test_unseen: np.ndarray
    meta: dict = field(default_factory=dict)

    def pairs(self, which: str) -> np.ndarray:
        """The candidate pairs of a split in the closed world: the seen ones and its unseen ones."""
        return np.concatenate([self.seen, self.valid_unseen if which == "valid" else self.test_unseen])

    def index(self, which: str) -> np.ndarray:
        return np.flatnonzero(self.split == which)


def choose_unseen(n_attrs: int, n_objs: int, frac: float, rng: np.random.Generator,
                  min_seen: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seen, valid-unseen, test-unseen) pairs: ``frac`` of all pairs held out at random, keeping at
    least ``min_seen`` seen pairs for every (attribute, object parity) and every object."""
    seen = np.ones((n_attrs, n_objs), bool)
    target = int(round(frac * n_attrs * n_objs))
    held = []
    for p in rng.permutation(n_attrs * n_objs):
        if len(held) == target:
            break
        a, o = divmod(int(p), n_objs)
        seen[a, o] = False
        parity = np.arange(n_objs) % 2 == o % 2
        if seen[a, parity].sum() < min_seen or seen[:, o].sum() < min_seen:
            seen[a, o] = True
            continue
        held.append((a, o))
    held = np.asarray(held, np.int64).reshape(-1, 2)
    n_valid = len(held) // 3
    return np.argwhere(seen).astype(np.int64), held[:n_valid], held[n_valid:]


def _split_images(labels: np.ndarray, fracs: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """'train' / 'valid' / 'test' per image, stratified by label."""
    out = np.empty(len(labels), dtype=object)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_tr, n_va = int(round(fracs[0] * len(idx))), int(round(fracs[1] * len(idx)))
        out[idx[:n_tr]], out[idx[n_tr:n_tr + n_va]], out[idx[n_tr + n_va:]] = "train", "valid", "test"
    return out


def _renderings(split_of_image: np.ndarray, objs: np.ndarray, n_attrs: int, seen, valid_unseen, test_unseen,
                renders: int, rng: np.random.Generator) -> list[tuple[int, int, str]]:
    """(image, attribute, split) for every sample: ``renders`` random seen attributes per training
    image, 2 random attributes among the valid candidates per validation image, every test
    candidate attribute per test image."""
    allowed = {"train": np.zeros((n_attrs, objs.max() + 1), bool)}
    allowed["train"][seen[:, 0], seen[:, 1]] = True
    for name, extra in (("valid", valid_unseen), ("test", test_unseen)):
        allowed[name] = allowed["train"].copy()
        allowed[name][extra[:, 0], extra[:, 1]] = True
    out = []
    for i, (s, o) in enumerate(zip(split_of_image, objs)):
        attrs = np.flatnonzero(allowed[s][:, o])
        if s == "train":
            chosen = rng.choice(attrs, min(renders, len(attrs)), replace=False)
        elif s == "valid":
            chosen = rng.choice(attrs, min(2, len(attrs)), replace=False)
        else:
            chosen = attrs
        out += [(i, int(a), s) for a in chosen]
    return out


def upsampled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (n, 16, 16) images in [0, 1] and their labels (``corpora.digits``)."""
    from ...corpora import digits

    return digits(SIDE)


def render(img: np.ndarray, attr: int, obj: int, multimodal: bool, rng: np.random.Generator) -> np.ndarray:
    """One sample: the attribute's transformation (its mode for this digit), then the nuisance
    (a shift of up to one pixel, an intensity scale in [0.8, 1.2], pixel noise of sd 0.05)."""
    fn = list(ATTRIBUTES.values())[attr][mode_of(attr, obj, multimodal)]
    out = np.asarray(fn(img), float)
    out = np.roll(out, tuple(rng.integers(-1, 2, 2)), (0, 1))
    out = out * rng.uniform(0.8, 1.2) + rng.normal(0, 0.05, out.shape)
    return np.clip(out, 0, 1).astype(np.float32)


def build(kind: str, multimodal: bool, *, unseen: float = 0.3, renders: int = 3, images: int | None = None,
          seed: int = 0, feature_dim: int = 32, noise: float = 2.5) -> CZSLData:
    """The ``digits`` or ``features`` data set of one world. The pairs, the image split and which
    attributes each image is rendered with depend on ``seed`` only, so the multimodal and the
    unimodal world of a seed hold the same (image, attribute) samples, rendered differently."""
    rng = np.random.default_rng(seed)
    names = list(ATTRIBUTES)
    n_attrs, n_objs = len(names), 10
    seen, valid_unseen, test_unseen = choose_unseen(n_attrs, n_objs, unseen, rng)
    if kind == "digits":
        imgs, labels = upsampled_digits()
    else:  # as many 'images' as digits, each only an object label
        labels = np.arange(1797) % n_objs
        imgs = None
    if images is not None and images < len(labels):
        keep = np.sort(rng.choice(len(labels), images, replace=False))
        labels = labels[keep]
        imgs = imgs[keep] if imgs is not None else None
    split_of_image = _split_images(labels, (0.6, 0.15), rng)
    samples = _renderings(split_of_image, labels, n_attrs, seen, valid_unseen, test_unseen, renders, rng)
    img_i = np.array([s[0] for s in samples])
    attr = np.array([s[1] for s in samples], np.int64)
    obj = labels[img_i]
    split = np.array([s[2] for s in samples])
    draw = np.random.default_rng([seed, int(multimodal)])  # the world's own nuisance draws
    if kind == "digits":
        x = np.stack([render(imgs[i], a, o, multimodal, draw) for i, a, o in zip(img_i, attr, obj)])[:, None]
    else:
        proto = np.random.default_rng([seed, 7])  # the same prototypes in both worlds
        u = proto.normal(0, 1, (n_attrs, 2, feature_dim))
        v = proto.normal(0, 1, (n_objs, feature_dim))
        modes = np.array([mode_of(a, o, multimodal) for a, o in zip(attr, obj)])
        x = (u[attr, modes] + v[obj] + draw.normal(0, noise, (len(attr), feature_dim))).astype(np.float32)
    return CZSLData(names, [str(d) for d in range(n_objs)], x, attr, obj, split, seen, valid_unseen, test_unseen,
                    meta={"kind": kind, "multimodal": multimodal, "images": int(len(labels))})


# ----------------------------------------------------------------------------- the official splits


def _read_pairs(path: Path) -> list[tuple[str, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise DataError(f"{path}:{n}: expected 'attribute object', got {line.strip()!r}")
        out.append((parts[0], parts[1]))
    return out


def read_split(root: str | Path, split: str = "compositional-split-natural") -> dict:
    """The official CZSL split of a data set folder (MIT-States, UT-Zappos, C-GQA as the
    ClusPro / CSP download scripts lay them out): ``<split>/{train,val,test}_pairs.txt`` and
    ``metadata_<split>.t7`` (a torch-saved list of {image, attr, obj, set}). Returns the
    primitives, the pairs per split and the (image path, attr, obj, set) samples whose pair is in
    their split's pairs, as the official loaders keep them."""
    import torch

    root = Path(root)
    folder, meta_path = root / split, root / f"metadata_{split}.t7"
    for p in (folder / "train_pairs.txt", folder / "val_pairs.txt", folder / "test_pairs.txt", meta_path):
        if not p.is_file():
            raise DataError(f"{p}: missing (the official {split} layout has it)")
    pairs = {s: _read_pairs(folder / f"{s}_pairs.txt") for s in ("train", "val", "test")}
    attrs = sorted({a for ps in pairs.values() for a, _ in ps})
    objs = sorted({o for ps in pairs.values() for _, o in ps})
    try:
        meta = torch.load(meta_path, weights_only=True)  # a list of dicts of strings: nothing to unpickle
    except Exception as exc:  # noqa: BLE001 (any unreadable file is one line)
        raise DataError(f"{meta_path}: not a torch-saved metadata list ({type(exc).__name__})") from None
    samples = []
    wanted = {s: set(ps) for s, ps in pairs.items()}
    for n, item in enumerate(meta):
        try:
            img, a, o, s = item["image"], item["attr"], item["obj"], item["set"]
        except (KeyError, TypeError):
            raise DataError(f"{meta_path}: entry {n} lacks image/attr/obj/set") from None
        if s in wanted and (a, o) in wanted[s]:
            samples.append((str(root / "images" / img), attrs.index(a), objs.index(o), "valid" if s == "val" else s))
    if not samples:
        raise DataError(f"{meta_path}: no sample's pair is in its split's pairs")
    return {"attrs": attrs, "objs": objs, "pairs": pairs, "samples": samples}


def official(root: str | Path, split: str = "compositional-split-natural") -> CZSLData:
    """An official CZSL data set as :class:`CZSLData` (``x``: image paths): the seen pairs are the
    training pairs; the validation and test unseen pairs are their split's pairs not seen in
    training (the closed world's candidates are then the split's pairs and the training pairs)."""
    r = read_split(root, split)
    a_id, o_id = {a: i for i, a in enumerate(r["attrs"])}, {o: i for i, o in enumerate(r["objs"])}

    def ids(pairs):
        return np.array([(a_id[a], o_id[o]) for a, o in pairs], np.int64).reshape(-1, 2)

    seen = ids(r["pairs"]["train"])
    known = set(map(tuple, seen.tolist()))
    unseen = {s: np.array([p for p in ids(r["pairs"][s]).tolist() if tuple(p) not in known], np.int64).reshape(-1, 2)
              for s in ("val", "test")}
    paths, attr, obj, where = zip(*r["samples"])
    return CZSLData(r["attrs"], r["objs"], np.array(paths, dtype=object), np.array(attr, np.int64),
                    np.array(obj, np.int64), np.array(where), seen, unseen["val"], unseen["test"],
                    meta={"kind": "official", "root": str(root), "split": split})


CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def load_images(paths, size: int) -> np.ndarray:
    """Image files as a (n, 3, size, size) float32 batch, CLIP's preprocessing: shorter side to
    ``size`` (bicubic), centre crop, CLIP's mean and std."""
    from PIL import Image

    out = np.empty((len(paths), 3, size, size), np.float32)
    for i, p in enumerate(paths):
        try:
            im = Image.open(p).convert("RGB")
        except OSError as exc:
            raise DataError(f"{p}: cannot read the image ({exc.__class__.__name__})") from None
        w, h = im.size
        scale = size / min(w, h)
        im = im.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BICUBIC)
        w, h = im.size
        left, top = (w - size) // 2, (h - size) // 2
        arr = np.asarray(im.crop((left, top, left + size, top + size)), np.float32) / 255.0
        out[i] = ((arr - CLIP_MEAN) / CLIP_STD).transpose(2, 0, 1)
    return out


CLIP_SIZE = 224
"""CLIP ViT-L/14's input side"""


def batch_x(data: CZSLData, idx: np.ndarray, size: int = CLIP_SIZE) -> np.ndarray:
    """The model inputs of samples ``idx``: the arrays themselves, or the images their paths name."""
    x = data.x[idx]
    return load_images(x, size) if x.dtype == object else x
