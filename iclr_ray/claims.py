"""Paper claims beside measured values, with their uncertainty; and checks.

An :class:`Estimate` is a measured value, its 95% interval over the unit the experiment repeats
(seeds, runs, episodes, trials) and how many of those units it rests on. ``ci`` is None only for a
deterministic value. Build one with :func:`mean`, :func:`proportion`, :func:`paired_difference`,
:func:`bootstrap` (any statistic of the units, resampled together) or :func:`exact`.

A :class:`Claim` pairs a paper statement with an estimate and a bound, and says where the bound
comes from (``source``, one of :data:`SOURCES`): ``paper`` (the statement names the section,
table or figure that gives the number), ``paper-read`` (a phrase such as "barely" or "improves"
turned into a number; the statement gives the reading) or ``ours`` (a sanity bound of this
project, such as "above chance"). Its verdict ``holds`` is three-valued and computed, never typed
in: True when the whole interval meets the bound, False when the whole interval misses it, None
("inconclusive") when the interval straddles it. A deterministic value is judged as a point. A
claim made with ``check=True`` is a property that holds by construction (an identity, an
invariant, a consequence of how the experiment was set up): it is computed and shown under its own
heading, never counted as a paper claim.

Comparisons allow a relative float tolerance of :data:`REL_TOL` (at least that much absolute), so a
value that is the bound in decimal arithmetic meets it in binary too: a success rate of 0.15
against a base of 0.05 is 0.1 above it, although ``0.15 - 0.05 < 0.1`` in floats. The tolerance is
nine orders of magnitude below any bound a claim uses, so it never decides a real case.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .markdown import fmt, table

SOURCES = ("paper", "paper-read", "ours")
"""where a claim's bound comes from: the paper's number (the statement names where), our reading of
the paper's words as a number (the statement gives the reading), or a bound of this project"""
REL_TOL = 1e-9
LEVEL = 0.95
"""the coverage of every interval"""


@dataclass(frozen=True)
class Estimate:
    value: float
    ci: tuple[float, float] | None
    """the 95% interval; None for a deterministic value; (-inf, inf) when the units cannot bound it"""
    n: int
    """independent units (seeds, runs, episodes, trials) the value rests on"""
    reach: tuple[float, float] | None = None
    """for a rate: the lowest upper end and the highest lower end its interval can take at this n
    (all failures, all successes); a bound outside them cannot be met however the units fall"""


def exact(value: float) -> Estimate:
    """A deterministic value: no interval."""
    return Estimate(float(value), None, 1)


def _t(n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + LEVEL / 2, n - 1))


def mean(x: Sequence[float]) -> Estimate:
    """The mean of independent draws with its t interval (unbounded with fewer than two)."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return Estimate(math.nan, (-math.inf, math.inf), 0)
    m = float(x.mean())
    if len(x) < 2:
        return Estimate(m, (-math.inf, math.inf), len(x))
    half = _t(len(x)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return Estimate(m, (m - half, m + half), len(x))


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """mean(a - b) over paired draws (the same seed, episode or run for both), with its t interval."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape:
        raise ValueError(f"paired draws need the same shape, got {a.shape} and {b.shape}")
    return mean(a - b)


def geometric_ratio(a: Sequence[float], b: Sequence[float] | float) -> Estimate:
    """The geometric mean over paired draws of a / b (``b`` may be one number), with the t interval
    of the per-draw log-ratio mapped back; a pair whose log-ratio is not finite (a zero) is left
    out."""
    a = np.asarray(a, float)
    b = np.broadcast_to(np.asarray(b, float), a.shape) if np.ndim(b) == 0 else np.asarray(b, float)
    n = min(len(a), len(b))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = mean(np.log(a[:n] / b[:n]))
    lo, hi = e.ci
    return Estimate(math.exp(e.value) if math.isfinite(e.value) else math.nan, (math.exp(lo), math.exp(hi)), e.n)


