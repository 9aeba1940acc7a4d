"""Speculative decoding benchmark: offline vs online τ (chain and DDTree), wall-clock speedup over target-only greedy
decoding, and the per-round breakdown (draft, verify, rollback) of today's path next to the previous one, measured in
the same run. Prints tables; asserts nothing.

    python bench/decode.py [--drafter PATH] [--prompts 24] [--max-new-tokens 64] [--train-steps 300] [--threads 1]
                           [--target PATH] [--dense-prompts 8] [--dflash2-only]

Target: the toy target (`dflash_nb.toy.load_toy_target`, a Qwen3.5 hybrid) unless `--target` names a local HF model
directory; a random tiny Qwen3.5 of the toy's shape if neither is available. Prompts: the toy's eval prompts.
Drafter: `--drafter PATH` (a hub-layout checkpoint); else one trained here for `--train-steps` steps on a small cache of
regenerated train-prompt responses (dflash_nb.train); `--train-steps 0` uses a random drafter (τ near 1).

Before / after. "before" is the path `dflash_nb.decode` had until this change, kept below as `reference_generate`: a
chain round drafted with two drafter calls (`extend_context` with the accepted taps, then `draft_logits` of all B
slots), verified with the model's own forward (chunked Gated DeltaNet), and on a hybrid target rolled back by
snapshotting the linear-attention states before the verify, restoring them and re-running those layers over the kept
tokens. "after" is `speculative_generate`: one fused `RoundDrafter.step` (RoPE table and K/V buffers made once per decode,
weights laid out once per drafter), a verify that records every node's Gated DeltaNet state, and a rollback that
copies one of them. Both run on the same prompts, interleaved with the target-only decode
(t1 = target-only seconds per token; `greedy_generate` and "after" run in inference mode, "before" as it was,
under no_grad). The ideal speedup of a path is τ·t1/t_verify (all time spent verifying); the
ratio measured ÷ ideal says how much drafting, rollback and bookkeeping cost on top.

A second target, attention-only: a random Qwen3 of the first target's shape (layers, hidden, vocab) built here, with a
random drafter of the same shape whose drafts are replaced by the target's greedy tokens wrong from a scheduled slot on
(the drafter's forward still runs, so its cost is real; τ is set by the schedule, about that of the trained drafter).

Two small tables explain the drafting cost: the time of a block's rows times each matrix of the drafter's step in
both layouts (`RoundDrafter.weights`, `dflash_nb.drafting`), and one step with warm caches against one after 64 MB were copied
(what a verify does to the caches before a round's drafting).

Recorded run (the comparison that used to sit in nbs/07_decode.ipynb). The toy target with a drafter trained for 300
steps (2 layers, block 8, 24 eval prompts, 64 tokens; 1 thread of a 2-core CPU, load average about 1), t1 6.81 ms on
the hybrid and 3.27 ms on the twin:

| per round | before | after |
|---|---|---|
| toy hybrid: draft / verify / rollback (ms) | 2.31 / 15.68 / 6.42 | 1.15 / 9.85 / 0.10 |
| toy hybrid: draft / verify | 14.8% | 11.7% |
| toy hybrid: measured speedup (ideal) | 0.38x (0.59x) | 0.83x (0.94x) |
| toy hybrid: measured / ideal | 0.64 | 0.88 |
| attention-only twin: draft / verify / rollback (ms) | 1.95 / 5.68 / 0.11 | 0.99 / 5.21 / 0.05 |
| attention-only twin: draft / verify | 34.3% | 19.0% |
| attention-only twin: measured speedup (ideal) | 0.76x (1.05x) | 0.94x (1.14x) |
| attention-only twin: measured / ideal | 0.72 | 0.82 |

DFlash 2 (issue 48). A table compares a DFlash 2 round's drafting with a DFlash round of the same backbone
(`upgrade_to_dflash2` of the drafter, z-lab's shape: convs of 2 taps in groups of 16, selector rank 256 over the top 16,
random DFlash 2 weights): "before" is the reference forward the step fell back to (`RoundDrafter.states`, then
`draft_scores`), "after" the laid-out step (convs in `LayerWeights.step`, the walk in `SelectorWeights.scores`). All
paths interleaved in one run, 3 repeats, medians; ratios are to the DFlash step of the same repeat.
`--dflash2-only` prints just that table, on a random drafter of the toy's shape and on one of SmolLM2-135M's shape
(drafting cost does not depend on training). Recorded (1 thread of a 2-core CPU shared with other jobs, load 1-2):

| DFlash 2 round ÷ DFlash round | toy (H 128, V 4096), before | toy, after | SmolLM2-135M shape, before | after |
|---|---|---|---|---|
| conv only | 2.43x | 1.13x | 0.85x | 1.03x |
| selector only | 2.34x | 1.22x | 0.87x | 1.04x |
| conv + selector | 2.89x | 1.32x | 0.90x | 1.04x |

At the toy's size a round is a few hundred small torch calls (DFlash: 2.96 ms, under that load); DFlash 2 adds ~11
per conv (4 per round) and ~14 for the walk, whose top-K over the vocabulary alone is ~4%: per-call overhead, not
arithmetic. At SmolLM2's shape the lm_head dominates and DFlash 2 costs 1.03-1.04x. There the reference forward is
faster than either laid-out step: its lm_head product reads [out, in] (nn.Linear), which at 7 rows x 49152 measured
faster than the [in, out] copy here; that is the DFlash layout's question, not DFlash 2's.

A second run, with every time a little lower (t1 6.25 and 3.26 ms), gave 0.90 and 0.84 after (0.64 and 0.73 before),
with drafting at 9.6% and 16.8% of a verify. The rollback is gone from the hybrid's round (a copy of one recorded
state), and the node-by-node verify is faster than the chunked one at these lengths. The [in, out] layout of
`RoundDrafter.weights` makes each product 1.4-1.9x faster (the layout table), which took a round's drafting from 1.39 to
1.15 ms on the hybrid and from 1.21 to 0.99 ms on the twin.
"""
import argparse, statistics, tempfile, time, timeit
from functools import partial
from pathlib import Path
import torch
from dflash_nb.config import default_target_layer_ids
from dflash_nb.decode import (Decoding, SpeculativeGenerateOutput, accepted_prefix, check_decodable, greedy_generate,
                              speculative_generate, start_decoding, stop_ids)
