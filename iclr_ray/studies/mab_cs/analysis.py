"""mab_cs's measurements from the simulations, the claims and the report tables (pure functions)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...claims import Claim
from ...markdown import fmt, table
from .bandit import Instance
from .config import Config

BASELINES = ("cs_ucb", "cs_ts", "cs_etc")


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _se(x: np.ndarray) -> float:
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def growth_exponent(times: np.ndarray, y: np.ndarray, since: float = 0.1) -> float:
    """Slope of log y against log t over the last part of a curve (t >= since * T): about 1 for
    regret that grows linearly, near 0 for regret that has stopped growing."""
    times, y = np.asarray(times, float), np.asarray(y, float)
    keep = (times >= since * times[-1]) & (y > 0)
    if y[-1] <= 0:
        return 0.0
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(times[keep]), np.log(y[keep]), 1)[0])


def fit_r2(x: np.ndarray, y: np.ndarray) -> float:
    """R^2 of the least-squares line y = a + b x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    b, a = np.polyfit(x, y, 1)
    ss = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - (a + b * x)) ** 2).sum()) / ss if ss > 0 else math.nan


def summarise(res: dict[str, Any], inst: Instance) -> dict[str, Any]:
    cost, quality = res["cost"], res["quality"]
    total = cost[:, -1] + quality[:, -1]
    out = {k: res[k] for k in ("experiment", "instance", "policy", "setting", "alpha", "T") if k in res}
    for k in ("ell", "gap"):
        if k in res:
            out[k] = res[k]
    out.update({
        "target": inst.target(res["setting"], res["alpha"], res.get("ell")),
        "runs": int(len(total)), "cost": float(cost[:, -1].mean()), "quality": float(quality[:, -1].mean()),
        "total": float(total.mean()), "total_se": _se(total), "total_worst": float(total.max()),
        "pulls": res["pulls"].mean(axis=0).tolist(),
        "pulls_per_s": res["steps"] / max(res["seconds"], 1e-9),
    })
    if res["experiment"] == "curves":
        out["times"] = res["times"].tolist()
        out["cost_curve"] = cost.mean(axis=0).tolist()
        out["quality_curve"] = quality.mean(axis=0).tolist()
        out["cost_exponent"] = growth_exponent(res["times"], cost.mean(axis=0))
        out["quality_exponent"] = growth_exponent(res["times"], quality.mean(axis=0))
    return out


def horizon_fit(rows: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """Final regret against T: R^2 of fits against log T and against T^(2/3), and the log-log slope
    between the two largest horizons."""
    pts = sorted((r["T"], r["total"]) for r in rows if r["policy"] == policy)
    T, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts])
    slope = math.log(y[-1] / y[-2]) / math.log(T[-1] / T[-2]) if y[-2] > 0 and y[-1] > 0 else math.nan
    return {"policy": policy, "T": T.tolist(), "total": y.tolist(), "r2_log": fit_r2(np.log(T), y),
            "r2_t23": fit_r2(T ** (2 / 3), y), "last_slope": slope}


def gap_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """PE's pulls of the cheaper, unacceptable arm against its gap: the slope of log pulls against
    log(1/gap) (the bound's 1/gap^2 is a slope of 2, its ln(T gap^2) factor bends it a little lower)."""
    pts = sorted((r["gap"], r["pulls"][0], r["T"]) for r in rows)
    gap, pulls = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    T = pts[0][2]
    slope = float(np.polyfit(np.log(1 / gap), np.log(pulls), 1)[0])
    predicted = 2 * np.log(T * gap ** 2) / gap ** 2
    return {"gap": gap.tolist(), "pulls": pulls.tolist(), "slope": slope, "n_of_gap": predicted.tolist()}


