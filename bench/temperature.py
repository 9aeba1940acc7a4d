"""Expected acceptance at temperature from the cache against online speculative sampling, on the toy target with its
two shipped drafters (fused and split, `data/toy-drafters`). Prints a table; asserts nothing.

    python bench/temperature.py [--prompts 8] [--tokens 48] [--seeds 3] [--temperatures 1.0 0.5] [--top-k 0]

Offline: `evaluate.expected_acceptance` over the eval prompts' cached greedy responses (every anchor, teacher-forced
along the cached continuation). Online: `decode.speculative_generate` with a `Sampling` at the same settings, each
prompt decoded `--seeds` times for `--tokens` new tokens, τ pooled over rounds. The two measure different things on
purpose: online continuations are sampled (not the cached greedy one) and rounds visit only the anchors their
acceptance leads to, so agreement is expected in trend and size, not to the last digit. Greedy (T = 0) rows give the
offline replay's τ and online τ, which differ only by each prompt's last round (offline stops at the cached text's
end, online verifies the whole block).

Measured here (2-core CPU, 8 prompts x 48 tokens, 3 seeds), online / offline: greedy 1.013 (fused) and 1.005
(split); T = 1: 0.848 and 0.829; T = 0.5: 0.727 and 0.740. The toy drafters were trained on greedy responses only,
and sampled continuations leave them within a few tokens (at T = 0.2 no 48-token sample equals the greedy one), so
the expected τ along the greedy text overestimates what sampling gets; at T = 0.01 online equals greedy exactly.
"""
import argparse, tempfile, time
import torch
from dflash_nb.cache import HiddenStateCache
from dflash_nb.decode import Sampling, speculative_generate
from dflash_nb.evaluate import expected_acceptance, offline_tau
from dflash_nb.extract import cached_responses, extract_to_cache
from dflash_nb.model import DFlashDraftModel
from dflash_nb.toy import load_toy_target, repo_data_dir


def online_tau(target, drafter, prompts, tokens, sampling, seeds):
    "τ pooled over every round of every (prompt, seed) decode; greedy when `sampling` is None (one seed)."
    rounds = []
    for p in prompts:
        for seed in range(seeds if sampling else 1):
            s = None if sampling is None else Sampling(sampling.temperature, sampling.top_k, sampling.top_p, seed)
            rounds += speculative_generate(target, drafter, p, tokens, eos_token_id=[], sampling=s).acceptance
    return sum(rounds) / len(rounds), len(rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--temperatures", type=float, nargs="*", default=[1.0, 0.5])
    ap.add_argument("--top-k", type=int, default=0, help="0: no top-k cut")
    a = ap.parse_args()
    toy, shipped = load_toy_target(), repo_data_dir() / "toy-drafters"
    resp = cached_responses(None, [], shipped / "responses-eval.jsonl", 0, 0)[:a.prompts]
    resp = [{k: v[: len(v) - int(r["loss_mask"].sum()) + a.tokens] if k in ("input_ids", "loss_mask") else v
             for k, v in r.items()} for r in resp]
    prompts = [r["input_ids"][: len(r["input_ids"]) - int(r["loss_mask"].sum())].tolist() for r in resp]
    drafters = {f: DFlashDraftModel.from_pretrained(shipped / f, target_model=toy.model).eval() for f in ("fused", "split")}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        cache = HiddenStateCache(extract_to_cache(toy, resp, d, next(iter(drafters.values())).config.target_layer_ids))
        for name, m in drafters.items():
            t0 = time.perf_counter()
            off, (on, n) = offline_tau(m, cache, budgets=()).tau, online_tau(toy, m, prompts, a.tokens, None, 1)
            rows.append((name, "0 (greedy)", off, on, n, time.perf_counter() - t0))
            for T in a.temperatures:
                t0 = time.perf_counter()
                s = Sampling(T, a.top_k or None)
                exp = expected_acceptance(m, cache, toy.model, s)["tau"]
                on, n = online_tau(toy, m, prompts, a.tokens, s, a.seeds)
                rows.append((name, f"{T:g}" + (f", top-k {a.top_k}" if a.top_k else ""), exp, on, n,
                             time.perf_counter() - t0))
    print(f"toy target, {a.prompts} eval prompts x {a.tokens} tokens, {a.seeds} seeds per prompt at T > 0, "
          f"{torch.get_num_threads()} threads")
    print("| drafter | T | offline τ (T=0: replay; else expected) | online τ | online rounds | online/offline | s |")
    print("|---|---|---|---|---|---|---|")
    for name, T, off, on, n, sec in rows:
        print(f"| {name} | {T} | {off:.3f} | {on:.3f} | {n} | {on / off:.3f} | {sec:.0f} |")


if __name__ == "__main__":
    main()
