"""Drawing helpers shared by the pages: metrics and math straight from ``core`` derivation steps."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd
import streamlit as st

from core.base import (
    Step,
    find,
    fmt_time,
    fmt_value,  # noqa: F401  - pages format range ends like their steps
)
from core.decision import Bound

#: Width of the main column at 1280 x 720 with the sidebar open [px], and what a metric needs per character:
#: Streamlit cuts a metric's label and value with an ellipsis rather than wrapping them.
MAIN_WIDTH_PX = 820
_GAP_PX, _HELP_PX, _LABEL_PX_PER_CHAR, _VALUE_PX_PER_CHAR = 16, 26, 7.4, 20.0


def per_row(labels: Iterable[str], values: Iterable[str] = (), width_px: float = MAIN_WIDTH_PX) -> int:
    """How many metrics fit side by side without cutting the longest label or value."""
    labels, values = list(labels), list(values)
    need = max(
        [len(t) * _LABEL_PX_PER_CHAR + _HELP_PX for t in labels] + [len(v) * _VALUE_PX_PER_CHAR for v in values] + [1.0]
    )
    n = max(1, len(labels), len(values))
    while n > 1 and (width_px - _GAP_PX * (n - 1)) / n < need:
        n -= 1
    return n


def grid(count: int, labels: Iterable[str] = (), values: Iterable[str] = ()) -> list:
    """``count`` column slots, as many per row as fit the given labels and values, in reading order."""
    n = min(count, per_row(labels, values)) if labels or values else count
    n = -(-count // -(-count // n))  # the same number of rows, filled evenly (6 at 4 a row: 3 + 3)
    slots: list = []
    while len(slots) < count:
        slots += st.columns(n)
    return slots[:count]


def finite(s: Step) -> bool:
    """True for a step whose value is a finite number. A NaN (speculation that never wins) or an infinity is never
    drawn as a number: a card leaves it out and the page says in words what it means."""
    try:
        return math.isfinite(float(s.value))
    except (TypeError, ValueError):
        return True  # not a scalar (an array's steps are drawn by their own charts)


def metrics(steps: tuple[Step, ...], keys: Iterable[str], cols: int | None = None) -> None:
    """One ``st.metric`` per step key, showing exactly the step's formatted value, in rows that fit.

    A key the computation did not record (no failures: no checkpoint interval) is left out, not an error.
    """
    recorded = {s.key for s in steps}
    found = [s for s in (find(steps, k) for k in keys if k in recorded) if finite(s)]
    if not found:
        return
    columns = grid(len(found), [s.label for s in found], [s.shown() for s in found])
    for col, s in zip(columns, found):
        col.metric(s.label, s.shown(), help=s.note or None)


def steps_table(steps: tuple[Step, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "step": s.label,
                "formula": f"{s.symbol} = {s.expr}",
                "value": s.shown() if finite(s) else "no finite value",
                "note": s.note,
            }
            for s in steps
        ]
    )


def show_math(steps: tuple[Step, ...], *, expanded: bool = False, title: str = "Show the math") -> None:
    """Each step as the symbolic formula, then with the numbers, then the result.

    Drawn only once asked for: a collapsed expander still sends every formula to every browser on every run
    (a page's math is about a hundred elements), which a room of first loads pays for many times over.
    """
    key = f"show_math.{title}.{steps[0].key if steps else ''}.{steps[-1].key if steps else ''}"
    if st.toggle(title, value=expanded, key=key):
        with st.container(border=True):
            for s in steps:
                math_step(s)


def math_step(s: Step) -> None:
    if not finite(s):  # the formula, and that it has no finite value here (never "nan" or "inf")
        st.markdown(f"**{s.label}** — no finite value for these inputs")
        st.latex(s.latex_symbolic())
        if s.note:
            st.caption(s.note)
        return
    st.markdown(f"**{s.label}** — {s.shown()}")
    st.latex(s.latex_symbolic())
    st.latex(s.latex_substituted())
    if s.note:
        st.caption(s.note)


# --- speed and show-the-math helpers (issue 3) ---------------------------------------------------------


def math_section(title: str, steps: tuple[Step, ...]) -> None:
    """A titled run of derivation steps, each as symbols, numbers, result (``st.latex``)."""
    st.subheader(title)
    for s in steps:
        math_step(s)


def steps_by_key(steps: tuple[Step, ...], keys: tuple[str, ...]) -> tuple[Step, ...]:
    return tuple(find(steps, k) for k in keys)


def gap_table(rows) -> pd.DataFrame:
    """The textbook-vs-ours waterfall (core.serving.speed_views.GapRow) as a table of formatted times."""
    from core.base import fmt_time

    return pd.DataFrame(
        [
            {
                "change (cumulative)": r.label,
                "time": fmt_time(r.value_s),
                "change": ("+" if r.delta_s > 0 else "") + fmt_time(r.delta_s) if r.delta_s else "—",
                "why": r.note,
            }
            for r in rows
        ]
    )


def assumption_sources(cfg, names: tuple[str, ...]) -> pd.DataFrame:
    """The efficiency assumptions behind a result: value in force, base, range and the published source."""
    from core.base import REGISTRY

    rows = []
    for n in names:
        info = REGISTRY[n]
        lo, hi = sorted((info.low, info.high))
        rows.append(
            {
                "assumption": info.label,
                "value": f"{getattr(cfg.assumptions, n):g} {info.unit}",
                "base": f"{info.base:g}",
                "range": f"{lo:g}–{hi:g}",
                "source": info.source,
            }
        )
    return pd.DataFrame(rows)


def collective_table(view) -> pd.DataFrame:
    from core.base import fmt_bytes, fmt_time

    return pd.DataFrame(
        [
            {"collective": r.what, "message": fmt_bytes(r.bytes, "auto"), "time": fmt_time(r.time_s), "how": r.how}
            for r in view.rows
        ]
    )


def launch_downloads(pick, goal, key: str = "launch") -> None:
    """Download buttons for the launch configs of an optimizer pick (engine commands and a Deployment; both pools'
    when the pick is disaggregated)."""
    from core.operations import EMIT_CHOICES, FILE_NAMES, emit_pick

    labels = {
        "vllm": "vLLM command",
        "sglang": "SGLang command",
        "trtllm": "TensorRT-LLM command",
        "k8s": "Kubernetes Deployment",
    }
    cols = st.columns(len(EMIT_CHOICES))
    for col, kind in zip(cols, EMIT_CHOICES):
        try:
            text = emit_pick(kind, pick, goal)
        except ValueError as exc:  # e.g. TensorRT-LLM on an AMD GPU, or a disaggregated pick
            col.caption(f"{labels[kind]}: {exc}")
            continue
        col.download_button(
            labels[kind],
            text,
            file_name=FILE_NAMES[kind],
            key=f"{key}.{kind}",
            mime="text/yaml" if kind == "k8s" else "text/x-shellscript",
        )
    with st.expander("Launch config (vLLM)"):
        st.code(emit_pick("vllm", pick, goal), language="bash")


# --- ranges (issue 9) ---------------------------------------------------------------------------------

#: The page's bound choice: what the segmented control shows -> the bound of core.decision.range_rule.at_bound.
BOUND_CHOICES: dict[str, Bound] = {"pessimistic": "low", "base": "base", "optimistic": "high"}


def bound_choice(page: str, cfg):
    """One click shows the whole page at the pessimistic, base or optimistic bound; returns the config there."""
    from core.decision import at_bound

    choice = st.segmented_control(
        "Assumptions at",
        list(BOUND_CHOICES),
        # a link may have set the choice (dashboard.state.VIEW_PARAMS): no default then, or Streamlit warns
        default=None if f"{page}.bound" in st.session_state else "base",
        key=f"{page}.bound",
        help="pessimistic / optimistic: every efficiency assumption at its low / high bound (rabit --bound).",
    )
    bound = BOUND_CHOICES.get(choice or "base", "base")
    if bound != "base":
        st.info(f"Every assumption is at its **{choice}** bound: every number on this page is computed there.")
    return at_bound(cfg, bound)


def tornado_picker(ranges: dict, labels: dict[str, str], page: str, default: str) -> None:
    """A tornado chart for the page's headline number, with a choice of which number."""
    keys = [k for k in labels if k in ranges]
    if not keys:
        return
    k = st.selectbox(
        "Which number's sensitivity",
        keys,
        index=keys.index(default) if default in keys else 0,
        format_func=lambda key: labels[key],
        key=f"{page}.tornado",
    )
    if k is None:
        return
    # the title stays short enough for a half-width column at 1280 x 720; the basis goes in the caption under it
    tornado(ranges[k], f"What moves {labels[k]}")
    if ranges[k].basis == "heuristic":
        st.caption(
            "Each bar: this number with one assumption at its low or high bound, the others at base "
            "(heuristic range from the assumption bounds)."
        )


def range_text(r, fmt) -> str:
    """'low … high (basis)' for a caption, or the basis text alone when the range is empty."""
    from core.base import BASIS_TEXT

    if r is None:
        return ""
    if r.basis == "none" or r.empty:
        return BASIS_TEXT["none"]
    extra = f", {r.n_runs} runs" if r.basis == "calibrated" and r.n_runs else ""
    return f"{fmt(r.low)} … {fmt(r.high)} ({BASIS_TEXT[r.basis]}{extra})"


def metric_range(col, label: str, value_text: str, r, fmt, help: str | None = None) -> None:
    """A metric card with its range under it."""
    col.metric(label, value_text, help=help)
    if r is not None:
        col.caption("range: " + range_text(r, fmt))


def _secs(x: float) -> str:
    return f"{x:.3g} s" if x != float("inf") else "does not fit"


#: A recommended configuration's cards: (field of the pick, label, value format); the pick's range for each
#: field (core.decision.optimizer) is drawn under its card. A latency the simulation withheld (None) has no range.
PICK_CARDS = {
    "cost_per_hour": ("Cost per hour", lambda x: f"${x:,.2f}"),
    "cost_per_million_tokens": ("Cost per million output tokens", lambda x: f"${x:,.3g}"),
    "p95_ttft_s": ("p95 TTFT (simulated)", _secs),
    "p95_itl_s": ("p95 ITL (simulated)", _secs),
    "p95_e2e_s": ("p95 end-to-end (simulated)", _secs),
    "capacity_requests_per_s": ("Capacity", lambda x: f"{x:.3g} req/s"),
}


def pick_metrics(pick, ranges: dict, keys: Iterable[str] = tuple(PICK_CARDS), gpus: bool = False) -> None:
    """One card per field of a recommended configuration (``keys`` of :data:`PICK_CARDS`), each with its
    range; ``gpus`` adds the replicas x GPUs card."""
    keys = list(keys)
    labels = [PICK_CARDS[k][0] for k in keys] + (["GPUs"] if gpus else [])
    cols = grid(len(labels), labels, [f"{pick.replicas} x {pick.gpus_per_replica} {pick.gpu}"] if gpus else ())
    for col, k in zip(cols, keys):
        label, fmt = PICK_CARDS[k]
        v = getattr(pick, k)
        metric_range(col, label, fmt(v) if v is not None else "withheld", ranges.get(k) if v is not None else None, fmt)
    if gpus:
        cols[len(keys)].metric("GPUs", f"{pick.replicas} x {pick.gpus_per_replica} {pick.gpu}")


def range_metrics(
    steps: tuple[Step, ...], keys, ranges: dict, cols: int | None = None, alias: dict[str, str] | None = None
) -> None:
    """Like :func:`metrics`, with each step's range (looked up by key, or ``alias[key]``) under the card."""
    keys = [k for k in keys if finite(find(steps, k))]
    found = [find(steps, k) for k in keys]
    columns = grid(len(found), [s.label for s in found], [s.shown() for s in found])
    for i, k in enumerate(keys):
        s = found[i]
        r = ranges.get((alias or {}).get(k, k))
        metric_range(
            columns[i % len(columns)], s.label, s.shown(), r, lambda v, u=s.unit: fmt_value(v, u), help=s.note or None
        )


def tornado(r, title: str) -> None:
    """The tornado chart of one number, each assumption's source on hover."""
    from core.base import REGISTRY
    from dashboard import cache, charts

    sources = {n: (i.label, i.source) for n, i in REGISTRY.items()}
    st.plotly_chart(cache.figure(charts.tornado_chart, r, title, sources), width="stretch")


def range_derivation(r, name: str, fmt) -> None:
    """Show the math of a range: each assumption's d_i, the two sums, the result."""
    import math

    from core.base import BASIS_TEXT, REGISTRY

    st.markdown(f"**{name}**: {fmt(r.value)}; {BASIS_TEXT[r.basis]}")
    if r.basis == "calibrated":
        st.caption(f"Calibrated from {r.n_runs} measured runs: {fmt(r.low)} … {fmt(r.high)}.")
        return
    if not r.contributions:
        st.caption("No assumption moves this number: its range is empty.")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "assumption": c.name,
                    "what": REGISTRY[c.name].label if c.name in REGISTRY else "",
                    "d↓ = ln(at bound / base)": round(c.d_down, 5),
                    "d↑": round(c.d_up, 5),
                }
                for c in r.contributions
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    s_down = math.sqrt(sum(c.d_down**2 for c in r.contributions))
    s_up = math.sqrt(sum(c.d_up**2 for c in r.contributions))
    st.latex(
        r"\sqrt{\textstyle\sum_i (d_i^{\downarrow})^2} = "
        + f"{s_down:.4f}"
        + r", \qquad \sqrt{\textstyle\sum_i (d_i^{\uparrow})^2} = "
        + f"{s_up:.4f}"
    )
    st.latex(
        r"\text{low} = \text{base} \cdot e^{-"
        + f"{s_down:.4f}"
        + r"} = \text{"
        + fmt(r.low)
        + r"}, \qquad \text{high} = \text{base} \cdot e^{+"
        + f"{s_up:.4f}"
        + r"} = \text{"
        + fmt(r.high)
        + "}"
    )


