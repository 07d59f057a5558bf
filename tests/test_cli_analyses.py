"""``rabit analyses`` and ``rabit calibrate``: the JSON keys are a contract; ``--analysis ID`` on estimates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import fails, run

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm_bench_serve_llama-3.1-8b_h100.json"


def test_save_list_show_and_estimate_from_the_saved_analysis(capsys):
    saved = run(
        capsys,
        "analyses",
        "save",
        "--name",
        "8B on H100",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "1",
        "--batch",
        "16",
        "--json",
    )
    aid = saved["id"]
    listed = run(capsys, "analyses", "list", "--json")["analyses"]
    assert [(x["id"], x["name"], x["model"], x["gpu"]) for x in listed] == [
        (aid, "8B on H100", "llama-3.1-8b", "h100-sxm")
    ]
    assert "updated_at" in listed[0]
    assert run(capsys, "analyses", "list", "--search", "b200", "--json")["analyses"] == []
    shown = run(capsys, "analyses", "show", aid, "--json")
    assert shown["config"]["batch"] == 16 and shown["runs"] == [] and [r["revision"] for r in shown["revisions"]] == [1]
    assert shown["results"]["prefill_s"] > 0  # the headline snapshot

    plain = run(capsys, "speed", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--batch", "16", "--json")
    from_saved = run(capsys, "speed", "--analysis", aid, "--json")
    assert from_saved["prefill_s"] == plain["prefill_s"] and from_saved["batch"] == 16
    overridden = run(capsys, "speed", "--analysis", aid, "--batch", "4", "--json")  # a flag alongside wins
    assert overridden["batch"] == 4 and overridden["model"] == "llama-3.1-8b"
    assert run(capsys, "memory", "--analysis", aid, "--json")["gpus"] == 1
    assert "--analysis" in fails(capsys, "speed", "--analysis", "nope", "--json")


def test_second_save_on_an_old_revision_is_refused_then_delete_restore_export_import(capsys, tmp_path):
    aid = run(capsys, "analyses", "save", "--name", "shared", "--model", "llama-3.1-8b", "--tp", "1", "--json")["id"]
    assert (
        run(capsys, "analyses", "save", "--analysis", aid, "--revision", "1", "--batch", "8", "--json")["revision"] == 2
    )
    assert "revision 3" in fails(capsys, "analyses", "save", "--analysis", aid, "--revision", "1", "--batch", "9")
    assert run(capsys, "analyses", "show", aid, "--json")["config"]["batch"] == 8  # not overwritten
    run(capsys, "analyses", "delete", aid, "--json")
    assert run(capsys, "analyses", "list", "--json")["analyses"] == []
    run(capsys, "analyses", "restore", aid, "--json")
    out = tmp_path / "a.json"
    run(capsys, "analyses", "export", aid, "--output", str(out), "--json")
    new = run(capsys, "analyses", "import", str(out), "--json")["id"]
    assert new != aid and len(run(capsys, "analyses", "show", new, "--json")["revisions"]) == 2
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    assert "not a RA-BIT analysis export" in fails(capsys, "analyses", "import", str(tmp_path / "bad.json"))


def test_calibrate_add_and_show_keys(capsys, tmp_path):
    aid = run(capsys, "analyses", "save", "--name", "cal", "--model", "llama-3.1-8b", "--tp", "1", "--json")["id"]
    run(capsys, "calibrate", "add", "--analysis", aid, "--file", str(FIXTURE), "--json")
    m = run(capsys, "calibrate", "show", "--analysis", aid, "--json")["metrics"]
    assert {"ttft_s.p50", "ttft_s.p99", "itl_s.p50", "e2e_s.p50", "throughput_tokens_per_s"} <= set(m)
    t = m["ttft_s.p50"]
    assert {"n", "bias", "factor", "interval", "basis", "runs"} <= set(t)
    assert t["n"] == 1 and t["basis"] == "heuristic"
    assert t["interval"] == pytest.approx([0.7 * t["factor"], 1.3 * t["factor"]])
    assert t["runs"][0]["measured"] == pytest.approx(0.03790521383099258)

    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps({**json.loads(FIXTURE.read_text()), "median_itl_ms": -1}))
    err = fails(capsys, "calibrate", "add", "--analysis", aid, "--file", str(FIXTURE), "--file", str(bad))
    assert "median_itl_ms' must be positive" in err
    assert len(run(capsys, "analyses", "show", aid, "--json")["runs"]) == 1  # nothing attached from the refused call


def test_estimates_from_a_calibrated_analysis_carry_the_calibrated_value_beside_the_analytical(capsys):
    aid = run(
        capsys,
        "analyses",
        "save",
        "--name",
        "cal",
        "--model",
        "llama-3.1-8b",
        "--tp",
        "1",
        "--input",
        "1000",
        "--output",
        "250",
        "--json",
    )["id"]
    run(capsys, "calibrate", "add", "--analysis", aid, "--file", str(FIXTURE), "--json")
    factor = run(capsys, "calibrate", "show", "--analysis", aid, "--json")["metrics"]["ttft_s.p50"]["factor"]
    sim = run(capsys, "simulate", "--analysis", aid, "--rate", "4", "--requests", "300", "--json")
    c = sim["calibrated"]["ttft_s.p50"]
    assert (c["basis"], c["n_runs"]) == ("calibrated", 1)
    assert c["value"] == pytest.approx(sim["ttft_s"]["p50"] * factor)  # analytical x factor
    assert (c["low"], c["high"]) == (pytest.approx(0.7 * c["value"]), pytest.approx(1.3 * c["value"]))
    sp = run(capsys, "speed", "--analysis", aid, "--json")
    assert sp["calibrated"]["prefill_s"]["metric"] == "ttft_s.p50" and "ranges" in sp  # beside the heuristic range
    assert "calibrated" not in run(capsys, "speed", "--model", "llama-3.1-8b", "--tp", "1", "--json")


def test_telemetry_attaches_to_an_analysis_in_its_stored_form(capsys, tmp_path):
    from core.operations import from_payload, parse

    metrics = Path(__file__).resolve().parent / "fixtures" / "vllm_metrics.txt"
    aid = run(capsys, "analyses", "save", "--name", "tel", "--model", "llama-3.1-8b", "--tp", "1", "--json")["id"]
    out = run(capsys, "analyses", "attach-telemetry", aid, "--file", str(metrics), "--json")
    stored = run(capsys, "analyses", "show", aid, "--json")["telemetry"]
    assert len(stored) == 1 and out["samples"] == len(parse(metrics.read_bytes(), metrics.name).samples)
    assert from_payload(stored[0]["payload"]) == parse(metrics.read_bytes(), metrics.name)  # read back whole
    (tmp_path / "x.txt").write_bytes(b"\x00\x01binary")
    assert "--file" in fails(capsys, "analyses", "attach-telemetry", aid, "--file", str(tmp_path / "x.txt"))
    assert len(run(capsys, "analyses", "show", aid, "--json")["telemetry"]) == 1
