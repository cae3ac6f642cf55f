"""orion's claims on metrics built here: a clean decomposition holds; a patch that does nothing, a
patch that moves the answer instead of the request (which the same-request control catches), a
request rate no better than a guess, controls that give R1(C2), oversight that changes nothing and
a layer chosen by peeking at the scored pairs each come out false (or the cell is not judged);
intervals rest on the contexts the pairs share."""
import json

import numpy as np
import pytest

from iclr_ray.claims import Claim
from iclr_ray.studies.orion import analysis
from iclr_ray.studies.orion.config import Config

N_LAYERS, N_PAIRS, CONTEXTS = 6, 80, 24


def _cell(kind="decomposes", accuracy=0.9, band=(2, 3), rng=None, control=0, flips=0.0, chance=0.1):
    """Per-layer outcomes: early R2(C2), R1(C2) in ``band``, late R1(C1) (``decomposes``); the
    patch never changes x2 (``inert``); the answer moves at every patched layer (``answer``). The
    same-request patch (C3, R2) keeps R2(C2) up to the band and gives x4's own R2(C3) after it,
    as request patching predicts; where the answer moves, it gives R2(C3) everywhere. Pairs share
    CONTEXTS contexts (x2's context is pair i mod CONTEXTS)."""
    rng = rng or np.random.default_rng(0)
    keys = ("r2c2", "r1c2", "r1c1", "p_r1c2", "logit_diff", "unrelated_r1c2", "unrelated_r2c2", "noise_r1c2",
            "noise_r2c2", "x1_top1", "same_r2c2", "same_r2c3", "r2c2_soft", "r1c2_soft", "r1c1_soft")
    pl = {k: [] for k in keys}
    pl["layers"] = list(range(N_LAYERS))
    for layer in range(N_LAYERS):
        if kind == "decomposes":
            state = "r2c2" if layer < band[0] else "r1c2" if layer <= band[1] else "r1c1"
        else:
            state = {"inert": "r2c2", "answer": "r1c1"}[kind]
        noisy = rng.random(N_PAIRS) < flips
        for k in ("r2c2", "r1c2", "r1c1"):
            pl[k].append([int((k == state) != n) for n in noisy])
            pl[f"{k}_soft"].append(pl[k][-1])
        moved = kind == "answer" or (kind == "decomposes" and layer > band[1])
        pl["same_r2c2"].append([int(not moved)] * N_PAIRS)
        pl["same_r2c3"].append([int(moved)] * N_PAIRS)
        pl["p_r1c2"].append((0.6 if state == "r1c2" else 0.01) + 0.05 * rng.random(N_PAIRS))
        pl["logit_diff"].append(rng.normal(2.0 if state == "r1c2" else -3.0, 0.5, N_PAIRS).tolist())
        for ctrl in ("unrelated", "noise"):
            pl[f"{ctrl}_r1c2"].append([int(rng.random() < control) for _ in range(N_PAIRS)])
            pl[f"{ctrl}_r2c2"].append([1] * N_PAIRS)
        pl["x1_top1"].append([int(layer == N_LAYERS - 1 or kind == "answer")] * N_PAIRS)
    pl["p_r1c2"] = [list(map(float, x)) for x in pl["p_r1c2"]]
    cell = {"model": "m", "task": "nanoqa", "prompts": 60, "accuracy": accuracy, "accuracy_soft": accuracy,
            "pairs": [[(i + 1) % CONTEXTS, "city", i % CONTEXTS, "name"] for i in range(N_PAIRS)],
            "c3": [(i + 2) % CONTEXTS for i in range(N_PAIRS)], "chance": [chance] * N_PAIRS,
            "p_clean": (0.7 + 0.1 * rng.random(N_PAIRS)).tolist(), "per_layer": pl, "example": "x"}
    cell["selected_layer"] = analysis.select_layer(cell)
    return cell


def _metrics(cells, plain=None, patched=None):
    rng = np.random.default_rng(1)
    plain = plain if plain is not None else (rng.random(50) < 0.2).astype(int).tolist()
    patched = patched if patched is not None else (rng.random(50) < 0.9).astype(int).tolist()
    return {"models": {"m": {"layers": N_LAYERS, "label": "m", "pretrained": True}}, "cells": cells,
            "oversight": {"m": {"layer": 2, "plain": plain, "patched": patched, "no_distractor": [1] * 50,
                                "plain_distractor": [0] * 50, "patched_distractor": [0] * 50}}}


def _by_id(metrics, cfg=None):
    return {c.id: c for c in analysis.claims(metrics, cfg or Config())}


def test_a_clean_decomposition_holds():
    claims = _by_id(_metrics([_cell()]))
    for cid in ("m_nanoqa_keeps_probability", "m_nanoqa_request_band", "m_nanoqa_request_above_chance",
                "m_early_layers_keep_x2", "m_same_request_keeps_answer", "m_unrelated_patch_gives_no_request",
                "m_noise_patch_gives_no_request", "m_oversight_raises_accuracy", "m_last_layer_is_x1"):
        assert claims[cid].holds is True, claims[cid]
    assert claims["m_last_layer_is_x1"].check and claims["m_unrelated_patch_gives_no_request"].check
    assert claims["m_nanoqa_request_band"].n == CONTEXTS // 2  # the scored (odd) pairs sit on 12 contexts
    assert analysis.select_layer(_cell()) in (2, 3)


