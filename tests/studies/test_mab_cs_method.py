"""mab_cs's method without Ray: the counter-based draws, instances and regret, every policy on
instances whose answer is known, the sample-size schedule, and the vectorised engine's guarantees
(a run does the same wherever it is simulated; the block after settling changes nothing)."""
import math

import numpy as np
import pytest

from iclr_ray.studies.mab_cs import policies as P
from iclr_ray.studies.mab_cs.bandit import REWARD, Instance, Regret, reward_uniforms, rewards, run_keys, uniforms
from iclr_ray.studies.mab_cs.engine import checkpoints, simulate


def test_uniforms_are_a_function_of_key_time_and_stream():
    keys = run_keys(7, range(1000))
    assert np.array_equal(uniforms(keys[[3, 5]], 11, 2), uniforms(keys, 11, 2)[[3, 5]])
    assert np.array_equal(run_keys(7, [5]), run_keys(7, range(10))[[5]])
    u = uniforms(keys, 4, np.broadcast_to(np.arange(8), (1000, 8)))
    assert u.shape == (1000, 8) and np.array_equal(u[:, 2], uniforms(keys, 4, 2))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert not np.array_equal(uniforms(keys, 4, 0), uniforms(keys, 5, 0))
    assert not np.array_equal(run_keys(7, range(3)), run_keys(8, range(3)))