def worst_by_policy(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each policy's largest mean total regret over the sweep (and instances)."""
    out: dict[str, float] = {}
    for r in rows:
        out[r["policy"]] = max(out.get(r["policy"], 0.0), r["total"])
    return out


def analyse(cfg: Config, instances: dict[str, Instance], results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [summarise(r, instances[r["instance"]]) for r in results]
    by = {e: [r for r in rows if r["experiment"] == e] for e in ("curves", "horizons", "gaps", "alpha_sweep", "ell_sweep")}
    used = {r["instance"] for r in rows}
    steps = sum(r["steps"] for r in results)
    return {
        "engine": cfg.engine, "reward": cfg.reward,
        "instances": {n: {"mu": list(i.mu), "cost": list(i.cost), "labels": list(i.labels)}
                      for n, i in instances.items() if n in used},
        **by,
        "horizon_fits": [horizon_fit(by["horizons"], p) for p in ("pe", "pe_cs")] if by["horizons"] else [],
        "gap_fit": gap_fit(by["gaps"]) if len(by["gaps"]) >= 2 else None,
        "alpha_worst": worst_by_policy(by["alpha_sweep"]), "ell_worst": worst_by_policy(by["ell_sweep"]),
        "pulls": steps, "pulls_stepped": sum(r["stepped"] for r in results),
        "task_seconds": sum(r["seconds"] for r in results),
    }


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out = []
    for fit in metrics["horizon_fits"]:
        name = {"pe": "PE (known reference arm)", "pe_cs": "PE-CS (subsidised best reward)"}[fit["policy"]]
        out.append(Claim.at_most(
            f"{fit['policy']}_log_growth",
            f"{name}: cost + quality regret grows logarithmically in T, not like the T^(2/3) of the minimax "
            "bound: the log-log slope of final regret against T over the two largest horizons",
            fit["last_slope"], 1 / 3,
            f"T = {fit['T'][-2]:g} -> {fit['T'][-1]:g}: {fit['total'][-2]:.1f} -> {fit['total'][-1]:.1f}; "
            f"R^2 of a fit against log T {fit['r2_log']:.3f}, against T^(2/3) {fit['r2_t23']:.3f}"))
    curves = metrics["curves"]
    base = [(r[f"{kind}_exponent"], r["policy"], r["instance"], kind) for r in curves if r["policy"] in BASELINES
            for kind in ("cost", "quality") if _finite(r[f"{kind}_exponent"])]
    if base:
        e, p, inst, kind = max(base)
        out.append(Claim.at_least(
            "baseline_linear_somewhere",
            "The baselines (CS-UCB, CS-TS, CS-ETC) are unreliable: on some instance one of them has linear "
            "cost or quality regret (growth exponent of its mean regret over the last decade of t)",
            e, 0.8, f"largest: {p} {kind} regret on {inst}"))
    pecs = [(r[f"{kind}_exponent"], r["instance"], kind) for r in curves if r["policy"] == "pe_cs"
            for kind in ("cost", "quality") if _finite(r[f"{kind}_exponent"])]
    if pecs:
        e, inst, kind = max(pecs)
        out.append(Claim.at_most(
            "pe_cs_never_linear",
            "PE-CS has sublinear cost and quality regret on every instance of the same family (largest "
            "growth exponent over the last decade of t)", e, 0.5, f"largest: {kind} regret on {inst}"))
    gf = metrics.get("gap_fit")
    if gf:
        out.append(Claim.within(
            "pe_pulls_scale_inverse_gap_squared",
            "PE pulls a cheaper arm that misses the threshold by a gap about ln(T gap^2)/gap^2 times: "
            "slope of log pulls against log(1/gap)", gf["slope"], 1.5, 2.5,
            "pulls " + ", ".join(f"{p:.0f} at gap {g:g}" for g, p in zip(gf["gap"], gf["pulls"]))))
    for key, mine, others, what in (("alpha_worst", "pe_cs", BASELINES, "alpha"),
                                    ("ell_worst", "pe", ("cs_ucb",), "reference arm ell")):
        worst = metrics[key]
        rivals = {p: worst[p] for p in others if p in worst}
        if mine in worst and rivals:
            best_rival = min(rivals, key=rivals.get)
            ratio = worst[mine] / rivals[best_rival] if rivals[best_rival] > 0 else math.inf
            out.append(Claim.at_most(
                f"{mine}_most_reliable_over_{'alpha' if what == 'alpha' else 'ell'}",
                f"{'PE-CS' if mine == 'pe_cs' else 'PE'} has the smallest worst-case regret over the {what} sweep: "
                f"its worst mean cost + quality regret / the best baseline's worst", ratio, 1.0,
                f"{mine} {worst[mine]:.0f} vs {best_rival} {rivals[best_rival]:.0f}; "
                + ", ".join(f"{p} {v:.0f}" for p, v in sorted(worst.items()))))
    return out


def _table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    return table([*keys, "target", "cost regret", "quality regret", "total ± se"],
                 [[*(str(r.get(k)) for k in keys), str(r["target"]), f"{r['cost']:.1f}", f"{r['quality']:.1f}",
                   f"{r['total']:.1f} ± {r['total_se']:.1f}"] for r in rows])


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    parts = [f"Engine: {metrics['engine']}; rewards: {metrics['reward']}; {metrics['pulls']:,} arm pulls "
             f"({metrics['pulls_stepped']:,} stepped one by one, the rest after every run had settled) "
             f"in {metrics['task_seconds']:.0f} s of Ray task time."]
    for name, keys in (("curves", ["instance", "alpha", "policy"]), ("horizons", ["policy", "T"]),
                       ("gaps", ["gap", "T"]), ("alpha_sweep", ["instance", "alpha", "policy"]),
                       ("ell_sweep", ["instance", "ell", "policy"])):
        if metrics.get(name):
            parts.append(f"### {name}\n\n{_table(metrics[name], keys)}")
    if metrics.get("curves"):
        exps = table(["instance", "policy", "cost exponent", "quality exponent"],
                     [[r["instance"], r["policy"], fmt(r["cost_exponent"], ".2f"), fmt(r["quality_exponent"], ".2f")]
                      for r in metrics["curves"]])
        parts.append("### growth exponents over the last decade of t (1 = linear)\n\n" + exps)
    return "\n\n".join(parts)
