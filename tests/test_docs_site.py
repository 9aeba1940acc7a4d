"""The notebooks as a docs site: `tools/build_docs.py` builds it offline into a temporary folder (the checkout is left
as it was), and headless Chromium opens the model page, the explorer page and the diagnose page.

Checked as a reader would see them: the API reference of `DFlashDraftModel` (nbdev's `show_doc`: its name as a heading,
its signature with the `config` parameter, its docstring), `show_doc` entries of exported functions of the explorer
(`explorer_update`'s signature and docstring), and the plots stored in `nbs/09_explore_taps.ipynb` rendered as loaded
`<img>` elements, as many as the notebook stores; on `13_diagnose`'s page, the facts table its cells show and the
acceptance plot they draw, as a reader sees them without running anything. Screenshots of the pages go to
`$DFLASH_NB_ARTIFACTS` (else a temporary folder; the path is printed)."""
import re, subprocess, sys, time
import nbformat, pytest
from browser_util import ROOT, artifacts_dir, browser_page, need_browser


def stored_images(name: str) -> int:
    "Plots (PNG or SVG outputs) stored in notebook `name`."
    nb = nbformat.read(ROOT / "nbs" / name, as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if {"image/png", "image/svg+xml"} & set(o.get("data", {})))


def loaded_images(page) -> int:
    "`<img>` elements on `page` that loaded a real picture (complete, wider than 100 px)."
    return page.locator("img").evaluate_all("es => es.filter(e => e.complete && e.naturalWidth > 100).length")


def first_line(doc: str) -> str:
    "A docstring's first line as a page shows it (markdown backticks rendered as code, so gone from the text)."
    return doc.strip().splitlines()[0].replace("`", "")


def page_of(module: str, name: str) -> str:
    "The page documenting `dflash_nb.<module>.<name>`, from nbdev's index of the package (`_modidx`, as doc links use)."
    from dflash_nb._modidx import d
    return d["syms"][f"dflash_nb.{module}"][f"dflash_nb.{module}.{name}"][0].split("#")[0]


def exported(module: str) -> list[str]:
    "Public top-level functions and classes of `dflash_nb.<module>` (nbdev's index; methods and `_x` names excluded)."
    from dflash_nb._modidx import d
    names = [k.removeprefix(f"dflash_nb.{module}.") for k in d["syms"][f"dflash_nb.{module}"]]
    return [n for n in names if "." not in n and not n.startswith("_")]


def missing_entries(page, module: str) -> list[str]:
    "Exported names of `module` with no `show_doc` heading on the page."
    heads = {t.strip().rstrip("¶").strip() for t in page.locator("h2, h3, h4").all_inner_texts()}
    return [n for n in exported(module) if n not in heads]


def api_entry(page, name: str) -> str:
    "Text of `show_doc`'s entry for `name`: the block holding its heading (signature and docstring follow it)."
    head = page.locator("h2, h3, h4", has_text=re.compile(rf"^\s*{re.escape(name)}\W*$")).first
    head.wait_for(timeout=10_000)
    head.scroll_into_view_if_needed()
    return head.locator("xpath=..").inner_text()


pytestmark = pytest.mark.slow    # the build processes every notebook (~60-90 s on 2 cores); .ci/run runs it explicitly


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    "The site, built once for this module's tests; (folder, seconds the build took)."
    out = tmp_path_factory.mktemp("site")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_docs.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, time.monotonic() - t0


def test_build_leaves_checkout_clean(site):
    "The build works in a temporary copy: no `_proc/`, `_docs/` or sidebar appears in the checkout."
    out, secs = site
    print(f"\ndocs site built in {secs:.0f} s")
    assert all((out / p).exists() for p in ("index.html", page_of("model", "DFlashDraftModel")))
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "_proc", "_docs", "nbs/sidebar.yml"],
                            cwd=ROOT, capture_output=True, text=True).stdout
    assert status == "", status


def test_model_page_api_reference(site):
    need_browser()
    from dflash_nb.model import DFlashDraftModel
    out, _ = site
    with browser_page() as page:
        page.goto((out / page_of("model", "DFlashDraftModel")).as_uri())
        assert page.title() == "The DFlash drafter"
        entry = api_entry(page, "DFlashDraftModel")                                     # show_doc's heading
        assert re.search(r"DFlashDraftModel\s*\(\s*config\s*:\s*DFlashConfig", entry), entry     # its signature
        assert first_line(DFlashDraftModel.__doc__) in entry, entry                               # its docstring
        assert missing_entries(page, "model") == []                       # every exported function and class too
        page.screenshot(path=str(artifacts_dir() / "docs-01_model.png"))
        assert page.locator(f"a[href='{page_of('explore', 'explorer_update')}']").count() >= 1   # linked: the nav


def test_explorer_page_plots_and_signatures(site):
    need_browser()
    from dflash_nb.explore import explorer_update
    out, _ = site
    want = stored_images("09_explore_taps.ipynb")
    assert want >= 3, "the explorer notebook should store its plots (tools/render_notebooks.py)"
    with browser_page() as page:
        page.goto((out / page_of("explore", "explorer_update")).as_uri())
        imgs = page.locator("img")
        assert imgs.count() >= want, (imgs.count(), want)
        assert loaded_images(page) >= want, (loaded_images(page), want)
        entry = api_entry(page, "explorer_update")
        assert first_line(explorer_update.__doc__) in entry, entry
        assert re.search(r"explorer_update\s*\(\s*ex\s*:\s*TapExplorer,\s*layout\s*:\s*str", entry), entry
        assert missing_entries(page, "explore") == []
        imgs.first.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir() / "docs-09_explore_taps.png"))


def test_diagnose_page_table_and_plot(site):
    "`13_diagnose`'s page shows what its cells computed: the facts table it prints and the acceptance plot it draws."
    need_browser()
    from dflash_nb.diagnose import diagnose
    out, _ = site
    want = stored_images("13_diagnose.ipynb")
    assert want >= 1, "the diagnose notebook should store its plot (tools/render_notebooks.py)"
    with browser_page() as page:
        page.goto((out / page_of("diagnose", "diagnose")).as_uri())
        facts = page.locator("table", has_text="fc taps")                 # diff_rows' table, shown as markdown
        assert facts.count() >= 1, "no facts table on the page"
        assert "fusion" in facts.first.inner_text()
        assert loaded_images(page) >= want, (loaded_images(page), want)
        assert first_line(diagnose.__doc__) in api_entry(page, "diagnose")
        facts.first.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir() / "docs-13_diagnose.png"))
