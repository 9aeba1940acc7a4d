"""Memory of one micro-batch's forward + backward with the whole logits (before: loss_chunk 0) and with the lm_head and
the loss in chunks of anchors (after: loss_chunk, default 32) (issue 23, item 2).

(a) At the real size, on fake tensors (FakeTensorMode: shapes and dtypes, nothing allocated): the drafter of
    data/configs/qwen3.6-27b.yaml (H 5120, 5 layers, 32 heads / 8 KV of 128, FFN 17408, 5 taps, block 16; float32
    weights as training keeps them) with a bfloat16 embedding and lm_head of 248,320 words, one sequence of max_len
    3072 tokens with 512 anchors; CE (token labels) and KL (soft targets from the target's final states). Peak bytes
    from MemTracker's storage accounting (weights, the batch and every tensor an op makes, until freed). On CPU the
    drafter runs in float32 with blockwise attention; a GPU run (bf16 autocast, flex attention) keeps less for the
    drafter's own layers, the same for the lm_head and the loss.
(b) Measured on this CPU at toy size: the peak RSS of a child process over one step (VmHWM, reset by writing 5 to
    /proc/self/clear_refs after a warm-up step) minus its RSS before the step.
(c) CPU time of that toy step (median of --repeats), before / after: what the chunking costs.

    python bench/loss_memory.py [--chunk 32] [--toy-vocab 16384] [--toy-anchors 256] [--repeats 5]
"""
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path
import torch, torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from dflash_nb.config import DFlashConfig
from dflash_nb.model import DFlashDraftModel
from dflash_nb.ops import RMSNorm
from dflash_nb.config import TrainConfig, load_train_config
from dflash_nb.batches import Batch
from dflash_nb.objective import step_loss

ROOT = Path(__file__).resolve().parent.parent
GiB, MiB = 2 ** 30, 2 ** 20


class NoModules:
    """A stand-in for MemTracker's ModTracker. Its module tracking hooks every parameter's gradient (a frozen borrowed
    embedding or lm_head refuses the hook), refuses a module called twice at top level (the lm_head, once per chunk
    and once for the target's logits) and loses its hierarchy when a forward runs `autograd.grad` inside (each chunk's
    gradient). The storage accounting, which gives the peak, needs none of it: weights come in by `track_external`."""
    parents = ()
    is_bw = property(lambda self: torch._C._current_graph_task_id() != -1)
    def register_user_hooks(self, *hooks): pass
    def clear_user_hooks(self): pass
    def __enter__(self): return self
    def __exit__(self, *exc): pass


def synthetic_batch(dc: DFlashConfig, T: int, A: int, seed: int = 0) -> Batch:
    "One sequence of `T` response tokens with `A` anchors, random fc taps and target states (final)."
    g = torch.Generator().manual_seed(seed)
    anchors = torch.randperm(T - 1, generator=g)[:A].sort().values[None]
    return Batch([0], torch.randint(0, dc.vocab_size - 1, (1, T), generator=g), torch.ones(1, T, dtype=torch.long),
                 torch.randn(1, T, dc.fc_in_features, generator=g), anchors, torch.ones(1, A, dtype=torch.bool),
                 torch.randn(1, T, dc.hidden_size, generator=g))


def real_config(path: Path) -> tuple:
    "(drafter config, train config) of the shipped 27B run, with the target's fixed fields (Qwen3.6-27B), on CPU."
    cfg = load_train_config(path, attn_impl="blockwise", device="cpu")   # flex has no backward on CPU
    dc = DFlashConfig(**cfg.drafter, hidden_size=5120, vocab_size=248_320, num_target_layers=64, rope_theta=1e7)
    return dc, cfg


class StatesOnly(nn.Module):
    "A drafter stand-in whose forward returns trainable final states [1, A, B, H] (or their logits): the loss alone."
    def __init__(self, dc: DFlashConfig, embed: nn.Embedding, lm_head: nn.Linear, anchors: int):
        super().__init__()
        self.config, self.embed_tokens, self.lm_head = dc, embed, lm_head
        self.h = nn.Parameter(torch.zeros(1, anchors, dc.block_size, dc.hidden_size))

    logits = DFlashDraftModel.logits

    def forward(self, input_ids, taps, anchors, impl="auto", check=True, hidden=False):
        h = self.h * 1
        return h if hidden else self.logits(h)


def fake_peak(dc: DFlashConfig, cfg: TrainConfig, loss_alone: bool = False) -> tuple:
    """(peak, held before) bytes of one micro-batch's forward + backward under `cfg` on fake tensors (`loss_alone`: the
    drafter is `StatesOnly`); held before: the weights and the batch."""
    with FakeTensorMode():
        embed = nn.Embedding(dc.vocab_size, dc.hidden_size, dtype=torch.bfloat16)
        lm_head = nn.Linear(dc.hidden_size, dc.vocab_size, bias=False, dtype=torch.bfloat16).requires_grad_(False)
        model = StatesOnly(dc, embed, lm_head, cfg.num_anchors) if loss_alone else DFlashDraftModel(dc, embed, lm_head)
        norm = RMSNorm(dc.hidden_size)
        norm.weight = nn.Parameter(torch.ones(dc.hidden_size, dtype=torch.bfloat16), requires_grad=False)
        b = synthetic_batch(dc, cfg.max_len, cfg.num_anchors)
        mt = MemTracker()
        mt._mod_tracker = NoModules()
        mt.track_external(model, norm, *[t for t in vars(b).values() if isinstance(t, torch.Tensor)])
        start = mt.get_tracker_snapshot()[torch.device("cpu")]["Total"]
        with mt: step_loss(model, b, dc, cfg, (norm, lm_head)).loss.backward()
        return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"], start


