"""``rabit next-experiment``: which measurement could change the recommendation, ranked by flip chance per GPU-hour.

Takes the same inputs as ``rabit recommend`` (serving), plus the workload's spread and ``--analysis ID``.

JSON keys (contract, issue 11): ``experiments`` (list of {input, flip_chance, flips_to, gpu_hours, cost_usd,
command}, highest flip_chance per gpu_hour first; a measurement with no GPU time that can flip ranks first),
``baseline`` (the recommendation every re-run is compared with, null when nothing meets the target) and
``stable_inputs`` (the inputs no point of whose range changes the decision: "not worth measuring now").
"""

from __future__ import annotations

import argparse
import sys

from cli.common import add_ray_arg, cli_search_budget, die, emit, executor_from_args
from core.base import sig
from core.config import DEFAULT


def _parent() -> argparse.ArgumentParser:
    """``rabit recommend``'s parser, whose arguments this command inherits (one definition of each flag)."""
    from cli import recommend_cmd

    holder = argparse.ArgumentParser(add_help=False)
    sub = holder.add_subparsers()
    recommend_cmd.register(sub)
    return sub.choices["recommend"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "next-experiment",
        parents=[_parent()],
        add_help=False,
        conflict_handler="resolve",
        help="which benchmark to run first: inputs that could flip the recommendation, "
        "ranked by flip chance per GPU-hour",
    )
    g = p.add_argument_group("next experiment")
    g.add_argument(
        "--prompt-spread",
        type=float,
        default=DEFAULT.experiment.prompt_spread_frac,
        help="relative spread of the mean prompt length",
    )
    g.add_argument(
        "--output-spread",
        type=float,
        default=DEFAULT.experiment.output_spread_frac,
        help="relative spread of the mean output length",
    )
    g.add_argument(
        "--rate-spread",
        type=float,
        default=DEFAULT.experiment.rate_spread_frac,
        help="relative spread of the arrival rate",
    )
    g.add_argument("--points-per-side", type=int, default=2, help="re-runs on each side of an input's base value")
    add_ray_arg(g)
    if not any("--analysis" in a.option_strings for a in p._actions):  # cli.main may add its own (it wins)
        g.add_argument("--analysis", metavar="ID", help="a saved analysis (its config and inputs; flags override)")
    p.set_defaults(func=run, _parser=p)


def _check_serving_flags(args: argparse.Namespace) -> None:
    """Exit 2 on --emit (rabit recommend's), a missing --rate, a spread outside [0, 1) or points per side outside
    1 to 5."""
    if args.emit:
        die("rabit next-experiment: error: argument --emit: not available here (use rabit recommend --emit)")
    if args.rate is None:
        die("rabit next-experiment: error: the following arguments are required: --rate (or --analysis ID)")
    for flag, v in (
        ("--prompt-spread", args.prompt_spread),
        ("--output-spread", args.output_spread),
        ("--rate-spread", args.rate_spread),
    ):
        if not 0 <= v < 1:
            die(f"rabit next-experiment: error: argument {flag}: a relative spread in [0, 1), got {sig(v, 6)}")
    if not 1 <= args.points_per_side <= 5:
        die(f"rabit next-experiment: error: argument --points-per-side: 1 to 5, got {args.points_per_side}")


