"""Launch configs for a recommended serving configuration: the engine command and a Kubernetes Deployment.

What the user runs next, built from the optimizer's pick (layout, precisions, batch cap) and the workload
(lengths, token budget). Every flag below is a name the engine documents; :data:`DOCUMENTED_FLAGS` lists
them with the page they come from, and the tests check every emitted flag against that list.

* vLLM, ``vllm serve MODEL``: engine arguments (docs.vllm.ai, "Engine Arguments"):
  ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--gpu-memory-utilization`` (default 0.9), ``--kv-cache-dtype {auto,fp8,...}``,
  ``--quantization {fp8,awq,gptq,modelopt_fp4,...}``, ``--max-model-len``, ``--host``, ``--port``;
  ``--enforce-eager`` when the config turns CUDA graphs off (eager mode).
* SGLang, ``python -m sglang.launch_server`` (docs.sglang.io, "Server Arguments"; ``--pp-size`` in
  "Pipeline Parallelism for Long Context"): ``--model-path``, ``--tp-size`` (alias ``--tp``), ``--pp-size``,
  ``--max-running-requests``, ``--chunked-prefill-size``, ``--mem-fraction-static`` (default 0.9),
  ``--kv-cache-dtype {auto,fp8_e4m3,fp8_e5m2}``, ``--quantization {fp8,awq,modelopt_fp4,...}``,
  ``--context-length``, ``--host``, ``--port``; ``--disable-cuda-graph`` in eager mode.
* TensorRT-LLM, ``trtllm-serve MODEL`` (nvidia.github.io/TensorRT-LLM, "trtllm-serve"): ``--backend pytorch``,
  ``--tp_size``, ``--pp_size``, ``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``,
  ``--kv_cache_free_gpu_memory_fraction``, ``--kv_cache_dtype {auto,fp8,nvfp4}`` (NVIDIA/TensorRT-LLM PR
  #11487, March 2026), ``--host``, ``--port``. Weight quantization comes from the checkpoint (a
  ModelOpt FP8/NVFP4 export), not from a flag: the command says so in a comment; so does eager mode, which
  trtllm-serve sets only through its LLM API options (:data:`TRTLLM_EAGER_NOTE`).
* Adapters (multi-LoRA serving, the config's ``adapters`` group): vLLM ``--enable-lora``, ``--max-loras`` (GPU
  slots, "Max number of LoRAs in a single batch"), ``--max-lora-rank`` (one of 1, 8, 16, 32, 64, 128, 256, 320,
  512), ``--max-cpu-loras`` ("Must be >= than max_loras"), ``--lora-dtype {auto,float16,bfloat16}`` and
  ``--lora-modules name=path ...`` (``vllm/config/lora.py``, ``vllm/entrypoints/openai/cli_args.py``; docs.vllm.ai
  "LoRA Adapters": more adapters are registered at run time with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and
  ``POST /v1/load_lora_adapter``); SGLang ``--enable-lora``, ``--lora-paths name=path ...``,
  ``--max-loras-per-batch``, ``--max-lora-rank``, ``--max-loaded-loras`` (adapters in CPU memory) and
  ``--lora-target-modules {q_proj,...,all}`` (``python/sglang/srt/server_args.py``; docs.sglang.io "LoRA
  Serving"); TensorRT-LLM takes a ``lora_config`` (``max_lora_rank``, ``max_loras``, ``max_cpu_loras``: LLM API
  ``LoraConfig``) in the YAML of ``--extra_llm_api_options``: a comment on the command.
* Disaggregated picks (one command per pool, the router): :mod:`core.operations.launch_disagg`.
* Kubernetes: one Deployment per replica set; GPUs requested as ``nvidia.com/gpu`` or ``amd.com/gpu``
  (kubernetes.io "Schedule GPUs"), nodes chosen by the product label that NVIDIA GPU Feature Discovery
  (``nvidia.com/gpu.product``, e.g. ``NVIDIA-H100-80GB-HBM3``) or the AMD node labeller
  (``amd.com/gpu.product-name``, e.g. ``AMD_Instinct_MI300X_OAM``) writes.

Attention parallelism and the host KV tier (the engines' own flags, read from their released wheels: vLLM 0.11.0 /
0.12.0 / 0.33.0 ``vllm/engine/arg_utils.py``, SGLang 0.5.4 / 0.5.23 ``sglang/srt/server_args.py``):

* data-parallel attention: vLLM ``--data-parallel-size TP --tensor-parallel-size 1`` with
  ``--enable-expert-parallel`` for MoE layers (docs.vllm.ai "Data Parallel Deployment": "use data parallel for the
  attention layers and expert or tensor parallel for the expert layers"); SGLang ``--dp-size TP
  --enable-dp-attention`` (0.5.4; 0.5.23 also accepts ``--attn-dp-size``); TensorRT-LLM ``enable_attention_dp: true``
  in the YAML of ``--extra_llm_api_options`` (its DeepSeek-R1 serving example);
* decode context parallelism: vLLM ``--decode-context-parallel-size`` (it reuses the TP ranks), SGLang
  ``--dcp-size`` (0.5.23); TensorRT-LLM's Helix (``context_parallel_size`` with ``cp_config: {cp_type: HELIX}``,
  docs "Helix") in the YAML;
* context parallelism for the prefill: vLLM ``--prefill-context-parallel-size`` (from 0.12.0; it adds ranks),
  SGLang ``--attn-cp-size`` (0.5.23);
* a KV tier in host memory: vLLM ``--kv-offloading-size GiB --kv-offloading-backend native`` (from 0.12.0; the size
  summed over the TP ranks; ``--cpu-offload-gb`` offloads weights, not KV), SGLang ``--enable-hierarchical-cache
  --hicache-size GB`` (the host pool of one rank).

The memory fraction is :class:`core.base.assumptions.Assumptions`' ``gpu_mem_util``: the share of HBM the
simulator already gave the engine, so the KV pool the engine builds is the one the simulation assumed.
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core import catalog
from core.base import Assumptions
from core.config import AdapterSet
from core.operations.launch_lora import lora_argv, trtllm_lora_note

Engine = Literal["vllm", "sglang", "trtllm"]
EMIT_CHOICES = ("vllm", "sglang", "trtllm", "k8s")

#: Flag names each engine documents (with the source page); every emitted flag must be one of these.
DOCUMENTED_FLAGS: dict[str, tuple[str, frozenset[str]]] = {
    "vllm": (
        "https://docs.vllm.ai/en/latest/models/engine_args.html",
        frozenset(
            {
                "--tensor-parallel-size",
                "--pipeline-parallel-size",
                "--max-num-seqs",
                "--max-num-batched-tokens",
                "--gpu-memory-utilization",
                "--kv-cache-dtype",
                "--quantization",
                "--max-model-len",
                "--dtype",
                "--enable-prefix-caching",
                "--enable-expert-parallel",
                "--data-parallel-size",
                "--decode-context-parallel-size",
                "--prefill-context-parallel-size",
                "--kv-offloading-size",
                "--kv-offloading-backend",
                "--enforce-eager",
                "--enable-lora",
                "--max-loras",
                "--max-lora-rank",
                "--max-cpu-loras",
                "--fully-sharded-loras",
                "--lora-dtype",
                "--lora-modules",
                "--kv-transfer-config",
                "--host",
                "--port",
            }
        ),
    ),
    "sglang": (
        "https://docs.sglang.io/advanced_features/server_arguments.html",
        frozenset(
            {
                "--model-path",
                "--tp-size",
                "--pp-size",
                "--ep-size",
                "--dp-size",
                "--enable-dp-attention",
                "--dcp-size",
                "--attn-cp-size",
                "--enable-hierarchical-cache",
                "--hicache-size",
                "--max-running-requests",
                "--chunked-prefill-size",
                "--mem-fraction-static",
                "--kv-cache-dtype",
                "--quantization",
                "--context-length",
                "--disable-cuda-graph",
                "--dtype",
                "--enable-lora",
                "--lora-paths",
                "--max-loras-per-batch",
                "--max-lora-rank",
                "--max-loaded-loras",
                "--lora-target-modules",
                "--disaggregation-mode",
                "--disaggregation-transfer-backend",
                "--host",
                "--port",
            }
        ),
    ),
    "sglang-router": (
        "https://docs.sglang.io/advanced_features/router.html",
        frozenset({"--pd-disaggregation", "--prefill", "--decode", "--policy", "--host", "--port"}),
    ),
    "trtllm": (
        "https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html",
        frozenset(
            {
                "--backend",
                "--tp_size",
                "--pp_size",
                "--ep_size",
                "--max_batch_size",
                "--max_num_tokens",
                "--max_seq_len",
                "--kv_cache_free_gpu_memory_fraction",
                "--kv_cache_dtype",
                "--host",
                "--port",
            }
        ),
    ),
}

#: trtllm-serve's documented options have no CUDA-graph switch: the PyTorch backend takes graphs from the LLM
#: API option ``cuda_graph_config`` (TorchLlmArgs, nvidia.github.io/TensorRT-LLM/llm-api/reference/
#: TorchLlmArgs.html), which a YAML file passed with ``--extra_llm_api_options`` sets. Eager mode is therefore
#: a comment on the command, not a flag.
TRTLLM_EAGER_NOTE = (
    "eager mode: trtllm-serve has no command-line flag for it; set `cuda_graph_config: null` (TorchLlmArgs) "
    "in a YAML file passed with --extra_llm_api_options"
)

#: Documented values of the KV-cache and weight-quantization flags, per engine.
KV_VALUES = {
    "vllm": {"bf16": "auto", "fp8": "fp8"},
    "sglang": {"bf16": "auto", "fp8": "fp8_e4m3"},
    "trtllm": {"bf16": "auto", "fp8": "fp8"},
}
QUANT_VALUES = {
    "vllm": {"bf16": None, "fp8": "fp8", "int4": "awq", "nvfp4": "modelopt_fp4"},
    "sglang": {"bf16": None, "fp8": "fp8", "int4": "awq", "nvfp4": "modelopt_fp4"},
}

#: Node label values written by NVIDIA GPU Feature Discovery / the AMD node labeller (the device name with
#: spaces as dashes or underscores). ``V``: seen in published manifests; ``U``: derived from the device
#: name, check with ``kubectl get nodes -L <label>`` before applying.
PRODUCT_LABELS: dict[str, tuple[str, str]] = {
    "h100-sxm": ("NVIDIA-H100-80GB-HBM3", "V"),
    "h100-pcie": ("NVIDIA-H100-PCIe", "U"),
    "h100-nvl": ("NVIDIA-H100-NVL", "U"),
    "h200-sxm": ("NVIDIA-H200", "U"),
    "b200": ("NVIDIA-B200", "U"),
    "b300": ("NVIDIA-B300-SXM6-AC", "U"),
    "gb200": ("NVIDIA-GB200", "U"),
    "a100-40gb": ("NVIDIA-A100-SXM4-40GB", "U"),
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", "U"),
    "l40s": ("NVIDIA-L40S", "U"),
    "l4": ("NVIDIA-L4", "U"),
    "mi300x": ("AMD_Instinct_MI300X_OAM", "V"),
    "mi325x": ("AMD_Instinct_MI325_OAM", "V"),
    "mi355x": ("AMD_Instinct_MI355X_OAM", "U"),
    "gaudi3": ("", "U"),
}
RESOURCE = {
    "nvidia": ("nvidia.com/gpu", "nvidia.com/gpu.product"),
    "amd": ("amd.com/gpu", "amd.com/gpu.product-name"),
    "intel": ("habana.ai/gaudi", ""),
}
IMAGES = {
    ("vllm", "nvidia"): "vllm/vllm-openai:latest",
    ("vllm", "amd"): "rocm/vllm:latest",
    ("sglang", "nvidia"): "lmsysorg/sglang:latest",
    ("sglang", "amd"): "lmsysorg/sglang:latest-rocm",
    ("trtllm", "nvidia"): "nvcr.io/nvidia/tensorrt-llm/release:latest",
}


class LaunchSpec(BaseModel):
    """What every launch config needs: one replica's layout and limits, and how many replicas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_repo: str  # Hugging Face repository (or local path) of the weights
    gpu: str
    vendor: str
    gpus_per_replica: int = Field(ge=1)
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    replicas: int = Field(ge=1)
    weights: str
    kv_dtype: str
    max_num_seqs: int = Field(ge=1)  # the batch cap the simulation ran with
    max_num_batched_tokens: int = Field(ge=1)  # tokens per iteration (the simulator's token budget)
    max_model_len: int = Field(ge=1)  # longest prompt + longest output of the workload
    gpu_memory_utilization: float = Field(gt=0, le=1)
    gpus_per_node: int = Field(ge=1)
    port: int = 8000
    ep: int = Field(1, ge=1)  # expert parallelism over the TP ranks (MoE)
    cuda_graphs: bool = True  # False: eager mode, every kernel launched from the host (the config's setting)
    #: multi-LoRA serving: the adapter set with the slots the search chose (None: no adapters)
    adapters: AdapterSet | None = None
    dp_attention: bool = False  # data-parallel attention over the TP ranks
    cp: int = Field(1, ge=1)  # context parallelism for the prefill over CP TP groups
    dcp: int = Field(1, ge=1)  # decode context parallelism over DCP of the TP ranks
    kv_offload_gib: float = Field(0.0, ge=0)  # the replica's KV tier in host memory


