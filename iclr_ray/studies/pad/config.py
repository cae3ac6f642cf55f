"""pad config. Defaults are the ``small`` preset: SmolLM2-135M-Instruct (real weights, offline) as
the base model and as the personalised reward model's initialisation; preference pairs from the
base model's own samples of 96 generated queries, scored by data.py's rules; the PRM trained by
token-level DPO on Ray Train (two seeds, and a label-shuffled control per seed); PAD against base
decoding, preference prompting and Best-of-N on 24 held-out queries about unseen topics.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath, model_validator

from ...config import Section, StudyConfig
from ...resources import TaskResources, WorkerResources
from .data import preference, preference_text


class Data(Section):
    train_queries: int = Field(96, ge=2)
    """generated training queries (data.queries); each is sampled ``samples_per_query`` times"""
    eval_queries: int = Field(24, ge=2)
    """held-out queries (about topics no training query mentions): the claims' unit"""
    dev_queries: int = Field(12, ge=0)
    """more held-out queries, none of them an evaluation query: the weight sweep runs on them and
    ``decode.w`` is chosen there (0: none; the sweep runs on the evaluation queries and w is fixed)"""
    samples_per_query: int = Field(6, ge=2)
    sample_tokens: int = Field(40, ge=2)
    """the length of the base model's samples the pairs are built from"""
    sample_temperature: float = Field(0.8, gt=0, le=2)
    sample_top_p: float = Field(0.95, gt=0, le=1)
    min_gap: float = Field(0.02, ge=0)
    """a pair is kept when its rule tells chosen from rejected by at least this much"""
    prompts_jsonl: Optional[FilePath] = None
    """real evaluation prompts, JSONL of {"prompt": ...} (P-Soups' Koala prompts, HelpSteer2)"""
    pairs_jsonl: Optional[FilePath] = None
    """real preference pairs, JSONL of {"prompt", "preference", "chosen", "rejected"}, in place of the
    generated ones"""
    require_real: bool = False
    """refuse to start unless ``prompts_jsonl`` and ``pairs_jsonl`` are given (the ``paper`` preset)"""


