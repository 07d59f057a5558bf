"""House rules a machine can check: imports go pages -> dashboard -> core, and every page runs."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
FORBIDDEN_IN_CORE = ("streamlit", "plotly", "dashboard", "pages", "cli", "matplotlib")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_no_ui_or_upper_layer():
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & set(FORBIDDEN_IN_CORE))
                 for p in (ROOT / "core").rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_dashboard_does_not_import_pages():
    for p in (ROOT / "dashboard").rglob("*.py"):
        assert "pages" not in _imports(p), p


def test_importing_core_loads_no_streamlit():
    code = ("import importlib, pkgutil, sys, core\n"
            "for m in pkgutil.walk_packages(core.__path__, 'core.'): importlib.import_module(m.name)\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly')]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


PAGE_FILES = sorted(p.name for p in (ROOT / "pages").glob("*.py"))


@pytest.mark.parametrize("page", PAGE_FILES)
def test_every_page_runs_without_exception(page, clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"../pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title, f"{page} shows no title"
