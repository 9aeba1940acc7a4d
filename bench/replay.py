"""Offline replay benchmark: rounds/s of `offline_tau` before (prompt by prompt, `replay` per rule, the reference
below) and after (`dflash_nb.evaluate.offline_tau`: prompts, rules and transforms as one batch), in one run, with the
same results checked; and how close each comes to the machine: the FLOP/s a FLOP count of the drafter's work implies,
as a fraction of a measured float32 matmul peak. Prints a table; asserts nothing.

    python bench/replay.py [--prompts 12] [--threads N] [--repeats 3] [--real] [--real-prompts 6] [--real-new-tokens 64]

Targets: the toy target with its two shipped drafters (fused and split, `data/toy-drafters`) on its eval prompts'
responses; with `--real`, SmolLM2-135M-Instruct (`dflash_nb.gguf.real_target_dir`, needs the `real` extra) with a
randomly initialised 1-layer drafter (block 16): replay costs the same per round whatever the weights, and a random
drafter gives the most rounds (τ near 1).

FLOP count of the work a replay needs (multiply-adds × 2), the same for both paths: per round, the drafter's layers
but the last on the B block tokens (q, k, v, o projections, the SwiGLU MLP, attention of the B queries over the
context before the anchor and the block), the last layer's K/V on the B tokens, and its queries, attention, o
projection and MLP, the final norm and the lm_head only on the slots that decide the round (a chain round: its
accepted drafts and the first wrong one; a DDTree round: all B-1, the tree needs every slot's distribution); plus,
once per context token, fc and each layer's K/V projection. The per-prompt path does more than this (the last layer
and the lm_head on all B slots, every round).
The context length per round is the mean anchor of the chain rounds (DDTree rounds are counted at the same mean).
The batched path does more than the rounds need in one way: it drafts every anchor's block (all layers but the last),
about τ times the blocks the chain's rounds use, in a few large calls; the GFLOP/s column counts only the needed work.

Threads: torch's default (all cores) unless `--threads` says otherwise; the per-prompt path's small operations gain
little from a second thread, the batched path's large ones do, so run both `--threads 1` and the default.
"""
import argparse, statistics, tempfile, time
from pathlib import Path
import torch
from dflash_nb.cache import HiddenStateCache
from dflash_nb.evaluate import offline_tau, replay, accept_chain, accept_tree
from dflash_nb.extract import cached_responses, extract_to_cache
from dflash_nb.model import DFlashDraftModel


def start(loss_mask):
    "Position of the first response token, None if none."
    on = torch.nonzero(loss_mask).flatten()
    return int(on[0]) if len(on) else None


def reference_rounds(model, cache, budgets=(8,), transform=None):
    "Replay as before the batch, one prompt and one rule at a time: (chain τ_round per prompt, {budget: DDTree τ})."
    c, chain, tree = model.config, [], {b: [] for b in budgets}
    for i in range(len(cache)):
        r, taps = cache[i], cache.taps_for(i, c.fc_layer_ids)
        if (s := start(r["loss_mask"])) is None: continue
        taps = taps if transform is None else transform(taps)
        chain.append([n + 1 for n, _ in replay(model, r["input_ids"], taps, s, accept_chain)])
        for b in budgets: tree[b] += replay(model, r["input_ids"], taps, s, accept_tree(b))
    return chain, {b: sum(n + 1 for n, _ in v) / len(v) for b, v in tree.items()}


def matmul_peak(threads: int, n: int = 2048, reps: int = 5) -> float:
    "Best float32 FLOP/s of an n×n matmul on this machine with the bench's threads."
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b)[1] for _ in range(reps))
    return 2 * n ** 3 / best


def _timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def _timed_cpu(f):
    "(f(), wall seconds, CPU seconds of this process: less moved by other jobs on a shared machine)."
    c0 = time.process_time()
    out, wall = _timed(f)
    return out, wall, time.process_time() - c0


def round_flops(model, ctx_len: float, slots: float) -> float:
    "FLOPs of one replayed round at a context of `ctx_len` keys scoring `slots` slots (see the module docstring)."
    c = model.config
    H, B, inter, V, q, kv = c.hidden_size, c.block_size, c.intermediate_size, c.vocab_size, \
        c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    per_query = 2 * H * q + 3 * H * inter + 2 * q * (ctx_len + B)        # q and o projections, MLP, attention
    layer = B * (per_query + 2 * H * kv)
    return 2 * ((c.num_hidden_layers - 1) * layer + B * 2 * H * kv + slots * (per_query + H * V))


def context_flops(model, tokens: int) -> float:
    "FLOPs of fusing and projecting `tokens` context positions once."
    c = model.config
    return 2 * tokens * (c.fc_in_features * c.hidden_size
                         + c.num_hidden_layers * 2 * c.hidden_size * c.num_key_value_heads * c.head_dim)


