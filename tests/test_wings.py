"""The floor plan of ``core``: wings that import one way, each behind a short face.

``core`` is eight packages ranked ``base < catalog < config < physics < {serving, training} < operations <
decision`` (``docs/wings.md``). A module imports only modules of its own wing (directly) and of lower wings
(through their face, ``core/<wing>/__init__.py``, and only names the face lists in ``__all__``); serving and
training share a rank and never import each other; the simulator (``core.serving.sim``) is private to
serving. Code outside ``core`` imports only the faces. Function-local imports count: an upward import hidden
in a function is still an upward import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "core"
RANK = {
    "base": 0,
    "catalog": 1,
    "config": 2,
    "physics": 3,
    "serving": 4,
    "training": 4,
    "operations": 5,
    "decision": 6,
}
OUTSIDE = ("cli", "dashboard", "pages", "store", "connectors", "executors", "bench", "tests")
#: First-party packages ``core`` must never import: it computes, the edges store, fetch and measure.
NOT_IN_CORE = {"store", "connectors", "executors", "bench", "dashboard", "pages", "cli", "streamlit", "plotly"}


def _faces() -> dict[str, set[str]]:
    """Wing -> the names its face hands on (its ``__all__``)."""
    out = {}
    for wing in RANK:
        tree = ast.parse((CORE / wing / "__init__.py").read_text())
        names: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                names = {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
        out[wing] = names
    return out


FACES = _faces()


def _wing_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT).parts
    return rel[1] if rel[0] == "core" and len(rel) > 2 else None


def _violations(path: Path, faces: dict[str, set[str]] = FACES) -> list[str]:
    """Every import in ``path`` that breaks the floor plan, as 'line: why'."""
    src = path.read_text()
    tree = ast.parse(src, filename=str(path))
    own = _wing_of(path)
    in_core = path.relative_to(ROOT).parts[0] == "core"
    in_tests = path.relative_to(ROOT).parts[0] == "tests"
    bad: list[str] = []
    wing_aliases: dict[str, str] = {}  # local name -> wing, for ``from core import physics``

    def check_wing(line: int, wing: str, names: list[str], via: str) -> None:
        if wing not in RANK:
            bad.append(f"{line}: {via} names no wing ({wing})")
            return
        if own is not None:
            if (
                wing == own
                and path.name != "__init__.py"
                and not all((CORE / wing / f"{n}.py").exists() for n in names)
            ):
                bad.append(f"{line}: {via} goes through its own wing's face; import the sibling module")
                return
            if wing != own and RANK[wing] >= RANK[own]:
                bad.append(f"{line}: wing {own} imports wing {wing}, which is not below it")
                return
        if wing == own:
            return  # a face gathering its modules, or a sibling module imported by name
        missing = [n for n in names if n not in faces[wing]]
        if missing:
            bad.append(f"{line}: {via} takes {missing}, which the face of core.{wing} does not hand on")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            top = parts[0]
            if in_core and top in NOT_IN_CORE:
                bad.append(f"{node.lineno}: core imports {top}")
            if top != "core":
                continue
            if len(parts) == 1:  # from core import <wing>
                for a in node.names:
                    if a.name not in RANK:
                        bad.append(f"{node.lineno}: 'from core import {a.name}' names no wing")
                    elif own is not None and (RANK[a.name] > RANK[own] or a.name == own or RANK[a.name] == RANK[own]):
                        bad.append(f"{node.lineno}: wing {own} imports wing {a.name}, which is not below it")
                    else:
                        wing_aliases[a.asname or a.name] = a.name
            elif len(parts) == 2:  # from core.<wing> import names
                check_wing(node.lineno, parts[1], [a.name for a in node.names], f"'from {node.module} import'")
            else:  # from core.<wing>.<module> import ...
                if own != parts[1]:
                    bad.append(f"{node.lineno}: 'from {node.module} import' reaches past the face of core.{parts[1]}")
                elif parts[1] != "serving" and "sim" in parts:
                    bad.append(f"{node.lineno}: the simulator is private to serving")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if in_core and parts[0] in NOT_IN_CORE:
                    bad.append(f"{node.lineno}: core imports {parts[0]}")
                if parts[0] != "core":
                    continue
                if len(parts) >= 3 and not in_tests and own != parts[1]:
                    bad.append(f"{node.lineno}: 'import {a.name}' reaches past the face of core.{parts[1]}")
                # tests may import a module itself (``import core.decision.optimizer as opt``) to monkeypatch it
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in wing_aliases:
            wing = wing_aliases[node.value.id]
            if node.attr not in faces[wing]:
                bad.append(f"{node.lineno}: {node.value.id}.{node.attr} is not on the face of core.{wing}")
    return bad


def _files(*tops: str) -> list[Path]:
    return sorted(p for t in tops for p in (ROOT / t).rglob("*.py") if "golden" not in p.parts)


def test_core_is_only_wings():
    loose = [p.name for p in CORE.glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"modules outside the wings: {loose}"
    assert sorted(p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(RANK)
    tree = ast.parse((CORE / "__init__.py").read_text())
    assert all(isinstance(n, ast.Expr) for n in tree.body), "core/__init__.py holds only its docstring"


@pytest.mark.parametrize("wing", sorted(RANK))
def test_each_face_only_hands_names_on(wing):
    """A face holds its docstring, imports from its own wing's modules and ``__all__``: no code, no I/O."""
    tree = ast.parse((CORE / wing / "__init__.py").read_text())
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            assert node.module and node.module.startswith(f"core.{wing}"), ast.unparse(node)
            imported |= {a.asname or a.name for a in node.names}
            continue
        assert isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__", ast.unparse(node)
    assert imported == FACES[wing], "the face's __all__ lists exactly what it imports"
    modules = {p.stem for p in (CORE / wing).glob("*.py")} | {p.name for p in (CORE / wing).iterdir() if p.is_dir()}
    handed_modules = {
        a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == f"core.{wing}" for a in n.names
    }
    shadowed = (FACES[wing] & modules) - handed_modules
    assert not shadowed, f"names on the face hide modules of the same name (import core.{wing}.x breaks): {shadowed}"


