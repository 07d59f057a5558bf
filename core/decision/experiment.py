"""The next experiment: which measurement could change the decision, and what it costs to make.

The RA-BIT spec, "The next experiment, and diagnostics": some uncertainties change the decision and some do
not. For every uncertain input (the decode, prefill and communication efficiency of each priced GPU kind, the
mean prompt and output length, the arrival rate) this module moves the input across its range, re-runs the
serving optimizer (:func:`core.decision.optimizer.recommend`) at each point, and records whether the recommendation
flips::

    points     low, (low + base) / 2, (base + high) / 2, high      (``points_per_side`` = 2)
    flip       a different GPU kind, layout (GPUs per replica, TP, PP), precision (weights, KV) or replica
               count than the baseline recommendation
    flip chance = flipping points / points
    score      = flip chance / GPU-hours of the measurement that pins the input down   (free: first)

Bounds come from the assumptions registry (:data:`core.base.assumptions.REGISTRY`: ``mbu`` for decode, ``mfu_max``
for prefill, ``comm_bw_eff`` for the fabric) and, for the workload, from the user's own spread (default
+-30 % of the mean prompt length, output length and rate).

Speed: every re-run passes one ``memo`` to the optimizer, which shares its per-GPU-kind screens and its
simulations across re-runs (moving one kind's efficiency re-screens that kind only) and skips the
leftover-budget simulations (they feed alternatives, never the pick). A GPU kind other than today's whose
cheapest estimate stays above today's cost even at its optimistic bound cannot take the pick at any point
(:func:`out_of_reach`): one screen settles its points. The re-runs are Python under the GIL, so threads gain
nothing; they are shared between this process and one forked child pulling tasks from a shared counter
(``bench/next_experiment.py`` measures both ways).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core import catalog
from core.base import REGISTRY
from core.catalog import Price
from core.config import RabitConfig
from core.base import WorkBudget, next_budget
from core.decision.goal import Candidate, Constraints, Pick, ServingGoal
from core.decision.optimizer import Recommendation, recommend, screen
from core.decision.training_optimizer import TrainingOption, TrainingRecommendation, recommend_training
from core.catalog import gpu_price

InputKind = Literal["decode", "prefill", "comm", "prompt", "output", "rate", "train"]

#: Which assumption each per-GPU input moves.
ASSUMPTION_OF: dict[str, str] = {"decode": "mbu", "prefill": "mfu_max", "comm": "comm_bw_eff"}

#: Start-up of a serving benchmark before its first measured request [s]: download cache assumed warm,
#: weights loaded from local NVMe at ~2 GB/s per GPU, CUDA-graph capture and warm-up (vLLM logs 1-3 min of
#: graph capture and profiling for 70B models; estimate).
BENCH_SETUP_FIXED_S = 180.0
WEIGHT_LOAD_BYTES_PER_S = 2e9
#: Requests in a serving benchmark: enough for a p99 (at least 100 samples; the spec) several times over.
BENCH_MIN_PROMPTS = 500
#: Measured span of a serving benchmark at the analysis's per-replica rate [s] (a steady state of 10 min).
BENCH_STEADY_S = 600.0
#: An nccl-tests sweep from 8 B to 1 GiB on one node, with start-up: about 5 minutes (estimate).
NCCL_SWEEP_S = 300.0
#: Prompts in a prefill-only ``vllm bench throughput`` run.
PREFILL_PROMPTS = 1000


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UncertainInput(_F):
    """One input the decision rests on, with the range it may take."""

    key: str  # "decode:h100-sxm", "rate", ...
    kind: InputKind
    gpu: str | None = None
    label: str
    base: float
    low: float  # the pessimistic end (slower, longer, busier)
    high: float
    unit: str
    source: str


class Point(_F):
    """One re-run: the input at ``value`` and the recommendation it gives."""

    value: float
    choice: str  # the pick's label, or "nothing meets the target"
    flipped: bool
    changes: tuple[str, ...]  # what differs from the baseline: "GPU kind h200 -> h100-sxm", ...
    cost_per_hour: float | None
    rerun: bool = True  # False: settled by the out-of-reach check (:func:`out_of_reach`), not re-run


class Experiment(_F):
    """The measurement that pins one input down, and how likely it is to change the decision."""

    input: UncertainInput
    points: tuple[Point, ...]
    flip_chance: float
    flips_to: str  # the most frequent alternative choice ("" when nothing flips)
    measurement: str  # what to run, in words
    gpu: str | None
    gpus: int  # GPUs the measurement holds
    duration_s: float
    gpu_hours: float
    cost_usd: float
    command: str
    then: str  # what to do with the output
    note: str = ""  # why an input cannot flip the decision, when that was shown without re-running it

    @property
    def score(self) -> float:
        """Flip chance per GPU-hour (a free measurement that can flip ranks first)."""
        if self.flip_chance <= 0:
            return 0.0
        return math.inf if self.gpu_hours <= 0 else self.flip_chance / self.gpu_hours


class NextExperimentSpec(_F):
    """The analysis to question: the serving goal and constraints, and the workload's spread."""

    goal: ServingGoal
    constraints: Constraints = Constraints()
    prompt_spread_frac: float = Field(0.3, ge=0, lt=1)
    output_spread_frac: float = Field(0.3, ge=0, lt=1)
    rate_spread_frac: float = Field(0.3, ge=0, lt=1)
    points_per_side: int = Field(2, ge=1, le=5)