def work(model, cache, result, budgets) -> tuple:
    "(rounds, FLOPs) of a replay that gave `result` (chain) with DDTree at `budgets`."
    anchors, tokens = [], 0
    for i, taus in enumerate(result.rounds):
        r = cache[i]
        p = start(r["loss_mask"])
        tokens += len(r["input_ids"])
        for t in taus:
            anchors.append(p)
            p += t
    B, ctx = model.config.block_size, statistics.mean(anchors)
    slots = sum(min(t, B - 1) for taus in result.rounds for t in taus)     # accepted drafts + the first wrong one
    tree = sum(_tree_rounds(result, b) for b in budgets)
    base, per_slot = round_flops(model, ctx, 0), round_flops(model, ctx, 1) - round_flops(model, ctx, 0)
    flops = base * (len(anchors) + tree) + per_slot * (slots + tree * (B - 1))
    return len(anchors) + tree, flops + context_flops(model, tokens)


def _tree_rounds(result, b) -> int:
    "Rounds of the DDTree-b replay: tokens produced / τ (both replays produce the same tokens)."
    produced = sum(sum(r) for r in result.rounds)
    return round(produced / result.tau_tree[b])


def compare_paths(model, cache, budgets, peak, label, repeats=3) -> list:
    "Table rows: before and after for `model` over `cache`, results checked equal."
    old, new_t = [float("inf")] * 2, [float("inf")] * 2
    with torch.no_grad():
        for _ in range(repeats):          # alternated, best of each: a shared machine's load hits both alike
            (chain, tree), *t = _timed_cpu(lambda: reference_rounds(model, cache, budgets))
            old = [min(a, b) for a, b in zip(old, t)]
            new, *t = _timed_cpu(lambda: offline_tau(model, cache, None, budgets))
            new_t = [min(a, b) for a, b in zip(new_t, t)]
    same = chain == new.rounds and tree == new.tau_tree
    n, flops = work(model, cache, new, budgets)
    rules = "chain" + "".join(f" + DDTree-{b}" for b in budgets)
    row = lambda how, t: (label, rules, how, n, f"{t[0]:.2f}", f"{t[1]:.2f}", f"{n / t[0]:.0f}",
                          f"{flops / t[0] / 1e9:.2f}", f"{100 * flops / t[0] / peak:.1f}%")
    ratio = (label, rules, "ratio", "", "", "", f"{old[0] / new_t[0]:.1f}x (CPU s: {old[1] / new_t[1]:.1f}x)", "",
             f"same results: {same}")
    return [row("before (per prompt)", old), row("after (batched)", new_t), ratio]


def toy_cases(n_prompts, work_dir):
    "(label, drafter, cache) for the toy target's shipped drafters over `n_prompts` eval responses."
    from dflash_nb.toy import load_toy_target, repo_data_dir
    toy, shipped = load_toy_target(), repo_data_dir() / "toy-drafters"
    responses = cached_responses(None, [], shipped / "responses-eval.jsonl", 0, 0)[:n_prompts]
    out = []
    for f in ("fused", "split"):
        m = DFlashDraftModel.from_pretrained(shipped / f, target_model=toy.model).eval()
        cache = HiddenStateCache(extract_to_cache(toy, responses, work_dir / f"toy-{f}", m.config.target_layer_ids))
        out.append((f"toy {f}", m, cache))
    return out


def real_case(n_prompts, new_tokens, work_dir):
    "(label, drafter, cache) on SmolLM2-135M: a random 1-layer drafter over its greedy eval responses."
    from dflash_nb.gguf import real_target_dir
    from dflash_nb.target import load_target
    from dflash_nb.toy import load_prompts
    from dflash_nb.config import default_target_layer_ids
    from dflash_nb.config import TrainConfig
    from dflash_nb.assembly import drafter_config_for
    target = load_target(real_target_dir())
    resp = cached_responses(target, load_prompts("eval")[:n_prompts], work_dir / "real.jsonl", new_tokens, 6)
    cache = HiddenStateCache(extract_to_cache(target, resp, work_dir / "real-cache",
                                              default_target_layer_ids(target.num_layers)))
    cfg = TrainConfig(drafter=dict(num_hidden_layers=1, block_size=16, mask_token_id=16))
    torch.manual_seed(0)
    m = DFlashDraftModel(drafter_config_for(cfg, target, cache)).attach_target(target.model).eval()
    return "SmolLM2-135M (random 1-layer drafter)", m, cache


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=12, help="toy eval prompts (default 12)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (default: all)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each path, alternated; best kept (default 3)")
    ap.add_argument("--real", action="store_true", help="also SmolLM2-135M (needs the real extra)")
    ap.add_argument("--real-prompts", type=int, default=6)
    ap.add_argument("--real-new-tokens", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    peak = matmul_peak(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = toy_cases(a.prompts, Path(tmp))
        if a.real: cases.append(real_case(a.real_prompts, a.real_new_tokens, Path(tmp)))
        for label, m, cache in cases:
            for budgets in ((), (8,)):
                rows += compare_paths(m, cache, budgets, peak, label, a.repeats)
    head = ("target / drafter", "rules", "path", "rounds", "wall s", "CPU s", "rounds/s (wall)", "GFLOP/s", "of peak")
    print(f"threads {a.threads}; float32 matmul peak {peak / 1e9:.1f} GFLOP/s (2048x2048); "
          f"best of {a.repeats} runs each")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows: print("| " + " | ".join(map(str, r)) + " |")


if __name__ == "__main__":
    main()
