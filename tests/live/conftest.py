"""Fixtures for the live test: one local JupyterLab and one headless Chromium page driving it.

The server runs on 127.0.0.1 with a random token, no browser, and its own config, data, runtime,
settings and workspace folders (nothing of the user's is read or written); its kernels are
Jupyter's ordinary `python3` kernel. Lab exposes its application as `window.jupyterapp`, so the
test opens notebooks and runs cells with Lab's own commands, every chapter's at once (their kernels
start side by side, on every core). The kernels run in a reader's mode:
TRANSFORMER_COURSE_STATIC is removed from their environment, so every `widgets.Explorer` builds its
live mode. Chromium is Debian's (as in tests/browser), and every request that leaves 127.0.0.1 is
aborted and recorded, so a CDN dependency fails loudly.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

START_TIMEOUT = 60  # seconds for the server to answer
# Lab settings: render every cell of a notebook (no windowing), so a widget far down the page is
# in the DOM; never ask about news or updates (a pop-up, and a request to the internet).
LAB_SETTINGS = {
    "notebook-extension/tracker": {"windowingMode": "none"},
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


class LabServer:
    """A running JupyterLab serving `root`: `url(path)` gives an address with the token."""

    def __init__(self, root: Path, port: int, token: str) -> None:
        self.root, self.port, self.token = root, port, token

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}?token={self.token}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("api/status"), timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """JupyterLab serving an empty temporary folder (the test writes its notebooks there)."""
    from transformer_course.widgets import STATIC_ENV  # here: pytest's controller skips torch

    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    for name, values in LAB_SETTINGS.items():
        path = base / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {key: value for key, value in os.environ.items() if key != STATIC_ENV}
    env |= {
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_DATA_DIR": str(base / "data"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
        "OMP_NUM_THREADS": "1",
    }
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.terminals_enabled=False",
        # A finished chapter's kernel holds nothing worth a clean shutdown: killed at once.
        "--KernelManager.shutdown_wait_time=0.5",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root in a container
    log = base / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = LabServer(root, port, token)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not server.ready():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def page(browser, lab: LabServer):
    """One page with JupyterLab loaded, for the whole session. Every request that leaves
    127.0.0.1 from the start on is aborted and listed in `page.blocked`."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []

    def route(r) -> None:
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.blocked = blocked
    page.goto(lab.url("lab") + "&reset")  # a fresh workspace: no tabs
    page.wait_for_function("() => window.jupyterapp", timeout=START_TIMEOUT * 1000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    yield page
    context.close()


START_JS = """
({path}) => {
  const app = window.jupyterapp;
  window.runs = window.runs || {};
  window.runs[path] = (async () => {
    const panel = await app.commands.execute("docmanager:open", {path, options: {activate: false}});
    await panel.context.ready;
    await panel.sessionContext.ready;
    const notebook = panel.content;
    while (notebook.widgets.length === 0) await new Promise((r) => setTimeout(r, 50));
    // This panel's cells (widgetId, as Lab's cell toolbar names it), not the focused tab's.
    await app.commands.execute("notebook:run-all-cells", {widgetId: panel.id, activate: false});
    const errors = [];
    for (const cell of notebook.widgets) {
      if (cell.model.type !== "code") continue;
      for (const output of cell.model.outputs.toJSON()) {
        if (output.output_type === "error") errors.push(output.ename + ": " + output.evalue);
      }
    }
    return errors;
  })();
}
"""
SHOW_JS = """
async ({path}) => {
  const errors = await window.runs[path];
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets("main")).find((w) => w.context?.path === path);
  app.shell.activateById(panel.id);
  await panel.revealed;
  return errors;
}
"""
CLOSE_JS = """
async ({path}) => {
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets("main")).find((w) => w.context?.path === path);
  await panel.sessionContext.shutdown();
  panel.dispose();
}
"""


class Notebooks:
    """Notebooks run in the session's Lab page: `start(name)` opens and runs one without waiting
    (Lab runs them side by side, each in its own kernel), `show(name)` waits for it to finish
    and brings its tab to the front, `close(name)` shuts its kernel down and closes it unsaved."""

    def __init__(self, page) -> None:
        self.page = page

    def start(self, name: str) -> None:
        self.page.evaluate(START_JS, {"path": name})

    def show(self, name: str, timeout: float = 300) -> None:
        self.page.set_default_timeout(timeout * 1000)
        errors = self.page.evaluate(SHOW_JS, {"path": name})
        assert errors == [], f"{name}: cells raised {errors}"
        self.page.set_default_timeout(30_000)  # from here on each step is one small render

    def close(self, name: str) -> None:
        self.page.evaluate(CLOSE_JS, {"path": name})


@pytest.fixture(scope="session")
def notebooks(page) -> Notebooks:
    return Notebooks(page)
