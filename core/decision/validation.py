"""Validation against published measurements: predicted / measured per case, summarised per family.

The cases live in ``validation/*.csv`` (data, like the catalogs: every row names its source, its date and the
settings that reproduce it). Each case is predicted with today's default assumptions and no per-case factor:

* ``static_out_tokens_per_s`` (TensorRT-LLM's static-batch benchmark): a batch of ``B`` prompts is prefilled
  together, then decodes ``O - 1`` more tokens, so ``B O / (TTFT_B + (O - 1) t_step)`` with the batch
  prefill time and the mean decode step of :mod:`core.serving.speed`; ``_per_gpu`` divides by the GPUs.
* ``ttft_s``: the batch-1 prefill time; ``itl_s``: the batch-1 mean decode step.
* ``hw_tflops_per_gpu`` / ``model_tflops_per_gpu``: the training layout timed by
  :func:`core.training.evaluate_layout`, as HFU or MFU times the dense BF16 peak.
* ``longctx.csv``: long prompts and attention parallelism: ``ttft_s`` one prompt's prefill (its cached prefix read,
  the rest in one pass) with context parallelism over TP groups; ``itl_s`` the decode step at its context;
  ``capacity_input_tokens_per_s`` / ``capacity_output_tokens_per_s`` a saturated replica's closed-form capacity
  (:func:`core.serving.max_throughput`), with or without data-parallel attention.
* ``disagg.csv``: the KV cache of one prompt moved between a prefill and a decode instance
  (:func:`core.serving.kv_transfer_s` over the source's per-GPU link, the KV each GPU holds at its TP);
* ``video.csv``: a diffusion-transformer request (:func:`core.physics.video_estimate`): seconds per video or per
  denoising step, the denoising time alone, peak memory per GPU [GB], attention's share of the denoising time.
* ``lora.csv`` (multi-LoRA serving): ``lora_throughput_ratio``, a batch of ``B`` (prefill and ``O - 1`` decode
  steps, as the static throughput above) with ``distinct`` adapters over the same batch without them;
  ``request_throughput`` and ``output_tokens_per_s``, the serving simulator's completed requests/s and output
  tokens/s of the published workload (its adapters drawn from their popularity); their ranges run the whole
  published workload at each bound (:data:`SIMULATED_FILES`).

``vllm_lifecycle.csv`` holds whole public vLLM runs, one row per load stage, each replayed as the benchmark sent it
(:mod:`core.decision.validation_lifecycle`): nine cases per row, the E2E, TTFT and TPOT mean, p90 and p99.

``serving_published.csv`` adds the load-dependent metrics, each predicted for one replica of ``tp x pp`` GPUs on
the engine the row names (its documented scheduler defaults on that GPU, :mod:`core.catalog.engines`, with the
row's ``max_batch`` and ``max_num_tokens`` where the source gives them) and multiplied by the replicas:

* ``offline_tokens_per_s`` (every request queued at once: ``trtllm-bench throughput``, MLPerf Offline, vLLM's
  offline runs): the closed-form saturation throughput :func:`core.serving.max_throughput` at the row's fixed
  lengths; ``_per_gpu`` divides by the GPUs.
* ``server_tokens_per_s`` (MLPerf Server / Interactive): the highest Poisson rate whose simulated p99 TTFT and
  p99 TPOT meet the row's limits (:func:`core.decision.rate_search.max_rate`), times the output length.
* ``static_batch_latency_s``: one static batch from its first prompt token to its last output token,
  ``TTFT_B + (O - 1) t_step``.

``run(assumptions=...)`` predicts every case with other assumption values (``rabit validate --assume/--bound/
--config``), and ``run(ranges=True)`` adds each prediction's heuristic range from the assumption bounds
(:mod:`core.decision.uncertainty`: serving cases move with the serving-speed assumptions, training cases with the
training ones).

Per family: the median of ``|p / m - 1|``, the bias (median of ``p / m - 1``; positive = optimistic for
throughputs, pessimistic for latencies), and the shares within 25 % and within a factor of 2.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from core import catalog
from core.base import Assumptions, Range
from core.catalog import from_hf_config
from core.config import RabitConfig, resolve
from core.decision import validation_lifecycle as lifecycle
from core.decision import validation_multiturn as multiturn
from core.decision.validation_files import raw_rows
from core.physics import PAGED_2023_KV_SHARE, StepModel, per_query_head_kv_reads

TARGET_MEDIAN_ABS_ERROR = 0.15


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CaseResult(_F):
    family: str
    id: str
    metric: str
    measured: float
    predicted: float
    source: str
    date: str

    @property
    def error(self) -> float:
        """p / m - 1."""
        return self.predicted / self.measured - 1.0


class FamilySummary(_F):
    family: str
    cases: int
    median_abs_error: float
    bias: float  # median signed error
    within_25pct: float
    within_2x: float
    meets_target: bool


class ValidationReport(_F):
    cases: tuple[CaseResult, ...]
    families: tuple[FamilySummary, ...]
    #: case id -> the heuristic range of its prediction (``run(ranges=True)``; empty otherwise)
    ranges: dict[str, Range] = {}


def _rows(name: str) -> list[dict[str, str]]:
    """The cases of ``validation/<name>``: its rows, or for a file of whole runs one case per row and metric."""
    rows = raw_rows(name)
    return lifecycle.expand(rows) if name == lifecycle.FILE else rows


def _serving_config(r: dict[str, str]) -> RabitConfig:
    gpus, B, I, O = int(r["gpus"]), int(r["batch"]), int(r["input"]), int(r["output"])
    cfg = RabitConfig(
        model=r["model"],
        gpu=r["gpu"],
        gpus_per_node=gpus,
        nodes=1,
        tp=int(r["tp"]),
        pp=int(r["pp"]),
        weights=r["weights"],
        kv_dtype=r["kv_dtype"],
        batch=B,
        input_tokens=I,
        output_tokens=O,
    )
    if r.get("engine"):  # the engine that produced the figure (its CUDA-graph capture size, core.catalog.engines)
        cfg = cfg.with_(workload=cfg.workload.model_copy(update={"engine": r["engine"]}))
    return cfg


def _serving_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core import serving

    gpus, B, O = int(r["gpus"]), int(r["batch"]), int(r["output"])
    metric = r["metric"]
    sm = StepModel.from_deployment(resolve(cfg))
    if r.get("decode_attention") == "per-query-head":  # the kernel the engine version ran (core.physics.step)
        sm = per_query_head_kv_reads(sm)
    ttft = serving.prefill_numbers(sm, cfg, B).ttft_s  # = serving.prefill(cfg).ttft_s with the default kernel
    if metric == "ttft_s":
        return ttft
    if metric == "itl_s":
        return serving.decode_numbers(sm, cfg, B).mean_s  # = serving.decode(cfg).step_s
    if metric.startswith("static_out_tokens_per_s"):
        step = serving.decode_numbers(sm, cfg, B).mean_s if O > 1 else 0.0
        total = B * O / (ttft + (O - 1) * step)
        return total / gpus if metric.endswith("_per_gpu") else total
    raise ValueError(f"serving.csv: unknown metric {metric!r}")


def _serving_prediction(r: dict[str, str]) -> float:
    return _serving_predict(r, _serving_config(r))


#: Requests simulated at each rate of a server-scenario rate search (a p99 needs at least 100).
SERVER_SIM_REQUESTS = 300


def _replicas(r: dict[str, str]) -> int:
    per = int(r["tp"]) * int(r["pp"])
    return int(r["replicas"]) if r.get("replicas") else max(1, int(r["gpus"]) // per)


def _published_config(r: dict[str, str]) -> RabitConfig:
    """One replica of the row's system, on its engine's scheduler."""
    from core.catalog import engine_defaults

    tp, pp = int(r["tp"]), int(r["pp"])
    g = catalog.gpu(r["gpu"])
    per = tp * pp
    node = min(per, g.gpus_per_node)
    B = int(r["batch"]) if r.get("batch") else 1
    cfg = RabitConfig(
        model=r["model"],
        gpu=r["gpu"],
        gpus_per_node=node,
        nodes=max(1, per // node),
        tp=tp,
        pp=pp,
        weights=r["weights"],
        kv_dtype=r["kv_dtype"],
        batch=B,
        input_tokens=int(r["input"]),
        output_tokens=max(1, round(float(r["output"]))),
    )
    d = engine_defaults(r["engine"], g)
    max_batch = int(r["max_batch"]) if r.get("max_batch") else d.max_batch
    budget = max(int(r["max_num_tokens"]) if r.get("max_num_tokens") else d.token_budget, max_batch)
    w = cfg.workload.model_copy(
        update={
            "engine": r["engine"],
            "policy": d.policy,
            "admission": d.admission,
            "prefix_caching": d.prefix_caching,
            "max_batch": max_batch,
            "token_budget": budget,
            "lengths": "fixed",
        }
    )
    return cfg.with_(workload=w)


def _published_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core import serving
    from core.decision.rate_search import max_rate

    metric = r["metric"]
    if metric.startswith("static") or metric == "ttft_s":
        if metric == "static_batch_latency_s":
            sm = StepModel.from_deployment(resolve(cfg))
            B, O = cfg.batch, cfg.output_tokens
            step = serving.decode_numbers(sm, cfg, B).mean_s if O > 1 else 0.0
            return serving.prefill_numbers(sm, cfg, B).ttft_s + (O - 1) * step
        return _serving_predict(r, cfg)
    n = _replicas(r)
    spec = serving.sim_spec(cfg, num_requests=SERVER_SIM_REQUESTS, duration_s=None, trace=None)
    if metric.startswith("offline_tokens_per_s"):
        total = n * serving.max_throughput(cfg, spec).output_tokens_per_s
        return total / int(r["gpus"]) if metric.endswith("_per_gpu") else total
    if metric == "server_tokens_per_s":
        limits = (("ttft_s.p99", float(r["p99_ttft_limit_s"])), ("itl_s.p99", float(r["p99_tpot_limit_s"])))
        return n * max_rate(cfg, spec, limits).rate_per_s * cfg.output_tokens
    raise ValueError(f"serving_published.csv: unknown metric {metric!r}")


#: Metrics whose prediction is a search over simulations: no range (each bound would be a search of its own).
SEARCHED_METRICS = ("server_tokens_per_s",)


def _longctx_config(r: dict[str, str]) -> RabitConfig:
    """A long-context case's replica and request: TP groups of ``gpus_per_node`` on ``nodes``, CP over them."""
    I, cached = int(r["input"]), int(r["cached"])
    cfg = RabitConfig(
        model=r["model"],
        gpu=r["gpu"],
        fabric=r["fabric"],
        gpus_per_node=int(r["gpus_per_node"]),
        nodes=int(r["nodes"]),
        tp=int(r["tp"]),
        cp=int(r["cp"]),
        dp_attention=r["dp_attention"] == "1",
        weights=r["weights"],
        kv_dtype=r["kv_dtype"],
        batch=int(r["batch"]),
        input_tokens=I,
        output_tokens=int(r["output"]),
        prefix_cache_frac=cached / I,
    )
    w = cfg.workload.model_copy(update={"token_budget": max(cfg.workload.token_budget, I)})  # one pass
    if r.get("engine"):
        w = w.model_copy(update={"engine": r["engine"]})
    return cfg.with_(workload=w)


