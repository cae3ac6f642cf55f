"""sphere_flow's claims on negative controls: each is fed what would make it false (the prediction
of another β, a β with no meta-stable state, a trend that is not there, shuffled labels) and must
come out False or inconclusive, never True. The inputs are real simulations (no Ray) where they
are cheap, and constructed rows where the claim is about a trend across a whole sweep."""
import math

import numpy as np
import pytest

from iclr_ray.studies.sphere_flow import analysis
from iclr_ray.studies.sphere_flow.config import Config
from iclr_ray.studies.sphere_flow.run import cells, common_of, simulate_cell

EMPTY = {"circle": {"betas": [2], "seeds": 1}, "metastable": {"betas": [2], "seeds": 1},
         "sphere": {"betas": [3], "seeds": 1}, "metastable_n": {"ns": [100, 200], "seeds": 2}, "pde": {"seeds": 1}}


def simulate(**sections) -> dict:
    """The metrics of a run of only the experiments given (the others left out), without Ray."""
    cfg = Config(**{**EMPTY, **sections})
    todo = [c for c in cells(cfg) if c["experiment"] in sections]
    common = common_of(cfg)
    return analysis.analyse(cfg, todo, [simulate_cell(c, common) for c in todo])


def verdict(metrics: dict, claim_id: str, cfg: Config | None = None):
    found = {c.id: c for c in analysis.claims(metrics, cfg or Config())}
    return found[claim_id]


def relabel(rows: list[dict], beta: float) -> list[dict]:
    return [{**r, "beta": beta} for r in rows]


def constructed(**experiments) -> dict:
    """Metrics holding only the rows given (the tables the claims read are rebuilt from them)."""
    m = {"circle": [], "sphere": [], "metastable": [], "metastable_n": [], "pde": [], "threshold": 0.2,
         "separation_rule": 1.1, "circle_table": [], "sphere_table": [],
         "numerics": {"energy_max_drop": 0.0, "max_defect": 0.0, "pde_mass_drift": 0.0, "pde_courant_max": 0.0}}
    m.update(experiments)
    m["metastable_n_table"] = analysis.metastable_n_table(m["metastable_n"])
    return m


@pytest.fixture(scope="module")
def circle_beta2():
    """β = 2 (k* = 2, the best-separated β): 8 seeds of 500 tokens through the linear phase."""
    return simulate(circle={"betas": [2], "seeds": 8, "n": 500, "forms": ["sa"], "after_linear": 0.0})


def test_dominant_mode_fails_against_another_betas_prediction(circle_beta2):
    m = circle_beta2
    assert verdict(m, "dominant_mode_circle").measured >= 0.5  # the real labels: k* = 2 mostly wins
    # the same cells judged against β = 5's k* = 3 (also separated, so they stay in the claim)
    wrong = {**m, "circle": relabel(m["circle"], 5.0)}
    c = verdict(wrong, "dominant_mode_circle")
    assert c.holds is False and c.measured < 0.3 and c.n == 8


def test_dominant_mode_on_the_sphere_fails_against_another_betas_prediction():
    m = simulate(sphere={"betas": [3], "seeds": 6, "n": 300, "after_linear": 0.0})
    assert {r["dominant"] for r in m["sphere"]} <= {1, 2, 3}
    c = verdict({**m, "sphere": relabel(m["sphere"], 10.0)}, "dominant_mode_sphere")  # k* = 4 there
    assert c.holds is False and c.measured == 0.0


def test_growth_rate_fails_with_shuffled_beta_labels():
    m = simulate(circle={"betas": [2, 8], "seeds": 4, "n": 500, "forms": ["usa"], "after_linear": 0.0})
    right = verdict(m, "growth_rate_particles")
    assert right.holds is True and right.ci[1] < 0.1
    swap = {2.0: 8.0, 8.0: 2.0}
    shuffled = {**m, "circle": [{**r, "beta": swap[r["beta"]]} for r in m["circle"]]}
    c = verdict(shuffled, "growth_rate_particles")
    assert c.holds is False and c.ci[0] > 0.5


def test_pde_growth_and_fig4_fail_against_another_betas_prediction():
    m = simulate(pde={"grid": 999, "seeds": 2, "horizon": 9.3})
    assert verdict(m, "growth_rate_pde").holds is True
    wrong = {**m, "pde": relabel(m["pde"], 2.0)}  # k* = 2 and its rate, for a run at β = 5
    assert verdict(wrong, "growth_rate_pde").holds is False
    assert {p["pattern"] for p in m["pde"]} != {2}
    c = verdict(wrong, "fig4_periodic")
    assert c.holds is False and c.measured == 0.0 and c.ci[1] < 0.8


