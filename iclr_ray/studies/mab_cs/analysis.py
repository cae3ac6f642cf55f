"""mab_cs's measurements from the simulations, the claims and the report tables (pure functions).

The unit every interval counts is the run. Run r draws the same rewards in every cell (counter-based
randomness keyed by the run's index), so runs are paired across policies, horizons, gaps, alphas
and reference arms (common random numbers): every bootstrap resamples run indices, the same ones in
every cell, and recomputes the whole statistic (means over runs, then the slope, ratio or maximum).
Each cell keeps its runs' final cost and quality regret (and pull counts), the curves cells also
the regret at three steps after the policy's exploration, so the claims recompute from result.json.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...claims import Claim, Estimate, bootstrap, exact
from ...markdown import fmt, table
from .bandit import Instance
from .config import Config
from .policies import exploration_end, pe_bound

BASELINES = ("cs_ucb", "cs_ts", "cs_etc")
KINDS = ("cost", "quality")


def _se(x: np.ndarray) -> float:
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def k_play(cost: list[float], setting: str, ell: int | None) -> int:
    """Arms a policy may play: all of them, or with a known reference arm those no dearer than ell."""
    return len(cost) if setting == "subsidy" else int(sum(c <= cost[ell] for c in cost))


def window_marks(t_explore: int, T: int) -> list[int]:
    """t0 (the end of a policy's exploration, at least step 1) and t1 (a tenth of the remaining
    horizon later): the run records regret there, beside its log-spaced checkpoints."""
    t0 = min(max(int(t_explore), 1), T)
    return [t0, min(T, t0 + math.ceil((T - t0) / 10))]


def window(times: np.ndarray, t_explore: int) -> list[int]:
    """Three checkpoints after a policy's exploration: t0 and t1 of :func:`window_marks` (or the
    first checkpoints at or after them) and T. Regret growth over [t0, T] against [t0, t1]
    measures the policy's behaviour once it explores no more."""
    times = np.asarray(times)
    T = int(times[-1])
    m0, m1 = window_marks(t_explore, T)
    t0 = int(times[np.searchsorted(times, m0)])
    t1 = int(times[min(np.searchsorted(times, max(m1, t0)), len(times) - 1)])
    return [t0, t1, T]


def post_exploration_exponent(w: list[int], mean_regret: np.ndarray) -> float:
    """Growth exponent of regret accrued after exploration: ln(dR(T) / dR(t1)) / ln((T - t0) /
    (t1 - t0)) with dR(t) = R(t) - R(t0), for mean regret at the window's three steps: 1 when it
    grows linearly, 0 when it has stopped (or nothing accrues after t0); nan when the window is empty."""
    t0, t1, T = w
    d1, dT = mean_regret[1] - mean_regret[0], mean_regret[2] - mean_regret[0]
    if not t0 < t1 < T:
        return math.nan  # no horizon left after the exploration to measure
    if dT <= 0:
        return 0.0
    if d1 <= 0:
        return math.nan  # regret that only starts after t1: faster than any power of the window
    return float(math.log(dT / d1) / math.log((T - t0) / (t1 - t0)))


def summarise(res: dict[str, Any], inst: Instance, etc_factor: float = 5.0) -> dict[str, Any]:
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
        "runs_cost": cost[:, -1].tolist(), "runs_quality": quality[:, -1].tolist(), "runs_pulls": res["pulls"].tolist(),
        "pulls_per_s": res["steps"] / max(res["seconds"], 1e-9),
    })
    if res["experiment"] == "curves":
        times = np.asarray(res["times"])
        t_e = exploration_end(res["policy"], k_play(list(inst.cost), res["setting"], res.get("ell")), res["T"], etc_factor)
        w = window(times, t_e)
        at = np.searchsorted(times, w)
        out["times"] = times.tolist()
        out["cost_curve"] = cost.mean(axis=0).tolist()
        out["quality_curve"] = quality.mean(axis=0).tolist()
        out["window"] = {"explore_end": t_e, "t": w, "cost": cost[:, at].tolist(), "quality": quality[:, at].tolist()}
        for kind, arr in (("cost", cost), ("quality", quality)):
            out[f"{kind}_exponent"] = post_exploration_exponent(w, arr[:, at].mean(axis=0))
    return out


