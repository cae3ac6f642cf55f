"""Status lines: the package's loggers, writing plain lines to stderr.

Lines, not a redrawn bar, so they read the same in a terminal, a CI log and ``ray job logs``.
``ICLR_RAY_LOG_LEVEL`` sets the level (default INFO; the test suite sets WARNING, so tests are
quiet). The handler writes to whatever ``sys.stderr`` is when a line is emitted, so pytest's
capture and a redirected stderr both see it. In Ray workers the lines go to the worker's stderr,
which Ray keeps in its log files (and forwards to the driver where the driver asks for it).
"""
from __future__ import annotations

import logging
import os
import sys

ROOT = "iclr_ray"


class _CurrentStderr(logging.StreamHandler):
    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # logging.StreamHandler sets it in __init__; the live sys.stderr wins
        pass


def _setup() -> logging.Logger:
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, _CurrentStderr) for h in root.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        root.propagate = False  # Ray's and the caller's root handlers would print each line again
    level = os.environ.get("ICLR_RAY_LOG_LEVEL", "INFO").upper()
    root.setLevel(level if isinstance(logging.getLevelName(level), int) else "INFO")
    return root


def get(name: str) -> logging.Logger:
    """The logger for module ``name`` (``__name__``), under the package's configured root."""
    _setup()
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")