def test_metastable_plateau_fails_where_no_meta_stable_state_exists():
    """At β = 1 (k* = 1) the tokens go straight to one cluster: no plateau at all."""
    m = simulate(metastable={"betas": [1], "seeds": 4, "n": 500, "horizon": 100.0, "snapshots": 0})
    assert all(r["plateau"]["formed"] and r["plateau"]["count"] == 1 for r in m["metastable"])
    c = verdict(m, "metastable_plateau")
    assert c.holds is False and c.measured == 0.0


def _meta_rows(plateaus: dict[float, list[float]]) -> list[dict]:
    return [{"experiment": "metastable", "beta": b, "d": 2, "form": "usa", "seed": s, "k_star": 2,
             "plateau": {"formed": True, "plateau": p, "t_form": 5.0, "count": 2, "merged": True, "censored": False}}
            for b, ps in plateaus.items() for s, p in enumerate(ps)]


def test_plateau_trend_is_not_found_where_there_is_none():
    rng = np.random.default_rng(0)
    betas = [2.0, 3.0, 4.0, 5.0, 6.0]
    grows = {b: list(np.exp(b) * rng.lognormal(0, 0.3, 6)) for b in betas}
    assert verdict(constructed(metastable=_meta_rows(grows)), "plateau_grows_with_beta").holds is True
    flat = {b: list(rng.lognormal(3, 1.0, 6)) for b in betas}  # no effect of β
    assert verdict(constructed(metastable=_meta_rows(flat)), "plateau_grows_with_beta").holds is not True
    labels = [betas[i] for i in (1, 4, 2, 0, 3)]  # the growing plateaus under a shuffle of rank correlation 0
    shuffled = {b: grows[old] for b, old in zip(labels, betas)}
    c = verdict(constructed(metastable=_meta_rows(shuffled)), "plateau_grows_with_beta")
    assert c.holds is not True and c.measured < 0.8


def _n_rows(times: dict[int, list[float]]) -> list[dict]:
    return [{"experiment": "metastable_n", "beta": 2.0, "d": 2, "form": "usa", "n": n, "seed": s, "k_star": 2,
             "t_linear": 3.0, "dominant": 2, "plateau": {"formed": True, "count": 2}, "t_below": 3.0 + t,
             "meta_time": t, "censored": False} for n, ts in times.items() for s, t in enumerate(ts)]


def test_growth_with_n_is_not_found_where_there_is_none():
    rng = np.random.default_rng(1)
    ns = [250, 1000, 4000, 16000]
    noise = list(rng.normal(15.0, 6.0, 16))
    grows = {n: [t + 2.0 * math.log(n) for t in rng.permutation(noise)] for n in ns}
    c = verdict(constructed(metastable_n=_n_rows(grows)), "metastable_grows_with_n")
    assert c.holds is True and c.n == 64
    same = {n: list(rng.permutation(noise)) for n in ns}  # every n the same times: no effect
    c = verdict(constructed(metastable_n=_n_rows(same)), "metastable_grows_with_n")
    assert c.holds is None and c.ci[0] < 0 < c.ci[1] and c.measured == pytest.approx(0.0, abs=1e-12)
    shrinks = {n: [t - 2.0 * math.log(n) for t in rng.permutation(noise)] for n in ns}
    assert verdict(constructed(metastable_n=_n_rows(shrinks)), "metastable_grows_with_n").holds is False
    labels = [ns[i] for i in (1, 3, 0, 2)]  # the growing times under a shuffle of rank correlation 0
    c = verdict(constructed(metastable_n=_n_rows({n: grows[old] for n, old in zip(labels, ns)})),
                "metastable_grows_with_n")
    assert c.holds is not True


def test_checks_flag_a_broken_integration():
    m = constructed()
    m["numerics"] = {"energy_max_drop": 1e-3, "max_defect": 0.0, "pde_mass_drift": 0.0, "pde_courant_max": 0.0}
    c = verdict(m, "energy_nondecreasing")
    assert c.check and c.holds is False
    assert verdict(constructed(), "energy_nondecreasing").holds is True
