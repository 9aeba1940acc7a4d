"""Run every benchmark under bench/ and print one table: bench | metric | value (| goal | ok where the bench has them).

    python bench/run_all.py [--only model extract train decode retrofit replay explorer loss_memory bf16_heads] [--quick]
Each bench runs in its own process, one after the other (this machine is shared and noisy: ratios measured within
one run are the figures to trust, not absolute times).
"""
import argparse, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).parent
BENCHES = {"model": [], "extract": [], "train": [], "decode": [], "retrofit": [], "replay": [], "explorer": [],
           "loss_memory": [], "bf16_heads": []}
QUICK = {"model": ["--anchors", "256", "--seq", "384"], "extract": ["--tokens", "10000", "--repeats", "1"],
         "train": ["--steps", "40", "--prompts", "32"], "decode": ["--prompts", "6", "--train-steps", "100"],
         "retrofit": ["--steps", "30"], "replay": ["--prompts", "6", "--repeats", "1"], "explorer": ["--moves", "6"],
         "loss_memory": ["--toy-anchors", "64", "--repeats", "2"],
         "bf16_heads": ["--samples", "1", "--tokens", "40", "--steps", "1", "--limit-s", "300"]}


def table_rows(text: str) -> list[list[str]]:
    "Rows of a bench's `a | b | ...` table, without its header and separator lines."
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set("".join(cells)) <= set("-: ") or cells[0] in ("metric", "measure"): continue
        rows.append(cells)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=list(BENCHES), help="benches to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes everywhere")
    a = ap.parse_args()
    out = []
    for name in a.only or BENCHES:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *(QUICK[name] if a.quick else BENCHES[name])],
                           capture_output=True, text=True)
        if p.returncode:
            why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
            out.append([name, "FAILED", why])
        out += [[name, *r] for r in table_rows(p.stdout)]
        out.append([name, "(bench wall time)", f"{time.perf_counter() - t0:.0f} s"])
    n = max(map(len, out))
    out = [r + [""] * (n - len(r)) for r in out]
    head = ["bench", "metric", "value", "goal", "ok"][:n] + [""] * max(0, n - 5)
    w = [max(len(str(r[i])) for r in out + [head]) for i in range(n)]
    print(" | ".join(h.ljust(x) for h, x in zip(head, w)))
    print("-|-".join("-" * x for x in w))
    for r in out: print(" | ".join(str(c).ljust(x) for c, x in zip(r, w)))


if __name__ == "__main__":
    main()
