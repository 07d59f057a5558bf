"""The next experiment: which measurement could change the decision, and what it costs to make.

The RA-BIT spec, "The next experiment, and diagnostics": some uncertainties change the decision and some do
not. For every uncertain input (the decode, prefill and communication efficiency of each priced GPU kind, the
mean prompt and output length, the arrival rate) this module moves the input across its range, re-runs the
serving optimizer (:func:`core.optimizer.recommend`) at each point, and records whether the recommendation
flips::

    points     low, (low + base) / 2, (base + high) / 2, high      (``points_per_side`` = 2)
    flip       a different GPU kind, layout (GPUs per replica, TP, PP), precision (weights, KV) or replica
               count than the baseline recommendation
    flip chance = flipping points / points
    score      = flip chance / GPU-hours of the measurement that pins the input down   (free: first)

Bounds come from the assumptions registry (:data:`core.assumptions.REGISTRY`: ``mbu`` for decode, ``mfu_max``
for prefill, ``comm_bw_eff`` for the fabric) and, for the workload, from the user's own spread (default
+-30 % of the mean prompt length, output length and rate).

Speed: every re-run passes one ``memo`` to the optimizer, which shares its per-GPU-kind screens and its
simulations across re-runs, so moving one GPU kind's efficiency re-screens that kind only, and skips the
leftover-budget simulations (they feed alternatives, never the pick). Re-runs are then tens of milliseconds
of Python under the GIL: a thread pool gains nothing on two cores and a process pool would lose the shared
memo and pay its start-up (both measured with ``bench/next_experiment.py``), so they run in one thread.
"""

from __future__ import annotations

import json
import math
import shlex
from functools import lru_cache
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from core import catalog
from core.assumptions import REGISTRY
from core.catalog import Price
from core.optimizer import Candidate, Constraints, Pick, Recommendation, ServingGoal, recommend
from core.pricing import gpu_price

InputKind = Literal["decode", "prefill", "comm", "prompt", "output", "rate"]

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
        what = {"decode": "Decode efficiency (memory-bandwidth utilisation)",
                "prefill": "Prefill efficiency (compute-efficiency ceiling)",
                "comm": "Communication efficiency (collective bus bandwidth / link peak)"}[kind]
        for g in kinds:
            out.append(UncertainInput(key=f"{kind}:{g}", kind=kind, gpu=g, label=f"{what} on {g}",
                                      base=getattr(goal.assumptions_for(g), name), low=info.low, high=info.high,
                                      unit=info.unit, source=info.source))
    i_mean, o_mean = goal.workload.mean_lengths()
    if goal.workload.trace is None:
        for kind, mean, frac, label in (("prompt", i_mean, spec.prompt_spread_frac, "Mean prompt length"),
                                        ("output", o_mean, spec.output_spread_frac, "Mean output length")):
            out.append(UncertainInput(key=kind, kind=kind, label=label, base=mean, low=mean * (1 + frac),
                                      high=max(1.0, mean * (1 - frac)), unit="tokens",
                                      source=f"your spread: +-{frac:.0%} of the analysis's mean"))
    r, frac = goal.rate_per_s, spec.rate_spread_frac
    out.append(UncertainInput(key="rate", kind="rate", label="Arrival rate", base=r, low=r * (1 + frac),
                              high=r * (1 - frac), unit="requests/s",
                              source=f"your spread: +-{frac:.0%} of the analysis's rate"))
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
        out.append(f"layout {base.gpus_per_replica} GPUs TP {base.tp} PP {base.pp} -> "
                   f"{new.gpus_per_replica} GPUs TP {new.tp} PP {new.pp}")
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


def _replica_on(gpu: str, baseline: Recommendation, pts: tuple[Point, ...], flips: list[Pick | None]) -> \
        tuple[int, int, int, str, str, int]:
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
    return {"int4": " (use an INT4 AWQ/GPTQ checkpoint of this model)",
            "nvfp4": " (use an NVFP4 checkpoint of this model, e.g. from NVIDIA Model Optimizer)"}.get(weights, "")


