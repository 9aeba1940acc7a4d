"""The notebooks a reader learns from store what their cells show (tables, figures, printed figures), and only those:
`tools/render_notebooks.py` lists them (`SHOWN`) and regenerates them; `.ci/run` runs its `--check`, which compares
every stored text output with what the current code prints. These checks are the static half: fast, no execution."""
import sys, tempfile
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from render_notebooks import SHOWN, same_print, shown_text   # noqa: E402


def outputs(name: str) -> list:
    "The stored outputs of notebook `name`'s code cells, with the cell each belongs to."
    nb = nbformat.read(ROOT / "nbs" / f"{name}.ipynb", as_version=4)
    return [(c, o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_shown_notebooks_store_outputs():
    "Every teaching notebook stores outputs; a notebook outside `SHOWN` stores none (nothing goes stale unchecked)."
    names = sorted(p.stem for p in (ROOT / "nbs").glob("*.ipynb"))
    assert set(SHOWN) <= set(names), set(SHOWN) - set(names)
    assert [n for n in SHOWN if not outputs(n)] == [], "run `python tools/render_notebooks.py` and commit"
    assert [n for n in names if n not in SHOWN and outputs(n)] == [], "add them to SHOWN or clear their outputs"


def test_stored_outputs_are_readable():
    "No stored output is an error, and none shows a temporary path (a reader cannot use it; it changes every run)."
    tmp = tempfile.gettempdir() + "/"
    bad = [f"{n} cell {c.id}" for n in SHOWN for c, o in outputs(n)
           if o.output_type == "error" or tmp in shown_text({"outputs": [o]})]
    assert bad == [], bad


def test_same_print_allows_only_last_digit_roundoff():
    "The check's comparison: decimals one unit apart in their last printed digit agree; any other change does not."
    assert same_print("τ 2.238 over 5 rows", "τ 2.239 over 5 rows")
    assert same_print("loss 1.5e-03", "loss 1.6e-03")
    assert not same_print("τ 2.238", "τ 2.240")
    assert not same_print("τ 2.238 over 5 rows", "τ 2.238 over 6 rows")     # counts are exact
    assert not same_print("| fused | 2.2 |", "| split | 2.2 |")
