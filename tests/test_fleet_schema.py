"""The fleet description: the issue's smallest file is a contract, every error names the workload (or scenario,
site) and the field, and the file, the page's tables and the link carry the same fleet."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.config import (
    EXAMPLE,
    EXAMPLE_YAML,
    NOMINAL,
    FleetError,
    RabitConfig,
    Scenario,
    fleet_from_tables,
    fleet_json,
    fleet_tables,
    fleet_yaml,
    from_query,
    from_query_report,
    parse_fleet,
    to_query,
)

#: The smallest valid file, verbatim from issue 24: its field names are a contract.
ISSUE_FILE = """\
workloads:
  - {name: chat, model: llama-3.1-70b, rate_per_s: 10, input_tokens: 1000, output_tokens: 250,
     p95_ttft_s: 2, p95_itl_s: 0.04}
  - {name: code, model: llama-3.1-8b, rate_per_s: 40, input_tokens: 2000, output_tokens: 400, p95_ttft_s: 1,
     p95_itl_s: 0.05}
scenarios:
  - {name: peak, rate_factor: 1.3}
constraints: {gpus: [h100-sxm, h200-sxm, mi300x]}
"""


def test_the_issues_smallest_file_is_valid_and_reads_as_written():
    f = parse_fleet(ISSUE_FILE)
    chat, code = f.workloads
    assert (chat.name, chat.model, chat.rate_per_s, chat.input_tokens, chat.output_tokens) == (
        "chat",
        "llama-3.1-70b",
        10,
        1000,
        250,
    )
    assert (chat.p95_ttft_s, chat.p95_itl_s, chat.p95_e2e_s) == (2, 0.04, None)
    assert (code.model, code.rate_per_s, code.p95_ttft_s, code.p95_itl_s) == ("llama-3.1-8b", 40, 1, 0.05)
    assert f.scenarios == (Scenario(name="peak", rate_factor=1.3),)
    assert f.constraints.gpus == ("h100-sxm", "h200-sxm", "mi300x")
    assert f == EXAMPLE and ISSUE_FILE == EXAMPLE_YAML  # the page starts from it


def _error(text: str) -> str:
    with pytest.raises(FleetError) as e:
        parse_fleet(text, "f.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("f.yaml: ")
    return msg


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("p95_ttft_s: 1,", "p95_ttft_s: -1,", ("workload 'code'", "workloads[1]", "p95_ttft_s")),
        ("p95_ttft_s: 1,", "p95_ttf_s: 1,", ("workload 'code'", "p95_ttf_s", "did you mean p95_ttft_s")),
        ("rate_per_s: 10,", "rate_per_s: fast,", ("workload 'chat'", "workloads[0]", "rate_per_s")),
        ("llama-3.1-8b", "llama-3.1-9b", ("workload 'code'", "field model", "did you mean llama-3.1-8b")),
        ("rate_factor: 1.3", "rate_factor: 1000", ("scenario 'peak'", "scenarios[0]", "rate_factor")),
        ("{name: peak, rate_factor: 1.3}", "{name: nominal}", ("scenario 'nominal'", "always planned")),
        ("mi300x]", "mi300]", ("constraints.gpus", "did you mean mi300x")),
        ("name: code", "name: chat", ("two workloads are named 'chat'",)),
        ("output_tokens: 400,", "output_tokens: 400, peak_factor: 2, hourly_profile: [1, 2],", ("workload 'code'",)),
    ],
)
def test_each_error_names_the_entry_and_the_field(old, new, words):
    assert old in ISSUE_FILE
    msg = _error(ISSUE_FILE.replace(old, new, 1))
    for w in words:
        assert w in msg, (w, msg)


def test_documents_that_are_not_fleets_are_refused_in_one_line():
    assert "workloads" in _error("workloads: []")
    assert "mapping" in _error("- a\n- b\n")
    assert "anchors and aliases" in _error("a: &x [1, 2]\nb: *x\n")  # an alias can expand without bound
    assert "YAML" in _error("workloads: [\n")
    assert "rate_per_s" in _error('{"workloads": [{"name": "x", "model": "llama-3.1-8b"}]}')  # JSON too
    assert "give model" in _error("workloads: [{name: x, rate_per_s: 1}]")
    assert "deeper" in _error("a: " + "[" * 40 + "]" * 40)
    assert "scenario 'peak' names workload 'chta'" in _error(
        ISSUE_FILE.replace("rate_factor: 1.3}", "rate_factor: 1.3, workloads: [chta]}")
    )


def test_the_peak_rate_is_the_peak_factor_or_the_profiles_peak_over_its_mean():
    f = parse_fleet(
        ISSUE_FILE.replace("rate_per_s: 10,", "rate_per_s: 10, peak_factor: 1.5,").replace(
            "rate_per_s: 40,",
            "rate_per_s: 40, hourly_profile: [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2],",
        )
    )
    chat, code = f.workloads
    assert chat.design_rate_per_s == 15.0  # 10 x 1.5
    # the profile's mean is (6 x 1 + 12 x 2 + 6 x 4) / 24 = 54 / 24 = 2.25, its peak 4: 40 x 4 / 2.25 = 71.1
    assert code.design_rate_per_s == pytest.approx(40 * 4 / 2.25)
    assert "24 values" in _error(ISSUE_FILE.replace("rate_per_s: 40,", "rate_per_s: 40, hourly_profile: [1, 2],"))


FULL_FILE = """\
workloads:
  - {name: chat, model: llama-3.1-70b, rate_per_s: 10, input_tokens: 1000, output_tokens: 250,
     p95_ttft_s: 2, p95_itl_s: 0.04, priority: 2, adapters: 12}
  - {name: code, model: llama-3.1-8b, rate_per_s: 40, input_tokens: 2000, output_tokens: 400, p95_ttft_s: 1,
     p95_itl_s: 0.05, gpus: [mi300x, h100-sxm]}
