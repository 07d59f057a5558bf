"""The Next experiment and Diagnostics pages (AppTest): the ranked table, the chart, the decision under each
outcome, the stable list; diagnostics that refuse to guess without telemetry and diagnose from a Prometheus
server (a fake one on 127.0.0.1)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import state

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def _open(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page(f"../pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_next_experiment_waits_for_the_button_then_ranks(clear_cache):
    at = _open("next_experiment.py")
    assert at.title[0].value == "Next experiment"
    assert any("Find the next experiment" in i.value for i in at.info)
    # two GPU kinds keep the AppTest short; the model is the sidebar's (Llama 3.1 70B)
    at.multiselect(key=state.key("targets.gpus_allowed")).set_value(["h100-sxm", "h200-sxm"])
    at.button(key="ne.submit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    heads = [h.value for h in at.subheader]
    # the answer first: today's decision and what to measure, in the box above the ranking
    assert any("Today's decision" in i.value for i in at.info)
    # the workload the decision is for, lengths and rate, under it
    assert any(c.value.startswith("For 4,096 in + 4,096 out tokens at ") for c in at.caption)
    assert "Experiments, ranked by flip chance per GPU-hour" in heads
    assert at.get("plotly_chart")  # flip chance against GPU-hours
    ranked = any(h.startswith("Run first") for h in heads)
    if ranked:
        assert at.dataframe and any(
            "vllm" in c.value or "all_reduce_perf" in c.value or "curl" in c.value for c in at.code
        )
        assert any(md.value.startswith("- If ") for md in at.markdown)  # the decision under each outcome
    else:
        assert any("nothing is worth measuring" in s.value for s in at.success)
    assert any(e.label.startswith("Not worth measuring now") for e in at.expander)
    # a second run with the same inputs is a cache hit and shows the same decision
    first = [md.value for md in at.markdown]
    at.button(key="ne.submit").click().run()
    assert [md.value for md in at.markdown] == first


def test_diagnostics_without_telemetry_does_not_guess(clear_cache):
    at = _open("diagnostics.py")
    assert at.title[0].value == "Diagnostics"
    assert any("no diagnosis" in i.value for i in at.info)
    assert at.dataframe  # the rules, their thresholds and the metrics each needs


class _Prom(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        # KV pool full on both GPUs while their tensor pipes idle
        result = [
            {"metric": {"__name__": n, "gpu": g}, "values": [[1764000000 + 15 * i, v] for i in range(5)]}
            for n, v in (("vllm:kv_cache_usage_perc", "0.98"), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.1"))
            for g in ("0", "1")
        ]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def prom_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Prom)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_diagnostics_from_a_prometheus_server(clear_cache, prom_url):
    at = _open("diagnostics.py")
    at.toggle(key="dx.prom_on").set_value(True).run()
    at.text_input(key="dx.prom_url").set_value(prom_url).run()
    assert not at.exception, [e.value for e in at.exception]
    assert {m.label: m.value for m in at.metric}["Rules fired"] == "1"
    assert any("KV cache full" in md.value for md in at.markdown)
    assert any("missing" in md.value for md in at.markdown)  # the rules whose metrics were not there


def test_diagnostics_unreachable_prometheus_is_an_error_not_a_hang(clear_cache):
    at = _open("diagnostics.py")
    at.toggle(key="dx.prom_on").set_value(True).run()
    at.text_input(key="dx.prom_url").set_value("http://127.0.0.1:9").run()
    assert not at.exception
    assert any("cannot reach" in e.value for e in at.error)


def test_diagnostics_attach_to_the_open_analysis(clear_cache, prom_url):
    from core.config import RabitConfig
    from store import Store

    st_ = Store()
    aid = st_.create("70B on H100", RabitConfig(prefix_cache_frac=0.5))
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["_analysis"] = {"id": aid, "revision": 1, "name": "70B on H100"}
    at.run()
    at.switch_page("../pages/diagnostics.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Open analysis" in c.value for c in at.caption)
    assert any("no diagnosis" in i.value for i in at.info)  # nothing attached yet: no guess
    # an unreachable server: an error, and the analysis stays as it was
    at.toggle(key="dx.prom_on").set_value(True).run()
    at.text_input(key="dx.prom_url").set_value("http://127.0.0.1:9").run()
    assert any("cannot reach" in e.value for e in at.error)
    assert st_.get(aid).telemetry == ()
    # a good answer, attached on request
    at.text_input(key="dx.prom_url").set_value(prom_url).run()
    at.button(key="dx.attach").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Attached to 70B on H100" in s.value for s in at.success)
    assert len(st_.get(aid).telemetry) == 1
    # switched back to uploads with nothing uploaded: the attached telemetry is diagnosed
    at.toggle(key="dx.prom_on").set_value(False).run()
    assert any("Diagnosing the telemetry attached" in c.value for c in at.caption)
    assert {m.label: m.value for m in at.metric}["Rules fired"] == "1"
