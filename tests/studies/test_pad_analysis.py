"""pad's claims on metrics built here: PAD replies that carry the requested style hold every claim;
negative controls (PAD that changes nothing, a shuffled PRM as good as the real one, one style for
every preference, a gate that is slower) do not; the report and figures draw from the metrics."""
import copy

import numpy as np
import pytest

from iclr_ray.studies.pad import analysis, data, plots

TRAINED = ["simple", "excited", "personal"]
UNSEEN = ["excited+personal"]
FILLER = "considerable preparation requires substantial understanding regarding procedures".split()


def _base_reply(rng) -> str:
    words = list(rng.choice(FILLER, size=int(rng.integers(4, 8))))
    return "It is " + " ".join(words) + "."


def _styled(pref: str, rng) -> str:
    """A reply that scores high under ``pref``'s rules and like the base under the others."""
    words = " ".join(rng.choice(FILLER, size=int(rng.integers(3, 6))))
    if pref == "simple":
        return "It is a good and fun day to go " + " ".join(["out"] * int(rng.integers(1, 4))) + "."
    if pref == "excited":
        return f"It is {words}! Wonderful!"
    if pref == "personal":
        return f"You will find your {words} rewarding."
    return f"You will love your {words}!"  # excited+personal


def _rec(texts, seconds=1.0, calls=0, steps=0):
    return {"texts": texts, "tokens": 10 * len(texts), "seconds": seconds, "prm_calls": calls, "steps": steps}


def fake_metrics(n=12, seeds=(0, 1), pad_reply=_styled, shuffled_reply=None, gated_seconds=0.6, pad_nll=0.2,
                 direct_reply=None):
    """``pad_nll``: how many nats per token more PAD's replies cost the base than its own (which cost
    1.0 +- 0.1); ``direct_reply``: the PRM decoded alone (default: the base's replies)."""
    rng = np.random.default_rng(0)
    queries = [f"q{i}" for i in range(n)]
    base_texts = [_base_reply(rng) for _ in queries]
    prefs = [*TRAINED, *UNSEEN]
    prompting = {p: _rec([t if i % 3 else _styled(p, rng) for i, t in enumerate(base_texts)]) for p in prefs}
    prms = []
    for kind, reply in (("real", pad_reply), ("shuffled", shuffled_reply or (lambda p, r: _base_reply(r)))):
        for s in seeds:  # the shuffled controls decode the trained preferences only, as the run does
            pad = {p: _rec([reply(p, rng) for _ in queries]) for p in (prefs if kind == "real" else TRAINED)}
            r = {"label": f"seed{s}-{kind}", "seed": s, "kind": kind, "pad": pad,
                 "bon": {p: {"texts": list(base_texts), "rewards": [[0.0]] * n} for p in prefs},
                 "sweep": {}, "gated": {}, "pad_single": {}}
            if kind == "real":
                for p in prefs:
                    pad[p]["nll"] = (1.0 + pad_nll + rng.normal(0, 0.1, n)).tolist()
                # the other form of PAD (the base reads the plain query): half its replies styled
                r["pad_variant"] = {p: {**_rec([_styled(p, rng) if i % 2 else t for i, t in enumerate(base_texts)]),
                                        "nll": (1.1 + rng.normal(0, 0.1, n)).tolist()} for p in TRAINED}
                r["prm_direct"] = {p: {**_rec([(direct_reply or (lambda q, g: _base_reply(g)))(p, rng)
                                               for _ in queries]), "nll": (1.3 + rng.normal(0, 0.1, n)).tolist()}
                                   for p in TRAINED}
                r["base_single"] = _rec(base_texts, seconds=0.5)
                for p in prefs:
                    r["pad_single"][p] = _rec(pad[p]["texts"], seconds=1.0 + 0.05 * rng.random())
                    r["gated"][p] = _rec(pad[p]["texts"], seconds=gated_seconds + 0.05 * rng.random(), calls=3,
                                         steps=10)
                if s == seeds[0]:  # the weight sweep, on the dev queries (here: replies like the evaluation ones)
                    dev = {"queries": [f"d{i}" for i in range(n)], "on": "dev",
                           "base": {p: list(base_texts) for p in TRAINED},
                           "sweep": {p: {"0.0": list(base_texts), "k1": list(base_texts),
                                         "1.0": [_styled(p, rng) for _ in queries], "2.0": pad[p]["texts"]}
                                     for p in TRAINED}}
            prms.append(r)
    return {"queries": queries,
            "preferences": {"trained": TRAINED, "unseen": UNSEEN, "texts": {p: data.preference_text(p) for p in prefs}},
            "pairs": {"n": 30, "by_preference": {p: 10 for p in TRAINED},
                      "examples": [{"query": "q", "preference": "simple", "chosen": "a", "rejected": "b", "gap": 0.1}]},
            "seeds": list(seeds),
            "training": [{"label": r["label"], "seed": r["seed"], "kind": r["kind"], "steps": 2, "seconds": 3.0,
                          "model": f"/x/{r['label']}", "curve": [{"step": 1, "loss": 0.69}, {"step": 2, "loss": 0.3}]}
                         for r in prms],
            "dev": dev,
            "base": {"base": {**_rec(base_texts), "nll": (1.0 + rng.normal(0, 0.1, n)).tolist()},
                     "prompting": {p: {**r, "nll": (1.1 + rng.normal(0, 0.1, n)).tolist()} for p, r in prompting.items()}},
            "prms": prms,
            "settings": {"k": 10, "w": 1.0, "w_chosen": "dev", "base_reads": "preference", "margin": 2.0, "w_grid": [0.0, 1.0, 2.0], "best_of_n": 4,
                         "max_tokens": 32}}


