"""bfloat16 target heads on the CPU (issue 51): offline evaluation and training steps with the heads as stored
(bf16 products) against the float32 compute `load_target_heads` now chooses on a CPU (`target.cpu_float32_heads`):
a float32 copy of the lm_head, and, where memory is short, `ops.Float32Head` (float32 compute, bf16 storage).

- eval: a 27B-shaped target's heads (vocabulary 248,320, H 5120, bf16, random) and the 1.73B drafter of
  data/configs/qwen3.6-27b.yaml (5 layers, random: τ near 1, so every position is a round, the most work a sample
  can ask), `offline_tau` with the chain and DDTree-8 over `--samples` synthetic samples of `--tokens` tokens (the
  first 16 are the prompt);
- train: the mid set (vocabulary 248,320, H 1024, a 2-layer drafter, 64 anchors on one sequence of 512 tokens,
  CE on token labels, `loss_chunk` 32 as the recipes have it), `--steps` optimizer steps (forward, backward, AdamW).

Each case runs in its own process, one after the other, stopped after `--limit-s` seconds (the bf16 path can take
hours; a stopped case shows as `> limit`). Seconds are wall time on this machine in one run: read the ratios.
τ and losses of the paths agree within the dtypes' roundoff where both finish.

    python bench/bf16_heads.py [--limit-s 600] [--samples 2] [--tokens 128] [--steps 3] [--only eval train]
"""
import argparse, json, subprocess, sys, time
from types import SimpleNamespace
import torch, torch.nn as nn
from transformers import Qwen3_5TextConfig
from dflash_nb.config import DFlashConfig, TrainConfig
from dflash_nb.model import DFlashDraftModel
from dflash_nb.target import TargetHeads, cpu_float32_heads
from dflash_nb.objective import step_loss, TargetReadout
from dflash_nb.batches import Batch
from dflash_nb.evaluate import offline_tau

V = 248_320
PATHS = {"bf16 as stored": None, "float32 copy": None, "float32 from bf16 (Float32Head)": 0}   # available memory
DRAFTER_27B = dict(num_hidden_layers=5, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                   intermediate_size=17408, block_size=16, target_layer_ids=[1, 16, 31, 46, 61], mask_token_id=248070)


@torch.no_grad()
def fill(p: torch.Tensor, seed: int, ones: bool = False):
    "`p` filled with N(0, 0.02²) rows, a random tile of up to 4096 rows repeated (billions of draws would take minutes)."
    if ones or p.dim() == 1: return p.fill_(1.0) if ones else p.normal_(0, 0.02)
    tile = torch.randn(min(len(p), 4096), *p.shape[1:], generator=torch.Generator().manual_seed(seed)) * 0.02
    for i in range(0, len(p), len(tile)): p[i:i + len(tile)] = tile[:len(p) - i]


def heads(hidden: int, path: str) -> TargetHeads:
    "Random bf16 heads of a Qwen3.5-style target (vocabulary `V`, `hidden`), made to compute as `path` says."
    hf = Qwen3_5TextConfig(vocab_size=V, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=8,
                           num_key_value_heads=2, head_dim=128, intermediate_size=4 * hidden, tie_word_embeddings=False)
    h = TargetHeads.from_config(hf, torch.bfloat16)
    for p in h.parameters(): fill(p, 0)
    if path != "bf16 as stored": print("note:", cpu_float32_heads(h, PATHS[path]), file=sys.stderr)
    return h


def drafter(dc: DFlashConfig, h: TargetHeads) -> DFlashDraftModel:
    "A random float32 drafter of `dc` over `h` (made on meta, then filled: 1.73B parameters init fast)."
    with torch.device("meta"): d = DFlashDraftModel(dc, nn.Embedding(V, dc.hidden_size), nn.Linear(dc.hidden_size, V))
    d = d.to_empty(device="cpu").attach_shared(h.embed_tokens, h.lm_head)
    for n, p in d.named_parameters():
        if p.requires_grad: fill(p, 1, "norm" in n)     # the drafter's own: the borrowed heads are frozen
    return d


