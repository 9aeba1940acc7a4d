"""Hidden-state extraction benchmarks: throughput vs a plain forward of the same target on the same batches,
bytes on disk per token vs the bf16 floor, and peak RSS while extracting 1x, 5x and 10x a small RAM budget
(each in its own subprocess, so its VmHWM is its own), under glibc's default malloc and with a fixed mmap threshold
(small CPU models fragment glibc's heap: peak RSS creeps up sublinearly though nothing is retained; with
malloc_trim after each shard RSS stays within a few MB over 60 shards). Prints a table; asserts nothing.

    python bench/extract.py [--tokens 40000] [--budget-mb 24] [--repeats 3] [--threads 1]

Target: the toy target (`dflash_nb.toy.load_toy_target`) when present, else a random tiny Qwen3.5 of the toy's shape.
Samples: the toy's train prompts with regenerated responses when present, else seeded random tokens of 128-512.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path
import torch
from torch.nn.utils.rnn import pad_sequence
from dflash_nb.config import default_target_layer_ids
from dflash_nb.cache import iter_chunks, read_manifest, CacheLayout
from dflash_nb.extract import extract_to_cache
from dflash_nb.target import tiny_target

SPS, BS = 16, 8  # samples per shard, batch size


def load_target():
    "The toy target, or a random stand-in of its shape (12 layers, H=128, vocab 4096)."
    try:
        from dflash_nb.toy import load_toy_target
        return load_toy_target(), "toy target"
    except Exception as e:  # toy target not built / not exported yet
        print(f"note: toy target unavailable ({type(e).__name__}: {e}); using tiny_target('qwen3_5', 12 layers, H=128, V=4096)")
        return tiny_target("qwen3_5", num_layers=12, hidden_size=128, vocab_size=4096), "tiny stand-in"


def random_samples(n_tokens, vocab, seed=0):
    "Seeded random samples of 128-512 tokens (prompt of 32-64), generated lazily, about `n_tokens` in all."
    g, total = torch.Generator().manual_seed(seed), 0
    while total < n_tokens:
        T, P = int(torch.randint(128, 513, (1,), generator=g)), int(torch.randint(32, 65, (1,), generator=g))
        total += T
        yield {"input_ids": torch.randint(3, vocab, (T,), generator=g), "loss_mask": torch.cat([torch.zeros(P), torch.ones(T - P)]).long()}


def make_samples(target, n_tokens):
    "Regenerated responses to the toy's train prompts (repeated up to `n_tokens`), else random samples."
    try:
        from dflash_nb.extract import generate_responses
        from dflash_nb.toy import load_prompts
        prompts = load_prompts("train")[:32]
        recs = generate_responses(target, prompts, max_new_tokens=128, batch_size=8)
        out, total = [], 0
        while total < n_tokens:
            for r in recs: out.append(r); total += len(r["input_ids"])
        return out, f"{len(recs)} train prompts + regenerated responses, repeated"
    except Exception as e:
        print(f"note: train prompts unavailable ({type(e).__name__}: {e}); using random token samples of 128-512")
        return list(random_samples(n_tokens, target.vocab_size)), "random tokens, 128-512 per sample"


def same_batches(samples):
    "The padded batches extract_to_cache runs: per shard, samples sorted by length, in batches of BS."
    for chunk in iter_chunks(samples, SPS):
        order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]["input_ids"]))
        for idx in iter_chunks(order, BS): yield pad_sequence([chunk[i]["input_ids"] for i in idx], batch_first=True)


def timed(fn):
    t = time.perf_counter(); fn(); return time.perf_counter() - t


def throughput(target, samples, taps, repeats):
    """Seconds of: plain forward, forward without full logits, extract_to_cache, over the same batches. The three are
    interleaved shard by shard (best of `repeats` each), so load from other processes hits them alike."""
    def fwd(batches, **kw):
        with torch.no_grad():
            for b in batches: target.model(input_ids=b, use_cache=False, **kw)
    def extract(chunk):  # a one-shard cache: the same work per shard as a long run (shard, fsyncs, sha256, manifest)
        with tempfile.TemporaryDirectory() as d:
            extract_to_cache(target, chunk, d, CacheLayout(taps, store_final=False, samples_per_shard=SPS),
                             batch_size=BS)
    t = {"plain": 0.0, "keep1": 0.0, "extract": 0.0}
    fwd(list(same_batches(samples[:SPS])))  # warm-up
    for chunk in iter_chunks(samples, SPS):
        batches = list(same_batches(chunk))
        runs = {"plain": lambda: fwd(batches), "keep1": lambda: fwd(batches, logits_to_keep=1), "extract": lambda: extract(chunk)}
        best = {k: float("inf") for k in runs}
        for _ in range(repeats):
            for k, f in runs.items(): best[k] = min(best[k], timed(f))
        for k in t: t[k] += best[k]
    return t


def bytes_per_token(target, samples, taps, store_final):
    with tempfile.TemporaryDirectory() as d:
        m = read_manifest(extract_to_cache(target, samples, d,
                                           CacheLayout(taps, store_final=store_final, samples_per_shard=SPS),
                                           batch_size=BS))
        return sum(e["bytes"] for e in m["shards"]) / sum(sum(e["lengths"]) for e in m["shards"])


def status_kb(key):
    return int(next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key)).split()[1])


def rss_child(n_tokens):
    "Child process: extract ~`n_tokens` random tokens; print baseline RSS, peak RSS (VmHWM) and bytes written, in MB."
    target, _ = load_target()
    taps = default_target_layer_ids(target.num_layers)
    with torch.no_grad(): target.model(input_ids=torch.randint(0, 100, (BS, 512)), use_cache=False, logits_to_keep=1)  # warm-up at max size
    base = status_kb("VmRSS")
    with tempfile.TemporaryDirectory() as d:
        m = read_manifest(extract_to_cache(target, random_samples(n_tokens, target.vocab_size), d,
                                           CacheLayout(taps, store_final=False, samples_per_shard=SPS), batch_size=BS))
        disk = sum(e["bytes"] for e in m["shards"])
    print(json.dumps({"base_mb": base / 1024, "peak_mb": status_kb("VmHWM") / 1024, "disk_mb": disk / 2**20}))


MALLOCS = {"glibc default": {}, "fixed mmap threshold": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}}

def peak_rss(n_tokens, env):
    "Baseline and peak RSS of a fresh process extracting ~`n_tokens`, with extra environment `env` (the allocator's knobs)."
    out = subprocess.run([sys.executable, __file__, "--rss-child", str(n_tokens), "--threads", str(torch.get_num_threads())],
                         capture_output=True, text=True, check=True, env=os.environ | env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=40_000, help="tokens in the throughput and bytes measurements")
    ap.add_argument("--budget-mb", type=float, default=24, help="the 'small RAM budget': 1x of the RSS measurement, in MB of taps")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steady timings on a shared CPU)")
    ap.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.rss_child is not None: return rss_child(a.rss_child)

    target, what = load_target()
    taps, H = default_target_layer_ids(target.num_layers), target.hidden_size
    samples, data = make_samples(target, a.tokens)
    n_tok = sum(len(s["input_ids"]) for s in samples)
    print(f"target: {what}, {target.num_layers} layers, H={H}, taps {taps}; data: {data}; {len(samples)} samples, {n_tok} tokens; "
          f"torch threads {torch.get_num_threads()}, shard {SPS} samples, batch {BS}")
    t = throughput(target, samples, taps, a.repeats)
    floor = len(taps) * H * 2
    bpt, bpt_final = bytes_per_token(target, samples, taps, False), bytes_per_token(target, samples, taps, True)

    budget_tokens = int(a.budget_mb * 2**20 / floor)

    rows = [("plain forward (full logits), tokens/s", f"{n_tok / t['plain']:,.0f}", "", ""),
            ("forward, logits_to_keep=1, tokens/s", f"{n_tok / t['keep1']:,.0f}", "", ""),
            ("extract_to_cache (bf16, fsync, sha256), tokens/s", f"{n_tok / t['extract']:,.0f}", "", ""),
            ("extraction / plain forward", f"{t['plain'] / t['extract']:.3f}", ">= 0.85", t["plain"] / t["extract"] >= 0.85),
            ("extraction / forward with logits_to_keep=1", f"{t['keep1'] / t['extract']:.3f}", ">= 0.85", t["keep1"] / t["extract"] >= 0.85),
            (f"bytes/token, taps only (floor {floor})", f"{bpt:.1f} = {bpt / floor:.4f}x", "<= 1.02x", bpt / floor <= 1.02),
            (f"bytes/token, taps + final (floor {floor + 2 * H})", f"{bpt_final:.1f} = {bpt_final / (floor + 2 * H):.4f}x", "<= 1.02x",
             bpt_final / (floor + 2 * H) <= 1.02)]
    for name, env in MALLOCS.items():
        rss = {k: peak_rss(k * budget_tokens, env) for k in (1, 5, 10)}
        growth = {k: r["peak_mb"] - r["base_mb"] for k, r in rss.items()}
        for k, r in rss.items():
            rows.append((f"peak RSS growth, {k}x budget ({r['disk_mb']:.0f} MB on disk), {name}",
                         f"{growth[k]:.0f} MB (base {r['base_mb']:.0f}, peak {r['peak_mb']:.0f})",
                         "flat" if k > 1 else "", (growth[k] <= 1.25 * growth[1] + 16) if k > 1 else ""))
    w = max(len(r[0]) for r in rows); v = max(len(r[1]) for r in rows)
    print(f"{'metric':<{w}} | {'value':<{v}} | goal     | ok\n{'-' * w}-|-{'-' * v}-|----------|----")
    for k, val, goal, ok in rows: print(f"{k:<{w}} | {val:<{v}} | {goal:<8} | {'' if ok == '' else 'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
