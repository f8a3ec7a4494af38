"""Fixtures for the browser tests: the built book served on 127.0.0.1 and a headless Chromium.

Chromium is Debian's (`/usr/bin/chromium`, `chromium-browser`, or `$CHROMIUM`), driven by
Playwright for Python through `executable_path`; Playwright never downloads a browser here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"


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
def screenshot_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
