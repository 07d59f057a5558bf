"""A fleet plan on a real Ray cluster: a local head on the loopback interface, started by this module's fixture
(2 CPUs, bounded by :data:`HEAD_START_S`) and stopped by its process id when the module ends; a head named in
RABIT_TEST_RAY_ADDRESS / RABIT_TEST_RAY_DIR is used instead if it answers (a head started long before the module
runs may be gone by then: then a fresh one is started here),
the plan run by ``rabit fleet plan --ray`` in a process of its own, compared with the local executor's JSON byte
for byte; a Ray worker killed by its PID mid-plan, and the plan still the same; ``RABIT_RAY_ADDRESS`` and ``auto``
join the same cluster.

Ray is an optional extra: without it these tests are skipped, unless RABIT_REQUIRE_RAY is set (CI), where a
missing Ray is a failure. So is a head that does not start: skipped on a developer's machine, a failure under CI
(RABIT_CI or RABIT_REQUIRE_RAY).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import live
import pytest
from test_fleet_plan import FLEET as PLAN_FLEET

from cli.main import main
from executors import ray_head

HAVE_RAY = importlib.util.find_spec("ray") is not None
if not HAVE_RAY and not os.environ.get("RABIT_REQUIRE_RAY"):
    pytest.skip('Ray is not installed (pip install -e ".[ray]")', allow_module_level=True)

#: The plan of tests/test_fleet_plan.py with spares for H100 and its cost ranges on: every round of units runs on the
#: cluster.
FLEET = PLAN_FLEET.replace("ranges: false", "ranges: true") + (
    "availability:\n  h100-sxm: {failure_rate_per_gpu_hour: 2.0e-5, repair_hours: 24}\n"
)


#: How long the fixture's head may take to answer [s]: about 5 s on an idle 2-core machine, a minute and more on one
#: loaded by other jobs.
HEAD_START_S = 240.0


@pytest.fixture(scope="module")
def cluster():
    """(address, the head's process id, its directory): a head named in RABIT_TEST_RAY_ADDRESS / RABIT_TEST_RAY_DIR
    that answers now, else one started here (2 CPUs, loopback) and stopped by its process id when the module ends.

    The head's files go to a directory of its own under the system's temp dir, not pytest's numbered one, which a
    concurrent pytest session rotates away (sockets and all) while the head runs."""
    assert HAVE_RAY, "RABIT_REQUIRE_RAY is set but Ray is not installed"
    address, where = os.environ.get("RABIT_TEST_RAY_ADDRESS"), os.environ.get("RABIT_TEST_RAY_DIR")
    if address and where and (Path(where) / "head.pid").exists() and ray_head.answers(address):
        yield address, int((Path(where) / "head.pid").read_text()), Path(where)
        return
    d = Path(tempfile.mkdtemp(prefix="rabit-test-ray-"))
    try:
        address, pid = ray_head.start(d, num_cpus=2, timeout_s=HEAD_START_S)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(d, ignore_errors=True)
        if live.in_ci() or os.environ.get("RABIT_REQUIRE_RAY"):
            pytest.fail(f"no Ray head could be started for the fleet tests: {exc}")
        pytest.skip(f"no Ray head could be started: {exc}")
    try:
        yield address, pid, d
    finally:
        ray_head.stop(d)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    f.write_text(FLEET)
    return f


@pytest.fixture(scope="module")
def local_json(fleet_file):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fleet", "plan", str(fleet_file), "--workers", "1", "--quiet", "--json"]) == 0
    return out.getvalue()


def _rabit(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """``rabit`` in a process of its own (a Ray driver never shares this one, which forks worker pools)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=Path(__file__).resolve().parent.parent,
    )


def _finish(p: subprocess.Popen, timeout_s: float = 300) -> str:
    out, err = p.communicate(timeout=timeout_s)
    assert p.returncode == 0, err[-3000:]
    return out


def test_a_plan_on_the_ray_cluster_gives_the_local_json(cluster, fleet_file, local_json):
    address, _, _ = cluster
    out = _finish(_rabit(["fleet", "plan", str(fleet_file), "--ray", address, "--json"]))
    assert out == local_json
    plan = json.loads(out)
    assert plan["robust"]["cost_per_hour"] >= plan["nominal"]["cost_per_hour"]
    assert all("cost_per_hour" in w["ranges"] for w in plan["workloads"])


def _workers_running(head_pid: int, name: str) -> list[int]:
    """The head's descendants that are running a task named ``name`` (Ray titles a busy worker ``ray::NAME``)."""
    out = []
    for pid in ray_head.descendants(head_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if cmd.startswith(f"ray::{name}"):
            out.append(pid)
    return out


def test_a_ray_worker_killed_mid_plan_is_retried_and_the_plan_is_the_same(cluster, fleet_file, local_json):
    address, head_pid, _ = cluster
    p = _rabit(["fleet", "plan", str(fleet_file), "--json"], env={"RABIT_RAY_ADDRESS": address})
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 240
        while p.poll() is None and time.monotonic() < deadline and not killed:
            for pid in _workers_running(head_pid, "run_unit"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.append(pid)
                return
            time.sleep(0.05)

    t = threading.Thread(target=kill_one, daemon=True)
    t.start()
    out = _finish(p)
    t.join(5)
    assert killed, "no Ray worker was seen running a unit"
    assert out == local_json


def test_auto_joins_the_cluster_started_on_this_machine(cluster, tmp_path):
    _, _, where = cluster
    f = tmp_path / "one.yaml"
    f.write_text(
        "workloads:\n  - {name: code, model: llama-3.1-8b, rate_per_s: 5, input_tokens: 500, output_tokens: 100}\n"
        "constraints: {gpus: [h100-sxm, mi300x]}\n"
        "settings: {requests_per_simulation: 100, max_simulations: 2, ranges: false}\n"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fleet", "plan", str(f), "--workers", "1", "--quiet", "--json"]) == 0
    # `ray start` leaves the head's address in <temp dir>/ray_current_cluster; Ray looks in $RAY_TMPDIR/ray
    got = _finish(
        _rabit(["fleet", "plan", str(f), "--ray", "auto", "--json", "--quiet"], env={"RAY_TMPDIR": str(where)})
    )
    assert got == out.getvalue()


def test_the_next_experiments_re_runs_on_the_cluster_give_the_local_json(cluster):
    address, _, _ = cluster
    args = (
        "next-experiment --model llama-3.1-8b --rate 2 --input 500 --output 100 --requests 100 --max-simulations 2 "
        "--gpus-allowed h100-sxm,mi300x --points-per-side 1 --json"
    ).split()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    assert _finish(_rabit([*args, "--ray", address])) == out.getvalue()
