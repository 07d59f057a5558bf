"""Entry point of the ``rabit`` console script."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

from pydantic import ValidationError

from cli.common import ESTIMATE_COMMANDS, OneLineParser, add_analysis_arg, die, flag_for, named, parse_with_analysis
from core.config import error_text

#: One module per subcommand, each with ``register(subparsers)``, in help order.
COMMANDS = (
    "cli.memory_cmd",
    "cli.speed_cmd",
    "cli.simulate_cmd",
    "cli.train_cmd",
    "cli.video_cmd",
    "cli.recommend_cmd",
    "cli.fleet_cmd",
    "cli.catalog_cmd",
    "cli.assumptions_cmd",
    "cli.validate_cmd",
    "cli.next_experiment_cmd",
    "cli.diagnose_cmd",
    "cli.analyses_cmd",
    "cli.calibrate_cmd",
    "cli.tune_cmd",
)


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


def _subparser(parser: OneLineParser, command: str) -> argparse.ArgumentParser | None:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a.choices.get(command)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_with_analysis(parser, argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader (``| head``) has gone: stop quietly, and keep Python from reporting it at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file descriptor (tests): nothing left to flush
            pass
        return 1
    except KeyError as exc:  # an unknown slug that slipped past validation
        die(f"rabit {args.command}: error: {exc.args[0]}")
    except ValidationError as exc:  # a goal or spec field outside its range: name the flag, else the file's field
        e = exc.errors()[0]
        field = str(e["loc"][-1]) if e["loc"] else ""
        flag = flag_for(field, _subparser(parser, args.command))
        if flag is not None:
            die(f"rabit {args.command}: error: argument {named(args, flag)}: {error_text(e)}")
        loc = ".".join(str(x) for x in e["loc"]) or "the settings"
        where = f"argument --config: {args.config}: " if getattr(args, "config", None) else ""
        die(f"rabit {args.command}: error: {where}{loc}: {error_text(e)}")
    except (ValueError, ArithmeticError, RecursionError, UnicodeError) as exc:  # last line of defence
        die(f"rabit {args.command}: error: {exc}")


if __name__ == "__main__":
    sys.exit(main())
