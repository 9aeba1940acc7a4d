"""Notebooks that must also run top to bottom in a real Jupyter kernel (nbclient + ipykernel), as a user runs them,
not only under nbdev-test's in-process shell. Slow: run with `pytest -m slow tests`."""
from pathlib import Path
import nbformat, pytest
from nbclient import NotebookClient

NBS = Path(__file__).resolve().parents[1] / "nbs"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["09_explore_taps.ipynb"])
def test_notebook_runs_in_a_kernel(name, tmp_path):
    nb = nbformat.read(NBS / name, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NBS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors[0]
