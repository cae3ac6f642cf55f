"""Study 1: Arithmetic Transformers Can Length-Generalize in Both Operand Length and Count (Cho, Cha,
Bhojanapalli, Yun; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run

STUDY = Study(
    id="arith_coupling",
    title="Length generalisation in operand length and count with multi-level Position Coupling",
    paper="Cho, Cha, Bhojanapalli, Yun. Arithmetic Transformers Can Length-Generalize in Both Operand Length and "
          "Count. ICLR 2025",
    ray=("Ray Tune: one trial per (task, method, seed)", "Ray Train + DeepSpeed: each trial's training"),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
