"""Code-shape figures of the library in one or more checkouts, side by side: how many definitions, how deep and across
how many modules one training step and one decode run, module sizes, duplicated drafter pieces, cross-module private
imports, CLI error conventions and the shape of `Trainer`. Prints markdown tables; asserts nothing.

    python bench/redesign_table.py [--root DIR]...      # default: the current directory

Each root is measured in its own subprocess (`PYTHONPATH=<root>`, `cwd=<root>`, one thread), so `import dflash_nb`
imports that tree's library. Dynamic figures trace `sys.setprofile` 'call' events of code under `<root>/dflash_nb/`:
a definition is a distinct (file, name, first line), comprehensions and lambdas excluded; depth is the most
dflash_nb frames on the stack at once; modules are distinct dflash_nb files. What a tree cannot run is "n/a".
Column headers are the root's short HEAD (`*`: uncommitted changes under dflash_nb/ or in pyproject.toml) and folder.
"""
import argparse, ast, json, os, re, subprocess, sys, tempfile, tomllib
from pathlib import Path

ANON = {"<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"}
RULES = {"RMSNorm (name ~ /rms/i)": (r"rms", re.I), "RoPE (name ~ /rope|rotate|rotary/i)": (r"rope|rotate|rotary", re.I),
         "drafter layer (qualified name ~ /DecoderLayer|block_layer|LayerWeights.step|BlockDrafts/)":
             (r"DecoderLayer|block_layer|LayerWeights\.step|BlockDrafts", 0)}


# ---- static figures (source text and AST only) ----------------------------------------------------------------------
def modules(lib: Path) -> dict:
    "{module stem: parsed AST} of `lib/*.py`, nbdev's `_modidx.py` left out."
    return {f.stem: (f, ast.parse(f.read_text())) for f in sorted(lib.glob("*.py")) if f.name != "_modidx.py"}


def exports(tree: ast.Module) -> int | None:
    "Length of the module's literal `__all__`, None if it has none."
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets):
            try: return len(ast.literal_eval(n.value))
            except ValueError: return None
    return None


def definitions(tree: ast.Module) -> list[str]:
    "Qualified names (`Class.method`, `outer.inner`; `@patch`-ed `f(self: C)` as `C.f`) of every def and class in `tree`."
    out = []
    def walk(node, prefix):
        for c in ast.iter_child_nodes(node):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = prefix + c.name
                if not prefix and not isinstance(c, ast.ClassDef) and any(map(is_patch, c.decorator_list)):
                    a = (c.args.posonlyargs + c.args.args)[:1]
                    if a and isinstance(a[0].annotation, ast.Name): q = f"{a[0].annotation.id}.{c.name}"
                out.append(q); walk(c, q + ".")
            else: walk(c, prefix)
    walk(tree, "")
    return out


def is_patch(d: ast.expr) -> bool:
    "Whether decorator `d` is fastcore's `patch` (bare or called)."
    d = d.func if isinstance(d, ast.Call) else d
    return getattr(d, "id", getattr(d, "attr", None)) == "patch"


def cli_convention(src: str) -> str:
    "The error convention of a console entry point, by its source text."
    if "refusals(" in src: return "refusals"
    if "_cli_errors" in src: return "_cli_errors"
    if "try:" in src and re.search(r"return [12]\b", src): return "try/except returning a code"
    return "traceback"


