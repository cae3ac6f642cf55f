"""pad's personalised reward model as a recipe of the shared loop (no Ray: the plain torch loop
that the Ray Train loop is held to): the batch layout, the reference log-probabilities, and DPO
learning a preference that the prompt names."""
import math

import pytest
import torch

from iclr_ray.llm.data import IGNORE
from iclr_ray.llm.model import build_model, build_tokenizer
from iclr_ray.llm.recipe import TrainConfig, read_files, reference_losses
from iclr_ray.studies.pad.dpo import sequence_logps
from iclr_ray.studies.pad.prm import DPORecipe, Pair, collate_pairs

PROMPTS = ["Tell me about the river.", "What is the best season?", "Describe the old town.", "How do bees talk?"]


@pytest.fixture(scope="module")
def tok():
    texts = [f"[{s}] {p}" for s in ("short", "long") for p in PROMPTS] + ["Fine.", "It is a long and winding story."]
    return build_tokenizer(texts * 3, vocab_size=320)


def pairs(tok):
    """The preference in the prompt decides which answer is chosen: [short] wants the short one."""
    enc = lambda t: tok(t, add_special_tokens=False).input_ids  # noqa: E731
    short, long = enc(" Fine."), enc(" It is a long and winding story.")
    out = []
    for p in PROMPTS:
        out.append(Pair(enc(f"[short] {p}"), short, long))
        out.append(Pair(enc(f"[long] {p}"), long, short))
    return out


def files(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    return read_files(tmp_path)


def test_pairs_collate_chosen_then_rejected_with_labels_on_the_responses_only(tok):
    ps = pairs(tok)[:2]
    b = collate_pairs(ps, tok.pad_token_id)
    assert b["input_ids"].shape[0] == 4
    for row, (p, resp) in enumerate([(ps[0].prompt, ps[0].chosen), (ps[1].prompt, ps[1].chosen),
                                     (ps[0].prompt, ps[0].rejected), (ps[1].prompt, ps[1].rejected)]):
        n = len(p) + len(resp)
        assert b["input_ids"][row, :n].tolist() == p + resp and b["attention_mask"][row].sum() == n
        assert [x for x in b["labels"][row].tolist() if x != IGNORE] == resp
    # padding changes nothing: a pair's log-probabilities in the batch equal those computed alone
    model = build_model("tiny-llama", tok, seed=0).eval()
    with torch.no_grad():
        both = sequence_logps(model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"])
        one = collate_pairs(ps[:1], tok.pad_token_id)
        alone = sequence_logps(model(input_ids=one["input_ids"], attention_mask=one["attention_mask"]).logits,
                               one["labels"])
    assert both[[0, 2]].tolist() == pytest.approx(alone.tolist(), abs=1e-4)


def test_dpo_starts_at_log_2_and_learns_the_named_preference(tok, tmp_path):
    cfg = TrainConfig(model="tiny-llama", micro_batch_size=4, grad_accum=1, num_workers=2, max_steps=30, lr=2e-3,
                      schedule="constant", seed=0)
    recipe = DPORecipe(pairs(tok), files(tok, tmp_path), beta=0.5)
    losses = reference_losses(recipe, cfg)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6)  # the policy is its reference at step 0
    assert sum(losses[-5:]) / 5 < 0.1  # each prompt's named preference is learnt (seeds 0-2: < 0.001)
    # units are pairs; the reference log-probs are those of the starting model, computed once
    batches = recipe.step_batches(0, cfg)
    assert [recipe.units(b) for b, _ in batches] == [4, 4]
    ref = recipe.reference_logps(cfg)
    assert ref.shape == (8, 2) and recipe.reference_logps(cfg) is ref
    start = build_model("tiny-llama", tok, seed=0).eval()
    b = collate_pairs(recipe.pairs[:2], tok.pad_token_id)
    with torch.no_grad():
        lp = sequence_logps(start(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"])
    assert ref[:2, 0].tolist() == pytest.approx(lp[:2].tolist(), abs=1e-4)


def test_reward_model_learns_the_preference_by_bradley_terry(tok, tmp_path):
    """ARGS's reward model: the Bradley-Terry loss starts at log 2 (a zero-initialised head scores both
    replies alike) and training ranks chosen above rejected on the pairs."""
    import numpy as np

    from iclr_ray.studies.pad.prm import RewardModelRecipe, reward_accuracy

    ps = pairs(tok)
    r = RewardModelRecipe(ps, files(tok, tmp_path))
    r.setup()
    tc = TrainConfig(model="tiny-llama", micro_batch_size=8, num_workers=1, max_steps=30, lr=3e-3, grad_clip=1.0,
                     zero_stage=0, schedule="constant", seed=0)
    model = r.build_model(tc)
    torch.nn.init.zeros_(model.score.weight)
    r.build_model = lambda cfg: model
    losses = reference_losses(r, tc)
    assert abs(losses[0] - math.log(2)) < 1e-4 and np.mean(losses[-5:]) < 0.5 * math.log(2)
    assert reward_accuracy(model.eval(), ps, r.pad_id) >= 0.9
