"""``rabit calibrate``: attach measured runs to a saved analysis and show the calibration they give.

``add --analysis ID --file F [--file F ...]``: a ``vllm bench serve --save-result`` or ``vllm bench throughput
--output-json`` file (its config is the analysis's unless the file says otherwise) or the CSV template. All
files are read first; a refused file exits 2 naming what is wrong, and nothing is attached.

``show --analysis ID --json`` prints ``{"metrics": {NAME: {"n", "bias", "factor", "interval": [low, high],
"basis": "t" | "heuristic", "runs": [...]}}}`` (contract, issue 10); NAME follows the estimate JSON keys
(``ttft_s.p50``, ``itl_s.p50``, ``e2e_s.p50``, ``throughput_tokens_per_s``, ``step_s``, ...); ``interval``
holds multipliers on the analytical value.

``fit --analysis ID --json``: the second calibration (:mod:`core.decision.fit`): the efficiency assumptions fitted to
the runs per GPU kind and engine (``fits``), each one's leave-one-out comparison with the factor (``compare``) and
which of the two to trust (``trust``).

``--assume NAME=VALUE`` / ``--bound low|base|high`` (issue 9) make the predictions the runs are compared
against at those assumptions (each run's own config, its assumptions moved); ``--json`` then also carries the
heuristic ``ranges`` of every prediction (``show``: ``metrics.<NAME>.runs.<i>.predicted``; ``add``: the added
runs' ``predicted.<i>.<NAME>``) and ``range_basis``. There is no ``--config FILE``: each stored run keeps its
own config (the analysis's, overridden by what its benchmark file said), and the files are not kept, so
replacing the analysis's config would mean re-reading files the store no longer has.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.common import add_json, add_range_args, die, emit, load_analysis, open_store, parse_assume, with_ranges
from core.base import MAX_TABLE_BYTES, PayloadError, read_regular_file
from core.decision import COMPARABLE_RULE, calibrate_all, leave_one_out, predict, residuals_of
from core.operations import Run, RunError, parse_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="attach measured runs to an analysis; show the calibrated factors")
    s = p.add_subparsers(dest="calibrate_command", required=True, parser_class=type(p))
    q = s.add_parser("add", help="attach vLLM benchmark JSON files or the CSV template to an analysis")
    q.add_argument("--analysis", metavar="ID", required=True)
    q.add_argument("--file", action="append", required=True, metavar="F", help="repeat for several files")
    add_range_args(q, config=False)  # the added runs' predictions at these assumptions (the runs keep theirs)
    add_json(q)
    q.set_defaults(func=add)
    q = s.add_parser("show", help="per-metric bias, factor and interval from the analysis's runs")
    q.add_argument("--analysis", metavar="ID", required=True)
    add_range_args(q, config=False)  # the predictions compared with the runs, at these assumptions
    add_json(q)
    q.set_defaults(func=show)
    q = s.add_parser("fit", help="fit the efficiency assumptions to the analysis's runs; compare with the factor")
    q.add_argument("--analysis", metavar="ID", required=True)
    q.add_argument("--no-compare", action="store_true", help="skip the leave-one-out comparison with the factor")
    add_json(q)
    q.set_defaults(func=fit_cmd)


def _at_assumptions(runs: list[Run], args: argparse.Namespace) -> list[Run]:
    """Each run with its config's assumptions at ``--bound``, then each ``--assume`` (the prediction's; a run
    as measured is unchanged without either flag)."""
    values = parse_assume(args.assume)
    if args.bound == "base" and not values:
        return list(runs)
    out = []
    for r in runs:
        a = r.config.assumptions.at(args.bound) if args.bound != "base" else r.config.assumptions
        out.append(r.model_copy(update={"config": r.config.model_copy(update={"assumptions": a.with_(**values)})}))
    return out


def _ranges_of(runs: list[Run]) -> list[dict]:
    """Per run, each predicted metric's heuristic range ({} for a run the model cannot evaluate)."""
    from core.decision import prediction_ranges

    out = []
    for r in runs:
        try:
            out.append(prediction_ranges(r))
        except (ValueError, KeyError):  # a run's config today's catalog no longer accepts
            out.append({})
    return out


