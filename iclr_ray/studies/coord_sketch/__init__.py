"""Study 4: Matrix Product Sketching via Coordinated Sampling (Daliri, Freire, Li, Musco; ICLR 2025)."""
from .. import Study
from .config import PRESETS, Config
from .run import claims, prepare, report_md, run

STUDY = Study(
    id="coord_sketch",
    title="Matrix product sketching by coordinated sampling",
    paper="Daliri, Freire, Li, Musco. Matrix Product Sketching via Coordinated Sampling. ICLR 2025",
    ray=("tasks: one per party sketch, one per estimate",),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
