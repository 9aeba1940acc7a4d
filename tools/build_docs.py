"""Build the documentation site from the notebooks, offline, without touching the checkout.

Run from anywhere: `python tools/build_docs.py --out site/` (default `_docs/`, which git ignores), then open
`site/index.html`.

- The notebooks are processed by nbdev exactly as `nbdev-docs` does (`nbdev.serve.proc_nbs` with its default
  processors): front matter, `#| hide` and `#| export` handling, and a `show_doc` entry (signature and docstring) for
  every exported function and class, the same markdown nbdev-docs shows. Work happens in a temporary copy of `nbs/`,
  `pyproject.toml` and the package, so the checkout (its `_proc/`, `nbs/sidebar.yml`, `_modidx.py`) is left as it was.
- Rendering: with `quarto` on PATH (`--engine auto`, the default, or `--engine quarto`) the processed notebooks are
  rendered by Quarto, as `nbdev-docs` renders them. Without it (`--engine nbconvert`, and `auto` when Quarto is
  missing) each processed notebook becomes one HTML page through nbconvert, with the stored plots embedded and a
  sidebar linking the pages in `nbs/sidebar.yml` order. Quarto itself cannot be installed offline (the `quarto-cli`
  package downloads its binary when it is built), hence this engine.
- The notebooks are not executed: pages show the outputs stored in them (`tools/render_notebooks.py` stores them).
- nbdev's processing executes exported cells, `show_doc` cells and every cell holding an import, so the notebooks
  keep test imports in import-only cells (`tests/test_notebook_cells.py` checks it); `nbdev-docs` works the same way.
"""
import argparse, html, os, re, shutil, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT = re.compile(r"^---\s*\n(.*?)\n---\s*$", re.S)          # a raw cell that is all front matter
MD_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)       # front matter heading a markdown page


