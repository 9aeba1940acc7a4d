"""What verifying a hidden-state cache on read costs. Every sample of a cache is read with
`HiddenStateCache(verify=False)` and with the default verification, the first time (each tensor digested and compared
with its table) and again (verified before: its shard file's identity compared), two ways: read and copied into
memory (the least a stage does with a sample), and made into training batches as `dflash-train` makes them
(`make_batch`: 8 samples, 5 fc taps in float32, padded). Beside them, what the alternatives would cost: a sha256 of
every sample read, and the whole-shard sha256 that caches written before the digest tables get on the first read of
each shard. Prints a table; asserts nothing.

    python bench/verify_cache.py [--cache runs/toy-train-long/cache] [--work /tmp/dflash_nb-verify-bench]
                                 [--repeats 3] [--threads 1] [--real-shape]

Two regimes: "warm", the shards' pages already in the page cache (a cache that fits in memory, re-read: verification
costs the most relative to the read), and "cold", each shard's pages dropped (posix_fadvise DONTNEED) just before it is
read, so the read comes from the disk, as it does for a cache far larger than memory (the real run's 38 TB).
The modes take turns shard by shard, in a shuffled order, so a busy machine slows them alike; each row is the
fastest of `--repeats` totals.

`--cache` is only read, and its pages are never dropped (another job may be reading it). A cache written before the
digest tables is first copied by `rewrite_cache` into `--work` (the same samples, bytes and shards, with tables), and
the copy is measured; the original is measured warm only, as the older cache. `--real-shape` measures instead a cache
of the real run's sample shape written into `--work`: hidden size 5120, 5 taps and `final` in bf16, 2048-token samples
(126 MB each), 10 of them.
"""
import argparse, hashlib, os, platform, random, time
from pathlib import Path
from types import SimpleNamespace
import torch
from dflash_nb.batches import make_batch
from dflash_nb.cache import HiddenStateCache, CacheLayout, cache_header, read_manifest, rewrite_cache, write_cache


def drop_pages(cache: HiddenStateCache, shard: int):
    "Ask the kernel to drop shard `shard`'s pages from the page cache (the file is neither read nor written)."
    fd = os.open(cache.path / cache.manifest["shards"][shard]["file"], os.O_RDONLY)
    try: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally: os.close(fd)


def stored_bytes(cache: HiddenStateCache, ids) -> int:
    "The bytes samples `ids` take in the cache's shards."
    per_token = cache.hidden_size * (len(cache.tap_ids) + cache.has_final) * cache.dtype.itemsize + 5
    return per_token * sum(cache.lengths[i] for i in ids)


def read_copy(cache: HiddenStateCache, ids, sha: bool = False) -> int:
    "Read samples `ids` and copy each tensor into memory (with `sha`, also sha256 its bytes); the bytes read."
    for i in ids:
        rows = {k: v.clone() for k, v in cache[i].items()}
        if sha:
            for v in rows.values(): hashlib.sha256(v.reshape(-1).view(torch.uint8).numpy()).digest()
    return stored_bytes(cache, ids)


def batches(cache: HiddenStateCache, ids, size: int = 8) -> int:
    "Make training batches of `size` samples from `ids`, as dflash-train does (5 fc taps, anchors); the bytes read."
    taps = cache.tap_ids[1::2][:5] if len(cache.tap_ids) > 5 else cache.tap_ids
    dc = SimpleNamespace(fc_layer_ids=taps, target_layer_ids=taps)
    cfg, g = SimpleNamespace(max_len=0, source="tokens", num_anchors=16), torch.Generator().manual_seed(0)
    for a in range(0, len(ids), size): make_batch(cache, list(ids[a:a + size]), dc, cfg, g)
    return stored_bytes(cache, ids)


def with_tables(cache, work) -> Path:
    "`cache`, or its copy with digest tables in `work` (made once) if it was written before them."
    if all("digests" in e for e in read_manifest(cache)["shards"]): return Path(cache)
    out = Path(work) / "cache"
    if not (out / "manifest.json").exists() or not read_manifest(out)["complete"]:
        print(f"{cache} has no digest tables: copying it with rewrite_cache into {out} ...", flush=True)
        rewrite_cache(cache, out)
    return out


