"""The wheel holds everything the dashboard and the CLI import or read.

``pip install .`` (not editable) into a fresh virtual environment, then, from a folder outside the checkout:
``rabit speed ... --json``, ``rabit diagnose --prometheus`` to its clean connection error, the dashboard's
health endpoint, and one page through ``AppTest`` on the installed ``app.py``. The third-party packages come
from this test run's environment through a ``.pth`` line (paths only: its editable finder of this checkout
is not loaded), so the fresh environment holds exactly one copy of RA-BIT, the installed one.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from tests.live import free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if Path(p).is_dir()]
    # after the venv's own site-packages: the installed rabit is found first
    (Path(purelib) / "zz_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=venv.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return venv, Path(purelib), env


def _run(venv, env, *args, timeout=120):
    return subprocess.run(
        [str(venv / "bin" / a) if i == 0 else a for i, a in enumerate(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=venv.parent,
    )


def test_the_installed_packages_are_the_wheels_not_the_checkout(installed):
    venv, purelib, env = installed
    code = (
        "import core, cli, dashboard, store, connectors, executors, pages; "
        "print(core.__file__, connectors.__file__, executors.__file__)"
    )
    r = _run(venv, env, "python", "-c", code)
    assert r.returncode == 0, r.stderr
    assert all(str(purelib) in p for p in r.stdout.split()), r.stdout
    for data in ("catalogs/gpus.toml", "catalogs/models/llama-3.1-8b.json", "validation/serving.csv"):
        assert (purelib / data).is_file(), data


def test_the_installed_cli_answers(installed):
    venv, _, env = installed
    r = _run(venv, env, "rabit", "speed", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"] == "llama-3.1-8b" and out["decode_step_s"] > 0
    r = _run(venv, env, "rabit", "diagnose", "--prometheus", "http://127.0.0.1:1", "--timeout-s", "2")
    assert r.returncode == 2 and "cannot reach" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_installed_dashboard_serves_and_draws_a_page(installed):
    venv, purelib, env = installed
    app = purelib / "dashboard" / "app.py"
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "python"), "-m", "streamlit", "run", str(app), "--server.port", str(port)]
        + ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=venv.parent,
        env={**env, "RABIT_NO_WARM": "1", "RABIT_DATA_DIR": str(venv.parent / "data")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, timeout_s=90)
        assert urllib.request.urlopen(url + "/", timeout=10).status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    page = (
        "from streamlit.testing.v1 import AppTest\n"
        f"at = AppTest.from_file({str(app)!r}, default_timeout=120).run()\n"
        "at.switch_page('../pages/speed.py').run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print(at.title[0].value)\n"
    )
    r = _run(venv, {**env, "RABIT_DATA_DIR": str(venv.parent / "data")}, "python", "-c", page, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip(), "the Speed page shows a title"
