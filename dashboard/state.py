"""The shared sidebar: one :class:`core.config.RabitConfig` for every page.

Widgets write into ``st.session_state`` under ``cfg.<field>`` keys (``cfg.workload.<field>`` and
``cfg.targets.<field>`` for the groups, whose widgets live on the Serving simulation and Optimizer pages);
the config is rebuilt from them on every rerun, validated, written back to the URL query string (so a
pasted link reproduces the view) and offered as a downloadable JSON file that can be loaded again.
Each problem is shown with ``st.error`` directly under the input it concerns.

Streamlit forgets the value of a widget that was not drawn on the last run, and a page switch that
interrupts a run can set it back to its default; each ``cfg.`` input and view choice is kept under a
key no widget owns, changed only by the widget's callback (:func:`edits`, :func:`view`,
:func:`commits`) or by the program (:func:`put`), and written back at the start of each run
(:func:`_keep`), so a page's inputs keep their values while another page is shown.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
from pydantic import ValidationError

from core import catalog
from core.base import QUERY_DOMAINS, REGISTRY, choices, decode_text, group_domain, number_from_text, parse_json, sig
from core.catalog import from_hf_config
from core.config import (
    DEFAULT,
    GROUPS,
    RabitConfig,
    describe_validation_error,
    from_json,
    from_query_report,
    problems,
    to_query,
)
from core.physics import fit_problems
from dashboard import analyses, kept
from dashboard.query_guard import DROPPED_QUERY
from dashboard.query_guard import guard_query_limits as guard_query_limits  # app.py: state.guard_query_limits()
from dashboard.text import plain

_P = "cfg."
_CUSTOM = "__custom__"
#: The session key of the fleet the Fleet page edits (the config's ``fleet``; one object, not one widget per field).
FLEET_KEY = "cfg.fleet"


def _key(field: str) -> str:
    return _P + field


def key(path: str) -> str:
    """The session-state key of a config field (``"workload.rate_per_s"`` for a group's field): pages give it
    to the widget that edits the field, with no ``value=`` of its own."""
    return _key(path)


#: Optional group fields whose widget shows 0 for "none".
_ZERO_IS_NONE = frozenset(
    {
        "targets.p95_ttft_s",
        "targets.p95_itl_s",
        "targets.p95_e2e_s",
        "targets.max_gpus",
        "targets.max_usd_per_hour",
        "workload.timeout_s",
        "workload.replicas",
        "disagg.prefill_tp",
        "disagg.decode_tp",
        "training.budget_gpus",
        "training.checkpoint_interval_s",
        "predicted.p95_ttft_s",
        "predicted.p95_itl_s",
        "predicted.prefix_cache_frac",
        "video.seconds",
        "video.fps",
        "video.rate_per_hour",
        "video.p95_target_s",
        "adapters.max_loras",
        "adapters.max_lora_rank",
        "adapters.max_cpu_loras",
    }
)
#: Fields a widget shows in another unit: widget = field x num / den (a checkpoint interval in
#: minutes, a relative spread in whole percent); the field is the widget's value x den / num.
_SCALE = {
    "train_tokens": (1, 10**9),  # entered in billions: 15,000 for Llama 3's 15T
    "training.checkpoint_interval_s": (1, 60),
    "experiment.prompt_spread_frac": (100, 1),
    "experiment.output_spread_frac": (100, 1),
    "experiment.rate_spread_frac": (100, 1),
    "predicted.prefix_cache_frac": (100, 1),
}
#: Optional text fields whose widget shows "" for "none" (a pool's GPU kind: the sidebar's).
_EMPTY_IS_NONE = frozenset({"disagg.prefill_gpu", "disagg.decode_gpu"})
#: Tuple fields edited as a comma-separated text.
_CSV = frozenset({"targets.providers", "adapters.ranks"})
#: The comma-separated inputs whose items are whole numbers: a typed ``16, 64`` is read as the numbers (an item that
#: is not one stays text, which the field's domain refuses with its message next to the input).
_CSV_NUMBERS = frozenset({"adapters.ranks"})


def _rank_or_text(item: str) -> int | str:
    try:
        return int(number_from_text(item, integer=True))
    except ValueError:
        return item


_SKIP = ("custom_model", "assumptions", "fleet", *GROUPS)


def _group_paths() -> list[str]:
    return [f"{g}.{f}" for g, model in GROUPS.items() for f in model.model_fields]


def _to_widget(path: str, v: Any) -> Any:
    if path in _SCALE and v is not None:
        num, den = _SCALE[path]
        v = round(v * num / den, 9)
    if path in _ZERO_IS_NONE:
        return 0 if v is None else v
    if path in _EMPTY_IS_NONE:
        return "" if v is None else v
    if path in _CSV:
        return ", ".join(str(x) for x in v)
    if isinstance(v, tuple):
        return list(v)
    return v


def _from_widget(path: str, v: Any) -> Any:
    if path in _SCALE and isinstance(v, (int, float)) and not isinstance(v, bool):
        num, den = _SCALE[path]
        v = v * den / num if v else v
    if path in _ZERO_IS_NONE or path in _EMPTY_IS_NONE:
        return v or None
    if path in _CSV:
        items = tuple(x.strip() for x in str(v).split(",") if x.strip())
        return tuple(_rank_or_text(x) for x in items) if path in _CSV_NUMBERS else items
    if isinstance(v, list):
        return tuple(v)
    return v


_KEPT = kept.KEY
_kept = kept.copy
_edited = kept.edited
_commit = kept.commit
view = kept.view


def _is_kept(k: object) -> bool:
    return isinstance(k, str) and (k.startswith(_P) or k in VIEW_PARAMS)


def put(k: str, value: Any) -> None:
    """Set a config input or view choice from the program (a callback, a loaded file, a link): the session key and
    the kept copy both, or :func:`_keep` would take the value back on the next run."""
    st.session_state[k] = value
    if _is_kept(k):
        _kept()[k] = value


def edits(path: str, form: list[str] | None = None) -> dict[str, Any]:
    """The widget arguments of the input that edits a config field (``"workload.rate_per_s"``): its key, with no
    ``value=`` of its own, and the callback that keeps the user's edit (:func:`_keep`). Inside a ``st.form`` a widget
    may have no callback: pass the form's list, which collects the keys for its submit button (:func:`commits`)."""
    k = _key(path)
    if form is not None:
        form.append(k)
        return {"key": k}
    return {"key": k, "on_change": _edited, "args": (k,)}


def commits(form: list[str]) -> dict[str, Any]:
    """The submit button arguments of a ``st.form`` whose inputs :func:`edits` collected in ``form``."""
    return {"on_click": _commit, "args": (tuple(form),)}


def _keep() -> None:
    """Put every ``cfg.`` input and view choice back to its kept value before any widget is drawn, so that widgets not
    drawn on this page keep their values (a page shows the tab and bound it showed when it is opened again).

    A page switch that interrupts a script run (a loaded server, an input changed just before the click) makes
    Streamlit clear the state of every widget the browser no longer shows (``ScriptRunner``: "Clear widget state on
    page change ... even if a script run was interrupted"; streamlit/streamlit PR 8425, issue 9100): a key can go,
    or stay with its widget's default in place of the user's value. Neither is a change of the kept copy, which only
    a widget's callback (the user's edit) or :func:`put` (the program) writes, so both are undone here. A key not
    kept yet (a widget's first run, a value set before the first run) is taken as it is. Streamlit's own
    ``persist_state="session"`` (1.67) is not used: it carries forward the value a widget holds when it stops being
    drawn, the default too when the clean-up has put it there."""
    ss = st.session_state
    now = ss.to_dict()
    kept = dict(now.get(_KEPT) or {})
    for k, v in now.items():
        if _is_kept(k) and k not in kept:
            kept[k] = v
    for k, v in kept.items():  # every one, as before: a value written back under its key outlives its widget
        ss[k] = v
    ss[_KEPT] = kept


def bounds(path: str, step: float | None = None) -> dict[str, Any]:
    """``min_value`` / ``max_value`` / ``step`` of the widget that edits a config field (``"tp"``) or a group's
    field (``"workload.rate_per_s"``): the field's one domain (core.base.limits), in the unit the widget shows
    (a spread in percent, an interval in minutes) and from 0 where the widget shows 0 for "none"."""
    d = group_domain(path)
    num, den = _SCALE.get(path, (1, 1))
    lo, hi, st_ = d.lo * num / den, d.hi * num / den, (step or d.step)
    if path in _ZERO_IS_NONE:
        lo = 0
    if d.integer and num == den:
        return {"min_value": int(lo), "max_value": int(hi), "step": int(st_ or 1)}
    out: dict[str, Any] = {"min_value": float(lo), "max_value": round(float(hi), 9)}
    if st_:
        out["step"] = round(float(st_) * num / den, 9) if step is None else float(step)
    return out


def session_bounds(name: str) -> dict[str, Any]:
    """``min_value`` / ``max_value`` of the widget that edits an integer field of the Sessions group (which has no
    entry in the domains): the field's own ``ge`` / ``le`` bounds, so the widget and the config that validates it
    cannot disagree."""
    from core.config import Sessions

    lo = hi = None
    for m in Sessions.model_fields[name].metadata:
        lo = getattr(m, "ge", lo)
        hi = getattr(m, "le", hi)
    if lo is None or hi is None:
        raise ValueError(f"Sessions.{name} has no ge / le bounds for a widget")
    return {"min_value": int(lo), "max_value": int(hi)}


def query_bounds(name: str) -> dict[str, Any]:
    """``min_value`` / ``max_value`` of an input of the Diagnostics page's Prometheus query (core.base.limits)."""
    d = QUERY_DOMAINS[name]
    return {"min_value": int(d.lo), "max_value": int(d.hi)}


def _load_into_state(cfg: RabitConfig) -> None:
    """Put every field of ``cfg`` into the widget keys (before the widgets are drawn)."""
    values: dict[str, Any] = {}
    for name in RabitConfig.model_fields:
        if name in _SKIP:
            continue
        values[_key(name)] = _to_widget(name, getattr(cfg, name)) if name in _SCALE else getattr(cfg, name)
    for path in _group_paths():
        g, f = path.split(".")
        values[_key(path)] = _to_widget(path, getattr(getattr(cfg, g), f))
    values[FLEET_KEY] = cfg.fleet
    if cfg.custom_model is not None:
        values[_key("model")] = _CUSTOM
    for name in REGISTRY:
        values[_key("a." + name)] = getattr(cfg.assumptions, name)
    st.session_state["custom_model"] = cfg.custom_model
    ss, kept = st.session_state, _kept()
    for k, v in values.items():  # as put(), with one look-up of the kept copy
        ss[k] = v
        kept[k] = v


#: Each page's view choices (which tab, view or bound it shows), by session key: (default, allowed values). A link
#: carries those that differ from the default, so it opens the view the sender sees; they change what a page
#: shows, not the analysis, so the config file does not carry them.
_BOUND_VIEW = ("base", ("pessimistic", "base", "optimistic"))
VIEW_PARAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    **{f"{p}.bound": _BOUND_VIEW for p in ("memory", "speed", "serving", "training", "optimizer", "math", "video")},
    "memory.tab": ("Serving", ("Serving", "Training")),
    "math.view": ("Inference", ("Inference", "Training")),
    "opt.view": ("Serving", ("Serving", "Training run")),
    "video.tab": (
        "Parallel speed-up",
        ("Parallel speed-up", "Queue and cost", "Cheapest fleet", "Memory", "Sensitivity"),
    ),
}