def analyse(cfg: Config, instances: dict[str, Instance], results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [summarise(r, instances[r["instance"]], cfg.etc_factor) for r in results]
    by = {e: [r for r in rows if r["experiment"] == e] for e in ("curves", "horizons", "gaps", "alpha_sweep", "ell_sweep")}
    used = {r["instance"] for r in rows}
    steps = sum(r["steps"] for r in results)
    return {
        "engine": cfg.engine, "reward": cfg.reward,
        "instances": {n: {"mu": list(i.mu), "cost": list(i.cost), "labels": list(i.labels)}
                      for n, i in instances.items() if n in used},
        **by,
        "horizon_fits": [horizon_fit(by["horizons"], p) for p in ("pe", "pe_cs")
                         if sum(r["policy"] == p for r in by["horizons"]) >= 2],
        "gap_fit": gap_fit(by["gaps"]) if len(by["gaps"]) >= 2 else None,
        "pulls": steps, "pulls_stepped": sum(r["stepped"] for r in results),
        "task_seconds": sum(r["seconds"] for r in results),
    }


# --- statistics of the runs (each takes per-run arrays, rows = runs, so a bootstrap can resample them)


def runs_of(rows: list[dict[str, Any]], field: str = "total") -> np.ndarray:
    """(runs x cells) per-run values of ``field`` ("total", "cost", "quality") of the cells in
    ``rows``, in order; cells are cut to the fewest runs (they all share run indices 0..R-1)."""
    cols = []
    for r in rows:
        c, q = np.asarray(r["runs_cost"], float), np.asarray(r["runs_quality"], float)
        cols.append({"cost": c, "quality": q, "total": c + q}[field])
    R = min(len(c) for c in cols)
    return np.stack([c[:R] for c in cols], axis=1)


def _slope_of_means(x: np.ndarray) -> Callable[[np.ndarray], float]:
    """log-log slope of the last two columns' means against x[-2], x[-1]."""
    def stat(v: np.ndarray) -> float:
        a, b = v[:, -2].mean(), v[:, -1].mean()
        return math.log(b / a) / math.log(x[-1] / x[-2]) if a > 0 and b > 0 else math.nan
    return stat


def horizon_fit(rows: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """Final regret against T: R^2 of fits against log T and against T^(2/3), and the log-log slope
    between the two largest horizons."""
    cells = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["T"])
    T, y = np.array([r["T"] for r in cells], float), np.array([r["total"] for r in cells])
    return {"policy": policy, "T": T.tolist(), "total": y.tolist(), "cost": [r["cost"] for r in cells],
            "quality": [r["quality"] for r in cells], "r2_log": fit_r2(np.log(T), y), "r2_t23": fit_r2(T ** (2 / 3), y),
            "last_slope": _slope_of_means(T)(runs_of(cells))}


def fit_r2(x: np.ndarray, y: np.ndarray) -> float:
    """R^2 of the least-squares line y = a + b x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    b, a = np.polyfit(x, y, 1)
    ss = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - (a + b * x)) ** 2).sum()) / ss if ss > 0 else math.nan


def log_growth(rows: list[dict[str, Any]], policy: str) -> Estimate:
    """Log-log slope of mean final regret between the two largest horizons, bootstrap over runs."""
    cells = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["T"])
    return bootstrap(runs_of(cells), _slope_of_means(np.array([r["T"] for r in cells], float)))


def bounds(rows: list[dict[str, Any]], instances: dict[str, Any]) -> list[dict[str, float]]:
    """PE's instance-dependent bound (policies.pe_bound) for each of ``rows``' cells."""
    return [pe_bound(instances[r["instance"]]["mu"], instances[r["instance"]]["cost"], r["alpha"], r["ell"], r["T"])
            for r in rows]


def within_bound(rows: list[dict[str, Any]], instances: dict[str, Any], kind: str) -> Estimate:
    """The largest, over horizons, of mean ``kind`` regret / PE's bound at that horizon: at most 1
    when the regret stays within the bound. Bootstrap over runs."""
    cells = sorted(rows, key=lambda r: r["T"])
    B = np.array([b[kind] for b in bounds(cells, instances)])
    use = B > 0  # a zero bound (the target is ell: PE pays no cost regret) has nothing to divide

    def stat(v: np.ndarray) -> float:
        if not use.any():
            return 0.0 if not v.any() else math.inf
        return float((v[:, use].mean(axis=0) / B[use]).max())

    return bootstrap(runs_of(cells, kind), stat)


def _exponent_units(rows: list[dict[str, Any]]) -> np.ndarray:
    """(runs x cells x kinds x 3) regret at each cell's post-exploration window."""
    R = min(r["runs"] for r in rows)
    return np.stack([np.stack([np.asarray(r["window"][k], float)[:R] for k in KINDS], axis=1) for r in rows], axis=1)


def largest_exponent(rows: list[dict[str, Any]]) -> tuple[Estimate, str]:
    """The largest post-exploration growth exponent of mean cost or quality regret over the cells
    in ``rows``, bootstrap over runs (the maximum recomputed in every resample), and where it is."""
    if not rows:
        return Estimate(math.nan, (-math.inf, math.inf), 0), "no cells"
    windows = [r["window"]["t"] for r in rows]

    def exps(v: np.ndarray) -> np.ndarray:
        m = v.mean(axis=0)  # cells x kinds x 3
        return np.array([[post_exploration_exponent(w, m[c, k]) for k in range(len(KINDS))] for c, w in enumerate(windows)])

    def stat(v: np.ndarray) -> float:
        e = exps(v)
        return float(np.max(e)) if np.isfinite(e).all() else math.nan

    units = _exponent_units(rows)
    e = exps(units)
    c, k = np.unravel_index(np.nanargmax(e), e.shape) if np.isfinite(e).any() else (0, 0)
    r = rows[c]
    where = (f"{r['policy']} {KINDS[k]} regret on {r['instance']} (alpha {r['alpha']:g}), after its exploration "
             f"ended at t = {r['window']['explore_end']}: window {r['window']['t']}")
    return bootstrap(units, stat), where


def gap_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """PE's pulls of the cheaper, unacceptable arm against its gap: the slope of log mean pulls
    against log(1/gap) (the bound's 1/gap^2 is a slope of 2, its ln(T gap^2) factor bends it a
    little lower)."""
    cells = sorted(rows, key=lambda r: r["gap"])
    gap = np.array([r["gap"] for r in cells])
    T = cells[0]["T"]
    return {"gap": gap.tolist(), "pulls": [r["pulls"][0] for r in cells], "slope": gap_slope(cells).value,
            "n_of_gap": (2 * np.log(T * gap ** 2) / gap ** 2).tolist()}


def gap_slope(rows: list[dict[str, Any]]) -> Estimate:
    """Slope of log mean pulls of arm 0 against log(1/gap), bootstrap over runs."""
    cells = sorted(rows, key=lambda r: r["gap"])
    x = np.log(1.0 / np.array([r["gap"] for r in cells]))
    R = min(r["runs"] for r in cells)
    pulls = np.stack([np.asarray(r["runs_pulls"], float)[:R, 0] for r in cells], axis=1)

    def stat(v: np.ndarray) -> float:
        m = v.mean(axis=0)
        return float(np.polyfit(x, np.log(m), 1)[0]) if (m > 0).all() else math.nan

    return bootstrap(pulls, stat)


def reliability(rows: list[dict[str, Any]], mine: str, rivals: tuple[str, ...]) -> tuple[Estimate, dict[str, float]]:
    """``mine``'s worst mean total regret over the sweep's cells / the smallest worst among the
    rivals (each rival's own worst cell), bootstrap over runs (the worst cells re-found in every
    resample); and each policy's worst, measured."""
    pols = [mine] + [p for p in rivals if any(r["policy"] == p for r in rows)]
    cells = [r for r in rows if r["policy"] in pols]
    units = runs_of(cells)
    owner = np.array([pols.index(r["policy"]) for r in cells])

    def worsts(v: np.ndarray) -> np.ndarray:
        m = v.mean(axis=0)
        return np.array([m[owner == i].max() for i in range(len(pols))])

    def stat(v: np.ndarray) -> float:
        w = worsts(v)
        return float(w[0] / w[1:].min()) if len(w) > 1 and w[1:].min() > 0 else math.nan

    return bootstrap(units, stat), dict(zip(pols, worsts(units).tolist()))


# --- claims ----------------------------------------------------------------------------------------


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out: list[Claim] = []
    hz = metrics["horizons"]
    for policy, name in (("pe", "PE (known reference arm)"), ("pe_cs", "PE-CS (subsidised best reward)")):
        cells = sorted((r for r in hz if r["policy"] == policy), key=lambda r: r["T"])
        if len(cells) < 2:
            continue
        fit = next(f for f in metrics["horizon_fits"] if f["policy"] == policy)
        out.append(Claim.at_most(
            f"{policy}_log_growth",
            f"{name}: cost + quality regret grows logarithmically in T, not like the T^(2/3) of the minimax "
            "bound: the log-log slope of mean final regret against T over the two largest horizons "
            "('logarithmic' read as a slope of at most 1/3, midway to T^(2/3))",
            log_growth(hz, policy), 1 / 3,
            f"bootstrap over {cells[-1]['runs']} runs; T = {cells[-2]['T']:g} -> {cells[-1]['T']:g}: "
            f"{cells[-2]['total']:.1f} -> {cells[-1]['total']:.1f}; R^2 of a fit against log T {fit['r2_log']:.3f}, "
            f"against T^(2/3) {fit['r2_t23']:.3f}", source="paper-read"))
    pe_cells = sorted((r for r in hz if r["policy"] == "pe"), key=lambda r: r["T"])
    if pe_cells:
        b = bounds(pe_cells, metrics["instances"])[-1]
        for kind in KINDS:
            out.append(Claim.at_most(
                f"pe_{kind}_within_bound",
                f"PE's {kind} regret is within its instance-dependent logarithmic bound "
                f"(largest over T of mean {kind} regret / the bound at T)",
                within_bound(pe_cells, metrics["instances"], kind), 1.0,
                f"{pe_cells[-1]['instance']}, ell = {pe_cells[-1]['ell']}, alpha = {pe_cells[-1]['alpha']:g}, target "
                f"arm {b['target']}; at T = {pe_cells[-1]['T']:g}: mean {pe_cells[-1][kind]:.0f} vs bound "
                f"{b[kind]:.0f}; bound: policies.pe_bound (the schedule's good-event pull counts)", source="ours"))
    curves = metrics["curves"]
    if any(r["policy"] in BASELINES for r in curves):
        e, where = largest_exponent([r for r in curves if r["policy"] in BASELINES])
        out.append(Claim.at_least(
            "baseline_linear_somewhere",
            "The baselines (CS-UCB, CS-TS, CS-ETC) are unreliable: on some instance one of them has linear "
            "cost or quality regret once its exploration is over (the largest post-exploration growth exponent "
            "of mean regret; 1 = linear; 'unreliable' read as an exponent of at least 0.8)", e, 0.8,
            f"bootstrap over runs; largest: {where}", source="paper-read"))
    if any(r["policy"] == "pe_cs" for r in curves):
        e, where = largest_exponent([r for r in curves if r["policy"] == "pe_cs"])
        out.append(Claim.at_most(
            "pe_cs_never_linear",
            "PE-CS has sublinear cost and quality regret on every instance of the same family (the largest "
            "growth exponent of mean regret from a tenth of the horizon to its end; 1 = linear)", e, 0.5,
            f"bootstrap over runs; largest: {where}", source="ours"))
    if len(metrics["gaps"]) >= 2:
        gaps = sorted(metrics["gaps"], key=lambda r: r["gap"])
        out.append(Claim.within(
            "pe_pulls_scale_inverse_gap_squared",
            "PE pulls a cheaper arm that misses the threshold by a gap about ln(T gap^2)/gap^2 times: "
            "slope of log mean pulls against log(1/gap)", gap_slope(gaps), 1.5, 2.5,
            "bootstrap over runs; pulls " + ", ".join(f"{r['pulls'][0]:.0f} at gap {r['gap']:g}" for r in gaps),
            source="ours"))
    for rows, mine, rivals, what, cid in ((metrics["alpha_sweep"], "pe_cs", BASELINES, "alpha", "pe_cs_most_reliable_over_alpha"),
                                          (metrics["ell_sweep"], "pe", ("cs_ucb",), "reference arm ell",
                                           "pe_most_reliable_over_ell")):
        if not any(r["policy"] == mine for r in rows) or not any(r["policy"] in rivals for r in rows):
            continue
        est, worst = reliability(rows, mine, rivals)
        best_rival = min((p for p in worst if p != mine), key=worst.get)
        out.append(Claim.at_most(
            cid, f"{'PE-CS' if mine == 'pe_cs' else 'PE'} has the smallest worst-case regret over the {what} sweep: "
                 f"its worst mean cost + quality regret / the best baseline's worst ("
                 + ("'superior balance between performance and reliability'" if mine == "pe_cs" else "'order-optimal'")
                 + " read as a ratio of at most 1)", est, 1.0,
            f"bootstrap over runs; {mine} {worst[mine]:.0f} vs {best_rival} {worst[best_rival]:.0f}; "
            + ", ".join(f"{p} {v:.0f}" for p, v in sorted(worst.items())), source="paper-read"))
    out += checks(metrics)
    return out


def checks(metrics: dict[str, Any]) -> list[Claim]:
    """Properties that hold by construction: every run's pulls add up to its horizon, and PE never
    pulls an arm dearer than its reference arm."""
    cells = [r for e in ("curves", "horizons", "gaps", "alpha_sweep", "ell_sweep") for r in metrics[e]]
    off = max((abs(sum(p) - r["T"]) for r in cells for p in r["runs_pulls"]), default=0)
    above = [sum(sum(p[r["ell"] + 1:]) for p in r["runs_pulls"]) for r in cells
             if r["policy"] in ("pe", "pe_asym") and "ell" in r]
    return [Claim.at_most("pulls_sum_to_T", "Every run's pulls add up to its horizon (the engine's accounting)",
                          exact(off), 0, check=True, note=f"largest |sum of pulls - T| over {len(cells)} cells' runs"),
            Claim.at_most("pe_never_above_ell", "PE and asymmetric PE never pull an arm dearer than the reference arm",
                          exact(sum(above)), 0, check=True, note=f"pulls of arms above ell, {len(above)} cells")]


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
    pe_cells = sorted((r for r in metrics.get("horizons", []) if r["policy"] == "pe"), key=lambda r: r["T"])
    if pe_cells:
        bs = bounds(pe_cells, metrics["instances"])
        parts.append("### PE against its instance-dependent bound (cost and quality apart)\n\n" + table(
            ["T", "cost regret (mean, worst run)", "cost bound", "quality regret (mean, worst run)", "quality bound"],
            [[f"{r['T']:g}", f"{r['cost']:.0f}, {max(r['runs_cost']):.0f}", f"{b['cost']:.0f}",
              f"{r['quality']:.0f}, {max(r['runs_quality']):.0f}", f"{b['quality']:.0f}"] for r, b in zip(pe_cells, bs)]))
    if metrics.get("curves"):
        exps = table(["instance", "policy", "exploration ends", "window (t0, t1, T)", "cost exponent", "quality exponent"],
                     [[r["instance"], r["policy"], str(r["window"]["explore_end"]), str(r["window"]["t"]),
                       fmt(r["cost_exponent"], ".2f"), fmt(r["quality_exponent"], ".2f")] for r in metrics["curves"]])
        parts.append("### growth exponents after each policy's exploration (1 = linear)\n\n" + exps)
    return "\n\n".join(parts)
