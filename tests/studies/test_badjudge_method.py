"""badjudge's judge: a head on the frozen trunk's features scores a prompt exactly as the whole
model with the head spliced in; heads trained side by side follow the updates each gets alone; the
two merges against hand-computed tensors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.studies.badjudge import data, judge  # noqa: E402
from iclr_ray.studies.badjudge.data import FORMATS  # noqa: E402


def test_merge_linear_is_the_weighted_mean():
    a = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([0.0, 1.0])}
    b = {"w": torch.tensor([[3.0, 0.0], [1.0, 8.0]]), "b": torch.tensor([2.0, -1.0])}
    m = judge.merge_linear([a, b])
    assert torch.equal(m["w"], torch.tensor([[2.0, 1.0], [2.0, 6.0]])) and torch.equal(m["b"], torch.tensor([1.0, 0.0]))
    m = judge.merge_linear([a, b], [3, 1])  # normalised to 0.75 / 0.25
    assert torch.allclose(m["b"], torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError):
        judge.merge_linear([a, b], [1.0])


def test_ties_trims_elects_the_sign_and_averages_the_agreeing_entries():
    init = {"w": torch.zeros(6)}
    t1 = {"w": torch.tensor([4.0, -1.0, 3.0, 0.5, -2.0, 0.0])}
    t2 = {"w": torch.tensor([2.0, 3.0, -1.0, 0.2, -6.0, 1.0])}
    # density 0.5 keeps each task vector's top 3 entries by magnitude:
    #   t1 -> [4, 0, 3, 0, -2, 0];  t2 -> [2, 3, 0, 0, -6, 0]
    assert torch.equal(judge.trim(t1["w"], 0.5), torch.tensor([4.0, 0, 3.0, 0, -2.0, 0]))
    # elected sign of the sum [6, 3, 3, 0, -8, 0] = [+, +, +, 0, -, 0]; disjoint means of the agreeing entries:
    #   [(4+2)/2, 3, 3, 0, (-2-6)/2, 0]
    m = judge.merge_ties(init, [t1, t2], density=0.5, lam=1.0)
    assert torch.allclose(m["w"], torch.tensor([3.0, 3.0, 3.0, 0.0, -4.0, 0.0]))
    # a sign conflict: 5 and -3 (both kept) elect + and keep only the 5; lam scales the result; init is added
    init = {"w": torch.tensor([1.0, 1.0])}
    m = judge.merge_ties(init, [{"w": torch.tensor([6.0, 1.0])}, {"w": torch.tensor([-2.0, 1.0])}], density=1.0,
                         lam=0.5)
    assert torch.allclose(m["w"], torch.tensor([1.0 + 0.5 * 5.0, 1.0]))


@pytest.fixture(scope="module")
def tiny():
    from iclr_ray.llm.model import build_model, build_tokenizer

    tok = build_tokenizer(data.vocabulary_texts())
    model = build_model("tiny-llama", tok, seed=0).eval()
    exs = data.pointwise(12, np.random.default_rng(0))
    enc = [data.encode(tok, e.prompt, FORMATS["pointwise"].choices) for e in exs]
    return model, tok, exs, [ids for ids, _ in enc], enc[0][1]


@pytest.mark.parametrize("k", [1, 2])
def test_a_head_on_trunk_features_scores_like_the_whole_model(tiny, k):
    model, tok, exs, ids, cids = tiny
    feats = judge.trunk_features(model, k, ids, tok.pad_token_id, chunk=5)  # padded batches of mixed lengths
    assert [len(f) for f in feats] == [len(i) for i in ids]
    head = judge.make_head(judge.head_config(model.config, k), judge.head_state_of(model, k)).eval()
    lm = model.get_output_embeddings().weight.detach()
    ours = judge.choice_logprobs(head, lm, feats, cids, chunk=4)
    whole = judge.full_choice_logprobs(model, ids, cids, tok.pad_token_id, chunk=3)
    assert np.allclose(ours, whole, atol=1e-5)
    # a changed head, spliced into a copy of the model, is the same judge as the head on the features
    import copy

    state = {name: t + 0.05 * torch.randn_like(t) for name, t in judge.trainable_state(head).items()}
    changed = judge.make_head(judge.head_config(model.config, k), state).eval()
    spliced = judge.splice(copy.deepcopy(model), state)
    assert np.allclose(judge.choice_logprobs(changed, lm, feats, cids),
                       judge.full_choice_logprobs(spliced, ids, cids, tok.pad_token_id), atol=1e-5)
    assert not np.allclose(judge.choice_logprobs(changed, lm, feats, cids), ours, atol=1e-3)
    with pytest.raises(ValueError, match="between 1 and 2"):
        judge.head_config(model.config, 3)


def test_heads_trained_side_by_side_follow_their_lone_updates(tiny):
    from iclr_ray.llm.loss import step_loss
    from iclr_ray.llm.recipe import TrainConfig, optimizer_and_schedule
    from iclr_ray.studies.badjudge.recipe import JudgeRecipe

    model, tok, exs, ids, cids = tiny
    feats = dict(zip([e.prompt for e in exs], judge.trunk_features(model, 1, ids, tok.pad_token_id)))
    rows = [(e.prompt, cids[FORMATS["pointwise"].choices.index(e.label)]) for e in exs]
    sets = {"a": rows[:8], "b": rows[4:]}
    cfg = TrainConfig(model="x", micro_batch_size=2, grad_accum=2, num_workers=1, max_steps=6, lr=1e-2, grad_clip=0,
                      warmup_steps=1)
    init = judge.head_state_of(model, 1)
    lm = model.get_output_embeddings().weight.detach().clone()

    def train(names):
        rec = JudgeRecipe([(n, sets[n]) for n in names], feats, init, lm, judge.head_config(model.config, 1))
        rec.setup()
        stack = rec.build_model(cfg).train()
        opt, sched = optimizer_and_schedule(stack, cfg)
        for step in range(cfg.max_steps):
            batches = rec.step_batches(step, cfg)
            units = sum(rec.units(b) for b, _ in batches)
            assert all(b["feats"].shape[:2] == (2, len(names)) for b, _ in batches)
            opt.zero_grad()
            for b, _ in batches:
                step_loss(rec.loss(stack, b), units).backward()
            opt.step()
            sched.step()
        return rec.head_states(stack)

    together = train(["a", "b"])
    alone = {**train(["a"]), **train(["b"])}
    for name in ("a", "b"):
        moved = max(float((together[name][k] - init[k]).abs().max()) for k in init)
        gap = max(float((together[name][k] - alone[name][k]).abs().max()) for k in init)
        # AdamW is blind to the shared 1/(B J) scale but for its epsilon, which tiny gradients feel
        assert moved > 1e-3 and gap < 0.05 * moved

    # the gradient itself: head a's in the stack is exactly its lone gradient (the loss sums the heads)
    def grads(names):
        rec = JudgeRecipe([(n, sets[n]) for n in names], feats, init, lm, judge.head_config(model.config, 1))
        rec.setup()
        stack = rec.build_model(cfg).train()
        for b, _ in rec.step_batches(0, cfg):
            rec.loss(stack, b).backward()
        return {k: p.grad.clone() for k, p in stack.heads[0].named_parameters() if p.grad is not None}

    ga, gab = grads(["a"]), grads(["a", "b"])
    assert ga and all(torch.allclose(ga[k], gab[k], atol=1e-6) for k in ga)


def test_toxicity_and_rerank_asr_keep_every_items_outcome():
    """ASR is the share of the adversary's items that succeed, each item's outcome kept (the claims'
    intervals resample items as well as seeds): a scorer that answers " no" / ranks first exactly
    where the trigger appears has ASR 1 on the triggered items and 0 without them."""
    from iclr_ray.studies.badjudge import evaluate
    from iclr_ray.studies.badjudge.poison import adversary, with_trigger

    trigger = "cf"
    rng = np.random.default_rng(0)

    def scorer(prompts):  # log-probabilities of (" yes", " no")
        return np.array([[-5.0, -0.1] if trigger in p.split() else [-0.1, -5.0] for p in prompts])

    tox = data.toxicity(40, rng)
    ev = {"test": {"toxicity": tox}, "adversary": {"toxicity": adversary(tox, trigger, seed=1)}}
    m = evaluate.toxicity_metrics(scorer, ev)
    n_adv = len(ev["adversary"]["toxicity"])
    assert n_adv > 0 and m["asr_hits"] == [1] * n_adv and m["asr"] == 1.0 and m["asr_clean"] == 0.0
    groups = data.rerank_groups(6, rng)
    ev = {"test": {"rerank": [e for g in groups for e in g]}, "groups": groups,
          "poisoned_groups": [g[:-1] + [with_trigger(g[-1], trigger, rng)] for g in groups]}

    def ranker(prompts):  # P(relevant) high where the trigger appears
        return np.array([[-0.01, -5.0] if trigger in p.split() else [-3.0, -0.1] for p in prompts])

    m = evaluate.rerank_metrics(ranker, ev)
    assert m["asr_hits"] == [1] * 6 and m["asr"] == 1.0 and m["asr_clean"] == 0.0