class SyntheticCache:
    "What `offline_tau` reads of a cache: `n` samples of `T` random tokens (a 16-token prompt) and random fc taps."
    path, convention = "synthetic", "layer_output"
    def __init__(self, n: int, T: int, taps: list, hidden: int): self.n, self.T, self.tap_ids, self.H = n, T, taps, hidden
    def __len__(self): return self.n
    def __getitem__(self, i):
        ids = torch.randint(0, V - 1, (self.T,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "loss_mask": (torch.arange(self.T) >= 16).long()}
    def taps_for(self, i, layer_ids):
        return torch.randn(self.T, len(layer_ids) * self.H, generator=torch.Generator().manual_seed(100 + i))


def timed(module: nn.Module):
    "Wall seconds and calls spent in `module`'s forward (hooks), on the returned namespace."
    got = SimpleNamespace(s=0.0, calls=0, t=0.0)
    def start(*_): got.t = time.perf_counter()
    def stop(*_): got.s, got.calls = got.s + time.perf_counter() - got.t, got.calls + 1
    module.register_forward_pre_hook(start)
    module.register_forward_hook(stop)
    return got


def run_eval(path: str, a) -> dict:
    h = heads(5120, path)
    dc = DFlashConfig(**DRAFTER_27B, hidden_size=5120, vocab_size=V, num_target_layers=64, rope_theta=1e7)
    d, head = drafter(dc, h).eval(), timed(h.lm_head)
    t = time.perf_counter()
    r = offline_tau(d, SyntheticCache(a.samples, a.tokens, dc.target_layer_ids, 5120), budgets=(8,))
    return {"s": time.perf_counter() - t, "lm_head_s": round(head.s, 1), "lm_head_calls": head.calls, "tau": r.tau,
            "tau_ddtree8": r.tau_tree[8], "rounds": sum(map(len, r.rounds))}


def run_train(path: str, a) -> dict:
    h = heads(1024, path)
    dc = DFlashConfig(hidden_size=1024, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, head_dim=128,
                      intermediate_size=2816, vocab_size=V, block_size=16, num_target_layers=2, target_layer_ids=[0, 1],
                      mask_token_id=V - 1, rope_theta=1e7)
    d = drafter(dc, h).train()
    cfg = TrainConfig(loss="ce", target_source="tokens", loss_chunk=32, num_anchors=64, attn_impl="blockwise")
    g = torch.Generator().manual_seed(2)
    T, A = 512, 64
    b = Batch([0], torch.randint(0, V - 1, (1, T), generator=g), torch.ones(1, T, dtype=torch.long),
              torch.randn(1, T, dc.fc_in_features, generator=g), torch.randperm(T - 1, generator=g)[:A].sort().values[None],
              torch.ones(1, A, dtype=torch.bool), None)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-4)
    losses, head, t = [], timed(h.lm_head), time.perf_counter()
    for _ in range(a.steps):
        out = step_loss(d, b, dc, cfg, TargetReadout(h.norm, h.lm_head))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        print(f"step {len(losses)}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return {"s": time.perf_counter() - t, "lm_head_forward_s": round(head.s, 1), "losses": losses}


CASES = {"eval": run_eval, "train": run_train}


def child(a) -> None:
    torch.manual_seed(0)
    print(json.dumps(CASES[a.case](a.path, a)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit-s", type=float, default=600, help="stop a case after this many seconds")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=list(CASES), default=list(CASES))
    ap.add_argument("--paths", nargs="*", choices=list(PATHS), default=list(PATHS))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.case: return child(a)
    print(f"threads {torch.get_num_threads()}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("case | path | seconds | speed vs bf16 as stored | result\n-----|------|---------|-------------------------|-------")
    for case in a.only:
        base = None
        for path in a.paths:
            argv = [sys.executable, __file__, "--case", case, "--path", path, "--samples", str(a.samples),
                    "--tokens", str(a.tokens), "--steps", str(a.steps)]
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=a.limit_s)
                if p.returncode: raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                secs, rest = f"{r.pop('s'):.1f}", json.dumps(r)
            except subprocess.TimeoutExpired as e:
                done = (e.stderr or b"").decode().strip().splitlines()
                secs, rest = f"> {a.limit_s:.0f}", f"stopped ({done[-1] if done else 'nothing finished'})"
            base = base or secs
            if path == a.paths[0] or ">" in secs: ratio = ""
            elif ">" in base: ratio = f"at least {float(base[2:]) / float(secs):.1f}x"
            else: ratio = f"{float(base) / float(secs):.2f}x"
            print(f"{case} | {path} | {secs} | {ratio} | {rest}", flush=True)


if __name__ == "__main__":
    main()
