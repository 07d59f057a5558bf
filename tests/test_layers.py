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
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & set(FORBIDDEN_IN_CORE)) for p in (ROOT / "core").rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_dashboard_does_not_import_pages():
    for p in (ROOT / "dashboard").rglob("*.py"):
        assert "pages" not in _imports(p), p


def test_importing_core_loads_no_streamlit():
    code = (
        "import importlib, pkgutil, sys, core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'core.'): importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_pages_import_only_dashboard():
    """A page gathers inputs, calls dashboard and draws: no core, no plotting, no other first-party package."""
    allowed = {"dashboard", "streamlit", "pandas", "__future__"} | set(sys.stdlib_module_names)
    offenders = {p.name: sorted(_imports(p) - allowed) for p in (ROOT / "pages").glob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_cli_imports_no_dashboard():
    for p in (ROOT / "cli").rglob("*.py"):
        assert not _imports(p) & {"dashboard", "pages", "streamlit", "plotly"}, p


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> first-party modules it imports anywhere in the file (function-local imports included,
    ``if TYPE_CHECKING:`` blocks excluded): a cycle hidden behind a local import is still a cycle."""
    files = {_module_name(p): p for pkg in ("core", "cli", "dashboard") for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files}
        deps = set()
        for t in targets:
            while t and t not in files:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):  # a package's own __init__ is not a cycle
                deps.add(t)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_anywhere():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


PAGE_FILES = sorted(p.name for p in (ROOT / "pages").glob("*.py"))


@pytest.mark.parametrize("page", PAGE_FILES)
def test_every_page_runs_without_exception(page, clear_cache):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"../pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title, f"{page} shows no title"


def test_the_api_hands_pages_no_computation():
    """dashboard.api keeps choices, formatters, types, limits and errors: what a page calls to compute, parse or
    fetch is a cached function of dashboard.cache."""
    import inspect

    import dashboard.api as api

    computing = [
        n
        for n in api.__all__
        if callable(obj := getattr(api, n))
        and not isinstance(obj, type)
        and not n.startswith("fmt_")
        and not (inspect.ismodule(obj) and n == "choices")
    ]
    assert computing == []
    assert not [n for n in api.__all__ if inspect.ismodule(getattr(api, n)) and n != "choices"]
