"""Diagnostics: explicit rules with stated thresholds that read a deployment's telemetry and name a cause.

A rule fires only when every metric it needs is present; otherwise it is "not evaluated: missing <metrics>".
With no telemetry there is no diagnosis (:func:`diagnose` refuses ``None``).

Metric names are the ones the servers expose:

* vLLM, ``/metrics`` (docs.vllm.ai/en/stable/usage/metrics, and docs/design/metrics.md in vllm-project/vllm):
  ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges), ``vllm:kv_cache_usage_perc`` (gauge,
  0-1; ``vllm:gpu_cache_usage_perc`` before V1), ``vllm:num_preemptions_total``,
  ``vllm:request_success_total``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (``vllm:gpu_prefix_cache_*`` before
  V1) (counters), ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds``
  (``vllm:time_per_output_token_seconds`` before V1) (histograms).
* NVIDIA dcgm-exporter (github.com/NVIDIA/dcgm-exporter, etc/default-counters.csv and dcp-metrics-included.csv;
  field meanings in the DCGM user guide, "Profiling metrics"): ``DCGM_FI_DEV_GPU_UTIL`` (%),
  ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_PROF_SM_ACTIVE``,
  ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, ``DCGM_FI_PROF_DRAM_ACTIVE`` (ratios 0-1),
  ``DCGM_FI_PROF_NVLINK_TX_BYTES`` (bytes/s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.base import sig
from core.operations import telemetry as T
from core.operations.telemetry import Telemetry

# --- metric names (first name: current; the others: older names of the same metric) -------------------

RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS = ("vllm:num_preemptions_total",)
SUCCESS = ("vllm:request_success_total",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
GEN_TOKENS = ("vllm:generation_tokens_total",)
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
TTFT = ("vllm:time_to_first_token_seconds",)  # histogram base names
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
GPU_UTIL = ("DCGM_FI_DEV_GPU_UTIL",)
FB_USED = ("DCGM_FI_DEV_FB_USED",)
FB_FREE = ("DCGM_FI_DEV_FB_FREE",)
SM_ACTIVE = ("DCGM_FI_PROF_SM_ACTIVE",)
TENSOR_ACTIVE = ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",)
DRAM_ACTIVE = ("DCGM_FI_PROF_DRAM_ACTIVE",)
NVLINK_TX = ("DCGM_FI_PROF_NVLINK_TX_BYTES",)
HISTOGRAMS = {TTFT, ITL}

# --- thresholds (stated once; the rules' texts quote them) ------------------------------------------------

KV_FULL_FRAC = 0.90  # vLLM preempts when no block is free; above 90 % admission is already stalling
COMPUTE_IDLE_TENSOR_FRAC = 0.30  # tensor pipes busy less than 30 % of cycles: not compute-bound
QUEUE_WAITING_SHARE = 0.10  # waiting / running above 10 % on average
QUEUE_GROWTH_X = 2.0  # last third of the series at least twice the first third
PREEMPT_PER_REQUEST = 0.05  # more than 1 preemption per 20 finished requests
THRASH_PER_REQUEST = 1.0  # more preemptions than finished requests: recompute thrash
ITL_TAIL_X = 3.0  # p99 ITL at least 3x the median
PREFILL_HEAVY_TOKENS = 1.0  # prompt tokens / generated tokens at least 1
BW_BOUND_DRAM_FRAC = 0.50  # memory interface busy at least half the cycles
SMALL_BATCH_RUNNING = 32.0  # fewer than 32 sequences running per replica
ROOM_KV_FRAC = 0.50  # KV pool under half full: room for more sequences
PREFILL_TENSOR_FRAC = 0.60  # tensor pipes busy 60 % of cycles or more
PREFILL_TOKENS_X = 4.0  # prompt tokens at least 4x the generated tokens
OVER_UTIL_PCT = 30.0  # GPU busy less than 30 % of the time
OVER_KV_FRAC = 0.30  # and the KV pool under 30 % full, with nobody waiting
COMM_TENSOR_SHARE = 0.50  # tensor pipes active less than half as often as the SMs
COMM_SM_FRAC = 0.50  # while the SMs are busy at least half the cycles
COMM_NVLINK_BYTES_PER_S = 1e9  # and NVLink carries at least 1 GB/s per GPU
PREFIX_HIT_SHARE = 0.5  # hit rate below half of the share the analysis expects to be cached
HEADROOM_FREE_FRAC = 0.05  # less than 5 % of HBM free on some GPU
DIVERGE_LOW, DIVERGE_HIGH = 0.67, 1.5  # measured / predicted p95 outside [0.67, 1.5]


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Expectation(_F):
    """What the saved analysis predicted (None where it has no figure)."""

    p95_ttft_s: float | None = None
    p95_itl_s: float | None = None
    prefix_cache_frac: float | None = None


class Remedy(_F):
    action: str
    config_change: str


class Finding(_F):
    rule: str
    title: str
    evidence: str
    remedies: tuple[Remedy, ...]


class NotEvaluated(_F):
    rule: str
    title: str
    missing: tuple[str, ...]


class Diagnosis(_F):
    fired: tuple[Finding, ...]
    not_evaluated: tuple[NotEvaluated, ...]
    quiet: tuple[str, ...]  # rules evaluated that did not fire


class _View:
    """The telemetry with each needed metric resolved to the first of its names that is present."""

    def __init__(self, tel: Telemetry):
        self.tel = tel
        self.names = tel.names()

    def has(self, metric: tuple[str, ...]) -> str | None:
        for n in metric:
            if n in self.names or (metric in HISTOGRAMS and n + "_bucket" in self.names):
                return n
        return None


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    needs: tuple[tuple[str, ...], ...]
    threshold: str
    check: Callable[[_View, Expectation], tuple[bool, str]]
    remedies: tuple[Remedy, ...]
    needs_expectation: str = ""  # an analysis figure the rule needs ("" when none)


def _name(v: _View, m: tuple[str, ...]) -> str:
    """The name a needed metric has in this telemetry (a rule is checked only once every metric it needs is
    present, :func:`diagnose`)."""
    name = v.has(m)
    if name is None:
        raise LookupError(f"a rule read {m[0]}, which the telemetry does not have")
    return name


def _known(x: float | None, m: tuple[str, ...]) -> float:
    """A needed metric's figure (present, so never None)."""
    if x is None:
        raise LookupError(f"a rule read {m[0]}, which has no samples")
    return x


