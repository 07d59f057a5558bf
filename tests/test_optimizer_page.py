"""The Optimizer page: a recommendation with its explanation, and an honest 'nothing meets it'."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def _open():
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("../pages/optimizer.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_recommendation_and_table(clear_cache):
    at = _open()
    # the answer: green when it meets every target even at the pessimistic bound, amber (naming the target) when not
    assert any(x.value.startswith("Use ") for x in list(at.success) + list(at.warning))
    # the default asks p95 ITL <= 40 ms and no end-to-end target: the headline names the ITL target it misses
    # with every assumption at its pessimistic bound, and no end-to-end figure
    head = next(x.value for x in list(at.success) + list(at.warning) if x.value.startswith("Use "))
    assert "p95 ITL" in head and "40 ms target" in head and "end-to-end" not in head.split("pessimistic")[-1]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Cost per hour"].startswith("$")
    assert any("Why this GPU" in md.value for md in at.markdown)
    assert at.dataframe  # the table of all evaluated configurations with prune reasons
    # launch configs of the recommendation: download buttons and the vLLM command on the page
    downloads = at.get("download_button")
    assert len(downloads) >= 3
    assert any("vllm serve" in c.value for c in at.code)
    # GPU kinds without a price are named next to the search, not dropped silently
    assert any("No on-demand price for" in w.value and "gaudi3" in w.value for w in at.warning)
    first = shown["Cost per hour"]
    # a 5x higher arrival rate needs more GPUs: the cost goes up
    at.number_input(key="cfg.workload.rate_per_s").set_value(50.0)
    at.button(key="opt.submit").click().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Cost per hour"] != first


def test_impossible_target_shows_nothing_meets(clear_cache):
    at = _open()
    at.number_input(key="cfg.targets.p95_ttft_s").set_value(0.001)
    at.button(key="opt.submit").click().run()
    assert not at.exception
    assert any("Nothing meets" in e.value for e in at.error)
    assert any("raise the p95 TTFT target" in w.value for w in at.warning)


def test_training_tab_recommends_a_run(clear_cache):
    at = _open()
    assert not any("GPU kind" in m.value for m in [*at.success, *at.error])  # not run until chosen
    at.radio(key="opt.view").set_value("Training run").run()
    msgs = [s.value for s in at.success] + [e.value for e in at.error]
    assert any(m.startswith("Train on ") or m.startswith("No priced GPU kind") for m in msgs)
    at.number_input(key="cfg.targets.deadline_days").set_value(0.01)
    at.button(key="opt.train_submit").click().run()
    assert not at.exception
    assert any(e.value.startswith("No priced GPU kind") for e in at.error)