def test_instance_sorts_by_cost_and_finds_the_target():
    inst = Instance.make("x", [0.9, 0.5, 0.8], [0.9, 0.1, 0.5], ["c", "a", "b"])
    assert inst.mu == (0.5, 0.8, 0.9) and inst.cost == (0.1, 0.5, 0.9) and inst.labels == ("a", "b", "c")
    assert inst.target("subsidy", 0.15) == 1  # 0.8 >= 0.85 * 0.9
    assert inst.target("subsidy", 0.0) == 2
    assert inst.target("known_ref", 0.0, ell=1) == 1 and inst.target("known_ref", 0.4, ell=1) == 0
    with pytest.raises(ValueError, match="at least two arms"):
        Instance.make("y", [0.5], [0.1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Instance.make("y", [0.5, 1.5], [0.1, 0.2])


def test_regret_accounting():
    inst = Instance.make("x", [0.5, 0.8, 0.9], [0.1, 0.5, 0.9])
    regret = Regret(inst, "subsidy", 0.1, None)  # threshold 0.81: target arm 2 (cost 0.9)
    cost, quality = regret(np.array([[1, 3, 0], [0, 0, 4]]))
    assert cost.tolist() == [0.0, 0.0]  # nothing dearer than the target was pulled
    assert quality == pytest.approx([(0.81 - 0.5) + 3 * (0.81 - 0.8), 0.0])
    cost, quality = Regret(inst, "subsidy", 0.5, None)(np.array([[0, 0, 10]]))  # threshold 0.45: target arm 0
    assert cost == pytest.approx([8.0]) and quality.tolist() == [0.0]


def test_reward_blocks_equal_the_per_step_draws():
    keys = run_keys(3, range(4))
    block = reward_uniforms(keys, 10, 5, 3)
    for i in range(5):
        for k in range(3):
            assert np.array_equal(block[:, i, k], uniforms(keys, 10 + i, REWARD + k))


def test_reward_models_are_bounded_with_the_right_mean():
    mu = np.array([0.2, 0.7, 0.95])
    u = uniforms(run_keys(0, range(60000)), 5, 0)
    arms = np.arange(60000) % 3
    for model in ("bernoulli", "uniform"):
        r = rewards(mu[arms], model, u)
        assert 0 <= r.min() and r.max() <= 1
        for k in range(3):
            assert r[arms == k].mean() == pytest.approx(mu[k], abs=0.01)
    assert set(np.unique(rewards(mu[arms], "bernoulli", u))) == {0.0, 1.0}


def test_sample_size_schedule_matches_the_official_numbers():
    # n(2^-m) for T = 5e6 as the official code computes it: 31, 113, 405, 1443 for m = 0..3
    assert [int(P.sample_size(2.0 ** -m, 5_000_000)) for m in range(4)] == [31, 113, 405, 1443]
    D = 2.0 ** -np.arange(6)
    assert np.allclose(P.buffer(D, 10**6), D / 2, rtol=0.1)
    for T in (100, 5_000_000):
        m = P.max_round(T)
        assert T * 4.0 ** -m >= math.e > T * 4.0 ** -(m + 1) and P.sample_size(2.0 ** -m, T) > 0


def run(inst, policy, setting, alpha, T, ell=None, runs=20, **kw):
    return simulate(inst, policy, setting, alpha, T, seed=1, runs=range(runs), ell=ell, **kw)


@pytest.mark.parametrize("policy", ["pe", "pe_asym"])
def test_pe_eliminates_a_bad_cheap_arm_and_accepts_a_good_one(policy):
    inst = Instance.make("x", [0.3, 0.76, 0.8], [0.1, 0.2, 0.9])  # ell = 2, alpha 0.1: threshold 0.72
    tr = run(inst, policy, "known_ref", 0.1, 100_000, ell=2)
    assert (tr.pulls.argmax(axis=1) == 1).all()
    assert tr.stepped < 100_000  # every run settled, the rest of the horizon was one block
    # gap 0.42: out once 2 b(D) < 0.42, by the round with D = 1/4 at the latest
    assert (tr.pulls[:, 0] <= P.sample_size(0.25, 100_000)).all()
    assert tr.quality[:, -1].max() <= 0.42 * tr.pulls[:, 0].max() + 1e-9
    assert tr.cost[:, -1] == pytest.approx(0.7 * tr.pulls[:, 2])  # only ell's pulls cost more than arm 1
    none_cheaper = run(inst, policy, "known_ref", 0.1, 1000, ell=0)
    assert (none_cheaper.pulls[:, 0] == 1000).all() and none_cheaper.cost.max() == 0


def test_pe_falls_back_to_the_reference_arm():
    inst = Instance.make("x", [0.3, 0.4, 0.8], [0.1, 0.2, 0.9])
    tr = run(inst, "pe", "known_ref", 0.0, 50_000, ell=2)
    assert (tr.pulls.argmax(axis=1) == 2).all() and (tr.pulls[:, :2] <= P.sample_size(0.25, 50_000)).all()


def test_pe_cs_finds_the_cheapest_acceptable_arm():
    inst = Instance.make("x", [0.3, 0.85, 0.9], [0.1, 0.2, 0.9])  # alpha 0.1: threshold 0.81, target arm 1
    tr = run(inst, "pe_cs", "subsidy", 0.1, 200_000)
    assert (tr.pulls.argmax(axis=1) == 1).all() and tr.stepped < 200_000
    best_is_cheapest = Instance.make("y", [0.9, 0.5, 0.3], [0.1, 0.2, 0.3])
    tr = run(best_is_cheapest, "pe_cs", "subsidy", 0.1, 20_000)
    assert (tr.pulls.argmax(axis=1) == 0).all()  # (the official code kept pulling arm 1 here)


@pytest.mark.parametrize("policy", ["cs_ucb", "cs_ts", "cs_etc"])
def test_baselines_settle_on_the_target_of_an_easy_instance(policy):
    cheap_bad = Instance.make("x", [0.2, 0.9], [0.1, 0.9])  # threshold 0.81: target arm 1
    tr = run(cheap_bad, policy, "subsidy", 0.1, 20_000, runs=10)
    assert (tr.pulls[:, 1] > 0.7 * 20_000).all()
    cheap_good = Instance.make("y", [0.85, 0.9], [0.1, 0.9])  # threshold 0.72: target arm 0
    tr = run(cheap_good, policy, "subsidy", 0.2, 20_000, runs=10)
    assert (tr.pulls[:, 0] > 0.7 * 20_000).all()


def test_cs_etc_explores_every_arm_tau_times():
    inst = Instance.make("x", [0.2, 0.5, 0.9], [0.1, 0.2, 0.9])
    pol = P.make_policy("cs_etc", inst.cost, 3000, run_keys(0, range(2)), 0.1, "subsidy", etc_factor=1.0)
    assert pol.tau == math.ceil(1000 ** (2 / 3))
    arms = [pol.select(t) for t in range(1, 3 * pol.tau + 1)]
    assert all((np.bincount(np.concatenate(arms), minlength=3) == 2 * pol.tau))


def test_known_reference_baselines_never_play_arms_dearer_than_ell():
    inst = Instance.make("x", [0.5, 0.6, 0.7, 0.99], [0.1, 0.2, 0.3, 0.9])
    for policy in ("cs_ucb", "cs_ts", "cs_etc"):
        tr = run(inst, policy, "known_ref", 0.0, 3000, ell=2, runs=4)
        assert (tr.pulls[:, 3] == 0).all()


def test_equal_cost_ties_are_broken_at_random():
    inst = Instance.make("x", [0.1, 0.9, 0.9], [0.1, 0.5, 0.5])
    tr = run(inst, "cs_ucb", "subsidy", 0.1, 2000, runs=40, record_arms=True)
    late = tr.arms[:, 1000:]
    share = (late == 1).mean()
    assert 0.3 < share < 0.7 and ((late == 1) | (late == 2)).mean() > 0.95


@pytest.mark.parametrize("policy,setting,ell", [("pe", "known_ref", 3), ("pe_asym", "known_ref", 3),
                                                ("pe_cs", "subsidy", None), ("cs_ucb", "subsidy", None),
                                                ("cs_ts", "subsidy", None), ("cs_etc", "known_ref", 3)])
def test_a_run_pulls_the_same_arms_alone_or_in_a_batch(policy, setting, ell):
    inst = Instance.make("x", [0.5, 0.62, 0.7, 0.75, 0.8], [0.1, 0.2, 0.3, 0.4, 0.9])
    batch = simulate(inst, policy, setting, 0.1, 3000, seed=5, runs=range(6), ell=ell, record_arms=True,
                     reward_model="uniform")
    for r in (0, 4):
        alone = simulate(inst, policy, setting, 0.1, 3000, seed=5, runs=[r], ell=ell, record_arms=True,
                         reward_model="uniform")
        assert np.array_equal(alone.arms[0], batch.arms[r])
        assert alone.cost[0, -1] == pytest.approx(batch.cost[r, -1], rel=1e-12)
        assert alone.quality[0, -1] == pytest.approx(batch.quality[r, -1], rel=1e-12)


@pytest.mark.parametrize("policy,setting,ell", [("pe", "known_ref", 2), ("pe_cs", "subsidy", None)])
def test_the_block_after_settling_equals_stepping_to_the_end(policy, setting, ell):
    inst = Instance.make("x", [0.3, 0.76, 0.8], [0.1, 0.2, 0.9])
    fast = run(inst, policy, setting, 0.1, 60_000, ell=ell, runs=8)
    slow = run(inst, policy, setting, 0.1, 60_000, ell=ell, runs=8, fast_forward=False)
    assert fast.stepped < slow.stepped == 60_000
    assert np.array_equal(fast.pulls, slow.pulls)
    assert np.allclose(fast.cost, slow.cost) and np.allclose(fast.quality, slow.quality)


def test_checkpoints_are_log_spaced_and_end_at_the_horizon():
    t = checkpoints(10**6, 40)
    assert t[0] == 1 and t[-1] == 10**6 and np.all(np.diff(t) > 0) and 30 <= len(t) <= 40


def test_unknown_policy_or_setting_is_refused():
    keys = run_keys(0, range(2))
    with pytest.raises(ValueError, match="unknown policy"):
        P.make_policy("magic", [0.1, 0.2], 100, keys, 0.1, "subsidy")
    with pytest.raises(ValueError, match="does not run in the subsidy setting"):
        P.make_policy("pe", [0.1, 0.2], 100, keys, 0.1, "subsidy")
    with pytest.raises(ValueError, match="reference arm ell"):
        P.make_policy("cs_ucb", [0.1, 0.2], 100, keys, 0.1, "known_ref", ell=5)
