"""``rabit analyses``: save, list, show, rename, delete, restore, export and import saved analyses.

JSON keys (contract, issue 10): ``save`` prints ``{"id": ...}``; ``list`` prints
``{"analyses": [{"id", "name", "model", "gpu", "updated_at", ...}]}``; ``show`` prints the analysis with
its ``config``, ``runs`` and ``revisions``, plus (issue 9) ``headline`` (the Saved analyses page's headline
numbers, computed now from the saved config at the assumptions given), their ``ranges`` and ``range_basis``.
The store is the one ``RABIT_DATABASE_URL`` names, else the embedded SQLite file (``rabit analyses where``).

Only ``save`` (``--assume``, ``--bound``, ``--config FILE``) and ``show`` (``--assume``, ``--bound``) take the
assumption flags: the other subcommands manage stored analyses and estimate nothing.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from cli.common import (
    add_analysis_arg,
    add_cluster_args,
    add_json,
    add_model_args,
    add_range_args,
    add_serving_args,
    assumptions_from_args,
    config_file,
    config_from_args,
    die,
    emit,
    fill_from_config,
    open_store,
    parse_assume,
    range_line,
    with_ranges,
)
from core.base import MAX_IMPORT_BYTES, parse_json, read_regular_file
from core.config import RabitConfig
from core.decision import analysis_headline


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyses", help="saved analyses: save, list, show, rename, delete, restore, export, import")
    s = p.add_subparsers(dest="analyses_command", required=True, parser_class=type(p))

    q = s.add_parser("save", help="save the estimate flags as an analysis (or a new revision with --analysis)")
    q.add_argument("--name", help="the analysis name (required for a new analysis)")
    add_analysis_arg(q)
    q.add_argument("--revision", type=int, help="with --analysis: the revision you edited (refused if it moved on)")
    q.add_argument("--note", help="free-text note")
    q.add_argument("--by", help="who saves (default: $USER)")
    add_model_args(q)
    add_cluster_args(q)
    add_serving_args(q)
    add_range_args(q)  # the saved config carries the assumptions in force; --config FILE: the dashboard's file
    add_json(q)
    q.set_defaults(func=save)

    q = s.add_parser("list", help="saved analyses, newest first")
    q.add_argument("--search", help="match name, model or GPU")
    q.add_argument("--deleted", action="store_true", help="list deleted analyses instead (restorable)")
    add_json(q)
    q.set_defaults(func=list_)

    q = s.add_parser("show", help="one analysis with its config, runs and revisions")
    q.add_argument("id")
    q.add_argument("--revision", type=int, help="an earlier revision")
    add_range_args(q, config=False)  # evaluate the saved config's headline numbers at these assumptions
    add_json(q)
    q.set_defaults(func=show)

    q = s.add_parser("rename", help="rename an analysis")
    q.add_argument("id")
    q.add_argument("--name", required=True)
    add_json(q)
    q.set_defaults(func=rename)

    for name, fn, what in (
        ("delete", delete, "move an analysis to the bin (restorable)"),
        ("restore", restore, "bring a deleted analysis back"),
    ):
        q = s.add_parser(name, help=what)
        q.add_argument("id")
        add_json(q)
        q.set_defaults(func=fn)

    q = s.add_parser("export", help="write an analysis with every revision and run as JSON")
    q.add_argument("id")
    q.add_argument("--output", "-o", metavar="FILE", help="write here instead of standard output")
    add_json(q)
    q.set_defaults(func=export)

    q = s.add_parser("import", help="import an exported analysis as a new one")
    q.add_argument("file")
    q.add_argument("--by", help="who imports (default: $USER)")
    add_json(q)
    q.set_defaults(func=import_)

    q = s.add_parser("attach-telemetry", help="attach a /metrics dump or a CSV of time series to an analysis")
    q.add_argument("id")
    q.add_argument("--file", required=True, metavar="F", help="vLLM's or dcgm-exporter's /metrics text, or a CSV")
    add_json(q)
    q.set_defaults(func=attach_telemetry)

    q = s.add_parser("where", help="where the analyses are stored")
    add_json(q)
    q.set_defaults(func=where)


def _by(args: argparse.Namespace) -> str:
    return args.by or os.environ.get("USER", "")


def _store_flag(message: str) -> str:
    """A store error about the text a flag gave, naming the flag (``--name``, ``--note``, ``--by``)."""
    for start, flag in (("the name: ", "--name"), ("note: ", "--note"), ("saved by: ", "--by")):
        if message.startswith(start):
            return f"argument {flag}: {message.removeprefix(start)}"
    return f"argument --name: {message}" if message.startswith("an analysis needs a name") else message


#: The config fields ``analyses save`` builds from its flags (config_from_args); the rest come from ``--config``.
_FLAG_FIELDS = frozenset(
    {
        *("gpu", "gpus_per_node", "nodes", "fabric", "tp", "pp", "ep", "model", "custom_model", "assumptions"),
        *("batch", "input_tokens", "output_tokens", "kv_dtype", "kv_alloc", "block_size", "prefix_cache_frac"),
        "weights",
    }
)


def _not_on_flags(cfg: RabitConfig | None) -> dict[str, Any]:
    """The fields of a ``--config`` file that no ``analyses save`` flag carries (training, speculative
    decoding, ...): saved as the file has them."""
    if cfg is None:
        return {}
    return {f: getattr(cfg, f) for f in RabitConfig.model_fields if f not in _FLAG_FIELDS}


def save(args: argparse.Namespace) -> int:
    from store import Conflict, StoreError

    fill_from_config(args)  # --assume checked; flags left at their default take the --config file's values
    cfg = config_from_args(args, **_not_on_flags(config_file(args)))
    st = open_store()
    try:
        if args.analysis:
            a = st.get(args.analysis)
            expected = args.revision if args.revision is not None else a.summary.revision
            rev = st.save(
                a.id,
                cfg,
                expected_revision=expected,
                name=args.name,
                results=analysis_headline(cfg),
                note=args.note,
                saved_by=_by(args),
            )
            aid = a.id
        else:
            if not args.name:
                die("rabit analyses save: error: argument --name: required for a new analysis")
            aid, rev = (
                st.create(args.name, cfg, results=analysis_headline(cfg), note=args.note or "", saved_by=_by(args)),
                1,
            )
    except Conflict as exc:  # --revision given: it is the one that moved on; else someone saved just now
        die(f"rabit analyses save: error: {'argument --revision: ' if args.revision is not None else ''}{exc}")
    except StoreError as exc:
        die(f"rabit analyses save: error: {_store_flag(str(exc))}")
    emit({"id": aid, "revision": rev}, args.json, f"saved {aid} revision {rev}")
    return 0


def list_(args: argparse.Namespace) -> int:
    rows = open_store().list(args.search or "", deleted=args.deleted)
    human = (
        "\n".join(
            f"{r.id}  {r.updated_at[:19].replace('T', ' ')}  rev {r.revision:<3} {r.name}  ({r.model} on {r.gpu})"
            for r in rows
        )
        or "no saved analyses"
    )
    emit({"analyses": [r.as_json() for r in rows]}, args.json, human)
    return 0


def _get(st, aid: str, revision: int | None = None):
    from store import NotFound

    try:
        return st.get(aid, revision)
    except NotFound as exc:
        die(f"rabit analyses: error: argument id: {exc}")


def _headline_ranges(cfg: RabitConfig) -> tuple[dict[str, Any], str | None]:
    """The headline numbers' ranges of ``cfg`` (core.decision.uncertainty), or {} and why it cannot be evaluated."""
    from core.decision import analysis_headline_ranges

    try:
        return analysis_headline_ranges(cfg), None
    except (ValueError, KeyError) as exc:  # a config today's catalog or model no longer accepts
        return {}, str(exc)