from dflash_nb.verify import drop_last_kv
from dflash_nb.evaluate import offline_tau
from dflash_nb.cache import HiddenStateCache, check_compatible, CacheLayout
from dflash_nb.extract import capture_layers, eos_token_ids, extract_to_cache, generate_responses, prompt_token_ids
from dflash_nb.extract import tap_sites
from dflash_nb.model import DFlashDraftModel, upgrade_to_dflash2
from dflash_nb.drafting import RoundDrafter
from dflash_nb.target import linear_attention_layers, load_target, tiny_target
from dflash_nb.config import TrainConfig
from dflash_nb.train import train
from transformers.cache_utils import LinearAttentionCacheLayerMixin

BUDGETS = (8, 16, 32)


# ---- "before": the decode path as it was, kept as the reference the new one is measured against ----------------------
def reference_linear_states(cache) -> dict:
    "A copy of every linear-attention layer's (conv, recurrent) states."
    copy = lambda states: {k: v.clone() for k, v in states.items()}
    return {i: (copy(l.conv_states), copy(l.recurrent_states))
            for i, l in enumerate(cache.layers) if isinstance(l, LinearAttentionCacheLayerMixin)}


def reference_restore(cache, snapshot: dict):
    "Write `snapshot` back into the cache's tensors, in place."
    for i, (conv, rec) in snapshot.items():
        for k, v in conv.items(): cache.layers[i].conv_states[k].copy_(v)
        for k, v in rec.items(): cache.layers[i].recurrent_states[k].copy_(v)


