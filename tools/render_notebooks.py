"""Execute notebooks in place so a reader on the web sees their results, then clean them with `nbdev-clean`.

Run from anywhere: `python tools/render_notebooks.py` renders every notebook in `SHOWN` (the teaching notebooks, whose
tables, figures and printed numbers a reader needs); `python tools/render_notebooks.py nbs/08_probes.ipynb ...` renders
those given. `--check` renders into memory instead and fails (exit 1, a diff per cell) when a stored text output is
not what the current code prints, when a cell fails, or when a notebook in `SHOWN` stores none: CI runs it in place
of `nbdev-test` for these notebooks, so each runs once (`--list` prints them). A cell whose output changes from run to
run (wall-clock seconds, a memory reading) says so in a comment, `# output varies: <why>`, and is not compared;
figures are not compared (their bytes depend on the matplotlib build), only that they are there. A printed number may
differ by one unit in its last digit (a float computed on another CPU, AVX2 or AVX-512, rounds to the neighbouring
value); whole numbers (counts) and every other character must be the same.

- Each notebook runs in a fresh Jupyter kernel (nbclient) with its folder as the working directory and this checkout
  first on `PYTHONPATH`, cell by cell, skipping the cells `nbdev-test` skips (`#| eval: false` and the `tst_flags`,
  e.g. `#| slow`, `#| cuda`); a skipped cell keeps no output. `--flags vllm` also runs the cells of those flags and
  stores their outputs (`nbs/14a_engine` serves a drafter in vLLM's own environment that way); `--check` then leaves
  such cells as stored.
- Widget state is stored (`store_widget_state=True`), so an ipywidgets output (the tap explorer) renders for a reader
  instead of `VBox(children=...)`; only the state of widgets still shown in an output is kept.
- Outputs stay small: figures at 75 dpi (a matplotlibrc for the kernel), progress bars removed (text bars on stderr
  and tqdm's notebook widgets), and a warning for any output that shows a temporary path.
- A notebook that fails is left as it was; the others are still rendered. Exit status 1 if any failed.
- Then `nbdev-clean` (keeps outputs and the widget state, drops execution counts and other noise).
"""
import argparse, difflib, re, os, subprocess, sys, tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
MATPLOTLIBRC = "figure.dpi: 75\nsavefig.dpi: figure\n"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TEXT_BAR = re.compile(r"\d+%\|.*\|")                     # tqdm's text bar: ' 40%|████      | 2/5 [00:01<...]'
VARIES = "# output varies:"                              # a cell whose output is not the same from run to run
NUMBER = re.compile(r"(-?\d+(?:\.(\d+))?(?:[eE]([-+]?\d+))?)")
SHOWN = ["01_model", "02a_toy_target", "04a_train", "05a_plan", "05e_stages", "06_evaluate", "07_decode", "08_probes",
         "09_explore_taps", "10_demo", "12_recipe_study", "13_diagnose", "14a_engine"]


def skipped_cells(path: Path, run_flags=()) -> set:
    "Ids of the cells `nbdev-test --flags run_flags` leaves out of `path` (directives, `tst_flags`, front matter)."
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    from nbdev.test import _skip_cell
    nb = NBProcessor(path, rm_directives=False, process=True).nb
    skip = _skip_cell(nb, get_config().tst_flags.split(), list(run_flags))
    return {c.id for c in nb.cells if c.cell_type == "code" and skip(c)}


def kernel_env(rc_dir: Path) -> dict:
    "Environment for the kernel: this checkout imported first, small figures, one thread (the same sums on any CPU)."
    (rc_dir / "matplotlibrc").write_text(MATPLOTLIBRC)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MATPLOTLIBRC": str(rc_dir), "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline"}    # figures inline, whatever the shell sets