def run(args: argparse.Namespace) -> int:
    from cli.common import fill_from_config
    from cli.recommend_cmd import CONFIG_DEST, serving_inputs
    from core.decision import NextExperimentSpec, next_experiment

    if getattr(args, "analysis", None) and not hasattr(args, "_analysis_config"):
        die("rabit next-experiment: error: argument --analysis: saved analyses are not available in this build")
    fill_from_config(
        args,
        {
            **CONFIG_DEST,
            "prompt_spread": "experiment.prompt_spread_frac",
            "output_spread": "experiment.output_spread_frac",
            "rate_spread": "experiment.rate_spread_frac",
        },
    )
    from cli.common import refuse_unused
    from cli.recommend_cmd import _SERVING_ONLY as SERVING_ONLY
    from cli.recommend_cmd import _TRAINING_ONLY as TRAINING_ONLY

    if args.train:
        why = "with --train (a serving flag: the training run is sized by --tokens and --deadline-days)"
        spreads = ("prompt_spread", "output_spread", "rate_spread", "disagg")
        refuse_unused(args, "rabit next-experiment", dict.fromkeys((*SERVING_ONLY, *spreads), why))
        return run_training(args)
    refuse_unused(args, "rabit next-experiment", dict.fromkeys(TRAINING_ONLY, "without --train (a training flag)"))
    _check_serving_flags(args)
    goal, cons, prices = serving_inputs(args)
    spec = NextExperimentSpec(
        goal=goal,
        constraints=cons,
        prompt_spread_frac=args.prompt_spread,
        output_spread_frac=args.output_spread,
        rate_spread_frac=args.rate_spread,
        points_per_side=args.points_per_side,
    )
    tty = sys.stderr.isatty() and not args.json

    def progress(done: int, total: int, label: str) -> None:
        if tty:
            print(f"\r  re-run {done}/{total}: {label[:60]:<60}", end="", file=sys.stderr, flush=True)

    with executor_from_args(args) as executor:
        r = next_experiment(
            spec, prices, progress=progress, executor=executor, budget=cli_search_budget("next-experiment")
        )
    if tty:
        print("\r" + " " * 80 + "\r", end="", file=sys.stderr)
    payload = to_json(r)
    emit(payload, args.json, human(r))
    return 0


def run_training(args: argparse.Namespace) -> int:
    """--train: which measurement could change the training run (training and communication efficiency per kind)."""
    from cli.recommend_cmd import training_inputs
    from core.decision import TrainingExperimentSpec, next_training_experiment

    if args.emit:
        die("rabit next-experiment: error: argument --emit: not available here (use rabit recommend --emit)")
    cfg, cons, prices = training_inputs(args)
    spec = TrainingExperimentSpec(
        config=cfg, deadline_s=cfg.targets.deadline_s, constraints=cons, points_per_side=args.points_per_side
    )
    r = next_training_experiment(spec, prices, budget=cli_search_budget("next-experiment"))
    emit(to_json(r), args.json, human(r))
    return 0


def to_json(r) -> dict:
    base = r.baseline.recommendation
    return {  # serving: the pick (Pick); --train: the run (TrainingOption)
        "experiments": [
            {
                "input": e.input.key,
                "flip_chance": e.flip_chance,
                "flips_to": e.flips_to,
                "gpu_hours": e.gpu_hours,
                "cost_usd": e.cost_usd,
                "command": e.command,
            }
            for e in r.experiments
        ],
        "baseline": base.model_dump() if base is not None else None,
        "stable_inputs": [e.input.key for e in r.stable],
    }


def human(r) -> str:
    base = r.baseline.recommendation
    if base is not None and hasattr(base, "cost_per_hour"):
        head = f"Baseline: {base.label} at ${base.cost_per_hour:,.2f}/h"
    elif base is not None:
        head = f"Baseline: {base.gpus:,} x {base.gpu} ({base.layout}), ${base.cost_usd:,.0f} for the run"
    else:
        head = "Baseline: nothing meets the target (every re-run is compared with that)"
    lines = [head, f"{r.reruns} optimizer re-runs across {len(r.experiments) + len(r.stable)} uncertain inputs", ""]
    if r.experiments:
        lines.append(f"{'#':>2}  {'input':<24} {'flip':>5} {'GPU-h':>7} {'cost':>9}  flips to")
        for i, e in enumerate(r.experiments, 1):
            lines.append(
                f"{i:>2}  {e.input.key:<24} {e.flip_chance:>5.0%} {e.gpu_hours:>7.2f} ${e.cost_usd:>8.2f}  {e.flips_to}"
            )
        top = r.experiments[0]
        lines += [
            "",
            f"Run first ({top.measurement}):",
            *("  " + c for c in top.command.splitlines()),
            f"  then: {top.then}",
        ]
    else:
        lines.append("No input flips the decision within its range.")
    if r.stable:
        lines += ["", "Not worth measuring now: " + ", ".join(e.input.key for e in r.stable)]
    return "\n".join(lines)