@torch.no_grad()
def reference_verify(s: Decoding, fed: torch.Tensor, keep_inputs: bool):
    "The model's own forward of `fed`: (next tokens, fc taps, {linear layer: its input}) ."
    sites = tap_sites(s.drafter.config.fc_layer_ids, s.target.num_layers, s.drafter.config.tap_convention)
    mixers = {m.layer_idx: m for m in linear_attention_layers(s.target.model)} if keep_inputs else {}
    with capture_layers(s.target.decoder_layers, sites) as got, \
         capture_layers(mixers, {i: (i, "input") for i in mixers}) as inputs:
        logits = s.target.model(input_ids=fed[None].to(s.device), cache=s.cache, use_cache=True).logits
    return logits[0].argmax(-1), torch.cat([got[k] for k in sorted(got)], -1)[0], dict(inputs)


@torch.no_grad()
def reference_round(s: Decoding):
    "One chain round of the previous path: two drafter calls, snapshot, verify, restore + replay of the linear layers."
    s.lap()
    s.context, s.pending = s.drafter.extend_context(s.pending, s.context), s.pending[:, :0]
    drafts = s.drafter.draft_logits(torch.tensor([s.tokens[-1]], device=s.device), s.context)[0, 1:].argmax(-1)
    s.lap("draft_s")
    snapshot = reference_linear_states(s.cache)
    s.lap("rollback_s")
    fed = torch.cat([drafts.new_tensor(s.tokens[-1:]), drafts])
    next_tokens, taps, inputs = reference_verify(s, fed, bool(snapshot))
    n = accepted_prefix(drafts, next_tokens[:-1])
    s.lap("verify_s")
    if n < len(drafts):
        drop_last_kv(s.cache, len(fed) - n - 1)
        if snapshot:
            reference_restore(s.cache, snapshot)
            for m in linear_attention_layers(s.target.model):
                m(hidden_states=inputs[m.layer_idx][:, :n + 1], cache=s.cache)
        s.lap("rollback_s")
    s.pending = taps[None, :n + 1]
    s.tokens += drafts[:n].tolist() + [next_tokens[n].item()]
    s.acceptance.append(n + 1)


def reference_generate(target, drafter, prompt_ids, max_new_tokens: int,
                       eos_token_id=None) -> SpeculativeGenerateOutput:
    "`speculative_generate` (chain) of the previous path."
    s, prefill_s = start_decoding(target, drafter, prompt_ids)
    eos = stop_ids(target, eos_token_id)
    while len(s.tokens) < max_new_tokens and not eos & set(s.tokens): reference_round(s)
    return SpeculativeGenerateOutput.from_decoding(s, prefill_s, max_new_tokens, eos)
# ----------------------------------------------------------------------------------------------------------------------


class ScheduledDrafter(torch.nn.Module):
    "A real drafter whose drafts become `seqs[prompt]` (prompt + greedy tokens), wrong from slot `wrong[p % len]` on."
    def __init__(self, drafter, wrong):
        super().__init__()
        self.drafter, self.config, self.wrong, self.seq = drafter, drafter.config, wrong, []
    device = property(lambda self: self.drafter.device)
    def extend_context(self, taps, cache=None): return self.drafter.extend_context(taps, cache)
    def script(self, logits, p):
        "Logits like `logits` [B-1, V] (slots 1.. for the anchor at position p) that draft the script, made cheaply."
        B, V = self.config.block_size, self.config.vocab_size
        k = self.wrong[p % len(self.wrong)] - 1
        truth = [t if i < k else (t + 1) % V for i, t in enumerate((self.seq + [0] * B)[p + 1:p + B])]
        return logits.new_zeros(logits.shape).scatter_(1, logits.new_tensor(truth, dtype=torch.long)[:, None], 10.0)
    def draft_logits(self, anchor, cache):
        out = self.drafter.draft_logits(anchor, cache)
        return torch.cat([out[:, :1], self.script(out[0, 1:], cache.length)[None]], 1)


