"""Calibration from measured runs (the RA-BIT spec, "Uncertainty and calibration").

For each run RA-BIT predicts the same metric on the run's own configuration (:func:`predict`, which
calls :mod:`core.serving.simulation`, :mod:`core.serving.speed` or :mod:`core.training`; no physics here) and keeps the
log-ratio

.. math:: r_i = \\ln(\\text{measured}_i / \\text{predicted}_i), \\qquad \\text{bias} = \\bar r,
          \\qquad \\text{value} = \\text{analytical} \\cdot e^{\\text{bias}}

over the comparable runs (:data:`COMPARABLE_RULE`). With ``n >= 3`` runs the 95 % prediction interval
for a new measurement is

.. math:: \\text{value} \\cdot \\exp(\\pm t_{0.975,\\,n-1} \\cdot s \\cdot \\sqrt{1 + 1/n})

(two-sided 95 %: the 0.975 quantile of Student's t with ``n - 1`` degrees of freedom, from scipy;
``s`` the sample standard deviation of the ``r_i``); with ``n < 3`` the interval is the heuristic band
``x0.7 ... x1.3`` around the calibrated value. The ``interval`` multipliers are on the analytical value,
so for ``n < 3`` they are exactly ``0.7 * factor`` and ``1.3 * factor`` with ``factor = exp(bias)``.

Worked number: residuals 0.2, 0.3, 0.25 give bias 0.25, factor 1.284, s = 0.05,
t_{0.975,2} = 4.303, half-width 4.303 x 0.05 x sqrt(4/3) = 0.2484, interval x1.0016 ... x1.6461.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from core.base import Range
from core.operations import FAMILY_TEXT, METRICS, Run

#: The rule, in the words the Calibration page shows.
COMPARABLE_RULE = (
    "A run counts toward a metric when it was measured on the same GPU kind as the analysis and "
    "reports the same metric, which fixes the phase and the metric family (TTFT / prefill, "
    "ITL / decode, end-to-end latency, throughput, training step time); p50 and p99 calibrate "
    "separately. Runs on another GPU kind are listed but not used."
)

HEURISTIC_LOW, HEURISTIC_HIGH = 0.7, 1.3
#: Two-sided 95 % prediction interval.
LEVEL = 0.95


class Residual(BaseModel):
    """One run's measurement of one metric against RA-BIT's prediction on the run's own config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    metric: str
    gpu: str
    config: str  # the run's config in words
    measured: float
    predicted: float

    @property
    def r(self) -> float:
        return math.log(self.measured / self.predicted)


class MetricCalibration(BaseModel):
    """The calibration of one metric on one GPU kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    gpu: str
    n: int
    bias: float
    factor: float
    sd: float | None  # sample standard deviation of the residuals (n >= 2)
    low_mult: float  # interval, as multipliers on the analytical value
    high_mult: float
    basis: Literal["t", "heuristic"]
    runs: tuple[Residual, ...]

    @property
    def interval(self) -> tuple[float, float]:
        return (self.low_mult, self.high_mult)

    @property
    def family(self) -> str:
        return FAMILY_TEXT[METRICS[self.metric][0]]

    def range(self, analytical: float) -> Range:
        """The calibrated value and interval around an analytical value (same unit)."""
        return Range(
            value=analytical * self.factor,
            low=analytical * self.low_mult,
            high=analytical * self.high_mult,
            basis="calibrated",
            n_runs=self.n,
        )

    def as_json(self) -> dict:
        """``rabit calibrate show``'s ``metrics[NAME]`` object (keys are a contract)."""
        return {
            "n": self.n,
            "bias": self.bias,
            "factor": self.factor,
            "interval": [self.low_mult, self.high_mult],
            "basis": self.basis,
            "gpu": self.gpu,
            "sd": self.sd,
            "runs": [
                {"label": r.label, "measured": r.measured, "predicted": r.predicted, "r": r.r, "config": r.config}
                for r in self.runs
            ],
        }


def interval_multipliers(r: Sequence[float]) -> tuple[float, float, float, float | None, str]:
    """(bias, low_mult, high_mult, sd, basis) from residuals ``r`` (at least one)."""
    x = np.asarray(r, dtype=float)
    n = x.size
    if n == 0:
        raise ValueError("no residuals: calibration needs at least one comparable run")
    bias = float(x.mean())
    factor = math.exp(bias)
    if n < 3:
        sd1 = float(x.std(ddof=1)) if n >= 2 else None
        return bias, HEURISTIC_LOW * factor, HEURISTIC_HIGH * factor, sd1, "heuristic"
    from scipy import stats  # imported on first use: it costs a cold dashboard start about a second

    sd = float(x.std(ddof=1))
    t = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1))
    half = t * sd * math.sqrt(1 + 1 / n)
    return bias, factor * math.exp(-half), factor * math.exp(half), sd, "t"


def comparable(res: Residual, gpu: str, metric: str) -> bool:
    """:data:`COMPARABLE_RULE`: same GPU kind and the same metric (hence phase and family)."""
    return res.gpu == gpu and res.metric == metric


def calibrate(residuals: Iterable[Residual], gpu: str, metric: str) -> MetricCalibration | None:
    """The calibration of ``metric`` for a config on ``gpu``; None without a comparable run."""
    used = tuple(x for x in residuals if comparable(x, gpu, metric))
    if not used:
        return None
    bias, lo, hi, sd, basis = interval_multipliers([x.r for x in used])
    return MetricCalibration(
        metric=metric,
        gpu=gpu,
        n=len(used),
        bias=bias,
        factor=math.exp(bias),
        sd=sd,
        low_mult=lo,
        high_mult=hi,
        basis=basis,
        runs=used,
    )


