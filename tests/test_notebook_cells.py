"""Static checks of the notebooks' cells that keep nbdev's tools working: `nbdev-docs` (and `tools/build_docs.py`)
executes every cell holding an import, so test cells keep their imports in import-only cells."""
import ast
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parents[1]
def cells_nbdev_docs_would_break(path) -> list[str]:
    """Cells of notebook `path` that nbdev's docs processing executes (it runs every cell holding an import) although
    they also hold other code: test code that needs names only the test run makes. Exported and `eval: false` cells
    are meant to run or skipped, so they are not listed."""
    out = []
    for c in nbformat.read(path, as_version=4).cells:
        lines = c.source.splitlines()
        if c.cell_type != "code" or any(ln.startswith(("#| export", "#| eval: false")) for ln in lines): continue
        tree = ast.parse("\n".join("#" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines))
        imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        if imports and len(imports) != len(tree.body): out.append(f"{path.name} cell {c.id}: {lines[-1][:60]}")
    return out


def test_notebooks_keep_imports_in_import_only_cells():
    "`nbdev-docs` (and tools/build_docs.py) can process every notebook: no test cell mixes imports with other code."
    bad = [m for p in sorted((ROOT / "nbs").glob("*.ipynb")) for m in cells_nbdev_docs_would_break(p)]
    assert not bad, "move these cells' imports into an import-only cell just above them:\n" + "\n".join(bad)