def _g(v: _View, m: tuple[str, ...], how: Literal["mean", "max", "min"] = "mean") -> float:
    return _known(T.gauge(v.tel, _name(v, m), how), m)


def _c(v: _View, m: tuple[str, ...]) -> float:
    return _known(T.counter(v.tel, _name(v, m)), m)


def _gs(v: _View, m: tuple[str, ...]) -> float:
    """A needed gauge summed over its label sets (replicas), averaged over time."""
    return _known(T.gauge_sum(v.tel, _name(v, m)), m)


def _q(v: _View, m, q) -> float | None:
    name = v.has(m)
    return T.quantile(v.tel, name, q) if name else None


def _pct(x: float) -> str:
    return f"{x:.0%}"


# --- the rules ----------------------------------------------------------------------------------------


def _kv_full(v, e):
    kv, ten = _g(v, KV_USAGE, "max"), _g(v, TENSOR_ACTIVE)
    return (
        kv >= KV_FULL_FRAC and ten < COMPUTE_IDLE_TENSOR_FRAC,
        f"KV cache {_pct(kv)} full (busiest replica) while tensor pipes are active {_pct(ten)} of cycles",
    )


def _queue(v, e):
    wait, run = _gs(v, WAITING), _gs(v, RUNNING)
    tr = T.trend(v.tel, _name(v, WAITING))
    growing = tr is not None and tr[1] >= 1 and tr[1] >= QUEUE_GROWTH_X * max(tr[0], 0.5)
    if run > 0:
        share = wait / run
        txt = f"{sig(wait)} requests waiting against {sig(run)} running ({share:.0%})"
    else:  # nothing running: any queue at all is over the threshold, and a share of zero is not a number
        share = QUEUE_WAITING_SHARE * 2 if wait > 0 else 0.0
        txt = f"{sig(wait)} requests waiting with none running"
    if tr is not None:
        txt += f"; waiting went from {sig(tr[0])} to {sig(tr[1])} over the series"
    return (wait >= 1 and share > QUEUE_WAITING_SHARE) or growing, txt