def _by_id(claims):
    return {c.id: c for c in claims}


def test_pad_that_carries_the_style_holds_every_claim():
    c = _by_id(analysis.claims(fake_metrics(), None))
    for d in TRAINED:
        assert c[f"beats_base_{d}"].holds is True and c[f"beats_prompting_{d}"].holds is True, d
    assert c["unseen_excited_personal"].holds is True
    assert c["needs_learned_preference"].holds is True and c["personalised"].holds is True
    assert c["beats_best_of_n"].holds is True and c["gate_speeds_up"].holds is True
    assert c["w0_is_base"].check and c["w0_is_base"].holds is True and c["k1_is_base"].holds is True
    assert c["beats_base_simple"].n == 12  # the unit: held-out queries (PRM seeds averaged first)


def test_negative_control_pad_that_changes_nothing_holds_no_gain():
    m = fake_metrics()
    for r in analysis.prm_runs(m, "real"):
        for p in r["pad"]:
            r["pad"][p]["texts"] = list(m["base"]["base"]["texts"])
    c = _by_id(analysis.claims(m, None))
    for d in TRAINED:
        assert c[f"beats_base_{d}"].holds is False, d  # exactly zero gain: not a rise
    assert c["unseen_excited_personal"].holds is False and c["personalised"].holds is False


def test_negative_control_a_shuffled_prm_as_good_as_the_real_one():
    c = _by_id(analysis.claims(fake_metrics(shuffled_reply=_styled), None))
    assert c["needs_learned_preference"].holds is not True
    assert c["beats_base_simple"].holds is True  # the real PRM still beats the base; the control says why


def test_negative_control_one_style_for_every_preference_is_not_personal():
    c = _by_id(analysis.claims(fake_metrics(pad_reply=lambda p, r: "You will love it! Yes!"), None))
    assert c["personalised"].holds is False
    assert c["beats_base_excited"].holds is True  # the style happens to suit some preferences