def stage(dest: Path) -> Path:
    "Copy what nbdev's processing reads (notebooks, pyproject.toml, the package) into `dest`; return its nbs folder."
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "tmp", "_proc", "_docs", "sidebar.yml")
    shutil.copytree(ROOT / "nbs", dest / "nbs", ignore=ignore)
    shutil.copytree(ROOT / "dflash_nb", dest / "dflash_nb", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest / "nbs"


def process(proj: Path) -> Path:
    "nbdev's docs processing of the staged project (as `nbdev-docs` before rendering); returns its `_proc` folder."
    os.chdir(proj)
    import nbdev.doclinks
    from nbdev.quarto import nbdev_sidebar, refresh_quarto_yml
    from nbdev.serve import proc_nbs
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    nbdev_sidebar.__wrapped__(path=proj / "nbs")
    return proc_nbs(str(proj / "nbs"), n_workers=0)


def render_quarto(proc: Path, out: Path, n_workers: int):
    "Quarto's rendering of the processed project into `out`, as `nbdev-docs` does it."
    from nbdev.quarto_render import render_quarto as render
    render(proc, out, n_workers=n_workers)


def page_order(proc: Path) -> list[str]:
    "Page sources (relative to `proc`): the home page `index.md`, then nbdev's generated `sidebar.yml` in order."
    import yaml
    side = yaml.safe_load((proc / "sidebar.yml").read_text())

    def walk(items):
        for it in items:
            if isinstance(it, str):
                yield it
            elif isinstance(it, dict):
                yield from walk(it.get("contents", []))
    pages = [p for p in walk(side["website"]["sidebar"]["contents"]) if (proc / p).exists()]
    return (["index.md"] if (proc / "index.md").exists() and "index.md" not in pages else []) + pages


def front_matter(nb) -> dict:
    "The YAML front matter nbdev's processing puts in a notebook's first raw cell (title, description)."
    import yaml
    for c in nb.cells:
        if c.cell_type == "raw" and (m := FRONT.match(c.source.strip())):
            return yaml.safe_load(m.group(1)) or {}
    return {}


CELL_KEYS = {"cell_type", "id", "metadata", "source", "outputs", "execution_count", "attachments"}
QUARTO_ATTRS = re.compile(r"\)\{[^}\n]*\}")
DIRECTIVE = re.compile(r"^\s*#\|\s*([\w-]+)\s*:?\s*(.*)$")


def for_nbconvert(nb):
    "Quarto's cell directives applied (`echo: false` hides the input; `#|` lines dropped); nbdev's extra keys removed."
    nb.cells = [c for c in nb.cells if not (c.cell_type == "raw" and FRONT.match(c.source.strip()))]
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "text/markdown" in o.get("data", {}):       # show_doc's source link carries Quarto link attributes
                o["data"]["text/markdown"] = QUARTO_ATTRS.sub(")", o["data"]["text/markdown"])
        for k in set(c) - CELL_KEYS:
            del c[k]
        c.metadata.pop("execution", None)           # the doc build's own timings (floats nbformat rejects)
        if c.cell_type != "code":
            continue
        lines = c.source.splitlines()
        head = [m for m in map(DIRECTIVE.match, lines) if m]
        n = next((i for i, line in enumerate(lines) if not DIRECTIVE.match(line)), len(lines))
        opts = {m.group(1): m.group(2).strip().lower() for m in head[:n]}
        c.source = "\n".join(lines[n:])
        if opts.get("echo") == "false" or opts.get("include") == "false":
            c.metadata.setdefault("tags", []).append("remove_input")
        if opts.get("include") == "false" or opts.get("output") == "false":
            c.outputs = []
    return nb


def nav(pages: list[tuple[str, str]], current: str) -> str:
    "The sidebar: one link per page, the current one marked."
    items = "".join(f'<li{" class=current" if href == current else ""}><a href="{href}">{html.escape(title)}</a></li>'
                    for href, title in pages)
    return f'<nav id="site-nav"><a class="site-title" href="index.html">dflash_nb</a><ul>{items}</ul></nav>'


STYLE = """<style>
body{margin:0} #site-nav{position:fixed;top:0;left:0;bottom:0;width:230px;overflow:auto;padding:1em;
background:#f7f7f9;border-right:1px solid #ddd;font:14px sans-serif} #site-nav ul{list-style:none;padding:0}
#site-nav li{margin:.3em 0} #site-nav .current a{font-weight:bold}
#site-nav .site-title{font-weight:bold;font-size:16px}
#site-main{margin-left:260px;padding:0 1em;max-width:1100px} .page-description{color:#555;font-size:1.1em}
</style>"""


def render_nbconvert(proc: Path, out: Path):
    "One HTML page per processed notebook or markdown page (stored plots embedded), with a shared sidebar."
    import nbformat, yaml
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from nbconvert.filters import markdown2html
    out.mkdir(parents=True, exist_ok=True)
    srcs = page_order(proc)
    nbs = {s: for_nbconvert(nbformat.read(proc / s, as_version=4)) for s in srcs if s.endswith(".ipynb")}
    fms = {s: front_matter(nbformat.read(proc / s, as_version=4)) for s in nbs}
    mds = {s: MD_FRONT.match((proc / s).read_text()) for s in srcs if s not in nbs}
    fms |= {s: yaml.safe_load(m.group(1)) for s, m in mds.items() if m}
    titles = {s: fms.get(s, {}).get("title") or Path(s).stem for s in srcs}
    hrefs = {s: fms.get(s, {}).get("output-file") or str(Path(s).with_suffix(".html")) for s in srcs}   # as Quarto
    pages = [(hrefs[s], titles[s]) for s in srcs]
    link = re.compile(r"\]\(([\w.-]+\.(?:ipynb|qmd|md))(#[^)]*)?\)")
    exporter = HTMLExporter(template_name="lab", exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}), enabled=True)
    for s in srcs:
        href = hrefs[s]
        if s in nbs:
            body, _ = exporter.from_notebook_node(nbs[s])
            body = re.sub(r"<title>.*?</title>", f"<title>{html.escape(titles[s])}</title>", body, count=1, flags=re.S)
            head = f"<h1 class=title>{html.escape(titles[s])}</h1>"
            if fms[s].get("description"):
                head += f"<div class=page-description>{markdown2html(fms[s]['description'])}</div>"
            body = re.sub(r"(<main>|<body[^>]*>)", lambda m: m.group(1) + head, body, count=1)
        else:
            fm = fms.get(s, {})
            text = link.sub(lambda m: f"]({hrefs.get(m.group(1), m.group(1))}{m.group(2) or ''})",
                            MD_FRONT.sub("", (proc / s).read_text()))
            head = f"<h1 class=title>{html.escape(titles[s])}</h1>" \
                   f"<p class=page-description>{html.escape(fm.get('description', ''))}</p>"
            body = f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(titles[s])}</title></head>" \
                   f"<body>{head}{markdown2html(text)}</body></html>"
        body = body.replace("</head>", STYLE + "</head>", 1)
        body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav(pages, href) + '<div id="site-main">', body,
                      count=1).replace("</body>", "</div></body>", 1)
        (out / href).parent.mkdir(parents=True, exist_ok=True)
        (out / href).write_text(body)
    if not (out / "index.html").exists() and pages:
        shutil.copy2(out / pages[0][0], out / "index.html")


def build(out: Path, engine: str = "auto", n_workers: int = 2) -> Path:
    "Build the site into `out` (replaced); returns `out`."
    if engine == "auto":
        engine = "quarto" if shutil.which("quarto") else "nbconvert"
    if engine == "quarto" and not shutil.which("quarto"):
        raise SystemExit("--engine quarto: no `quarto` on PATH; use --engine nbconvert (the offline engine)")
    out = Path(out).resolve()
    if out == ROOT or out in ROOT.parents or (out.exists() and any(out.glob("*.ipynb"))) or (out / ".git").exists():
        raise SystemExit(f"--out {out}: the folder is replaced by the site; give a new folder, not a checkout")
    cwd = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="dflash_nb-docs-") as tmp:
        proj = Path(tmp)
        stage(proj)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(proj), os.environ.get("PYTHONPATH", "")) if p)
        sys.path.insert(0, str(proj))
        try:
            proc = process(proj)
            site = proj / "site"
            (render_quarto if engine == "quarto" else lambda p, o, n: render_nbconvert(p, o))(proc, site, n_workers)
        finally:
            os.chdir(cwd)
            sys.path.remove(str(proj))
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(site, out)
    print(f"docs site ({engine}): {out / 'index.html'}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "_docs"), help="output folder (replaced); default _docs/ (git-ignored)")
    ap.add_argument("--engine", choices=["auto", "quarto", "nbconvert"], default="auto",
                    help="auto: Quarto when `quarto` is on PATH, else nbconvert")
    ap.add_argument("--n-workers", type=int, default=2, help="Quarto's rendering processes")
    a = ap.parse_args(argv)
    build(Path(a.out), a.engine, a.n_workers)


if __name__ == "__main__":
    main()
