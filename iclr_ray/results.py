"""The run directory every study writes (the run contract in docs/architecture.md).

    config.yaml    resolved config (rerun with --config)
    metrics.jsonl  one JSON object per logged step or trial, appended and flushed as they come
    result.json    study, preset, config, metrics, claims, env, seconds (written once, at the end)
    report.md      claims table and plots, rendered from result.json
    plots/*.png    figures

The directory is a local path or a URI (``s3://bucket/runs/...``, see storage.py). Whole files are
written atomically (a temporary file in the same folder, then ``os.replace``; one PUT to an object
store), so a killed run never leaves a half-written config, result, report or plot behind.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from . import storage
from .claims import Claim, checks_table, claims_table, summary_line
from .markdown import fmt, table


class RunDirError(ValueError):
    """A run directory cannot be used (already holds a finished run, or holds none)."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """A local file written whole (a temporary file in the same folder, then ``os.replace``)."""
    storage.write_bytes(Path(path), data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays, paths: everything a study may hand back
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite_only(obj: Any) -> Any:
    """NaN and infinities as null: JSON has neither, and "not measured" reads the same either way."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_only(v) for v in obj]
    return obj


def to_json(obj: Any, indent: int | None = 2) -> str:
    return json.dumps(_finite_only(obj), indent=indent, default=_json_default, allow_nan=False)


def encode_image(pixels: Any) -> str:
    """A uint8 image (H x W or H x W x C) as base64 PNG text: frames a figure shows travel in
    result.json this way (lossless, a fraction of a JSON array's size)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_image(text: str):
    """The uint8 array :func:`encode_image` encoded."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(text))))


STORAGE_ENV = "ICLR_RAY_STORAGE"


def default_run_dir(study: str, preset: str, root: str | Path | None = None) -> str:
    """``<root>/<study>/<preset>-<time>``; root: ``$ICLR_RAY_STORAGE`` (a path or a URI such as
    ``s3://bucket/runs``: the storage every node of a cluster reaches), else ``runs``."""
    root = str(root or os.environ.get(STORAGE_ENV) or os.environ.get("ICLR_RAY_RUNS") or "runs")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    location = storage.join(root, study, f"{preset}-{stamp}")
    n = 1
    while storage.exists(location):
        n += 1
        location = storage.join(root, study, f"{preset}-{stamp}-{n}")
    return location


TOP_FILES = ("config.yaml", "metrics.jsonl", "result.json", "report.md")


