"""Training benchmark on the embedded toy target (issue: training).

- a fused and a split drafter trained with the same data, budget and seed: estimated tau (from training metrics)
  and measured offline tau side by side;
- training tokens/s on CPU for 1 and 2 processes (torchrun, gloo), DDP and FSDP, and online (target in-process)
  vs cache;
- a run killed mid-way and resumed vs an uninterrupted one: identical losses and weights;
- the training hot paths (issue 15, goal 4), before and after in one run: time per optimizer step and host reads
  (syncs on a GPU) per step, from a cache with fc-input noise, and from online data (per-sample target forwards
  copied through the CPU, before; one forward per micro-batch left on the target's device, after). The "before" paths
  are reference copies of the old code below (`OldStep`, `PerSampleOnline`); both sides must log identical losses.

    python bench/train.py [--work bench/out/train] [--steps 200] [--prompts 96] [--only hot]
Stage outputs are reused when the script is rerun with the same --work directory.
"""
import argparse, json, re, shutil, statistics, time
from pathlib import Path
from unittest import mock
import torch
import torch.distributed as dist
import dflash_nb.train as train_mod
from dflash_nb.demo import DemoConfig, stage_cache, stage_train
from dflash_nb.extract import cached_responses, extract_samples, OnlineHiddenStates
from dflash_nb.config import default_target_layer_ids
from dflash_nb.model import DFlashDraftModel
from dflash_nb.hub import read_drafter_tensors
from dflash_nb.config import TrainConfig
from dflash_nb.batches import BatchPlan, make_batch, read_records, step_generator
from dflash_nb.objective import step_loss, acceptance_counts, acceptance_metrics, noise_level, noisy_fc_input
from dflash_nb.train import Trainer, train, read_metrics, lr_at
from dflash_nb.profile import trainer_reads
from dflash_nb.evaluate import offline_tau
from dflash_nb.launch import launch
from dflash_nb.toy import load_toy_target, load_prompts, toy_target_path


def table(rows):
    w = max(len(r[0]) for r in rows)
    print(f"{'metric':<{w}} | value\n{'-' * w}-|------")
    for k, v in rows: print(f"{k:<{w}} | {v}")


def tokens_per_s(run_dir, skip=2):
    recs = read_metrics(run_dir)[skip:]
    return sum(r["tokens_per_s"] for r in recs) / max(1, len(recs))


def timed(f) -> float:
    "Seconds `f()` takes."
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def responses(target, split: str, n: int, work: Path, cfg: DemoConfig) -> list:
    "The toy target's responses to the first `n` prompts of `split`, cached in `work`."
    return cached_responses(target, load_prompts(split)[:n], work / f"responses-{split}.jsonl", cfg.max_new_tokens, 8)


# ---- the hot paths as they were (reference copies of the old code, for the before/after ratio) ----
def old_noisy_fc_input(fc_taps, level, hidden_size, generator):
    "Before: noise drawn on the host with a CPU generator and copied to the taps' device."
    if level == 0: return fc_taps
    x = fc_taps.unflatten(-1, (-1, hidden_size))
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    noise = torch.randn(x.shape, generator=generator).to(x.device)
    return (x + level * rms * noise).flatten(-2)


def to_device(b, device):
    return type(b)(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(b).items()})