def add(args: argparse.Namespace) -> int:
    parse_assume(args.assume)  # exit 2 naming a bad assumption before any file is read
    a = load_analysis(args.analysis)
    runs: list[Run] = []
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
    from store import StoreError

    try:
        ids = open_store().add_runs(a.id, runs)
    except StoreError as exc:  # the analysis would outgrow what its export carries: nothing was attached
        die(f"rabit calibrate add: error: argument --file: {exc}")
    payload = {"analysis": a.id, "added": list(ids), "runs": [r.label for r in runs]}
    if args.json:  # what the model predicts for each added run, at the assumptions given, with its range
        moved = _at_assumptions(runs, args)
        rngs = _ranges_of(moved)
        payload["predicted"] = [{k: v.value for k, v in rg.items()} for rg in rngs]
        with_ranges(payload, {f"predicted.{i}.{k}": v for i, rg in enumerate(rngs) for k, v in rg.items()})
    emit(payload, args.json, f"attached {len(ids)} run(s) to {a.id}")
    return 0


def show(args: argparse.Namespace) -> int:
    parse_assume(args.assume)  # exit 2 naming a bad assumption before the store is read
    a = load_analysis(args.analysis)
    runs = _at_assumptions([r.run for r in a.runs], args)
    rngs = _ranges_of(runs) if args.json else [{} for _ in runs]
    preds = {id(r): rg for r, rg in zip(runs, rngs)}
    res = residuals_of(runs, lambda r: {k: v.value for k, v in preds[id(r)].items()} or predict(r))
    cals = calibrate_all(res, a.config.gpu)
    metrics = {}
    for name, c in cals.items():
        loo = leave_one_out(c)
        metrics[name] = {**c.as_json(), "loo_coverage": loo.coverage}
    excluded = [{"label": r.label, "metric": r.metric, "gpu": r.gpu} for r in res if r.gpu != a.config.gpu]
    payload = {"analysis": a.id, "gpu": a.config.gpu, "rule": COMPARABLE_RULE, "metrics": metrics, "excluded": excluded}
    if args.json:
        ranged = {}
        for name, c in cals.items():
            for i, r in enumerate(c.runs):  # each residual's run: the same label and the same prediction
                for run, g in zip(runs, rngs):
                    if run.label == r.label and name in g and g[name].value == r.predicted:
                        ranged[f"metrics.{name}.runs.{i}.predicted"] = g[name]
                        break
        with_ranges(payload, ranged)
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


def fit_cmd(args: argparse.Namespace) -> int:
    """``rabit calibrate fit``: JSON ``{"analysis", "fits": [AssumptionFit], "compare": {GPU/engine: FitComparison},
    "trust": {GPU/engine: "fit" | "factor" | "analytical"}}`` per GPU kind and engine of the runs."""
    from core.decision import compare_fit, fit_assumptions, group

    a = load_analysis(args.analysis)
    runs = [r.run for r in a.runs if r.run.load != "train"]
    fits, comps, trust, lines = [], {}, {}, [f"{a.name} ({a.id}): {len(runs)} serving run(s)"]
    for (gpu, engine), rs in group(runs).items():
        f = fit_assumptions(rs, gpu, engine)
        if f is None:
            continue
        fits.append(f.as_json())
        key = f"{gpu}/{engine}"
        moved = ", ".join(f"{k} {f.base[k]:g} -> {f.values[k]:.4g}" for k in f.moved) or "nothing the runs move"
        lines.append(f"  {key}: {moved}; interval x{f.low_mult:.3f} ... x{f.high_mult:.3f} ({f.basis}, n={f.n})")
        c = None if args.no_compare else compare_fit(rs, gpu, engine)
        if c is not None:
            comps[key], trust[key] = c.as_json(), c.trust
            lines.append(f"    trust the {c.trust}: {c.why}")
    if not fits:
        lines.append("  no serving run to fit (rabit calibrate add)")
    emit({"analysis": a.id, "fits": fits, "compare": comps, "trust": trust}, args.json, "\n".join(lines))
    return 0
