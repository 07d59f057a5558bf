"""``rabit diagnose``: read a deployment's telemetry and name what is wrong, with remedies.

``--metrics FILE``: a Prometheus text dump (``curl http://HOST:8000/metrics`` for vLLM,
``curl http://HOST:9400/metrics`` for dcgm-exporter; several dumps may be concatenated) or a CSV of time series.
``--prometheus URL`` (optional, off unless given) queries a Prometheus server's HTTP API over ``--since``
instead. A file that is not telemetry exits 2 with one line saying why.

``--analysis ID``: the telemetry is attached to that saved analysis (only once it has parsed: a malformed file
leaves the analysis untouched), and the analysis's own prediction (its simulated p95 TTFT and ITL, its cached
prefix share) is what the divergence and prefix-cache rules compare with. ``--analysis ID`` alone diagnoses the
telemetry last attached to it.

``--config FILE`` (the dashboard's config JSON) is the analysis whose prediction the rules compare with,
instead of a saved one; ``--assume NAME=VALUE`` and ``--bound low|base|high`` set the assumptions that prediction
is made with.

JSON keys (contract, issue 11): ``fired`` (list of {rule, evidence, remedies}), ``not_evaluated`` (list of
{rule, missing}), ``quiet`` (rules evaluated that did not fire). With a prediction from ``--analysis`` or
``--config`` also ``expected`` ({p95_ttft_s, p95_itl_s, prefix_cache_frac}, what the rules compared with),
``measured`` ({p95_ttft_s, p95_itl_s} from the telemetry), ``outside_range`` (the expected keys whose measured
value lies outside the prediction's heuristic range, with "below" or "above") and ``ranges``
(``expected.p95_ttft_s``, ``expected.p95_itl_s``) with ``range_basis``.
"""

from __future__ import annotations

import argparse
import os

from cli.common import add_json, add_range_args, die, emit
from core.base import PayloadError, read_regular_file, sig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="rules over a deployment's /metrics dump or time series: what is wrong")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--metrics", metavar="FILE", help="Prometheus text dump or CSV of time series")
    src.add_argument("--prometheus", metavar="URL", help="query a Prometheus server (HTTP API) instead")
    p.add_argument("--since", type=float, default=3600.0, help="with --prometheus: seconds back from now")
    p.add_argument("--step", type=float, default=15.0, help="with --prometheus: seconds between points")
    p.add_argument("--timeout-s", type=float, default=5.0, help="with --prometheus: give up after this long")
    p.add_argument(
        "--analysis",
        metavar="ID",
        help="a saved analysis: attach the telemetry to it and compare with "
        "its predictions (alone: diagnose what is attached)",
    )
    p.add_argument("--expect-p95-ttft-s", type=float, help="the predicted p95 TTFT [s] (instead of --analysis)")
    p.add_argument("--expect-p95-itl-s", type=float, help="the predicted p95 ITL [s] (instead of --analysis)")
    p.add_argument("--expect-prefix-cache", type=float, help="the share of prompt tokens expected to be cached")
    add_json(p)
    add_range_args(p)
    p.set_defaults(func=run)


def read_metrics(path: str):
    """The parsed file (exit 2 with one line when it cannot be read or is not telemetry)."""
    from core.operations import MAX_BYTES, TelemetryError, parse

    try:
        size = os.stat(path).st_size
    except OSError as exc:
        die(f"rabit diagnose: error: argument --metrics: cannot read {path}: {exc.strerror}")
    if size > MAX_BYTES:
        die(
            f"rabit diagnose: error: argument --metrics: {path} is {size / 1e6:,.1f} MB; the limit is "
            f"{MAX_BYTES / 1e6:.0f} MB (scrape one /metrics page, or export a shorter range)"
        )
    try:
        data = read_regular_file(path, MAX_BYTES)  # a named pipe or device is refused, never read
    except OSError as exc:
        die(f"rabit diagnose: error: argument --metrics: cannot read {path}: {exc.strerror}")
    except PayloadError as exc:
        die(f"rabit diagnose: error: argument --metrics: {exc}")
    try:
        return parse(data, os.path.basename(path))
    except TelemetryError as exc:
        die(f"rabit diagnose: error: argument --metrics: {exc}")


def _check_flags(args: argparse.Namespace) -> None:
    """Exit 2 on an expected p95 that is not positive, a prefix-cache share outside [0, 1), or no telemetry source."""
    for flag, v in (("--expect-p95-ttft-s", args.expect_p95_ttft_s), ("--expect-p95-itl-s", args.expect_p95_itl_s)):
        if v is not None and v <= 0:
            die(f"rabit diagnose: error: argument {flag}: must be positive, got {sig(v, 6)}")
    if args.expect_prefix_cache is not None and not 0 <= args.expect_prefix_cache < 1:
        die(
            f"rabit diagnose: error: argument --expect-prefix-cache: a share in [0, 1), got {sig(args.expect_prefix_cache, 6)}"
        )
    if not (args.metrics or args.prometheus or args.analysis):
        die("rabit diagnose: error: one of the arguments --metrics --prometheus --analysis is required")


def _telemetry(args: argparse.Namespace, analysis):
    """The telemetry: a file (--metrics), a Prometheus range query (--prometheus), or what the analysis holds."""
    if args.metrics:
        tel = read_metrics(args.metrics)
    elif args.prometheus:
        from connectors.prometheus import PrometheusError, query_range

        try:
            tel = query_range(args.prometheus, since_s=args.since, step_s=args.step, timeout_s=args.timeout_s)
        except PrometheusError as exc:
            die(f"rabit diagnose: error: argument --prometheus: {exc}")
    else:
        tel = _attached(analysis)
    return tel


