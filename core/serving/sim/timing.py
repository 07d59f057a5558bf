"""Iteration times for the simulator, from :class:`core.physics.StepModel`, fast enough for runs of iterations.

The step model's iteration time of a whole batch, its pipeline kept busy by micro-batches
(``StepModel.pipelined_s``; ``StepModel.iteration_s`` without a pipeline), has the shape (``core.serving.speed``)::

    t(T, A, R) = pp * ( max(c0(T), m0(T)) + max(c1(T) A,  m1(T) R) ) + x(T)

the GEMMs at their own roofline (``c0``, ``m0``: their compute and the weights and new K/V they move, functions of
``T`` only; with adapters, the ``D`` distinct adapters' weights join ``m0``, ``_adapter_s``) plus attention at its own (compute ``c1 A`` over the attended pairs, memory ``m1 R`` over the cached
tokens it reads; ``StepModel.busy_s``), and communication, hops and kernel launches depend on ``T`` only; the fixed
cost per scheduled sequence is one constant (``StepModel.seq_cost_s``), tabulated with ``S = T`` (decode) and
corrected by ``(S - T)`` for iterations that carry prefill chunks (and by the eager launches such an iteration
pays on an engine whose CUDA graphs cover decode only, ``StepModel.launch_s``).
:class:`LinearTiming` tabulates the five coefficients per ``T`` from ``StepModel.parts`` and
``StepModel.iteration_s`` (one vectorised call), so an iteration costs a few float operations, and
a run of ``k`` decode iterations whose ``A`` and ``R`` grow by ``g`` per iteration has a closed-form
total (a constant plus a sum of a maximum of two arithmetic progressions). Before use it checks itself against
``StepModel.iteration_s`` on random points (relative error <= 1e-9); should the step model ever
lose that shape, :func:`timing_for` falls back to :class:`ArrayTiming`, which calls
``iteration_s`` directly (vectorised over a run, then ``cumsum``): slower, same results.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from core.physics import StepModel

#: Probe size for the slopes in A and R (a power of two: the differences stay exact to ~1e-16).
_BIG = 2.0**40
#: Largest relative mismatch accepted between the tabulated form and ``StepModel.iteration_s``.
SELF_CHECK_RTOL = 1e-9


def _line_sum(alpha: float, beta: float, lo: int, hi: int) -> float:
    """sum_{j=lo}^{hi-1} (alpha + beta j)."""
    if hi <= lo:
        return 0.0
    return alpha * (hi - lo) + beta * (hi * (hi - 1) - lo * (lo - 1)) / 2


class LinearTiming:
    """Tabulated iteration time, exact for the step model's shape (checked on construction)."""

    exact_shape = True

    def __init__(self, sm: StepModel, pp: int, t_max: int) -> None:
        self.sm, self.pp = sm, float(pp)
        self.q = sm.seq_cost_s
        self.t_max = t_max
        # a host KV tier (:class:`HostTierTiming`): the tokens HBM holds, N_h, and the host link's time per token
        # past them, h = k_g / BW_host; none here
        self.host_nh, self.host_h = math.inf, 0.0
        T = np.arange(t_max + 1, dtype=float)
        self.c0, self.c1, self.m0, self.m1, self.x = (a.tolist() for a in self._coeffs(T))
        self._extra: dict[int, tuple[float, float, float, float, float]] = {}
        # the memory time of one distinct adapter per stage: a constant of the step model (its weights at the slot
        # rank over the adapter kernels' bandwidth), divided among the micro-batches like R
        self.lora = bool(sm.lora_bytes_per_adapter)
        if self.lora:
            z = np.zeros(1)
            _, m_0, _, _ = sm.parts(np.ones(1), z, z, adapters=z)
            _, m_d, _, _ = sm.parts(np.ones(1), z, z, adapters=z + _BIG)
            self.md = float((np.asarray(m_d) - np.asarray(m_0)).reshape(-1)[0]) / _BIG
            self.mb = np.asarray(sm.micro_batches(T), dtype=float).tolist()
        else:
            self.md, self.mb = 0.0, []

    def _coeffs(self, T: np.ndarray) -> tuple[np.ndarray, ...]:
        # with a pipeline the batch runs as m = min(pp, T) micro-batches of T / m tokens (StepModel.pipelined_s);
        # the adapters' reads are left out here (``adapters`` 0) and added per iteration (``one``, ``run``)
        mb = np.asarray(self.sm.micro_batches(T), dtype=float)
        Tm = T / mb
        z = np.zeros_like(T)
        with np.errstate(divide="ignore", invalid="ignore"):
            c_0, m_0, _, _ = self.sm.parts(Tm, z, z, adapters=z)
            c_b, m_b, _, _ = self.sm.parts(Tm, z + _BIG, z + _BIG, adapters=z)
            total0 = self.sm.pipelined_s(T, z, z, adapters=z)
        c_0, m_0, c_b, m_b = (np.broadcast_to(np.asarray(a, dtype=float), T.shape) for a in (c_0, m_0, c_b, m_b))
        x = np.broadcast_to(np.asarray(total0, dtype=float), T.shape) - self.pp * np.maximum(c_0, m_0)
        return c_0, (c_b - c_0) / _BIG / mb, m_0, (m_b - m_0) / _BIG / mb, x

    def _adapter_s(self, T: int, D: float) -> float:
        """Memory time of ``D`` distinct adapters in an iteration of ``T`` tokens, one stage [s]."""
        if not D:
            return 0.0
        m = self.mb[T] if T <= self.t_max else float(self.sm.micro_batches(float(T)))
        return self.md * D / m

    def coeffs(self, T: int) -> tuple[float, float, float, float, float]:
        if T <= self.t_max:
            return self.c0[T], self.c1[T], self.m0[T], self.m1[T], self.x[T]
        got = self._extra.get(T)
        if got is None:
            c0, c1, m0, m1, x = (float(a[0]) for a in self._coeffs(np.array([float(T)])))
            got = self._extra[T] = (c0, c1, m0, m1, x)  # memo local to this simulation
        return got

    def one(self, T: int, A: float, R: float, S: int | None = None, D: float = 0.0) -> float:
        """Time of one iteration [s] with ``T`` new tokens, ``A`` attended pairs, ``R`` cached tokens read,
        ``S`` sequences scheduled (default ``T``: decode) and ``D`` distinct adapters among them."""
        if S is None or S == T:
            extra = 0.0
        elif self.pp > 1:  # the micro-batches follow the sequences, not the tokens: evaluate directly
            return float(self.sm.pipelined_s(T, A, R, S, float(D)))
        else:
            extra = (S - T) * self.q
            if S < T and not self.sm.graph_prefill:  # a prefill on decode-only graphs: every kernel eager
                sm = self.sm
                graph = sm.graph_launch_s if T <= sm.graph_max_tokens else sm.eager_launch_s
                extra += sm.kernels_per_stage * (sm.eager_launch_s - graph)
        if T <= self.t_max:
            c0, c1, m0, m1, x = self.c0[T], self.c1[T], self.m0[T], self.m1[T], self.x[T]
        else:
            c0, c1, m0, m1, x = self.coeffs(T)
        if self.lora:  # the adapters' weights move with the GEMMs (StepModel.busy_s)
            m0 = m0 + self._adapter_s(T, D)
        base = c0 if c0 > m0 else m0
        tier = _tier_s(self.host_nh, self.host_h, T, R, m1, base)
        a, b = c1 * A, m1 * R
        return self.pp * (base + tier + (a if a > b else b)) + x + extra

    def _run_each(
        self, T: int, A0: float, R0: float, g: float, kmax: int, budget_s: float, D: float
    ) -> tuple[int, float]:
        """:meth:`run` iteration by iteration: each as :meth:`one` times it, summed in order until the total reaches
        ``budget_s`` (the compiled ``t_run`` likewise), for a run that reaches a host tier."""
        elapsed, k = 0.0, 0
        while k < kmax:
            elapsed += self.one(T, A0 + g * k, R0 + g * k, None, D)
            k += 1
            if elapsed >= budget_s:
                break
        return k, elapsed

    def run(
        self, T: int, A0: float, R0: float, g: float, kmax: int, budget_s: float, D: float = 0.0
    ) -> tuple[int, float]:
        """A run of decode iterations with ``T`` tokens whose ``A`` and ``R`` grow by ``g`` per iteration (and ``D``
        distinct adapters throughout).

        Returns ``(k, elapsed_s)``: ``k`` = the smallest count whose total time reaches ``budget_s``
        (the iteration during which the next event happens is the last one), at most ``kmax``.
        """
        if R0 + g * (kmax - 1) + T > self.host_nh:  # the run reaches the host tier: not one closed form
            return self._run_each(T, A0, R0, g, kmax, budget_s, D)
        c0, c1, m0, m1, x = self.coeffs(T)
        pp = self.pp
        if self.lora:  # the adapters' weights move with the GEMMs (StepModel.busy_s)
            m0 = m0 + self._adapter_s(T, D)
        x = x + pp * (c0 if c0 > m0 else m0)  # the GEMMs' part is the same every iteration of the run
        a0, a1 = c1 * A0, c1 * g
        b0, b1 = m1 * R0, m1 * g
        d0, d1 = a0 - b0, a1 - b1
        # split: indices j < s follow line 1, j >= s line 2
        if d1 > 0:
            js = -d0 / d1
            s = 0 if js <= 0 else (kmax if js >= kmax else math.ceil(js))
            l1, l2 = (b0, b1), (a0, a1)
        elif d1 < 0:
            js = -d0 / d1
            s = 0 if js < 0 else (kmax if js >= kmax - 1 else math.floor(js) + 1)
            l1, l2 = (a0, a1), (b0, b1)
        else:
            s = kmax
            l1 = l2 = (a0, a1) if d0 >= 0 else (b0, b1)

        def total(k: int) -> float:
            ss = s if s < k else k
            return pp * (_line_sum(l1[0], l1[1], 0, ss) + _line_sum(l2[0], l2[1], ss, k)) + x * k

        if budget_s == math.inf:
            return kmax, total(kmax)
        # first segment: per-iteration time pp (alpha1 + beta1 j) + x for j < s
        seg1_end = total(s) if s > 0 else 0.0
        if s > 0 and seg1_end >= budget_s:
            k = _first_reach(pp * l1[0] + x, pp * l1[1], budget_s)
        else:
            lin = pp * (l2[0] + l2[1] * s) + x
            k = s + _first_reach(lin, pp * l2[1], budget_s - seg1_end)
        k = max(1, min(k, kmax))
        while k > 1 and total(k - 1) >= budget_s:
            k -= 1
        while k < kmax and total(k) < budget_s:
            k += 1
        return k, total(k)


