"""Study 8: Unveiling the Secret Recipe: A Guide for Supervised Fine-Tuning Small LLMs
(Pareja et al.; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run, sweep

STUDY = Study(
    id="sft_recipe",
    title="The SFT recipe for small LLMs: batch size, lr, warmup, schedule, phased vs stacked",
    paper="Pareja et al. Unveiling the Secret Recipe: A Guide for Supervised Fine-Tuning Small LLMs. ICLR 2025",
    ray=("Ray Train + DeepSpeed: pre-training and every SFT trial",
         "Ray Tune: the experiments as one sweep, an early-termination scheduler"),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
    sweep=sweep,
    sweepable=("sft.",),
)
