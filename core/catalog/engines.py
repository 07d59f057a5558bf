"""Serving engines: what each one does by default, as its own code and documentation say.

A user sizes for a specific engine. The simulator's scheduler knobs (:class:`core.config.workload.SimSpec`:
policy, token budget, batch cap, KV admission, prefix caching) take the engine's defaults for the GPU:

* **vLLM** (V1 engine; ``vllm/engine/arg_utils.py`` ``get_batch_defaults``): chunked prefill on; for the
  OpenAI server on GPUs with at least 70 GiB that are not A100s ("GPUs like H100 and MI300x")
  ``max_num_batched_tokens`` 8,192 and ``max_num_seqs`` 1,024, otherwise 2,048 and 256. KV blocks are
  allocated as tokens are computed; when they run out the scheduler preempts the most recently admitted
  request and recomputes it later. Prefix caching (``enable_prefix_caching``) is on by default in V1.
* **SGLang** (``python/sglang/srt/server_args.py``): ``chunked_prefill_size`` 2,048 below 35 GB of GPU memory,
  8,192 below 160 GB (H100, H200, A100), 16,384 above (B200, MI300X); ``max_running_requests`` has no fixed
  default (the KV pool bounds it; 4,096 stands in here). The radix cache (prefix caching) is on unless
  ``--disable-radix-cache``; on KV exhaustion it retracts decoding requests and recomputes them.
* **TensorRT-LLM** (``tensorrt_llm/llmapi/llm_args.py``): ``max_batch_size`` 2,048, ``max_num_tokens`` 8,192,
  ``enable_chunked_prefill`` False, ``KvCacheConfig.enable_block_reuse`` True, and the capacity scheduler's
  default policy ``GUARANTEED_NO_EVICT``: a request is admitted only when the KV for its prompt plus its
  maximum output is available, so it is never evicted (the simulator's ``reserve`` admission). Without
  chunked prefill a prompt enters an iteration whole; the simulator's chunked policy with the 8,192-token
  budget does the same for every prompt up to 8,192 tokens.

CUDA graphs (the launch cost of each kernel, :class:`core.physics.step.StepModel`): each engine replays captured graphs
for iterations up to a size and launches kernel by kernel (eager) beyond it. vLLM V1 captures up to
``max_cudagraph_capture_size`` = 512 tokens (``vllm/config/compilation.py``; off with ``--enforce-eager``);
SGLang up to ``cuda_graph_max_bs`` (``server_args.py``, set by GPU memory and TP; 256 stands in); TensorRT-LLM's
PyTorch backend up to ``CudaGraphConfig.max_batch_size`` (``llm_args.py``; 128 stands in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from core.catalog.tables import GpuSpec

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
GIB = 2**30


class EngineDefaults(BaseModel):
    """The scheduler settings an engine starts with on one GPU (SimSpec field names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    policy: Literal["chunked", "prefill_priority"]
    token_budget: int  # max_num_batched_tokens / chunked_prefill_size / max_num_tokens
    max_batch: int  # max_num_seqs / max_running_requests / max_batch_size
    admission: Literal["preempt", "reserve"]
    prefix_caching: bool
    source: str

    def spec_fields(self) -> dict[str, Any]:
        """The engine's scheduler settings by field name (of the config's workload and the simulator's spec)."""
        return {
            "policy": self.policy,
            "token_budget": self.token_budget,
            "max_batch": self.max_batch,
            "admission": self.admission,
            "prefix_caching": self.prefix_caching,
        }

    def fill(self, current: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
        """The engine's settings for the scheduler fields of ``current`` still at their value in ``defaults``:
        a setting chosen explicitly wins over the engine's default."""
        return {f: v for f, v in self.spec_fields().items() if current.get(f) == defaults.get(f)}

    def differences(self, current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """The scheduler fields where ``current`` differs from the engine's defaults: field -> (current, default)."""
        return {f: (current.get(f), v) for f, v in self.spec_fields().items() if current.get(f) != v}


def engine_defaults(engine: str, gpu: GpuSpec) -> EngineDefaults:
    """The documented defaults of ``engine`` on ``gpu`` (see the module docstring for the sources)."""
    mem = gpu.memory_bytes
    if engine == "vllm":
        big = mem >= 70 * GIB and not gpu.slug.startswith("a100")
        return EngineDefaults(
            engine=engine,
            policy="chunked",
            token_budget=8192 if big else 2048,
            max_batch=1024 if big else 256,
            admission="preempt",
            prefix_caching=True,
            source="vllm/engine/arg_utils.py get_batch_defaults (OpenAI server), V1 scheduler",
        )
    if engine == "sglang":
        mib = mem / 2**20  # SGLang compares the device memory in MiB
        budget = 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
        return EngineDefaults(
            engine=engine,
            policy="chunked",
            token_budget=budget,
            max_batch=4096,
            admission="preempt",
            prefix_caching=True,
            source="python/sglang/srt/server_args.py (chunked_prefill_size by GPU memory)",
        )
    if engine == "trtllm":
        return EngineDefaults(
            engine=engine,
            policy="chunked",
            token_budget=8192,
            max_batch=2048,
            admission="reserve",
            prefix_caching=True,
            source="tensorrt_llm/llmapi/llm_args.py (max_batch_size, max_num_tokens, "
            "GUARANTEED_NO_EVICT, enable_block_reuse)",
        )
    raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")


#: How each engine is named on screen.
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}

#: Largest iteration [tokens] each engine runs from a captured CUDA graph by default (see the module docstring).
CUDA_GRAPH_MAX_TOKENS = {"vllm": 512, "sglang": 256, "trtllm": 128}
#: Whether an engine's CUDA graphs also cover iterations that carry prompt (prefill) tokens. vLLM V1 captures
#: piecewise graphs for mixed prefill-and-decode batches up to its capture size (``vllm/config/compilation.py``,
#: ``cudagraph_mode`` PIECEWISE). SGLang captures decode batches only (``CudaGraphRunner`` over
#: ``cuda_graph_bs``; its log prints ``Prefill batch ... cuda graph: False``, as the 0.5.x start-up log under
#: ``tests/fixtures/engine_logs`` shows). TensorRT-LLM replays graphs for generation-only iterations
#: (``cuda_graph_config.batch_sizes``: generation batch sizes; ``gptSessionBenchmark --enable_cuda_graph`` for the
#: generation phase), so its context phase launches every kernel from the host.
CUDA_GRAPH_PREFILL = {"vllm": True, "sglang": False, "trtllm": False}

#: Engines whose paged-attention kernels on AMD GPUs (ROCm) read K/V at the assumption ``rocm_attn_bw_eff`` of the
#: CUDA kernels' bandwidth: vLLM and SGLang (TensorRT-LLM does not run on ROCm).
ROCM_ATTENTION_ENGINES = frozenset({"vllm", "sglang"})


def rocm_attention(gpu: GpuSpec, engine: str) -> bool:
    """Whether ``engine`` on ``gpu`` runs its paged attention on ROCm kernels (``rocm_attn_bw_eff`` applies)."""
    return gpu.vendor == "amd" and engine in ROCM_ATTENTION_ENGINES


#: The GPU runtime each vendor's kernels (and an engine's KV connector) run on.
VENDOR_RUNTIME = {"nvidia": "CUDA", "amd": "ROCm", "intel": "oneAPI", "google": "XLA"}


def kv_pool_refusal(prefill: GpuSpec, decode: GpuSpec) -> str:
    """Why a disaggregated deployment cannot pair a prefill pool on ``prefill`` with a decode pool on ``decode``
    ("" when it can). The engines move a prompt's KV cache with connectors built for one runtime: vLLM's
    NixlConnector and P2pNcclConnector (NCCL on CUDA, RCCL on ROCm), SGLang's Mooncake and NIXL transfer
    backends; none sends a cache from a ROCm instance to a CUDA one, so the two pools must be one vendor's
    (vLLM docs, "Disaggregated Prefilling"; SGLang docs, "PD Disaggregation")."""
    if prefill.vendor == decode.vendor:
        return ""
    a, b = VENDOR_RUNTIME[prefill.vendor], VENDOR_RUNTIME[decode.vendor]
    return (
        f"a {prefill.name} prefill pool ({a}) cannot hand its KV cache to a {decode.name} decode pool ({b}): no "
        f"serving engine moves a KV cache between {a} and {b} instances; pick the two pools from one vendor"
    )


def pool_vendor_note(kinds: tuple[GpuSpec, ...]) -> str:
    """What a plan over ``kinds`` cannot pair, and why ("" when they are one vendor's): the disaggregated pools
    it may build stay within one vendor (:func:`kv_pool_refusal`)."""
    by = sorted({g.vendor for g in kinds})
    if len(by) < 2:
        return ""
    runtimes = " and ".join(VENDOR_RUNTIME[v] for v in by)
    return (
        "Prefill and decode pools on two GPU kinds are paired within one vendor only: no serving engine moves a "
        f"KV cache between {runtimes} instances."
    )


class LoraDefaults(BaseModel):
    """What an engine does with LoRA adapters when its flags are left alone (the config's ``adapters`` group
    takes these for the fields it leaves unset)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    max_loras: int  # GPU slots: distinct adapters one batch may hold
    #: the slot rank when none is set: 0 = inferred from the adapters (the smallest allowed rank >= theirs)
    max_lora_rank: int
    #: adapters held in host memory when none is set: 0 = as many as max_loras, -1 = every adapter
    max_cpu_loras: int
    allowed_ranks: tuple[int, ...]  # the slot ranks the engine accepts (empty: any)
    source: str


#: vLLM ``vllm/config/lora.py`` (0.11.0 and 0.33.0): ``max_loras`` 1 ("Max number of LoRAs in a single batch"),
#: ``max_lora_rank`` 16 from the set ``MaxLoRARanks`` (1, 8, 16, 32, 64, 128, 256, 320, 512), ``max_cpu_loras``
#: None, set to ``max_loras`` ("Must be >= than max_loras"). SGLang ``server_args.py`` (0.5.4, 0.5.23):
#: ``--max-loras-per-batch`` 8, ``--max-lora-rank`` inferred from ``--lora-paths``, ``--max-loaded-loras`` None
#: (no limit on adapters held in CPU memory). TensorRT-LLM ``LoraConfig`` (LLM API): ``max_loras`` 1,
#: ``max_cpu_loras`` 1, ``max_lora_rank`` 8.
LORA_DEFAULTS: dict[str, LoraDefaults] = {
    "vllm": LoraDefaults(
        engine="vllm",
        max_loras=1,
        max_lora_rank=16,
        max_cpu_loras=0,
        allowed_ranks=(1, 8, 16, 32, 64, 128, 256, 320, 512),
        source="vllm/config/lora.py LoRAConfig (max_loras=1, max_lora_rank=16 in MaxLoRARanks, max_cpu_loras=None "
        "-> max_loras)",
    ),
    "sglang": LoraDefaults(
        engine="sglang",
        max_loras=8,
        max_lora_rank=0,
        max_cpu_loras=-1,
        allowed_ranks=(),
        source="python/sglang/srt/server_args.py (--max-loras-per-batch 8, --max-lora-rank inferred, "
        "--max-loaded-loras None)",
    ),
    "trtllm": LoraDefaults(
        engine="trtllm",
        max_loras=1,
        max_lora_rank=8,
        max_cpu_loras=1,
        allowed_ranks=(),
        source="TensorRT-LLM LLM API LoraConfig (max_lora_rank=8, max_loras=1, max_cpu_loras=1)",
    ),
}


def lora_defaults(engine: str) -> LoraDefaults:
    """What ``engine`` does with adapters by default (:data:`LORA_DEFAULTS`)."""
    try:
        return LORA_DEFAULTS[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}") from None


def apply_engine(spec, engine: str, gpu: GpuSpec):
    """``spec`` with the engine's scheduler defaults (a :class:`core.config.workload.SimSpec`)."""
    return spec.with_(**engine_defaults(engine, gpu).spec_fields())