class ScheduledRounds(RoundDrafter):
    "`ScheduledDrafter`'s rounds for the decoder: the real drafter's fast step, its logits then scripted."
    def __init__(self, scheduled: ScheduledDrafter):
        super().__init__(scheduled)
        self.fast = RoundDrafter(scheduled.drafter)
    def step(self, anchor, context, taps):
        logits, ctx = self.fast.step(anchor, context, taps)
        return self.drafter.script(logits, ctx.length), ctx


def get_target(path):
    "The target at `path`, else the toy target, else a random stand-in of its shape."
    if path: return load_target(path), Path(path).name
    try:
        from dflash_nb.toy import load_toy_target
        return load_toy_target(), "toy target (Qwen3.5 hybrid)"
    except Exception as e:
        print(f"note: toy target unavailable ({type(e).__name__}: {e}); "
              "using tiny_target('qwen3_5', 12 layers, H=128, V=4096)")
        return tiny_target("qwen3_5", num_layers=12, hidden_size=128, vocab_size=4096), "tiny random Qwen3.5 stand-in"


def get_prompts(split, n, target, seed=0):
    "Token ids of `n` prompts of the toy's `split`, else seeded random prompts of 16-48 tokens."
    try:
        from dflash_nb.toy import load_prompts
        if target.tokenizer is None: raise ValueError("the target has no tokenizer")
        return [prompt_token_ids(target, p) for p in load_prompts(split)[:n]]
    except Exception as e:
        print(f"note: {split} prompts unavailable ({type(e).__name__}: {e}); using random token prompts")
        g = torch.Generator().manual_seed(seed)
        length = lambda: int(torch.randint(16, 49, (1,), generator=g))
        return [torch.randint(3, target.vocab_size, (length(),), generator=g).tolist() for _ in range(n)]


def response_cache(target, prompts, max_new_tokens, tap_ids, out_dir):
    "A float32 hidden-state cache of `target`'s greedy responses to `prompts`."
    recs = generate_responses(target, prompts, max_new_tokens=max_new_tokens, batch_size=8)
    return HiddenStateCache(extract_to_cache(target, recs, out_dir, CacheLayout(tap_ids, dtype=torch.float32)))


def get_drafter(args, target, work):
    "The drafter of `--drafter`, a quickly trained one, or a random one."
    if args.drafter:
        return DFlashDraftModel.from_pretrained(args.drafter, target_model=target.model), f"checkpoint {args.drafter}"
    drafter_cfg = dict(num_hidden_layers=2, block_size=args.block_size)
    if target.tokenizer is None or target.tokenizer.mask_token_id is None:
        drafter_cfg["mask_token_id"] = target.vocab_size - 1
    if args.train_steps == 0:
        print("note: --train-steps 0: a random drafter (accepts almost nothing; τ near 1)")
        return random_drafter(target, drafter_cfg), "random (untrained)"
    t0 = time.perf_counter()
    cache = response_cache(target, get_prompts("train", args.train_prompts, target, seed=1), 128,
                           default_target_layer_ids(target.num_layers), work / "train-cache")
    cfg = TrainConfig(cache=str(cache.path), out_dir=str(work / "run"), drafter=drafter_cfg, steps=args.train_steps,
                      num_anchors=256, device="cpu", progress=False, save_every=args.train_steps)
    ck = train(cfg, target=target, data=cache)
    desc = f"trained here: {args.train_steps} steps on {len(cache)} responses ({time.perf_counter() - t0:.0f} s)"
    return DFlashDraftModel.from_pretrained(ck, target_model=target.model), desc


