"""cluspro's data sets: the held-out pairs never reach training, every attribute's every mode is
seen, the two worlds hold the same samples rendered differently."""
import numpy as np
import pytest

from iclr_ray.studies.cluspro import data as D


@pytest.fixture(scope="module")
def worlds():
    return {w: D.build("digits", w == "multimodal", seed=3, images=600) for w in ("multimodal", "unimodal")}


def _pairs(d, split):
    i = d.index(split)
    return set(zip(d.attr[i].tolist(), d.obj[i].tolist()))


def test_held_out_pairs_never_appear_in_training(worlds):
    d = worlds["multimodal"]
    seen = set(map(tuple, d.seen.tolist()))
    vu, tu = set(map(tuple, d.valid_unseen.tolist())), set(map(tuple, d.test_unseen.tolist()))
    assert not (seen & vu) and not (seen & tu) and not (vu & tu)
    assert len(seen) + len(vu) + len(tu) == 60 and len(vu) + len(tu) == 18  # 30% of 6 x 10 held out
    assert _pairs(d, "train") == seen  # training renders every seen pair and nothing else
    assert _pairs(d, "valid") <= seen | vu and _pairs(d, "valid") & vu
    assert _pairs(d, "test") <= seen | tu and _pairs(d, "test") >= tu
    assert set(map(tuple, d.pairs("test").tolist())) == seen | tu  # the closed world's candidates


def test_every_mode_of_every_attribute_is_seen_in_training(worlds):
    d = worlds["multimodal"]
    tr = d.index("train")
    for a in range(len(d.attrs)):
        for parity in (0, 1):
            objs = {o for o in d.obj[tr][d.attr[tr] == a] if o % 2 == parity}
            assert len(objs) >= 2, (a, parity)
    for o in range(10):
        assert len(set(d.attr[tr][d.obj[tr] == o].tolist())) >= 2


def test_images_are_split_and_the_worlds_share_their_samples(worlds):
    m, u = worlds["multimodal"], worlds["unimodal"]
    assert m.x.shape[1:] == (1, 16, 16) and m.x.dtype == np.float32 and 0 <= m.x.min() and m.x.max() <= 1
    assert (m.attr == u.attr).all() and (m.obj == u.obj).all() and (m.split == u.split).all()
    assert not np.allclose(m.x, u.x)
    sizes = {s: (m.split == s).sum() for s in ("train", "valid", "test")}
    assert sizes["train"] > sizes["test"] > sizes["valid"] > 0


def test_modes_follow_the_digit_parity_only_in_the_multimodal_world():
    rng = np.random.default_rng(0)
    img = D.upsampled_digits()[0][0]
    assert D.mode_of(0, 3, True) == 1 and D.mode_of(0, 4, True) == 0 and D.mode_of(0, 3, False) == 0
    for a, (even, odd) in enumerate(D.ATTRIBUTES.values()):
        assert not np.allclose(even(img), odd(img)), a  # the two looks differ
        assert not np.allclose(even(img), img), a
    # rendering = the mode's transformation plus small nuisance: closer to its own mode than to the other
    x = D.render(img, 0, 3, True, rng)
    even, odd = D.ATTRIBUTES["turned"]
    assert np.abs(x - odd(img)).mean() < np.abs(x - even(img)).mean()


def test_the_feature_world_is_built_the_same_way():
    m = D.build("features", True, seed=0, images=300, feature_dim=12)
    u = D.build("features", False, seed=0, images=300, feature_dim=12)
    assert m.x.shape[1] == 12 and (m.attr == u.attr).all()
    assert set(map(tuple, m.seen.tolist())) == _pairs(m, "train")


def test_choose_unseen_keeps_its_constraints_for_many_seeds():
    for seed in range(20):
        seen, vu, tu = D.choose_unseen(6, 10, 0.3, np.random.default_rng(seed))
        mask = np.zeros((6, 10), bool)
        mask[seen[:, 0], seen[:, 1]] = True
        assert (mask.sum(0) >= 2).all()
        for parity in (0, 1):
            assert (mask[:, np.arange(10) % 2 == parity].sum(1) >= 2).all()
        assert len(vu) == len(tu) // 2