def fit_or_options(fits: bool, message: str, options: tuple[str, ...]) -> None:
    """A layout that fits is a success; one that does not is a warning with the changes that make it fit
    (each computed), so a default or a what-if never ends on a red dead end."""
    if fits:
        st.success(message)
        return
    st.warning(message)
    if options:
        st.markdown(
            "**It fits with any one of these changes** (each computed for this config):\n"
            + "\n".join(f"- {o}" for o in options)
        )


def deployment_shape(cfg, dep) -> str:
    """What serves, in words: "2 replicas of TP 4" or "2 prefill x TP 4 + 2 decode x TP 8 (h100-sxm)"."""
    lay = dep.layout
    if lay.mode == "disaggregated":
        p, d = lay.prefill, lay.decode
        return f"{p.instances} prefill x {p.gpu} TP {p.tp} + {d.instances} decode x {d.gpu} TP {d.tp}, disaggregated"
    layout = f"TP {cfg.tp}" + (f" x PP {cfg.pp}" if cfg.pp > 1 else "")
    return f"{lay.replicas} replica{'s' if lay.replicas != 1 else ''} of {layout}"


def deployment_headline(cfg, dep) -> str:
    """The Serving page's headline: the GPUs, how many replicas they make, the rate each receives, the p95s."""
    s = dep.summary
    rate = dep.result.spec.rate_per_s if dep.result.spec.arrival == "poisson" else s.arrival_rate_per_s
    gpus = dep.layout.gpus if dep.layout.mode == "disaggregated" else cfg.gpus
    verdict = {"saturated": "saturated", "stable": "stable"}.get(s.saturation_verdict, "too short to tell")
    p95 = lambda p: fmt_time(p.p95) if p.p95 is not None else "withheld"  # noqa: E731
    return (
        f"### {gpus} x {cfg.gpu} at {rate:.3g} requests/s: {deployment_shape(cfg, dep)}, "
        f"**{dep.per_replica_rate_per_s:.3g} requests/s each**\n"
        f"p95 TTFT **{p95(s.ttft_s)}**, p95 ITL **{p95(s.itl_s)}**, p95 end-to-end {p95(s.e2e_s)}; {verdict} "
        f"({dep.layout.router} router; load imbalance {dep.load_imbalance:.2f})"
    )