def random_drafter(target, drafter_cfg: dict):
    "A random drafter of `drafter_cfg` for `target`."
    from dflash_nb.assembly import drafter_config_for
    data = type("Taps", (), {"tap_ids": default_target_layer_ids(target.num_layers)})
    dc = drafter_config_for(TrainConfig(drafter=drafter_cfg), target, data)
    return DFlashDraftModel(dc).attach_target(target.model)


def online(target, drafter, prompts, lengths, eos, tree_budget=None):
    "`speculative_generate` on each prompt, `lengths[i]` new tokens for prompt i."
    return [speculative_generate(target, drafter, p, n, eos, tree_budget) for p, n in zip(prompts, lengths)]


def pooled(rounds): return sum(map(sum, rounds)) / max(sum(map(len, rounds)), 1)


def timed(f, *args) -> tuple:
    "`f(*args)`'s result and its wall-clock seconds (the speedup's numerator counts all of it but prefill)."
    t0 = time.perf_counter()
    out = f(*args)
    return out, time.perf_counter() - t0


def before_after(target, drafter, prompts, max_new_tokens: int, eos) -> dict:
    "Per path ('before', 'after'): τ, ms per round by phase, t1, measured and ideal speedup; all prompts interleaved."
    paths = {"before": reference_generate, "after": speculative_generate}
    rounds = ScheduledRounds(drafter) if isinstance(drafter, ScheduledDrafter) else RoundDrafter(drafter)
    runs = {k: [] for k in paths}          # per path: (result, wall-clock seconds, output == target greedy)
    base = []
    for i, p in enumerate([prompts[0]] + list(prompts)):           # the first prompt once more, as a warm-up
        g = greedy_generate(target, p, max_new_tokens, eos)
        if isinstance(drafter, ScheduledDrafter): drafter.seq = prompt_token_ids(target, p) + g.tokens
        outs = {k: timed(f, target, rounds, p, max_new_tokens, eos) for k, f in paths.items()}
        if i == 0: continue
        base.append(g)
        for k, (r, wall_s) in outs.items(): runs[k].append((r, wall_s, r.tokens == g.tokens))
    t1 = sum(g.decode_s for g in base) / max(sum(len(g.tokens) - 1 for g in base), 1)
    out = {}
    for k, rs in runs.items():
        rounds = sum(len(r.acceptance) for r, _, _ in rs)
        tau = sum(sum(r.acceptance) for r, _, _ in rs) / rounds
        per = {ph: sum(getattr(r, ph) for r, _, _ in rs) / rounds for ph in ("draft_s", "verify_s", "rollback_s")}
        spec = sum(wall_s - r.prefill_s for r, wall_s, _ in rs) / sum(len(r.tokens) - 1 for r, _, _ in rs)
        out[k] = dict(tau=tau, t1=t1, **per, speedup=t1 / spec, ideal=tau * t1 / per["verify_s"],
                      lossless=all(same for _, _, same in rs))
    return out


def breakdown_rows(name: str, res: dict) -> list:
    "Table rows of `before_after`'s result."
    b, a = res["before"], res["after"]
    ms = lambda r, k: f"{1e3 * r[k]:.2f}"
    rows = [(f"{name}: τ (chain)", f"{b['tau']:.3f}", f"{a['tau']:.3f}"),
            (f"{name}: ms / target-only token (t1)", ms(b, "t1"), ms(a, "t1")),
            *((f"{name}: ms / round: {ph[:-2]}", ms(b, ph), ms(a, ph)) for ph in ("draft_s", "verify_s", "rollback_s")),
            (f"{name}: draft / verify", f"{b['draft_s'] / b['verify_s']:.1%}", f"{a['draft_s'] / a['verify_s']:.1%}"),
            (f"{name}: measured speedup", f"{b['speedup']:.2f}x", f"{a['speedup']:.2f}x"),
            (f"{name}: ideal speedup τ·t1/t_verify", f"{b['ideal']:.2f}x", f"{a['ideal']:.2f}x"),
            (f"{name}: measured / ideal", f"{b['speedup'] / b['ideal']:.2f}", f"{a['speedup'] / a['ideal']:.2f}"),
            (f"{name}: output == target greedy", *("yes" if r["lossless"] else "NO" for r in (b, a)))]
    return rows


