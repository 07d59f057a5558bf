"""Telemetry parsing and the diagnostic rules, on dumps built from real vLLM and dcgm-exporter metric names.

The fixtures ``tests/fixtures/vllm_metrics.txt`` (a full vLLM V1 ``/metrics`` page: process collectors,
every ``vllm:`` family with its HELP/TYPE lines, deprecated aliases, ``_created`` samples) and
``tests/fixtures/dcgm_metrics.txt`` (dcgm-exporter, 4 x H100 of one node) describe a healthy deployment. Each
rule's crafted dump changes only the values that rule reads.
"""

import math
import re
from pathlib import Path

import pytest

from core import operations
from core.operations import TelemetryError

FIX = Path(__file__).parent / "fixtures"
VLLM = (FIX / "vllm_metrics.txt").read_text()
DCGM = (FIX / "dcgm_metrics.txt").read_text()
EXPECT = operations.Expectation(p95_ttft_s=0.35, p95_itl_s=0.04, prefix_cache_frac=0.3)


def _hist(text: str, base: str, obs: list[float]) -> str:
    """Rewrite one histogram's buckets, _count and _sum from observations."""

    def bucket(m: re.Match) -> str:
        le = m.group(2)
        n = len(obs) if le == "+Inf" else sum(1 for x in obs if x <= float(le))
        return f'{m.group(1)}le="{le}"}} {float(n)}'

    text = re.sub(rf'({re.escape(base)}_bucket\{{[^}}]*?)le="([^"]+)"\}} \S+', bucket, text)
    text = re.sub(rf"({re.escape(base)}_count\{{[^}}]*\}}) \S+", rf"\g<1> {float(len(obs))}", text)
    return re.sub(rf"({re.escape(base)}_sum\{{[^}}]*\}}) \S+", rf"\g<1> {sum(obs)}", text)


def dump(values: dict[str, float] | None = None, drop: tuple[str, ...] = (), hist: dict | None = None) -> bytes:
    """The healthy dump with some sample values set (every series of that name), some metrics removed."""
    text = VLLM + DCGM
    for name, v in (values or {}).items():
        text, n = re.subn(rf"^({re.escape(name)}(\{{[^}}]*\}})?) \S+$", rf"\g<1> {v}", text, flags=re.MULTILINE)
        assert n, name
    for base, obs in (hist or {}).items():
        text = _hist(text, base, obs)
    lines = [
        ln
        for ln in text.splitlines()
        if not any(
            re.match(
                rf"(# (HELP|TYPE) )?{re.escape(d)}(_bucket|_sum|"
                rf"_count|_created|_total)?[{{ ]",
                ln,
            )
            for d in drop
        )
    ]
    return ("\n".join(lines) + "\n").encode()


def _diag(data: bytes, expect: operations.Expectation = EXPECT) -> operations.Diagnosis:
    return operations.diagnose(operations.parse(data, "dump"), expect)


# (rule, values, histograms, expectation, metrics to drop for "not evaluated")
CASES = [
    (
        "kv_pool_full",
        {"vllm:kv_cache_usage_perc": 0.97, "vllm:gpu_cache_usage_perc": 0.97, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.12},
        None,
        EXPECT,
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",),
    ),
    ("queue_growing", {"vllm:num_requests_waiting": 25}, None, EXPECT, ("vllm:num_requests_waiting",)),
    ("preemptions", {"vllm:num_preemptions_total": 5200}, None, EXPECT, ("vllm:num_preemptions",)),
    # 10 % of the inter-token gaps at 200 ms behind prefill chunks, the rest at 28 ms: p99 / p50 = 7
    (
        "prefill_interference",
        {},
        {"vllm:inter_token_latency_seconds": [0.028] * 900 + [0.2] * 100},
        EXPECT,
        ("vllm:prompt_tokens",),
    ),
    (
        "bandwidth_bound_small_batch",
        {"DCGM_FI_PROF_DRAM_ACTIVE": 0.75, "vllm:num_requests_running": 6, "vllm:kv_cache_usage_perc": 0.12},
        None,
        EXPECT,
        ("DCGM_FI_PROF_DRAM_ACTIVE",),
    ),
    (
        "compute_bound_prefill",
        {
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.78,
            "vllm:prompt_tokens_total": 9.0e6,
            "vllm:generation_tokens_total": 1.0e6,
        },
        None,
        EXPECT,
        ("vllm:generation_tokens",),
    ),
    (
        "over_provisioned",
        {"DCGM_FI_DEV_GPU_UTIL": 12, "vllm:kv_cache_usage_perc": 0.08},
        None,
        EXPECT,
        ("DCGM_FI_DEV_GPU_UTIL",),
    ),
    (
        "exposed_tp_comm",
        {"DCGM_FI_PROF_SM_ACTIVE": 0.85, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.2},
        None,
        EXPECT,
        ("DCGM_FI_PROF_NVLINK_TX_BYTES",),
    ),
    (
        "prefix_cache_misses",
        {"vllm:prefix_cache_hits_total": 1000.0},
        None,
        EXPECT,
        ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    ),
    (
        "memory_headroom",
        {"DCGM_FI_DEV_FB_FREE": 1200, "DCGM_FI_DEV_FB_USED": 79800},
        None,
        EXPECT,
        ("DCGM_FI_DEV_FB_FREE",),
    ),
    # every first token at about 2 s where the analysis predicted a p95 of 0.35 s
    (
        "latency_diverges",
        {},
        {"vllm:time_to_first_token_seconds": [1.9] * 500 + [2.2] * 500},
        operations.Expectation(p95_ttft_s=0.35, prefix_cache_frac=0.3),
        ("vllm:time_to_first_token_seconds",),
    ),
]


