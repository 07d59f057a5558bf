"""Goodput: what failures, checkpoints and restarts do to a training run's wall-clock.

A job on ``G`` GPUs fails at ``lambda x G`` per hour (assumption ``failure_rate_per_gpu_hour``), so its
mean time between interruptions is ``M = 3600 / (lambda G)`` [s]. It writes a checkpoint every ``tau``
seconds of work, each write blocking for ``delta`` [s] (``checkpoint_write_s``); after a failure it
pays the restart ``R`` [s] (``restart_s``) and redoes the work since the last checkpoint.

Expected wall-clock for ``T_s`` seconds of failure-free work (Daly, "A higher order estimate of the
optimum checkpoint interval for restart dumps", FGCS 22 (2006); exponential failures, which
may also strike during checkpoints and restarts)::

    T_w = M e^{R/M} (e^{(tau + delta)/M} - 1) T_s / tau

Optimum interval (Daly 2006; the first term alone is Young 1974, sqrt(2 delta M))::

    tau_opt = sqrt(2 delta M) [1 + 1/3 sqrt(delta / 2M) + 1/9 (delta / 2M)] - delta     (delta < 2M)
    tau_opt = M                                                                          (delta >= 2M)

Goodput share = T_s / T_w; expected interruptions = T_w / M.

Worked number (Llama 3 scale): 16,384 GPUs x 2e-5 /GPU-h = 0.328 failures/h, M = 10,986 s;
delta = 60 s: tau_opt = sqrt(2 x 60 x 10,986) x (1 + 0.0174 + 0.0003) - 60 = 1,109 s; with R = 600 s,
T_w / T_s = 10,986 e^{0.0546} (e^{0.1064} - 1) / 1,109 = 1.175, goodput 85 %.

All functions accept numpy arrays (the deadline search evaluates every GPU count at once).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import HOUR_S, NO_TRACE, Assumptions, Step, Trace, sig


class Goodput(BaseModel):
    """Failures, checkpoints and restarts of one run (times in seconds)."""

    model_config = ConfigDict(frozen=True)

    gpus: int
    runtime_s: float  # failure-free work T_s
    mtbf_s: float  # job-level mean time between interruptions M (inf without failures)
    checkpoint_interval_s: float  # tau (inf without failures)
    checkpoint_write_s: float
    restart_s: float
    wall_clock_s: float  # expected, with checkpoints, failures, restarts and rework
    checkpoint_overhead_s: float  # T_s / tau x delta
    failure_overhead_s: float  # restarts + lost work + failures during checkpoints
    expected_interruptions: float
    goodput_frac: float
    interval_is_optimal: bool
    steps: tuple[Step, ...] = ()


def mtbf_s(gpus, failure_rate_per_gpu_hour: float):
    """Job-level mean time between interruptions [s]: 3600 / (lambda G); inf when lambda = 0."""
    rate = failure_rate_per_gpu_hour * np.asarray(gpus, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(rate > 0, HOUR_S / np.where(rate > 0, rate, 1.0), np.inf)


def daly_interval_s(checkpoint_s, mtbf):
    """Daly's higher-order optimum checkpoint interval [s] (Young's sqrt(2 delta M) plus corrections)."""
    d = np.asarray(checkpoint_s, dtype=float)
    M = np.asarray(mtbf, dtype=float)
    finite = np.isfinite(M)
    Ms = np.where(finite, M, 1.0)
    x = d / (2 * Ms)
    tau = np.sqrt(2 * d * Ms) * (1 + np.sqrt(x) / 3 + x / 9) - d
    tau = np.where(d >= 2 * Ms, Ms, tau)
    tau = np.where(d > 0, tau, np.where(finite, np.sqrt(2 * np.maximum(d, 1e-9) * Ms), np.inf))
    return np.where(finite, np.maximum(tau, 1e-9), np.inf)


def wall_clock_s(solve_s, interval_s, checkpoint_s, restart_s, mtbf):
    """Daly's expected wall-clock [s] for ``solve_s`` seconds of failure-free work."""
    Ts = np.asarray(solve_s, dtype=float)
    tau = np.asarray(interval_s, dtype=float)
    M = np.asarray(mtbf, dtype=float)
    finite = np.isfinite(M)
    Ms = np.where(finite, M, 1.0)
    taus = np.where(np.isfinite(tau), tau, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):  # the entries without failures are taken from no_failures
        with_failures = Ms * np.exp(restart_s / Ms) * np.expm1((taus + checkpoint_s) / Ms) * Ts / taus
    no_failures = np.where(np.isfinite(tau), Ts * (1 + checkpoint_s / taus), Ts)
    return np.where(finite, with_failures, no_failures)


