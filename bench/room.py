"""The README's room figures: a dashboard process pinned to a few CPU cores, the load client on others.

    python -m bench.room [--cores 0,1] [--client-cores 2-7] [--json OUT]

For each way of starting the server (``streamlit run``, and ``python -m dashboard.serve``, which imports and
warms the default page before the first visitor) it starts a fresh process on a free loopback port pinned to
``--cores``, then measures with :mod:`bench.load`: one first load alone, 20 first loads at once on the same
fresh server, 10 reruns at once (everyone sets the same arrival rate on the Serving page) and 10 reruns at
once with a different rate each. Linux only (CPU affinity).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import live  # noqa: E402

from bench import load  # noqa: E402


def _cores(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def _server(kind: str, cores: set[int]) -> tuple[subprocess.Popen, str]:
    port = live.free_port()
    common = [
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    cmd = (
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"), *common]
        if kind == "run"
        else [sys.executable, "-m", "dashboard.serve", *common]
    )
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    url = f"http://127.0.0.1:{port}"
    live.wait_healthy(url, proc, 120)
    return proc, url


def scenario(kind: str, cores: set[int], what: str) -> dict:
    proc, url = _server(kind, cores)
    try:
        if kind == "serve":
            time.sleep(0.5)
            deadline = time.time() + 120  # the launcher's own warm-up session
            while time.time() < deadline and not _warmed(url):
                time.sleep(0.5)
        cpu0 = _cpu_s(proc.pid)
        load1 = os.getloadavg()[0]  # the machine's load as the scenario starts (other jobs inflate wall times)
        if what == "alone":
            r = asyncio.run(load.first_loads(url, 1, "", "", 300))
        elif what == "first20":
            r = asyncio.run(load.first_loads(url, 20, "", "", 300))
        elif what == "rerun_same":
            r = asyncio.run(load.reruns(url, 10, "serving", load.RERUN_KEY, [load.RERUN_VALUE], "", 300))
        else:
            r = asyncio.run(
                load.reruns(url, 10, "serving", load.RERUN_KEY, [round(0.30 + 0.02 * i, 2) for i in range(10)], "", 300)
            )
        r["server_cpu_s"] = _cpu_s(proc.pid) - cpu0
        r["load_avg_1min"] = load1
    finally:
        live.stop(proc)
    r["server"] = {"run": "streamlit run", "serve": "python -m dashboard.serve"}[kind]
    return r


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _warmed(url: str) -> bool:
    # the launcher's warm-up has run once the default page answers fast; a first load tells
    r = asyncio.run(load.first_loads(url, 1, "", "", 120))
    return r["errors"] == 0 and (r["max_s"] or 99) < 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cores", default="0,1")
    ap.add_argument("--client-cores", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.client_cores:
        os.sched_setaffinity(0, _cores(a.client_cores))
    cores = _cores(a.cores)
    results = []
    for kind in ("run", "serve"):
        for what in ("alone", "first20", "rerun_same", "rerun_distinct"):
            r = scenario(kind, cores, what)
            results.append(r)
            f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            print(
                f"[{r['server']}, {len(cores)} cores] {r['scenario']}: p50 {f(r['p50_s'])} s, "
                f"p95 {f(r['p95_s'])} s, max {f(r['max_s'])} s, errors {r['errors']}, "
                f"server CPU {r['server_cpu_s']:.2f} s ({r['server_cpu_s'] / max(1, r['sessions']):.3f} s a session), "
                f"load average {r['load_avg_1min']:.2f}" + (f" {r['error_samples']}" if r["error_samples"] else ""),
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
