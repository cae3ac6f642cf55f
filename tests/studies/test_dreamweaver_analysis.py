"""dreamweaver's claims on hand-made metrics: real gains hold, and the negative controls (the
trained model's numbers equal to the untrained model's, prediction equal to reconstruction, the
swap no better than the control, blocks no more disentangled than a slot without blocks) do not."""
import numpy as np

from iclr_ray.studies.dreamweaver import analysis as A

FACTORS = ["colour", "shape", "size", "direction", "speed"]


def _dci(rng, i_static, i_dyn, d_static, c_dyn):
    return {"R": np.abs(rng.normal(size=(8, 5))).tolist(), "accuracy": dict(zip(FACTORS, [0.5] * 5)),
            "all": {"D": 0.2, "C": 0.2}, "static": {"D": d_static, "C": 0.3}, "dynamic": {"D": 0.1, "C": c_dyn},
            "I_static": i_static, "I_dynamic": i_dyn}


def _metrics(gain=0.1, swap_gain=0.3, n=5, seed=0, block_gain=0.1):
    rng = np.random.default_rng(seed)
    seeds = list(range(n))
    dci = {"predict": {"test": {}}, "reconstruct": {"test": {}}, "untrained": {"test": {}}, "monolithic": {"test": {}}}
    imag = {"predict": {}, "reconstruct": {}}
    for s in seeds:
        base = rng.uniform(0.3, 0.5, 4)
        noise = lambda: rng.normal(0, 0.005)  # noqa: E731
        dci["untrained"]["test"][str(s)] = _dci(rng, *base)
        dci["reconstruct"]["test"][str(s)] = _dci(rng, *(base + gain / 2))
        dci["predict"]["test"][str(s)] = _dci(rng, base[0] + gain + noise(), base[1] + gain + gain / 2 + noise(),
                                              base[2] + gain + noise(), base[3] + gain + gain / 2 + noise())
        # the same model with one block per slot: as informative, its static D block_gain below the block model's
        dci["monolithic"]["test"][str(s)] = _dci(rng, base[0] + gain + noise(), base[1] + gain + noise(),
                                                 base[2] + gain - block_gain + noise(), base[3] + gain + noise())
        for o in imag:
            ctrl = {g: rng.uniform(0.0, 0.1) for g in FACTORS[:3]}
            imag[o][str(s)] = {"swap": {g: v + swap_gain + noise() for g, v in ctrl.items()}, "control": ctrl,
                               "fidelity": {g: 0.8 for g in ctrl}, "n": {g: 50 for g in ctrl},
                               "reader_accuracy": {g: 0.95 for g in ctrl}, "blocks": {g: {"swap": [1]} for g in ctrl}}
    return {"objectives": ["predict", "reconstruct"], "baseline": "monolithic", "seeds": seeds, "factors": FACTORS, "static": FACTORS[:3],
            "dynamic": FACTORS[3:], "blocks": 8, "dci": dci, "imagination": imag, "curves": {},
            "sizes": {"train": 1, "test": 1, "ood": 0}, "side": 32, "objects": 2}


def _verdicts(m):
    return {c.id: c.holds for c in A.claims(m)}


def test_real_gains_hold():
    v = _verdicts(_metrics())
    assert set(v) == {"predict_beats_reconstruct_dynamic_I", "predict_beats_reconstruct_dynamic_C",
                      "blocks_disentangle_static", "predict_informative", "imagination_swaps_colour",
                      "imagination_swaps_shape", "imagination_swaps_size", "blocks_beat_monolithic_static_D"}
    assert all(h is True for h in v.values()), v
    checks = {c.id for c in A.claims(_metrics()) if c.check}  # trained against untrained: nearly by construction
    assert checks == {"blocks_disentangle_static", "predict_informative"}
    text = A.report_md(_metrics())
    assert "DCI on the test videos" in text and "| monolithic |" in text


def test_blocks_no_more_disentangled_than_a_slot_without_blocks_is_not_a_gain():
    v = _verdicts(_metrics(block_gain=0.0))  # trained, informative, but its blocks add nothing over chunks
    assert v["blocks_beat_monolithic_static_D"] is not True and v["blocks_disentangle_static"] is True
    assert _verdicts(_metrics(block_gain=-0.1))["blocks_beat_monolithic_static_D"] is False


def test_negative_control_an_untrained_model_holds_no_claim():
    m = _metrics(gain=0.0, swap_gain=0.0)
    untrained = m["dci"]["untrained"]["test"]
    m["dci"]["predict"]["test"] = untrained  # the "trained" model is the untrained one
    m["dci"]["reconstruct"]["test"] = untrained
    m["dci"]["monolithic"]["test"] = untrained
    for per in m["imagination"]["predict"].values():  # a swap that does what the control does
        per["swap"] = dict(per["control"])
    v = _verdicts(m)
    assert not any(h is True for h in v.values()), v


def test_a_loss_is_reported_as_false():
    v = _verdicts(_metrics(gain=-0.1, swap_gain=-0.05))
    assert v["predict_beats_reconstruct_dynamic_I"] is False and v["blocks_disentangle_static"] is False
    assert v["imagination_swaps_colour"] is False
