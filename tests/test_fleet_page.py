"""The Fleet page in AppTest: it starts from the issue's smallest fleet, a pasted description replaces it (and a bad
one is said next to it, naming the workload and field), the fleet travels in the link, a plan shows the nominal and
robust cost, exports as CSV and saves as an analysis."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.config import EXAMPLE, from_query

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
#: One workload on one kind, the optimizer at its smallest: a plan in a few seconds.
SMALL = """\
workloads:
  - {name: code, model: llama-3.1-8b, rate_per_s: 5, input_tokens: 500, output_tokens: 100, p95_ttft_s: 1,
     p95_itl_s: 0.05}
scenarios:
  - {name: peak, rate_factor: 1.5}
constraints: {gpus: [h100-sxm]}
settings: {requests_per_simulation: 100, max_simulations: 2, ranges: false}
"""


@pytest.fixture
def page(clear_cache):
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.switch_page("../pages/fleet.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _text_area(at):
    return next(t for t in at.text_area if t.key.startswith("fleet.text."))


def test_the_page_starts_from_the_smallest_fleet_and_waits_for_the_button(page):
    assert page.title[0].value == "Fleet"
    assert "name: chat" in _text_area(page).value and "llama-3.1-70b" in _text_area(page).value
    assert any("press **Plan the fleet**" in i.value for i in page.info)
    assert "fleet" not in page.query_params  # the example is shown, not written into the link
    # the example allows H100, H200 and MI300X: the page says why its pools never pair across the vendors
    assert any("within one vendor only" in c.value and "ROCm" in c.value for c in page.caption)


def test_a_bad_description_is_said_naming_the_workload_and_field(page):
    _text_area(page).set_value(SMALL.replace("p95_ttft_s: 1,", "p95_ttft_s: -1,"))
    page.button(key="fleet.apply").click().run()
    assert not page.exception
    shown = [e.value.replace("\\", "") for e in page.error]  # the message is shown as plain text, escaped
    assert any("workload 'code'" in e and "p95_ttft_s" in e for e in shown), shown


def test_a_pasted_fleet_is_planned_exported_and_saved(page):
    _text_area(page).set_value(SMALL)
    page.button(key="fleet.apply").click().run()
    assert not page.exception, [e.value for e in page.exception]
    link = page.query_params["fleet"]
    cfg = from_query({"fleet": link if isinstance(link, str) else link[-1]})
    assert [w.name for w in cfg.fleet.workloads] == ["code"] and cfg.fleet != EXAMPLE
    page.button(key="fleet.plan").click().run()
    assert not page.exception, [e.value for e in page.exception]
    cards = {m.label: m.value for m in page.metric}
    nominal = float(cards["Nominal plan"].strip("$/h").replace(",", ""))
    robust = float(cards["Robust plan"].strip("$/h").replace(",", ""))
    assert 0 < nominal <= robust
    # one H100 at about half load: 700 x 0.6 W + its node's 247 W share, times the default PUE 1.58: about 0.9 kW
    assert cards["Power (nominal)"].endswith(" W") and 500 < float(cards["Power (nominal)"].split()[0]) < 1500
    assert {d.proto.label for d in page.get("download_button")} >= {"Export the plan (CSV)"}
    page.text_input(key="fleet.name").set_value("fleet study").run()
    page.button(key="fleet.save").click().run()
    assert not page.exception
    assert any(s.value.startswith("Saved: fleet study") for s in page.success)


def _editor_keys(at) -> set[str]:
    """The workloads editor's key (its version counts the times it restarted from the fleet)."""
    ver = at.session_state["fleet.source"][1]
    return {f"fleet.workloads.{v}" for v in range(ver + 1) if f"fleet.workloads.{v}" in at.session_state}


def test_a_typed_cell_keeps_its_editor_and_stays_through_reruns(page):
    (key,) = _editor_keys(page)
    # a rate typed into the first workload's row (chat, 10 requests/s in the example)
    page.session_state[key] = {"edited_rows": {0: {"rate_per_s": 12.0}}, "added_rows": [], "deleted_rows": []}
    page.run()
    assert not page.exception, [e.value for e in page.exception]
    # the fleet took the edit, and the editor kept its key (a new key would drop a cell typed during the rerun)
    assert _editor_keys(page) == {key}
    fleet = page.session_state["cfg.fleet"]
    assert fleet.workload("chat").rate_per_s == 12.0
    page.run()  # any later rerun: the edit stays
    assert page.session_state["cfg.fleet"].workload("chat").rate_per_s == 12.0 and _editor_keys(page) == {key}
    # a fleet from elsewhere (the description) restarts the editors from it
    _text_area(page).set_value(SMALL)
    page.button(key="fleet.apply").click().run()
    assert _editor_keys(page) != {key} and [w.name for w in page.session_state["cfg.fleet"].workloads] == ["code"]


def test_a_half_filled_row_keeps_the_plan_button_and_names_the_row(page):
    (key,) = _editor_keys(page)
    page.session_state[key] = {"edited_rows": {}, "added_rows": [{"name": "half"}], "deleted_rows": []}
    page.run()
    assert not page.exception, [e.value for e in page.exception]
    shown = [e.value.replace("\\", "") for e in page.error]
    assert any("half" in e and "workloads[2]" in e and "rate_per_s" in e for e in shown), shown
    assert "fleet.plan" in [b.key for b in page.button]  # the button stays
    page.button(key="fleet.plan").click().run()
    shown = [e.value.replace("\\", "") for e in page.error]
    assert any(e.startswith("Complete or delete that row first") for e in shown), shown
    assert not page.metric, "nothing is planned from a half-filled table"


def test_the_plan_cards_count_every_gpu_and_read_energy_in_watt_hours(page):
    _text_area(page).set_value(SMALL)
    page.button(key="fleet.apply").click().run()
    page.button(key="fleet.plan").click().run()
    assert not page.exception, [e.value for e in page.exception]
    cards = {m.label: m.value for m in page.metric}
    by_kind = next(d.value for d in page.dataframe if "spare_gpus_unpooled" in d.value.columns)
    nominal = by_kind[by_kind["plan"] == "nominal"]
    # the total-GPU card is the "By GPU kind" table's nominal GPUs, spares included
    assert cards["GPUs (nominal)"] == f"{int(nominal['gpus'].sum()):,}"
    assert int(nominal["gpus"].sum()) >= 1
    # the energy card: a short value in Wh / kWh / MWh (the unit in the value, not a long label that is cut)
    assert re.fullmatch(r"[0-9.,]+ (Wh|kWh|MWh)", cards["Energy / M tokens"]), cards["Energy / M tokens"]
