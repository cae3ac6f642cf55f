"""mab_cs's RLlib engine on the session's Ray cluster: each policy rolled out by a real RLlib
Algorithm (env runners, the policy in the RLModule) pulls exactly the arms the vectorised engine
pulls on the same runs, and ends with the same statistics."""
import numpy as np
import pytest

pytest.importorskip("ray.rllib")
pytest.importorskip("gymnasium")

from iclr_ray.studies.mab_cs.bandit import Instance  # noqa: E402
from iclr_ray.studies.mab_cs.engine import simulate  # noqa: E402
from iclr_ray.studies.mab_cs.run import simulate_rllib  # noqa: E402

pytestmark = pytest.mark.slow
INST = Instance.make("x", [0.5, 0.62, 0.7, 0.75, 0.8], [0.1, 0.2, 0.3, 0.4, 0.9])


@pytest.mark.parametrize("policy,setting,ell,env_runners", [("pe_cs", "subsidy", None, 2), ("cs_ts", "subsidy", None, 0),
                                                            ("pe", "known_ref", 3, 1)])
def test_rllib_engine_pulls_the_vectorised_engines_arms(ray_cluster, policy, setting, ell, env_runners):
    runs, T = [0, 3, 4], 600
    kw = dict(ell=ell, reward_model="uniform", points=10)
    vec = simulate(INST, policy, setting, 0.1, T, seed=2, runs=runs, record_arms=True, **kw)
    rl = simulate_rllib(INST, policy, setting, 0.1, T, seed=2, runs=runs, env_runners=env_runners, **kw)
    assert rl.arms.shape == (3, T) and np.array_equal(rl.arms, vec.arms)
    assert np.array_equal(rl.pulls, vec.pulls)  # the statistics completed from the sampled episodes
    assert np.allclose(rl.cost, vec.cost) and np.allclose(rl.quality, vec.quality)
    assert len(np.unique(rl.arms)) > 1  # it did explore


def test_a_whole_run_on_the_rllib_engine_measures_what_the_vectorised_one_does(ray_cluster, tmp_path):
    import json

    from iclr_ray import cli

    tiny = ["curves.T=300", "horizons.horizons=[100, 300, 1000]", "gaps.T=2000", "alpha_sweep.T=300",
            "ell_sweep.T=300", "rllib_env_runners=0"]
    results = {}
    for engine in ("vectorised", "rllib"):
        args = [x for s in [*tiny, f"engine={engine}"] for x in ("--set", s)]
        assert cli.main(["run", "mab_cs", "--preset", "smoke", "--out", str(tmp_path / engine), *args]) == 0
        results[engine] = json.loads((tmp_path / engine / "result.json").read_text())
    vec, rl = (results[e]["metrics"] for e in ("vectorised", "rllib"))
    assert rl["engine"] == "rllib"
    for experiment in ("curves", "horizons", "gaps", "alpha_sweep", "ell_sweep"):
        assert [r["total"] for r in rl[experiment]] == pytest.approx([r["total"] for r in vec[experiment]], rel=1e-9)
        assert [r["pulls"] for r in rl[experiment]] == [r["pulls"] for r in vec[experiment]]
        assert [r["runs_pulls"] for r in rl[experiment]] == [r["runs_pulls"] for r in vec[experiment]]  # run by run
        for a, b in zip(rl[experiment], vec[experiment]):
            assert np.allclose(a["runs_quality"], b["runs_quality"], rtol=1e-9)
    for a, b in zip(results["rllib"]["claims"], results["vectorised"]["claims"], strict=True):
        assert a["id"] == b["id"] and a["holds"] == b["holds"] and a["n"] == b["n"]
        for x, y in zip([a["measured"], *(a["ci"] or [])], [b["measured"], *(b["ci"] or [])], strict=True):
            assert (x is None and y is None) or x == pytest.approx(y, rel=1e-9)  # None: not measured at this size