#: The Compare page's selections (each side's source, saved analysis, revision and pasted link; training or not),
#: carried by its link so that the link reopens the same comparison. Their values are free (an analysis id, a
#: link): the Compare page checks them against what it offers and says which it could not use.
COMPARE_PARAMS = (*(f"cmp.{s}.{f}" for s in "AB" for f in ("src", "id", "rev", "link")), "cmp.train")
#: The longest value of a Compare parameter a link may carry (a pasted link inside it included).
COMPARE_PARAM_MAX_CHARS = 8000


def _view_query() -> dict[str, str]:
    """The view choices of this session that differ from their defaults, for the URL."""
    ss = st.session_state
    return {k: str(ss[k]) for k, (d, ok) in VIEW_PARAMS.items() if k in ss and ss[k] != d and ss[k] in ok}


def _dropped_query_message(value: str) -> str:
    """What a visitor reads when Streamlit dropped the whole link (:func:`guard_query_limits`)."""
    from streamlit.runtime.state import query_params

    n, _, chars = value.partition(":")
    max_fields = getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 1000)
    max_chars = getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 512 * 1024)
    got = f"{int(n):,} parameters and {int(chars):,} characters" if n.isdigit() and chars.isdigit() else "too long"
    return (
        f"the link was not used at all: it has {got}, and a link may carry at most {max_fields:,} parameters "
        f"and {max_chars:,} characters"
    )


