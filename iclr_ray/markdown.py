"""Markdown for reports: tables and number formatting, written once for every study."""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def fmt(x: Any, spec: str = ".4g") -> str:
    """A number as ``spec`` formats it; "n/a" for None, NaN and infinities (a value not measured)."""
    if x is None:
        return "n/a"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    return format(x, spec)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table. Cells are written as given: strings as they are, numbers through
    :func:`fmt` (format them beforehand where the default precision does not fit)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells in a table of {len(header)} columns")
        lines.append("| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in row) + " |")
    return "\n".join(lines)
