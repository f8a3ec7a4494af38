"""Fixtures for the browser tests: the built book served on 127.0.0.1 and a headless Chromium.

Chromium is Debian's (`/usr/bin/chromium`, `chromium-browser`, or `$CHROMIUM`), driven by
Playwright for Python through `executable_path`; Playwright never downloads a browser here.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"

# Headless, and nothing that phones home: with no network, Chromium's background services would
# otherwise fail (and log) at every start.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def find_chromium() -> str | None:
    """Path of a Chromium: $CHROMIUM, /usr/bin/chromium, or chromium / chromium-browser on PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for candidate in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def book_url() -> Iterator[str]:
    """Base URL (ending in /) of _build/html served by http.server in a thread on a free port."""
    handler = functools.partial(_QuietHandler, directory=str(BUILD))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        message = (
            "Chromium not found (looked at $CHROMIUM, /usr/bin/chromium, chromium-browser). "
            "Install Debian's package: sudo apt-get install chromium, or set CHROMIUM=/path/to/it."
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def browser(chromium_path: str):
    """One headless Chromium for the session; each test opens its own fresh context."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # launch() gives the browser a fresh, temporary user-data dir (deleted on close).
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