def _init() -> None:
    if st.session_state.get("_rabit_init"):
        return
    st.session_state["_rabit_init"] = True
    cfg = DEFAULT
    params = {k: st.query_params.get_all(k) for k in st.query_params.keys()}
    if DROPPED_QUERY in params:
        dropped = params.pop(DROPPED_QUERY)
        st.session_state["_link_dropped"] = True
        st.session_state.setdefault("_link_error", []).append(_dropped_query_message(dropped[-1] if dropped else ""))
    saved = analyses.open_from_link(params.pop("analysis")[-1]) if params.get("analysis") else None
    for k in [k for k in params if k in COMPARE_PARAMS]:  # the Compare page applies them (pages/compare.py)
        st.session_state.setdefault("_cmp_link", {})[k] = (params.pop(k)[-1] or "")[:COMPARE_PARAM_MAX_CHARS]
    for k in [k for k in params if k in VIEW_PARAMS]:
        v = params.pop(k)[-1] if params[k] else ""
        if v in VIEW_PARAMS[k][1]:
            put(k, v)
        else:
            st.session_state.setdefault("_link_error", []).append(
                f"link parameter {k}={plain(v, 40)} was not used: one of {', '.join(VIEW_PARAMS[k][1])}"
            )
    if params:
        cfg, issues = from_query_report(params)
        if issues:  # say which parameter was not used and why; the rest of the link applies
            st.session_state.setdefault("_link_error", []).extend(i.message() for i in issues)
    if saved is not None:  # ?analysis=<id>: the saved config, with any field the link also names on top
        cfg = saved.with_(**{k: getattr(cfg, k) for k in cfg.model_fields_set})
    if st.session_state.get("_link_error"):
        st.session_state["_link_cfg"] = cfg  # the messages stand while the view is this one
    _load_into_state(cfg)