def test_there_are_at_least_ten_rules_each_with_a_stated_threshold():
    assert len(operations.RULES) >= 10 and len({r.id for r in operations.RULES}) == len(operations.RULES)
    assert {c[0] for c in CASES} == {r.id for r in operations.RULES}
    for r in operations.RULES:
        assert r.threshold and r.needs and r.remedies and all(m.config_change for m in r.remedies)


def test_the_healthy_dump_fires_nothing():
    d = _diag(dump())
    assert d.fired == () and d.not_evaluated == ()
    assert set(d.quiet) == {r.id for r in operations.RULES}


@pytest.mark.parametrize("rule,values,hist,expect,drop", CASES, ids=[c[0] for c in CASES])
def test_each_rule_fires_on_its_dump_and_is_not_evaluated_without_a_metric(rule, values, hist, expect, drop):
    d = _diag(dump(values, hist=hist), expect)
    fired = {f.rule: f for f in d.fired}
    assert rule in fired, (d.fired, d.quiet)
    f = fired[rule]
    assert "threshold" in f.evidence and re.search(r"\d", f.evidence)
    assert f.remedies[0].config_change
    gone = _diag(dump(values, drop=drop, hist=hist), expect)
    assert rule not in {x.rule for x in gone.fired} and rule not in gone.quiet
    missing = {n.rule: n.missing for n in gone.not_evaluated}[rule]
    assert any(drop[0] in m for m in missing)


def test_rules_that_need_the_analysis_wait_for_it():
    d = _diag(dump(), operations.Expectation())
    waiting = {n.rule: n.missing for n in d.not_evaluated}
    assert set(waiting) == {"prefix_cache_misses", "latency_diverges"}
    assert all("saved analysis" in " ".join(m) for m in waiting.values())


def test_no_telemetry_no_diagnosis():
    with pytest.raises(ValueError, match="no telemetry"):
        operations.diagnose(None)  # type: ignore[arg-type]


def test_queue_growth_over_a_series():
    # CSV series: waiting climbs 0 -> 12 while 40 run; the mean share is low early, the trend says grow
    rows = ["timestamp_s,metric,value"]
    for t in range(30):
        rows += [
            f"{t * 15},vllm:num_requests_waiting,{0 if t < 10 else (t - 10) * 0.6}",
            f"{t * 15},vllm:num_requests_running,40",
        ]
    d = operations.diagnose(operations.parse("\n".join(rows).encode(), "series.csv"))
    assert "queue_growing" in {f.rule for f in d.fired}
    ev = next(f.evidence for f in d.fired if f.rule == "queue_growing")
    assert "went from" in ev


# --- parsing ---------------------------------------------------------------------------------------------


def test_a_full_vllm_metrics_page_parses():
    t = operations.parse(VLLM.encode(), "metrics.txt")
    assert t.fmt == "prometheus"
    names = t.names()
    for n in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:prefix_cache_hits_total",
        "vllm:cache_config_info",
        "python_gc_objects_collected_total",
    ):
        assert n in names, n
    assert operations.gauge(t, "vllm:kv_cache_usage_perc") == 0.412
    # request_success carries three finished_reason series: 3787 stop + 213 length + 0 abort = 4000
    assert operations.counter(t, "vllm:request_success_total") == 4000
    p50, p95 = (
        operations.quantile(t, "vllm:time_to_first_token_seconds", 0.5),
        operations.quantile(t, "vllm:time_to_first_token_seconds", 0.95),
    )
    assert 0.1 < p50 < p95 < 1.0


