"""Functions stay short enough to read: McCabe complexity 10 at most outside the compiled simulator engine.

The engine (``core/serving/sim``: the numba loops ``jit_*.py``, their runners ``compiled*.py``, the Python
replicas loop and engine) keeps its event loops whole, one branch per event kind. Everywhere else a function over
10 names more than one step of the work: split it where a step ends (the optimizer's ``recommend``: the screen,
the simulation rounds, the pick, the nearest). Two functions are over it today and may not be joined by a third;
the count only goes down.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCOPE = ("core", "dashboard", "cli", "pages")
MAX_COMPLEXITY = 10
#: The engine's files, whose event loops are left whole.
ENGINE = re.compile(r"^core/serving/sim/(jit_[^/]*|compiled[^/]*|replicas|engine)\.py$")
#: Functions over :data:`MAX_COMPLEXITY` outside the engine today: ``StepModel.from_deployment``
#: (core/physics/step.py).
MOST_OVER = 1


def _over() -> list[str]:
    """'path:line name (complexity)' of each function over :data:`MAX_COMPLEXITY` outside the engine."""
    cmd = [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "C901"]
    cmd += ["--config", f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", "--output-format", "json", *SCOPE]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:  # pragma: no cover - ruff is a test dependency
        pytest.skip("ruff is not installed")
    if done.returncode not in (0, 1) or not done.stdout.strip():
        pytest.skip(f"ruff did not run: {done.stderr.strip()[:200]}")
    out = []
    for d in json.loads(done.stdout):
        rel = Path(d["filename"]).resolve().relative_to(ROOT).as_posix()
        if not ENGINE.match(rel):
            out.append(f"{rel}:{d['location']['row']} {d['message']}")
    return sorted(out)


def test_no_new_function_over_complexity_10():
    over = _over()
    assert len(over) <= MOST_OVER, (
        f"{len(over)} functions over McCabe complexity {MAX_COMPLEXITY} outside the engine (at most {MOST_OVER}): "
        "split the new one where one step of its work ends\n" + "\n".join(over)
    )


def test_the_engine_pattern_names_the_engine_files():
    """The exemption covers the engine's files and nothing beside them."""
    assert ENGINE.match("core/serving/sim/jit_loop.py") and ENGINE.match("core/serving/sim/compiled_disagg.py")
    assert ENGINE.match("core/serving/sim/engine.py") and ENGINE.match("core/serving/sim/replicas.py")
    assert not ENGINE.match("core/serving/session_compiled.py")
    assert not ENGINE.match("core/decision/optimizer.py")
    engine_files = [p for p in (ROOT / "core/serving/sim").glob("*.py") if ENGINE.match(p.relative_to(ROOT).as_posix())]
    assert len(engine_files) >= 4
