"""Shared helpers of the real-browser tests (tests/test_browser.py, tests/test_docs_site.py): headless Chromium from the
system's `chromium` package driven by Playwright, a JupyterLab server in its own process group, an artifacts folder,
and a markdown file as an HTML page laid out as GitHub shows it (`markdown_page`).

Nothing here downloads a browser: Playwright is pointed at the system Chromium (`$DFLASH_NB_CHROMIUM`, else Debian's
`/usr/lib/chromium/chromium`, else `chromium` on PATH). Without Playwright or Chromium the browser tests skip, saying
what to install; with `DFLASH_NB_REQUIRE_BROWSER=1` (set by `.ci/run`) they fail instead, so CI cannot pass silently."""
import contextlib, os, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL_HINT = "apt-get install -y chromium && pip install -e '.[dev]' (Playwright is in the dev extra)"


def chromium_path() -> str | None:
    "The system Chromium binary, or None."
    cands = [os.environ.get("DFLASH_NB_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium"),
             shutil.which("chromium-browser")]
    return next((c for c in cands if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def need_browser():
    "Skip (or fail under `DFLASH_NB_REQUIRE_BROWSER=1`) when Playwright or the system Chromium is missing."
    missing = [] if chromium_path() else ["the system Chromium"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright's Python package")
    if not missing:
        return
    msg = f"{' and '.join(missing)} not found; install with: {INSTALL_HINT}"
    if os.environ.get("DFLASH_NB_REQUIRE_BROWSER") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def artifacts_dir() -> Path:
    "Where screenshots go: `$DFLASH_NB_ARTIFACTS`, else a new temporary folder (its path is printed)."
    d = Path(os.environ.get("DFLASH_NB_ARTIFACTS") or tempfile.mkdtemp(prefix="dflash_nb-artifacts-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def browser_page(viewport=(1400, 1000)):
    "A headless Chromium page; the browser is closed on exit, also when the test fails."
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            yield page
        finally:
            browser.close()


def free_port() -> int:
    "A free localhost TCP port."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc, timeout: float):
    "Wait until `url` answers, failing early if `proc` exits."
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no answer from {url} within {timeout:.0f} s")


def stop_group(proc, grace: float = 10.0):
    "Stop `proc` and everything it started (its own process group): SIGTERM, then SIGKILL after `grace` seconds."
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)   # kernels the server started, if any outlived it
    proc.wait()


@contextlib.contextmanager
def jupyterlab(root: Path, env: dict, token: str, log: Path, timeout: float = 120):
    "JupyterLab serving `root` headless on a free localhost port; yields its base URL. Stopped (whole group) on exit."
    port = free_port()
    state = root.parent / f"{root.name}-lab-state"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
           f"--LabApp.user_settings_dir={state / 'settings'}", f"--LabApp.workspaces_dir={state / 'workspaces'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    settings = {"apputils-extension/notification": '{"fetchNews": "false"}',   # no "Jupyter news?" toast
                "notebook-extension/tracker": '{"windowingMode": "none"}'}    # every cell in the DOM, not only visible
    for name, text in settings.items():
        f = state / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/api/status?token={token}", proc, timeout)
        yield url
    finally:
        stop_group(proc)


GITHUB_CSS = """body { margin: 0; font: 16px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
.markdown-body { box-sizing: border-box; max-width: 1012px; margin: 0 auto; padding: 32px; }
table { display: block; width: max-content; max-width: 100%; overflow: auto; border-collapse: collapse; }
th, td { padding: 6px 13px; border: 1px solid #d0d7de; }
img { max-width: 100%; }
code { font-size: 85%; }"""


def markdown_page(md: Path, dest: Path) -> Path:
    "Markdown file `md` as HTML page `dest`, laid out as GitHub shows a markdown file; its relative images load."
    import mistune
    body = mistune.create_markdown(plugins=["table"])(md.read_text())
    base = f'<base href="{md.parent.resolve().as_uri()}/">'
    dest.write_text(f'<!doctype html><html><head><meta charset="utf-8">{base}<style>{GITHUB_CSS}</style></head>'
                    f'<body><article class="markdown-body">{body}</article></body></html>')
    return dest