def test_histogram_quantile_interpolates_inside_the_bucket():
    # 10 observations <= 0.1 s, 30 <= 0.2 s, 40 in all. p50: rank 20 lies 10/20 of the way through the
    # (0.1, 0.2] bucket -> 0.15 s (PromQL histogram_quantile's linear rule). Mean = 6.0 / 40 = 0.15.
    text = (
        '# TYPE x histogram\nx_bucket{le="0.1"} 10\nx_bucket{le="0.2"} 30\nx_bucket{le="+Inf"} 40\n'
        "x_sum 6.0\nx_count 40\n"
    )
    t = operations.parse(text.encode())
    assert math.isclose(operations.quantile(t, "x", 0.5), 0.15)
    assert math.isclose(operations.mean(t, "x"), 0.15)
    assert operations.quantile(t, "x", 0.99) == 0.2  # in the +Inf bucket: the highest finite bound


def test_csv_long_and_wide_forms():
    long = operations.parse(
        b"timestamp_s,metric,value,labels\n0,DCGM_FI_DEV_GPU_UTIL,50,gpu=0\n0,DCGM_FI_DEV_GPU_UTIL,70,gpu=1\n"
        b"15,DCGM_FI_DEV_GPU_UTIL,60,gpu=0\n15,DCGM_FI_DEV_GPU_UTIL,90,gpu=1\n",
        "long.csv",
    )
    assert long.fmt == "csv" and operations.gauge(long, "DCGM_FI_DEV_GPU_UTIL") == 67.5  # (55 + 80) / 2
    wide = operations.parse(
        b"timestamp_s,vllm:num_preemptions_total,vllm:num_requests_waiting\n0,100,1\n60,160,3\n", "w.csv"
    )
    assert operations.counter(wide, "vllm:num_preemptions_total") == 60  # last - first over the series
    assert operations.gauge(wide, "vllm:num_requests_waiting") == 2


@pytest.mark.parametrize(
    "data,match",
    [
        (VLLM[: VLLM.index("vllm:kv_cache_usage_perc{") + 40].encode(), r"line \d+: .*truncated"),
        (
            VLLM[
                : VLLM.index(
                    'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="meta-llama/Llama-3.1-70B'
                    '-Instruct",le="0.5"}'
                )
            ].encode(),
            r"no \+Inf bucket .*truncated",
        ),
        (b'{"metrics": [1, 2]}', "not telemetry .*looks like JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (b"", "empty"),
        (
            VLLM.replace(
                'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 0.0',
                'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} lots',
            ).encode(),
            r"line \d+: the sample value is not a number",
        ),
        (
            b"timestamp_s,metric,value\n0,vllm:num_requests_waiting,abc\n",
            r"line 2, column value: 'abc' is not a number",
        ),
        (b"time_of_day,a\nnoon,1\n", "starts with a timestamp_s column"),
        (
            b"timestamp_s,metric,value\n0,vllm:num_requests_waiting,1\n15,vllm:num_req",
            r"line 3 has 2 fields.*truncated",
        ),
        (b"hello world, this is a letter\n", "timestamp_s"),
        (b"Dear reader\nthis is prose\n", r"line 1"),
    ],
)
def test_malformed_telemetry_gets_one_clear_line(data, match):
    with pytest.raises(TelemetryError, match=match) as e:
        operations.parse(data, "upload")
    assert "\n" not in str(e.value)


def test_a_200_mb_file_is_refused_before_parsing():
    big = b"#" * 200_000_000
    with pytest.raises(TelemetryError, match=r"200\.0 MB; the limit is 20 MB"):
        operations.parse(big, "huge.txt")


def test_telemetry_round_trips_through_its_stored_form():
    t = operations.parse(dump(), "dump")
    back = operations.from_payload(__import__("json").loads(__import__("json").dumps(operations.to_payload(t))))
    assert back == t
    with pytest.raises(TelemetryError, match="cannot be read"):
        operations.from_payload({"format": "prometheus", "samples": [["x"]]})


def test_an_analysis_predicts_from_its_simulation():
    from core.config import RabitConfig
    from core.serving import sim_spec, simulate

    cfg = RabitConfig(
        model="llama-3.1-8b",
        gpu="h100-sxm",
        gpus_per_node=1,
        tp=1,
        input_tokens=512,
        output_tokens=128,
        prefix_cache_frac=0.4,
    )
    e = operations.expectation_of(cfg)
    s = simulate(cfg, sim_spec(cfg)).summary
    assert (e.p95_ttft_s, e.p95_itl_s, e.prefix_cache_frac) == (s.ttft_s.p95, s.itl_s.p95, 0.4)
