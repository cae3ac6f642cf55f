"""The studies: a registry of what exists, and the loader of one study's parts.

The registry is data (id, title, paper, Ray parts, the extra and the modules a study needs), so
``iclr-ray list`` imports no study code and a study whose optional dependency is missing still
lists, with a note. Every study package has the same modules with the same names (the guide:
docs/adding_a_study.md):

    config.py    Config (its defaults are the ``small`` preset), PRESETS; SWEEPABLE (the config key
                 prefixes a search space may vary) for a study with ``iclr-ray sweep``
    run.py       prepare(cfg) -> inputs (before Ray starts), run(cfg, ctx) -> metrics,
                 plan(cfg) -> stages (``iclr-ray plan``: iclr_ray.plan), and with SWEEPABLE,
                 sweep(cfg, space, ctx, scheduler, resume) -> summary
    analysis.py  claims(metrics, cfg) -> list[Claim], report_md(metrics, cfg) -> str (pure functions)
    plots.py     plot_all(metrics, cfg) -> {name: matplotlib figure} (pure function of the metrics)

:func:`get` imports those four modules and returns a :class:`Study`.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..config import ConfigError, StudyConfig


@dataclass(frozen=True)
class Entry:
    """What the registry knows of a study without importing it."""

    id: str
    title: str
    paper: str
    ray: tuple[str, ...]
    extra: str | None = None
    """the pyproject extra its imports need beyond the core dependencies"""
    needs: tuple[str, ...] = ()
    """top-level modules of that extra the study imports (checked without importing them)"""

    def missing(self) -> list[str]:
        """The modules of :attr:`needs` that are not installed."""
        return [name for name in self.needs if _find_spec(name) is None]


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        return None


REGISTRY: dict[str, Entry] = {e.id: e for e in (
    Entry("alpharec", "AlphaRec: language representations of item titles as recommenders, against ID-based CF",
          "Sheng, Zhang, Zhang, Chen, Wang, Chua. Language Representations Can be What Recommenders Need: "
          "Findings and Potentials. ICLR 2025",
          ("tasks: the titles embedded by each language model, one task per chunk",
           "Ray Train + DeepSpeed: AlphaRec and the baselines, the seeds side by side, metrics every epoch",
           "Tune: one trial per model; iclr-ray sweep alpharec over tau, negatives, layers",
           "Serve: iclr-ray serve recommend (/v1/recommend: top-K for a history of item ids or free-text titles)"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("arith_coupling",
          "Length generalisation in operand length and count with multi-level Position Coupling",
          "Cho, Cha, Bhojanapalli, Yun. Arithmetic Transformers Can Length-Generalize in Both Operand Length and "
          "Count. ICLR 2025",
          ("Ray Tune: one trial per (task, method, seed)", "Ray Train + DeepSpeed: each trial's training"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("badjudge", "BadJudge: backdoored LLM-as-a-judge at three access levels, and the model-merging defence",
          "Tong, Wang, Zhao, Chen. BadJudge: Backdoor Vulnerabilities of LLM-as-a-Judge. ICLR 2025",
          ("tasks: the frozen trunk's features of every prompt; merging and scoring per trial",
           "Tune: one trial per (seed, trigger), all its judges (poison rate x access level x format)",
           "Ray Train + DeepSpeed: each trial's judges fine-tuned side by side",
           "Serve: the judge app (/v1/judge), the attacked and defended judges evaluated over HTTP"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("cluspro", "ClusPro: clustering-based prototypes (balanced OT, EMA) for compositional zero-shot learning",
          "Qu, Wei, Shu, Wang. Learning Clustering-based Prototypes for Compositional Zero-shot Learning. ICLR 2025",
          ("Tune: one trial per (world, seed); iclr-ray sweep cluspro over K, momentum, contrastive weight",
           "Ray Train + DeepSpeed: each trial's methods side by side (CE, single centroid, k-means, ClusPro)"),
          extra="vision", needs=("torch", "transformers", "deepspeed", "ot")),
    Entry("dreamweaver", "Dreamweaver: compositional world models from pixels (Recurrent Block-Slot Units), with DCI",
          "Baek, Wu, Singh, Ahn. Dreamweaver: Learning Compositional World Models from Pixels. ICLR 2025",
          ("tasks: the videos generated in shards; DCI of each trained and untrained model; the imagination (block swap) tests",
           "Tune: one trial per (objective, seed)",
           "Ray Train + DeepSpeed: each trial's Dreamweaver (predictive or reconstruction objective)"),
          extra="llm", needs=("torch", "transformers", "deepspeed", "sklearn")),
    Entry("ctrl_u", "Ctrl-U: uncertainty-aware reward fine-tuning of a ControlNet, against ControlNet and ControlNet++",
          "Zhang, Gao, Jiang, Zhao, Zheng. Ctrl-U: Robust Conditional Image Generation via Uncertainty-aware Reward "
          "Modeling. ICLR 2025",
          ("tasks: the scenes generated in shards; the reward and oracle segmenters; drawing and scoring each model's "
           "images",
           "Ray Train + DeepSpeed: the base U-Net + ControlNet's pretraining",
           "Tune: one trial per (arm, seed), each a Ray Train run post-training the ControlNet"),
          extra="vision", needs=("torch", "diffusers", "deepspeed")),
    Entry("afa", "AFA: ensembling diffusion experts by adaptive feature aggregation (SABW aggregators)",
          "Wang, Tian, Guan, Zhang, Jiang, Shen, Han, Gu, Yang. Ensembling Diffusion Models via Adaptive Feature "
          "Aggregation. ICLR 2025",
          ("Ray Train + DeepSpeed: the common base; the experts fine-tuned in parallel runs (one Tune trial each)",
           "Tune: one trial per (expert set, seed), each a Ray Train run training the aggregators",
           "tasks: the evaluator classifier; the weight-merging search; scoring and sampling each (model, seed)"),
          extra="vision", needs=("torch", "diffusers", "deepspeed")),
    Entry("coord_sketch", "Matrix product sketching by coordinated sampling",
          "Daliri, Freire, Li, Musco. Matrix Product Sketching via Coordinated Sampling. ICLR 2025",
          ("tasks: one per party sketch, one per estimate",)),
    Entry("igcg", "I-GCG's multi-coordinate suffix update against GCG, on benign target strings",
          "Jia, Pang, Du, Huang, Gu, Liu, Cao, Lin. Improved Techniques for Optimization-Based Jailbreaking on "
          "Large Language Models. ICLR 2025",
          ("tasks: one optimisation per (target, method, seed), in parallel; easy-to-hard runs wait in Ray for "
           "the easy target's result", "Tune: iclr-ray sweep igcg over the optimiser (K, top-k, batch, ...)"),
          extra="llm", needs=("torch", "transformers")),
    Entry("moee", "MoE routing weights as embeddings: HS, RW and MoEE (concat, sum) on five task types",
          "Li, Zhou. Your Mixture-of-Experts LLM Is Secretly an Embedding Model For Free. ICLR 2025",
          ("Ray Train + DeepSpeed: the small MoE LMs pre-trained on the review corpus, one Tune trial per seed",
           "tasks: one encoding and one scoring per model x task", "Tune: the alpha sweep, one trial per alpha",
           "Serve: iclr-ray serve embed --model <MoE checkpoint> returns HS, RW or MoEE over /v1/embeddings"),
          extra="llm", needs=("torch", "transformers", "deepspeed", "sklearn")),
    Entry("knowledge_entropy",
          "Knowledge entropy decay over pretraining, new-knowledge acquisition and retention, resuscitation",
          "Kim, Lee, Cho, Jang, Hwang, Won, Ahn, Lee, Seo. Knowledge Entropy Decay during Language Model "
          "Pretraining Hinders New Knowledge Acquisition. ICLR 2025",
          ("Ray Tune: pretraining runs, and the continual runs as one grid (start checkpoints, resuscitation and "
           "its controls, the (p, q) grid)", "Ray Train + DeepSpeed: every pretraining and continual run",
           "tasks: knowledge entropy per checkpoint and per real model (and each continual run's start model on "
           "a GPU cluster)"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("mab_cs", "Bandits with cost subsidy: Pairwise Elimination (PE, PE-CS) against CS-UCB/TS/ETC",
          "Juneja, Joe-Wong, Yağan. Pairwise Elimination with Instance-Dependent Guarantees for Bandits with Cost "
          "Subsidy. ICLR 2025",
          ("tasks: one per chunk of runs of a (policy, instance, alpha, ell, T) cell",
           "rllib: engine=rllib (env runners, all runs of a cell in one vectorised env step)")),
    Entry("molt5_3d", "3D-MolT5: E3FP 3D substructure tokens fused with SELFIES in a T5, text regression on QM9",
          "Pei, Yan, Gao, Zhu, Wu. 3D-MolT5: Leveraging Discrete Structural Information for Molecule-Text "
          "Modeling. ICLR 2025",
          ("tasks: the conformers tokenised (SELFIES + E3FP), one task per chunk; the ridge reference",
           "Tune: one trial per seed",
           "Ray Train + DeepSpeed: each seed's fusion variants side by side (span corruption, then text regression)"),
          extra="chem", needs=("torch", "transformers", "deepspeed", "rdkit", "e3fp", "selfies")),
    Entry("orion", "Request patching: the emergent decomposition of retrieval tasks in pretrained LMs (ORION)",
          "Variengien, Winsor. Look Before You Leap: A Universal Emergent Decomposition of Retrieval Tasks in "
          "Language Models. ICLR 2025",
          ("tasks: one per (model, task) for the clean runs, one per (model, task, layer band) for the patching, "
           "one per model for oversight",),
          extra="llm", needs=("torch", "transformers")),
    Entry("pad", "PAD: personalised alignment at decoding time, with a personalised reward model trained by DPO",
          "Chen, Zhang, Luo, Chai, Liu. PAD: Personalized Alignment of LLMs at Decoding-time. ICLR 2025",
          ("tasks: the base model's samples, the reference log-probabilities, base and prompted decoding, and one "
           "decoding task per PRM", "Ray Tune: the PRMs as one grid (seed x real / label-shuffled)",
           "Ray Train + DeepSpeed: each PRM's DPO", "Serve: the pad app (PAD decoding, the preference in the request)"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("policy_decorator",
          "Policy Decorator: a bounded residual SAC policy on a frozen imitation base, with progressive exploration",
          "Yuan, Mu, Tao, Fang, Zhang, Su. Policy Decorator: Model-Agnostic Online Refinement for Large Policy "
          "Models. ICLR 2025",
          ("tasks: demonstration recording", "train: base policy behaviour cloning (the shared Train loop)",
           "tune: one trial per (task, variant)", "rllib: SAC with the residual RLModule"),
          extra="rl", needs=("torch", "gymnasium", "mani_skill", "gymnasium_robotics", "deepspeed")),
    Entry("sft_recipe", "The SFT recipe for small LLMs: batch size, lr, warmup, schedule, phased vs stacked",
          "Pareja et al. Unveiling the Secret Recipe: A Guide for Supervised Fine-Tuning Small LLMs. ICLR 2025",
          ("Ray Train + DeepSpeed: pre-training and every SFT trial",
           "Ray Tune: the experiments as one sweep, an early-termination scheduler"),
          extra="llm", needs=("torch", "transformers", "deepspeed")),
    Entry("sparse_embed", "Dimensionality reduction for sparse vectors beyond the worst case",
          "Silwal, Woodruff, Zhang. Beyond Worst-Case Dimensionality Reduction for Sparse Vectors. ICLR 2025",
          ("tasks: one per embedding, all-pairs distance checks split into tasks of pairs_per_task pairs",)),
    Entry("sphere_flow", "Meta-stable clustering of self-attention tokens on the sphere",
          "Bruno, Pasqualotto, Agazzi. Emergence of meta-stable clustering in mean-field transformer models. "
          "ICLR 2025",
          ("tasks: one per (beta, d, seed, form, n) particle simulation and one per PDE noise seed",)),
)}


@dataclass(frozen=True)
class Study:
    """One study's parts, loaded by :func:`get`."""

    entry: Entry
    config: type[StudyConfig]
    presets: Mapping[str, Mapping[str, Any]]
    prepare: Callable[[Any], Any]
    """prepare(cfg) -> inputs: reads and checks input files before Ray starts (errors exit 2)"""
    run: Callable[..., dict[str, Any]]
    """run(cfg, ctx) -> metrics (JSON-serialisable); ctx.inputs is what prepare returned"""
    claims: Callable[..., list]
    """claims(metrics, cfg) -> list[Claim], a pure function so reports can be re-rendered"""
    report_md: Callable[..., str]
    """report_md(metrics, cfg) -> the measurement tables of report.md"""
    plots: Callable[..., dict[str, Any]]
    """plot_all(metrics, cfg) -> {name: figure}, saved as plots/<name>.png"""
    sweep: Callable[..., dict[str, Any]] | None = None
    """sweep(cfg, space, ctx, scheduler, resume) -> summary: ``iclr-ray sweep`` (Ray Tune)"""
    sweepable: tuple[str, ...] = ()
    """config key prefixes a search space may vary (the rest is shared by every trial)"""
    plan: Callable[..., list] | None = None
    """plan(cfg) -> list of iclr_ray.plan stages: ``iclr-ray plan`` (nothing is trained or loaded)"""

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def title(self) -> str:
        return self.entry.title