def execute(nb, path: Path, skip: set, timeout: int):
    "Run `nb`'s cells in a fresh kernel (cwd: the notebook's folder), leaving out `skip`; widget state stored."
    client = NotebookClient(nb, timeout=timeout, store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if cell.get("id") in skip:
                cell.outputs = []
                continue
            client.execute_cell(cell, i)
        client.set_widgets_metadata()


def _state(nb) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def _refs(value) -> list:
    "Model ids a widget's state refers to ('IPY_MODEL_<id>' strings, nested anywhere)."
    if isinstance(value, str):
        return [value[len("IPY_MODEL_"):]] if value.startswith("IPY_MODEL_") else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [r for v in items for r in _refs(v)]


def _is_progress_widget(model_id: str, state: dict) -> bool:
    "A tqdm notebook bar: an HBox holding a FloatProgress/IntProgress."
    kids = [state.get(k, {}).get("model_name") for k in _refs(state.get(model_id, {}).get("state", {}))]
    return any(k in ("FloatProgressModel", "IntProgressModel") for k in kids)


def drop_progress(nb) -> int:
    "Remove progress bars from the outputs (text bars on stderr, tqdm notebook widgets); returns how many."
    state, dropped = _state(nb), 0
    for cell in nb.cells:
        keep = []
        for o in cell.get("outputs", []):
            if o.output_type == "stream" and o.name == "stderr":
                lines = [ln for ln in re.split(r"[\r\n]", o.text) if ln.strip() and not TEXT_BAR.search(ln)]
                dropped += not lines
                if lines:
                    o.text = "\n".join(lines) + "\n"
                    keep.append(o)
                continue
            view = o.get("data", {}).get(WIDGET_VIEW)
            if view and _is_progress_widget(view["model_id"], state):
                dropped += 1
                continue
            keep.append(o)
        if "outputs" in cell:
            cell.outputs = keep
    return dropped


def _shown_models(nb) -> set:
    "Ids of the widget models displayed in the outputs."
    return {o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells for o in c.get("outputs", [])
            if WIDGET_VIEW in o.get("data", {})}


def prune_widgets(nb) -> int:
    "Keep only the state of widgets an output still shows (and the models they refer to); returns models kept."
    state = _state(nb)
    todo, seen = list(_shown_models(nb)), set()
    while todo:
        m = todo.pop()
        if m in seen or m not in state:
            continue
        seen.add(m)
        todo += _refs(state[m].get("state", {}))
    if not seen:
        nb.metadata.pop("widgets", None)
        return 0
    nb.metadata["widgets"][WIDGET_STATE]["state"] = {k: v for k, v in state.items() if k in seen}
    return len(seen)


def temp_path_warnings(nb, path: Path) -> list:
    "Outputs that show a temporary path (a reader cannot use it; it changes every run)."
    tmp = re.compile(re.escape(tempfile.gettempdir()) + r"/\w")
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            text = o.get("text", "") + "".join(v for k, v in o.get("data", {}).items() if k.startswith("text/"))
            if tmp.search(text):
                out.append(f"{path.name}: cell {c.get('id')} shows a temporary path")
    return out


def rendered(path: Path, timeout: int, run_flags=()):
    "`path` executed and tidied (figures small, no progress bars, only shown widgets kept); None when a cell fails."
    nb = nbformat.read(path, as_version=4)
    try:
        execute(nb, path, skipped_cells(path, run_flags), timeout)
    except CellExecutionError as e:
        print(f"{path}: FAILED\n{e}", file=sys.stderr)
        return None
    drop_progress(nb)
    prune_widgets(nb)
    return nb


def render(path: Path, timeout: int, run_flags=()) -> bool:
    "Execute, tidy and write one notebook (also its cells flagged `run_flags`); False (untouched) when a cell fails."
    if (nb := rendered(path, timeout, run_flags)) is None: return False
    for w in temp_path_warnings(nb, path):
        print(f"warning: {w}", file=sys.stderr)
    nbformat.write(nb, path)
    subprocess.run(["nbdev-clean", "--fname", str(path)], check=True, cwd=ROOT)
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    print(f"{path}: {path.stat().st_size / 1024:.0f} KB, {figures} figures")
    return True


def shown_text(cell) -> str:
    "What a reader sees of `cell`'s outputs, as text: stdout and text/markdown/plain results; a figure as `<figure>`."
    text = ""
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            if o.name == "stdout": text += o.text              # one stream may arrive in any number of pieces
            continue                                           # stderr: warnings, naming this machine's paths
        elif o.output_type == "error": text += f"\n{o.ename}: {o.evalue}\n"
        else:
            data = o.get("data", {})
            if {"image/png", "image/svg+xml"} & set(data): text += "\n<figure>\n"
            else: text += "\n" + next((data[k] for k in ("text/markdown", "text/plain") if k in data), "") + "\n"
    return "\n".join(ln.rstrip() for ln in text.strip().splitlines() if ln.strip())


def same_print(stored: str, current: str) -> bool:
    "Whether two printed texts are equal but for decimal numbers one unit apart in their last printed digit."
    a, b = NUMBER.split(stored), NUMBER.split(current)
    if len(a) != len(b): return False
    for i in range(0, len(a) - 1, 4):     # split() yields: text, number, its decimals, its exponent, text, ...
        if a[i] != b[i]: return False
        x, decimals, exp = a[i + 1], a[i + 2], a[i + 3]
        unit = 10.0 ** (int(exp or 0) - len(decimals or ""))
        if x == b[i + 1]: continue
        if not (decimals or exp) or abs(float(x) - float(b[i + 1])) > unit * (1 + 1e-9): return False   # ints: exact
    return a[-1] == b[-1]


def stale_outputs(path: Path, timeout: int) -> list[str]:
    "Cells of `path` whose stored outputs differ from what the current code prints (a diff each); [] when all agree."
    stored = nbformat.read(path, as_version=4)
    if path.stem in SHOWN and not any(c.get("outputs") for c in stored.cells):
        return [f"{path.name}: stores no outputs; run `python tools/render_notebooks.py {path.relative_to(ROOT)}`"]
    if (fresh := rendered(path, timeout)) is None: return [f"{path.name}: a cell failed"]
    out = []
    skipped = skipped_cells(path)
    for old, new in zip(stored.cells, fresh.cells):
        if old.cell_type != "code" or VARIES in old.source or old.get("id") in skipped: continue   # flagged: as stored
        a, b = shown_text(old), shown_text(new)
        if not same_print(a, b):
            diff = difflib.unified_diff(a.splitlines(), b.splitlines(), "stored", "current code", lineterm="", n=1)
            out.append(f"{path.name} cell {old.get('id')}:\n" + "\n".join(list(diff)[:40]))
    return out


def check(paths: list[Path], timeout: int, jobs: int) -> int:
    "Exit status of `--check`: 0 when every notebook runs and its stored outputs are current, else 1 (problems printed)."
    with ProcessPoolExecutor(jobs) as pool:
        found = list(pool.map(stale_outputs, paths, [timeout] * len(paths)))
    for s in (s for f in found for s in f): print(s, file=sys.stderr)
    bad = sum(bool(f) for f in found)
    if bad: print("run `python tools/render_notebooks.py` on the stale ones and commit", file=sys.stderr)
    print(f"{len(paths) - bad} current, {bad} stale or failed (of {len(paths)} notebooks: each run, its outputs compared)")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="notebooks to execute (default: the SHOWN ones)")
    ap.add_argument("--list", action="store_true", help="print the notebooks it would run (default: SHOWN) and stop")
    ap.add_argument("--check", action="store_true", help="compare with the stored outputs instead of writing them")
    ap.add_argument("--jobs", type=int, default=2, help="notebooks run at once by --check (default 2)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900, as nbdev's cell_timeout)")
    ap.add_argument("--flags", nargs="*", default=[], help="also run the cells of these tst_flags (e.g. vllm), as "
                    "nbdev-test --flags does; their outputs are stored, and --check leaves them as stored")
    a = ap.parse_args(argv)
    paths = [p.resolve() for p in a.notebooks] or [ROOT / "nbs" / f"{n}.ipynb" for n in SHOWN]
    if a.list:
        print("\n".join(str(p) for p in paths))
        return 0
    with tempfile.TemporaryDirectory() as rc:
        os.environ.update(kernel_env(Path(rc)))
        if a.check: return check(paths, a.timeout, a.jobs)
        ok = [render(p, a.timeout, a.flags) for p in paths]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