def _first_reach(lin: float, quad: float, target: float) -> int:
    """Smallest k >= 1 with lin k + quad k (k - 1) / 2 >= target (approximately; callers adjust by +-1)."""
    if target <= 0:
        return 1
    qa, qb = quad / 2, lin - quad / 2
    if abs(qa) * target < 1e-12 * qb * qb:
        kf = target / qb
    else:
        disc = qb * qb + 4 * qa * target
        if disc < 0:
            return 1 << 62
        kf = 2 * target / (qb + math.sqrt(disc)) if qb > 0 else (-qb + math.sqrt(disc)) / (2 * qa)
    if not math.isfinite(kf) or kf > 1e15:
        return 1 << 62
    return max(1, math.ceil(kf - 1e-9))


def _tier_s(n_h: float, h: float, T: int, R: float, m1: float, base: float) -> float:
    """What a host KV tier adds to one stage's busy time [s]: past the ``N_h`` tokens HBM holds, the host link's
    stream ``h (R + T - N_h)`` runs beside HBM's (``t_m = max(t_m, t_host)``,
    :func:`core.physics.attention_split.split_parts`), so with the linear layers' ``max(c0, m0)`` (``base``) and
    attention's own K/V reads ``m1 R`` the stage's busy time (``StepModel.busy_s``) becomes::

        max(c0, m0, h (R + T - N_h) - m1 R) + max(c1 A, m1 R)

    and the tier adds ``max(0, h (R + T - N_h) - m1 R - max(c0, m0))``; nothing below ``N_h`` (``n_h`` infinite:
    no tier). Mirrored by the compiled loop's ``tier_s`` (:mod:`core.serving.sim.jit_parts`)."""
    over = R + T - n_h
    if over <= 0:
        return 0.0
    th = h * over - m1 * R
    return th - base if th > base else 0.0


