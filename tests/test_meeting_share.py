"""Share, take away, compare: every page carries a copy-link button with the view's link, its one-page summary
holds the numbers exactly as the page shows them, every table comes back as CSV, and the Compare page puts two
configurations side by side with the difference and the inputs that differ."""

import io
import json
import zipfile

import pytest
from streamlit.testing.v1 import AppTest
from test_range_pages_store import _app as _page  # one page opened from a link, no exception

from core.config import DEFAULT, differences, to_query
from dashboard import share


def _copy_button(at: AppTest) -> str:
    """The copy button's frame (its HTML), which holds the view's link as the server knows it."""
    frames = [el for el in at.get("iframe") if "Copy link" in (el.proto.srcdoc or "")]
    assert len(frames) == 1, "no copy-link button on the page"
    return frames[0].proto.srcdoc


@pytest.mark.parametrize("page", ["memory.py", "speed.py", "training.py", "compare.py", "diagnostics.py"])
def test_every_page_has_a_copy_link_button_with_the_views_link(page, clear_cache):
    at = _page(page, batch="16")
    html = _copy_button(at)
    assert "batch=16" in html  # the server's link carries the view (the button copies the browser's address)
    assert {b.label for b in at.get("download_button")} >= {"Markdown", "HTML", "Every table as CSV (zip)"}


def test_the_summary_holds_the_pages_numbers_as_shown(clear_cache):
    at = _page("serving.py")
    rec = at.session_state[share.KEY]
    cfg = at.session_state["_config"]
    md = share.summary_markdown(rec, cfg, "http://rabit.example/serving?x=1", "today")
    page = share.summary_html(rec, cfg, "http://rabit.example/serving?x=1", "today")
    shown = {m.label: m.value for m in at.metric}
    for label in ("p95 TTFT", "p95 ITL", "p95 end-to-end", "Output tokens/s"):
        assert (label, shown[label]) in [(a, b) for a, b, _ in rec.cards], label
        assert f"| {share._md(label)} | {share._md(shown[label])} |" in md, label
        assert f"<td>{label}</td><td><b>{shown[label]}</b></td>" in page, label
    captions = [c.value for c in at.caption]
    ttft_range = next(c for a, _, c in rec.cards if a == "p95 TTFT")
    assert f"range: {ttft_range}" in captions  # the range in the summary is the one under the card
    assert any(t.startswith("**Stable**") for k, t in rec.notes)  # the verdict, as the page says it
    assert "Targets" in md and "p95 TTFT ≤ 2 s" in md and "Assumptions" in md
    assert "<script" not in page.lower()


def test_the_summary_escapes_what_a_visitor_typed():
    rec = share.Record(title="Memory", path="memory", cards=[("<b>x</b>", "1 GB", "")], notes=[("info", "[a](b)")])
    assert "&lt;b&gt;x&lt;/b&gt;" in share.summary_html(rec, DEFAULT, "http://h/?a=<x>", "now")
    assert "\\[a\\]\\(b\\)" in share.summary_markdown(rec, DEFAULT, "http://h/", "now")


def test_every_table_comes_back_as_csv(clear_cache):
    at = _page("optimizer.py")
    rec = at.session_state[share.KEY]
    names = [n for n, _ in rec.tables]
    assert "evaluated configurations" in names
    z = zipfile.ZipFile(io.BytesIO(share.tables_zip(rec)))
    rows = z.read("evaluated-configurations.csv").decode().splitlines()
    table = next(df for n, df in rec.tables if n == "evaluated configurations")
    assert len(rows) == len(table) + 1 and rows[0].startswith("configuration,")


def test_compare_shows_both_the_difference_and_the_inputs_that_differ(clear_cache):
    b_cfg = DEFAULT.with_(gpu="b200", tp=4, gpus_per_node=4)
    at = _page("compare.py")
    at.text_input(key="cmp.B.link").set_value(
        "http://rabit.example/speed?"
        + "&".join(f"{k}={v}" for k, v in to_query(b_cfg).items())
        + "&speed.bound=pessimistic"
    ).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.warning, [w.value for w in at.warning]  # the view's own choice (its bound) is not a setting
    # two serving views: their p95s under the configured load (tests/test_compare_page.py checks the values)
    metrics = {m.label: m for m in at.metric}
    ttft = metrics["p95 TTFT (B)"]
    assert "against A" in (ttft.proto.delta or "")
    differ = next(df for n, df in at.session_state[share.KEY].tables if n == "inputs that differ")
    assert set(differ["field"]) == {k for k, _, _ in differences(DEFAULT, b_cfg)} >= {"gpu", "tp", "gpus_per_node"}


def test_compare_two_revisions_of_one_saved_analysis(clear_cache):
    from store import Store, database_url

    s = Store(database_url())
    aid = s.create("70B", DEFAULT, results={}, note="", saved_by="t")
    s.save(aid, DEFAULT.with_(batch=64), expected_revision=1, name="70B", results={}, note="", saved_by="t")
    at = _page("compare.py")
    at.radio(key="cmp.A.src").set_value("A saved analysis").run()
    at.selectbox(key=f"cmp.A.rev.{aid}").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    # B defaults to the saved analysis too (its current revision, 2)
    differ = next(df for n, df in at.session_state[share.KEY].tables if n == "inputs that differ")
    assert list(differ["field"]) == ["batch"] and list(differ["B"]) == ["64"]
    assert json.dumps([m.label for m in at.metric])  # the headline cards are drawn