def _on_config_upload() -> None:
    f = st.session_state.get("cfg_file")
    if f is None:
        return
    try:
        cfg = from_json(decode_text(f.getvalue(), "the config file"))
    except ValueError as exc:
        st.session_state["_upload_error"] = f"That file is not a RA-BIT config: {exc}"
        return
    st.session_state.pop("_upload_error", None)
    _load_into_state(cfg)


def _on_model_upload() -> None:
    f = st.session_state.get("model_file")
    if f is None:
        return
    try:
        arch = from_hf_config(parse_json(f.getvalue(), "config.json"), slug=f.name.rsplit(".", 1)[0].lower())
    except (ValueError, ValidationError) as exc:
        msg = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        st.session_state["_model_error"] = f"That config.json cannot be used: {msg}"
        return
    st.session_state.pop("_model_error", None)
    st.session_state["custom_model"] = arch
    put(_key("model"), _CUSTOM)


def _values() -> dict[str, Any]:
    # one snapshot of the session state: each `in` / `[]` on st.session_state rebuilds its filtered view
    # (about a millisecond with this sidebar's ~90 keys), and this reads ~70 of them on every rerun
    ss = st.session_state.to_dict()
    data: dict[str, Any] = {}
    for name in RabitConfig.model_fields:
        if name in _SKIP:
            continue
        if _key(name) in ss:
            data[name] = _from_widget(name, ss[_key(name)]) if name in _SCALE else ss[_key(name)]
    for path in _group_paths():
        if _key(path) in ss:
            g, f = path.split(".")
            data.setdefault(g, {})[f] = _from_widget(path, ss[_key(path)])
    if data.get("model") == _CUSTOM:
        data["model"] = DEFAULT.model
        data["custom_model"] = ss.get("custom_model")
    data["assumptions"] = {n: ss.get(_key("a." + n), i.base) for n, i in REGISTRY.items()}
    data["fleet"] = ss.get(FLEET_KEY)
    return data