def _capacity(cfg: RabitConfig, what: str, prompt: int) -> float:
    """A saturated replica's input or output tokens per second (the closed-form capacity of the simulator)."""
    from core import serving

    cap = serving.max_throughput(cfg, serving.sim_spec(cfg))
    return cap.output_tokens_per_s if what == "output_tokens" else cap.requests_per_s * prompt


def _longctx_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core import serving

    metric = r["metric"]
    if metric == "ttft_s":
        return serving.prefill(resolve(cfg)).ttft_s
    if metric == "itl_s":
        return serving.decode(resolve(cfg)).step_s
    if metric.startswith("capacity_ratio_"):  # data-parallel attention against plain TP on the same GPUs
        what = metric.removeprefix("capacity_ratio_")
        return _capacity(cfg, what, int(r["input"])) / _capacity(cfg.with_(dp_attention=False), what, int(r["input"]))
    if metric.startswith("capacity_"):
        return _capacity(cfg, metric.removeprefix("capacity_").removesuffix("_per_s"), int(r["input"]))
    raise ValueError(f"longctx.csv: unknown metric {metric!r}")


def _gpt(layers: int, hidden: int, heads: int, seq: int, vocab: int = 51200):
    """A Megatron GPT of the given shape (GPT-2 block, 4h GELU MLP, vocabulary 51,200 unless given, tied embeddings)."""
    return from_hf_config(
        {
            "model_type": "gpt2",
            "n_layer": layers,
            "n_embd": hidden,
            "n_head": heads,
            "vocab_size": vocab,
            "n_positions": seq,
            "tie_word_embeddings": True,
            "activation_function": "gelu",
        },
        slug=f"megatron-gpt-{layers}l-{hidden}h",
        name=f"Megatron GPT ({layers} layers, hidden {hidden})",
    )