def _preempt(v, e):
    p, done = _c(v, PREEMPTIONS), _c(v, SUCCESS)
    if done <= 0:  # no request finished: every preemption is thrash, and there is no per-request share
        return p > 0, f"{p:,.0f} preemptions and no finished request" + (" (recompute thrash)" if p > 0 else "")
    per = p / done
    thrash = " (recompute thrash)" if per >= THRASH_PER_REQUEST else ""
    return (
        per > PREEMPT_PER_REQUEST,
        f"{p:,.0f} preemptions for {done:,.0f} finished requests = {per:.2f} per request{thrash}",
    )


def _interfere(v, e):
    p50, p99 = _q(v, ITL, 0.5), _q(v, ITL, 0.99)
    ratio_tok = _c(v, PROMPT_TOKENS) / max(_c(v, GEN_TOKENS), 1.0)
    if p50 is None or p99 is None or p50 <= 0:
        return False, "the ITL histogram has no observations"
    x = p99 / p50
    return x >= ITL_TAIL_X and ratio_tok >= PREFILL_HEAVY_TOKENS, (
        f"p99 inter-token latency {sig(p99 * 1e3)} ms is {x:.1f}x the median {sig(p50 * 1e3)} ms while "
        f"{sig(ratio_tok, 2)} prompt tokens arrive per generated token"
    )


def _bw_small(v, e):
    dram, run, kv = _g(v, DRAM_ACTIVE), _g(v, RUNNING), _g(v, KV_USAGE)
    return dram >= BW_BOUND_DRAM_FRAC and run < SMALL_BATCH_RUNNING and kv < ROOM_KV_FRAC, (
        f"memory interface busy {_pct(dram)} of cycles with {sig(run)} sequences running per replica and the KV "
        f"cache {_pct(kv)} full: each step streams the weights for few tokens"
    )


def _prefill_bound(v, e):
    ten = _g(v, TENSOR_ACTIVE)
    ratio = _c(v, PROMPT_TOKENS) / max(_c(v, GEN_TOKENS), 1.0)
    p95 = _q(v, TTFT, 0.95)
    return ten >= PREFILL_TENSOR_FRAC and ratio >= PREFILL_TOKENS_X, (
        f"tensor pipes active {_pct(ten)} of cycles with {sig(ratio)} prompt tokens per generated token"
        + (f"; p95 TTFT {sig(p95)} s" if p95 is not None else "")
    )


def _over(v, e):
    util, kv, wait = _g(v, GPU_UTIL), _g(v, KV_USAGE), _gs(v, WAITING)
    return (
        util < OVER_UTIL_PCT and kv < OVER_KV_FRAC and wait < 1,
        f"GPUs busy {util:.0f}% of the time, KV cache {_pct(kv)} full, {sig(wait, 2)} requests waiting",
    )


def _comm(v, e):
    sm, ten, nv = _g(v, SM_ACTIVE), _g(v, TENSOR_ACTIVE), _g(v, NVLINK_TX)
    return sm >= COMM_SM_FRAC and ten < COMM_TENSOR_SHARE * sm and nv >= COMM_NVLINK_BYTES_PER_S, (
        f"SMs active {_pct(sm)} of cycles but tensor pipes only {_pct(ten)}, with {sig(nv / 1e9)} GB/s on NVLink "
        "per GPU: the SMs spend their time in collectives, not GEMMs"
    )


def _prefix(v, e):
    q, h = _c(v, PREFIX_QUERIES), _c(v, PREFIX_HITS)
    rate = h / q if q else 0.0
    want = e.prefix_cache_frac or 0.0
    return (
        rate < PREFIX_HIT_SHARE * want,
        f"prefix-cache hit rate {_pct(rate)} ({h:,.0f} of {q:,.0f} tokens) where the analysis expects {_pct(want)} cached",
    )


