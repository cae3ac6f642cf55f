"""policy_decorator's claims from a metrics dict: each against its bound, including success rates
whose difference lands exactly on a bound (0.15 - 0.05 is 0.1 only within the shared claim tolerance)."""
from iclr_ray.studies.policy_decorator import analysis


def metrics(base, dec, unb, rl, jerks=(0.02, 0.1, 0.05)):
    def trial(variant, successes, jerk, alpha, H):
        return {"task": "t", "variant": variant, "alpha": alpha, "H": H,
                "curve": [{"env_steps": 1000 * i, "success": s, "jerk": jerk} for i, s in enumerate(successes)]}

    return {"tasks": {"t": {"base": {"success": base, "jerk": 0.01}}},
            "trials": [trial("decorator", dec, jerks[0], 0.1, 5000), trial("unbounded", unb, jerks[1], 1.0, 0),
                       trial("rl_scratch", rl, jerks[2], 1.0, 0)]}


def test_claims_hold_on_their_bounds_and_fail_beside_them():
    got = {c.id: c for c in analysis.claims(metrics(0.05, [0.05, 0.0, 0.15], [0.05, 0.0, 0.9], [0.0, 0.2]))}
    assert abs(got["t_improves"].measured - 0.1) < 1e-12 and got["t_improves"].holds  # exactly + 0.1
    assert abs(got["t_no_early_collapse"].measured + 0.05) < 1e-12 and got["t_no_early_collapse"].holds
    assert abs(got["t_unbounded_collapses"].measured + 0.05) < 1e-12 and not got["t_unbounded_collapses"].holds
    assert abs(got["t_smoother"].measured - 0.4) < 1e-12 and got["t_smoother"].holds
    got = {c.id: c for c in analysis.claims(metrics(0.3, [0.3, 0.15, 0.35], [0.3, 0.2, 1.0], [0.0], (0.2, 0.1, 0.1)))}
    assert not got["t_improves"].holds and not got["t_no_early_collapse"].holds  # +0.05; -0.15
    assert got["t_unbounded_collapses"].holds and not got["t_smoother"].holds  # -0.1 exactly; jerk ratio 2
