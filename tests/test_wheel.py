"""The exported library as users get it: a wheel built from this checkout, installed into a fresh venv (no jupyter,
no nbdev), imports every module and runs a drafter forward. Slow: run with `pytest -m slow tests`."""
import subprocess, sys, venv
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
# every module nbdev exports (read from the checkout, so a new or renamed module is covered)
MODULES = sorted(p.stem for p in (ROOT / "dflash_nb").glob("*.py") if not p.stem.startswith("_"))


def run(*cmd, **kw):
    "Run `cmd` to its end (no time limit: pip's speed is the network's); a failure shows its output."
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd} exited with {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
def test_wheel_installs_and_imports_without_jupyter(tmp_path):
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", ROOT)
    wheel = next((tmp_path / "dist").glob("dflash_nb-*.whl"))
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    run(py, "-m", "pip", "install", "-q", "torch==2.13.0")            # the CPU wheel, before anything can pull a CUDA build
    run(py, "-m", "pip", "install", "-q", wheel)
    names = {l.split("==")[0].replace("_", "-") for l in run(py, "-m", "pip", "list", "--format=freeze").stdout.lower().split()}
    assert not names & {"jupyterlab", "notebook", "jupyter", "nbdev", "triton"}, names
    code = ("import importlib, torch; from dflash_nb.config import DFlashConfig; from dflash_nb.model import DFlashDraftModel\n"
            f"[importlib.import_module('dflash_nb.' + m) for m in {MODULES!r}]\n"
            "c = DFlashConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,\n"
            "                 intermediate_size=64, vocab_size=97, block_size=4, num_target_layers=12, mask_token_id=96)\n"
            "m = DFlashDraftModel(c); print(m(torch.zeros(1, 9, dtype=torch.long), torch.randn(1, 9, c.fc_in_features), torch.tensor([[2, 5]])).shape)")
    out = run(py, "-c", code, cwd=tmp_path).stdout
    assert "torch.Size([1, 2, 4, 97])" in out