def _headroom(v, e):
    used = {lab: pts for lab, pts in T._by_series(v.tel, v.has(FB_USED)).items()}
    free = {lab: pts for lab, pts in T._by_series(v.tel, v.has(FB_FREE)).items()}
    worst, where = 1.0, ""
    for lab in used.keys() & free.keys():
        u, f = used[lab][-1][1], free[lab][-1][1]
        if u + f > 0 and f / (u + f) < worst:
            worst, where = f / (u + f), dict(lab).get("gpu", "?")
    return worst < HEADROOM_FREE_FRAC, f"GPU {where} has {_pct(worst)} of its memory free"


def _diverge(v, e):
    out, fired = [], False
    for name, m, want in (("TTFT", TTFT, e.p95_ttft_s), ("ITL", ITL, e.p95_itl_s)):
        if want is None or not v.has(m):
            continue
        got = _q(v, m, 0.95)
        if got is None:
            continue
        r = got / want
        fired |= not (DIVERGE_LOW <= r <= DIVERGE_HIGH)
        out.append(f"p95 {name} measured {sig(got)} s vs predicted {sig(want)} s ({r:.2f}x)")
    return fired, "; ".join(out) or "no comparable figure"


def R(action: str, config_change: str) -> Remedy:
    return Remedy(action=action, config_change=config_change)