class StudyUnavailable(RuntimeError):
    pass


def entry(study_id: str) -> Entry:
    if study_id not in REGISTRY:
        raise ConfigError(f"unknown study {study_id!r}; implemented: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[study_id]


def install_hint(e: Entry) -> str:
    return f"pip install 'iclr-ray[{e.extra}]'" if e.extra else "pip install iclr-ray"


def get(study_id: str) -> Study:
    """Import a study's config, run, analysis and plots modules; :class:`StudyUnavailable` (exit 2)
    when a dependency is missing."""
    e = entry(study_id)
    missing = e.missing()
    if missing:  # checked first: some are imported only inside Ray workers, which would fail later
        raise StudyUnavailable(f"study {study_id!r} needs {', '.join(missing)}; install it with: {install_hint(e)}")
    try:
        mods = {part: importlib.import_module(f"{__name__}.{study_id}.{part}")
                for part in ("config", "run", "analysis", "plots")}
    except ImportError as exc:
        raise StudyUnavailable(f"study {study_id!r} needs {exc.name or exc}; install it with: "
                               f"{install_hint(e)}") from None
    parts = {"config": ("config", "Config"), "presets": ("config", "PRESETS"), "prepare": ("run", "prepare"),
             "run": ("run", "run"), "claims": ("analysis", "claims"), "report_md": ("analysis", "report_md"),
             "plots": ("plots", "plot_all")}
    absent = [f"{mod}.{name}" for mod, name in parts.values() if not hasattr(mods[mod], name)]
    if absent:  # a study that does not follow the template: a developer's error, said plainly
        raise TypeError(f"study {study_id!r} lacks {', '.join(absent)} (see docs/adding_a_study.md)")
    sweepable = tuple(getattr(mods["config"], "SWEEPABLE", ()))
    if sweepable and not hasattr(mods["run"], "sweep"):
        raise TypeError(f"study {study_id!r} names SWEEPABLE keys but its run.py has no sweep()")
    return Study(e, **{key: getattr(mods[mod], name) for key, (mod, name) in parts.items()},
                 sweep=mods["run"].sweep if sweepable else None, sweepable=sweepable,
                 plan=getattr(mods["run"], "plan", None))