def real_shape(work, n: int = 10, T: int = 2048, H: int = 5120) -> Path:
    "A cache of `n` random samples of the real run's shape (5 taps + final, bf16, T tokens, hidden H) in `work`."
    out = Path(work) / "real-shape"
    if (out / "manifest.json").exists() and read_manifest(out)["complete"]: return out
    print(f"writing {n} samples of {T} tokens x 6 x {H} bf16 into {out} ...", flush=True)
    header = cache_header("real-shape", None, 64, H, CacheLayout([1, 16, 31, 46, 61], samples_per_shard=2))
    g = torch.Generator().manual_seed(0)
    def records(chunk):
        return [{"input_ids": torch.randint(0, 150_000, (T,), generator=g),
                 "loss_mask": torch.ones(T, dtype=torch.long),
                 "taps": torch.randn(T, 5 * H, generator=g).bfloat16(),
                 "final": torch.randn(T, H, generator=g).bfloat16()} for _ in chunk]
    return write_cache(out, header, range(n), records, lambda chunk: chunk)


def measure(path: Path, older: Path | None, cold: bool, repeats: int) -> dict:
    "{mode: (best total seconds, bytes)}: each mode reads every shard, the modes taking turns shard by shard."
    plain, first, again = (HiddenStateCache(path, verify=v) for v in (False, True, True))
    old = HiddenStateCache(older, verify=False) if older else None
    modes = {"read, unverified (verify=False)": (plain, lambda ids: read_copy(plain, ids)),
             "read, verified: first read (default)": (first, lambda ids: read_copy(first, ids)),
             "read, verified: re-read (default)": (again, lambda ids: read_copy(again, ids)),
             "read + sha256 of each sample": (plain, lambda ids: read_copy(plain, ids, sha=True)),
             "training batches, unverified": (plain, lambda ids: batches(plain, ids)),
             "training batches, verified: first read": (first, lambda ids: batches(first, ids)),
             "training batches, verified: re-read": (again, lambda ids: batches(again, ids))}
    if old and not cold:   # a fresh object per shard: its whole sha256 comes with the shard's first read
        fresh = lambda ids: read_copy(HiddenStateCache(older), ids)
        modes["read, older cache (sha256 per shard, 1st read)"] = (old, fresh)
    shards = [range(a, b) for a, b in zip(plain._first, plain._first[1:])]
    rng, best = random.Random(0), {}
    read_copy(again, range(len(again)))                    # every sample verified once: later reads are re-reads
    if not cold:                                           # warm-up: every shard's pages in memory
        for c, _ in modes.values(): read_copy(c, range(len(c)))
    for _ in range(repeats):
        total = {m: [0.0, 0] for m in modes}
        for s, ids in enumerate(shards):
            for m in rng.sample(list(modes), len(modes)):
                c, run = modes[m]
                first._forget(s, None)                      # the shard as never read: digest table, every sample
                if cold: drop_pages(c, s)
                t0 = time.perf_counter()
                n = run(ids)
                total[m][0] += time.perf_counter() - t0
                total[m][1] += n
        for m, (t, n) in total.items(): best[m] = min(best.get(m, (1e9, n)), (t, n))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default="runs/toy-train-long/cache")
    ap.add_argument("--work", default="/tmp/dflash_nb-verify-bench", help="where copies and generated caches go")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--real-shape", action="store_true",
                    help="measure a generated cache of the real run's sample shape")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    path = real_shape(a.work) if a.real_shape else with_tables(a.cache, a.work)
    older = None if a.real_shape or path == Path(a.cache) else Path(a.cache)
    c = HiddenStateCache(path, verify=False)
    size = sum(e["bytes"] for e in c.manifest["shards"])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    print(f"cache {path}: {len(c)} samples ({sum(c.lengths) / len(c):.0f} tokens, {size / len(c) / 1e6:.2f} MB each), "
          f"{size / 1e9:.2f} GB in {len(c.manifest['shards'])} shards, {c.dtype}")
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; torch {torch.__version__}, "
          f"{a.threads} thread(s), OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; best of {a.repeats}")
    print(f"\n{'what':<50} {'pages':<6} {'s':>7} {'GB/s':>6} {'vs unverified read':>19}")
    for regime in ("warm", "cold"):
        best = measure(path, older, regime == "cold", a.repeats)
        for name, (dt, n) in best.items():
            base = best["training batches, unverified" if "batches" in name else "read, unverified (verify=False)"][0]
            rel = "-" if "unverified" in name else f"{dt / base - 1:+.1%}"
            print(f"{name:<50} {regime:<6} {dt:7.2f} {n / dt / 1e9:6.2f} {rel:>19}")


if __name__ == "__main__":
    main()
