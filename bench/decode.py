"""Speculative decoding benchmark: offline vs online τ, DDTree τ, wall-clock speedup over target-only greedy decoding,
and the hybrid rollback cost per round. Prints a table; asserts nothing.

    python bench/decode.py [--drafter PATH] [--prompts 24] [--max-new-tokens 64] [--train-steps 300] [--threads 1]
                           [--target PATH]

Target: the toy target (`dflash_nb.toy.load_toy_target`, a Qwen3.5 hybrid) unless `--target` names a local HF model
directory; a random tiny Qwen3.5 of the toy's shape if neither is available. Prompts: the toy's eval prompts.
Drafter: `--drafter PATH` (a hub-layout checkpoint); else one trained here for `--train-steps` steps on a small cache of
regenerated train-prompt responses (dflash_nb.train); `--train-steps 0` uses a random drafter (τ near 1).
Online DDTree needs an attention-only target: on a hybrid it reports why not (the error of `check_decodable`).
"""
import argparse, tempfile, time
from pathlib import Path
import torch
from dflash_nb.config import default_target_layer_ids
from dflash_nb.decode import check_decodable, speculative_generate, time_per_token
from dflash_nb.evaluate import offline_tau
from dflash_nb.cache import HiddenStateCache, check_compatible, CacheLayout
from dflash_nb.extract import eos_token_ids, extract_to_cache, generate_responses, prompt_token_ids
from dflash_nb.model import DFlashDraftModel
from dflash_nb.target import load_target, tiny_target
from dflash_nb.train import TrainConfig, train

BUDGETS = (8, 16, 32)


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
        from dflash_nb.train import drafter_config_for
        print("note: --train-steps 0: a random drafter (accepts almost nothing; τ near 1)")
        data = type("Taps", (), {"tap_ids": default_target_layer_ids(target.num_layers)})
        dc = drafter_config_for(TrainConfig(drafter=drafter_cfg), target, data)
        return DFlashDraftModel(dc).attach_target(target.model), "random (untrained)"
    t0 = time.perf_counter()
    cache = response_cache(target, get_prompts("train", args.train_prompts, target, seed=1), 128,
                           default_target_layer_ids(target.num_layers), work / "train-cache")
    cfg = TrainConfig(cache=str(cache.path), out_dir=str(work / "run"), drafter=drafter_cfg, steps=args.train_steps,
                      num_anchors=256, device="cpu", progress=False, save_every=args.train_steps)
    ck = train(cfg, target=target, data=cache)
    desc = f"trained here: {args.train_steps} steps on {len(cache)} responses ({time.perf_counter() - t0:.0f} s)"
    return DFlashDraftModel.from_pretrained(ck, target_model=target.model), desc


def online(target, drafter, prompts, lengths, eos, tree_budget=None):
    "`speculative_generate` on each prompt, `lengths[i]` new tokens for prompt i."
    return [speculative_generate(target, drafter, p, n, eos, tree_budget) for p, n in zip(prompts, lengths)]


def pooled(rounds): return sum(map(sum, rounds)) / max(sum(map(len, rounds)), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", help="hub-layout drafter checkpoint for this target")
    ap.add_argument("--target", help="local HF model directory (default: the toy target)")
    ap.add_argument("--prompts", type=int, default=24, help="eval prompts to use")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=300, help="steps of the quick drafter (0: random drafter)")
    ap.add_argument("--train-prompts", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=8, help="block size of the quick drafter")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, tname = get_target(args.target)
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
    on_rounds = [r["acceptance"] for r in runs]
    same = sum(a[:-1] == b[:-1] and a[-1] >= b[-1] for a, b in zip(on_rounds, off.rounds))
    lossless = all(r["tokens"] == resp for r, resp in zip(runs, responses))
    try:
        check_decodable(target, drafter, BUDGETS[0])
        lengths = [len(x) for x in responses]
        tree_runs = {b: online(target, drafter, prompts, lengths, eos, b) for b in BUDGETS}
        trees = {b: pooled([r["acceptance"] for r in runs_b]) for b, runs_b in tree_runs.items()}
    except ValueError as e: trees, why = {}, str(e)
    tp = time_per_token(target, drafter, prompts, args.max_new_tokens, eos)
    rows = [("target", tname), ("drafter", f"{dname}; block {drafter.config.block_size}"),
            ("prompts / max new tokens", f"{len(prompts)} / {args.max_new_tokens}"),
            ("offline τ (chain, eval.offline_tau)", f"{off.tau:.3f}"),
            ("online τ (chain, speculative_generate)", f"{pooled(on_rounds):.3f}"),
            ("prompts with identical rounds (last may be longer online)", f"{same}/{len(prompts)}"),
            ("online output == target greedy", "yes" if lossless and tp["lossless"] else "NO"),
            *((f"offline τ DDTree-{b}", f"{off.tau_tree[b]:.3f}") for b in BUDGETS),
            *((f"online τ DDTree-{b}", f"{trees[b]:.3f}" if trees else "n/a") for b in BUDGETS),
            ("target-only ms / token (prefill excluded)", f"{1e3 * tp['target_s_per_token']:.2f}"),
            ("speculative ms / token (prefill excluded)", f"{1e3 * tp['speculative_s_per_token']:.2f}"),
            ("speedup (measured in one run)", f"{tp['speedup']:.2f}x at τ {tp['tau']:.2f}"),
            ("ms / round: draft (drafter forward + context)", f"{1e3 * tp['draft_s_per_round']:.2f}"),
            ("ms / round: verify (one target pass of the block)", f"{1e3 * tp['verify_s_per_round']:.2f}"),
            ("ms / round: rollback (snapshot + restore + replay)", f"{1e3 * tp['rollback_s_per_round']:.2f}")]
    w = max(len(k) for k, _ in rows)
    print(f"\n| {'measure':<{w}} | value |\n|{'-' * (w + 2)}|-------|")
    for k, v in rows: print(f"| {k:<{w}} | {v} |")
    if not trees: print(f"\nonline DDTree: {why}")


if __name__ == "__main__": main()