#: Sidebar inputs a page does not read, and why: drawn greyed out there (a change would do nothing but rerun).
_OPTIMIZER_SEARCHES = "the optimizer searches GPU kinds, counts, layouts and formats itself"
_TRAINING_SECTION = "training reads the Training section below"
#: The sidebar's serving request: what a page that sizes something else does not read.
_SERVING_REQUEST = (
    "batch",
    "input_tokens",
    "output_tokens",
    "prefix_cache_frac",
    "weights",
    "kv_dtype",
    "kv_alloc",
    "block_size",
)
UNUSED_ON_PAGE: dict[str, dict[str, str]] = {
    "serving": {"batch": "the simulated scheduler forms its own batches (Max batch on this page)"},
    "optimizer": {
        f: _OPTIMIZER_SEARCHES
        for f in (
            "gpu",
            "gpus_per_node",
            "nodes",
            "tp",
            "pp",
            "ep",
            "batch",
            "weights",
            "kv_dtype",
        )
    },
    "video": {
        f: "the Video generation page sizes its own request (model, size, GPUs per request) on the page"
        for f in ("model", "gpus_per_node", "nodes", "tp", "pp", "ep", *_SERVING_REQUEST)
    },
    "training": {
        **{f: _TRAINING_SECTION for f in _SERVING_REQUEST},
        **{f: "serving only" for f in ("dp_attention", "dcp", "kv_offload_gib")},
    },
    "fleet": {
        f: "the Fleet page's workloads name their own models, lengths and GPU kinds, and the plan searches layouts"
        for f in ("model", "gpu", "gpus_per_node", "nodes", "tp", "pp", "ep", "batch", "input_tokens", "output_tokens")
        + ("weights", "kv_dtype")
    },
}
#: The phase is the page's: its fit checks (serving context, batch-1 fit; training sequence length) follow it.
PAGE_PHASE = {"training": "train"}


def _off(page: str, field: str) -> dict[str, Any]:
    """Widget arguments that grey an input out on a page that does not use it, saying why."""
    why = UNUSED_ON_PAGE.get(page, {}).get(field)
    return {"disabled": True, "help": f"Not used on this page: {why}."} if why else {}


def sidebar(page: str = "") -> RabitConfig | None:
    """Draw the shared sidebar for ``page`` (its url path); return the valid config, or None when an input
    needs fixing. Inputs the page does not read are greyed out with the reason (:data:`UNUSED_ON_PAGE`)."""
    _init()
    _keep()
    sb = st.sidebar
    slots: dict[str, Any] = {}
    if UNUSED_ON_PAGE.get(page):
        sb.caption(
            "Greyed-out inputs are not used on this page: "
            + "; ".join(dict.fromkeys(UNUSED_ON_PAGE[page].values()))
            + "."
        )
    link_slot = sb.container()  # filled once the config is built: the message stays while the view is the link's

    models = _model_inputs(sb, page, slots)
    _hardware_inputs(sb, page, slots)
    _request_inputs(sb, page, slots)
    with sb.expander("Speculative decoding"):
        _speculative_inputs(models)
    with sb.expander("Adapters (multi-LoRA serving)"):
        _adapter_inputs(slots)
    with sb.expander("Training"):
        _training_inputs(slots)
    _assumption_inputs(sb)
    cfg = _validated(_values(), slots, sb)
    if cfg is None:
        return None
    _link_notice(cfg, link_slot)
    page_cfg = cfg.with_(phase=PAGE_PHASE.get(page, "serve"))
    probs = problems(page_cfg) or fit_problems(page_cfg)
    for p in probs:
        (slots.get(p.field) or sb).error(plain(p.message, 1000))
    _config_file_controls(cfg)
    st.query_params.from_dict({**to_query(cfg), **analyses.query_extra(), **_view_query()})
    return None if any(p.blocking for p in probs) else cfg


def _model_inputs(sb, page: str, slots: dict[str, Any]) -> list[str]:
    """The model (a catalog slug, or the uploaded config.json) and the uploader; returns the catalog's slugs."""
    models = sorted(catalog.models())
    opts = models + ([_CUSTOM] if st.session_state.get("custom_model") is not None else [])
    custom = st.session_state.get("custom_model")
    sb.selectbox(
        "Model",
        opts,
        **edits("model"),
        format_func=lambda s: f"{custom.name} (uploaded)" if s == _CUSTOM and custom else s,
        **_off(page, "model"),
    )
    slots["model"] = sb.container()
    with sb.expander("Add a model from config.json"):
        st.file_uploader("Hugging Face config.json", type=["json"], key="model_file", on_change=_on_model_upload)
        if "_model_error" in st.session_state:
            st.error(plain(st.session_state["_model_error"], 1000))
    return models