def static_figures(root: Path) -> dict:
    "Figures 3-7: module sizes, copies, private imports, CLI conventions, Trainer shape."
    mods, out = modules(root / "dflash_nb"), {}
    sizes = {m: (len(f.read_text().splitlines()), exports(t)) for m, (f, t) in mods.items()}
    out["modules"] = {m: f"{n} / {e if e is not None else '-'}" for m, (n, e) in sizes.items()}
    big = max(sizes, key=lambda m: sizes[m][0])
    out["library modules (lines in all)"] = f"{len(sizes)} ({sum(n for n, _ in sizes.values())})"
    out["largest module (lines / exports)"] = f"{big}: {out['modules'][big]}"
    out["`__all__` exports in all"] = str(sum(e or 0 for _, e in sizes.values()))
    defs = [(m, q) for m, (_, t) in mods.items() for q in definitions(t)]
    for row, (pat, flags) in RULES.items():
        match = [(m, q) for m, q in defs if re.search(pat, q if "layer" in row else q.split(".")[-1], flags)]
        tops = {q for _, q in match if "." not in q}     # a matched class's members (even patched) not counted again
        hits = [f"{m}.{q}" for m, q in match if "." not in q or q.split(".")[0] not in tops]
        out[f"copies, members of a matched class not counted: {row}"] = f"{len(hits)}: " + ", ".join(hits)
    priv = []
    for m, (_, t) in mods.items():
        for n in ast.walk(t):
            inside = n.level > 0 if isinstance(n, ast.ImportFrom) else False
            if isinstance(n, ast.ImportFrom) and (inside or (n.module or "").split(".")[0] == "dflash_nb"):
                names = [a.name for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
                if names: priv.append(f"{m}←{(n.module or '').removeprefix('dflash_nb.') or '.'}:{','.join(names)}")
    out["cross-module private imports (`from .x import _y`)"] = f"{len(priv)}: " + ", ".join(priv)
    out["CLI error conventions (distinct: entry → class)"] = cli_figure(root, mods)
    out.update(trainer_figures(mods))
    return out


def cli_figure(root: Path, mods: dict) -> str:
    "Number of distinct error conventions among pyproject's console scripts, and each script's class."
    scripts = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("scripts", {})
    classes = {}
    for name, target in scripts.items():
        mod, fn = target.split(":")
        f, t = mods.get(mod.split(".")[-1], (None, None))
        node = next((n for n in t.body if getattr(n, "name", None) == fn), None) if t else None
        if node is None: classes[name] = "not found"; continue
        text = f.read_text()
        src = "\n".join(ast.get_source_segment(text, d) for d in getattr(node, "decorator_list", []))
        classes[name] = cli_convention(src + "\n" + ast.get_source_segment(text, node))
    distinct = sorted(set(classes.values()))
    return f"{len(distinct)} ({'; '.join(distinct)}): " + ", ".join(f"{k}→{v}" for k, v in classes.items())


def trainer_figures(mods: dict) -> dict:
    "Function definitions in train*.py, `@patch`-ed `Trainer` methods (any module), methods in `class Trainer`."
    train = {m: t for m, (_, t) in mods.items() if m.startswith("train")}
    n_fn = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for t in train.values() for n in ast.walk(t))
    patched, body = [], None
    for m, (_, t) in mods.items():
        for n in ast.walk(t):
            if isinstance(n, ast.ClassDef) and n.name == "Trainer":
                body = sum(isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)) for c in n.body)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(is_patch, n.decorator_list)):
                a = (n.args.posonlyargs + n.args.args)[:1]
                if a and isinstance(a[0].annotation, ast.Name) and a[0].annotation.id == "Trainer": patched.append(m)
    where = ", ".join(f"{m} {patched.count(m)}" for m in sorted(set(patched)))
    return {f"function definitions in {'+'.join(sorted(train))}.py": str(n_fn),
            "`@patch`-ed Trainer methods": f"{len(patched)}" + (f" ({where})" if where else ""),
            "methods in `class Trainer` body": "n/a" if body is None else str(body)}