def dense_twin(target, drafter):
    "An attention-only random Qwen3 of `target`'s shape and a scheduled random drafter of `drafter`'s shape for it."
    t = tiny_target("qwen3", num_layers=target.num_layers, hidden_size=target.hidden_size,
                    vocab_size=target.vocab_size, seed=0)
    c = drafter.config
    cfg = dict(num_hidden_layers=c.num_hidden_layers, block_size=c.block_size, mask_token_id=target.vocab_size - 1)
    return t, ScheduledDrafter(random_drafter(t, cfg), [2, 4, 1, 3, c.block_size, 2, 1])


def layout_rows(drafter, reps: int = 2000) -> list:
    "µs of a block's rows times each matrix `RoundDrafter.step` uses, stored [out, in] (nn.Linear) and [in, out] (its way)."
    w, B = RoundDrafter(drafter).weights(), drafter.config.block_size
    mats = {"q|k|v": w.layers[0].qkv, "o": w.layers[0].o, "gate|up": w.layers[0].gate_up, "down": w.layers[0].down,
            "lm_head": w.lm_head}
    rows = []
    for name, m in mats.items():
        x, out_in = torch.randn(B, m.shape[0]), m.t().contiguous()
        us = [1e6 * min(timeit.repeat(lambda: x @ a, number=reps, repeat=3)) / reps for a in (out_in.t(), m)]
        rows.append((f"{name} {tuple(m.shape)}", f"{us[0]:.1f}", f"{us[1]:.1f}", f"{us[0] / us[1]:.2f}x"))
    return rows


def step_rows(drafter, steps: int = 200) -> list:
    "Median ms of one `RoundDrafter.step` (2 pending rows, context 64-200) with warm caches, and after 64 MB are copied."
    n_in, src = drafter.config.fc_in_features, torch.randn(16 * 2 ** 20)
    rounds = RoundDrafter(drafter)
    w, size = rounds.weights(), lambda t: t.numel() * t.element_size()
    mats = [drafter.fc.weight, w.lm_head] + [m for l in w.layers for m in (l.qkv, l.o, l.gate_up, l.down)]
    dst, nbytes = torch.empty_like(src), sum(map(size, mats))
    def median_ms(evict: bool) -> float:
        g, times, ctx = torch.Generator().manual_seed(0), [], None
        for _ in range(steps):
            if ctx is None or ctx.length > 200: ctx = drafter.extend_context(torch.randn(1, 64, n_in, generator=g))
            taps = torch.randn(1, 2, n_in, generator=g)
            if evict: dst.copy_(src)
            t0 = time.perf_counter()
            ctx = rounds.step(torch.tensor([1]), ctx, taps)[1]
            times.append(time.perf_counter() - t0)
        return 1e3 * sorted(times)[len(times) // 2]
    warm, cold = median_ms(False), median_ms(True)
    return [("weight matrices read per step (fc, layers, lm_head)", f"{nbytes / 2 ** 20:.1f} MiB"),
            ("RoundDrafter.step, warm caches (ms, median)", f"{warm:.3f}"),
            ("RoundDrafter.step after 64 MB copied, as a verify evicts the caches (ms, median)", f"{cold:.3f}")]


DFLASH2_KINDS = {"conv only": dict(selector_rank=0), "selector only": dict(conv_kernel_size=0), "conv + selector": {}}


def dflash2_of(drafter, **over):
    "A DFlash 2 drafter of `drafter`'s backbone, z-lab's shape (conv 2 taps, groups of 16, selector rank 256, top-16)."
    d = upgrade_to_dflash2(drafter, **(dict(conv_kernel_size=2, conv_group_size=16, selector_rank=256,
                                            selector_top_k=16) | over))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)                        # trained-looking: the convs and transitions are not the identity
        for p in d.parameters():
            if p.dim() > 1 and not p.any(): p.normal_(0, 0.02)
    return d