class OldStep:
    "Before: `one_batch` / `one_step` reading the loss, the counts and the grad norm back to the host every step."
    def __init__(self, tr: Trainer): self.tr = tr

    def one_batch(self, micro):
        tr, cfg = self.tr, self.tr.cfg
        g = step_generator(cfg.seed, tr.step, micro, tr.rank)
        b = to_device(make_batch(tr.data, tr.plan[tr.step * cfg.grad_accum + micro], tr.dc, cfg, g), tr.device)
        level = noise_level(tr.step, tr.total, cfg.noise_std, cfg.noise_schedule)
        out = step_loss(tr.wrapped, b, tr.dc, cfg, tr.readout, old_noisy_fc_input(b.fc_taps, level, tr.dc.hidden_size, g))
        if not torch.isfinite(out.loss): raise FloatingPointError(f"Loss is {out.loss.item()}")
        (out.loss / cfg.grad_accum).backward()
        return acceptance_counts(out.correct, out.supervised).cpu(), out.loss.item(), int(b.loss_mask.numel())

    def one_step(self):
        tr, cfg, t0 = self.tr, self.tr.cfg, time.perf_counter()
        counts, loss, toks = torch.zeros(3, tr.dc.block_size - 1, dtype=torch.float64), 0.0, 0
        for micro in range(cfg.grad_accum):
            c, lo, n = self.one_batch(micro)
            counts, loss, toks = counts + c, loss + lo / cfg.grad_accum, toks + n
        grad_norm = torch.nn.utils.clip_grad_norm_(tr.params, cfg.grad_clip).item()
        lr = lr_at(tr.step, tr.total, cfg.lr, cfg.warmup)
        for grp in tr.opt.param_groups: grp["lr"] = lr
        tr.opt.step()
        tr.opt.zero_grad(set_to_none=True)
        tr.step += 1
        tot = torch.cat([counts.flatten(), torch.tensor([loss, toks], dtype=torch.float64)]).to(tr.device)
        if dist.is_initialized(): dist.all_reduce(tot)
        tot = tot.cpu()
        return {"step": tr.step, "loss": tot[-2].item() / tr.world, "grad_norm": grad_norm,
                **acceptance_metrics(tot[:-2].view(3, -1)), "tokens_per_s": tot[-1].item() / (time.perf_counter() - t0)}


class PerSampleOnline:
    "Before: online records one target forward per sample, copied to the CPU (the old `OnlineHiddenStates[i]`)."
    def __init__(self, data: OnlineHiddenStates): self.data = data
    def __getattr__(self, k): return getattr(self.data, k)
    def __len__(self): return len(self.data)
    def __getitem__(self, i):
        d = self.data
        return extract_samples(d.target, [d.samples[i]], d.tap_ids, d.convention, d.has_final, d.dtype)[0]


def new_step(tr: Trainer, log_every: int) -> float | None:
    "After: one step; its loss read only on logging steps."
    sums = tr.one_step()
    return tr.record(sums)["loss"] if tr.step % log_every == 0 else None


def timed_steps(step, n: int) -> float:
    "CPU seconds of this process per call of `step()` over `n` calls (other jobs on a shared machine count less)."
    t0 = time.process_time()
    for _ in range(n): step()
    return (time.process_time() - t0) / n


def reads_per_step(tr: Trainer, step) -> dict:
    "Host reads of one (non-logging) step, by the function that asks; host data (cache rows, the plan) left out."
    with trainer_reads(tr) as hr: step()
    return {k: n for k, n in hr.counts.items() if k not in ("_read_rows", "length_grouped_batches")}


def hot_paths(target, data, old_data, out: Path, speed: dict, rounds: int = 5) -> list:
    "Rows: ms per step and host reads per step, before (`old_data`, `OldStep`) and after (`data`, `Trainer`)."
    n, log_every = speed["steps"] // rounds, speed["log_every"]
    new, old = (Trainer.from_config(TrainConfig(**speed, out_dir=str(out / d)), target=target, data=dd)
                for d, dd in (("new", data), ("old", old_data)))
    ref = OldStep(old)
    t_new, t_old, l_new, l_old = [], [], [], []
    for _ in range(rounds):                                   # interleaved, so both see the same machine load
        t_new.append(timed_steps(lambda: l_new.append(new_step(new, log_every)), n))
        t_old.append(timed_steps(lambda: l_old.append(ref.one_step()["loss"]), n))
    logged, before = [x for x in l_new if x is not None], l_old[log_every - 1::log_every]
    diff = max(abs(x - y) / abs(y) for x, y in zip(logged, before))
    r_new, r_old = reads_per_step(new, new.one_step), reads_per_step(old, ref.one_step)
    mn, mo = statistics.median(t_new) * 1e3, statistics.median(t_old) * 1e3
    return [("CPU ms per step (process time), before / after", f"{mo:.1f} / {mn:.1f} ({mo / mn:.2f}x)"),
            (f"  logged losses (steps {log_every}, {2 * log_every}, ...): max relative difference",
             f"{diff:.1e} over {len(logged)} logs"),
            ("  host reads per non-logging step, before", str(r_old)),
            ("  host reads per non-logging step, after", str(r_new))]


