"""Paper claims beside measured values.

A :class:`Claim` pairs a paper statement with the number this run measured and the bound that
number must meet. ``holds`` is computed from the comparison, never typed in by hand.

Comparisons allow a relative float tolerance of :data:`REL_TOL` (at least that much absolute), so a
measured difference that is the bound in decimal arithmetic meets it in binary too: a success rate
of 0.15 against a base of 0.05 is 0.1 above it, although ``0.15 - 0.05 < 0.1`` in floats. The
tolerance is nine orders of magnitude below any bound a claim uses, so it never decides a real case.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

REL_TOL = 1e-9


def _slack(bound: float) -> float:
    return REL_TOL * max(1.0, abs(float(bound)))


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    measured: float
    bound: str
    holds: bool
    note: str = ""

    @classmethod
    def at_least(cls, id: str, statement: str, measured: float, bound: float, note: str = "") -> "Claim":
        return cls(id, statement, float(measured), f">= {bound:g}", _finite(measured) and measured >= bound - _slack(bound),
                   note)

    @classmethod
    def at_most(cls, id: str, statement: str, measured: float, bound: float, note: str = "") -> "Claim":
        return cls(id, statement, float(measured), f"<= {bound:g}", _finite(measured) and measured <= bound + _slack(bound),
                   note)

    @classmethod
    def within(cls, id: str, statement: str, measured: float, lo: float, hi: float, note: str = "") -> "Claim":
        ok = _finite(measured) and lo - _slack(lo) <= measured <= hi + _slack(hi)
        return cls(id, statement, float(measured), f"in [{lo:g}, {hi:g}]", ok, note)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not _finite(self.measured):
            d["measured"] = None  # JSON has no NaN; a missing measurement never holds
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Claim":
        measured = d["measured"]
        return cls(d["id"], d["statement"], float("nan") if measured is None else float(measured),
                   d["bound"], bool(d["holds"]), d.get("note", ""))


def _finite(x: float) -> bool:
    return x is not None and math.isfinite(float(x))


def _fmt(x: float) -> str:
    if not _finite(x):
        return "n/a"
    return f"{x:.4g}"


def claims_table(claims: list[Claim]) -> str:
    """Markdown table: one row per claim with the measured value, the bound and the verdict."""
    lines = ["| claim | paper statement | measured | bound | holds |", "|---|---|---|---|---|"]
    for c in claims:
        verdict = "yes" if c.holds else "**no**"
        statement = c.statement + (f" ({c.note})" if c.note else "")
        lines.append(f"| `{c.id}` | {statement} | {_fmt(c.measured)} | {c.bound} | {verdict} |")
    return "\n".join(lines)


def summary_line(claims: list[Claim]) -> str:
    held = sum(c.holds for c in claims)
    return f"{held}/{len(claims)} claims held"