class NextExperiment(_F):
    spec: NextExperimentSpec
    baseline: Recommendation
    experiments: tuple[Experiment, ...]  # inputs that can flip the decision, best score first
    stable: tuple[Experiment, ...]  # "not worth measuring now": no point of their range flips the decision
    reruns: int

    @property
    def top(self) -> Experiment | None:
        return self.experiments[0] if self.experiments else None


# --- inputs and points ------------------------------------------------------------------------------------


def uncertain_inputs(spec: NextExperimentSpec, baseline: Recommendation) -> tuple[UncertainInput, ...]:
    """The inputs to move: three per priced GPU kind the optimizer considered, then the workload."""
    goal = spec.goal
    kinds = sorted({c.gpu for c in baseline.candidates if c.usd_per_gpu_hour is not None})
    out: list[UncertainInput] = []
    for kind in ("decode", "prefill", "comm"):
        name = ASSUMPTION_OF[kind]
        info = REGISTRY[name]
        what = {
            "decode": "Decode efficiency (memory-bandwidth utilisation)",
            "prefill": "Prefill efficiency (compute-efficiency ceiling)",
            "comm": "Communication efficiency (collective bus bandwidth / link peak)",
        }[kind]
        for g in kinds:
            out.append(
                UncertainInput(
                    key=f"{kind}:{g}",
                    kind=kind,
                    gpu=g,
                    label=f"{what} on {g}",
                    base=getattr(goal.assumptions_for(g), name),
                    low=info.low,
                    high=info.high,
                    unit=info.unit,
                    source=info.source,
                )
            )
    i_mean, o_mean = goal.workload.mean_lengths()
    if goal.workload.trace is None:
        for kind, mean, frac, label in (
            ("prompt", i_mean, spec.prompt_spread_frac, "Mean prompt length"),
            ("output", o_mean, spec.output_spread_frac, "Mean output length"),
        ):
            out.append(
                UncertainInput(
                    key=kind,
                    kind=kind,
                    label=label,
                    base=mean,
                    low=mean * (1 + frac),  # type: ignore[arg-type]
                    high=max(1.0, mean * (1 - frac)),
                    unit="tokens",
                    source=f"your spread: +-{frac:.0%} of the analysis's mean",
                )
            )
    r, frac = goal.rate_per_s, spec.rate_spread_frac
    out.append(
        UncertainInput(
            key="rate",
            kind="rate",
            label="Arrival rate",
            base=r,
            low=r * (1 + frac),
            high=r * (1 - frac),
            unit="requests/s",
            source=f"your spread: +-{frac:.0%} of the analysis's rate",
        )
    )
    return tuple(out)


def points(inp: UncertainInput, per_side: int = 2) -> tuple[float, ...]:
    """Values across the range, base excluded: ``per_side`` evenly spaced on each side, the bounds included.

    Mean prompt length 1000, +-30 %, two per side: (1300, 1150, 850, 700).
    """
    out: list[float] = []
    for end in (inp.low, inp.high):
        for k in range(per_side, 0, -1):
            v = inp.base + (end - inp.base) * k / per_side
            if not math.isclose(v, inp.base) and v not in out:
                out.append(v)
    return tuple(out)


def moved_goal(goal: ServingGoal, inp: UncertainInput, value: float) -> ServingGoal:
    """``goal`` with one input moved to ``value``."""
    if inp.kind in ASSUMPTION_OF:
        assert inp.gpu is not None
        moved = goal.assumptions_for(inp.gpu).with_(**{ASSUMPTION_OF[inp.kind]: value})
        rest = tuple((g, a) for g, a in goal.gpu_assumptions if g != inp.gpu)
        return goal.model_copy(update={"gpu_assumptions": rest + ((inp.gpu, moved),)})
    if inp.kind == "rate":
        return goal.model_copy(update={"workload": goal.workload.with_(rate_per_s=value)})
    w = goal.workload
    field = "input" if inp.kind == "prompt" else "output"
    lengths = getattr(w, field).model_copy(update={"mean": max(1.0, value)})
    return goal.model_copy(update={"workload": w.with_(**{field: lengths})})


# --- the decision ---------------------------------------------------------------------------------------

