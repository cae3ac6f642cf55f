"""Study 15: Beyond Worst-Case Dimensionality Reduction for Sparse Vectors (Silwal, Woodruff, Zhang; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run

STUDY = Study(
    id="sparse_embed",
    title="Dimensionality reduction for sparse vectors beyond the worst case",
    paper="Silwal, Woodruff, Zhang. Beyond Worst-Case Dimensionality Reduction for Sparse Vectors. ICLR 2025",
    ray=("tasks: one per embedding, all-pairs distance checks split into tasks of pairs_per_task pairs",),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
