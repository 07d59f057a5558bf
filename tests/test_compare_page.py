"""The Compare page compares each kind of analysis by its own numbers: two saved fleet plans by cost, GPUs and each
workload's pick (not the sidebar's single deployment); two serving views by the p95s their simulations give under
the configured load; the inputs that differ as a readable (field, A, B) table; a summary that names what was
compared; and a link that reopens the same comparison."""

from __future__ import annotations

from test_range_pages_store import _app

from core.base import fmt_latency
from core.config import DEFAULT, EXAMPLE, to_query
from core.decision import compare_analyses
from dashboard import share


def _fleet_results(usd: float, gpus: int, chat: str) -> dict:
    """What the Fleet page saves with a plan (core.decision.plan_headline's keys)."""
    return {
        "fleet.nominal_cost_per_hour": usd,
        "fleet.robust_cost_per_hour": usd * 1.25,
        "fleet.robustness_cost_per_hour": usd * 0.25,
        "fleet.nominal_gpus": gpus,
        "fleet.robust_gpus": gpus + 2,
        "fleet.power_kw": gpus * 0.9,
        "fleet.picks": {"chat": {"nominal": chat, "robust": chat}, "code": {"nominal": "1 x h100", "robust": None}},
    }


def _two_fleets(url: str | None = None):
    """Two saved fleet plans ($37.02/h today, $40.80/h with the chat workload grown to 12 requests/s) in the store
    at ``url`` (default: the test's own database)."""
    from store import Store, database_url

    s = Store(url or database_url())
    slow = EXAMPLE.model_copy(
        update={"workloads": (EXAMPLE.workloads[0].model_copy(update={"rate_per_s": 12}), *EXAMPLE.workloads[1:])}
    )
    a = s.create(
        "fleet today",
        DEFAULT.with_(fleet=EXAMPLE),
        results=_fleet_results(37.02, 12, "4 x h100"),
        note="",
        saved_by="t",
    )
    b = s.create(
        "fleet grown", DEFAULT.with_(fleet=slow), results=_fleet_results(40.80, 14, "2 x h200"), note="", saved_by="t"
    )
    return a, b


def _metrics(at) -> dict:
    return {m.label: m for m in at.metric}


def _table(at, name):
    return next(df for n, df in at.session_state[share.KEY].tables if n == name)


def test_two_saved_fleet_plans_compare_by_their_own_numbers(clear_cache):
    a, b = _two_fleets()
    at = _app("compare.py")
    at.radio(key="cmp.A.src").set_value("A saved analysis").run()
    at.selectbox(key="cmp.A.id").set_value(a).run()
    at.selectbox(key="cmp.B.id").set_value(b).run()
    assert not at.exception, [e.value for e in at.exception]
    m = _metrics(at)
    # $37.02/h against $40.80/h: +10.2 %, not the sidebar's deployment at +0 %
    assert m["Nominal plan (B)"].value == "$40.80/h" and m["Nominal plan (B)"].proto.delta == "+10% against A"
    assert "A: $37.02/h" in [c.value for c in at.caption]
    assert m["GPUs (nominal plan) (B)"].value == "14" and m["Robust plan (B)"].value == "$51.00/h"
    assert not any("TTFT" in k or "Decode" in k for k in m)  # no serving number of the sidebar's deployment
    picks = _table(at, "picks")
    chat = picks[picks["workload"] == "chat"].iloc[0]
    assert (chat["A nominal"], chat["B nominal"], chat["same picks"]) == ("4 x h100", "2 x h200", "no")
    # the inputs that differ: one readable row per field, the workload by name
    differ = _table(at, "inputs that differ")
    assert list(differ.columns) == ["field", "A", "B"]
    row = differ[differ["field"] == "fleet.workloads[chat].rate_per_s"].iloc[0]
    assert (row["A"], row["B"]) == ("10", "12") and len(differ) == 1
    # the summary names what was compared: both names, the kind, the dates
    rec = at.session_state[share.KEY]
    md = share.summary_markdown(rec, at.session_state["_config"], "http://h/compare", "now")
    assert "fleet today, revision 1" in md and "fleet grown, revision 1" in md and "fleet plans" in md
    date = rec.inputs[0][1].split(", ")[-1].rstrip(")")
    assert date[:4].isdigit() and date[4] == "-"  # the revision's date, YYYY-MM-DD HH:MM
    assert f"| {share._md('Nominal plan: B')} | {share._md('$40.80/h')} |" in md


def test_the_copied_link_reopens_the_same_comparison(clear_cache):
    a, b = _two_fleets()
    at = _app("compare.py")
    at.radio(key="cmp.A.src").set_value("A saved analysis").run()
    at.selectbox(key="cmp.A.id").set_value(a).run()
    at.selectbox(key="cmp.B.id").set_value(b).run()
    link = {k: v for k, v in at.query_params.items()}
    assert {"cmp.A.src", "cmp.A.id", "cmp.A.rev", "cmp.B.src", "cmp.B.id", "cmp.B.rev"} <= set(link)
    first = {k: v.value for k, v in _metrics(at).items()}
    again = _app("compare.py", **{k: (v[-1] if isinstance(v, list) else v) for k, v in link.items()})
    assert not again.warning, [w.value for w in again.warning]
    assert {k: v.value for k, v in _metrics(again).items()} == first
    assert again.selectbox(key="cmp.A.id").value == a and again.selectbox(key="cmp.B.id").value == b
    # a choice the page does not offer is said, not silently replaced
    odd = _app("compare.py", **{"cmp.A.src": "A saved analysis", "cmp.A.id": "nope"})
    assert any("cmp.A.id=nope" in w.value for w in odd.warning)


def test_two_serving_views_compare_by_their_p95s_under_load(clear_cache):
    b_cfg = DEFAULT.with_(gpu="b200", tp=4, gpus_per_node=4)
    at = _app("compare.py")
    at.text_input(key="cmp.B.link").set_value(
        "http://rabit.example/speed?" + "&".join(f"{k}={v}" for k, v in to_query(b_cfg).items())
    ).run()
    assert not at.exception, [e.value for e in at.exception]
    want = {k: c for k, _, _, c in compare_analyses("serving views under load", DEFAULT, b_cfg).numbers}
    m = _metrics(at)
    for key, label in (("ttft_s", "p95 TTFT"), ("itl_s", "p95 ITL"), ("e2e_s", "p95 end-to-end")):
        assert m[f"{label} (B)"].value == fmt_latency(want[key].b.value), label
        assert f"A: {fmt_latency(want[key].a.value)}" in [c.value for c in at.caption], label
    assert not any(k.startswith(("Decode step", "Tokens/s", "TTFT (whole batch)")) for k in m)  # no batch-32 numbers
    # under the configured load: each side's rate and lengths said
    assert any(c.value.startswith("B: 4 x b200, 0.5 requests/s of 4,096 prompt") for c in at.caption)
    assert set(_table(at, "inputs that differ")["field"]) == {"gpu", "tp", "gpus_per_node"}