#: Wings whose modules stay at about 700 lines at most: a bigger module holds more than one concern.
SMALL_WINGS = ("base", "catalog", "config", "physics", "serving", "training", "operations", "decision")


@pytest.mark.parametrize("wing", SMALL_WINGS)
def test_modules_stay_small(wing):
    big = {
        str(p.relative_to(ROOT)): n for p in (CORE / wing).rglob("*.py") if (n := len(p.read_text().splitlines())) > 700
    }
    assert big == {}, "split these along their seams (docs/wings.md)"


def test_only_the_config_wing_looks_a_config_up():
    """The catalog entries a config names are looked up once, in core.config (resolve); every formula below takes
    the resolved Deployment, and the step model is built only from one."""
    lookups = {"model_of", "gpu_of", "fabric_of"}
    offenders = []
    for p in _files("core"):
        if _wing_of(p) == "config":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in lookups or name == "from_config" and ast.unparse(f).endswith("StepModel.from_config"):
                    offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}: {ast.unparse(f)}")
    assert offenders == []


def test_wings_import_only_lower_wings_through_their_faces():
    offenders = {str(p.relative_to(ROOT)): v for p in _files("core") if (v := _violations(p))}
    assert offenders == {}


def test_code_outside_core_imports_only_the_faces():
    offenders = {str(p.relative_to(ROOT)): v for p in _files(*OUTSIDE) if (v := _violations(p))}
    assert offenders == {}


def test_dashboard_and_cli_import_no_benchmarks():
    for p in _files("dashboard", "cli", "store", "connectors", "executors"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            assert not any(m.split(".")[0] == "bench" for m in mods), f"{p.relative_to(ROOT)} imports bench"


def test_the_checker_finds_each_kind_of_violation(tmp_path, monkeypatch):
    """The rules above can fail: an upward import, a reach past a face, an unlisted name, serving <-> training."""
    cases = {
        "core/physics/x.py": "from core.decision import recommend\n",  # upward
        "core/serving/y.py": "def f():\n    from core.training import plan\n",  # sibling rank, function-local
        "core/decision/z.py": "from core.physics.memory import serving_memory\n",  # past the face
        "cli/w.py": "from core.physics import not_on_the_face\n",  # unlisted name
        "dashboard/v.py": "from core import serving\nserving.hidden_thing()\n",  # unlisted attribute
        "core/decision/u.py": "from core.serving.sim.engine import Engine\n",  # the simulator is private
        "core/base/t.py": "import store\n",  # core imports the store
    }
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    faces = {w: {"recommend", "plan", "serving_memory", "Engine"} for w in RANK}
    for rel, code in cases.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(code)
        assert _violations(p, faces), rel
    ok = tmp_path / "core/decision/ok.py"
    ok.write_text("from core.physics import serving_memory\nfrom core.decision.optimizer import recommend\n")
    assert _violations(ok, faces) == []