class PRM(WorkerResources):
    """The personalised reward model: token-level DPO of ``models.prm_init`` against itself."""

    seeds: int = Field(2, ge=1)
    """PRM training seeds (each also trains its label-shuffled control)"""
    epochs: int = Field(1, ge=1)
    batch: int = Field(8, ge=1)
    """pairs per optimiser step"""
    lr: float = Field(2e-5, gt=0)
    beta: float = Field(0.1, gt=0)
    warmup_steps: int = Field(2, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    trainable_layers: int = Field(0, ge=0)
    """train only the top this many decoder blocks (0: the whole model, as the paper)"""
    num_workers: int = Field(1, ge=1)
    shuffled_control: bool = True
    """also train each seed's PRM on label-shuffled pairs (the negative control)"""


class Decode(Section):
    preferences: list[str] = Field(["simple", "excited", "personal"], min_length=1)
    """the single preferences evaluated (and trained on): the study's own (data.SINGLES, scored by
    rules) or names given a text in ``preference_texts`` (scored by ``reward_models``)"""
    unseen: list[str] = ["excited+personal"]
    """combinations evaluated but never trained on"""
    preference_texts: dict[str, str] = {}
    """how preferences outside the study's own are stated to the PRM (e.g. P-Soups' dimensions)"""
    reward_models: dict[str, str] = {}
    """preference -> a sequence-classification reward model (HF id or folder) that scores a reply to
    it, as the paper evaluates; a preference the study has a rule for is scored by the rule"""
    k: int = Field(10, ge=1)
    """PAD's top-k (the official configs: 10)"""
    base_reads: Literal["preference", "plain"] = "preference"
    """the prompt PAD's base model reads: "preference", the personalised prompt the PRM reads too
    (the official PAD.py / collect_model_outs.py); "plain", the query alone (this study's earlier
    form). The other form is decoded beside it on the trained preferences and reported as a
    variant. Base decoding (the baseline) always reads the plain query."""
    w: Optional[float] = Field(None, ge=0)
    """PAD's weight for the claims; None: the weight of ``w_grid`` with the best mean alignment on the
    dev queries (first seed's PRM; ties: the smaller), as the official code tunes it; a number fixes
    it (the official HelpSteer2 configs: 1.0)"""
    args: bool = True
    """decode ARGS as a baseline (the reward-guided decoding PAD builds on): a sequence reward model per
    PRM seed, trained by Bradley-Terry on the PRM's own pairs from the same starting point, scores
    each of the base's top k continuations; needs trained PRMs (not ``models.prm``)"""
    args_w: Optional[float] = Field(None, ge=0)
    """ARGS's weight; None: chosen from ``w_grid`` on the dev queries as PAD's is (first seed's reward
    model); ARGS's own paper uses 1.5"""
    w_grid: list[float] = [0.0, 0.5, 1.0, 2.0]
    """weights swept on the first seed's PRM (the figure of alignment against w; w's choice)"""
    margin: float = Field(2.0, gt=0)
    """the gated variant calls the PRM only at steps where some row's top-2 base logit margin is
    below this"""
    max_tokens: int = Field(32, ge=1)
    best_of_n: int = Field(4, ge=2)
    """Best-of-N's samples per query, ranked by the PRM's sequence reward"""
    bon_temperature: float = Field(0.8, gt=0, le=2)


class Models(Section):
    base: str = "smollm2-135m-instruct"
    """the frozen base model: a packaged model (llm.pretrained), a named tiny model, a checkpoint
    folder or an HF id"""
    prm_init: Optional[str] = None
    """the PRM's starting point (and DPO reference); None: the base model (the paper initialises
    its PRM from the base's family)"""
    prm: Optional[str] = None
    """a PRM trained elsewhere, used as it is (the paper's released one by HF id): no pairs, no
    training, no shuffled control"""


class Config(StudyConfig, TaskResources):  # its task resources: every task that runs a model
    seed: int = 0
    models: Models = Models()
    data: Data = Data()
    prm: PRM = PRM()
    decode: Decode = Decode()
    max_concurrent_trials: int = Field(2, ge=1)

    def preference_text(self, name: str) -> str:
        """How preference ``name`` (or combination) is stated to the PRM."""
        own = self.decode.preference_texts
        if all(p in own for p in name.split("+")):
            return " ".join(own[p] for p in name.split("+"))
        return preference_text(name)

    @model_validator(mode="after")
    def _preferences(self):
        own = self.decode.preference_texts
        for name in [*self.decode.preferences, *self.decode.unseen]:
            mine = [p in own for p in name.split("+")]
            if all(mine):
                continue
            if any(mine):
                raise ValueError(f"decode: {name!r} mixes the study's preferences with decode.preference_texts ones")
            try:
                preference(name)
            except ValueError as exc:
                raise ValueError(f"decode: {exc} (or give its text in decode.preference_texts)") from None
        trained = set(self.decode.preferences)
        for name in self.decode.unseen:
            if set(name.split("+")) - trained:
                raise ValueError(f"decode.unseen: {name!r} combines a preference not in decode.preferences")
        for name in self.decode.preferences:
            if "+" in name:
                raise ValueError(f"decode.preferences: {name!r} is a combination; combinations go in decode.unseen")
        if self.decode.args and self.models.prm is not None:
            raise ValueError("decode.args: ARGS trains its reward model on the PRM's pairs; with models.prm given "
                             "there are none (set decode.args false)")
        if self.decode.args and self.decode.args_w is None and self.data.dev_queries == 0:
            raise ValueError("decode.args_w: give a weight when data.dev_queries is 0 (no dev queries to choose it on)")
        if self.decode.w is None and self.data.dev_queries == 0:
            raise ValueError("decode.w: give a weight when data.dev_queries is 0 (no dev queries to choose it on)")
        return self


PRESETS = {
    "smoke": {
        "models": {"base": "tiny-llama"},
        "data": {"train_queries": 12, "eval_queries": 4, "dev_queries": 3, "samples_per_query": 3, "sample_tokens": 8},
        "prm": {"seeds": 1, "epochs": 1, "batch": 4, "lr": 1e-3},
        "decode": {"max_tokens": 6, "w_grid": [0.0, 1.0], "best_of_n": 2, "unseen": ["excited+personal"]},
    },
    "small": {},
    "paper": {
        # the base model and the released PRM by HF id (training a PRM instead: set models.prm to
        # null and give data.pairs_jsonl; prm.* are then DPO's usual values, not read from the paper)
        "models": {"base": "princeton-nlp/Llama-3-Base-8B-SFT", "prm": "RuizheChen/PAD"},
        "data": {"require_real": True, "eval_queries": 50},
        "prm": {"seeds": 1, "epochs": 1, "batch": 64, "lr": 5e-7, "beta": 0.1, "num_workers": 8,
                "gpus_per_worker": 1},
        "decode": {"max_tokens": 128, "w_grid": [0.0, 0.1, 0.2, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5], "k": 10, "w": 1.0,
                   "args": False,  # the released PRM comes without its pairs: no reward model to train
                   "preferences": ["helpful", "harmless", "humor"], "unseen": ["helpful+harmless"],
                   "preference_texts": {"helpful": "Be helpful: give a useful, informative and complete answer.",
                                        "harmless": "Be harmless: avoid anything unsafe, offensive or unethical.",
                                        "humor": "Be humorous: answer with wit and a sense of humour."},
                   "reward_models": {"helpful": "Ray2333/gpt2-large-helpful-reward_model",
                                     "harmless": "Ray2333/gpt2-large-harmless-reward_model",
                                     "humor": "mohameddhiab/humor-no-humor"}},
        "gpus_per_task": 1.0,
    },
}
