"""DFlash 2 decoding through `RoundDrafter.step`'s laid-out path (issue 48): lossless, and on the fast path every round.

`nbs/01a_drafting.ipynb` tests the step's scores against the reference forward; `nbs/07_decode.ipynb` decodes with a
DFlash 2 drafter of random convs and selector. Here: a DFlash 2 drafter with every DFlash 2 option that changes the
arithmetic (3-tap convs, a selector that moves the walk, the head's multiplier and softcap, an embedding scale) decodes
exactly the target's greedy tokens on a hybrid and an attention-only tiny target, every round through the fast path
(each round's context is a `DraftContext`, written in place), and drafts what the reference forward drafts."""
import pytest
import torch
from dflash_nb.config import DFlashConfig
from dflash_nb.decode import greedy_generate, speculative_generate
from dflash_nb.drafting import DraftContext, RoundDrafter
from dflash_nb.model import DFlashDraftModel, upgrade_to_dflash2
from dflash_nb.target import tiny_target
from dflash_nb.testing import tiny_drafter

torch.set_num_threads(1)


class Recording(RoundDrafter):
    "A `RoundDrafter` that keeps each round's context and drafts, and the reference forward's drafts of that round."
    def __init__(self, drafter):
        super().__init__(drafter)
        self.contexts, self.drafts, self.reference = [], [], []

    def step(self, anchor, context, taps):
        scores, ctx = super().step(anchor, context, taps)
        with torch.inference_mode():
            h, _ = self.states(anchor, context, taps)
            self.reference.append(self.drafter.draft_scores(h, anchor)[0].argmax(-1).tolist())
        self.contexts.append(ctx)
        self.drafts.append(scores.argmax(-1).tolist())
        return scores, ctx


def dflash2_drafter(target, seed: int = 0) -> DFlashDraftModel:
    "A random DFlash 2 drafter for `target` with every option on: random convs and a selector whose transitions matter."
    shape = tiny_drafter(num_hidden_layers=2, head_dim=16, intermediate_size=128, block_size=5,
                         mask_token_id=target.vocab_size - 1, input_embedding_scale=1.5, output_multiplier=0.5,
                         final_logit_softcapping=4.0)
    c = DFlashConfig(**shape, hidden_size=target.hidden_size, vocab_size=target.vocab_size,
                     num_target_layers=target.num_layers, target_layer_ids=[1, 3, 5])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        d = upgrade_to_dflash2(DFlashDraftModel(c).attach_target(target.model), conv_kernel_size=3,
                               conv_group_size=16, selector_rank=8, selector_top_k=6)
        with torch.no_grad():
            for layer in d.layers:
                for conv in (layer.attention_conv, layer.mlp_conv):
                    conv.base_kernel.normal_(0, 0.5)
                    conv.kernel_projection.weight.normal_(0, 0.05)
            d.candidate_selector.hidden_projection.weight.normal_(0, 0.3)
            d.candidate_selector.successor_codebook.normal_()
    return d


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3"])
def test_dflash2_decodes_losslessly_on_the_fast_path(kind):
    target = tiny_target(kind, seed=0)
    rounds = Recording(dflash2_drafter(target))
    prompt = torch.randint(0, 250, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    got = speculative_generate(target, rounds, prompt, 16, eos_token_id=[])
    assert got.tokens == greedy_generate(target, prompt, 16, eos_token_id=[]).tokens
    assert len(rounds.contexts) == len(got.acceptance) > 1
    assert all(type(c) is DraftContext for c in rounds.contexts)
    assert len({id(c.buffers) for c in rounds.contexts}) < len(rounds.contexts) / 2     # written in place, grown rarely
    assert rounds.drafts == rounds.reference
