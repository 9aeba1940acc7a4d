"""The tap explorer as a user meets it: `nbs/09_explore_taps.ipynb` opened in JupyterLab in headless Chromium, run,
and one tap's slider moved; the τ label must then show what the Python API computes for that scale.

The test starts JupyterLab on a free localhost port (token set, no browser) over a temporary copy of the notebook (its
stored outputs and widget state removed, so only what this run draws is on the page; a kernelspec set, as JupyterLab
writes one on first save), runs all cells from the Run menu, and checks what a person would see: no kernel dialog, no
traceback or widget error in any output, the sliders, the prompt picker and the layout toggle rendered. It then puts the
deepest tap's slider to 0 with the keyboard (Home on the slider handle) and compares the label with
`explorer_update(ex, layout, {tap: 0.0}).result.tau` on the explorer the notebook builds (same shipped drafters, same
toy-target cache). Kernel and test share `$DFLASH_NB_FIXTURES`, so the notebook's fixture drafters are built once.

A screenshot of the page goes to `$DFLASH_NB_ARTIFACTS` (else a temporary folder; the path is printed), also when the
test fails. Server and browser are always shut down (the server's whole process group, kernels included)."""
import json, os, re, secrets, time, urllib.request
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
import nbformat, pytest
from browser_util import ROOT, artifacts_dir, browser_page, jupyterlab, need_browser

NB = "09_explore_taps.ipynb"
TAU = re.compile(r"τ = (\d+\.\d{3})")
RUN_TIMEOUT_MS = 600_000     # the whole notebook on a busy 2-core machine; it takes ~30 s on an idle one


def toy_explorer(work: Path):
    "The explorer the notebook's last cell shows (`toy_ex`), built the same way from the shipped toy drafters."
    from dflash_nb.cache import HiddenStateCache
    from dflash_nb.explore import TapExplorer
    from dflash_nb.extract import cached_responses, extract_to_cache
    from dflash_nb.model import DFlashDraftModel
    from dflash_nb.toy import load_toy_target, repo_data_dir
    toy = load_toy_target()
    shipped = repo_data_dir() / "toy-drafters"
    drafters = {f: DFlashDraftModel.from_pretrained(shipped / f, target_model=toy.model).eval()
                for f in ("fused", "split")}
    responses = cached_responses(None, [], shipped / "responses-eval.jsonl", 0, 0)
    taps = drafters["fused"].config.target_layer_ids
    return TapExplorer(drafters, HiddenStateCache(extract_to_cache(toy, responses[:6], work / "toy-cache", taps)))


def expected(work: Path) -> dict:
    "What the Python API says the explorer shows: its taps and layouts, τ of the first layout at scale 1 and with the"
    " deepest tap at 0."
    import torch
    from dflash_nb.explore import explorer_update
    torch.set_num_threads(1)          # the notebook's kernel runs alongside on the same cores
    ex = toy_explorer(work)
    layout, deep = list(ex.drafters)[0], ex.taps[-1]
    before, after = (explorer_update(ex, layout, s).result.tau for s in ({}, {deep: 0.0}))
    return dict(taps=ex.taps, layouts=list(ex.drafters), layout=layout, deep=deep, before=before, after=after)


def fresh_copy(dest: Path):
    "The notebook without stored outputs or widget state, with the default Python kernel named."
    nb = nbformat.read(ROOT / "nbs" / NB, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, dest / NB)


def kernel_env(fixtures: Path) -> dict:
    "The server's (and so the kernel's) environment: this checkout imported first, the test's fixture folder."
    from dflash_nb.testing import FIXTURES_ENV
    env = dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env[FIXTURES_ENV] = str(fixtures)
    return env


def label_tau(page) -> float:
    "τ shown by the explorer's label."
    m = TAU.search(page.locator(".widget-html", has_text="τ =").last.inner_text())
    assert m, "the explorer's label shows no τ"
    return float(m.group(1))


def kernel_idle(url: str, token: str, timeout: float = 180):
    "Wait until the server has a session whose kernel is idle (the notebook's kernel started and connected)."
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=10) as r:
            sessions = json.load(r)
        if sessions and all(s["kernel"]["execution_state"] == "idle" for s in sessions):
            return
        time.sleep(0.5)
    raise TimeoutError(f"the notebook's kernel was not idle within {timeout:.0f} s: {sessions}")


