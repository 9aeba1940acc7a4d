"""Explorer benchmark: seconds from one slider move to updated τ and both panels (median of N moves), before (the
explorer's old update: `offline_tau` with a scaling transform, replayed prompt by prompt, and a new figure rendered
per move) and after (`dflash_nb.explore.explorer_widget`: the scaled taps fused in one batch, the prompts replayed
as one batch, the figure redrawn in place and rendered), in one run, on the toy drafters over the explorer's prompts.
Prints a table; asserts nothing.

    python bench/explorer.py [--prompts 6] [--moves 20] [--threads N]

Both paths render the figure to PNG at the widget's resolution (80 dpi), as a notebook shows it; the moves sweep the
deepest tap's slider over 0..2 (and a middle tap's), and each move's τ is checked equal on both paths. Threads: torch's
default (all cores, as in a notebook) unless `--threads` says otherwise.
"""
import argparse, io, statistics, tempfile, time
from pathlib import Path
import torch
from dflash_nb.cache import HiddenStateCache
from dflash_nb.evaluate import offline_result, replay, accept_chain
from dflash_nb.explore import TapExplorer, explorer_widget, explorer_figure, ExplorerState
from dflash_nb.extract import cached_responses, extract_to_cache
from dflash_nb.model import DFlashDraftModel


def scaled_rows(rows, scales):
    "fc report rows with each contribution scaled by |scale| and the shares recomputed (as the explorer does)."
    out = [dict(r) | {"contribution": None if r["contribution"] is None
                      else r["contribution"] * abs(float(scales.get(r["tap"], 1.0)))} for r in rows]
    total = sum(r["contribution"] or 0 for r in out) or 1.0
    return [r | {"share": None if r["contribution"] is None else r["contribution"] / total} for r in out]


def figure_png(fig, dpi: int = 80) -> bytes:
    "`fig` rendered as PNG bytes, the way the widget showed it before (`savefig`, everything drawn)."
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def reference_update(ex, layout, scales):
    "The explorer's update before: replay prompt by prompt with the scaled taps, then a new figure rendered."
    t0, c0 = time.perf_counter(), time.process_time()
    m, f = ex.drafters[layout], ex.scale_transform(layout, scales)
    rounds = []
    with torch.no_grad():
        for i in range(len(ex.cache)):
            r = ex.cache[i]
            on = torch.nonzero(r["loss_mask"]).flatten()
            if not len(on): continue
            taps = f(ex.cache.taps_for(i, m.config.fc_layer_ids))
            rounds.append(replay(m, r["input_ids"], taps, int(on[0]), accept_chain))
    state = ExplorerState(offline_result(m, layout, [rounds], ()), scaled_rows(ex.reports[layout], scales), 0.0)
    figure_png(explorer_figure(state))
    return state, (time.perf_counter() - t0, time.process_time() - c0)


def moves(taps, n):
    "`n` slider moves (tap, value): the deepest tap swept over 0..2, every third move a middle tap."
    values = [round(0.1 * (k % 20), 1) for k in range(n)]      # never the slider's value before the move
    return [(taps[len(taps) // 2] if k % 3 == 2 else taps[-1], v) for k, v in enumerate(values)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=6, help="toy eval prompts in the explorer (default 6, as in 09)")
    ap.add_argument("--moves", type=int, default=20, help="slider moves timed per path (default 20)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (default: all cores)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from dflash_nb.toy import load_toy_target, repo_data_dir
    toy, shipped = load_toy_target(), repo_data_dir() / "toy-drafters"
    load = lambda f: DFlashDraftModel.from_pretrained(shipped / f, target_model=toy.model).eval()
    drafters = {f: load(f) for f in ("fused", "split")}
    responses = cached_responses(None, [], shipped / "responses-eval.jsonl", 0, 0)[:a.prompts]
    with tempfile.TemporaryDirectory() as tmp:
        taps = drafters["fused"].config.target_layer_ids
        cache = HiddenStateCache(extract_to_cache(toy, responses, Path(tmp) / "cache", taps))
        t0 = time.perf_counter()
        ex = TapExplorer(drafters, cache)
        setup = time.perf_counter() - t0
        w = explorer_widget(ex)
        sliders = {c.description: c for c in w.children[1].children}
        before, after, same = [], [], True
        for tap, v in moves(taps, a.moves):
            scales = {t: sliders[f"tap {t}"].value for t in taps} | {tap: v}
            old, t_old = reference_update(ex, "fused", scales)
            t0, c0 = time.perf_counter(), time.process_time()
            sliders[f"tap {tap}"].value = v                  # the widget's own refresh: τ, label, figure, PNG
            after.append((time.perf_counter() - t0, time.process_time() - c0))
            before.append(t_old)
            if w.state.result.tau != old.result.tau:
                print(f"note: tap {tap} at {v}: τ {w.state.result.tau} (explorer) vs {old.result.tau} (before)")
                same = False
    med = lambda ts, k: statistics.median(t[k] for t in ts)
    print(f"toy target, fused drafter, {len(ex.cache)} prompts, {a.moves} slider moves, threads {a.threads}; "
          f"explorer set-up (fc reports, tap inputs) {setup:.2f} s")
    print("| path | median wall s per move | min | max | median CPU s |\n|---|---|---|---|---|")
    for name, ts in (("before (offline_tau per prompt, new figure)", before), ("after (explorer_widget)", after)):
        print(f"| {name} | {med(ts, 0):.3f} | {min(t[0] for t in ts):.3f} | {max(t[0] for t in ts):.3f} "
              f"| {med(ts, 1):.3f} |")
    print(f"| ratio | {med(before, 0) / med(after, 0):.1f}x | | same τ on every move: {same} "
          f"| {med(before, 1) / med(after, 1):.1f}x |")

if __name__ == "__main__":
    main()