def measurement(inp: UncertainInput, spec: NextExperimentSpec, baseline: Recommendation, pts: tuple[Point, ...],
                flips: list[Pick | None], prices: tuple[Price, ...]) -> dict:
    """The benchmark that pins ``inp`` down: command, GPUs held, duration, GPU-hours and cost."""
    goal, cons = spec.goal, spec.constraints
    i_mean, o_mean = goal.workload.mean_lengths()
    I, O = max(1, round(i_mean)), max(1, round(o_mean))
    model = _model_arg(goal)
    then = ("Upload the result JSON on the Calibration page (it imports vllm bench serve --save-result and "
            "vllm bench throughput --output-json): the measured figure replaces the assumption and the "
            "recommendation is re-run.")
    if inp.kind in ("prompt", "output", "rate"):
        metric = {"prompt": ("vllm:request_prompt_tokens", "mean prompt tokens"),
                  "output": ("vllm:request_generation_tokens", "mean output tokens"),
                  "rate": ("vllm:request_success_total", "requests/s")}[inp.kind]
        if inp.kind == "rate":
            q = "sum(rate(vllm:request_success_total[1h]))"
        else:
            q = f"sum(rate({metric[0]}_sum[1h])) / sum(rate({metric[0]}_count[1h]))"
        cmd = (f"curl -sG http://PROMETHEUS:9090/api/v1/query --data-urlencode {shlex.quote('query=' + q)}"
               f"  # {metric[1]} over the last hour of production traffic (or count it in your request logs)")
        return dict(measurement=f"read the {metric[1]} from production traffic or request logs (no GPU time)",
                    gpu=None, gpus=0, duration_s=0.0, gpu_hours=0.0, cost_usd=0.0, command=cmd,
                    then="Enter the measured value as the analysis's input and re-run.")
    assert inp.gpu is not None
    n, tp, pp, w, kv, replicas = _replica_on(inp.gpu, baseline, pts, flips)
    price = gpu_price(inp.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    usd = price.usd_per_gpu_hour if price else 0.0
    arch = goal.custom_model if goal.custom_model is not None else catalog.model(goal.model)
    from core.config import WEIGHT_BYTES
    load_s = BENCH_SETUP_FIXED_S + arch.total_params() * WEIGHT_BYTES.get(w, 2.0) / n / WEIGHT_LOAD_BYTES_PER_S
    serve = (f"vllm serve {model} --tensor-parallel-size {tp}"
             + (f" --pipeline-parallel-size {pp}" if pp > 1 else "") + _quant_flags(w, kv)
             + f" --max-model-len {I + O + 64} &{_checkpoint_note(w)}")
    if inp.kind == "decode":
        rate = goal.rate_per_s / max(1, replicas)
        prompts = max(BENCH_MIN_PROMPTS, math.ceil(rate * BENCH_STEADY_S))
        dur = load_s + prompts / rate
        cmd = (f"{serve}\nvllm bench serve --model {model} --dataset-name random --random-input-len {I} "
               f"--random-output-len {O} --request-rate {rate:.4g} --num-prompts {prompts} --save-result "
               f"--result-filename decode-{inp.gpu}-tp{tp}.json")
        what = (f"vllm bench serve on one replica of {n} x {inp.gpu} (TP {tp}{f' PP {pp}' if pp > 1 else ''}) "
                f"at the analysis's per-replica rate: TPOT/ITL pins the decode efficiency")
    elif inp.kind == "prefill":
        dur = load_s + 120.0
        cmd = (f"vllm bench throughput --model {model} --tensor-parallel-size {tp}"
               + (f" --pipeline-parallel-size {pp}" if pp > 1 else "") + _quant_flags(w, kv)
               + f" --input-len {I} --output-len 1 --num-prompts {PREFILL_PROMPTS} "
               f"--output-json prefill-{inp.gpu}-tp{tp}.json{_checkpoint_note(w)}")
        what = (f"vllm bench throughput with one output token on {n} x {inp.gpu} (TP {tp}): prompt tokens/s "
                "pins the prefill efficiency")
    else:  # comm
        n = tp if tp >= 2 else max(2, min(8, catalog.gpu(inp.gpu).scale_up_domain))
        dur = NCCL_SWEEP_S
        tool = "rccl-tests" if catalog.gpu(inp.gpu).vendor == "amd" else "nccl-tests"
        cmd = (f"./build/all_reduce_perf -b 8 -e 1G -f 2 -g {n}  # {tool}, one node of {inp.gpu}; "
               "busbw at 1 GiB / link peak pins the communication efficiency")
        what = f"{tool} all_reduce_perf on {n} x {inp.gpu} (the tensor-parallel group's fabric)"
        then = "Enter busbw / link peak as the communication efficiency (assumption comm_bw_eff) and re-run."
    gpu_hours = n * dur / 3600.0
    return dict(measurement=what, gpu=inp.gpu, gpus=n, duration_s=dur, gpu_hours=gpu_hours,
                cost_usd=gpu_hours * usd, command=cmd, then=then)


def training_step_command(model: str, gpus: int, tp: int, pp: int, seq_len: int, micro_batch: int = 1) -> str:
    """A short training-step benchmark for MFU (Megatron-LM, 20 iterations on mock data)."""
    return (f"torchrun --nproc-per-node {gpus} pretrain_gpt.py --tensor-model-parallel-size {tp} "
            f"--pipeline-model-parallel-size {pp} --seq-length {seq_len} --micro-batch-size {micro_batch} "
            f"--train-iters 20 --mock-data --bf16 --log-throughput  # model {model}; MFU from the logged TFLOP/s")


# --- the analysis ------------------------------------------------------------------------------------

Progress = Callable[[int, int, str], None]

#: Relative cost of one re-run, for splitting the work between processes: a workload input re-screens every
#: GPU kind and re-simulates; the baseline kind's inputs re-simulate its candidates; other kinds re-screen one.
_WEIGHT = {"workload": 8.0, "baseline kind": 4.0, "other kind": 1.0}


def _rerun_input(spec: NextExperimentSpec, prices: tuple[Price, ...], memo: dict, base_pick: Pick | None,
                 inp: UncertainInput, tick: Callable[[str], None]) -> tuple[tuple[Point, ...], list[Pick | None]]:
    pts: list[Point] = []
    flips: list[Pick | None] = []
    for v in points(inp, spec.points_per_side):
        tick(f"{inp.label} = {v:.4g}")
        rec = recommend(moved_goal(spec.goal, inp, v), spec.constraints, prices, memo=memo, alternatives=False)
        pick = _choice(rec)
        diff = changes(base_pick, pick)
        pts.append(Point(value=v, choice=pick.label if pick else NOTHING, flipped=bool(diff), changes=diff,
                         cost_per_hour=pick.cost_per_hour if pick else None))
        if diff:
            flips.append(pick)
    return tuple(pts), flips


def _child(conn, spec, prices, memo, base_pick, inputs) -> None:  # pragma: no cover - runs in a forked child
    try:
        out = [_rerun_input(spec, prices, memo, base_pick, inp, lambda label: conn.send(("tick", label)))
               for inp in inputs]
        conn.send(("done", out))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which re-runs the share itself
        conn.send(("error", repr(exc)))
    finally:
        conn.close()


def _split(inputs: tuple[UncertainInput, ...], base_pick: Pick | None) -> tuple[list[int], list[int]]:
    """Two shares of about equal work (longest first onto the lighter share)."""
    def weight(inp: UncertainInput) -> float:
        if inp.gpu is None:
            return _WEIGHT["workload"]
        return _WEIGHT["baseline kind"] if base_pick is not None and inp.gpu == base_pick.gpu else _WEIGHT["other kind"]

    shares: tuple[list[int], list[int]] = ([], [])
    loads = [0.0, 0.0]
    for i in sorted(range(len(inputs)), key=lambda i: -weight(inputs[i])):
        k = 0 if loads[0] <= loads[1] else 1
        shares[k].append(i)
        loads[k] += weight(inputs[i])
    return shares


def next_experiment(spec: NextExperimentSpec, prices: tuple[Price, ...] | None = None,
                    progress: Progress | None = None, workers: int = 2) -> NextExperiment:
    """Move every uncertain input across its range, re-run the optimizer, rank the measurements.

    ``progress``: optional ``(done, total, label)`` callable (called, never stored). ``workers``: 2 splits
    the re-runs between this process and one forked child (each keeps the baseline's shared screens and
    simulations); 1, or a platform without ``fork``, runs them here. Both give the same answer.
    """
    prices = prices if prices is not None else catalog.prices()
    memo: dict = {}
    baseline = recommend(spec.goal, spec.constraints, prices, memo=memo)
    base_pick = _choice(baseline)
    inputs = uncertain_inputs(spec, baseline)
    total = sum(len(points(inp, spec.points_per_side)) for inp in inputs)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        if progress:
            progress(done, total, label)
        done += 1

    results: dict[int, tuple[tuple[Point, ...], list[Pick | None]]] = {}
    mine = list(range(len(inputs)))
    conn = proc = None
    if workers > 1 and len(inputs) > 1:
        import multiprocessing as mp
        try:
            ctx = mp.get_context("fork")
            mine, theirs = _split(inputs, base_pick)
            conn, child_end = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(child_end, spec, prices, memo, base_pick,
                                                    [inputs[i] for i in theirs]), daemon=True)
            proc.start()
            child_end.close()
        except (ValueError, OSError):  # no fork on this platform, or no process to spare: run it all here
            mine, conn, proc = list(range(len(inputs))), None, None
    for i in mine:
        results[i] = _rerun_input(spec, prices, memo, base_pick, inputs[i], tick)
        while conn is not None and conn.poll():
            kind, payload = conn.recv()
            if kind == "tick":
                tick(payload)
            else:
                _finish(kind, payload, theirs, results, proc)
                conn, proc = None, None
    if conn is not None:
        while True:
            try:
                kind, payload = conn.recv()
            except EOFError:
                kind, payload = "error", "the worker process ended without an answer"
            if kind == "tick":
                tick(payload)
                continue
            _finish(kind, payload, theirs, results, proc)
            break
    for i in range(len(inputs)):  # a share the child could not finish is run here
        if i not in results:
            results[i] = _rerun_input(spec, prices, memo, base_pick, inputs[i], tick)
    if progress:
        progress(total, total, "done")
    experiments = []
    for i, inp in enumerate(inputs):
        pts, flips = results[i]
        chance = sum(p.flipped for p in pts) / len(pts) if pts else 0.0
        labels = [p.choice for p in pts if p.flipped]
        flips_to = max(labels, key=labels.count) if labels else ""
        m = measurement(inp, spec, baseline, pts, flips, prices)
        experiments.append(Experiment(input=inp, points=pts, flip_chance=chance, flips_to=flips_to, **m))
    ranked = sorted((e for e in experiments if e.flip_chance > 0),
                    key=lambda e: (-e.score, -e.flip_chance, e.cost_usd, e.input.key))
    stable = tuple(e for e in experiments if e.flip_chance == 0)
    return NextExperiment(spec=spec, baseline=baseline, experiments=tuple(ranked), stable=stable, reruns=total)


def _finish(kind: str, payload, theirs: list[int], results: dict, proc) -> None:
    if kind == "done":
        for i, r in zip(theirs, payload):
            results[i] = r
    if proc is not None:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    return None


def outcomes(e: Experiment) -> tuple[str, ...]:
    """The decision under each outcome of one experiment, in words, one line per point."""
    inp = e.input
    out = []
    for p in e.points:
        rel = (p.value / inp.base - 1) if inp.base else 0.0
        if inp.kind in ASSUMPTION_OF:
            how = f"{abs(rel):.0%} {'lower' if rel < 0 else 'higher'} than assumed ({p.value:.3g} vs {inp.base:.3g})"
        else:
            how = f"{p.value:.4g} {inp.unit} ({rel:+.0%})"
        verdict = f"the choice becomes {p.choice}" if p.flipped else "the choice stays"
        out.append(f"If {inp.label[0].lower() + inp.label[1:]} is {how}, {verdict}.")
    return tuple(out)
