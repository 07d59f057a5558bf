"""Drawing helpers shared by the pages: metrics and math straight from ``core`` derivation steps."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import pandas as pd
import streamlit as st

from core.base import (
    Step,
    find,
    fmt_bytes,
    fmt_latency,
    fmt_num,
    fmt_pct,
    fmt_time,
    fmt_usd,
    fmt_value,  # noqa: F401  - pages format range ends like their steps
    sig,
)
from core.decision import Bound
from dashboard import kept, share
from dashboard.text import folded, plain

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
        share.card(s.label, s.shown())


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


#: Characters of an equation (its visible part) that fit the main column at 1280 x 720; KaTeX does not wrap.
LATEX_LINE_CHARS = 70


def _top_level(tex: str, sep: str) -> list[str]:
    """``tex`` split at the ``sep`` that are outside every brace and \\left/\\right pair."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(tex):
        c = tex[i]
        if c == "{" or tex.startswith(r"\left", i):
            depth += 1
        elif c == "}" or tex.startswith(r"\right", i):
            depth -= 1
        elif depth == 0 and tex.startswith(sep, i):
            parts.append(tex[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    return parts + [tex[start:]]


def _visible(tex: str) -> int:
    return len(re.sub(r"\\[A-Za-z]+|[{}]", "", tex))


def latex_lines(tex: str, width: int = LATEX_LINE_CHARS) -> str:
    """A long equation as aligned lines, one per top-level "=" (and, where a side is still too long, broken
    after a top-level "+"), so it wraps inside the column instead of running off its right edge."""
    if _visible(tex) <= width:
        return tex
    sides = [p.strip() for p in _top_level(tex, " = ")]
    if len(sides) < 2:
        return tex
    rows = []
    for side in sides[1:]:
        terms = _top_level(side, " + ")
        line, lines = "", []
        for t in terms:
            cand = f"{line} + {t}" if line else t
            if line and _visible(cand) > width:
                lines.append(line)
                line = t
            else:
                line = cand
        lines.append(line)
        rows.append("&= " + lines[0] + "".join(r" \\ &\quad + " + x for x in lines[1:]))
    return r"\begin{aligned}" + sides[0] + " " + r" \\ ".join(rows) + r"\end{aligned}"


def math_step(s: Step) -> None:
    if not finite(s):  # the formula, and that it has no finite value here (never "nan" or "inf")
        st.markdown(f"**{s.label}** — no finite value for these inputs")
        st.latex(s.latex_symbolic())
        if s.note:
            st.caption(s.note)
        return
    st.markdown(f"**{s.label}** — {s.shown()}")
    st.latex(latex_lines(s.latex_symbolic()))
    st.latex(latex_lines(s.latex_substituted()))
    if s.note:
        st.caption(s.note)


# --- speed and show-the-math helpers (issue 3) ---------------------------------------------------------


def anchor(title: str) -> str:
    """The anchor a section title gets, for a contents list's jump links."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def contents(titles: Iterable[str]) -> None:
    """A contents list: one jump link per section of the page."""
    st.markdown("**Contents** · " + " · ".join(f"[{t}](#{anchor(t)})" for t in titles))


def math_section(title: str, steps: tuple[Step, ...], expanded: bool = False) -> None:
    """A titled run of derivation steps that folds: the title (a jump target), then the steps, each as symbols,
    numbers, result (``st.latex``), under an expander."""
    st.subheader(title, anchor=anchor(title))
    with st.expander(
        f"{len(steps)} step{'s' if len(steps) != 1 else ''}: "
        + ", ".join(x.label for x in steps[:3])
        + ("…" if len(steps) > 3 else ""),
        expanded=expanded,
    ):
        for s in steps:
            math_step(s)


def steps_by_key(steps: tuple[Step, ...], keys: tuple[str, ...]) -> tuple[Step, ...]:
    return tuple(find(steps, k) for k in keys)


#: The memory steps the adapter chain ends on: what is left for the KV cache, and the sequences it holds.
_ADAPTER_MEMORY_ENDS = ("kv_budget_bytes_per_gpu", "max_sequences")


def adapter_steps(mem_steps: tuple[Step, ...], speed_steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """The adapter chain, in one place: the adapters' bytes, slots and the KV left (memory), then the step's
    adapter constants and the decode step's adapter reads and memory time (speed)."""
    mem = [s for s in mem_steps if s.key.startswith("adapter_") or s.key in _ADAPTER_MEMORY_ENDS]
    speed = [
        s for s in speed_steps if s.key.startswith("lora_") or s.key in ("decode_mid_lora_bytes", "decode_mid_memory_s")
    ]
    return tuple(mem + speed)


def gap_table(rows) -> pd.DataFrame:
    """The textbook-vs-ours waterfall (core.serving.speed_views.GapRow) as a table of formatted times."""

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
                "value": f"{sig(getattr(cfg.assumptions, n), 6)} {info.unit}",
                "base": f"{sig(info.base, 6)}",
                "range": f"{sig(lo, 6)}–{sig(hi, 6)}",
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
        **kept.view(f"{page}.bound"),
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


def _bound(v: float, fmt, unbounded: str) -> str:
    """One end of a range as text: an infinite end (a deadline no count meets at that bound) reads "no bound",
    with ``unbounded`` (why) in brackets, never "inf"."""
    import math

    if math.isfinite(v):
        return fmt(v)
    return "no bound" + (f" ({unbounded})" if unbounded else "")


def range_text(r, fmt, unbounded: str = "") -> str:
    """'low … high (basis)' for a caption, or the basis text alone when the range is empty; an end with no bound
    reads 'no bound (``unbounded``)' and the two ends are joined by a dash then."""
    from core.base import BASIS_TEXT

    if r is None:
        return ""
    if r.basis == "none" or r.empty:
        return BASIS_TEXT["none"]
    extra = f", {r.n_runs} runs" if r.basis == "calibrated" and r.n_runs else ""
    return f"{range_span(r, fmt, unbounded)} ({BASIS_TEXT[r.basis]}{extra})"


def range_span(r, fmt, unbounded: str = "") -> str:
    """'low … high' of a range, without its basis (for a table whose caption states it); "" without one. An end
    with no bound reads 'no bound (``unbounded``)', as in '7,376 – no bound (...)'."""
    if r is None or r.basis == "none" or r.empty:
        return ""
    sep = " … " if math.isfinite(r.low) and math.isfinite(r.high) else " – "
    return f"{_bound(r.low, fmt, unbounded)}{sep}{_bound(r.high, fmt, unbounded)}"


def metric_range(col, label: str, value_text: str, r, fmt, help: str | None = None, unbounded: str = "") -> None:
    """A metric card with its range under it (recorded for the page's summary as drawn); ``unbounded``: why an end
    of the range has no bound, said beside it."""
    col.metric(label, value_text, help=help)
    text = range_text(r, fmt, unbounded) if r is not None else ""
    if text:
        col.caption("range: " + text)
    share.card(label, value_text, text)


#: A configuration's headline numbers (core.decision.analysis_headline_ranges): key -> (label, format); the Saved
#: analyses and Compare pages show them.
HEADLINE = {
    "prefill_s": ("TTFT (whole batch)", fmt_latency),
    "decode_step_s": ("Decode step", fmt_latency),
    "tokens_per_s": ("Tokens/s", fmt_num),
    "e2e_s": ("End-to-end", fmt_latency),
    "max_sequences": ("Max sequences", fmt_num),
    "total_bytes_per_gpu": ("Memory per GPU", lambda v: fmt_value(v, "B")),
    "step_s": ("Step time", fmt_latency),
    "mfu": ("MFU", lambda v: f"{v:.1%}"),
    "runtime_s": ("Runtime", fmt_latency),
    "gpu_hours": ("GPU-hours", fmt_num),
    "cost_usd": ("Cost", fmt_usd),
}
_TRAIN_HEADLINE = ("step_s", "mfu", "runtime_s", "gpu_hours", "cost_usd")


def headline_keys(train: bool) -> tuple[str, ...]:
    """The headline keys of a training or a serving configuration, in the order they are shown."""
    return _TRAIN_HEADLINE if train else tuple(k for k in HEADLINE if k not in _TRAIN_HEADLINE)


def say(kind: str, text: str, where=None, limit: int | None = None) -> None:
    """A verdict (``kind``: success, info, warning or error) drawn and recorded for the page's summary.

    ``limit``: the text holds what a visitor typed (a name, a filter), so it is drawn as text (every Markdown
    character escaped, :func:`dashboard.text.plain`) cut to ``limit`` characters; the summary escapes it itself."""
    if limit is None:
        getattr(where or st, kind)(text)
        share.note(kind, text)
        return
    getattr(where or st, kind)(plain(text, limit))
    share.note(kind, folded(text, limit))


def widths(**px: int) -> dict:
    """``column_config`` giving the named columns these widths [px] (the rest keep theirs), so that the columns
    a meeting reads stay inside the main column at 1280 x 720."""
    return {name: st.column_config.Column(width=w) for name, w in px.items()}


def table(df, name: str, where=None, static: bool = False, **kw) -> None:
    """``st.dataframe`` of ``df`` (a DataFrame or its rows; full width, no index unless asked), recorded for the
    page's CSV download; ``static``: ``st.table``, whose cells wrap (for tables of sentences)."""
    df = df if isinstance(df, pd.DataFrame) else pd.DataFrame(df)
    share.table(name, df)
    if static:
        (where or st).table(df, hide_index=True)
        return
    kw.setdefault("hide_index", True)
    kw.setdefault("width", "stretch")
    (where or st).dataframe(df, **kw)


def _latency(x: float) -> str:
    return fmt_latency(x) if x != float("inf") else "does not fit"


#: A recommended configuration's cards: (field of the pick, label, value format); the pick's range for each
#: field (core.decision.optimizer) is drawn under its card. A latency the simulation withheld (None) has no range.
PICK_CARDS = {
    "cost_per_hour": ("Cost per hour", fmt_usd),
    "cost_per_million_tokens": ("Cost per million output tokens", fmt_usd),
    "p95_ttft_s": ("p95 TTFT (simulated)", _latency),
    "p95_itl_s": ("p95 ITL (simulated)", _latency),
    "p95_e2e_s": ("p95 end-to-end (simulated)", _latency),
    "capacity_requests_per_s": ("Capacity", lambda x: f"{sig(x)} req/s"),
}


def target_caption(col, check) -> None:
    """Under a latency card: its target and whether the pick meets it with every assumption at its pessimistic
    bound at once (a :class:`core.decision.pick_ranges.TargetCheck`)."""
    verdict = ":green[meets]" if check.meets_at_pessimistic else ":red[misses]"
    at = fmt_latency(check.pessimistic_s) if check.pessimistic_s is not None else "withheld"
    col.caption(f"target {fmt_latency(check.target_s)} · all assumptions pessimistic: {at}, {verdict}")


#: The Serving simulation page's headline: (summary field, card label, target field of the shared config).
LATENCY_CARDS = (
    ("ttft_s", "p95 TTFT", "p95_ttft_s"),
    ("itl_s", "p95 ITL", "p95_itl_s"),
    ("e2e_s", "p95 end-to-end", "p95_e2e_s"),
)


def latency_cards(summary, ranges: dict, targets) -> None:
    """A simulation's headline: the p95 latencies (each with its range and the shared target, where one is set)
    and the output tokens/s. A saturated run shows "saturated" and no time: its latencies only measure how long
    the simulation ran."""
    labels = [label for _, label, _ in LATENCY_CARDS] + ["Output tokens/s"]
    cols = grid(len(labels), labels)
    for col, (key, label, target_key) in zip(cols, LATENCY_CARDS):
        p, target = getattr(summary, key), getattr(targets, target_key)
        if summary.latency_withheld:
            col.metric(label, "saturated", help=summary.latency_withheld)
            col.caption("no latency: the queue grows without bound")
            continue
        if p.p95 is None:
            col.metric(label, "withheld", help=f"{p.n:,} completed requests; a p95 needs 20")
            continue
        r = ranges.get(f"{key}.p95")
        metric_range(col, label, fmt_latency(p.p95), r, fmt_latency, help=f"over {p.n:,} completed requests")
        if target:
            high = r.high if r is not None and r.basis != "none" else p.p95
            verdict = (
                ":green[meets it across the range]"
                if high <= target
                else ":orange[meets it at base; the range reaches past it]"
                if p.p95 <= target
                else ":red[misses it]"
            )
            col.caption(f"target {fmt_latency(target)}: {verdict}")
    metric_range(
        cols[-1],
        "Output tokens/s",
        fmt_num(summary.throughput_tokens_per_s),
        ranges.get("throughput_tokens_per_s"),
        fmt_num,
        help="output tokens of completed requests over the simulated span",
    )


def pick_metrics(
    pick, ranges: dict, keys: Iterable[str] = tuple(PICK_CARDS), gpus: bool = False, targets: tuple = ()
) -> None:
    """One card per field of a recommended configuration (``keys`` of :data:`PICK_CARDS`), each with its
    range; ``gpus`` puts the replicas x GPUs card first; ``targets``
    (:class:`core.decision.pick_ranges.TargetCheck`) adds each target and its pessimistic-bound verdict under its
    latency card."""
    keys = list(keys)
    fleet = f"{pick.replicas} x {pick.gpus_per_replica} {pick.gpu}"
    labels = (["GPUs"] if gpus else []) + [PICK_CARDS[k][0] for k in keys]
    cols = grid(len(labels), labels, [fleet] if gpus else ())
    if gpus:
        cols[0].metric("GPUs", fleet, help="replicas x GPUs per replica, GPU kind")
        cols = cols[1:]
    by_key = {t.key: t for t in targets}
    for col, k in zip(cols, keys):
        label, fmt = PICK_CARDS[k]
        v = getattr(pick, k)
        metric_range(col, label, fmt(v) if v is not None else "withheld", ranges.get(k) if v is not None else None, fmt)
        if k in by_key:
            target_caption(col, by_key[k])


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


def fit_table(f) -> None:
    """The fitted efficiency assumptions beside their base and bounds (a :class:`core.decision.AssumptionFit`)."""
    from core.base import REGISTRY

    rows = []
    for k, v in f.values.items():
        i = REGISTRY[k]
        rows.append(
            {
                "assumption": k,
                "what": i.label,
                "base": i.base,
                "fitted": round(v, 4) if k in f.moved else "not moved by these runs",
                "bounds": f"{min(i.low, i.high):g} … {max(i.low, i.high):g} {i.unit}",
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption(
        f"{f.n} measurement(s); a new run lands within ×{f.low_mult:.3f} … ×{f.high_mult:.3f} of the fitted "
        + (
            "prediction (Student t from the residuals, 95 %)."
            if f.basis == "t"
            else "prediction (×0.7 … ×1.3: fewer than two degrees of freedom)."
        )
    )


def fit_comparison(c) -> None:
    """The leave-one-out comparison of the factor and the fit, and which to trust."""
    e = c.median_abs_error
    cols = st.columns(3)
    for col, (k, label) in zip(
        cols, (("analytical", "No calibration"), ("factor", "Factor per metric"), ("fit", "Fitted assumptions"))
    ):
        col.metric(f"{label}: median held-out error", f"{e[k]:.1%}")
    (st.success if c.trust == "fit" else st.info)(f"Trust the **{c.trust}** for this configuration: {c.why}.")
    with st.expander("Each run predicted from the others"):
        st.dataframe(pd.DataFrame([r.model_dump() for r in c.rows]), hide_index=True, width="stretch")


# --- multi-LoRA serving: the adapters' memory, loads and the per-variant comparison ------------------------------


def adapter_memory(mem, cost) -> None:
    """What the adapter slots take out of one GPU and of the replica's sequences (the Memory page)."""
    from core.base import fmt_bytes

    labels = ("One adapter", "Slots reserved per GPU", "Adapter slots", "Sequences without adapters")
    values = (
        fmt_bytes(mem.adapter_bytes, "auto"),
        fmt_bytes(mem.adapter_reserved_bytes_per_gpu, "auto"),
        f"{mem.adapter_slots} at rank {mem.adapter_slot_rank}",
        f"{cost.sequences_without:,}",
    )
    cols = grid(len(labels), labels, values)
    helps = (
        "the set's largest rank, every targeted layer of the whole model",
        "max_loras slots at max_lora_rank, pre-allocated when the model loads: out of the KV budget",
        f"max_loras (GPU slots); host memory holds {mem.adapter_host_slots:,} adapters "
        f"({fmt_bytes(mem.adapter_host_cache_bytes, 'auto')})",
        f"the same replica without adapters; with them {cost.sequences_with:,}",
    )
    for i, (label, value, h) in enumerate(zip(labels, values, helps)):
        cols[i % len(cols)].metric(label, value, help=h)
    st.caption(
        f"The adapter slots take {fmt_bytes(cost.reserved_bytes_per_gpu, 'auto')} of the "
        f"{fmt_bytes(cost.kv_budget_without_bytes_per_gpu, 'auto')} KV budget per GPU ({cost.budget_share:.1%}): "
        f"{cost.sequences_lost:,} fewer sequences ({cost.sequences_with:,} instead of {cost.sequences_without:,}). "
        f"All {fmt_bytes(mem.adapter_set_bytes, 'auto')} of the adapter set live in storage and host memory."
    )


def adapter_simulation(ad) -> None:
    """The adapters in one simulated run: loads, their time, and the wait for a slot (the Serving page)."""
    from core.base import fmt_time

    labels = ("Adapter loads", "Load time p50", "Load time share", "Waited for a slot", "Slot wait p95")
    values = (
        f"{ad.loads:,}",
        fmt_time(ad.load_s.p50) if ad.load_s.p50 is not None else "none",
        f"{ad.load_time_share:.1%}",
        f"{ad.blocked_requests:,}",
        fmt_time(ad.wait_s.p95) if ad.wait_s.p95 is not None else f"withheld (n={ad.wait_s.n})",
    )
    cols = grid(len(labels), labels, values)
    helps = (
        f"adapters brought into a GPU slot; {ad.loads_from_storage:,} read from storage first (not in host memory)",
        "one load: each GPU copies its shard over its host link",
        "of the busy time, the batch stood still for loads",
        "requests turned away at least once because their adapter would exceed max_loras",
        f"among those {ad.blocked_requests:,}; {sig(ad.distinct_mean)} adapters per batch on average",
    )
    for i, (label, value, h) in enumerate(zip(labels, values, helps)):
        cols[i % len(cols)].metric(label, value, help=h)


def per_variant(pv) -> None:
    """One deployment per variant (merged weights) beside the adapters over one base (the Optimizer page)."""
    labels = ("One deployment per variant", "Adapters over one base", "GPUs saved", "Cost ratio")

    def gpus(n: int) -> str:
        return f"{n:,} GPU" + ("" if n == 1 else "s")

    values = (
        f"{gpus(pv.gpus)}, ${pv.cost_per_hour:,.2f}/h",
        f"{gpus(pv.multi_lora_gpus)}, ${pv.multi_lora_cost_per_hour:,.2f}/h",
        f"{pv.gpus_saved:,}",
        f"{pv.cost_ratio:,.1f}x",
    )
    cols = grid(len(labels), labels, values)
    for i, (label, value) in enumerate(zip(labels, values)):
        cols[i % len(cols)].metric(label, value)
    st.caption(
        f"{pv.variants:,} variants, each merged into its own copy of the base: "
        + "; ".join(f"{n:,} on {lab}" for lab, n in pv.shapes)
        + f". Adapters over one base: {pv.multi_lora_label}. Basis: {pv.basis}."
    )
    if pv.own_replica:
        st.markdown("**Where a variant earns its own replica**")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "adapter": v.adapter,
                        "share of traffic": f"{v.share:.1%}",
                        "requests/s": round(v.rate_per_s, 3),
                        "rank": v.rank,
                        "replicas": v.replicas,
                        "why": v.reason,
                    }
                    for v in pv.own_replica
                ]
            ),
            hide_index=True,
            width="stretch",
        )
    else:
        st.caption(
            "No variant earns a replica of its own here: none carries enough traffic to fill a dedicated replica "
            f"(about {sig(pv.dedicated_capacity_rps)} requests/s each), and no rank makes mixed batches dearer than a "
            "dedicated copy."
        )


