"""The timing helper the benchmark scripts share (imported as ``_timing``: a script's own folder is
on ``sys.path`` when it runs as ``python benchmarks/<name>.py``)."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)
