"""`rabit next-experiment` and `rabit diagnose` contracts, and the Prometheus HTTP API connector against a fake
server on 127.0.0.1 (a good answer, an error, a non-Prometheus answer, a server that never answers, a closed
port, a bad URL)."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from cli.main import main
from connectors.prometheus import PrometheusError, metric_names, query_range

FIX = Path(__file__).parent / "fixtures"
TIE = [
    "next-experiment",
    "--model",
    "llama-3.1-8b",
    "--rate",
    "100",
    "--input",
    "32",
    "--output",
    "256",
    "--p95-itl-s",
    "0.007",
    "--gpus-allowed",
    "h100-sxm,h200-sxm",
    "--weights-allowed",
    "bf16",
    "--kv-allowed",
    "bf16",
    "--max-simulations",
    "8",
    "--requests",
    "1000",
    "--prompt-spread",
    "0",
    "--output-spread",
    "0",
    "--rate-spread",
    "0",
]
EXPERIMENT_KEYS = {"input", "flip_chance", "flips_to", "gpu_hours", "cost_usd", "command"}


def test_next_experiment_json_contract(capsys):
    assert main(TIE + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"experiments", "baseline", "stable_inputs"}
    assert out["experiments"] and all(set(e) == EXPERIMENT_KEYS for e in out["experiments"])
    assert out["baseline"]["gpu"] in ("h100-sxm", "h200-sxm")
    score = [e["flip_chance"] / e["gpu_hours"] if e["gpu_hours"] else float("inf") for e in out["experiments"]]
    assert score == sorted(score, reverse=True)
    assert all(e["flip_chance"] > 0 for e in out["experiments"])
    # the workload was given no spread, so it cannot flip anything
    assert {"prompt", "output", "rate"} <= set(out["stable_inputs"])
    keys = [e["input"] for e in out["experiments"]] + out["stable_inputs"]
    assert len(keys) == len(set(keys)) == 9  # 3 inputs x 2 GPU kinds + 3 workload inputs


def test_next_experiment_human_output_names_the_command(capsys):
    assert main(TIE) == 0
    out = capsys.readouterr().out
    assert "Run first" in out and "vllm bench serve" in out and "Not worth measuring now" in out


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--rate-spread", "1.5"], "--rate-spread"),
        (["--points-per-side", "0"], "--points-per-side"),
        (["--train"], "--train"),
        (["--gpus-allowed", "h900"], "--gpus-allowed"),
        (["--seq", "2048"], "--seq"),  # a training flag without --train is refused, not dropped
    ],
)
def test_next_experiment_bad_arguments_exit_2_naming_the_flag(extra, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(TIE + extra)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err


def test_diagnose_json_contract(tmp_path, capsys):
    p = tmp_path / "both.txt"
    p.write_text((FIX / "vllm_metrics.txt").read_text() + (FIX / "dcgm_metrics.txt").read_text())
    assert main(["diagnose", "--metrics", str(p), "--json", "--expect-p95-ttft-s", "0.05"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"fired", "not_evaluated", "quiet"}
    assert [f["rule"] for f in out["fired"]] == ["latency_diverges"]  # 0.45 s measured vs 0.05 s predicted
    f = out["fired"][0]
    assert set(f) == {"rule", "evidence", "remedies"} and "Calibration" in f["remedies"][0]["config_change"]
    assert [n["rule"] for n in out["not_evaluated"]] == ["prefix_cache_misses"]
    assert all(set(n) == {"rule", "missing"} for n in out["not_evaluated"])
    assert len(out["quiet"]) == 9


@pytest.mark.parametrize(
    "content, why",
    [
        (b'{"not": "telemetry"}', "not telemetry"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
        (b'vllm:num_requests_running{model_name="m"} twelve\n', "not a number"),
        (b'vllm:num_requests_running{model_name="m', "truncated"),
    ],
)
def test_diagnose_refuses_a_file_that_is_not_telemetry(tmp_path, content, why, capsys):
    p = tmp_path / "upload.txt"
    p.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--metrics", str(p)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and "--metrics" in err


def test_diagnose_refuses_a_200_mb_file_without_reading_it(tmp_path, capsys):
    p = tmp_path / "huge.txt"
    with open(p, "wb") as f:  # sparse: 200 MB long, nothing written
        f.truncate(200_000_000)
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--metrics", str(p)])
    assert e.value.code == 2 and "200.0 MB; the limit is 20 MB" in capsys.readouterr().err


def test_diagnose_missing_file(capsys):
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--metrics", "/nonexistent/metrics.txt"])
    assert e.value.code == 2 and "cannot read" in capsys.readouterr().err


# --- the Prometheus HTTP API, against a fake server ---------------------------------------------------------


def _matrix(query: str, start: float, end: float, step: float) -> dict:
    """A Prometheus range answer: waiting requests climb from 0 to 20 while 30 run (a growing queue)."""
    ts = [start + i * step for i in range(int((end - start) / step) + 1)]
    result = [
        {"metric": {"__name__": "vllm:num_requests_running", "model_name": "m"}, "values": [[t, "30"] for t in ts]},
        {
            "metric": {"__name__": "vllm:num_requests_waiting", "model_name": "m"},
            "values": [[t, str(20 * i / max(1, len(ts) - 1))] for i, t in enumerate(ts)],
        },
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "slow":
            time.sleep(3)
        if url.path != "/api/v1/query_range":
            self.send_response(404)
            self.end_headers()
            return
        if mode == "error":
            body, code = {"status": "error", "errorType": "bad_data", "error": 'invalid parameter "query"'}, 400
        elif mode == "html":
            self._send(200, b"<html><body>Grafana</body></html>", "text/html")
            return
        else:
            self.server.seen = q  # type: ignore[attr-defined]
            body, code = _matrix(q["query"], float(q["start"]), float(q["end"]), float(q["step"])), 200
        self._send(code, json.dumps(body).encode(), "application/json")

    def _send(self, code, data, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (the timeout test)
            pass


@pytest.fixture
def prom():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.mode = "ok"
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_prometheus_range_query_feeds_the_rules(prom, capsys):
    tel = query_range(_url(prom), since_s=600, step_s=15, now_s=1_764_000_000.0)
    assert tel.fmt == "prometheus-api" and len(tel.samples) == 2 * 41  # 600 s / 15 s + 1 points, two series
    assert "vllm:num_preemptions_total" in prom.seen["query"] and "DCGM_FI_DEV_GPU_UTIL" in prom.seen["query"]
    assert float(prom.seen["end"]) - float(prom.seen["start"]) == 600
    assert set(metric_names()) >= {"vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_waiting"}
    assert main(["diagnose", "--prometheus", _url(prom), "--since", "600", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "queue_growing" in [f["rule"] for f in out["fired"]]


@pytest.mark.parametrize(
    "mode, match",
    [("error", r"HTTP 400: invalid parameter"), ("html", "did not answer with the Prometheus API's JSON")],
)
def test_prometheus_server_errors_are_one_clear_line(prom, mode, match):
    prom.mode = mode
    with pytest.raises(PrometheusError, match=match):
        query_range(_url(prom))


def test_a_server_that_never_answers_times_out(prom):
    prom.mode = "slow"
    t = time.monotonic()
    with pytest.raises(PrometheusError, match="did not answer within 0.5 s"):
        query_range(_url(prom), timeout_s=0.5)
    assert time.monotonic() - t < 2.5


def test_unreachable_server_and_bad_url(capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PrometheusError, match="cannot reach"):
        query_range(f"http://127.0.0.1:{port}", timeout_s=2)
    for bad in ("ftp://prometheus:9090", "prometheus:9090", "http://", "http://host:port"):
        with pytest.raises(PrometheusError, match="URL|port"):
            query_range(bad)
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--prometheus", "not a url"])
    assert e.value.code == 2 and "--prometheus" in capsys.readouterr().err


def test_next_experiment_for_a_training_run(capsys):
    assert (
        main(
            [
                "next-experiment",
                "--train",
                "--model",
                "llama-3.1-8b",
                "--tokens",
                "1e12",
                "--deadline-days",
                "20",
                "--gpus-allowed",
                "h100-sxm,a100-80gb",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"experiments", "baseline", "stable_inputs"}
    assert out["baseline"]["gpu"] in ("h100-sxm", "a100-80gb") and "layout" in out["baseline"]
    assert all(set(e) == EXPERIMENT_KEYS for e in out["experiments"])


# --- telemetry attached to a saved analysis ----------------------------------------------------------------


def _save(capsys, *extra: str) -> str:
    capsys.readouterr()
    assert (
        main(
            [
                "analyses",
                "save",
                "--name",
                "70B on H100",
                "--model",
                "llama-3.1-70b",
                "--gpu",
                "h100-sxm",
                "--gpus",
                "4",
                "--tp",
                "4",
                "--input",
                "1000",
                "--output",
                "250",
                *extra,
                "--json",
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)["id"]


def _shown(capsys, aid: str) -> dict:
    capsys.readouterr()
    assert main(["analyses", "show", aid, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "content, why",
    [
        (b'vllm:num_requests_running{model_name="m', "truncated"),
        (b'{"not": "telemetry"}', "not telemetry"),
        (b'vllm:num_requests_running{model_name="m"} twelve\n', "not a number"),
        (None, "the limit is 20 MB"),  # a 200 MB file
    ],
)
def test_malformed_telemetry_leaves_the_saved_analysis_untouched(tmp_path, capsys, content, why):
    aid = _save(capsys)
    before = _shown(capsys, aid)
    p = tmp_path / "upload.txt"
    if content is None:
        with open(p, "wb") as f:
            f.truncate(200_000_000)
    else:
        p.write_bytes(content)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--metrics", str(p), "--analysis", aid])
    assert e.value.code == 2 and why in capsys.readouterr().err
    assert _shown(capsys, aid) == before  # no telemetry, no new revision, nothing else changed


def test_telemetry_attaches_to_the_analysis_and_is_diagnosed_against_its_prediction(tmp_path, capsys):
    aid = _save(capsys, "--prefix-cache", "0.9")
    dump = tmp_path / "metrics.txt"
    dump.write_text((FIX / "vllm_metrics.txt").read_text() + (FIX / "dcgm_metrics.txt").read_text())
    capsys.readouterr()
    assert main(["diagnose", "--metrics", str(dump), "--analysis", aid, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    shown = _shown(capsys, aid)
    assert len(shown["telemetry"]) == 1 and shown["telemetry"][0]["kind"] == "prometheus"
    assert [r["revision"] for r in shown["revisions"]] == [1]  # telemetry is not a new revision of the config
    # the analysis expects 90 % of prompt tokens cached; the dump hits 31 %: below half of that, so it fires
    assert "prefix_cache_misses" in [f["rule"] for f in first["fired"]]
    # the divergence rule compares with the analysis's own simulated p95s, so it is evaluated
    assert "latency_diverges" not in [n["rule"] for n in first["not_evaluated"]]
    # --analysis alone diagnoses what is attached
    capsys.readouterr()
    assert main(["diagnose", "--analysis", aid, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first


def test_an_analysis_without_telemetry_has_no_diagnosis(capsys):
    aid = _save(capsys)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--analysis", aid])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no telemetry attached" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(["diagnose", "--analysis", "nope", "--metrics", str(FIX / "vllm_metrics.txt")])
    assert e.value.code == 2 and "no saved analysis" in capsys.readouterr().err


def test_next_experiment_from_a_saved_analysis(capsys):
    aid = _save(capsys)
    capsys.readouterr()
    assert (
        main(
            [
                "next-experiment",
                "--analysis",
                aid,
                "--gpus-allowed",
                "h100-sxm,a100-80gb",
                "--requests",
                "300",
                "--max-simulations",
                "4",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"experiments", "baseline", "stable_inputs"}
    # the saved workload is questioned too
    keys = [e["input"] for e in out["experiments"]] + out["stable_inputs"]
    assert {"prompt", "output", "rate"} <= set(keys)


@pytest.mark.parametrize("extra, flag", [(["--rate-spread", "0.2"], "--rate-spread"), (["--no-disagg"], "--no-disagg")])
def test_next_experiment_for_training_refuses_the_serving_flags(extra, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(["next-experiment", "--train", "--model", "llama-3.1-8b", *extra])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "with --train" in err and "\n" not in err