def long_context_tables(view) -> None:
    """The long-context view's two tables: the longest sequence each option fits, and what the architecture saved."""
    st.subheader("Where one sequence stops fitting, and what context parallelism or a host KV tier buys")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "option": f.option,
                    "GPUs per replica": f.gpus,
                    "longest sequence": f"{f.max_context_tokens:,} tokens"
                    + (" (the model's window)" if f.max_context_tokens >= view.max_context else ""),
                    "decode step there": fmt_time(f.decode_step_s) if f.decode_step_s is not None else "does not fit",
                }
                for f in view.fits
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    if view.savings:
        st.subheader("What the model's own attention choices saved")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "choice": s.choice,
                        "against": s.without,
                        f"KV of one {s.context_tokens:,}-token sequence": fmt_bytes(s.kv_bytes_with),
                        "without it": fmt_bytes(s.kv_bytes_without),
                        "saved": f"{s.saved_frac:.1%}",
                    }
                    for s in view.savings
                ]
            ),
            hide_index=True,
            width="stretch",
        )


def attention_options_table(options) -> None:
    """The Speed page's comparison of attention layouts (core.serving.attention_options)."""
    st.subheader("Attention layouts")
    st.caption(
        "The same replica with each attention layout: data-parallel attention gives each TP rank its own "
        "sequences' KV (MLA, MoE), decode context parallelism splits the KV TP replicates, context parallelism "
        "splits each prompt over more TP groups (ring attention). Set them under Attention parallelism in the sidebar."
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "layout": o.label,
                    "GPUs per replica": o.gpus_per_replica,
                    "decode step": fmt_time(o.decode_step_s) if o.decode_step_s == o.decode_step_s else "",
                    "TTFT (batch)": fmt_time(o.prefill_s) if o.prefill_s == o.prefill_s else "",
                    "KV tokens per replica": f"{o.kv_tokens_per_replica:,.0f}"
                    if o.kv_tokens_per_replica == o.kv_tokens_per_replica
                    else "",
                    "sequences": o.max_sequences,
                    "note": o.problem or ("current" if o.current else ""),
                }
                for o in options
            ]
        ),
        hide_index=True,
        width="stretch",
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
    """The Serving page's headline: the GPUs, how many replicas they make, the rate each receives, and whether the
    queue holds; with more than one replica, the router and how evenly it spread the load. Its p95s are the cards
    under it (with their ranges and targets); a saturated run has none."""
    s = dep.summary
    rate = dep.result.spec.rate_per_s if dep.result.spec.arrival == "poisson" else s.arrival_rate_per_s
    gpus = dep.layout.gpus if dep.layout.mode == "disaggregated" else cfg.gpus
    verdict = {"saturated": "saturated", "stable": "stable"}.get(s.saturation_verdict, "too short to tell")
    many = dep.layout.mode == "disaggregated" or dep.layout.replicas > 1
    each = f", **{sig(dep.per_replica_rate_per_s)} requests/s each**" if many else ""
    spread = (
        f"\n{dep.layout.router} router; load imbalance {sig(dep.load_imbalance)} (the busiest replica's requests "
        "over the mean)"
        if many
        else ""
    )
    i, o = dep.result.spec.mean_lengths()
    lengths = f"{i:,.0f} in + {o:,.0f} out tokens"
    return (
        f"### {gpus} x {cfg.gpu} at {sig(rate)} requests/s of {lengths}: {deployment_shape(cfg, dep)}{each}: "
        f"{verdict}{spread}"
    )