# ---- dynamic figures (run inside the root's subprocess) -------------------------------------------------------------
def traced(fn, lib: str, within: str | None = None) -> str:
    "Run `fn()` under a profiler: 'definitions / depth / modules' of dflash_nb calls (only under a `within` frame if set)."
    defs, files, depth = set(), set(), [0]
    def prof(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(lib): return
        n, f, under = 0, frame, within is None
        while f is not None:
            if f.f_code.co_filename.startswith(lib):
                n += 1
                if f.f_code.co_name == within: under = True; break
            f = f.f_back
        c = frame.f_code
        if not under: return
        depth[0] = max(depth[0], n)
        files.add(c.co_filename)
        if c.co_name not in ANON: defs.add((c.co_filename, c.co_name, c.co_firstlineno))
    sys.setprofile(prof)
    try: fn()
    finally: sys.setprofile(None)
    return f"{len(defs)} / {depth[0]} / {len(files)}"


def train_figure(lib: str) -> str:
    "Trace the second `one_step()` of a Trainer on the tiny fixture."
    import torch, dflash_nb.train as tr
    from dflash_nb.testing import tiny_hybrid, tiny_drafter
    from dflash_nb.extract import extract_to_cache
    from dflash_nb.cache import HiddenStateCache, CacheLayout
    try: from dflash_nb.config import TrainConfig
    except ImportError: TrainConfig = tr.TrainConfig
    tmp, target = Path(tempfile.mkdtemp()), tiny_hybrid()
    g = torch.Generator().manual_seed(0)
    samples = [{"input_ids": torch.randint(0, 95, (n,), generator=g), "loss_mask": (torch.arange(n) >= 3).long()}
               for n in (12, 20, 9, 16, 25, 14)]
    layout = CacheLayout([1, 2, 3, 4, 5], dtype=torch.float32, samples_per_shard=4)
    cache = HiddenStateCache(extract_to_cache(target, samples, tmp / "cache", layout))
    cfg = TrainConfig(drafter=tiny_drafter(), num_anchors=8, loss_chunk=3, batch_size=2, lr=3e-3, warmup=0.1,
                      log_every=1, progress=False, device="cpu", noise_std=0.1, out_dir=str(tmp / "run"), steps=4)
    T = tr.Trainer
    trainer = T.from_config(cfg, target, cache) if hasattr(T, "from_config") else T(cfg, target, cache)
    trainer.one_step()
    return traced(trainer.one_step, lib)


def decode_figures(lib: str, new_tokens: int = 24) -> dict:
    "Trace a chain speculative decode of a short prompt: the whole call, and only what runs under `chain_round`."
    import dflash_nb.decode as dec
    from dflash_nb.toy import load_toy_target, repo_data_dir
    from dflash_nb.model import DFlashDraftModel
    path = repo_data_dir() / "toy-drafters" / "fused"
    if not path.is_dir(): raise FileNotFoundError(path)
    toy = load_toy_target()
    drafter = DFlashDraftModel.from_pretrained(path, target_model=toy.model)
    gen = next(getattr(dec, n) for n in ("speculative_generate", "dflash_generate", "generate") if hasattr(dec, n))
    prompt, out = "def read_config(path):\n", {}
    run = lambda: out.setdefault("r", gen(toy, drafter, prompt, max_new_tokens=new_tokens))
    gen(toy, drafter, prompt, max_new_tokens=new_tokens)                      # warm-up: one-time caches, lazy imports
    whole = traced(run, lib)
    r = out["r"]                                                              # a dict in trees before typed outputs
    rounds = len(r.get("acceptance", []) if isinstance(r, dict) else r.acceptance) or "?"
    fig = {f"one decode, {new_tokens} tokens ({rounds} rounds), prefill + rounds: defs / depth / modules": whole}
    name = "chain_round" if hasattr(dec, "chain_round") else None
    fig["decode rounds only (under `chain_round`): defs / depth / modules"] = (
        traced(lambda: gen(toy, drafter, prompt, max_new_tokens=new_tokens), lib, name) if name else "n/a")
    return fig


def measure(root: Path) -> dict:
    "Every figure of the tree at `root` (run with that tree importable); a failing figure becomes 'n/a (error)'."
    torch_threads()
    import dflash_nb
    lib = str(Path(dflash_nb.__file__).resolve().parent) + os.sep
    if not lib.startswith(str(root.resolve())): raise RuntimeError(f"imported {lib}, not the tree at {root}")
    out = {}
    for name, fn in [("one training step (2nd `one_step`): defs / depth / modules", lambda: train_figure(lib)),
                     ("decode", lambda: decode_figures(lib)), ("static", lambda: static_figures(root))]:
        try:
            r = fn()
            out.update(r if isinstance(r, dict) else {name: r})
        except Exception as e:
            out[name] = f"n/a ({type(e).__name__}: {str(e)[:80]})"
    return out


def torch_threads():
    "One intra-op thread, for comparable runs."
    import torch
    torch.set_num_threads(1)


# ---- driver -----------------------------------------------------------------------------------------------------------
def label(root: Path) -> str:
    "Column header: short HEAD and the folder name, `*` when the library has uncommitted changes."
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()
    dirty = "*" if git("status", "--porcelain", "--", "dflash_nb", "pyproject.toml") else ""
    return f"{git('rev-parse', '--short', 'HEAD') or '?'}{dirty} {root.resolve().name}"


def run_root(root: Path) -> dict:
    "Measure `root` in a subprocess that imports its own `dflash_nb`."
    env = dict(os.environ, PYTHONPATH=str(root.resolve()), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(root.resolve())],
                       cwd=root, env=env, capture_output=True, text=True)
    try: return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"n/a (measurement failed, rc {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:200]})"}


def table(rows: list[str], cols: list[str], cells: list[dict], head: str = "figure") -> str:
    "A markdown table: one row per key, one column per root, 'n/a' where a root has no value."
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")
    lines = [f"| {head} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {esc(r)} | " + " | ".join(esc(c.get(r, "n/a")) for c in cells) + " |" for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", type=Path, help="a checkout of the repo (repeatable; default: .)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure: print(json.dumps(measure(a.measure))); return
    roots = a.root or [Path(".")]
    results = [run_root(r) for r in roots]
    cols = [label(r) for r in roots]
    figs = [{k: v for k, v in r.items() if k != "modules"} for r in results]
    rows = list(dict.fromkeys(k for f in figs for k in f))
    print(table(rows, cols, figs), "\n")
    mods = [r.get("modules", {}) for r in results]
    print(table(sorted(set().union(*mods)), cols, mods, head="module: lines / exports"))


if __name__ == "__main__": main()
