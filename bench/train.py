"""Training benchmark on the embedded toy target (issue: training).

- a fused and a split drafter trained with the same data, budget and seed: estimated tau (from training metrics)
  and measured offline tau side by side;
- training tokens/s on CPU for 1 and 2 processes (torchrun, gloo), DDP and FSDP, and online (target in-process)
  vs cache;
- a run killed mid-way and resumed vs an uninterrupted one: identical losses and weights.

    python bench/train.py [--work bench/out/train] [--steps 200] [--prompts 96]
Stage outputs are reused when the script is rerun with the same --work directory.
"""
import argparse, json, re, shutil, time
from pathlib import Path
import torch
from dflash_nb.demo import DemoConfig, stage_cache, stage_train
from dflash_nb.extract import cached_responses
from dflash_nb.config import default_target_layer_ids
from dflash_nb.model import DFlashDraftModel, read_drafter_tensors
from dflash_nb.train import TrainConfig, train, read_metrics
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="bench/out/train")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--speed-steps", type=int, default=12)
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
