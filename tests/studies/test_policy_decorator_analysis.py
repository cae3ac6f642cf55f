"""policy_decorator's claims from a metrics dict: each against its bound, including success rates
whose difference lands exactly on a bound (0.15 - 0.05 is 0.1 only within the shared claim tolerance)."""
import numpy as np

from iclr_ray.results import decode_image, encode_image
from iclr_ray.studies.policy_decorator import analysis
from iclr_ray.studies.policy_decorator.config import Config

CFG = Config()


def metrics(base, dec, unb, rl, jerks=(0.02, 0.1, 0.05)):
    def trial(variant, successes, jerk, alpha, H):
        return {"task": "t", "variant": variant, "alpha": alpha, "H": H,
                "curve": [{"env_steps": 1000 * i, "success": s, "jerk": jerk} for i, s in enumerate(successes)]}

    return {"tasks": {"t": {"base": {"success": base, "jerk": 0.01}}},
            "trials": [trial("decorator", dec, jerks[0], 0.1, 5000), trial("unbounded", unb, jerks[1], 1.0, 0),
                       trial("rl_scratch", rl, jerks[2], 1.0, 0)]}


def test_claims_hold_on_their_bounds_and_fail_beside_them():
    got = {c.id: c for c in analysis.claims(metrics(0.05, [0.05, 0.0, 0.15], [0.05, 0.0, 0.9], [0.0, 0.2]), CFG)}
    assert abs(got["t_improves"].measured - 0.1) < 1e-12 and got["t_improves"].holds  # exactly + 0.1
    assert abs(got["t_no_early_collapse"].measured + 0.05) < 1e-12 and got["t_no_early_collapse"].holds
    assert abs(got["t_unbounded_collapses"].measured + 0.05) < 1e-12 and not got["t_unbounded_collapses"].holds
    assert abs(got["t_smoother"].measured - 0.4) < 1e-12 and got["t_smoother"].holds
    m = metrics(0.3, [0.3, 0.15, 0.35], [0.3, 0.2, 1.0], [0.0], (0.2, 0.1, 0.1))
    got = {c.id: c for c in analysis.claims(m, CFG)}
    assert not got["t_improves"].holds and not got["t_no_early_collapse"].holds  # +0.05; -0.15
    assert got["t_unbounded_collapses"].holds and not got["t_smoother"].holds  # -0.1 exactly; jerk ratio 2


def test_an_expert_s_demonstrations_are_named_in_the_report_and_plotted():
    from iclr_ray.studies.policy_decorator import plots

    m = metrics(0.3, [0.3, 0.4], [0.3, 0.1], [0.0, 0.0])
    m["tasks"]["t"].update(demos={"episodes": 4, "successful": 3, "seeds": [0, 1, 2, 3]},
                           base={"success": 0.3, "jerk": 0.01, "kind": "mlp", "loss": [[1, 0.5], [2, 0.25]]},
                           env_steps=1000)
    assert "- t: 4 demonstrations (3 successful, seeds 0..3)" in analysis.report_md(m, CFG)
    assert set(plots.plot_all(m, CFG)) == {"success_curves", "action_jerk"}
    m["tasks"]["t"]["demos"]["expert_curve"] = [{"env_steps": 640, "return": -40.0},
                                                {"env_steps": 1280, "return": -12.5}]
    assert ("- t: 4 demonstrations of an expert trained here (1280 env steps of SAC on the dense reward, mean dense "
            "return -12.50 at the end) (3 successful, seeds 0..3)") in analysis.report_md(m, CFG)
    fig = plots.plot_all(m, CFG)["expert_training"]
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [640, 1280] and list(line.get_ydata()) == [-40.0, -12.5]


def test_the_base_s_frames_travel_in_the_metrics_as_png_and_draw_as_they_were():
    from iclr_ray.studies.policy_decorator import plots

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (24, 32, 3), dtype=np.uint8) for _ in range(3)]
    encoded = [encode_image(f) for f in frames]
    assert all(isinstance(e, str) for e in encoded) and all(np.array_equal(decode_image(e), f)
                                                            for e, f in zip(encoded, frames))
    m = metrics(0.3, [0.3, 0.4], [0.3, 0.1], [0.0, 0.0])
    m["tasks"]["t"].update(demos={"episodes": 4, "successful": 3, "seeds": [0, 1, 2, 3]}, frames=encoded,
                           base={"success": 0.3, "jerk": 0.01, "kind": "mlp", "loss": [[1, 0.5]]}, env_steps=1000)
    strip = plots.plot_all(m, CFG)["frames_t"]
    shown = [ax.get_images()[0].get_array() for ax in strip.axes]
    assert len(shown) == 3 and all(np.array_equal(np.asarray(a), f) for a, f in zip(shown, frames))
