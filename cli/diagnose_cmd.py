"""``rabit diagnose``: read a deployment's telemetry and name what is wrong, with remedies.

``--metrics FILE``: a Prometheus text dump (``curl http://HOST:8000/metrics`` for vLLM,
``curl http://HOST:9400/metrics`` for dcgm-exporter; several dumps may be concatenated) or a CSV of time series.
``--prometheus URL`` (optional, off unless given) queries a Prometheus server's HTTP API over ``--since``
instead. A file that is not telemetry exits 2 with one line saying why.

JSON keys (contract, issue 11): ``fired`` (list of {rule, evidence, remedies}), ``not_evaluated`` (list of
{rule, missing}), ``quiet`` (rules evaluated that did not fire).
"""

from __future__ import annotations

import argparse
import os

from cli.common import add_json, die, emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="rules over a deployment's /metrics dump or time series: what is wrong")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--metrics", metavar="FILE", help="Prometheus text dump or CSV of time series")
    src.add_argument("--prometheus", metavar="URL", help="query a Prometheus server (HTTP API) instead")
    p.add_argument("--since", type=float, default=3600.0, help="with --prometheus: seconds back from now")
    p.add_argument("--step", type=float, default=15.0, help="with --prometheus: seconds between points")
    p.add_argument("--timeout-s", type=float, default=5.0, help="with --prometheus: give up after this long")
    p.add_argument("--analysis", metavar="ID", help="a saved analysis: its predictions and cached-prefix share")
    p.add_argument("--expect-p95-ttft-s", type=float, help="the predicted p95 TTFT [s] (instead of --analysis)")
    p.add_argument("--expect-p95-itl-s", type=float, help="the predicted p95 ITL [s] (instead of --analysis)")
    p.add_argument("--expect-prefix-cache", type=float, help="the share of prompt tokens expected to be cached")
    add_json(p)
    p.set_defaults(func=run)


def read_metrics(path: str):
    """The parsed file (exit 2 with one line when it cannot be read or is not telemetry)."""
    from core.telemetry import MAX_BYTES, TelemetryError, parse

    try:
        size = os.stat(path).st_size
    except OSError as exc:
        die(f"rabit diagnose: error: argument --metrics: cannot read {path}: {exc.strerror}")
    if size > MAX_BYTES:
        die(f"rabit diagnose: error: argument --metrics: {path} is {size / 1e6:,.1f} MB; the limit is "
            f"{MAX_BYTES / 1e6:.0f} MB (scrape one /metrics page, or export a shorter range)")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        die(f"rabit diagnose: error: argument --metrics: cannot read {path}: {exc.strerror}")
    try:
        return parse(data, os.path.basename(path))
    except TelemetryError as exc:
        die(f"rabit diagnose: error: argument --metrics: {exc}")


def run(args: argparse.Namespace) -> int:
    from core.diagnose import Expectation, diagnose

    for flag, v in (("--expect-p95-ttft-s", args.expect_p95_ttft_s), ("--expect-p95-itl-s", args.expect_p95_itl_s)):
        if v is not None and v <= 0:
            die(f"rabit diagnose: error: argument {flag}: must be positive, got {v:g}")
    if args.expect_prefix_cache is not None and not 0 <= args.expect_prefix_cache < 1:
        die(f"rabit diagnose: error: argument --expect-prefix-cache: a share in [0, 1), got {args.expect_prefix_cache:g}")
    expect = Expectation(p95_ttft_s=args.expect_p95_ttft_s, p95_itl_s=args.expect_p95_itl_s,
                         prefix_cache_frac=args.expect_prefix_cache)
    if args.analysis:
        expect = _expectation_of(args.analysis, expect)
    if args.metrics:
        tel = read_metrics(args.metrics)
    else:
        from connectors.prometheus import PrometheusError, query_range

        try:
            tel = query_range(args.prometheus, since_s=args.since, step_s=args.step, timeout_s=args.timeout_s)
        except PrometheusError as exc:
            die(f"rabit diagnose: error: argument --prometheus: {exc}")
    d = diagnose(tel, expect)
    payload = {
        "fired": [{"rule": f.rule, "evidence": f.evidence,
                   "remedies": [r.model_dump() for r in f.remedies]} for f in d.fired],
        "not_evaluated": [{"rule": n.rule, "missing": list(n.missing)} for n in d.not_evaluated],
        "quiet": list(d.quiet),
    }
    lines = [f"{tel.name}: {len(tel.samples):,} samples in {tel.num_series:,} series"]
    if not d.fired:
        lines.append("No rule fired.")
    for f in d.fired:
        lines.append(f"FIRED {f.rule}: {f.title}")
        lines.append(f"  evidence: {f.evidence}")
        for i, r in enumerate(f.remedies, 1):
            lines.append(f"  {i}. {r.action}  [{r.config_change}]")
    for n in d.not_evaluated:
        lines.append(f"not evaluated {n.rule}: missing {', '.join(n.missing)}")
    if d.quiet:
        lines.append("quiet: " + ", ".join(d.quiet))
    emit(payload, args.json, "\n".join(lines))
    return 0


def _expectation_of(analysis_id: str, given):
    """The saved analysis's predictions and cached-prefix share (needs the analysis store)."""
    die("rabit diagnose: error: argument --analysis: saved analyses are not available in this build; "
        "give --expect-p95-ttft-s, --expect-p95-itl-s and --expect-prefix-cache instead")