def test_negative_control_a_gate_slower_than_pad_and_broken_identities():
    m = fake_metrics(gated_seconds=1.5)
    for p, sweep in m["dev"]["sweep"].items():  # w = 0 that is not the base's greedy decoding
        sweep["0.0"] = list(sweep["2.0"])
    c = _by_id(analysis.claims(m, None))
    assert c["gate_speeds_up"].holds is False and c["w0_is_base"].holds is False
    assert c["k1_is_base"].holds is True


def test_report_and_figures_read_the_metrics_only():
    m = fake_metrics()
    text = analysis.report_md(m, None)
    for part in ("Preference pairs", "PRM training", "Alignment on 12 held-out", "Cost", "Alignment against w",
                 "/x/seed0-real"):
        assert part in text, part
    figs = plots.plot_all(copy.deepcopy(m), None)
    assert set(figs) == {"alignment", "weight_sweep", "prm_training", "cost"}
    m1 = fake_metrics(seeds=(0,))
    m1["prms"] = [r for r in m1["prms"] if r["kind"] == "real"]
    c = _by_id(analysis.claims(m1, None))
    assert "needs_learned_preference" not in c and c["beats_base_simple"].holds is True


@pytest.mark.parametrize("w, expect", [("2.0", 1.0), ("0.0", 0.0)])
def test_the_weight_sweep_curve_reads_the_dev_queries(w, expect):
    curve = analysis.sweep_curve(fake_metrics())["excited"]
    assert [x for x, _ in curve] == [0.0, 1.0, 2.0]
    at = dict(curve)[float(w)]
    assert (at > 0.5) == bool(expect)


def test_w_is_chosen_on_the_dev_queries():
    from iclr_ray.studies.pad.run import choose_w

    sweep = fake_metrics()["dev"]["sweep"]
    for texts in sweep.values():
        texts["1.0"] = list(texts["2.0"])
    assert choose_w(sweep, [0.0, 1.0, 2.0], analysis.rule_scores) == 1.0  # 1.0 and 2.0 tie: the smaller
    for texts in sweep.values():  # w = 2 alone carries the style
        texts["1.0"] = list(texts["0.0"])
    assert choose_w(sweep, [0.0, 1.0, 2.0], analysis.rule_scores) == 2.0


def test_preferences_without_rules_are_scored_by_their_reward_models():
    m = fake_metrics(n=3)
    texts = m["base"]["base"]["texts"]
    m["rm_scores"] = {"helpful": {str(i): {t: float(i)} for i, t in enumerate(texts)}}
    assert list(analysis.scores(texts, "helpful", m)) == [0.0, 1.0, 2.0]
    both = analysis.scores(texts, "helpful+excited", m)
    assert list(both) == [(i + data.excited(t)) / 2 for i, t in enumerate(texts)]
    assert np.isnan(analysis.scores(texts, "humor", m)).all()  # neither a rule nor a reward model
    assert np.isnan(analysis.scores(["unscored reply", *texts[1:]], "helpful", m)[0])


def test_the_fluency_guard_and_the_prm_decoded_alone():
    """PAD's replies at +0.2 nats per token over the base's hold the fluency guard, gibberish at
    +2.0 fails it; a PRM that, decoded alone, carries the style as well as PAD makes PAD's gain over
    it not hold (the base's guidance added nothing), one that does not carry it makes it hold."""
    c = _by_id(analysis.claims(fake_metrics(), None))
    for d in TRAINED:
        assert c[f"fluency_kept_{d}"].holds is True and c[f"beats_prm_direct_{d}"].holds is True, d
    c = _by_id(analysis.claims(fake_metrics(pad_nll=2.0, direct_reply=_styled), None))
    for d in TRAINED:
        assert c[f"fluency_kept_{d}"].holds is False and c[f"beats_prm_direct_{d}"].holds is not True, d
    text = analysis.report_md(fake_metrics(), None)
    assert "the PRM decoded alone" in text and "base NLL / token" in text


