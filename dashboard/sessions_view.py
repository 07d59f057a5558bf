"""The Serving page's Sessions view: multi-turn sessions (coding agents, chat) on the sidebar's deployment, the
answer first (p95 TTFT per turn, cost per agent-hour), its inputs under it, TTFT by turn index, and the sizing for
N concurrent agents at a p95 TTFT target.

The view's inputs are the shared config's ``sessions``: a change is written back (:func:`dashboard.state.set_sessions`)
so that the link and the config file carry it, and a link that carries sessions opens them here. An uploaded trace
stays with the upload (a link cannot carry a file); a trace loaded with a config file is replayed until one is
uploaded."""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

from core.base import MAX_TABLE_BYTES, fmt_time, fmt_usd
from core.config import SESSION_ARRIVALS, Lengths, RabitConfig, Sessions
from core.decision import SIZING_GPUS
from dashboard import cache, charts, render, state
from dashboard.text import plain

S = Sessions()
_LABELS = {"poisson": "Poisson", "gamma": "Bursty (gamma)", "agents": "N concurrent agents"}


def _inputs(cfg: RabitConfig) -> Sessions | None:
    """The session workload from this view's inputs (defaults: core.config.sessions); None with an error drawn next
    to the input when it cannot be used."""
    base = cfg.sessions or S
    a, b, c = st.columns(3)
    with a:
        st.markdown("**Sessions arrive**")
        arrival = st.radio(
            "Arrival", SESSION_ARRIVALS, index=SESSION_ARRIVALS.index(base.arrival), format_func=_LABELS.get,
            horizontal=True, key="sessions.arrival",
        )  # fmt: skip
        rate = st.number_input("Sessions per second", 0.001, 1e4, base.rate_per_s, format="%.3g", key="sessions.rate")
        cv = st.number_input("Burstiness (CV of the gaps)", 0.01, 20.0, base.cv, key="sessions.cv")
        agents = st.number_input(
            "Concurrent agents", **state.session_bounds("agents"), value=base.agents, key="sessions.agents"
        )
        n = st.number_input(
            "Sessions", **state.session_bounds("num_sessions"), value=base.num_sessions, key="sessions.n"
        )
    with b:
        st.markdown("**Each session**")
        turns = st.number_input("Turns (mean)", 1.0, 1000.0, float(base.turns.mean), key="sessions.turns")
        gap = st.number_input("Think / tool gap [s] (mean)", 0.0, 3600.0, base.gap_s, key="sessions.gap")
        affinity = st.checkbox("Route a session's turns to its replica", base.affinity, key="sessions.affinity")
    with c:
        st.markdown("**Tokens per turn (means)**")
        first = st.number_input("First request", 1.0, 1e6, float(base.first_input.mean), key="sessions.first")
        new = st.number_input("Added each later turn", 1.0, 1e6, float(base.new_input.mean), key="sessions.new")
        out = st.number_input("Output", 1.0, 1e5, float(base.output.mean), key="sessions.out")
    up = st.file_uploader(
        "Replay recorded sessions (CSV / JSONL: session_id, turn or timestamp, input_tokens, output_tokens; or "
        "OpenTelemetry spans with gen_ai.usage.*)",
        type=["csv", "jsonl", "json"],
        key="sessions.trace_file",
    )
    trace = base.trace
    if up is not None:
        try:
            trace = cache.session_trace(cache.upload_text(up.getvalue(), "the session trace", MAX_TABLE_BYTES))
            st.caption(f"Replaying {len(trace):,} turns of {1 + max(t.session for t in trace):,} sessions.")
        except ValueError as exc:
            st.error(f"That session trace cannot be used: {plain(exc, 300)}")
            return None

    def mean(lengths: Lengths, m: float) -> Lengths:
        return lengths.model_copy(update={"mean": m})

    try:
        work = base.with_(
            arrival=arrival, rate_per_s=rate, cv=cv, agents=int(agents), num_sessions=int(n), gap_s=gap,
            affinity=affinity, turns=mean(base.turns, turns), first_input=mean(base.first_input, first),
            new_input=mean(base.new_input, new), output=mean(base.output, out), trace=trace,
        )  # fmt: skip
    except (ValidationError, ValueError) as exc:
        st.error(f"These session inputs cannot be used: {plain(exc, 300)}")
        return None
    shared = work.with_(trace=base.trace)  # what the link and the config file carry: no uploaded file
    if shared != (cfg.sessions or S):
        state.set_sessions(shared)
        st.rerun()  # the sidebar's link is drawn from the config before this view: draw both afresh
    return work