@lru_cache(maxsize=64)
def model_repo(slug: str) -> str:
    """The Hugging Face repository a catalog model's config came from (``_name_or_path``), else the slug."""
    path = catalog.CATALOG_DIR / "models" / f"{slug}.json"
    try:
        return str(json.loads(path.read_text()).get("_name_or_path") or slug)
    except (OSError, json.JSONDecodeError):
        return slug


def launch_spec(pick, goal) -> LaunchSpec:
    """The launch spec of an optimizer :class:`core.decision.optimizer.Pick` for its :class:`ServingGoal`."""
    g = catalog.gpu(pick.gpu)
    spec = goal.workload
    arch = goal.custom_model if goal.custom_model is not None else catalog.model(goal.model)
    repo = arch.name if goal.custom_model is not None else model_repo(goal.model)
    ranks = pick.tp if getattr(pick, "dp_attention", False) else 1
    longest = spec.input.upper() + spec.max_output_tokens()
    if spec.trace is not None:
        longest = max(a + b for a, b in spec.trace)
    return LaunchSpec(
        model_repo=repo,
        gpu=pick.gpu,
        vendor=g.vendor,
        gpus_per_replica=pick.gpus_per_replica,
        tp=pick.tp,
        pp=pick.pp,
        replicas=max(1, pick.replicas),
        weights=pick.weights,
        kv_dtype=pick.kv_dtype,
        # with data-parallel attention the engine's limits are per rank: the replica's cap over its TP ranks
        max_num_seqs=max(1, -(-(pick.max_num_seqs or spec.max_batch) // ranks)),
        max_num_batched_tokens=max(spec.token_budget, -(-(pick.max_num_seqs or 1) // ranks)),
        max_model_len=min(longest, arch.max_context),
        gpu_memory_utilization=Assumptions().gpu_mem_util,
        gpus_per_node=g.gpus_per_node,
        ep=getattr(pick, "ep", 1),
        cuda_graphs=getattr(goal, "cuda_graphs", True),
        adapters=_adapters_of(pick, goal),
        dp_attention=getattr(pick, "dp_attention", False),
        cp=getattr(pick, "cp", 1),
        dcp=getattr(pick, "dcp", 1),
        kv_offload_gib=getattr(getattr(goal, "settings", None), "kv_offload_gib", 0.0),
    )


def _adapters_of(pick, goal) -> AdapterSet | None:
    """The goal's adapter set with the slots the search chose for ``pick`` (None without adapters)."""
    settings = getattr(goal, "settings", None)
    if settings is None or not settings.adapters.enabled:
        return None
    return settings.adapters.with_slots(getattr(pick, "adapter_slots", 0), settings.workload.engine)  # as searched


def join_script(argv: list[str], notes: list[str]) -> str:
    """Comment lines, then the command with one ``--flag value`` per continuation line."""
    first = argv.index(next(a for a in argv if a.startswith("--")))
    parts = [" ".join(shlex.quote(a) for a in argv[:first])]
    i = first
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):  # a flag's values (several: --lora-modules)
            j += 1
        parts.append(" ".join([argv[i], *(shlex.quote(v) for v in argv[i + 1 : j])]))
        i = j
    return "\n".join([f"# {n}" for n in notes] + [" \\\n  ".join(parts)]) + "\n"


def vllm_argv(s: LaunchSpec) -> tuple[list[str], list[str]]:
    """``vllm serve`` for one replica: (argv, comment lines)."""
    argv = [
        "vllm",
        "serve",
        s.model_repo,
        "--tensor-parallel-size",
        str(1 if s.dp_attention else s.tp),
        "--pipeline-parallel-size",
        str(s.pp),
        "--max-num-seqs",
        str(s.max_num_seqs),
        "--max-num-batched-tokens",
        str(s.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{s.gpu_memory_utilization:g}",
        "--kv-cache-dtype",
        KV_VALUES["vllm"][s.kv_dtype],
        "--max-model-len",
        str(s.max_model_len),
    ]
    if s.dp_attention:  # attention data-parallel over the replica's ranks, experts over TP x DP
        argv += ["--data-parallel-size", str(s.tp)]
    if s.ep > 1:  # experts spread over the TP ranks (EP size = TP x DP)
        argv += ["--enable-expert-parallel"]
    if s.dcp > 1:  # the KV split over DCP of the TP ranks
        argv += ["--decode-context-parallel-size", str(s.dcp)]
    if s.cp > 1:  # the prefill split over CP groups of TP ranks
        argv += ["--prefill-context-parallel-size", str(s.cp)]
    if s.kv_offload_gib > 0:  # the host KV tier, summed over the ranks
        argv += ["--kv-offloading-size", f"{s.kv_offload_gib:g}", "--kv-offloading-backend", "native"]
    if not s.cuda_graphs:  # "Always use eager-mode PyTorch" (engine arguments)
        argv += ["--enforce-eager"]
    q = QUANT_VALUES["vllm"].get(s.weights)
    if q:
        argv += ["--quantization", q]
    lora, lora_notes = lora_argv(s.adapters, "vllm")
    argv += lora + ["--host", "0.0.0.0", "--port", str(s.port)]
    return argv, _notes(s, "vllm") + lora_notes


def sglang_argv(s: LaunchSpec) -> tuple[list[str], list[str]]:
    """``python -m sglang.launch_server`` for one replica: (argv, comment lines). Under data-parallel attention
    SGLang divides ``--max-running-requests`` and ``--chunked-prefill-size`` by ``--dp-size`` (server_args.py:
    "The chunked prefill size is adjusted to ..."; model_runner: ``max_running_requests // dp_size``), so it takes
    the replica's totals where the spec holds one rank's limits."""
    ranks = s.tp if s.dp_attention else 1
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        s.model_repo,
        "--tp-size",
        str(s.tp),
        "--pp-size",
        str(s.pp),
        "--max-running-requests",
        str(s.max_num_seqs * ranks),
        "--chunked-prefill-size",
        str(s.max_num_batched_tokens * ranks),
        "--mem-fraction-static",
        f"{s.gpu_memory_utilization:g}",
        "--kv-cache-dtype",
        KV_VALUES["sglang"][s.kv_dtype],
        "--context-length",
        str(s.max_model_len),
    ]
    if s.dp_attention:  # "data parallelism for attention and tensor parallelism for FFN" (0.5.4)
        argv += ["--dp-size", str(s.tp), "--enable-dp-attention"]
    if s.ep > 1:
        argv += ["--ep-size", str(s.ep)]
    if s.dcp > 1:
        argv += ["--dcp-size", str(s.dcp)]
    if s.cp > 1:
        argv += ["--attn-cp-size", str(s.cp)]
    if s.kv_offload_gib > 0:  # the host pool of one rank, in GB
        per_rank = s.kv_offload_gib * 2**30 / 1e9 / s.gpus_per_replica
        argv += ["--enable-hierarchical-cache", "--hicache-size", f"{per_rank:.4g}"]
    if not s.cuda_graphs:  # server arguments: "Disable cuda graph"
        argv += ["--disable-cuda-graph"]
    q = QUANT_VALUES["sglang"].get(s.weights)
    if q:
        argv += ["--quantization", q]
    lora, lora_notes = lora_argv(s.adapters, "sglang")
    argv += lora + ["--host", "0.0.0.0", "--port", str(s.port)]
    return argv, _notes(s, "sglang") + lora_notes


def trtllm_argv(s: LaunchSpec) -> tuple[list[str], list[str]]:
    """``trtllm-serve`` (PyTorch backend) for one replica, NVIDIA GPUs only: (argv, comment lines)."""
    if s.vendor != "nvidia":
        raise ValueError(f"TensorRT-LLM runs on NVIDIA GPUs only; {s.gpu} is {s.vendor}: use vllm or sglang")
    argv = [
        "trtllm-serve",
        s.model_repo,
        "--backend",
        "pytorch",
        "--tp_size",
        str(s.tp),
        "--pp_size",
        str(s.pp),
        "--max_batch_size",
        str(s.max_num_seqs),
        "--max_num_tokens",
        str(s.max_num_batched_tokens),
        "--max_seq_len",
        str(s.max_model_len),
        "--kv_cache_free_gpu_memory_fraction",
        f"{s.gpu_memory_utilization:g}",
        "--kv_cache_dtype",
        KV_VALUES["trtllm"][s.kv_dtype],
    ]
    if s.ep > 1:
        argv += ["--ep_size", str(s.ep)]
    argv += ["--host", "0.0.0.0", "--port", str(s.port)]
    notes = _notes(s, "trtllm") + trtllm_lora_note(s.adapters)
    if not s.cuda_graphs:
        notes.append(TRTLLM_EAGER_NOTE)
    if s.dp_attention:
        notes.append("data-parallel attention: set `enable_attention_dp: true` in a YAML file passed with --config")
    if s.dcp > 1 or s.cp > 1:
        notes.append(
            f"context parallelism {max(s.dcp, s.cp)}: set `context_parallel_size` and `cp_config: {{cp_type: HELIX}}` "
            "(decode, Helix) in the YAML; trtllm-serve has no command-line flag for it"
        )
    if s.kv_offload_gib > 0:
        notes.append(
            f"host KV tier: set `kv_cache_config: {{host_cache_size: {int(s.kv_offload_gib * 2**30)}}}` (bytes) in the YAML"
        )
    if s.weights != "bf16":
        notes.append(f"{s.weights} weights come from a pre-quantized checkpoint (ModelOpt export): point MODEL at it")
    return argv, notes


def _notes(s: LaunchSpec, engine: str) -> list[str]:
    src = DOCUMENTED_FLAGS[engine][0]
    layout = (
        f"TP {s.tp} x PP {s.pp}"
        + (f", EP {s.ep}" if s.ep > 1 else "")
        + (", DP attention" if s.dp_attention else "")
        + (f", CP {s.cp}" if s.cp > 1 else "")
        + (f", DCP {s.dcp}" if s.dcp > 1 else "")
    )
    notes = [f"{s.replicas} replica(s) of {s.gpus_per_replica} x {s.gpu} ({layout}); flags: {src}"]
    if s.gpus_per_replica > s.gpus_per_node:
        notes.append(
            f"a replica spans {-(-s.gpus_per_replica // s.gpus_per_node)} nodes: start it with the "
            "engine's multi-node launcher (one process group per replica)"
        )
    if engine != "trtllm" and s.weights == "int4":
        notes.append("int4 weights: load an AWQ checkpoint of the model")
    return notes


ARGV = {"vllm": vllm_argv, "sglang": sglang_argv, "trtllm": trtllm_argv}


def command(engine: str, s: LaunchSpec) -> str:
    """The engine's launch command for one replica, as a shell script line with comments."""
    if engine not in ARGV:
        raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ARGV)}")
    return join_script(*ARGV[engine](s))


def k8s_manifest(s: LaunchSpec, engine: Engine = "vllm") -> str:
    """A Deployment of ``s.replicas`` pods, each one replica on one node (YAML text)."""
    argv, _ = ARGV[engine](s)
    resource, label_key = RESOURCE.get(s.vendor, ("nvidia.com/gpu", "nvidia.com/gpu.product"))
    label, verified = PRODUCT_LABELS.get(s.gpu, ("", "U"))
    image = IMAGES.get((engine, s.vendor), IMAGES[(engine, "nvidia")])
    name = f"rabit-{s.gpu}-{engine}".replace(".", "-")
    per_pod = min(s.gpus_per_replica, s.gpus_per_node)
    node_selector = f"      nodeSelector:\n        {label_key}: {json.dumps(label)}\n" if label and label_key else ""
    head = [
        (
            f"# {s.replicas} replica(s) of {s.gpus_per_replica} x {s.gpu}, {engine}; generated from the RA-BIT "
            "recommendation"
        )
    ]
    if verified != "V" and label:
        head.append(f"# check the node label value: kubectl get nodes -L {label_key}")
    if s.gpus_per_replica > s.gpus_per_node:
        head.append(
            "# a replica spans nodes: a Deployment cannot place it; use a LeaderWorkerSet with this pod "
            "template as the leader and worker"
        )
    args = "\n".join(f"        - {json.dumps(a)}" for a in argv)
    return (
        "\n".join(head)
        + f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  replicas: {s.replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
{node_selector}      containers:
      - name: server
        image: {image}
        command:
{args}
        ports:
        - containerPort: {s.port}
        resources:
          limits:
            {resource}: {per_pod}
        volumeMounts:
        - name: shm
          mountPath: /dev/shm
      volumes:
      - name: shm
        emptyDir:
          medium: Memory
          sizeLimit: 16Gi
"""
    )


def emit(kind: str, s: LaunchSpec) -> str:
    """The launch config of ``kind`` (one of :data:`EMIT_CHOICES`); ``k8s`` wraps the vLLM command."""
    if kind == "k8s":
        return k8s_manifest(s, "vllm")
    if kind not in ARGV:
        raise ValueError(f"unknown launch config {kind!r}; use one of {', '.join(EMIT_CHOICES)}")
    return command(kind, s)


FILE_NAMES = {
    "vllm": "serve-vllm.sh",
    "sglang": "serve-sglang.sh",
    "trtllm": "serve-trtllm.sh",
    "k8s": "deployment.yaml",
}
