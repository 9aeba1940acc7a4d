"""Execute notebooks in place so a reader on the web sees their results, then clean them with `nbdev-clean`.

Run from anywhere: `python tools/render_notebooks.py nbs/08_probes.ipynb nbs/09_explore_taps.ipynb ...`

- Each notebook runs in a fresh Jupyter kernel (nbclient) with its folder as the working directory and this checkout
  first on `PYTHONPATH`, cell by cell, skipping the cells `nbdev-test` skips (`#| eval: false` and the `tst_flags`,
  e.g. `#| slow`, `#| cuda`); a skipped cell keeps no output.
- Widget state is stored (`store_widget_state=True`), so an ipywidgets output (the tap explorer) renders for a reader
  instead of `VBox(children=...)`; only the state of widgets still shown in an output is kept.
- Outputs stay small: figures at 75 dpi (a matplotlibrc for the kernel), progress bars removed (text bars on stderr
  and tqdm's notebook widgets), and a warning for any output that shows a temporary path.
- A notebook that fails is left as it was; the others are still rendered. Exit status 1 if any failed.
- Then `nbdev-clean` (keeps outputs and the widget state, drops execution counts and other noise).
"""
import argparse, re, os, subprocess, sys, tempfile
from pathlib import Path
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
MATPLOTLIBRC = "figure.dpi: 75\nsavefig.dpi: figure\n"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TEXT_BAR = re.compile(r"\d+%\|.*\|")                     # tqdm's text bar: ' 40%|████      | 2/5 [00:01<...]'


def skipped_cells(path: Path) -> set:
    "Ids of the cells `nbdev-test` leaves out of `path` (directives, `tst_flags`, front matter)."
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    from nbdev.test import _skip_cell
    nb = NBProcessor(path, rm_directives=False, process=True).nb
    skip = _skip_cell(nb, get_config().tst_flags.split())
    return {c.id for c in nb.cells if c.cell_type == "code" and skip(c)}


def kernel_env(rc_dir: Path) -> dict:
    "Environment for the kernel: this checkout imported first, small figures."
    (rc_dir / "matplotlibrc").write_text(MATPLOTLIBRC)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MATPLOTLIBRC": str(rc_dir)}


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


def render(path: Path, timeout: int) -> bool:
    "Execute, tidy and write one notebook; False (notebook untouched) when a cell fails."
    nb = nbformat.read(path, as_version=4)
    try:
        execute(nb, path, skipped_cells(path), timeout)
    except CellExecutionError as e:
        print(f"{path}: FAILED, left as it was\n{e}", file=sys.stderr)
        return False
    bars, kept = drop_progress(nb), prune_widgets(nb)
    for w in temp_path_warnings(nb, path):
        print(f"warning: {w}", file=sys.stderr)
    nbformat.write(nb, path)
    subprocess.run(["nbdev-clean", "--fname", str(path)], check=True, cwd=ROOT)
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    print(f"{path}: {path.stat().st_size / 1024:.0f} KB, {figures} figures, {kept} widget models, "
          f"{bars} progress outputs dropped")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path, help="notebooks to execute in place")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900, as nbdev's cell_timeout)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as rc:
        os.environ.update(kernel_env(Path(rc)))
        ok = [render(p.resolve(), a.timeout) for p in a.notebooks]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
