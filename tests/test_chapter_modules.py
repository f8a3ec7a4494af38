"""The rule of CONTRIBUTING.md "Where does code go", checked on the chapter modules.

`chapters/` holds example data, figures, widget frames and exercise checkers; the lesson itself is
in the notebooks. Two symptoms of a second library growing there are checked: a chapter module
importing another one (shared code belongs in a core module), and a chapter module defining a
torch module (a model or a layer belongs in a core module, where every chapter can reach it).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from torch import nn

CHAPTERS = Path(__file__).resolve().parent.parent / "src" / "transformer_course" / "chapters"
MODULES = sorted(CHAPTERS.glob("ch[0-9][0-9]_*.py"))


def chapter_imports(path: Path) -> list[str]:
    """The chapter modules that `path` imports, however the import is spelled."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if node.level == 1 and not module:  # from . import ch01_attention
                found += [n for n in names if n.startswith("ch")]
            elif module.split(".")[-1].startswith("ch") and (
                node.level == 1 or module.startswith("transformer_course.chapters.")
            ):
                found.append(module)
            elif module == "transformer_course.chapters":
                found += [n for n in names if n.startswith("ch")]
        elif isinstance(node, ast.Import):
            prefix = "transformer_course.chapters."
            found += [a.name for a in node.names if a.name.startswith(prefix)]
    return found


def test_there_are_chapter_modules():
    assert len(MODULES) >= 10, [p.name for p in MODULES]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_chapter_module_imports_another(path):
    assert chapter_imports(path) == [], f"{path.name} imports another chapter module"


def test_the_detector_sees_every_spelling(tmp_path):
    spellings = [
        "from . import ch01_attention as ch01",
        "from .ch09_training import moving_average",
        "from transformer_course.chapters.ch09_training import x",
        "from transformer_course.chapters import ch09_training",
        "import transformer_course.chapters.ch09_training",
    ]
    for line in spellings:
        path = tmp_path / "mod.py"
        path.write_text(line + "\n")
        assert chapter_imports(path), line
    path.write_text("from ..measure import entropy\nfrom .. import plots\n")
    assert chapter_imports(path) == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_chapter_module_defines_a_torch_module(path):
    module = importlib.import_module(f"transformer_course.chapters.{path.stem}")
    classes = inspect.getmembers(module, inspect.isclass)
    defined_here = [cls for _, cls in classes if cls.__module__ == module.__name__]
    assert not [cls.__name__ for cls in defined_here if issubclass(cls, nn.Module)]