class RunDir:
    """Writer for one run directory, at a local path or a URI (``s3://...``).

    ``location`` is where it lives. ``path`` is a local folder holding the same top-level files and
    plots: the run directory itself when it is local; for a URI, a staging copy on the driver's
    node from which every file written is put to the URI at once (``pull`` brings an existing
    run's files down first). Trials and tasks never get ``path``: what they write goes to
    :meth:`storage` locations."""

    def __init__(self, location: str | Path):
        self.location = storage.normalise(location)
        self.remote = storage.is_remote(self.location)
        if self.remote:
            self.path = Path(tempfile.mkdtemp(prefix="iclr_ray_run."))
            weakref.finalize(self, shutil.rmtree, self.path, True)
        else:
            self.path = storage.local_path(self.location)
        self.plots = self.path / "plots"

    def __str__(self) -> str:
        return self.location

    def storage(self, *parts: str) -> str:
        """The location of ``parts`` inside the run directory, for what trials, tasks and Ray
        Train/Tune write (a local path or a URI: :mod:`iclr_ray.storage`)."""
        return storage.join(self.location, *parts)

    def _put(self, rel: str) -> None:
        if self.remote:
            storage.write_bytes(self.storage(rel), (self.path / rel).read_bytes())

    def read_text(self, name: str) -> str | None:
        """A top-level file's text (from the storage itself), None if it is not there."""
        location = self.storage(name)
        return storage.read_text(location) if storage.is_file(location) else None

    def pull(self) -> "RunDir":
        """A remote run's top-level files and plots into the staging copy (a local one: nothing)."""
        if self.remote:
            for name in TOP_FILES:
                text = self.read_text(name)
                if text is not None:
                    atomic_write_text(self.path / name, text)
            storage.download_dir(self.storage("plots"), self.plots)
        return self

    def create(self) -> "RunDir":
        if storage.is_file(self.storage("result.json")):
            raise RunDirError(f"{self.location} already holds a finished run; choose another --out")
        if not self.remote and self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"{self.location} exists and is not a directory")
        self.pull()
        self.plots.mkdir(parents=True, exist_ok=True)
        (self.path / "metrics.jsonl").write_text("")
        self._put("metrics.jsonl")
        return self

    def write_config(self, config_yaml: str) -> None:
        atomic_write_text(self.path / "config.yaml", config_yaml)
        self._put("config.yaml")

    def log(self, record: dict[str, Any]) -> None:
        line = to_json(record, indent=None)
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(line + "\n")
            f.flush()
        self._put("metrics.jsonl")

    def save_plot(self, fig: Any, name: str) -> Path:
        """Save a matplotlib figure as plots/<name>.png atomically and close it."""
        import io

        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)
        path = self.plots / f"{name}.png"
        atomic_write_bytes(path, buf.getvalue())
        self._put(f"plots/{name}.png")
        return path

    def save_plots(self, figures: dict[str, Any]) -> None:
        for name, fig in figures.items():
            self.save_plot(fig, name)

    def clear_plots(self) -> None:
        """Remove every figure (a redraw leaves only the figures the study draws now)."""
        for path in self.plots.glob("*.png"):
            path.unlink()
        if self.remote:
            storage.delete(self.storage("plots"))

    def write_result(self, result: dict[str, Any]) -> None:
        atomic_write_text(self.path / "result.json", to_json(result) + "\n")
        self._put("result.json")

    def read_result(self) -> dict[str, Any]:
        text = self.read_text("result.json")
        if text is None:
            raise RunDirError(f"{self.location} holds no result.json (not a run directory, or the run did not finish)")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{self.storage('result.json')} is not valid JSON: {exc.msg} (line {exc.lineno})") from None

    def read_metrics(self) -> list[dict[str, Any]]:
        text = self.read_text("metrics.jsonl")
        return [json.loads(line) for line in (text or "").splitlines() if line.strip()]

    def write_report(self, result: dict[str, Any], title: str, extra_md: str = "") -> str:
        """report.md from a result: the claims table (a run) or the ranking (a sweep), the study's
        own tables (``extra_md``), the plots, the environment and the command that reruns it."""
        if result.get("kind") == "sweep":
            lead, body, rerun = _sweep_sections(result, self.location)
        else:
            claims = [Claim.from_dict(c) for c in result["claims"]]
            checks = [Claim.from_dict(c) for c in result.get("checks", [])]
            lead = (f"Study `{result['study']}`, preset `{result['preset']}`, {result['seconds']:.1f} s: "
                    f"{summary_line(claims, checks)}.")
            body = ["## Claims", "",
                    "Each claim's interval is a 95% interval over the units it counts (n); it holds when the "
                    "whole interval meets the paper's bound, fails when the whole interval misses it, and is "
                    "inconclusive when it straddles the bound.", "", claims_table(claims), ""]
            if checks:
                body += ["## Checks", "", "Properties that hold by construction (an identity, an invariant, how the "
                         "experiment is set up): computed and shown, not counted as paper claims.", "",
                         checks_table(checks), ""]
            rerun = f"iclr-ray run {result['study']} --config {self.storage('config.yaml')}"
        plots = sorted(p.name for p in self.plots.glob("*.png")) if self.plots.exists() else []
        lines = [f"# {title}", "", lead, "", *body]
        if extra_md:
            lines += [extra_md.rstrip(), ""]
        if plots:
            lines += ["## Plots", ""] + [f"![{p[:-4]}](plots/{p})" for p in plots] + [""]
        lines += ["## Environment", "", "```", *(f"{k}: {v}" for k, v in result.get("env", {}).items()), "```", "",
                  f"Rerun: `{rerun}`", ""]
        text = "\n".join(lines)
        atomic_write_text(self.path / "report.md", text)
        self._put("report.md")
        return text


def ranking(summary: dict[str, Any]) -> str:
    """A sweep's trials as a table, best first by its metric; unscored trials last. ``columns`` in
    the summary names the other per-trial values shown (default: the rows a trial saw)."""
    metric, rows = summary["metric"], summary["rows"]
    keys = list(rows[0]["params"]) if rows else []
    extra = [c for c in summary.get("columns", ["samples"]) if c != metric]
    scored = sorted((r for r in rows if r.get(metric) is not None), key=lambda r: r[metric],
                    reverse=summary["mode"] == "max")
    return table([*keys, metric, "finished", *(COLUMN_NAMES.get(c, c) for c in extra)],
                 [[*(str(v) for v in r["params"].values()), fmt(r.get(metric)), str(r["finished"]),
                   *(fmt(r.get(c)) for c in extra)] for r in scored + [r for r in rows if r.get(metric) is None]])


COLUMN_NAMES = {"samples": "rows seen"}


def _sweep_sections(result: dict[str, Any], location: str) -> tuple[str, list[str], str]:
    m = result["metrics"]
    best = m.get("best") or {}
    lead = (f"Study `{result['study']}`, preset `{result['preset']}`, space `{result['space']}`, scheduler "
            f"`{result['scheduler']}`: {m['finished']} of {m['trials']} trials finished in {result['seconds']:.0f} s; "
            f"ranked by {m['metric']} ({m['mode']}).")
    body = ["## Ranking", "", ranking(m), "",
            f"Best: `{best.get('params')}` {m['metric']} = {fmt(best.get(m['metric']))}", "",
            f"TensorBoard: `tensorboard --logdir {storage.join(location, 'tune')}`", ""]
    rerun = f"iclr-ray sweep {result['study']} --space {result['space']} --config {storage.join(location, 'config.yaml')}"
    return lead, body, rerun