def deployment_details(dep) -> None:
    """Per replica (or pool instance) and, disaggregated, the KV transfer and each pool."""
    rows = [
        {
            "pool": r.pool,
            "instance": r.replica,
            "requests": r.requests,
            "requests/s": round(r.rate_per_s, 3),
            "busy": f"{r.utilization:.0%}",
            "queue p95": fmt_time(r.queue_p95_s) if r.queue_p95_s is not None else "withheld",
            "TTFT p95": fmt_time(r.ttft_p95_s) if r.ttft_p95_s is not None else "",
            "E2E p95": fmt_time(r.e2e_p95_s) if r.e2e_p95_s is not None else "",
        }
        for r in dep.replicas
    ]
    with st.expander(f"Per replica ({len(rows)}), load imbalance {dep.load_imbalance:.2f}", expanded=False):
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if dep.mode != "disaggregated" or dep.kv_transfer_s is None:
        return
    kv = dep.kv_transfer_s
    c = st.columns(4)
    c[0].metric("KV transfer p50", fmt_time(kv.p50) if kv.p50 is not None else "-", help=f"over {dep.kv_path}")
    c[1].metric("KV transfer p95", fmt_time(kv.p95) if kv.p95 is not None else "withheld")
    share = dep.kv_transfer_share_of_ttft
    c[2].metric("Transfer share of TTFT", f"{share:.1%}" if share is not None else "-")
    pools = dep.pools or {}
    c[3].metric(
        "Pool busy (prefill / decode)",
        " / ".join(f"{pools[k].utilization:.0%}" for k in ("prefill", "decode") if k in pools),
    )
