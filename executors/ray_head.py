"""Start and stop a local Ray head on the loopback interface: for CI, the tests, ``make bench`` and a planning
machine with no cluster of its own.

``python -m executors.ray_head start DIR [--num-cpus N]`` starts ``ray start --head --block`` in a new session
(its own process group), every socket bound to 127.0.0.1 (the head's node address is the loopback one, which Ray
then listens on alone), its files under ``DIR``, and waits until the head answers (at most ``--timeout-s``); it
prints the address (``127.0.0.1:PORT``) and writes the head's process id to ``DIR/head.pid``.
``python -m executors.ray_head stop DIR`` ends that process group (SIGTERM, then SIGKILL after a grace period):
the head, its raylet and workers, and nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: How long a head may take to answer before the start is given up [s] (about 5 s on 2 cores).
START_TIMEOUT_S = 120.0
#: How long the head's processes get to stop on SIGTERM before they are killed [s].
STOP_GRACE_S = 20.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_bin() -> str:
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def head_env() -> dict[str, str]:
    """The environment a loopback-only head runs in: Ray takes the loopback address as the node's own (instead of
    the machine's routable one) only where it believes clusters are off, and then binds its servers to it."""
    env = dict(os.environ)
    env.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"})
    return env


def answers(address: str, timeout_s: float = 30.0) -> bool:
    """Whether a Ray head answers at ``address`` (``ray health-check``, given at most ``timeout_s``)."""
    try:
        ok = subprocess.run(
            [_ray_bin(), "health-check", "--address", address],
            capture_output=True,
            env=head_env(),
            timeout=max(1.0, timeout_s),
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return ok.returncode == 0


def start(directory: str | Path, num_cpus: int = 2, timeout_s: float = START_TIMEOUT_S) -> tuple[str, int]:
    """Start a head (see the module docstring); returns (address, the head's process id)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = open(d / "head.log", "w")  # noqa: SIM115 - the head writes to it for as long as it runs
    proc = subprocess.Popen(
        [
            _ray_bin(),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={d / 'ray'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=head_env(),
    )
    log.close()  # the head holds its own copy
    (d / "head.pid").write_text(str(proc.pid))
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if answers(address, deadline - time.monotonic()):
            return address, proc.pid
        time.sleep(0.5)
    stop(d)
    tail = (d / "head.log").read_text()[-2000:]
    raise RuntimeError(f"the Ray head did not start within {timeout_s:.0f} s:\n{tail}")


def descendants(pid: int) -> list[int]:
    """The processes descended from ``pid`` (read from /proc; empty where there is none): Ray's workers start
    process groups of their own, so ending the head's group does not reach them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def stop(directory: str | Path) -> None:
    """End the head's process group (the one :func:`start` began) and every process descended from it, if they
    still run."""
    pid_file = Path(directory) / "head.pid"
    if not pid_file.exists():
        return
    pgid = int(pid_file.read_text())
    for pid in descendants(pgid):  # the workers, in groups of their own; the rest ends with the group below
        try:
            if os.getpgid(pid) != pgid:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            try:  # reap the head when it is our own child
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)
        else:
            continue
        break
    pid_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m executors.ray_head", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a loopback head and print its address")
    s.add_argument("dir")
    s.add_argument("--num-cpus", type=int, default=2)
    s.add_argument("--timeout-s", type=float, default=START_TIMEOUT_S)
    t = sub.add_parser("stop", help="stop the head started in DIR")
    t.add_argument("dir")
    args = p.parse_args(argv)
    if args.cmd == "start":
        try:
            address, _ = start(args.dir, args.num_cpus, args.timeout_s)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"ray head: {exc}", file=sys.stderr)
            return 1
        print(address)
        return 0
    stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