class ArrayTiming:
    """Direct calls of ``StepModel.iteration_s`` (vectorised over a run): the reference and the fallback."""

    exact_shape = False

    def __init__(self, sm: StepModel) -> None:
        self.sm = sm

    def one(self, T: int, A: float, R: float, S: int | None = None, D: float = 0.0) -> float:
        return float(self.sm.pipelined_s(T, A, R, S, float(D)))

    def run(
        self, T: int, A0: float, R0: float, g: float, kmax: int, budget_s: float, D: float = 0.0
    ) -> tuple[int, float]:
        j = np.arange(kmax, dtype=float)
        t = np.broadcast_to(
            np.asarray(self.sm.pipelined_s(float(T), A0 + g * j, R0 + g * j, adapters=float(D)), dtype=float), j.shape
        )
        cs = np.cumsum(t)
        k = kmax if budget_s == math.inf else min(kmax, int(np.searchsorted(cs, budget_s, side="left")) + 1)
        return k, float(cs[k - 1])


def self_check(
    lin: LinearTiming | HostTierTiming, sm: StepModel, t_max: int, ctx_max: float, rng: np.random.Generator
) -> float:
    """Largest relative difference between the tabulated form and ``iteration_s`` on random points."""
    n = 256
    T = rng.integers(1, t_max + 1, size=n)
    A = rng.uniform(0, 1, size=n) * T * ctx_max
    R = rng.uniform(0, 1, size=n) * T * ctx_max
    # distinct adapters up to the slots (none without adapters; drawn after the rest, so those draws are unchanged)
    D = np.floor(rng.uniform(0, 1, size=n) * (sm.lora_slots + 1)) if sm.lora_bytes_per_adapter else np.zeros(n)
    ref = np.asarray(sm.pipelined_s(T.astype(float), A, R, adapters=D), dtype=float)
    got = np.array([lin.one(int(t), float(a), float(r), None, float(d)) for t, a, r, d in zip(T, A, R, D)])
    return float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)))


