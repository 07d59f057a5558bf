"""The forms a fleet description (:class:`core.config.fleet.Fleet`) travels in, read and written: a YAML or JSON
file (:func:`parse_fleet`, :func:`fleet_yaml`, :func:`fleet_json`), with every error naming the entry and the field
(:func:`describe_fleet_error`), and the Fleet page's tables (:func:`fleet_tables`, :func:`fleet_from_tables`).

The schema and its field names are :mod:`core.config.fleet`'s.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from core.base import MAX_CONFIG_BYTES, MAX_JSON_DEPTH, PayloadError, decode_text, nearest, parse_json
from core.config.fleet import EXAMPLE_YAML, Fleet, FleetError, FleetSettings, FleetWorkload

#: Where each list of the file lives, and what one of its entries is called in a message.
_ENTRIES = {"workloads": "workload", "scenarios": "scenario", "sites": "site", "availability": "availability"}


def _entry_name(data: Any, loc: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """The entry an error's location points into, named (``workload 'code' (workloads[1])``), and the rest."""
    node, where, rest = data, [], list(loc)
    label = ""
    while rest:
        key = rest.pop(0)
        where.append(key)
        if isinstance(key, int) and len(where) >= 2 and str(where[-2]) in _ENTRIES:
            entry = node[key] if isinstance(node, (list, tuple)) and 0 <= key < len(node) else None
            name = entry.get("name", entry.get("gpu")) if isinstance(entry, dict) else None
            path = ".".join(str(w) for w in where[:-1]) + f"[{key}]"
            label = f"{_ENTRIES[str(where[-2])]} {name!r} ({path})" if name is not None else path
            return label, tuple(rest)
        node = node.get(key) if isinstance(node, dict) else None
    return label, tuple(loc)


def describe_fleet_error(exc: ValidationError, data: Any) -> str:
    """One line naming the entry (workload, scenario, site) and the field of the first error, with a suggestion
    for a misspelt field."""
    e = exc.errors()[0]
    loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and x.startswith("function-")))
    label, rest = _entry_name(data, loc)
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "extra_forbidden" and rest:
        model = _model_at(loc)
        near = nearest(str(rest[-1]), model.model_fields) if model is not None else None
        msg = "not a field of the fleet description" + (f" (did you mean {near}?)" if near else "")
    field = ".".join(str(x) for x in rest)
    if label:
        return f"{label}: " + (f"field {field}: " if field else "") + msg
    return (f"field {field}: " if field else "") + msg


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The schema class an error's location ends in (for the did-you-mean of a misspelt field)."""
    model: type[BaseModel] | None = Fleet
    for key in loc[:-1]:
        if isinstance(key, int) or model is None:
            continue
        f = model.model_fields.get(str(key))
        if f is None:
            return None
        ann = f.annotation
        inner = next(
            (a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
        model = inner if inner is not None else (ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None)
    return model


def validate_fleet(data: Any) -> Fleet:
    """A :class:`Fleet` from the file's parsed document (a mapping), or a :class:`FleetError` naming the entry and
    the field."""
    if not isinstance(data, dict):
        raise FleetError("a fleet description is a mapping with workloads (and scenarios, constraints, ...)")
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise FleetError(describe_fleet_error(exc, data)) from None


def _yaml_document(text: str) -> Any:
    """The YAML document, refusing anchors and aliases (an alias can make a small file expand without bound) and
    nesting beyond :data:`core.base.limits.MAX_JSON_DEPTH`, before anything is built from it."""
    depth = 0
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None):
                raise FleetError(
                    "YAML anchors and aliases are not accepted in a fleet description: write each entry out"
                )
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise FleetError(f"the document nests deeper than {MAX_JSON_DEPTH} levels")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise FleetError(f"not readable YAML{where}: {getattr(exc, 'problem', None) or exc}") from None


def parse_fleet(data: bytes | str, name: str = "fleet.yaml") -> Fleet:
    """A fleet description from a file's bytes (JSON when it starts with ``{``, YAML otherwise), within the limits
    of :mod:`core.base.limits`; a :class:`FleetError` names the file, the entry and the field."""
    try:
        text = decode_text(data, name, MAX_CONFIG_BYTES)
        doc = parse_json(text, what=name) if text.lstrip().startswith("{") else _yaml_document(text)
        return validate_fleet(doc)
    except (FleetError, PayloadError) as exc:
        raise FleetError(f"{name}: {exc}") from None
    except ValueError as exc:  # a JSON syntax error
        raise FleetError(f"{name}: {exc}") from None


def fleet_document(fleet: Fleet) -> dict[str, Any]:
    """The fleet as a file's document: defaults left out, ``{kind: value}`` mappings written as mappings (what
    :func:`parse_fleet` reads back to the same fleet)."""
    doc = fleet.model_dump(mode="json", exclude_defaults=True)
    for s in doc.get("scenarios", []):
        for k in ("cap", "price_factors"):
            if k in s:
                s[k] = dict(s[k])
    cons = doc.get("constraints", {})
    if "max_gpus" in cons:
        cons["max_gpus"] = dict(cons["max_gpus"])
    if "availability" in doc:
        doc["availability"] = {a.pop("gpu"): a for a in doc["availability"]}
    return doc


def fleet_yaml(fleet: Fleet) -> str:
    """The fleet as a YAML file."""
    return yaml.safe_dump(fleet_document(fleet), sort_keys=False, default_flow_style=None, width=120)


def fleet_json(fleet: Fleet) -> str:
    """The fleet as a JSON file."""
    return json.dumps(fleet_document(fleet), indent=2)


EXAMPLE = parse_fleet(EXAMPLE_YAML, "example.yaml")


# --- the Fleet page's tables ---------------------------------------------------------------------------------------

#: The columns of each table the Fleet page edits, in order (a list field as comma-separated text, a mapping as
#: ``kind=value`` pairs).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "workloads": (
        "name",
        "model",
        "rate_per_s",
        "peak_factor",
        "input_tokens",
        "output_tokens",
        "p95_ttft_s",
        "p95_itl_s",
        "p95_e2e_s",
        "priority",
        "adapters",
        "gpus",
    ),
    "scenarios": (
        "name",
        "rate_factor",
        "input_factor",
        "output_factor",
        "withdraw",
        "cap",
        "price_factor",
        "price_factors",
        "workloads",
    ),
    "availability": ("gpu", "failure_rate_per_gpu_hour", "repair_hours"),
    "sites": ("name", "pue", "power_budget_kw", "gpus"),
}
_LIST_CELLS = {"gpus", "withdraw", "workloads"}
_ZERO_IS_NONE = ("p95_ttft_s", "p95_itl_s", "p95_e2e_s")
_PAIR_CELLS = {"cap", "price_factors"}


