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
test fails. Server and browser are always shut down (the server's whole process group, kernels included).

The demo's report as a reader meets it: `report.md` of the quick and of the default `dflash-demo` (written by
`write_report` from plausible stage results, with their figures, so no training runs here; `$DFLASH_NB_DEMO_RUNS`, a
`:`-separated list of real run directories, adds their reports) rendered to HTML as GitHub shows a markdown file (a
1012 px column, tables that scroll inside themselves when too wide) in Chromium at 1280 px. The headline table must fit
without a horizontal scroll, and so must the page; screenshots `demo-report-*.png` go to the artifacts folder."""
import json, os, re, secrets, time, urllib.request
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
import nbformat, pytest
from browser_util import ROOT, artifacts_dir, browser_page, jupyterlab, need_browser, markdown_page

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


def synthetic_rounds(tau: float, n: int, block: int = 16) -> list:
    "`n` chain rounds [(accepted, checkable)] whose mean accepted length is about `tau` - 1, deep slots rarely reached."
    counts, left = [], n
    for k in range(block - 1):
        c = left if k == block - 2 else round(left * (1 - (tau - 1) / tau))
        counts.append(c)
        left -= c
    return [(k, block - 1) for k, c in enumerate(counts) for _ in range(c)]


def synthetic_results(cfg, out: Path):
    "`DemoResults` a run of `cfg` could produce (four drafters, split's speed noise as the issue saw it), and figures."
    from matplotlib.figure import Figure
    from dflash_nb.demo import DemoResults, eval_budgets, plot_training, TOKENS
    from dflash_nb.probes import RMSStats, plot_layer_norms
    from dflash_nb.evaluate import OfflineResult, round_acceptance, plot_acceptance
    rounds = cfg.n_eval_prompts * cfg.max_new_tokens
    spec = {"fused": (1.096, "fused", [1, 3, 5, 7, 9]), "split": (1.115, "split", [1, 3, 5, 7]),
            "fused2": (1.275, "fused", [1, 3, 5, 7, 9]), "fused2 (selector off)": (1.258, "fused", [1, 3, 5, 7, 9])}
    offline = []
    for name, (tau, fusion, taps) in spec.items():
        acc = round_acceptance(synthetic_rounds(tau, round(rounds / tau)), 16)
        tree = {b: tau + 0.45 + b / 200 for b in eval_budgets(cfg)}
        offline.append(OfflineResult(name, fusion, taps, 480_000, tau, [], acc["acc_cond"], acc["acc_cum"], [],
                                     tree, counts=acc["counts"], kind="dflash2" if "2" in name else "dflash",
                                     tau_lattice={15: tau + 0.47} if name == "fused2" else {}))
    speed = lambda s, tau: {"speedup": s, "low": s - 0.02, "high": s + 0.03, "ideal": tau * 0.015 / 0.0286,
                            "repeats": cfg.speed_repeats, "noise": "above its ideal; above τ" if s > tau else ""}
    online = {r.name: {"tau": r.tau, "lossless": True, "speed": speed(1.27 if r.name == "split" else 0.51, r.tau),
                       "ddtree": {"tau": r.tau_tree[15], "lossless": True, "budget": 15,
                                  "speed": speed(0.72, r.tau_tree[15])}} for r in offline[:3]}
    machine = {"before": {"torch threads": 1, "cpus": 2, "load": 2.61}, "after": {"torch threads": 1, "cpus": 2,
                                                                                     "load": 3.05}, "prompts": 2}
    steps = list(range(5, cfg.steps + 1, 5))
    runs = {f: [{"step": s, "loss": 6 - s / cfg.steps - i / 4, "tau_est": 1 + 0.1 * s / cfg.steps + i / 20}
                for s in steps] for i, f in enumerate(("fused", "split", "fused2"))}
    along = {f: {str(s): 1 + 0.1 * s / cfg.steps for s in range(cfg.steps // 4, cfg.steps + 1, cfg.steps // 4)}
             for f in ("fused", "split")}
    fig = Figure(figsize=(7, 4))
    plot_acceptance(offline, ax=fig.subplots())
    fig.savefig(out / "acceptance.png", dpi=110)
    against = {"fused": TOKENS, "split": f"its deepest-tap labels (79% are {TOKENS})", "fused2": TOKENS}
    plot_training(runs, against, along).savefig(out / "training.png", dpi=110)
    fig = Figure(figsize=(7, 3.2), layout="constrained")
    norms = {k: RMSStats(0, 0, 1.5 * 1.2 ** k, 1.2 * 1.2 ** k, 2 * 1.2 ** k) for k in range(10)}
    plot_layer_norms({"cache": norms}, [1, 3, 5, 7, 9], ax=fig.subplots())
    fig.savefig(out / "norms.png", dpi=110)
    files = {"acceptance": "acceptance.png", "training": "training.png", "norms": "norms.png"}
    timings = {"responses": 5.7, "extract": 1.3, "label check": 0.1, "train fused": 43.0, "train split": 38.6,
               "train fused2": 54.9, "offline eval": 5.3, "checkpoints' τ": 9.1, "online decode": 131.8,
               "ablation": 0.6, "figures": 0.8, "selector": 0.3}
    slots = lambda *v: list(v) + [0] * (15 - len(v))
    selector = {"reached": slots(378, 80, 5, 1), "topk_recall": slots(0.656, 0.713, 1.0, 1.0),
                "selector_error": slots(0.669, 0.912, 0.8, 1.0), "argmax_error": slots(0.794, 0.938, 0.8, 1.0)}
    return DemoResults(offline, online, {"tau": 1.096, "deepest_share": 0.1, "rows": []}, files, timings, offline,
                       {"tap": 9, "agree": 0.791, "positions": 3072}, selector, machine)


def demo_reports(tmp: Path) -> dict:
    "{name: report.md} of the quick and the default demo (synthetic results), and of any run in $DFLASH_NB_DEMO_RUNS."
    from dflash_nb.demo import DemoConfig, quick_demo_config, write_report
    out = {}
    for name, cfg in (("quick", quick_demo_config()), ("default", DemoConfig())):
        (tmp / name).mkdir()
        out[name] = write_report(tmp / name, cfg, synthetic_results(cfg, tmp / name))
    for run in filter(None, os.environ.get("DFLASH_NB_DEMO_RUNS", "").split(os.pathsep)):
        out[f"run-{Path(run).name}"] = Path(run) / "report.md"
    return out


WIDTHS = """() => [...document.querySelectorAll('table')].map(t => ({
    section: (() => { let e = t; while (e && e.tagName !== 'H2') e = e.previousElementSibling;
                      return e ? e.innerText : ''; })(),
    width: t.getBoundingClientRect().width, scroll: t.scrollWidth, client: t.clientWidth,
    columns: t.querySelectorAll('thead th').length}))"""


@pytest.mark.slow
def test_demo_report_at_1280(tmp_path):
    need_browser()
    arts = artifacts_dir()
    print(f"\nbrowser test artifacts: {arts}")
    reports = demo_reports(tmp_path)
    with browser_page(viewport=(1280, 900)) as page:
        for name, report in reports.items():
            page.goto(markdown_page(report, tmp_path / f"{name}.html").as_uri())
            page.wait_for_load_state("load")
            tables = page.evaluate(WIDTHS)
            head = next(t for t in tables if t["section"] == "Drafters side by side")
            try:
                assert head["columns"] <= 7, head
                assert head["scroll"] <= head["client"], f"{name}: the headline table scrolls sideways: {head}"
                assert page.evaluate("document.documentElement.scrollWidth") <= 1280, f"{name}: the page scrolls"
                assert page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)"), "an image"
            finally:
                page.screenshot(path=str(arts / f"demo-report-{name}.png"), full_page=True)
                page.locator("table").first.screenshot(path=str(arts / f"demo-report-{name}-headline.png"))
            wide = [t for t in tables if t["scroll"] > t["client"]]
            print(f"{name}: headline {head['columns']} columns, {head['width']:.0f} px wide at 1280 px; "
                  f"tables that scroll: {[(t['section'], t['scroll']) for t in wide]}")
