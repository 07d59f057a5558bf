"""AppTest: save, list, open by link, a concurrent save, the Calibration page, a bad upload, and the
calibrated TTFT and ITL on the Serving simulation page."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.config import RabitConfig
from store import Store

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_bench_serve_llama-3.1-8b_h100.json"
SMALL = RabitConfig(
    model="llama-3.1-8b", gpu="h100-sxm", gpus_per_node=1, tp=1, batch=8, input_tokens=1000, output_tokens=250
)


def _app(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(f"../pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def _runs_uploader(at: AppTest):
    return next(u for u in at.file_uploader if u.label.startswith("vllm bench serve"))


def _text(at: AppTest) -> str:
    return " ".join(
        [m.value for m in at.markdown]
        + [m.value for m in at.success]
        + [m.value for m in at.warning]
        + [m.value for m in at.info]
        + [m.value for m in at.error]
        + [c.value for c in at.caption]
    )


def test_save_from_the_page_then_list_and_search(clear_cache):
    at = _app("analyses.py")
    at.text_input(key="an.name").set_value("Team sizing")
    at.text_input(key="an.by").set_value("ana")
    _button(at, "Save as a new analysis").click().run()
    assert not at.exception, [e.value for e in at.exception]
    rows = Store().list()
    assert [(r.name, r.saved_by, r.model) for r in rows] == [("Team sizing", "ana", "llama-3.1-70b")]
    assert "Saved as a new analysis" in _text(at)
    assert at.session_state["_analysis"]["id"] == rows[0].id
    assert at.query_params["analysis"] in (rows[0].id, [rows[0].id])  # the URL now reopens it

    Store().create("Other on B200", RabitConfig(gpu="b200"))
    at = _app("analyses.py")
    df = at.dataframe[0].value
    assert set(df["name"]) == {"Team sizing", "Other on B200"}
    at.text_input(key="an.search").set_value("b200").run()
    assert list(at.dataframe[0].value["name"]) == ["Other on B200"]


def test_open_by_link_restores_the_config(clear_cache):
    from core.config import Workload

    aid = Store().create(
        "Linked", SMALL.with_(batch=7, weights="fp8", workload=Workload(rate_per_s=3.5, users=5)), saved_by="bo"
    )
    at = _app("analyses.py", analysis=aid)
    assert at.session_state["cfg.model"] == "llama-3.1-8b" and at.session_state["cfg.batch"] == 7
    assert at.session_state["cfg.weights"] == "fp8" and at.session_state["cfg.tp"] == 1
    assert at.session_state["cfg.workload.rate_per_s"] == 3.5  # the serving page's inputs travel too
    assert any("Saved analysis: **Linked**" in c.value for c in at.sidebar.caption)
    assert f"?analysis={aid}" in _text(at) and "Linked" in _text(at)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["analysis"] = "doesnotexist"
    at.run()
    assert not at.exception and any("no saved analysis" in e.value for e in at.sidebar.error)


def test_a_second_save_is_told_and_offered_a_new_revision(clear_cache):
    st_ = Store()
    aid = st_.create("Shared", SMALL)
    at = _app("analyses.py", analysis=aid)
    st_.save(aid, SMALL.with_(batch=99), expected_revision=1, saved_by="someone else")  # meanwhile
    _button(at, "Save a new revision").click().run()
    assert "Nothing was overwritten" in _text(at)
    assert st_.get(aid).config.batch == 99
    _button(at, "Save mine as revision 3").click().run()
    assert not at.exception
    a = st_.get(aid)
    assert a.summary.revision == 3 and a.config.batch == 8 and [r.revision for r in a.revisions] == [3, 2, 1]


def test_delete_and_restore_from_the_page(clear_cache):
    aid = Store().create("Binned", SMALL)
    at = _app("analyses.py")
    _button(at, "Delete").click().run()
    assert Store().list() == () and Store().list(deleted=True)[0].id == aid
    _button(at, "Restore").click().run()
    assert [r.id for r in Store().list()] == [aid]


def test_calibration_page_attaches_a_vllm_file_and_shows_bias_and_runs(clear_cache):
    aid = Store().create("Calibrated", SMALL)
    at = _app("calibration.py", analysis=aid)
    assert "No measured runs" in _text(at)
    _runs_uploader(at).upload(FIXTURE.name, FIXTURE.read_bytes(), "application/json").run()
    _button(at, "Attach the files").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(Store().get(aid).runs) == 1
    per_metric = at.dataframe[1].value
    assert {"ttft_s.p50", "itl_s.p50"} <= set(per_metric["metric"])
    assert set(per_metric["runs (n)"]) == {1}
    assert "Comparable runs" in _text(at)
    assert at.get("plotly_chart")
    from core.operations import csv_template

    _runs_uploader(at).upload("runs.csv", csv_template().encode(), "text/csv").run()
    _button(at, "Attach the files").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(Store().get(aid).runs) == 6  # the file and the template's five runs
    per_metric = at.dataframe[1].value
    assert dict(zip(per_metric["metric"], per_metric["runs (n)"]))["itl_s.p50"] == 3  # the file's, the CSV's two
    assert "step_s" in set(per_metric["metric"])
    # the second calibration: the efficiency assumptions fitted to the serving runs, and which to trust
    assert "Fit of the efficiency assumptions" in [h.value for h in at.subheader]
    assert any("Trust the" in s.value for s in list(at.success) + list(at.info))


def test_a_bad_upload_shows_an_error_next_to_it_and_changes_nothing(clear_cache):
    st_ = Store()
    aid = st_.create("Guarded", SMALL)
    st_.add_runs(
        aid,
        __import__("core.operations.run_rows", fromlist=["x"]).parse_file(FIXTURE.name, FIXTURE.read_bytes(), SMALL),
    )
    before = st_.export(aid)
    negative = json.dumps({**json.loads(FIXTURE.read_text()), "median_ttft_ms": -5.0}).encode()
    no_fields = json.dumps({"completed": 10}).encode()
    for name, content, message in (
        ("wrong.json", b"{not json", "not JSON"),
        ("missing.json", no_fields, "missing field 'total_input_tokens'"),
        ("negative.json", negative, "must be positive"),
    ):
        at = _app("calibration.py", analysis=aid)
        _runs_uploader(at).upload(name, content, "application/json").run()
        _button(at, "Attach the files").click().run()
        assert not at.exception, [e.value for e in at.exception]
        errs = [e.value.replace("\\", "") for e in at.error]  # user text is shown escaped
        assert any("Nothing attached" in e and message in e for e in errs), errs
        assert st_.export(aid) == before  # nothing saved, nothing lost


def test_serving_page_shows_calibrated_ttft_and_itl_beside_the_analytical_ones(clear_cache):
    st_ = Store()
    aid = st_.create("Serving calibrated", SMALL)
    from core.operations import parse_file

    st_.add_runs(aid, parse_file(FIXTURE.name, FIXTURE.read_bytes(), SMALL))
    at = _app("serving.py", analysis=aid)
    labels = [m.label for m in at.metric]
    assert "TTFT p50 (calibrated, n=1)" in labels and "ITL p50 (calibrated, n=1)" in labels
    assert "TTFT p50" in labels  # the analytical value stays
    at = _app("speed.py", analysis=aid)
    assert "TTFT (calibrated, n=1)" in [m.label for m in at.metric]


def test_login_is_off_by_default_and_asks_first_when_on(clear_cache, monkeypatch):
    at = _app("memory.py")
    assert not [b for b in at.button if b.label == "Log in"]
    monkeypatch.setenv("RABIT_LOGIN", "1")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert [b for b in at.button if b.label == "Log in"] and "asks you to log in" in _text(at)


def test_an_unreachable_store_is_an_error_on_the_page_not_a_traceback(clear_cache, monkeypatch):
    monkeypatch.setenv("RABIT_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    at = _app("analyses.py")
    assert any("cannot be opened" in e.value for e in at.error)