def run_all(page):
    "Run > Run All Cells, then wait until no cell is queued or running (or a dialog shows, which the caller reports)."
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Run All Cells$")).click()
    page.wait_for_function("""() => {
        if (document.querySelector('.jp-Dialog')) return true;
        const prompts = [...document.querySelectorAll('.jp-Cell.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
        return prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
    }""", timeout=RUN_TIMEOUT_MS, polling=500)


def visible_problems(page) -> list[str]:
    "Tracebacks and widget errors in outputs, and any dialog (kernel died, kernel select, ...)."
    outs = page.locator(".jp-OutputArea-output").all_inner_texts()
    bad = [o[:400] for o in outs if "Traceback" in o or "Error displaying widget" in o or "Error rendering" in o]
    return bad + [f"dialog: {t[:200]}" for t in page.locator(".jp-Dialog").all_inner_texts()]


@pytest.mark.slow
def test_explorer_in_jupyterlab(tmp_path):
    need_browser()
    from dflash_nb.testing import fixture_root
    arts = artifacts_dir()
    print(f"\nbrowser test artifacts: {arts}")
    fixtures = fixture_root()          # the suite's shared fixtures: the notebook's drafters are usually built already
    lab_root = tmp_path / "lab"
    lab_root.mkdir()
    fresh_copy(lab_root)
    token = secrets.token_hex(16)
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(1)
    want = pool.submit(expected, tmp_path)    # the Python side, computed while the notebook runs in the browser
    lab = jupyterlab(lab_root, kernel_env(fixtures), token, arts / "jupyterlab.log")
    with pool, lab as url, browser_page() as page:
        try:
            page.goto(f"{url}/lab/tree/{NB}?token={token}", timeout=120_000)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
            kernel_idle(url, token)
            page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=60_000)   # the status bar agrees
            run_all(page)
            t_run = time.monotonic() - t0
            assert visible_problems(page) == []
            widget = page.locator(".widget-vbox", has=page.locator(".widget-hslider")).last
            widget.scroll_into_view_if_needed()
            sliders = {widget.locator(".widget-hslider").nth(i).locator(".widget-label").inner_text(): i
                       for i in range(widget.locator(".widget-hslider").count())}
            w = want.result(timeout=600)
            deep, layout, before, after = w["deep"], w["layout"], w["before"], w["after"]
            assert sorted(sliders) == sorted(f"tap {t}" for t in w["taps"]), sliders
            assert widget.locator(".widget-dropdown select").count() == 1                       # the prompt picker
            toggle = widget.locator(".widget-toggle-buttons button")
            assert [t.strip() for t in toggle.all_inner_texts()] == w["layouts"], toggle.all_inner_texts()  # layouts
            assert "mod-active" in (toggle.first.get_attribute("class") or "")                  # first one selected
            assert f"{before:.3f}" != f"{after:.3f}", "zeroing the deepest tap must move τ, or the test proves nothing"
            assert f"{label_tau(page):.3f}" == f"{before:.3f}"
            handle = widget.locator(".widget-hslider").nth(sliders[f"tap {deep}"]).locator(".noUi-handle")
            handle.focus()
            handle.press("Home")                                                 # the slider to its minimum, 0.0
            page.wait_for_function(
                "want => [...document.querySelectorAll('.widget-html')].some(e => e.innerText.includes(want))",
                arg=f"τ = {after:.3f}", timeout=120_000)
            assert widget.locator(".widget-hslider").nth(sliders[f"tap {deep}"]).locator(
                ".widget-readout").inner_text().strip() in ("0.00", "0.0")
            assert f"{label_tau(page):.3f}" == f"{after:.3f}"
            assert visible_problems(page) == []
            widget.screenshot(path=str(arts / "explorer-widget.png"))
            print(f"notebook ran in {t_run:.0f} s, all took {time.monotonic() - t0:.0f} s; "
                  f"τ {before:.3f} -> {after:.3f} with tap {deep} at 0 ({layout}); screenshots in {arts}")
        finally:
            page.screenshot(path=str(arts / "explorer-page.png"), full_page=False)
