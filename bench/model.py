"""Drafter benchmarks: parameter counts of the 27B-target drafter (meta device) and the training path's
one-call forward vs a per-anchor loop of the inference path, for 512 anchors on a tiny config.

    python bench/model.py [--anchors 512] [--seq 768] [--repeats 3]
"""
import argparse, time
import torch
from dflash_nb.config import DFlashConfig
from dflash_nb.model import DFlashDraftModel, param_counts, per_anchor_logits


def tiny(block_size=16):
    return DFlashConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        intermediate_size=128, vocab_size=512, block_size=block_size, num_target_layers=12,
                        mask_token_id=511, target_layer_ids=[1, 5, 9], rope_theta=10000.0)


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--seq", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    with torch.device("meta"):
        fused, split = DFlashDraftModel(DFlashConfig()), DFlashDraftModel(DFlashConfig(fusion="split"))
    rows = [("27B drafter params (fused, 5 taps)", f"{param_counts(fused)['total']/1e9:.3f} B"),
            ("  of which fc", f"{param_counts(fused)['fc']/1e6:.1f} M"),
            ("27B drafter params (split, 4 fc taps)", f"{param_counts(split)['total']/1e9:.3f} B")]

    torch.manual_seed(0)
    cfg = tiny()
    m = DFlashDraftModel(cfg).eval()
    ids = torch.randint(0, 511, (1, a.seq))
    taps = torch.randn(1, a.seq, cfg.fc_in_features)
    anchors = torch.randperm(a.seq - 1)[: a.anchors].sort().values[None]
    with torch.no_grad():
        ref = per_anchor_logits(m, ids, taps, anchors)
        loop = best_of(lambda: per_anchor_logits(m, ids, taps, anchors), 1)
        rows.append((f"per-anchor loop of the inference path, {a.anchors} anchors x B=16, T={a.seq}", f"{loop*1e3:.0f} ms"))
        for impl in ("blockwise", "sdpa"):
            one = best_of(lambda: m(ids, taps, anchors, impl), a.repeats)
            err = (m(ids, taps, anchors, impl) - ref).abs().max().item()
            rows += [(f"training path, one call, impl={impl}", f"{one*1e3:.0f} ms"),
                     ("  speedup vs loop / max abs logit diff", f"{loop/one:.1f}x / {err:.1e}")]
    w = max(len(r[0]) for r in rows)
    print(f"{'metric':<{w}} | value\n{'-'*w}-|------")
    for k, v in rows: print(f"{k:<{w}} | {v}")


if __name__ == "__main__":
    main()