def _cell_out(col: str, v: Any) -> Any:
    if col in _LIST_CELLS:
        return ", ".join(v)
    if col in _PAIR_CELLS:
        return ", ".join(f"{g}={x:g}" for g, x in v)
    return v


def fleet_tables(fleet: Fleet) -> dict[str, list[dict[str, Any]]]:
    """The fleet's workloads, scenarios, availability and sites as rows of the page's tables
    (:data:`TABLE_COLUMNS`)."""
    src: dict[str, tuple[BaseModel, ...]] = {
        "workloads": fleet.workloads,
        "scenarios": fleet.scenarios,
        "availability": fleet.availability,
        "sites": fleet.constraints.sites,
    }
    return {t: [{c: _cell_out(c, getattr(x, c)) for c in cols} for x in src[t]] for t, cols in TABLE_COLUMNS.items()}


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _cell_in(col: str, v: Any) -> Any:
    if isinstance(v, str) and col in _LIST_CELLS:
        return tuple(x.strip() for x in v.split(",") if x.strip())
    if isinstance(v, str) and col in _PAIR_CELLS:
        out = {}
        for part in (p.strip() for p in v.split(",") if p.strip()):
            g, sep, x = part.partition("=")
            if not sep:
                raise FleetError(f"{col}: write kind=value pairs separated by commas (e.g. h100-sxm=16), got {part!r}")
            out[g.strip()] = x.strip()
        return out
    return v


def fleet_from_tables(
    tables: dict[str, list[dict[str, Any]]],
    *,
    gpus: tuple[str, ...] = (),
    max_gpus: dict[str, int] | str | None = None,
    max_usd_per_hour: float | None = None,
    settings: FleetSettings = FleetSettings(),
    keep: Fleet | None = None,
) -> Fleet:
    """A fleet from the page's edited tables (blank cells take their defaults) and its constraint inputs
    (``max_gpus`` as a mapping or as ``kind=count`` text); the workloads' fields no table shows (hourly profiles, lengths, uploaded models) are taken from ``keep``'s workload
    of the same name. A :class:`FleetError` names the table's row and the field."""
    kept = {w.name: w for w in keep.workloads} if keep is not None else {}
    doc: dict[str, Any] = {table: _entries(table, rows, kept) for table, rows in tables.items()}
    doc["constraints"] = _constraints(doc.pop("sites", []), gpus, max_gpus, max_usd_per_hour)
    doc["availability"] = doc.get("availability", [])
    doc["settings"] = settings.model_dump()
    return validate_fleet(doc)


def _entries(table: str, rows: list[dict[str, Any]], kept: dict[str, FleetWorkload]) -> list[dict[str, Any]]:
    """One table's rows as the file's entries: blank rows dropped, blank cells left to their defaults, a p95 target
    of 0 as no target, and a workload's fields no table shows taken from the kept workload of its name."""
    entries = []
    for row in rows:
        if all(_empty(v) for v in row.values()):
            continue
        entry = {c: _cell_in(c, v) for c, v in row.items() if not _empty(v)}
        for c in _ZERO_IS_NONE:  # a p95 target of 0 is no target (as the other pages' inputs)
            if entry.get(c) == 0:
                entry[c] = None
        if table == "workloads" and entry.get("name") in kept:
            old = kept[entry["name"]].model_dump(exclude_defaults=True)
            shown = set(TABLE_COLUMNS["workloads"])
            entry = {**{k: v for k, v in old.items() if k not in shown}, **entry}
            if "model" in entry and "custom_model" in entry:
                entry.pop("custom_model")
                entry.pop("config_json", None)
        entries.append(entry)
    return entries


def _constraints(
    sites: list[dict[str, Any]],
    gpus: tuple[str, ...],
    max_gpus: dict[str, int] | str | None,
    max_usd_per_hour: float | None,
) -> dict[str, Any]:
    """The file's ``constraints`` from the sites' table and the page's constraint inputs (only those set)."""
    constraints: dict[str, Any] = {"sites": sites}
    if gpus:
        constraints["gpus"] = gpus
    counts = _cell_in("cap", max_gpus) if isinstance(max_gpus, str) else max_gpus
    if counts:
        constraints["max_gpus"] = dict(counts)
    if max_usd_per_hour:
        constraints["max_usd_per_hour"] = max_usd_per_hour
    return constraints
