"""``rabit calibrate``: attach measured runs to a saved analysis and show the calibration they give.

``add --analysis ID --file F [--file F ...]``: a ``vllm bench serve --save-result`` or ``vllm bench throughput
--output-json`` file (its config is the analysis's unless the file says otherwise) or the CSV template. All
files are read first; a refused file exits 2 naming what is wrong, and nothing is attached.

``show --analysis ID --json`` prints ``{"metrics": {NAME: {"n", "bias", "factor", "interval": [low, high],
"basis": "t" | "heuristic", "runs": [...]}}}`` (contract, issue 10); NAME follows the estimate JSON keys
(``ttft_s.p50``, ``itl_s.p50``, ``e2e_s.p50``, ``throughput_tokens_per_s``, ``step_s``, ...); ``interval``
holds multipliers on the analytical value.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.common import add_json, die, emit, load_analysis, open_store
from core.calibration import COMPARABLE_RULE, calibrate_all, leave_one_out, residuals_of
from core.limits import MAX_TABLE_BYTES, PayloadError, read_regular_file
from core.runs import RunError, parse_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="attach measured runs to an analysis; show the calibrated factors")
    s = p.add_subparsers(dest="calibrate_command", required=True, parser_class=type(p))
    q = s.add_parser("add", help="attach vLLM benchmark JSON files or the CSV template to an analysis")
    q.add_argument("--analysis", metavar="ID", required=True)
    q.add_argument("--file", action="append", required=True, metavar="F", help="repeat for several files")
    add_json(q)
    q.set_defaults(func=add)
    q = s.add_parser("show", help="per-metric bias, factor and interval from the analysis's runs")
    q.add_argument("--analysis", metavar="ID", required=True)
    add_json(q)
    q.set_defaults(func=show)


def add(args: argparse.Namespace) -> int:
    a = load_analysis(args.analysis)
    runs = []
    for f in args.file:
        try:
            content = read_regular_file(f, MAX_TABLE_BYTES)  # a named pipe or device is refused, never read
        except OSError as exc:
            die(f"rabit calibrate add: error: argument --file: cannot read {f}: {exc.strerror}")
        except PayloadError as exc:
            die(f"rabit calibrate add: error: argument --file: {exc}")
        try:
            runs.extend(parse_file(f, content, base=a.config))
        except RunError as exc:
            where = "" if str(exc).startswith(Path(f).name) else f"{f}: "
            die(f"rabit calibrate add: error: argument --file: {where}{exc}")
    ids = open_store().add_runs(a.id, runs)
    emit(
        {"analysis": a.id, "added": list(ids), "runs": [r.label for r in runs]},
        args.json,
        f"attached {len(ids)} run(s) to {a.id}",
    )
    return 0


def show(args: argparse.Namespace) -> int:
    a = load_analysis(args.analysis)
    runs = [r.run for r in a.runs]
    res = residuals_of(runs)
    cals = calibrate_all(res, a.config.gpu)
    metrics = {}
    for name, c in cals.items():
        loo = leave_one_out(c)
        metrics[name] = {**c.as_json(), "loo_coverage": loo.coverage}
    excluded = [{"label": r.label, "metric": r.metric, "gpu": r.gpu} for r in res if r.gpu != a.config.gpu]
    payload = {"analysis": a.id, "gpu": a.config.gpu, "rule": COMPARABLE_RULE, "metrics": metrics, "excluded": excluded}
    lines = [f"{a.name} ({a.id}) on {a.config.gpu}: {len(runs)} run(s)"]
    for name, c in cals.items():
        lines.append(
            f"  {name:<24} n={c.n:<3} factor x{c.factor:.3f}  interval x{c.low_mult:.3f} ... "
            f"x{c.high_mult:.3f} ({'Student t' if c.basis == 't' else 'x0.7 ... x1.3, fewer than 3 runs'})"
        )
    if not cals:
        lines.append("  no comparable runs yet (rabit calibrate add)")
    emit(payload, args.json, "\n".join(lines))
    return 0
