"""The second calibration: fit the efficiency assumptions themselves to the measured runs.

The spec's calibration (:mod:`core.decision.calibration`) multiplies a metric by one factor, so it cannot follow
an error that depends on the run's shape (a too-high decode bandwidth shows at long outputs, a too-high compute
ceiling at long prompts). This one moves the assumptions the step model is made of and predicts every run
again, so runs of one shape calibrate another:

.. math:: \\hat\\theta = \\arg\\min_{\\theta \\in [\\theta_{lo}, \\theta_{hi}]}
          \\sum_i \\big(\\ln m_i - \\ln p_i(e^{\\theta})\\big)^2 + \\lambda \\sum_j \\Big(\\frac{\\theta_j -
          \\theta_{j,0}}{w_j}\\Big)^2

with ``theta = ln(assumption)`` for the decode bandwidth efficiency ``mbu``, the compute ceiling ``mfu_max`` and
its ramp ``mfu_ramp_tokens``, and the fixed per-step cost ``step_overhead_ms`` (:data:`FIT_PARAMS`), each within
its registry bounds (:data:`core.base.REGISTRY`: ``[min(low, high), max(low, high)]``), ``w_j`` half the log-width
of those bounds and a weak pull ``lambda`` (:data:`PRIOR_WEIGHT`) to the base that only decides directions the
runs do not constrain. Bounded least squares (scipy's trust-region reflective). The fit is per GPU kind and
engine: runs on other hardware or another engine do not move it. On an AMD GPU under vLLM or SGLang it also moves
``rocm_attn_bw_eff`` (:data:`ROCM_FIT_PARAMS`): the K/V reads then run at ``mbu x kv_read_bw_eff x rocm_attn_bw_eff``, the weight
reads at ``mbu``, and runs of two weight sizes tell ``mbu`` from the per-step cost.

Interval: from the fit's residuals, ``s^2 = sum r^2 / (n - k)`` with ``k`` the assumptions the runs move, and a
new run lands in ``exp(+- t_{0.975, n-k} s sqrt(1 + k / n))`` of the fitted prediction (fewer than two degrees of
freedom: the heuristic x0.7 ... x1.3).

Which to trust: :func:`compare_fit` predicts each run from the others, once with the factor and once with the fit,
and the one with the smaller median held-out error is the one to use for a config like the runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import REGISTRY
from core.decision.calibration import HEURISTIC_HIGH, HEURISTIC_LOW, LEVEL, interval_multipliers, predict
from core.operations import Run

#: The assumptions the fit moves (the step model's efficiencies).
FIT_PARAMS: tuple[str, ...] = ("mbu", "mfu_max", "mfu_ramp_tokens", "step_overhead_ms")
#: On an AMD GPU under vLLM or SGLang the fit also moves the ROCm paged-attention bandwidth (``rocm_attn_bw_eff``):
#: runs at small batches pin ``mbu`` on the weight reads, runs at large batches the K/V reads.
ROCM_FIT_PARAMS: tuple[str, ...] = (*FIT_PARAMS, "rocm_attn_bw_eff")
#: The pull to the base, per unit of half the log-width of an assumption's bounds (a tie-breaker, not a prior).
PRIOR_WEIGHT = 1e-6
#: An assumption counts as moved by the runs when a 5 % change moves some prediction by more than this (log).
SENSITIVITY = 1e-4

Predictor = Callable[[Run], dict[str, float]]


class FitRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    metric: str
    measured: float
    analytical: float  # at the runs' own assumptions
    fitted: float  # at the fitted assumptions


class AssumptionFit(BaseModel):
    """The fitted efficiency assumptions of one GPU kind and engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str
    engine: str
    values: dict[str, float]  # every fitted parameter (the ones the runs do not move stay at base)
    base: dict[str, float]
    moved: tuple[str, ...]  # the assumptions the runs constrain
    n: int  # measurements fitted
    sd: float | None
    low_mult: float  # interval, as multipliers on the fitted prediction
    high_mult: float
    basis: str  # "t" or "heuristic"
    rows: tuple[FitRow, ...]

    def as_json(self) -> dict:
        return {
            "gpu": self.gpu,
            "engine": self.engine,
            "values": self.values,
            "base": self.base,
            "moved": list(self.moved),
            "n": self.n,
            "sd": self.sd,
            "interval": [self.low_mult, self.high_mult],
            "basis": self.basis,
            "runs": [r.model_dump() for r in self.rows],
        }