def _hardware_inputs(sb, page: str, slots: dict[str, Any]) -> None:
    """The GPUs and how they are split: kind, nodes, fabric, TP / PP / EP, attention parallelism and the host KV
    tier."""
    gpus = sorted(catalog.gpus())
    sb.selectbox("GPU", gpus, **edits("gpu"), format_func=lambda s: catalog.gpus()[s].name, **_off(page, "gpu"))
    slots["gpu"] = sb.container()
    c1, c2 = sb.columns(2)
    c1.number_input("GPUs per node", **bounds("gpus_per_node"), **edits("gpus_per_node"), **_off(page, "gpus_per_node"))
    c2.number_input("Nodes", **bounds("nodes"), **edits("nodes"), **_off(page, "nodes"))
    slots["gpus_per_node"] = sb.container()
    slots["nodes"] = sb.container()
    sb.selectbox(
        "Inter-node fabric",
        sorted(catalog.fabrics()),
        **edits("fabric"),
        format_func=lambda s: catalog.fabrics()[s].name,
    )
    c1, c2, c3 = sb.columns(3)
    c1.number_input("TP", **bounds("tp"), **edits("tp"), **_off(page, "tp"))
    c2.number_input("PP", **bounds("pp"), **edits("pp"), **_off(page, "pp"))
    c3.number_input("EP", **bounds("ep"), **edits("ep"), **_off(page, "ep"))
    for f in ("tp", "pp", "ep"):
        slots[f] = sb.container()
    with sb.expander("Attention parallelism and KV tier"):
        st.checkbox(
            "Data-parallel attention (MLA / MoE)",
            **edits("dp_attention"),
            **{
                "help": "each TP rank holds its own sequences' KV and whole attention weights "
                "(SGLang --enable-dp-attention)",
                **_off(page, "dp_attention"),
            },
        )
        slots["dp_attention"] = st.container()
        c1, c2 = st.columns(2)
        c1.number_input(
            "CP", **bounds("cp"), **edits("cp"), help="context parallelism: TP groups a sequence is split over"
        )
        c2.number_input(
            "DCP",
            **bounds("dcp"),
            **edits("dcp"),
            **{"help": "decode context parallelism: TP ranks the KV cache is split over", **_off(page, "dcp")},
        )
        slots["cp"] = st.container()
        slots["dcp"] = st.container()
        st.number_input(
            "KV tier in host memory [GiB per replica]",
            **bounds("kv_offload_gib"),
            **edits("kv_offload_gib"),
            **{
                "help": "blocks beyond HBM live in host memory and are read back over the host link (vLLM "
                "--kv-offloading-size)",
                **_off(page, "kv_offload_gib"),
            },
        )


def _request_inputs(sb, page: str, slots: dict[str, Any]) -> None:
    """The batch, the request's lengths and cached prefix, and the precisions and KV cache layout."""
    sb.number_input("Batch (concurrent sequences)", **bounds("batch"), **edits("batch"), **_off(page, "batch"))
    slots["batch"] = sb.container()
    c1, c2 = sb.columns(2)
    c1.number_input(
        "Input tokens", **bounds("input_tokens", 256), **edits("input_tokens"), **_off(page, "input_tokens")
    )
    c2.number_input(
        "Output tokens", **bounds("output_tokens", 256), **edits("output_tokens"), **_off(page, "output_tokens")
    )
    slots["input_tokens"] = sb.container()
    sb.slider(
        "Cached prefix share of the prompt",
        **bounds("prefix_cache_frac"),
        **edits("prefix_cache_frac"),
        **_off(page, "prefix_cache_frac"),
    )
    c1, c2 = sb.columns(2)
    c1.selectbox("Weights", choices.WEIGHT_FORMATS, **edits("weights"), **_off(page, "weights"))
    c2.selectbox("KV cache", choices.KV_DTYPES, **edits("kv_dtype"), **_off(page, "kv_dtype"))
    c1, c2 = sb.columns(2)
    c1.selectbox("KV allocation", choices.KV_ALLOCS, **edits("kv_alloc"), **_off(page, "kv_alloc"))
    c2.selectbox("Block size", choices.BLOCK_SIZES, **edits("block_size"), **_off(page, "block_size"))


def _speculative_inputs(models: list[str]) -> None:
    """Speculative decoding: the method, the draft model, the draft tokens and their acceptance (in its expander)."""
    st.selectbox("Method", choices.SPEC_METHODS, **edits("spec_method"))
    st.selectbox("Draft model", models, **edits("draft_model"))
    st.number_input("Draft tokens k", **bounds("spec_k"), **edits("spec_k"))
    st.slider("Acceptance rate α", **bounds("spec_alpha"), **edits("spec_alpha"))