def show(args: argparse.Namespace) -> int:
    from core.base import fmt_bytes, fmt_num, fmt_time

    parse_assume(args.assume)  # exit 2 naming a bad assumption before the store is read
    a = _get(open_store(), args.id, args.revision)
    c = a.config
    args._analysis_config = c  # the saved assumptions, at --bound, then each --assume
    cfg = c.model_copy(update={"assumptions": assumptions_from_args(args)})
    rng, why = _headline_ranges(cfg)
    human = "\n".join(
        [
            f"{a.name} ({a.id}), revision {a.revision} of {a.summary.revision}, updated {a.summary.updated_at}",
            (
                f"  {a.summary.model} on {c.gpus} x {c.gpu}, TP {c.tp} PP {c.pp}, {c.weights}, batch {c.batch}, "
                f"{c.input_tokens:,} in / {c.output_tokens:,} out"
            ),
            f"  {len(a.runs)} measured run(s); {len(a.revisions)} revision(s)"
            + (f"; note: {a.note}" if a.note else ""),
        ]
    )
    fmts = {"mfu": lambda v: f"{v:.1%}", "cost_usd": lambda v: f"${fmt_num(v)}", "total_bytes_per_gpu": fmt_bytes}
    plain = ("tokens_per_s", "max_sequences", "gpu_hours")
    lines = [range_line(k, r, fmts.get(k, fmt_num if k in plain else fmt_time)) for k, r in rng.items()]
    head = "  headline numbers now" + (f" (--bound {args.bound})" if args.bound != "base" else "") + ":"
    human += "\n" + "\n".join([head, *lines] if lines else [f"  cannot be evaluated now: {why}"])
    payload = {**a.as_json(), "headline": {k: r.value for k, r in rng.items()}}
    if why:
        payload["headline_error"] = why
    emit(with_ranges(payload, rng), args.json, human)
    return 0