def _bounds(name: str) -> tuple[float, float]:
    i = REGISTRY[name]
    lo, hi = sorted((i.low, i.high))
    return max(lo, i.min_value, 1e-9), min(hi, i.max_value)


def _moved(run: Run, values: dict[str, float]) -> Run:
    cfg = run.config
    return run.model_copy(update={"config": cfg.with_(assumptions=cfg.assumptions.with_(**values))})


def _pairs(
    runs: Sequence[Run], values: dict[str, float], predictor: Predictor
) -> dict[tuple[int, str], tuple[float, float]]:
    """(run index, metric) -> (measured, predicted) for every measurement the model predicts at ``values``."""
    out = {}
    for i, run in enumerate(runs):
        p = predictor(_moved(run, values) if values else run)
        for m in run.measurements:
            if m.metric in p and p[m.metric] > 0:
                out[(i, m.metric)] = (m.value, p[m.metric])
    return out


def group(runs: Sequence[Run]) -> dict[tuple[str, str], list[Run]]:
    """Runs by (GPU kind, engine), the unit a fit is made for."""
    out: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        out.setdefault((r.config.gpu, r.config.workload.engine), []).append(r)
    return out


def _of(runs: Sequence[Run], gpu: str, engine: str) -> list[Run]:
    return group(runs).get((gpu, engine), [])


def params_for(gpu: str, engine: str) -> tuple[str, ...]:
    """The assumptions a fit for ``gpu`` under ``engine`` moves: :data:`FIT_PARAMS`, and on ROCm kernels
    :data:`ROCM_FIT_PARAMS`."""
    return ROCM_FIT_PARAMS if catalog.rocm_attention(catalog.gpu(gpu), engine) else FIT_PARAMS


def fit_assumptions(
    runs: Sequence[Run],
    gpu: str,
    engine: str,
    params: tuple[str, ...] | None = None,
    predictor: Predictor = predict,
    max_evaluations: int = 80,
) -> AssumptionFit | None:
    """Fit ``params`` (default :func:`params_for`) to the runs on ``gpu`` served by ``engine`` (None without a
    comparable run)."""
    from scipy import optimize, stats  # imported on first use, like the calibration's Student t

    used = _of(runs, gpu, engine)
    if not used:
        return None
    params = params or params_for(gpu, engine)
    base_cfg = used[0].config.assumptions
    x0 = np.array([math.log(getattr(base_cfg, p)) for p in params])
    lo = np.array([math.log(_bounds(p)[0]) for p in params])
    hi = np.array([math.log(_bounds(p)[1]) for p in params])
    x0 = np.clip(x0, lo, hi)
    width = np.maximum((hi - lo) / 2, 1e-6)
    analytical = _pairs(used, {}, predictor)
    if not analytical:
        return None
    keys = list(analytical)

    def values_of(x: np.ndarray) -> dict[str, float]:
        return {p: float(math.exp(v)) for p, v in zip(params, x)}

    def residuals(x: np.ndarray) -> np.ndarray:
        got = _pairs(used, values_of(x), predictor)
        r = [math.log(got[k][0] / got[k][1]) if k in got else 0.0 for k in keys]
        return np.array(r + list(math.sqrt(PRIOR_WEIGHT) * (x - x0) / width))

    # which assumptions the runs move at all (a 5 % step of each, alone)
    r0 = residuals(x0)[: len(keys)]
    moved = []
    for j, p in enumerate(params):
        x = x0.copy()
        x[j] = min(hi[j], x[j] + 0.05) if x[j] + 0.05 <= hi[j] else max(lo[j], x[j] - 0.05)
        if np.max(np.abs(residuals(x)[: len(keys)] - r0)) > SENSITIVITY:
            moved.append(p)
    idx = [params.index(p) for p in moved]
    x_fit = x0.copy()
    if idx:

        def sub(y: np.ndarray) -> np.ndarray:
            x = x0.copy()
            x[idx] = y
            return residuals(x)

        sol = optimize.least_squares(
            sub,
            x0[idx],
            bounds=(lo[idx], hi[idx]),
            method="trf",
            diff_step=1e-3,
            x_scale=width[idx],
            max_nfev=max_evaluations,
        )
        x_fit[idx] = sol.x
    fitted = {k: p for k, (_, p) in _pairs(used, values_of(x_fit), predictor).items()}
    r = [math.log(meas / fitted[k]) for k, (meas, _) in analytical.items() if k in fitted]
    n, k = len(r), len(moved)
    dof = n - k
    if dof >= 2:
        sd = math.sqrt(sum(x * x for x in r) / dof)
        t = float(stats.t.ppf(0.5 + LEVEL / 2, dof))
        half = t * sd * math.sqrt(1 + k / n)
        lo_m, hi_m, basis = math.exp(-half), math.exp(half), "t"
    else:
        sd, lo_m, hi_m, basis = None, HEURISTIC_LOW, HEURISTIC_HIGH, "heuristic"
    return AssumptionFit(
        gpu=gpu,
        engine=engine,
        values=values_of(x_fit),
        base={p: float(getattr(base_cfg, p)) for p in params},
        moved=tuple(moved),
        n=n,
        sd=sd,
        low_mult=lo_m,
        high_mult=hi_m,
        basis=basis,
        rows=tuple(
            FitRow(label=used[i].label, metric=m, measured=meas, analytical=pred, fitted=fitted.get((i, m), pred))
            for (i, m), (meas, pred) in analytical.items()
        ),
    )


class CompareRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    metric: str
    measured: float
    analytical: float
    factor: float  # the factor of the other runs' same metric (1 without one)
    fit: float  # the fit to the other runs


class FitComparison(BaseModel):
    """Leave-one-out: each run predicted from the others by the factor and by the fit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[CompareRow, ...]
    median_abs_error: dict[str, float]  # "analytical", "factor", "fit": median |predicted / measured - 1|
    trust: str  # "fit", "factor" or "analytical"
    why: str

    def as_json(self) -> dict:
        return {
            "median_abs_error": self.median_abs_error,
            "trust": self.trust,
            "why": self.why,
            "runs": [r.model_dump() for r in self.rows],
        }


def compare_fit(
    runs: Sequence[Run],
    gpu: str,
    engine: str,
    params: tuple[str, ...] | None = None,
    predictor: Predictor = predict,
    max_evaluations: int = 40,
) -> FitComparison | None:
    """Predict each run from the others (leave-one-out) with the factor and with the fit; None below 3 runs."""
    used = _of(runs, gpu, engine)
    if len(used) < 3:
        return None
    base = [{m: p for (_, m), (_, p) in _pairs([r], {}, predictor).items()} for r in used]
    rows = []
    for i, held in enumerate(used):
        others = [j for j in range(len(used)) if j != i]
        f = fit_assumptions([used[j] for j in others], gpu, engine, params, predictor, max_evaluations)
        fp = predictor(_moved(held, f.values)) if f is not None else {}
        for m in held.measurements:
            a = base[i].get(m.metric)
            if a is None or m.metric not in fp:
                continue
            rs = [
                math.log(v / base[j][m.metric])
                for j in others
                if (v := used[j].value(m.metric)) is not None and m.metric in base[j]
            ]
            factor = math.exp(interval_multipliers(rs)[0]) if rs else 1.0  # the spec's factor: exp(mean r)
            rows.append(
                CompareRow(
                    label=held.label,
                    metric=m.metric,
                    measured=m.value,
                    analytical=a,
                    factor=a * factor,
                    fit=fp[m.metric],
                )
            )
    if not rows:
        return None
    err = {
        k: statistics.median(abs(getattr(r, k) / r.measured - 1) for r in rows) for k in ("analytical", "factor", "fit")
    }
    trust = min(err, key=lambda k: (err[k], ("fit", "factor", "analytical").index(k)))
    why = (
        f"held out one at a time, the {trust} is off by {err[trust]:.1%} at the median (the factor {err['factor']:.1%}, "
        f"the fit {err['fit']:.1%}, no calibration {err['analytical']:.1%}) over {len(rows)} measurements of "
        f"{len(used)} runs on {gpu} with {engine}"
    )
    return FitComparison(rows=tuple(rows), median_abs_error=err, trust=trust, why=why)
