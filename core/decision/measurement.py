"""The measurement that pins an uncertain input down: what to run, on how many GPUs, for how long, at what cost,
and what to do with the output (the next experiment's commands, serving and training).

Durations are estimates from the stated constants; costs are at the analysis's price basis.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

from core import catalog
from core.base import WEIGHT_BYTES, sig
from core.catalog import Price, gpu_price
from core.config import RabitConfig
from core.decision.goal import Candidate, Constraints, Pick
from core.operations import model_repo

if TYPE_CHECKING:  # the experiment's own types, for the annotations only
    from core.decision.experiment import NextExperimentSpec, UncertainInput
    from core.decision.optimizer import Recommendation

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
#: Prompts in an offline run that keeps thousands of sequences in flight (the K/V reads bind the decode step), and
#: its measured span with the engine's defaults [s] (estimate: 2,000 requests of a few thousand tokens on one node).
ATTENTION_PROMPTS = 2000
ATTENTION_BENCH_S = 600.0


#: A short training-step benchmark on one node: start-up, then 20 iterations (estimate).
TRAIN_BENCH_S = 1800.0


def model_arg(cfg: RabitConfig) -> str:
    """The model a benchmark command loads: the catalog model's Hugging Face repository, or a placeholder for the
    path to an uploaded config.json's weights."""
    if cfg.custom_model is not None:
        return f"<path to {cfg.model_label}>"
    return model_repo(cfg.model)


def _replica_on(gpu: str, baseline: Recommendation, flips: list[Pick | None]) -> tuple[int, int, int, str, str, int]:
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
    flips: list[Pick | None],
    prices: tuple[Price, ...],
) -> dict:
    """The benchmark that pins ``inp`` down: command, GPUs held, duration, GPU-hours and cost."""
    goal, cons = spec.goal, spec.constraints
    i_mean, o_mean = goal.workload.mean_lengths()
    I, O = max(1, round(i_mean)), max(1, round(o_mean))
    model = model_arg(goal.settings)
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
        what = f"read the {metric[1]} from production traffic or request logs (no GPU time)"
        return _held(what, None, 0, 0.0, 0.0, cmd, "Enter the measured value as the analysis's input and re-run.")
    assert inp.gpu is not None
    n, tp, pp, w, kv, replicas = _replica_on(inp.gpu, baseline, flips)
    price = gpu_price(inp.gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    usd = price.usd_per_gpu_hour if price else 0.0
    arch = goal.arch()
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
            f"--random-output-len {O} --request-rate {sig(rate, 4)} --num-prompts {prompts} --save-result "
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
    elif inp.kind == "attention":
        dur = load_s + ATTENTION_BENCH_S
        if goal.settings.workload.engine == "sglang":
            cmd = (
                f"python -m sglang.bench_offline_throughput --model-path {model} --tp {tp} --dataset-name random "
                f"--random-input-len {I} --random-output-len {O} --num-prompts {ATTENTION_PROMPTS} "
                f"--result-filename attention-{inp.gpu}-tp{tp}.jsonl{_checkpoint_note(w)}"
            )
            tool = "sglang.bench_offline_throughput"
        else:
            cmd = (
                f"vllm bench throughput --model {model} --tensor-parallel-size {tp}"
                + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
                + _quant_flags(w, kv)
                + f" --input-len {I} --output-len {O} --num-prompts {ATTENTION_PROMPTS} "
                f"--output-json attention-{inp.gpu}-tp{tp}.json{_checkpoint_note(w)}"
            )
            tool = "vllm bench throughput"
        what = (
            f"{tool} with {ATTENTION_PROMPTS} prompts at once on {n} x {inp.gpu} (TP {tp}): at thousands of "
            "sequences the K/V reads bind the decode step, so output tokens/s pins the ROCm attention bandwidth"
        )
        then = (
            "Upload the result JSON on the Calibration page with a batch-1 run of the same model: the parameter "
            "fit separates the K/V reads (rocm_attn_bw_eff) from the weight reads and fixed costs, and the "
            "recommendation is re-run."
        )
    else:  # comm
        n = tp if tp >= 2 else max(2, min(8, catalog.gpu(inp.gpu).scale_up_domain))
        dur, cmd, then = NCCL_SWEEP_S, allreduce_command(inp.gpu, n), ALLREDUCE_THEN
        what = f"{_collectives_tool(inp.gpu)} all_reduce_perf on {n} x {inp.gpu} (the tensor-parallel group's fabric)"
    return _held(what, inp.gpu, n, dur, usd, cmd, then)


def _held(
    what: str, gpu: str | None, gpus: int, duration_s: float, usd_per_gpu_hour: float, cmd: str, then: str
) -> dict:
    """A measurement's fields: what it is, the GPUs it holds for how long, their GPU-hours and cost, the command,
    and what to do with the output."""
    gpu_hours = gpus * duration_s / 3600.0
    return {
        "measurement": what,
        "gpu": gpu,
        "gpus": gpus,
        "duration_s": duration_s,
        "gpu_hours": gpu_hours,
        "cost_usd": gpu_hours * usd_per_gpu_hour,
        "command": cmd,
        "then": then,
    }


#: What to do with an all-reduce sweep's output.
ALLREDUCE_THEN = "Enter busbw / link peak as the communication efficiency (assumption comm_bw_eff) and re-run."


def _collectives_tool(gpu: str) -> str:
    return "rccl-tests" if catalog.gpu(gpu).vendor == "amd" else "nccl-tests"


def allreduce_command(gpu: str, gpus: int) -> str:
    """An all-reduce sweep from 8 B to 1 GiB on ``gpus`` GPUs of one node (nccl-tests, or rccl-tests on AMD): its
    bus bandwidth at 1 GiB over the link peak is the communication efficiency."""
    return (
        f"./build/all_reduce_perf -b 8 -e 1G -f 2 -g {gpus}  # {_collectives_tool(gpu)}, one node of {gpu}; "
        "busbw at 1 GiB / link peak pins the communication efficiency"
    )


def training_step_command(model: str, gpus: int, tp: int, pp: int, seq_len: int, micro_batch: int = 1) -> str:
    """A short training-step benchmark for MFU (Megatron-LM, 20 iterations on mock data)."""
    return (
        f"torchrun --nproc-per-node {gpus} pretrain_gpt.py --tensor-model-parallel-size {tp} "
        f"--pipeline-model-parallel-size {pp} --seq-length {seq_len} --micro-batch-size {micro_batch} "
        f"--train-iters 20 --mock-data --bf16 --log-throughput  # model {model}; MFU from the logged TFLOP/s"
    )


def training_measurement(inp: UncertainInput, cfg: RabitConfig, cons: Constraints, prices: tuple[Price, ...]) -> dict:
    """The benchmark that pins a training input down (one node of its GPU kind): the training step's MFU, or the
    all-reduce bus bandwidth; command, GPUs held, duration, GPU-hours and cost."""
    gpu = inp.gpu or ""
    node = catalog.gpu(gpu).gpus_per_node
    price = gpu_price(gpu, prices, kind=cons.price_kind, policy=cons.price_policy, providers=cons.providers)
    usd = price.usd_per_gpu_hour if price else 0.0
    if inp.key.startswith("train:"):
        tp = min(node, 8)
        cmd = training_step_command(
            model_arg(cfg),
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
        dur, cmd, then = NCCL_SWEEP_S, allreduce_command(gpu, node), ALLREDUCE_THEN
        what = f"{_collectives_tool(gpu)} all_reduce_perf on one node of {node} x {inp.gpu}"
    return _held(what, inp.gpu, node, dur, usd, cmd, then)
