"""Code-shape figures of the exported library: long lines, exported-cell size, the largest and widest functions.

Run from the repository root: `python bench/code_shape.py` (add `--wide N` to list every function with more than N parameters)."""
import argparse, ast, io, json, statistics, tokenize
from pathlib import Path

def exported_cells(nbs: Path) -> list[str]:
    "Source of every `#| export` cell of the notebooks under `nbs`."
    out = []
    for nb in sorted(nbs.glob("*.ipynb")):
        for c in json.loads(nb.read_text())["cells"]:
            src = "".join(c["source"])
            if c["cell_type"] == "code" and any(l.strip() in ("#| export", "#|export") for l in src.splitlines()[:3]): out.append(src)
    return out

def functions(lib: Path) -> list[tuple]:
    "(module, name, lines, parameters) of every function and method in the library (dataclass constructors are not functions here)."
    out = []
    for f in sorted(lib.glob("*.py")):
        if f.name.startswith("_"): continue
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
                out.append((f.stem, n.name, n.end_lineno - n.lineno + 1, len(params)))
    return out

def statement_counts(lib: Path) -> tuple[int, int]:
    "(semicolon-separated statements, one-line compound statements such as `if x: y`) in the library."
    semis = compound = 0
    for f in lib.glob("*.py"):
        if f.name.startswith("_"): continue
        src = f.read_text()
        semis += sum(t.type == tokenize.OP and t.string == ";" for t in tokenize.generate_tokens(io.StringIO(src).readline))
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, (ast.If, ast.For, ast.While, ast.With, ast.Try)) and n.body and n.body[0].lineno == n.lineno:
                compound += 1
    return semis, compound

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--wide", type=int, default=0, help="also list functions with more than this many parameters")
    a = ap.parse_args()
    lib, cells = Path("dflash_nb"), exported_cells(Path("nbs"))
    lines = [l for f in lib.glob("*.py") if not f.name.startswith("_") for l in f.read_text().splitlines()]
    fns = functions(lib)
    big, wide = max(fns, key=lambda r: r[2]), max(fns, key=lambda r: r[3])
    print(f"{'figure':<44} value")
    print(f"{'library lines':<44} {len(lines)}")
    long = [l for l in lines if len(l) > 120]
    generated = sum(l.startswith(("__all__", '"""')) for l in long)
    print(f"{'lines over 120 characters':<44} {len(long)} ({generated} nbdev-generated: __all__, module docstring)")
    print(f"{'exported cells':<44} {len(cells)}")
    print(f"{'median exported-cell size (characters)':<44} {statistics.median(map(len, cells)):.0f}")
    print(f"{'largest function (lines)':<44} {big[0]}.{big[1]}: {big[2]}")
    print(f"{'widest function (parameters)':<44} {wide[0]}.{wide[1]}: {wide[3]}")
    print(f"{'functions with more than 6 parameters':<44} {sum(r[3] > 6 for r in fns)}")
    semis, compound = statement_counts(lib)
    print(f"{'semicolon-separated statements':<44} {semis}")
    print(f"{'one-line compound statements (if x: y)':<44} {compound}")
    for m, n, _, p in sorted((r for r in fns if a.wide and r[3] > a.wide), key=lambda r: -r[3]): print(f"  {m}.{n}: {p}")

if __name__ == "__main__": main()
