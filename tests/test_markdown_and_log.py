"""Report tables and number formats (iclr_ray.markdown), and status lines (iclr_ray.log)."""
import logging

import pytest

from iclr_ray import log as logs
from iclr_ray.markdown import fmt, table
from iclr_ray.runtime import Progress


def test_table_and_fmt():
    assert table(["a", "b"], [["x", 1.23456], ["y", None]]) == "| a | b |\n|---|---|\n| x | 1.235 |\n| y | n/a |"
    assert fmt(float("nan")) == "n/a" and fmt(float("inf")) == "n/a" and fmt(0.5, ".2f") == "0.50"
    assert fmt(True) == "True" and fmt(12) == "12"
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        table(["a", "b"], [["x"]])


def test_progress_lines_go_through_logging_and_follow_the_level(capsys, monkeypatch):
    monkeypatch.setenv("ICLR_RAY_LOG_LEVEL", "INFO")
    logs.get("iclr_ray.runtime")
    bar = Progress(3, "cells", min_interval=0.0)
    bar.update(2)
    bar.update()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("  cells: 2/3") and err[-1].startswith("  cells: 3/3") and "elapsed" in err[-1]
    monkeypatch.setenv("ICLR_RAY_LOG_LEVEL", "WARNING")
    logs.get("iclr_ray.runtime")
    Progress(1, "quiet").update()
    assert capsys.readouterr().err == ""
    assert logging.getLogger("iclr_ray").propagate is False  # no second copy through the root logger
