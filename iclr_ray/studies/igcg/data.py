"""The requests and targets an optimisation runs on: the config's list, or a file the user gives.

A file is CSV with a header holding ``goal`` and ``target`` (the layout of the benchmark files
the paper uses; the user supplies them, none ships here) or JSONL of ``{"message", "target"}``.
A row with a missing or empty field is a DataError naming its file and line.
"""
from __future__ import annotations

import csv
from pathlib import Path

from ...config import DataError
from .config import Target


def read_targets(path: str | Path, limit: int | None = None) -> list[Target]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"targets_file {path}: no such file")
    rows: list[tuple[str, str | None, str | None]] = []  # (where, message, target)
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"goal", "target"} - set(reader.fieldnames or [])
            if missing:
                raise DataError(f"{p}:1: the header lacks {', '.join(sorted(missing))} (columns goal, target)")
            for rec in reader:
                rows.append((f"{p}:{reader.line_num}", rec.get("goal"), rec.get("target")))
    else:
        from ...llm.data import iter_jsonl

        for where, rec in iter_jsonl(p):
            if not isinstance(rec, dict):
                raise DataError(f"{where}: expected a JSON object")
            rows.append((where, rec.get("message"), rec.get("target")))
    out = []
    for where, message, target in rows[:limit] if limit else rows:
        bad = [k for k, x in (("message/goal", message), ("target", target)) if not isinstance(x, str) or not x.strip()]
        if bad:
            raise DataError(f"{where}: missing or empty {', '.join(bad)}")
        out.append(Target(message=message.strip(), target=target.strip()))
    if len(out) < 2:
        raise DataError(f"{p}: needs at least two rows (the easy target and one more), found {len(out)}")
    return out


def all_texts(targets: list[Target]) -> list[str]:
    """Every text of a run (the tiny model's tokenizer is fitted to them)."""
    return [t.message for t in targets] + [t.target for t in targets]