def toy_setup(vocab: int, anchors: int, T: int):
    "A toy drafter (2 layers, H 64, block 16) with its own lm_head of `vocab` words, a batch, a target norm."
    torch.manual_seed(0)
    dc = DFlashConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=vocab, block_size=16, num_target_layers=12,
                      mask_token_id=vocab - 1, target_layer_ids=[1, 5, 9], rope_theta=10000.0)
    return DFlashDraftModel(dc), synthetic_batch(dc, T, anchors), RMSNorm(64).requires_grad_(False)


def toy_step(model, b, norm, cfg):
    step_loss(model, b, model.config, cfg, (norm, model.lm_head)).loss.backward()
    model.zero_grad(set_to_none=True)


def _status(key: str) -> int:
    "A field of /proc/self/status in bytes (VmRSS, VmHWM)."
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024


def child(args: dict) -> None:
    "In a fresh process: one warm-up step, reset the RSS high-water mark, one step; print its peak above the start."
    model, b, norm = toy_setup(args["vocab"], args["anchors"], args["T"])
    cfg = TrainConfig(loss=args["loss"], target_source="final", loss_chunk=args["chunk"])
    toy_step(model, b, norm, cfg)
    Path("/proc/self/clear_refs").write_text("5")
    rss = _status("VmRSS")
    toy_step(model, b, norm, cfg)
    print(json.dumps({"peak_above_start": _status("VmHWM") - rss}))


def measured_peak(**args) -> int:
    "`child`'s figure; big blocks are mmapped (MALLOC_MMAP_THRESHOLD_) so a freed one leaves the RSS at once."
    env = os.environ | {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])["peak_above_start"]


def step_seconds(vocab: int, anchors: int, T: int, chunk: int, repeats: int) -> tuple:
    "Median CPU seconds of a toy CE step (process time), (before, after), interleaved so both see the same load."
    model, b, norm = toy_setup(vocab, anchors, T)
    cfgs = [TrainConfig(target_source="final", loss_chunk=c) for c in (0, chunk)]
    times = ([], [])
    for _ in range(repeats + 1):                          # the first round warms up
        for k, cfg in enumerate(cfgs):
            t0 = time.process_time()
            toy_step(model, b, norm, cfg)
            times[k].append(time.process_time() - t0)
    return tuple(statistics.median(t[1:]) for t in times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "data/configs/qwen3.6-27b.yaml"))
    ap.add_argument("--chunk", type=int, default=TrainConfig().loss_chunk, help="anchors per chunk (after)")
    ap.add_argument("--toy-vocab", type=int, default=16384)
    ap.add_argument("--toy-anchors", type=int, default=256)
    ap.add_argument("--toy-seq", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child: return child(json.loads(a.child))
    torch.set_num_threads(1)
    dc, cfg = real_config(Path(a.config))
    rows = [("measure", "before (loss_chunk 0)", f"after (loss_chunk {a.chunk})", "before / after")]
    print(f"27B drafter: {cfg.num_anchors} anchors x {dc.block_size}, V {dc.vocab_size:,}, T {cfg.max_len}, on fake "
          "tensors (float32 drafter, bf16 embedding + lm_head, CPU: blockwise attention, no autocast)\n")
    for alone, what in ((False, "27B drafter step"), (True, "  its lm_head + loss alone")):
        for loss, source in (("ce", "tokens"), ("kl", "final")):
            run = lambda c: TrainConfig(**(vars(cfg) | dict(loss=loss, target_source=source, loss_chunk=c)))
            (before, start), (after, _) = (fake_peak(dc, run(c), alone) for c in (0, a.chunk))
            gib = lambda x: f"{x / GiB:.1f} ({(x - start) / GiB:.1f})"
            rows.append((f"{what}, {loss.upper()}: peak GiB (above weights + batch)", gib(before), gib(after),
                         f"{(before - start) / (after - start):.1f}x, -{(before - after) / GiB:.1f} GiB"))
    toy = dict(vocab=a.toy_vocab, anchors=a.toy_anchors, T=a.toy_seq)
    size = f"{a.toy_anchors} anchors x 16, V {a.toy_vocab:,}, T {a.toy_seq}"
    for loss in ("ce", "kl"):
        before, after = (measured_peak(**toy, loss=loss, chunk=c) for c in (0, a.chunk))
        rows.append((f"toy drafter, {loss.upper()}, {size}: step peak RSS MiB (CPU)", f"{before / MiB:.0f}",
                     f"{after / MiB:.0f}", f"{before / after:.2f}x"))
    before, after = step_seconds(**toy, chunk=a.chunk, repeats=a.repeats)
    rows.append((f"toy drafter, CE, {size}: CPU ms per step (median of {a.repeats})", f"{before * 1e3:.0f}",
                 f"{after * 1e3:.0f}", f"{after / before:.2f} (after / before)"))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    for k, r in enumerate(rows):
        print(" | ".join(c.ljust(x) for c, x in zip(r, w)))
        if k == 0: print("-|-".join("-" * x for x in w))


if __name__ == "__main__":
    main()