def test_the_identities_compare_with_the_base_on_the_prompt_it_reads():
    """Where PAD's base reads the personalised prompt, w = 0 and k = 1 must give the base's greedy
    replies on that prompt, one reference per preference: a sweep whose w = 0 replies are the plain
    query's replies fails the check once that reference differs."""
    m = fake_metrics()
    c = _by_id(analysis.claims(m, None))
    assert c["w0_is_base"].holds is True and c["k1_is_base"].holds is True
    rng = np.random.default_rng(5)
    m["dev"]["base"]["excited"] = [_styled("excited", rng) for _ in m["dev"]["queries"]]  # prompting's replies
    c = _by_id(analysis.claims(m, None))
    assert c["w0_is_base"].holds is False and c["k1_is_base"].holds is False
    assert c["w0_is_base"].measured == pytest.approx(2 / 3)  # the other two preferences still match


def test_the_other_base_prompt_is_reported_as_a_variant():
    m = fake_metrics()
    rows = {(r["preference"], r["method"]): r for r in analysis.alignment_table(m)}
    assert rows[("excited", "pad")]["label"] == "PAD (base reads the preference (official))"
    assert rows[("excited", "pad_variant")]["label"] == "PAD, base reads the plain query"
    assert rows[("excited", "pad_variant")]["est"].value < rows[("excited", "pad")]["est"].value
    assert "the personalised prompt" in analysis.report_md(m, None)
    m["settings"]["base_reads"] = "plain"
    rows = {(r["preference"], r["method"]): r for r in analysis.alignment_table(m)}
    assert rows[("excited", "pad_variant")]["label"] == "PAD, base reads the preference (official)"
    assert "prompting and this measures" not in _by_id(analysis.claims(m, None))["beats_prompting_simple"].note


def with_args(m, reply, rng_seed=5):
    """ARGS's replies in every real run (``reply(preference, rng)``), its reward models in training,
    its weight and its sweep on the dev queries."""
    rng = np.random.default_rng(rng_seed)
    n = len(m["queries"])
    for r in analysis.prm_runs(m, "real"):
        r["args"] = {p: {**_rec([reply(p, rng) for _ in range(n)]), "nll": (1.2 + rng.normal(0, 0.1, n)).tolist()}
                     for p in TRAINED}
    m["training"] += [{"label": f"seed{s}-rm", "seed": s, "kind": "rm", "steps": 2, "seconds": 3.0, "model": "/x/rm",
                       "accuracy": 0.8, "curve": [{"step": 1, "loss": 0.69}, {"step": 2, "loss": 0.4}]}
                      for s in m["seeds"]]
    m["dev"]["args_sweep"] = {p: {"0.0": list(m["base"]["base"]["texts"]), "2.0": [reply(p, rng) for _ in range(n)]}
                              for p in TRAINED}
    m["settings"].update(args_w=2.0, args_w_chosen="dev")
    return m


def test_beats_args_holds_over_a_weaker_baseline_and_not_over_one_as_good():
    """PAD above an ARGS that leaves the base's replies: holds; the negative control, an ARGS whose
    replies carry the style as well as PAD's: not true (the sequence reward model did as much)."""
    c = _by_id(analysis.claims(with_args(fake_metrics(), lambda p, r: _base_reply(r)), None))
    for d in TRAINED:
        assert c[f"beats_args_{d}"].holds is True and c[f"beats_args_{d}"].source == "paper-read", d
    c = _by_id(analysis.claims(with_args(fake_metrics(), _styled), None))
    for d in TRAINED:
        assert c[f"beats_args_{d}"].holds is not True, d
    assert "beats_args_simple" not in _by_id(analysis.claims(fake_metrics(), None))  # a run without ARGS
    text = analysis.report_md(with_args(fake_metrics(), _styled), None)
    assert "ARGS (sequence reward model)" in text and "ARGS against w" in text and "80% (seed0-rm)" in text
