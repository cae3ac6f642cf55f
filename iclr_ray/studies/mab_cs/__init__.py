"""Study 13: Pairwise Elimination with Instance-Dependent Guarantees for Bandits with Cost Subsidy
(Juneja, Joe-Wong, Yağan; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run

STUDY = Study(
    id="mab_cs",
    title="Bandits with cost subsidy: Pairwise Elimination (PE, PE-CS) against CS-UCB/TS/ETC",
    paper="Juneja, Joe-Wong, Yağan. Pairwise Elimination with Instance-Dependent Guarantees for Bandits "
          "with Cost Subsidy. ICLR 2025",
    ray=("tasks: one per chunk of runs of a (policy, instance, alpha, ell, T) cell", "rllib: engine=rllib"),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