def reference_dflash2_step(rounds: RoundDrafter, anchor, context, taps):
    "A DFlash 2 round as `RoundDrafter.step` drafted it before its laid-out path: the reference forward, the walk."
    with torch.inference_mode():
        h, ctx = rounds.states(anchor, context, taps)
        return rounds.drafter.draft_scores(h, anchor)[0], ctx


def dflash2_rows(drafter, steps: int = 150, repeats: int = 3) -> list:
    "Median ms of a round's drafting by DFlash 2 drafters of `drafter`'s backbone, before and after, ÷ DFlash's round."
    paths = {"DFlash: RoundDrafter.step": (RoundDrafter(drafter).step, drafter)}
    for name, over in DFLASH2_KINDS.items():
        d = dflash2_of(drafter, **over)
        paths[f"DFlash 2, {name}: before (reference forward)"] = (partial(reference_dflash2_step, RoundDrafter(d)), d)
        paths[f"DFlash 2, {name}: after (RoundDrafter.step)"] = (RoundDrafter(d).step, d)
    n_in, names = drafter.config.fc_in_features, list(paths)
    runs = []                                       # per repeat: {path: median ms}
    for r in range(repeats):
        g, times, ctx = torch.Generator().manual_seed(r), {k: [] for k in names}, {}
        for i in range(steps):
            if i % 64 == 0: start = torch.randn(1, 64, n_in, generator=g)      # a new prompt: context of 64 rows
            taps, anchor = torch.randn(1, 2, n_in, generator=g), torch.randint(0, 100, (1,), generator=g)
            for k in names[i % len(names):] + names[:i % len(names)]:         # every path, in rotating order
                f, d = paths[k]
                if i % 64 == 0: ctx[k] = d.extend_context(start)
                t0 = time.perf_counter()
                ctx[k] = f(anchor, ctx[k], taps)[1]
                times[k].append(time.perf_counter() - t0)
        runs.append({k: 1e3 * statistics.median(v) for k, v in times.items()})
    base = names[0]
    ratios = {k: [run[k] / run[base] for run in runs] for k in names}
    return [(k, f"{statistics.median(run[k] for run in runs):.3f}",
             f"{statistics.median(ratios[k]):.2f}x ({min(ratios[k]):.2f}-{max(ratios[k]):.2f})") for k in names]


