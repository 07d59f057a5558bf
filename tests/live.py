"""A real dashboard server on a loopback port, for the browser tests and the load test's own test."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: How long a fresh server may take to answer its health check [s]: about 10 s on an idle 2-core machine, over a
#: minute when other jobs load it (imports, the catalogs and the compiled loop's cache all compete for the CPUs).
SERVER_START_S = 180.0
#: How long a page may take to settle after it was opened or touched [s], on the same loaded machine.
SETTLE_S = 180.0

#: Run in the page with the time the page must have been quiet for [ms]: true once the script has finished (the app's
#: run state is "notRunning" and the connection is up), no "Running..." status widget, skeleton or stale element is
#: on show, and all of that has held for the whole interval (a page whose script reruns itself shows none of them
#: for an instant between two runs, so one look may catch it half drawn).
SETTLED_JS = """(holdMs) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app && app.getAttribute('data-test-script-state');
  const busy = !app || !['notRunning', 'compilationError'].includes(state)
    || app.getAttribute('data-test-connection-state') !== 'CONNECTED'
    || document.querySelector('[data-testid="stStatusWidget"], [data-testid="stAppSkeleton"], [data-testid="stSkeleton"]')
    || document.querySelector('[data-testid="stElementContainer"][data-stale="true"]');
  const now = performance.now();
  if (busy) { window.__rabitQuietSince = undefined; return false; }
  if (window.__rabitQuietSince === undefined) window.__rabitQuietSince = now;
  return now - window.__rabitQuietSince >= holdMs;
}"""


def settle(page, timeout_s: float = SETTLE_S, hold_ms: int = 500) -> None:
    """Wait until the page's script has finished and the page has stayed quiet for ``hold_ms`` (:data:`SETTLED_JS`),
    polled every 100 ms, at most ``timeout_s``: before a test reads text, numbers or boxes off a Streamlit page."""
    page.evaluate("() => { window.__rabitQuietSince = undefined; }")
    page.wait_for_function(SETTLED_JS, arg=hold_ms, timeout=timeout_s * 1000, polling=100)


#: Run in the page: every metric card as drawn, read in one pass (label, value, whether it is shown, its bottom edge
#: [px from the viewport's top]). One evaluation, not a locator per card: a rerun that redraws a card between a list
#: of locators and the read of one of them would leave the read waiting on an element that is gone.
CARDS_JS = """() => [...document.querySelectorAll('[data-testid="stMetric"]')].map((m) => {
  const text = (sel) => ((m.querySelector(sel) || {}).innerText || '').trim();
  const r = m.getBoundingClientRect();
  const shown = r.width > 0 && r.height > 0 && getComputedStyle(m).visibility !== 'hidden';
  return {label: text('[data-testid="stMetricLabel"]'), value: text('[data-testid="stMetricValue"]'),
          shown: shown, bottom: r.bottom};
})"""


def metric_cards(page) -> list[dict]:
    """The page's metric cards in document order, read at one instant (:data:`CARDS_JS`)."""
    return page.evaluate(CARDS_JS)


def shown_cards(page) -> dict[str, dict]:
    """Each label's first metric card that is shown (:func:`metric_cards`), by label; cards without a label left out."""
    out: dict[str, dict] = {}
    for card in metric_cards(page):
        if card["shown"] and card["label"]:
            out.setdefault(card["label"], card)
    return out


def alert_text(page) -> str:
    """The text of every alert (error, warning, info) on the page, read at one instant."""
    return " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout_s: float = SERVER_START_S) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("the server exited: " + (proc.stdout.read() if proc.stdout else ""))
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not become healthy in {timeout_s:.0f} s")


@functools.cache
def warm_engine() -> None:
    """Compile the simulator's loops into numba's on-disk cache once per test process, before the first server
    starts (``core.serving.warm_simulator``): a server then loads them, and a page's first simulation does not pay
    the compile (tens of CPU-seconds on a fresh clone) inside a browser test's wait. ``.ci/run`` does the same
    before the suite; this makes the README's test command on a fresh clone the same run."""
    from core.serving import warm_simulator

    warm_simulator()


def start(port: int | None = None, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``streamlit run dashboard/asgi.py`` (the app as ``dashboard.serve`` runs it) on 127.0.0.1; return
    (process, base URL) once healthy; the simulator's compiled loops are in the on-disk cache first
    (:func:`warm_engine`)."""
    warm_engine()
    port = port or free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "dashboard" / "asgi.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except RuntimeError:
        stop(proc)
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def server() -> Iterator[str]:
    proc, url = start()
    try:
        yield url
    finally:
        stop(proc)


def in_ci() -> bool:
    """True under CI (``CI`` set by the runner, or ``RABIT_CI`` by .ci/run): a test that needs a tool the machine
    lacks (chromium, nginx, PostgreSQL) fails there instead of skipping, so a missing tool never passes silently."""
    return bool(os.environ.get("CI") or os.environ.get("RABIT_CI"))


def require_chromium() -> None:
    """Skip the calling test module when Debian's chromium is missing; in CI that is an error instead."""
    import pytest

    if CHROMIUM is None:
        if in_ci():
            raise RuntimeError("CI needs Debian's chromium for the browser test (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)