def draw(cfg: RabitConfig) -> None:
    """The view (see the module docstring)."""
    head = st.container()
    st.subheader("Sessions", divider="gray")
    work = _inputs(cfg)
    if work is None:
        st.stop()
    try:
        with st.spinner(f"Simulating {work.num_sessions:,} sessions…"):
            r = cache.sessions(cfg, work)
    except ValueError as exc:
        head.error(plain(exc, 400))
        st.stop()
    p95 = r.ttft_p95_s
    cost = r.cost_per_agent_hour_usd
    with head:
        render.headline(
            f"### {r.sessions:,} sessions on {r.gpus} x {cfg.gpu}: p95 TTFT "
            f"{fmt_time(p95) if p95 is not None else 'withheld (under 20 turns)'} per turn, "
            + (f"{fmt_usd(cost)} per agent-hour" if cost is not None else "no price for this GPU")
            + f"\n{r.prefix_hit_rate:.0%} of prompt tokens found cached; {r.evicted_prefixes:,} prefixes evicted; "
            f"{fmt_usd(r.cost_per_session_usd) if r.cost_per_session_usd is not None else 'n/a'} per session "
            f"({r.turn.size:,} turns, the {r.loop} event loop)."
        )
        st.plotly_chart(charts.ttft_by_turn_chart(r.by_turn, cfg.targets.p95_ttft_s), width="stretch")
    st.subheader("Size for concurrent agents", divider="gray")
    z1, z2, z3 = st.columns(3)
    agents = int(z1.number_input("Agents", 1, 100_000, work.agents, key="sessions.size_agents"))
    target = z2.number_input("p95 TTFT per turn [s]", 0.001, 600.0, cfg.targets.p95_ttft_s or 2.0, key="sessions.t")
    kinds = z3.multiselect("GPU kinds", cache.gpu_slugs(), list(SIZING_GPUS), key="sessions.kinds")
    if not kinds:
        st.error("Pick at least one GPU kind to size with.")
        return
    if work.trace is not None:
        st.info("Sizing runs the session distributions: a replayed trace has its own arrivals.")
        return
    if st.button("Size", key="sessions.size"):
        with st.spinner("Searching the replica count of each GPU kind…"):
            z = cache.session_sizing(cfg, work, agents, float(target), tuple(kinds))
        a = z.answer
        render.say(
            "success" if a is not None else "warning",
            f"**{agents:,} agents at p95 TTFT <= {fmt_time(target)}:** "
            + (
                f"{a.gpus} x {a.gpu} at {fmt_usd(a.usd_per_hour)}/h, {fmt_usd(a.cost_per_agent_hour_usd)} per "
                "agent-hour"
                if a is not None and a.usd_per_hour is not None and a.cost_per_agent_hour_usd is not None
                else "no GPU kind searched meets it"
            ),
        )
        st.dataframe(
            [
                {
                    "GPU": o.gpu,
                    "GPUs": o.gpus,
                    "USD/h": o.usd_per_hour,
                    "p95 TTFT [s]": o.ttft_p95_s,
                    "USD per agent-hour": o.cost_per_agent_hour_usd,
                    "prompt cached": o.prefix_hit_rate,
                    "": o.reason,
                }
                for o in z.options
            ],
            hide_index=True,
        )
