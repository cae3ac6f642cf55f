"""ctrl_u's claims on hand-made metrics: real gains hold; the negative controls (Ctrl-U's images
scored as the reward arm's, which is what Δt = 0 makes of it, or as ControlNet's) hold no claim; a
Fréchet distance well above ControlNet's is reported as a loss of quality."""
import numpy as np

from iclr_ray.studies.ctrl_u import analysis as A


def _metrics(gain=0.05, hack=0.08, fid_ratio=1.0, n=5, seed=0):
    rng = np.random.default_rng(seed)
    seeds = list(range(n))
    scores = {m: {} for m in ("base", "controlnet", "reward", "ctrl_u")}
    for s in seeds:
        base = rng.uniform(0.4, 0.5)
        fid = rng.uniform(2.0, 3.0)
        noise = lambda: rng.normal(0, 0.004)  # noqa: E731
        scores["base"][str(s)] = {"oracle_miou": base - 0.01, "reward_miou": base - 0.02, "fid": fid + 0.1}
        scores["controlnet"][str(s)] = {"oracle_miou": base, "reward_miou": base - 0.02, "fid": fid}
        scores["reward"][str(s)] = {"oracle_miou": base + gain / 2 + noise(), "reward_miou": base + gain / 2 + hack,
                                    "fid": fid * 1.05}
        scores["ctrl_u"][str(s)] = {"oracle_miou": base + gain + noise(), "reward_miou": base + gain + hack / 4,
                                    "fid": fid * fid_ratio + noise()}
    scores["ctrl_u_dt100"] = {k: dict(v) for k, v in scores["ctrl_u"].items()}
    curves = {a: {str(s): [[10, 0.5, 0.4, 0.01 if a.startswith("ctrl_u") else 0.0]] for s in seeds}
              for a in scores if a != "base"}
    return {"arms": ["controlnet", "reward", "ctrl_u"], "ablation": {"ctrl_u_dt100": 100}, "dt": 1, "seeds": seeds,
            "scores": scores, "curves": curves,
            "segmenters": {"reward": {"miou_real": 0.6, "miou_noisy": 0.5, "final_loss": 0.9},
                           "oracle": {"miou_real": 0.95, "miou_noisy": 0.93, "final_loss": 0.1}},
            "fid_real_halves": 0.5, "images": 256, "side": 32, "sizes": {"train": 1, "test": 1, "reward_train": 1}}


def _verdicts(m):
    return {c.id: c.holds for c in A.claims(m) if not c.check}


def test_real_gains_hold():
    m = _metrics()
    v = _verdicts(m)
    assert set(v) == {"ctrl_u_beats_controlnet", "ctrl_u_keeps_quality", "ctrl_u_beats_reward",
                      "ctrl_u_less_reward_hacking", "reward_tuning_raises_reward"}
    assert all(h is True for h in v.values()), v
    checks = {c.id: c.holds for c in A.claims(m) if c.check}
    assert checks == {"oracle_stronger_than_reward": True}
    md = A.report_md(m)
    assert "Generated images" in md and "Segmenters" in md and "| ctrl_u_dt100 | 100 |" in md
    assert A.mean_uncertainty(m, "ctrl_u") == 0.01 and np.isnan(A.mean_uncertainty(m, "reward"))


def test_negative_control_dt0_ctrl_u_is_the_reward_arm():
    m = _metrics()
    m["scores"]["ctrl_u"] = {s: dict(v) for s, v in m["scores"]["reward"].items()}  # Δt = 0: the same model
    v = _verdicts(m)
    assert v["ctrl_u_beats_reward"] is not True and v["ctrl_u_less_reward_hacking"] is not True


def test_negative_control_no_gain_over_controlnet():
    m = _metrics(gain=0.0)
    m["scores"]["ctrl_u"] = {s: dict(v) for s, v in m["scores"]["controlnet"].items()}
    assert _verdicts(m)["ctrl_u_beats_controlnet"] is not True


def test_losses_are_reported_as_false():
    v = _verdicts(_metrics(gain=-0.1, hack=-0.1, fid_ratio=1.3))
    assert v["ctrl_u_beats_controlnet"] is False and v["ctrl_u_beats_reward"] is False
    assert v["ctrl_u_keeps_quality"] is False and v["ctrl_u_less_reward_hacking"] is False


def test_negative_control_a_reward_arm_that_did_not_move():
    """Reward fine-tuning that left the generator where ControlNet is: its reward claim fails."""
    m = _metrics()
    m["scores"]["reward"] = {s: dict(v) for s, v in m["scores"]["controlnet"].items()}
    assert _verdicts(m)["reward_tuning_raises_reward"] is not True


def test_the_claims_read_the_ctrl_u_arm_chosen_on_validation():
    """With Δt chosen on validation the claims read that arm: an ablation arm that carries the gain
    holds them where the post.dt arm (a copy of the reward arm) would not; a chosen arm no better
    than the reward arm (the negative control) holds neither."""
    m = _metrics()
    m["scores"]["ctrl_u_dt100"] = {s: dict(v) for s, v in m["scores"]["ctrl_u"].items()}
    m["scores"]["ctrl_u"] = {s: dict(v) for s, v in m["scores"]["reward"].items()}
    assert _verdicts(m)["ctrl_u_beats_reward"] is not True  # no choice recorded: post.dt's arm
    m["dt_choice"] = {"on": "valid", "chosen": "ctrl_u_dt100", "dt": 100,
                      "valid": {"ctrl_u": {"0": 0.2}, "ctrl_u_dt100": {"0": 0.3}}}
    c = {c.id: c for c in A.claims(m)}
    assert c["ctrl_u_beats_reward"].holds is True and "Δt = 100, chosen on validation" in c["ctrl_u_beats_reward"].statement
    assert "validation masks" in A.report_md(m)
    m["dt_choice"]["chosen"] = "ctrl_u"
    assert _verdicts(m)["ctrl_u_beats_reward"] is not True
