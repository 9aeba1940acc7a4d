"""The package's layers (`[tool.importlinter]` in pyproject.toml) hold: every module is placed, the contract is kept,
each module imports with only the layers below it loaded, and imports inside functions are only for optional heavy
dependencies, each with a comment saying why."""
import ast, shutil, subprocess, sys, tomllib
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dflash_nb"


def contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]


def layers() -> list[list[str]]:
    "The contract's layers, top to bottom, each a list of module names."
    return [[m.strip() for m in layer.replace(":", "|").split("|")] for layer in contract()["layers"]]


def modules() -> set[str]:
    return {p.stem for p in PKG.glob("*.py")} - {"__init__", "_modidx"}


def test_every_module_placed_once():
    placed = [m for layer in layers() for m in layer]
    assert len(placed) == len(set(placed)), f"placed twice: {sorted(m for m in placed if placed.count(m) > 1)}"
    assert set(placed) == modules(), (f"not in the contract: {sorted(modules() - set(placed))}; "
                                      f"listed but absent: {sorted(set(placed) - modules())}")


def test_contract_kept():
    exe = shutil.which("lint-imports")
    if exe is None: pytest.fail("lint-imports is missing: pip install -e '.[dev]' (import-linter)")
    r = subprocess.run([exe, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_imports_bottom_up():
    "Each module imports when only the layers below it (and its own layer's earlier modules) are loaded."
    order = [f"dflash_nb.{m}" for layer in reversed(layers()) for m in layer]
    code = ("import importlib, sys\n"
            f"for m in {order!r}:\n"
            "    importlib.import_module(m)\n"
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def function_imports(path: Path):
    "(line number, line) of each import statement inside a function of `path`."
    lines = path.read_text().splitlines()
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, (ast.Import, ast.ImportFrom)): yield n.lineno, lines[n.lineno - 1]


def test_imports_inside_functions_are_optional_and_commented():
    bad = []
    for p in sorted(PKG.glob("*.py")):
        for no, line in function_imports(p):
            own = line.strip().startswith(("from .", "from dflash_nb", "import dflash_nb"))
            if own or "#" not in line: bad.append(f"{p.name}:{no}: {line.strip()}")
    assert not bad, ("imports inside functions must be optional heavy dependencies with a comment saying why "
                     "(the package's own modules: at the top):\n" + "\n".join(bad))
