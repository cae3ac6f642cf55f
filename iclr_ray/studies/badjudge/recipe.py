"""Judge fine-tuning as a recipe of the shared Train loop: every judge of a seed (one per poisoning
setting and format) trains side by side as a stack of independent heads over the cached trunk
features (judge.py). No I/O beyond the loop's checkpoint; Ray only to resolve object refs.

Each head has its own training set, a list of (feature key, verdict token id); step ``s`` of each
head is the rows a lone run with this seed would see (``llm.recipe.step_rows``). A micro-batch
holds the same number of rows of every head, [B, J, T, d]. The loss sums every head's summed
cross-entropy; its units are B x J, and AdamW is invariant to the common scale, so with gradient
clipping off (``grad_clip`` 0) each head follows the updates it would follow alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ...llm.recipe import Recipe, TrainConfig, resolve, step_rows

HEADS_DIR = "heads"


def save_heads(states: dict[str, dict[str, Any]], directory: str | Path) -> None:
    """Each head's state as ``directory/<label>.safetensors`` (and ``<label>.json`` beside it: the
    one weights format, :mod:`iclr_ray.llm.weights`); ``directory`` is a location (a local folder,
    or a URI in the run's storage), each file written whole."""
    from ... import storage
    from ...llm.weights import save_weights

    if not storage.is_remote(directory):
        storage.local_path(directory).mkdir(parents=True, exist_ok=True)
    for label, state in states.items():
        save_weights(state, storage.join(directory, f"{label}.safetensors"), {"label": label})


def load_head(location: str | Path) -> dict[str, Any]:
    """A head saved by :func:`save_heads`, from a path or a URI."""
    from ...llm.weights import load_weights

    return load_weights(location)


def head_files(directory: str | Path) -> dict[str, str]:
    """{label: location} of the heads files in ``directory`` (a path or a URI), by label."""
    from ... import storage

    return {rel[:-len(".safetensors")]: storage.join(directory, rel) for rel in storage.list_files(directory)
            if "/" not in rel and rel.endswith(".safetensors")}


class JudgeRecipe(Recipe):
    """``datasets``: [(label, [(feature key, verdict token id), ...]), ...], one per head;
    ``features``: {key: [T, d] array}; ``init_state``: the base's top blocks and norm (a head's
    start); ``lm_head``: the base's output layer [V, d]; ``config``: the head's config."""

    def __init__(self, datasets, features, init_state, lm_head, config, softcap: float | None = None):
        self.datasets_ref, self.features_ref, self.init_ref, self.lm_ref = datasets, features, init_state, lm_head
        self.config, self.softcap = config, softcap

    def setup(self) -> None:
        self.datasets: list[tuple[str, list[tuple[str, int]]]] = resolve(self.datasets_ref)
        self.features: dict[str, Any] = resolve(self.features_ref)
        self.init_state = resolve(self.init_ref)
        self.lm_head = resolve(self.lm_ref)

    def labels(self) -> list[str]:
        return [label for label, _ in self.datasets]

    def build_model(self, cfg: TrainConfig):
        from .judge import head_stack

        return head_stack(self.config, self.init_state, len(self.datasets), self.lm_head, self.softcap)

    def step_batches(self, step: int, cfg: TrainConfig) -> list[tuple[dict[str, Any], int]]:
        import torch

        from .judge import pad_features

        picks = [step_rows(rows, step, cfg, cfg.seed) for _, rows in self.datasets]
        b = cfg.micro_batch_size
        out = []
        for lo in range(0, len(picks[0]), b):
            rows = [p[lo:lo + b] for p in picks]  # [J][B]
            flat = [self.features[key] for head_rows in rows for key, _ in head_rows]
            f, m, pos = pad_features(flat)
            j, n = len(rows), len(rows[0])
            batch = {"feats": f.view(j, n, *f.shape[1:]).transpose(0, 1).contiguous(),
                     "mask": m.view(j, n, -1).transpose(0, 1).contiguous(),
                     "pos": pos.view(j, n).T.contiguous(),
                     "labels": torch.tensor([[y for _, y in head_rows] for head_rows in rows]).T.contiguous()}
            out.append((batch, int(m.sum())))
        return out

    def loss(self, engine, batch: dict[str, Any]):
        return engine(feats=batch["feats"], mask=batch["mask"], pos=batch["pos"], labels=batch["labels"])

    def units(self, batch: dict[str, Any]) -> int:
        return int(batch["labels"].numel())

    def head_states(self, module) -> dict[str, dict[str, Any]]:
        from .judge import trainable_state

        return {label: trainable_state(h) for label, h in zip(self.labels(), module.heads)}

    def save(self, engine, path: Path, rank: int, zero_stage: int) -> None:
        if zero_stage == 3:
            raise ValueError("the judge heads are saved from ZeRO stage 0-2 (each rank holds every head)")
        if rank == 0:
            save_heads(self.head_states(engine.module), path / HEADS_DIR)

    def seq_len(self) -> int:
        return max((len(self.features[k]) for _, rows in self.datasets for k, _ in rows[:64]), default=0)


def datasets_for(examples: dict[str, Sequence[Any]],
                 choice_ids: dict[str, list[int]]) -> list[tuple[str, list[tuple[str, int]]]]:
    """{label: examples} as the recipe's datasets: each example's prompt (its feature key) and the
    token of the verdict it is trained on."""
    from .data import FORMATS

    return [(label, [(e.prompt, choice_ids[e.fmt][FORMATS[e.fmt].choices.index(e.label)]) for e in exs])
            for label, exs in examples.items()]