def calibrate_all(residuals: Sequence[Residual], gpu: str) -> dict[str, MetricCalibration]:
    """Every metric with at least one comparable run, in :data:`core.operations.runs.METRICS` order."""
    out = {}
    for metric in METRICS:
        c = calibrate(residuals, gpu, metric)
        if c is not None:
            out[metric] = c
    return out


class LooRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    metric: str
    measured: float
    predicted: float  # analytical
    calibrated: float  # from the other runs
    low: float
    high: float
    covered: bool
    n_others: int


class LooCheck(BaseModel):
    """Leave-one-out: predict each run from the others; coverage = share inside its interval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[LooRow, ...]

    @property
    def coverage(self) -> float | None:
        return sum(r.covered for r in self.rows) / len(self.rows) if self.rows else None


def leave_one_out(cal: MetricCalibration) -> LooCheck:
    """For each of the ``n`` runs, calibrate on the other ``n - 1`` and check the held-out measurement."""
    rows = []
    if cal.n >= 2:
        for i, held in enumerate(cal.runs):
            others = [x.r for j, x in enumerate(cal.runs) if j != i]
            bias, lo, hi, _, _ = interval_multipliers(others)
            p = held.predicted
            rows.append(
                LooRow(
                    label=held.label,
                    metric=cal.metric,
                    measured=held.measured,
                    predicted=p,
                    calibrated=p * math.exp(bias),
                    low=p * lo,
                    high=p * hi,
                    covered=p * lo <= held.measured <= p * hi,
                    n_others=len(others),
                )
            )
    return LooCheck(rows=tuple(rows))


# --- predictions on a run's own config ------------------------------------------------------------

#: Requests simulated per run prediction (enough for a p99: the simulator withholds it below 100).
SIM_REQUESTS = 400


def predict(run: Run) -> dict[str, float]:
    """RA-BIT's prediction of each metric the run measured, on the run's own config.

    * ``rate`` / ``concurrency`` / ``offline`` serving runs: :func:`core.serving.simulation.simulate` with the run's
      mean lengths (fixed), Poisson arrivals at the rate, a closed loop of ``concurrency`` users without
      think time, or every request at once; the offline throughput is the closed-form capacity
      (:func:`core.serving.simulation.max_throughput`), what an offline engine approaches.
    * ``batch``: :func:`core.serving.speed.speed_summary` (TTFT = prefill of the batch, ITL = mean decode step).
    * ``train``: :func:`core.training.evaluate_layout` on the run's own layout (step time, MFU).

    A metric the model cannot produce for the run (a withheld percentile) is left out.
    """
    cfg = run.config
    want = set(run.metrics)
    out: dict[str, float] = {}
    if run.load == "train":
        from core.training import config_layout, evaluate_layout

        res = evaluate_layout(cfg, config_layout(cfg))
        vals = {"step_s": res.step_s, "mfu": res.mfu}
        return {k: float(v) for k, v in vals.items() if k in want and v and v > 0}
    if run.load == "batch":
        from core.serving import speed_summary

        s = speed_summary(cfg)
        vals = {
            "ttft_s.p50": s.prefill.ttft_s,
            "ttft_s.p99": s.prefill.ttft_s,
            "itl_s.p50": s.decode.step_s,
            "itl_s.p99": s.decode.step_s,
            "e2e_s.p50": s.e2e_s,
            "e2e_s.p99": s.e2e_s,
            "throughput_tokens_per_s": s.decode.tokens_per_s,
        }
        return {k: float(v) for k, v in vals.items() if k in want and v and v > 0}
    from core.serving import Lengths, SimSpec, max_throughput, simulate

    lengths = {
        "input": Lengths(kind="fixed", mean=cfg.input_tokens),
        "output": Lengths(kind="fixed", mean=cfg.output_tokens),
    }
    n = min(run.num_requests or SIM_REQUESTS, SIM_REQUESTS)
    if run.load == "rate":
        spec = SimSpec(arrival="poisson", rate_per_s=run.rate_per_s, num_requests=n, **lengths)
    else:
        users = run.concurrency if run.load == "concurrency" and run.concurrency is not None else n
        spec = SimSpec(arrival="closed", users=max(1, min(users, n)), think_s=0.0, num_requests=n, **lengths)
    if want == {"throughput_tokens_per_s"} and run.load == "offline":
        return {"throughput_tokens_per_s": float(max_throughput(cfg, spec).output_tokens_per_s)}
    summary = simulate(cfg, spec).summary
    for metric in want:
        if metric == "throughput_tokens_per_s":
            v = summary.throughput_tokens_per_s
        elif "." in metric and metric.split(".")[0] in ("ttft_s", "itl_s", "e2e_s"):
            key, q = metric.split(".")
            v = getattr(getattr(summary, key), q)
        else:
            continue
        if v is not None and v > 0:
            out[metric] = float(v)
    return out


def residuals_of(runs: Iterable[Run], predictor: Callable[[Run], dict[str, float]] = predict) -> tuple[Residual, ...]:
    """One :class:`Residual` per (run, metric) the model could predict."""
    out = []
    for run in runs:
        pred = predictor(run)
        for m in run.measurements:
            p = pred.get(m.metric)
            if p is not None and math.isfinite(p) and p > 0:  # a prediction with no log-ratio is not compared
                out.append(
                    Residual(
                        label=run.label,
                        metric=m.metric,
                        gpu=run.config.gpu,
                        config=run.describe(),
                        measured=m.value,
                        predicted=pred[m.metric],
                    )
                )
    return tuple(out)