def goodput(
    runtime_s: float, gpus: int, a: Assumptions, *, interval_s: float | None = None, tr: Trace = NO_TRACE
) -> Goodput:
    """Goodput of a run of ``runtime_s`` failure-free seconds on ``gpus`` GPUs; traced.

    ``interval_s`` overrides the Daly optimum checkpoint interval.
    """
    lam, d, R = a.failure_rate_per_gpu_hour, a.checkpoint_write_s, a.restart_s
    if lam <= 0:  # no interruptions: no mean time between them to record (it is not a number), no rework
        tau = float(interval_s) if interval_s else float("inf")
        Tw = float(wall_clock_s(runtime_s, tau, d, R, np.inf))
        ck_inputs: dict[str, Any] = {"delta": d, "tau": tau} if interval_s else {}
        tr.step(
            "wall_clock_s",
            "Wall-clock with failures",
            "T_w",
            "T_s * (1 + delta / tau)" if interval_s else "T_s",
            Tw,
            unit="s",
            T_s=runtime_s,
            **ck_inputs,
            note="failure rate 0: no interruptions, so no checkpoint is needed"
            + (" (checkpoints every tau as set)" if interval_s else ""),
        )
        ck = Tw - runtime_s
        g = tr.step(
            "goodput_frac",
            "Goodput (useful share of wall-clock)",
            "g",
            "T_s / T_w",
            runtime_s / Tw,
            unit="%",
            T_s=runtime_s,
            T_w=Tw,
        )
        return Goodput(
            gpus=gpus,
            runtime_s=runtime_s,
            mtbf_s=float("inf"),
            checkpoint_interval_s=tau,
            checkpoint_write_s=d,
            restart_s=R,
            wall_clock_s=Tw,
            checkpoint_overhead_s=ck,
            failure_overhead_s=0.0,
            expected_interruptions=0.0,
            goodput_frac=g,
            interval_is_optimal=interval_s is None,
            steps=tr.frozen(),
        )
    M = tr.step(
        "mtbf_s",
        "Mean time between interruptions",
        "M",
        "3600 / (lam * gpus)",
        HOUR_S / (lam * gpus),
        unit="s",
        lam=lam,
        gpus=gpus,
        note="failures per GPU-hour x GPUs (assumption failure_rate_per_gpu_hour; Llama 3: 0.00002)",
    )
    if interval_s:
        tau = tr.step(
            "checkpoint_interval_s",
            "Checkpoint interval",
            r"\tau",
            "tau",
            float(interval_s),
            unit="s",
            tau=float(interval_s),
            note="set by the user",
        )
    else:
        x = d / (2 * M)
        if d >= 2 * M:
            tau = tr.step(
                "checkpoint_interval_s",
                "Checkpoint interval (Daly optimum)",
                r"\tau",
                "M",
                M,
                unit="s",
                M=M,
                note="checkpoint writes take longer than 2 M: checkpoint every M (Daly 2006)",
            )
        else:
            tau = tr.step(
                "checkpoint_interval_s",
                "Checkpoint interval (Daly optimum)",
                r"\tau",
                "sqrt(2 * delta * M) * (1 + sqrt(delta / (2 * M)) / 3 + delta / (2 * M) / 9) - delta",
                float(daly_interval_s(d, M)),
                unit="s",
                delta=d,
                M=M,
                latex=r"\sqrt{2 [delta] [M]}\left(1 + \tfrac{1}{3}\sqrt{\tfrac{[delta]}{2[M]}} + "
                r"\tfrac{1}{9}\tfrac{[delta]}{2[M]}\right) - [delta]",
                note=f"Young (1974) sqrt(2 delta M) with Daly's (2006) corrections; delta/2M = {sig(x)}",
            )
    Tw = tr.step(
        "wall_clock_s",
        "Wall-clock with failures",
        "T_w",
        "M * exp(R / M) * (exp((tau + delta) / M) - 1) * T_s / tau",
        float(wall_clock_s(runtime_s, tau, d, R, M)),
        unit="s",
        M=M,
        R=R,
        tau=tau,
        delta=d,
        T_s=runtime_s,
        latex=r"[M] e^{[R]/[M]} \left(e^{([tau] + [delta])/[M]} - 1\right) \frac{[T_s]}{[tau]}",
        note="Daly (2006): exponential failures, also during checkpoints and restarts",
    )
    n = tr.step("expected_interruptions", "Expected interruptions", "n_f", "T_w / M", Tw / M, unit="", T_w=Tw, M=M)
    g = tr.step(
        "goodput_frac",
        "Goodput (useful share of wall-clock)",
        "g",
        "T_s / T_w",
        runtime_s / Tw,
        unit="%",
        T_s=runtime_s,
        T_w=Tw,
    )
    ck = runtime_s / tau * d
    return Goodput(
        gpus=gpus,
        runtime_s=runtime_s,
        mtbf_s=M,
        checkpoint_interval_s=tau,
        checkpoint_write_s=d,
        restart_s=R,
        wall_clock_s=Tw,
        checkpoint_overhead_s=ck,
        failure_overhead_s=max(0.0, Tw - runtime_s - ck),
        expected_interruptions=n,
        goodput_frac=g,
        interval_is_optimal=interval_s is None,
        steps=tr.frozen(),
    )


def goodput_arrays(runtime_s, gpus, a: Assumptions, interval_s: float | None = None):
    """(wall-clock [s], goodput share, expected interruptions) for arrays of runs; untraced."""
    M = mtbf_s(gpus, a.failure_rate_per_gpu_hour)
    tau = np.full_like(M, float(interval_s)) if interval_s else daly_interval_s(a.checkpoint_write_s, M)
    Tw = wall_clock_s(runtime_s, tau, a.checkpoint_write_s, a.restart_s, M)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.where(Tw > 0, np.asarray(runtime_s, dtype=float) / Tw, 1.0)
        n = np.where(np.isfinite(M), Tw / np.where(np.isfinite(M), M, 1.0), 0.0)
    return Tw, g, n
