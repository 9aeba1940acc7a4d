"""The batched offline evaluation (`offline_tau`, `offline_tau_many`) against `replay` run one prompt and one rule at
a time: every field of the result is the same, for both layouts, chain and DDTree, with and without a tap transform,
and with several transforms at once. Fixtures: the shared trained pair of `dflash_nb.testing` (`tiny_pair`)."""
from dataclasses import asdict
import pytest
import torch
from dflash_nb.evaluate import (_start, accept_chain, accept_tree, offline_result, offline_tau, offline_tau_many,
                                replay)


def reference_offline_tau(model, cache, indices=None, budgets=(8,), name="drafter", transform=None):
    "Offline τ as `replay` computes it, one prompt and one rule at a time."
    c, rounds = model.config, [[] for _ in range(len(budgets) + 1)]
    for i in range(len(cache)) if indices is None else indices:
        r, taps = cache[i], cache.taps_for(i, c.fc_layer_ids)
        if (s := _start(r["loss_mask"])) is None: continue
        taps = taps if transform is None else transform(taps)
        for k, a in enumerate([accept_chain] + [accept_tree(b) for b in budgets]):
            rounds[k].append(replay(model, r["input_ids"], taps, s, a))
    return offline_result(model, name, rounds, budgets)


def halve_tap2(t): return torch.cat([t[:, :32], t[:, 32:64] / 2, t[:, 64:]], -1)


@pytest.mark.parametrize("fusion", ["fused", "split"])
@pytest.mark.parametrize("transform", [None, halve_tap2], ids=["as is", "tap 2 halved"])
def test_offline_tau_is_replay_prompt_by_prompt(tiny_pair, fusion, transform):
    m = tiny_pair.load(fusion)
    assert asdict(offline_tau(m, tiny_pair.cache, budgets=(4, 8), transform=transform)) == \
        asdict(reference_offline_tau(m, tiny_pair.cache, budgets=(4, 8), transform=transform))


def test_many_transforms_at_once_are_each_alone(tiny_pair):
    m, cache, idx = tiny_pair.load("fused"), tiny_pair.cache, [5, 0, 2]
    many = offline_tau_many(m, cache, {"as is": None, "halved": halve_tap2}, idx, budgets=(4,))
    assert asdict(many["halved"]) == asdict(reference_offline_tau(m, cache, idx, (4,), "halved", halve_tap2))
    assert many["as is"].tau == offline_tau(m, cache, idx, budgets=()).tau


def test_one_walk_scores_the_next_anchors_in_its_call(tiny_pair, monkeypatch):
    """A lone DDTree walk scores the blocks at its next anchors in the same lm_head call, first on their first slots
    (the trees that reach the last of those are scored again on all): fewer calls, the same rounds."""
    import dflash_nb.evaluate as ev
    m, cache, calls = tiny_pair.load("fused"), tiny_pair.cache, []
    def counted(*args):
        calls.append(len(args[2]))
        return tree_accepts(*args)
    tree_accepts = ev._tree_accepts
    monkeypatch.setattr(ev, "_tree_accepts", counted)
    got = offline_tau(m, cache, [1], budgets=(4,))
    assert asdict(got) == asdict(reference_offline_tau(m, cache, [1], budgets=(4,)))
    rounds = len(got.rounds[0])
    assert len(calls) < rounds and max(calls) > 1                       # several blocks scored per call
    assert max(calls) <= ev.HEAD_CALL_ROWS // ev.FIRST_SLOTS
