"""Every page's exports hold something and name what it was computed from: the one-page summary has the page's
numbers or verdicts and the view's inputs, the tables' zip has its tables (or a note of what the page showed) and
``inputs.csv``; the Fleet page's exports hold the plan's numbers, tables and the fleet it was planned for."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from test_fleet_page import SMALL, _text_area
from test_range_pages_store import _app

from dashboard import share

#: Pages whose defaults run no search longer than a few seconds on a loaded machine: the optimizer's and the next
#: experiment's searches at their smallest (the numbers in their exports are the same kind at any size).
SMALL_SEARCH = {
    "targets.max_simulations": "2",
    "targets.requests_per_simulation": "200",
    "workload.num_requests": "400",
}


def exports(at) -> tuple[str, dict[str, str]]:
    """The page's summary (Markdown) and its tables' zip as {file name: text}."""
    rec = at.session_state[share.KEY]
    cfg = at.session_state["_config"]
    md = share.summary_markdown(rec, cfg, "http://rabit.example/x", "now")
    z = zipfile.ZipFile(io.BytesIO(share.tables_zip(rec, cfg)))
    return md, {n: z.read(n).decode() for n in z.namelist()}


#: Every page but Fleet (its plan waits for a button: the test below).
PAGES = sorted(p.name for p in (Path(__file__).resolve().parent.parent / "pages").glob("*.py") if p.name != "fleet.py")


@pytest.mark.parametrize("page", PAGES)
def test_every_pages_exports_hold_its_results_and_name_their_inputs(page, clear_cache):
    at = _app(page, **SMALL_SEARCH)
    rec = at.session_state[share.KEY]
    assert rec.cards or rec.notes or rec.tables, f"{page}: the page recorded nothing for its exports"
    md, files = exports(at)
    # the summary: a number or a verdict, then the inputs it was computed from
    body = md.split("## The view")[0]
    assert "| Number | Value | Range |" in body or "\n- " in body or rec.notes, page
    assert "## The view" in md and "**Model**" in md and "**Request**" in md and "**Assumptions**" in md, page
    # the zip: the inputs, and each table the page drew (or what it showed when it drew none)
    inputs = pd.read_csv(io.StringIO(files["inputs.csv"]))
    assert list(inputs.columns) == ["input", "value"] and {"Model", "GPUs", "Request"} <= set(inputs["input"]), page
    tables = [n for n in files if n not in ("inputs.csv", "README.txt")]
    assert len(tables) == len(rec.tables), page
    for n in tables:
        assert files[n].count("\n") >= 2, f"{page}: {n} has no row"  # a header and at least one row
    if not tables:
        assert "showed no table" in files["README.txt"] and files["README.txt"].count("\n") >= 2, page


def test_the_fleet_plans_exports_hold_the_plan_and_its_fleet(clear_cache):
    at = _app("fleet.py")
    _text_area(at).set_value(SMALL)
    at.button(key="fleet.apply").click().run()
    at.button(key="fleet.plan").click().run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {m.label: m.value for m in at.metric}
    md, files = exports(at)
    # the plan's numbers as the page shows them, and its GPUs
    for label in ("Nominal plan", "Robust plan", "Robustness costs"):
        assert f"| {share._md(label)} | {share._md(shown[label])} |" in md, label
    assert "GPUs \\(nominal plan, spares included\\)" in md
    # the fleet it was planned for: the workload, its rate, lengths and targets; the limits
    assert "**Workload code**" in md and "llama\\-3.1\\-8b at 5 requests/s" in md and "500 prompt \\+ 100 output" in md
    assert "p95 TTFT ≤ 1 s" in md and "GPU kinds h100\\-sxm" in md
    # the zip: each plan as a table with a row per workload, the workloads it was planned for, the inputs
    assert "README.txt" not in files
    for name in ("nominal-plan.csv", "robust-plan.csv", "by-gpu-kind.csv", "workloads-input.csv", "scenario-peak.csv"):
        assert name in files and files[name].count("\n") >= 2, name
    nominal = pd.read_csv(io.StringIO(files["nominal-plan.csv"]))
    assert "code" in set(nominal.astype(str).values.ravel())
    inputs = pd.read_csv(io.StringIO(files["inputs.csv"]))
    assert "Workload code" in set(inputs["input"])