def rename(args: argparse.Namespace) -> int:
    from store import StoreError

    st = open_store()
    _get(st, args.id)
    try:
        st.rename(args.id, args.name)
    except StoreError as exc:
        die(f"rabit analyses rename: error: argument --name: {str(exc).removeprefix('the name: ')}")
    emit({"id": args.id, "name": args.name.strip()}, args.json, f"renamed {args.id}")
    return 0


def delete(args: argparse.Namespace) -> int:
    st = open_store()
    _get(st, args.id)
    st.delete(args.id)
    emit({"id": args.id, "deleted": True}, args.json, f"deleted {args.id} (rabit analyses restore {args.id})")
    return 0


def restore(args: argparse.Namespace) -> int:
    st = open_store()
    _get(st, args.id)
    st.restore(args.id)
    emit({"id": args.id, "deleted": False}, args.json, f"restored {args.id}")
    return 0


def export(args: argparse.Namespace) -> int:
    st = open_store()
    _get(st, args.id)
    text = st.export_text(args.id)  # what export writes, import reads back
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            die(f"rabit analyses export: error: argument --output: cannot write {args.output}: {exc.strerror}")
        emit({"id": args.id, "file": args.output}, args.json, f"wrote {args.output}")
    else:
        print(text)
    return 0


def import_(args: argparse.Namespace) -> int:
    from store import StoreError

    try:  # a regular file within the bound of what an analysis can hold (core.base.payloads.MAX_IMPORT_BYTES)
        data = parse_json(read_regular_file(args.file, MAX_IMPORT_BYTES), what=args.file, max_bytes=MAX_IMPORT_BYTES)
    except OSError as exc:
        die(f"rabit analyses import: error: argument file: cannot read {args.file}: {exc.strerror}")
    except ValueError as exc:  # not a regular file, too large, not UTF-8, too deep, not JSON: the reason says which
        die(f"rabit analyses import: error: argument file: {exc}")
    try:
        aid = open_store().import_(data, saved_by=_by(args))
    except StoreError as exc:
        die(f"rabit analyses import: error: argument file: {exc}")
    emit({"id": aid}, args.json, f"imported as {aid}")
    return 0


def attach_telemetry(args: argparse.Namespace) -> int:
    from core.base import PayloadError
    from core.operations import MAX_BYTES, TelemetryError, parse, to_payload
    from store import StoreError

    st = open_store()
    _get(st, args.id)
    try:
        data = read_regular_file(args.file, MAX_BYTES)  # a regular file within the telemetry limit
        tel = parse(data, Path(args.file).name)
    except OSError as exc:
        die(f"rabit analyses attach-telemetry: error: argument --file: cannot read {args.file}: {exc.strerror}")
    except (TelemetryError, PayloadError) as exc:
        die(f"rabit analyses attach-telemetry: error: argument --file: {exc}")
    try:
        tid = st.add_telemetry(args.id, tel.fmt, to_payload(tel))
    except StoreError as exc:  # the analysis would outgrow what its export can carry: nothing was attached
        die(f"rabit analyses attach-telemetry: error: argument --file: {exc}")
    emit(
        {"id": args.id, "telemetry": tid, "samples": len(tel.samples)},
        args.json,
        f"attached {len(tel.samples):,} samples to {args.id}",
    )
    return 0


def where(args: argparse.Namespace) -> int:
    st = open_store()
    emit({"url": st.where}, args.json, st.where)
    return 0