def workload_caption(cfg, rate_per_s: float | None = None, where=None, sessions=None) -> None:
    """Under a serving headline: the workload it answers for, its lengths and rate (one line); ``sessions`` (a
    session workload the answer was sized for) in place of the sidebar's request lengths."""
    from core.serving import sessions_text, workload_text

    what = sessions_text(sessions) if sessions is not None else None
    text = "For " + (what or workload_text(cfg.input_tokens, cfg.output_tokens, rate_per_s)) + "."
    (where or st).caption(text)
    share.note("text", text)


def pool_vendor_caption(kinds, where=None) -> None:
    """Where a search's GPU kinds (none: every kind) span two vendors: why its disaggregated pools never pair them."""
    from dashboard import cache

    note = cache.pool_vendor_note(tuple(kinds))
    if note:
        (where or st).caption(note)


def length_warning(cfg, where=None) -> None:
    """When the request lengths drive the answer (many times a typical chat request's GPU time, or the KV per
    sequence capping the batch), a warning naming them and what shorter ones would give
    (:func:`core.serving.length_note`); drawn under the headline cards."""
    from dashboard import cache

    try:
        note = cache.length_note(cfg)
    except ValueError:  # a config the closed form cannot size: its own error is shown where it applies
        return
    if note.message:
        say("warning", note.message, where)