NOTHING = "nothing meets the target"


def _choice(rec: Recommendation) -> Pick | None:
    return rec.recommendation


def changes(base: Pick | None, new: Pick | None) -> tuple[str, ...]:
    """What differs between two picks, in the order GPU kind, layout, precision, replicas."""
    if base is None and new is None:
        return ()
    if base is None:
        return (f"a configuration now meets the target: {new.label}",)  # type: ignore[union-attr]
    if new is None:
        return ("nothing meets the target any more",)
    out = []
    if new.gpu != base.gpu:
        out.append(f"GPU kind {base.gpu} -> {new.gpu}")
    if (new.gpus_per_replica, new.tp, new.pp) != (base.gpus_per_replica, base.tp, base.pp):
        out.append(
            f"layout {base.gpus_per_replica} GPUs TP {base.tp} PP {base.pp} -> "
            f"{new.gpus_per_replica} GPUs TP {new.tp} PP {new.pp}"
        )
    if (new.weights, new.kv_dtype) != (base.weights, base.kv_dtype):
        out.append(f"precision {base.weights}/{base.kv_dtype} KV -> {new.weights}/{new.kv_dtype} KV")
    if new.replicas != base.replicas:
        out.append(f"replicas {base.replicas} -> {new.replicas}")
    return tuple(out)


# --- measurements --------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def hf_repo(model_slug: str) -> str:
    """The Hugging Face repository of a catalog model (its config.json's ``_name_or_path``)."""
    path = catalog.CATALOG_DIR / "models" / f"{model_slug}.json"
    try:
        return str(json.loads(path.read_text()).get("_name_or_path") or model_slug)
    except (OSError, ValueError):
        return model_slug


def _model_arg(goal: ServingGoal) -> str:
    if goal.custom_model is not None:
        return f"<path to {getattr(goal.custom_model, 'slug', 'your model')}>"
    return hf_repo(goal.model)


def _replica_on(
    gpu: str, baseline: Recommendation, pts: tuple[Point, ...], flips: list[Pick | None]
) -> tuple[int, int, int, str, str, int]:
    """(GPUs, TP, PP, weights, KV, replicas) of the replica to benchmark on ``gpu``: the baseline's if it runs
    there, else the one a flip leads to there, else that kind's cheapest screened candidate."""
    for p in [baseline.recommendation, *flips]:
        if p is not None and p.gpu == gpu:
            return p.gpus_per_replica, p.tp, p.pp, p.weights, p.kv_dtype, p.replicas
    cands = [c for c in baseline.candidates if c.gpu == gpu and c.cost_per_hour is not None and not c.pruned]
    cands = cands or [c for c in baseline.candidates if c.gpu == gpu and c.batch_1_ttft_s is not None]
    if cands:
        c: Candidate = min(cands, key=lambda c: (c.cost_per_hour or math.inf, c.gpus_per_replica))
        return c.gpus_per_replica, c.tp, c.pp, c.weights, c.kv_dtype, c.replicas or 1
    g = catalog.gpu(gpu)
    return g.gpus_per_node, g.gpus_per_node, 1, "bf16", "bf16", 1


def _quant_flags(weights: str, kv: str) -> str:
    flags = []
    if weights == "fp8":
        flags.append("--quantization fp8")
    if kv == "fp8":
        flags.append("--kv-cache-dtype fp8")
    return (" " + " ".join(flags)) if flags else ""


def _checkpoint_note(weights: str) -> str:
    """A shell comment naming the checkpoint a 4-bit format needs (vLLM reads them pre-quantized)."""
    return {
        "int4": "  # use an INT4 (AWQ or GPTQ) checkpoint of this model",
        "nvfp4": "  # use an NVFP4 checkpoint of this model (e.g. from NVIDIA Model Optimizer)",
    }.get(weights, "")