def _wilson(successes: int, n: int) -> tuple[float, float]:
    from scipy import stats

    p, z = successes / n, float(stats.norm.ppf(0.5 + LEVEL / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion(successes: int, n: int) -> Estimate:
    """A share of n independent trials with its Wilson score interval (and what the interval can
    reach at this n: see :attr:`Estimate.reach`)."""
    if n <= 0:
        return Estimate(math.nan, (-math.inf, math.inf), 0)
    return Estimate(successes / n, _wilson(successes, n), n, reach=(_wilson(0, n)[1], _wilson(n, n)[0]))


def bootstrap(units: Sequence[Any] | np.ndarray | tuple, statistic: Callable[..., float], *, resamples: int = 2000,
              seed: int = 0, clusters: Sequence[Any] | np.ndarray | None = None) -> Estimate:
    """``statistic`` of the units with its percentile-bootstrap interval: the units are resampled
    with replacement ``resamples`` times. ``units`` is an array (one row per unit) or a tuple of
    arrays with one row per unit each, resampled with the same rows (paired data).
    ``clusters`` (a label per row): rows that share something the experiment does not redraw (pairs
    built on the same context) are resampled together, whole clusters with replacement, and the
    estimate rests on the number of clusters.
    Resamples whose statistic is not finite are left out; if fewer than 95% remain, or there are
    fewer than two units, the interval is unbounded."""
    arrays = tuple(np.asarray(u) for u in units) if isinstance(units, tuple) else (np.asarray(units),)
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("every array of a paired bootstrap needs one row per unit")
    value = float(statistic(*arrays))
    rng = np.random.default_rng(seed)
    if clusters is not None:
        labels = np.asarray(clusters)
        if len(labels) != n:
            raise ValueError("a cluster bootstrap needs one cluster label per row")
        members = [np.flatnonzero(labels == g) for g in dict.fromkeys(labels.tolist())]
        if len(members) < 2:
            return Estimate(value, (-math.inf, math.inf), len(members))
        picks = (np.concatenate([members[g] for g in draw]) for draw in rng.integers(0, len(members),
                                                                                    (resamples, len(members))))
        draws = np.array([statistic(*(a[idx] for a in arrays)) for idx in picks], float)
        n = len(members)
    elif n < 2:
        return Estimate(value, (-math.inf, math.inf), n)
    else:
        draws = np.array([statistic(*(a[idx] for a in arrays)) for idx in rng.integers(0, n, (resamples, n))],
                         float)
    ok = draws[np.isfinite(draws)]
    if len(ok) < 0.95 * resamples:
        return Estimate(value, (-math.inf, math.inf), n)
    lo, hi = np.quantile(ok, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Estimate(value, (float(lo), float(hi)), n)


def _slack(bound: float) -> float:
    return REL_TOL * max(1.0, abs(float(bound)))


def _span(e: Estimate) -> tuple[float, float]:
    return e.ci if e.ci is not None else (e.value, e.value)


def _unreachable(e: Estimate, bound: float, above: bool) -> str | None:
    """Why a rate's interval can never meet ``bound`` at its n (None when it can, or it is no rate)."""
    if e.reach is None:
        return None
    lowest_upper, highest_lower = e.reach
    if above and highest_lower < bound - _slack(bound):
        return f"at {e.n}/{e.n} the interval's lower end is {highest_lower:.3g} < {bound:g}"
    if not above and lowest_upper > bound + _slack(bound):
        return f"at 0/{e.n} the interval's upper end is {lowest_upper:.3g} > {bound:g}"
    return None


def _verdict(e: Estimate, meets: Callable[[float], bool]) -> bool | None:
    """Three-valued, for a one-sided bound: both ends of the interval meet it (so every value
    between does), neither does, or one does. A value not measured fails when deterministic and
    is inconclusive otherwise."""
    if not math.isfinite(e.value):
        return False if e.ci is None else None
    lo, hi = _span(e)
    a, b = meets(lo), meets(hi)
    return True if a and b else False if not (a or b) else None


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    measured: float
    ci: tuple[float, float] | None
    n: int
    bound: str
    holds: bool | None
    note: str = ""
    check: bool = False
    source: str = "ours"
    """one of :data:`SOURCES`; a check's bound is always ours"""

    @staticmethod
    def _estimate(est: Estimate | float, check: bool) -> Estimate:
        if isinstance(est, Estimate):
            return est
        if check:
            return exact(est)
        raise TypeError("a claim is judged on an Estimate (mean, proportion, bootstrap, ...; exact() for a "
                        "deterministic value), not on a bare number")

    @classmethod
    def _make(cls, id, statement, est, bound, holds, note, check, source, unreachable=None) -> "Claim":
        if unreachable is not None and holds is not False:
            # a rate at this n cannot meet the bound even with every unit a success (or failure):
            # no verdict, and say so, rather than an "inconclusive" more data of this size never resolves
            holds = None
            note = (note + "; " if note else "") + f"no verdict possible: {est.n} units cannot reach it ({unreachable})"
        if check:
            source = source or "ours"
        if source not in SOURCES:
            raise ValueError(f"claim {id}: source={source!r}; a claim says where its bound comes from, one of "
                             f"{', '.join(SOURCES)}")
        return cls(id, statement, est.value, est.ci, est.n, bound, holds, note, check, source)

    @classmethod
    def at_least(cls, id: str, statement: str, est: Estimate | float, bound: float, note: str = "",
                 check: bool = False, *, source: str | None = None) -> "Claim":
        e = cls._estimate(est, check)
        ok = _verdict(e, lambda x: x >= bound - _slack(bound))
        return cls._make(id, statement, e, f">= {bound:g}", ok, note, check, source, _unreachable(e, bound, True))

    @classmethod
    def above(cls, id: str, statement: str, est: Estimate | float, bound: float, note: str = "",
              check: bool = False, *, source: str | None = None) -> "Claim":
        """Strictly above ``bound`` ("raises", "more than"): an interval that touches the bound, such
        as a gain that is exactly zero on every unit, does not hold."""
        e = cls._estimate(est, check)
        ok = _verdict(e, lambda x: x > bound + _slack(bound))
        return cls._make(id, statement, e, f"> {bound:g}", ok, note, check, source, _unreachable(e, bound, True))

    @classmethod
    def at_most(cls, id: str, statement: str, est: Estimate | float, bound: float, note: str = "",
                check: bool = False, *, source: str | None = None) -> "Claim":
        e = cls._estimate(est, check)
        ok = _verdict(e, lambda x: x <= bound + _slack(bound))
        return cls._make(id, statement, e, f"<= {bound:g}", ok, note, check, source, _unreachable(e, bound, False))

    @classmethod
    def within(cls, id: str, statement: str, est: Estimate | float, lo: float, hi: float, note: str = "",
               check: bool = False, *, source: str | None = None) -> "Claim":
        """Holds when the whole interval lies in [lo, hi], fails when the whole interval lies outside
        it (all below lo or all above hi), inconclusive otherwise."""
        e = cls._estimate(est, check)
        a, b = _span(e)
        inside = lo - _slack(lo) <= a and b <= hi + _slack(hi)
        outside = b < lo - _slack(lo) or a > hi + _slack(hi)
        if not math.isfinite(e.value):
            ok = None if e.ci is not None else False
        else:
            ok = True if inside else False if outside else None
        return cls._make(id, statement, e, f"in [{lo:g}, {hi:g}]", ok, note, check, source)

    def to_dict(self) -> dict[str, Any]:
        def num(x):  # JSON has no NaN or infinity: null; an unbounded end is null too
            return float(x) if x is not None and math.isfinite(x) else None

        d = {"id": self.id, "statement": self.statement, "measured": num(self.measured),
             "ci": None if self.ci is None else [num(self.ci[0]), num(self.ci[1])], "n": self.n,
             "bound": self.bound, "source": self.source, "holds": self.holds, "note": self.note}
        if self.check:
            d["check"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Claim":
        measured = math.nan if d["measured"] is None else float(d["measured"])
        ci = d.get("ci")
        if ci is not None:
            ci = (-math.inf if ci[0] is None else float(ci[0]), math.inf if ci[1] is None else float(ci[1]))
        return cls(d["id"], d["statement"], measured, ci, int(d.get("n", 1)), d["bound"], d["holds"],
                   d.get("note", ""), bool(d.get("check", False)), d.get("source", "unstated"))


def verdict_word(holds: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "inconclusive"}[holds]


def _interval(c: Claim) -> str:
    if c.ci is None:
        return "exact"
    return f"[{fmt(c.ci[0])}, {fmt(c.ci[1])}]" if all(math.isfinite(x) for x in c.ci) else "unbounded"


def claims_table(claims: list[Claim]) -> str:
    """Markdown: one row per claim with the measured value, its interval and units, the bound, where
    the bound comes from and the verdict."""
    return table(["claim", "paper statement", "measured", "95% interval", "n", "bound", "source", "holds"],
                 [[f"`{c.id}`", c.statement + (f" ({c.note})" if c.note else ""), fmt(c.measured), _interval(c),
                   str(c.n), c.bound, c.source, verdict_word(c.holds)] for c in claims])


def checks_table(checks: list[Claim]) -> str:
    """Markdown: the properties that hold by construction, with their value and whether they did."""
    return table(["check", "what", "value", "bound", "holds"],
                 [[f"`{c.id}`", c.statement + (f" ({c.note})" if c.note else ""), fmt(c.measured), c.bound,
                   verdict_word(c.holds)] for c in checks])


def summary_line(claims: list[Claim], checks: Sequence[Claim] = ()) -> str:
    held = sum(c.holds is True for c in claims)
    failed = sum(c.holds is False for c in claims)
    open_ = sum(c.holds is None for c in claims)
    line = f"{held} of {len(claims)} claims held, {failed} did not, {open_} inconclusive"
    if checks:
        line += f"; {sum(c.holds is True for c in checks)} of {len(checks)} checks passed"
    return line


def split(items: Sequence[Claim]) -> tuple[list[Claim], list[Claim]]:
    """(paper claims, checks)."""
    return [c for c in items if not c.check], [c for c in items if c.check]