def headline(text: str) -> None:
    """A page's headline in Markdown (a ``###`` line and what follows), drawn and recorded for its summary."""
    st.markdown(text)
    share.note("text", re.sub(r"^#+\s*", "", text).replace("\n", ". "))


def deployment_details(dep) -> None:
    """Per replica (or pool instance) and, disaggregated, the KV transfer and each pool. A saturated run shows no
    latency here either (its times only measure how long the simulation ran)."""
    held = dep.summary.latency_withheld

    def p95(v: float | None, none: str) -> str:
        return "saturated" if held else fmt_time(v) if v is not None else none

    rows = [
        {
            "pool": r.pool,
            "instance": r.replica,
            "requests": r.requests,
            "requests/s": sig(r.rate_per_s),
            "iteration running": f"{r.utilization:.0%}",
            "queue p95": p95(r.queue_p95_s, "withheld"),
            "TTFT p95": p95(r.ttft_p95_s, ""),
            "E2E p95": p95(r.e2e_p95_s, ""),
        }
        for r in dep.replicas
    ]
    with st.expander(f"Per replica ({len(rows)}), load imbalance {sig(dep.load_imbalance)}", expanded=False):
        table(rows, "per replica")
    if dep.mode != "disaggregated" or dep.kv_transfer_s is None:
        return
    kv = dep.kv_transfer_s
    c = st.columns(4)
    c[0].metric("KV transfer p50", fmt_time(kv.p50) if kv.p50 is not None else "-", help=f"over {dep.kv_path}")
    c[1].metric("KV transfer p95", fmt_time(kv.p95) if kv.p95 is not None else "withheld")
    frac = dep.kv_transfer_share_of_ttft
    c[2].metric("Transfer share of TTFT", f"{frac:.1%}" if frac is not None and not held else "-")
    pools = dep.pools or {}
    c[3].metric(
        "Iteration running (prefill / decode)",
        " / ".join(f"{pools[k].utilization:.0%}" for k in ("prefill", "decode") if k in pools),
    )