@pytest.mark.parametrize("kind", ["inert", "answer"])
def test_a_patch_that_does_not_move_the_request_fails(kind):
    claims = _by_id(_metrics([_cell(kind)]))
    assert claims["m_nanoqa_keeps_probability"].holds is False
    assert claims["m_nanoqa_request_band"].holds is False


def test_a_patch_that_moves_the_answer_fails_the_same_request_control():
    """The control the method could fail: (C3, R2) patched in says R2(C3) where the answer moved;
    request patching keeps R2(C2)."""
    assert _by_id(_metrics([_cell("answer")]))["m_same_request_keeps_answer"].holds is False
    inert = _by_id(_metrics([_cell("inert")]))
    assert inert["m_same_request_keeps_answer"].holds is True  # inert passes it: the request claims catch it
    assert inert["m_nanoqa_request_band"].holds is False


def test_a_request_rate_no_better_than_a_guess_is_not_above_chance():
    rng = np.random.default_rng(3)
    guess = _cell(rng=rng, flips=0.0, chance=1.0)  # every guess would be right: R1(C2) at 1.0 is no better
    assert _by_id(_metrics([guess]))["m_nanoqa_request_above_chance"].holds is False


def test_pairs_on_few_contexts_get_intervals_as_wide_as_their_contexts():
    """Half the scored pairs give R1(C2), but by context: all on some contexts, none on others. By
    pair the rate's interval is narrow; by context it rests on the 12 contexts and is wide."""
    cell = _cell()
    layer = cell["selected_layer"]
    cell["per_layer"]["r1c2"][layer] = [int(i % CONTEXTS < CONTEXTS // 2) for i in range(N_PAIRS)]
    band = _by_id(_metrics([cell]))["m_nanoqa_request_band"]
    from iclr_ray.claims import proportion

    scored_hits = cell["per_layer"]["r1c2"][layer][1::2]
    by_pair = proportion(sum(scored_hits), len(scored_hits))
    assert band.n == CONTEXTS // 2 and band.ci[1] - band.ci[0] > 1.3 * (by_pair.ci[1] - by_pair.ci[0])


def test_controls_that_give_r1c2_fail():
    claims = _by_id(_metrics([_cell(control=0.5)]))
    assert claims["m_unrelated_patch_gives_no_request"].holds is False
    assert claims["m_noise_patch_gives_no_request"].holds is False


def test_oversight_that_changes_nothing_fails_and_few_stories_are_inconclusive():
    plain = [1, 0] * 25
    assert _by_id(_metrics([_cell()], plain=plain, patched=plain))["m_oversight_raises_accuracy"].holds is False
    few = _by_id(_metrics([_cell()], plain=[0, 1, 0], patched=[1, 1, 0]))["m_oversight_raises_accuracy"]
    assert few.holds is None


def test_a_cell_the_model_cannot_answer_is_not_judged():
    claims = _by_id(_metrics([_cell(accuracy=0.5)]))
    assert not any(cid.startswith("m_nanoqa") for cid in claims)
    assert "m_early_layers_keep_x2" not in claims
    assert "(not judged)" in analysis.report_md(_metrics([_cell(accuracy=0.5)]), Config())


def test_the_layer_is_chosen_on_the_other_half_of_the_pairs():
    """R1(C2) at layer 1 on the choosing (even) pairs only, at layer 4 on the scored (odd) pairs
    only: the choice is layer 1, and the scored pairs show no R1(C2) there."""
    cell = _cell("inert")
    pl = cell["per_layer"]
    for layer, parity in ((1, 0), (4, 1)):
        pl["r1c2"][layer] = [int(i % 2 == parity) for i in range(N_PAIRS)]
        pl["p_r1c2"][layer] = [0.9 if i % 2 == parity else 0.01 for i in range(N_PAIRS)]
    assert analysis.select_layer(cell) == 1
    cell["selected_layer"] = 1
    assert _by_id(_metrics([cell]))["m_nanoqa_request_band"].measured == 0


def test_bands_merge_in_layer_order():
    a = {"layers": [3, 4], "r1c2": [[1], [0]]}
    b = {"layers": [0, 1, 2], "r1c2": [[0], [0], [1]]}
    assert analysis.merge_bands([a, b]) == {"layers": [0, 1, 2, 3, 4], "r1c2": [[0], [0], [1], [1], [0]]}


def test_claims_and_report_are_pure_functions_of_json_metrics():
    metrics = _metrics([_cell(), _cell("inert") | {"task": "factual"}])
    again = json.loads(json.dumps(metrics))
    assert [c.to_dict() for c in analysis.claims(metrics, Config())] == \
        [c.to_dict() for c in analysis.claims(again, Config())]
    assert analysis.report_md(metrics, Config()) == analysis.report_md(again, Config())
    assert all(isinstance(c, Claim) for c in analysis.claims(again, Config()))