def _attach(args: argparse.Namespace, analysis, tel) -> str:
    """Attach the telemetry, parsed (or fetched) in full first, to the analysis; the note that says so."""
    # parsed (or fetched) in full before anything is written: bad telemetry never reaches the analysis
    from cli.common import open_store
    from core.operations import to_payload
    from store import StoreError

    try:
        tid = open_store().add_telemetry(analysis.id, tel.fmt, to_payload(tel))
    except StoreError as exc:  # the analysis would outgrow what its export carries: nothing was attached
        die(f"rabit diagnose: error: argument {'--metrics' if args.metrics else '--prometheus'}: {exc}")
    note = f"attached to analysis {analysis.id} ({analysis.name}) as telemetry {tid}"
    return note


def _rule_lines(d) -> list[str]:
    """The rules that fired with their evidence and remedies, those not evaluated and what they miss, the quiet."""
    lines: list[str] = []
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
    return lines


def run(args: argparse.Namespace) -> int:
    from cli.common import check_range_args
    from core.operations import diagnose

    file_cfg = check_range_args(args)  # --assume checked, --config read (exit 2 naming either)
    _check_flags(args)
    analysis = None
    if args.analysis:
        from cli.common import load_analysis

        analysis = load_analysis(args.analysis)
    tel = _telemetry(args, analysis)
    note = _attach(args, analysis, tel) if analysis is not None and (args.metrics or args.prometheus) else ""
    cfg = _prediction_config(file_cfg, analysis, args)
    expect = _expectation(cfg, args)
    d = diagnose(tel, expect)
    payload = {
        "fired": [
            {"rule": f.rule, "evidence": f.evidence, "remedies": [r.model_dump() for r in f.remedies]} for f in d.fired
        ],
        "not_evaluated": [{"rule": n.rule, "missing": list(n.missing)} for n in d.not_evaluated],
        "quiet": list(d.quiet),
    }
    lines = [f"{tel.name}: {len(tel.samples):,} samples in {tel.num_series:,} series"] + ([note] if note else [])
    if cfg is not None:
        lines += _with_prediction_ranges(payload, cfg, tel, expect, args)
    lines += _rule_lines(d)
    emit(payload, args.json, "\n".join(lines))
    return 0


def _attached(analysis):
    """The telemetry last attached to a saved analysis (exit 2 when there is none: no telemetry, no diagnosis)."""
    from core.operations import TelemetryError, from_payload

    if not analysis.telemetry:
        die(
            f"rabit diagnose: error: argument --analysis: analysis {analysis.id} has no telemetry attached, so there "
            "is no diagnosis; attach some with --metrics FILE"
        )
    try:
        return from_payload(analysis.telemetry[-1]["payload"])
    except TelemetryError as exc:
        die(f"rabit diagnose: error: argument --analysis: {exc}")


def _prediction_config(file_cfg, analysis, args: argparse.Namespace):
    """The analysis whose prediction the rules compare with: ``--config FILE``, else the saved analysis's config,
    with the assumptions ``--assume`` and ``--bound`` set (None without either)."""
    if file_cfg is not None:
        return file_cfg
    if analysis is None:
        return None
    from cli.common import assumptions_from_args

    return analysis.config.model_copy(update={"assumptions": assumptions_from_args(args)})


def _expectation(cfg, args: argparse.Namespace):
    """The analysis's prediction, with any --expect-* flag given alongside winning."""
    from core.operations import Expectation, expectation_of

    base = Expectation()
    if cfg is not None:
        try:
            base = expectation_of(cfg)
        except (ValueError, KeyError):  # a config the simulator cannot run (e.g. a training analysis)
            base = Expectation(prefix_cache_frac=cfg.prefix_cache_frac or None)
    return base.model_copy(update=_given(args))


def _given(args: argparse.Namespace) -> dict:
    return {
        k: v
        for k, v in (
            ("p95_ttft_s", args.expect_p95_ttft_s),
            ("p95_itl_s", args.expect_p95_itl_s),
            ("prefix_cache_frac", args.expect_prefix_cache),
        )
        if v is not None
    }


def _with_prediction_ranges(payload: dict, cfg, tel, expect, args: argparse.Namespace) -> list[str]:
    """Add the prediction, the measurement and the prediction's heuristic range to ``payload``; the text lines.

    A figure typed with ``--expect-*`` has no range (no assumption produced it)."""
    from cli.common import with_ranges
    from core.base import fmt_time
    from core.decision import expectation_ranges, outside
    from core.operations import measured_p95

    given = _given(args)
    rng = {k: r for k, r in expectation_ranges(cfg).items() if k not in given}
    got = measured_p95(tel)
    payload["expected"] = expect.model_dump()
    payload["measured"] = got
    where = {k: outside(r, got.get(k)) for k, r in rng.items()}
    payload["outside_range"] = {k: w for k, w in where.items() if w}
    with_ranges(payload, {f"expected.{k}": r for k, r in rng.items()})
    lines = []
    for k, label in (("p95_ttft_s", "p95 TTFT"), ("p95_itl_s", "p95 ITL")):
        want, r, m = getattr(expect, k), rng.get(k), got.get(k)
        if want is None:
            continue
        text = f"predicted {label} {fmt_time(want)}"
        if r is not None and r.basis != "none":
            text += f" (range {fmt_time(r.low)} ... {fmt_time(r.high)})"
        if m is not None:
            text += f"; measured {fmt_time(m)}"
            if where.get(k):
                text += f", {where[k]} the range: an assumption or the workload is off"
        lines.append(text)
    return lines