def print_table(header, rows):
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(f"{str(x):<{w[i]}}" for i, x in enumerate(r)) + " |"
    print("\n" + line(header) + "\n|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows: print(line(r))


def smollm_shaped_drafter(block_size: int = 8) -> DFlashDraftModel:
    "A random 2-layer drafter of SmolLM2-135M's shape (H 576, 9 heads of 64, 3 KV heads, MLP 1536, V 49152), own head."
    from dflash_nb.config import DFlashConfig
    c = DFlashConfig(num_hidden_layers=2, hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                     intermediate_size=1536, vocab_size=49152, num_target_layers=30, mask_token_id=49151,
                     block_size=block_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return DFlashDraftModel(c)


def print_dflash2_table(drafter, name: str = "", steps: int = 150):
    "`dflash2_rows` as a table."
    c = drafter.config
    shape = f"{name}H {c.hidden_size}, V {c.vocab_size}, {c.num_hidden_layers} layers, block {c.block_size}"
    print_table((f"one round's drafting ({shape}; 2 pending rows, context 64-200)", "ms (median)",
                 "÷ DFlash round (range over repeats)"), dflash2_rows(drafter, steps))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", help="hub-layout drafter checkpoint for this target")
    ap.add_argument("--target", help="local HF model directory (default: the toy target)")
    ap.add_argument("--prompts", type=int, default=24, help="eval prompts to use")
    ap.add_argument("--dense-prompts", type=int, default=8, help="prompts for the attention-only twin")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=300, help="steps of the quick drafter (0: random drafter)")
    ap.add_argument("--train-prompts", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=8, help="block size of the quick drafter")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--dflash2-only", action="store_true",
                    help="only the DFlash 2 round-cost table, on a random drafter (cost does not depend on training)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, tname = get_target(args.target)
    if args.dflash2_only:
        with tempfile.TemporaryDirectory() as d:
            drafter, dname = get_drafter(argparse.Namespace(**{**vars(args), "train_steps": 0}), target, Path(d))
        print(f"target {tname}; drafter {dname}")
        print_dflash2_table(drafter, "toy: ")
        return print_dflash2_table(smollm_shaped_drafter(args.block_size), "SmolLM2-135M's shape: ", 60)
    eos = eos_token_ids(target)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        drafter, dname = get_drafter(args, target, work)
        prompts = get_prompts("eval", args.prompts, target)
        cache = response_cache(target, prompts, args.max_new_tokens, drafter.config.target_layer_ids,
                               work / "eval-cache")
        off = offline_tau(drafter, check_compatible(cache, target_hash=target.config_hash), budgets=BUDGETS)
        responses = [cache[i]["input_ids"][len(p):].tolist() for i, p in enumerate(prompts)]
        runs = online(target, drafter, prompts, [len(r) for r in responses], eos)
    on_rounds = [r.acceptance for r in runs]
    same = lambda on, of: sum(a[:-1] == b[:-1] and a[-1] >= b[-1] for a, b in zip(on, of))
    lossless = all(r.tokens == resp for r, resp in zip(runs, responses))
    check_decodable(target, drafter, BUDGETS[0])
    lengths = [len(x) for x in responses]
    tree_runs = {b: [r.acceptance for r in online(target, drafter, prompts, lengths, eos, b)] for b in BUDGETS}
    rows = [("target", tname), ("drafter", f"{dname}; block {drafter.config.block_size}"),
            ("prompts / max new tokens", f"{len(prompts)} / {args.max_new_tokens}"),
            ("offline τ (chain, eval.offline_tau)", f"{off.tau:.3f}"),
            ("online τ (chain, speculative_generate)", f"{pooled(on_rounds):.3f}"),
            ("prompts with identical rounds (last may be longer online)",
             f"{same(on_rounds, off.rounds)}/{len(prompts)}"),
            ("online output == target greedy", "yes" if lossless else "NO"),
            *((f"offline τ DDTree-{b}", f"{off.tau_tree[b]:.3f}") for b in BUDGETS),
            *((f"online τ DDTree-{b}", f"{pooled(tree_runs[b]):.3f}") for b in BUDGETS)]
    print_table(("measure", "value"), rows)
    with torch.inference_mode():
        print_table((f"{drafter.config.block_size} rows @ matrix", "µs, stored [out, in]", "µs, [in, out]", "ratio"),
                    layout_rows(drafter))
        print_table(("one drafting step", "value"), step_rows(drafter))
    print_dflash2_table(drafter)
    hybrid = before_after(target, drafter, prompts, args.max_new_tokens, eos)
    short = "toy hybrid" if tname.startswith("toy") else tname
    twin, scheduled = dense_twin(target, drafter)
    dense = before_after(twin, scheduled, get_prompts("eval", args.dense_prompts, target), args.max_new_tokens, [])
    print_table(("per round, one run", "before", "after"),
                breakdown_rows(short, hybrid) + breakdown_rows("attention-only twin", dense))
    gain = lambda r: r["after"]["speedup"] / r["before"]["speedup"]
    print(f"\nafter / before measured speedup: {short} {gain(hybrid):.2f}x, attention-only twin {gain(dense):.2f}x")


if __name__ == "__main__": main()