class HostTierTiming(LinearTiming):
    """A host KV tier (one stage, no attention parallelism): the tabulated form of the step model without the tier
    (its five coefficients per ``T``), and past the ``N_h`` tokens HBM holds the host link's stream beside HBM's
    (:func:`_tier_s`), ``t_m = max(t_m, max(0, R + T - N_h) k_g / BW_host)``
    (:func:`core.physics.attention_split.split_parts`). Below ``N_h`` the tier adds nothing and a run of decode
    iterations has :class:`LinearTiming`'s closed form; a run that reaches ``N_h`` is summed iteration by
    iteration. Both loops read this one form (the compiled loop's ``Pool.host_nh`` / ``host_h``), checked against
    the step model with the tier on both sides of ``N_h`` (:func:`timing_for`)."""

    def __init__(self, sm: StepModel, t_max: int) -> None:
        # ``self.sm``: the step model without the tier, whose coefficients the table holds (rows past it too)
        super().__init__(replace(sm, host_tier=False, attention_split=False), 1, t_max)
        self.host_nh = float(sm.hbm_kv_tokens)
        self.host_h = float(sm.kv_bytes_per_token / sm.host_bw_bytes_per_s)


def timing_for(sm: StepModel, pp: int, t_max: int, ctx_max: float) -> LinearTiming | HostTierTiming | ArrayTiming:
    """The fast tabulated timing when it reproduces the step model, else direct calls. Context parallelism's ring
    (hidden or not by each block's attention) and decode context parallelism's cheaper of two exchanges are not
    affine in the attended pairs and cached tokens: they take the direct calls. A host KV tier (a stream beside
    HBM's) is the tabulated form plus the tier's term past the tokens HBM holds (:class:`HostTierTiming`, one
    stage)."""
    rng = np.random.default_rng(12345)  # a fixed generator: the check must not consume the simulation's stream
    if sm.cp > 1 or sm.dcp > 1 or (sm.host_tier and pp > 1):
        return ArrayTiming(sm)
    if sm.host_tier:
        host = HostTierTiming(sm, t_max)
        # checked on points below N_h (the tier adds nothing) and on the usual range (most of them past it)
        below = min(ctx_max, sm.hbm_kv_tokens / t_max)
        err = max(self_check(host, sm, t_max, below, rng), self_check(host, sm, t_max, ctx_max, rng))
        return host if err <= SELF_CHECK_RTOL else ArrayTiming(sm)
    lin = LinearTiming(sm, pp, t_max)
    err = self_check(lin, sm, t_max, ctx_max, rng)
    return lin if err <= SELF_CHECK_RTOL else ArrayTiming(sm)


#: The iteration timings an engine reads.
Timing = LinearTiming | HostTierTiming | ArrayTiming