RULES: tuple[Rule, ...] = (
    Rule(
        "kv_pool_full",
        "KV cache full while the GPU is not compute-busy",
        (KV_USAGE, TENSOR_ACTIVE),
        f"KV usage >= {KV_FULL_FRAC:.0%} and tensor active < {COMPUTE_IDLE_TENSOR_FRAC:.0%}",
        _kv_full,
        (
            R(
                "store the KV cache in FP8: twice the sequences per GB",
                "kv_dtype = fp8 (vllm serve --kv-cache-dtype fp8)",
            ),
            R("give the engine more of HBM", "gpu_mem_util 0.90 -> 0.95 (--gpu-memory-utilization 0.95)"),
            R("split the model over more GPUs so each holds fewer weights", "tp x2 (--tensor-parallel-size)"),
            R("cap the context the pool must hold", "lower --max-model-len to the longest real request"),
        ),
    ),
    Rule(
        "queue_growing",
        "Requests queue: the deployment is under-provisioned",
        (WAITING, RUNNING),
        f"waiting > {QUEUE_WAITING_SHARE:.0%} of running (and >= 1), or growing {sig(QUEUE_GROWTH_X, 6)}x over the series",
        _queue,
        (
            R("add replicas until the queue drains", "replicas +1 per replica's worth of waiting requests"),
            R("let each replica batch more if the KV cache has room", "raise max_num_seqs (--max-num-seqs)"),
            R(
                "re-run the optimizer at the measured arrival rate",
                "rate_per_s = measured rate (rabit recommend --rate)",
            ),
        ),
    ),
    Rule(
        "preemptions",
        "Preemptions (and recompute thrash)",
        (PREEMPTIONS, SUCCESS),
        f"preemptions per finished request > {sig(PREEMPT_PER_REQUEST, 6)} (thrash at >= {sig(THRASH_PER_REQUEST, 6)})",
        _preempt,
        (
            R("admit fewer sequences at once", "lower max_num_seqs (--max-num-seqs)"),
            R("store the KV cache in FP8", "kv_dtype = fp8 (--kv-cache-dtype fp8)"),
            R("reserve prompt + maximum output on admission instead of preempting", "admission = reserve"),
            R("spread the model over more GPUs for a larger KV pool", "tp x2 (--tensor-parallel-size)"),
        ),
    ),
    Rule(
        "prefill_interference",
        "Prefill interferes with decode (ITL spikes while prompts arrive)",
        (ITL, PROMPT_TOKENS, GEN_TOKENS),
        f"p99 ITL >= {sig(ITL_TAIL_X, 6)}x median and prompt/generated tokens >= {sig(PREFILL_HEAVY_TOKENS, 6)}",
        _interfere,
        (
            R("cap the prompt tokens one step may carry", "token_budget 8192 -> 2048 (--max-num-batched-tokens 2048)"),
            R("keep chunked prefill on so long prompts are split", "policy = chunked (--enable-chunked-prefill)"),
            R("separate prefill and decode onto different replicas", "disaggregated prefill (vLLM kv-transfer config)"),
        ),
    ),
    Rule(
        "bandwidth_bound_small_batch",
        "Bandwidth-bound at a small batch: room to batch more",
        (DRAM_ACTIVE, RUNNING, KV_USAGE),
        f"DRAM active >= {BW_BOUND_DRAM_FRAC:.0%}, running < {sig(SMALL_BATCH_RUNNING, 6)}, KV usage < {ROOM_KV_FRAC:.0%}",
        _bw_small,
        (
            R("send each replica more traffic: fewer replicas, larger batches", "replicas -1 (consolidate)"),
            R("store the weights in FP8 so each step reads half the bytes", "weights = fp8 (--quantization fp8)"),
            R("allow larger batches", "raise max_num_seqs (--max-num-seqs)"),
        ),
    ),
    Rule(
        "compute_bound_prefill",
        "Compute-bound prefill",
        (TENSOR_ACTIVE, PROMPT_TOKENS, GEN_TOKENS),
        f"tensor active >= {PREFILL_TENSOR_FRAC:.0%} and prompt/generated tokens >= {sig(PREFILL_TOKENS_X, 6)}",
        _prefill_bound,
        (
            R("run the GEMMs in FP8 (1.3-1.5x the BF16 speed)", "weights = fp8 (--quantization fp8)"),
            R("skip recomputing shared prompt prefixes", "prefix caching on (--enable-prefix-caching)"),
            R("more tensor parallelism per replica to cut TTFT", "tp x2 (--tensor-parallel-size)"),
        ),
    ),
    Rule(
        "over_provisioned",
        "Over-provisioned: low utilisation at the target",
        (GPU_UTIL, KV_USAGE, WAITING),
        f"GPU util < {sig(OVER_UTIL_PCT, 6)}%, KV usage < {OVER_KV_FRAC:.0%}, nobody waiting",
        _over,
        (
            R("remove replicas", "replicas x (measured util / 60%), at least 1"),
            R("move to a cheaper GPU kind", "rabit recommend at the measured rate"),
        ),
    ),
    Rule(
        "exposed_tp_comm",
        "Exposed tensor-parallel communication",
        (SM_ACTIVE, TENSOR_ACTIVE, NVLINK_TX),
        f"SM active >= {COMM_SM_FRAC:.0%}, tensor active < {COMM_TENSOR_SHARE:.0%} of SM active, "
        f"NVLink >= {sig(COMM_NVLINK_BYTES_PER_S / 1e9, 6)} GB/s per GPU",
        _comm,
        (
            R("halve tensor parallelism and double the replicas", "tp /2, replicas x2"),
            R("use fused or one-shot all-reduce kernels", "comm_overlap 0 -> 0.5 (custom all-reduce on)"),
            R("keep the tensor-parallel group inside one NVLink domain", "tp <= GPUs per node"),
        ),
    ),
    Rule(
        "prefix_cache_misses",
        "Prefix cache misses on a workload that should hit",
        (PREFIX_QUERIES, PREFIX_HITS),
        f"hit rate < {sig(PREFIX_HIT_SHARE, 6)} x the analysis's cached-prefix share",
        _prefix,
        (
            R("turn prefix caching on", "--enable-prefix-caching"),
            R("route requests that share a prefix to the same replica", "prefix-aware (session-affine) routing"),
            R("put the shared system prompt first and keep it byte-identical", "prompt template"),
        ),
        needs_expectation="the analysis's cached-prefix share (a saved analysis, or entered by hand)",
    ),
    Rule(
        "memory_headroom",
        "Memory headroom: out-of-memory risk",
        (FB_USED, FB_FREE),
        f"free HBM < {HEADROOM_FREE_FRAC:.0%} on some GPU",
        _headroom,
        (
            R("leave more HBM to the runtime", "gpu_mem_util 0.95 -> 0.90 (--gpu-memory-utilization 0.90)"),
            R("store the KV cache in FP8", "kv_dtype = fp8"),
            R("cap the context", "lower --max-model-len"),
        ),
    ),
    Rule(
        "latency_diverges",
        "Measured latency diverges from the analysis's prediction",
        (TTFT, ITL),
        f"measured / predicted p95 outside [{sig(DIVERGE_LOW, 6)}, {sig(DIVERGE_HIGH, 6)}]",
        _diverge,
        (
            R(
                "calibrate the model with this deployment's runs",
                "upload a vllm bench serve result on the Calibration page",
            ),
            R(
                "check the deployment matches the analysis (GPU, TP, precision, lengths)",
                "compare with rabit analyses show ID",
            ),
        ),
        needs_expectation="the analysis's predicted p95 TTFT or ITL (a saved analysis, or entered by hand)",
    ),
)


