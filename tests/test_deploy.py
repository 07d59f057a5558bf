"""The deployment files (deploy/) describe a sticky, several-replica stack with PostgreSQL. The stack itself runs
with its real parts (Debian's nginx with deploy/nginx.conf, PostgreSQL, two replicas) in tests/test_deploy_nginx.py."""

import importlib.util
import re
from pathlib import Path

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


def test_the_room_launcher_turns_off_per_run_watching_and_full_collection():
    """Profiled (py-spy, 20 first loads at once): Streamlit's source watcher (every module's realpath after each
    run) and its full gc.collect(2) after each run were over 80% of the server's CPU; the launcher and the
    project's config turn both off, and an option given on the command line still wins. Both also keep everything
    on the server: headless, no usage statistics, and the browser address named (without it a headless server
    asks checkip.amazonaws.com for its external IP; tests/test_startup_network.py watches that)."""
    import tomllib

    from dashboard import serve

    args = serve.room_args(["--server.port", "8600"])
    assert args[:2] == ["--server.port", "8600"]
    assert dict(zip(args[2::2], args[3::2])) == {
        "--server.fileWatcherType": "none",
        "--runner.postScriptGC": "false",
        "--server.headless": "true",
        "--browser.gatherUsageStats": "false",
        "--browser.serverAddress": "localhost",
    }
    assert "none" not in serve.room_args(["--server.fileWatcherType=auto"])
    assert serve.room_args(["--browser.serverAddress", "rabit.example.org"]).count("--browser.serverAddress") == 1
    conf = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert conf["server"]["fileWatcherType"] == "none" and conf["runner"]["postScriptGC"] is False
    assert conf["server"]["headless"] is True and conf["browser"]["gatherUsageStats"] is False
    assert conf["browser"]["serverAddress"] == "localhost"
