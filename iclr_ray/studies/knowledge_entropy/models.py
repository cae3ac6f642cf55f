"""Models of a knowledge_entropy run and what is measured on them: loading a start point (step 0,
a checkpoint, an ``id@revision``), knowledge entropy on the probe set, the probes' loss, a
continual run's start model (resuscitated or not) and the trained model's entropy as the loop's
final evaluation. No Ray; the I/O is loading and saving checkpoints."""
from __future__ import annotations

from typing import Any

import numpy as np

from .world import World, split_revision


def load_start(source: str, world: World | None = None, seed: int = 0, model_name: str = ""):
    """A start model: ``init`` (the named tiny model as the pretraining loop builds it at step 0),
    a checkpoint folder (a path, or a URI in the run's storage: copied once to this node), or an
    HF id with ``@revision``."""
    import torch

    torch.set_num_threads(1)
    if source == "init":
        from ...llm.model import build_model

        return build_model(model_name, world.tokenizer(), seed=seed)
    from transformers import AutoModelForCausalLM

    from ... import storage

    path, rev = split_revision(source)
    return AutoModelForCausalLM.from_pretrained(storage.readable(path), revision=rev)


def on_device(model):
    """The model on the task's device (``llm.model.inference_device``: its GPU where Ray gave it one)."""
    from ...llm.model import inference_device

    return model.to(inference_device())


def entropy_record(model, ids: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """H, the per-layer entropies and the width of a model on a probe set."""
    import torch

    from .entropy import coefficient_means, layer_entropies

    c_bar = coefficient_means(model.eval(), torch.from_numpy(ids), torch.from_numpy(mask))
    layers = layer_entropies(c_bar)
    return {"h": float(layers.sum()), "layers": layers.tolist(), "n_layers": int(c_bar.shape[0]),
            "width": int(c_bar.shape[1]), "h_max": float(c_bar.shape[0] * np.log(c_bar.shape[1]))}


def probe_losses(model, eval_rows: dict[str, list]) -> dict[str, float]:
    """Per split, the probes' targets' mean negative log probability per token (what the loop's
    evaluation reports as ``eval_loss_<split>``)."""
    import torch

    from ...llm.data import collate
    from ...llm.loss import summed_token_loss

    out = {}
    device = next(model.parameters()).device
    with torch.no_grad():
        for split, rows in eval_rows.items():
            total, n = 0.0, 0
            for i in range(0, len(rows), 8):
                b = collate(rows[i:i + 8])
                logits = model(input_ids=b["input_ids"].to(device), position_ids=b["position_ids"].to(device),
                               use_cache=False).logits
                loss, k = summed_token_loss(logits, b["labels"].to(device))
                total, n = total + loss.item(), n + k
            out[split] = total / max(n, 1)
    return out


def start_model(spec: dict[str, Any], world: World, eval_rows: dict[str, list], out_dir: str) -> dict[str, Any]:
    """A continual trial's start: the checkpoint loaded, its entropy; resuscitated (``resus``: the
    lowest-C_bar neurons, ``random``: as many random neurons with the same factors) and its entropy
    again; the probes' loss before training; saved with the tokenizer to ``out_dir`` (a path, or a
    URI in the run's storage)."""
    import torch

    from . import entropy as ke

    model = on_device(load_start(spec["source"]))
    model.eval()
    ids, mask = torch.from_numpy(world.probe_ids), torch.from_numpy(world.probe_mask)
    c_bar = ke.coefficient_means(model, ids, mask)
    out: dict[str, Any] = {"h_start": ke.knowledge_entropy(c_bar), "h_start_layers": ke.layer_entropies(c_bar).tolist()}
    if spec["arm"] != "plain":
        plan = ke.resuscitation_factors(c_bar, spec["ratio"], spec["q"])
        if spec["arm"] == "random":
            plan = ke.random_like(plan, c_bar, spec["q"], seed=spec["seed"])
        ke.resuscitate(model, plan)
        after = ke.coefficient_means(model, ids, mask)
        out["h_resuscitated"] = ke.knowledge_entropy(after)
        out["h_resuscitated_layers"] = ke.layer_entropies(after).tolist()
        out["neurons_scaled"] = int(sum(len(n) for n in plan.neurons))
        out["mean_factor"] = float(np.mean(np.concatenate(plan.factors)))
    out["eval0"] = probe_losses(model, eval_rows)
    save_folder(model.cpu(), world.tokenizer(), out_dir)
    return out


def save_folder(model, tokenizer, location: str) -> None:
    """A Hugging Face folder (model and tokenizer) at ``location``: written there when it is a
    local path; for a URI, written to a local temporary folder and uploaded file by file."""
    from ... import storage

    with storage.folder_for(location) as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)


class EntropyScore:
    """``final_eval`` of a continual run: the trained model's knowledge entropy on the probe set
    (rank 0, on the final checkpoint's weights)."""

    def __init__(self, ids: np.ndarray, mask: np.ndarray):
        self.ids, self.mask = ids, mask

    def __call__(self, model, tokenizer) -> dict[str, float]:
        return {"h_final": entropy_record(on_device(model), self.ids, self.mask)["h"]}