#: How a compared number of each unit (core.decision.AnalysisComparison) is written.
_COMPARE_FMT = {
    "usd_per_hour": lambda v: f"${v:,.2f}/h",
    "count": lambda v: f"{v:,.0f}",
    "kw": lambda v: f"{sig(v)} kW",
    "s": fmt_latency,
}


def _compared(key: str, label: str, unit: str):
    """(label, format) of one compared number: its unit's, or a configuration headline's."""
    if unit in _COMPARE_FMT:
        return label, _COMPARE_FMT[unit]
    return HEADLINE.get(key, (label, fmt_num))


def comparison_cards(numbers) -> None:
    """One card per compared number: B's value with its difference against A, A's under it, and whether their
    ranges overlap where they have ranges (recorded for the summary as drawn)."""
    shown = [(k, *_compared(k, lab, unit), c) for k, lab, unit, c in numbers if c.a is not None or c.b is not None]
    cols = grid(len(shown), [lab for _, lab, _, _ in shown])
    for col, (_, label, fmt, c) in zip(cols, shown):
        if c.b is None:
            col.metric(f"{label} (B)", "—", help="B has no such number")
        else:
            rel = c.relative
            col.metric(
                f"{label} (B)",
                fmt(c.b.value),
                delta=(f"{'+' if rel >= 0 else ''}{fmt_pct(rel)} against A" if rel is not None else None),
                delta_color="off",
            )
            share.card(f"{label}: B", fmt(c.b.value), range_text(c.b, fmt))
        if c.a is not None:
            col.caption(f"A: {fmt(c.a.value)}")
            share.card(f"{label}: A", fmt(c.a.value), range_text(c.a, fmt))
        if c.overlap and c.a is not None and c.a.basis != "none":
            col.caption(":orange[the two ranges overlap: the difference is within the assumptions' uncertainty]")


def comparison_rows(numbers) -> list[dict[str, str]]:
    """The compared numbers as table rows: each side with its range (where it has one) and B - A."""
    out = []
    for k, lab, unit, c in numbers:
        label, fmt = _compared(k, lab, unit)
        d = c.difference
        out.append(
            {
                "number": label,
                "A": fmt(c.a.value) if c.a else "—",
                "A's range": range_span(c.a, fmt),
                "B": fmt(c.b.value) if c.b else "—",
                "B's range": range_span(c.b, fmt),
                "B - A": (
                    f"{fmt_pct(c.relative)} ({'+' if d >= 0 else '−'}{fmt(abs(d))})"
                    if c.relative is not None and d is not None
                    else ""
                ),
                "ranges overlap": {True: "yes", False: "no", None: ""}[c.overlap]
                if c.a is not None and c.a.basis != "none"
                else "",
            }
        )
    return out
