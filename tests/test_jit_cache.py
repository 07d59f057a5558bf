"""The compiled loop's on-disk cache follows its sources: an edit to any engine file changes the next process's
result without a cache cleared (core.serving.sim.jit_cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.serving import ENGINE_SOURCES, engine_source_hash

ROOT = Path(__file__).resolve().parents[1]
SIM = "core/serving/sim"

# One small run on the compiled loop: which loop ran it and the deployment's peak KV fraction, which the engine
# records as (full_share x full blocks) / blocks in jit_parts.record.
SCRIPT = """
import json
from core.config import RabitConfig
from core.serving import SimSpec, simulate
r = simulate(RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1),
             SimSpec(num_requests=200, rate_per_s=40.0, kv_pool_tokens=20_000))
print(json.dumps({"loop": r.loop, "kv_peak": max(r.ts_kv_frac), "file": __import__("core").__file__}))
"""


def test_the_hash_covers_every_engine_module_and_moves_with_each_byte(tmp_path):
    here = ROOT / SIM
    # every module the compiled functions import from the simulator's package is hashed
    imported = set()
    for name in ENGINE_SOURCES:
        for line in (here / name).read_text().splitlines():
            if line.startswith("from core.serving.sim."):
                imported.add(line.split()[1].rsplit(".", 1)[1] + ".py")
    assert imported <= set(ENGINE_SOURCES)
    assert {p.name for p in here.glob("jit_*.py")} <= set(ENGINE_SOURCES)
    for name in ENGINE_SOURCES:
        shutil.copy(here / name, tmp_path / name)
    before = engine_source_hash(tmp_path)
    assert before == engine_source_hash(tmp_path)  # deterministic
    for name in ENGINE_SOURCES:
        p = tmp_path / name
        text = p.read_bytes()
        p.write_bytes(text + b"\n")
        assert engine_source_hash(tmp_path) != before, name
        p.write_bytes(text)
    assert engine_source_hash(tmp_path) == before


def _run(tree: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(tree)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a compile of the loop in a fresh process (two where the checkout's cache is cold): 20-40 s
def test_an_edit_to_an_inlined_engine_function_changes_the_next_runs_result(tmp_path):
    # A copy of the package (and the catalogs it reads), so its __pycache__ is its own, holding only the compiled
    # loop's cache as the checkout has it (warm where anything ran the loop before: CI warms it before the tests).
    # The first run loads that cache, or compiles into it where it is cold or stale: either way the copy's cache
    # holds the loop's machine code from before the edit, which is what the edit must not leave running.
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "core", tree / "core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "catalogs", tree / "catalogs", ignore=shutil.ignore_patterns("__pycache__"))
    cache = tree / SIM / "__pycache__"
    cache.mkdir()
    for f in (ROOT / SIM / "__pycache__").glob("*.nb[ic]"):
        shutil.copy2(f, cache / f.name)
    first = _run(tree)
    assert first["file"].startswith(str(tree))
    assert first["loop"] == "compiled"
    assert 0.0 < first["kv_peak"] <= 1.0
    indexes = {f.name: f.stat().st_mtime_ns for f in cache.glob("jit_loop.*.nbi")}
    assert indexes  # the loop's machine code is in the copy's cache
    # jit_parts.record is inlined into its callers in jit_loop and jit_engine, whose files do not change: numba's
    # own per-file stamp kept their old machine code. Doubling the recorded KV fraction must show in the next run.
    parts = tree / SIM / "jit_parts.py"
    text = parts.read_text()
    line = "TSF[3, n] = used(fs, RI, RF, e) * inv_P"
    assert text.count(line) == 1
    parts.write_text(text.replace(line, line + " * 2.0"))
    second = _run(tree)
    assert second["loop"] == "compiled"
    assert second["kv_peak"] == pytest.approx(2.0 * first["kv_peak"], rel=1e-12)
    # the recompile replaced the loop's stale index in the cache (the next process loads the edited code)
    assert any(cache.joinpath(n).stat().st_mtime_ns != t for n, t in indexes.items())


def test_every_engine_function_is_compiled_with_the_engines_options():
    """Each compiled function of the engine's sources is a numba dispatcher built with jit_cache.OPTIONS: no GIL
    held and no runtime (no reference counts on the arrays handed between the inlined helpers), and its cache
    stamped with the engine's hash. A function decorated with a bare ``njit`` would miss both."""
    import importlib

    from numba.core.registry import CPUDispatcher

    import core.serving.sim.jit_cache as jit_cache

    seen = 0
    for name in ENGINE_SOURCES:
        module = importlib.import_module(f"core.serving.sim.{name[:-3]}")
        for attr, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__:
                seen += 1
                for key, value in jit_cache.OPTIONS.items():
                    assert obj.targetoptions.get(key) == value, f"{module.__name__}.{attr}: {key}"
                assert isinstance(obj._cache, jit_cache._EngineCache), f"{module.__name__}.{attr}"
    assert seen >= 40  # the engine's functions (about a hundred): the walk found them


def test_the_warm_up_loads_every_compiled_loop():
    """``warm_simulator`` (the dashboard's start-up, CI before its test processes) runs each compiled loop once, so
    no page and no test worker compiles one later: in a fresh process every loop's entry has a compiled signature
    after it, and none before."""
    script = """
import json
import core.serving.sim.jit_disagg as d, core.serving.sim.jit_loop as a, core.serving.sim.jit_sessions as s
loops = {"aggregated": a.loop, "disaggregated": d.loop, "sessions": s.s_loop}
before = {k: len(f.signatures) for k, f in loops.items()}
from core.serving import warm_simulator
warm_simulator()
print(json.dumps({"before": before, "after": {k: len(f.signatures) for k, f in loops.items()}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == {"aggregated": 0, "disaggregated": 0, "sessions": 0}
    # replicas with adapters run the aggregated loop on the same record types: one signature serves both
    assert got["after"] == {"aggregated": 1, "disaggregated": 1, "sessions": 1}