def _adapter_inputs(slots: dict[str, Any]) -> None:
    """Multi-LoRA serving: the adapters, their ranks, targets, traffic skew and the engine's slots (in its
    expander)."""
    st.number_input(
        "Adapters over the base (0 = the base alone)", **bounds("adapters.count"), **edits("adapters.count")
    )
    st.text_input(
        "Rank (or ranks, comma-separated, spread over the adapters in turn)",
        **edits("adapters.ranks"),
        help="A LoRA of rank r adds r x (d_in + d_out) weights to each layer it targets.",
    )
    slots["adapters.ranks"] = st.container()
    c1, c2 = st.columns(2)
    c1.selectbox(
        "Targets",
        choices.LORA_TARGETS,
        **edits("adapters.targets"),
        format_func=lambda t: choices.LORA_TARGET_LABELS[t],
    )
    c2.selectbox("Adapter dtype", choices.ADAPTER_DTYPES, **edits("adapters.dtype"))
    st.number_input("Traffic skew (Zipf exponent; 0 = uniform)", **bounds("adapters.skew"), **edits("adapters.skew"))
    st.number_input(
        "max_loras: GPU slots, distinct adapters per batch (0 = the engine's default)",
        **bounds("adapters.max_loras"),
        **edits("adapters.max_loras"),
    )
    c1, c2 = st.columns(2)
    c1.number_input(
        "max_lora_rank (0 = default)", **bounds("adapters.max_lora_rank"), **edits("adapters.max_lora_rank")
    )
    c2.number_input(
        "max_cpu_loras (0 = default)", **bounds("adapters.max_cpu_loras"), **edits("adapters.max_cpu_loras")
    )
    slots["adapters.max_lora_rank"] = st.container()
    slots["adapters.max_cpu_loras"] = st.container()
    st.checkbox(
        "Fully sharded over TP (vLLM --fully-sharded-loras)",
        **edits("adapters.fully_sharded"),
        help="Off (vLLM's default): TP splits half of each adapter, so every GPU holds most of it.",
    )


def _training_inputs(slots: dict[str, Any]) -> None:
    """Training: precision, ZeRO, micro-batch, sequence length, recomputation, kernel, LoRA and the run's tokens
    and batch (in its expander)."""
    st.selectbox("Precision", choices.TRAIN_PRECISIONS, **edits("train_precision"))
    st.selectbox("ZeRO stage", choices.ZERO_STAGES, **edits("zero"))
    st.number_input("Micro-batch", **bounds("micro_batch"), **edits("micro_batch"))
    st.number_input("Sequence length", **bounds("seq_len", 1024), **edits("seq_len"))
    slots["seq_len"] = st.container()
    st.selectbox("Recomputation", choices.RECOMPUTE_MODES, **edits("recompute"))
    st.selectbox(
        "Attention kernel",
        choices.ATTENTION_KERNELS,
        **edits("attention_kernel"),
        format_func=lambda k: choices.ATTENTION_KERNEL_LABELS[k],
    )
    st.checkbox("Sequence parallelism", **edits("sequence_parallel"))
    st.number_input("LoRA rank (0 = full fine-tune)", **bounds("lora_rank", 8), **edits("lora_rank"))
    st.checkbox("QLoRA (4-bit base)", **edits("qlora"))
    slots["qlora"] = st.container()
    st.number_input("Training tokens [billions]", **bounds("train_tokens"), format="%g", **edits("train_tokens"))
    st.number_input("Global batch (tokens)", **bounds("global_batch_tokens", 2**20), **edits("global_batch_tokens"))


def _assumption_inputs(sb) -> None:
    """The efficiency assumptions, drawn only while their toggle is on, and the button that resets them."""
    # drawn only when opened: its inputs are a third of the sidebar's widgets, sent on every rerun otherwise;
    # their values stay in the session (and the link) while it is closed
    if not sb.toggle("Assumptions (efficiencies)", key="show_assumptions"):
        return
    for name, info in REGISTRY.items():
        lo, hi = sorted((info.low, info.high))
        sb.number_input(
            f"{info.label} [{info.unit}]",
            min_value=float(info.min_value),
            max_value=float(info.max_value),
            **edits("a." + name),
            format="%.6g",
            help=f"base {sig(info.base, 6)}, range {sig(lo, 6)}–{sig(hi, 6)}; allowed {sig(info.min_value, 6)}–"
            f"{sig(info.max_value, 6)} ({info.domain_reason}). Source: {info.source}",
        )
    if sb.button("Reset assumptions to base"):
        for name, info in REGISTRY.items():
            put(_key("a." + name), info.base)
        st.rerun()


