"""cluspro's claims on hand-made metrics: a real gain holds, no gain (the negative control) does
not, and the control world separates a multimodal gain from a gain everywhere."""
import numpy as np

from iclr_ray.studies.cluspro import analysis as A

KEYS = ("S", "U", "HM", "AUC", "HMv")


def _metrics(gain_mm, gain_um, n=6, seed=0):
    """Per-seed metrics where ClusPro = CE + gain (+ small noise) in each world; single = CE."""
    rng = np.random.default_rng(seed)
    res = {}
    for w, g in (("multimodal", gain_mm), ("unimodal", gain_um)):
        base = {k: rng.uniform(0.4, 0.7, n) for k in KEYS}
        res[w] = {"ce": {k: base[k].tolist() for k in KEYS},
                  "single": {k: (base[k] + rng.normal(0, 0.003, n)).tolist() for k in KEYS},
                  "cluspro": {k: (base[k] + g + rng.normal(0, 0.003, n)).tolist() for k in KEYS}}
        for m in res[w].values():
            m.update({f"ow_{k}": m[k] for k in KEYS})
            m.update({f"ow_nofeas_{k}": m[k] for k in KEYS})
            m["curve"] = [[1.0, 0.0], [0.0, 1.0]]
    return {"worlds": ["multimodal", "unimodal"], "methods": ["ce", "single", "cluspro"], "seeds": list(range(n)),
            "results": res, "kind": "digits", "k": 3, "samples": {"train": 1, "valid": 1, "test": 1},
            "pairs": {"seen": 42, "valid_unseen": 6, "test_unseen": 12}, "params": {"ce": 10, "single": 10,
                                                                                     "cluspro": 10}}


def _verdicts(m):
    return {c.id: c.holds for c in A.claims(m)}


def test_a_multimodal_only_gain_holds_everywhere():
    v = _verdicts(_metrics(0.05, 0.0))
    assert all(v[f"beats_{b}_{k}"] is True for b in ("ce", "single") for k in ("u", "hm", "auc", "hmv"))
    assert v["gain_needs_multimodality"] is True and v["no_test_time_parameters"] is True


def test_negative_control_no_gain_holds_nowhere():
    v = _verdicts(_metrics(0.0, 0.0))
    assert not any(v[f"beats_{b}_{k}"] for b in ("ce", "single") for k in ("u", "hm", "auc", "hmv"))
    assert not v["gain_needs_multimodality"]
    v = _verdicts(_metrics(-0.05, 0.0))
    assert all(v[f"beats_ce_{k}"] is False for k in ("u", "hm", "auc"))


def test_a_gain_in_both_worlds_is_not_credited_to_multimodality():
    v = _verdicts(_metrics(0.05, 0.05))
    assert v["beats_ce_auc"] is True and not v["gain_needs_multimodality"]


def test_extra_parameters_fail_the_check():
    m = _metrics(0.05, 0.0)
    m["params"]["cluspro"] = 11
    c = {c.id: c for c in A.claims(m)}["no_test_time_parameters"]
    assert c.check and c.holds is False


def test_report_has_both_worlds_and_the_gains():
    md = A.report_md(_metrics(0.05, 0.0))
    assert "**multimodal** attributes" in md and "**unimodal** attributes" in md
    assert "Paired gain over CE" in md and "+0.05" in md


def test_the_hsic_arm_is_claimed_on_its_own_and_can_fail():
    """ClusPro with HSIC gets its own claims: a gain holds them; an HSIC arm no better than CE (the
    negative control) fails them while the plain arm's still hold."""
    m = _metrics(0.05, 0.0)
    for w in m["worlds"]:
        m["results"][w]["cluspro_hsic"] = {k: list(v) for k, v in m["results"][w]["cluspro"].items()}
    m["methods"].append("cluspro_hsic")
    v = _verdicts(m)
    assert all(v[f"hsic_beats_{b}_{k}"] is True for b in ("ce", "single") for k in ("u", "hm", "auc"))
    for w in m["worlds"]:
        m["results"][w]["cluspro_hsic"] = {k: list(v) for k, v in m["results"][w]["ce"].items()}
    v = _verdicts(m)
    assert not any(v[f"hsic_beats_ce_{k}"] for k in ("u", "hm", "auc")) and v["beats_ce_auc"] is True


def test_the_paper_preset_world_gets_the_claims():
    """The official data (the paper preset) is claimed on as the multimodal world is."""
    m = _metrics(0.05, 0.0)
    m["results"] = {"official": m["results"]["multimodal"]}
    m["worlds"] = ["official"]
    c = {c.id: c for c in A.claims(m)}
    assert c["beats_ce_auc"].holds is True and c["beats_ce_auc"].statement.startswith("The official data")
    assert "gain_needs_multimodality" not in c