scenarios:
  - {name: peak, rate_factor: 1.3, cap: {h100-sxm: 8}, price_factors: {mi300x: 1.2}}
  - {name: long, input_factor: 2, workloads: [code], withdraw: [h200-sxm]}
constraints:
  gpus: [h100-sxm, h200-sxm, mi300x]
  max_gpus: {mi300x: 64}
  max_usd_per_hour: 500
  sites:
    - {name: east, pue: 1.2, power_budget_kw: 40, gpus: [mi300x]}
    - {name: west}
availability:
  mi300x: {failure_rate_per_gpu_hour: 1.0e-4, repair_hours: 48}
settings: {requests_per_simulation: 500, max_simulations: 4, ranges: false}
"""


def test_file_tables_and_link_carry_the_same_fleet():
    full = parse_fleet(FULL_FILE)
    assert full.constraints.site_of("mi300x").name == "east" and full.constraints.site_of("h100-sxm").name == "west"
    assert parse_fleet(fleet_yaml(full)) == full
    assert parse_fleet(fleet_json(full), "f.json") == full
    c = full.constraints
    assert (
        fleet_from_tables(
            fleet_tables(full),
            gpus=c.gpus,
            max_gpus=dict(c.max_gpus),
            max_usd_per_hour=c.max_usd_per_hour,
            settings=full.settings,
            keep=full,
        )
        == full
    )
    cfg = RabitConfig(fleet=full)
    q = to_query(cfg)
    assert set(q) == {"fleet"} and q["fleet"].startswith("z")
    assert from_query(q) == cfg
    assert json.loads(cfg.model_dump_json())["fleet"]["workloads"][0]["name"] == "chat"


def test_a_bad_fleet_in_a_link_is_reported_and_the_rest_of_the_link_applies():
    bad = to_query(RabitConfig(fleet=EXAMPLE))["fleet"][:-6] + "AAAAAA"
    cfg, issues = from_query_report({"fleet": bad, "tp": "4"})
    assert cfg.tp == 4 and cfg.fleet is None and [i.param for i in issues] == ["fleet"]


def test_a_table_row_error_names_the_row_and_a_zero_target_is_no_target():
    t = fleet_tables(EXAMPLE)
    t["workloads"][1]["p95_e2e_s"] = 0
    t["workloads"][0]["p95_ttft_s"] = 0
    f = fleet_from_tables(t, gpus=EXAMPLE.constraints.gpus)
    assert f.workloads[0].p95_ttft_s is None and f.workloads[1].p95_e2e_s is None
    t["scenarios"][0]["cap"] = "h100-sxm:8"
    with pytest.raises(FleetError, match="kind=value"):
        fleet_from_tables(t)
    t["scenarios"][0]["cap"] = "h100-sxm=8"
    t["workloads"][1]["rate_per_s"] = -3
    with pytest.raises(FleetError, match=r"workload 'code' \(workloads\[1\]\): field rate_per_s"):
        fleet_from_tables(t)


def test_the_nominal_name_is_reserved_and_the_scenario_filter_names_unknowns():
    assert NOMINAL == "nominal"
    f = parse_fleet(
        ISSUE_FILE.replace(
            "{name: peak, rate_factor: 1.3}", "{name: peak, rate_factor: 1.3}\n  - {name: long, input_factor: 2}"
        )
    )
    assert [s.name for s in f.with_scenarios(("long",)).scenarios] == ["long"]
    assert f.with_scenarios(None) == f
    with pytest.raises(FleetError, match="did you mean peak"):
        f.with_scenarios(("peek",))


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(1e-3, 1e5),
    inp=st.integers(1, 100_000),
    out=st.integers(1, 100_000),
    factor=st.floats(0.01, 100),
    ttft=st.one_of(st.none(), st.floats(1e-3, 100)),
)
def test_any_valid_fleet_round_trips_through_its_file_and_link(rate, inp, out, factor, ttft):
    text = (
        f"workloads:\n  - {{name: w, model: llama-3.1-8b, rate_per_s: {rate!r}, input_tokens: {inp}, "
        f"output_tokens: {out}, p95_ttft_s: {'null' if ttft is None else repr(ttft)}}}\n"
        f"scenarios:\n  - {{name: s, rate_factor: {factor!r}}}\n"
    )
    f = parse_fleet(text)
    assert parse_fleet(fleet_yaml(f)) == f
    assert from_query(to_query(RabitConfig(fleet=f))).fleet == f
