"""Write data/prompts/train-long.jsonl and eval-long.jsonl: prompts for the toy target's long recipe study.

Each prompt is a function's (or a method's) signature and the first line of its docstring, taken from the Python standard library
(the corpus the toy target was trained on), in the shape of the hand-written prompts. The split is by module: a
module goes to the held-out set when the sha256 of its dotted name ends in a byte below 32 (1/8 of the modules), to
the training set otherwise, so no module feeds both. Function names are disjoint too: a name in the held-out set (or
in data/prompts/eval.jsonl) is dropped from the training set. The training set starts with data/prompts/train.jsonl,
the held-out set with data/prompts/eval.jsonl.

The shipped files were written once with CPython 3.11.7's library (another version gives other prompts):
    python data/prompts/stdlib_prompts.py [--stdlib DIR]
"""
import argparse, ast, hashlib, json, sysconfig
from pathlib import Path

HERE = Path(__file__).parent
N_TRAIN, N_EVAL = 3000, 72


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def held_out(module: str) -> bool:
    return hashlib.sha256(module.encode()).digest()[-1] < 32


def prompt_of(fn: ast.FunctionDef) -> str | None:
    doc = ast.get_docstring(fn)
    if not doc or fn.name.startswith("_") or fn.args.vararg or fn.args.kwarg: return None
    first = doc.strip().splitlines()[0].strip()
    if not (10 <= len(first) <= 100) or '"""' in first or "\\" in first: return None
    args = ", ".join(a.arg for a in fn.args.args)
    if len(args) > 60: return None
    return f'def {fn.name}({args}):\n    """{first}"""\n'


def functions(root: Path):
    "(module, name, prompt) for each public function or method with a one-line-able docstring, in path order."
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if {"test", "tests", "idlelib", "lib2to3", "site-packages", "tkinter", "turtledemo"} & set(rel): continue
        try: tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError): continue
        mod = module_name(path, root)
        methods = [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body]
        for node in tree.body + methods:
            if isinstance(node, ast.FunctionDef) and (p := prompt_of(node)): yield mod, node.name, p


def read(path: Path) -> list[dict]: return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="the standard library to read")
    args = ap.parse_args(argv)
    train, evals = read(HERE / "train.jsonl"), read(HERE / "eval.jsonl")
    seen = {r["prompt"] for r in train + evals}
    eval_names = {r["id"].split("-", 1)[1] for r in evals}
    found = [f for f in functions(Path(args.stdlib)) if f[2] not in seen]
    held = [f for f in found if held_out(f[0])]
    new_eval, names = [], set(eval_names)
    for mod, name, p in held:
        if name in names or len(new_eval) == N_EVAL: continue
        names.add(name); new_eval.append({"id": f"eval-{mod}.{name}", "prompt": p})
    new_train, prompts = [], set()
    for mod, name, p in found:
        if held_out(mod) or name in names or p in prompts or len(new_train) == N_TRAIN: continue
        prompts.add(p); new_train.append({"id": f"train-{mod}.{name}-{len(new_train)}", "prompt": p})
    for name, rows in (("train-long.jsonl", train + new_train), ("eval-long.jsonl", evals + new_eval)):
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{name}: {len(rows)} prompts")


if __name__ == "__main__": main()
