"""Speculative decoding at the mean decode context: a draft proposes ``k`` tokens, the target verifies them
in one pass of ``k + 1`` tokens per sequence, and ``E`` of them are kept on average (Leviathan et al. 2023)::

    E       = (1 - alpha^(k+1)) / (1 - alpha)                 tokens per target pass
    t_round = t_draft + t_verify                              t_draft: k draft passes, an EAGLE head or n-gram lookup
    speedup = E / (t_round / t_mid)                           t_mid: the plain decode step at the same context

The draft model runs on the target's GPUs (:meth:`core.config.Deployment.draft`) with its own step model; the
target's verification pass is the step model's iteration with ``T = b (k + 1)``. :func:`speculation` computes
each number and records it on a :class:`core.base.Trace` as it goes.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from core.base import NO_TRACE, US, Trace, sig
from core.config import Deployment
from core.physics import IterationParts, StepModel, iteration
from core.serving import acceptance


class SpecResult(BaseModel):
    """Speculative decoding at the mean decode context."""

    model_config = ConfigDict(frozen=True)

    method: str
    k: int
    alpha: float
    draft_model: str | None
    tokens_per_pass: float
    draft_s: float  # all k draft steps of one round
    verify_s: float  # one target pass over k + 1 tokens per sequence
    round_s: float
    plain_step_s: float  # plain decode step at the same context
    cost_ratio: float  # round / plain step
    speedup: float
    break_even_alpha: float  # NaN when speculation never wins
    tokens_per_s_per_user: float
    tokens_per_s: float


def draft_step_model(dep: Deployment) -> StepModel:
    """The draft model's step model on the target's GPUs (:meth:`core.config.Deployment.draft`), without the
    scheduler's costs: the draft's passes share the target's scheduler iteration, so their step overhead and
    per-sequence bookkeeping are not charged again (their kernel launches and sampling are)."""
    return replace(StepModel.from_deployment(dep.draft()), overhead_s=0.0, seq_overhead_s=0.0)


def speculation(
    dep: Deployment,
    sm: StepModel,
    batch: int,
    b: int,
    ctx: float,
    s_read: float,
    plain: IterationParts,
    tr: Trace = NO_TRACE,
) -> SpecResult | None:
    """Speculative decoding of a batch of ``batch`` sequences, ``b`` per pipeline micro-batch, at the mean decode
    context ``ctx`` (``s_read`` cached tokens read per sequence, ``plain`` the plain decode step there), each
    number recorded on ``tr``; None when ``spec_method`` is "none"."""
    cfg = dep.config
    if cfg.spec_method == "none":
        return None
    on = tr.enabled
    k, alpha = cfg.spec_k, cfg.spec_alpha
    E = acceptance.expected_tokens_per_pass(alpha, k)
    if on and alpha < 1:
        tr.step(
            "spec_tokens_per_pass",
            "Tokens per target pass (speculative)",
            "E",
            "(1 - alpha ** (k + 1)) / (1 - alpha)",
            E,
            unit="tokens",
            latex=r"\frac{1 - [alpha]^{[k] + 1}}{1 - [alpha]}",
            alpha=alpha,
            k=k,
            note="Leviathan et al. 2023, eq. 1: each drafted token accepted independently with rate alpha",
        )
    elif on:
        tr.step(
            "spec_tokens_per_pass",
            "Tokens per target pass (speculative)",
            "E",
            "k + 1",
            E,
            unit="tokens",
            k=k,
            note="alpha = 1: every drafted token is accepted",
        )
    a = cfg.assumptions
    if cfg.spec_method == "draft":
        dsm = draft_step_model(dep)
        dctx = ctx + (k - 1) / 2  # mean context of the k draft passes
        s_a, s_r = float(dsm.kv_read_tokens(dctx + 1)), float(dsm.kv_read_tokens(dctx))
        one = iteration(
            dsm,
            float(b),
            b * s_a,
            b * s_r,
            tr=tr,
            key="spec_draft_pass",
            what="Draft pass",
            compact=True,
            final_label=f"One draft pass ({cfg.draft_model}, TP {dsm.tp})",
            final_symbol=r"t_{dp}",
            note="the draft model's own iteration model at the mean context of the k passes, "
            "without a second scheduler overhead",
        )
        draft_s = k * one.time_s
        if on:
            tr.step(
                "spec_draft_s",
                "Draft cost per round",
                r"t_{draft}",
                "k * t_dp",
                draft_s,
                unit="s",
                units={"t_dp": "s"},
                k=k,
                t_dp=one.time_s,
                note=f"{k} sequential draft passes",
            )
    elif cfg.spec_method == "eagle":
        draft_s = k * a.eagle_draft_frac * plain.time_s
        if on:
            tr.step(
                "spec_draft_s",
                "Draft cost per round",
                r"t_{draft}",
                "k * phi * t_mid",
                draft_s,
                unit="s",
                units={"t_mid": "s", "phi": "frac"},
                k=k,
                phi=a.eagle_draft_frac,
                t_mid=plain.time_s,
                note="EAGLE-style head: one decoder layer + the LM head (assumption eagle_draft_frac)",
            )
    else:  # ngram
        draft_s = a.ngram_draft_us * US
        if on:
            tr.step(
                "spec_draft_s",
                "Draft cost per round",
                r"t_{draft}",
                "t_ng",
                draft_s,
                unit="s",
                units={"t_ng": "s"},
                t_ng=draft_s,
                note="n-gram prompt lookup on the CPU (assumption ngram_draft_us)",
            )
    T_v = float(b * (k + 1))
    A_v = b * sum(float(sm.kv_read_tokens(ctx + j)) for j in range(1, k + 2))
    verify = iteration(  # b sequences, k + 1 tokens each
        sm,
        T_v,
        A_v,
        b * s_read,
        float(b),
        tr=tr,
        key="spec_verify",
        what="Verification",
        compact=True,
        final_label="Verification pass (k + 1 tokens per sequence)",
        final_symbol=r"t_{verify}",
        note=f"the target's iteration with T = b (k + 1) = {sig(T_v, 6)} tokens at the mean context",
    )
    round_s = draft_s + verify.time_s
    ratio = round_s / plain.time_s
    alpha_star = acceptance.break_even_alpha(ratio, k)
    res = SpecResult(
        method=cfg.spec_method,
        k=k,
        alpha=alpha,
        draft_model=cfg.draft_model if cfg.spec_method == "draft" else None,
        tokens_per_pass=E,
        draft_s=draft_s,
        verify_s=verify.time_s,
        round_s=round_s,
        plain_step_s=plain.time_s,
        cost_ratio=ratio,
        speedup=E / ratio,
        break_even_alpha=alpha_star,
        tokens_per_s_per_user=E / round_s,
        tokens_per_s=batch * E / round_s * cfg.dp,
    )
    if not on:
        return res
    tr.step(
        "spec_round_s",
        "Speculative round",
        "t_r",
        "t_draft + t_verify",
        round_s,
        unit="s",
        units={"t_draft": "s", "t_verify": "s"},
        t_draft=draft_s,
        t_verify=verify.time_s,
    )
    tr.step(
        "spec_cost_ratio",
        "Round cost in plain decode steps",
        "c",
        "t_r / t_mid",
        ratio,
        unit="x",
        units={"t_r": "s", "t_mid": "s"},
        t_r=round_s,
        t_mid=plain.time_s,
    )
    tr.step(
        "spec_speedup",
        "Speculative speed-up per sequence",
        "S",
        "E / c",
        res.speedup,
        unit="x",
        E=E,
        c=ratio,
        note="above 1 speculation wins; verification turns compute-bound at large batch and the gain fades",
    )
    tr.step(
        "spec_break_even_alpha",
        "Break-even acceptance rate",
        r"\alpha^*",
        "alpha_star",
        alpha_star,
        unit="",
        latex=r"E^{-1}([c]) \text{ with } E(\alpha) = \frac{1 - \alpha^{[k] + 1}}{1 - \alpha}",
        alpha_star=alpha_star,
        c=ratio,
        k=k,
        note="solves (1 - a^(k+1)) / (1 - a) = c; below it speculation is slower"
        + ("; NaN: c > k + 1, it never wins here" if math.isnan(alpha_star) else ""),
    )
    tr.step(
        "spec_tokens_per_s_per_user",
        "Per-user rate with speculation",
        "r_{u,s}",
        "E / t_r",
        res.tokens_per_s_per_user,
        unit="tokens/s",
        E=E,
        t_r=round_s,
    )
    tr.step(
        "spec_tokens_per_s",
        "Aggregate rate with speculation",
        "r_s",
        "B * E / t_r * d_p",
        res.tokens_per_s,
        unit="tokens/s",
        B=batch,
        E=E,
        t_r=round_s,
        d_p=cfg.dp,
    )
    return res
