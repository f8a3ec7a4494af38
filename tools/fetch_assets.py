"""Fetch the book's front-end files at pinned versions and lay them out for Sphinx.

The static book works with no network, so it serves its own copies of @jupyter-widgets/html-manager
(renders saved widget state with no kernel) and MathJax 3, pinned in package.json and
package-lock.json: `npm ci` when node_modules differs, then a copy into _assets/ (never committed).

Usage: python tools/fetch_assets.py [--force]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
OUT = ROOT / "_assets"

HTML_MANAGER = "@jupyter-widgets/html-manager"
MATHJAX = "mathjax"
# Font files html-manager's embed.js loads from its own folder (Font Awesome, for icons in widgets).
FONT_SUFFIXES = {".woff2", ".woff", ".ttf", ".eot", ".svg"}
# Parts of MathJax's es5 tree besides the combined component: the CHTML fonts, and what the TeX
# input, the menu and the accessibility extensions load on demand.
MATHJAX_PARTS = ["input", "output/chtml", "ui", "a11y", "sre", "adaptors"]


def pinned_versions() -> dict[str, str]:
    """The exact versions package.json asks for (they must be exact: no ^ or ~ ranges)."""
    deps = json.loads((ROOT / "package.json").read_text())["dependencies"]
    for name, version in deps.items():
        if not version[:1].isdigit():
            raise SystemExit(f"package.json: {name} must be pinned exactly, got {version!r}")
    return deps


def installed_version(name: str) -> str | None:
    manifest = NODE_MODULES / name / "package.json"
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text()).get("version")


def npm_ci() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "npm not found: it fetches the book's front-end files (widgets, MathJax).\n"
            "Install Node.js and npm (Debian/Ubuntu: sudo apt-get install nodejs npm), then re-run."
        )
    cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def lay_out() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)

    manager_dist = NODE_MODULES / HTML_MANAGER / "dist"
    manager_out = OUT / "vendor" / "html-manager"
    copy_file(manager_dist / "embed.js", manager_out / "embed.js")
    for src in sorted(manager_dist.iterdir()):
        if src.suffix in FONT_SUFFIXES or src.name.endswith("LICENSE.txt"):
            copy_file(src, manager_out / src.name)

    mathjax = NODE_MODULES / MATHJAX
    mathjax_out = OUT / "vendor" / "mathjax"
    copy_file(mathjax / "LICENSE", mathjax_out / "LICENSE")
    copy_file(mathjax / "es5" / "tex-mml-chtml.js", mathjax_out / "es5" / "tex-mml-chtml.js")
    for part in MATHJAX_PARTS:
        shutil.copytree(mathjax / "es5" / part, mathjax_out / "es5" / part)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="run npm ci even if up to date")
    args = parser.parse_args(argv)

    pins = pinned_versions()
    if args.force or any(installed_version(name) != version for name, version in pins.items()):
        npm_ci()
    for name, version in pins.items():
        got = installed_version(name)
        if got != version:
            raise SystemExit(f"node_modules/{name}: expected version {version}, got {got}")

    lay_out()
    n_files = sum(1 for p in OUT.rglob("*") if p.is_file())
    size_mb = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file()) / 1e6
    pinned = ", ".join(f"{k}@{v}" for k, v in pins.items())
    where = OUT.relative_to(ROOT)
    print(f"front-end assets: {pinned} -> {where}/ ({n_files} files, {size_mb:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
