"""Entry point of the ``rabit`` console script."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from cli.common import ESTIMATE_COMMANDS, OneLineParser, add_analysis_arg, die, parse_with_analysis

#: One module per subcommand, each with ``register(subparsers)``, in help order.
COMMANDS = ("cli.memory_cmd", "cli.speed_cmd", "cli.simulate_cmd", "cli.train_cmd", "cli.recommend_cmd",
            "cli.catalog_cmd", "cli.assumptions_cmd", "cli.analyses_cmd", "cli.calibrate_cmd")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="rabit", description="Size the GPUs, runtime and cost of an LLM workload.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(sub)
    for name in ESTIMATE_COMMANDS:
        if name in sub.choices:
            add_analysis_arg(sub.choices[name])
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_with_analysis(parser, argv)
    try:
        return int(args.func(args) or 0)
    except KeyError as exc:  # an unknown slug that slipped past validation
        die(f"rabit {args.command}: error: {exc.args[0]}")


if __name__ == "__main__":
    sys.exit(main())
