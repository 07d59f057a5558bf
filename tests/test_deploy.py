"""The deployment files (deploy/) describe a sticky, several-replica stack with PostgreSQL; and, as the tested
stand-in for `docker compose up` where no container runtime runs, N real dashboard processes on loopback
ports behind a sticky proxy serve every session, each client always reaching the same replica."""

import asyncio
import importlib.util
import re
import threading
import time
import zlib
from pathlib import Path

import live
import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DEPLOY / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compose_runs_replicas_behind_a_sticky_proxy_with_postgres():
    c = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    s = c["services"]
    assert s["dashboard"]["deploy"]["replicas"] >= 2
    assert s["dashboard"]["build"]["dockerfile"] == "deploy/Dockerfile"
    url = s["dashboard"]["environment"]["RABIT_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@db:5432/" in url
    assert s["db"]["image"].startswith("postgres:")
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in s["proxy"]["volumes"]
    assert s["dashboard"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_nginx_hashes_the_client_address_and_passes_the_websocket_upgrade():
    conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream rabit \{(.*?)\}", conf, re.S).group(1)
    assert "hash $remote_addr consistent;" in upstream and "server dashboard:8501" in upstream
    stream = re.search(r"location /_stcore/stream \{(.*?)\}", conf, re.S).group(1)
    assert "proxy_set_header Upgrade $http_upgrade;" in stream
    assert "proxy_set_header Connection $connection_upgrade;" in stream
    assert "proxy_http_version 1.1;" in stream


def test_kubernetes_manifest_is_the_same_stack():
    docs = {
        d["kind"] + "/" + d["metadata"]["name"]: d for d in yaml.safe_load_all((DEPLOY / "k8s.yaml").read_text()) if d
    }
    dep = docs["Deployment/rabit-dashboard"]
    assert dep["spec"]["replicas"] >= 2
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/_stcore/health"
    assert c["env"][0]["name"] == "RABIT_DATABASE_URL"
    assert c["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "rabit-db"
    svc = docs["Service/rabit-dashboard"]
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    ing = docs["Ingress/rabit"]["metadata"]["annotations"]
    assert ing["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert docs["StatefulSet/rabit-postgres"]["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "postgres:"
    )
    assert docs["Secret/rabit-db"]["stringData"]["RABIT_DATABASE_URL"].startswith("postgresql+psycopg://")


def test_image_fetches_nothing_at_run_time():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines()]
    run_time = [ln for ln in lines if ln.startswith(("CMD", "ENTRYPOINT", "HEALTHCHECK")) or ln.startswith("CMD ")]
    assert any(ln.startswith("CMD") and "dashboard.serve" in ln for ln in run_time)
    for ln in run_time:
        assert not re.search(r"\b(pip|curl|wget|apt-get|git)\b", ln), ln
        assert "http" not in ln.replace("http://127.0.0.1", "")
    assert (DEPLOY.parent / ".dockerignore").read_text().count(".venv") == 1


def test_the_proxy_is_sticky_per_client_address():
    proxy = _load("sticky_proxy")
    backends = [("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)]
    for ip in ("10.0.0.1", "10.0.0.2", "192.168.4.20"):
        assert proxy.pick(ip, backends) == backends[zlib.crc32(ip.encode()) % 3] == proxy.pick(ip, backends)


def _clients_covering(n_backends: int, count: int) -> list[str]:
    """Loopback client addresses that between them land on every backend (CRC-32 modulo n)."""
    ips, seen = [], set()
    for last in range(2, 250):
        ip = f"127.0.0.{last}"
        b = zlib.crc32(ip.encode()) % n_backends
        if b not in seen or len(ips) < count:
            ips.append(ip)
            seen.add(b)
        if len(seen) == n_backends and len(ips) >= count:
            return ips
    raise AssertionError("no covering set of loopback addresses")


def test_replicas_behind_a_sticky_proxy_serve_every_session():
    """Two real dashboard processes behind the sticky proxy: four clients each open the page twice (a first
    load, then a reconnect); every run finishes without an error, each client's two connections reach the
    same replica, and both replicas serve someone."""
    from dashboard import wsclient as load

    proxy_mod = _load("sticky_proxy")
    procs = []
    try:
        for _ in range(2):
            procs.append(live.start())
        backends = [("127.0.0.1", int(url.rsplit(":", 1)[1])) for _, url in procs]
        proxy = proxy_mod.StickyProxy(backends)
        port = live.free_port()
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve():
            asyncio.set_event_loop(loop)
            loop.run_until_complete(proxy.serve("127.0.0.1", port))
            started.set()
            loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        assert started.wait(10)
        url = f"http://127.0.0.1:{port}"
        live.wait_healthy(url)
        clients = _clients_covering(2, 4)

        async def room():
            out = []
            for _ in range(2):  # the first load, then a reconnect from the same address
                sessions = [load.Session(source_ip=ip) for ip in clients]
                deadline = time.monotonic() + 240
                await asyncio.gather(*(load._first_load(url, "", "", s, deadline) for s in sessions))
                for s in sessions:
                    await s.ws.close()
                out.append(sessions)
            return out

        rounds = asyncio.run(room())
        for sessions in rounds:
            assert all(s.times_s and not s.errors for s in sessions), [s.errors for s in sessions]
        by_client: dict[str, set] = {}
        for ip, backend in proxy.routes:
            by_client.setdefault(ip, set()).add(backend)
        assert set(by_client) >= set(clients)
        assert all(len(b) == 1 for ip, b in by_client.items() if ip in clients), by_client
        assert {next(iter(by_client[ip])) for ip in clients} == set(backends)
        loop.call_soon_threadsafe(loop.stop)
    finally:
        for proc, _ in procs:
            live.stop(proc)


def test_the_room_launcher_turns_off_per_run_watching_and_full_collection():
    """Profiled (py-spy, 20 first loads at once): Streamlit's source watcher (every module's realpath after each
    run) and its full gc.collect(2) after each run were over 80% of the server's CPU; the launcher and the
    project's config turn both off, and an option given on the command line still wins."""
    import tomllib

    from dashboard import serve

    args = serve.room_args(["--server.port", "8600"])
    assert args[:2] == ["--server.port", "8600"]
    assert dict(zip(args[2::2], args[3::2])) == {"--server.fileWatcherType": "none", "--runner.postScriptGC": "false"}
    assert "none" not in serve.room_args(["--server.fileWatcherType=auto"])
    conf = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert conf["server"]["fileWatcherType"] == "none" and conf["runner"]["postScriptGC"] is False
