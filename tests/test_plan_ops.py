"""The planner's stand-in ops survive `nbdev-test`: a notebook that re-runs `05d_instrument`'s exported cells in a
process that imported `dflash_nb.instrument` registers its own copies, so the package's ops (and the dispatch handles
torch keeps for them) stay valid. Registering under the same name once freed them: a later plan read freed memory
(a segfault in `nbdev-test`'s worker, seen as `BrokenProcessPool`)."""
import subprocess, sys, textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = textwrap.dedent("""
    import gc, sys, nbformat, torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from dflash_nb import instrument

    def q_grad(op):
        "Forward and backward of the package's stand-in on fake tensors, as the planner runs it."
        with FakeTensorMode():
            q = torch.empty(1, 2, 16, 8, requires_grad=True)
            op(q, q, q, 0.5)[0].sum().backward()
            return tuple(q.grad.shape)

    before = q_grad(instrument.flex_standin)
    cells = [c.source for c in nbformat.read(sys.argv[1], as_version=4).cells
             if c.cell_type == "code" and c.source.startswith("#| export")]
    ns = {"__name__": "__main__"}
    exec(compile("\\n".join(cells), "05d_instrument", "exec"), ns)   # the notebook's exported cells, as nbdev-test runs them
    for op in ("flex_standin", "_flex_standin_backward"):   # its own ops, not the package's replaced
        assert ns[op]._qualname != getattr(instrument, op)._qualname, ns[op]._qualname
    del ns
    gc.collect()
    assert q_grad(instrument.flex_standin) == before
    print("ok")
""")


def test_notebook_rerun_keeps_package_ops():
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "nbs" / "05d_instrument.ipynb")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"exit {r.returncode}:\n{r.stderr[-3000:]}"
