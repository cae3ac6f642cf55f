"""The Moving-Sprites-like generator: the factors it records are the ones it draws (colours on the
pixels, motion along the direction at the speed, bounces flip the direction), the held-out
colour-shape pairs appear only out of distribution, and a shard is a pure function of its seed."""
import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.studies.dreamweaver import data as D


@pytest.fixture(scope="module")
def videos():
    return D.generate(60, side=32, frames=8, objects=2, split="train", seed=3)


def test_pixels_show_each_objects_colour_and_the_masks_mark_them(videos):
    palette = np.array(list(D.COLOURS.values()))
    for v in range(10):
        for f in range(8):
            for o in range(2):
                px = videos.frames[v, f][videos.masks[v, f] == o + 1]
                assert (px == palette[videos.factors[v, f, o, 0]]).all()
            assert (videos.frames[v, f][videos.masks[v, f] == 0] == 0).all()


def test_objects_move_along_their_direction_at_their_speed_and_bounce(videos):
    bounces = 0
    for v in range(len(videos)):
        for o in range(2):
            for f in range(7):
                d, sp = videos.factors[v, f, o, 3], videos.factors[v, f, o, 4]
                step = videos.centres[v, f + 1, o] - videos.centres[v, f, o]
                want = D.SPEEDS[sp] * 32 * np.array(D.STEP[D.DIRECTIONS[d]])
                if videos.factors[v, f + 1, o, 3] != d:  # a bounce: the opposite direction
                    bounces += 1
                    assert {D.DIRECTIONS[d], D.DIRECTIONS[videos.factors[v, f + 1, o, 3]]} in (
                        {"up", "down"}, {"left", "right"})
                    continue
                assert np.allclose(step, want, atol=1e-4) or np.any(np.isclose(
                    videos.centres[v, f + 1, o], [D.SIZES[videos.factors[v, f, o, 2]] * 32,
                                                  31 - D.SIZES[videos.factors[v, f, o, 2]] * 32], atol=1e-4))
            assert (videos.factors[v, :, o, :3] == videos.factors[v, 0, o, :3]).all()  # static factors stay
    assert bounces > 0


def test_held_out_pairs_only_out_of_distribution():
    train = D.generate(200, split="train", seed=0)
    ood = D.generate(50, split="ood", seed=0)
    pairs = {tuple(p) for p in train.factors[:, 0, :, :2].reshape(-1, 2).tolist()}
    assert not pairs & set(D.HELD_OUT)
    assert {tuple(p) for p in ood.factors[:, 0, 0, :2].tolist()} <= set(D.HELD_OUT)
    assert not {tuple(p) for p in ood.factors[:, 0, 1, :2].tolist()} & set(D.HELD_OUT)


def test_a_shard_is_a_pure_function_of_its_seed(tmp_path):
    a, b = D.generate(5, seed=1), D.generate(5, seed=1)
    assert np.array_equal(a.frames, b.frames) and not np.array_equal(a.frames, D.generate(5, seed=2).frames)
    D.save(a, tmp_path / "v.npz")
    c = D.load(tmp_path / "v.npz")
    assert np.array_equal(c.factors, a.factors) and len(D.Videos.concat([a, c])) == 10
    (tmp_path / "bad.npz").write_text("no")
    with pytest.raises(DataError, match="bad.npz"):
        D.load(tmp_path / "bad.npz")
    assert D.shard_sizes(1100, 500) == [500, 500, 100]
    st = np.array([0, 2])
    assert np.array_equal(D.clip(a, np.array([1, 3]), st, 3)[1], a.frames[3, 2:5])