NO_EXPECTATION = Expectation()


def diagnose(tel: Telemetry, expect: Expectation = NO_EXPECTATION) -> Diagnosis:
    """Run every rule on ``tel``. A rule with a needed metric absent is listed as not evaluated."""
    if tel is None:
        raise ValueError("no telemetry, no diagnosis: attach a /metrics dump or a CSV of time series")
    v = _View(tel)
    fired: list[Finding] = []
    missing_l: list[NotEvaluated] = []
    quiet: list[str] = []
    for rule in RULES:
        if rule.id == "latency_diverges":  # either latency histogram is enough, with its own prediction
            pairs = [m for m, w in ((TTFT, expect.p95_ttft_s), (ITL, expect.p95_itl_s)) if w is not None and v.has(m)]
            missing: tuple[str, ...] = ()
            if not pairs:
                if expect.p95_ttft_s is None and expect.p95_itl_s is None:
                    missing += (rule.needs_expectation,)
                want = [m for m, w in ((TTFT, expect.p95_ttft_s), (ITL, expect.p95_itl_s)) if w is not None] or [
                    TTFT,
                    ITL,
                ]
                absent = [m[0] for m in want if not v.has(m)]
                if len(absent) == len(want):
                    missing += (" or ".join(absent),)
        else:
            missing = tuple(
                m[0] + (f" (or {', '.join(m[1:])})" if len(m) > 1 else "") for m in rule.needs if v.has(m) is None
            )
            if rule.needs_expectation and (expect.prefix_cache_frac is None or expect.prefix_cache_frac <= 0):
                missing += (rule.needs_expectation,)
        if missing:
            missing_l.append(NotEvaluated(rule=rule.id, title=rule.title, missing=missing))
            continue
        ok, evidence = rule.check(v, expect)
        if ok:
            fired.append(
                Finding(
                    rule=rule.id,
                    title=rule.title,
                    evidence=f"{evidence} [threshold: {rule.threshold}]",
                    remedies=rule.remedies,
                )
            )
        else:
            quiet.append(rule.id)
    return Diagnosis(fired=tuple(fired), not_evaluated=tuple(missing_l), quiet=tuple(quiet))


def expectation_of(cfg) -> Expectation:
    """What an analysis predicts for its deployment: the serving simulation's p95 TTFT and ITL for one replica
    at the config's workload (:func:`core.serving.simulation.simulate`), and its cached-prefix share."""
    from core.serving import sim_spec, simulate

    s = simulate(cfg, sim_spec(cfg)).summary
    return Expectation(p95_ttft_s=s.ttft_s.p95, p95_itl_s=s.itl_s.p95, prefix_cache_frac=cfg.prefix_cache_frac or None)


def measured_p95(tel: Telemetry) -> dict[str, float | None]:
    """The telemetry's p95 TTFT and ITL [s] (the figures the divergence rule compares with the prediction;
    None where the histogram is absent)."""
    v = _View(tel)
    return {"p95_ttft_s": _q(v, TTFT, 0.95), "p95_itl_s": _q(v, ITL, 0.95)}
