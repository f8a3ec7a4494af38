"""Fixtures for the live tests: a local JupyterLab server and a headless Chromium driving it.

The server runs on 127.0.0.1 with a random token, no browser, its own config, data, runtime,
settings and workspace folders (nothing of the user's is read or written), and the Lab application
exposed as `window.jupyterapp`, so a test can run cells with its commands. Its kernels run in a
reader's mode: TRANSFORMER_COURSE_STATIC is removed from their environment, so every
`widgets.Explorer` builds its live mode. Chromium is Debian's (as in tests/browser), and every
request that leaves 127.0.0.1 is aborted, so a CDN dependency fails loudly.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import kernel_zygote  # tools/ (on sys.path: tests/conftest.py)
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
START_TIMEOUT = 60  # seconds for the server to answer; it takes a few here
# Lab settings: render every cell of a notebook (no windowing), so a widget far down the page is
# in the DOM; never ask about news or updates (a pop-up, and a request to the internet).
LAB_SETTINGS = {
    "notebook-extension/tracker": {"windowingMode": "none"},
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running JupyterLab: `url(path)` gives an address with the token."""

    def __init__(self, root: Path, port: int, token: str, process: subprocess.Popen, log: Path):
        self.root, self.port, self.token, self.process, self.log = root, port, token, process, log

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}?token={self.token}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("api/status"), timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """JupyterLab serving a temporary copy of notebooks/ (the tests never touch the real files)."""
    from transformer_course.widgets import STATIC_ENV  # here: pytest's controller skips torch

    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for name, values in LAB_SETTINGS.items():
        path = base / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {key: value for key, value in os.environ.items() if key != STATIC_ENV}
    env |= {
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
        "OMP_NUM_THREADS": "1",
    }
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.terminals_enabled=False",
        # A test's kernel is shut down after it and holds nothing worth keeping: killed if not
        # gone in 0.5 s (jupyter_client waits 5 s; a kernel's shutdown took 2 to 3 s).
        "--KernelManager.shutdown_wait_time=0.5",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root in a container
    log = base / "server.log"
    # Its kernels are forked from a process that has imported torch: each starts 2-3 s sooner.
    with kernel_zygote.forked_kernels(env, wait=False) as env, open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        server = LabServer(root, port, token, process, log)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not server.ready():
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
            yield server
        finally:
            kernel_zygote.stop(process, timeout=15)


class LabPage:
    """One browser page with JupyterLab loaded, kept for every test of a test process: Lab's own
    start in the browser took 5 s, and every test needs it. Each test finds no document open and no
    kernel running (`close`); a page whose cleaning fails is dropped and the next test gets a new
    one."""

    def __init__(self, browser) -> None:
        self.browser, self.page = browser, None

    def get(self):
        if self.page is None:
            context = self.browser.new_context(viewport={"width": 1280, "height": 900})
            blocked: list[str] = []

            def route(r) -> None:
                host = urlparse(r.request.url).hostname
                if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            self.page = context.new_page()
            self.page.blocked = blocked
        self.page.blocked.clear()
        return self.page

    def close(self) -> None:
        """Close every document without saving it (a test's outputs are its kernel's, never the
        notebook's) and shut down every kernel: each holds a torch process, competing for the two
        cores."""
        if self.page is None:
            return
        try:
            self.page.evaluate(CLOSE_JS)
        except Exception:  # noqa: BLE001  a failed test may have left the page unusable
            self.drop()

    def drop(self) -> None:
        if self.page is not None:
            self.page.context.close()
            self.page = None


CLOSE_JS = """
async () => {
  const app = window.jupyterapp;
  if (!app) return;
  for (const widget of Array.from(app.shell.widgets("main"))) widget.dispose();
  await app.serviceManager.sessions.shutdownAll();
}
"""


@pytest.fixture(scope="session")
def lab_page(browser, lab: LabServer) -> Iterator[LabPage]:
    holder = LabPage(browser)
    yield holder
    holder.drop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call" and report.failed:
        item.failed_in_call = True  # see `page`: its JupyterLab page is not reused
    return report


@pytest.fixture
def page(lab_page: LabPage, request: pytest.FixtureRequest):
    """The test process's JupyterLab page, with no document open; every request that leaves
    127.0.0.1 is aborted and recorded in `page.blocked` (emptied for each test). After a failed
    test the page is dropped: whatever state it failed in, the next test starts afresh."""
    yield lab_page.get()
    if getattr(request.node, "failed_in_call", False):
        lab_page.drop()
    else:
        lab_page.close()


RUN_JS = """
async ({path}) => {
  const app = window.jupyterapp;
  const panel = await app.commands.execute("docmanager:open", {path});  // this notebook's tab
  app.shell.activateById(panel.id);
  await panel.context.ready;
  await panel.revealed;
  await panel.sessionContext.ready;
  const notebook = panel.content;
  while (notebook.widgets.length === 0) await new Promise((r) => setTimeout(r, 50));
  await app.commands.execute("notebook:run-all-cells");
  const errors = [];
  for (const cell of notebook.widgets) {
    if (cell.model.type !== "code") continue;
    for (const output of cell.model.outputs.toJSON()) {
      if (output.output_type === "error") errors.push(output.ename + ": " + output.evalue);
    }
  }
  return errors;
}
"""


@pytest.fixture
def run_notebook(page, lab: LabServer) -> Iterator:
    """`run_notebook(name)`: open notebooks/<name> in Lab and run all its cells; fail on an error
    output."""

    def run(name: str, timeout: float = 120) -> None:
        page.set_default_timeout(timeout * 1000)
        if not page.evaluate("() => Boolean(window.jupyterapp)"):  # the first test on this page
            page.goto(lab.url("lab") + "&reset")  # a fresh workspace: no tabs
            page.wait_for_function("() => window.jupyterapp")
            page.evaluate("async () => { await window.jupyterapp.restored; }")
        errors = page.evaluate(RUN_JS, {"path": name})
        assert errors == [], f"{name}: cells raised {errors}"
        page.set_default_timeout(30_000)  # from here on each step is one small render

    yield run
