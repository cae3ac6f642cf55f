"""Study 12: Emergence of meta-stable clustering in mean-field transformer models (Bruno,
Pasqualotto, Agazzi; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run

STUDY = Study(
    id="sphere_flow",
    title="Meta-stable clustering of self-attention tokens on the sphere",
    paper="Bruno, Pasqualotto, Agazzi. Emergence of meta-stable clustering in mean-field transformer models. ICLR 2025",
    ray=("tasks: one per (beta, d, seed, form, n) particle simulation and one per PDE noise seed",),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