def online_records_ms(online: OnlineHiddenStates, batch_size: int, rounds: int = 3) -> tuple:
    "CPU ms per micro-batch of online records, (before, after): per-sample forwards copied to the CPU; one forward."
    plan = BatchPlan(online.lengths, TrainConfig(batch_size=batch_size))
    batches, old = [plan[i] for i in range(plan.per_epoch)], PerSampleOnline(online)
    t_new, t_old = [], []
    for _ in range(rounds):
        t_new.append(timed_steps(lambda: [read_records(online, b) for b in batches], 1) / len(batches))
        t_old.append(timed_steps(lambda: [read_records(old, b) for b in batches], 1) / len(batches))
    return statistics.median(t_old) * 1e3, statistics.median(t_new) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="bench/out/train")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--speed-steps", type=int, default=12)
    ap.add_argument("--hot-steps", type=int, default=20, help="steps per side in the hot-path comparison")
    ap.add_argument("--only", choices=["all", "hot"], default="all", help="hot: only the hot-path comparison")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    cfg = DemoConfig(n_train_prompts=a.prompts, n_eval_prompts=12, max_new_tokens=96, steps=a.steps)
    target = load_toy_target()
    taps = default_target_layer_ids(target.num_layers, cfg.num_taps)
    tr = responses(target, "train", cfg.n_train_prompts, work, cfg)
    ev = responses(target, "eval", cfg.n_eval_prompts, work, cfg)
    tr_c, ev_c = stage_cache(target, tr, work / "cache-train", taps), stage_cache(target, ev, work / "cache-eval", taps)

    rows = []
    for d in work.glob("hot-*"): shutil.rmtree(d)
    hot = dict(drafter=cfg.drafter | {"target_layer_ids": taps}, steps=a.hot_steps, num_anchors=cfg.num_anchors,
               batch_size=cfg.batch_size, log_every=10, save_every=10 ** 6, progress=False, device="cpu",
               noise_std=0.05)
    rows += [(f"cache, noise on: {k}", v) for k, v in hot_paths(target, tr_c, tr_c, work / "hot-cache", hot)]
    online = OnlineHiddenStates(target, tr, taps)
    rows += [(f"online data: {k}", v)
             for k, v in hot_paths(target, online, PerSampleOnline(online), work / "hot-online", hot)]
    before, after = online_records_ms(online, cfg.batch_size)
    rows += [(f"online data: CPU ms per micro-batch of {cfg.batch_size} records (target forwards), before / after",
              f"{before:.1f} / {after:.1f} ({before / after:.2f}x)")]
    if a.only == "hot":
        table(rows)
        return
    for f in ("fused", "split"):
        ck = stage_train(target, tr_c, work / f"drafter-{f}", f, cfg)
        est = read_metrics(work / f"drafter-{f}")[-5:]
        meas = offline_tau(DFlashDraftModel.from_pretrained(ck, target_model=target.model).eval(), ev_c, budgets=(8,))
        est_tau = sum(r["tau_est"] for r in est) / len(est)
        rows += [(f"{f}: tau estimated in training (last 5 logs, train data)", f"{est_tau:.3f}"),
                 (f"{f}: tau measured offline (eval prompts), chain / DDTree-8",
                  f"{meas.tau:.3f} / {meas.tau_tree[8]:.3f}")]

    for d in [*work.glob("speed-*"), *work.glob("kr-*")]: shutil.rmtree(d)   # timed runs start fresh, never resume
    speed = dict(drafter=cfg.drafter, steps=a.speed_steps, num_anchors=cfg.num_anchors, batch_size=cfg.batch_size,
                 log_every=1, save_every=a.speed_steps, progress=False, device="cpu", cache=str(work / "cache-train"),
                 target=str(toy_target_path()))
    w1 = timed(lambda: train(TrainConfig(**speed, out_dir=str(work / "speed-1")), target=target, data=tr_c))
    run = launch(TrainConfig(**speed, out_dir=str(work / "speed-2")), nproc=2)
    w2 = timed(run.wait)
    fsdp_cfg = TrainConfig(**(speed | dict(progress=True)), out_dir=str(work / "speed-2-fsdp"), parallel="fsdp")
    fsdp = launch(fsdp_cfg, nproc=2)
    fsdp.wait()
    held = re.search(r"([\d.]+)M trainable parameters, fsdp over 2 ranks, ([\d.]+)M on this rank",
                     "\n".join(fsdp.lines())).groups()
    prompts, online = work / "prompts-train.jsonl", work / "speed-online"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in load_prompts("train")[:cfg.n_train_prompts]))
    online.mkdir(exist_ok=True)
    shutil.copy(work / "responses-train.jsonl", online / "responses.jsonl")   # same responses, not regenerated
    on = dict(speed, cache="", prompts=str(prompts), max_new_tokens=cfg.max_new_tokens,
              drafter=cfg.drafter | {"target_layer_ids": taps})
    train(TrainConfig(**on, out_dir=str(online)), target=target)
    s1, s2, s2f, so = (tokens_per_s(work / d) for d in ("speed-1", "speed-2", "speed-2-fsdp", "speed-online"))
    rows += [("training tokens/s, 1 process (CPU)", f"{s1:.0f}"),
             ("training tokens/s, 2 processes DDP (CPU, gloo; both ranks)", f"{s2:.0f}"),
             ("  ratio 2 procs / 1 proc (2 cores)", f"{s2 / s1:.2f}"),
             ("  wall time 1 proc / 2 procs (2 procs incl. process start)", f"{w1:.1f} s / {w2:.1f} s"),
             ("training tokens/s, 2 processes FSDP (CPU, gloo; both ranks)", f"{s2f:.0f} ({s2f / s2:.2f} x DDP)"),
             ("  trainable parameters held by rank 0 under FSDP", f"{held[1]} M of {held[0]} M"),
             ("training tokens/s, 1 process online (target forward per sample)", f"{so:.0f} ({so / s1:.2f} x cache)")]

    kr = dict(speed, steps=16, save_every=4)
    whole = train(TrainConfig(**kr, out_dir=str(work / "kr-whole")), target=target, data=tr_c)
    train(TrainConfig(**kr, out_dir=str(work / "kr-killed")), target=target, data=tr_c, stop_after=10)
    resumed = train(TrainConfig(**kr, out_dir=str(work / "kr-killed")), target=target, data=tr_c)
    la, lb = ([r["loss"] for r in read_metrics(work / d)] for d in ("kr-whole", "kr-killed"))
    wa, wb = read_drafter_tensors(whole), read_drafter_tensors(resumed)
    diff = max(abs(x - y) for x, y in zip(la, lb))
    rows += [("killed at step 10 (last checkpoint 8), resumed: max |loss diff| over 16 steps", f"{diff:.1e}"),
             ("  final weights bit-identical", str(all(torch.equal(wa[k], wb[k]) for k in wa))),
             ("  losses (uninterrupted)", " ".join(f"{x:.4f}" for x in la)),
             ("  losses (killed + resumed)", " ".join(f"{x:.4f}" for x in lb))]
    table(rows)
    (work / "bench_train.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
