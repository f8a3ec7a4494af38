"""Sphinx extension for the book build (loaded by _config.yml, `sphinx.local_extensions`).

- Stops an HTML build early, saying how to fix it, when the front-end files that `make book` fetches
  are missing: without them every widget would be blank and every formula raw TeX, silently.
- Makes `repository.url` in _config.yml the one switch for every repository link. Set, it switches
  on the repository, issue and edit buttons (Jupyter Book's defaults say `false`, and Jupyter Book
  refuses `true` without a URL) next to the Binder and Colab launch buttons; Colab opens only GitHub
  repositories, so for any other host its button is dropped instead of warning on every page.
  Empty, it drops the launch buttons: sphinx-book-theme cannot build them without a repository and
  would crash on every notebook page.
- Loads MathJax on every page, not only on pages with equations in their body: chapter titles with
  maths (e.g. "Why divide by $\\sqrt{d_k}$") appear in the navigation of every page, search and
  index included, and would otherwise show as raw TeX there.
- Unhooks sphinx-thebe (Jupyter Book always loads it): the book has no live-code button, and the
  extension writes its inline setup script twice, which throws "Identifier 'THEBE_JS_URL' has
  already been declared" in the console of every page.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

# Paths inside html_static_path (they end up under _build/html/_static/).
REQUIRED_ASSETS = (
    "vendor/html-manager/embed.js",
    "vendor/mathjax/es5/tex-mml-chtml.js",
    "mathjax-hub-shim.js",
    "widget-a11y.js",
    "book.css",
)


REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")


def _repository_buttons(app: Sphinx, config: Config) -> None:
    options = config.html_theme_options
    url = options.get("repository_url")
    if not url:
        options.pop("launch_buttons", None)
        return
    for button in REPOSITORY_BUTTONS:
        options[button] = True
    launch = options.get("launch_buttons") or {}
    if "github.com" not in url.lower():
        launch.pop("colab_url", None)


# The sphinx-thebe handlers that add its scripts and page nodes (its static path, which serves the
# stylesheet it registers, stays).
THEBE_HANDLERS = {"init_thebe_core", "update_thebe_context"}


def _unhook_thebe(app: Sphinx, config: Config) -> None:
    for listeners in app.events.listeners.values():
        for listener in list(listeners):
            handler = listener.handler
            if (
                getattr(handler, "__module__", "").startswith("sphinx_thebe")
                and getattr(handler, "__name__", "") in THEBE_HANDLERS
            ):
                app.disconnect(listener.id)


def _check_assets(app: Sphinx) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    static_dirs = [Path(app.confdir, path) for path in app.config.html_static_path]
    missing = [rel for rel in REQUIRED_ASSETS if not any((d / rel).is_file() for d in static_dirs)]
    if missing:
        raise ConfigError(
            f"front-end assets missing from _assets/ (html_static_path): {missing}. "
            "Run `make assets` (npm ci + tools/fetch_assets.py) or `make book`."
        )


def setup(app: Sphinx) -> dict[str, bool]:
    app.set_html_assets_policy("always")  # MathJax on every page (titles in the navigation)
    app.connect("config-inited", _repository_buttons)
    app.connect("config-inited", _unhook_thebe)
    app.connect("builder-inited", _check_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