def measurement(
    inp: UncertainInput,
    spec: NextExperimentSpec,
    baseline: Recommendation,
    pts: tuple[Point, ...],
    flips: list[Pick | None],
    prices: tuple[Price, ...],
) -> dict:
    """The benchmark that pins ``inp`` down: command, GPUs held, duration, GPU-hours and cost."""
    goal, cons = spec.goal, spec.constraints
    i_mean, o_mean = goal.workload.mean_lengths()
    I, O = max(1, round(i_mean)), max(1, round(o_mean))
    model = _model_arg(goal)
    then = (
        "Upload the result JSON on the Calibration page (it imports vllm bench serve --save-result and "
        "vllm bench throughput --output-json): the measured figure replaces the assumption and the "
        "recommendation is re-run."
    )
    if inp.kind in ("prompt", "output", "rate"):
        metric = {
            "prompt": ("vllm:request_prompt_tokens", "mean prompt tokens"),
            "output": ("vllm:request_generation_tokens", "mean output tokens"),
            "rate": ("vllm:request_success_total", "requests/s"),
        }[inp.kind]
        if inp.kind == "rate":
            q = "sum(rate(vllm:request_success_total[1h]))"
        else:
            q = f"sum(rate({metric[0]}_sum[1h])) / sum(rate({metric[0]}_count[1h]))"
        cmd = (
            f"curl -sG http://PROMETHEUS:9090/api/v1/query --data-urlencode {shlex.quote('query=' + q)}"
            f"  # {metric[1]} over the last hour of production traffic (or count it in your request logs)"
        )
        return {
            "measurement": f"read the {metric[1]} from production traffic or request logs (no GPU time)",
            "gpu": None,
            "gpus": 0,
            "duration_s": 0.0,
            "gpu_hours": 0.0,
            "cost_usd": 0.0,
            "command": cmd,
            "then": "Enter the measured value as the analysis's input and re-run.",
        }
    assert inp.gpu is not None
    n, tp, pp, w, kv, replicas = _replica_on(inp.gpu, baseline, pts, flips)
    price = gpu_price(inp.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    usd = price.usd_per_gpu_hour if price else 0.0
    arch = goal.custom_model if goal.custom_model is not None else catalog.model(goal.model)
    from core.config import WEIGHT_BYTES

    load_s = BENCH_SETUP_FIXED_S + arch.total_params() * WEIGHT_BYTES.get(w, 2.0) / n / WEIGHT_LOAD_BYTES_PER_S
    serve = (
        f"vllm serve {model} --tensor-parallel-size {tp}"
        + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
        + _quant_flags(w, kv)
        + f" --max-model-len {I + O + 64} &{_checkpoint_note(w)}"
    )
    if inp.kind == "decode":
        rate = goal.rate_per_s / max(1, replicas)
        prompts = max(BENCH_MIN_PROMPTS, math.ceil(rate * BENCH_STEADY_S))
        dur = load_s + prompts / rate
        cmd = (
            f"{serve}\nuntil curl -sf localhost:8000/health; do sleep 10; done  # the server is up\n"
            f"vllm bench serve --model {model} --dataset-name random --random-input-len {I} "
            f"--random-output-len {O} --request-rate {rate:.4g} --num-prompts {prompts} --save-result "
            f"--result-filename decode-{inp.gpu}-tp{tp}.json"
        )
        what = (
            f"vllm bench serve on one replica of {n} x {inp.gpu} (TP {tp}{f' PP {pp}' if pp > 1 else ''}) "
            f"at the analysis's per-replica rate: TPOT/ITL pins the decode efficiency"
        )
    elif inp.kind == "prefill":
        dur = load_s + 120.0
        cmd = (
            f"vllm bench throughput --model {model} --tensor-parallel-size {tp}"
            + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
            + _quant_flags(w, kv)
            + f" --input-len {I} --output-len 1 --num-prompts {PREFILL_PROMPTS} "
            f"--output-json prefill-{inp.gpu}-tp{tp}.json{_checkpoint_note(w)}"
        )
        what = (
            f"vllm bench throughput with one output token on {n} x {inp.gpu} (TP {tp}): prompt tokens/s "
            "pins the prefill efficiency"
        )
    else:  # comm
        n = tp if tp >= 2 else max(2, min(8, catalog.gpu(inp.gpu).scale_up_domain))
        dur = NCCL_SWEEP_S
        tool = "rccl-tests" if catalog.gpu(inp.gpu).vendor == "amd" else "nccl-tests"
        cmd = (
            f"./build/all_reduce_perf -b 8 -e 1G -f 2 -g {n}  # {tool}, one node of {inp.gpu}; "
            "busbw at 1 GiB / link peak pins the communication efficiency"
        )
        what = f"{tool} all_reduce_perf on {n} x {inp.gpu} (the tensor-parallel group's fabric)"
        then = "Enter busbw / link peak as the communication efficiency (assumption comm_bw_eff) and re-run."
    gpu_hours = n * dur / 3600.0
    return {
        "measurement": what,
        "gpu": inp.gpu,
        "gpus": n,
        "duration_s": dur,
        "gpu_hours": gpu_hours,
        "cost_usd": gpu_hours * usd,
        "command": cmd,
        "then": then,
    }


def training_step_command(model: str, gpus: int, tp: int, pp: int, seq_len: int, micro_batch: int = 1) -> str:
    """A short training-step benchmark for MFU (Megatron-LM, 20 iterations on mock data)."""
    return (
        f"torchrun --nproc-per-node {gpus} pretrain_gpt.py --tensor-model-parallel-size {tp} "
        f"--pipeline-model-parallel-size {pp} --seq-length {seq_len} --micro-batch-size {micro_batch} "
        f"--train-iters 20 --mock-data --bf16 --log-throughput  # model {model}; MFU from the logged TFLOP/s"
    )


# --- the analysis ------------------------------------------------------------------------------------

Progress = Callable[[int, int, str], None]

#: A forked child silent this long is given up (it reports every re-run; one takes seconds) [s].
CHILD_SILENCE_S = 120.0

#: A task: one uncertain input and the values to evaluate (one value for a workload point, all of a per-GPU
#: input's points at once: those are cheap, and most end at the out-of-reach check).
_Task = tuple[int, tuple[float, ...]]
_Result = tuple[tuple[Point, ...], list, str]


def out_of_reach(
    spec: NextExperimentSpec,
    prices: tuple[Price, ...],
    base_pick: Pick | None,
    inp: UncertainInput,
    budget: WorkBudget | None = None,
) -> str:
    """Why no point of a per-GPU input's range can flip the decision without re-running it, or "".

    For a GPU kind other than today's, the optimizer simulates that kind's candidates only while their
    closed-form cost is below the cheapest verified cost (branch and bound, :func:`core.decision.optimizer.recommend`),
    and every candidate's estimate falls as the kind's efficiency rises. So if even at the optimistic bound the
    kind's cheapest estimate is above today's verified cost, none of its candidates is simulated at any point of
    the range and today's pick stands: one closed-form screen settles all the points.
    """
    if base_pick is None or inp.gpu is None or inp.gpu == base_pick.gpu:
        return ""
    one = spec.constraints.model_copy(update={"gpus_allowed": (inp.gpu,)})
    cands = [
        c
        for c in screen(moved_goal(spec.goal, inp, inp.high), one, prices, budget)
        if not c.pruned and c.cost_per_hour is not None
    ]
    if not cands:
        return (
            f"no {inp.gpu} configuration survives the screen even at the optimistic bound "
            f"({inp.high:g}): the choice cannot move to {inp.gpu}"
        )
    cheapest = min(c.cost_per_hour or math.inf for c in cands)
    if cheapest > base_pick.cost_per_hour:
        return (
            f"even at the optimistic bound ({inp.high:g}) the cheapest {inp.gpu} configuration is estimated "
            f"at ${cheapest:,.2f}/h, above today's ${base_pick.cost_per_hour:,.2f}/h: no point of the range "
            "can flip the decision"
        )
    return ""


def _run_task(
    spec: NextExperimentSpec,
    prices: tuple[Price, ...],
    memo: dict,
    base_pick: Pick | None,
    inp: UncertainInput,
    values: tuple[float, ...],
    tick: Callable[[str], None],
    budget: WorkBudget | None = None,
) -> _Result:
    note = out_of_reach(spec, prices, base_pick, inp, budget) if len(values) > 1 else ""
    pts: list[Point] = []
    flips: list[Pick | None] = []
    for v in values:
        tick(f"{inp.label} = {v:.4g}")
        if note:
            pts.append(
                Point(
                    value=v,
                    choice=base_pick.label if base_pick else NOTHING,
                    flipped=False,
                    changes=(),
                    cost_per_hour=base_pick.cost_per_hour if base_pick else None,
                    rerun=False,
                )
            )
            continue
        rec = recommend(
            moved_goal(spec.goal, inp, v), spec.constraints, prices, memo=memo, alternatives=False, budget=budget
        )
        pick = _choice(rec)
        diff = changes(base_pick, pick)
        pts.append(
            Point(
                value=v,
                choice=pick.label if pick else NOTHING,
                flipped=bool(diff),
                changes=diff,
                cost_per_hour=pick.cost_per_hour if pick else None,
            )
        )
        if diff:
            flips.append(pick)
    return tuple(pts), flips, note


class _Counter:
    """The next task's index when no child shares it."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = None

    def get_lock(self):
        import contextlib

        return contextlib.nullcontext()


def _take(counter, n: int) -> int | None:
    with counter.get_lock():
        i = counter.value
        counter.value += 1
    return i if i < n else None


def _child(conn, counter, tasks, spec, prices, memo, base_pick, inputs, budget=None) -> None:  # pragma: no cover
    try:
        while (i := _take(counter, len(tasks))) is not None:
            k, values = tasks[i]
            res = _run_task(
                spec, prices, memo, base_pick, inputs[k], values, lambda lab: conn.send(("tick", lab, None)), budget
            )
            conn.send(("result", i, res))
        conn.send(("done", None, None))
    except BaseException as exc:  # noqa: BLE001 - the parent runs whatever is left
        try:
            conn.send(("error", None, repr(exc)))
        except OSError:
            pass
    finally:
        conn.close()


def _tasks(spec: NextExperimentSpec, inputs: tuple[UncertainInput, ...], base_pick: Pick | None) -> list[_Task]:
    """Heaviest first (each workload point re-screens every kind and re-simulates; today's kind re-simulates its
    candidates; other kinds mostly end at the out-of-reach check), so two processes finish together."""

    def order(k: int) -> int:
        gpu = inputs[k].gpu
        return 0 if gpu is None else 1 if base_pick is not None and gpu == base_pick.gpu else 2

    out: list[_Task] = []
    for k in sorted(range(len(inputs)), key=order):
        values = points(inputs[k], spec.points_per_side)
        if inputs[k].gpu is None:
            out.extend((k, (v,)) for v in values)
        elif values:
            out.append((k, values))
    return out


def next_experiment(
    spec: NextExperimentSpec,
    prices: tuple[Price, ...] | None = None,
    progress: Progress | None = None,
    workers: int = 2,
    budget: WorkBudget | None = None,
) -> NextExperiment:
    """Move every uncertain input across its range, re-run the optimizer, rank the measurements.

    ``progress``: optional ``(done, total, label)`` callable (called, never stored). ``workers``: 2 shares the
    tasks between this process and one forked child (each pulls the next task from a shared counter and keeps
    the baseline's shared screens and simulations); 1, or a platform without ``fork``, runs them here. Both
    give the same answer. ``budget``: the work budget of the whole search, baseline and every re-run in both
    processes (:func:`core.base.limits.next_budget` when None); past it, :class:`core.base.limits.BudgetExceeded`.
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else next_budget()
    memo: dict = {}
    baseline = recommend(spec.goal, spec.constraints, prices, memo=memo, alternatives=False, budget=wb)
    base_pick = _choice(baseline)
    inputs = uncertain_inputs(spec, baseline)
    tasks = _tasks(spec, inputs, base_pick)
    total = sum(len(v) for _, v in tasks)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        if progress:
            progress(done, total, label)
        done += 1

    results: dict[int, _Result] = {}
    counter: Any = _Counter()
    conn = proc = None
    if workers > 1 and len(tasks) > 1:
        import multiprocessing as mp

        try:
            ctx = mp.get_context("fork")
            counter = ctx.Value("i", 0)
            conn, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(child_end, counter, tasks, spec, prices, memo, base_pick, inputs, wb),
                daemon=True,
            )
            proc.start()
            child_end.close()
        except (ValueError, OSError):  # no fork here, or no process to spare: run everything in this one
            counter, conn, proc = _Counter(), None, None

    def drain(block: bool) -> None:
        """Take the child's messages (all of them when ``block``). A child that dies, or says nothing for
        CHILD_SILENCE_S, is given up: the tasks it had not finished are run here afterwards."""
        nonlocal conn
        quiet_since = time.monotonic()
        while conn is not None:
            if not conn.poll(1.0 if block else 0):
                if not block:
                    return
                if not proc.is_alive() or time.monotonic() - quiet_since > CHILD_SILENCE_S:  # type: ignore[union-attr]
                    conn.close()
                    conn = None
                continue
            quiet_since = time.monotonic()
            try:
                kind, i, payload = conn.recv()
            except (EOFError, OSError):
                kind, i, payload = "error", None, "the worker process ended early"
            if kind == "tick":
                tick(i)
            elif kind == "result":
                results[i] = payload
            else:  # done or error: the child is finished
                conn.close()
                conn = None

    try:
        while (i := _take(counter, len(tasks))) is not None:
            k, values = tasks[i]
            results[i] = _run_task(spec, prices, memo, base_pick, inputs[k], values, tick, wb)
            drain(block=False)
        drain(block=True)
    finally:  # a search stopped on its budget (or by any error) leaves no child running
        if proc is not None:
            proc.join(timeout=0 if proc.exitcode is None and conn is not None else 5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        if conn is not None:
            conn.close()
            conn = None
    for i, (k, values) in enumerate(tasks):  # anything the child could not finish
        if i not in results:
            results[i] = _run_task(spec, prices, memo, base_pick, inputs[k], values, tick, wb)
    if progress:
        progress(total, total, "done")

    per_input: dict[int, list] = {k: [[], [], ""] for k in range(len(inputs))}
    for i, (k, _) in enumerate(tasks):
        pts, flips, note = results[i]
        per_input[k][0].extend(pts)
        per_input[k][1].extend(flips)
        per_input[k][2] = per_input[k][2] or note
    experiments = []
    for k, inp in enumerate(inputs):
        pts_l, flips, note = per_input[k]
        pts = tuple(sorted(pts_l, key=lambda p: points(inp, spec.points_per_side).index(p.value)))
        chance = sum(p.flipped for p in pts) / len(pts) if pts else 0.0
        labels = [p.choice for p in pts if p.flipped]
        flips_to = max(labels, key=labels.count) if labels else ""
        if not pts:
            note = "no spread given: the value is taken as known"
        m = measurement(inp, spec, baseline, pts, flips, prices)
        experiments.append(Experiment(input=inp, points=pts, flip_chance=chance, flips_to=flips_to, note=note, **m))
    ranked = sorted(
        (e for e in experiments if e.flip_chance > 0), key=lambda e: (-e.score, -e.flip_chance, e.cost_usd, e.input.key)
    )
    stable = tuple(e for e in experiments if e.flip_chance == 0)
    return NextExperiment(spec=spec, baseline=baseline, experiments=tuple(ranked), stable=stable, reruns=total)


def outcomes(e: Experiment) -> tuple[str, ...]:
    """The decision under each outcome of one experiment, in words, one line per point."""
    inp = e.input
    out = []
    for p in sorted(e.points, key=lambda p: p.value):
        rel = (p.value / inp.base - 1) if inp.base else 0.0
        if inp.gpu is not None:
            how = f"{abs(rel):.0%} {'lower' if rel < 0 else 'higher'} than assumed ({p.value:.3g} vs {inp.base:.3g})"
        else:
            how = f"{p.value:.4g} {inp.unit} ({rel:+.0%})"
        cost = f" (${p.cost_per_hour:,.2f}/h)" if p.flipped and p.cost_per_hour is not None else ""
        verdict = f"the choice becomes {p.choice}{cost}" if p.flipped else "the choice stays"
        out.append(f"If {inp.label[0].lower() + inp.label[1:]} is {how}, {verdict}.")
    return tuple(out)


# --- training runs ---------------------------------------------------------------------------------------

#: A short training-step benchmark on one node: start-up, then 20 iterations (estimate).
TRAIN_BENCH_S = 1800.0
TRAIN_ASSUMPTION_OF: dict[str, str] = {"train": "mfu_train", "comm": "comm_bw_eff"}


class TrainingExperimentSpec(_F):
    """A training run to question: the shared config (phase train), its deadline and the constraints."""

    config: RabitConfig
    deadline_s: float = Field(gt=0)
    constraints: Constraints = Constraints()
    points_per_side: int = Field(2, ge=1, le=5)


class TrainingNextExperiment(_F):
    spec: TrainingExperimentSpec
    baseline: TrainingRecommendation
    experiments: tuple[Experiment, ...]
    stable: tuple[Experiment, ...]
    reruns: int

    @property
    def top(self) -> Experiment | None:
        return self.experiments[0] if self.experiments else None


def _train_changes(base, new) -> tuple[str, ...]:
    if base is None and new is None:
        return ()
    if base is None:
        return (f"a run now meets the deadline: {new.gpus:,} x {new.gpu} ({new.layout})",)
    if new is None:
        return ("no priced run meets the deadline any more",)
    out = []
    if new.gpu != base.gpu:
        out.append(f"GPU kind {base.gpu} -> {new.gpu}")
    if new.gpus != base.gpus:
        out.append(f"GPUs {base.gpus:,} -> {new.gpus:,}")
    if new.layout != base.layout:
        out.append(f"layout {base.layout} -> {new.layout}")
    return tuple(out)


def _train_label(o) -> str:
    return f"{o.gpus:,} x {o.gpu} ({o.layout})" if o is not None else "no priced run meets the deadline"


def _pick_option(options: list):
    """The optimizer's rule (:func:`core.decision.optimizer.recommend_training`): the cheapest option that meets."""
    meeting = [o for o in options if o is not None and o.meets_deadline and o.cost_usd is not None]
    return min(meeting, key=lambda o: o.cost_usd) if meeting else None


def next_training_experiment(
    spec: TrainingExperimentSpec,
    prices: tuple[Price, ...] | None = None,
    progress: Progress | None = None,
    budget: WorkBudget | None = None,
) -> TrainingNextExperiment:
    """Which measurement could change the training recommendation: the training efficiency (``mfu_train``) and
    the communication efficiency of every priced GPU kind, each across its registry range.

    Each kind's option depends on that kind's assumptions only, so a re-run re-plans one kind and the pick is
    the cheapest option that meets the deadline over all kinds. A kind other than today's that misses the
    deadline or costs more than today's pick even at its optimistic bound cannot take it at any point.
    ``budget``: the work budget of the whole search (:func:`core.base.limits.next_budget` when None).
    """
    prices = prices if prices is not None else catalog.prices()
    wb = budget if budget is not None else next_budget()
    cfg, cons = spec.config, spec.constraints
    baseline = recommend_training(cfg, spec.deadline_s, cons, prices, budget=wb)
    base = baseline.recommendation
    by_kind = {o.gpu: o for o in baseline.options}

    def option(kind: str, name: str, value: float) -> TrainingOption | None:
        moved = cfg.with_(assumptions=cfg.assumptions.with_(**{name: value}))
        one = cons.model_copy(update={"gpus_allowed": (kind,)})
        r = recommend_training(moved, spec.deadline_s, one, prices, budget=wb)
        return r.options[0] if r.options else None

    inputs: list[UncertainInput] = []
    for kind in ("train", "comm"):
        name = TRAIN_ASSUMPTION_OF[kind]
        info = REGISTRY[name]
        what = {
            "train": "Training efficiency (MFU ceiling)",
            "comm": "Communication efficiency (collective bus bandwidth / link peak)",
        }[kind]
        for g in sorted(by_kind):
            inputs.append(
                UncertainInput(
                    key=f"{kind}:{g}",
                    kind=kind,
                    gpu=g,  # type: ignore[arg-type]
                    label=f"{what} on {g}",
                    base=getattr(cfg.assumptions, name),
                    low=info.low,
                    high=info.high,
                    unit=info.unit,
                    source=info.source,
                )
            )
    plan = [(inp, points(inp, spec.points_per_side)) for inp in inputs]
    total = sum(len(v) for _, v in plan)
    done = 0
    experiments: list[Experiment] = []
    arch = cfg.custom_model if cfg.custom_model is not None else catalog.model(cfg.model)
    for inp, values in plan:
        name = TRAIN_ASSUMPTION_OF[inp.kind]
        gpu = inp.gpu or ""
        note = ""
        if base is not None and inp.gpu != base.gpu:
            best = option(gpu, name, inp.high)
            if best is None or not best.meets_deadline or (best.cost_usd or math.inf) > (base.cost_usd or 0):
                note = (
                    f"even at the optimistic bound ({inp.high:g}) {inp.gpu} "
                    + (
                        "misses the deadline"
                        if best is None or not best.meets_deadline
                        else f"costs ${best.cost_usd:,.0f}, above today's ${base.cost_usd:,.0f}"
                    )
                    + ": no point of the range can flip the decision"
                )
        pts: list[Point] = []
        for v in values:
            if progress:
                progress(done, total, f"{inp.label} = {v:.4g}")
            done += 1
            if note:
                pts.append(
                    Point(
                        value=v, choice=_train_label(base), flipped=False, changes=(), cost_per_hour=None, rerun=False
                    )
                )
                continue
            new = _pick_option([option(gpu, name, v) if k == gpu else o for k, o in by_kind.items()])
            diff = _train_changes(base, new)
            pts.append(Point(value=v, choice=_train_label(new), flipped=bool(diff), changes=diff, cost_per_hour=None))
        chance = sum(p.flipped for p in pts) / len(pts) if pts else 0.0
        labels = [p.choice for p in pts if p.flipped]
        spec_g = catalog.gpu(gpu)
        node = spec_g.gpus_per_node
        price = gpu_price(gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
        usd = price.usd_per_gpu_hour if price else 0.0
        if inp.key.startswith("train:"):
            tp = min(node, 8)
            cmd = training_step_command(
                arch.slug if cfg.custom_model is not None else hf_repo(cfg.model),
                node,
                tp,
                1,
                cfg.seq_len,
                cfg.micro_batch,
            )
            dur, what = (
                TRAIN_BENCH_S,
                (
                    f"a short training-step benchmark on one node of {node} x {inp.gpu}: the "
                    "logged TFLOP/s per GPU over peak pins the MFU"
                ),
            )
            then = "Enter the measured MFU as the training efficiency (assumption mfu_train) and re-run."
        else:
            tool = "rccl-tests" if spec_g.vendor == "amd" else "nccl-tests"
            cmd = (
                f"./build/all_reduce_perf -b 8 -e 1G -f 2 -g {node}  # {tool}, one node of {inp.gpu}; busbw at "
                "1 GiB / link peak pins the communication efficiency"
            )
            dur, what = NCCL_SWEEP_S, f"{tool} all_reduce_perf on one node of {node} x {inp.gpu}"
            then = "Enter busbw / link peak as the communication efficiency (assumption comm_bw_eff) and re-run."
        gh = node * dur / 3600.0
        experiments.append(
            Experiment(
                input=inp,
                points=tuple(pts),
                flip_chance=chance,
                flips_to=max(labels, key=labels.count) if labels else "",
                measurement=what,
                gpu=inp.gpu,
                gpus=node,
                duration_s=dur,
                gpu_hours=gh,
                cost_usd=gh * usd,
                command=cmd,
                then=then,
                note=note,
            )
        )
    if progress:
        progress(total, total, "done")
    ranked = sorted(
        (e for e in experiments if e.flip_chance > 0), key=lambda e: (-e.score, -e.flip_chance, e.cost_usd, e.input.key)
    )
    return TrainingNextExperiment(
        spec=spec,
        baseline=baseline,
        experiments=tuple(ranked),
        stable=tuple(e for e in experiments if e.flip_chance == 0),
        reruns=total,
    )
