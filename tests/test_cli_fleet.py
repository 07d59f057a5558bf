"""``rabit fleet``: the JSON keys of the contract, bad input as exit 2 with one line naming the flag (or the
workload and field of the file), the range flags, a config.json beside the file, and ``--scenarios``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from core.config import EXAMPLE, parse_fleet

ROOT = Path(__file__).resolve().parent.parent
#: One workload on one kind, the optimizer at its smallest (a plan in about a second).
TINY = """\
workloads:
  - {name: code, model: llama-3.1-8b, rate_per_s: 5, input_tokens: 500, output_tokens: 100, p95_ttft_s: 1,
     p95_itl_s: 0.05}
scenarios:
  - {name: peak, rate_factor: 1.5}
  - {name: long, input_factor: 2}
constraints: {gpus: [h100-sxm]}
settings: {requests_per_simulation: 100, max_simulations: 2, ranges: false}
"""
CONTRACT = {"workloads", "totals", "robust", "nominal", "robustness_cost_per_hour", "power_kw", "infeasible"}


@pytest.fixture
def tiny(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(TINY)
    return f


def _fail(args, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rabit"), err
    return err


def _json(args, capsys) -> dict:
    capsys.readouterr()
    assert main(args + ["--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_plan_has_the_contracts_keys(tiny, capsys):
    out = _json(["fleet", "plan", str(tiny), "--workers", "1"], capsys)
    assert CONTRACT <= set(out)
    (w,) = out["workloads"]
    assert w["name"] == "code" and w["gpu"] == "h100-sxm" and w["cost_per_hour"] > 0 and "ranges" in w
    # the pick carries every field of the recommendation's pick (the layout, precisions, replicas, p95s, label)
    assert {"gpus_per_replica", "tp", "pp", "ep", "weights", "kv_dtype", "replicas", "p95_ttft_s", "label"} <= set(w)
    assert out["totals"]["gpus"] == {"h100-sxm": w["gpus"]} and out["totals"]["cost_per_hour"] == w["cost_per_hour"]
    assert out["robust"]["cost_per_hour"] >= out["nominal"]["cost_per_hour"]
    assert out["robustness_cost_per_hour"] == pytest.approx(
        out["robust"]["cost_per_hour"] - out["nominal"]["cost_per_hour"]
    )
    assert out["power_kw"] > 0 and out["infeasible"] == [] and set(out["scenarios"]) == {"peak", "long"}


def test_the_plan_exports_as_a_table(tiny, tmp_path, capsys):
    import csv

    out = tmp_path / "plan.csv"
    j = _json(["fleet", "plan", str(tiny), "--workers", "1", "--scenarios", "peak", "--csv", str(out)], capsys)
    rows = list(csv.DictReader(out.open()))
    assert [r["plan"] for r in rows] == ["nominal", "robust", "peak"] and rows[0]["workload"] == "code"
    assert float(rows[0]["cost_per_hour"]) == j["workloads"][0]["cost_per_hour"]
    err = _fail(["fleet", "plan", str(tiny), "--csv", str(tmp_path / "no" / "such" / "dir.csv")], capsys)
    assert "--csv" in err


def test_scenarios_can_be_chosen_and_an_unknown_one_is_named(tiny, capsys):
    out = _json(["fleet", "plan", str(tiny), "--workers", "1", "--scenarios", "long"], capsys)
    assert set(out["scenarios"]) == {"long"}
    err = _fail(["fleet", "plan", str(tiny), "--scenarios", "peek"], capsys)
    assert "--scenarios" in err and "did you mean peak" in err


def test_the_progress_is_one_line_per_finished_unit_on_stderr(tiny, capsys):
    assert main(["fleet", "plan", str(tiny), "--workers", "1", "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("  [") for line in err)
    counts = [tuple(int(x) for x in line.strip().split("]")[0].strip("[").split("/")) for line in err]
    assert [d for d, _ in counts] == list(range(1, len(err) + 1)) and counts[-1][0] == counts[-1][1]


@pytest.mark.parametrize(
    "args, words",
    [
        (["fleet", "plan", "/nonexistent/fleet.yaml"], ("FILE", "cannot read")),
        (["fleet", "plan", "{bad}"], ("FILE", "workload 'code'", "p95_ttft_s")),
        (["fleet", "validate", "{bad}"], ("FILE", "workload 'code'", "p95_ttft_s")),
        (["fleet", "plan", "{tiny}", "--workers", "0"], ("--workers",)),
        (["fleet", "plan", "{tiny}", "--ray", "127.0.0.1:1"], ("--ray", "no Ray head answers")),
        (["fleet", "plan", "{tiny}", "--ray", "nowhere"], ("--ray", "HOST:PORT")),
        (["fleet", "plan", "{tiny}", "--assume", "mbu=7"], ("--assume", "mbu")),
        (["fleet", "plan", "{tiny}", "--bound", "middle"], ("--bound",)),
        (["fleet", "plan", "{tiny}", "--config", "{garbage}"], ("--config",)),
        (["fleet", "plan", "{model_missing}"], ("FILE", "workload 'big'", "config_json")),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(args, words, tiny, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("p95_ttft_s: 1,", "p95_ttft_s: -1,"))
    garbage = tmp_path / "cfg.json"
    garbage.write_text("{not json")
    missing = tmp_path / "missing.yaml"
    missing.write_text(TINY.replace("name: code, model: llama-3.1-8b", "name: big, config_json: nothere.json"))
    files = {"{bad}": bad, "{tiny}": tiny, "{garbage}": garbage, "{model_missing}": missing}
    err = _fail([str(files.get(a, a)) for a in args], capsys)
    for w in words:
        assert w in err, (w, err)


def test_validate_checks_a_file_without_running_it(tiny, capsys):
    assert main(["fleet", "validate", str(tiny), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 1 workload x 1 kind x (nominal + 2 scenarios) optimizer runs at most in the first round
    assert out == {
        "valid": True,
        "workloads": ["code"],
        "scenarios": ["peak", "long"],
        "gpu_kinds": ["h100-sxm"],
        "units": 3,
    }


def test_example_prints_the_smallest_valid_file(capsys):
    assert main(["fleet", "example"]) == 0
    assert parse_fleet(capsys.readouterr().out) == EXAMPLE


def test_a_config_json_beside_the_file_is_the_workloads_model(tmp_path, capsys):
    cfg = json.loads((ROOT / "catalogs" / "models" / "llama-3.1-8b.json").read_text())
    cfg.pop("_rabit")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "my-8b.json").write_text(json.dumps(cfg))
    f = tmp_path / "fleet.yaml"
    f.write_text(TINY.replace("model: llama-3.1-8b", "config_json: models/my-8b.json"))
    ref_file = tmp_path / "ref.yaml"
    ref_file.write_text(TINY)
    out = _json(["fleet", "plan", str(f), "--workers", "1", "--scenarios", "peak"], capsys)
    ref = _json(["fleet", "plan", str(ref_file), "--workers", "1", "--scenarios", "peak"], capsys)
    assert out["workloads"][0]["model"] == "my-8b"
    # the same architecture as the catalog's: the same plan
    assert out["workloads"][0]["label"] == ref["workloads"][0]["label"]
    assert out["totals"] == ref["totals"]


def test_the_range_flags_move_the_plan(tiny, capsys):
    base = _json(["fleet", "plan", str(tiny), "--workers", "1", "--scenarios", "peak"], capsys)
    low = _json(["fleet", "plan", str(tiny), "--workers", "1", "--scenarios", "peak", "--bound", "low"], capsys)
    # every efficiency at its pessimistic bound: never cheaper, never less power
    assert low["nominal"]["cost_per_hour"] >= base["nominal"]["cost_per_hour"]
    assert low["power_kw"] >= base["power_kw"]


#: Run in a process where ``import ray`` fails: RA-BIT without the ``ray`` extra.
_WITHOUT_RAY = """
import contextlib, io, sys
sys.modules["ray"] = None  # what an environment without the extra sees: import ray fails, find_spec is None
import cli.main, dashboard.cache, executors  # every edge that plans a fleet imports without Ray
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert cli.main.main(["fleet", "plan", sys.argv[1], "--workers", "1", "--quiet", "--json"]) == 0
assert sys.modules["ray"] is None
print(out.getvalue(), end="")
cli.main.main(["fleet", "plan", sys.argv[1], "--ray", sys.argv[2], "--quiet", "--json"])
"""


def test_ray_is_an_optional_extra_nothing_else_needs(tiny, tmp_path):
    import subprocess
    import sys
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = [d.split(">")[0].split("[")[0].strip().lower() for d in project["dependencies"]]
    test_extra = [d.split(">")[0].split("[")[0].strip().lower() for d in project["optional-dependencies"]["test"]]
    assert "ray" not in named and "ray" not in test_extra
    assert any(d.startswith("ray") for d in project["optional-dependencies"]["ray"])
    # without Ray a plan runs on the local executor, and --ray says how to install the extra (exit 2, one line)
    p = subprocess.run(
        [sys.executable, "-c", _WITHOUT_RAY, str(tiny), "auto"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert set(json.loads(p.stdout)) >= CONTRACT
    (line,) = [x for x in p.stderr.splitlines() if "rabit" in x]
    assert line.startswith("rabit: error: argument --ray:") and 'pip install -e ".[ray]"' in line


def test_ci_installs_the_ray_extra_and_fails_the_ray_tests_without_it():
    """``.ci/run`` installs the extra and sets RABIT_REQUIRE_RAY before the tests, so a missing Ray fails
    tests/test_fleet_ray.py there instead of skipping it; the head is the fleet tests' own (started by their fixture
    when they run, not before the suite, where it was gone 50 minutes later)."""
    ci = (ROOT / ".ci" / "run").read_text()
    tests = ci.index("python -m pytest")
    assert '".[test,ray]"' in ci[:tests]
    assert "export RABIT_REQUIRE_RAY=1" in ci[:tests]
    assert "ray_head start" not in ci and "RABIT_TEST_RAY_ADDRESS" not in ci
    fixture = (ROOT / "tests" / "test_fleet_ray.py").read_text()
    assert "ray_head.start(" in fixture and "ray_head.stop(" in fixture and "num_cpus=2" in fixture


@pytest.mark.parametrize("required", [False, True])
def test_the_ray_tests_skip_without_ray_unless_required(required):
    """Without Ray, tests/test_fleet_ray.py is skipped; with RABIT_REQUIRE_RAY (CI) it fails, naming why."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ray'] = None; import pytest; "
        "sys.exit(pytest.main(['-rs', '-x', '-p', 'no:cacheprovider', 'tests/test_fleet_ray.py']))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABIT_TEST_RAY", "RABIT_REQUIRE_RAY"))}
    if required:
        env["RABIT_REQUIRE_RAY"] = "1"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    if required:
        assert p.returncode != 0 and "RABIT_REQUIRE_RAY is set but Ray is not installed" in p.stdout, p.stdout[-2000:]
    else:
        # every test skipped (pytest exits 5 when a module skips itself whole), the reason said
        assert p.returncode in (0, 5) and "Ray is not installed" in p.stdout, p.stdout[-2000:]
        assert " passed" not in p.stdout and " failed" not in p.stdout
