"""Study 18: Policy Decorator — Model-Agnostic Online Refinement for Large Policy Models (Yuan, Mu,
Tao, Fang, Zhang, Su; ICLR 2025)."""
from .. import Study
from .analysis import claims, report_md
from .config import PRESETS, Config
from .run import prepare, run

STUDY = Study(
    id="policy_decorator",
    title="Policy Decorator: a bounded residual SAC policy on a frozen imitation base, with progressive exploration",
    paper="Yuan, Mu, Tao, Fang, Zhang, Su. Policy Decorator: Model-Agnostic Online Refinement for Large Policy "
          "Models. ICLR 2025",
    ray=("tasks: demonstration recording", "train: base policy behaviour cloning (TorchTrainer)",
         "tune: one trial per (task, variant)", "rllib: SAC with the residual RLModule"),
    config=Config,
    presets=PRESETS,
    run=run,
    claims=claims,
    prepare=prepare,
    report_md=report_md,
)
