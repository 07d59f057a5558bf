"""``rabit video``: the JSON contract, bad input (exit 2, one line naming the flag), and the page agreeing with it."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import cli.video_cmd
from cli.main import main
from core import decision
from core.base import fmt_bytes, fmt_time, fmt_value
from core.config import RabitConfig, to_query
from dashboard import cache, state

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
BASIS = "heuristic range from the assumption bounds"
ISSUE = [
    "video",
    "--model",
    "wan2.1-t2v-14b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "8",
    "--height",
    "720",
    "--width",
    "1280",
    "--frames",
    "81",
    "--steps",
    "50",
]


def _json(args, capsys):
    capsys.readouterr()
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_issues_example_and_its_keys(capsys):
    out = _json(ISSUE, capsys)
    for k in ("latent_tokens", "flop_per_step", "step_s", "video_s", "memory_bytes_per_gpu", "fits"):
        assert k in out, k
    assert out["latent_tokens"] == 75_600 and out["flop_per_step"] == 13_046_577_627_136_000
    assert out["fits"] is True and out["video_s"] > out["denoise_s"] > 0
    assert out["range_basis"] == BASIS
    r = out["ranges"]["video_s"]
    assert r["low"] < out["video_s"] < r["high"]
    assert "p95_latency_s" not in out  # no --rate, no queue


def test_rate_adds_the_queue_keys_and_saturation_past_capacity(capsys):
    out = _json(ISSUE + ["--rate", "10"], capsys)
    for k in ("p95_latency_s", "cost_per_video_usd", "saturated"):
        assert k in out, k
    assert out["saturated"] is False and out["p95_latency_s"] > out["video_s"]
    assert out["ranges"]["p95_latency_s"]["low"] < out["p95_latency_s"] < out["ranges"]["p95_latency_s"]["high"]
    over = _json(ISSUE + ["--rate", str(1.5 * out["capacity_per_hour"])], capsys)
    assert over["saturated"] is True and "saturated" in over["verdict"]


def test_the_flags_move_what_they_should(capsys):
    base = _json(ISSUE, capsys)
    twice = _json(ISSUE[:-2] + ["--steps", "100"], capsys)
    assert twice["denoise_s"] == pytest.approx(2 * base["denoise_s"], rel=1e-12)
    ring = _json(ISSUE + ["--sp", "ring", "--cfg-parallel"], capsys)
    assert ring["sp"] == "ring" and ring["cfg_parallel"] is True and ring["sp_degree"] == 4
    low = _json(ISSUE + ["--bound", "low"], capsys)
    assert low["video_s"] > base["video_s"]
    secs = _json(["video", "--seconds", "5"], capsys)
    assert secs["frames"] == 81


def test_recommend_names_a_fleet(capsys):
    out = _json(["video", "--rate", "20", "--p95-target-s", "900", "--recommend"], capsys)
    rec = out["recommendation"]
    assert rec is not None and rec["p95_latency_s"] <= 900 and rec["replicas"] >= 1
    assert out["recommendation_why"].startswith(f"{rec['replicas']} x {rec['gpus']} {rec['gpu']}")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--gpus", "3"], "--gpus"),
        (["--frames", "80"], "--frames"),
        (["--height", "721"], "--height"),
        (["--gpu", "h100"], "--gpu"),
        (["--model", "sora"], "--model"),
        (["--gpus", "0"], "--gpus"),
        (["--rate", "-1"], "--rate"),
        (["--steps", "nan"], "--steps"),
        (["--model", "hunyuanvideo", "--frames", "129", "--cfg-parallel"], "--cfg-parallel"),
        (["--recommend"], "--recommend"),
        (["--assume", "attn_eff=2"], "--assume"),
        # a flag this run would not read is refused, never dropped (issue 27 point 12's rule)
        (["--fps", "24"], "--fps"),  # the clip is --frames unless --seconds is given
        (["--frames", "81", "--seconds", "2"], "--frames"),  # --seconds replaces --frames
        (["--replicas", "2"], "--replicas"),  # no queue without --rate
        (["--seed", "3"], "--seed"),
        (["--p95-target-s", "100", "--rate", "10"], "--p95-target-s"),  # only the search reads it
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(["video"] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("\n") == 1, err


def test_the_config_file_is_the_pages_request(tmp_path, capsys):
    cfg = RabitConfig(gpu="a100-80gb", video={"model": "cogvideox-5b", "height": 480, "width": 720, "frames": 49})
    f = tmp_path / "cfg.json"
    f.write_text(cfg.model_dump_json())
    out = _json(["video", "--config", str(f)], capsys)
    assert (out["model"], out["gpu"], out["frames"]) == ("cogvideox-5b", "a100-80gb", 49)
    assert out["p95_latency_s"] > 0  # the file's rate (the group's default 10 videos/h)
    flag = _json(["video", "--config", str(f), "--gpus", "2"], capsys)
    assert flag["gpus"] == 2 and flag["model"] == "cogvideox-5b"


def test_the_page_and_the_cli_call_one_core_function():
    assert cli.video_cmd.video_report is decision.video_report
    assert "decision.video_report(cfg)" in inspect.getsource(cache.video_report)


def test_the_page_shows_the_clis_numbers_from_a_link(clear_cache, capsys):
    cfg = RabitConfig(video={"model": "hunyuanvideo", "frames": 129, "gpus": 4, "rate_per_hour": 6.0})
    out = _json(
        ["video", "--model", "hunyuanvideo", "--frames", "129", "--gpus", "4", "--rate", "6"],
        capsys,
    )
    at = AppTest.from_file(APP, default_timeout=240)
    for k, v in to_query(cfg).items():
        at.query_params[k] = v
    at.query_params["video.tab"] = "Queue and cost"
    at.run()
    at.switch_page("../pages/video.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = {}
    for m in at.metric:
        shown.setdefault(m.label, m.value)
    assert shown["Time per video"] == fmt_time(out["video_s"])
    assert shown["Memory per GPU"] == fmt_bytes(out["memory_bytes_per_gpu"])
    assert shown["Cost per video"] == f"${out['cost_per_video_full_load_usd']:,.3g}"
    assert shown["Latent tokens per video"] == fmt_value(out["latent_tokens"], "")
    assert shown["p95 latency"] == fmt_time(out["p95_latency_s"])
    captions = [c.value for c in at.caption]
    r = out["ranges"]["video_s"]
    assert f"range: {fmt_time(r['low'])} … {fmt_time(r['high'])} ({BASIS})" in captions
    assert at.number_input(key=state.key("video.gpus")).value == 4