def _validated(data: dict[str, Any], slots: dict[str, Any], sb) -> RabitConfig | None:
    """The config the inputs make, or None after saying the first error next to its input. A page group's bad
    input (the adapters') is dropped for its default and said under it (kept in ``_group_errors``)."""
    cfg: RabitConfig | None = None
    group_errors: dict[str, str] = {}
    while cfg is None:
        try:
            cfg = RabitConfig.model_validate(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            field = str(e["loc"][0]) if e["loc"] else "model"
            if field in GROUPS and len(e["loc"]) > 1 and str(e["loc"][1]) in data.get(field, {}):
                # a page's input: said next to it on that page (field_error); the default stands in meanwhile
                group_errors[f"{field}.{e['loc'][1]}"] = e["msg"].removeprefix("Value error, ")
                del data[field][str(e["loc"][1])]
                continue
            (slots.get(field) or sb).error(plain(describe_validation_error(exc), 1000))
            return None
    st.session_state["_group_errors"] = group_errors
    for path, msg in group_errors.items():  # a sidebar group's input (the adapters'): said under it
        if path in slots:
            slots[path].error(plain(msg, 300))
    return cfg


def _link_notice(cfg: RabitConfig, link_slot) -> None:
    """While the view is still the shared link's, what of the link could not be kept; once the visitor changes the
    view, the notice goes."""
    link = st.session_state.get("_link_error")
    if not link:
        return
    if st.session_state.get("_link_cfg") == cfg:
        link_slot.error(
            "This view is not exactly the link's: "
            + "; ".join(plain(m, 300) for m in link)
            + (
                ". Every setting shows its default."
                if st.session_state.get("_link_dropped")
                else ". Those settings show their defaults; everything else is as sent."
            )
        )
    else:  # the visitor has changed the view since: the message no longer describes it
        st.session_state.pop("_link_error")
        st.session_state.pop("_link_cfg", None)


def _config_file_controls(cfg: RabitConfig) -> None:
    with st.sidebar.expander("Save or load this configuration"):
        st.download_button(
            "Download config (JSON)", cfg.model_dump_json(indent=2), "rabit-config.json", "application/json"
        )
        st.file_uploader("Load a config file", type=["json"], key="cfg_file", on_change=_on_config_upload)
        if "_upload_error" in st.session_state:
            st.error(plain(st.session_state["_upload_error"], 1000))
        st.caption("The page URL carries this configuration too: paste it to share the view.")


def set_assumption(name: str, value: float) -> None:
    """Set one efficiency assumption in the sidebar (a button's ``on_click``: runs before the widgets are drawn)."""
    put(_key("a." + name), float(value))


def set_assumptions(values: dict[str, float]) -> None:
    """Set several efficiency assumptions in the sidebar (a button's ``on_click``)."""
    for name, value in values.items():
        set_assumption(name, value)


def video_model_defaults() -> None:
    """Button callback: the Video generation page's request at its model's own size, length, steps and guidance
    (the catalog's defaults; runs before the widgets are drawn)."""
    m = catalog.diffusion_model(st.session_state.get(_key("video.model"), DEFAULT.video.model))
    for field, value in (
        ("height", m.default_height),
        ("width", m.default_width),
        ("frames", m.default_frames),
        ("seconds", 0),
        ("steps", m.default_steps),
        ("guidance", "model"),
        ("cfg_parallel", False),
    ):
        put(_key(f"video.{field}"), value)


def set_fleet(fleet: Any) -> None:
    """The Fleet page's edited fleet into the shared config (from the next rerun on: the link and the config file
    carry it)."""
    put(FLEET_KEY, fleet)


def set_sessions(sessions: Any) -> None:
    """The Sessions view's workload into the shared config (from the next rerun on: the link and the config file
    carry it; None: no session workload)."""
    put(_key("sessions"), sessions)


def field_error(path: str) -> None:
    """Show the problem with a page's config input (``"workload.max_batch"``), if any, where this is called."""
    msg = st.session_state.get("_group_errors", {}).get(path)
    if msg:
        st.error(msg)


def config() -> RabitConfig | None:
    """The config the sidebar built on this rerun (None when an input needs fixing)."""
    return st.session_state.get("_config")


def require_config() -> RabitConfig:
    """For pages: the valid config, or a message and stop."""
    cfg = config()
    if cfg is None:
        st.warning("Fix the highlighted input in the sidebar to see results.")
        st.stop()
    return cfg


def open_analysis(analysis_id: str) -> None:
    """Button callback: load a saved analysis into this session's sidebar (runs before the widgets are drawn)."""
    cfg = analyses.open_from_link(analysis_id)
    if cfg is not None:
        _load_into_state(cfg)
