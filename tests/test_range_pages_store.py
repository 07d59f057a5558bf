"""Ranges and a tornado chart on the pages behind the analysis store: Diagnostics (each prediction with its range,
the measurement against it), Saved analyses (the picked analysis's headline numbers) and Calibration (the
heuristic range beside the calibrated interval)."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.config import RabitConfig
from store import Store

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
FIX = Path(__file__).resolve().parent / "fixtures"
RUNS = FIX / "vllm_bench_serve_llama-3.1-8b_h100.json"
SMALL = RabitConfig(
    model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, batch=8, input_tokens=1000, output_tokens=250
)
BASIS = "heuristic range from the assumption bounds"


def _app(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(f"../pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _titles(at) -> list[str]:
    out = []
    for c in at.get("plotly_chart"):
        t = json.loads(c.proto.spec).get("layout", {}).get("title", {})
        out.append(t.get("text", "") if isinstance(t, dict) else str(t))
    return out


def _metric(at, label: str):
    return next(m for m in at.metric if m.label == label)


def _range_captions(at) -> list[str]:
    return [c.value for c in at.caption if c.value.startswith("range: ")]


def test_diagnostics_shows_each_prediction_with_its_range_and_the_measurement_against_it(clear_cache):
    from core.operations import expectation_of

    aid = Store().create("Diagnosed", SMALL)
    at = _app("diagnostics.py", analysis=aid)
    # before any telemetry: the analysis's predictions, with their ranges and a tornado
    e = expectation_of(SMALL)
    assert _metric(at, "Predicted p95 TTFT").value.startswith(f"{e.p95_ttft_s * 1e3:.3g}")
    caps = _range_captions(at)
    assert len(caps) == 2 and all(BASIS in c for c in caps), caps
    assert "What moves the predicted p95 TTFT" in _titles(at)
    # the vLLM dump's p95 TTFT (0.45 s) is about three times the 8B prediction on one H100: above the range
    at.file_uploader(key="dx.file").upload("metrics.txt", (FIX / "vllm_metrics.txt").read_bytes(), "text/plain").run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metric(at, "Measured p95 TTFT").value.startswith("454")
    assert any("**above** the predicted range" in w.value for w in at.warning)
    assert "Predicted range and the measurement" in _titles(at)


def test_diagnostics_typed_predictions_have_no_range(clear_cache):
    at = _app("diagnostics.py")
    at.number_input(key="cfg.predicted.p95_ttft_s").set_value(0.5).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metric(at, "Predicted p95 TTFT").value == "500 ms"
    assert "entered above: no range" in [c.value for c in at.caption]
    assert not _range_captions(at)


def test_saved_analyses_show_the_picked_analysis_headline_numbers_with_ranges(clear_cache):
    Store().create("Sized", SMALL)
    at = _app("analyses.py")
    assert "Headline numbers, with ranges" in [h.value for h in at.subheader]
    labels = [m.label for m in at.metric]
    assert {"Decode step", "Tokens/s", "Max sequences", "Memory per GPU"} <= set(labels)
    caps = _range_captions(at)
    assert len(caps) == 6 and sum(BASIS in c for c in caps) >= 4, caps
    assert "What moves decode step" in _titles(at)
    from core.decision import speed_spread

    r = speed_spread(SMALL).ranges["decode_step_s"]
    assert r.low < r.value < r.high


def test_saved_training_analysis_shows_training_ranges(clear_cache):
    Store().create("Trained", SMALL.with_(phase="train", train_tokens=1e10))
    at = _app("analyses.py")
    assert {"Step time", "Runtime", "GPU-hours"} <= {m.label for m in at.metric}
    assert "What moves step time" in _titles(at)


def test_calibration_shows_the_heuristic_range_beside_the_calibrated_interval(clear_cache):
    from core.operations import parse_file

    st_ = Store()
    aid = st_.create("Calibrated", SMALL)
    st_.add_runs(aid, parse_file(RUNS.name, RUNS.read_bytes(), SMALL))
    at = _app("calibration.py", analysis=aid)
    metric = at.selectbox(key="cal.metric").value
    labels = [m.label for m in at.metric]
    assert f"{metric}, analytical" in labels and f"{metric}, calibrated (n=1)" in labels
    caps = _range_captions(at)
    assert any(BASIS in c for c in caps) and any("calibrated from measured runs, 1 runs" in c for c in caps), caps
    assert f"What moves {metric}" in _titles(at)
    assert "Heuristic range vs calibrated interval" in _titles(at)
    # another metric: its own range and tornado
    at.selectbox(key="cal.metric").set_value("itl_s.p50").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "What moves itl_s.p50" in _titles(at)
