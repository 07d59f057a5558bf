"""Speculative decoding: a cheap draft proposes ``k`` tokens, the target verifies them in one pass.

With a per-token acceptance rate ``alpha`` (each drafted token accepted independently, the
i.i.d. model of Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023, eq. 1), one verification pass of the target yields on average

.. math:: E[\\text{tokens}] = \\frac{1 - \\alpha^{k+1}}{1 - \\alpha}     (k + 1 when alpha = 1)

tokens: the accepted prefix plus the one token the target produces itself. A round costs the
draft passes plus one target pass over ``k + 1`` tokens per sequence, so against plain decoding

.. math:: S = \\frac{E \\cdot t_{decode}}{t_{draft} + t_{verify}}

and speculation loses (S < 1) below the acceptance rate alpha* where E(alpha*) = (t_draft +
t_verify) / t_decode. Worked number: k = 4, alpha = 0.7 gives E = (1 - 0.7^5) / 0.3 = 2.77 tokens.

These are pure formulas on times; :mod:`core.serving.speed` supplies the times from the iteration model
(the draft model's own :class:`core.physics.StepModel`, an n-gram lookup on the CPU, or an
EAGLE-style head as a fraction of a target step, each a named assumption).
"""

from __future__ import annotations

import math

import numpy as np


def expected_tokens_per_pass(alpha, k: int):
    """Expected tokens produced by one target verification pass [tokens]; arrays welcome.

    (1 - alpha^(k+1)) / (1 - alpha), the limit k + 1 at alpha = 1 (Leviathan et al. 2023, eq. 1).
    k = 4, alpha = 0.7: 2.7731.
    """
    a = np.asarray(alpha, dtype=float)
    safe = np.where(a < 1.0, a, 0.0)
    out = np.where(a < 1.0, (1.0 - safe ** (k + 1)) / (1.0 - safe), k + 1.0)
    return float(out) if out.ndim == 0 else out


def speedup(alpha, k: int, plain_step_s: float, draft_s: float, verify_s: float):
    """Per-sequence decode speed-up of speculation over plain decoding [x]."""
    return expected_tokens_per_pass(alpha, k) * plain_step_s / (draft_s + verify_s)


def break_even_alpha(cost_ratio: float, k: int) -> float:
    """The acceptance rate below which speculation is slower than plain decoding.

    Solves E(alpha) = cost_ratio for alpha in [0, 1], with cost_ratio = (t_draft + t_verify) / t_decode.
    E rises monotonically from 1 (alpha = 0) to k + 1 (alpha = 1), so: cost_ratio <= 1 gives 0 (it never
    loses), cost_ratio >= k + 1 gives NaN (it never wins), else bisection to 1e-12.
    """
    if cost_ratio <= 1.0:
        return 0.0
    if cost_ratio >= k + 1:
        return math.nan
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if expected_tokens_per_pass(mid, k) < cost_ratio:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