def _training_config(r: dict[str, str]) -> RabitConfig:
    """The row's run: its model (a catalog slug or a GPT shape with its vocabulary), GPUs, layout, batch and
    whether it overlaps its TP communication."""
    tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
    gpus = tp * pp * dp
    node = catalog.gpu(r["gpu"]).gpus_per_node
    seq, gb = int(r["seq"]), int(r["global_batch"])
    custom = None
    if r["model"] == "gpt":
        custom = _gpt(int(r["layers"]), int(r["hidden"]), int(r["heads"]), seq, int(r.get("vocab") or 51200))
    return RabitConfig(
        model="llama-3.1-8b" if custom is not None else r["model"],
        custom_model=custom,
        phase="train",
        gpu=r["gpu"],
        gpus_per_node=min(node, gpus),
        nodes=max(1, gpus // node),
        tp=tp,
        pp=pp,
        ep=int(r.get("ep") or 1),
        seq_len=seq,
        global_batch_tokens=gb * seq,
        train_precision=r["precision"],
        micro_batch=int(r["micro_batch"] or 1),
        recompute=r["recompute"] or "selective",
        # the published recipe's TP communication overlap (Transformer Engine userbuffers), cited in the row
        tp_comm_overlap=r.get("tp_comm_overlap") == "1",
    )


def _training_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    """Hardware or model FLOP/s per GPU (HFU or MFU times the dense BF16 peak), throughput per GPU, or an MLPerf
    time to train (its tokens at the layout's rate, times the round's scaling factor, in minutes)."""
    from core import training

    lay = training.Layout(
        tp=cfg.tp,
        pp=cfg.pp,
        dp=int(r["dp"]),
        ep=cfg.ep,
        micro_batch=cfg.micro_batch,
        recompute=cfg.recompute,
        vpp=int(r.get("vp") or 1),
    )
    res = training.evaluate_layout(cfg, lay)
    tokens_per_s = res.global_batch_tokens / res.step_s
    metric = r["metric"]
    if metric == "tokens_per_s_per_gpu":
        return tokens_per_s / res.gpus
    if metric == "hw_tflops_per_gpu":
        return res.hfu * catalog.gpu(r["gpu"]).bf16_tflops
    if metric == "model_tflops_per_gpu":
        return res.mfu * catalog.gpu(r["gpu"]).bf16_tflops
    if metric == "time_to_train_min":
        return float(r["train_tokens"]) / tokens_per_s / 60 * float(r["score_scaling"] or 1)
    raise ValueError(f"training metric {metric!r} is not one validation predicts")


def _video_config(r: dict[str, str]) -> RabitConfig:
    """A video case's request: the model, GPU and GPU count, size, steps and layout of the published run."""
    return RabitConfig(
        gpu=r["gpu"],
        video={
            "model": r["model"],
            "gpus": int(r["gpus"]),
            "height": int(r["height"]),
            "width": int(r["width"]),
            "frames": int(r["frames"]),
            "steps": int(r["steps"]),
            "guidance": r["guidance"],
            "sp": r["sp"],
            "cfg_parallel": r["cfg_parallel"] == "1",
            "fsdp": r["fsdp"] == "1",
            "weights": r["weights"],
            "text_encoder": r["text_encoder"],
            "attention": r["attention"],
            "rate_per_hour": None,
        },
    )


#: video.csv metric -> the estimate's field (and the factor from its SI unit to the published one)
_VIDEO_METRICS = {
    "video_s": ("video_s", 1.0),
    "denoise_s": ("denoise_s", 1.0),
    "step_s": ("step_s", 1.0),
    "peak_memory_gb": ("memory_bytes_per_gpu", 1e-9),
    "attention_share": ("attention_share", 1.0),
}


def _video_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core.config import resolve_video
    from core.physics import video_quick

    if r["metric"] not in _VIDEO_METRICS:
        raise ValueError(f"video.csv: unknown metric {r['metric']!r}")
    field, factor = _VIDEO_METRICS[r["metric"]]
    return float(getattr(video_quick(resolve_video(cfg)), field)) * factor


def _llama_2_13b():
    """Llama-2-13B from its config.json (meta-llama/Llama-2-13b-hf): not in the catalog, used by published cases."""
    return from_hf_config(
        {
            "model_type": "llama",
            "hidden_size": 5120,
            "intermediate_size": 13824,
            "num_attention_heads": 40,
            "num_hidden_layers": 40,
            "num_key_value_heads": 40,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        slug="llama-2-13b",
        name="Llama-2-13B",
    )


def _lora_config(r: dict[str, str]) -> RabitConfig:
    """A multi-LoRA case: the deployment, the adapter set and (for the simulated metrics) the workload."""
    from core.config import AdapterSet

    custom = _llama_2_13b() if r["model"] == "llama-2-13b" else None
    gpus = int(r["gpus"])
    adapters = AdapterSet(
        count=int(r["adapters"]),
        ranks=tuple(int(x) for x in r["ranks"].split(",")),
        targets=r["targets"],
        skew=float(r["skew"]),
        max_loras=int(r["max_loras"]),
        max_lora_rank=int(r["max_lora_rank"]),
        max_cpu_loras=int(r["max_cpu_loras"]),
        fully_sharded=r["fully_sharded"] == "1",
    )
    cfg = RabitConfig(
        model="llama-3.1-8b" if custom is not None else r["model"],
        custom_model=custom,
        gpu=r["gpu"],
        gpus_per_node=gpus,
        tp=int(r["tp"]),
        pp=int(r["pp"]),
        weights=r["weights"],
        kv_dtype=r["kv_dtype"],
        batch=int(r["batch"] or 1),
        input_tokens=int(r["input"]),
        output_tokens=int(r["output"]),
        adapters=adapters,
    )
    if r["arrival"]:
        w = cfg.workload.with_(
            arrival=r["arrival"],
            num_requests=int(r["requests"]),
            lengths=r["lengths"],
            spread=float(r["spread"]),
            **({"rate_per_s": float(r["rate"])} if r["arrival"] == "poisson" else {"users": int(r["requests"])}),
        )
        if r["engine"] == "vllm":  # the engine's own scheduler defaults on the GPU
            w = w.with_(**catalog.engine_defaults("vllm", catalog.gpu(r["gpu"])).spec_fields())
        cfg = cfg.with_(workload=w)
    return cfg


def _lora_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core import serving
    from core.config import AdapterSet

    metric = r["metric"]
    if metric == "lora_throughput_ratio":
        B, O = int(r["batch"]), int(r["output"])

        def throughput(c: RabitConfig) -> float:
            sm = StepModel.from_deployment(resolve(c))
            ttft = serving.prefill_numbers(sm, c, B).ttft_s
            step = serving.decode_numbers(sm, c, B).mean_s
            return B * O / (ttft + (O - 1) * step)

        return throughput(cfg) / throughput(cfg.with_(adapters=AdapterSet()))
    if metric in ("request_throughput", "output_tokens_per_s"):
        s = serving.simulate(cfg, serving.sim_spec(cfg)).summary
        return s.throughput_requests_per_s if metric == "request_throughput" else s.throughput_tokens_per_s
    raise ValueError(f"lora.csv: unknown metric {metric!r}")


#: Qwen/Qwen3-8B's config.json fields that size its KV cache and weights (Hugging Face, Qwen/Qwen3-8B): the model of
#: the Mooncake vLLM 1P1D transfer table, not in the catalog.
QWEN3_8B = {
    "model_type": "qwen3",
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}


def _disagg_config(r: dict[str, str]) -> RabitConfig:
    if r["model"] != "qwen3-8b":
        raise ValueError(f"disagg.csv: unknown model {r['model']!r}")
    arch = from_hf_config(QWEN3_8B, slug="qwen3-8b", name="Qwen3-8B")
    tp = int(r["tp"])
    return RabitConfig(custom_model=arch, gpu="h100-sxm", gpus_per_node=tp, tp=tp, kv_dtype=r["kv_dtype"])


def _disagg_predict(r: dict[str, str], cfg: RabitConfig) -> float:
    from core.physics import kv_bytes_per_token, kv_shard
    from core.serving import kv_transfer_s

    if r["metric"] != "kv_transfer_ms":
        raise ValueError(f"disagg.csv: unknown metric {r['metric']!r}")
    m, a = resolve(cfg).model, cfg.assumptions
    k = kv_bytes_per_token(m, cfg.kv_bytes_per_elem) / kv_shard(m, cfg.tp)
    bw, alpha = float(r["nic_gb_per_s"]) * 1e9, float(r["latency_us"]) * 1e-6
    return 1e3 * kv_transfer_s(int(r["input"]), k, k, bw, alpha, a.kv_transfer_eff, a.kv_transfer_setup_us * 1e-6)


#: Files whose cases are simulated runs. Their ranges run the whole case at each bound, as every other case's do: a
#: shortened run rebased on the full one would hide what matters most near capacity, where a bound that moves the
#: step time by a few per cent moves the queue, and so the latencies, by far more than a few hundred requests show
#: (the vllm-lifecycle stage Llama-2-7B general at 20 requests/s: mean E2E range 4.7-10.6 s from 300-request bound
#: runs, 3.6-124 s from whole ones, 4.16 s measured). The screen skips the bounds that leave the step model and the KV
#: budget unchanged.
SIMULATED_FILES = frozenset({"lora.csv", lifecycle.FILE})


#: file -> (the case's config, its prediction from a config, the assumption tag that moves it)
_KINDS: dict[str, tuple[Callable[..., RabitConfig], Callable[..., float], str]] = {
    "serving.csv": (_serving_config, _serving_predict, "serving_speed"),
    "serving_published.csv": (_published_config, _published_predict, "serving_speed"),
    "training.csv": (_training_config, _training_predict, "training"),
    "training_published.csv": (_training_config, _training_predict, "training"),
    "video.csv": (_video_config, _video_predict, "video"),
    "lora.csv": (_lora_config, _lora_predict, "serving_speed"),
    "longctx.csv": (_longctx_config, _longctx_predict, "serving_speed"),
    "disagg.csv": (_disagg_config, _disagg_predict, "serving_speed"),
    lifecycle.FILE: (lifecycle.lifecycle_config, lifecycle.lifecycle_predict, "serving_speed"),
    multiturn.FILE: (multiturn.multiturn_config, multiturn.multiturn_predict, "serving_speed"),
}


def case_row(case_id: str) -> tuple[str, dict[str, str], RabitConfig]:
    """(file, row, config) of one case: the published row and the config it is predicted on."""
    for name, (config_of, _, _) in _KINDS.items():
        for r in _rows(name):
            if r["id"] == case_id:
                return name, r, config_of(r)
    raise KeyError(f"no validation case {case_id!r}")


def predict_row(name: str, r: dict[str, str], cfg: RabitConfig) -> float:
    """The prediction of row ``r`` of file ``name`` on ``cfg`` (``case_row``'s config, or one changed)."""
    return _predict_with_kernel(_KINDS[name][1], r, cfg)


def _predict_with_kernel(predict: Callable[..., float], r: dict[str, str], cfg: RabitConfig) -> float:
    """``predict(r, cfg)`` with the decode-attention kernel the row names: a 2023-generation paged kernel
    (``decode_attention`` ``paged-2023``: vLLM's PagedAttention v1/v2, LightLLM's token attention) reads the K/V at
    :data:`core.physics.read_factors.PAGED_2023_KV_SHARE` of today's kernels' rate, whatever ``kv_read_bw_eff`` the
    case is evaluated at (its base, a bound of a range, a calibration)."""
    if r.get("decode_attention") == "paged-2023":
        a = cfg.assumptions
        cfg = cfg.with_(assumptions=a.with_(kv_read_bw_eff=a.kv_read_bw_eff * PAGED_2023_KV_SHARE))
    return predict(r, cfg)


def replicas_of_row(r: dict[str, str]) -> int:
    """The model copies of a published serving row's system: ``replicas``, else gpus / (tp pp)."""
    return _replicas(r)


def _summary(family: str, rs: list[CaseResult]) -> FamilySummary:
    errs = [c.error for c in rs]
    med = statistics.median(abs(e) for e in errs)
    return FamilySummary(
        family=family,
        cases=len(rs),
        median_abs_error=med,
        bias=statistics.median(errs),
        within_25pct=sum(abs(e) <= 0.25 for e in errs) / len(errs),
        within_2x=sum(0.5 <= 1 + e <= 2.0 for e in errs) / len(errs),
        meets_target=med <= TARGET_MEDIAN_ABS_ERROR,
    )


def _predicted(predict: Callable[..., float], r: dict[str, str], cfg: RabitConfig) -> dict[str, float]:
    return {"predicted": _predict_with_kernel(predict, r, cfg)}


def run(
    families: tuple[str, ...] = (), assumptions: Assumptions | None = None, ranges: bool = False
) -> ValidationReport:
    """Predict every case (optionally only ``families``) and summarise per family.

    assumptions: the values every case is predicted with (default: today's defaults). ranges: also each
    prediction's heuristic range from the assumption bounds (one evaluation per bound per case).
    """
    from core.decision.uncertainty import serving_screen, spread

    out: list[CaseResult] = []
    rng: dict[str, Range] = {}
    for name, (config_of, predict, tag) in _KINDS.items():
        for r in _rows(name):
            if families and r["family"] not in families:
                continue
            cfg = config_of(r)
            if assumptions is not None:
                cfg = cfg.model_copy(update={"assumptions": assumptions})
            if ranges and r["metric"] not in SEARCHED_METRICS:
                screen = serving_screen if name in SIMULATED_FILES else None
                sp = spread(cfg, functools.partial(_predicted, predict, r), (tag,), screen=screen)
                value, rng[r["id"]] = sp.base["predicted"], sp.ranges["predicted"]
            else:
                value = _predict_with_kernel(predict, r, cfg)
            out.append(
                CaseResult(
                    family=r["family"],
                    id=r["id"],
                    metric=r["metric"],
                    measured=float(r["measured"]),
                    predicted=float(value),
                    source=r["source"],
                    date=r["date"],
                )
            )
    fams: dict[str, list[CaseResult]] = {}
    for c in out:
        fams.setdefault(c.family, []).append(c)
    return ValidationReport(cases=tuple(out), families=tuple(_summary(f, rs) for f, rs in fams.items()), ranges=rng)
