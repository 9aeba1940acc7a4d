"""Retrofit benchmark on the embedded toy target: turn the shipped split drafter into a fused one (fc widened with
zero columns for the deepest tap), check τ is unchanged at step 0, fine-tune briefly, and measure τ again — next to
the split and fused drafters trained from scratch with the full budget.

    python bench/retrofit.py [--work bench/out/retrofit] [--steps 100]
Uses (or builds) the demo's train and eval caches under --work.
"""
import argparse
from pathlib import Path
from dflash_nb.toy import load_toy_target, load_prompts, repo_data_dir
from dflash_nb.demo import DemoConfig, stage_cache
from dflash_nb.extract import cached_responses
from dflash_nb.config import default_target_layer_ids
from dflash_nb.model import DFlashDraftModel
from dflash_nb.model import retrofit_fused
from dflash_nb.config import TrainConfig
from dflash_nb.train import train
from dflash_nb.evaluate import offline_tau


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="bench/out/retrofit")
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    work, cfg, target = Path(a.work), DemoConfig(), load_toy_target()
    work.mkdir(parents=True, exist_ok=True)
    taps = default_target_layer_ids(target.num_layers, cfg.num_taps)
    respond = lambda split, n: cached_responses(target, load_prompts(split)[:n], work / f"responses-{split}.jsonl",
                                                cfg.max_new_tokens, 8)
    tr, ev = respond("train", cfg.n_train_prompts), respond("eval", cfg.n_eval_prompts)
    tr_c, ev_c = stage_cache(target, tr, work / "cache-train", taps), stage_cache(target, ev, work / "cache-eval", taps)
    shipped = repo_data_dir() / "toy-drafters"
    load = lambda p: DFlashDraftModel.from_pretrained(p, target_model=target.model).eval()
    tau = lambda m: offline_tau(m, ev_c, budgets=()).tau
    split = load(shipped / "split")
    retrofit_fused(split).save_pretrained(work / "retrofit-step0")
    tune = TrainConfig(init_from=str(work / "retrofit-step0"), out_dir=str(work / "retrofit-tuned"), steps=a.steps,
                       num_anchors=cfg.num_anchors, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, progress=False)
    tuned = train(tune, target=target, data=tr_c)
    rows = [("split drafter (shipped, 400 steps)", tau(split)),
            ("fused drafter (shipped, 400 steps)", tau(load(shipped / "fused"))),
            ("retrofit of split -> fused, step 0", tau(load(work / "retrofit-step0"))),
            (f"retrofit after {a.steps} fine-tuning steps", tau(load(tuned)))]
    head = "drafter (offline chain tau, 24 eval prompts)"
    w = max(len(head), *(len(r[0]) for r in rows))
    print(f"{head:<{w}} | tau\n{'-' * w}-|------")
    for k, v in rows: print(f"{k:<{w}} | {v:.3f}")


if __name__ == "__main__":
    main()
